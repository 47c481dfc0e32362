// The agent-host harness: the real Claude Code, Codex, Gemini CLI and opencode CLIs from npm
// (pinned in versions.json), each in a fresh home with the sheepdog plugin from hosts/ loaded
// (or none, for the bare host), driven by the scripted models of model.mjs and gemini-model.mjs
// on 127.0.0.1; sheepdog's static binary from the packed platform tarball ($SHEEPDOG_PACKAGES,
// as the npm, Python and pi tests use), or $SHEEPDOG_BIN_DIR. Processes are checked, and on
// cleanup killed, by recorded pid and start time, never by name (npm/tests/helpers.mjs: zombies
// count as dead; a thread group is alive while any thread is).

import assert from "node:assert/strict";
import { execFileSync, spawn } from "node:child_process";
import { after } from "node:test";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

import { Guard, alive, sleep, stat, until } from "../../npm/tests/helpers.mjs";
import { startModel, toolResults } from "./model.mjs";

export { Guard, alive, sleep, startModel, stat, toolResults, until };
export const here = path.dirname(fileURLToPath(import.meta.url));
export const repo = path.resolve(here, "../..");
/** The versions tested (README, "Agent shells", and docs/agent-shells.md; .ci/run installs the same). */
const versions = JSON.parse(fs.readFileSync(path.join(here, "versions.json"), "utf8"));
export const CLAUDE = versions.claude;
export const CODEX = versions.codex;

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
export function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
}

const temps = [];
after(() => {
  for (const d of temps) fs.rmSync(d, { recursive: true, force: true });
});
export function tempDir(prefix) {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  temps.push(d);
  return d;
}

let bin;
/** The directory holding the static `sheepdog` and `sheepdog-mcp` that go on the hosts' PATH. */
export function binDir() {
  if (bin) return bin;
  if (process.env.SHEEPDOG_BIN_DIR) return (bin = path.resolve(process.env.SHEEPDOG_BIN_DIR));
  const packages = path.resolve(process.env.SHEEPDOG_PACKAGES || path.join(repo, "target/package"));
  const arch = process.arch === "arm64" ? "arm64" : "x64";
  const tgz = fs.readdirSync(packages).find((f) => f.startsWith(`sheepdog-linux-${arch}-`) && f.endsWith(".tgz"));
  if (!tgz) throw new Error(`no sheepdog-linux-${arch}-*.tgz in ${packages}: run scripts/package ${packages} first`);
  const dir = tempDir("sheepdog-bin-");
  execFileSync("tar", ["-xzf", path.join(packages, tgz), "-C", dir]);
  return (bin = path.join(dir, "package", "bin"));
}

let hosts;
/**
 * The directory whose node_modules has both CLIs: $SHEEPDOG_HOSTS_DIR (CI installs them once
 * there), else a temp project installed now (once per test file).
 */
export function hostsDir() {
  if (hosts) return hosts;
  if (process.env.SHEEPDOG_HOSTS_DIR) return (hosts = process.env.SHEEPDOG_HOSTS_DIR);
  const dir = tempDir("sheepdog-hosts-");
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "hosts", version: "1.0.0", private: true }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", CLAUDE, CODEX], {
    cwd: dir,
    stdio: ["ignore", "ignore", "inherit"],
  });
  return (hosts = dir);
}

/**
 * Runs one host to its end (or until `during(child)` returns, for tests that act mid-run).
 * `argv` after the program; `env` added to a minimal environment (PATH with sheepdog first,
 * HOME, the state dir). Returns `{ code, signal, out, child }`; SIGKILLs the host after `ms`.
 */
export async function runHost(program, argv, { cwd, env, ms = 90_000, during, guard }) {
  const child = spawn(program, argv, { cwd, env, stdio: ["ignore", "pipe", "pipe"] });
  guard?.track(child.pid);
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (out += d));
  const exited = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  const timer = setTimeout(() => child.kill("SIGKILL"), ms);
  if (during) await during(child);
  const { code, signal } = await exited;
  clearTimeout(timer);
  return { code, signal, out, child };
}

/** PATH for a host: sheepdog's bin dir first (unless `withSheepdog` is false), then the rest. */
export function hostPath(withSheepdog = true) {
  return [withSheepdog ? binDir() : null, process.env.PATH].filter(Boolean).join(":");
}

