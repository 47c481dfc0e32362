"""The wheel, installed offline into a fresh venv, through the Python API: the Orca, Papercup and
pi-processes flows, shorter than the npm package's. Real processes and signals; each host is a
script run by the venv's python. Processes are killed on cleanup only while their start time
still matches (never by name); zombies count as dead."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest


def stat(pid):
    try:
        s = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = s[s.rindex(")") + 2 :].split(" ")
    return rest[0], rest[19]


def alive(pid):
    s = stat(pid)
    return s is not None and s[0] not in ("Z", "X")


def kill_chain(supervisor, keeper):
    """SIGKILL of a supervisor and its keeper "in one instant" (`kill -9 -1`), as
    tests/common's kill_supervisor_and_keeper: both frozen first (SIGSTOP, until /proc says T),
    the keeper killed first. A stopped keeper whose supervisor died would get SIGHUP and SIGCONT
    from the kernel (its process group became orphaned with a stopped member) and run the stop."""
    chain = [p for p in (keeper, supervisor) if p]
    for p in chain:
        os.kill(p, signal.SIGSTOP)
    end = time.monotonic() + 5
    while not all((stat(p) or ("X",))[0] in ("T", "Z", "X") for p in chain):
        assert time.monotonic() < end, f"the supervisor chain {chain} did not stop"
        time.sleep(0.001)
    for p in chain:
        os.kill(p, signal.SIGKILL)


def wait_gone(pids, secs):
    end = time.monotonic() + secs
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= end:
            return left
        time.sleep(0.01)


class Guard:
    def __init__(self):
        self.procs = []

    def track(self, pid):
        s = stat(pid)
        if s:
            self.procs.append((pid, s[1]))

    def kill_all(self):
        for pid, start in self.procs:
            s = stat(pid)
            if s and s[1] == start:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


@pytest.fixture
def state(venv):
    d = tempfile.mkdtemp(prefix="sheepdog-state-")
    guard = Guard()
    yield d, guard
    subprocess.run([str(venv / "bin" / "sheepdog"), "--state-dir", d, "stop", "--all", "--term-grace", "200ms"], capture_output=True)
    guard.kill_all()
    shutil.rmtree(d, ignore_errors=True)


def host(venv, src, *args, **kw):
    """Runs SRC with the venv's python (a host program); stdout piped, one JSON value per line."""
    return subprocess.Popen(
        [str(venv / "bin" / "python"), "-c", textwrap.dedent(src), *args],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        **kw,
    )


