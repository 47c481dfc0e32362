//! `sheepdog hook HOST EVENT`: the agent hosts' hook entry point (Claude Code and Codex plugins,
//! `hosts/`). It reads the host's hook JSON on stdin and answers in the host's format on stdout.
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
    let (host, event) = match (args.first().map(String::as_str), args.get(1).map(String::as_str)) {
        (Some("claude"), Some(e)) => (Host::Claude, e.to_string()),
        (Some("codex"), Some(e)) => (Host::Codex, e.to_string()),
        _ => {
            eprintln!(
                "sheepdog: hook: usage: sheepdog hook claude|codex pre-tool-use|post-tool-use|session-start|session-end"
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
    let answer = match event.as_str() {
        "pre-tool-use" => pre_tool_use(host, dir.as_deref(), &input),
        "post-tool-use" => post_tool_use(dir, &input),
        "session-start" => session_start(host, dir),
        "session-end" => session_end(dir),
        _ => {
            eprintln!(
                "sheepdog: hook: unknown event '{event}' (pre-tool-use, post-tool-use, session-start, session-end)"
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
        "{exe} --state-dir {} run --owner \"$PPID\" --leftovers keep --session {} --term-grace {HOOK_TERM_GRACE} --",
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

/// The session's running entries not yet told to the model, each told once (an `announced`
/// file created exclusively in the entry's directory).
fn post_tool_use(dir: Option<PathBuf>, _input: &Value) -> Option<Value> {
    let reg = Registry::open(dir).ok()?;
    let (_, session) = agent_session();
    let (entries, _) = reg.list();
    let mut lines = Vec::new();
    for e in entries.iter().filter(|e| e.session_id.as_deref() == Some(&session) && !e.is_finished()) {
        let told = std::fs::OpenOptions::new().write(true).create_new(true).open(reg.file(&e.id, "announced"));
        if told.is_err() {
            continue;
        }
        lines.push(format!(
            "sheepdog: `{}` (pid {}) is still running from that command, kept as entry {} ({}) of this session; it is stopped when the session ends. Stop it earlier with `sheepdog stop {}`, read its output with `sheepdog logs {}`.",
            e.command_preview,
            e.pid.unwrap_or(0),
            e.id,
            e.label(),
            e.id,
            e.id
        ));
    }
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
