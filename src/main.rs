//! The `sheepdog` binary: parse, run, map the result to an exit status. The CLI lives here,
//! outside the library: it only parses and renders; what it does is `sheepdog::manager` and
//! `sheepdog::supervisor`.

#![forbid(unsafe_code)]

mod cli;

/// The static (musl) build's allocator. musl's own (mallocng) maps and unmaps small groups of
/// slots as they fill and empty: about 70 `mmap`/`munmap` calls while clap parses one `run`,
/// each with its page faults and TLB flush. dlmalloc (the Rust port std uses on wasm) carves
/// 64 KiB segments and keeps them: `run -- true` 0.33 ms faster, 8 KiB more PSS per idle
/// supervisor (BENCHMARKS.md, static binaries). glibc builds keep glibc's malloc.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() {
    std::process::exit(cli::main());
}
