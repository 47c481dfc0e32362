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

#[cfg(test)]
mod tests {
    use super::is_launcher;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
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
        assert!(is_launcher(&v("uvx sheepdog"), "uvx"));
        // Issue 31: the PyPI distribution is sheepdog-cli.
        assert!(is_launcher(&v("uvx --from sheepdog-cli sheepdog mcp"), "uvx"));
        assert!(is_launcher(&v("/usr/bin/env FOO=1 sheepdog mcp"), "env"));
        assert!(!is_launcher(&v("codex"), "codex"));
        assert!(!is_launcher(&v("python3 agent.py"), "python3"));
        assert!(is_launcher(&v("python3 -m pipx run sheepdog"), "python3"));
    }
}
