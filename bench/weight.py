#!/usr/bin/env python3
"""Side by side, interleaved: what a change costs the supervisors and the listing.

    python3 bench/weight.py BEFORE_BINARY AFTER_BINARY [--events]

For each binary: its size; `run -- true` wall time (median of RUNS, interleaved run by run);
the PSS and USS of idle detached supervisors (SUPERVISORS each, all running at once, from
/proc/PID/smaps_rollup) and how deep their stack has ever reached, in bytes (stack_reach);
`ps --json` and `ps --all --json` over 10,000 finished entries (median of PS_RUNS,
interleaved). With --events, also the CPU of an idle `sheepdog events`
follower (the AFTER binary) with 100 running entries over 30 s.

Kills only what it started, by pid. Prints a Markdown table for BENCHMARKS.md.
"""
import json, os, shutil, signal, statistics, struct, subprocess, sys, tempfile, time, uuid

RUNS = 300
SUPERVISORS = 10
PS_RUNS = 21
ENTRIES = 10_000


def boot_id():
    return open("/proc/sys/kernel/random/boot_id").read().strip()


def private_dir():
    d = tempfile.mkdtemp(prefix="sd-weight-")
    os.chmod(d, 0o700)
    return d


def run_true(b):
    t = time.perf_counter()
    subprocess.run([b, "run", "--", "true"], check=True)
    return (time.perf_counter() - t) * 1000


def rollup(pid):
    pss = uss = 0
    for line in open(f"/proc/{pid}/smaps_rollup"):
        k, _, v = line.partition(":")
        if k == "Pss":
            pss = int(v.split()[0])
        if k in ("Private_Clean", "Private_Dirty"):
            uss += int(v.split()[0])
    return pss, uss


