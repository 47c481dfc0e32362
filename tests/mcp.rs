//! `sheepdog mcp` driven by a real MCP client (rmcp's) over the real binary's stdin/stdout, with
//! real processes: every test has its own state dir, and its guards kill what it spawned by
//! recorded pid (the server too).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Guard, SECS, State, alive, wait_gone};
use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

/// A running `sheepdog mcp` and the client talking to it.
struct Server {
    client: Option<RunningService<RoleClient, ()>>,
    child: tokio::process::Child,
    /// The pid of the server (or of the owner that runs it, see [`Server::spawn_via`]).
    pid: i32,
}

fn server_cmd(state: &State, program: &str, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env("SHEEPDOG_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(false);
    cmd
}

impl Server {
    /// `sheepdog mcp ARGS` as a child of this test (its owner), connected with rmcp's client.
    async fn spawn(state: &State, guard: &Guard, args: &[&str]) -> Server {
        let mut a = vec!["mcp"];
        a.extend_from_slice(args);
        Server::spawn_via(state, guard, common::bin(), &a, ClientLifecycleMode::Initialize).await
    }

    /// Runs `program args` (the server, or something that runs it with our pipes) and connects.
    async fn spawn_via(
        state: &State,
        guard: &Guard,
        program: &str,
        args: &[&str],
        lifecycle: ClientLifecycleMode,
    ) -> Server {
        let mut child = server_cmd(state, program, args).spawn().expect("spawn the server");
        let pid = child.id().expect("pid") as i32;
        guard.track(pid);
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let client = ().serve_with_lifecycle((stdout, stdin), lifecycle).await.expect("initialize");
        Server { client: Some(client), child, pid }
    }

    fn client(&self) -> &RunningService<RoleClient, ()> {
        self.client.as_ref().unwrap()
    }

    /// Calls a tool; a protocol error fails the test.
    async fn call(&self, name: &'static str, args: Value) -> CallToolResult {
        let Value::Object(m) = args else { panic!("arguments must be an object") };
        self.client()
            .call_tool(CallToolRequestParams::new(name).with_arguments(m))
            .await
            .unwrap_or_else(|e| panic!("{name}: protocol error: {e}"))
    }

    /// Calls a tool that must succeed; returns its structured content.
    async fn ok(&self, name: &'static str, args: Value) -> Value {
        let r = self.call(name, args.clone()).await;
        assert_ne!(r.is_error, Some(true), "{name} {args} failed: {}", text(&r));
        r.structured_content.clone().expect("structuredContent")
    }

    /// Closes the client's side (stdin EOF) and waits for the server to exit.
    async fn close(mut self) -> std::process::ExitStatus {
        if let Some(c) = self.client.take() {
            let _ = c.cancel().await;
        }
        tokio::time::timeout(SECS(10), self.child.wait()).await.expect("the server exits on stdin EOF").unwrap()
    }
}

/// Tracks the children of `pid` (the server under an owner or a launcher), so they are killed
/// by recorded pid if the test fails.
fn track_children(guard: &Guard, pid: i32) {
    for c in sheepdog::os::procfs::children(common::pid(pid)) {
        guard.track(c.as_raw());
    }
}

fn text(r: &CallToolResult) -> String {
    r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone()).unwrap_or_default()
}

/// A TCP port nobody listens on (for a dev server).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits until the registry records `id` as finished.
fn wait_finished(state: &State, id: &str) -> Value {
    let end = Instant::now() + SECS(20);
    loop {
        let e = state.entry(id);
        if !matches!(e["status"].as_str(), Some("running" | "starting")) {
            return e;
        }
        assert!(Instant::now() < end, "{id} never finished: {e}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn news_ids(v: &Value) -> Vec<String> {
    v["finished"].as_array().unwrap().iter().map(|f| f["id"].as_str().unwrap().to_string()).collect()
}

const TOOLS: [&str; 9] = [
    "process_clear",
    "process_list",
    "process_logs",
    "process_restart",
    "process_start",
    "process_stop",
    "process_update",
    "process_wait",
    "process_write",
];

#[tokio::test]
async fn initialize_lists_the_tools_with_schemas() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let info = s.client().peer_info().expect("server info");
    let server = info.server_info.clone().expect("serverInfo");
    assert_eq!(server.name, "sheepdog");
    assert_eq!(server.version, env!("CARGO_PKG_VERSION"));
    let instructions = info.instructions.clone().unwrap_or_default();
    assert!(instructions.contains("process_start") && instructions.contains("process_wait"), "{instructions}");
    assert!(instructions.contains("nohup") && instructions.contains("sleep"), "{instructions}");

    let tools = s.client().list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(names, TOOLS);
    for t in &tools {
        assert!(t.description.as_ref().is_some_and(|d| !d.is_empty()), "{} has no description", t.name);
        let out = t.output_schema.as_ref().unwrap_or_else(|| panic!("{} has no outputSchema", t.name));
        assert_eq!(out["type"], "object", "{}", t.name);
        assert!(out["properties"]["finished"].is_object(), "{}: no `finished` in {:?}", t.name, out);
        assert_eq!(t.input_schema["type"], "object");
    }
    let start = tools.iter().find(|t| t.name == "process_start").unwrap();
    let props = start.input_schema["properties"].as_object().unwrap();
    for k in
        ["command", "argv", "name", "cwd", "env", "session", "timeoutMs", "cleanup", "ready", "keep", "logMax", "stdin"]
    {
        assert!(props.contains_key(k), "process_start has no `{k}`: {props:?}");
        let described = serde_json::to_string(&props[k]).unwrap().contains("description");
        assert!(described, "process_start `{k}` has no description");
    }
    let schema = serde_json::to_string(&start.input_schema).unwrap();
    assert!(schema.contains("logPattern") && schema.contains("timeoutMs"), "{schema}");
    let logs = tools.iter().find(|t| t.name == "process_logs").unwrap();
    for k in ["id", "stream", "tail", "grep", "cursor", "maxBytes"] {
        assert!(logs.input_schema["properties"].get(k).is_some(), "process_logs has no `{k}`");
    }
    let stop_out =
        serde_json::to_string(&tools.iter().find(|t| t.name == "process_stop").unwrap().output_schema).unwrap();
    assert!(stop_out.contains("lines") && stop_out.contains("treeGone"), "{stop_out}");
    s.close().await;
}

#[tokio::test]
async fn the_2026_discover_era_is_served_too() {
    let (state, guard) = (State::new(), Guard::new());
    let lifecycle = ClientLifecycleMode::Discover { preferred_versions: vec![ProtocolVersion::V_2026_07_28] };
    let s = Server::spawn_via(&state, &guard, common::bin(), &["mcp"], lifecycle).await;
    let tools = s.client().list_all_tools().await.unwrap();
    assert_eq!(tools.len(), TOOLS.len());
    let v = s.ok("process_list", json!({})).await;
    assert_eq!(v["entries"], json!([]));
    s.close().await;
}

#[tokio::test]
async fn a_dev_server_starts_ready_is_reached_and_logs_its_request() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let port = free_port();
    let v = s
        .ok(
            "process_start",
            json!({
                "argv": ["python3", "-u", "-m", "http.server", port.to_string(), "--bind", "127.0.0.1"],
                "name": "web",
                "ready": {"port": port, "timeoutMs": 20000},
            }),
        )
        .await;
    assert_eq!(v["ready"]["ok"], true, "{v}");
    assert_eq!(v["status"], "running");
    assert_eq!(v["name"], "web");
    assert!(v["ports"].as_array().unwrap().contains(&json!(port)), "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // Reachable right away: readiness meant the port listens.
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("the dev server accepts");
    conn.write_all(b"GET /hello HTTP/1.0\r\n\r\n").unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.0 404") || reply.starts_with("HTTP/1.0 200"), "{reply}");

    let end = Instant::now() + SECS(10);
    let logs = loop {
        let l = s.ok("process_logs", json!({"id": "web", "grep": "GET /hello"})).await;
        if l["text"].as_str().unwrap().contains("GET /hello") || Instant::now() > end {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(logs["text"].as_str().unwrap().contains("[err] "), "{logs}");
    assert_eq!(logs["status"], "running");
    let list = s.ok("process_list", json!({})).await;
    assert_eq!(list["entries"][0]["id"], id.as_str());
    let stop = s.ok("process_stop", json!({"id": id})).await;
    assert_eq!(stop["stopped"][0]["lines"], json!([format!("Stopped web ({id}).")]));
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} still accepts");
    s.close().await;
}

/// A sentence with its times and labels made alike: `Ready after 312ms` and `after 1.4s` become
/// `after T`, `web (proc_2)` becomes `X`.
fn alike(sentence: &str, label: &str) -> String {
    let s = sentence.replace(label, "X");
    let Some(at) = s.find("after ") else { return s };
    let rest = &s[at + 6..];
    let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'm' || c == 's')).unwrap_or(rest.len());
    format!("{}after T{}", &s[..at], &rest[end..])
}

