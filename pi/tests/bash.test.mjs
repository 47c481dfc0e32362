// pi's own `bash` tool under sheepdog (issue 33): pi itself in --mode rpc, a scripted model that
// calls `bash`, real processes, checked through /proc (threads included) and the port, 5 s after
// each event. Bare pi (no extension) is the reference for what the model reads, and shows what
// leaks without the extension.

import test from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
  alive,
  allText,
  answers,
  bashEnds,
  devPids,
  devServer,
  freePort,
  lastToolResult,
  model,
  piCommand,
  sleep,
  startPi,
  stat,
  survivors,
  until,
} from "./harness.mjs";

async function scripted(t) {
  const m = await model();
  t.after(() => m.close());
  t.after(() => assert.deepEqual(m.errors.map((e) => e.stack), [], "the scripted model's own assertions"));
  return m;
}

function tempDir(t, prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  t.after(() => fs.rmSync(d, { recursive: true, force: true }));
  return d;
}

const bash = (command, extra = {}) => ({ tool: ["bash", { command, ...extra }] });
const probe = (port) =>
  `for i in $(seq 50); do python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').status)" 2>/dev/null && break; sleep 0.1; done`;

test("a nohup'd server with a setsid child and a double-forked helper: kept across turns, told once, answers in the next turn, gone 5 s after pi exits", async (t) => {
  const m = await scripted(t);
  const pi = startPi(t, m);
  const dir = tempDir(t, "sheepdog-pi-bg-");
  const port = await freePort();
  m.steps.push(() => bash(devServer(dir, port)), () => ({ text: "started" }));
  const t0 = Date.now();
  await pi.prompt("start the server");
  assert.ok(Date.now() - t0 < 15000, "the call returned although its children hold its output");
  const pids = await devPids(dir, pi.guard);
  const kept = pids.slice(0, 3); // the shell itself has exited
  const [first] = bashEnds(pi.events);
  assert.equal(first.isError, false, JSON.stringify(first.result));
  const told = lastToolResult(m.requests[1]);
  // The output first, as the command printed it; then one line per kept entry, once.
  assert.match(told, /^started\n\nsheepdog: `.*` \(pid \d+\) is still running from that command, kept as process .* \((proc_\d+)\) of this pi session; it is stopped when pi exits\. Stop it earlier with the process tool \(action stop, id \1\); read its output with action output, id \1\.$/);
  assert.ok(kept.every((p) => pi.guard.left().some((g) => g.pid === p)), "all three still running after the call");
  // The next turn: the server answers, and nothing is told again.
  m.steps.push(() => bash(probe(port)), () => ({ text: "it answers" }));
  await pi.prompt("is it up?");
  assert.equal(lastToolResult(m.requests.at(-1)), "200\n");
  // The kept entry is in pi's session, as the process tool lists it.
  m.steps.push(() => ({ tool: ["process", { action: "list", statuses: ["running"] }] }), () => ({ text: "listed" }));
  await pi.prompt("what runs?");
  assert.match(lastToolResult(m.requests.at(-1)), /^proc_\d+\trunning\t/m);
  // pi exits (end of its rpc input): 5 s later nothing of it is alive and the port is free.
  pi.child.stdin.end();
  await pi.exited;
  assert.deepEqual(await survivors(kept, port), { live: [], open: false }, "5 s after pi exited");
});

test("a kept leftover that ends by itself is told as context, once, without waking the model", async (t) => {
  const m = await scripted(t);
  const pi = startPi(t, m);
  m.steps.push(() => bash("(sleep 1; echo bye) >/dev/null 2>&1 &\necho started"), () => ({ text: "ok" }));
  await pi.prompt("go");
  assert.match(lastToolResult(m.requests[1]), /^started\n\nsheepdog: /);
  const before = m.requests.length;
  await until(() => pi.events.find((e) => e.type === "message_end" && e.message?.customType === "sheepdog-process"), 15000, "the notice");
  await sleep(500);
  assert.equal(m.requests.length, before, "no turn of its own");
  m.steps.push((body) => {
    assert.equal(allText(body).match(/Background process \S+ \(proc_\d+\) exited/g)?.length, 1, allText(body));
    return { text: "seen" };
  });
  await pi.prompt("and?");
  assert.equal(m.steps.length, 0);
});

