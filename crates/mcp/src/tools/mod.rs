//! One file per tool: its arguments (the input schema), its handler (blocking, on tokio's
//! blocking pool) and its result (the output schema). What they share is `crate::server`.

pub(crate) mod clear;
pub(crate) mod list;
pub(crate) mod logs;
pub(crate) mod restart;
pub(crate) mod start;
pub(crate) mod stop;
pub(crate) mod update;
pub(crate) mod wait;
pub(crate) mod write;
