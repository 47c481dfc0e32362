// pi's own `bash` tool under sheepdog. pi has no background bash and kills a call's process
// group when it ends, times out or is aborted; what left that group (`setsid`, a double fork)
// outlives the call and pi itself, and `nohup server &` keeps the call's pipes. Here each bash
// call runs supervised with pi as its owner: pi's exit, its `kill -9` and its stop end the whole
// tree, and what the command leaves running on purpose is kept as an entry of pi's session (the
// `process` tool's list), told to the model once, and stopped when pi goes.
//
// The model's command is never rewritten. pi's bash tool runs `bash -c COMMAND` with pi's
// `process.env` of the moment, so at pi's start this file adds the environment that the static
// binary answers (`sheepdog hook pi shell-env`, src/cli/hook.rs): `BASH_ENV` names a file whose
// guard line makes that bash `exec` `sheepdog run --owner <pi> --leftovers keep` on itself. Every
// other extension's `tool_call` handler, in any load order, sees the command as the model wrote
// it. The binary is run through a synchronous spawn of the path the `sheepdog` package resolves.
// It fails open: with no binary, a failed spawn or no answer, the calls run as the model wrote
// them (said once, at the session's start).

import { spawnSync } from "node:child_process";
import fs from "node:fs";
import * as sd from "sheepdog";
import type { Ctx } from "./tool";

/** A text or other content block of a tool result (pi's `TextContent`, `ImageContent`). */
interface Block {
  type: string;
  text?: string;
}

/** The part of pi's ExtensionAPI this file uses (pi 1.x). */
export interface BashPi {
  on(
    event: "tool_result",
    handler: (
      event: { toolName: string; toolCallId: string; content: Block[]; isError: boolean; structuredContent?: unknown },
      ctx: Ctx,
    ) => unknown,
  ): void;
}

/** How long one hook run may take before the call goes on unsupervised: 5 s (it takes ~2 ms). */
const HOOK_TIMEOUT_MS = 5000;

const KEY = Symbol.for("sheepdog.pi.bash");
/** Per pi process (kept across reloads, as state.ts keeps the rest): the binary, once found. */
function memo(): { binary?: string | null; told?: boolean; env?: boolean } {
  const g = globalThis as unknown as Record<symbol, { binary?: string | null; told?: boolean; env?: boolean } | undefined>;
  return (g[KEY] ??= {});
}

/** The static sheepdog binary (the platform package's, or $SHEEPDOG_BINARY), or null. */
function binary(): string | null {
  const m = memo();
  if (m.binary === undefined) {
    try {
      const bin = sd.binaryPath();
      fs.accessSync(bin, fs.constants.X_OK);
      m.binary = bin;
    } catch {
      m.binary = null;
    }
  }
  return m.binary;
}

/** `sheepdog hook pi EVENT` with `payload` on stdin: its JSON answer, or null (fail open). */
function hook(event: string, payload: unknown): Record<string, unknown> | null {
  const bin = binary();
  if (!bin) return null;
  const r = spawnSync(bin, ["hook", "pi", event], {
    input: JSON.stringify(payload),
    encoding: "utf8",
    timeout: HOOK_TIMEOUT_MS,
    stdio: ["pipe", "pipe", "ignore"],
  });
  if (r.error || r.status !== 0 || !r.stdout.trim()) return null;
  try {
    const v: unknown = JSON.parse(r.stdout);
    return v && typeof v === "object" ? (v as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * At the session's start: the environment that puts pi's bash calls under sheepdog, added to
 * `process.env` once per pi process (a reload keeps it), and a reap of what earlier pi
 * processes' crashes left, on startup.
 */
export function bashSessionStart(reason: string, ctx: Ctx): void {
  const m = memo();
  if (!binary()) {
    if (!m.told && ctx.hasUI) {
      ctx.ui.notify(
        "sheepdog is missing: pi's bash calls run unsupervised (what they leave running can outlive pi). Install the sheepdog package next to pi-sheepdog, or set SHEEPDOG_BINARY.",
        "warning",
      );
    }
    m.told = true;
    return;
  }
  if (!m.env) {
    const env = hook("shell-env", { type: "session_start", reason })?.env;
    if (env && typeof env === "object") {
      for (const [k, v] of Object.entries(env as Record<string, unknown>)) {
        if (typeof v === "string") process.env[k] = v;
      }
      m.env = true;
    }
  }
  hook("session-start", { type: "session_start", reason });
}

/** Tells the model, after a bash call, what the calls left running (see the top of this file). */
export function superviseBash(pi: BashPi): void {
  pi.on("tool_result", (event) => {
    if (event.toolName !== "bash" || !memo().env) return;
    // The output is not sent: the hook needs only which call ended (its session's entries are
    // on disk), and a bash result can be a megabyte.
    const answer = hook("tool-result", { type: "tool_result", toolName: event.toolName, toolCallId: event.toolCallId, isError: event.isError });
    const append = answer?.append;
    if (!Array.isArray(append) || append.length === 0) return;
    // A block after the command's own: its output stays as it was. pi 1.x drops a result's
    // structuredContent when content is replaced without it, so it is passed on unchanged.
    const patch: Record<string, unknown> = { content: [...event.content, ...(append as Block[])] };
    if (event.structuredContent !== undefined) patch.structuredContent = event.structuredContent;
    return patch;
  });
}
