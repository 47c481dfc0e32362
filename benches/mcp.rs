//! `cargo bench --bench mcp`: round trips of `sheepdog mcp` tool calls, as an agent sees them
//! (request written on the server's stdin → reply read from its stdout), and the server's own
//! start and memory. Prints a Markdown section for BENCHMARKS.md ("sheepdog mcp").
//!
//! - `initialize`: spawn `sheepdog mcp` → initialize reply (exec of `sheepdog-mcp`, runtime,
//!   owner detection, registry open).
//! - `process_list` over 100 entries (finished `true` commands started with the CLI).
//! - `process_start` to ready: a `python3 -m http.server` with `ready.port`, reply once the port
//!   listens; beside it the same with `sheepdog start --ready-port` (the CLI floor).
//! - the server's RSS/PSS once idle.
//!
//! Medians with p10–p90. `SHEEPDOG_BENCH_QUICK=1` cuts the repetitions.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use serde_json::{Value, json};

struct Samples(Vec<f64>);

impl Samples {
    fn q(&self, q: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[((v.len() - 1) as f64 * q).round() as usize]
    }
    fn row(&self, what: &str) -> String {
        format!("| {what} | {:.2} | {:.2}–{:.2} | {} |", self.q(0.5), self.q(0.1), self.q(0.9), self.0.len())
    }
}

struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    next: u64,
}

impl Server {
    fn spawn(state: &std::path::Path) -> (Server, f64) {
        let t = Instant::now();
        let mut child = Command::new(env!("CARGO_BIN_EXE_sheepdog"))
            .arg("mcp")
            .env("SHEEPDOG_STATE_DIR", state)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sheepdog mcp");
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut s = Server { child, stdin, stdout, next: 0 };
        s.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}}),
        );
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        writeln!(s.stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
        (s, ms)
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        writeln!(self.stdin, "{}", json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).unwrap();
        loop {
            let mut line = String::new();
            assert!(self.stdout.read_line(&mut line).unwrap() > 0, "the server closed its stdout");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }

    fn call(&mut self, tool: &str, args: Value) -> (Value, f64) {
        let (r, ms) = self.call_raw(tool, args);
        (r["result"]["structuredContent"].clone(), ms)
    }

    /// The whole JSON-RPC reply and its round trip in ms.
    fn call_raw(&mut self, tool: &str, args: Value) -> (Value, f64) {
        let t = Instant::now();
        let r = self.request("tools/call", json!({"name": tool, "arguments": args}));
        let ms = t.elapsed().as_secs_f64() * 1000.0;
        assert_ne!(r["result"]["isError"], true, "{tool}: {r}");
        (r, ms)
    }

    fn close(mut self) {
        drop(self.stdin);
        let _ = self.child.wait();
    }
}

fn kib(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok()).unwrap_or(0)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn main() {
    let quick = std::env::var_os("SHEEPDOG_BENCH_QUICK").is_some();
    let reps = |n: usize| if quick { (n / 10).max(3) } else { n };
    let state = tempfile::tempdir().unwrap();
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sheepdog"))
            .args(args)
            .env("SHEEPDOG_STATE_DIR", state.path())
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let mut init = Samples(Vec::new());
    for _ in 0..reps(30) {
        let (s, ms) = Server::spawn(state.path());
        init.0.push(ms);
        s.close();
    }

    let (mut s, _) = Server::spawn(state.path());
    let (rss, pss) = (kib(s.child.id(), "Rss:"), kib(s.child.id(), "Pss:"));
    // 100 entries, in the server's session so process_list shows them all.
    for _ in 0..100 {
        cli(&["start", "--session", "bench", "--", "true"]);
    }
    let mut list = Samples(Vec::new());
    let mut sizes = (0, 0, 0);
    let mut shown = 0;
    for _ in 0..reps(50) {
        let (r, ms) = s.call_raw("process_list", json!({"session": "bench", "all": true}));
        let v = &r["result"]["structuredContent"];
        // Since issue 20 a reply is at most 16 KiB: the entries that fit, and `truncated`.
        let n = v["entries"].as_array().unwrap().len();
        assert!(n == 100 || v["truncated"].is_string(), "{n} entries and no `truncated`");
        shown = n;
        list.0.push(ms);
        // Bytes the model may read: the text block, the structured result, the whole reply line.
        let text = r["result"]["content"][0]["text"].as_str().unwrap_or("").len();
        sizes = (text, v.to_string().len(), r.to_string().len());
    }

    let mut start = Samples(Vec::new());
    let mut cli_start = Samples(Vec::new());
    for _ in 0..reps(20) {
        let port = free_port();
        let argv = json!(["python3", "-m", "http.server", port.to_string(), "--bind", "127.0.0.1"]);
        let (v, ms) = s.call("process_start", json!({"argv": argv, "ready": {"port": port}, "session": "ready"}));
        assert_eq!(v["ready"]["ok"], true, "{v}");
        start.0.push(ms);
        s.call("process_stop", json!({"session": "ready"}));

        let port = free_port();
        let p = port.to_string();
        let t = Instant::now();
        cli(&[
            "start",
            "--session",
            "ready",
            "--ready-port",
            &p,
            "--",
            "python3",
            "-m",
            "http.server",
            &p,
            "--bind",
            "127.0.0.1",
        ]);
        cli_start.0.push(t.elapsed().as_secs_f64() * 1000.0);
        cli(&["stop", "--session", "ready"]);
    }
    s.close();

    println!("## sheepdog mcp (`cargo bench --bench mcp`)\n");
    println!("Round trips as an agent sees them: a JSON-RPC request written to `sheepdog mcp`'s stdin until");
    println!("its reply is read from stdout. Wall ms, median and p10–p90 over n runs.\n");
    println!("| figure | median ms | p10–p90 | n |");
    println!("|---|---|---|---|");
    println!("{}", init.row("spawn `sheepdog mcp` → `initialize` reply"));
    println!("{}", list.row("`process_list` over 100 entries"));
    println!("{}", start.row("`process_start` of `python3 -m http.server` with `ready.port` → reply (ready)"));
    println!("{}", cli_start.row("the same with `sheepdog start --ready-port` (CLI, for comparison)"));
    println!("\nThe server idle after initialize: RSS {rss} KiB, PSS {pss} KiB.");
    println!(
        "\n`process_list` over 100 entries: {shown} shown; text block {} bytes, `structuredContent` {} bytes, whole reply {} bytes.",
        sizes.0, sizes.1, sizes.2
    );
}
