//! Who the agent is: the process that launched sheepdog's MCP server or ran its hook (Claude
//! Code, Codex, Gemini CLI...), which owns what either starts — not the server itself, which
//! clients restart and kill often, and not the shell a hook runs in.
//!
//! Clients rarely start a server directly. Claude Code, Codex, Cursor and Gemini CLI run the
//! configured command, often through a wrapper: `sh -c "..."`, `npx pkg`, `uvx pkg`, `env K=V
//! cmd`. Such a wrapper is not the agent: when the agent dies the wrapper may linger (or die
//! first), and when the agent restarts the server the wrapper is new. So the owner is the
//! server's parent, skipping every ancestor that is a [launcher](is_launcher), up to the first
//! that is not. `--owner PID` overrides the walk.
//!
//! The default session is derived from the owner's identity (pid and start time), so a server
//! restarted by the same agent sees the same session, and a new agent a new one.

use crate::sys::{Pid, procfs};

/// Programs that only launch the server on the client's behalf (by the basename of `argv[0]`):
/// shells running a script (`-c`), package runners and small exec wrappers.
pub const LAUNCHERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ash",
    "ksh",
    "mksh",
    "fish", // shells, only with `-c`
    "env",
    "nice",
    "nohup",
    "timeout",
    "stdbuf",
    "setsid",
    "exec", // exec wrappers
    "npx",
    "npm",
    "pnpm",
    "pnpx",
    "yarn",
    "bunx",
    "uvx",
    "uv",
    "pipx",
    "mise",
    "asdf", // runners
    "sheepdog",
    "sheepdog-mcp", // `sheepdog mcp` when it did not exec (never the agent)
];

/// Scripts that a `node`, `bun` or `python` interpreter runs as a launcher (by the basename of
/// `argv[1]`), e.g. `node /usr/lib/node_modules/npm/bin/npx-cli.js`.
pub const LAUNCHER_SCRIPTS: &[&str] = &[
    "npx",
    "npx-cli.js",
    "npm",
    "npm-cli.js",
    "pnpm",
    "pnpm.cjs",
    "pnpm.js",
    "yarn",
    "yarn.js",
    "yarn.cjs",
    "pipx",
    "uvx",
    "uv",
    "sheepdog", // the npm package's launcher (`node .../bin/sheepdog mcp`), never the agent
];

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ash", "ksh", "mksh", "fish"];
const INTERPRETERS: &[&str] = &["node", "nodejs", "bun", "deno", "python", "python3"];

/// How far up the walk goes: 16 ancestors.
const MAX_DEPTH: usize = 16;

fn base(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// True if a process with this command line is a launcher, not an agent: a shell with `-c`
/// (an interactive or login shell is a person's, and counts as the owner), a program in
/// [`LAUNCHERS`], an interpreter running one of [`LAUNCHER_SCRIPTS`], or `npm exec` (npx's
/// process title).
pub fn is_launcher(argv: &[String], comm: &str) -> bool {
    let Some(first) = argv.first() else { return false };
    let prog = base(first).trim_start_matches('-');
    if comm == "npm exec" || prog == "npm exec" {
        return true;
    }
    if SHELLS.contains(&prog) {
        return argv
            .iter()
            .skip(1)
            .any(|a| a == "-c" || (a.starts_with('-') && !a.starts_with("--") && a.ends_with('c')));
    }
    if LAUNCHERS.contains(&prog) {
        return true;
    }
    let interp = INTERPRETERS.contains(&prog) || prog.starts_with("python3.");
    if interp {
        // The first argument that is not an option is the script.
        let script = argv.iter().skip(1).find(|a| !a.starts_with('-'));
        if let Some(s) = script {
            return LAUNCHER_SCRIPTS.contains(&base(s));
        }
        if prog.starts_with("python") {
            // `python -m pipx run ...`
            return argv.windows(2).any(|w| w[0] == "-m" && LAUNCHER_SCRIPTS.contains(&w[1].as_str()));
        }
    }
    false
}

fn argv_of(pid: Pid) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        })
        .unwrap_or_default()
}

