// Messages into the conversation when something happens to a process, as pi-processes sends
// them: an exit notice per process (from `sheepdog events`, the journal every writer appends
// to, so a notice survives a reload and is sent once) and log-match notices (a
// `sheepdog logs --follow` per watched process, no polling).

import { spawn, type ChildProcess } from "node:child_process";
import readline from "node:readline";
import * as sd from "sheepdog";
import { shared } from "./state";
import type { Attention, Watch } from "./schema";

/** The message type of every notice (`pi.registerMessageRenderer` can match it). */
export const MESSAGE_TYPE = "sheepdog-process";

/** How many of a process's last output lines an exit notice carries. */
const NOTICE_LINES = 10;
/** A repeating watch tells at most once per this many ms (a chatty log would flood the turn). */
const REPEAT_GAP_MS = 1000;

/** The part of pi's ExtensionAPI this file uses. */
export interface Sender {
  sendMessage(
    message: { customType: string; content: string; display: boolean; details?: unknown },
    options?: { triggerTurn?: boolean; deliverAs?: "steer" | "followUp" | "nextTurn" },
  ): void;
}

/**
 * turn: steer a running turn, or start one when pi is idle; context: a follow-up that reaches
 * the model after its current work, or the next turn when idle (never wakes it).
 */
function deliver(pi: Sender, attention: Attention, content: string, details: unknown): void {
  const options =
    attention === "turn" ? { deliverAs: "steer" as const, triggerTurn: true } : { deliverAs: "followUp" as const, triggerTurn: false };
  pi.sendMessage({ customType: MESSAGE_TYPE, content, display: true, details }, options);
}

interface ExitedEvent {
  seq: number;
  id: string;
  name: string;
  event: string;
  status?: string;
  statusText?: string;
  exitCode?: number | null;
  signal?: string | null;
}

/** success, failure or killed, the three kinds notify settings name. */
function kind(ev: ExitedEvent): "success" | "failure" | "killed" {
  if (ev.status === "exited") return ev.exitCode === 0 ? "success" : "failure";
  if (ev.status === "killed" || ev.status === "stopped" || ev.status === "reaped") return "killed";
  return "failure"; // timedOut, lost
}

async function lastLines(id: string): Promise<string[]> {
  try {
    const doc = (await sd.logs(id, { stream: "all", tail: NOTICE_LINES * 2 })) as { lines: string[] };
    return doc.lines.filter((l) => !l.startsWith("[sheepdog] ")).slice(-NOTICE_LINES);
  } catch {
    return [];
  }
}

async function exitNotice(pi: Sender, ev: ExitedEvent): Promise<void> {
  const s = shared();
  if (s.told.has(ev.id)) return;
  s.told.add(ev.id);
  const k = kind(ev);
  // A process the tool did not start (what a bash call left, kept in this session: bash.ts) is
  // told as context: the model never asked to be woken for it.
  const started = s.notify.get(ev.id);
  const n = started ?? {};
  let attention: Attention =
    (k === "success" ? n.onSuccess : k === "failure" ? n.onFailure : n.onKilled) ?? (k === "killed" || !started ? "context" : "turn");
  if (attention === "ignore") {
    if (k !== "failure") return;
    attention = "context"; // a failure is always told
  }
  const lines = await lastLines(ev.id);
  const content = [
    `Background process ${ev.name} (${ev.id}) ${ev.statusText ?? ev.status}.`,
    ...(lines.length ? ["Last lines:", ...lines.map((l) => `  ${l}`)] : []),
    `process output with id ${ev.id} shows more.`,
  ].join("\n");
  deliver(pi, attention, content, { id: ev.id, name: ev.name, kind: k, status: ev.status, exitCode: ev.exitCode, signal: ev.signal });
}

/**
 * Follows this session's events from the shared cursor until `signal` aborts: an `exited`
 * event becomes one exit notice. The first instance starts at 0: the session is this pi
 * process's, so nothing before it is in it.
 */