/// The CLI and the server say the library's one sentence for the same readiness
/// (`ReadyOutcome::sentence`): ready on a port, and ended before it was ready.
#[tokio::test]
async fn the_cli_and_the_server_say_the_same_sentence_for_the_same_readiness() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let serve = |port: u16| {
        vec![
            "python3".to_string(),
            "-u".into(),
            "-m".into(),
            "http.server".into(),
            port.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
        ]
    };

    let port = free_port();
    let mut args = vec![
        "start".to_string(),
        "--name".into(),
        "cli-web".into(),
        "--ready-port".into(),
        port.to_string(),
        "--".into(),
    ];
    args.extend(serve(port));
    let out = state.run(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let cli_said = String::from_utf8_lossy(&out.stdout).lines().nth(1).unwrap_or_default().to_string();

    let port2 = free_port();
    let r = s.call("process_start", json!({"argv": serve(port2), "name": "mcp-web", "ready": {"port": port2}})).await;
    let mcp_text = text(&r);
    let mcp_said = mcp_text.lines().nth(1).unwrap_or_default().replace(&port2.to_string(), &port.to_string());
    assert!(cli_said.starts_with("Ready after "), "{cli_said}");
    assert_eq!(alike(&mcp_said, "mcp-web"), alike(&cli_said, "cli-web"), "{mcp_text}");

    let out =
        state.run(&["start", "--name", "cli-early", "--ready-log", "never", "--", "sh", "-c", "echo bye; exit 3"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    let cli_said = err.lines().next().unwrap_or_default().trim_start_matches("sheepdog: ").to_string();
    let r = s
        .call(
            "process_start",
            json!({"argv": ["sh", "-c", "echo bye; exit 3"], "name": "mcp-early", "ready": {"logPattern": "never"}}),
        )
        .await;
    let mcp_said = text(&r).lines().nth(1).unwrap_or_default().to_string();
    let sentence = |line: &str| line.split(" Its last").next().unwrap_or_default().to_string();
    assert!(cli_said.contains("exited (3) before it was ready."), "{err}");
    assert_eq!(
        alike(&sentence(&mcp_said), "mcp-early (proc_4)"),
        alike(&sentence(&cli_said), "cli-early (proc_3)"),
        "{}",
        text(&r)
    );
    s.close().await;
}

/// `sheepdog wait` for several entries and `process_wait` say the library's one sentence for
/// each entry (`manager::waited_line`).
#[tokio::test]
async fn the_cli_and_the_server_say_the_same_sentence_for_each_entry_waited_for() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let a = state.start(&["--name", "three", "--", "sh", "-c", "exit 3"])["id"].as_str().unwrap().to_string();
    let b = state.start(&["--name", "zero", "--", "true"])["id"].as_str().unwrap().to_string();
    let out = state.run(&["wait", &a, &b]);
    let cli: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(cli, vec![format!("three ({a}): exited (3)."), format!("zero ({b}): exited (0).")], "{out:?}");
    let r = s.call("process_wait", json!({"ids": [a, b]})).await;
    let said: Vec<String> = text(&r).lines().filter(|l| !l.starts_with(' ')).map(str::to_string).collect();
    assert_eq!(said, cli, "{}", text(&r));
    s.close().await;
}

/// A wait that runs out of time is said alike too (`manager::Said` of the wait): a line per
/// entry, the one still running among them, then which ones still run and that nothing was
/// stopped; the CLI says that last sentence on stderr.
#[tokio::test]
async fn the_cli_and_the_server_say_the_same_sentences_when_a_wait_runs_out_of_time() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let a = state.start(&["--name", "zero", "--", "true"])["id"].as_str().unwrap().to_string();
    let v = state.start(&["--name", "slow", "--", "sleep", "100"]);
    guard.track(v["supervisorPid"].as_i64().unwrap() as i32);
    let b = v["id"].as_str().unwrap().to_string();
    let out = state.run(&["wait", &a, &b, "--timeout", "300ms"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let mut cli: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    let warned: Vec<String> = String::from_utf8_lossy(&out.stderr).lines().map(str::to_string).collect();
    let still = format!("slow ({b}): still running after 300ms; nothing was stopped.");
    assert_eq!(cli, vec![format!("zero ({a}): exited (0)."), format!("slow ({b}): still running.")], "{out:?}");
    assert_eq!(warned, vec![format!("sheepdog: wait: {still}")], "{out:?}");
    let r = s.call("process_wait", json!({"ids": [a, b], "timeoutMs": 300})).await;
    // Its last lines (indented) and the call to make next are the server's own.
    let said: Vec<String> =
        text(&r).lines().filter(|l| !l.starts_with(' ') && !l.starts_with("Next: ")).map(str::to_string).collect();
    cli.push(still);
    assert_eq!(said, cli, "{}", text(&r));
    let _ = state.run(&["stop", &b]);
    s.close().await;
}

#[tokio::test]
async fn logs_with_a_cursor_across_rotations_have_no_duplicates_and_no_gaps() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    // 600 numbered lines of 20 bytes into a 1 KiB log: a rotation every ~50 lines. A reader two
    // rotations behind loses the file in between by design (the log is capped), so the writer is
    // paced by the reader: it prints 40 lines (800 bytes, at most one rotation) and then waits
    // for the reader to have seen them. Under any load the reader is at most one rotation
    // behind, and every lost or repeated line is the cursor's fault. (Paced by the clock, a
    // stall of this client on a loaded CI machine lost two rotations' lines.)
    let gate = tempfile::tempdir().unwrap();
    let script = "import os,sys,time\nfor i in range(600):\n    while i and i % 40 == 0 and not os.path.exists(os.path.join(sys.argv[1], str(i))): time.sleep(0.002)\n    print('line %014d' % i, flush=True)";
    let argv = json!(["python3", "-c", script, gate.path()]);
    let v = s.ok("process_start", json!({"argv": argv, "logMax": 1024})).await;
    let id = v["id"].as_str().unwrap().to_string();
    let mut cursor: Option<String> = None;
    let mut seen: Vec<u64> = Vec::new();
    let end = Instant::now() + SECS(60);
    loop {
        let mut args = json!({"id": id, "stream": "out", "maxBytes": 200});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let l = s.ok("process_logs", args).await;
        // A rotated file starts with sheepdog's marker line; the rest is the command's.
        for line in l["text"].as_str().unwrap().lines().filter(|l| !l.starts_with("[sheepdog] ")) {
            let n = line.strip_prefix("line ").unwrap_or_else(|| panic!("not a line of ours: {line:?}"));
            seen.push(n.parse().unwrap());
        }
        cursor = Some(l["cursor"].as_str().unwrap().to_string());
        if l["eof"] == true {
            break;
        }
        // Open the gate of the batch after the last line seen (a gap then shows as a wrong list
        // below, not as a writer waiting forever).
        let next = seen.last().map_or(0, |n| n + 1);
        std::fs::write(gate.path().join(next.to_string()), "").unwrap();
        assert!(Instant::now() < end, "no eof; read {} lines", seen.len());
    }
    assert_eq!(seen, (0..600).collect::<Vec<u64>>(), "lines lost or repeated");
    assert!(state.path().join("procs").join(&id).join("stdout.log.1").exists(), "the log never rotated");
    s.close().await;
}

/// Reads a log the way a model does: `first`, then the call each reply's `next` names (with its
/// `cursor`), until `eof`. Returns
/// the numbers of the command's lines (`[out] N`) and the number of calls; every reply stays
/// within `max` bytes of text, and every reply before the last is a page that says, in
/// `truncated` and `next`, that the rest follows its cursor.
async fn walk(s: &Server, id: &str, first: Value, max: usize) -> (Vec<u64>, usize) {
    let (mut args, mut seen, mut calls) = (first, Vec::new(), 0);
    loop {
        let l = s.ok("process_logs", args.clone()).await;
        calls += 1;
        let text = l["text"].as_str().unwrap();
        assert!(text.len() <= max, "call {calls}: {} bytes", text.len());
        for line in text.lines() {
            match line.strip_prefix("[out] ") {
                Some(n) => seen.push(n.parse().unwrap_or_else(|_| panic!("not a line of ours: {line:?}"))),
                None => assert!(line.starts_with("[sheepdog] "), "{line:?}"),
            }
        }
        if l["eof"] == true {
            assert_eq!(l.get("next"), None, "{l}");
            return (seen, calls);
        }
        assert_eq!(l["truncated"], true, "a page cut short says so: {l}");
        // The call `next` names, as a model makes it: `process_logs {ARGS} for the rest`.
        let next = l["next"].as_str().unwrap_or_else(|| panic!("no next: {l}"));
        let call = next.strip_prefix("process_logs ").unwrap_or_else(|| panic!("next: {next:?}"));
        args = serde_json::Deserializer::from_str(call).into_iter::<Value>().next().unwrap().unwrap();
        assert_eq!((&args["id"], &args["cursor"]), (&json!(id), &l["cursor"]), "next: {next:?}");
        assert!(calls < 1000, "no end");
    }
}

/// Issue 31, item 4: the default read of a 20 000-line log is its last 16 KiB, and its `next`
/// says how to read from the start; `from: "start"` and then each `cursor` walk the whole log in
/// 16 KiB replies, every line exactly once. Across a rotation, the walk starts at the oldest
/// file kept (`.1`) and is whole from there.
#[tokio::test]
async fn process_logs_walks_a_20000_line_log_from_the_start_in_bounded_calls() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "seq 1 20000", "name": "count"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    wait_finished(&state, &id);
    let tail = s.ok("process_logs", json!({"id": "count"})).await;
    assert_eq!(tail["truncated"], true, "{tail}");
    let last = tail["text"].as_str().unwrap();
    assert!(last.contains("[out] 20000\n") && last.len() <= 16 * 1024, "{last}");
    let next = tail["next"].as_str().unwrap_or_else(|| panic!("no next: {tail}"));
    let from_start = json!({"id": id, "from": "start"}).to_string();
    assert!(next.contains(&from_start), "next {next:?} does not say {from_start}");

    let (seen, calls) = walk(&s, &id, json!({"id": id, "from": "start"}), 16 * 1024).await;
    assert_eq!(seen, (1..=20000).collect::<Vec<u64>>(), "lines lost or repeated");
    // Bounded: as many calls as 16 KiB pages of the log, and one more at most.
    let size = std::fs::metadata(state.path().join("procs").join(&id).join("combined.log")).unwrap().len() as usize;
    assert!(calls <= size.div_ceil(16 * 1024 - 16) + 1, "{calls} calls for {size} bytes");

    // With a page size of its own, and a log that rotated: from `.1` on, whole.
    let v = s.ok("process_start", json!({"command": "seq 1 5000", "logMax": 8192})).await;
    let id = v["id"].as_str().unwrap().to_string();
    wait_finished(&state, &id);
    assert!(state.path().join("procs").join(&id).join("combined.log.1").exists(), "the log never rotated");
    let (seen, _) = walk(&s, &id, json!({"id": id, "from": "start", "maxBytes": 1000}), 1000).await;
    let first = *seen.first().unwrap();
    assert!(first > 1, "the first lines rotated away, {first} is the first kept");
    assert_eq!(seen, (first..=5000).collect::<Vec<u64>>(), "lines lost or repeated after {first}");

    for (args, needle) in [
        (json!({"id": id, "from": "start", "cursor": "1:0"}), "`from` and `cursor` do not go together"),
        (json!({"id": id, "from": "start", "tail": 5}), "`tail` reads the last lines"),
        (json!({"id": id, "from": "middle"}), "Unknown `from` 'middle': use start or end."),
    ] {
        let r = s.call("process_logs", args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{args}: {}", text(&r));
        assert!(text(&r).contains(needle), "{args}: {}", text(&r));
    }
    s.close().await;
}

#[tokio::test]
async fn stop_prints_the_exact_lines_with_a_failed_cleanup() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s
        .ok(
            "process_start",
            json!({"command": "tail -f /dev/null", "name": "worker-tail", "cleanup": {"command": "echo undoing; exit 1"}}),
        )
        .await;
    let id = v["id"].as_str().unwrap().to_string();
    let pid = v["pid"].as_i64().unwrap() as i32;
    let r = s.call("process_stop", json!({"name": "worker-tail"})).await;
    assert_eq!(r.is_error, Some(true), "a failed cleanup is an error: {}", text(&r));
    let sc = r.structured_content.clone().unwrap();
    let lines = json!([format!("Stopped worker-tail ({id})."), "Cleanup command failed with exit code 1."]);
    assert_eq!(sc["stopped"][0]["lines"], lines);
    assert!(text(&r).starts_with(&format!("Stopped worker-tail ({id}).\nCleanup command failed with exit code 1.")));
    assert_eq!(sc["stopped"][0]["cleanupResult"]["exitCode"], 1);
    assert_eq!(sc["stopped"][0]["cleanupResult"]["output"], json!(["undoing"]));
    assert_eq!(sc["stopped"][0]["cleanupError"], "Cleanup command failed with exit code 1.");
    assert!(text(&r).contains("undoing"), "the cleanup's output tail is shown: {}", text(&r));
    assert!(wait_gone(&[pid], SECS(5)).is_empty());

    // A cleanup that outlives its bound: the other exact line.
    let v = s
        .ok(
            "process_start",
            json!({"command": "sleep 100", "name": "slow", "cleanup": {"command": "sleep 100", "timeoutMs": 1000}}),
        )
        .await;
    let id = v["id"].as_str().unwrap().to_string();
    let r = s.call("process_stop", json!({"id": id})).await;
    assert_eq!(r.is_error, Some(true));
    let lines = json!([format!("Stopped slow ({id})."), "Cleanup command timed out after 1s."]);
    assert_eq!(r.structured_content.unwrap()["stopped"][0]["lines"], lines);
    s.close().await;
}

