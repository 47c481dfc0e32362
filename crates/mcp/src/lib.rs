//! `sheepdog-mcp` (run as `sheepdog mcp`): a Model Context Protocol server on stdin/stdout that
//! gives an agent sheepdog's background processes as tools (docs/mcp.md, "Use it from your
//! agent"; ARCHITECTURE.md, "Module map").
//!
//! A binary of its own, the only one with an async runtime (tokio, for rmcp): `sheepdog run` and
//! every detached supervisor stay the small single-threaded `sheepdog` binary, which this server
//! runs as each entry's supervisor (found next to this executable).
//!
//! - `sheepdog::agent`: who owns the processes started here (the agent, seen through
//!   launchers) and the default session derived from it, shared with the agent hooks.
//! - [`server`]: the tools: one typed argument struct and one typed result struct each.
//! - [`news`]: the `finished` list every reply carries, each entry reported once.
//! - [`transport`]: newline-delimited JSON-RPC on stdio, answering malformed lines.
//!
//! Stateless: the registry is the state, so ids stay valid when the client restarts the server.
//! It exits on stdin EOF (after letting a stop or cleanup in progress finish), and it never stops
//! processes because it exits.

#![forbid(unsafe_code)]

mod news;
mod schema;
mod server;
mod tools;
mod transport;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Parser;
use rmcp::ServiceExt;
use sheepdog::os::{Pid, procfs};
use sheepdog::registry::Registry;

/// Status of the server's own errors (bad arguments, an unusable state dir): 125, as the CLI.
const EXIT_USAGE: i32 = sheepdog::exit::USAGE;

/// How often the server reaps the supervisors it started that have exited: every 1 s (and
/// around every tool call), so none stays a zombie.
const REAP_EVERY: Duration = Duration::from_secs(1);

/// After stdin EOF, how long the server waits at most for stops, restarts and cleanups that a
/// tool call began: 60 s (a stop's bound with a 10 s cleanup is well under it). Waits, log reads
/// and lists are abandoned at once.
const FINISH_MUTATIONS: Duration = Duration::from_secs(60);

#[derive(Debug, Parser)]
#[command(
    name = "sheepdog mcp",
    bin_name = "sheepdog mcp",
    version,
    about = "MCP server on stdio: background processes as tools for an agent (process_start, process_list, \
             process_logs, process_wait, process_stop, process_restart, process_update, process_clear, \
             process_write)."
)]
struct Args {
    /// The agent whose death stops the processes started here (default: the client process
    /// that launched the server, looking through sh -c, npx, uvx and other launchers).
    #[arg(long, value_name = "PID")]
    owner: Option<i32>,
    /// The registry's directory (default: $SHEEPDOG_STATE_DIR, else $XDG_STATE_HOME/sheepdog,
    /// else ~/.local/state/sheepdog).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
}

fn fail(message: String) -> ! {
    eprintln!("sheepdog: {message}");
    std::process::exit(EXIT_USAGE);
}

/// The `sheepdog-mcp` binary: parse, serve until stdin ends, exit (0, or 125 for bad arguments
/// or an unusable state dir).
pub fn main() {
    let args = Args::try_parse().unwrap_or_else(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
            let _ = e.print();
            std::process::exit(0);
        }
        let text = e.render().to_string();
        let first = text.lines().next().unwrap_or("invalid arguments");
        fail(format!("mcp: {} (see 'sheepdog mcp --help')", first.strip_prefix("error: ").unwrap_or(first)))
    });
    // Every supervisor is the small `sheepdog` binary next to this one, never this server.
    match std::env::current_exe().map(|p| p.with_file_name("sheepdog")) {
        Ok(p) if p.is_file() => sheepdog::manager::set_supervisor_exe(p),
        Ok(p) => fail(format!("mcp: {} not found; install sheepdog and sheepdog-mcp side by side", p.display())),
        Err(e) => fail(format!("mcp: unable to find this executable: {e}")),
    }
    let reg = Registry::open(args.state_dir).unwrap_or_else(|e| fail(e.to_string()));
    let owner = match args.owner {
        Some(raw) => match Pid::new(raw) {
            Some(p) if procfs::is_alive(p) => Some(p),
            Some(_) => fail(format!("mcp: --owner {raw}: no such process")),
            None => fail(format!("mcp: --owner {raw}: not a process id (must be > 0)")),
        },
        None => sheepdog::agent::detect(),
    };
    let ctx = server::Ctx { reg, session: sheepdog::agent::session_of(owner), owner };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| fail(format!("mcp: unable to start the runtime: {e}")));
    let code = runtime.block_on(async move {
        let service = match server::Sheepdog::new(ctx).serve(transport::Stdio::new()).await {
            Ok(s) => s,
            // The client went away (or spoke no MCP) before initializing: nothing to serve.
            Err(e) => {
                eprintln!("sheepdog: mcp: {e}");
                return 0;
            }
        };
        tokio::spawn(async {
            let mut tick = tokio::time::interval(REAP_EVERY);
            loop {
                tick.tick().await;
                server::reap_supervisors();
            }
        });
        // stdin EOF ends the service; a call in flight (a 45 s wait) is not waited for.
        tokio::select! {
            _ = service.waiting() => {}
            _ = transport::eof() => {}
        }
        0
    });
    // stdin reached EOF: exit at once, but let a stop or cleanup a tool call began finish, so no
    // cleanup is cut in half. Managed processes are never stopped because the server exits.
    let end = Instant::now() + FINISH_MUTATIONS;
    while server::mutations_in_flight() > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::process::exit(code);
}
