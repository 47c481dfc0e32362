//! The `sheepdog` binary: parse, run, map the result to an exit status.

fn main() {
    std::process::exit(sheepdog::cli::main());
}
