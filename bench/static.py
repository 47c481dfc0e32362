#!/usr/bin/env python3
"""The static (musl) sheepdog against the dynamic one and tini, side by side in one run (issue 21).

    python3 bench/static.py [DYNAMIC_BIN STATIC_BIN]   # defaults: target/release/sheepdog and
                                                       # target/x86_64-unknown-linux-musl/release/sheepdog

Prints a Markdown table (for bench/NOTES.md and BENCHMARKS.md):
- `run -- true` start overhead: wall ms, median and p10-p90 of RUNS runs per peer, interleaved
  round by round with bare exec and `tini --` (the same measure as `cargo bench --bench compare`);
- PSS per extra managed process: median PSS (`/proc/PID/smaps_rollup`) of one detached
  supervisor and its keeper together (a keeper cloned with CLONE_VM is the supervisor's own
  address space, `kcmp` says so, and counts once), with SUPERVISORS running (`sheepdog start -- sleep 300`;
  for tini, `tini -- sleep 300` each: one tini per process);
- binary size in bytes.
Everything it starts is stopped by its recorded pid (and the state dirs removed) on every exit.
"""

import ctypes
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

RUNS = int(os.environ.get("RUNS", "300"))
SUPERVISORS = int(os.environ.get("SUPERVISORS", "20"))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return float("nan")


def shares_memory(a, b):
    """True if processes a and b are one address space (kcmp(KCMP_VM)), as a supervisor and the
    keeper it cloned with CLONE_VM are."""
    nr = {"x86_64": 312, "aarch64": 272}.get(platform.machine())
    if nr is None:
        return False
    return ctypes.CDLL(None, use_errno=True).syscall(nr, a, b, 1, 0, 0) == 0


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    dyn = sys.argv[1] if len(sys.argv) > 2 else os.path.join(ROOT, "target/release/sheepdog")
    sta = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "target/x86_64-unknown-linux-musl/release/sheepdog")
    tini = shutil.which("tini")
    true = shutil.which("true")
    off = dict(os.environ, SHEEPDOG_KEEPER="off")
    peers = [("bare exec", [true], None)]
    if tini:
        peers.append(("tini", [tini, "--", true], None))
    peers += [
        ("sheepdog (dynamic, glibc)", [dyn, "run", "--", true], None),
        ("sheepdog (static, musl)", [sta, "run", "--", true], None),
        # Without issue 16's keeper (one more fork per run): what the binary itself costs.
        ("sheepdog (dynamic, glibc), SHEEPDOG_KEEPER=off", [dyn, "run", "--", true], off),
        ("sheepdog (static, musl), SHEEPDOG_KEEPER=off", [sta, "run", "--", true], off),
    ]
    start = {n: [] for n, _, _ in peers}
    for _ in range(RUNS):
        for name, argv, env in peers:
            t = time.perf_counter()
            subprocess.run(argv, check=True, env=env)
            start[name].append((time.perf_counter() - t) * 1000)

    pss = {}
    if tini:
        kids = []
        try:
            for _ in range(SUPERVISORS):
                kids.append(subprocess.Popen([tini, "--", "sleep", "300"], stderr=subprocess.DEVNULL))
            time.sleep(0.5)
            pss["tini"] = statistics.median(pss_kib(k.pid) for k in kids)
        finally:
            # SIGTERM: tini forwards it to its sleep and exits after it (a SIGKILL would orphan it).
            for k in kids:
                k.terminate()
            for k in kids:
                k.wait()
    for name, b in (("sheepdog (dynamic, glibc)", dyn), ("sheepdog (static, musl)", sta)):
        d = tempfile.mkdtemp(prefix="sheepdog-bench-")
        try:
            sups = []
            for _ in range(SUPERVISORS):
                out = subprocess.run(
                    [b, "--state-dir", d, "--json", "start", "--", "sleep", "300"], check=True, capture_output=True, text=True
                ).stdout
                sups.append(json.loads(out)["supervisorPid"])
            time.sleep(0.5)
            # Each managed process costs its supervisor and that supervisor's keeper (issue 16:
            # the supervisor's only child), unless the keeper shares the supervisor's memory.
            pss[name] = statistics.median(
                pss_kib(p) + sum(pss_kib(k) for k in children(p) if not shares_memory(p, k)) for p in sups
            )
        finally:
            subprocess.run([b, "--state-dir", d, "stop", "--all", "--term-grace", "200ms"], capture_output=True)
            shutil.rmtree(d, ignore_errors=True)

    size = {"tini": os.path.getsize(tini) if tini else None, "bare exec": None}
    size["sheepdog (dynamic, glibc)"] = os.path.getsize(dyn)
    size["sheepdog (static, musl)"] = os.path.getsize(sta)
    base = statistics.median(start["bare exec"])
    print(f"| peer | `run -- true` median ms (p10–p90) | over bare exec | PSS per extra managed process (supervisor + keeper), KiB | binary size, bytes |")
    print("|---|---|---|---|---|")
    for name, _, _ in peers:
        s = start[name]
        m = statistics.median(s)
        p = pss.get(name)
        z = size.get(name)
        print(
            f"| {name} | {m:.3f} ({pct(s, 0.1):.3f}–{pct(s, 0.9):.3f}) | +{m - base:.3f} ms | "
            f"{'-' if p is None else f'{p:.0f}'} | {'-' if z is None else f'{z:,}'} |"
        )
    print(f"\n{RUNS} runs per peer, interleaved; PSS: median over {SUPERVISORS} running; load average {os.getloadavg()[0]:.1f}.")


if __name__ == "__main__":
    main()
