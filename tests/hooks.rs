//! `sheepdog hook HOST EVENT` (issue 30): the answers in each host's format, failing open, and
//! the rewritten command run by a real bash as the host runs it (Claude Code's wrapper): the
//! same output, status and cwd, with the tree under `sheepdog run`.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::*;

fn hook(st: &State, host: &str, event: &str, input: &str, env: &[(&str, &str)]) -> (i32, String) {
    let mut c = st.cmd(&["hook", host, event]);
    c.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    // A hook that refuses its arguments exits before it reads: EPIPE here is no failure.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

fn bash_input(command: &str, mode: &str) -> String {
    serde_json::json!({
        "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "Bash",
        "tool_input": {"command": command, "timeout": 5000, "run_in_background": false, "description": "d"},
        "tool_use_id": "toolu_9", "permission_mode": mode, "cwd": "/",
    })
    .to_string()
}

#[test]
fn bad_input_and_other_tools_get_no_answer_and_exit_0() {
    let st = State::new();
    assert_eq!(hook(&st, "claude", "pre-tool-use", "not json", &[]), (0, String::new()));
    let read = r#"{"tool_name":"Read","tool_input":{"file_path":"/etc/hosts"}}"#;
    assert_eq!(hook(&st, "claude", "pre-tool-use", read, &[]), (0, String::new()));
    assert_eq!(hook(&st, "claude", "pre-tool-use", r#"{"tool_name":"Bash","tool_input":{}}"#, &[]), (0, String::new()));
    assert_eq!(hook(&st, "nosuchhost", "pre-tool-use", "{}", &[]).0, 2);
}

#[test]
fn claude_gets_the_rewrite_alone_with_every_other_field_kept_and_no_permission_decision() {
    let st = State::new();
    let (code, out) = hook(&st, "claude", "pre-tool-use", &bash_input("echo hi", "default"), &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let h = &v["hookSpecificOutput"];
    assert_eq!(h["hookEventName"], "PreToolUse");
    assert!(h.get("permissionDecision").is_none(), "the user's rules decide: {v}");
    let u = &h["updatedInput"];
    assert_eq!(
        (u["timeout"].as_i64(), u["run_in_background"].as_bool(), u["description"].as_str()),
        (Some(5000), Some(false), Some("d"))
    );
    let cmd = u["command"].as_str().unwrap();
    assert!(cmd.ends_with("\necho hi") && cmd.contains(" run --owner \"$PPID\" --leftovers keep"), "{cmd}");
}

#[test]
fn codex_gets_the_rewrite_only_where_it_would_not_ask_and_no_rules_file_exists() {
    let st = State::new();
    let home = tempfile::tempdir().unwrap();
    let env = [("CODEX_HOME", home.path().to_str().unwrap())];
    assert_eq!(
        hook(&st, "codex", "pre-tool-use", &bash_input("ls", "default"), &env),
        (0, String::new()),
        "approvals on: untouched"
    );
    let (_, out) = hook(&st, "codex", "pre-tool-use", &bash_input("ls", "bypassPermissions"), &env);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "allow");
    std::fs::create_dir(home.path().join("rules")).unwrap();
    std::fs::write(home.path().join("rules/default.rules"), "prefix_rule(pattern=[\"ls\"], decision=\"forbidden\")\n")
        .unwrap();
    assert_eq!(
        hook(&st, "codex", "pre-tool-use", &bash_input("ls", "bypassPermissions"), &env),
        (0, String::new()),
        "rules present: untouched"
    );
}

/// Runs `command` as Claude Code's Bash tool does (`bash -c "eval '...' < /dev/null && pwd -P >|
/// FILE"`) from `dir`: stdout, stderr, status and the cwd written.
fn as_claude_runs(command: &str, dir: &std::path::Path, cwd_file: &std::path::Path) -> (String, String, i32, String) {
    as_claude_runs_with("true", command, dir, cwd_file)
}

/// [`as_claude_runs`] with the session's `CLAUDE_ENV_FILE` text pasted ahead of the command, as
/// Claude Code 2.1 does (`... && ENV_FILE_TEXT\n: && eval '...'`).
fn as_claude_runs_with(
    env_text: &str,
    command: &str,
    dir: &std::path::Path,
    cwd_file: &std::path::Path,
) -> (String, String, i32, String) {
    let quoted = format!("'{}'", command.replace('\'', r#"'"'"'"#));
    let out = Command::new("/bin/bash")
        .arg("-c")
        .arg(format!("true && {env_text}\n: && eval {quoted} < /dev/null && pwd -P >| {}", cwd_file.display()))
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let cwd = std::fs::read_to_string(cwd_file).unwrap_or_default();
    let _ = std::fs::remove_file(cwd_file);
    (
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
        out.status.code().unwrap_or(-1),
        cwd,
    )
}

#[test]
fn the_rewritten_command_runs_under_sheepdog_with_the_bare_output_status_and_cwd() {
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let cwd_file = dir.path().join("cwd");
    let original =
        "mkdir -p sub && cd sub && echo out && echo err >&2 && ls /proc/$$/ >/dev/null && cat /proc/$PPID/comm";
    let (_, out) = hook(&st, "claude", "pre-tool-use", &bash_input(original, "default"), &[]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let rewritten = v["hookSpecificOutput"]["updatedInput"]["command"].as_str().unwrap().to_string();
    let bare = as_claude_runs(original, dir.path(), &cwd_file);
    let hooked = as_claude_runs(&rewritten, dir.path(), &cwd_file);
    // The one difference: the inner shell's parent is sheepdog's keeper, not the host.
    assert_eq!(bare.0.lines().next(), Some("out"));
    assert_eq!(hooked.0, "out\nsheepdog\n", "the command ran under sheepdog");
    assert_eq!((&hooked.1, hooked.2, &hooked.3), (&bare.1, bare.2, &bare.3), "stderr, status and cwd");
    let (_, _, code, _) = as_claude_runs(&rewritten.replace("cat /proc/$PPID/comm", "exit 7"), dir.path(), &cwd_file);
    assert_eq!(code, 7);
}

/// A sheepdog that cannot supervise (here its state dir is world-writable, which it refuses)
/// never blocks the call: the command runs as written, with the bare output, status and cwd,
/// and one line on stderr says it ran unsupervised.
#[test]
fn a_sheepdog_that_cannot_supervise_lets_the_call_run_as_written() {
    use std::os::unix::fs::PermissionsExt;
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let cwd_file = dir.path().join("cwd");
    let original = "mkdir -p sub && cd sub && echo out && echo err >&2 && cat /proc/$PPID/comm; exit 3";
    let (_, out) = hook(&st, "claude", "pre-tool-use", &bash_input(original, "default"), &[]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let rewritten = v["hookSpecificOutput"]["updatedInput"]["command"].as_str().unwrap().to_string();
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bare = as_claude_runs(original, dir.path(), &cwd_file);
    let hooked = as_claude_runs(&rewritten, dir.path(), &cwd_file);
    assert_eq!((&hooked.0, hooked.2, &hooked.3), (&bare.0, bare.2, &bare.3), "stdout, status and cwd");
    assert_eq!(hooked.2, 3);
    let lines: Vec<&str> = hooked.1.lines().collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("sheepdog: not supervised (") && lines[0].ends_with("running the command as written"));
    assert!(lines[0].contains(&st.path().display().to_string()), "says where: {}", lines[0]);
    assert_eq!(lines[1], "err");
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// The same for Gemini CLI's runner (`hook gemini run`, which its guard line execs).
#[test]
fn geminis_runner_that_cannot_supervise_runs_the_command_as_written() {
    use std::os::unix::fs::PermissionsExt;
    let st = State::new();
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let me = std::process::id().to_string();
    let args = ["hook", "gemini", "run", "--owner", &me, "--shell", &me, "--session", "s", "--"];
    let out = st.cmd(&args).args(["sh", "-c", "echo out; exit 4"]).output().unwrap();
    std::fs::set_permissions(st.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stdout).as_ref()), (Some(4), "out\n"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("sheepdog: not supervised (") && err.lines().count() == 1, "{err}");
}

#[test]
fn session_start_gives_claude_codes_shells_the_agents_session_and_session_end_stops_it_detached() {
    let st = State::new();
    let guard = Guard::new();
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env.sh");
    let (code, out) = hook(&st, "claude", "session-start", "{}", &[("CLAUDE_ENV_FILE", env_file.to_str().unwrap())]);
    assert_eq!((code, out.as_str()), (0, ""));
    let written = std::fs::read_to_string(&env_file).unwrap();
    // The hook's parent is this test process (no launcher between): the session names it.
    let me = std::process::id();
    assert!(written.starts_with(&format!("export SHEEPDOG_SESSION='agent-{me}-")), "{written}");
    let first = written.lines().next().unwrap_or_default();
    let session = first.trim_start_matches("export SHEEPDOG_SESSION=").trim_matches('\'').to_string();
    // An entry of that session (what a hooked call kept, or an MCP start) is stopped by the
    // session's end, after the hook itself has returned.
    let e = st.start(&["--session", &session, "--", "sleep", "300"]);
    let pid = e["pid"].as_i64().unwrap() as i32;
    guard.track(pid);
    let t = std::time::Instant::now();
    assert_eq!(hook(&st, "claude", "session-end", "{}", &[]), (0, String::new()));
    assert!(t.elapsed() < SECS(1), "the hook returns at once");
    assert_eq!(wait_gone(&[pid], SECS(10)), Vec::<i32>::new(), "the detached stop ended the session's entry");
}

/// Claude Code's calls are never rewritten: the plugin has no PreToolUse hook, and the line
/// SessionStart writes to `CLAUDE_ENV_FILE` (which Claude Code pastes into every call) puts the
/// call under sheepdog with the bare output, status and cwd.
#[test]
fn claude_codes_env_file_puts_each_call_under_sheepdog_without_rewriting_it() {
    let hooks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("hosts/claude-code/hooks/hooks.json").unwrap()).unwrap();
    assert!(hooks["hooks"].get("PreToolUse").is_none(), "the model's command is never rewritten in Claude Code");
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join("env.sh");
    hook(&st, "claude", "session-start", "{}", &[("CLAUDE_ENV_FILE", env_file.to_str().unwrap())]);
    let env_text = std::fs::read_to_string(&env_file).unwrap();
    let cwd_file = dir.path().join("cwd");
    let command = "mkdir -p sub && cd sub && echo out && echo err >&2 && echo $SHEEPDOG_SESSION >/dev/null && cat /proc/$PPID/comm";
    let bare = as_claude_runs(command, dir.path(), &cwd_file);
    let hooked = as_claude_runs_with(env_text.trim_end(), command, dir.path(), &cwd_file);
    assert_eq!(bare.0.lines().next(), Some("out"));
    assert_eq!(hooked.0, "out\nsheepdog\n", "the call ran under sheepdog, once (not nested)");
    assert_eq!((&hooked.1, hooked.2, &hooked.3), (&bare.1, bare.2, &bare.3), "stderr, status and cwd");
    let (_, _, code, _) = as_claude_runs_with(env_text.trim_end(), "exit 7", dir.path(), &cwd_file);
    assert_eq!(code, 7);
}

/// The hooks that run on every call exec the static binary that SessionStart recorded
/// (`hook-exe` in the state dir), not whatever `sheepdog` is first on PATH (npm's launcher
/// would add Node's start to every call).
#[test]
fn the_per_call_hooks_exec_the_binary_session_start_recorded() {
    let st = State::new();
    hook(&st, "codex", "session-start", "{}", &[]);
    let recorded = std::fs::read_to_string(st.path().join("hook-exe")).unwrap();
    assert_eq!(std::path::Path::new(&recorded), std::fs::canonicalize(bin()).unwrap().as_path());
    let hooks: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string("hosts/codex/hooks.json").unwrap()).unwrap();
    let command = hooks["hooks"]["PreToolUse"][0]["hooks"][0]["command"].as_str().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut sh = Command::new("sh");
    sh.args(["-c", command])
        .env("PATH", "/usr/bin:/bin")
        .env("SHEEPDOG_STATE_DIR", st.path())
        .env("CODEX_HOME", home.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = sh.spawn().unwrap();
    child.stdin.take().unwrap().write_all(bash_input("ls", "bypassPermissions").as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the hook answered");
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "allow");
}

// Gemini CLI (issue 33): `sheepdog hook gemini before-tool|after-tool|session-start|session-end`.

/// A Gemini CLI `BeforeTool` input for `run_shell_command`.
fn gemini_input(command: &str, cwd: &std::path::Path) -> String {
    serde_json::json!({
        "session_id": "s", "transcript_path": "", "cwd": cwd, "hook_event_name": "BeforeTool",
        "timestamp": "2026-12-06T00:00:00Z", "tool_name": "run_shell_command",
        "tool_input": {"command": command, "description": "d", "dir_path": "sub", "is_background": false},
    })
    .to_string()
}

/// Runs `hook gemini EVENT` under an "agent" whose command line ends with `agent_args` (a
/// python3 that waits for the hook: not a launcher, so the walk stops at it), with `home` as
/// HOME and a workspace at `input`'s cwd.
fn gemini_hook(st: &State, event: &str, input: &str, home: &std::path::Path, agent_args: &[&str]) -> (i32, String) {
    let mut c = Command::new("python3");
    c.args([
        "-c",
        "import subprocess, sys; sys.exit(subprocess.run(sys.argv[1:sys.argv.index('--agent')]).returncode)",
    ])
    .arg(bin())
    .arg("--state-dir")
    .arg(st.path())
    .args(["hook", "gemini", event, "--agent"])
    .args(agent_args)
    .env("HOME", home)
    .env_remove("GEMINI_CLI_HOME")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    let out = child.wait_with_output().unwrap();
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn gemini_gets_the_rewrite_only_with_approvals_off_and_every_other_argument_kept() {
    let st = State::new();
    let home = tempfile::tempdir().unwrap();
    let input = gemini_input("echo hi", home.path());
    assert_eq!(gemini_hook(&st, "before-tool", &input, home.path(), &["-p", "go"]), (0, String::new()), "approvals on");
    assert_eq!(
        gemini_hook(&st, "before-tool", &input, home.path(), &["--approval-mode", "auto_edit"]),
        (0, String::new())
    );
    let (code, out) = gemini_hook(&st, "before-tool", &input, home.path(), &["-p", "go", "--yolo"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("an answer");
    let h = &v["hookSpecificOutput"];
    assert_eq!(h["hookEventName"], "BeforeTool");
    assert!(v.get("decision").is_none() && h.get("decision").is_none(), "no permission decision: {v}");
    let t = &h["tool_input"];
    assert_eq!(
        (t["description"].as_str(), t["dir_path"].as_str(), t["is_background"].as_bool()),
        (Some("d"), Some("sub"), Some(false))
    );
    let cmd = t["command"].as_str().unwrap();
    assert!(cmd.ends_with("\necho hi"), "{cmd}");
    assert!(cmd.contains(" hook gemini run --owner \"$PPID\" --shell \"$$\" --session 'agent-"), "{cmd}");
    // Gemini CLI refuses a command with a command substitution: the line has none.
    assert!(!cmd.contains("$(") && !cmd.contains('`'), "{cmd}");
    let other = input.replace("run_shell_command", "read_file");
    assert_eq!(gemini_hook(&st, "before-tool", &other, home.path(), &["--yolo"]), (0, String::new()));
}

#[test]
fn gemini_gets_no_rewrite_where_a_policy_pattern_or_a_shell_allowlist_could_see_it() {
    let st = State::new();
    let home = tempfile::tempdir().unwrap();
    let proj = home.path().join("proj");
    std::fs::create_dir_all(proj.join(".gemini/policies")).unwrap();
    let input = gemini_input("ls", &proj);
    let rewritten = |st: &State| !gemini_hook(st, "before-tool", &input, home.path(), &["--yolo"]).1.is_empty();
    // A commandPrefix rule matches each part of a compound command, which the rewrite keeps.
    std::fs::write(
        proj.join(".gemini/policies/p.toml"),
        "[[rule]]\ntoolName = \"run_shell_command\"\ncommandPrefix = \"rm\"\ndecision = \"deny\"\npriority = 900\n",
    )
    .unwrap();
    assert!(rewritten(&st));
    // A regex may match the command as a whole: no rewrite.
    std::fs::write(proj.join(".gemini/policies/p.toml"), "[[rule]]\ntoolName = \"run_shell_command\"\ncommandRegex = \"cd .* && rm\"\ndecision = \"deny\"\npriority = 900\n").unwrap();
    assert!(!rewritten(&st), "a workspace commandRegex rule");
    std::fs::remove_file(proj.join(".gemini/policies/p.toml")).unwrap();
    assert!(rewritten(&st));
    // An installed extension's policies count as well.
    let ext = home.path().join(".gemini/extensions/other/policies");
    std::fs::create_dir_all(&ext).unwrap();
    std::fs::write(
        ext.join("x.toml"),
        "[[rule]]\ntoolName = \"run_shell_command\"\ncommandRegex = \"git push.*\"\ndecision = \"ask_user\"\n",
    )
    .unwrap();
    assert!(!rewritten(&st), "an extension's commandRegex rule");
    std::fs::remove_dir_all(home.path().join(".gemini/extensions")).unwrap();
    std::fs::write(
        home.path().join(".gemini/settings.json"),
        r#"{"tools":{"core":["read_file","run_shell_command(git)"]}}"#,
    )
    .unwrap();
    assert!(!rewritten(&st), "a shell allowlist in the user's settings");
    std::fs::write(home.path().join(".gemini/settings.json"), r#"{"tools":{"exclude":["run_shell_command(rm)"]}}"#)
        .unwrap();
    assert!(rewritten(&st), "tools.exclude matches each part");
    assert_eq!(
        gemini_hook(&st, "before-tool", &input, home.path(), &["--yolo", "--allowed-tools", "run_shell_command(git)"])
            .1,
        ""
    );
    assert_eq!(gemini_hook(&st, "before-tool", &input, home.path(), &["--yolo", "--policy", "/p.toml"]).1, "");
}

/// Runs `command` as Gemini CLI 0.61's shell tool does (`bash -c` with its `shopt` line and its
/// subshell that writes the background pids on exit), from this process: stdout, stderr and
/// the status (a death by signal N as -N: Gemini CLI tells the model `Signal: N` then, and
/// `Exit Code: 143` for an exit with 143).
fn as_gemini_runs(command: &str, dir: &std::path::Path) -> (String, String, i32) {
    use std::os::unix::process::ExitStatusExt;
    let wrapped = format!(
        "shopt -u promptvars nullglob extglob nocaseglob dotglob; _bgpids_file={}\n(\n  trap 'jobs -p > \"$_bgpids_file\"' EXIT\n{command}\n)\n__code=$?\nexit $__code",
        dir.join("bgpids").display()
    );
    let out = Command::new("/bin/bash").arg("-c").arg(wrapped).current_dir(dir).stdin(Stdio::null()).output().unwrap();
    let status = out.status.code().unwrap_or_else(|| -out.status.signal().unwrap_or(0));
    (String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into(), status)
}

#[test]
fn geminis_rewritten_call_runs_under_sheepdog_with_the_bare_output_status_and_signal() {
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let line = |cmd: &str| {
        let (_, out) = gemini_hook(&st, "before-tool", &gemini_input(cmd, dir.path()), dir.path(), &["--yolo"]);
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        v["hookSpecificOutput"]["tool_input"]["command"].as_str().unwrap().to_string()
    };
    let original = "echo out && echo err >&2 && cat /proc/$PPID/comm";
    let rewritten = line(original);
    // The owner is the shell's `$PPID`: this process here, the agent in Gemini CLI.
    let bare = as_gemini_runs(original, dir.path());
    let hooked = as_gemini_runs(&rewritten, dir.path());
    assert_eq!(bare.0.lines().next(), Some("out"));
    assert_eq!(hooked.0, "out\nsheepdog\n", "the command ran under sheepdog");
    assert_eq!((&hooked.1, hooked.2), (&bare.1, bare.2), "stderr and status");
    for (cmd, status) in [("exit 7", 7), ("echo before; kill -TERM $$", -15), ("sh -c 'kill -TERM $$'", 143)] {
        let bare = as_gemini_runs(cmd, dir.path());
        let hooked = as_gemini_runs(&line(cmd), dir.path());
        assert_eq!(bare.2, status, "{cmd}");
        assert_eq!((&hooked.0, hooked.2), (&bare.0, bare.2), "{cmd}");
    }
}

/// What a hooked call of `session` leaves running: `run --leftovers keep` (what the guard line
/// execs) of a command that leaves a `sleep 300` in the background, which is kept as an entry of the
/// session. Returns that entry, with its leftover and supervisor tracked by `guard`.
fn keep_a_leftover(st: &State, session: &str, guard: &Guard) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("left");
    let cmd = format!("sleep 300 >/dev/null 2>&1 & echo $! > {}", file.display());
    let out = st.cmd(&["run", "--leftovers", "keep", "--session", session, "--", "sh", "-c", &cmd]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let left: i32 = std::fs::read_to_string(&file).unwrap().trim().parse().unwrap();
    guard.track(left);
    let kept = st.entries().into_iter().find(|e| e["sessionId"] == session && e["pid"] == left).expect("a kept entry");
    guard.track(kept["supervisorPid"].as_i64().unwrap() as i32);
    kept
}

/// This process as the hooks' agent: its session, `agent-<pid>-<start time>`.
fn agent_session_of_me() -> String {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start = stat.rsplit(')').next().unwrap().split_whitespace().nth(19).unwrap().to_string();
    format!("agent-{}-{start}", std::process::id())
}

#[test]
fn post_tool_use_tells_what_a_call_left_once_and_never_an_entry_the_model_started() {
    let st = State::new();
    let guard = Guard::new();
    let session = agent_session_of_me();
    // The model's own start (MCP `process_start`) is in the same session, and is no leftover.
    let own = st.start(&["--session", &session, "--name", "own-start", "--", "sleep", "300"]);
    guard.track(own["pid"].as_i64().unwrap() as i32);
    let input =
        r#"{"hook_event_name":"PostToolUse","tool_name":"Bash","tool_input":{"command":"x"},"tool_response":{}}"#;
    for host in ["claude", "codex"] {
        assert_eq!(hook(&st, host, "post-tool-use", input, &[]), (0, String::new()), "{host}: no leftover yet");
    }
    let kept = keep_a_leftover(&st, &session, &guard);
    let (code, out) = hook(&st, "claude", "post-tool-use", input, &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "PostToolUse");
    let told = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert_eq!(told.lines().count(), 1, "{told}");
    assert!(told.contains(&format!("kept as entry {}", kept["id"].as_str().unwrap())), "{told}");
    assert!(!told.contains("own-start"), "{told}");
    for host in ["claude", "codex"] {
        assert_eq!(hook(&st, host, "post-tool-use", input, &[]), (0, String::new()), "{host}: told once");
    }
    st.ok(&["stop", "--session", &session]);
}

#[test]
fn gemini_after_tool_tells_a_kept_entry_once_in_geminis_format() {
    let st = State::new();
    let guard = Guard::new();
    let session = agent_session_of_me();
    let e = keep_a_leftover(&st, &session, &guard);
    let input =
        r#"{"tool_name":"run_shell_command","tool_input":{"command":"x"},"tool_response":{"llmContent":"Output: x"}}"#;
    let (code, out) = hook(&st, "gemini", "after-tool", input, &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("an answer");
    assert_eq!(v["hookSpecificOutput"]["hookEventName"], "AfterTool");
    let told = v["hookSpecificOutput"]["additionalContext"].as_str().unwrap();
    assert!(told.contains(&format!("kept as entry {}", e["id"].as_str().unwrap())), "{told}");
    assert_eq!(hook(&st, "gemini", "after-tool", input, &[]), (0, String::new()), "told once");
    st.ok(&["stop", "--session", &session]);
}

#[test]
fn gemini_run_refuses_a_bad_invocation_with_one_line_and_125() {
    let st = State::new();
    for args in [
        vec!["hook", "gemini", "run", "--", "true"],
        vec!["hook", "gemini", "run", "--owner", "0", "--shell", "1", "--session", "s", "--", "true"],
        vec!["hook", "gemini", "run", "--owner", "1", "--shell", "1", "--session", "s", "--"],
    ] {
        let out = st.run(&args);
        assert_eq!(out.status.code(), Some(125), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.starts_with("sheepdog: hook: usage: sheepdog hook gemini run") && err.lines().count() == 1,
            "{err}"
        );
    }
    assert_eq!(hook(&st, "gemini", "pre-tool-use-typo", "{}", &[]).0, 2);
    assert_eq!(hook(&st, "claude", "before-tool", "{}", &[]).0, 2, "before-tool is Gemini's event");
}

// ---- pi (issue 33): `sheepdog hook pi EVENT`, the answers pi-sheepdog's extension applies ----

fn pi_bash(command: &str) -> String {
    serde_json::json!({"type": "tool_call", "toolName": "bash", "toolCallId": "call_1", "input": {"command": command, "timeout": 30}})
        .to_string()
}

/// The session pi-sheepdog derives for this process (the hook's parent here, as pi is there).
fn pi_session_of_me() -> String {
    let me = std::process::id() as i32;
    sheepdog::agent::pi_session_of(sheepdog::os::Pid::new(me).unwrap())
}

/// Runs `command` as pi's bash tool does: `bash -c COMMAND` as this process's child, in a
/// session of its own (Node's `detached: true`), with `env` added to this process's
/// environment (pi's `process.env`); stdout, stderr and the status.
fn as_pi_runs(command: &str, dir: &std::path::Path, env: &serde_json::Value) -> (String, String, i32) {
    let mut c = Command::new("setsid");
    c.args(["/bin/bash", "-c", command]).current_dir(dir).stdin(Stdio::null());
    for (k, v) in env.as_object().into_iter().flatten() {
        c.env(k, v.as_str().unwrap());
    }
    let out = c.output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
        out.status.code().unwrap_or(-1),
    )
}

/// What pi-sheepdog adds to pi's `process.env` at pi's start (`hook pi shell-env`).
fn pi_env(st: &State, env: &[(&str, &str)]) -> serde_json::Value {
    let (code, out) = hook(st, "pi", "shell-env", r#"{"type":"session_start","reason":"startup"}"#, env);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(v.as_object().unwrap().keys().collect::<Vec<_>>(), ["env"], "{v}");
    v["env"].clone()
}

#[test]
fn pi_gets_an_environment_never_a_rewrite_or_a_block_and_fails_open() {
    let st = State::new();
    let env = pi_env(&st, &[]);
    let keys: Vec<&String> = env.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["BASH_ENV", "ZDOTDIR", "SHEEPDOG_SESSION"], "{env}");
    assert_eq!(env["SHEEPDOG_SESSION"], pi_session_of_me().as_str(), "pi's own session");
    let bash_env = std::fs::read_to_string(env["BASH_ENV"].as_str().unwrap()).unwrap();
    assert!(bash_env.contains(" run --owner \"$PPID\" --leftovers keep"), "{bash_env}");
    assert!(bash_env.contains(&format!("--session '{}'", pi_session_of_me())), "{bash_env}");
    // The user's own BASH_ENV is kept, to be read after the guard; asked again with ours in
    // place (pi's environment already has it), ours is not kept: the file would read itself.
    let theirs = pi_env(&st, &[("BASH_ENV", "/home/u/.bash_env")]);
    assert_eq!(theirs["SHEEPDOG_BASH_ENV"], "/home/u/.bash_env");
    let again = pi_env(&st, &[("BASH_ENV", env["BASH_ENV"].as_str().unwrap())]);
    assert!(again.get("SHEEPDOG_BASH_ENV").is_none(), "{again}");
    let none = (0, String::new());
    // No event sees the model's command: nothing is rewritten, nothing blocked.
    assert_eq!(hook(&st, "pi", "tool-call", &pi_bash("echo hi"), &[]).0, 2, "no tool-call event");
    assert_eq!(hook(&st, "pi", "tool-result", r#"{"toolName":"read","content":[]}"#, &[]), none);
    assert_eq!(hook(&st, "pi", "tool-result", "not json", &[]), none);
    assert_eq!(hook(&st, "pi", "session-start", r#"{"reason":"new"}"#, &[]), none);
    assert_eq!(hook(&st, "pi", "pre-tool-use", "{}", &[]).0, 2, "pi's events have pi's names");
}

#[test]
fn pis_bash_calls_with_that_environment_have_the_bare_output_and_status_and_run_under_sheepdog() {
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let env = pi_env(&st, &[]);
    for original in ["echo out; echo err >&2; printf 'no newline'", "echo out; exit 3", "kill -TERM $$", "cd / && pwd"]
    {
        let bare = as_pi_runs(original, dir.path(), &serde_json::json!({}));
        let hooked = as_pi_runs(original, dir.path(), &env);
        assert_eq!(hooked, bare, "{original}");
    }
    let (out, _, _) = as_pi_runs("cat /proc/$PPID/comm", dir.path(), &env);
    assert_eq!(out, "sheepdog\n", "the call ran under sheepdog");
}

/// A `nohup`'d server and a `setsid` child, left by a call: the call returns at once, they
/// become entries of pi's session, and the result's hook tells them once, with the process
/// tool's words. An entry the `process` tool started (`sheepdog start`, same session) is never
/// told as a leftover.
#[test]
fn what_a_pi_bash_call_leaves_is_kept_in_pis_session_and_told_once() {
    let st = State::new();
    let guard = Guard::new();
    let dir = tempfile::tempdir().unwrap();
    let session = pi_session_of_me();
    let started = st.start(&["--session", &session, "--name", "tool-started", "--", "sleep", "300"]);
    guard.track(started["pid"].as_i64().unwrap() as i32);
    let file = dir.path().join("left");
    let original = format!(
        "nohup sleep 300 >/dev/null 2>&1 & echo $! > {f}; setsid sleep 301 & echo $! >> {f}; echo started",
        f = file.display()
    );
    let t = std::time::Instant::now();
    let (out, _, code) = as_pi_runs(&original, dir.path(), &pi_env(&st, &[]));
    assert_eq!((out.as_str(), code), ("started\n", 0));
    assert!(t.elapsed() < SECS(5), "the call returned once its command ended: {:?}", t.elapsed());
    let left: Vec<i32> = std::fs::read_to_string(&file).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    left.iter().for_each(|p| guard.track(*p));
    assert!(left.iter().all(|p| alive(*p)), "kept running");
    let result = r#"{"type":"tool_result","toolName":"bash","toolCallId":"call_1","content":[{"type":"text","text":"started\n"}],"isError":false}"#;
    let (code, told) = hook(&st, "pi", "tool-result", result, &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(told.trim()).unwrap_or_else(|e| panic!("{e}: {told}"));
    let text = v["append"][0]["text"].as_str().unwrap();
    assert_eq!(v["append"][0]["type"], "text");
    assert_eq!(text.lines().count(), 1, "one entry for what the call left: {text}");
    assert!(text.contains("kept as process ") && text.contains("process tool (action stop, id "), "{text}");
    assert!(!text.contains("tool-started"), "the process tool's own entry is not a leftover: {text}");
    assert_eq!(hook(&st, "pi", "tool-result", result, &[]), (0, String::new()), "told once");
    let kept: Vec<_> = st
        .entries()
        .into_iter()
        .filter(|e| e["sessionId"] == session.as_str() && e["name"] != "tool-started")
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    st.ok(&["stop", "--session", &session]);
    assert_eq!(wait_gone(&left, SECS(10)), Vec::<i32>::new(), "the session's stop ended them");
}

/// pi's start reaps what an earlier pi's crash left (an entry whose supervisor and keeper were
/// both SIGKILLed); a reload or a session switch in the same pi does not.
#[test]
fn pis_startup_reaps_what_earlier_crashes_left_and_a_reload_does_not() {
    let st = State::new();
    let guard = Guard::new();
    let e = st.start(&["--", "sleep", "300"]);
    let id = e["id"].as_str().unwrap().to_string();
    let child = e["pid"].as_i64().unwrap() as i32;
    guard.track(child);
    kill_supervisor_and_keeper(e["supervisorPid"].as_i64().unwrap() as i32);
    assert_eq!(st.entry(&id)["status"], "orphaned");
    assert_eq!(
        hook(&st, "pi", "session-start", r#"{"type":"session_start","reason":"reload"}"#, &[]),
        (0, String::new())
    );
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(alive(child), "a reload reaps nothing");
    assert_eq!(
        hook(&st, "pi", "session-start", r#"{"type":"session_start","reason":"startup"}"#, &[]),
        (0, String::new())
    );
    assert_eq!(wait_gone(&[child], SECS(10)), Vec::<i32>::new(), "the detached reap ended it");
    let t = std::time::Instant::now();
    while st.entry(&id)["status"] != "reaped" {
        assert!(t.elapsed() < SECS(10), "{}", st.entry(&id));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `sheepdog hook opencode shell-env` for a call (`input.callID`): the environment opencode's
/// `shell.env` merges into the call's.
fn opencode_env(st: &State, env: &[(&str, &str)]) -> serde_json::Map<String, serde_json::Value> {
    let input = r#"{"input":{"cwd":"/","sessionID":"ses_1","callID":"call_1"},"output":{"env":{}}}"#;
    let (code, out) = hook(st, "opencode", "shell-env", input, env);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("an answer");
    v["output"]["env"].as_object().expect("output.env").clone()
}

/// Runs `command` as opencode 1.18's bash tool does (`SHELL -c COMMAND`, stdin ignored, the
/// answer's environment merged in) from `dir`: stdout, stderr, status.
fn as_opencode_runs(
    shell: &str,
    command: &str,
    env: &serde_json::Map<String, serde_json::Value>,
    dir: &std::path::Path,
) -> (String, String, i32) {
    let mut c = Command::new(shell);
    c.arg("-c").arg(command).current_dir(dir).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v.as_str().unwrap());
    }
    let out = c.output().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
        out.status.code().unwrap_or(-1),
    )
}

/// opencode's calls are never rewritten: the plugin answers `shell.env`, whose `BASH_ENV` and
/// `ZDOTDIR` files put the call under sheepdog in bash and zsh, with the bare output and status.
#[test]
fn opencode_shell_env_puts_bash_and_zsh_calls_under_sheepdog_without_rewriting_them() {
    let plugin = std::fs::read_to_string("hosts/opencode/sheepdog.js").unwrap();
    assert!(!plugin.contains("tool.execute.before"), "the model's command is never rewritten in opencode");
    let st = State::new();
    let env = opencode_env(&st, &[]);
    let session = env["SHEEPDOG_SESSION"].as_str().unwrap().to_string();
    assert!(session.starts_with(&format!("agent-{}-", std::process::id())), "{session}");
    let dir = tempfile::tempdir().unwrap();
    let command = "mkdir -p sub && cd sub && echo out && echo err >&2 && cat /proc/$PPID/comm";
    let bare_command = "mkdir -p sub && cd sub && echo out && echo err >&2";
    let shells: Vec<&str> =
        ["/bin/bash", "/usr/bin/zsh", "/bin/zsh"].into_iter().filter(|s| std::path::Path::new(s).exists()).collect();
    for shell in &shells {
        let bare = as_opencode_runs(shell, bare_command, &serde_json::Map::new(), dir.path());
        let hooked = as_opencode_runs(shell, command, &env, dir.path());
        assert_eq!(hooked.0, "out\nsheepdog\n", "{shell}: the call ran under sheepdog, once (not nested)");
        assert_eq!((&hooked.1, hooked.2), (&bare.1, bare.2), "{shell}: stderr and status");
        assert_eq!(as_opencode_runs(shell, "exit 7", &env, dir.path()).2, 7, "{shell}");
        // A shell the call starts is not put under a second supervisor.
        let nested = as_opencode_runs(shell, &format!("{shell} -c 'cat /proc/$PPID/comm'; true"), &env, dir.path());
        assert_eq!(nested.0, format!("{}\n", std::path::Path::new(shell).file_name().unwrap().to_string_lossy()));
    }
    assert!(shells.contains(&"/bin/bash"));
}

/// The user's own `BASH_ENV` still runs, once, inside the supervised call.
#[test]
fn opencode_shell_env_keeps_the_users_bash_env() {
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs.sh");
    std::fs::write(&theirs, "echo theirs\n").unwrap();
    let env = opencode_env(&st, &[("BASH_ENV", theirs.to_str().unwrap())]);
    assert_eq!(env["SHEEPDOG_BASH_ENV"].as_str(), theirs.to_str());
    let (out, _, code) = as_opencode_runs("/bin/bash", "cat /proc/$PPID/comm", &env, dir.path());
    assert_eq!((out.as_str(), code), ("theirs\nsheepdog\n", 0));
}

#[test]
fn opencode_answers_nothing_for_a_terminal_or_another_tool() {
    let st = State::new();
    let terminal = r#"{"input":{"cwd":"/"},"output":{"env":{}}}"#;
    assert_eq!(hook(&st, "opencode", "shell-env", terminal, &[]), (0, String::new()), "a terminal is a person's");
    let read = r#"{"input":{"tool":"read","args":{}},"output":{"output":"x"}}"#;
    assert_eq!(hook(&st, "opencode", "post-tool-use", read, &[]), (0, String::new()));
    assert_eq!(hook(&st, "opencode", "shell-env", "not json", &[]), (0, String::new()));
}

/// What a call left running is told to the model once, after the call's output (the only part
/// of a call opencode sends the model).
#[test]
fn opencode_post_tool_use_appends_a_kept_entry_once() {
    let st = State::new();
    let guard = Guard::new();
    let session = opencode_env(&st, &[])["SHEEPDOG_SESSION"].as_str().unwrap().to_string();
    let after = r#"{"input":{"tool":"bash","sessionID":"ses_1","callID":"call_1","args":{"command":"x"}},"output":{"title":"x","metadata":{"exit":0},"output":"started\n"}}"#;
    assert_eq!(hook(&st, "opencode", "post-tool-use", after, &[]), (0, String::new()), "nothing kept yet");
    let e = keep_a_leftover(&st, &session, &guard);
    let (_, out) = hook(&st, "opencode", "post-tool-use", after, &[]);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let text = v["output"]["output"].as_str().unwrap();
    assert!(text.starts_with("started\n\n\nsheepdog: `sleep 300` (pid "), "{text}");
    assert!(text.contains(&format!("kept as entry {}", e["id"].as_str().unwrap())), "{text}");
    assert_eq!(v.as_object().unwrap().len(), 1, "nothing else is changed: {v}");
    assert_eq!(hook(&st, "opencode", "post-tool-use", after, &[]), (0, String::new()), "told once");
    st.ok(&["stop", "--session", &session]);
}

/// The plugin's load runs `session-start`, which answers the static binary the per-call hooks
/// run from then on.
#[test]
fn opencode_session_start_answers_the_static_binary() {
    let st = State::new();
    let (code, out) = hook(&st, "opencode", "session-start", "{}", &[]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(std::path::Path::new(v["exe"].as_str().unwrap()), std::fs::canonicalize(bin()).unwrap().as_path());
}

/// The user's own `ZDOTDIR` is theirs again inside the call: its `.zshenv` runs, once.
#[test]
fn opencode_shell_env_keeps_the_users_zdotdir() {
    let Some(zsh) = ["/usr/bin/zsh", "/bin/zsh"].into_iter().find(|s| std::path::Path::new(s).exists()) else {
        eprintln!("skipped: no zsh");
        return;
    };
    let st = State::new();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(".zshenv"), "echo theirs\n").unwrap();
    let env = opencode_env(&st, &[("ZDOTDIR", dir.path().to_str().unwrap())]);
    assert_eq!(env["SHEEPDOG_ZDOTDIR"].as_str(), dir.path().to_str());
    let (out, _, code) = as_opencode_runs(zsh, "cat /proc/$PPID/comm; echo $ZDOTDIR", &env, dir.path());
    assert_eq!((out.as_str(), code), (format!("theirs\nsheepdog\n{}\n", dir.path().display()).as_str(), 0));
}
