"use strict";
// The typed API of the sheepdog npm package. Thin on purpose (STYLE.md 13): every function
// spawns the sheepdog binary (argv, never a shell) and returns the JSON document it printed;
// nothing the binary decides is decided again here. Types: index.d.ts and types.d.ts.

const { spawn } = require("node:child_process");
const readline = require("node:readline");
const { binaryPath } = require("./binary.js");

/**
 * The one error of this package: a sheepdog command that failed. `document` is the error
 * document sheepdog printed (`{v, error: {message, exitStatus}}`), or null when it printed none;
 * `exitStatus` is the command's exit status (null if it died by `signal`); `stderr` what it said.
 */
class SheepdogError extends Error {
  constructor(message, { document = null, exitStatus = null, signal = null, stderr = "", args = [] } = {}) {
    super(message);
    this.name = "SheepdogError";
    this.document = document;
    this.exitStatus = exitStatus;
    this.signal = signal;
    this.stderr = stderr;
    this.args = args;
  }
}

/** A duration flag's value: a number is milliseconds, a string is sheepdog's own (`1.5s`). */
function dur(v) {
  if (typeof v === "number") {
    if (!Number.isFinite(v)) throw new TypeError(`sheepdog: a duration must be finite, got ${v}`);
    return `${Math.round(v)}ms`;
  }
  return String(v);
}

/** Appends `--flag value` for each option that is set, by the table [key, flag, kind]. */
function flags(opts, table) {
  const out = [];
  for (const [key, flag, kind] of table) {
    const v = opts[key];
    if (v === undefined || v === null || v === false) continue;
    if (kind === "bool") out.push(flag);
    else if (kind === "dur") out.push(flag, dur(v));
    else if (kind === "list") for (const x of v) out.push(flag, String(x));
    else if (kind === "env") for (const [k, x] of Object.entries(v)) out.push(flag, `${envKey(k)}=${x}`);
    else out.push(flag, String(v));
  }
  return out;
}

/**
 * An `env` key as sheepdog takes it: a variable's name, so not empty and without `=`, a newline
 * or NUL (`{"A=B": "c"}` would otherwise reach the command as `A=B=c`). Throws TypeError.
 */
function envKey(k) {
  if (k === "" || /[=\n\0]/.test(k)) {
    throw new TypeError(`sheepdog: env key ${JSON.stringify(k)} is not a variable name (empty, or holds '=', a newline or NUL)`);
  }
  return k;
}

/** Global flags (before the subcommand): the state dir and JSON output. */
function globalArgs(opts) {
  const out = [];
  if (opts.stateDir) out.push("--state-dir", String(opts.stateDir));
  out.push("--json");
  return out;
}

function spawnEnv(opts) {
  return opts.processEnv ? { ...opts.processEnv } : process.env;
}

function binary(opts) {
  return opts.binary || binaryPath();
}

/**
 * Runs `sheepdog --json ARGS`, resolves to the one document it printed. A document that is not
 * an error is the result even when the status is not 0 (`wait` exits with the process's code,
 * `stop` with 1 when a cleanup failed: the document says so). Rejects with SheepdogError.
 */
function call(args, opts = {}, input) {
  const full = [...globalArgs(opts), ...args];
  return new Promise((resolve, reject) => {
    let child;
    try {
      child = spawn(binary(opts), full, {
        stdio: [input === undefined ? "ignore" : "pipe", "pipe", "pipe"],
        env: spawnEnv(opts),
        cwd: opts.cwd,
        signal: opts.signal,
      });
    } catch (e) {
      reject(new SheepdogError(e.message, { args: full }));
      return;
    }
    const out = [];
    const err = [];
    child.stdout.on("data", (b) => out.push(b));
    child.stderr.on("data", (b) => err.push(b));
    child.on("error", (e) => reject(new SheepdogError(`sheepdog: ${e.message}`, { args: full })));
    if (input !== undefined) {
      child.stdin.on("error", () => {}); // the command may exit before reading it all
      child.stdin.end(input);
    }
    child.on("close", (code, signal) => {
      const stdout = Buffer.concat(out).toString("utf8");
      const stderr = Buffer.concat(err).toString("utf8");
      let doc = null;
      try {
        doc = stdout.trim() ? JSON.parse(stdout) : null;
      } catch {
        doc = null;
      }
      if (doc && typeof doc === "object" && !("error" in doc) && signal === null) {
        resolve(doc);
        return;
      }
      const line = stderr.split("\n").find((l) => l.startsWith("sheepdog: ") && !l.startsWith("sheepdog: warning:"));
      const message =
        (doc && doc.error && doc.error.message && `sheepdog: ${doc.error.message}`) ||
        line ||
        `sheepdog ${args[0]} ${signal ? `died by ${signal}` : `exited ${code}`}`;
      reject(new SheepdogError(message, { document: doc, exitStatus: code, signal, stderr, args: full }));
    });
  });
}

