// Gemini CLI (pinned in versions.json) with the sheepdog extension (hosts/gemini-cli, installed
// with `gemini extensions install`), headless with approvals off (`--yolo`), driven by the
// scripted Gemini API of gemini-model.mjs: the agent's exit (with its SessionEnd hook disabled:
// Gemini CLI does not wait for it), its SIGKILL and a SIGINT mid-call (on which bare Gemini CLI
// exits and leaves the call's whole tree) end every process a shell call started, a nohup'd
// server lives on as an entry of the session until the agent exits, Gemini CLI's own timeout
// ends the whole tree, an earlier crash is reaped by the next session's start, and what the
// model reads is what the bare host gives. Gemini CLI has no tool that stops a background
// process (`list_background_processes` and `read_background_output` only).

import { test, afterEach } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";

import { Guard, alive, answers, binDir, devPids, devServer, freePort, geminiSetup, interruptMidCall, runGemini, survivors, tempDir, until } from "./harness.mjs";
import { startGeminiModel } from "./gemini-model.mjs";

let guard;
let models = [];
afterEach(async () => {
  guard?.killAll();
  for (const m of models) await m.close();
  models = [];
});
async function model(script) {
  const m = await startGeminiModel(script);
  models.push(m);
  return m;
}
const sh = (command, extra = {}) => ({ tool: "run_shell_command", input: { command, description: "test", ...extra } });
/** What Gemini CLI appends to the result of every call a hook rewrote (no hook can take it off). */
const REWRITTEN = "\n\n[System] Tool input parameters were modified by a hook before execution.";
/** SessionEnd off: what is left at the exit is the owner watch's alone. */
const NO_SESSION_END = { hooksConfig: { disabled: ["sheepdog-session-end"] } };
const ps = (setup) =>
  JSON.parse(execFileSync(path.join(binDir(), "sheepdog"), ["--state-dir", setup.state, "ps", "--all", "--json"], { encoding: "utf8" })).entries;

test("the agent's exit with a background dev server running (setsid child, double-forked helper) leaves nothing, with no SessionEnd", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-gm-exit-");
    const port = await freePort();
    const m = await model([sh(devServer(dir, port), { is_background: true }), sh(`sleep 1; cat ${dir}/helper`), { text: "done" }]);
    const setup = geminiSetup({ plugin, settings: NO_SESSION_END });
    let pids;
    const r = await runGemini(m, setup, { guard, during: async () => (pids = await devPids(dir, guard)) });
    assert.equal(r.code, 0, r.out);
    assert.match(m.results()[0].text, /Command moved to background/);
    const left = await survivors(pids, port);
    guard.killAll();
    return left;
  };
  assert.ok((await run(false)).live.length > 0, "the bare host leaves the tree running");
  assert.deepEqual(await run(true), { live: [], open: false }, "5 s after gemini exited");
});

test("kill -9 of the agent mid-turn leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-gm-kill-");
  const port = await freePort();
  const m = await model([sh(devServer(dir, port), { is_background: true }), { hold: true }]);
  const setup = geminiSetup({ plugin: true });
  let pids;
  await runGemini(m, setup, {
    guard,
    relaunch: false,
    during: async (child) => {
      pids = await devPids(dir, guard);
      await until(() => answers(port), 10_000, "the dev server's port");
      await until(() => m.step >= 2, 10_000, "the turn to wait on the model");
      child.kill("SIGKILL");
    },
  });
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after kill -9 of gemini");
});

test("SIGINT of the agent mid-call (Gemini CLI has no tool that stops a process: the user's Ctrl+C is the stop) ends the dev server whole, where the bare host leaves all of it running", async () => {
  guard = new Guard();
  await interruptMidCall({
    prefix: "sheepdog-gm-int-",
    guard,
    portMs: 10_000,
    ended: "Gemini CLI exits (code 0) on the SIGINT",
    launch: async ({ plugin, dir, port, interrupt }) => {
      // A foreground call: the shell waits for the server, so the SIGINT comes mid-call.
      const m = await model([sh(devServer(dir, port)), { text: "done" }]);
      const r = await runGemini(m, geminiSetup({ plugin }), {
        guard,
        // The signal goes to the agent itself, not to the relaunching parent.
        relaunch: false,
        ms: 30_000,
        during: (child) => interrupt(child, () => devPids(dir, guard)),
      });
      return r.code === 0 && r.signal === null;
    },
  });
});