#[tokio::test]
async fn update_attaches_and_removes_a_cleanup_with_null() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let marker = state.path().join("cleanup-ran");
    let cleanup = format!("touch {}", marker.display());
    let v = s.ok("process_start", json!({"command": "sleep 100", "cleanup": {"command": cleanup}})).await;
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["cleanup"], cleanup.as_str());
    let u = s.ok("process_update", json!({"id": id, "cleanup": null})).await;
    assert!(u.get("cleanup").is_none(), "{u}");
    let stop = s.ok("process_stop", json!({"id": id})).await;
    assert_eq!(stop["stopped"][0]["lines"], json!([format!("Stopped sleep ({id}).")]));
    assert!(!marker.exists(), "a removed cleanup ran");

    // Attached after start, it runs at the stop.
    let v = s.ok("process_start", json!({"command": "sleep 100", "name": "later"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    let u = s.ok("process_update", json!({"id": "later", "cleanup": {"command": cleanup, "timeoutMs": 5000}})).await;
    assert_eq!(u["cleanup"], cleanup.as_str());
    assert_eq!(state.entry(&id)["cleanup"], json!({"command": cleanup, "timeoutMs": 5000}));
    s.ok("process_stop", json!({"id": id})).await;
    assert!(marker.exists(), "the attached cleanup did not run");
    // After the cleanup ran, a change is refused with a sentence.
    let r = s.call("process_update", json!({"id": id, "cleanup": null})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("has already run"), "{}", text(&r));
    s.close().await;
}

#[tokio::test]
async fn finished_is_reported_once_also_after_a_server_restart() {
    let (state, guard) = (State::new(), Guard::new());
    let a = Server::spawn(&state, &guard, &[]).await;
    let v = a.ok("process_start", json!({"command": "sleep 0.3; echo bye; exit 3", "name": "quick"})).await;
    let quick = v["id"].as_str().unwrap().to_string();
    wait_finished(&state, &quick);
    let l = a.ok("process_list", json!({})).await;
    assert_eq!(news_ids(&l), vec![quick.clone()], "{l}");
    let f = &l["finished"][0];
    assert_eq!(f["status"], "exited");
    assert_eq!(f["exitCode"], 3);
    assert!(f["lastLines"].as_array().unwrap().contains(&json!("[out] bye")), "{f}");
    let l = a.ok("process_list", json!({})).await;
    assert!(news_ids(&l).is_empty(), "reported twice: {l}");

    // One that finishes while no server runs is reported by the next one, once.
    let v = a.ok("process_start", json!({"command": "sleep 0.5; exit 4", "name": "while-away"})).await;
    let away = v["id"].as_str().unwrap().to_string();
    a.close().await;
    wait_finished(&state, &away);
    let b = Server::spawn(&state, &guard, &[]).await;
    let l = b.ok("process_list", json!({"all": true})).await;
    assert_eq!(news_ids(&l), vec![away.clone()], "{l}");
    assert_eq!(l["finished"][0]["exitCode"], 4);
    b.close().await;
    let c = Server::spawn(&state, &guard, &[]).await;
    let l = c.ok("process_list", json!({"all": true})).await;
    assert!(news_ids(&l).is_empty(), "a restarted server repeated the news: {l}");
    assert_eq!(l["entries"].as_array().unwrap().len(), 2, "{l}");
    c.close().await;
}

#[tokio::test]
async fn start_warns_like_the_cli_when_work_may_outlive_the_tree() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    // Not installed here: the command fails at once, which does not matter to the nudge.
    let r = s.call("process_start", json!({"command": "docker run -d nginx"})).await;
    let v = r.structured_content.clone().unwrap();
    let w = v["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{v}");
    assert_eq!(w[0]["kind"], "outsideTree", "{v}");
    assert!(w[0]["matched"].as_str().unwrap().contains("docker run -d"), "{v}");
    assert!(text(&r).contains("Warning: "), "{}", text(&r));
    let v = s.ok("process_start", json!({"command": "sleep 100 &", "cleanup": {"command": "true"}})).await;
    assert!(v.get("warnings").is_none(), "a cleanup silences the nudge: {v}");
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
}

#[tokio::test]
async fn a_stop_is_not_repeated_as_news() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "sleep 100"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    let stop = s.ok("process_stop", json!({"id": id})).await;
    assert!(news_ids(&stop).is_empty(), "{stop}");
    let l = s.ok("process_list", json!({})).await;
    assert!(news_ids(&l).is_empty(), "{l}");
    s.close().await;
}

