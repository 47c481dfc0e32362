// Claude Code (pinned in harness.mjs) with the sheepdog plugin (hosts/claude-code, loaded with
// --plugin-dir), driven by a scripted model: the host's own stop, exit and SIGKILL end every
// process a Bash call started, a nohup'd server lives on as an entry of the session until the
// session ends, and what the model reads is what the bare host gives.

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
  claudeSetup,
  devPids,
  devServer,
  freePort,
  runClaude,
  sleep,
  startModel,
  survivors,
  tempDir,
  toolResults,
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
const bash = (command, extra = {}) => ({ tool: "Bash", input: { command, description: "test", ...extra } });
const lastResult = (body) => toolResults([{ body }]).at(-1);

test("TaskStop of a background dev server ends it whole: the setsid child and the double-forked helper too", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cc-bg-");
  const port = await freePort();
  let taskId;
  const m = await model([
    bash(devServer(dir, port), { run_in_background: true }),
    (body) => {
      taskId = /ID: (\w+)/.exec(lastResult(body).text)?.[1];
      return bash("sleep 1");
    },
    () => ({ tool: "TaskStop", input: { task_id: taskId } }),
    { hold: true },
  ]);
  const setup = claudeSetup({ plugin: true });
  await runClaude(m, setup, {
    guard,
    during: async (child) => {
      const pids = await devPids(dir, guard);
      await until(() => m.step >= 4, 30_000, "TaskStop's result");
      assert.ok(taskId, "the background call's task id");
      const left = await survivors(pids, port);
      assert.deepEqual(left, { live: [], open: false }, "5 s after TaskStop");
      child.kill("SIGKILL");
    },
  });
});

test("the agent's exit with a background dev server running leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cc-exit-");
  const port = await freePort();
  const m = await model([bash(devServer(dir, port), { run_in_background: true }), bash(`sleep 1; cat ${dir}/helper`), { text: "done" }]);
  const setup = claudeSetup({ plugin: true });
  let pids;
  const r = await runClaude(m, setup, { guard, during: async () => (pids = await devPids(dir, guard)) });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after claude exited");
});

test("kill -9 of the agent mid-turn leaves nothing", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cc-kill-");
  const port = await freePort();
  const m = await model([bash(devServer(dir, port), { run_in_background: true }), { hold: true }]);
  const setup = claudeSetup({ plugin: true });
  let pids;
  await runClaude(m, setup, {
    guard,
    during: async (child) => {
      pids = await devPids(dir, guard);
      await until(() => answers(port), 10_000, "the dev server's port");
      await until(() => m.step >= 2, 10_000, "the turn to wait on the model");
      child.kill("SIGKILL");
    },
  });
  assert.deepEqual(await survivors(pids, port), { live: [], open: false }, "5 s after kill -9 of claude");
});

test("a nohup'd server from a foreground call answers in the next turn, is told to the model once, and is gone after the exit", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cc-nohup-");
  const port = await freePort();
  const probe = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').status)"`;
  const m = await model([
    bash(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    bash(`for i in $(seq 50); do ${probe} 2>/dev/null && break; sleep 0.1; done`),
    // The plugin's MCP server lists the kept server with the session's other entries.
    (body) => {
      const list = (body.tools || []).map((t) => t.name).find((n) => n.endsWith("process_list"));
      return list ? { tool: list, input: {} } : bash("echo no-process_list-tool");
    },
    { text: "done" },
  ]);
  const setup = claudeSetup({ plugin: true });
  const r = await runClaude(m, setup, { guard });
  assert.equal(r.code, 0, r.out);
  const server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
  guard.track(server);
  const results = m.results();
  assert.equal(results[0].text, "started");
  assert.equal(results[1].text, "200", "the server answers in the next turn");
  const told = m.requests.map((q) => JSON.stringify(q.body)).filter((b) => b.includes("kept as entry"));
  assert.ok(told.length >= 1, "the model is told which entry the server became");
  const mentions = JSON.stringify(m.requests.at(-1).body).split("kept as entry").length - 1;
  assert.equal(mentions, 1, "told once");
  assert.match(results[2].text, /http\.server/, "MCP process_list shows the kept server");
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "5 s after claude exited");
});

