// The official TypeScript MCP SDK and strict ajv drive the real `sheepdog mcp` (issue 20):
// every schema compiles in strict mode with no warning, every structuredContent validates
// against its outputSchema, the 3 MB-line reply stays within its bound, a 20 000-line log is
// walked whole from the start, process_write answers a `read -p` prompt, and a client SIGKILL
// still stops everything.
//
// Run by .ci/run: `SHEEPDOG_BIN=target/debug/sheepdog npm test` in this directory. Each test has
// its own state dir; what a test started is stopped by the server (or killed by recorded pid).

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Ajv2020 from "ajv/dist/2020.js";

const here = fileURLToPath(new URL(".", import.meta.url));
const BIN = resolve(process.env.SHEEPDOG_BIN ?? join(here, "..", "..", "target", "debug", "sheepdog"));
const REPLY_MAX = 16 * 1024;

/** Everything written to the console while `f` runs (the SDK and ajv warn there). */
async function captureConsole(f) {
  const seen = [];
  const saved = {};
  for (const k of ["log", "warn", "error", "info", "debug"]) {
    saved[k] = console[k];
    console[k] = (...args) => seen.push(args.map(String).join(" "));
  }
  try {
    return [await f(), seen];
  } finally {
    Object.assign(console, saved);
  }
}