#[tokio::test]
async fn the_agent_sigkilled_stops_the_tree_and_runs_the_cleanup() {
    let (state, guard) = (State::new(), Guard::new());
    // The agent: a python process that runs the server with our pipes as its stdio and waits.
    let agent = "import subprocess,sys\nsys.exit(subprocess.call(sys.argv[1:]))";
    let bin = common::bin();
    let s =
        Server::spawn_via(&state, &guard, "python3", &["-c", agent, bin, "mcp"], ClientLifecycleMode::Initialize).await;
    let agent_pid = s.pid;
    track_children(&guard, agent_pid);
    let marker = state.path().join("cleaned");
    let v = s
        .ok(
            "process_start",
            json!({
                "command": "sleep 100 & setsid sleep 100 & echo tree-is-up; wait",
                "name": "tree",
                "cleanup": {"command": format!("touch {}", marker.display())},
            }),
        )
        .await;
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(state.entry(&id)["ownerPid"], agent_pid, "the owner is the agent, the server's parent: {v}");
    // Both background jobs are forked before the echo runs.
    state.wait_log(&id, "combined.log", "[out] tree-is-up");
    let tree = state.tree_pids(&id);
    assert!(tree.len() >= 3, "{tree:?}");
    common::signal(agent_pid, libc::SIGKILL);
    let t0 = Instant::now();
    // The stop bound: maxStop (4.5 s) plus the cleanup, with a generous margin.
    let left = wait_gone(&tree, SECS(20));
    assert!(left.is_empty(), "still alive after the agent died: {left:?}");
    let end = Instant::now() + SECS(20);
    while !marker.exists() {
        assert!(Instant::now() < end, "the cleanup never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("tree and cleanup gone {:?} after the agent's death", t0.elapsed());
    let e = wait_finished(&state, &id);
    assert_eq!(e["status"], "stopped", "{e}");
    assert_eq!(e["stopReason"], "owner", "{e}");
    let mut s = s;
    let _ = s.child.wait().await;
    // The server itself (the agent's child) is reaped by init; closing our pipes ends it.
    drop(s.client.take());
}

#[tokio::test]
async fn a_restarted_server_lists_the_processes_that_keep_running() {
    let (state, guard) = (State::new(), Guard::new());
    let a = Server::spawn(&state, &guard, &[]).await;
    let v = a.ok("process_start", json!({"command": "sleep 100", "name": "keeper"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    let pid = v["pid"].as_i64().unwrap() as i32;
    let session = v["session"].as_str().unwrap().to_string();
    let status = a.close().await;
    assert!(status.success(), "{status:?}");
    assert!(alive(pid), "the server's exit stopped a process");
    let b = Server::spawn(&state, &guard, &[]).await;
    let l = b.ok("process_list", json!({})).await;
    assert_eq!(l["entries"][0]["id"], id.as_str(), "{l}");
    assert_eq!(l["entries"][0]["status"], "running");
    assert_eq!(l["entries"][0]["session"], session.as_str(), "the same agent, the same session");
    b.ok("process_stop", json!({"id": "keeper"})).await;
    assert!(!alive(pid));
    b.close().await;
}

#[tokio::test]
async fn stdin_eof_ends_the_server_at_once() {
    let (state, guard) = (State::new(), Guard::new());
    let mut child = std::process::Command::new(common::bin())
        .arg("mcp")
        .env("SHEEPDOG_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(line.contains("\"serverInfo\""), "{line}");
    drop(stdin);
    let t0 = Instant::now();
    let status = common::wait_child(&mut child, SECS(5));
    assert!(status.success(), "{status:?}");
    eprintln!("exited {:?} after stdin EOF", t0.elapsed());
}

#[tokio::test]
async fn malformed_messages_get_protocol_errors_and_the_server_keeps_serving() {
    let (state, guard) = (State::new(), Guard::new());
    let mut child = std::process::Command::new(common::bin())
        .arg("mcp")
        .env("SHEEPDOG_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut stdin = child.stdin.take().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut next = || {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    assert_eq!(next()["id"], 1);
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    writeln!(stdin, "this is not json {{").unwrap();
    let e = next();
    assert_eq!(e["error"]["code"], -32700, "{e}");
    assert_eq!(e["id"], Value::Null);
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 7, "nonsense": true})).unwrap();
    let e = next();
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert_eq!(e["id"], 7);
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).unwrap();
    let r = next();
    assert_eq!(r["id"], 2);
    assert_eq!(r["result"]["tools"].as_array().unwrap().len(), TOOLS.len());
    // Arguments of the wrong type are a tool error (a sentence naming the field), not a
    // protocol error.
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "process_logs", "arguments": {"id": "proc_1", "tail": "ten"}}});
    writeln!(stdin, "{call}").unwrap();
    let r = next();
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(r["result"]["content"][0]["text"], "`tail` must be a whole number ≥ 0.", "{r}");
    // `arguments` that is not an object: Invalid params, not "method not found".
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
        "params": {"name": "process_list", "arguments": "all"}});
    writeln!(stdin, "{call}").unwrap();
    let r = next();
    assert_eq!(r["id"], 4, "{r}");
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("`arguments` must be an object"), "{r}");
    drop(stdin);
    common::wait_child(&mut child, SECS(5));
}

