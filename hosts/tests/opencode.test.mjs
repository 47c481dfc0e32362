// opencode (pinned in versions.json), one-shot (`opencode run`), with the sheepdog plugin copied
// into the project's .opencode/plugins/, driven by a scripted Chat Completions model: what a bash
// call leaves running (`&`, a setsid child, a double-forked helper, nohup) does not hold the
// call (bare opencode waits for it: #20902), lives on as an entry of the session, and is gone
// after opencode's exit, its kill -9, its SIGINT mid-call and its timeout kill; an earlier
// session's leftovers are reaped at the next start; what the model reads is what the bare host
// gives. opencode has no tool to stop a background process: its exit is the stop.

import { test, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";

import {
  Guard,
  alive,
  answers,
  binDir,
  devPids,
  devServer,
  freePort,
  interruptMidCall,
  opencodeSetup,
  sleep,
  runOpencode,
  startModel,
  survivors,
  tempDir,
  until,
} from "./harness.mjs";

let guard;
let models = [];
afterEach(async () => {
  guard?.killAll();
  for (const m of models) await m.close();
  models = [];
});
async function model(script) {
  const m = await startModel(script);
  models.push(m);
  return m;
}
const bash = (command, extra = {}) => ({ tool: "bash", input: { command, description: "test", ...extra } });
/** The dev server of harness.mjs as opencode's model starts one: in the background, the call returning at once. */
const devServerBg = (dir, port) => devServer(dir, port).replace(/\nwait$/, "");
/** The dev server's pids, once opencode (whose start takes seconds) has made the call. */
async function startedPids(m, dir) {
  await until(() => m.step >= 1, 60_000, "opencode's first request");
  return devPids(dir, guard);
}

test("the agent's exit with a dev server left running (setsid child, double-forked helper) leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-exit-");
  const port = await freePort();
  const m = await model([bash(devServerBg(dir, port)), bash("sleep 0.5"), { text: "done" }]);
  const setup = opencodeSetup(m, { plugin: true });
  let pids;
  const r = await runOpencode(setup, { guard, during: async () => (pids = await startedPids(m, dir)) });
  assert.equal(r.code, 0, r.out);
  assert.equal(m.results().length, 2, `both calls returned: ${r.out} ${JSON.stringify(m.results())}`);
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after opencode exited");
});

test("opencode #48340: the agent's exit leaves nothing when the plugin's dispose does not run (the owner watch alone)", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-nodispose-");
  const port = await freePort();
  const m = await model([bash(devServerBg(dir, port)), bash("sleep 0.5"), { text: "done" }]);
  const withoutDispose = (text) => text.replace(/\n    dispose: async \(\) => \{\n      hook\("session-end", \{\}, \{\}\);\n    \},/, "");
  const setup = opencodeSetup(m, { plugin: true, pluginEdit: withoutDispose });
  assert.doesNotMatch(fs.readFileSync(path.join(setup.proj, ".opencode", "plugins", "sheepdog.js"), "utf8"), /dispose: async/);
  let pids;
  const r = await runOpencode(setup, { guard, during: async () => (pids = await startedPids(m, dir)) });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after opencode exited");
});

test("kill -9 of the agent mid-turn leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-kill-");
  const port = await freePort();
  const m = await model([bash(devServerBg(dir, port)), { hold: true }]);
  const setup = opencodeSetup(m, { plugin: true });
  let pids;
  await runOpencode(setup, {
    guard,
    during: async (child) => {
      pids = await startedPids(m, dir);
      await until(() => answers(port), 30_000, "the dev server's port");
      // With the plugin the call has returned and the turn waits on the model; bare, the call
      // still waits on the server's hold of its pipes (#20902): mid-turn either way.
      await until(() => m.step >= 2, 10_000, "the turn to wait on the model").catch(() => {});
      child.kill("SIGKILL");
    },
  });
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after kill -9 of opencode");
});

test("SIGINT of the agent mid-call (opencode has no tool that stops a process: the user's Ctrl+C is the stop) ends the dev server whole, where the bare host leaves all of it running", async () => {
  guard = new Guard();
  await interruptMidCall({
    prefix: "sheepdog-oc-int-",
    guard,
    portMs: 30_000,
    ended: "opencode dies of the SIGINT",
    launch: async ({ plugin, dir, port, interrupt }) => {
      // A foreground call: the shell waits for the server, so the SIGINT comes mid-call.
      const m = await model([bash(devServer(dir, port)), { text: "done" }]);
      const r = await runOpencode(opencodeSetup(m, { plugin }), {
        guard,
        ms: 60_000,
        during: (child) => interrupt(child, () => startedPids(m, dir)),
      });
      return r.signal === "SIGINT";
    },
  });
});

