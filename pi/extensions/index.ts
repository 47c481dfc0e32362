// pi's `process` tool on sheepdog. pi-processes' actions (start, list, output, stop, write,
// update, clear), with what its design notes plan and sheepdog already does: cleanup hooks
// (a stop is the tree, then the cleanup; it fails when the cleanup fails), nudges on start,
// and processes owned by pi's own process, so that a kill -9 of pi stops every tree and runs
// every pending cleanup once (sheepdog's supervisors watch the owner; nothing here has to run).
//
// pi's own `bash` tool runs under sheepdog too (bash.ts): each call supervised with pi as its
// owner, what it leaves running kept as an entry of the same session, told to the model once.
//
// Lifecycle: one sheepdog session per pi process. `session_shutdown` with reason `quit` stops
// the session (trees, then cleanups); reload and session switches leave the processes running,
// and the next instance lists them, follows their events and resumes their watches.

import { parameters, type Params } from "./schema";
import { followEvents, MESSAGE_TYPE, Watchers, type Sender } from "./notices";
import { run, type Ctx } from "./tool";
import { shared } from "./state";
import { bashSessionStart, superviseBash, type BashPi } from "./bash";
import * as sd from "sheepdog";

/**
 * The part of pi's ExtensionAPI this extension uses (pi 1.x: `@earendil-works/pi-coding-agent`;
 * pi 0.73: `@mariozechner/pi-coding-agent`).
 */
type Pi = Sender &
  BashPi & {
    on(event: "session_start", handler: (event: { reason: string }, ctx: Ctx) => unknown): void;
    on(event: "session_shutdown", handler: (event: { reason: string }, ctx: Ctx) => unknown): void;
    registerTool(tool: {
      name: string;
      label: string;
      description: string;
      promptSnippet?: string;
      promptGuidelines?: string[];
      parameters: unknown;
      execute(id: string, params: Params, signal: AbortSignal | undefined, onUpdate: unknown, ctx: Ctx): Promise<{
        content: { type: "text"; text: string }[];
        details: unknown;
      }>;
    }): void;
  };

export default function sheepdogProcesses(pi: Pi): void {
  const watchers = new Watchers(pi);
  const events = new AbortController();

  pi.registerTool({
    name: "process",
    label: "Process",
    description:
      "Start, list, stop, write to stdin, update, clear, and read the output of long-running background processes (dev servers, watchers, builds). Each runs under sheepdog: stop ends its whole tree, then runs its cleanup.",
    promptSnippet:
      "Background processes: start, list, output, stop (tree, then cleanup), write (stdin), update (name, cleanup, watches), clear. After start, do not wait: exits and watched log lines bring you back.",
    promptGuidelines: [
      "process tool: use process start for anything long-running instead of &, nohup or setsid in bash; name each one.",
      "process tool: after process start, do not sleep or poll process output; end your turn or move on. Exit notices and notify.logMatches bring you back.",
      "process tool: when a command starts work outside its own process tree (docker run -d, docker compose up -d, systemctl start), give process start a cleanup {command}; process update adds one later (cleanup: null removes it). A start result's Warning line says when one is likely needed.",
      "process tool: process write needs a process started with stdin: \"pipe\"; add the newline a prompt waits for.",
    ],
    parameters,
    async execute(_id, params, _signal, _onUpdate, ctx) {
      const r = await run(params, ctx, watchers);
      return { content: [{ type: "text", text: r.text }], details: r.details };
    },
  });

  superviseBash(pi);

  pi.on("session_start", async (event, ctx) => {
    bashSessionStart(event.reason, ctx);
    void followEvents(pi, events.signal).catch((e) => {
      if (ctx.hasUI) ctx.ui.notify(`sheepdog: exit notices stopped: ${(e as Error).message}`, "error");
    });
    // After a reload or a session switch: the processes kept running; resume their watches.
    const s = shared();
    try {
      const running = (await sd.list({ session: s.session })) as unknown as { id: string; name: string }[];
      for (const e of running) watchers.ensure(e.id, e.name);
      if (running.length && ctx.hasUI) ctx.ui.notify(`${running.length} background process(es) still running (process list)`, "info");
    } catch {
      // no binary: every tool call will say so
    }
  });

  pi.on("session_shutdown", async (event) => {
    events.abort();
    watchers.stopAll();
    if (event.reason !== "quit") return;
    try {
      await sd.stop({ session: shared().session });
    } catch {
      // nothing of the session was running or pending
    }
  });
}

export { MESSAGE_TYPE };
