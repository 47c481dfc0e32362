// Codex (pinned in harness.mjs) with the sheepdog plugin installed from this repository's
// marketplace (.agents/plugins/marketplace.json -> hosts/codex), hooks trusted for the run
// (--dangerously-bypass-hook-trust), driven by a scripted Responses API: the agent's exit and
// SIGKILL end every process exec_command started (Codex's own group kill misses `setsid` and
// double forks), a nohup'd server the agent meant to keep answers in the next turn (bare Codex
// has killed it by then), is told to the model once and is listed by the plugin's MCP
// `process_list`, and what the model reads is what the bare host gives.

import { test, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";

import { Guard, answers, codexSetup, devPids, devServer, freePort, runCodex, startModel, stat, survivors, tempDir, until } from "./harness.mjs";

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
const ex = (cmd, extra = {}) => ({ tool: "exec_command", input: { cmd, ...extra } });

test("the agent's exit with a dev server still running (setsid child, double-forked helper) leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cx-exit-");
  const port = await freePort();
  const m = await model([ex(devServer(dir, port), { yield_time_ms: 1000 }), ex(`sleep 0.5; cat ${dir}/helper`), { text: "done" }]);
  const setup = codexSetup(m, { plugin: true });
  let pids;
  const r = await runCodex(setup, { guard, during: async () => (pids = await devPids(dir, guard)) });
  assert.equal(r.code, 0, r.out);
  assert.match(m.results()[0].text, /Process running with session ID/);
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after codex exited");
});

test("kill -9 of the agent mid-turn leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cx-kill-");
  const port = await freePort();
  const m = await model([ex(devServer(dir, port), { yield_time_ms: 1000 }), { hold: true }]);
  const setup = codexSetup(m, { plugin: true });
  let pids;
  await runCodex(setup, {
    guard,
    during: async (child) => {
      pids = await devPids(dir, guard);
      await until(() => answers(port), 10_000, "the dev server's port");
      await until(() => m.step >= 2, 10_000, "the turn to wait on the model");
      child.kill("SIGKILL");
    },
  });
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after kill -9 of codex");
});

test("a nohup'd server from a foreground call answers in the next turn, is told to the model once, is listed by MCP, and is gone after the exit", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cx-nohup-");
  const port = await freePort();
  const probe = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').status)"`;
  const m = await model([
    ex(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    ex(`for i in $(seq 50); do ${probe} 2>/dev/null && break; sleep 0.1; done`),
    // The plugin's MCP server (.mcp.json) lists the kept server with the session's other entries.
    (body) => {
      const ns = (body.tools || []).find((t) => t.type === "namespace" && t.tools?.some((f) => f.name === "process_list"));
      return ns ? { tool: "process_list", namespace: ns.name, input: {} } : ex("echo no-process_list-tool");
    },
    { text: "done" },
  ]);
  const setup = codexSetup(m, { plugin: true });
  const r = await runCodex(setup, { guard });
  assert.equal(r.code, 0, r.out);
  const server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
  guard.track(server);
  const results = m.results();
  assert.match(results[1].text, /Output:\n200\n/, "the server answers in the next turn");
  const told = m.requests.map((q) => JSON.stringify(q.body)).filter((b) => b.includes("kept as entry"));
  assert.ok(told.length >= 1, "the model is told which entry the server became");
  const mentions = JSON.stringify(m.requests.at(-1).body).split("kept as entry").length - 1;
  assert.equal(mentions, 1, "told once");
  assert.match(results[2].text, /http\.server/, "MCP process_list shows the kept server");
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "5 s after codex exited");
});

/** One scripted session's tool results, with what changes from run to run made neutral. */
async function session(plugin, script, prepare) {
  const m = await model(script);
  const setup = codexSetup(m, { plugin });
  prepare?.(setup);
  await runCodex(setup, { guard });
  const neutral = (t) =>
    t
      .replaceAll(setup.proj, "<proj>")
      .replaceAll(setup.home, "<home>")
      .replace(/Chunk ID: \w+/, "Chunk ID: <id>")
      .replace(/Wall time: [\d.]+ seconds/, "Wall time: <t>");
  return m.results().map((x) => neutral(x.text));
}

test("what the model reads (output, exit code, signals) is the bare host's", async () => {
  guard = new Guard();
  const script = () => [
    // Codex reads stdout and stderr from two pipes: their order is only kept when apart in time.
    ex("echo out && sleep 0.2 && echo err >&2"),
    ex("pwd; printf 'no newline'; exit 3"),
    ex("echo before; kill -TERM $$"),
    ex("mkdir -p sub && ls"),
    { text: "done" },
  ];
  const bare = await session(false, script());
  const hooked = await session(true, script());
  assert.equal(bare.length, 4);
  assert.deepEqual(hooked, bare);
});

