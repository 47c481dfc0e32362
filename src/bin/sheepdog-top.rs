//! The `sheepdog-top` binary (`sheepdog top` execs it): the terminal UI lives here, not in the
//! supervisors' binary.

fn main() {
    std::process::exit(sheepdog::top::main());
}
