// The pi package's end-to-end harness: a fresh project with pi 0.73 (from npm), the packed
// sheepdog tarballs ($SHEEPDOG_PACKAGES, default target/package) and this package packed from
// pi/; a scripted model (an OpenAI-compatible server on 127.0.0.1, named in models.json) whose
// replies are tool calls; pi itself in `--mode rpc`. Processes are checked, and on cleanup
// killed, by recorded pid and start time, never by name. Zombies count as dead.

import { execFileSync, spawn, spawnSync } from "node:child_process";
import { after } from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";

import { Guard, alive, packages, repo, sleep, stat, until } from "../../npm/tests/helpers.mjs";

export { alive, sleep, until };
export const PI = process.env.SHEEPDOG_PI_PACKAGE || "@mariozechner/pi-coding-agent@0.73.1";

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
after(() => project && fs.rmSync(project, { recursive: true, force: true }));

/**
 * A fresh project with pi, the sheepdog tarballs and this package (packed now from pi/): the
 * tarballs offline-capable, pi from the registry (or npm's cache). Once per test file.
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
    ["install", "--no-audit", "--no-fund", "--loglevel=error", PI, path.join(dir, own), ...tarballs.map((t) => path.join(packages, t))],
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
 * extension, and its own agent dir, session dir and sheepdog state dir (removed afterwards,
 * after a stop of whatever is left in the state dir; then what the test tracked is killed).
 */
export function startPi(t, m, { env = {}, cwd } = {}) {
  const dir = installProject();
  const home = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-pi-home-"));
  const agentDir = path.join(home, "agent");
  const stateDir = path.join(home, "state");
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
  const piBin = path.join(dir, "node_modules/@mariozechner/pi-coding-agent/dist/cli.js");
  const ext = path.join(dir, "node_modules/pi-sheepdog");
  const child = spawn(
    process.execPath,
    [piBin, "--mode", "rpc", "--provider", "scripted", "--model", "scripted", "--no-session", "--no-skills", "--no-extensions", "--offline", "-e", ext],
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
