// Orca's flows through the installed npm package: an Electron host's inline supervisor script
// becomes `supervise()`. Real processes, real signals; see helpers.mjs for the cleanup rules.

import test from "node:test";
import assert from "node:assert/strict";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { Guard, alive, api, closed, host, lines, stateDir, waitGone } from "./helpers.mjs";

// An agent that catches SIGTERM (and says so in a file), with a TERM-ignoring grandchild and a
// child in its own session; it prints their pids.
const AGENT = `
import os, signal, sys, time
mark = sys.argv[1]
def term(*_):
    open(mark, 'w').write('TERM'); os._exit(0)
signal.signal(signal.SIGTERM, term)
r, w = os.pipe()
if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.fork() == 0:
        os.write(w, b'%d ' % os.getpid()); time.sleep(100); os._exit(0)
    time.sleep(100); os._exit(0)
if os.fork() == 0:
    os.setsid(); os.write(w, b'%d ' % os.getpid()); time.sleep(100); os._exit(0)
pids = b''
while pids.count(b' ') < 2:
    pids += os.read(r, 64)
print('tree', os.getpid(), pids.decode().strip(), flush=True)
while True:
    time.sleep(1)
`;

test("a SIGKILLed host leaves nothing: the agent got SIGTERM first, then the whole tree is gone", async (t) => {
  const { dir, guard } = stateDir(t);
  const mark = path.join(dir, "agent-term");
  const h = host(
    `const { supervise } = require("sheepdog");
const child = supervise("python3", ["-c", ${JSON.stringify(AGENT)}, ${JSON.stringify(mark)}], { stdio: ["pipe", "pipe", "inherit"], termGrace: "500ms" });
child.on("spawned", (e) => console.log("spawned", child.pid, e.pid));
child.stdout.on("data", (d) => process.stdout.write(d));`,
    [],
  );
  guard.track(h.pid);
  const [, supervisor, agent] = (await h.lines.next("spawned ")).split(" ").map(Number);
  const tree = (await h.lines.next("tree ")).split(" ").slice(1).map(Number);
  [supervisor, agent, ...tree].forEach((p) => guard.track(p));
  assert.equal(tree[0], agent);
  assert.equal(tree.length, 3);
  h.kill("SIGKILL");
  await closed(h);
  assert.deepEqual(await waitGone([supervisor, ...tree], 10000), [], "alive after the host was SIGKILLed");
  assert.equal(fs.readFileSync(mark, "utf8"), "TERM", "the agent did not get SIGTERM first");
});

test("stdin ends and an agent that exits within the grace keeps its own code", async () => {
  const { supervise } = api();
  const child = supervise("python3", ["-c", "import sys; sys.stdin.read(); sys.exit(7)"], {
    onStdinEof: "stop",
    stdinGrace: "3s",
  });
  const events = [];
  child.on("sheepdog", (e) => events.push(e.event));
  await new Promise((r) => child.once("spawned", r));
  const t0 = Date.now();
  child.stdin.end();
  const [code, signal] = await closed(child);
  assert.deepEqual([code, signal], [7, null]);
  assert.ok(Date.now() - t0 < 2500, "waited for the grace instead of the agent");
  assert.deepEqual(events, ["spawned", "stopping", "exited"]);
});

test("40 concurrent supervise calls, each with a descendant: every close comes after its tree is gone", async () => {
  const { supervise } = api();
  const guard = new Guard();
  try {
    const runs = Array.from({ length: 40 }, (_, i) => {
      // Even ones exit by themselves (sheepdog stops what they left), odd ones are killed.
      const script = i % 2 === 0 ? "sleep 100 & echo $!" : "sleep 100 & echo $!; wait";
      const child = supervise("sh", ["-c", script], { termGrace: "2s", stdio: ["ignore", "pipe", "inherit"] });
      guard.track(child.pid);
      const out = lines(child.stdout);
      const result = new Promise((resolve) => {
        child.on("close", (code, signal) => {
          // Checked in the close handler itself: nothing of the tree may be alive at this moment.
          resolve({ code, signal, supervisorAlive: alive(child.pid), descendant: desc, descAlive: desc && alive(desc) });
        });
      });
      let desc;
      const ready = out.next("", 20000).then((l) => {
        desc = Number(l);
        guard.track(desc);
      });
      return { child, result, ready, i };
    });
    await Promise.all(runs.map((r) => r.ready));
    for (const r of runs) if (r.i % 2 === 1) r.child.kill("SIGTERM");
    const results = await Promise.all(runs.map((r) => r.result));
    for (const [i, r] of results.entries()) {
      assert.ok(r.descendant > 0, `run ${i}: no descendant pid`);
      assert.equal(r.descAlive, false, `run ${i}: descendant ${r.descendant} alive at close`);
      assert.equal(r.supervisorAlive, false, `run ${i}: supervisor alive at close`);
      if (i % 2 === 0) assert.deepEqual([r.code, r.signal], [0, null], `run ${i}`);
      else assert.deepEqual([r.code, r.signal], [null, "SIGTERM"], `run ${i}`);
    }
  } finally {
    guard.killAll();
  }
});

