//! `sheepdog hook HOST EVENT`: the agent hosts' hook entry point (the Claude Code, Codex, Gemini
//! CLI and opencode plugins in `hosts/`, and pi-sheepdog's `bash.ts`). It reads the host's hook JSON on stdin and answers in the host's format on stdout.
//! Recognised before clap: a hook runs on every shell call (BENCHMARKS.md, hooked shell call).
//!
//! - `pre-tool-use` (Codex): a `Bash` call's command gets a line ahead of it that makes the
//!   host's own shell `exec` `sheepdog run --owner $PPID --leftovers keep --session S` on
//!   itself, with the same shell running the same `-c` string inside (see [`guard_line`]): the
//!   host's pid, output, exit status and cwd tracking stay what they were, and the command's
//!   tree is the agent's to the end. Claude Code needs no rewrite: the line goes into its
//!   session's `CLAUDE_ENV_FILE`, which it pastes into every shell call.
//! - `post-tool-use`: what a call left running (kept as entries of the session) is told to the
//!   model once, as `additionalContext`.
//! - `session-start`: the session's id and the line above for its shells (Claude Code's
//!   `CLAUDE_ENV_FILE`), and a detached `reap` of what earlier sessions' crashes left.
//! - `session-end`: a detached `stop --session`, so the host's time budget for the hook cannot
//!   cut the stop short.
//! - Gemini CLI (`hosts/gemini-cli`) names its events `before-tool` (the rewrite, as Codex's,
//!   given only where it widens nothing: [`gemini_may_rewrite`]) and `after-tool` (the tell),
//!   and shares `session-start` and `session-end`.
//!
//! opencode has no hook commands: its plugin (`hosts/opencode/sheepdog.js`) passes a plugin
//! hook's two arguments, `{"input": ..., "output": ...}`, to `sheepdog hook opencode EVENT` and
//! merges the answer into them: `shell-env` (its `shell.env`: the call's environment carries the
//! line, see [`opencode_shell_env`]), `post-tool-use` (`tool.execute.after`), `session-start`
//! (the plugin's load), `session-end` (its `dispose`).
//!
//! pi has no hook commands either: pi-sheepdog's extension hands pi's own events to `sheepdog
//! hook pi tool-call|tool-result|session-start` and applies the answers (see [`pi`]).
//!
//! Fails open: bad input, a registry that cannot be opened, anything unexpected, and the hook
//! answers nothing (exit 0), so the host runs the command as the model wrote it. It never
//! answers a permission decision where the host lets it rewrite without one (Claude Code), so
//! the user's rules still decide; Codex takes a rewrite only with `allow`, which is given only
//! in the modes where Codex would run the call unasked anyway (see [`codex_may_allow`]).

use std::ffi::OsString;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sheepdog::os::Pid;
use sheepdog::registry::Registry;

/// The hosts whose hook formats this speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Host {
    /// Claude Code 2.1 (`hookSpecificOutput.updatedInput` alone rewrites the call).
    Claude,
    /// Codex 0.171 (`updatedInput` needs `permissionDecision: "allow"`).
    Codex,
    /// Gemini CLI 0.61 (`hookSpecificOutput.tool_input` replaces the call's arguments, and its
    /// policy engine then checks the call as rewritten; see [`gemini_may_rewrite`]).
    Gemini,
    /// pi 0.73 and 1.x, through pi-sheepdog's extension (`pi/`): pi's own events in, answers
    /// in a form of this binary's own (see [`pi`]).
    Pi,
    /// opencode 1.18 (its plugin merges the answer into the plugin hook's arguments).
    Opencode,
}

/// The grace a hooked call's tree gets between SIGTERM and SIGKILL: 2 s, inside Claude Code's
/// own 3 s between the SIGTERM and the SIGKILL of a stopped task's tree, so the stop is
/// sheepdog's and ends with the tree confirmed gone.
pub const HOOK_TERM_GRACE: &str = "2s";

/// The file in the state dir naming the static binary that the last session start ran
/// (`hook-exe`): the per-call hooks of `hosts/` exec it directly, past any launcher.
pub const HOOK_EXE_FILE: &str = "hook-exe";

/// Recognises `sheepdog [--state-dir DIR] hook HOST EVENT` and `hook detached -- ARGS...`.
pub(super) fn hook_invocation(args: &[OsString]) -> Option<(Option<PathBuf>, Vec<String>)> {
    let (dir, rest) = super::invocation(args, "hook")?;
    let rest: Option<Vec<String>> = rest.iter().map(|a| a.to_str().map(str::to_string)).collect();
    Some((dir, rest?))
}

