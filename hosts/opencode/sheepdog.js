// sheepdog's opencode plugin: every call of opencode's bash tool runs under `sheepdog run`, with
// opencode as its owner, so nothing a call starts outlives opencode; what a call leaves running
// (`server &`, nohup, setsid) becomes an entry of opencode's session instead of holding the
// tool's pipes (opencode #20902, #22012, #32504); the `process_*` tools come from `sheepdog mcp`.
// The model's command is never rewritten: the call's environment (`shell.env`) does it.
//
// Install: copy this file into `.opencode/plugins/` (one project) or `~/.config/opencode/plugins/`
// (every project), or list it in opencode.json: `"plugin": ["file:///path/to/sheepdog.js"]`.
// It needs `sheepdog` on PATH (npm install -g sheepdog, pipx install sheepdog-cli or cargo
// install sheepdog); without it, it does nothing but say so.
//
// This file is a shim: each hook's two arguments go as JSON to the static binary's
// `sheepdog hook opencode EVENT` (a synchronous spawn: it runs on every shell call, and the
// call must not start before the answer is in), and its answer is merged into them. What
// the call's environment gets, what the model is told and when to reap are decided there
// (src/cli/hook.rs).

import { spawnSync } from "node:child_process";

const MISSING =
  "sheepdog is not on PATH: this session's shell calls run unsupervised. Nothing is published yet: build it from the sheepdog repository (README.md, Install) and put it on PATH.";

/** Sets `patch`'s fields on `target`, recursing into objects both have (so `output.env` stays the object opencode reads). */
function merge(target, patch) {
  for (const [key, value] of Object.entries(patch)) {
    const into = target[key];
    if (value && typeof value === "object" && !Array.isArray(value) && into && typeof into === "object") merge(into, value);
    else target[key] = value;
  }
}

export const SheepdogPlugin = async ({ client }) => {
  let exe = "sheepdog";
  /** The answer of `sheepdog hook opencode EVENT` (`{}` for none); `null` when the binary could not be run. */
  const hook = (event, input, output) => {
    const r = spawnSync(exe, ["hook", "opencode", event], {
      input: JSON.stringify({ input, output }),
      encoding: "utf8",
      stdio: ["pipe", "pipe", "ignore"],
      // Far past the hook's few milliseconds; a hung binary must not hang the agent.
      timeout: 10_000,
    });
    if (r.error) return null;
    try {
      const answer = JSON.parse(r.stdout || "{}");
      return answer && typeof answer === "object" ? answer : {};
    } catch {
      return {};
    }
  };
  // The start of this opencode process's session: the reap of what earlier sessions left, and
  // the static binary the per-call hooks run from now on.
  const start = hook("session-start", {}, {});
  if (start === null) {
    // Fail open, said once: no hooks, every call runs as the model wrote it.
    console.error(MISSING);
    await client?.app?.log?.({ body: { service: "sheepdog", level: "warn", message: MISSING } })?.catch?.(() => {});
    return {};
  }
  if (typeof start.exe === "string") exe = start.exe;
  const apply = (event) => async (input, output) => {
    const answer = hook(event, input, output);
    if (answer) merge({ input, output }, answer);
  };
  return {
    // The MCP server of the same binary: the process_* tools, whose entries and the bash
    // tool's kept ones are one list (the session is opencode's, derived the same way by both).
    config: async (config) => {
      config.mcp ??= {};
      config.mcp.sheepdog ??= { type: "local", command: ["sheepdog", "mcp"] };
    },
    // Asked after the permission check, right before the call's shell starts: the call's
    // environment makes bash or zsh put the call under `sheepdog run` before the command runs.
    // The command is never rewritten, so what the model, the user and the permission rules
    // see is what the model wrote.
    "shell.env": apply("shell-env"),
    "tool.execute.after": async (input, output) => {
      if (input?.tool === "bash") await apply("post-tool-use")(input, output);
    },
    // Not called on every exit (opencode #48340, and never on a SIGKILL): opencode's death
    // stops the session's trees anyway, and the next session's start reaps what is left.
    dispose: async () => {
      hook("session-end", {}, {});
    },
  };
};