export async function followEvents(pi: Sender, signal: AbortSignal): Promise<void> {
  const s = shared();
  try {
    for await (const ev of sd.events({ session: s.session, since: String(s.seq), signal }) as AsyncIterable<ExitedEvent>) {
      if (ev.seq > s.seq) s.seq = ev.seq;
      if (ev.event === "exited") await exitNotice(pi, ev);
      else if (ev.event === "cleared") s.told.delete(ev.id);
    }
  } catch (e) {
    if (!signal.aborted) throw e;
  }
}

function matcher(w: Watch): (text: string) => boolean {
  if (w.mode === "regex") {
    const re = new RegExp(w.pattern);
    return (t) => re.test(t);
  }
  return (t) => t.includes(w.pattern);
}

/** Throws when a watch cannot work (a blank pattern matches every line; a bad regex none). */
export function checkWatch(w: Partial<Watch>, where: string): Watch {
  if (typeof w.pattern !== "string" || w.pattern.trim() === "") throw new Error(`${where}.pattern must not be empty`);
  if (w.mode === "regex") {
    try {
      new RegExp(w.pattern);
    } catch (e) {
      throw new Error(`${where}.pattern is not a valid regular expression: ${(e as Error).message}`);
    }
  }
  return { pattern: w.pattern, mode: w.mode ?? "literal", stream: w.stream ?? "both", repeat: w.repeat ?? false, on: w.on ?? "turn" };
}

/** The `sheepdog logs --follow` readers of this instance, by process id. */
export class Watchers {
  private readers = new Map<string, ChildProcess>();
  private lastTold = new Map<string, number>();

  constructor(private pi: Sender) {}

  /** Starts following `id` if it has watches and is not followed yet. */
  ensure(id: string, name: string): void {
    const s = shared();
    if (this.readers.has(id) || !(s.watches.get(id)?.length)) return;
    const child = spawn(sd.binaryPath(), ["logs", id, "--follow", "--stream", "all"], { stdio: ["ignore", "pipe", "ignore"] });
    child.on("error", () => this.readers.delete(id));
    this.readers.set(id, child);
    let skip = s.linesSeen.get(id) ?? 0; // lines an earlier instance already looked at
    const rl = readline.createInterface({ input: child.stdout!, crlfDelay: Infinity });
    rl.on("line", (line) => {
      if (skip > 0) {
        skip--;
        return;
      }
      s.linesSeen.set(id, (s.linesSeen.get(id) ?? 0) + 1);
      this.line(id, name, line);
    });
    child.on("close", () => {
      if (this.readers.get(id) === child) this.readers.delete(id);
    });
  }

  private line(id: string, name: string, line: string): void {
    const s = shared();
    const stream = line.startsWith("[out] ") ? "stdout" : line.startsWith("[err] ") ? "stderr" : null;
    if (!stream) return; // markers and cleanup output are not the program's
    const text = line.slice(6);
    const watches = s.watches.get(id) ?? [];
    const keep: Watch[] = [];
    for (const [i, w] of watches.entries()) {
      const hit = (w.stream === "both" || w.stream === stream) && matcher(w)(text);
      if (hit) {
        const key = `${id}\0${i}\0${w.pattern}`;
        const now = Date.now();
        if (!w.repeat || now - (this.lastTold.get(key) ?? 0) >= REPEAT_GAP_MS) {
          this.lastTold.set(key, now);
          const content = `Background process ${name} (${id}) printed a line matching ${JSON.stringify(w.pattern)} on ${stream}:\n  ${text}`;
          deliver(this.pi, w.on === "turn" ? "turn" : "context", content, { id, name, kind: "logMatch", pattern: w.pattern, stream, line: text });
        }
      }
      if (!hit || w.repeat) keep.push(w);
    }
    if (keep.length !== watches.length) s.watches.set(id, keep);
    if (keep.length === 0) this.stop(id);
  }

  /** Stops following `id`. */
  stop(id: string): void {
    const child = this.readers.get(id);
    this.readers.delete(id);
    if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
  }

  /** Stops every reader of this instance. */
  stopAll(): void {
    for (const id of [...this.readers.keys()]) this.stop(id);
  }
}
