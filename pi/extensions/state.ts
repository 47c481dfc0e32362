// What outlives one extension instance: pi builds a new instance on /reload, /new, /resume and
// /fork, in the same process. The sheepdog session belongs to the pi process (its owner), so the
// little the extension keeps in memory (watches, notify settings, the event cursor) is kept per
// process too, on globalThis; the registry (sheepdog's state dir) holds everything else.

import fs from "node:fs";
import type { Notify, Watch } from "./schema";

export interface Shared {
  /** The sheepdog session of this pi process: `pi-<pid>-<start time in clock ticks>`. */
  session: string;
  /** The last `sheepdog events` seq handled: a new instance follows on from it. */
  seq: number;
  /** Per process id: its notify settings (from start). */
  notify: Map<string, Notify>;
  /** Per process id: its active log watches. */
  watches: Map<string, Watch[]>;
  /** Per process id: how many combined-log lines the watches have seen (skipped on a re-follow). */
  linesSeen: Map<string, number>;
  /** Ids whose exit was already told (by a notice, or by the stop that ended them). */
  told: Set<string>;
}

const KEY = Symbol.for("sheepdog.pi.shared");

/** Start time of this process in clock ticks (/proc/self/stat field 22), or "0" off Linux. */
function startTicks(): string {
  try {
    const s = fs.readFileSync("/proc/self/stat", "utf8");
    return s.slice(s.lastIndexOf(")") + 2).split(" ")[19] ?? "0";
  } catch {
    return "0";
  }
}

/** The one shared record of this pi process. */
export function shared(): Shared {
  const g = globalThis as unknown as Record<symbol, Shared | undefined>;
  let s = g[KEY];
  if (!s) {
    s = {
      session: `pi-${process.pid}-${startTicks()}`,
      seq: 0,
      notify: new Map(),
      watches: new Map(),
      linesSeen: new Map(),
      told: new Set(),
    };
    g[KEY] = s;
  }
  return s;
}

/** Forgets an entry (cleared). */
export function forget(id: string): void {
  const s = shared();
  s.notify.delete(id);
  s.watches.delete(id);
  s.linesSeen.delete(id);
}