test("a foreground timeout, which Claude Code -p enforces by killing, ends the whole tree (setsid child too) with the bare host's result", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-cc-timeout-");
    const cmd = `echo $$ > ${dir}/shell; setsid sh -c 'echo $$ > ${dir}/setsid; exec sleep 60' & sleep 60 & echo $! > ${dir}/sleep; wait`;
    const m = await model([bash(cmd, { timeout: 2000 }), bash("sleep 0.2"), { hold: true }]);
    const setup = claudeSetup({ plugin });
    let left;
    await runClaude(m, setup, {
      guard,
      during: async (child) => {
        await until(() => m.step >= 2, 30_000, "the timeout's result");
        const pids = ["shell", "setsid", "sleep"].map((n) => Number(fs.readFileSync(path.join(dir, n), "utf8")));
        for (const p of pids) guard.track(p);
        left = await survivors(pids, 0);
        child.kill("SIGKILL");
      },
    });
    return { result: m.results()[0], left: left.live.length };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.result.text, /Command timed out/);
  assert.deepEqual(hooked.result, bare.result, "the model reads the bare host's timeout");
  assert.equal(hooked.left, 0, "5 s after the timeout nothing of the tree is alive");
  guard.killAll();
});

/** The tool results of one scripted session, with the project's path made neutral. */
async function session(plugin, script, settings) {
  const m = await model(script);
  const setup = claudeSetup({ plugin, settings });
  const r = await runClaude(m, setup, { guard });
  return { r, results: m.results().map((x) => ({ ...x, text: x.text.replaceAll(setup.proj, "<proj>") })), setup };
}

