//! Advisory nudges at `start`: a command that looks like it starts or controls work outside its
//! own process tree (a container the Docker daemon owns, a `nohup`ed job, a systemd unit, an
//! `ssh -f` tunnel) will not be ended by stopping the tree. Without `--cleanup`, warn once and
//! hint at `--cleanup`. Never infer, suggest or run a concrete cleanup.
//!
//! The check reads argv, or the script of `sh -c` / `bash -c`, split the way a shell would
//! (quotes, `;`, `&&`, `||`, `|`, `&`, newlines), and looks at each simple command's program
//! and flags, so a word inside a quoted argument (`echo "docker run -d"`), `grep -d` and
//! `echo nohup` do not match.

use std::ffi::OsString;

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "ash"];
/// Words that run the rest of the line as the command.
const WRAPPERS: &[&str] = &["sudo", "env", "exec", "command", "time", "nice", "ionice", "doas"];

/// The warning for `argv`: at most one, naming everything found (none when `has_cleanup`).
pub fn check(argv: &[OsString], has_cleanup: bool) -> Vec<String> {
    if has_cleanup {
        return Vec::new();
    }
    let words: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let mut found: Vec<String> = Vec::new();
    for what in findings(&words) {
        if !found.contains(&what) {
            found.push(what);
        }
    }
    if found.is_empty() {
        return Vec::new();
    }
    let what = found.iter().map(|w| format!("'{w}'")).collect::<Vec<_>>().join(", ");
    vec![format!(
        "{what} may start work that outlives this command's process tree (a daemon, a container, a detached session); if so, stopping it will not end that work. Pass --cleanup CMD to say how to undo it."
    )]
}

/// What looks detached in `words` (argv), e.g. `docker run -d`, `nohup`, `&`.
pub fn findings(words: &[String]) -> Vec<String> {
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    if let Some(first) = words.first()
        && SHELLS.contains(&base(first).as_str())
        && let Some(i) =
            words.iter().position(|w| w == "-c" || (w.starts_with('-') && !w.starts_with("--") && w.ends_with('c')))
        && let Some(script) = words.get(i + 1)
    {
        let mut out = Vec::new();
        for (cmd, background) in split_script(script) {
            out.extend(simple_command(&cmd));
            if background && !cmd.is_empty() {
                out.push("&".into());
            }
        }
        return out;
    }
    simple_command(words)
}

/// One simple command: program and arguments.
fn simple_command(words: &[String]) -> Vec<String> {
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
    let detached_run = matches!(sub(0), Some("run") | Some("start") | Some("create")) && has("--detach", 'd');
    let hit = match prog.as_str() {
        "nohup" | "setsid" | "disown" | "daemonize" => Some(prog.clone()),
        "docker" | "podman" | "nerdctl" if detached_run => Some(format!("{prog} {} -d", sub(0).unwrap_or("run"))),
        "docker" | "podman" | "nerdctl"
            if sub(0) == Some("compose") && sub(1) == Some("up") && has("--detach", 'd') =>
        {
            Some(format!("{prog} compose up -d"))
        }
        "docker-compose" | "podman-compose" if sub(0) == Some("up") && has("--detach", 'd') => {
            Some(format!("{prog} up -d"))
        }
        "systemctl" if matches!(sub(0), Some("start") | Some("restart") | Some("enable")) => {
            Some(format!("systemctl {}", sub(0).unwrap_or("start")))
        }
        "service" if matches!(sub(1), Some("start") | Some("restart")) => {
            Some(format!("service {} {}", sub(0).unwrap_or("NAME"), sub(1).unwrap_or("start")))
        }
        "tmux" if matches!(sub(0), Some("new") | Some("new-session")) && has("-d", 'd') => Some("tmux new -d".into()),
        "screen" if has("-d", 'd') && has("-m", 'm') => Some("screen -dm".into()),
        "pm2" if sub(0) == Some("start") => Some("pm2 start".into()),
        "ssh" if has("-f", 'f') => Some("ssh -f".into()),
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
    use super::*;

    fn argv(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn nudged(words: &[&str]) -> bool {
        !check(&argv(words), false).is_empty()
    }

    #[test]
    fn true_positives() {
        let cases: &[&[&str]] = &[
            &["docker", "run", "-d", "nginx"],
            &["docker", "run", "--detach", "nginx"],
            &["docker", "run", "-dit", "nginx"],
            &["docker", "compose", "up", "-d"],
            &["docker-compose", "up", "--detach"],
            &["podman", "run", "-d", "redis"],
            &["nohup", "python3", "server.py"],
            &["setsid", "sleep", "100"],
            &["systemctl", "start", "postgresql"],
            &["service", "nginx", "start"],
            &["tmux", "new", "-d", "-s", "x", "make watch"],
            &["tmux", "new-session", "-d"],
            &["screen", "-dmS", "x", "make"],
            &["screen", "-dm", "make"],
            &["pm2", "start", "app.js"],
            &["ssh", "-f", "-N", "-L", "8080:localhost:80", "host"],
            &["ssh", "-fN", "host"],
            &["sudo", "docker", "run", "-d", "x"],
            &["/usr/bin/nohup", "x"],
            &["sh", "-c", "npm run dev &"],
            &["bash", "-c", "sleep 100 & disown"],
            &["sh", "-c", "cd app && docker compose up -d"],
            &["bash", "-lc", "nohup ./serve > log 2>&1 &"],
            &["sh", "-c", "FOO=1 nohup x"],
        ];
        for c in cases {
            assert!(nudged(c), "should nudge: {c:?}");
        }
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
        ];
        for c in cases {
            assert!(!nudged(c), "should not nudge: {c:?}");
        }
    }

    #[test]
    fn no_nudge_when_a_cleanup_is_given() {
        assert!(check(&argv(&["docker", "run", "-d", "x"]), true).is_empty());
    }

    #[test]
    fn one_warning_per_finding_naming_it() {
        let w = check(&argv(&["sh", "-c", "docker run -d x; docker run -d y"]), false);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("'docker run -d'") && w[0].contains("--cleanup"), "{w:?}");
    }
}