#[tokio::test]
async fn bad_input_is_a_tool_error_with_one_sentence() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let cases = [
        ("process_start", json!({"command": "true", "argv": ["true"]}), "not both"),
        ("process_start", json!({}), "Give `command`"),
        (
            "process_start",
            json!({"command": "sleep 1", "ready": {"logPattern": "("}}),
            "not a valid regular expression",
        ),
        ("process_start", json!({"command": "sleep 1", "name": "proc_9"}), "reserved for ids"),
        ("process_start", json!({"comand": "sleep 1"}), "unknown field"),
        ("process_start", json!({"command": "true", "cwd": "/no/such/dir"}), "is not a directory"),
        ("process_start", json!({"command": "true", "env": {"A=B": "c"}}), "is not a variable name"),
        ("process_start", json!({"argv": ["/no/such/program"]}), "/no/such/program"),
        ("process_logs", json!({"id": "proc_404"}), "No entry with id or name 'proc_404'."),
        ("process_logs", json!({"id": "x", "grep": "("}), "not a valid regular expression"),
        ("process_stop", json!({"id": "nope"}), "No entry with id or name 'nope'."),
        ("process_stop", json!({}), "exactly one"),
        ("process_wait", json!({"ids": ["nope"]}), "No entry"),
        ("process_update", json!({"id": "nope", "name": "x"}), "No entry"),
        ("process_list", json!({"status": "sleeping"}), "Unknown status"),
        ("process_clear", json!({}), "Give `ids`"),
        // Plain words that name the field, no Rust type names.
        ("process_logs", json!({"id": "x", "tail": -1}), "`tail` must be a whole number ≥ 0."),
        ("process_start", json!({"command": "true", "cleanup": {}}), "`cleanup.command` is required."),
        ("process_start", json!({"command": "true", "env": {"A": 1}}), "`env.A` must be a string."),
        ("process_start", json!({"command": "true", "keep": "yes"}), "`keep` must be true or false."),
        ("process_start", json!({"command": "true", "stdin": "tty"}), "`stdin` must be one of null, pipe"),
        ("process_start", json!({"command": "x".repeat(200_000)}), "command too long: 200000 bytes (at most 131071)."),
        ("process_write", json!({"id": "nope", "input": "y\n"}), "No entry"),
    ];
    for (tool, args, needle) in cases {
        let r = s.call(tool, args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{tool} {args}: {}", text(&r));
        let t = text(&r);
        assert!(t.contains(needle), "{tool} {args}: {t:?} lacks {needle:?}");
        assert_eq!(t.lines().count(), 1, "one sentence: {t:?}");
        for rust in ["usize", "u64", "u16", "struct ", "a map", "a sequence", "os error"] {
            assert!(!t.contains(rust), "{tool} {args}: a Rust word {rust:?} in {t:?}");
        }
    }
    // Still serving.
    s.ok("process_list", json!({})).await;
    s.close().await;
}

#[tokio::test]
async fn managed_processes_never_hold_the_servers_stdio() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "sleep 100"})).await;
    let pid = v["pid"].as_i64().unwrap() as i32;
    let sup = state.entry(v["id"].as_str().unwrap())["supervisorPid"].as_i64().unwrap() as i32;
    // Supervisors are the small `sheepdog` binary, never the server with its runtime.
    let exe = std::fs::read_link(format!("/proc/{sup}/exe")).unwrap();
    assert_eq!(exe.file_name().unwrap(), "sheepdog", "{exe:?}");
    let link = |p: i32, fd: u32| std::fs::read_link(format!("/proc/{p}/fd/{fd}")).ok();
    let channel = [link(s.pid, 0).unwrap(), link(s.pid, 1).unwrap()];
    for p in [pid, sup] {
        for fd in std::fs::read_dir(format!("/proc/{p}/fd")).unwrap().flatten() {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            assert!(
                !channel.contains(&target),
                "pid {p} holds the protocol channel {target:?} as fd {:?}",
                fd.file_name()
            );
        }
    }
    s.close().await;
}

#[tokio::test]
async fn the_owner_is_found_through_a_launcher_and_keep_means_none() {
    let (state, guard) = (State::new(), Guard::new());
    // `sh -c "...; true"` stays between us and the server: a launcher, looked through.
    let script = format!("'{}' mcp; true", common::bin());
    let s = Server::spawn_via(&state, &guard, "sh", &["-c", &script], ClientLifecycleMode::Initialize).await;
    track_children(&guard, s.pid);
    let v = s.ok("process_start", json!({"command": "sleep 100", "verbose": true})).await;
    assert_eq!(v["details"]["ownerPid"], std::process::id(), "{v}");
    let session = v["session"].as_str().unwrap().to_string();
    let k = s.ok("process_start", json!({"command": "sleep 100", "keep": true, "verbose": true})).await;
    assert_eq!(k["details"]["ownerPid"], Value::Null, "{k}");
    assert_eq!(k["session"], session.as_str());
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;

    // --owner overrides.
    let mut owner = guard.sleeper();
    let s = Server::spawn(&state, &guard, &["--owner", &owner.id().to_string()]).await;
    let v = s.ok("process_start", json!({"command": "sleep 100", "verbose": true})).await;
    assert_eq!(v["details"]["ownerPid"], owner.id(), "{v}");
    assert_ne!(v["session"].as_str().unwrap(), session);
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
    let _ = owner.kill();
    let _ = owner.wait();
}

