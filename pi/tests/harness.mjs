// The pi package's end-to-end harness: pi (versions.json: pi 1.x, which needs Node >= 22.19) and
// a Node to run it (the npm package node-linux-<arch>, which ships the binary; the test runner
// itself may be an older Node) installed once into a host dir ($SHEEPDOG_PI_HOST_DIR, which CI
// fills once; else a temp dir per test file); a fresh project with the packed sheepdog tarballs
// ($SHEEPDOG_PACKAGES, default target/package) and this package packed from pi/; a scripted
// model (an OpenAI-compatible server on 127.0.0.1, named in models.json) whose replies are tool
// calls; pi itself in `--mode rpc`. Processes are checked, and on cleanup killed, by recorded pid
// and start time, never by name. Zombies count as dead.
//
// SHEEPDOG_PI_PACKAGE names another pi, run by hand: `@mariozechner/pi-coding-agent@0.73.1`, the
// last release under that name, can be run this way; CI tests only pi 1.x (versions.json).

import { execFileSync, spawn, spawnSync } from "node:child_process";
import { after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";

import { Guard, alive, packages, repo, sleep, stat, until } from "../../npm/tests/helpers.mjs";

export { Guard, alive, sleep, stat, until };
/** The versions tested: pi and the Node that runs it, pinned in versions.json (CI reads it too). */
const versions = JSON.parse(fs.readFileSync(path.join(repo, "pi/tests/versions.json"), "utf8"));
export const PI = process.env.SHEEPDOG_PI_PACKAGE || versions.pi;
/** The npm package that ships the Node binary pi runs under. */
export const PI_NODE = `node-linux-${process.arch}@${versions.node}`;
/** pi's package name: the spec without its version. */
const piName = PI.replace(/(.)@[^@/]*$/, "$1");

/** Every live descendant of `pid` (by /proc ppid links), with its start time. */
export function descendants(pid) {
  const kids = new Map();
  for (const d of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    const s = stat(Number(d));
    if (s && s.state !== "Z") {
      if (!kids.has(s.ppid)) kids.set(s.ppid, []);
      kids.get(s.ppid).push(Number(d));
    }
  }
  const out = [];
  const walk = (p) => {
    for (const c of kids.get(p) || []) {
      const s = stat(c);
      if (s) out.push({ pid: c, startTime: s.startTime });
      walk(c);
    }
  };
  walk(pid);
  return out;
}


let project;
let hostDir;
after(() => project && fs.rmSync(project, { recursive: true, force: true }));
after(() => hostDir && !process.env.SHEEPDOG_PI_HOST_DIR && fs.rmSync(hostDir, { recursive: true, force: true }));

/**
 * The dir whose node_modules has pi and the Node it runs under: $SHEEPDOG_PI_HOST_DIR (CI
 * installs them there once, `npm install PI PI_NODE`), else a temp dir installed now (once per
 * test file, from the registry or npm's cache).
 */
export function piHost() {
  if (hostDir) return hostDir;
  if (process.env.SHEEPDOG_PI_HOST_DIR) return (hostDir = path.resolve(process.env.SHEEPDOG_PI_HOST_DIR));
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-pi-host-"));
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "pi-host", version: "1.0.0", private: true }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", PI, PI_NODE], { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
  return (hostDir = dir);
}

/** How to run pi: the Node binary of PI_NODE and pi's CLI script (its package's `bin.pi`). */
export function piCommand() {
  const mods = path.join(piHost(), "node_modules");
  const node = path.join(mods, PI_NODE.replace(/@[^@]*$/, ""), "bin", "node");
  const pkg = JSON.parse(fs.readFileSync(path.join(mods, piName, "package.json"), "utf8"));
  const bin = typeof pkg.bin === "string" ? pkg.bin : pkg.bin.pi;
  return { node, cli: path.join(mods, piName, bin), version: pkg.version };
}

/**
 * A fresh project with the sheepdog tarballs and this package (packed now from pi/), installed
 * offline. Once per test file.
 */
