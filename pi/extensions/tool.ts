// The `process` tool's actions, each one sheepdog command through the npm package's API: this
// file only picks the arguments and writes the text the model reads. What a stop, a cleanup,
// a nudge or a readiness check does is sheepdog's (STYLE.md 13). A failure is thrown: pi turns
// a thrown error into an error result whose text is the message.

import * as sd from "sheepdog";
import { checkWatch, type Watchers } from "./notices";
import { forget, shared } from "./state";
import { DEFAULT_TAIL_LINES, MAX_OUTPUT_BYTES, MAX_TAIL_LINES, type Params, type Watch } from "./schema";

/** The part of pi's ExtensionContext the actions use. */
export interface Ctx {
  cwd: string;
  hasUI: boolean;
  ui: { notify(message: string, type?: "info" | "warning" | "error"): void };
}

export interface Result {
  text: string;
  details: Record<string, unknown>;
}

// The entry view fields read here (types.d.ts of the sheepdog package has them all).
interface View {
  id: string;
  name: string;
  status: string;
  statusText: string;
  exitCode: number | null;
  pid: number | null;
  startedAt: number;
  commandPreview: string;
  ports: number[];
  cleanup: { command: string; timeoutMs: number } | null;
  logs: { stdout: string; stderr: string; combined: string };
  stdinPipe?: boolean;
}

/** A SheepdogError (or any error) as the one line the model reads. */
function failure(e: unknown): Error {
  const m = e instanceof Error ? e.message : String(e);
  return new Error(m.replace(/^sheepdog: /, ""));
}

async function sheepdog<T>(p: Promise<T>): Promise<T> {
  try {
    return await p;
  } catch (e) {
    throw failure(e);
  }
}

function need(v: string | undefined, what: string): string {
  if (v === undefined || v === "") throw new Error(`process ${what}`);
  return v;
}

async function sessionEntries(): Promise<View[]> {
  return (await sheepdog(sd.list({ session: shared().session, all: true }))) as unknown as View[];
}

async function entry(id: string): Promise<View> {
  const all = await sessionEntries();
  const e = all.find((x) => x.id === id) ?? [...all].reverse().find((x) => x.name === id);
  if (!e) throw new Error(`no process '${id}' in this session (process list shows them)`);
  return e;
}

const live = (e: View) => e.status === "running" || e.status === "orphaned";

function readyLine(r: { ok: boolean; afterMs?: number; matched?: string | null; port?: number | null; reason?: string }): string {
  if (r.ok) {
    const how = r.port ? `: listening on port ${r.port}` : r.matched ? `: ${JSON.stringify(r.matched)}` : "";
    return `Ready after ${r.afterMs}ms${how}.`;
  }
  return r.reason === "exited" ? "It exited before it was ready." : "Not ready yet (the readiness wait ran out); it keeps running.";
}

async function start(p: Params, ctx: Ctx, watchers: Watchers): Promise<Result> {
  const name = need(p.name, "start requires name");
  const command = need(p.command, "start requires command");
  const watches = (p.notify?.logMatches ?? []).map((w, i) => checkWatch(w, `notify.logMatches[${i}]`));
  const s = shared();
  const doc = (await sheepdog(
    sd.start("bash", ["-lc", command], {
      name,
      session: s.session,
      owner: process.pid, // pi: a kill -9 of pi stops the tree and runs the cleanup
      cwd: p.cwd ?? ctx.cwd,
      cleanup: p.cleanup?.command,
      cleanupTimeout: p.cleanup?.timeoutMs,
      stdin: p.stdin,
      readyPort: p.ready?.port,
      readyLog: p.ready?.logPattern,
      readyListen: p.ready?.listen,
      readyTimeout: p.ready && (p.ready.port || p.ready.logPattern || p.ready.listen) ? p.ready.timeoutMs : undefined,
    }),
  )) as unknown as View & {
    ready: { ok: boolean; afterMs?: number; matched?: string | null; port?: number | null; reason?: string; output?: string[] } | null;
    warnings: { kind: string; message: string; matched: string }[];
  };
  s.notify.set(doc.id, p.notify ?? {});
  if (watches.length) s.watches.set(doc.id, watches);
  const lines = [`Started ${doc.name} (${doc.id}), pid ${doc.pid}.`];
  if (doc.cleanup) lines.push(`Cleanup on stop: ${doc.cleanup.command}`);
  if (doc.ready) lines.push(readyLine(doc.ready));
  for (const w of doc.warnings) {
    lines.push(`Warning: ${w.message}`);
    if (ctx.hasUI) ctx.ui.notify(`${doc.name} (${doc.id}): ${w.message}`, "warning");
  }
  if (doc.ready && !doc.ready.ok && doc.ready.reason === "exited") {
    throw new Error([...lines, ...(doc.ready.output ?? []).map((l) => `  ${l}`)].join("\n"));
  }
  if (watches.length) {
    watchers.ensure(doc.id, doc.name);
    lines.push(`Watching for ${watches.map((w) => JSON.stringify(w.pattern)).join(", ")}; continue other work, a match brings you back.`);
  }
  return { text: lines.join("\n"), details: { action: "start", process: doc } };
}