/** A fresh Claude Code home and project; the plugin's dir when `plugin`. */
export function claudeSetup({ plugin, settings }) {
  const home = tempDir("sheepdog-claude-");
  const proj = path.join(home, "proj");
  fs.mkdirSync(proj);
  if (settings) {
    fs.mkdirSync(path.join(home, ".claude"), { recursive: true });
    fs.writeFileSync(path.join(home, ".claude", "settings.json"), JSON.stringify(settings));
  }
  const state = path.join(home, "state");
  return { home, proj, state, pluginArgs: plugin ? ["--plugin-dir", path.join(repo, "hosts", "claude-code")] : [] };
}

/**
 * Runs `claude -p` against `model` in `setup`: `--output-format json` unless `format` (e.g.
 * `stream-json`, with `args: ["--verbose"]`), then `args`.
 */
export function runClaude(model, setup, opts = {}) {
  const env = {
    PATH: hostPath(opts.withSheepdog ?? true),
    HOME: setup.home,
    LANG: "C.UTF-8",
    ANTHROPIC_BASE_URL: model.url,
    ANTHROPIC_API_KEY: "sk-test",
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
    DISABLE_AUTOUPDATER: "1",
    // Tests run as root in CI containers; Claude Code refuses to skip permissions there otherwise.
    IS_SANDBOX: "1",
    SHEEPDOG_STATE_DIR: setup.state,
    // The containment tier under test (`SHEEPDOG_CONTAINMENT=subreaper`), as the Rust tests take it.
    ...(process.env.SHEEPDOG_CONTAINMENT ? { SHEEPDOG_CONTAINMENT: process.env.SHEEPDOG_CONTAINMENT } : {}),
    ...(opts.env || {}),
  };
  const mode = opts.permissions ?? ["--dangerously-skip-permissions"];
  const argv = ["-p", opts.prompt || "go", "--output-format", opts.format ?? "json", ...(opts.args || []), ...mode, ...setup.pluginArgs];
  return runHost(path.join(hostsDir(), "node_modules", ".bin", "claude"), argv, { cwd: setup.proj, ...opts, env });
}

/** A fresh CODEX_HOME with the scripted provider, and the plugin installed from the repo's marketplace when `plugin`. */
export function codexSetup(model, { plugin }) {
  const home = tempDir("sheepdog-codex-");
  const proj = path.join(home, "proj");
  fs.mkdirSync(proj);
  const state = path.join(home, "state");
  const codex = codexBinary();
  const env = { PATH: hostPath(), HOME: home, CODEX_HOME: home, LANG: "C.UTF-8" };
  if (plugin) {
    execFileSync(codex, ["plugin", "marketplace", "add", repo], { env, stdio: "ignore" });
    execFileSync(codex, ["plugin", "add", "sheepdog@sheepdog"], { env, stdio: "ignore" });
  }
  fs.appendFileSync(
    path.join(home, "config.toml"),
    `model = "gpt-5"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\nname = "scripted"\nbase_url = "${model.url}/v1"\nwire_api = "responses"\nenv_key = "SCRIPTED_KEY"\n`,
  );
  // config.toml's top-level keys must come before any table: rewrite with them first.
  const text = fs.readFileSync(path.join(home, "config.toml"), "utf8");
  const lines = text.split("\n");
  const top = lines.filter((l) => /^model(_provider)? = /.test(l));
  const rest = lines.filter((l) => !/^model(_provider)? = /.test(l));
  fs.writeFileSync(path.join(home, "config.toml"), [...top, "", ...rest].join("\n"));
  return { home, proj, state, codex, plugin };
}

/**
 * The native `codex` in its platform package, run directly: the npm launcher (Node) spawns it
 * as a child where `execve` is not available, and a test that SIGKILLs "the agent" must kill
 * the agent, not a wrapper whose child lives on. Its helpers' dir goes on PATH, as the
 * launcher puts it.
 */