test("kill -9 of pi mid-turn, a call running with its server, setsid child and double-forked helper: nothing left 5 s later", async (t) => {
  const m = await scripted(t);
  const pi = startPi(t, m);
  const dir = tempDir(t, "sheepdog-pi-kill-");
  const port = await freePort();
  m.steps.push(() => bash(devServer(dir, port, { wait: true })));
  pi.send({ id: "p1", type: "prompt", message: "serve it" });
  const pids = await devPids(dir, pi.guard);
  await until(() => answers(port), 10000, "the server's port");
  pi.child.kill("SIGKILL");
  await pi.exited;
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after kill -9 of pi");
});

/** pi's abort (Esc) and its timeout kill the call's process group: with the extension, the whole tree ends. */
for (const how of ["abort", "timeout"]) {
  test(`pi's ${how} of a running call ends the whole tree (setsid child and double-forked helper too); bare pi leaves them`, async (t) => {
    const run = async (extension) => {
      const m = await scripted(t);
      const pi = startPi(t, m, { extension });
      const dir = tempDir(t, `sheepdog-pi-${how}-`);
      const port = await freePort();
      m.steps.push(() => bash(devServer(dir, port, { wait: true }), how === "timeout" ? { timeout: 3 } : {}), () => ({ text: "stopped" }));
      const done = pi.prompt("serve it", 60000);
      const pids = await devPids(dir, pi.guard);
      await until(() => answers(port), 10000, "the server's port");
      if (how === "abort") pi.send({ id: "a1", type: "abort" });
      await done;
      const [end] = bashEnds(pi.events);
      assert.equal(end.isError, true);
      assert.match(end.result.content[0].text, how === "abort" ? /Command aborted/ : /Command timed out after 3 seconds/);
      const left = await survivors(pids, port);
      pi.guard.killAll(); // bare pi's leftovers, so the next run starts clean
      return left;
    };
    const bare = await run(false);
    assert.ok(bare.live.length > 0, `bare pi's ${how} misses what left the call's process group`);
    assert.deepEqual(await run(true), { live: [], open: false }, `5 s after the ${how}`);
  });
}

test("what the model reads (output, exit code, signals, stderr) is bare pi's", async (t) => {
  const calls = [
    "echo out && sleep 0.2 && echo err >&2",
    "pwd; printf 'no newline'; exit 3",
    "echo before; kill -TERM $$",
    "mkdir -p sub && cd sub && pwd && ls ..",
    "true",
    "seq 1 3000",
  ];
  const session = async (extension) => {
    const m = await scripted(t);
    const cwd = tempDir(t, "sheepdog-pi-tr-");
    const pi = startPi(t, m, { extension, cwd });
    m.steps.push(...calls.map((c) => () => bash(c)), () => ({ text: "done" }));
    await pi.prompt("run them");
    const ends = bashEnds(pi.events);
    assert.equal(ends.length, calls.length);
    const neutral = (s) => s.replaceAll(cwd, "<cwd>").replace(/\/tmp\/\S+\.log/g, "<full output>");
    // What the model was sent for each call, and the error flag pi's UI shows.
    return m.requests.slice(1).map((body, i) => ({ text: neutral(lastToolResult(body)), isError: ends[i].isError }));
  };
  const bare = await session(false);
  const hooked = await session(true);
  assert.equal(bare[1].text, "<cwd>\nno newline\n\nCommand exited with code 3");
  assert.deepEqual(hooked, bare);
});

test("the model's own call is what pi's transcript keeps, and what pi runs (nothing is rewritten)", async (t) => {
  const m = await scripted(t);
  const pi = startPi(t, m);
  m.steps.push(() => bash("cat /proc/$PPID/comm"), () => ({ text: "done" }));
  await pi.prompt("go");
  assert.equal(lastToolResult(m.requests[1]), "sheepdog\n", "the call ran under sheepdog");
  const call = m.requests[1].messages.find((x) => x.role === "assistant").tool_calls[0];
  assert.deepEqual(JSON.parse(call.function.arguments), { command: "cat /proc/$PPID/comm" });
  const start = pi.events.find((e) => e.type === "tool_execution_start" && e.toolName === "bash");
  assert.equal(start.args.command, "cat /proc/$PPID/comm", "what pi's UI shows");
});

