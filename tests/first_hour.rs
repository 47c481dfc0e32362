//! Issue 31, item 5: a newcomer's first-hour stumbles, each with the real binary: the hint when
//! `sheepdog mcp`/`top` are not built, an idempotent session cancel, suggestions for typos with
//! the subcommand's own help, and one rule for duration units. Each test has its own state dir;
//! `State` kills what its entries started, by recorded identity.
#![cfg(target_os = "linux")]

mod common;

use common::*;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_flag_typo_gets_a_suggestion_and_the_subcommands_help() {
    let st = State::new();
    let o = st.run(&["stop", "--term-grac", "1s", "web"]);
    assert_eq!(o.status.code(), Some(125));
    assert_eq!(
        stderr(&o).trim(),
        "sheepdog: unexpected argument '--term-grac' found (did you mean '--term-grace'?) (see 'sheepdog stop --help')"
    );
    let o = st.run(&["stpo"]);
    assert_eq!(o.status.code(), Some(125));
    let e = stderr(&o);
    assert!(e.contains("(did you mean 'top' or 'stop'?) (see 'sheepdog --help')"), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
}

#[test]
fn every_duration_needs_a_unit_and_the_error_says_which() {
    let st = State::new();
    // The two forms a newcomer tried: once `0` passed bare and `5` did not.
    for (flag, bare) in [("--term-grace", "0"), ("--timeout", "5"), ("--kill-wait", "1.5")] {
        let o = st.run(&["run", flag, bare, "--", "true"]);
        assert_eq!(o.status.code(), Some(125), "{flag} {bare}");
        let e = stderr(&o);
        assert!(e.contains(&format!("a number needs a unit, like {bare}s or {bare}ms")), "{e}");
        assert!(e.contains("(see 'sheepdog run --help')"), "{e}");
    }
    for ok in ["0s", "0ms"] {
        let o = st.run(&["run", "--term-grace", ok, "--", "true"]);
        assert_eq!(o.status.code(), Some(0), "{ok}: {}", stderr(&o));
    }
}

#[test]
fn mcp_and_top_that_were_not_built_say_how_to_build_them() {
    // `cargo run --release -- run ...` builds only sheepdog: a copy of it alone in a directory.
    let dir = tempfile::tempdir().unwrap();
    let lone = dir.path().join("sheepdog");
    std::fs::copy(bin(), &lone).unwrap();
    for (sub, binary) in [("mcp", "sheepdog-mcp"), ("top", "sheepdog-top")] {
        let o = std::process::Command::new(&lone).arg(sub).stdin(std::process::Stdio::null()).output().unwrap();
        assert_eq!(o.status.code(), Some(125), "{sub}");
        let e = stderr(&o);
        assert!(e.contains(&format!("{binary}: not found")), "{e}");
        assert!(e.contains("`cargo build --release`"), "{e}");
    }
}

#[test]
fn a_second_session_cancel_with_missing_ok_is_an_empty_list() {
    let st = State::new();
    st.start(&["--session", "turn-1", "--", "sleep", "100"]);
    let first = st.ok(&["--json", "stop", "--session", "turn-1"]);
    let v: serde_json::Value = serde_json::from_str(first.trim()).unwrap();
    assert_eq!(v["stopped"].as_array().map(Vec::len), Some(1), "{v}");
    // Without the flag a second cancel is refused, as before (a typo in a session id shows).
    let o = st.run(&["stop", "--session", "turn-1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing matched --session turn-1"), "{}", stderr(&o));
    let o = st.run(&["--json", "stop", "--session", "turn-1", "--missing-ok"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["stopped"], serde_json::json!([]), "{v}");
    assert_eq!(v["v"], 1, "{v}");
    let o = st.run(&["stop", "--session", "turn-1", "--missing-ok"]);
    assert_eq!((o.status.code(), o.stdout.is_empty(), o.stderr.is_empty()), (Some(0), true, true));
    // Only with --session: for ids it would hide a typo.
    let o = st.run(&["stop", "--missing-ok", "web"]);
    assert_eq!(o.status.code(), Some(125), "{}", stderr(&o));
}

/// A shell's own completion machinery, given the script `sheepdog completions SHELL` wrote.
fn completion_script(st: &State, shell: &str) -> tempfile::NamedTempFile {
    let o = st.run(&["completions", shell]);
    assert_eq!(o.status.code(), Some(0), "{shell}: {}", stderr(&o));
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &o.stdout).unwrap();
    f
}

/// Issue 31, item 6: the bash and fish scripts are loaded by the real shells, which then complete
/// subcommands and a subcommand's flags; zsh's parses (`zsh -n`) and names the same.
#[test]
fn completions_complete_subcommands_and_flags_in_each_shell() {
    let st = State::new();
    let bash = completion_script(&st, "bash");
    let script = format!(
        r#"source {}; COMP_WORDS=(sheepdog st); COMP_CWORD=1; _sheepdog sheepdog st sheepdog; echo "${{COMPREPLY[@]}}"
COMP_WORDS=(sheepdog stop --m); COMP_CWORD=2; _sheepdog sheepdog --m stop; echo "${{COMPREPLY[@]}}""#,
        bash.path().display()
    );
    let o = std::process::Command::new("bash").arg("-c").arg(&script).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&o.stdout), "start stop\n--missing-ok\n", "{}", stderr(&o));

    if which("fish") {
        let fish = completion_script(&st, "fish");
        let script = format!("source {}; complete -C 'sheepdog stop --term-g'", fish.path().display());
        let o = std::process::Command::new("fish").arg("-c").arg(&script).output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.starts_with("--term-grace"), "{out} {}", stderr(&o));
    } else {
        eprintln!("fish is not installed: its completions are not exercised");
    }

    let zsh = completion_script(&st, "zsh");
    let text = std::fs::read_to_string(zsh.path()).unwrap();
    assert!(text.starts_with("#compdef sheepdog"), "{text}");
    for name in ["run", "start", "stop", "reap", "completions", "man", "--term-grace", "--missing-ok"] {
        assert!(text.contains(name), "zsh completions lack {name}");
    }
    if which("zsh") {
        let o = std::process::Command::new("zsh").arg("-n").arg(zsh.path()).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }

    let o = st.run(&["completions", "tcsh"]);
    assert_eq!(o.status.code(), Some(125));
    assert!(stderr(&o).contains("invalid value 'tcsh'"), "{}", stderr(&o));
}

/// Issue 31, item 6: one page, sheepdog(1), that groff renders without a warning, with a section
/// per subcommand and its flags.
#[test]
fn the_man_page_renders_with_every_subcommand() {
    let st = State::new();
    let page = st.ok(&["man"]);
    assert!(page.contains(".TH sheepdog 1"), "{page}");
    assert_eq!(page.matches(".SH NAME").count(), 1);
    for sub in ["run", "start", "stop", "ps", "logs", "reap", "completions", "man"] {
        assert!(page.contains(&format!(".SH \"sheepdog {sub} \\-")), "no section for {sub}");
    }
    if !which("groff") {
        eprintln!("groff is not installed: the page is not rendered");
        return;
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), &page).unwrap();
    let o = std::process::Command::new("groff")
        .args(["-man", "-Tascii", "-ww", "-P-cbou"])
        .arg(f.path())
        .env("LANG", "C.UTF-8")
        .output()
        .unwrap();
    assert!(o.status.success() && o.stderr.is_empty(), "{}", stderr(&o));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("--missing-ok"), "{text}");
}

fn which(prog: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(prog).is_file()))
}