def run_host(venv, src, *args, timeout=30):
    p = host(venv, src, *args)
    out, _ = p.communicate(timeout=timeout)
    assert p.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def test_the_wheel_puts_the_three_binaries_on_the_venvs_path_and_import_gives_the_api(venv):
    for b in ("sheepdog", "sheepdog-mcp", "sheepdog-top"):
        assert os.access(venv / "bin" / b, os.X_OK), b
    got = run_host(
        venv,
        """
        import json, os, sheepdog
        names = ["supervise", "start", "list", "logs", "stop", "restart", "update", "wait", "reap", "clear", "send", "events"]
        print(json.dumps([sheepdog.__file__, os.path.realpath(sheepdog.binary_path()), [callable(getattr(sheepdog, n)) for n in names]]))
        """,
    )
    assert got[0].startswith(str(venv))
    assert got[1] == os.path.realpath(venv / "bin" / "sheepdog")
    assert all(got[2])
    v = subprocess.run([str(venv / "bin" / "sheepdog"), "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("sheepdog ")



def test_the_distribution_is_sheepdog_cli_and_the_import_and_commands_keep_their_names(venv):
    # Issue 31: PyPI's `sheepdog` is another project's; the wheel is `sheepdog-cli`.
    got = run_host(
        venv,
        """
        import json, importlib.metadata as md
        d = md.distribution("sheepdog-cli")
        print(json.dumps([d.metadata["Name"], sorted({p.parts[0] for p in d.files if p.parts[0].endswith(".dist-info")})]))
        """,
    )
    assert got[0] == "sheepdog-cli"
    assert got[1] and got[1][0].startswith("sheepdog_cli-"), got[1]
    for b in ("sheepdog", "sheepdog-mcp", "sheepdog-top"):
        assert os.access(venv / "bin" / b, os.X_OK), b

def test_the_wheel_installs_the_man_page_and_completions_under_share(venv):
    # Issue 31, item 6: the files `sheepdog man` and `sheepdog completions` print, where man(1),
    # bash-completion, zsh and fish look under a prefix.
    share = venv / "share"
    page = (share / "man" / "man1" / "sheepdog.1").read_text()
    assert page.startswith(".ie") and ".TH sheepdog 1" in page
    assert (share / "zsh" / "site-functions" / "_sheepdog").read_text().startswith("#compdef sheepdog")
    assert "complete -c sheepdog" in (share / "fish" / "vendor_completions.d" / "sheepdog.fish").read_text()
    # The installed bash script, loaded by bash, completes a subcommand's flag.
    bash = share / "bash-completion" / "completions" / "sheepdog"
    out = subprocess.run(
        ["bash", "-c", f'source {bash}; COMP_WORDS=(sheepdog stop --m); COMP_CWORD=2; _sheepdog sheepdog --m stop; echo "${{COMPREPLY[@]}}"'],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "--missing-ok", out


ORCA_HOST = """
import os, sys, sheepdog
mark = sys.argv[1]
agent = '''
import os, signal, sys, time
def term(*_):
    open(sys.argv[1], 'w').write('TERM'); os._exit(0)
signal.signal(signal.SIGTERM, term)
r, w = os.pipe()
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN); os.write(w, b'%d ' % os.getpid()); time.sleep(100); os._exit(0)
if os.fork() == 0:
    os.setsid(); os.write(w, b'%d ' % os.getpid()); time.sleep(100); os._exit(0)
pids = b''
while pids.count(b' ') < 2:
    pids += os.read(r, 64)
print('tree', os.getpid(), pids.decode().strip(), flush=True)
time.sleep(100)
'''
p = sheepdog.supervise("python3", ["-c", agent, mark], term_grace="500ms", stdout=None)
ev = next(p.events())
print("spawned", p.pid, ev["pid"], flush=True)
p.wait()
"""


def test_orca_a_sigkilled_host_leaves_nothing_and_the_agent_got_sigterm_first(venv, state):
    d, guard = state
    mark = os.path.join(d, "term")
    h = host(venv, ORCA_HOST, mark)
    guard.track(h.pid)
    lines = {}
    while len(lines) < 2:
        line = h.stdout.readline()
        assert line, "host ended early"
        word, *rest = line.split()
        lines[word] = [int(x) for x in rest]
    supervisor, agent = lines["spawned"]
    tree = lines["tree"]
    for p in [supervisor, *tree]:
        guard.track(p)
    assert tree[0] == agent and len(tree) == 3
    h.kill()
    h.wait()
    assert wait_gone([supervisor, *tree], 10) == []
    assert Path(mark).read_text() == "TERM"


def test_orca_stdin_ends_and_an_agent_that_exits_within_the_grace_keeps_its_code(venv):
    got = run_host(
        venv,
        """
        import json, subprocess, sheepdog
        p = sheepdog.supervise("python3", ["-c", "import sys; sys.stdin.read(); sys.exit(7)"],
                               on_stdin_eof="stop", stdin_grace="3s", stdin=subprocess.PIPE)
        p.stdin.close()
        code = p.wait(timeout=20)
        print(json.dumps([code, [e["event"] for e in p.events()]]))
        """,
    )
    assert got == [7, ["spawned", "stopping", "exited"]]


def test_orca_close_request_stdin_end_and_a_spawn_failure_as_data(venv, tmp_path):
    # Issue 29: the relay gives the provider an EOF that the host itself never sends (it keeps
    # the pipe open), on `close()`-less one-shot answers; a command that cannot start raises
    # SpawnFailed with the event.
    got = run_host(
        venv,
        """
        import json, subprocess, sheepdog
        p = sheepdog.supervise("python3", ["-c", "import sys; d = sys.stdin.read(); print(len(d))"],
                               close_request="stdin-end", lifetime="one-shot", stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
        p.wait_spawned()
        p.stdin.write(b"x" * 100000); p.stdin.close()
        out = p.stdout.read().decode().strip()
        code = p.wait(timeout=20)
        q = sheepdog.supervise("sheepdog-no-such-agent", [], stderr=subprocess.DEVNULL)
        try:
            q.wait_spawned()
            failed = None
        except sheepdog.SpawnFailed as e:
            failed = [e.event["errno"], e.event["exitStatus"], e.exit_status]
        print(json.dumps([out, code, failed, q.wait(timeout=20)]))
        """,
    )
    assert got == ["100000", 0, ["ENOENT", 127, 127], 127]


def test_papercup_crash_reap_cancel_and_turn_timeout(venv, state):
    d, guard = state
    theirs = run_host(venv, "import json, sys, sheepdog; print(json.dumps(sheepdog.start('sleep', ['100'], state_dir=sys.argv[1], session='someone-else')))", d)
    guard.track(theirs["supervisorPid"])
    bot = host(
        venv,
        """
        import json, sys, time, sheepdog
        d = sys.argv[1]
        b = sheepdog.start("sh", ["-c", "sleep 100 & wait"], state_dir=d, session="chat-1")
        print(json.dumps(b), flush=True)
        time.sleep(100)
        """,
        d,
    )
    guard.track(bot.pid)
    b = json.loads(bot.stdout.readline())
    # The whole chain, supervisor and keeper (either alone would still stop the tree); the
    # keeper's pid is in the entry file, not the view.
    keeper = json.loads(Path(d, "procs", b["id"], "entry.json").read_text()).get("keeperPid")
    chain = [p for p in (b["supervisorPid"], keeper) if p]
    for p in chain:
        guard.track(p)
    bot.kill()
    kill_chain(b["supervisorPid"], keeper)
    bot.wait()
    assert wait_gone(chain, 10) == []
    reaped = run_host(venv, "import json, sys, sheepdog; print(json.dumps(sheepdog.reap(state_dir=sys.argv[1])))", d)
    ids = [a["id"] for a in reaped["actions"]]
    assert b["id"] in ids and theirs["id"] not in ids, reaped
    assert wait_gone([b["pid"]], 5) == []
    # /cancel
    got = run_host(
        venv,
        """
        import json, sys, sheepdog
        d = sys.argv[1]
        t = [sheepdog.start("sleep", ["100"], state_dir=d, session="chat-2") for _ in range(2)]
        s = sheepdog.stop(session="chat-2", state_dir=d, term_grace="1s")
        left = [e["id"] for e in sheepdog.list(state_dir=d) if e["status"] == "running"]
        print(json.dumps([sorted(e["id"] for e in t), sorted(e["id"] for e in s), all(e["ok"] for e in s), left]))
        """,
        d,
    )
    assert got[0] == got[1] and got[2] is True
    assert got[3] == [theirs["id"]]
    # The turn timeout.
    got = run_host(
        venv,
        """
        import json, subprocess, sheepdog
        p = sheepdog.supervise("sh", ["-c", "sleep 100 & wait"], timeout="300ms", stderr=subprocess.PIPE)
        err = p.stderr.read().decode()
        print(json.dumps([p.wait(timeout=20), err, [e.get("trigger") for e in p.events()]]))
        """,
    )
    assert got[0] == 124
    assert "sheepdog: timed out after 300ms" in got[1]
    assert "timeout" in got[2]


def test_pi_processes_cleanup_update_failing_stop_and_a_nudge(venv, state):
    d, guard = state
    mark = os.path.join(d, "cleanup")
    got = run_host(
        venv,
        """
        import json, sys, sheepdog
        d, mark = sys.argv[1], sys.argv[2]
        s = sheepdog.start("sleep", ["100"], state_dir=d, name="dev", cleanup=f"echo first > {mark}")
        sheepdog.update("dev", cleanup=f"echo second > {mark}; exit 3", state_dir=d)
        [stopped] = sheepdog.stop("dev", state_dir=d, term_grace="1s")
        nudged = sheepdog.start("sh", ["-c", "sleep 100 &"], state_dir=d)
        try:
            sheepdog.logs("nope", state_dir=d)
            err = None
        except sheepdog.SheepdogError as e:
            err = [e.exit_status, e.document, str(e)]
        print(json.dumps([stopped, nudged["warnings"], err]))
        """,
        d,
        mark,
    )
    stopped, warnings, err = got
    assert stopped["ok"] is False and stopped["cleanupError"] and stopped["cleanupResult"]["exitCode"] == 3
    assert stopped["treeGone"] is True
    assert Path(mark).read_text() == "second\n"
    assert [w["kind"] for w in warnings] == ["stoppedOnExit"]
    # The error document of schema v1 (issue 19): `exitStatus`, with `exitCode` kept for v1.
    doc = {"v": 1, "error": {"message": "no entry with id or name 'nope'", "exitStatus": 125, "exitCode": 125}}
    assert err == [125, doc, "sheepdog: no entry with id or name 'nope'"]


def test_an_env_key_holding_an_equals_sign_is_refused_and_nothing_starts(venv, state):
    # Issue 31: {"A=B": "c"} reached the command as A=B=c.
    d, _guard = state
    got = run_host(
        venv,
        """
        import json, sys, sheepdog
        errors = []
        for bad in ("A=B", "", "A\\nB"):
            try:
                sheepdog.start("sleep", ["100"], env={bad: "c"}, state_dir=sys.argv[1])
            except ValueError as e:
                errors.append(str(e))
        print(json.dumps({"errors": errors, "entries": sheepdog.list(all=True, state_dir=sys.argv[1])}))
        """,
        d,
    )
    assert len(got["errors"]) == 3 and all("is not a variable name" in e for e in got["errors"]), got
    assert got["entries"] == [], got


def test_a_second_session_cancel_with_missing_ok_returns_an_empty_list(venv, state):
    d, _guard = state
    got = run_host(
        venv,
        """
        import json, sys, sheepdog
        sheepdog.start("sleep", ["100"], session="turn-1", state_dir=sys.argv[1])
        first = sheepdog.stop(session="turn-1", state_dir=sys.argv[1])
        try:
            sheepdog.stop(session="turn-1", state_dir=sys.argv[1])
            refused = False
        except sheepdog.SheepdogError:
            refused = True
        again = sheepdog.stop(session="turn-1", missing_ok=True, state_dir=sys.argv[1])
        print(json.dumps({"first": len(first), "refused": refused, "again": again}))
        """,
        d,
    )
    assert got == {"first": 1, "refused": True, "again": []}, got


def test_send_and_events_are_typed_documents_with_v_and_events_resume_after_a_seq(venv, state):
    """Issue 31: send() returns ``{v, id, bytes, eof}`` (SendResult), events() lines carry ``v``,
    ``seq``, ``atMs``, ``id``, ``name`` and ``sessionId``, ``since`` takes a ``seq`` (an int), and
    every function's type hints resolve."""
    d, guard = state
    p = host(
        venv,
        """
        import json, sys, typing, sheepdog
        d = sys.argv[1]
        e = sheepdog.start("sh", ["-c", "read a; echo got $a"], stdin="pipe", session="s1", state_dir=d)
        print(json.dumps(e["supervisorPid"]), flush=True)
        sent = sheepdog.send(e["id"], "yes\\n", eof=True, state_dir=d)
        waited = sheepdog.wait(e["id"], timeout="10s", state_dir=d)
        seen = []
        for ev in sheepdog.events(state_dir=d, since=0):
            seen.append(ev)
            if ev["event"] == "exited":
                break
        started = next(ev for ev in seen if ev["event"] == "started")
        resumed = next(iter(sheepdog.events(state_dir=d, since=started["seq"])))
        # Every function's annotations resolve (the generated unions included).
        for f in sheepdog.__all__:
            if callable(getattr(sheepdog, f)) and not isinstance(getattr(sheepdog, f), type):
                typing.get_type_hints(getattr(sheepdog, f))
        hints = typing.get_type_hints(sheepdog.send)["return"], typing.get_type_hints(sheepdog.events)["since"]
        print(json.dumps({
            "sent": sent,
            "waited": [waited["v"], waited["exitStatus"]],
            "common": sorted(set.intersection(*(set(ev) for ev in seen))),
            "resumed": resumed["seq"] > started["seq"],
            "sendKeys": sorted(hints[0].__required_keys__),
            "since": str(hints[1]),
        }))
        """,
        d,
    )
    guard.track(json.loads(p.stdout.readline()))
    out, _ = p.communicate(timeout=30)
    assert p.returncode == 0, out
    got = json.loads(out.strip().splitlines()[-1])
    assert got["sent"]["v"] == 1 and got["sent"]["bytes"] == 4 and got["sent"]["eof"] is True, got
    assert got["waited"] == [1, 0], got
    assert got["common"] == ["atMs", "event", "id", "name", "seq", "sessionId", "v"], got
    assert got["resumed"] is True, got
    assert got["sendKeys"] == ["bytes", "eof", "id", "v"], got
    assert got["since"] == "typing.Optional[int]", got


def test_start_with_owner_stops_the_entry_when_the_owner_is_sigkilled(venv, state):
    # The README's bot: `start(..., owner=os.getpid())`, so that a crash of the bot stops its
    # turns' work. Here the bot is SIGKILLed; the entry's supervisor stops the whole tree (a
    # grandchild included), and the entry says why. The other entry, owned by no one, runs on.
    d, guard = state
    bot = host(
        venv,
        """
        import json, os, sys, time, sheepdog
        d = sys.argv[1]
        mine = sheepdog.start("sh", ["-c", "sleep 100 & wait"], state_dir=d, session="chat-1", owner=os.getpid())
        free = sheepdog.start("sleep", ["100"], state_dir=d, session="chat-2")
        print(json.dumps([mine, free]), flush=True)
        time.sleep(100)
        """,
        d,
    )
    guard.track(bot.pid)
    mine, free = json.loads(bot.stdout.readline())
    for e in (mine, free):
        guard.track(e["pid"])
        guard.track(e["supervisorPid"])
    assert mine["pid"] and alive(mine["pid"])
    listed = run_host(venv, "import json, sys, sheepdog; print(json.dumps(sheepdog.list(state_dir=sys.argv[1])))", d)
    assert {e["id"]: e["ownerPid"] for e in listed}[mine["id"]] == bot.pid, listed
    # The backgrounded sleep, once sh has forked it.
    end = time.monotonic() + 5
    while not (tree := [int(p) for p in Path(f"/proc/{mine['pid']}/task/{mine['pid']}/children").read_text().split()]):
        assert time.monotonic() < end, "sh did not fork its sleep"
        time.sleep(0.01)
    for p in tree:
        guard.track(p)
    bot.kill()
    bot.wait()
    assert wait_gone([mine["pid"], *tree, mine["supervisorPid"]], 10) == [], "the owned tree outlived its owner"
    got = run_host(venv, "import json, sys, sheepdog; print(json.dumps(sheepdog.list(all=True, state_dir=sys.argv[1])))", d)
    views = {e["id"]: e for e in got}
    assert views[mine["id"]]["status"] == "stopped", views[mine["id"]]
    assert views[mine["id"]]["stopReason"] == "owner", views[mine["id"]]
    assert views[mine["id"]]["treeGone"] is True, views[mine["id"]]
    assert views[free["id"]]["status"] == "running" and alive(free["pid"])