test("a gate extension loaded after pi-sheepdog sees the model's own command, and its block holds", async (t) => {
  const dir = tempDir(t, "sheepdog-pi-gate-");
  const gate = path.join(dir, "gate.ts");
  // A gate as users write them: the command's first word. A rewrite ahead of the command
  // would hide it.
  fs.writeFileSync(
    gate,
    `export default function (pi) {
  pi.on("tool_call", (event) => {
    if (event.toolName === "bash" && String(event.input.command).startsWith("rm ")) return { block: true, reason: "rm is not allowed" };
  });
}
`,
  );
  const victim = path.join(dir, "victim");
  fs.writeFileSync(victim, "x");
  const m = await scripted(t);
  const pi = startPi(t, m, { after: [gate] });
  m.steps.push(() => bash(`rm -f ${victim}`), () => bash("cat /proc/$PPID/comm"), () => ({ text: "done" }));
  await pi.prompt("go");
  assert.match(lastToolResult(m.requests[1]), /rm is not allowed/);
  assert.ok(fs.existsSync(victim), "the blocked command did not run");
  assert.equal(lastToolResult(m.requests[2]), "sheepdog\n", "the next call ran under sheepdog");
});

test("without a sheepdog binary the call runs as written, and pi says so once", async (t) => {
  const m = await scripted(t);
  const pi = startPi(t, m, { env: { SHEEPDOG_BINARY: "/nonexistent/sheepdog" } });
  m.steps.push(() => bash("echo hi; exit 2"), () => bash("echo again"), () => ({ text: "done" }));
  await pi.prompt("go");
  assert.equal(lastToolResult(m.requests[1]), "hi\n\n\nCommand exited with code 2");
  assert.equal(lastToolResult(m.requests[2]), "again\n");
  const notes = pi.events.filter((e) => e.type === "extension_ui_request" && e.method === "notify" && /sheepdog is missing/.test(e.message));
  assert.equal(notes.length, 1, "said once");
  await sleep(100);
});

test("the next pi's start reaps what an earlier pi's crash left (its kept entry's supervisor SIGKILLed, then pi)", async (t) => {
  // The subreaper tier: in the cgroup tier any `reap` on the machine (any state dir) kills a
  // populated cgroup whose supervisor is gone, so on a shared machine another test's reap could
  // end the orphan first and this test would not show that the next pi's start did.
  const env = { SHEEPDOG_CONTAINMENT: "subreaper" };
  const m = await scripted(t);
  const first = startPi(t, m, { env });
  const dir = tempDir(t, "sheepdog-pi-reap-");
  m.steps.push(() => bash(`nohup sleep 300 >/dev/null 2>&1 & echo $! > ${dir}/left; echo started`), () => ({ text: "started" }));
  await first.prompt("start it");
  const left = Number(fs.readFileSync(path.join(dir, "left"), "utf8"));
  first.guard.track(left);
  const [kept] = JSON.parse(first.sheepdog(["--json", "ps", "--session", `pi-${first.child.pid}-${stat(first.child.pid).startTime}`])).entries;
  assert.ok(kept, "the call's leftover is an entry of pi's session");
  // A crash that no stop survives: the entry's supervisor first (frozen, then killed, so it
  // cannot start the stop), then pi.
  process.kill(kept.supervisorPid, "SIGSTOP");
  await until(() => stat(kept.supervisorPid)?.state === "T", 5000, "the supervisor stopped");
  process.kill(kept.supervisorPid, "SIGKILL");
  first.child.kill("SIGKILL");
  await first.exited;
  await sleep(1000);
  assert.ok(alive(left), "orphaned: nothing stops it by itself");
  // The next pi, on the same registry: its start reaps it.
  const m2 = await scripted(t);
  const next = startPi(t, m2, { state: first.stateDir, env });
  next.send({ id: "s1", type: "get_state" });
  await next.next((e) => e.type === "response" && e.id === "s1");
  assert.deepEqual(await survivors([left], null), { live: [], open: false }, "5 s after the next pi started");
  const [after] = JSON.parse(next.sheepdog(["--json", "ps", "--all"])).entries.filter((e) => e.id === kept.id);
  assert.equal(after.status, "reaped");
});

test("the tests run the pinned pi under the pinned Node", () => {
  const versions = JSON.parse(fs.readFileSync(new URL("./versions.json", import.meta.url), "utf8"));
  const { node, version } = piCommand();
  if (!process.env.SHEEPDOG_PI_PACKAGE) assert.equal(`${versions.pi.replace(/.*@/, "")}`, version);
  assert.equal(execFileSync(node, ["--version"], { encoding: "utf8" }).trim(), `v${versions.node}`);
});
