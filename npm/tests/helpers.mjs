// Shared by the npm package tests: a fresh project with the packed tarballs installed offline,
// a temp state dir per test, and processes checked (and, on failure, killed) by recorded
// identity (pid + start time), never by name. Zombies count as dead.

import { execFileSync, spawn, spawnSync } from "node:child_process";
import { after } from "node:test";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, "../..");
/** Where scripts/package wrote the tarballs: $SHEEPDOG_PACKAGES, default target/package. */
export const packages = path.resolve(process.env.SHEEPDOG_PACKAGES || path.join(repo, "target/package"));

/** /proc/PID/stat's state, ppid and start time, or null when the pid is gone. */
export function stat(pid) {
  let s;
  try {
    s = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  const rest = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return { state: rest[0], ppid: Number(rest[1]), startTime: rest[19] };
}

/**
 * Alive: not gone and not a zombie, or a zombie thread-group leader with a live thread (its
 * process is alive while any of its tasks is).
 */
export function alive(pid) {
  const s = stat(pid);
  if (s === null || s.state === "X") return false;
  if (s.state !== "Z") return true;
  let tasks = [];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return false;
  }
  return tasks.some((t) => {
    try {
      const ts = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, "utf8");
      return !"ZX".includes(ts.slice(ts.lastIndexOf(")") + 2)[0]);
    } catch {
      return false;
    }
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits until `pred()` is truthy; returns its value, or throws after `ms`. */
export async function until(pred, ms, what) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await pred();
    if (v) return v;
    if (Date.now() >= end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}

/** Waits until none of `pids` is alive; returns the ones still alive after `ms`. */
export async function waitGone(pids, ms) {
  const end = Date.now() + ms;
  for (;;) {
    const left = pids.filter(alive);
    if (left.length === 0 || Date.now() >= end) return left;
    await sleep(10);
  }
}

/**
 * SIGKILL of a supervisor chain (supervisor and keeper) "in one instant", as `kill -9 -1` would:
 * the one window the keeper leaves. Both are frozen first (SIGSTOP, until /proc says `T`), so
 * neither can start the stop when the other dies, and the keeper is killed first: a stopped
 * keeper whose supervisor died would get SIGHUP and SIGCONT from the kernel (its process group
 * became orphaned with a stopped member) and would run the stop. As tests/common's
 * kill_supervisor_and_keeper.
 */
export async function killChain(supervisor, keeper) {
  const chain = [keeper, supervisor].filter(Boolean);
  for (const p of chain) process.kill(p, "SIGSTOP");
  const end = Date.now() + 5000;
  while (!chain.every((p) => ["T", "Z", "X", undefined].includes(stat(p)?.state))) {
    if (Date.now() >= end) throw new Error(`the supervisor chain ${chain} did not stop`);
    await sleep(1);
  }
  for (const p of chain) process.kill(p, "SIGKILL");
}

/** Processes a test made, killed on cleanup only while their start time still matches. */
export class Guard {
  constructor() {
    this.procs = [];
  }
  track(pid, startTime = stat(pid)?.startTime) {
    if (startTime) this.procs.push({ pid, startTime });
  }
  /** The tracked processes still alive as themselves (same start time). */
  left() {
    return this.procs.filter(({ pid, startTime }) => alive(pid) && stat(pid)?.startTime === startTime);
  }
  killAll() {
    for (const { pid } of this.left()) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }
}

let project;
// Registered at import, so on the file's root: after all its tests (a process "exit" handler
// does not run under the test runner).
after(() => project && fs.rmSync(project, { recursive: true, force: true }));
/** A fresh npm project with the packed tarballs installed offline (once per test file). */
export function installProject() {
  if (project) return project;
  const tarballs = fs.readdirSync(packages).filter((f) => f.endsWith(".tgz"));
  if (!tarballs.some((f) => /^sheepdog-\d/.test(f))) {
    throw new Error(`no sheepdog-*.tgz in ${packages}: run scripts/package ${packages} first`);
  }
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-npm-"));
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "host", version: "1.0.0", private: true }));
  execFileSync(
    "npm",
    ["install", "--offline", "--no-audit", "--no-fund", "--loglevel=error", ...tarballs.map((t) => path.join(packages, t))],
    { cwd: dir, stdio: ["ignore", "ignore", "inherit"] },
  );
  project = dir;
  return dir;
}

