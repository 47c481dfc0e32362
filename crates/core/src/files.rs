//! Small helpers for the files sheepdog keeps: the crash-safe write (tmp + fsync + rename +
//! directory fsync), the directory fsync, lock files, private directories, and the unix-ms clock
//! every record carries. Below everything that writes the state dir (`registry`, `journal`,
//! `logs`), so none of them has to reach up to another for these.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A file operation that failed, with the path it concerned.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Opening, locking or syncing failed: nothing was changed.
    #[error("unable to use {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A write failed (a full disk, a read-only mount): what was to be written was not, and
    /// the old file, if any, is intact.
    #[error("unable to write {path}: {source}")]
    NotWritten {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
    move |source| FileError::Io { path: path.to_path_buf(), source }
}

fn write_at(path: &Path) -> impl FnOnce(io::Error) -> FileError + '_ {
    move |source| FileError::NotWritten { path: path.to_path_buf(), source }
}

/// Now, in unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Writes `bytes` to `path` as tmp file (0600) + fsync + rename + fsync of the directory: after
/// a crash at any point the file is either the old version or the new one, never a mix. A
/// failed write removes its temp file. Errors: `NotWritten` naming the file, `Io` when only the
/// directory's fsync failed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), FileError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let written = (|| {
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(write_at(&tmp))?;
        f.write_all(bytes).map_err(write_at(&tmp))?;
        f.sync_all().map_err(write_at(&tmp))?;
        fs::rename(&tmp, path).map_err(write_at(path))
    })();
    if written.is_err() {
        // A full disk leaves an empty temp file: never leave it behind.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

/// fsyncs a directory, so that a rename or removal in it survives a crash. Errors: `Io`.
pub fn sync_dir(dir: &Path) -> Result<(), FileError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io_at(dir))
}

/// Opens (creating, 0600) the lock file at `path` and takes its exclusive lock, held until the
/// file is dropped. Errors: `Io` naming the path.
pub fn lock_file(path: &Path) -> Result<File, FileError> {
    let f = OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(path).map_err(io_at(path))?;
    f.lock().map_err(io_at(path))?;
    Ok(f)
}

/// Creates `path` and its missing parents with mode 0700; an existing directory is fine.
pub fn mkdir_private(path: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}
