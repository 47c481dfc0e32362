//! sheepdog: a process supervisor for AI coding agents and the processes they start.
//!
//! Module map (ARCHITECTURE.md has the why and the dependency rules):
//!
//! - [`supervisor`]: the event loop of one supervisor (`sheepdog run`, and each managed
//!   process's detached supervisor).
//! - [`keeper`]: the supervisor → keeper → provider chain that survives either one's SIGKILL.
//! - [`stop`]: [`stop::StopPolicy`] and the one stop sequence, as a small state machine.
//! - [`cgroup`]: the cgroup v2 tier: the probe, a tree's cgroup, usage, limits, leftovers,
//!   `doctor`.
//! - `tree` (crate-private): which processes belong to a provider, "all gone",
//!   identity-checked signals.
//! - `spawn` (crate-private): a command into its own process group, with the pre-exec steps.
//! - [`entry`]: what an entry is: the record, its data and transitions (no I/O).
//! - [`identity`]: a process's identity, and what the kernel says of an entry's processes.
//! - [`registry`]: entries on disk, crash-safe writes.
//! - [`files`]: the atomic write, lock files, private directories, the unix-ms clock.
//! - [`inspect`]: the live look at an entry's tree: its status now, its live processes.
//! - [`manager`]: start / stop / wait / reap / clear and the detached supervisor's body.
//! - [`cleanup`]: cleanup commands, the second step of every stop, at most once.
//! - `nudge` (crate-private): advisory warnings for commands that start work outside their
//!   tree, checked inside `manager::start_ready` and shown as [`view::Nudge`].
//! - [`logs`]: capped, rotating stdout / stderr / combined logs.
//! - [`events`]: the JSON lines of `--events-fd`.
//! - [`journal`]: the event journal in the state dir that `sheepdog events` follows.
//! - [`schema`]: the JSON Schemas of every document, generated from the types (`schema/`).
//! - [`duration`]: `250ms`, `1.5s` on the command line.
//! - [`exit`]: every exit status sheepdog reports, in one place.
//! - [`usage`]: CPU and memory of a tree, from `/proc`.
//! - `sys`: the `sheepdog-sys` crate, the only place with `unsafe`: signals, pidfds, `/proc`,
//!   `poll` (the front ends reach it only through [`os`]).
//! - [`os`]: the public face of `sys` and `tree` for the binaries and the tests.
//! - [`status`]: the status vocabulary, one enum.
//! - [`view`]: the one entry view every `--json`, MCP and `top` render.
//! - [`ports`]: TCP ports a set of processes listens on (`/proc/net/tcp{,6}`).
//! - [`ready`]: readiness of a started command (port, log line, any listen).
//! - [`logread`]: reading logs: tail, head, grep, since, cursor, caps, follow.

// `unsafe` lives in the `sheepdog-sys` crate alone (tests/architecture.rs checks the workspace).
#![forbid(unsafe_code)]
// The entry-view document test spells the whole view in one `serde_json::json!`.
#![cfg_attr(test, recursion_limit = "256")]

pub mod agent;
pub mod cgroup;
pub mod cleanup;
pub mod duration;
pub mod entry;
pub mod events;
pub mod exit;
pub mod files;
pub mod identity;
pub mod inspect;
pub mod journal;
pub mod keeper;
pub mod logread;
pub mod logs;
pub mod manager;
pub(crate) mod nudge;
pub mod os;
pub mod ports;
pub mod ready;
pub mod registry;
pub(crate) mod relay;
pub mod schema;
pub(crate) mod spawn;
pub mod status;
pub mod stop;
pub mod supervisor;
pub(crate) use sheepdog_sys as sys;
pub(crate) mod tree;
pub mod usage;
pub mod view;