export function installProject() {
  if (project) return project;
  const tarballs = fs.readdirSync(packages).filter((f) => f.endsWith(".tgz"));
  if (!tarballs.some((f) => /^sheepdog-\d/.test(f))) {
    throw new Error(`no sheepdog-*.tgz in ${packages}: run scripts/package ${packages} first`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-pi-"));
  execFileSync("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: path.join(repo, "pi"), stdio: ["ignore", "ignore", "inherit"] });
  const own = fs.readdirSync(dir).find((f) => f.endsWith(".tgz"));
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "host", version: "1.0.0", private: true }));
  execFileSync(
    "npm",
    ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", path.join(dir, own), ...tarballs.map((t) => path.join(packages, t))],
    { cwd: dir, stdio: ["ignore", "ignore", "inherit"] },
  );
  project = dir;
  return dir;
}

/**
 * The scripted model: each request to /v1/chat/completions takes the next step of `steps`
 * (a function of the request body returning `{tool: [name, args]}` or `{text}`); with no step
 * left it answers "done". `requests` keeps every body, `next(pred)` waits for one.
 */
export async function model() {
  const steps = [];
  const requests = [];
  const waiters = [];
  let callNo = 0;
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (d) => (body += d));
    req.on("end", async () => {
      const parsed = JSON.parse(body || "{}");
      requests.push(parsed);
      for (const w of [...waiters]) w();
      const step = steps.shift();
      let reply;
      try {
        reply = step ? await step(parsed) : { text: "done" };
      } catch (e) {
        reply = { text: `script error: ${e.message}` };
        server.scriptErrors.push(e);
      }
      res.writeHead(200, { "content-type": "text/event-stream" });
      const chunk = (delta, finish = null) =>
        res.write(
          `data: ${JSON.stringify({ id: `c${callNo}`, object: "chat.completion.chunk", created: 0, model: "scripted", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`,
        );
      callNo++;
      if (reply.tool) {
        const [name, args] = reply.tool;
        chunk({ role: "assistant", tool_calls: [{ index: 0, id: `call_${callNo}`, type: "function", function: { name, arguments: JSON.stringify(args) } }] });
        chunk({}, "tool_calls");
      } else {
        chunk({ role: "assistant", content: reply.text });
        chunk({}, "stop");
      }
      res.write(
        `data: ${JSON.stringify({ id: `c${callNo}`, object: "chat.completion.chunk", created: 0, model: "scripted", choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } })}\n\n`,
      );
      res.end("data: [DONE]\n\n");
    });
  });
  server.scriptErrors = [];
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  const { port } = server.address();
  return {
    port,
    steps,
    requests,
    errors: server.scriptErrors,
    /** Resolves with the first request (from index `from`) that `pred` accepts. */
    next(pred, ms = 20000, from = 0) {
      return until(() => requests.slice(from).find(pred), ms, "a model request");
    },
    close: () =>
      new Promise((r) => {
        server.close(r);
        server.closeAllConnections(); // pi's client keeps its connection alive
      }),
  };
}

/** The last tool result the model was sent, as text, and its error flag (from the request). */
export function lastToolResult(body) {
  const msgs = body.messages || [];
  for (let i = msgs.length - 1; i >= 0; i--) {
    if (msgs[i].role === "tool") {
      const c = msgs[i].content;
      return typeof c === "string" ? c : c.map((p) => p.text || "").join("");
    }
  }
  return null;
}

/** Every message's text in a request, joined. */
export function allText(body) {
  return (body.messages || [])
    .map((m) => (typeof m.content === "string" ? m.content : (m.content || []).map((p) => p.text || "").join("")))
    .join("\n");
}

/**
 * Runs `pi --mode rpc` in the project with the scripted model, this package as its one
 * extension (none with `extension: false`: bare pi), and its own agent dir, session dir and
 * sheepdog state dir (`state` names another one, an earlier pi's; removed afterwards, after a
 * stop of whatever is left in the state dir; then what the test tracked is killed).
 */