#[tokio::test]
async fn wait_reports_done_or_still_running_and_never_kills() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let quick = s.ok("process_start", json!({"command": "sleep 0.3; echo out; exit 2"})).await;
    let slow = s.ok("process_start", json!({"command": "sleep 100", "name": "slow"})).await;
    let (q, w) = (quick["id"].as_str().unwrap(), slow["id"].as_str().unwrap());
    let r = s.ok("process_wait", json!({"ids": [q, w], "any": true, "timeoutMs": 20000})).await;
    assert_eq!(r["done"], true, "{r}");
    assert_eq!(r["waited"][0]["done"], true);
    assert_eq!(r["waited"][0]["exitCode"], 2);
    assert_eq!(r["waited"][0]["lastLines"], json!(["[out] out"]));
    assert_eq!(r["waited"][1]["done"], false);
    assert!(news_ids(&r).is_empty(), "the wait itself told it: {r}");
    let r = s.ok("process_wait", json!({"ids": ["slow"], "timeoutMs": 300})).await;
    assert_eq!(r["done"], false);
    assert_eq!(r["waited"][0]["status"], "running");
    assert!(alive(slow["pid"].as_i64().unwrap() as i32), "a wait killed it");
    // Clearing a running process is refused with the CLI's sentence; a finished one goes.
    let c = s.call("process_clear", json!({"ids": ["slow", q]})).await;
    assert_eq!(c.is_error, Some(true), "{}", text(&c));
    let sc = c.structured_content.unwrap();
    assert_eq!(sc["cleared"].as_array().unwrap().len(), 1, "{sc}");
    assert_eq!(sc["cleared"][0]["id"], q, "{sc}");
    assert_eq!(sc["refused"][0]["id"], w);
    assert!(sc["refused"][0]["message"].as_str().unwrap().contains("is running; stop it first"), "{sc}");
    // Restart: the old tree gone, a new id running the same command.
    let r = s.ok("process_restart", json!({"name": "slow"})).await;
    assert_eq!(r["replaced"], w);
    assert_ne!(r["id"], w);
    assert_eq!(r["status"], "running");
    assert!(wait_gone(&[slow["pid"].as_i64().unwrap() as i32], SECS(2)).is_empty());
    s.ok("process_stop", json!({"all": true})).await;
    let c = s.ok("process_clear", json!({"finished": true})).await;
    assert_eq!(c["cleared"].as_array().unwrap().len(), 2, "{c}");
    s.close().await;
}

/// Regression (found by benches/mcp.rs): rmcp selects over the transport's `receive`, so a read
/// cancelled halfway must keep what it read. A request that arrives in two pieces, right after
/// the previous reply (when rmcp's send task completes and wins the select), is answered.
#[tokio::test]
async fn requests_split_across_reads_are_all_answered() {
    let (state, guard) = (State::new(), Guard::new());
    let mut child = std::process::Command::new(common::bin())
        .arg("mcp")
        .env("SHEEPDOG_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut stdin = child.stdin.take().unwrap();
    let lines = common::Lines::new(child.stdout.take().unwrap());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    lines.next(SECS(10));
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    for id in 1..=60u64 {
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": "process_list", "arguments": {"all": true}}});
        let text = format!("{call}\n");
        let (a, b) = text.split_at(text.len() - 1 - (id as usize % 7));
        stdin.write_all(a.as_bytes()).unwrap();
        stdin.flush().unwrap();
        std::thread::sleep(Duration::from_millis(3));
        stdin.write_all(b.as_bytes()).unwrap();
        let line = lines.try_next(SECS(10)).unwrap_or_else(|| panic!("request {id} was never answered"));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["result"]["isError"], false, "{v}");
    }
    drop(stdin);
    common::wait_child(&mut child, SECS(10));
}

#[tokio::test]
async fn timeout_ms_stops_the_tree_and_is_reported_as_timed_out() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "sleep 100", "name": "bounded", "timeoutMs": 300})).await;
    let pid = v["pid"].as_i64().unwrap() as i32;
    let r = s.ok("process_wait", json!({"ids": ["bounded"], "timeoutMs": 20000})).await;
    assert_eq!(r["done"], true, "{r}");
    assert_eq!(r["waited"][0]["status"], "timedOut", "{r}");
    assert!(!alive(pid));
    s.close().await;
}

#[tokio::test]
async fn a_ready_wait_is_capped_at_45_seconds() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s
        .ok(
            "process_start",
            json!({"command": "echo up; sleep 100", "ready": {"logPattern": "^up$", "timeoutMs": 600000}}),
        )
        .await;
    assert_eq!(v["ready"]["ok"], true, "{v}");
    assert_eq!(v["ready"]["matched"], "up");
    // The options as recorded (for a restart): the list shows them.
    let l = s.ok("process_list", json!({"verbose": true})).await;
    assert_eq!(l["entries"][0]["details"]["readyConfig"]["timeoutMs"], 45000, "{l}");
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
}

#[tokio::test]
async fn logs_tail_grep_and_streams() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "printf 'a\\nb\\nc\\n'; echo e >&2", "name": "abc"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    wait_finished(&state, &id);
    let l = s.ok("process_logs", json!({"id": "abc", "stream": "out", "tail": 2})).await;
    assert_eq!(l["text"], "b\nc\n", "{l}");
    assert_eq!(l["truncated"], true, "a tail leaves lines out: {l}");
    assert_eq!(l["status"], "exited");
    let l = s.ok("process_logs", json!({"id": id, "stream": "err"})).await;
    assert_eq!(l["text"], "e\n", "{l}");
    assert_eq!(l["eof"], true, "{l}");
    let l = s.ok("process_logs", json!({"id": id, "stream": "out", "grep": "^[ab]$"})).await;
    assert_eq!(l["text"], "a\nb\n", "{l}");
    let r = s.call("process_logs", json!({"id": id, "stream": "both"})).await;
    assert_eq!(r.is_error, Some(true));
    assert!(text(&r).contains("Unknown stream 'both'"), "{}", text(&r));
    s.close().await;
}

#[tokio::test]
async fn stop_by_session_stops_that_session_only() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let a = s.ok("process_start", json!({"command": "sleep 100", "session": "turn-1"})).await;
    let b = s.ok("process_start", json!({"argv": ["sleep", "100"], "session": "turn-1"})).await;
    let mine = s.ok("process_start", json!({"command": "sleep 100"})).await;
    let l = s.ok("process_list", json!({"session": "turn-1"})).await;
    assert_eq!(l["entries"].as_array().unwrap().len(), 2, "{l}");
    let l = s.ok("process_list", json!({"session": "*"})).await;
    assert_eq!(l["entries"].as_array().unwrap().len(), 3, "{l}");
    let r = s.ok("process_stop", json!({"session": "turn-1"})).await;
    let lines: Vec<Value> = r["stopped"].as_array().unwrap().iter().map(|x| x["lines"][0].clone()).collect();
    assert_eq!(
        lines,
        vec![
            json!(format!("Stopped sleep ({}).", a["id"].as_str().unwrap())),
            json!(format!("Stopped sleep ({}).", b["id"].as_str().unwrap()))
        ]
    );
    assert!(!alive(a["pid"].as_i64().unwrap() as i32) && !alive(b["pid"].as_i64().unwrap() as i32));
    assert!(alive(mine["pid"].as_i64().unwrap() as i32), "another session's process was stopped");
    s.ok("process_stop", json!({"all": true})).await;
    assert!(!alive(mine["pid"].as_i64().unwrap() as i32));
    s.close().await;
}