/** The installed package, as a host in the project would require it. */
export function api() {
  return createRequire(path.join(installProject(), "package.json"))("sheepdog");
}

/** A temp state dir, removed by `done()` after a stop of whatever is left in it. */
export function stateDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sheepdog-state-"));
  const guard = new Guard();
  t.after(async () => {
    try {
      await api().stop({ all: true, stateDir: dir, termGrace: "200ms" });
    } catch {
      // nothing was running
    }
    guard.killAll();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { dir, guard };
}

/** Spawns `node SCRIPT ARGS` in the project; stdout lines as they come. */
export function host(script, args, env = {}) {
  const dir = installProject();
  const file = path.join(dir, `host-${Math.random().toString(36).slice(2)}.js`);
  fs.writeFileSync(file, script);
  const child = spawn(process.execPath, [file, ...args], {
    cwd: dir,
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  child.lines = lines(child.stdout);
  closed(child);
  return child;
}

/** A line reader: `next(prefix, ms)` resolves to the first line starting with `prefix`. */
export function lines(stream) {
  const seen = [];
  const waiters = [];
  let buf = "";
  stream.setEncoding("utf8");
  stream.on("data", (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      seen.push(line);
      for (const w of [...waiters]) w();
    }
  });
  return {
    seen,
    next(prefix, ms = 10000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const idx = seen.findIndex((l) => l.startsWith(prefix));
          if (idx >= 0) {
            const [line] = seen.splice(idx, 1);
            waiters.splice(waiters.indexOf(check), 1);
            clearTimeout(timer);
            resolve(line);
          }
        };
        const timer = setTimeout(() => {
          waiters.splice(waiters.indexOf(check), 1);
          reject(new Error(`no line starting with '${prefix}' within ${ms} ms (seen: ${JSON.stringify(seen)})`));
        }, ms);
        waiters.push(check);
        check();
      });
    },
  };
}

/** Resolves with [code, signal] when `child` closes. */
export function closed(child) {
  // One promise per child, made at its spawn by `host`: a close that came while the test was
  // awaiting something else is still seen.
  child.closing ??= new Promise((resolve) => child.once("close", (code, signal) => resolve([code, signal])));
  return child.closing;
}

/**
 * TypeScript and @types/node, from the global npm root (as .ci/run installs them) or the
 * repository's node_modules: `{ bin, types }` (tsc's entry and the @types dir), or null.
 */
/**
 * Writes `dir/tsconfig.json` for a `tsc --strict` check of `files` (paths relative to `dir`)
 * against Node's types and those `tsc` (from findTsc) ships with, then runs `tsc -p dir`:
 * `{ status, output }`. `options` replaces compiler options (pi's extension: a bundler's
 * module resolution).
 */
export function strictCompile(tsc, dir, files, options = {}) {
  const compilerOptions = {
    strict: true,
    noEmit: true,
    module: "nodenext",
    moduleResolution: "nodenext",
    target: "es2022",
    types: ["node"],
    typeRoots: [tsc.types],
    skipLibCheck: false,
    ...options,
  };
  fs.writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({ compilerOptions, files }));
  const r = spawnSync(process.execPath, [tsc.bin, "-p", "."], { cwd: dir, encoding: "utf8" });
  return { status: r.status, output: r.stdout + r.stderr };
}

export function findTsc() {
  const roots = [];
  try {
    roots.push(execFileSync("npm", ["root", "-g"], { encoding: "utf8" }).trim());
  } catch {
    // no global root
  }
  roots.push(path.join(repo, "node_modules"));
  for (const r of roots) {
    const bin = path.join(r, "typescript/bin/tsc");
    if (fs.existsSync(bin) && fs.existsSync(path.join(r, "@types/node"))) return { bin, types: path.join(r, "@types") };
  }
  return null;
}