export function startPi(t, m, { env = {}, cwd, extension = true, state, after = [] } = {}) {
  const dir = installProject();
  const { node, cli } = piCommand();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-pi-home-"));
  const agentDir = path.join(home, "agent");
  const stateDir = state || path.join(home, "state");
  fs.mkdirSync(agentDir, { recursive: true });
  fs.writeFileSync(
    path.join(agentDir, "models.json"),
    JSON.stringify({
      providers: {
        scripted: {
          baseUrl: `http://127.0.0.1:${m.port}/v1`,
          api: "openai-completions",
          apiKey: "none",
          compat: { supportsDeveloperRole: false, supportsReasoningEffort: false, supportsUsageInStreaming: true },
          models: [{ id: "scripted", name: "scripted", reasoning: false, input: ["text"], contextWindow: 100000, maxTokens: 1000 }],
        },
      },
    }),
  );
  const guard = new Guard();
  const ext = path.join(dir, "node_modules/pi-sheepdog");
  const child = spawn(
    node,
    [cli, "--mode", "rpc", "--provider", "scripted", "--model", "scripted", "--no-session", "--no-skills", "--no-extensions", "--offline", ...(extension ? ["-e", ext] : []), ...after.flatMap((e) => ["-e", e])],
    {
      cwd: cwd || home,
      stdio: ["pipe", "pipe", "pipe"],
      // HOME is the test's own: the tool runs commands as `bash -lc`, and a login shell that
      // read this machine's ~/.profile ran `pyenv rehash`; a tree stopped mid-rehash (SIGKILL
      // after the grace) left pyenv's lock behind, and every later `bash -lc` on the machine
      // then waited 60 s for it (a CI run here: the log-match test timed out, then 6 of 6).
      env: { ...process.env, HOME: home, PI_CODING_AGENT_DIR: agentDir, SHEEPDOG_STATE_DIR: stateDir, PI_OFFLINE: "1", PI_TELEMETRY: "0", ...env },
    },
  );
  guard.track(child.pid);
  const events = [];
  const waiters = [];
  let buf = "";
  let stderr = "";
  child.stderr.on("data", (d) => (stderr += d));
  child.stdout.setEncoding("utf8");
  child.stdout.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        events.push(JSON.parse(line));
      } catch {
        continue;
      }
      for (const w of [...waiters]) w();
    }
  });
  const exited = new Promise((r) => child.on("close", (code, signal) => r([code, signal])));
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.stdin.end();
      await Promise.race([exited, sleep(15000)]);
    }
    // Whatever the test left running in its own state dir (a stop with nothing to do fails: fine).
    spawnSync(path.join(dir, "node_modules/.bin/sheepdog"), ["--state-dir", stateDir, "stop", "--all", "--term-grace", "200ms"], {
      stdio: "ignore",
      env: { ...process.env, ...env },
    });
  });
  t.after(async () => {
    // A test that leaves a process behind fails: every entry's command and supervisor, pi and
    // what the test tracked must be gone (then they are killed anyway, by pid and start time).
    const r = spawnSync(path.join(dir, "node_modules/.bin/sheepdog"), ["--state-dir", stateDir, "--json", "ps", "--all"], { encoding: "utf8" });
    for (const e of r.status === 0 ? JSON.parse(r.stdout).entries : []) {
      for (const p of [e.pid, e.supervisorPid]) if (p) guard.track(p, String(p === e.pid ? e.startTimeTicks : e.supervisorStartTimeTicks));
    }
    await until(() => guard.left().length === 0, 10000, "nothing left").catch(() => {});
    const survivors = guard.left();
    guard.killAll();
    await until(() => guard.left().length === 0, 10000, "the survivors killed").catch(() => {});
    try {
      fs.rmSync(home, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    } finally {
      assert.deepEqual(survivors, [], "processes left behind");
    }
  });
  let reqNo = 0;
  const pi = {
    child,
    guard,
    home,
    stateDir,
    events,
    exited,
    get stderr() {
      return stderr;
    },
    send(cmd) {
      child.stdin.write(`${JSON.stringify(cmd)}\n`);
    },
    /** Sends a prompt and resolves once the agent is done with it (its agent_end). */
    async prompt(message, ms = 30000) {
      const from = events.length;
      const end = Date.now() + 20000;
      for (;;) {
        const id = `p${++reqNo}`;
        const sent = events.length;
        pi.send({ id, type: "prompt", message });
        const accepted = await pi.next((e) => e.type === "response" && e.id === id, 20000, sent);
        // pi emits the previous turn's agent_end a moment before it is idle again: a prompt in
        // that moment is refused as "already processing" (seen once in CI). Ask again.
        if (!accepted.success && /already processing/.test(accepted.error ?? "") && Date.now() < end) {
          await new Promise((r) => setTimeout(r, 50));
          continue;
        }
        assert.equal(accepted.success, true, JSON.stringify(accepted));
        return pi.next((e) => e.type === "agent_end", ms, from);
      }
    },
    /** The first event (from index `from`) that `pred` accepts. */
    next(pred, ms = 20000, from = 0) {
      return until(() => events.slice(from).find(pred), ms, `a pi event (stderr: ${stderr.slice(-2000)})`);
    },
    /** The sheepdog binary of the project, on this pi's state dir. */
    sheepdog(args) {
      return execFileSync(path.join(dir, "node_modules/.bin/sheepdog"), ["--state-dir", stateDir, ...args], {
        encoding: "utf8",
        env: { ...process.env, ...env },
      });
    },
  };
  return pi;
}

