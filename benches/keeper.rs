//! `cargo bench --bench keeper`: what the keeper (issue 16) costs and what it buys, side by side
//! in one run: the same release binary without the keeper (`SHEEPDOG_KEEPER=off`), with a
//! forked keeper (`SHEEPDOG_KEEPER=fork`, the way before this round) and with the default keeper
//! cloned with `CLONE_VM`, interleaved round by round so that machine noise falls on all three.
//!
//! 1. `run -- true` wall time (start overhead), against a bare `true`.
//! 2. PSS per extra managed process with 20 running (`sleep 300`): the supervisor and its
//!    keeper (`/proc/PID/smaps_rollup`); a keeper that shares the supervisor's address space
//!    (`kcmp`) is that same memory and counts once.
//! 3. SIGKILL of `sheepdog run`'s supervisor → the tree gone (a `sleep` and a `setsid sleep`), in
//!    each tier. Without the keeper the tree survives: reported as such.
//!
//! Prints a Markdown section for BENCHMARKS.md. `SHEEPDOG_BENCH_QUICK=1` cuts the repetitions.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sheepdog::os::{Pid, Signal, procfs};

fn reps(n: usize) -> usize {
    if std::env::var_os("SHEEPDOG_BENCH_QUICK").is_some() { (n / 10).max(3) } else { n }
}

fn q(v: &[f64], q: f64) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn pss_kib(pid: i32) -> f64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    text.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// How the keeper is made: none, forked, or cloned with `CLONE_VM` (the default).
#[derive(Clone, Copy, PartialEq)]
enum Keeper {
    Off,
    Fork,
    Shared,
}

const KEEPERS: [Keeper; 3] = [Keeper::Off, Keeper::Fork, Keeper::Shared];

fn sheepdog(keeper: Keeper) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sheepdog"));
    match keeper {
        Keeper::Off => {
            c.env("SHEEPDOG_KEEPER", "off");
        }
        Keeper::Fork => {
            c.env("SHEEPDOG_KEEPER", "fork");
        }
        Keeper::Shared => {}
    }
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    c
}

/// True if `a` and `b` are one address space (the kernel's `kcmp`; Linux only).
fn shares_memory(a: i32, b: i32) -> bool {
    #[cfg(target_os = "linux")]
    if let (Some(a), Some(b)) = (Pid::new(a), Pid::new(b)) {
        return sheepdog::os::process::shares_memory(a, b).unwrap_or(false);
    }
    let _ = (a, b);
    false
}

fn kill(pid: i32) {
    if let Some(p) = Pid::new(pid) {
        let _ = sheepdog::os::process::kill(p, Signal::KILL);
    }
}

