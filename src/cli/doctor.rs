//! `sheepdog doctor`: which containment tier `run` and `start` get on this host, and why.

use crate::cgroup;

use super::CliError;

/// `sheepdog doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

pub(super) fn doctor(_a: DoctorArgs, json: bool) -> Result<i32, CliError> {
    let mode = cgroup::Mode::resolve(None).map_err(CliError::usage)?;
    let d = cgroup::doctor(mode);
    if json {
        println!("{}", serde_json::to_string(&d).unwrap_or_default());
        return Ok(0);
    }
    match &d.containment_reason {
        None => println!("containment: {} (run and start keep each tree in its own cgroup)", d.containment),
        Some(r) => println!("containment: {} (the cgroup tier is refused: {r})", d.containment),
    }
    if d.mode != "auto" {
        println!("mode: {} (from {})", d.mode, cgroup::CONTAINMENT_ENV);
    }
    println!("cgroup2 mount: {}", d.cgroup_mount.as_deref().unwrap_or("none"));
    println!("own cgroup: {}", d.own_cgroup.as_deref().unwrap_or("none"));
    println!("kernel: {}", if d.kernel.is_empty() { "unknown" } else { &d.kernel });
    let listed = if d.controllers.is_empty() { "none".to_string() } else { d.controllers.join(" ") };
    println!("controllers: {listed}");
    let yes_no = |b: bool| if b { "applied" } else { "refused (status 125)" };
    println!("--memory-max: {}; --pids-max: {}", yes_no(d.memory_max), yes_no(d.pids_max));
    if !d.hints.is_empty() {
        println!("to get the cgroup tier:");
        for h in &d.hints {
            println!("  - {h}");
        }
    }
    Ok(0)
}
