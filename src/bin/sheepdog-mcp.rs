//! The `sheepdog-mcp` binary (`sheepdog mcp` execs it): the MCP server lives in its own crate
//! (crates/mcp), the only one with an async runtime.

#![forbid(unsafe_code)]

fn main() {
    sheepdog_mcp::main();
}
