//! `cargo bench --bench compare`: sheepdog side by side with the supervisors people use today,
//! in one run, and BENCHMARKS.md written from that run.
//!
//! Peers: bare exec (the floor), tini and dumb-init (Debian packages; installed here with
//! apt-get when missing and possible, else reported missing), a minimal Node.js supervisor
//! (`bench/node-supervisor.js`, standing for the inline scripts agent hosts use), sheepdog as
//! `cargo build --release` makes it, and the static musl build the npm and PyPI packages ship
//! (`x86_64-unknown-linux-musl`, non-PIE by `.cargo/config.toml`), the smallest footprint.
//!
//! Every figure is the median over repeated runs with its p10–p90 spread; peers are interleaved
//! round by round so that machine noise falls on all of them alike. Ratios compare medians from
//! this same run. `SHEEPDOG_BENCH_QUICK=1` cuts the repetitions for a smoke run.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sheepdog::entry::{Entry, StopTimings};
use sheepdog::os::process::{self as sysproc, Sent};
use sheepdog::os::{Pid, Signal, procfs};

#[derive(Clone)]
struct Peer {
    name: String,
    prefix: Vec<String>,
}

impl Peer {
    fn cmd(&self, argv: &[&str]) -> Command {
        let mut all: Vec<String> = self.prefix.clone();
        all.extend(argv.iter().map(|s| s.to_string()));
        let mut c = Command::new(&all[0]);
        c.args(&all[1..]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        c
    }
    fn is_bare(&self) -> bool {
        self.prefix.is_empty()
    }
}

/// Milliseconds; median and spread.
#[derive(Default, Clone)]
struct Samples(Vec<f64>);

impl Samples {
    fn push(&mut self, v: f64) {
        // A sample that could not be taken (NaN) is left out rather than breaking the sort.
        if !v.is_nan() {
            self.0.push(v);
        }
    }
    fn q(&self, q: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        if v.is_empty() {
            return f64::NAN;
        }
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
    fn median(&self) -> f64 {
        self.q(0.5)
    }
    fn spread(&self) -> String {
        format!("{:.3}–{:.3}", self.q(0.1), self.q(0.9))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn which(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(bin)).find(|p| p.is_file())
}

fn version(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .map(|o| {
            let s = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
            s.lines().next().unwrap_or("").trim().to_string()
        })
        .unwrap_or_else(|_| "missing".into())
}

/// Installs tini and dumb-init with apt-get if they are missing and we are root.
fn ensure_packages() -> Vec<String> {
    let missing: Vec<&str> = ["tini", "dumb-init"].into_iter().filter(|b| which(b).is_none()).collect();
    if !missing.is_empty() && sysproc::getuid() == 0 {
        eprintln!("bench: installing {missing:?} with apt-get");
        let _ = Command::new("sh")
            .args([
                "-c",
                &format!(
                    "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq {}",
                    missing.join(" ")
                ),
            ])
            .stdout(Stdio::null())
            .status();
    }
    ["tini", "dumb-init", "node"].into_iter().filter(|b| which(b).is_none()).map(String::from).collect()
}

/// Builds the static sheepdog the packages ship (x86_64-unknown-linux-musl, the target's flags
/// from `.cargo/config.toml`, so no RUSTFLAGS here: they would replace them); `None` if that
/// fails (the target is not installed: `rustup target add x86_64-unknown-linux-musl`).
fn build_static(root: &Path) -> Option<PathBuf> {
    let target = "x86_64-unknown-linux-musl";
    if !cfg!(all(target_os = "linux", target_arch = "x86_64")) {
        return None;
    }
    let ok = Command::new("cargo")
        .args(["build", "--release", "--quiet", "--bin", "sheepdog", "--target", target])
        .env_remove("RUSTFLAGS")
        .current_dir(root)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    let bin = root.join("target").join(target).join("release/sheepdog");
    (ok && bin.is_file()).then_some(bin)
}

fn wait_child_of(sup: u32, timeout: Duration) -> Option<Pid> {
    let end = Instant::now() + timeout;
    let p = Pid::new(sup as i32)?;
    loop {
        if let Some(c) = procfs::children(p).first() {
            // sheepdog's own child is its keeper (issue 16): the command is the keeper's child.
            if procfs::cmdline(*c).contains("sheepdog") {
                if let Some(g) = procfs::children(*c).first() {
                    return Some(*g);
                }
            } else {
                return Some(*c);
            }
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn kill_tree(child: &mut Child) {
    if let Some(p) = Pid::new(child.id() as i32) {
        for d in procfs::descendants(p) {
            let _ = sysproc::kill(d.pid, Signal::KILL);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    // A `sheepdog run` killed by SIGKILL cannot remove its tree's (now empty) cgroup.
    sheepdog::cgroup::sweep_leftovers();
}

fn rss_pss_kib(pid: u32) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    let field = |k: &str| {
        text.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (field("Rss:"), field("Pss:"))
}

struct Row {
    figure: String,
    peer: String,
    median: String,
    spread: String,
    ratio: String,
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let quick = std::env::var_os("SHEEPDOG_BENCH_QUICK").is_some();
    let reps = |n: usize| if quick { (n / 10).max(3) } else { n };
    let missing = ensure_packages();
    let sheepdog = env!("CARGO_BIN_EXE_sheepdog").to_string();
    let static_bin = build_static(&root);

    let mut peers = vec![Peer { name: "bare exec".into(), prefix: vec![] }];
    if which("tini").is_some() {
        peers.push(Peer { name: "tini".into(), prefix: vec!["tini".into(), "--".into()] });
    }
    if which("dumb-init").is_some() {
        peers.push(Peer { name: "dumb-init".into(), prefix: vec!["dumb-init".into()] });
    }
    if which("node").is_some() {
        let js = root.join("bench/node-supervisor.js").to_string_lossy().into_owned();
        peers.push(Peer { name: "node supervisor".into(), prefix: vec!["node".into(), js] });
    }
    peers.push(Peer { name: "sheepdog".into(), prefix: vec![sheepdog.clone(), "run".into(), "--".into()] });
    // Issue 9: the same binary kept in the subreaper tier, against `sheepdog` above, which gets
    // the strongest tier this host allows (see "Containment" under the machine's facts).
    peers.push(Peer {
        name: "sheepdog (subreaper tier)".into(),
        prefix: vec![sheepdog.clone(), "run".into(), "--containment".into(), "subreaper".into(), "--".into()],
    });
    let tier_here = containment_here(&sheepdog);
    if let Some(b) = &static_bin {
        peers.push(Peer {
            name: "sheepdog (static)".into(),
            prefix: vec![b.to_string_lossy().into_owned(), "run".into(), "--".into()],
        });
    }
    let idx = |name: &str| peers.iter().position(|p| p.name == name);
    let mut rows: Vec<Row> = Vec::new();
    let mut verdicts: Vec<(String, String, bool)> = Vec::new();

    // 1. Start overhead.
    eprintln!("bench: start overhead");
    let mut start = vec![Samples::default(); peers.len()];
    for _ in 0..reps(300) {
        for (i, p) in peers.iter().enumerate() {
            let t = Instant::now();
            let _ = p.cmd(&["true"]).status();
            start[i].push(ms(t.elapsed()));
        }
    }
    let rel = |s: &[Samples], i: usize, base: Option<usize>| match base {
        Some(b) if b != i => format!("{:.2}×", s[i].median() / s[b].median()),
        _ => "1×".into(),
    };
    for (i, p) in peers.iter().enumerate() {
        rows.push(Row {
            figure: "1. start overhead: `<sup> -- true`, wall ms".into(),
            peer: p.name.clone(),
            median: format!("{:.3}", start[i].median()),
            spread: start[i].spread(),
            ratio: format!("{} of tini", rel(&start, i, idx("tini"))),
        });
    }

    // 2. Idle memory.
    eprintln!("bench: idle memory");
    let mut rss = vec![Samples::default(); peers.len()];
    let mut pss = vec![Samples::default(); peers.len()];
    for _ in 0..reps(5).min(5) {
        for (i, p) in peers.iter().enumerate() {
            let mut c = p.cmd(&["sleep", "30"]).spawn().unwrap();
            if !p.is_bare() {
                wait_child_of(c.id(), Duration::from_secs(5));
            }
            std::thread::sleep(Duration::from_millis(300));
            let (r, s) = rss_pss_kib(c.id());
            rss[i].push(r);
            pss[i].push(s);
            kill_tree(&mut c);
        }
    }
    for (i, p) in peers.iter().enumerate() {
        let node = idx("node supervisor");
        rows.push(Row {
            figure: "2. idle memory of the supervisor process, RSS KiB (PSS KiB)".into(),
            peer: p.name.clone(),
            median: format!("{:.0} ({:.0})", rss[i].median(), pss[i].median()),
            spread: format!("{:.0}–{:.0}", rss[i].q(0.1), rss[i].q(0.9)),
            ratio: match node {
                Some(n) if n != i => format!("node / this = {:.1}×", rss[n].median() / rss[i].median()),
                _ => "".into(),
            },
        });
    }

    // 3a. Stop latency: SIGTERM to the supervisor -> exit, child exits at once on SIGTERM.
    eprintln!("bench: stop latency");
    let mut stop = vec![Samples::default(); peers.len()];
    for _ in 0..reps(60) {
        for (i, p) in peers.iter().enumerate() {
            stop[i].push(kill_and_time(p, Signal::TERM, false));
        }
    }
    for (i, p) in peers.iter().enumerate() {
        rows.push(Row {
            figure: "3. stop latency: SIGTERM to supervisor → exit, child dies at once; ms".into(),
            peer: p.name.clone(),
            median: format!("{:.3}", stop[i].median()),
            spread: stop[i].spread(),
            ratio: format!("+{:.3} ms beyond the child's own exit", stop[i].median() - stop[0].median()),
        });
    }

    // 3b. Stdin EOF -> exit, for a child that exits at once on EOF (`cat`).
    eprintln!("bench: stdin eof latency");
    let mut eof_peers = peers.clone();
    for p in eof_peers.iter_mut().filter(|p| p.name.starts_with("sheepdog")) {
        p.prefix.pop(); // the trailing `--`
        p.prefix.extend(["--on-stdin-eof".into(), "stop".into(), "--".into()]);
        p.name += " --on-stdin-eof stop";
    }
    let mut eof = vec![Samples::default(); eof_peers.len()];
    for _ in 0..reps(60) {
        for (i, p) in eof_peers.iter().enumerate() {
            let mut c = p.cmd(&["cat"]).stdin(Stdio::piped()).spawn().unwrap();
            if !p.is_bare() {
                wait_child_of(c.id(), Duration::from_secs(5));
            }
            std::thread::sleep(Duration::from_millis(if p.name.starts_with("node") { 100 } else { 10 }));
            let t = Instant::now();
            drop(c.stdin.take());
            let _ = c.wait();
            eof[i].push(ms(t.elapsed()));
            kill_tree(&mut c);
        }
    }
    for (i, p) in eof_peers.iter().enumerate() {
        rows.push(Row {
            figure: "3b. stdin closed → supervisor exit, child exits at once on EOF; ms".into(),
            peer: p.name.clone(),
            median: format!("{:.3}", eof[i].median()),
            spread: eof[i].spread(),
            ratio: format!("+{:.3} ms beyond the child's own exit", eof[i].median() - eof[0].median()),
        });
    }

    // 4. Exit latency: the last descendant dies (SIGKILL) -> the supervisor exits.
    eprintln!("bench: exit latency");
    let mut exit = vec![Samples::default(); peers.len()];
    for _ in 0..reps(60) {
        for (i, p) in peers.iter().enumerate() {
            exit[i].push(kill_and_time(p, Signal::KILL, true));
        }
    }
    for (i, p) in peers.iter().enumerate() {
        rows.push(Row {
            figure: "4. exit latency: last descendant SIGKILLed → supervisor exit; ms".into(),
            peer: p.name.clone(),
            median: format!("{:.3}", exit[i].median()),
            spread: exit[i].spread(),
            ratio: format!("+{:.3} ms beyond the floor", exit[i].median() - exit[0].median()),
        });
    }

    // 5. Scale: 100 trees, each with a grandchild that ignores SIGTERM; owner SIGKILLed.
    eprintln!("bench: 100-tree teardown");
    let mut scale_rows = Vec::new();
    let mut scale_runs: Vec<(&str, String)> = vec![("sheepdog", format!("{sheepdog} run --owner $$ --"))];
    if which("tini").is_some() {
        scale_runs.push(("tini -g -p SIGTERM (parent-death signal)", "tini -g -p SIGTERM --".into()));
    }
    for (name, prefix) in &scale_runs {
        let (secs, survivors, total) = teardown(prefix, 100);
        scale_rows.push((name.to_string(), secs, survivors, total));
    }

    // 6. Registry.
    eprintln!("bench: registry");
    let reg = registry_bench(&sheepdog, reps(5).clamp(3, 5));

    // 7 and 8. The two containment tiers (issue 9), interleaved round by round.
    eprintln!("bench: containment tiers");
    let tiers: Vec<&str> = if tier_here == "cgroup" { vec!["cgroup", "subreaper"] } else { vec!["subreaper"] };
    let mut escape = vec![(Samples::default(), Samples::default(), 0usize, 0usize); tiers.len()];
    for _ in 0..reps(10).clamp(3, 10) {
        for (i, t) in tiers.iter().enumerate() {
            if let Some((kill_to_gone, term_to_exit, survivors, total)) = escape_teardown(&sheepdog, t) {
                escape[i].0.push(kill_to_gone);
                escape[i].1.push(term_to_exit);
                escape[i].2 += survivors;
                escape[i].3 += total;
            }
        }
    }
    let perl = which("perl").is_some();
    let mut storm: Vec<(Samples, Vec<String>, usize)> = vec![(Samples::default(), Vec::new(), 0); tiers.len()];
    for _ in 0..if perl { reps(3).clamp(2, 3) } else { 0 } {
        for (i, t) in tiers.iter().enumerate() {
            let (secs, status, survivors) = fork_storm(&sheepdog, t);
            storm[i].0.push(secs);
            storm[i].1.push(status);
            storm[i].2 += survivors;
        }
    }

    // Targets.
    let get = |s: &[Samples], n: &str| idx(n).map(|i| s[i].median());
    let tini_start = get(&start, "tini");
    for name in ["sheepdog", "sheepdog (static)"] {
        let Some(i) = idx(name) else { continue };
        if let Some(t) = tini_start {
            verdicts.push((
                format!("{name}: start overhead within tini's + 0.5 ms ({:.3} vs {:.3} ms)", start[i].median(), t),
                String::new(),
                start[i].median() <= t + 0.5,
            ));
        }
        let r = rss[i].median();
        let node = get(&rss, "node supervisor");
        verdicts.push((
            format!(
                "{name}: RSS at most 2 MiB and at least 20× below Node ({r:.0} KiB; Node {:.0} KiB, {:.1}×)",
                node.unwrap_or(f64::NAN),
                node.unwrap_or(f64::NAN) / r
            ),
            String::new(),
            r <= 2048.0 && node.is_some_and(|n| n / r >= 20.0),
        ));
        let beyond = stop[i].median() - stop[0].median();
        verdicts.push((
            format!("{name}: stop latency at most 2 ms beyond the child's own exit (+{beyond:.3} ms)"),
            String::new(),
            beyond <= 2.0,
        ));
        let eof_i = eof_peers.iter().position(|p| p.name.starts_with(name) && p.name.len() > name.len() + 1);
        if let Some(e) = eof_i.filter(|_| name == "sheepdog") {
            let beyond = eof[e].median() - eof[0].median();
            verdicts.push((
                format!("{name}: stdin EOF stop at most 2 ms beyond the child's own exit (+{beyond:.3} ms)"),
                String::new(),
                beyond <= 2.0,
            ));
        }
        let beyond = exit[i].median() - exit[0].median();
        verdicts.push((
            format!("{name}: exit latency median at most 1 ms (+{beyond:.3} ms beyond the floor)"),
            String::new(),
            beyond <= 1.0,
        ));
    }
    if let Some((_, secs, survivors, _)) = scale_rows.first() {
        verdicts.push((
            format!("100-tree teardown: zero survivors within term grace + 1 s ({survivors} survivors, {secs:.2} s)"),
            String::new(),
            *survivors == 0 && *secs <= 4.0,
        ));
    }
    if let (Some(c), Some(s)) = (idx("sheepdog"), idx("sheepdog (subreaper tier)"))
        && tier_here == "cgroup"
    {
        let cost = start[c].median() - start[s].median();
        verdicts.push((
            format!(
                "cgroup tier: the probe costs `run` at most 0.2 ms over the subreaper tier (+{cost:.3} ms: {:.3} vs {:.3} ms)",
                start[c].median(),
                start[s].median()
            ),
            String::new(),
            cost <= 0.2,
        ));
    }
    if let Some(c) = tiers.iter().position(|t| *t == "cgroup") {
        verdicts.push((
            format!(
                "cgroup tier: a 100-process tree with setsid and env -i escapes leaves no survivor ({} of {})",
                escape[c].2, escape[c].3
            ),
            String::new(),
            escape[c].2 == 0 && escape[c].3 > 0,
        ));
        if perl {
            let all_gone = storm[c].2 == 0 && storm[c].1.iter().all(|s| s != "124");
            verdicts.push((
                format!(
                    "cgroup tier: a fork storm ends with the tree gone, not 124 (statuses {}, {} survivors)",
                    storm[c].1.join(", "),
                    storm[c].2
                ),
                String::new(),
                all_gone,
            ));
        }
    }
    verdicts.push((
        format!("`ps` over 10,000 entries at most 100 ms (issue 19) ({:.1} ms)", reg.ps.median()),
        String::new(),
        reg.ps.median() <= 100.0,
    ));

    // Write BENCHMARKS.md.
    let mut md = String::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let _ = writeln!(md, "# Benchmarks\n");
    let _ = writeln!(
        md,
        "Written by `cargo bench --bench compare` ({}); every number below is from that one run. \
         Medians with the p10–p90 spread; peers interleaved round by round.\n",
        if quick { "QUICK smoke run: few repetitions" } else { "full run" }
    );
    let _ = writeln!(md, "## Machine and versions\n");
    let _ = writeln!(
        md,
        "- CPU: {cpu}, {} cores; kernel {}",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        version("uname", "-r")
    );
    let _ = writeln!(
        md,
        "- sheepdog {} (release profile: lto, opt-level s, panic abort){}",
        env!("CARGO_PKG_VERSION"),
        if static_bin.is_some() {
            "; static build: x86_64-unknown-linux-musl, non-PIE"
        } else {
            "; static build unavailable"
        }
    );
    let _ = writeln!(
        md,
        "- {}; {}; node {}; {}",
        version("tini", "--version"),
        version("dumb-init", "--version"),
        version("node", "--version"),
        version("rustc", "--version")
    );
    if !missing.is_empty() {
        let _ = writeln!(md, "- missing peers (not measured): {}", missing.join(", "));
    }
    let _ = writeln!(
        md,
        "- containment: `sheepdog run` gets the **{tier_here}** tier here (`sheepdog doctor`); \
         `sheepdog (subreaper tier)` is the same binary with `--containment subreaper`"
    );
    let _ = writeln!(md, "\n## Targets\n");
    for (text, _, met) in &verdicts {
        let _ = writeln!(md, "- **{}** — {text}", if *met { "met" } else { "MISSED" });
    }
    let _ = writeln!(md, "\n## Results\n");
    let _ = writeln!(md, "| figure | peer | median | p10–p90 | comparison |\n|---|---|---|---|---|");
    for r in &rows {
        let _ = writeln!(md, "| {} | {} | {} | {} | {} |", r.figure, r.peer, r.median, r.spread, r.ratio);
    }
    let _ = writeln!(md, "\n### 5. 100 supervised trees, owner SIGKILLed\n");
    let _ = writeln!(
        md,
        "Each tree: the supervisor, `sleep` as the child, and a grandchild `sleep` that ignores SIGTERM. Default term grace (3 s).\n"
    );
    let _ = writeln!(
        md,
        "| supervisor | time until every tree is gone (s) | survivors after 10 s (of processes) |\n|---|---|---|"
    );
    for (name, secs, survivors, total) in &scale_rows {
        let t = if *survivors == 0 { format!("{secs:.2}") } else { "never (survivors)".into() };
        let _ = writeln!(md, "| {name} | {t} | {survivors} of {total} |");
    }
    let _ = writeln!(
        md,
        "\ndumb-init and the Node supervisor have no owner watch: after the owner's death all of their trees live on.\n"
    );
    let _ = writeln!(md, "### 6. Registry ({} entries)\n", REGISTRY_ENTRIES);
    let _ = writeln!(md, "| operation | median | p10–p90 |\n|---|---|---|");
    let _ = writeln!(
        md,
        "| `sheepdog ps --json` (10,000 finished entries) | {:.1} ms | {} |",
        reg.ps.median(),
        reg.ps.spread()
    );
    let _ = writeln!(
        md,
        "| `sheepdog ps --json`, one reader thread (`SHEEPDOG_LIST_THREADS=1`; the other savings of this round kept) | {:.1} ms | {} |",
        reg.ps_one_thread.median(),
        reg.ps_one_thread.spread()
    );
    let _ = writeln!(
        md,
        "| `ps --json`: one thread ÷ default | {:.2}× | the earlier rounds' default: 89 ms, then 222 ms |",
        reg.ps_one_thread.median() / reg.ps.median()
    );
    let _ = writeln!(md, "| `sheepdog ps --all --json` | {:.1} ms | {} |", reg.ps_all.median(), reg.ps_all.spread());
    let _ = writeln!(
        md,
        "| `sheepdog reap` over 10,000 dead entries (each recorded `lost`, fsynced) | {:.0} ms | one run |",
        reg.reap_ms
    );
    let _ = writeln!(
        md,
        "| `sheepdog start -- true`, sequential | {:.1} starts/s | {:.2} ms per start |",
        reg.starts_per_s,
        1000.0 / reg.starts_per_s
    );
    let _ = writeln!(md, "\n### 7. Teardown of a 100-process tree with escapes, by tier\n");
    let _ = writeln!(
        md,
        "One `sheepdog run --term-grace 100ms` per sample. The command ignores SIGTERM and starts 100 \
         `sleep`s that ignore it too: a third in their own session (`setsid`), a third with an empty \
         environment (`env -i`: no tag), a third plain. SIGTERM to the supervisor; \"kill → gone\" is \
         from the `escalated` event (SIGKILL sent) to the supervisor's exit (tree gone).\n"
    );
    let _ = writeln!(
        md,
        "| tier | kill → gone, ms (median) | p10–p90 | SIGTERM → exit, ms | survivors (of processes, all samples) |\n|---|---|---|---|---|"
    );
    for (i, t) in tiers.iter().enumerate() {
        let (k, e, sv, tot) = &escape[i];
        let _ = writeln!(md, "| {t} | {:.3} | {} | {:.3} | {sv} of {tot} |", k.median(), k.spread(), e.median());
    }
    if perl {
        let _ = writeln!(md, "\n### 8. Fork storm, by tier\n");
        let _ = writeln!(
            md,
            "`sheepdog run --term-grace 200ms --kill-wait 1.5s -- perl -e STORM`: 32 chains, each process forks \
             and exits at once (the live pids keep moving), SIGTERM ignored, each chain ending by itself after \
             10 s. The command exits at once, so the stop starts at the spawn.\n"
        );
        let _ = writeln!(
            md,
            "| tier | spawn → supervisor exit, s (median) | exit statuses | survivors at exit (all samples) |\n|---|---|---|---|"
        );
        for (i, t) in tiers.iter().enumerate() {
            let (secs, statuses, sv) = &storm[i];
            let _ = writeln!(md, "| {t} | {:.3} | {} | {sv} |", secs.median(), statuses.join(", "));
        }
    }
    if let Ok(notes) = std::fs::read_to_string(root.join("bench/NOTES.md")) {
        let _ = writeln!(md, "\n{notes}");
    }
    std::fs::write(root.join("BENCHMARKS.md"), &md).expect("write BENCHMARKS.md");
    let _ = std::io::stdout().write_all(md.as_bytes());
}

/// Runs `<peer> sleep 30`, then sends `sig` to the supervisor (or, with `to_child`, to its
/// child: the last descendant) and returns the ms until the supervisor has exited.
fn kill_and_time(p: &Peer, sig: Signal, to_child: bool) -> f64 {
    let mut c = p.cmd(&["sleep", "30"]).spawn().unwrap();
    let sup = Pid::new(c.id() as i32).unwrap();
    let child = if p.is_bare() { Some(sup) } else { wait_child_of(c.id(), Duration::from_secs(5)) };
    // Node needs a moment after spawning before its signal handlers are in place.
    std::thread::sleep(Duration::from_millis(if p.name.starts_with("node") { 100 } else { 10 }));
    let target = if to_child { child } else { Some(sup) };
    let t = Instant::now();
    if let Some(tp) = target {
        let _ = sysproc::kill(tp, sig);
    }
    let _ = c.wait();
    let took = ms(t.elapsed());
    kill_tree(&mut c);
    took
}

/// Starts `n` trees under `prefix` as children of one owner shell, SIGKILLs the owner, and
/// returns (seconds until all gone, survivors after 10 s, processes tracked).
fn teardown(prefix: &str, n: usize) -> (f64, usize, usize) {
    let script = format!(
        "i=0; while [ $i -lt {n} ]; do {prefix} sh -c \"(trap '' TERM; exec sleep 1000) & exec sleep 1000\" & i=$((i+1)); done; echo up; wait"
    );
    let mut owner =
        Command::new("sh").args(["-c", &script]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let owner_pid = Pid::new(owner.id() as i32).unwrap();
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(owner.stdout.take().unwrap()), &mut line);
    let end = Instant::now() + Duration::from_secs(30);
    let mut tracked: Vec<(Pid, u64)>;
    loop {
        tracked =
            procfs::descendants(owner_pid).iter().filter(|s| !s.is_zombie()).map(|s| (s.pid, s.start_time)).collect();
        if tracked.len() >= n * 3 || Instant::now() > end {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    tracked = procfs::descendants(owner_pid).iter().filter(|s| !s.is_zombie()).map(|s| (s.pid, s.start_time)).collect();
    let t = Instant::now();
    let _ = sysproc::kill(owner_pid, Signal::KILL);
    let _ = owner.wait();
    let alive = |(p, st): &(Pid, u64)| procfs::start_time(*p) == Some(*st);
    let mut gone_at = None;
    while t.elapsed() < Duration::from_secs(10) {
        if !tracked.iter().any(alive) {
            gone_at = Some(t.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let survivors: Vec<&(Pid, u64)> = tracked.iter().filter(|x| alive(x)).collect();
    for (p, st) in &survivors {
        if procfs::start_time(*p) == Some(*st) && sysproc::kill(*p, Signal::KILL).ok() == Some(Sent::Delivered) {}
    }
    (gone_at.map(|d| d.as_secs_f64()).unwrap_or(f64::NAN), survivors.len(), tracked.len())
}

const REGISTRY_ENTRIES: usize = 10_000;

struct RegistryFigures {
    ps: Samples,
    /// `ps --json` read by one thread (`SHEEPDOG_LIST_THREADS=1`): the path before issue 19.
    ps_one_thread: Samples,
    ps_all: Samples,
    reap_ms: f64,
    starts_per_s: f64,
}

/// Writes `n` entries straight into `dir` (fixture creation is not what is measured).
fn forge_entries(dir: &Path, n: usize, running: bool) {
    let procs = dir.join("procs");
    std::fs::create_dir_all(&procs).unwrap();
    let boot = procfs::boot_id();
    for i in 1..=n {
        let id = format!("proc_{i}");
        let e = Entry {
            id: id.clone(),
            name: Some(format!("job{i}")),
            session_id: Some(format!("s{}", i % 50)),
            provider: Some(sheepdog::entry::ProcRef::new(4_000_000 + i as i32, Some(1))),
            pgid: Some(4_000_000 + i as i32),
            started_at: sheepdog::files::now_ms(),
            command_preview: "npm run dev".into(),
            argv: vec!["npm".into(), "run".into(), "dev".into()],
            cwd: "/tmp".into(),
            supervisor: Some(sheepdog::entry::ProcRef::new(4_100_000 + i as i32, Some(1))),
            boot_id: boot.clone(),
            uid: sysproc::getuid(),
            tag: sheepdog::registry::new_tag().expect("random bytes"),
            stop: StopTimings { stdin_grace_ms: 0, term_grace_ms: 3000, kill_wait_ms: 1500, max_stop_ms: 4500 },
            status: if running { sheepdog::status::Status::Running } else { sheepdog::status::Status::Exited },
            status_text: (!running).then(|| "exited (0)".into()),
            exit_code: (!running).then_some(0),
            ..Default::default()
        };
        let d = procs.join(&id);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("entry.json"), serde_json::to_vec_pretty(&e).unwrap()).unwrap();
    }
    std::fs::write(dir.join("seq"), format!("{n}\n")).unwrap();
}

fn registry_bench(sheepdog: &str, reps: usize) -> RegistryFigures {
    use std::os::unix::fs::PermissionsExt;
    let base = tempfile::tempdir().unwrap();
    let finished = base.path().join("finished");
    let dead = base.path().join("dead");
    let starts = base.path().join("starts");
    for d in [&finished, &dead, &starts] {
        std::fs::create_dir_all(d).unwrap();
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    forge_entries(&finished, REGISTRY_ENTRIES, false);
    forge_entries(&dead, REGISTRY_ENTRIES, true);
    let run_with = |dir: &Path, args: &[&str], threads: Option<&str>| {
        let mut cmd = Command::new(sheepdog);
        cmd.arg("--state-dir").arg(dir).args(args).stdout(Stdio::null()).env_remove("SHEEPDOG_LIST_THREADS");
        if let Some(n) = threads {
            cmd.env("SHEEPDOG_LIST_THREADS", n);
        }
        let t = Instant::now();
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        ms(t.elapsed())
    };
    let run = |dir: &Path, args: &[&str]| run_with(dir, args, None);
    let mut ps = Samples::default();
    let mut ps_one_thread = Samples::default();
    let mut ps_all = Samples::default();
    run(&finished, &["ps", "--json"]); // warm the page cache like a second call would
    // Interleaved, and more samples than the other rows: one `ps` is ~0.1 s, noisy on a VM.
    for _ in 0..reps * 4 {
        ps.push(run(&finished, &["ps", "--json"]));
        ps_one_thread.push(run_with(&finished, &["ps", "--json"], Some("1")));
    }
    for _ in 0..reps {
        ps_all.push(run(&finished, &["ps", "--all", "--json"]));
    }
    let reap_ms = run(&dead, &["reap"]);
    let n = 50;
    let t = Instant::now();
    for _ in 0..n {
        run(&starts, &["start", "--", "true"]);
    }
    let starts_per_s = n as f64 / t.elapsed().as_secs_f64();
    RegistryFigures { ps, ps_one_thread, ps_all, reap_ms, starts_per_s }
}

/// The tier `sheepdog run` gets here, from `sheepdog doctor --json`.
fn containment_here(sheepdog: &str) -> String {
    let out = Command::new(sheepdog).args(["doctor", "--json"]).env_remove("SHEEPDOG_CONTAINMENT").output();
    out.ok()
        .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
        .and_then(|v| v["containment"].as_str().map(String::from))
        .unwrap_or_else(|| "unknown".into())
}

/// Live processes whose environment carries `SHEEPDOG_BENCH_MARK=mark`.
fn marked(mark: &str) -> Vec<(Pid, u64)> {
    procfs::all()
        .into_iter()
        .filter(|s| !s.is_zombie() && procfs::environ_value(s.pid, "SHEEPDOG_BENCH_MARK").as_deref() == Some(mark))
        .map(|s| (s.pid, s.start_time))
        .collect()
}

/// Section 7: one 100-process tree with setsid and `env -i` escapes, all ignoring SIGTERM, under
/// `sheepdog run --containment TIER`; SIGTERM to the supervisor. Returns (escalated → exit ms,
/// SIGTERM → exit ms, survivors, processes tracked); `None` if the tree never came up.
fn escape_teardown(sheepdog: &str, tier: &str) -> Option<(f64, f64, usize, usize)> {
    let src = r#"
import os, signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for i in range(100):
    if os.fork() == 0:
        if i % 3 == 0:
            os.setsid()
        env = {} if i % 3 == 1 else dict(os.environ)
        os.execve('/bin/sleep', ['sleep', '1000'], env)
signal.pause()
"#;
    let script = format!(
        "exec {sheepdog} run --containment {tier} --term-grace 100ms --kill-wait 5s --events-fd 3 -- python3 -c \"$1\" 3>&1 >/dev/null 2>&1"
    );
    let mut sup = Command::new("sh")
        .args(["-c", &script, "sh", src])
        .env_remove("SHEEPDOG_CONTAINMENT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let sup_pid = Pid::new(sup.id() as i32)?;
    let out = sup.stdout.take()?;
    // Each event line with the moment it was read; the thread ends at EOF (the supervisor exits).
    let reader = std::thread::spawn(move || {
        std::io::BufRead::lines(std::io::BufReader::new(out))
            .map_while(Result::ok)
            .map(|l| (Instant::now(), l))
            .collect::<Vec<_>>()
    });
    let end = Instant::now() + Duration::from_secs(20);
    let mut tracked: Vec<(Pid, u64)> = Vec::new();
    while Instant::now() < end {
        tracked =
            procfs::descendants(sup_pid).iter().filter(|s| !s.is_zombie()).map(|s| (s.pid, s.start_time)).collect();
        if tracked.len() >= 101 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    let _ = sysproc::kill(sup_pid, Signal::TERM);
    let _ = sup.wait();
    let exited = Instant::now();
    let alive = |(p, st): &(Pid, u64)| procfs::start_time(*p) == Some(*st);
    let survivors: Vec<(Pid, u64)> = tracked.iter().copied().filter(|x| alive(x)).collect();
    for (p, st) in &survivors {
        if procfs::start_time(*p) == Some(*st) {
            let _ = sysproc::kill(*p, Signal::KILL);
        }
    }
    let lines = reader.join().unwrap_or_default();
    let escalated = lines.iter().find(|(_, l)| l.contains("\"escalated\"")).map(|(t, _)| *t)?;
    (tracked.len() >= 101)
        .then(|| (ms(exited.saturating_duration_since(escalated)), ms(exited - t0), survivors.len(), tracked.len()))
}

/// Section 8: 32 fork chains that ignore SIGTERM under `sheepdog run --containment TIER`.
/// Returns (seconds from the spawn to the supervisor's exit, its exit status, survivors at exit).
/// Whatever survives is killed afterwards (each chain also ends by itself after 10 s).
fn fork_storm(sheepdog: &str, tier: &str) -> (f64, String, usize) {
    let storm = "$SIG{TERM}='IGNORE'; $end=time+10; for (1..31) { last if fork == 0 } \
                 while (time < $end) { my $p = fork; exit 0 if defined $p && $p > 0; }";
    let mark = sheepdog::registry::new_tag().expect("random bytes");
    let t0 = Instant::now();
    let status = Command::new(sheepdog)
        .args(["run", "--containment", tier, "--term-grace", "200ms", "--kill-wait", "1.5s", "--", "perl", "-e", storm])
        .env("SHEEPDOG_BENCH_MARK", &mark)
        .env_remove("SHEEPDOG_CONTAINMENT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let secs = t0.elapsed().as_secs_f64();
    let survivors = marked(&mark).len();
    let status = match status {
        Ok(s) => s.code().map(|c| c.to_string()).unwrap_or_else(|| "signal".into()),
        Err(_) => "not run".into(),
    };
    // Chains outrun a scan: keep killing until none is seen three times in a row (or they end).
    let end = Instant::now() + Duration::from_secs(15);
    let mut quiet = 0;
    while quiet < 3 && Instant::now() < end {
        let left = marked(&mark);
        quiet = if left.is_empty() { quiet + 1 } else { 0 };
        for (p, st) in left {
            if procfs::start_time(p) == Some(st) {
                let _ = sysproc::kill(p, Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (secs, status, survivors)
}