fn main() {
    let label = |k: Keeper| match k {
        Keeper::Off => "without (SHEEPDOG_KEEPER=off)",
        Keeper::Fork => "forked keeper (SHEEPDOG_KEEPER=fork)",
        Keeper::Shared => "keeper cloned with CLONE_VM (default)",
    };

    // 1. Start overhead.
    let mut bare = Vec::new();
    let mut start: [Vec<f64>; 3] = Default::default();
    for _ in 0..reps(300) {
        let t = Instant::now();
        let _ = Command::new("true").status();
        bare.push(t.elapsed().as_secs_f64() * 1000.0);
        for (i, k) in KEEPERS.iter().enumerate() {
            let t = Instant::now();
            let _ = sheepdog(*k).args(["run", "--", "true"]).status();
            start[i].push(t.elapsed().as_secs_f64() * 1000.0);
        }
    }

    // 2. PSS per managed process, 20 running, a few rounds each: (supervisor, keeper) medians.
    let mut pss: [(Vec<f64>, Vec<f64>); 3] = Default::default();
    for _ in 0..reps(30).min(3) {
        for (slot, k) in KEEPERS.iter().enumerate() {
            let dir = tempfile::tempdir().unwrap();
            let state = dir.path().to_string_lossy().into_owned();
            for _ in 0..20 {
                let _ = sheepdog(*k).args(["--state-dir", &state, "start", "--", "sleep", "300"]).status();
            }
            std::thread::sleep(Duration::from_millis(500));
            let reg = sheepdog::registry::Registry::open(Some(dir.path().to_path_buf())).unwrap();
            let (entries, _) = reg.list();
            let mut sups = Vec::new();
            let mut keepers = Vec::new();
            for e in &entries {
                if let Some(s) = e.supervisor.map(|s| s.pid) {
                    sups.push(pss_kib(s));
                    if let Some(kp) = e.keeper.map(|k| k.pid) {
                        let shared = shares_memory(s, kp);
                        keepers.push(if shared { 0.0 } else { pss_kib(kp) });
                    }
                }
            }
            let s = q(&sups, 0.5);
            let kk = if keepers.is_empty() { 0.0 } else { q(&keepers, 0.5) };
            pss[slot].0.push(s);
            pss[slot].1.push(kk);
            let _ = sheepdog(*k).args(["--state-dir", &state, "stop", "--all"]).status();
        }
    }
    // 3. SIGKILL of the supervisor → the tree gone, per tier.
    let mut gone: Vec<(String, Vec<f64>, usize)> = Vec::new();
    for tier in ["cgroup", "subreaper"] {
        for k in KEEPERS {
            let mut times = Vec::new();
            let mut survived = 0;
            // Without the keeper every run waits out the 4 s bound: a few are enough.
            let n = if k == Keeper::Off { reps(20).min(3) } else { reps(20) };
            for _ in 0..n {
                let dir = tempfile::tempdir().unwrap();
                let pids = dir.path().join("pids");
                let script = format!(
                    "setsid sleep 300 & echo $! > {p}.tmp; echo $$ >> {p}.tmp; mv {p}.tmp {p}; exec sleep 301",
                    p = pids.display()
                );
                let mut c = sheepdog(k);
                c.args([
                    "run",
                    "--containment",
                    tier,
                    "--term-grace",
                    "1s",
                    "--kill-wait",
                    "1s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ]);
                let Ok(mut child) = c.spawn() else { continue };
                let end = Instant::now() + Duration::from_secs(5);
                let tree: Vec<i32> = loop {
                    if let Ok(t) = std::fs::read_to_string(&pids) {
                        break t.lines().filter_map(|l| l.trim().parse().ok()).collect();
                    }
                    if Instant::now() > end {
                        break Vec::new();
                    }
                    std::thread::sleep(Duration::from_millis(1));
                };
                if tree.len() != 2 {
                    kill(child.id() as i32);
                    let _ = child.wait();
                    continue;
                }
                let t = Instant::now();
                kill(child.id() as i32);
                let _ = child.wait();
                let deadline = Instant::now() + Duration::from_secs(4);
                let alive = |p: &i32| Pid::new(*p).is_some_and(procfs::is_alive);
                while tree.iter().any(alive) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if tree.iter().any(alive) {
                    survived += 1;
                    tree.iter().for_each(|p| kill(*p));
                } else {
                    times.push(t.elapsed().as_secs_f64() * 1000.0);
                }
                sheepdog::cgroup::sweep_leftovers();
            }
            gone.push((format!("{tier} tier, {}", label(k)), times, survived));
        }
    }

    println!("## The keeper: what it costs, what it buys (`cargo bench --bench keeper`)\n");
    println!(
        "One run, the same release binary without a keeper, with a forked one and with the default one \
         (cloned with `CLONE_VM`), interleaved.\n"
    );
    println!(
        "| figure | without the keeper | forked keeper | CLONE_VM keeper (default) | default − without |\n|---|---|---|---|---|"
    );
    let row = |name: &str, v: [f64; 3], unit: &str| {
        println!(
            "| {name} | {:.3} {unit} | {:.3} {unit} | {:.3} {unit} | {:+.3} {unit} |",
            v[0],
            v[1],
            v[2],
            v[2] - v[0]
        );
    };
    let at = |p: f64| [q(&start[0], p), q(&start[1], p), q(&start[2], p)];
    row("`run -- true`, median wall ms (bare `true`: see below)", at(0.5), "ms");
    row("`run -- true`, p10", at(0.1), "ms");
    row("`run -- true`, p90", at(0.9), "ms");
    let pair = |i: usize| q(&pss[i].0, 0.5) + q(&pss[i].1, 0.5);
    row("PSS per managed process with 20 running, KiB (supervisor + keeper)", [pair(0), pair(1), pair(2)], "KiB");
    println!(
        "\nBare `true`: median {:.3} ms (p10–p90 {:.3}–{:.3}); {} runs of each, interleaved. PSS of the forked \
         keeper's pair: supervisor {:.0} + keeper {:.0} KiB. The CLONE_VM keeper shares the supervisor's address \
         space (`kcmp`), so the pair's PSS is the supervisor's {:.0} KiB (medians of {} rounds of 20).\n",
        q(&bare, 0.5),
        q(&bare, 0.1),
        q(&bare, 0.9),
        bare.len(),
        q(&pss[1].0, 0.5),
        q(&pss[1].1, 0.5),
        q(&pss[2].0, 0.5),
        pss[2].0.len()
    );
    println!("SIGKILL of `sheepdog run`'s supervisor → its tree (`sleep`, `setsid sleep`) gone, ms:\n");
    println!("| tier | median | p10–p90 | runs | tree survived |\n|---|---|---|---|---|");
    for (name, t, survived) in &gone {
        println!(
            "| {name} | {:.3} | {:.3}–{:.3} | {} | {survived} |",
            q(t, 0.5),
            q(t, 0.1),
            q(t, 0.9),
            t.len() + survived
        );
    }
}