test("a nohup'd server from a foreground call answers in the next turn, is told to the model once, is listed by MCP, and is gone after the exit", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-nohup-");
  const port = await freePort();
  const probe = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').status)"`;
  const m = await model([
    bash(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    bash(`for i in $(seq 50); do ${probe} 2>/dev/null && break; sleep 0.1; done`),
    // The plugin's MCP server lists the kept server with the session's other entries.
    (body) => {
      const list = (body.tools || []).map((t) => t.function?.name).find((n) => n?.endsWith("process_list"));
      return list ? { tool: list, input: {} } : bash("echo no-process_list-tool");
    },
    { text: "done" },
  ]);
  const setup = opencodeSetup(m, { plugin: true });
  const r = await runOpencode(setup, { guard });
  assert.equal(r.code, 0, r.out);
  const server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
  guard.track(server);
  const results = m.results();
  // (python3 may be a pyenv shim: the entry is named from the oldest process it kept.)
  assert.match(results[0].text, /^started\n\n\nsheepdog: `[^`]*http\.server[^`]*` \(pid \d+\) is still running from that command, kept as entry/, "the output, then the entry it became");
  assert.equal(results[1].text, "200\n", "the server answers in the next turn; told once");
  assert.match(results[2].text, /http\.server/, "MCP process_list shows the kept server");
  const mentions = JSON.stringify(m.requests.at(-1).body).split("kept as entry").length - 1;
  assert.equal(mentions, 1, "told once");
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "5 s after opencode exited");
});

/** The seconds between the model's bash call and its result reaching the model. */
async function callSeconds(plugin, command, after) {
  let asked;
  let took;
  const m = await model([
    () => {
      asked = Date.now();
      return bash(command);
    },
    () => {
      took = (Date.now() - asked) / 1000;
      return { text: "done" };
    },
  ]);
  const setup = opencodeSetup(m, { plugin });
  await runOpencode(setup, { guard });
  after?.();
  return { took, result: m.results()[0]?.text };
}

test("regression opencode #20902: a call that leaves a child holding its pipes returns when the command ends", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-hang-");
  const command = `sleep 8 & echo $! > ${dir}/sleep; echo started`;
  const track = () => guard.track(Number(fs.readFileSync(path.join(dir, "sleep"), "utf8")));
  const bare = await callSeconds(false, command, track);
  const hooked = await callSeconds(true, command, track);
  assert.ok(bare.took >= 7, `the bare host waits for the child's end (${bare.took} s)`);
  assert.ok(hooked.took < 4, `the call returns when the command ends (${hooked.took} s)`);
  assert.equal(bare.result, "started\n");
  assert.match(hooked.result, /^started\n\n\nsheepdog: `sleep 8` \(pid \d+\) is still running/);
});

test("a foreground timeout, which opencode enforces by killing the call's process group, ends the whole tree (setsid child too) with the bare host's result", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-oc-timeout-");
    const cmd = `echo $$ > ${dir}/shell; setsid sh -c 'echo $$ > ${dir}/setsid; exec sleep 12' & sleep 12 & echo $! > ${dir}/sleep; echo waiting; wait`;
    let asked;
    const m = await model([
      () => {
        asked = Date.now();
        return bash(cmd, { timeout: 2000 });
      },
      { text: "done" },
    ]);
    const setup = opencodeSetup(m, { plugin });
    let left;
    await runOpencode(setup, {
      guard,
      during: async () => {
        await until(() => asked && ["shell", "setsid", "sleep"].every((n) => fs.existsSync(path.join(dir, n))), 60_000, "the call's pids");
        await sleep(300);
        const pids = ["shell", "setsid", "sleep"].map((n) => Number(fs.readFileSync(path.join(dir, n), "utf8")));
        for (const p of pids) guard.track(p);
        // The timeout's kill comes 2.1 s after the call's start; count 5 s after it.
        await sleep(Math.max(0, asked + 2100 - Date.now()));
        left = await survivors(pids, 0);
      },
    });
    guard.killAll();
    return { result: m.results()[0]?.text, left: left.live.length };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.result, /shell tool terminated command after exceeding timeout 2000 ms/);
  assert.ok(bare.left > 0, "the bare host's kill misses the setsid child (and its call waits for it: its pipes)");
  assert.equal(hooked.result, bare.result, "the model reads the bare host's timeout");
  assert.equal(hooked.left, 0, "5 s after the timeout nothing of the tree is alive");
});

