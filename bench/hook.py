#!/usr/bin/env python3
"""What the agent hooks cost each shell call (issue 30), side by side in one run.

    python3 bench/hook.py [SHEEPDOG] [ROUNDS]

SHEEPDOG defaults to target/x86_64-unknown-linux-musl/release/sheepdog (the static binary the
packages ship). Peers are interleaved round by round; medians and p10-p90 in ms, wall clock,
process start included:

- the hooks themselves, as the host runs them from `sh -c`: Codex's PreToolUse (`sheepdog hook
  codex pre-tool-use`, which rewrites the call), and the PostToolUse both hosts run after a call
  (`hook claude post-tool-use`), against `sh -c true` (the floor of any command hook). Claude
  Code has no PreToolUse hook: its calls get the guard line from `CLAUDE_ENV_FILE`. pi's
  `tool-result` (the tell pi-sheepdog asks for after each bash call, spawned directly; pi's
  calls get the guard line from the environment set once at pi's start), and opencode's
  `shell-env` (spawned directly before each bash call). Gemini CLI's `before-tool`
  is left out: it rewrites only for a `--yolo` agent, which the bench is not;
- one shell call as Claude Code runs it (`bash -c 'ENV_FILE_TEXT; eval CMD && pwd -P >| FILE'`),
  bare and with the plugin's env file (the same bash `exec`s `sheepdog run`, which runs bash
  again and relays its output), for CMD `true`, for a call that prints 16 MiB (the output
  relay's copy), and for a call that leaves a `setsid` sleeper (kept as an entry: the registry
  write and the supervisor of the leftovers), each against the bare host's shell.

Prints a Markdown table for BENCHMARKS.md.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

exe = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/x86_64-unknown-linux-musl/release/sheepdog")
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 200
state = tempfile.mkdtemp(prefix="sheepdog-bench-hook-")
work = tempfile.mkdtemp(prefix="sheepdog-bench-cwd-")
cwd_file = os.path.join(work, "cwd")
env = dict(os.environ, SHEEPDOG_STATE_DIR=state)


def hook_input(command, event="PreToolUse"):
    return json.dumps({
        "session_id": "bench",
        "hook_event_name": event,
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "bench"},
        "tool_use_id": "toolu_bench",
        "permission_mode": "bypassPermissions",
        "cwd": work,
    }).encode()


# The plugin's env file, as SessionStart writes it for Claude Code.
env_file = os.path.join(work, "env.sh")
subprocess.run([exe, "hook", "claude", "session-start"], input=b"{}", env=dict(env, CLAUDE_ENV_FILE=env_file), check=True, capture_output=True)
env_text = open(env_file).read().rstrip("\n")


def claude_shell(command, text="true"):
    # Claude Code 2.1's wrapper (shell snapshot left out: the same in both).
    quoted = "'" + command.replace("'", "'\"'\"'") + "'"
    return ["/bin/bash", "-c", f"true && {text}\n: && eval {quoted} < /dev/null && pwd -P >| {cwd_file}"]


pids_file = os.path.join(work, "pids")
# Each leftover records its pid: the bare host's are killed by it at the end.
leaves = f"setsid sleep 5 >/dev/null 2>&1 & echo $! >> {pids_file}"
prints = "head -c 16777216 /dev/zero"
codex_home = tempfile.mkdtemp(prefix="sheepdog-bench-codex-")
peers = {
    "hook: sh -c true (floor)": (["sh", "-c", "true"], None),
    "hook: sheepdog hook codex pre-tool-use": (["sh", "-c", f"CODEX_HOME={codex_home} exec {exe} hook codex pre-tool-use"], hook_input("npm test")),
    "hook: sheepdog hook claude post-tool-use": (["sh", "-c", f"exec {exe} hook claude post-tool-use"], hook_input("npm test", "PostToolUse")),
    # pi-sheepdog spawns the binary itself (no `sh -c`), once after each bash call: its floor
    # is a direct spawn of `true`.
    "spawn: true (floor)": (["true"], None),
    "spawn: sheepdog hook pi tool-result": ([exe, "hook", "pi", "tool-result"], json.dumps({"type": "tool_result", "toolName": "bash", "toolCallId": "bench", "isError": False}).encode()),
    # opencode's plugin spawns it the same way before each bash call (its `shell.env`).
    "spawn: sheepdog hook opencode shell-env": ([exe, "hook", "opencode", "shell-env"], json.dumps({"input": {"cwd": "/", "sessionID": "ses_bench", "callID": "call_bench"}, "output": {"env": {}}}).encode()),
    "call `true`: bare host": (claude_shell("true"), None),
    "call `true`: hooked": (claude_shell("true", env_text), None),
    "call printing 16 MiB: bare host": (claude_shell(prints), None),
    "call printing 16 MiB: hooked (output relayed)": (claude_shell(prints, env_text), None),
    "call leaving a setsid child: bare host": (claude_shell(leaves), None),
    "call leaving a setsid child: hooked (kept as an entry)": (claude_shell(leaves, env_text), None),
}
times = {k: [] for k in peers}
for _ in range(rounds):
    for name, (argv, stdin) in peers.items():
        t = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        times[name].append((time.perf_counter() - t) * 1000)
    # What the bare calls left (the hooked ones' leftovers are entries, stopped below).
    subprocess.run([exe, "--state-dir", state, "stop", "--all"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


print(f"| figure | median ms | p10–p90 | added to its peer |")  # the peer: its floor, or the bare host
print(f"|---|---|---|---|")
base = {
    "hook": "hook: sh -c true (floor)",
    "spawn": "spawn: true (floor)",
    "call `true`": "call `true`: bare host",
    "call printing": "call printing 16 MiB: bare host",
    "call leaving": "call leaving a setsid child: bare host",
}
for name, xs in times.items():
    med = statistics.median(xs)
    peer = next(v for k, v in base.items() if name.startswith(k))
    added = "—" if peer == name else f"{med - statistics.median(times[peer]):+.2f} ms ({med / statistics.median(times[peer]):.2f}×)"
    print(f"| {name} | {med:.2f} | {q(xs, 0.1):.2f}–{q(xs, 0.9):.2f} | {added} |")
print(f"\n{rounds} rounds, interleaved; {exe}")
for line in open(pids_file).read().split():
    try:
        os.kill(int(line), 9)
    except (ProcessLookupError, ValueError):
        pass
shutil.rmtree(work, ignore_errors=True)
shutil.rmtree(codex_home, ignore_errors=True)
# Every kept entry was stopped above; the state dir goes with them.
shutil.rmtree(state, ignore_errors=True)
