//! `sheepdog doctor`: which containment tier `run` and `start` get on this host, and why.

use sheepdog::cgroup;

use super::CliError;

/// `sheepdog doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {}

pub(super) fn doctor(_a: DoctorArgs, json: bool) -> Result<i32, CliError> {
    let mode = cgroup::Mode::from_env().map_err(CliError::usage)?;
    let d = cgroup::doctor(mode, &super::flag);
    // Where `run` and `start` refuse (125), so does doctor: the same line and status.
    let code = if d.refused { super::EXIT_USAGE } else { 0 };
    let refusal = || {
        if let (true, Some(r)) = (d.refused, &d.containment_reason) {
            eprintln!("sheepdog: {r}");
        }
    };
    if json {
        let doc = sheepdog::view::DoctorDoc { v: sheepdog::view::Version, doctor: d.clone() };
        outln!("{}", serde_json::to_string(&doc).unwrap_or_default());
        refusal();
        return Ok(code);
    }
    match &d.containment_reason {
        None => outln!("containment: {} (run and start keep each tree in its own cgroup)", d.containment),
        Some(r) if d.refused => outln!("containment: {} (run and start refuse with status 125: {r})", d.containment),
        Some(r) => outln!("containment: {} (the cgroup tier is refused: {r})", d.containment),
    }
    if d.mode != "auto" {
        outln!("mode: {} (from {})", d.mode, cgroup::CONTAINMENT_ENV);
    }
    outln!("cgroup2 mount: {}", d.cgroup_mount.as_deref().unwrap_or("none"));
    outln!("own cgroup: {}", d.own_cgroup.as_deref().unwrap_or("none"));
    outln!("kernel: {}", if d.kernel.is_empty() { "unknown" } else { &d.kernel });
    let listed = if d.controllers.is_empty() { "none".to_string() } else { d.controllers.join(" ") };
    outln!("controllers: {listed}");
    let yes_no = |b: bool| if b { "applied" } else { "refused (status 125)" };
    outln!("--memory-max: {}; --pids-max: {}", yes_no(d.memory_max), yes_no(d.pids_max));
    if !d.hints.is_empty() {
        outln!("to get the cgroup tier:");
        for h in &d.hints {
            outln!("  - {h}");
        }
    }
    refusal();
    Ok(code)
}