/** One scripted session's tool results, with the project's path made neutral. */
async function session(plugin, script, options = {}) {
  const m = await model(script);
  const setup = opencodeSetup(m, { plugin, config: options.config });
  const r = await runOpencode(setup, { guard, withSheepdog: options.withSheepdog });
  return { r, results: m.results().map((x) => x.text.replaceAll(setup.proj, "<proj>")), setup, m };
}

test("what the model reads (output, the exit status opencode does not show, cwd, workdir) is the bare host's, and its own calls read back unchanged", async () => {
  guard = new Guard();
  const script = () => [
    bash("echo out && sleep 0.2 && echo err >&2"),
    // opencode never shows the model a command's exit status: `out`, as bare.
    bash("echo out; exit 3"),
    bash("pwd; printf 'no newline'; exit 3"),
    // (Not `kill -TERM $$`: opencode 1.18.33 never returns from a call whose shell a signal
    // ended, bare or not.)
    bash("mkdir -p sub && ls"),
    bash("pwd", { workdir: "sub" }),
    bash("echo $0; cat /proc/$$/comm; true"),
    { text: "done" },
  ];
  const bare = await session(false, script());
  const hooked = await session(true, script());
  assert.equal(bare.results.length, 6);
  assert.equal(bare.results[1], "out\n", "no exit status, bare");
  assert.deepEqual(hooked.results, bare.results);
  const calls = (s) => JSON.stringify(s.m.requests.at(-1).body.messages.filter((x) => x.role === "assistant").map((x) => x.tool_calls));
  assert.equal(calls(hooked), calls(bare), "the model reads its own calls back as it wrote them");
});

test("a command the user's permission rules deny stays denied", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    // In the project: a path outside it would be refused by the external_directory rule first.
    const s = await session(plugin, [bash("touch made"), { text: "done" }], { config: { permission: { bash: { "touch *": "deny" } } } });
    return { made: fs.existsSync(path.join(s.setup.proj, "made")), out: /touch made[\s\S]*/.exec(s.r.out)?.[0], requests: s.m.requests.length };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.equal(bare.made, false, "the bare host denies it");
  assert.deepEqual(hooked, bare);
});

test("without sheepdog on PATH the calls run as written and the plugin says so once", async () => {
  guard = new Guard();
  const script = () => [bash("echo one; cat /proc/$PPID/comm"), bash("echo two"), { text: "done" }];
  const bare = await session(false, script(), { withSheepdog: false });
  const hooked = await session(true, script(), { withSheepdog: false });
  assert.deepEqual(hooked.results, bare.results);
  assert.equal(hooked.r.out.split("sheepdog is not on PATH").length - 1, 1, hooked.r.out);
});

test("what an earlier session left when it and the kept entry's supervisor were SIGKILLed is reaped when the next session starts", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-oc-reap-");
  const port = await freePort();
  const m1 = await model([
    bash(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    { hold: true },
  ]);
  const setup = opencodeSetup(m1, { plugin: true });
  const ps = () =>
    JSON.parse(execFileSync(path.join(binDir(), "sheepdog"), ["--state-dir", setup.state, "ps", "--all", "--json"], { encoding: "utf8" })).entries;
  // In the subreaper tier: in the cgroup tier any `reap` of the machine's (another state dir's,
  // another test's) sweeps a cgroup whose supervisor is gone, and could end the orphan first.
  const env = { SHEEPDOG_CONTAINMENT: "subreaper" };
  let server;
  await runOpencode(setup, {
    guard,
    env,
    during: async (child) => {
      await until(() => m1.step >= 2 && ps().some((e) => e.status === "running" && e.supervisorPid), 30_000, "the kept entry");
      server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
      guard.track(server);
      await until(() => answers(port), 30_000, "the server's port");
      const sup = ps().find((e) => e.status === "running").supervisorPid;
      guard.track(sup);
      // The crash that no dispose and no owner watch survives: the entry's own supervisor
      // first, then opencode.
      process.kill(sup, "SIGKILL");
      await until(() => !alive(sup), 5_000, "the supervisor's death");
      child.kill("SIGKILL");
    },
  });
  await until(() => answers(port), 30_000, "the orphaned server");
  assert.ok(alive(server), "with its supervisor and its agent gone, the server lives on until a reap");
  // The next opencode in the same state dir: its plugin's load reaps.
  const m2 = await model([bash("echo second"), { text: "done" }]);
  const setup2 = { ...opencodeSetup(m2, { plugin: true }), state: setup.state };
  const r = await runOpencode(setup2, { guard, env });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "reaped by the next session's start");
});