/// The command line of `pid` (`/proc/PID/cmdline`, one string per argument); empty when the
/// process is gone or unreadable. The hooks read the agent's own flags with it
/// ([`gemini_yolo`]).
pub fn argv(pid: Pid) -> Vec<String> {
    argv_of(pid)
}

/// True if a Gemini CLI command line turns its approvals off: `--yolo` (`-y`, alone or in a
/// cluster of its boolean short flags such as `-dy`) or `--approval-mode yolo`
/// (`--approval-mode=yolo`, yargs' `--approvalMode`). The last of them wins, as in yargs; a
/// `--no-yolo` or `--yolo=false` clears it; nothing after `--` counts, nor the text of a
/// prompt (`-p`, `--prompt`, `-i`, `--prompt-interactive`). Gemini CLI 0.61 takes YOLO only
/// from its command line (`general.defaultApprovalMode` has no `yolo`).
pub fn gemini_yolo(argv: &[String]) -> bool {
    const PROMPTS: &[&str] = &["-p", "--prompt", "-i", "--prompt-interactive"];
    const MODES: &[&str] = &["--approval-mode", "--approvalMode"];
    // Gemini CLI's boolean short flags that can share a cluster with `-y`.
    const SHORT_BOOLS: &str = "dsy";
    let mut yolo = false;
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        let (name, value) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (a.as_str(), None),
        };
        match name {
            "--" => break,
            n if PROMPTS.contains(&n) && value.is_none() => {
                args.next();
            }
            n if MODES.contains(&n) => {
                let mode = value.map(str::to_string).or_else(|| args.next().cloned());
                yolo = mode.as_deref() == Some("yolo");
            }
            "--yolo" => yolo = value.is_none_or(|v| v == "true"),
            "--no-yolo" => yolo = false,
            n if n.len() > 1
                && n.starts_with('-')
                && !n.starts_with("--")
                && n[1..].chars().all(|c| SHORT_BOOLS.contains(c))
                && n.contains('y') =>
            {
                yolo = true
            }
            _ => {}
        }
    }
    yolo
}

/// The agent: this process's parent, or the first ancestor above it that is not a launcher.
/// `None` when the parent is init (the server was orphaned: nothing to be owned by).
pub fn detect() -> Option<Pid> {
    detect_from(Pid::new(crate::sys::process::getppid())?)
}

/// The agent above `pid` (`pid` itself, or its first ancestor that is not a launcher); `None`
/// when `pid` is init.
pub fn detect_from(pid: Pid) -> Option<Pid> {
    let mut pid = Some(pid).filter(|p| p.as_raw() > 1)?;
    for _ in 0..MAX_DEPTH {
        let Ok(st) = procfs::stat(pid) else { return Some(pid) };
        if !is_launcher(&argv_of(pid), &st.comm) {
            return Some(pid);
        }
        match Pid::new(st.ppid).filter(|p| p.as_raw() > 1) {
            Some(parent) => pid = parent,
            // A launcher whose parent is init: the agent is gone already; the launcher is all
            // there is.
            None => return Some(pid),
        }
    }
    Some(pid)
}

/// The default session of an owner: `agent-<pid>-<start time in clock ticks>`; the same for
/// every server the same agent process starts. Without an owner: `agent-none`.
pub fn session_of(owner: Option<Pid>) -> String {
    match owner {
        Some(p) => format!("agent-{}-{}", p, procfs::start_time(p).unwrap_or(0)),
        None => "agent-none".into(),
    }
}