export function codexBinary() {
  const base = path.join(hostsDir(), "node_modules", "@openai");
  for (const pkg of fs.readdirSync(base).filter((d) => d.startsWith("codex-linux-"))) {
    const vendor = path.join(base, pkg, "vendor");
    for (const triple of fs.readdirSync(vendor)) {
      const bin = path.join(vendor, triple, "bin", "codex");
      if (fs.existsSync(bin)) return bin;
    }
  }
  throw new Error(`no native codex under ${base}`);
}

/** Runs `codex exec` against the setup's model. */
export function runCodex(setup, opts = {}) {
  const env = {
    PATH: [path.join(path.dirname(path.dirname(setup.codex)), "codex-path"), hostPath(opts.withSheepdog ?? true)].join(":"),
    HOME: setup.home,
    CODEX_HOME: setup.home,
    CODEX_MANAGED_BY_NPM: "1",
    LANG: "C.UTF-8",
    SCRIPTED_KEY: "x",
    SHEEPDOG_STATE_DIR: setup.state,
    // The containment tier under test (`SHEEPDOG_CONTAINMENT=subreaper`), as the Rust tests take it.
    ...(process.env.SHEEPDOG_CONTAINMENT ? { SHEEPDOG_CONTAINMENT: process.env.SHEEPDOG_CONTAINMENT } : {}),
    ...(opts.env || {}),
  };
  const mode = opts.permissions ?? ["--dangerously-bypass-approvals-and-sandbox"];
  const argv = ["exec", "--skip-git-repo-check", ...mode, ...(setup.plugin ? ["--dangerously-bypass-hook-trust"] : []), opts.prompt || "go"];
  return runHost(setup.codex, argv, { cwd: setup.proj, ...opts, env });
}

/**
 * The shell script of a dev server the tests start: a server on `port`, a `setsid` child and a
 * double-forked `setsid` helper, each writing its pid into `dir` (so the test knows every process, even
 * those that leave the agent's tree).
 */
export function devServer(dir, port) {
  return [
    `python3 -m http.server ${port} --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > ${dir}/server`,
    `setsid sh -c 'echo $$ > ${dir}/setsid; exec sleep 300' &`,
    // Double-forked and in a session of its own: it leaves both the agent's tree and its group.
    `( setsid sh -c 'echo $$ > ${dir}/helper; exec sleep 301' & )`,
    `echo $$ > ${dir}/shell`,
    `wait`,
  ].join("\n");
}

/** The pids `devServer` wrote, once all four are there. */
export async function devPids(dir, guard) {
  const names = ["server", "setsid", "helper", "shell"];
  await until(() => names.every((n) => fs.existsSync(path.join(dir, n)) && fs.readFileSync(path.join(dir, n), "utf8").trim()), 15_000, "the dev server's pids");
  const pids = names.map((n) => Number(fs.readFileSync(path.join(dir, n), "utf8").trim()));
  for (const p of pids) guard?.track(p);
  return pids;
}

/** Waits up to `ms` for every pid to be dead and the port free; returns what is still alive. */
export async function survivors(pids, port, ms = 5000) {
  const end = Date.now() + ms;
  for (;;) {
    const live = pids.filter(alive);
    const open = port ? await answers(port) : false;
    if ((live.length === 0 && !open) || Date.now() >= end) return { live, open };
    await sleep(50);
  }
}

/**
 * A user's Ctrl+C mid-call, on the bare host and then the hooked one (Gemini CLI and opencode have
 * no tool that stops a process: the SIGINT is the stop). For each, `launch({ plugin, dir, port,
 * interrupt })` runs the host on a model whose one foreground call runs `devServer(dir, port)`,
 * passes `interrupt(child, pidsOf)` on as the host run's `during`, and returns whether the host
 * ended as it does on a SIGINT. `interrupt` waits for the pids (`pidsOf()`) and for the server's
 * port (up to `portMs`), then sends the SIGINT. Then the assertions: each host ends within 10 s
 * (`ended` says how it should), the bare one leaves the whole tree running, and 5 s after the
 * SIGINT nothing of the hooked one's is alive and the port is free.
 */
