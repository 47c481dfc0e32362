//! Advisory nudges at `start`, of two kinds, because a command can hide work two ways:
//!
//! - **stoppedOnExit**: work that stays in the command's own tree (`&`, `nohup`, `setsid`,
//!   `disown`, `screen -dm`, `ssh -f`, `tmux new -d` starting its own server). sheepdog stops
//!   everything a command left behind the moment the command exits, so an agent that writes
//!   `sh -c 'npm run dev &'` sees its server vanish behind an `exited (0)`: say so, and say to
//!   run the program in the foreground.
//! - **outsideTree**: work that another process owns (`docker run -d`, `docker compose up -d`,
//!   `podman run -d`, `systemctl start`, `service X start`, `pm2 start`, `kubectl apply`, `tmux
//!   new -d` joining a server that already runs). Stopping the tree will not end it: without
//!   `--cleanup`, say so and hint at `--cleanup`. Never infer, suggest or run a concrete cleanup.
//!
//! The check reads argv, or the script of `sh -c` / `bash -c`, split the way a shell would
//! (quotes, `;`, `&&`, `||`, `|`, `&`, newlines), and looks at each simple command's program
//! and flags, so a word inside a quoted argument (`echo "docker run -d"`), `grep -d` and
//! `echo nohup` do not match.

use std::ffi::OsString;

use serde::Serialize;

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash"];
/// Words that run the rest of the line as the command.
const WRAPPERS: &[&str] = &["sudo", "env", "exec", "command", "time", "nice", "ionice", "doas"];

/// Which way a command hides work (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum NudgeKind {
    /// The work stays in the tree and is stopped as soon as the command exits.
    StoppedOnExit,
    /// The work lives outside the tree; stopping the tree will not end it.
    OutsideTree,
}

/// One nudge: `{kind, message, matched}` in JSON; `message` is one sentence, printed on stderr
/// as `sheepdog: warning: MESSAGE`; `matched` names what was found (`nohup, &`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Warning {
    /// `outsideTree` (stopping the tree will not end the work: give a cleanup) or
    /// `stoppedOnExit` (the work is stopped as soon as the command exits).
    pub kind: NudgeKind,
    /// One sentence.
    pub message: String,
    /// What was found (`nohup, &`).
    pub matched: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The warnings for `argv`: at most one per kind, naming everything of that kind found. None
/// when `has_cleanup`: a command given a cleanup was thought about (the README's contract:
/// "without `--cleanup`, start warns").
pub fn check(argv: &[OsString], has_cleanup: bool) -> Vec<Warning> {
    if has_cleanup {
        return Vec::new();
    }
    let words: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut out = Vec::new();
    for kind in [NudgeKind::StoppedOnExit, NudgeKind::OutsideTree] {
        let mut found: Vec<String> = Vec::new();
        for (k, what) in findings(&words) {
            if k == kind && !found.contains(&what) {
                found.push(what);
            }
        }
        if found.is_empty() {
            continue;
        }
        let quoted = found.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(", ");
        let message = match kind {
            NudgeKind::StoppedOnExit => format!(
                "{quoted} leaves work running in this command's own process tree, and sheepdog stops that work as soon as the command exits; run the program in the foreground instead."
            ),
            NudgeKind::OutsideTree => format!(
                "{quoted} starts work outside this command's process tree, so stopping it will not end that work; pass --cleanup CMD to say how to undo it."
            ),
        };
        out.push(Warning { kind, message, matched: found.join(", ") });
    }
    out
}

/// What hides work in `words` (argv), with its kind: e.g. `docker run -d`, `nohup`, `&`.
pub fn findings(words: &[String]) -> Vec<(NudgeKind, String)> {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    if let Some(first) = words.first()
        && SHELLS.contains(&base(first).as_str())
        && let Some(i) =
            words.iter().position(|w| w == "-c" || (w.starts_with('-') && !w.starts_with("--") && w.ends_with('c')))
        && let Some(script) = words.get(i + 1)
    {
        let cmds = split_script(script);
        // A script that `wait`s for its jobs keeps them in the foreground.
        let waits = cmds.iter().any(|(c, _)| c.first().is_some_and(|w| w == "wait"));
        let mut out = Vec::new();
        for (cmd, background) in cmds {
            let background = background && !waits;
            out.extend(simple_command(&cmd, background));
            if background && !cmd.is_empty() {
                out.push((NudgeKind::StoppedOnExit, "&".into()));
            }
        }
        return out;
    }
    simple_command(words, false)
}

