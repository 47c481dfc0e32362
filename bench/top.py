#!/usr/bin/env python3
"""`sheepdog top`'s costs, and proof that the supervisors did not get heavier for it.

Usage: python3 bench/top.py [BASELINE_SHEEPDOG]

Needs a release build (`cargo build --release`) and tmux. Prints markdown for BENCHMARKS.md:

1. top's idle CPU with 100 running entries: utime+stime of the sheepdog-top process from
   /proc/PID/stat over 30 s, after a 5 s settle (the log pane on, following one quiet entry);
2. the same while the followed entry prints about 10 MB/s, and how long a key takes to show;
3. if BASELINE_SHEEPDOG is given (the same tree built without top), the main binary's size and,
   interleaved round by round, start overhead (`sheepdog run -- true`: wall ms and CPU ms, median
   of 300; CPU time is the steadier figure on a loaded machine) and the PSS and USS of idle
   detached supervisors (`sheepdog start -- sleep`, 10 of each binary running together).

Everything it starts lives in a temporary state dir and a private tmux server, stopped at the end
by `sheepdog stop --all` and `tmux kill-server`.
"""
import json, os, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SD = os.path.join(ROOT, "target/release/sheepdog")
HZ = os.sysconf("SC_CLK_TCK")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])  # fields 14, 15


def pss_kib(pid):
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1])
    return 0


class Tmux:
    def __init__(self, state, cols=200, rows=60):
        self.sock = f"top-bench-{os.getpid()}"
        subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", "new-session", "-d", "-x", str(cols), "-y", str(rows),
                        f"{SD} --state-dir {state} top; sleep 600"], check=True)
        time.sleep(1)
        pane = subprocess.run(["tmux", "-L", self.sock, "display", "-p", "#{pane_pid}"], capture_output=True, text=True).stdout.strip()
        with open(f"/proc/{pane}/task/{pane}/children") as f:
            self.top = int(f.read().split()[0])

    def screen(self):
        return subprocess.run(["tmux", "-L", self.sock, "capture-pane", "-p"], capture_output=True, text=True).stdout

    def keys(self, *k):
        subprocess.run(["tmux", "-L", self.sock, "send-keys", *k], check=True)

    def close(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], stderr=subprocess.DEVNULL)


def cpu_over(pid, secs):
    a, t0 = cpu_ticks(pid), time.monotonic()
    time.sleep(secs)
    b, t1 = cpu_ticks(pid), time.monotonic()
    return (b - a) / HZ / (t1 - t0) * 100


def start(state, *args):
    return subprocess.run([SD, "--state-dir", state, "start", *args], check=True, capture_output=True, text=True).stdout.strip()


def top_figures():
    state = tempfile.mkdtemp(prefix="top-bench-")
    os.chmod(state, 0o700)
    t = None
    try:
        for i in range(100):
            start(state, "--name", f"e{i}", "--", "sleep", "600")
        t = Tmux(state)
        time.sleep(5)
        idle = cpu_over(t.top, 30)
        print(f"| idle, 100 running entries, log pane following a quiet entry (30 s) | {idle:.2f} % of one core |")
        # 10 MB/s into the followed entry's log: 100 KiB lines... no, 100-byte lines, 100,000 a second.
        flood = ("import sys,time\nline=b'x'*99+b'\\n'\nchunk=line*10000\nt=time.monotonic()\n"
                 "while True:\n  sys.stdout.buffer.write(chunk); sys.stdout.flush(); t+=0.1\n"
                 "  d=t-time.monotonic()\n  d>0 and time.sleep(d)")
        start(state, "--name", "flood", "--", "python3", "-c", flood)
        t.keys("G")  # select the newest (last running) entry: flood
        time.sleep(3)
        log = os.path.join(state, "procs")
        fid = [d for d in os.listdir(log) if open(os.path.join(log, d, "entry.json")).read().find('"flood"') >= 0][0]
        # Bytes the flood wrote (its /proc/PID/io wchar): the logs rotate, so their sizes do not say.
        e = json.load(open(os.path.join(log, fid, "entry.json")))
        def wchar():
            with open(f"/proc/{e['pid']}/io") as f:
                return int(next(l for l in f if l.startswith("wchar:")).split()[1])
        w0, t0 = wchar(), time.monotonic()
        busy = cpu_over(t.top, 10)
        rate = (wchar() - w0) / (time.monotonic() - t0) / 1e6
        # Key latency while flooding: `l` hides the log pane; time until the screen shows it gone.
        lat = []
        for _ in range(5):
            shown = "log: flood" in t.screen()
            t0 = time.monotonic()
            t.keys("l")
            while ("log: flood" in t.screen()) == shown and time.monotonic() - t0 < 5:
                time.sleep(0.005)
            lat.append((time.monotonic() - t0) * 1000)
            time.sleep(0.3)
        print(f"| following a log written at {rate:.1f} MB/s, 100 other entries (10 s) | {busy:.2f} % of one core |")
        print(f"| key to screen while that log floods (`l`, median of 5, tmux capture included) | {statistics.median(lat):.0f} ms |")
    finally:
        if t:
            t.close()
        subprocess.run([SD, "--state-dir", state, "stop", "--all"], capture_output=True)
        subprocess.run(["rm", "-rf", state])


def uss_kib(pid):
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def weight(base):
    import resource
    sizes = [(b, os.path.getsize(b)) for b in (base, SD)]
    wall = {base: [], SD: []}
    cpu = {base: [], SD: []}
    for _ in range(300):
        for b in (base, SD):
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.perf_counter()
            subprocess.run([b, "run", "--", "true"], check=True)
            wall[b].append((time.perf_counter() - t0) * 1000)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu[b].append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000)
    sups = {base: [], SD: []}
    state = tempfile.mkdtemp(prefix="top-weight-")
    os.chmod(state, 0o700)
    try:
        for _ in range(10):
            for b in (base, SD):
                out = subprocess.run([b, "--state-dir", state, "start", "--json", "--", "sleep", "600"], check=True,
                                     capture_output=True, text=True).stdout
                sups[b].append(json.loads(out)["supervisorPid"])
        time.sleep(1)
        pss = {b: [pss_kib(p) for p in ps] for b, ps in sups.items()}
        uss = {b: [uss_kib(p) for p in ps] for b, ps in sups.items()}
    finally:
        subprocess.run([SD, "--state-dir", state, "stop", "--all"], capture_output=True)
        subprocess.run(["rm", "-rf", state])
    for (b, size), name in zip(sizes, ("without top", "with top")):
        print(f"| `sheepdog` {name} | {size} bytes | {statistics.median(wall[b]):.3f} ms | "
              f"{statistics.median(cpu[b]):.3f} ms | {statistics.median(pss[b])} KiB | {statistics.median(uss[b])} KiB |")


if __name__ == "__main__":
    print("| figure | value |\n|---|---|")
    top_figures()
    if len(sys.argv) > 1:
        print("\n| binary | size | `run -- true` wall (median of 300) | its CPU time, user+sys (median of 300) "
              "| PSS of an idle detached supervisor (10 each, all running) | its USS |\n|---|---|---|---|---|---|")
        weight(sys.argv[1])