async function connect(stateDir) {
  const transport = new StdioClientTransport({
    command: BIN,
    args: ["mcp"],
    env: { ...process.env, SHEEPDOG_STATE_DIR: stateDir },
    stderr: "inherit",
  });
  const client = new Client({ name: "sheepdog-ts-test", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function withState(name, f) {
  test(name, async () => {
    const dir = mkdtempSync(join(tmpdir(), "sheepdog-ts-"));
    const client = await connect(dir);
    try {
      await f(client, dir);
    } finally {
      try {
        await client.callTool({ name: "process_stop", arguments: { all: true } });
      } catch {}
      await client.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
}

function strictAjv() {
  return new Ajv2020({ strict: true, allErrors: true });
}

/** The tool's structuredContent, validated by the SDK (callTool) and by strict ajv. */
async function call(client, validators, name, args, { error = false } = {}) {
  const r = await client.callTool({ name, arguments: args });
  assert.equal(Boolean(r.isError), error, `${name} ${JSON.stringify(args)}: ${JSON.stringify(r)}`);
  assert.ok(r.structuredContent, `${name}: no structuredContent`);
  const validate = validators.get(name);
  assert.ok(validate(r.structuredContent), `${name}: ${JSON.stringify(validate.errors)} in ${JSON.stringify(r.structuredContent)}`);
  const size = JSON.stringify(r.structuredContent).length;
  if (name !== "process_logs") assert.ok(size <= REPLY_MAX, `${name}: ${size} bytes`);
  return r.structuredContent;
}

async function outputValidators(client) {
  const { tools } = await client.listTools();
  const ajv = strictAjv();
  return new Map(tools.map((t) => [t.name, ajv.compile(t.outputSchema)]));
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

withState("every schema compiles in strict ajv, with no warning from the SDK", async (client) => {
  const [tools, seen] = await captureConsole(async () => (await client.listTools()).tools);
  assert.deepEqual(seen, [], "the SDK printed while listing tools");
  assert.equal(tools.length, 9);
  for (const t of tools) {
    for (const [which, schema] of [["inputSchema", t.inputSchema], ["outputSchema", t.outputSchema]]) {
      const ajv = strictAjv();
      const [_, warned] = await captureConsole(async () => ajv.compile(schema));
      assert.deepEqual(warned, [], `${t.name} ${which}: ajv warned`);
    }
  }
  // A call validates its result with the SDK's own (draft-07, formats on) validator, quietly.
  const [r, seen2] = await captureConsole(() => client.callTool({ name: "process_list", arguments: {} }));
  assert.deepEqual(seen2, []);
  assert.deepEqual(r.structuredContent.entries, []);
});

withState("every structuredContent validates against its outputSchema", async (client, dir) => {
  const v = await outputValidators(client);
  const started = await call(client, v, "process_start", {
    command: "echo hello; sleep 100",
    name: "web",
    cleanup: { command: "true" },
    ready: { logPattern: "^hello$" },
  });
  assert.equal(started.ready.ok, true);
  await call(client, v, "process_list", { all: true, verbose: true });
  await call(client, v, "process_logs", { id: "web", tail: 5 });
  await call(client, v, "process_update", { id: "web", cleanup: null });
  const restarted = await call(client, v, "process_restart", { id: "web" });
  assert.equal(restarted.replaced, started.id);
  const quick = await call(client, v, "process_start", { command: "exit 3" });
  const waited = await call(client, v, "process_wait", { ids: [quick.id], timeoutMs: 20000 });
  assert.equal(waited.waited[0].exitCode, 3);
  await call(client, v, "process_stop", { id: "web" });
  await call(client, v, "process_clear", { finished: true });
  const failing = await call(client, v, "process_start", { command: "exit 1", ready: { listen: true } }, { error: true });
  assert.equal(failing.ready.reason, "exited");
  const asked = await call(client, v, "process_start", { command: "read a; echo $a", stdin: "pipe" });
  await call(client, v, "process_write", { id: asked.id, input: "x\n" });
});

withState("after a 3 MB line, replies stay within 16 KiB", async (client) => {
  const v = await outputValidators(client);
  const script = "import sys\nfor i in range(3):\n    sys.stdout.write('x' * 1000000)\nprint()";
  const p = await call(client, v, "process_start", { argv: ["python3", "-c", script] });
  const w = await call(client, v, "process_wait", { ids: [p.id], timeoutMs: 30000 });
  assert.equal(w.done, true);
  for (const l of w.waited[0].lastLines) assert.ok(Buffer.byteLength(l) <= 512, `a line of ${l.length} bytes`);
  const p2 = await call(client, v, "process_start", { argv: ["python3", "-c", script] });
  for (let i = 0; i < 200; i++) {
    const l = await call(client, v, "process_list", { all: true });
    if (l.finished.some((f) => f.id === p2.id)) {
      for (const f of l.finished) for (const line of f.lastLines) assert.ok(Buffer.byteLength(line) <= 512);
      return;
    }
    await sleep(50);
  }
  assert.fail("the news never came");
});

withState("process_logs walks a 20 000-line log from the start, each line once (issue 31)", async (client) => {
  const v = await outputValidators(client);
  const p = await call(client, v, "process_start", { command: "seq 1 20000" });
  await call(client, v, "process_wait", { ids: [p.id], timeoutMs: 20000 });
  const last = await call(client, v, "process_logs", { id: p.id });
  assert.equal(last.truncated, true);
  assert.ok(last.next.includes(JSON.stringify({ id: p.id, from: "start" })), last.next);
  const seen = [];
  let args = { id: p.id, from: "start" };
  for (let calls = 1; ; calls++) {
    assert.ok(calls < 100, "no end");
    const l = await call(client, v, "process_logs", args);
    assert.ok(Buffer.byteLength(l.text) <= REPLY_MAX, `${Buffer.byteLength(l.text)} bytes`);
    for (const line of l.text.split("\n")) if (line.startsWith("[out] ")) seen.push(Number(line.slice(6)));
    if (l.eof) break;
    args = { id: p.id, cursor: l.cursor };
  }
  assert.equal(seen.length, 20000);
  assert.ok(seen.every((n, i) => n === i + 1), "lines lost or repeated");
});

withState("process_write answers a read -p prompt", async (client, dir) => {
  const v = await outputValidators(client);
  const p = await call(client, v, "process_start", {
    argv: ["bash", "-c", "read -p 'Proceed? [y/N] ' a; echo \"answer: $a\""],
    stdin: "pipe",
  });
  const w = await call(client, v, "process_write", { id: p.id, input: "y\n" });
  assert.equal(w.bytes, 2);
  const r = await call(client, v, "process_wait", { ids: [p.id], timeoutMs: 20000 });
  assert.equal(r.done, true);
  assert.ok(r.waited[0].lastLines.includes("[out] answer: y"), JSON.stringify(r));
  const late = await client.callTool({ name: "process_write", arguments: { id: p.id, input: "y\n" } });
  assert.equal(late.isError, true);
  assert.match(late.content[0].text, /has exited/);
});

test("a client SIGKILL still stops everything", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sheepdog-ts-"));
  // The agent: a node process running the SDK client; it prints the started process's pid.
  const agent = `
    import { Client } from "@modelcontextprotocol/sdk/client/index.js";
    import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
    const t = new StdioClientTransport({ command: ${JSON.stringify(BIN)}, args: ["mcp"],
      env: { ...process.env, SHEEPDOG_STATE_DIR: ${JSON.stringify(dir)} } });
    const c = new Client({ name: "agent", version: "1" });
    await c.connect(t);
    const r = await c.callTool({ name: "process_start", arguments: {
      command: "sleep 100 & setsid sleep 100 & echo up; wait", ready: { logPattern: "^up$" } } });
    console.log(JSON.stringify(r.structuredContent));
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ["--input-type=module", "-e", agent], { cwd: here, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const pids = [];
  let supervisor = null;
  const alive = (pid) => {
    try {
      return !/\) [ZX] /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
    } catch {
      return false;
    }
  };
  try {
    for (let i = 0; i < 400 && !out.includes("\n"); i++) await sleep(25);
    const started = JSON.parse(out.split("\n")[0]);
    const entry = JSON.parse(readFileSync(join(dir, "procs", started.id, "entry.json"), "utf8"));
    supervisor = entry.supervisorPid;
    pids.push(started.pid, ...(entry.members ?? []).map((m) => m.pid));
    // Every live process of the tree: the recorded ones, and the provider's children.
    for (const line of readFileSync(`/proc/${started.pid}/task/${started.pid}/children`, "utf8").split(" ")) {
      if (line.trim()) pids.push(Number(line));
    }
    assert.ok(pids.length >= 2, JSON.stringify(pids));
    child.kill("SIGKILL");
    const t0 = Date.now();
    while (pids.some(alive) && Date.now() - t0 < 20000) await sleep(20);
    assert.deepEqual(pids.filter(alive), [], "still alive after the agent was SIGKILLed");
  } finally {
    child.kill("SIGKILL");
    // Only what this test recorded and is still alive (a failed test leaves nothing behind).
    for (const pid of pids.filter(alive)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {}
    }
    // The supervisor records the result after the tree is gone: the state dir is removed once
    // it has exited (removed while it wrote, rmdir failed with ENOTEMPTY).
    for (let i = 0; i < 500 && supervisor && alive(supervisor); i++) await sleep(20);
    rmSync(dir, { recursive: true, force: true });
  }
});