def stack_reach(pid):
    """Bytes from where the process's stack began (`startstack`, /proc/PID/stat) down to the
    lowest byte ever written on it: the deepest any call chain went. USS counts that in whole
    pages, and where the stack starts within its page is random, so USS moves in 4 KiB steps
    that this does not. Reads /proc/PID/pagemap (which pages are there) and /proc/PID/mem, so
    needs ptrace access to the supervisor; None without it."""
    try:
        start = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[25])
        lo, hi = next(
            [int(x, 16) for x in line.split()[0].split("-")]
            for line in open(f"/proc/{pid}/maps") if line.rstrip().endswith("[stack]"))
        with open(f"/proc/{pid}/pagemap", "rb") as pm, open(f"/proc/{pid}/mem", "rb") as mem:
            for page in range(lo, hi, 4096):
                pm.seek(page // 4096 * 8)
                if not struct.unpack("Q", pm.read(8))[0] >> 63:
                    continue
                mem.seek(page)
                data = mem.read(4096)
                first = next((i for i, b in enumerate(data) if b), None)
                if first is not None:
                    return start - (page + first)
    except (OSError, StopIteration, ValueError):
        return None
    return None


def forge(state, n):
    procs = os.path.join(state, "procs")
    os.makedirs(procs)
    boot, uid, now = boot_id(), os.getuid(), int(time.time() * 1000)
    for i in range(1, n + 1):
        e = {
            "id": f"proc_{i}", "name": f"job{i}", "sessionId": f"s{i % 50}", "pid": 4_000_000 + i,
            "pgid": 4_000_000 + i, "startedAt": now, "commandPreview": "npm run dev",
            "argv": ["npm", "run", "dev"], "cwd": "/tmp", "ownerPid": None, "starterPid": None,
            "starterStartTime": None, "supervisorPid": 4_100_000 + i, "bootId": boot, "startTime": 1,
            "supervisorStartTime": 1, "uid": uid, "tag": uuid.uuid4().hex, "cleanup": None,
            "cleanupStartedAt": None, "cleanupRunnerPid": None, "cleanupRunnerStartTime": None,
            "cleanupResult": None, "env": [],
            "stop": {"stdinGraceMs": 0, "termGraceMs": 3000, "killWaitMs": 1500, "maxStopMs": 4500},
            "timeoutMs": None, "logMaxBytes": None, "status": "exited", "statusText": "exited (0)",
            "exitCode": 0, "signal": None, "stopReason": None, "treeGone": True, "endedAt": now,
            "containment": "subreaper", "containmentReason": None, "cgroup": None, "cgroupInode": None,
            "ready": None, "restartOf": None,
        }
        d = os.path.join(procs, e["id"])
        os.mkdir(d)
        with open(os.path.join(d, "entry.json"), "w") as f:
            json.dump(e, f, indent=2)
    with open(os.path.join(state, "seq"), "w") as f:
        f.write(f"{n}\n")


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return (time.perf_counter() - t) * 1000


def supervisors(b, state):
    pids = []
    for _ in range(SUPERVISORS):
        out = subprocess.run([b, "--state-dir", state, "start", "--json", "--", "sleep", "300"],
                             check=True, capture_output=True, text=True).stdout
        pids.append(json.loads(out)["supervisorPid"])
    time.sleep(1.5)  # past the supervisor's member looks
    return pids


def stop_all(b, state):
    subprocess.run([b, "--state-dir", state, "stop", "--all"], stdout=subprocess.DEVNULL)


def reach_text(values):
    known = [v for v in values if v is not None]
    return f"{int(statistics.median(known)):,}" if known else "n/a"


def cpu_ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def main():
    bins = sys.argv[1:3]
    names = ["before", "after"]
    sizes = [os.path.getsize(b) for b in bins]
    # start overhead, interleaved
    wall = [[], []]
    for _ in range(RUNS):
        for i, b in enumerate(bins):
            wall[i].append(run_true(b))
    # PSS of idle supervisors: both sets running at once, so shared pages split alike
    states = [private_dir(), private_dir()]
    try:
        sups = [supervisors(b, s) for b, s in zip(bins, states)]
        mem = [[rollup(p) for p in ps] for ps in sups]
        reach = [[stack_reach(p) for p in ps] for ps in sups]
    finally:
        for b, s in zip(bins, states):
            stop_all(b, s)
    # ps over 10,000 entries, interleaved, on one forged state dir
    big = private_dir()
    forge(os.path.join(big, "s"), ENTRIES)
    os.chmod(os.path.join(big, "s"), 0o700)
    ps = [[], []]
    ps_all = [[], []]
    for b in bins:
        timed([b, "--state-dir", os.path.join(big, "s"), "ps", "--json"])  # warm the page cache
    for _ in range(PS_RUNS):
        for i, b in enumerate(bins):
            ps[i].append(timed([b, "--state-dir", os.path.join(big, "s"), "ps", "--json"]))
            ps_all[i].append(timed([b, "--state-dir", os.path.join(big, "s"), "ps", "--all", "--json"]))
    shutil.rmtree(big, ignore_errors=True)
    print(f"load average: {os.getloadavg()}")
    print("| binary | size, bytes | `run -- true` median ms (p10–p90) | idle supervisor PSS KiB, median of "
          f"{SUPERVISORS} | its USS KiB | its stack reach, bytes | `ps --json`, 10,000 entries, median ms | "
          "`ps --all --json` |")
    print("|---|---|---|---|---|---|---|---|")
    for i in range(2):
        w = sorted(wall[i])
        p10, p90 = w[len(w) // 10], w[len(w) * 9 // 10]
        print(f"| {names[i]} | {sizes[i]:,} | {statistics.median(w):.3f} ({p10:.3f}–{p90:.3f}) | "
              f"{statistics.median(m[0] for m in mem[i]):.1f} | {statistics.median(m[1] for m in mem[i]):.1f} | "
              f"{reach_text(reach[i])} | "
              f"{statistics.median(ps[i]):.1f} | {statistics.median(ps_all[i]):.1f} |")
    if "--events" in sys.argv:
        b = bins[1]
        s = private_dir()
        try:
            for _ in range(100):
                subprocess.run([b, "--state-dir", s, "start", "--", "sleep", "300"], check=True,
                               stdout=subprocess.DEVNULL)
            f = subprocess.Popen([b, "--state-dir", s, "--json", "events"], stdout=subprocess.DEVNULL)
            time.sleep(2)
            c0, t0 = cpu_ticks(f.pid), time.time()
            time.sleep(30)
            used = (cpu_ticks(f.pid) - c0) / os.sysconf("SC_CLK_TCK")
            print(f"idle `sheepdog events` with 100 running entries: {used * 1000:.0f} ms CPU in "
                  f"{time.time() - t0:.0f} s = {100 * used / (time.time() - t0):.3f} % of one core")
            f.send_signal(signal.SIGTERM)
            f.wait()
        finally:
            stop_all(b, s)


if __name__ == "__main__":
    main()