function kindOf(e: View): string {
  if (live(e)) return "running";
  if (e.status === "exited") return e.exitCode === 0 ? "finished" : "failed";
  if (e.status === "timedOut" || e.status === "lost") return "failed";
  return "killed";
}

async function listAction(p: Params): Promise<Result> {
  const wanted = p.statuses?.length ? p.statuses : ["all"];
  let es = (await sessionEntries()).filter((e) => wanted.includes("all") || wanted.includes(kindOf(e)));
  const by = p.sortBy ?? "startTime_desc";
  const cmp: Record<string, (a: View, b: View) => number> = {
    startTime_desc: (a, b) => b.startedAt - a.startedAt,
    startTime_asc: (a, b) => a.startedAt - b.startedAt,
    name_asc: (a, b) => a.name.localeCompare(b.name),
    name_desc: (a, b) => b.name.localeCompare(a.name),
    status_asc: (a, b) => a.status.localeCompare(b.status),
  };
  es.sort(cmp[by]);
  if (p.limit && p.limit > 0) es = es.slice(0, Math.floor(p.limit));
  if (es.length === 0) return { text: "No matching background processes.", details: { action: "list", processes: [] } };
  const s = shared();
  const text = es
    .map((e) =>
      [
        e.id,
        e.statusText,
        e.name,
        e.commandPreview,
        `pid=${e.pid ?? "-"}`,
        `ports=${e.ports.join(",") || "-"}`,
        `cleanup=${e.cleanup ? e.cleanup.command : "-"}`,
        `watches=${(s.watches.get(e.id) ?? []).map((w) => JSON.stringify(w.pattern)).join(",") || "-"}`,
        `log=${e.logs.combined}`,
      ].join("\t"),
    )
    .join("\n");
  return { text, details: { action: "list", processes: es } };
}

/** A literal pattern as a regex for `logs --grep` (the regex crate accepts these escapes). */
const escapeRegex = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");

/** Keeps the newest lines that fit in `max` bytes. */
function capBytes(lines: string[], max: number): { kept: string[]; cut: number } {
  let total = 0;
  let i = lines.length;
  while (i > 0 && total + Buffer.byteLength(lines[i - 1], "utf8") + 1 <= max) {
    total += Buffer.byteLength(lines[i - 1], "utf8") + 1;
    i--;
  }
  return { kept: lines.slice(i), cut: i };
}

async function output(p: Params): Promise<Result> {
  const e = await entry(need(p.id, "output requires id"));
  const tail = Math.min(Math.max(Math.floor(p.tailLines ?? DEFAULT_TAIL_LINES), 1), MAX_TAIL_LINES);
  const stream = p.stream === "stdout" ? "out" : p.stream === "stderr" ? "err" : "all";
  const grep = p.pattern ? (p.mode === "regex" ? p.pattern : escapeRegex(p.pattern)) : undefined;
  const doc = (await sheepdog(sd.logs(e.id, { stream, tail, grep }))) as unknown as { lines: string[] };
  const lines = stream === "all" ? doc.lines.filter((l) => !l.startsWith("[sheepdog] ")) : doc.lines;
  const { kept, cut } = capBytes(lines, MAX_OUTPUT_BYTES);
  const parts = [`${e.name} (${e.id}) [${e.statusText}]${p.pattern ? ` filter: ${p.pattern}` : ""}`];
  parts.push(kept.length ? kept.join("\n") : p.pattern ? "No matching lines found." : "No output yet.");
  if (cut > 0) parts.push(`[${cut} older lines left out to stay under ${MAX_OUTPUT_BYTES / 1024} KiB; tailLines or pattern narrows it]`);
  if (live(e)) parts.push("Still running: use notify.logMatches watches instead of polling.");
  parts.push(`[Complete logs: stdout=${e.logs.stdout} stderr=${e.logs.stderr} combined=${e.logs.combined}]`);
  return { text: parts.join("\n"), details: { action: "output", id: e.id, stream: p.stream ?? "both", lines: kept.length } };
}

