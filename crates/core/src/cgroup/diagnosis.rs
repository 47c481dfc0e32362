//! `sheepdog doctor`: which tier `run` and `start` get here, and why.

use std::fs;

use serde::Serialize;

use super::{HINTS, Limits, Mode, Request, Setting, controllers, mount_point, own_cgroup, own_dir, probe};

/// What `sheepdog doctor` reports.
#[derive(Clone, Debug, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Doctor {
    /// The tier `run` and `start` would get here: `cgroup`, `subreaper` or `group`.
    pub containment: &'static str,
    /// Why the cgroup tier would be refused; `None` when it is available.
    pub containment_reason: Option<String>,
    /// The mode the probe ran with (`auto`, or from `$SHEEPDOG_CONTAINMENT`).
    pub mode: &'static str,
    /// Where cgroup2 is mounted, if it is.
    pub cgroup_mount: Option<String>,
    /// This process's cgroup v2 path (`0::` in `/proc/self/cgroup`).
    pub own_cgroup: Option<String>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: String,
    /// Controllers available to a tree's cgroup (the own cgroup's `cgroup.controllers`).
    pub controllers: Vec<String>,
    /// True when `--memory-max` / `--pids-max` can be applied here.
    pub memory_max: bool,
    pub pids_max: bool,
    /// Ways to get the cgroup tier when it is refused (empty when it is available).
    pub hints: Vec<String>,
    /// True when `run` and `start` would refuse to start here (status 125): the tier the mode
    /// demands (`SHEEPDOG_CONTAINMENT=cgroup`) cannot be given; `containment` is `none` then and
    /// `containmentReason` is their refusal.
    pub refused: bool,
}

/// Runs the probe as `run` would (creating and removing a probe cgroup) and gathers the facts.
/// `name` names the settings in a refusal, as the caller's front end does.
pub fn doctor(mode: Mode, name: &dyn Fn(Setting) -> String) -> Doctor {
    let req = Request { mode, limits: Limits::default(), label: "doctor".into(), name: None };
    let (containment, reason, refused) = match probe(&req) {
        Ok(c) => {
            if let Some(cg) = &c.cgroup {
                let _ = cg.remove();
            }
            (c.tier.name(), c.reason, false)
        }
        // What `run` and `start` do with this mode: refuse, not fall back.
        Err(r) => ("none", Some(r.render(name)), true),
    };
    let own = own_dir().ok();
    let controllers = own.as_deref().map(controllers).unwrap_or_default();
    let tier_ok = containment == "cgroup";
    Doctor {
        containment,
        hints: if tier_ok || !cfg!(target_os = "linux") { Vec::new() } else { HINTS.map(String::from).to_vec() },
        containment_reason: reason,
        mode: mode.name(),
        cgroup_mount: mount_point().ok().map(|p| p.to_string_lossy().into_owned()),
        own_cgroup: own_cgroup().ok(),
        kernel: fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default(),
        refused,
        memory_max: tier_ok && controllers.iter().any(|c| c == "memory"),
        pids_max: tier_ok && controllers.iter().any(|c| c == "pids"),
        controllers,
    }
}