/** `idOrName` as CLI targets: one, several, or the `{session}` / `{all}` selectors. */
function targets(idOrName, opts) {
  if (Array.isArray(idOrName)) return idOrName.map(String);
  if (typeof idOrName === "string") return [idOrName];
  const sel = { ...(idOrName || {}), ...opts };
  if (sel.session !== undefined) return ["--session", String(sel.session)];
  if (sel.all) return ["--all"];
  throw new TypeError("sheepdog: give an id or name, a list of them, {session} or {all: true}");
}

function selectorOpts(idOrName, opts) {
  return typeof idOrName === "object" && !Array.isArray(idOrName) && idOrName !== null
    ? { ...idOrName, ...(opts || {}) }
    : opts || {};
}

function argv(command, args) {
  if (typeof command !== "string" || command === "") throw new TypeError("sheepdog: command must be a non-empty string");
  return ["--", command, ...(args || []).map(String)];
}

const CONTAINMENT = [
  ["containment", "--containment"],
  ["memoryMax", "--memory-max"],
  ["pidsMax", "--pids-max"],
];

const RUN_FLAGS = [
  ["stdin", "--stdin"],
  ["onOwnerDeath", "--on-owner-death"],
  ["afterProviderExit", "--after-provider-exit"],
  ["onStdinEof", "--on-stdin-eof"],
  ["stdinGrace", "--stdin-grace", "dur"],
  ["termGrace", "--term-grace", "dur"],
  ["killWait", "--kill-wait", "dur"],
  ["timeout", "--timeout", "dur"],
  ...CONTAINMENT,
];

/**
 * Orca's provider-supervisor spec (`ownerPid`, `lifetime`, `closeRequest`, `stdinEndGraceMs`,
 * `sigtermGraceMs`) as `run`'s options, docs/packages.md's table row by row; an option given under
 * sheepdog's own name wins. `cwd` is Node's, the same in both.
 */
function fromOrcaSpec(opts) {
  const o = {};
  if (opts.ownerPid !== undefined) o.owner = opts.ownerPid;
  if (opts.stdinEndGraceMs !== undefined) o.stdinGrace = opts.stdinEndGraceMs;
  if (opts.sigtermGraceMs !== undefined) o.termGrace = opts.sigtermGraceMs;
  if (opts.closeRequest !== undefined) {
    o.stdin = "relay";
    o.onOwnerDeath = opts.closeRequest === "stdin-end" ? "close-stdin" : "stop";
  }
  if (opts.lifetime === "session") o.onStdinEof = "stop";
  if (opts.lifetime === "one-shot") o.afterProviderExit = "kill";
  for (const [k, v] of Object.entries(opts)) if (v !== undefined) o[k] = v;
  return o;
}

/**
 * `sheepdog run --owner <this process> ... -- command args`, spawned as Node's spawn does
 * (`stdio`, `cwd`, `env`, `detached` passed on). The ChildProcess's pid is the supervisor's;
 * its `--events-fd` events are emitted on it by name (`spawned`, `stopping`, `escalated`,
 * `exited`, or `spawnFailed` when the command could not start) and all of them as `sheepdog`.
 * `owner: false` leaves the owner out. Orca's spec names are taken too (`fromOrcaSpec`).
 */