test("a nohup'd server from a foreground call answers in the next turn, is told to the model once, and is gone after the exit", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-gm-nohup-");
  const port = await freePort();
  // Gemini CLI refuses a command with `$(...)`: the retries are Python's.
  const probe = `python3 -c "import time, urllib.request\nfor i in range(50):\n  try: print(urllib.request.urlopen('http://127.0.0.1:${port}/').status); break\n  except OSError: time.sleep(0.1)"`;
  const m = await model([
    sh(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    sh(probe),
    // The extension's MCP server lists the kept server with the session's other entries.
    (body) => {
      const names = (body.tools || []).flatMap((t) => (t.functionDeclarations || []).map((f) => f.name));
      const list = names.find((n) => n.endsWith("process_list"));
      return list ? { tool: list, input: {} } : sh("echo no-process_list-tool");
    },
    { text: "done" },
  ]);
  const setup = geminiSetup({ plugin: true, settings: NO_SESSION_END });
  const r = await runGemini(m, setup, { guard });
  const server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
  guard.track(server);
  assert.equal(r.code, 0, r.out);
  const results = m.results();
  assert.match(results[0].text, /Output: started\n/);
  assert.match(results[1].text, /Output: 200\n/, "the server answers in the next turn");
  const told = results.filter((x) => x.text.includes("kept as entry"));
  assert.equal(told.length, 1, "told once");
  assert.match(told[0].text, /<hook_context>sheepdog: .*http\.server.* kept as entry proc_\d+/);
  assert.match(results[2].text, /http\.server/, "MCP process_list shows the kept server");
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "5 s after gemini exited");
});

test("Gemini CLI's own timeout (no output for tools.shell.inactivityTimeout) ends the whole tree, double-forked helper too, with the bare host's result", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-gm-timeout-");
    // Its members do not hold the host's pipes: the bare host would wait for them to close.
    const cmd = [
      `echo $$ > ${dir}/shell`,
      `setsid sh -c 'echo $$ > ${dir}/setsid; exec sleep 300' >/dev/null 2>&1 &`,
      `( setsid sh -c 'echo $$ > ${dir}/helper; exec sleep 301' >/dev/null 2>&1 & )`,
      `sleep 300 >/dev/null 2>&1 & echo $! > ${dir}/sleep`,
      "wait",
    ].join("\n");
    const m = await model([sh(cmd), { text: "done" }]);
    const setup = geminiSetup({ plugin, settings: { tools: { shell: { inactivityTimeout: 3 } } } });
    const names = ["shell", "setsid", "helper", "sleep"];
    let pids = [];
    const r = await runGemini(m, setup, {
      guard,
      during: async () => {
        await until(() => names.every((n) => fs.existsSync(path.join(dir, n)) && fs.readFileSync(path.join(dir, n), "utf8").trim()), 15_000, "the pids");
        pids = names.map((n) => Number(fs.readFileSync(path.join(dir, n), "utf8")));
        for (const p of pids) guard.track(p);
      },
    });
    assert.equal(r.code, 0, r.out);
    const left = await survivors(pids, 0);
    guard.killAll();
    return { result: m.results()[0].text.replace(REWRITTEN, ""), left: left.live.length };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.result, /exceeded the timeout/);
  assert.ok(bare.left > 0, "the bare host's kill misses the double-forked helper");
  assert.equal(hooked.result, bare.result, "the model reads the bare host's timeout");
  assert.equal(hooked.left, 0, "5 s after the timeout nothing of the tree is alive");
});

