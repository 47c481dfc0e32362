//! sheepdog: a process supervisor for AI coding agents and the processes they start.
//!
//! Module map (see DESIGN.md for the why):
//!
//! - [`supervisor`]: the event loop of one supervisor (`sheepdog run`, and each managed
//!   process's detached supervisor).
//! - [`stop`]: [`stop::StopPolicy`] and the one stop sequence, as a small state machine.
//! - [`tree`]: which processes belong to a provider, "all gone", identity-checked signals.
//! - [`spawn`]: a command into its own process group, with the pre-exec steps.
//! - [`events`]: the JSON lines of `--events-fd`.
//! - [`duration`]: `250ms`, `1.5s` on the command line.
//! - [`sys`]: the only place with `unsafe`: signals, pidfds, `/proc`, `poll`.
//! - [`cli`]: argument parsing and one handler per subcommand.

pub mod cli;
pub mod duration;
pub mod events;
pub mod spawn;
pub mod stop;
pub mod supervisor;
pub mod sys;
pub mod tree;