/// Every schema the server lists, as checked in under `schema/mcp/` (`SHEEPDOG_BLESS=1`
/// rewrites them): one file per tool, `{"inputSchema", "outputSchema"}`. And portable: no
/// `format` JSON Schema does not define, no `null` in a `type`, no `{type: null}` branch in an
/// `anyOf` (the one `oneOf` of `process_update`'s `cleanup` is the documented exception).
#[tokio::test]
async fn the_schemas_are_portable_and_match_the_checked_in_files() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let tools = s.client().list_all_tools().await.unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema").join("mcp");
    let bless = std::env::var_os("SHEEPDOG_BLESS").is_some();
    fn walk(v: &Value, at: &str, bad: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(f) = m.get("format") {
                    bad.push(format!("{at}: format {f}"));
                }
                if m.get("type").is_some_and(|t| t.is_array()) {
                    bad.push(format!("{at}: type union {}", m["type"]));
                }
                if let Some(Value::Array(b)) = m.get("anyOf")
                    && b.iter().any(|x| x["type"] == "null")
                {
                    bad.push(format!("{at}: anyOf with null"));
                }
                if m.get("type") == Some(&json!("integer"))
                    && !m.contains_key("minimum")
                    && !["exitCode", "pid", "code"].iter().any(|k| at.ends_with(k))
                {
                    bad.push(format!("{at}: an integer with no minimum"));
                }
                for (k, x) in m {
                    walk(x, &format!("{at}/{k}"), bad);
                }
            }
            Value::Array(a) => a.iter().enumerate().for_each(|(i, x)| walk(x, &format!("{at}/{i}"), bad)),
            _ => {}
        }
    }
    let mut bad = Vec::new();
    let mut drift = Vec::new();
    for t in &tools {
        let doc = json!({"inputSchema": t.input_schema.as_ref(), "outputSchema": t.output_schema.as_deref()});
        walk(&doc, &t.name, &mut bad);
        let path = dir.join(format!("{}.json", t.name));
        let text = serde_json::to_string_pretty(&doc).unwrap() + "\n";
        if bless {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            drift.push(path.display().to_string());
        }
    }
    assert!(bad.is_empty(), "not portable: {bad:#?}");
    assert!(drift.is_empty(), "schemas drifted from {drift:?}: run SHEEPDOG_BLESS=1 cargo test --test mcp schemas");
    // The one null an argument takes is a documented oneOf.
    let update = tools.iter().find(|t| t.name == "process_update").unwrap();
    let one_of = &update.input_schema["properties"]["cleanup"]["oneOf"];
    assert_eq!(one_of[1], json!({"type": "null"}), "{one_of}");
    s.close().await;
}

/// Compact views: a typical entry is at most 300 bytes of JSON; identity and timing fields only
/// with `verbose: true`.
#[tokio::test]
async fn list_entries_are_compact_and_verbose_has_the_details() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let port = free_port();
    let cmd = format!("python3 -u -m http.server {port} --bind 127.0.0.1");
    s.ok("process_start", json!({"command": cmd, "ready": {"port": port}, "cleanup": {"command": "true"}})).await;
    let l = s.ok("process_list", json!({})).await;
    let e = &l["entries"][0];
    let bytes = e.to_string().len();
    assert!(bytes <= 300, "{bytes} bytes: {e}");
    assert_eq!(e["name"], "http.server", "named after what it runs: {e}");
    for k in ["id", "name", "status", "statusText", "pid", "ports", "command", "session", "startedAt", "cleanup"] {
        assert!(e.get(k).is_some(), "no `{k}` in {e}");
    }
    for k in ["bootId", "startTime", "supervisorStartTime", "uid", "cgroup", "stop", "argv", "details"] {
        assert!(e.get(k).is_none(), "`{k}` in a compact view: {e}");
    }
    let l = s.ok("process_list", json!({"verbose": true})).await;
    let d = &l["entries"][0]["details"];
    for k in ["bootId", "startTime", "supervisorPid", "ownerPid", "stop", "logs"] {
        assert!(d.get(k).is_some(), "no `{k}` in details: {d}");
    }
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
}

/// Regression (issue 20): after a process printed one 3 MB line, every reply stays bounded:
/// news lines cut at 512 bytes (marked), at most 5 per process, a wait's lines too; no reply
/// over 16 KiB.
#[tokio::test]
async fn a_3_mb_line_leaves_every_reply_within_its_bound() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let script = "import sys\nfor i in range(3):\n    sys.stdout.write('x' * 1000000)\nprint()\nprint('after')";
    let v = s.ok("process_start", json!({"argv": ["python3", "-c", script], "name": "flood"})).await;
    let id = v["id"].as_str().unwrap().to_string();
    wait_finished(&state, &id);
    let r = s.call("process_list", json!({"all": true})).await;
    let sc = r.structured_content.clone().unwrap();
    let size = sc.to_string().len();
    assert!(size <= 16 * 1024, "process_list is {size} bytes");
    assert!(text(&r).len() <= 16 * 1024, "text {} bytes", text(&r).len());
    let f = &sc["finished"][0];
    assert_eq!(f["id"], id.as_str(), "{sc}");
    let lines = f["lastLines"].as_array().unwrap();
    assert!(lines.len() <= 5, "{} lines", lines.len());
    for l in lines {
        let l = l.as_str().unwrap();
        assert!(l.len() <= 512, "a news line of {} bytes", l.len());
    }
    assert!(lines.iter().any(|l| l.as_str().unwrap().contains("more bytes]")), "the cut is marked: {lines:?}");
    // The wait's answer too.
    let v = s.ok("process_start", json!({"argv": ["python3", "-c", script]})).await;
    let w = s.ok("process_wait", json!({"ids": [v["id"]], "timeoutMs": 20000})).await;
    assert_eq!(w["done"], true, "{w}");
    assert!(w.to_string().len() <= 16 * 1024, "process_wait is {} bytes", w.to_string().len());
    assert!(w["waited"][0]["lastLines"].as_array().unwrap().iter().all(|l| l.as_str().unwrap().len() <= 512));
    s.close().await;
}

/// A listing past 16 KiB is cut, says so in `truncated`, and the news is capped at 4 KiB with a
/// count of what waits for the next reply.
#[tokio::test]
async fn a_long_listing_and_much_news_are_cut_and_say_so() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    // The server's session, from a process it started.
    let v = s.ok("process_start", json!({"command": "true"})).await;
    let session = v["session"].as_str().unwrap().to_string();
    wait_finished(&state, v["id"].as_str().unwrap());
    s.ok("process_list", json!({"all": true})).await;
    for _ in 0..150 {
        common::forge_entry(&state, 1000, |e| {
            e.status = sheepdog::status::Status::Exited;
            e.exit_code = Some(0);
            e.ended_at = Some(sheepdog::files::now_ms());
            e.session_id = Some(session.clone());
        });
    }
    let r = s.call("process_list", json!({"all": true})).await;
    let sc = r.structured_content.clone().unwrap();
    assert!(sc.to_string().len() <= 16 * 1024, "{} bytes", sc.to_string().len());
    let kept = sc["entries"].as_array().unwrap().len();
    assert!(kept < 151, "{kept}");
    let note = sc["truncated"].as_str().unwrap_or_else(|| panic!("no `truncated`: {sc}"));
    assert!(note.starts_with(&format!("{} of 151 `entries` left out", 151 - kept)), "{note}");
    let news = serde_json::to_string(&sc["finished"]).unwrap().len();
    assert!(news <= 4096, "news of {news} bytes");
    let omitted = sc["finishedOmitted"].as_u64().unwrap_or(0) as usize;
    assert_eq!(sc["finished"].as_array().unwrap().len() + omitted, 150, "{sc}");
    // The rest comes in the next replies, none twice.
    let next = s.ok("process_list", json!({"status": "running"})).await;
    assert!(!next["finished"].as_array().unwrap().is_empty(), "{next}");
    s.close().await;
}

/// A start whose process exits before it is ready is an error (the CLI exits 1 there).
#[tokio::test]
async fn a_start_that_ends_before_it_is_ready_is_an_error() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let r = s.call("process_start", json!({"command": "echo boom; exit 3", "ready": {"logPattern": "^never$"}})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    let sc = r.structured_content.unwrap();
    assert_eq!(sc["ready"]["ok"], false, "{sc}");
    assert_eq!(sc["ready"]["reason"], "exited", "{sc}");
    assert_eq!(sc["exitCode"], 3, "{sc}");
    assert!(sc["lastLines"].as_array().unwrap().contains(&json!("[out] boom")), "{sc}");
    s.close().await;
}