test("with approval_policy never and Codex's own sandbox (codex exec's defaults), calls run under sheepdog", async () => {
  guard = new Guard();
  for (const permissions of [["-c", 'approval_policy="never"'], []]) {
    const m = await model([ex("cat /proc/$PPID/comm"), { text: "done" }]);
    const r = await runCodex(codexSetup(m, { plugin: true }), { guard, permissions });
    assert.equal(r.code, 0, r.out);
    assert.match(m.results()[0].text, /Output:\nsheepdog\n/, `${JSON.stringify(permissions)}: ${m.results()[0].text}`);
  }
});

test("a command the user's rules forbid stays forbidden", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const marker = path.join(tempDir("sheepdog-cx-deny-"), "made");
    const rules = (setup) => {
      fs.mkdirSync(path.join(setup.home, "rules"), { recursive: true });
      fs.writeFileSync(path.join(setup.home, "rules", "default.rules"), 'prefix_rule(pattern=["touch"], decision="forbidden")\n');
    };
    const results = await session(plugin, [ex(`touch ${marker}`), { text: "done" }], rules);
    return { made: fs.existsSync(marker), text: results[0].replaceAll(marker, "<marker>") };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.equal(bare.made, false, "the bare host forbids it");
  assert.deepEqual(hooked, bare);
});

test("a foreground call past its yield time runs on under its supervisor, and the model's poll reads the bare host's late output and exit code", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-cx-yield-");
    const port = await freePort();
    // The call holds the port while it runs on (3 s, past its yield time).
    const listen = `python3 -c "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', ${port})); s.listen(); time.sleep(3)"`;
    let parent;
    let pids;
    const m = await model([
      // Codex's foreground limit: past yield_time_ms the call returns, its process runs on as a
      // session the model polls with write_stdin.
      ex(`echo $$ > ${dir}/shell; echo early; ${listen}; echo late; exit 4`, { yield_time_ms: 500 }),
      (body) => {
        const shell = Number(fs.readFileSync(path.join(dir, "shell"), "utf8"));
        const ppid = stat(shell).ppid;
        // The shell and its parent: sheepdog's supervisor, or bare, Codex itself.
        pids = [shell, ppid];
        for (const p of pids) guard.track(p);
        parent = fs.readlinkSync(`/proc/${ppid}/exe`);
        const moved = body.input.filter((i) => i.type === "function_call_output").at(-1).output;
        const id = Number(/session ID (\d+)/.exec(moved)?.[1]);
        return { tool: "write_stdin", input: { session_id: id, chars: "", yield_time_ms: 8000 } };
      },
      { text: "done" },
    ]);
    const setup = codexSetup(m, { plugin });
    const r = await runCodex(setup, { guard });
    assert.equal(r.code, 0, r.out);
    const left = await survivors(pids, port);
    const neutral = (t) =>
      t
        .replaceAll(dir, "<dir>")
        .replaceAll(String(port), "<port>")
        .replace(/Chunk ID: \w+/, "Chunk ID: <id>")
        .replace(/Wall time: [\d.]+ seconds/, "Wall time: <t>")
        .replace(/session ID \d+/, "session ID <n>");
    return { parent: path.basename(parent), left, results: m.results().map((x) => neutral(x.text)) };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.results[0], /Process running with session ID/, "the bare host moves the call on");
  assert.match(bare.results[1], /Process exited with code 4\n[\s\S]*Output:\nlate\n/);
  assert.equal(hooked.parent, "sheepdog", "the call's shell runs under sheepdog's supervisor");
  assert.notEqual(bare.parent, "sheepdog");
  assert.deepEqual(hooked.results, bare.results, "the model reads what the bare host gives");
  assert.deepEqual(hooked.left, { live: [], open: false }, "5 s after codex exited: the shell and its supervisor are gone, the port free");
});

test("an interrupt of the turn (SIGINT, Codex's own stop) ends the dev server whole, where the bare host leaves the setsid child and the double-forked helper", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-cx-int-");
    const port = await freePort();
    const m = await model([ex(devServer(dir, port), { yield_time_ms: 1000 }), { hold: true }]);
    const setup = codexSetup(m, { plugin });
    let pids;
    const r = await runCodex(setup, {
      guard,
      during: async (child) => {
        pids = await devPids(dir, guard);
        await until(() => answers(port), 10_000, "the dev server's port");
        await until(() => m.step >= 2, 10_000, "the turn to wait on the model");
        child.kill("SIGINT");
      },
    });
    assert.match(r.out, /turn interrupted/, r.out);
    const left = await survivors(pids, port);
    guard.killAll();
    return left;
  };
  assert.ok((await run(false)).live.length > 0, "the bare host's interrupt misses what left its process group");
  assert.deepEqual(await run(true), { live: [], open: false }, "5 s after the interrupt nothing of the tree is alive and the port is free");
});