export async function interruptMidCall({ prefix, guard, portMs, ended, launch }) {
  const run = async (plugin) => {
    const dir = tempDir(prefix);
    const port = await freePort();
    let pids;
    let sent;
    const interrupt = async (child, pidsOf) => {
      pids = await pidsOf();
      await until(() => answers(port), portMs, "the dev server's port");
      sent = Date.now();
      child.kill("SIGINT");
    };
    const done = await launch({ plugin, dir, port, interrupt });
    const took = Date.now() - sent;
    const left = await survivors(pids, port);
    guard.killAll();
    return { left, pids, took, done };
  };
  const bare = await run(false);
  const hooked = await run(true);
  for (const x of [bare, hooked]) assert.ok(x.done && x.took < 10_000, `${ended}: ${JSON.stringify(x)}`);
  assert.deepEqual(bare.left, { live: bare.pids, open: true }, "the bare host leaves the whole tree running, the call's shell too");
  assert.deepEqual(hooked.left, { live: [], open: false }, "5 s after the SIGINT nothing of the tree is alive and the port is free");
}

export const GEMINI = versions.gemini;

let gemini;
/**
 * The `gemini` CLI (pinned in versions.json): from $SHEEPDOG_HOSTS_DIR when CI installed it
 * there, else a temp project with Gemini CLI alone, installed now (once per test file).
 */
export function geminiBin() {
  if (gemini) return gemini;
  const installed = (dir) => path.join(dir, "node_modules", ".bin", "gemini");
  if (process.env.SHEEPDOG_HOSTS_DIR && fs.existsSync(installed(process.env.SHEEPDOG_HOSTS_DIR))) {
    return (gemini = installed(process.env.SHEEPDOG_HOSTS_DIR));
  }
  const dir = tempDir("sheepdog-gemini-cli-");
  fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "hosts", version: "1.0.0", private: true }));
  execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", GEMINI], { cwd: dir, stdio: ["ignore", "ignore", "inherit"] });
  return (gemini = installed(dir));
}

/**
 * A fresh Gemini CLI home and project: API-key auth against the scripted model, the project
 * trusted (folder trust off: an untrusted folder turns YOLO off), no update checks or usage
 * statistics, `settings` merged on top; the extension in hosts/gemini-cli installed with
 * `gemini extensions install` when `plugin`. The state dir is sheepdog's default for that home,
 * so the hooks and the extension's MCP server agree on it even where an environment variable
 * would not reach one of them.
 */
export function geminiSetup({ plugin, settings = {} }) {
  const home = tempDir("sheepdog-gemini-");
  const proj = path.join(home, "proj");
  fs.mkdirSync(proj);
  fs.mkdirSync(path.join(home, ".gemini"));
  const base = {
    security: { auth: { selectedType: "gemini-api-key" }, folderTrust: { enabled: false } },
    privacy: { usageStatisticsEnabled: false },
    general: { enableAutoUpdate: false, enableAutoUpdateNotification: false },
  };
  const merged = { ...base, ...settings, security: { ...base.security, ...(settings.security || {}) } };
  fs.writeFileSync(path.join(home, ".gemini", "settings.json"), JSON.stringify(merged));
  if (plugin) {
    const env = { PATH: process.env.PATH, HOME: home, LANG: "C.UTF-8", GEMINI_CLI_NO_RELAUNCH: "true" };
    execFileSync(geminiBin(), ["extensions", "install", path.join(repo, "hosts", "gemini-cli"), "--consent"], { env, stdio: "ignore" });
  }
  const state = path.join(home, ".local", "state", "sheepdog");
  return { home, proj, state, plugin };
}

/**
 * Runs `gemini -p` (headless, approvals off: `--yolo`) against `model` in `setup`.
 * `relaunch: false` sets GEMINI_CLI_NO_RELAUNCH, so the spawned process is the agent itself
 * (by default Gemini CLI runs itself again as a child, with a larger heap, and waits for it).
 */
export function runGemini(model, setup, opts = {}) {
  const env = {
    PATH: hostPath(opts.withSheepdog ?? true),
    HOME: setup.home,
    LANG: "C.UTF-8",
    GEMINI_API_KEY: "test-key",
    GOOGLE_GEMINI_BASE_URL: model.url,
    SHEEPDOG_STATE_DIR: setup.state,
    // The containment tier under test (`SHEEPDOG_CONTAINMENT=subreaper`), as the Rust tests take it.
    ...(process.env.SHEEPDOG_CONTAINMENT ? { SHEEPDOG_CONTAINMENT: process.env.SHEEPDOG_CONTAINMENT } : {}),
    ...(opts.relaunch === false ? { GEMINI_CLI_NO_RELAUNCH: "true" } : {}),
    ...(opts.env || {}),
  };
  const mode = opts.permissions ?? ["--yolo"];
  const argv = ["-p", opts.prompt || "go", "-m", "gemini-2.5-flash", ...mode];
  return runHost(geminiBin(), argv, { cwd: setup.proj, ...opts, env });
}