/// The session of a pi process (pi-sheepdog, `pi/`): `pi-<pid>-<start time in clock ticks>`,
/// the one sheepdog session of everything that pi process starts, through its `process` tool
/// and its `bash` tool (`sheepdog hook pi`). pi-sheepdog's `pi/extensions/state.ts` derives the
/// same name from inside pi, so both tools' entries are one list. pi is not found by a walk:
/// its extension runs the hook as its own child, so pi is the hook's parent.
pub fn pi_session_of(pi: Pid) -> String {
    format!("pi-{}-{}", pi, procfs::start_time(pi).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::{gemini_yolo, is_launcher};

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn gemini_yolo_from_its_command_line() {
        assert!(gemini_yolo(&v("node /x/gemini.js -p go --yolo")));
        assert!(gemini_yolo(&v("node --max-old-space-size=8192 /x/bundle/gemini.js -y")));
        assert!(gemini_yolo(&v("gemini -dy")));
        assert!(gemini_yolo(&v("gemini --approval-mode=yolo")));
        assert!(gemini_yolo(&v("gemini --approval-mode yolo -p go")));
        assert!(!gemini_yolo(&v("gemini -p go")));
        assert!(!gemini_yolo(&v("gemini --approval-mode auto_edit")));
        assert!(!gemini_yolo(&v("gemini --yolo --approval-mode default")));
        assert!(!gemini_yolo(&v("gemini --yolo=false")));
        assert!(!gemini_yolo(&v("gemini -p --yolo")), "a prompt's text");
        assert!(!gemini_yolo(&v("gemini -- --yolo")));
        assert!(!gemini_yolo(&v("gemini -my")), "-m takes a value");
    }

    #[test]
    fn launchers_and_agents() {
        assert!(is_launcher(&v("sh -c sheepdog mcp"), "sh"));
        assert!(is_launcher(&v("/bin/bash -lc sheepdog"), "bash"));
        assert!(!is_launcher(&v("-bash"), "bash"));
        assert!(!is_launcher(&v("bash"), "bash"));
        assert!(is_launcher(&v("npm exec sheepdog"), "npm exec"));
        assert!(is_launcher(&v("node /usr/lib/node_modules/npm/bin/npx-cli.js -y sheepdog"), "node"));
        // Issue 21: `npx -y sheepdog mcp` runs the npm package's Node launcher between npx and
        // sheepdog-mcp.
        assert!(is_launcher(&v("node /p/node_modules/.bin/sheepdog mcp"), "node"));
        assert!(is_launcher(&v("node /p/node_modules/sheepdog/bin/sheepdog mcp"), "node"));
        assert!(!is_launcher(&v("node /usr/local/bin/claude"), "node"));
        assert!(!is_launcher(&v("node /usr/local/bin/gemini"), "node"));
        // Issue 31: the PyPI distribution is sheepdog-cli, so uvx and pipx name it apart from
        // the command. uvx runs `uv tool uvx ...` as its child.
        assert!(is_launcher(&v("uvx --from sheepdog-cli sheepdog mcp"), "uvx"));
        assert!(is_launcher(&v("/home/u/.local/bin/uv tool uvx --from sheepdog-cli sheepdog mcp"), "uv"));
        assert!(is_launcher(&v("pipx run --spec sheepdog-cli sheepdog mcp"), "pipx"));
        assert!(is_launcher(&v("/usr/bin/env FOO=1 sheepdog mcp"), "env"));
        assert!(!is_launcher(&v("codex"), "codex"));
        // Issue 33: opencode runs its plugins, `sheepdog mcp` and its bash tool's shells
        // in-process (one native Bun binary, however npm installed it): it is the agent.
        assert!(!is_launcher(&v("/p/node_modules/opencode-linux-x64/bin/opencode run go"), "opencode"));
        assert!(!is_launcher(&v("/p/node_modules/opencode-ai/bin/opencode.exe"), "opencode.exe"));
        assert!(!is_launcher(&v("python3 agent.py"), "python3"));
        // pipx is a Python script: its shebang's interpreter, or `python3 -m pipx`.
        assert!(is_launcher(&v("/usr/bin/python3 /usr/bin/pipx run --spec sheepdog-cli sheepdog mcp"), "pipx"));
        assert!(is_launcher(&v("python3 -m pipx run --spec sheepdog-cli sheepdog mcp"), "python3"));
    }
}