test("what an earlier session left when it and the kept entry's supervisor were SIGKILLed is reaped when the next session starts", async () => {
  guard = new Guard();
  const dir = tempDir("sheepdog-cc-reap-");
  const port = await freePort();
  const setup = claudeSetup({ plugin: true });
  const ps = () =>
    JSON.parse(execFileSync(path.join(binDir(), "sheepdog"), ["--state-dir", setup.state, "ps", "--all", "--json"], { encoding: "utf8" })).entries;
  const m1 = await model([
    bash(`nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server; echo started`),
    { hold: true },
  ]);
  let server;
  await runClaude(m1, setup, {
    guard,
    during: async (child) => {
      await until(() => m1.step >= 2 && ps().some((e) => e.status === "running" && e.supervisorPid), 30_000, "the kept entry");
      server = Number(fs.readFileSync(path.join(dir, "server"), "utf8"));
      guard.track(server);
      const sup = ps().find((e) => e.status === "running").supervisorPid;
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
  const m2 = await model([bash("echo second"), { text: "done" }]);
  const r = await runClaude(m2, setup, { guard });
  assert.equal(r.code, 0, r.out);
  assert.deepEqual(await survivors([server], port), { live: [], open: false }, "the next session's start reaped it");
});

test("a background call's completion notice, output and exit status are the bare host's", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    let taskId;
    const m = await model([
      bash("echo out; echo err >&2; exit 3", { run_in_background: true }),
      (body) => {
        taskId = /ID: (\w+)/.exec(lastResult(body).text)?.[1];
        return bash("sleep 2");
      },
      { text: "done" },
    ]);
    const r = await runClaude(m, claudeSetup({ plugin }), { guard });
    assert.equal(r.code, 0, r.out);
    // What the model is told of the task once it ended: the host's notice, with the ids and
    // paths of this run taken out.
    const later = m.requests.slice(2).map((q) => JSON.stringify(q.body)).join("\n");
    const notice = later.match(/<task-notification>.*?<\/task-notification>/)?.[0] ?? "";
    const plain = (t) => t.replaceAll(taskId, "TASK").replace(/\/tmp\/[^\s"\\<]+/g, "FILE").replace(/toolu_\w+/g, "TOOL");
    return { notice: plain(notice), started: plain(m.results()[0].text) };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.notice, /task-notification/, "the bare host tells the model the task ended");
  assert.match(bare.notice, /exit code 3/);
  assert.deepEqual(hooked, bare, "the same notice (status, exit code, output file) as the bare host");
});

test("a simple foreground command that times out is moved to the background as in the bare host, and runs supervised until the exit", async () => {
  guard = new Guard();
  const run = async (plugin) => {
    const dir = tempDir("sheepdog-cc-autobg-");
    const port = await freePort();
    const server = path.join(dir, "srv.py");
    // A simple command (one program, not `sleep`): Claude Code moves it to the background when
    // its timeout passes, and tells the model so.
    fs.writeFileSync(
      server,
      `import http.server, os, sys\nopen(sys.argv[2], "w").write(str(os.getpid()))\nhttp.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler).serve_forever()\n`,
    );
    const probe = `python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:${port}/').status)"`;
    const m = await model([
      bash(`python3 ${server} ${port} ${dir}/pid`, { timeout: 2000 }),
      bash(`for i in $(seq 50); do ${probe} 2>/dev/null && break; sleep 0.1; done`),
      { text: "done" },
    ]);
    const r = await runClaude(m, claudeSetup({ plugin }), { guard });
    const pid = Number(fs.readFileSync(path.join(dir, "pid"), "utf8"));
    guard.track(pid);
    const results = m.results();
    return { code: r.code, out: r.out, moved: results[0], answered: results[1]?.text, after: await survivors([pid], port) };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.match(bare.moved.text, /background/i, "the bare host moves it to the background");
  assert.equal(hooked.code, 0, hooked.out);
  const plain = (t) => t.replace(/\/tmp\/\S+/g, "FILE").replace(/ID: \w+/g, "ID");
  assert.equal(plain(hooked.moved.text), plain(bare.moved.text), "the model is told the same");
  assert.equal(hooked.answered, "200", "it keeps running under its supervisor after the move");
  assert.deepEqual(hooked.after, { live: [], open: false }, "5 s after claude exited");
});

test("what the model reads (output, exit code line, is_error, cwd across calls) is the bare host's", async () => {
  guard = new Guard();
  const script = () => [
    bash("mkdir -p sub && cd sub && echo out && echo err >&2"),
    bash("pwd; printf 'no newline'; (exit 3)"),
    bash("echo to-stderr >&2; kill -TERM $$"),
    bash("cd .. && pwd && ls"),
    { text: "done" },
  ];
  const bare = await session(false, script());
  const hooked = await session(true, script());
  assert.equal(bare.results.length, 4);
  assert.deepEqual(hooked.results.map(({ text, isError }) => ({ text, isError })), bare.results.map(({ text, isError }) => ({ text, isError })));
});

test("a command the user's settings deny stays denied", async () => {
  guard = new Guard();
  const settings = { permissions: { deny: ["Bash(rm:*)"] } };
  const run = async (plugin) => {
    const victim = path.join(tempDir("sheepdog-cc-deny-"), "victim");
    fs.writeFileSync(victim, "x");
    const s = await session(plugin, [bash(`rm -f ${victim}`), { text: "done" }], settings);
    return { exists: fs.existsSync(victim), isError: s.results[0]?.isError };
  };
  const bare = await run(false);
  const hooked = await run(true);
  assert.deepEqual(bare, { exists: true, isError: true }, "the bare host denies it");
  assert.deepEqual(hooked, bare);
});

test("without sheepdog on PATH the plugin fails open: commands run as written, and the user and the model are told once", async () => {
  guard = new Guard();
  const m = await model([bash("echo still-runs; exit 4"), bash("echo again"), { text: "done" }]);
  const setup = claudeSetup({ plugin: true });
  // The SessionStart hook's stdout shows in `-p` only in stream-json (`--verbose`), as the
  // hook's response event (json and text output do not show it); the model gets it as context.
  const r = await runClaude(m, setup, { guard, withSheepdog: false, format: "stream-json", args: ["--verbose"] });
  assert.equal(r.code, 0, r.out);
  assert.equal(m.results()[0].text, "Exit code 4\nstill-runs");
  assert.equal(m.results()[1].text, "again");
  const said = "sheepdog is not on PATH: this session's shell calls run unsupervised.";
  const events = r.out
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
  const told = events.filter((e) => e.type === "system" && e.subtype === "hook_response" && e.stdout?.includes(said));
  assert.equal(told.length, 1, `the user is told once: ${r.out}`);
  assert.equal(told[0].hook_event, "SessionStart");
  assert.equal(r.out.split("\n").filter((l) => l.includes(said)).length, 1, "in no other line of the output");
  const mentions = JSON.stringify(m.requests.at(-1).body).split(said).length - 1;
  assert.equal(mentions, 1, "the model is told once");
});