async function stop(p: Params, watchers: Watchers): Promise<Result> {
  const id = need(p.id, "stop requires id");
  const e = await entry(id);
  shared().told.add(e.id); // this result tells how it ended: no exit notice besides
  watchers.stop(e.id);
  const [v] = (await sheepdog(sd.stop(e.id))) as unknown as Array<
    View & { alreadyFinished: boolean; treeGone: boolean | null; ok: boolean; cleanupError: string | null; lines: string[]; notRecorded?: string | null }
  >;
  // Exactly what `sheepdog stop` prints: `Stopped NAME (ID).`, then the cleanup's failure line.
  const lines = [...v.lines];
  if (!v.treeGone && lines.length === 1) lines.push(`The tree of ${v.name} (${v.id}) was not confirmed gone.`);
  if (v.notRecorded) lines.push(`The result was not recorded: ${v.notRecorded}`);
  const text = lines.join("\n");
  // The stop fails when the cleanup failed or the tree was not confirmed gone; the text says
  // only that (the cleanup's output is in the process's log, `[cleanup]` lines).
  if (!v.ok) throw new Error(text);
  return { text, details: { action: "stop", process: v } };
}

async function write(p: Params): Promise<Result> {
  const id = need(p.id, "write requires id");
  const input = p.input ?? "";
  if (input === "" && !p.end) throw new Error('process write requires "input" or "end"');
  const e = await entry(id);
  const doc = (await sheepdog(sd.send(e.id, input, { eof: p.end }))) as unknown as { bytes: number; eof: boolean };
  const closed = doc.eof ? " and closed its stdin" : "";
  return { text: `Wrote ${doc.bytes} bytes to ${e.name} (${e.id})${closed}.`, details: { action: "write", id: e.id, ...doc } };
}

function applyWatches(id: string, w: NonNullable<Params["watches"]>): string {
  const s = shared();
  const before = s.watches.get(id) ?? [];
  const items = w.items ?? [];
  let after: Watch[];
  if (w.mode === "clear") after = [];
  else if (w.mode === "remove") {
    after = before.filter((x, i) => !items.some((r) => (r.index !== undefined ? r.index === i : r.pattern === x.pattern)));
  } else {
    if (items.length === 0) throw new Error(`process update watches.items is required for mode ${w.mode}`);
    const add = items.map((x, i) => checkWatch(x, `watches.items[${i}]`));
    after = w.mode === "append" ? [...before, ...add] : add;
  }
  s.watches.set(id, after);
  return `${after.length} watch${after.length === 1 ? "" : "es"} active.`;
}

async function update(p: Params, watchers: Watchers): Promise<Result> {
  const e = await entry(need(p.id, "update requires id"));
  const lines: string[] = [];
  let view: View = e;
  const changes = p.name !== undefined || p.cleanup !== undefined;
  if (changes) {
    view = (await sheepdog(
      sd.update(e.id, {
        name: p.name,
        cleanup: p.cleanup === null ? null : p.cleanup?.command,
        cleanupTimeout: p.cleanup ? p.cleanup.timeoutMs : undefined,
      }),
    )) as unknown as View;
    lines.push(`Updated ${view.name} (${view.id}).`);
    if (p.cleanup === null) lines.push("Cleanup removed: stop now only stops the tree.");
    else if (p.cleanup) lines.push(`Cleanup on stop: ${view.cleanup?.command} (within ${(view.cleanup?.timeoutMs ?? 0) / 1000}s).`);
  }
  if (p.watches) {
    if (!live(e)) throw new Error(`process update watches needs a running process; ${e.id} is ${e.statusText}`);
    lines.push(applyWatches(e.id, p.watches));
    watchers.stop(e.id);
    watchers.ensure(e.id, view.name);
  }
  if (!changes && !p.watches) throw new Error("process update needs name, cleanup or watches");
  return { text: lines.join("\n"), details: { action: "update", process: view } };
}

async function clear(): Promise<Result> {
  const done = (await sessionEntries()).filter((e) => !live(e)).map((e) => e.id);
  if (done.length === 0) return { text: "No finished background processes to clear.", details: { action: "clear", cleared: [] } };
  const cleared = (await sheepdog(sd.clear(done))) as unknown as View[];
  for (const c of cleared) forget(c.id);
  const kept = done.length - cleared.length;
  const lines = [`Cleared ${cleared.length} finished background process${cleared.length === 1 ? "" : "es"}.`];
  if (kept > 0) lines.push(`Kept ${kept}: a cleanup is pending or still running (stop runs a pending one).`);
  return { text: lines.join("\n"), details: { action: "clear", cleared: cleared.map((c) => c.id) } };
}

/** Runs one action. */
export async function run(p: Params, ctx: Ctx, watchers: Watchers): Promise<Result> {
  switch (p.action) {
    case "start":
      return start(p, ctx, watchers);
    case "list":
      return listAction(p);
    case "output":
      return output(p);
    case "stop":
      return stop(p, watchers);
    case "write":
      return write(p);
    case "update":
      return update(p, watchers);
    case "clear":
      return clear();
    default:
      throw new Error(`unknown process action: ${String((p as { action: unknown }).action)}`);
  }
}