test("4 MiB of output to a slow reader arrives whole", async () => {
  const { supervise } = api();
  const size = 4 * 1024 * 1024;
  const src = `import os, sys
data = bytes((i * 7 + i // 4096) % 251 for i in range(${size}))
sys.stdout.buffer.write(data); sys.stdout.flush()`;
  const child = supervise("python3", ["-c", src], { stdio: ["ignore", "pipe", "inherit"] });
  const chunks = [];
  child.stdout.on("data", (d) => {
    chunks.push(d);
    child.stdout.pause();
    setTimeout(() => child.stdout.resume(), 2);
  });
  const [code] = await closed(child);
  const got = Buffer.concat(chunks);
  const want = Buffer.alloc(size);
  for (let i = 0; i < size; i++) want[i] = (i * 7 + Math.floor(i / 4096)) % 251;
  assert.equal(code, 0);
  assert.equal(got.length, size);
  assert.equal(crypto.createHash("sha256").update(got).digest("hex"), crypto.createHash("sha256").update(want).digest("hex"));
  assert.ok(chunks.length > 10, "the reader was not slow");
});

// Issue 29: a host that used Orca's provider-supervisor spec moves to supervise() with the same
// option names. Orca's owner launches the supervisor with a piped stdin and lets a sibling hold
// it, so only the owner watch can notice the owner's death.
const FLUSHES_ON_EOF = `
import os, signal, sys, time
flushed, termed = sys.argv[1], sys.argv[2]
def term(*_):
    open(termed, 'w').write('SIGTERM'); os._exit(143)
signal.signal(signal.SIGTERM, term)
print('provider', os.getpid(), flush=True)
sys.stdin.buffer.read()
time.sleep(0.2)
open(flushed, 'w').write('flushed')
`;

test("Orca's closeRequest 'stdin-end': the owner's SIGKILL gives the provider EOF and the grace to flush, not SIGTERM", async (t) => {
  const { dir, guard } = stateDir(t);
  const flushed = path.join(dir, "flushed");
  const termed = path.join(dir, "termed");
  const h = host(
    `const { spawn } = require("node:child_process");
const { supervise } = require("sheepdog");
const child = supervise("python3", ["-c", ${JSON.stringify(FLUSHES_ON_EOF)}, ${JSON.stringify(flushed)}, ${JSON.stringify(termed)}], {
  ownerPid: process.pid, lifetime: "session", closeRequest: "stdin-end", stdinEndGraceMs: 3000, sigtermGraceMs: 1000,
  stdio: ["pipe", "pipe", "inherit"],
});
const holder = spawn("sleep", ["100"], { stdio: [child.stdin, "ignore", "ignore"] });
child.stdout.on("data", (d) => process.stdout.write(d));
child.on("spawned", () => console.log("sup", child.pid, holder.pid));`,
    [],
  );
  guard.track(h.pid);
  const [, sup, holder] = (await h.lines.next("sup ")).split(" ").map(Number);
  guard.track(sup);
  guard.track(holder);
  const provider = Number((await h.lines.next("provider ")).split(" ")[1]);
  guard.track(provider);
  h.kill("SIGKILL");
  await closed(h);
  assert.deepEqual(await waitGone([provider], 2000), [], "the provider did not exit on its EOF");
  assert.deepEqual(await waitGone([sup], 3000), [], "the supervisor outlived its tree");
  assert.equal(fs.readFileSync(flushed, "utf8"), "flushed");
  assert.equal(fs.existsSync(termed), false, "SIGTERM came before the provider could flush");
});

test("Orca's one-shot lifetime: the provider's exit on SIGTERM ends the grace of a TERM-ignoring child", async () => {
  const { supervise } = api();
  const guard = new Guard();
  try {
    const child = supervise(
      "sh",
      ["-c", "trap 'exit 0' TERM; (trap '' TERM; exec sleep 100) & echo tree $!; while :; do sleep 0.05; done"],
      { lifetime: "one-shot", sigtermGraceMs: 3000, stdio: ["ignore", "pipe", "inherit"] },
    );
    guard.track(child.pid);
    const kid = Number((await lines(child.stdout).next("tree ")).split(" ")[1]);
    guard.track(kid);
    await new Promise((r) => setTimeout(r, 200)); // the child's trap is set once it is `sleep`
    const t0 = Date.now();
    child.kill("SIGTERM");
    const [code, signal] = await closed(child);
    assert.deepEqual([code, signal], [null, "SIGTERM"]);
    assert.ok(Date.now() - t0 < 1000, `took ${Date.now() - t0} ms; 1/3 of the grace is 1000`);
    assert.equal(alive(kid), false);
  } finally {
    guard.killAll();
  }
});

test("a spawn that fails is a typed spawnFailed event, not a line to parse", async () => {
  const { supervise } = api();
  const child = supervise("sheepdog-no-such-agent", ["--flag"], { stdio: ["ignore", "ignore", "pipe"] });
  const events = [];
  child.on("sheepdog", (e) => events.push(e));
  const failed = new Promise((r) => child.once("spawnFailed", r));
  const [code] = await closed(child);
  const e = await failed;
  assert.equal(code, 127);
  assert.equal(e.command, "sheepdog-no-such-agent");
  assert.equal(e.errno, "ENOENT");
  assert.equal(e.errnoNumber, 2);
  assert.equal(e.exitStatus, 127);
  assert.match(e.message, /^sheepdog-no-such-agent: command not found/);
  assert.deepEqual(events.map((x) => x.event), ["spawnFailed"]);
});