/// An unnamed `command` is named after what it runs, not `sh`.
#[tokio::test]
async fn an_unnamed_command_is_named_after_what_it_runs() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let v = s.ok("process_start", json!({"command": "npm run dev"})).await;
    assert_eq!(v["name"], "npm-run-dev", "{v}");
    let v = s.ok("process_start", json!({"argv": ["python3", "-m", "http.server", "0", "--bind", "127.0.0.1"]})).await;
    assert_eq!(v["name"], "http.server", "{v}");
    let stop = s.ok("process_stop", json!({"id": v["id"]})).await;
    assert_eq!(stop["stopped"][0]["lines"][0], format!("Stopped http.server ({}).", v["id"].as_str().unwrap()));
    s.close().await;
}

/// `process_wait {}` waits for the processes expected to end (started without `ready`), not
/// for the dev server beside them.
#[tokio::test]
async fn wait_with_no_ids_waits_for_the_build_not_the_server() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let server = s.ok("process_start", json!({"command": "echo up; sleep 100", "ready": {"logPattern": "^up$"}})).await;
    let build = s.ok("process_start", json!({"command": "sleep 0.3; echo built"})).await;
    let t0 = Instant::now();
    let w = s.ok("process_wait", json!({})).await;
    let took = t0.elapsed();
    assert!(took < SECS(10), "waited {took:?}: {w}");
    assert_eq!(w["done"], true, "{w}");
    let ids: Vec<&Value> = w["waited"].as_array().unwrap().iter().map(|x| &x["id"]).collect();
    assert_eq!(ids, vec![&build["id"]], "{w}");
    assert!(alive(server["pid"].as_i64().unwrap() as i32));
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
}

/// Regression (issue 20): stdin EOF during an in-flight `process_wait` ends the server at once
/// (it used to take 5 s).
#[tokio::test]
async fn stdin_eof_during_a_wait_ends_the_server_within_100ms() {
    let (state, guard) = (State::new(), Guard::new());
    let mut child = std::process::Command::new(common::bin())
        .arg("mcp")
        .env("SHEEPDOG_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    guard.track_child(&child);
    let mut stdin = child.stdin.take().unwrap();
    let lines = common::Lines::new(child.stdout.take().unwrap());
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    writeln!(stdin, "{init}").unwrap();
    lines.next(SECS(10));
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).unwrap();
    let call = |id: u64, name: &str, args: Value| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}});
    writeln!(stdin, "{}", call(1, "process_start", json!({"command": "sleep 100", "keep": true}))).unwrap();
    let started: Value = serde_json::from_str(&lines.next(SECS(10))).unwrap();
    let pid = started["result"]["structuredContent"]["pid"].as_i64().unwrap() as i32;
    let id = started["result"]["structuredContent"]["id"].clone();
    writeln!(stdin, "{}", call(2, "process_wait", json!({"ids": [id], "timeoutMs": 30000}))).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let t0 = Instant::now();
    let status = common::wait_child(&mut child, SECS(5));
    let took = t0.elapsed();
    eprintln!("exited {took:?} after stdin EOF during a wait");
    assert!(status.success(), "{status:?}");
    assert!(took < Duration::from_millis(100), "took {took:?}");
    assert!(alive(pid), "the server's exit stopped a process");
    let reg = sheepdog::registry::Registry::open(Some(state.path().to_path_buf())).unwrap();
    let e = reg.find(id.as_str().unwrap()).unwrap();
    sheepdog::manager::stop(&reg, &e, None).unwrap();
}

/// Regression (issue 20): each start left its supervisor a zombie child of the server. After
/// 20 starts of `true`, the server has none.
#[tokio::test]
async fn the_server_leaves_no_zombie_supervisors() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    for _ in 0..20 {
        s.ok("process_start", json!({"command": "true"})).await;
    }
    s.ok("process_wait", json!({"timeoutMs": 20000})).await;
    let zombies = || sheepdog::os::procfs::all().into_iter().filter(|p| p.ppid == s.pid && p.is_zombie()).count();
    let end = Instant::now() + SECS(5);
    while zombies() > 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(zombies(), 0, "zombie children of the server");
    s.ok("process_clear", json!({"finished": true})).await;
    assert_eq!(zombies(), 0);
    s.close().await;
}

/// `stdin: "pipe"` and `process_write` answer a `read -p` prompt; `end` closes the input; the
/// errors say why (no pipe, exited); the writer's fd never reaches the tree.
#[tokio::test]
async fn process_write_answers_a_prompt_and_fails_clearly() {
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let script = "read -p 'Proceed? [y/N] ' a; echo \"answer: $a\"; cat; echo 'input ended'";
    let v = s.ok("process_start", json!({"argv": ["bash", "-c", script], "stdin": "pipe", "name": "ask"})).await;
    assert_eq!(v["stdin"], "pipe", "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let pid = v["pid"].as_i64().unwrap() as i32;
    // No process of the tree holds the FIFO open for writing.
    let fifo = state.path().join("procs").join(&id).join("stdin");
    for p in state.tree_pids(&id) {
        for fd in std::fs::read_dir(format!("/proc/{p}/fd")).unwrap().flatten() {
            if std::fs::read_link(fd.path()).ok().as_deref() == Some(fifo.as_path()) {
                let info = std::fs::read_to_string(format!("/proc/{p}/fdinfo/{}", fd.file_name().to_string_lossy()))
                    .unwrap_or_default();
                let flags = info.lines().find_map(|l| l.strip_prefix("flags:")).unwrap_or("0").trim();
                let mode = u32::from_str_radix(flags, 8).unwrap_or(0) & 3;
                assert_eq!(mode, 0, "pid {p} holds the stdin FIFO for writing ({info})");
            }
        }
    }
    let w = s.ok("process_write", json!({"id": "ask", "input": "y\n"})).await;
    assert_eq!(w["bytes"], 2, "{w}");
    state.wait_log(&id, "combined.log", "[out] answer: y");
    s.ok("process_write", json!({"id": id, "input": "more\n", "end": true})).await;
    let r = s.ok("process_wait", json!({"ids": [id], "timeoutMs": 20000})).await;
    assert_eq!(r["done"], true, "EOF reached cat: {r}");
    assert!(r["waited"][0]["lastLines"].as_array().unwrap().contains(&json!("[out] input ended")), "{r}");
    assert!(!alive(pid));
    let e = s.call("process_write", json!({"id": id, "input": "late\n"})).await;
    assert_eq!(e.is_error, Some(true));
    assert!(text(&e).contains("has exited"), "{}", text(&e));
    let plain = s.ok("process_start", json!({"command": "sleep 100"})).await;
    let e = s.call("process_write", json!({"id": plain["id"], "input": "y\n"})).await;
    assert_eq!(e.is_error, Some(true));
    assert!(text(&e).contains("was not started with a stdin pipe"), "{}", text(&e));
    s.ok("process_stop", json!({"all": true})).await;
    s.close().await;
}

#[tokio::test]
async fn a_command_that_is_not_found_keeps_its_own_spelling() {
    // Issue 31: the sentence rule capitalised the first letter, which here is the command's name.
    let (state, guard) = (State::new(), Guard::new());
    let s = Server::spawn(&state, &guard, &[]).await;
    let r = s.call("process_start", json!({"argv": ["definitely-not-a-cmd"]})).await;
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert!(text(&r).starts_with("definitely-not-a-cmd: command not found"), "{}", text(&r));
    s.close().await;
}