/// `docker run`/`podman run` flags that take a value as the next word: everything else before
/// the image is a switch (`-d`, `--rm`, `-it`). After the image the words are the container's
/// command (`ls -d` is not a detach).
const CONTAINER_VALUE_FLAGS: &[&str] = &[
    "-a",
    "--attach",
    "-c",
    "--cpu-shares",
    "--cpus",
    "-e",
    "--env",
    "--env-file",
    "-h",
    "--hostname",
    "-l",
    "--label",
    "-m",
    "--memory",
    "--mount",
    "--name",
    "--network",
    "--net",
    "-p",
    "--publish",
    "--platform",
    "-u",
    "--user",
    "-v",
    "--volume",
    "-w",
    "--workdir",
    "--entrypoint",
    "--add-host",
    "--cap-add",
    "--cap-drop",
    "--device",
    "--dns",
    "--gpus",
    "--health-cmd",
    "--ipc",
    "--log-driver",
    "--log-opt",
    "--pid",
    "--pull",
    "--restart",
    "--runtime",
    "--security-opt",
    "--shm-size",
    "--stop-signal",
    "--stop-timeout",
    "--tmpfs",
    "--ulimit",
    "--userns",
    "--volumes-from",
    "-f",
    "--file",
    "--project-name",
    "--profile",
    "--context",
    "--host",
    "-H",
    "--config",
    "--log-level",
];

/// The words of a container CLI's command line as (positionals, switches before the first
/// positional after `from`): values of [`CONTAINER_VALUE_FLAGS`] are skipped.
fn container_words(args: &[String]) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if CONTAINER_VALUE_FLAGS.contains(&a.as_str()) {
            i += 2;
            continue;
        }
        if !a.starts_with('-') {
            out.push((i, a.as_str()));
        }
        i += 1;
    }
    out
}

/// True if a switch before `until` (an index into `args`) is `--detach` or a short cluster with
/// `d` (`-d`, `-dit`).
fn detach_before(args: &[String], from: usize, until: usize) -> bool {
    let mut i = from;
    while i < until.min(args.len()) {
        let a = &args[i];
        if CONTAINER_VALUE_FLAGS.contains(&a.as_str()) {
            i += 2;
            continue;
        }
        if a == "--detach" || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains('d')) {
            return true;
        }
        i += 1;
    }
    false
}

/// `docker`/`podman`/`nerdctl` commands that leave a container running under the daemon:
/// `run -d` (also `container run -d`), `start` without `--attach`, `compose up -d`.
fn container_detached(prog: &str, args: &[String]) -> Option<String> {
    let words = container_words(args);
    let mut w = words.iter();
    let (mut at, mut cmd) = *w.next()?;
    if cmd == "container" {
        (at, cmd) = *w.next()?;
    }
    let next_positional = w.clone().next().map(|(i, _)| *i).unwrap_or(args.len());
    match cmd {
        "run" if detach_before(args, at + 1, next_positional) => Some(format!("{prog} run -d")),
        "start" if !args.iter().any(|a| a == "-a" || a == "--attach" || a == "-i" || a == "--interactive") => {
            Some(format!("{prog} start"))
        }
        "compose" => {
            let up = words.iter().find(|(_, word)| *word == "up")?;
            detach_before(args, up.0 + 1, args.len()).then(|| format!("{prog} compose up -d"))
        }
        _ => None,
    }
}

/// tmux's command word: the first argument that is neither a flag nor the value of one of
/// tmux's own flags that take one (`-L NAME`, `-S PATH`, `-f FILE`, `-T FEATURES`).
fn tmux_command(args: &[String]) -> Option<&str> {
    let mut i = 0;
    while let Some(a) = args.get(i) {
        if matches!(a.as_str(), "-L" | "-S" | "-f" | "-T") {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some(a);
        }
    }
    None
}