function supervise(command, args = [], options = {}) {
  const opts = fromOrcaSpec(options || {});
  const runArgs = ["run"];
  if (opts.owner !== false) runArgs.push("--owner", String(opts.owner ?? process.pid));
  runArgs.push(...flags(opts, RUN_FLAGS));
  let stdio = opts.stdio ?? "pipe";
  if (typeof stdio === "string") stdio = [stdio, stdio, stdio];
  stdio = [...stdio];
  while (stdio.length < 3) stdio.push("pipe");
  const eventsFd = stdio.length;
  stdio.push("pipe");
  runArgs.push("--events-fd", String(eventsFd), ...argv(command, args));
  const full = opts.stateDir ? ["--state-dir", String(opts.stateDir), ...runArgs] : runArgs;
  const child = spawn(binary(opts), full, {
    stdio,
    cwd: opts.cwd,
    env: opts.env ?? process.env,
    detached: opts.detached,
    signal: opts.signal,
    killSignal: opts.killSignal,
    argv0: opts.argv0,
  });
  const stream = child.stdio[eventsFd];
  if (stream) {
    const rl = readline.createInterface({ input: stream, crlfDelay: Infinity });
    rl.on("line", (line) => {
      let ev;
      try {
        ev = JSON.parse(line);
      } catch {
        return;
      }
      child.emit("sheepdog", ev);
      if (ev && typeof ev.event === "string") child.emit(ev.event, ev);
    });
  }
  return child;
}

const START_FLAGS = [
  ["name", "--name"],
  ["session", "--session"],
  ["owner", "--owner"],
  ["cwd", "--cwd"],
  ["env", "--env", "env"],
  ["timeout", "--timeout", "dur"],
  ["termGrace", "--term-grace", "dur"],
  ["killWait", "--kill-wait", "dur"],
  ["cleanup", "--cleanup"],
  ["cleanupTimeout", "--cleanup-timeout", "dur"],
  ["logMax", "--log-max"],
  ["readyPort", "--ready-port"],
  ["readyLog", "--ready-log"],
  ["readyListen", "--ready-listen", "bool"],
  ["readyTimeout", "--ready-timeout", "dur"],
  ["replace", "--replace", "bool"],
  ["stdin", "--stdin"],
  ...CONTAINMENT,
];

/** `sheepdog start`: resolves once the command runs (or is ready, with `ready*`). */
async function start(command, args = [], options = {}) {
  const opts = options || {};
  // `cwd` and `env` here are the command's (`--cwd`, `--env`), not sheepdog's own.
  const a = ["start", ...flags(opts, START_FLAGS), ...argv(command, args)];
  return call(a, { ...opts, cwd: undefined });
}

/** `sheepdog ps`: the entry views (running ones; `all` for every entry). */
async function list(options = {}) {
  const opts = options || {};
  const doc = await call(
    ["ps", ...flags(opts, [["all", "--all", "bool"], ["session", "--session"], ["status", "--status"]])],
    opts,
  );
  return doc.entries;
}

/** `sheepdog logs ID`: one read (use `cursor` to continue where the last one ended). */
function logs(idOrName, options = {}) {
  const opts = options || {};
  return call(
    [
      "logs",
      String(idOrName),
      ...flags(opts, [
        ["stream", "--stream"],
        ["tail", "--tail"],
        ["head", "--head"],
        ["grep", "--grep"],
        ["since", "--since", "dur"],
        ["cursor", "--cursor"],
      ]),
    ],
    opts,
  );
}

/**
 * `sheepdog stop`: by id or name (or several), or `{session}` / `{all: true}`; the stop views.
 * `{session, missingOk: true}` resolves to `[]` when nothing of the session is left to stop
 * (an idempotent cancel); without it, that rejects.
 */
async function stop(idOrName, options) {
  const opts = selectorOpts(idOrName, options);
  const doc = await call(
    [
      "stop",
      ...targets(idOrName, options),
      ...flags(opts, [
        ["missingOk", "--missing-ok", "bool"],
        ["termGrace", "--term-grace", "dur"],
      ]),
    ],
    opts,
  );
  return doc.stopped;
}

