//! The `sheepdog` binary: parse, run, map the result to an exit status. The CLI lives here,
//! outside the library: it only parses and renders; what it does is `sheepdog::manager` and
//! `sheepdog::supervisor`.

mod cli;

fn main() {
    std::process::exit(cli::main());
}