test("what an earlier session left when it and the kept entry's supervisor were SIGKILLed is reaped when the next session starts", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-gm-reap-");
  const port = await freePort();
  const setup = geminiSetup({ plugin: true });
  // In the subreaper tier: in the cgroup tier any `reap` of the machine's (another state dir's,
  // another test's) sweeps a cgroup whose supervisor is gone, and could end the orphan first.
  const env = { SHEEPDOG_CONTAINMENT: "subreaper" };
  const m1 = await model([
    sh(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    { hold: true },
  ]);
  let server;
  await runGemini(m1, setup, {
    guard,
    env,
    relaunch: false,
    during: async (child) => {
      await until(() => fs.existsSync(path.join(dir, "server")) && fs.readFileSync(path.join(dir, "server"), "utf8").trim(), 30_000, "the server's pid");
      server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
      guard.track(server);
      await until(() => m1.step >= 2 && ps(setup).some((e) => e.status === "running" && e.supervisorPid), 30_000, "the kept entry");
      const sup = ps(setup).find((e) => e.status === "running").supervisorPid;
      guard.track(sup);
      // The crash that no end hook and no owner watch survives: the entry's own supervisor
      // first, then the agent.
      process.kill(sup, "SIGKILL");
      await until(() => !alive(sup), 5_000, "the supervisor's death");
      child.kill("SIGKILL");
    },
  });
  await until(() => answers(port), 10_000, "the orphaned server");
  assert.ok(alive(server), "with its supervisor and its agent gone, the server lives on until a reap");
  const m2 = await model([sh("echo second"), { text: "done" }]);
  const r = await runGemini(m2, setup, { guard, env });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "the next session's start reaped it");
});

/** One scripted session's tool results, with what changes from run to run made neutral. */
async function session(plugin, script, prepare) {
  const m = await model(script);
  const setup = geminiSetup({ plugin });
  prepare?.(setup);
  const r = await runGemini(m, setup, { guard });
  assert.equal(r.code, 0, r.out);
  const neutral = (t) =>
    t
      .replaceAll(setup.proj, "<proj>")
      .replace(/Process Group PGID: \d+/, "Process Group PGID: <n>")
      .replace(/Background PIDs: [\d, ]+/, "Background PIDs: <n>");
  return m.results().map((x) => neutral(x.text));
}

test("what the model reads (output, exit code, signal, background pids) is the bare host's, but for the line Gemini CLI adds to a rewritten call", async () => {
  guard = new Guard();
  const script = () => [
    sh("echo out && sleep 0.2 && echo err >&2"),
    sh("pwd; printf 'no newline'; exit 3"),
    sh("echo before; kill -TERM $$"),
    sh("mkdir -p sub && cd sub && pwd && ls .."),
    sh("pwd; cat /proc/$PPID/comm"),
    { text: "done" },
  ];
  const bare = await session(false, script());
  const hooked = await session(true, script());
  assert.equal(bare.length, 5);
  assert.ok(hooked.every((t) => t.endsWith(REWRITTEN)), "Gemini CLI tells the model a hook rewrote the call");
  const plain = hooked.map((t) => t.slice(0, -REWRITTEN.length));
  // The one other difference: the shell's parent is sheepdog's keeper, not the host.
  assert.match(bare[4], /\nnode\n/);
  assert.match(plain[4], /\nsheepdog\n/);
  assert.deepEqual(plain.slice(0, 4), bare.slice(0, 4));
});

test("a command the user's policy denies stays denied", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const marker = path.join(tempDir("sheepdog-gm-deny-"), "made");
    const policy = (setup) => {
      fs.mkdirSync(path.join(setup.home, ".gemini", "policies"), { recursive: true });
      fs.writeFileSync(
        path.join(setup.home, ".gemini", "policies", "deny.toml"),
        '[[rule]]\ntoolName = "run_shell_command"\ncommandPrefix = "touch"\ndecision = "deny"\npriority = 900\n',
      );
    };
    const results = await session(plugin, [sh(`echo first && touch ${marker}`), { text: "done" }], policy);
    return { made: fs.existsSync(marker), text: results[0].replaceAll(marker, "<marker>") };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.equal(bare.made, false, "the bare host denies it");
  assert.deepEqual(hooked, bare);
});

test("without sheepdog on PATH the extension fails open: commands run as written, and the user is told once", async () => {
  guard = new Guard();
  const m = await model([sh("echo still-runs; exit 4"), sh("echo again"), { text: "done" }]);
  const setup = geminiSetup({ plugin: true });
  const r = await runGemini(m, setup, { guard, withSheepdog: false });
  assert.equal(r.code, 0, r.out);
  assert.match(m.results()[0].text, /^<untrusted_context>\nOutput: still-runs\nExit Code: 4\nProcess Group PGID: \d+\n<\/untrusted_context>$/);
  assert.equal(r.out.split("Hook system message: sheepdog is not on PATH").length - 1, 1, r.out);
});