/// Runs the hook; always returns 0 (fail open), except for a usage error of `hook` itself (a
/// host or event it does not know: 2, with one line).
pub(super) fn hook(dir: Option<PathBuf>, args: Vec<String>) -> i32 {
    if args.first().map(String::as_str) == Some("detached") {
        return detached(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("gemini") && args.get(1).map(String::as_str) == Some("run") {
        return gemini_run(dir, &args[2..]);
    }
    let (host, event) = match (args.first().map(String::as_str), args.get(1).map(String::as_str)) {
        (Some("claude"), Some(e)) => (Host::Claude, e.to_string()),
        (Some("codex"), Some(e)) => (Host::Codex, e.to_string()),
        (Some("gemini"), Some(e)) => (Host::Gemini, e.to_string()),
        (Some("pi"), Some(e)) => (Host::Pi, e.to_string()),
        (Some("opencode"), Some(e)) => (Host::Opencode, e.to_string()),
        _ => {
            eprintln!(
                "sheepdog: hook: usage: sheepdog hook claude|codex pre-tool-use|post-tool-use|session-start|session-end, sheepdog hook gemini before-tool|after-tool|session-start|session-end, sheepdog hook pi tool-call|tool-result|session-start, or sheepdog hook opencode shell-env|post-tool-use|session-start|session-end"
            );
            return 2;
        }
    };
    let mut raw = String::new();
    // A hook's input is one small JSON document; more than 4 MiB is not one.
    if std::io::stdin().take(4 << 20).read_to_string(&mut raw).is_err() {
        return 0;
    }
    let Ok(input) = serde_json::from_str::<Value>(&raw) else { return 0 };
    if host == Host::Pi {
        return pi::hook(dir, &event, &input);
    }
    let answer = match event.as_str() {
        "shell-env" if host == Host::Opencode => opencode_shell_env(dir, &input),
        "post-tool-use" if host == Host::Opencode => opencode_post_tool_use(dir, &input),
        "session-start" if host == Host::Opencode => opencode_session_start(dir),
        "pre-tool-use" => pre_tool_use(host, dir.as_deref(), &input),
        "post-tool-use" => post_tool_use(dir, &input),
        "before-tool" if host == Host::Gemini => before_tool(dir.as_deref(), &input),
        "after-tool" if host == Host::Gemini => after_tool(dir, &input),
        "session-start" => session_start(host, dir),
        "session-end" => session_end(dir),
        _ => {
            eprintln!(
                "sheepdog: hook: unknown event '{event}' (pre-tool-use, post-tool-use, session-start, session-end; Gemini CLI: before-tool, after-tool; opencode: shell-env)"
            );
            return 2;
        }
    };
    if let Some(a) = answer {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "{a}");
        let _ = out.flush();
    }
    0
}

/// The agent this hook runs for (its parent, past `sh -c`), and its session: the same
/// `agent-<pid>-<start time>` that `sheepdog mcp` derives, so entries from the shell tool and
/// from MCP are one list.
fn agent_session() -> (Option<Pid>, String) {
    let agent = sheepdog::agent::detect();
    (agent, sheepdog::agent::session_of(agent))
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The line that puts a host's shell call under sheepdog: in the host's own shell (bash or
/// zsh, which name their `-c` string) it `exec`s `sheepdog run --owner $PPID --leftovers keep
/// --session S` on itself, with the same shell and `-c` string inside. In there the line is
/// skipped (`SHEEPDOG_CALL` is the session's id: a shell of another agent, nested in this
/// one's call, is put under a supervisor of its own) and the rest of the string runs as the
/// host wrote it: its shell snapshot, the model's command,
/// its cwd tracking. In any other shell, or when the binary is not there any more, the line
/// does nothing and the call runs unsupervised.
///
/// Claude Code pastes its session's `CLAUDE_ENV_FILE` into every shell call's `-c` string
/// ahead of the command, so the line goes there ([`session_start`]) and the model's command is
/// never rewritten: the host's checks (permissions, which commands it moves to the background
/// on a timeout) and its display see the command as the model wrote it. Codex has no such
/// file; its calls get the line ahead of the command ([`rewrite`]).
pub(super) fn guard_line(exe: &Path, state: &Path, session: &str) -> String {
    let exe = quote(&exe.to_string_lossy());
    let run = format!(
        "{exe} --state-dir {} run --owner \"$PPID\" --leftovers keep --session {} --term-grace {HOOK_TERM_GRACE} --fail-open --",
        quote(&state.to_string_lossy()),
        quote(session),
    );
    let call = quote(session);
    format!(
        "if [ \"${{SHEEPDOG_CALL-}}\" != {call} ] && [ -x {exe} ]; then \
         if [ -n \"${{BASH_EXECUTION_STRING-}}\" ]; then SHEEPDOG_CALL={call} exec {run} \"${{BASH:-bash}}\" -c \"$BASH_EXECUTION_STRING\"; \
         elif [ -n \"${{ZSH_EXECUTION_STRING-}}\" ]; then SHEEPDOG_CALL={call} exec {run} \"${{ZSH_NAME:-zsh}}\" -c \"$ZSH_EXECUTION_STRING\"; fi; fi"
    )
}

/// `command` with [`guard_line`] ahead of it, as the host's shell will `eval` it (Codex).
pub(super) fn rewrite(command: &str, exe: &Path, state: &Path, session: &str) -> String {
    format!("{}\n{command}", guard_line(exe, state, session))
}

/// Codex applies a rewritten command only with `permissionDecision: "allow"`, which also skips
/// its approval. So the rewrite is given only where Codex would not ask anyway: approvals off
/// (`bypassPermissions`, `never`). In every other mode the call runs as written, unsupervised,
/// and the user's approval stays in force.
///
/// Codex also checks its execpolicy rules (`prefix_rule`s in `rules/*.rules` of `CODEX_HOME` or
/// the project's `.codex/`) against the command it runs, which after a rewrite begins with the
/// rewrite's own words: a rule forbidding `git push` would no longer match. So where any rules
/// file exists, nothing is rewritten and the rules see the command as the model wrote it.
fn codex_may_allow(input: &Value) -> bool {
    let mode = input.get("permission_mode").and_then(Value::as_str);
    if !matches!(mode, Some("bypassPermissions" | "never")) {
        return false;
    }
    let home = std::env::var_os("CODEX_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".codex")));
    let project = input.get("cwd").and_then(Value::as_str).map(|c| Path::new(c).join(".codex"));
    let has_rules = |dir: PathBuf| {
        std::fs::read_dir(dir.join("rules"))
            .map(|d| d.flatten().any(|f| f.path().extension().is_some_and(|x| x == "rules")))
            .unwrap_or(false)
    };
    !home.into_iter().chain(project).any(has_rules)
}

fn pre_tool_use(host: Host, dir: Option<&Path>, input: &Value) -> Option<Value> {
    if input.get("tool_name").and_then(Value::as_str) != Some("Bash") {
        return None;
    }
    let tool_input = input.get("tool_input")?.as_object()?;
    let command = tool_input.get("command")?.as_str()?;
    if command.trim().is_empty() || (host == Host::Codex && !codex_may_allow(input)) {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let state = sheepdog::registry::state_dir(dir.map(Path::to_path_buf)).ok()?;
    let (_, session) = agent_session();
    let mut updated = tool_input.clone();
    updated.insert("command".into(), Value::String(rewrite(command, &exe, &state, &session)));
    let mut out = json!({ "hookEventName": "PreToolUse", "updatedInput": updated });
    if host == Host::Codex {
        out["permissionDecision"] = json!("allow");
    }
    Some(json!({ "hookSpecificOutput": out }))
}

/// Gemini CLI's `BeforeTool` on `run_shell_command`: the call's arguments come back with
/// [`guard_line`] ahead of the command, where [`gemini_may_rewrite`] says the rewrite widens
/// nothing; every other field is kept (`tool_input` replaces the arguments).
///
/// Gemini CLI wraps the command in a subshell of its own shell (`( trap ... EXIT; COMMAND )`,
/// in `bash -c`), so the line ([`gemini_guard_line`]) `exec`s a supervisor on that subshell and
/// runs the whole `-c` string again inside. Gemini CLI adds one line to what the model reads of
/// every call a hook rewrote (`[System] Tool input parameters were modified by a hook before
/// execution.`); no hook can take it off.
fn before_tool(dir: Option<&Path>, input: &Value) -> Option<Value> {
    if input.get("tool_name").and_then(Value::as_str) != Some("run_shell_command") {
        return None;
    }
    let tool_input = input.get("tool_input")?.as_object()?;
    let command = tool_input.get("command")?.as_str()?;
    let (agent, session) = agent_session();
    if command.trim().is_empty() || !gemini_may_rewrite(&sheepdog::agent::argv(agent?), input) {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let state = sheepdog::registry::state_dir(dir.map(Path::to_path_buf)).ok()?;
    let mut updated = tool_input.clone();
    let line = gemini_guard_line(&exe, &state, &session);
    updated.insert("command".into(), Value::String(format!("{line}\n{command}")));
    Some(json!({ "hookSpecificOutput": { "hookEventName": "BeforeTool", "tool_input": updated } }))
}

/// [`guard_line`] for Gemini CLI's shell, which runs the command in a subshell of `bash -c`:
/// the subshell's parent is that bash, not the agent, and `run --owner` takes only its parent.
/// So the subshell `exec`s `hook gemini run --owner "$PPID" --shell "$$"` ([`gemini_run`]),
/// whose owner is the agent (`$PPID` and `$$` in a subshell are the top shell's), with the whole
/// `-c` string run again inside, where the line is skipped.
pub(super) fn gemini_guard_line(exe: &Path, state: &Path, session: &str) -> String {
    let exe = quote(&exe.to_string_lossy());
    let call = quote(session);
    let run = format!(
        "{exe} --state-dir {} hook gemini run --owner \"$PPID\" --shell \"$$\" --session {call} --",
        quote(&state.to_string_lossy())
    );
    format!(
        "if [ \"${{SHEEPDOG_CALL-}}\" != {call} ] && [ -x {exe} ] && [ -n \"${{BASH_EXECUTION_STRING-}}\" ]; then \
         SHEEPDOG_CALL={call} exec {run} \"${{BASH:-bash}}\" -c \"$BASH_EXECUTION_STRING\"; fi"
    )
}

/// `hook gemini run --owner PID --shell PID --session S -- CMD...`: `sheepdog run --owner PID
/// --leftovers keep --session S --term-grace 2s --fail-open -- CMD...`, except that the owner is any live
/// process (identity-checked by its start time, watched by pidfd), not only sheepdog's parent:
/// in Gemini CLI's shell the agent is the grandparent ([`gemini_guard_line`]). Exits as `run`
/// does: CMD's status, its signal; 125 with one line for a bad invocation; and, as `--fail-open`,
/// CMD run unsupervised where sheepdog cannot supervise it.
///
/// CMD is the host's shell run again, so a signal that ended it was sent to that shell's `$$`
/// (`kill -TERM $$`): in the bare host that is the top shell (`--shell`), whose death by the
/// signal the model is told (`Signal: 15`). So the signal goes on to `--shell` before this
/// process dies by it; a command's own death by a signal ends the subshell, not the shell, and
/// is a status here.
fn gemini_run(dir: Option<PathBuf>, args: &[String]) -> i32 {
    use sheepdog::supervisor::{self, Exit, Options, Owner, Quiet};
    let usage = || {
        eprintln!(
            "sheepdog: hook: usage: sheepdog hook gemini run --owner PID --shell PID --session ID -- CMD [ARGS...]"
        );
        sheepdog::exit::USAGE
    };
    let [flag_owner, owner, flag_shell, shell, flag_session, session, dashes, cmd @ ..] = args else { return usage() };
    let flags = [flag_owner, flag_shell, flag_session, dashes].map(String::as_str);
    if flags != ["--owner", "--shell", "--session", "--"] || cmd.is_empty() {
        return usage();
    }
    let pid = |raw: &str| raw.parse::<i32>().ok().and_then(Pid::new);
    let (Some(owner), Some(shell)) = (pid(owner), pid(shell)) else { return usage() };
    let argv: Vec<OsString> = cmd.iter().map(OsString::from).collect();
    // As `run --fail-open`: what keeps sheepdog from supervising never blocks the call.
    let fail = |e: String| super::run::run_unsupervised(&argv, &e);
    if let Err(e) = sheepdog::entry::check_session(session) {
        return fail(e);
    }
    let mode = match sheepdog::cgroup::Mode::from_env() {
        Ok(m) => m,
        Err(e) => return fail(e),
    };
    let reg = match Registry::open(dir) {
        Ok(r) => r,
        Err(e) => return fail(e.to_string()),
    };
    let tag = match sheepdog::registry::new_tag() {
        Ok(t) => t,
        Err(e) => return fail(format!("unable to read random bytes for the tag: {e}")),
    };
    let policy = sheepdog::stop::StopPolicy {
        stdin_grace: std::time::Duration::from_secs(1),
        term_grace: std::time::Duration::from_secs(2),
        kill_wait: std::time::Duration::from_millis(1500),
    };
    let opts = Options {
        argv: argv.clone(),
        owner: Some(Owner::Process(owner)),
        policy,
        containment: sheepdog::cgroup::Request { mode, limits: Default::default(), label: "run".into(), name: None },
        keep_leftovers: true,
        tag: Some(tag.clone()),
        ..Options::default()
    };
    let mut outcome = match supervisor::supervise(opts, &mut Quiet) {
        Ok(o) => o,
        Err(e) if e.before_command() => return fail(e.to_string()),
        Err(e) => {
            eprintln!("sheepdog: {e}");
            return e.exit_code();
        }
    };
    let exit = outcome.exit();
    if let Some(kept) = outcome.kept.take() {
        let cwd = std::env::current_dir().unwrap_or_else(|_| "/".into());
        let session_id = Some(session.clone());
        let h =
            sheepdog::manager::Handoff { kept, tag, session_id, owner: Some(owner), cwd, policy, provider_argv: argv };
        if let Err(e) = sheepdog::manager::hand_off(&reg, h) {
            eprintln!("sheepdog: what CMD left running could not be kept ({e}); it was stopped");
        }
    } else if !outcome.tree_gone {
        eprintln!("sheepdog: the process tree of {} was still alive after SIGKILL; exiting 124", outcome.spawned.pid);
    }
    // In the keeper: the work is done; the supervisor in front exits as this process does.
    if let Some(keeper) = outcome.keeper.take() {
        keeper.done();
    }
    match exit {
        Exit::Code(c) => c,
        Exit::Signal(s) => {
            let _ = sheepdog::os::process::kill(shell, s);
            sheepdog::os::die_by(s)
        }
    }
}

/// Gemini CLI's `AfterTool`: what [`post_tool_use`] tells, as Gemini's `additionalContext`
/// (appended to the tool's result inside `<hook_context>`).
fn after_tool(dir: Option<PathBuf>, input: &Value) -> Option<Value> {
    let mut answer = post_tool_use(dir, input)?;
    answer["hookSpecificOutput"]["hookEventName"] = json!("AfterTool");
    Some(answer)
}

/// Gemini CLI 0.61 runs a `BeforeTool` hook before its policy engine, which then checks the
/// call as rewritten: each part of a compound command against the rules, and the guard's own
/// parts (`[`, `exec`) like any command the user has not allowed. So the rewrite is given
/// only where it widens and narrows nothing:
///
/// - approvals off (`--yolo`, `--approval-mode yolo` on the agent's command line:
///   [`sheepdog::agent::gemini_yolo`]), where no part is asked about; in any other mode the
///   guard's parts would be asked about (or refused, headless) where the bare call was not;
/// - no policy file (user, workspace, system, extensions; `--policy`, `--admin-policy`) with an
///   `argsPattern` or `commandRegex` rule: such a pattern may match a compound command as a
///   whole, which the rewrite changes. `commandPrefix` rules and `tools.exclude` match each part,
///   and the model's command keeps its parts, so they still deny it;
/// - no shell allowlist (`tools.core`, `tools.allowed` or `--allowed-tools` naming
///   `run_shell_command(...)`): the guard's parts are not on it, so every call would be refused.
///
/// Otherwise the call runs as written, unsupervised.
pub(super) fn gemini_may_rewrite(argv: &[String], input: &Value) -> bool {
    if !sheepdog::agent::gemini_yolo(argv) {
        return false;
    }
    let flagged = ["--policy", "--admin-policy", "--allowed-tools", "--allowedTools"];
    if argv.iter().any(|a| flagged.iter().any(|f| a == f || a.starts_with(&format!("{f}=")))) {
        return false;
    }
    let home = std::env::var_os("GEMINI_CLI_HOME").or_else(|| std::env::var_os("HOME")).map(PathBuf::from);
    let user = home.map(|h| h.join(".gemini"));
    let workspace = input.get("cwd").and_then(Value::as_str).map(|c| Path::new(c).join(".gemini"));
    let system = PathBuf::from(if cfg!(target_os = "macos") {
        "/Library/Application Support/GeminiCli"
    } else {
        "/etc/gemini-cli"
    });
    let system_settings = std::env::var_os("GEMINI_CLI_SYSTEM_SETTINGS_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| system.join("settings.json"));
    let system_defaults = std::env::var_os("GEMINI_CLI_SYSTEM_DEFAULTS_PATH")
        .map(PathBuf::from)
        .unwrap_or_else(|| system.join("system-defaults.json"));
    // Extensions bring policies too (deny and ask only): an installed one in its copy, a
    // linked one where its install record points.
    let extensions: Vec<PathBuf> = user
        .iter()
        .filter_map(|u| std::fs::read_dir(u.join("extensions")).ok())
        .flat_map(|d| d.flatten().map(|e| e.path()))
        .map(|e| {
            let record = std::fs::read_to_string(e.join(".gemini-extension-install.json")).ok();
            let linked = record
                .and_then(|r| serde_json::from_str::<Value>(&r).ok())
                .filter(|v| v["type"] == "link")
                .and_then(|v| v["source"].as_str().map(PathBuf::from));
            linked.unwrap_or(e)
        })
        .collect();
    let dirs: Vec<PathBuf> = user.into_iter().chain(workspace).chain([system]).collect();
    let pattern_rules = |dir: &PathBuf| {
        std::fs::read_dir(dir.join("policies")).is_ok_and(|d| {
            d.flatten().filter(|f| f.path().extension().is_some_and(|x| x == "toml")).any(|f| {
                std::fs::read_to_string(f.path()).is_ok_and(|t| t.contains("argsPattern") || t.contains("commandRegex"))
            })
        })
    };
    if dirs.iter().chain(&extensions).any(pattern_rules) {
        return false;
    }
    let settings = dirs.iter().map(|d| d.join("settings.json")).chain([system_settings, system_defaults]);
    !settings.filter_map(|f| std::fs::read_to_string(f).ok()).any(|t| gemini_shell_allowlist(&t))
}

/// True if a Gemini CLI settings file narrows the shell tool to a list (`tools.core` or
/// `tools.allowed` with a `run_shell_command(...)` entry). A file that is not plain JSON (Gemini
/// CLI reads comments too) counts if it names `run_shell_command(` anywhere.
fn gemini_shell_allowlist(text: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(text) else { return text.contains("run_shell_command(") };
    ["core", "allowed"].iter().any(|k| {
        v.pointer(&format!("/tools/{k}")).and_then(Value::as_array).is_some_and(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .any(|e| e.starts_with("run_shell_command(") || e.starts_with("ShellTool("))
        })
    })
}

/// What the agent's calls left running and the model was not told yet, each told once
/// ([`Registry::take_untold`]: the leftovers hand-off marks each entry it makes; an entry the
/// model started itself, in the same session, is no leftover and is never told as one), as
/// Claude Code's and Codex's `PostToolUse` `additionalContext`.
fn post_tool_use(dir: Option<PathBuf>, _input: &Value) -> Option<Value> {
    let reg = Registry::open(dir).ok()?;
    let (_, session) = agent_session();
    let lines: Vec<String> = reg.take_untold(&session)
        .iter()
        .map(|e| {
            format!(
                "sheepdog: `{}` (pid {}) is still running from that command, kept as entry {} ({}) of this session; it is stopped when the session ends. Stop it earlier with `sheepdog stop {}`, read its output with `sheepdog logs {}`.",
                e.command_preview,
                e.pid().unwrap_or(0),
                e.id,
                e.label(),
                e.id,
                e.id
            )
        })
        .collect();
    if lines.is_empty() {
        return None;
    }
    Some(json!({ "hookSpecificOutput": { "hookEventName": "PostToolUse", "additionalContext": lines.join("\n") } }))
}

fn session_start(host: Host, dir: Option<PathBuf>) -> Option<Value> {
    let (_, session) = agent_session();
    if host == Host::Claude
        && let Some(file) = std::env::var_os("CLAUDE_ENV_FILE")
        && let Ok(exe) = std::env::current_exe()
        && let Ok(state) = sheepdog::registry::state_dir(dir.clone())
        && let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(file)
    {
        let _ = writeln!(f, "export SHEEPDOG_SESSION={}", quote(&session));
        let _ = writeln!(f, "{}", guard_line(&exe, &state, &session));
    }
    // The static binary's path, for the hooks that run on every call (`hooks.json` reads it
    // with the shell's `read`): `sheepdog` on PATH may be npm's Node launcher, whose start
    // would cost every call ~80 ms (BENCHMARKS.md).
    if let Ok(exe) = std::env::current_exe()
        && let Ok(reg) = Registry::open(dir.clone())
    {
        let _ = sheepdog::files::write_atomic(&reg.root().join(HOOK_EXE_FILE), exe.as_os_str().as_encoded_bytes());
    }
    // What an earlier session's crash left (its hook never ran, its supervisor was killed):
    // `reap` takes entries whose supervisor is gone; the rest stop on their own owner's death.
    spawn_detached(dir.as_deref(), &["reap"]);
    None
}

fn session_end(dir: Option<PathBuf>) -> Option<Value> {
    let (_, session) = agent_session();
    spawn_detached(dir.as_deref(), &["stop", "--session", &session]);
    None
}

/// opencode's `shell.env` (`{"input": {"cwd", "sessionID", "callID"}, "output": {"env"}}`),
/// which it asks before it spawns a call of its bash tool (and a `!` command of the user's),
/// after its permission check: the call's environment gets `BASH_ENV` and `ZDOTDIR`, whose
/// files (bash reads `BASH_ENV`, zsh `$ZDOTDIR/.zshenv`, before the `-c` string) hold
/// [`guard_line`]. The same design as Claude Code's `CLAUDE_ENV_FILE`: the model's command is
/// never rewritten, so opencode's permission check, its display and the call the model reads
/// back in its next request all see it as the model wrote it. (A rewrite of
/// `tool.execute.before`'s `output.args.command` would stay in opencode's stored call: the model
/// would read the guard line back as its own command.) A `shell.env` without a `callID` is a
/// terminal's, a person's: it gets nothing.
///
/// The user's own `BASH_ENV` and `ZDOTDIR` are kept: the files read them back from
/// `SHEEPDOG_BASH_ENV` and `SHEEPDOG_ZDOTDIR` once the guard has not taken the call (inside it,
/// or in another shell the call starts). In a shell other than bash or zsh the call runs
/// unsupervised.
fn opencode_shell_env(dir: Option<PathBuf>, input: &Value) -> Option<Value> {
    input.pointer("/input/callID")?.as_str()?;
    let (_, session) = agent_session();
    Some(json!({ "output": { "env": shell_env(dir, "opencode", &session)? } }))
}

/// The environment that puts a host's `bash -c` and `zsh -c` calls under sheepdog without
/// rewriting them (opencode's `shell.env`, pi's `process.env`): `BASH_ENV` and `ZDOTDIR` naming
/// files of `<state>/<host>/<session>/` that hold [`guard_line`], `SHEEPDOG_SESSION`, and the
/// user's own `BASH_ENV` and `ZDOTDIR` kept as `SHEEPDOG_BASH_ENV` and `SHEEPDOG_ZDOTDIR` (the
/// files read them after the guard). A `BASH_ENV` or `ZDOTDIR` that already names these files
/// (the host asked twice) is not kept: the file would read itself.
fn shell_env(dir: Option<PathBuf>, host: &str, session: &str) -> Option<Value> {
    let exe = std::env::current_exe().ok()?;
    let state = sheepdog::registry::state_dir(dir).ok()?;
    let files = shell_env_files(&exe, &state, host, session)?;
    let mut env = json!({
        "BASH_ENV": files.join(SHELL_BASH_ENV).to_string_lossy(),
        "ZDOTDIR": files.to_string_lossy(),
        "SHEEPDOG_SESSION": session,
    });
    for (theirs, kept) in [("BASH_ENV", "SHEEPDOG_BASH_ENV"), ("ZDOTDIR", "SHEEPDOG_ZDOTDIR")] {
        if let Some(v) = std::env::var_os(theirs).filter(|v| !v.is_empty() && !Path::new(v).starts_with(&files)) {
            env[kept] = json!(v.to_string_lossy());
        }
    }
    Some(env)
}

/// The file bash reads first in a session's calls (`BASH_ENV`, [`shell_env`]), in that
/// session's directory under the state dir, next to zsh's `.zshenv`.
pub const SHELL_BASH_ENV: &str = "bash-env";

/// Writes (once) `<state>/<host>/<session>/{bash-env,.zshenv}` and returns that directory. The
/// files stay after the session: what a call left running keeps them in its environment, and a
/// bash it starts later would complain of a missing `BASH_ENV`.
fn shell_env_files(exe: &Path, state: &Path, host: &str, session: &str) -> Option<PathBuf> {
    let dir = state.join(host).join(session);
    let guard = guard_line(exe, state, session);
    let bash = format!("{guard}\nif [ -n \"${{SHEEPDOG_BASH_ENV-}}\" ]; then . \"$SHEEPDOG_BASH_ENV\"; fi\n");
    // zsh: ZDOTDIR is the user's again before anything else runs (the call under sheepdog, and
    // every zsh it starts, read the user's files), then the user's .zshenv if the guard did not
    // take the call.
    let zsh = format!(
        "if [ -n \"${{SHEEPDOG_ZDOTDIR-}}\" ]; then ZDOTDIR=\"$SHEEPDOG_ZDOTDIR\"; else unset ZDOTDIR; fi\n{guard}\n\
         if [ -f \"${{ZDOTDIR:-$HOME}}/.zshenv\" ]; then . \"${{ZDOTDIR:-$HOME}}/.zshenv\"; fi\n"
    );
    for (name, text) in [(SHELL_BASH_ENV, bash), (".zshenv", zsh)] {
        let path = dir.join(name);
        if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            std::fs::create_dir_all(&dir).ok()?;
            sheepdog::files::write_atomic(&path, text.as_bytes()).ok()?;
        }
    }
    Some(dir)
}

/// opencode's `tool.execute.after` (`{"input": {"tool", "args"}, "output": {"title", "output",
/// "metadata"}}`) for a `bash` call: what the call left running (kept as entries of the
/// session) is told to the model once, appended to `output.output` after a blank line. The tool
/// result's text is the one part of a call that opencode sends the model (its `metadata` and
/// `title` go to the display alone); the command's own output before it is unchanged.
fn opencode_post_tool_use(dir: Option<PathBuf>, input: &Value) -> Option<Value> {
    if input.pointer("/input/tool").and_then(Value::as_str) != Some("bash") {
        return None;
    }
    let told = post_tool_use(dir, input)?;
    let lines = told.pointer("/hookSpecificOutput/additionalContext")?.as_str()?;
    let output = input.pointer("/output/output").and_then(Value::as_str).unwrap_or_default();
    Some(json!({ "output": { "output": format!("{output}\n\n{lines}") } }))
}

/// opencode's plugin load (the start of an opencode process's agent session): what
/// [`session_start`] does, and the static binary's path (`{"exe"}`), which the plugin runs for
/// the per-call hooks from then on (`sheepdog` on PATH may be npm's Node launcher).
fn opencode_session_start(dir: Option<PathBuf>) -> Option<Value> {
    session_start(Host::Opencode, dir);
    let exe = std::env::current_exe().ok()?;
    Some(json!({ "exe": exe.to_string_lossy() }))
}

/// Runs `sheepdog ARGS` apart from the host: through `hook detached`, which starts it in a
/// process group of its own and exits at once, so it is no descendant of the hook that a host
/// could kill with the hook's tree.
fn spawn_detached(dir: Option<&Path>, args: &[&str]) {
    let Ok(exe) = std::env::current_exe() else { return };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(["hook", "detached", "--"]);
    if let Some(d) = dir {
        cmd.arg("--state-dir").arg(d);
    }
    cmd.args(args);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    if let Ok(mut c) = cmd.spawn() {
        let _ = c.wait();
    }
}

/// `hook detached -- ARGS...`: starts `sheepdog ARGS` in a process group of its own and returns
/// without waiting (its parent, the hook, reaps this process at once; the child is left to the
/// nearest subreaper).
fn detached(args: &[String]) -> i32 {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else { return 0 };
    let args = args.strip_prefix(&["--".to_string()]).unwrap_or(args);
    let mut cmd = std::process::Command::new(exe);
    cmd.args(args).process_group(0);
    cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    let _ = cmd.spawn();
    0
}

/// `sheepdog hook pi EVENT`: pi-sheepdog's extension (`pi/extensions/bash.ts`) hands pi's own
/// events to the static binary and applies the answer. pi has no hook config and no
/// permission decision: its extensions see each tool call in `tool_call`, may change its input
/// in place or block it, and may change a result in `tool_result`. So the answers here are in a
/// form of this binary's own, one JSON document or nothing:
///
/// - `shell-env` (once, at pi's start): `{"env":{...}}`, what the extension adds to pi's
///   `process.env`, which pi's bash tool passes to each `bash -c` it runs ([`shell_env`], as
///   opencode's `shell.env`): `BASH_ENV` names a file holding [`guard_line`]. pi runs `bash -c`
///   as its own child, so `$PPID` in that shell is pi, the owner: pi's exit, its `kill -9` and
///   its stop (Esc, the call's timeout: a SIGKILL of the call's process group, which misses
///   `run`'s keeper) each end the tree, and what the command leaves running (`&`, `nohup`,
///   `setsid`) becomes an entry of pi's session. The model's command is never rewritten, so
///   every other extension's `tool_call` handler, in any load order, sees it as the model
///   wrote it: the hook takes nothing away from, and adds nothing to, what they decide.
/// - `tool-result` (pi's `tool_result` of a `bash` call): `{"append":[{"type":"text","text":T}]}`,
///   a content block to add after the tool's own (pi joins a result's text blocks with a line
///   break; the command's output is not rewritten): which entries of the session, kept from a
///   `bash` call, are running and not told yet, each told once (the same marks as
///   `post-tool-use`), with the `process` tool's words to stop them.
/// - `session-start` (pi's `session_start`, `{"reason":"startup"|"reload"|...}`): on a pi
///   process's start, a detached `reap` of what earlier pi processes' crashes left (the rest
///   stopped when their owner, that pi, died). A reload or a session switch keeps the process.
///
/// The session is pi's (`pi-<pid>-<start time>`, [`sheepdog::agent::pi_session_of`]): the
/// hook's parent is pi itself, and the `process` tool's entries are in the same session.
mod pi {
    use std::io::Write;
    use std::path::{Path, PathBuf};

    use serde_json::{Value, json};
    use sheepdog::os::Pid;
    use sheepdog::registry::Registry;

    use super::spawn_detached;

    /// Runs one pi event: 0 (an answer, or none), or 2 for an event it does not know.
    pub(super) fn hook(dir: Option<PathBuf>, event: &str, input: &Value) -> i32 {
        let answer = match event {
            "shell-env" => shell_env(dir, input),
            "tool-result" => tool_result(dir, input),
            "session-start" => session_start(dir.as_deref(), input),
            _ => {
                eprintln!("sheepdog: hook: unknown pi event '{event}' (shell-env, tool-result, session-start)");
                return 2;
            }
        };
        if let Some(a) = answer {
            let mut out = std::io::stdout();
            let _ = writeln!(out, "{a}");
            let _ = out.flush();
        }
        0
    }

    /// pi's session: the hook's parent is the pi process whose extension ran it.
    fn session() -> Option<String> {
        let pi = Pid::new(sheepdog::os::process::getppid()).filter(|p| p.as_raw() > 1)?;
        Some(sheepdog::agent::pi_session_of(pi))
    }

    fn bash_call(input: &Value) -> bool {
        input.get("toolName").and_then(Value::as_str) == Some("bash")
    }

    /// pi's bash tool runs `bash -c` with pi's `process.env` of the moment: the extension puts
    /// this answer there once, at pi's start.
    fn shell_env(dir: Option<PathBuf>, _input: &Value) -> Option<Value> {
        let session = session()?;
        Some(json!({ "env": super::shell_env(dir, "pi", &session)? }))
    }

    fn tool_result(dir: Option<PathBuf>, input: &Value) -> Option<Value> {
        if !bash_call(input) {
            return None;
        }
        let session = session()?;
        let reg = Registry::open(dir).ok()?;
        // The `process` tool's entries, in the same session, are the model's own starts.
        let lines: Vec<String> = reg.take_untold(&session)
            .iter()
            .map(|e| format!(
                "sheepdog: `{}` (pid {}) is still running from that command, kept as process {} of this pi session; it is stopped when pi exits. Stop it earlier with the process tool (action stop, id {}); read its output with action output, id {}.",
                e.command_preview,
                e.pid().unwrap_or(0),
                e.label(),
                e.id,
                e.id
            ))
            .collect();
        if lines.is_empty() {
            return None;
        }
        Some(json!({ "append": [{ "type": "text", "text": lines.join("\n") }] }))
    }

    fn session_start(dir: Option<&Path>, input: &Value) -> Option<Value> {
        if matches!(input.get("reason").and_then(Value::as_str), None | Some("startup")) {
            spawn_detached(dir, &["reap"]);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::rewrite;

    #[test]
    fn the_rewrite_keeps_the_command_and_quotes_every_value() {
        let r = rewrite("echo 'a b'", Path::new("/x/sheep dog"), Path::new("/st"), "agent-'1");
        assert!(r.ends_with("\necho 'a b'"), "{r}");
        assert!(r.contains("'/x/sheep dog' --state-dir '/st' run --owner \"$PPID\""), "{r}");
        assert!(r.contains("--session 'agent-'\\''1'"), "{r}");
    }
}
