//! The `sheepdog-top` binary (`sheepdog top` execs it): the terminal UI lives in its own crate
//! (crates/top), not in the supervisors' binary.

#![forbid(unsafe_code)]

fn main() {
    std::process::exit(sheepdog_top::main());
}