/** tool_execution_end events of the process tool, in order. */
export function toolEnds(events) {
  return events.filter((e) => e.type === "tool_execution_end" && e.toolName === "process");
}

/** tool_execution_end events of pi's bash tool, in order. */
export function bashEnds(events) {
  return events.filter((e) => e.type === "tool_execution_end" && e.toolName === "bash");
}

/** True if something accepts on 127.0.0.1:`port`. */
export function answers(port) {
  return new Promise((resolve) => {
    const s = net.connect({ port, host: "127.0.0.1" });
    s.once("connect", () => {
      s.destroy();
      resolve(true);
    });
    s.once("error", () => resolve(false));
  });
}

/** A free TCP port on 127.0.0.1. */
export async function freePort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, "127.0.0.1", r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/**
 * What the model's bash call starts: a `nohup`'d server on `port`, a `setsid` child and a
 * double-forked `setsid` helper, each writing its pid into `dir` (so the test knows every
 * process, also those that leave pi's tree), then `echo started`; with `wait`, the call itself
 * runs until they end.
 */
export function devServer(dir, port, { wait = false } = {}) {
  return [
    `nohup python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server`,
    `setsid sh -c 'echo $$ > ${dir}/setsid; exec sleep 300' &`,
    `( setsid sh -c 'echo $$ > ${dir}/helper; exec sleep 301' & )`,
    `echo $$ > ${dir}/shell`,
    "echo started",
    ...(wait ? ["wait"] : []),
  ].join("\n");
}

/** The pids `devServer` wrote, once all four are there (tracked by `guard`). */
export async function devPids(dir, guard) {
  const names = ["server", "setsid", "helper", "shell"];
  const read = (n) => {
    try {
      return fs.readFileSync(path.join(dir, n), "utf8").trim();
    } catch {
      return "";
    }
  };
  await until(() => names.every(read), 15000, "the dev server's pids");
  const pids = names.map((n) => Number(read(n)));
  for (const p of pids) guard?.track(p);
  return pids;
}

/**
 * After `ms` (5 s): which of `pids` are alive (a thread group while any thread lives; zombies
 * are dead) and whether `port` still answers. Returns as soon as all are gone and the port is
 * free, or at `ms` with what is left.
 */
export async function survivors(pids, port, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const live = pids.filter(alive);
    const open = port ? await answers(port) : false;
    if ((live.length === 0 && !open) || Date.now() >= end) return { live, open };
    await sleep(50);
  }
}