/** `sheepdog restart`: the new entries' views (each with `restartOf`). */
async function restart(idOrName, options = {}) {
  const opts = options || {};
  const ids = Array.isArray(idOrName) ? idOrName.map(String) : [String(idOrName)];
  const doc = await call(["restart", ...ids, ...flags(opts, [["termGrace", "--term-grace", "dur"]])], opts);
  return doc.restarted;
}

/** `sheepdog update ID`: change the cleanup (`cleanup: null` removes it) or the name. */
function update(idOrName, options = {}) {
  const opts = options || {};
  const a = ["update", String(idOrName)];
  if (opts.cleanup === null) a.push("--no-cleanup");
  else if (opts.cleanup !== undefined) a.push("--cleanup", String(opts.cleanup));
  a.push(...flags(opts, [["cleanupTimeout", "--cleanup-timeout", "dur"], ["name", "--name"]]));
  return call(a, opts);
}

/** `sheepdog wait`: `{v, waited, exitStatus}`, also when a process failed (its status is the result). */
function wait(idOrName, options) {
  const opts = selectorOpts(idOrName, options);
  return call(["wait", ...targets(idOrName, options), ...flags(opts, [["any", "--any", "bool"], ["timeout", "--timeout", "dur"]])], opts);
}

/** `sheepdog reap`: what a crash left behind, stopped and recorded. */
function reap(options = {}) {
  const opts = options || {};
  return call(["reap", ...flags(opts, [["dryRun", "--dry-run", "bool"]])], opts);
}

/** `sheepdog clear`: ids/names, or `{finished: true}`; the cleared entries' views. */
async function clear(idOrName, options) {
  let opts;
  let a;
  if (typeof idOrName === "string" || Array.isArray(idOrName)) {
    opts = options || {};
    a = Array.isArray(idOrName) ? idOrName.map(String) : [idOrName];
  } else {
    opts = { ...(idOrName || {}), ...(options || {}) };
    if (!opts.finished) throw new TypeError("sheepdog: clear takes an id or name, a list of them, or {finished: true}");
    a = ["--finished"];
  }
  const doc = await call(["clear", ...a, ...flags(opts, [["force", "--force", "bool"]])], opts);
  return doc.cleared;
}

/**
 * `sheepdog send ID -`: writes `input` to the stdin of a process started with `stdin: "pipe"`;
 * resolves to `{v, id, bytes, eof}`.
 */
function send(idOrName, input, options = {}) {
  const opts = options || {};
  return call(["send", String(idOrName), ...flags(opts, [["eof", "--eof", "bool"]]), "-"], opts, input ?? "");
}

/**
 * `sheepdog events --json`: an async iterator of entry events, one per line, until the stream
 * ends or the loop is left (`break` ends the reader process). Rejects with SheepdogError when
 * the command fails.
 */
async function* events(options = {}) {
  const opts = options || {};
  const a = [
    ...globalArgs(opts),
    "events",
    ...flags(opts, [["session", "--session"], ["id", "--id"], ["since", "--since"]]),
  ];
  const child = spawn(binary(opts), a, { stdio: ["ignore", "pipe", "pipe"], env: spawnEnv(opts), signal: opts.signal });
  const err = [];
  child.stderr.on("data", (b) => err.push(b));
  const closed = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  const spawnError = new Promise((resolve) => child.on("error", resolve));
  const rl = readline.createInterface({ input: child.stdout, crlfDelay: Infinity });
  let done = false;
  try {
    for await (const line of rl) {
      if (!line.trim()) continue;
      yield JSON.parse(line);
    }
    done = true;
  } finally {
    if (!done && child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  }
  const { code, signal } = await Promise.race([closed, spawnError.then((e) => ({ code: null, signal: null, e }))]);
  if (code !== 0) {
    const stderr = Buffer.concat(err).toString("utf8");
    const line = stderr.split("\n").find((l) => l.startsWith("sheepdog: ")) || `sheepdog events exited ${code ?? signal}`;
    throw new SheepdogError(line, { exitStatus: code, signal, stderr, args: a });
  }
}

module.exports = {
  SheepdogError,
  binaryPath,
  supervise,
  start,
  list,
  logs,
  stop,
  restart,
  update,
  wait,
  reap,
  clear,
  send,
  events,
};