/// True if a tmux server already listens on the socket `args` name (`-L NAME`, `-S PATH`, else
/// `default`), under `$TMUX_TMPDIR` (else /tmp)/tmux-UID: then `tmux new -d` adds a session to
/// that server, outside the command's tree; otherwise it starts a server of its own, inside it.
fn tmux_server_running(args: &[String]) -> bool {
    let flag = |f: &str| args.iter().position(|a| a == f).and_then(|i| args.get(i + 1));
    let path = match (flag("-S"), flag("-L")) {
        (Some(p), _) => std::path::PathBuf::from(p),
        (None, name) => {
            let dir = std::env::var_os("TMUX_TMPDIR").filter(|d| !d.is_empty()).unwrap_or_else(|| "/tmp".into());
            std::path::PathBuf::from(dir)
                .join(format!("tmux-{}", crate::sys::process::getuid()))
                .join(name.map(String::as_str).unwrap_or("default"))
        }
    };
    std::os::unix::net::UnixStream::connect(path).is_ok()
}

/// One simple command: program and arguments.
fn simple_command(words: &[String], background: bool) -> Vec<(NudgeKind, String)> {
    let mut i = 0;
    // Skip assignments (FOO=bar) and wrappers (sudo, env, exec, ...) with their flags.
    while let Some(w) = words.get(i) {
        let name = w.rsplit('/').next().unwrap_or(w);
        if (w.contains('=') && !w.starts_with('-') && !w.starts_with('=')) || WRAPPERS.contains(&name) {
            i += 1;
            while words.get(i).is_some_and(|w| w.starts_with('-')) {
                i += 1;
            }
        } else {
            break;
        }
    }
    let Some(prog) = words.get(i) else { return Vec::new() };
    let prog = prog.rsplit('/').next().unwrap_or(prog).to_string();
    let args = &words[i + 1..];
    let has = |long: &str, short: char| {
        args.iter().any(|a| a == long || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(short)))
    };
    let sub = |n: usize| args.iter().filter(|a| !a.starts_with('-')).nth(n).map(String::as_str);
    use NudgeKind::{OutsideTree, StoppedOnExit};
    let hit = match prog.as_str() {
        // `nohup x` in the foreground is just `x`; `nohup x &` is the job that outlives.
        "nohup" if background => Some((StoppedOnExit, prog.clone())),
        // `setsid -w` waits for its child; plain `setsid` in a group leader forks and exits.
        "setsid" if !has("--wait", 'w') => Some((StoppedOnExit, prog.clone())),
        "disown" | "daemonize" => Some((StoppedOnExit, prog.clone())),
        "docker" | "podman" | "nerdctl" => container_detached(&prog, args).map(|m| (OutsideTree, m)),
        "docker-compose" | "podman-compose" if sub(0) == Some("up") && has("--detach", 'd') => {
            Some((OutsideTree, format!("{prog} up -d")))
        }
        "systemctl" if matches!(sub(0), Some("start") | Some("restart") | Some("enable")) => {
            Some((OutsideTree, format!("systemctl {}", sub(0).unwrap_or("start"))))
        }
        "service" if matches!(sub(1), Some("start") | Some("restart")) => {
            Some((OutsideTree, format!("service {} {}", sub(0).unwrap_or("NAME"), sub(1).unwrap_or("start"))))
        }
        "kubectl" | "oc" if matches!(sub(0), Some("apply") | Some("create") | Some("run") | Some("rollout")) => {
            Some((OutsideTree, format!("{prog} {}", sub(0).unwrap_or("apply"))))
        }
        "helm" if matches!(sub(0), Some("install") | Some("upgrade")) => {
            Some((OutsideTree, format!("helm {}", sub(0).unwrap_or("install"))))
        }
        "tmux" if matches!(tmux_command(args), Some("new") | Some("new-session")) && has("-d", 'd') => {
            let kind = if tmux_server_running(args) { OutsideTree } else { StoppedOnExit };
            Some((kind, "tmux new -d".into()))
        }
        "screen" if has("-d", 'd') && has("-m", 'm') => Some((StoppedOnExit, "screen -dm".into())),
        "pm2" if sub(0) == Some("start") => Some((OutsideTree, "pm2 start".into())),
        "ssh" if has("-f", 'f') => Some((StoppedOnExit, "ssh -f".into())),
        _ => None,
    };
    hit.into_iter().collect()
}

