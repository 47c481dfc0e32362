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
