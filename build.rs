//! Links sheepdog's binaries as non-PIE executables on Linux (x86_64, aarch64).
//!
//! Why: every managed process has a supervisor of its own, and they are all this binary. In a
//! position-independent executable every pointer in a static table (panic locations, clap's and
//! serde's strings, regex's tables) is patched at load time, so those pages (`.data.rel.ro`,
//! about 140 KiB here) become private to each supervisor. Linked at a fixed address there is
//! nothing to patch: the pages stay shared file pages, and one more supervisor costs only what it
//! really writes (BENCHMARKS.md: PSS per extra supervisor). The price is that the binary's own
//! image is not randomised by ASLR (its heap, stack and libraries still are), as with tini's
//! static build. Proc macros and build scripts are not affected: the flag is for binaries only.
//!
//! Not on musl: there rustc links a static PIE (`-static-pie` with musl's `rcrt1.o`, whose start
//! code relocates the image itself), and `-no-pie` on top of that gives a fixed-address image
//! that still runs that self-relocation: it segfaults before `main`. A non-PIE musl binary comes
//! from `-C relocation-model=static` instead (`.cargo/config.toml` sets it for the musl targets;
//! rustc then links `crt1.o` with `-static -no-pie` itself). Without that flag a musl build is a
//! working static PIE.
fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let env = std::env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    if os == "linux" && env != "musl" && (arch == "x86_64" || arch == "aarch64") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