/// Splits a shell script into simple commands (words, and whether it ran in the background
/// with a single `&`). Quotes group words; `$(...)` and here-docs are not interpreted.
pub fn split_script(script: &str) -> Vec<(Vec<String>, bool)> {
    let mut cmds = Vec::new();
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = script.chars().peekable();
    let end_word = |cur: &mut String, in_word: &mut bool, words: &mut Vec<String>| {
        if *in_word {
            words.push(std::mem::take(cur));
            *in_word = false;
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for d in chars.by_ref() {
                    if d == '\'' {
                        break;
                    }
                    cur.push(d);
                }
            }
            '"' => {
                in_word = true;
                while let Some(d) = chars.next() {
                    match d {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                cur.push(e);
                            }
                        }
                        _ => cur.push(d),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    cur.push(e);
                }
            }
            '#' if !in_word => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                end_word(&mut cur, &mut in_word, &mut words);
                cmds.push((std::mem::take(&mut words), false));
            }
            ' ' | '\t' => end_word(&mut cur, &mut in_word, &mut words),
            ';' | '\n' | '|' | '(' | ')' | '{' | '}' => {
                end_word(&mut cur, &mut in_word, &mut words);
                if c == '|' && chars.peek() == Some(&'|') {
                    chars.next();
                }
                cmds.push((std::mem::take(&mut words), false));
            }
            '&' if in_word && (cur.ends_with('>') || cur.ends_with('<')) => cur.push('&'), // 2>&1, >&2
            '&' => {
                end_word(&mut cur, &mut in_word, &mut words);
                if chars.peek() == Some(&'&') {
                    chars.next();
                    cmds.push((std::mem::take(&mut words), false));
                } else if chars.peek() == Some(&'>') {
                    // `&>file`: a redirection, not a background job.
                    cur.push('&');
                    in_word = true;
                } else {
                    cmds.push((std::mem::take(&mut words), true));
                }
            }
            _ => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    end_word(&mut cur, &mut in_word, &mut words);
    cmds.push((words, false));
    cmds.retain(|(w, bg)| !w.is_empty() || *bg);
    cmds
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::{NudgeKind, check};

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn nudged(words: &[&str]) -> bool {
        !check(&argv(words), false).is_empty()
    }

    fn kinds(words: &[&str]) -> Vec<NudgeKind> {
        check(&argv(words), false).into_iter().map(|w| w.kind).collect()
    }

    #[test]
    fn true_positives_with_their_kind() {
        use NudgeKind::{OutsideTree, StoppedOnExit};
        let cases: &[(&[&str], NudgeKind)] = &[
            (&["docker", "run", "-d", "nginx"], OutsideTree),
            (&["docker", "run", "--detach", "nginx"], OutsideTree),
            (&["docker", "run", "-dit", "nginx"], OutsideTree),
            (&["docker", "compose", "up", "-d"], OutsideTree),
            (&["docker-compose", "up", "--detach"], OutsideTree),
            (&["podman", "run", "-d", "redis"], OutsideTree),
            (&["sh", "-c", "nohup python3 server.py &"], StoppedOnExit),
            (&["setsid", "sleep", "100"], StoppedOnExit),
            (&["systemctl", "start", "postgresql"], OutsideTree),
            (&["service", "nginx", "start"], OutsideTree),
            (&["kubectl", "apply", "-f", "deploy.yaml"], OutsideTree),
            (&["helm", "install", "x", "chart"], OutsideTree),
            (&["tmux", "-L", "sheepdog-nudge-test-no-server", "new", "-d", "-s", "x", "make watch"], StoppedOnExit),
            (&["tmux", "-S", "/nonexistent/sock", "new-session", "-d"], StoppedOnExit),
            (&["screen", "-dmS", "x", "make"], StoppedOnExit),
            (&["screen", "-dm", "make"], StoppedOnExit),
            (&["pm2", "start", "app.js"], OutsideTree),
            (&["ssh", "-f", "-N", "-L", "8080:localhost:80", "host"], StoppedOnExit),
            (&["ssh", "-fN", "host"], StoppedOnExit),
            (&["sudo", "docker", "run", "-d", "x"], OutsideTree),
            (&["docker", "compose", "-f", "x.yml", "up", "-d"], OutsideTree),
            (&["docker", "container", "run", "-d", "nginx"], OutsideTree),
            (&["docker", "run", "-p", "8080:80", "--name", "web", "-d", "nginx"], OutsideTree),
            (&["docker", "start", "web"], OutsideTree),
            (&["sh", "-c", "npm run dev &"], StoppedOnExit),
            (&["bash", "-c", "sleep 100 & disown"], StoppedOnExit),
            (&["sh", "-c", "cd app && docker compose up -d"], OutsideTree),
            (&["bash", "-lc", "nohup ./serve > log 2>&1 &"], StoppedOnExit),
            (&["sh", "-c", "FOO=1 nohup x &"], StoppedOnExit),
        ];
        for (c, kind) in cases {
            assert_eq!(kinds(c), vec![*kind], "{c:?}");
        }
    }

    #[test]
    fn tmux_joining_a_running_server_is_outside_the_tree() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("sock");
        let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let s = sock.to_string_lossy().into_owned();
        assert_eq!(kinds(&["tmux", "-S", &s, "new", "-d", "-s", "x"]), vec![NudgeKind::OutsideTree]);
    }

    #[test]
    fn both_kinds_at_once_give_one_warning_each() {
        let w = check(&argv(&["sh", "-c", "docker run -d db; nohup ./serve &"]), false);
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!((w[0].kind, w[0].matched.as_str()), (NudgeKind::StoppedOnExit, "nohup, &"));
        assert!(w[0].message.contains("foreground"), "{}", w[0].message);
        assert_eq!((w[1].kind, w[1].matched.as_str()), (NudgeKind::OutsideTree, "docker run -d"));
        assert!(w[1].message.contains("--cleanup"), "{}", w[1].message);
        let json = serde_json::to_value(&w[0]).unwrap();
        assert_eq!(json["kind"], "stoppedOnExit");
    }

    #[test]
    fn false_positives_avoided() {
        let cases: &[&[&str]] = &[
            &["echo", "nohup"],
            &["grep", "-d", "skip", "pattern"],
            &["sh", "-c", "echo 'docker run -d nginx'"],
            &["sh", "-c", "echo \"nohup x &\""],
            &["sh", "-c", "grep -d skip x && true"],
            &["sh", "-c", "make build > out.log 2>&1"],
            &["sh", "-c", "make &> out.log"],
            &["docker", "run", "--rm", "alpine", "true"],
            &["docker", "ps", "-d"],
            &["systemctl", "status", "nginx"],
            &["ssh", "host", "uptime"],
            &["python3", "-m", "http.server"],
            &["sh", "-c", "# nohup in a comment\ntrue"],
            &["git", "commit", "-m", "use setsid & nohup"],
            &["docker", "run", "--rm", "alpine", "ls", "-d", "/tmp"],
            &["docker", "run", "nginx", "echo", "-d"],
            &["docker", "start", "-a", "web"],
            &["nohup", "sleep", "3"],
            &["/usr/bin/nohup", "x"],
            &["sh", "-c", "exec nohup sleep 1"],
            &["bash", "-c", "sleep 2 & wait"],
            &["setsid", "-w", "make"],
        ];
        for c in cases {
            assert!(!nudged(c), "should not nudge: {c:?}");
        }
    }

    #[test]
    fn no_nudge_when_a_cleanup_is_given() {
        assert!(check(&argv(&["docker", "run", "-d", "x"]), true).is_empty());
        assert!(check(&argv(&["nohup", "x"]), true).is_empty());
    }

    #[test]
    fn one_warning_per_kind_naming_each_finding_once() {
        let w = check(&argv(&["sh", "-c", "docker run -d x; docker run -d y"]), false);
        assert_eq!(w.len(), 1);
        assert!(w[0].message.contains("'docker run -d'") && w[0].message.contains("--cleanup"), "{w:?}");
    }
}