export const OPENCODE = versions.opencode;

let opencodeHome;
/**
 * The native `opencode` of the platform package (the npm package's bin is the same binary,
 * hard-linked by its postinstall; the platform package's is there either way), from
 * $SHEEPDOG_HOSTS_DIR (CI installs every host there) or a temp install of opencode alone.
 */
export function opencodeBinary() {
  if (!opencodeHome) {
    if (process.env.SHEEPDOG_HOSTS_DIR) opencodeHome = process.env.SHEEPDOG_HOSTS_DIR;
    else {
      opencodeHome = tempDir("sheepdog-opencode-cli-");
      fs.writeFileSync(path.join(opencodeHome, "package.json"), JSON.stringify({ name: "hosts", version: "1.0.0", private: true }));
      execFileSync("npm", ["install", "--no-audit", "--no-fund", "--loglevel=error", OPENCODE], { cwd: opencodeHome, stdio: ["ignore", "ignore", "inherit"] });
    }
  }
  const arch = process.arch === "arm64" ? "arm64" : "x64";
  const base = path.join(opencodeHome, "node_modules");
  for (const pkg of [`opencode-linux-${arch}`, `opencode-linux-${arch}-musl`, `opencode-linux-${arch}-baseline`]) {
    const bin = path.join(base, pkg, "bin", "opencode");
    if (fs.existsSync(bin)) return bin;
  }
  throw new Error(`no native opencode under ${base}`);
}

/**
 * A fresh home and project for opencode: `opencode.json` with the scripted model as an
 * `@ai-sdk/openai-compatible` provider (bundled in opencode: nothing installed at run time),
 * `config` merged in, and the plugin copied into the project's `.opencode/plugins/` when
 * `plugin` (its text passed through `pluginEdit`, for a test that takes a hook away).
 */
export function opencodeSetup(model, { plugin, config = {}, pluginEdit = (text) => text }) {
  const home = tempDir("sheepdog-opencode-");
  const proj = path.join(home, "proj");
  fs.mkdirSync(proj);
  const state = path.join(home, "state");
  fs.writeFileSync(
    path.join(proj, "opencode.json"),
    JSON.stringify({
      $schema: "https://opencode.ai/config.json",
      provider: {
        scripted: {
          npm: "@ai-sdk/openai-compatible",
          name: "scripted",
          options: { baseURL: `${model.url}/v1`, apiKey: "x" },
          models: { m: { name: "m", tool_call: true } },
        },
      },
      model: "scripted/m",
      ...config,
    }),
  );
  if (plugin) {
    fs.mkdirSync(path.join(proj, ".opencode", "plugins"), { recursive: true });
    const text = fs.readFileSync(path.join(repo, "hosts", "opencode", "sheepdog.js"), "utf8");
    fs.writeFileSync(path.join(proj, ".opencode", "plugins", "sheepdog.js"), pluginEdit(text));
  }
  return { home, proj, state, opencode: opencodeBinary() };
}

/** Runs `opencode run` (one-shot) in the setup, bash as its shell. */
export function runOpencode(setup, opts = {}) {
  const env = {
    PATH: hostPath(opts.withSheepdog ?? true),
    HOME: setup.home,
    LANG: "C.UTF-8",
    SHELL: "/bin/bash",
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    SHEEPDOG_STATE_DIR: setup.state,
    // The containment tier the suite runs in (both are tested: SHEEPDOG_CONTAINMENT=subreaper).
    ...(process.env.SHEEPDOG_CONTAINMENT ? { SHEEPDOG_CONTAINMENT: process.env.SHEEPDOG_CONTAINMENT } : {}),
    ...(opts.env || {}),
  };
  return runHost(setup.opencode, ["run", opts.prompt || "go"], { cwd: setup.proj, ...opts, env });
}
