// Every function of the API and every field of both event streams and of send's result, as a
// host writes them, type-checked by the package tests under `tsc --noEmit --strict` (issue 31):
// a field the types lack fails with TS2339, one typed wrong fails its assignment, and an event
// kind the switches do not handle fails the `never` check. package.test.mjs also checks that
// this file names every field schema/events.json and schema/events-fd.json have.
import sheepdog = require("sheepdog");
import type {
  Duration,
  EntryEvent,
  EntryView,
  ErrorDocument,
  LogsResult,
  ReapResult,
  RestartView,
  SendResult,
  StartResult,
  StopView,
  SupervisorEvent,
  UpdateResult,
  WaitResult,
} from "sheepdog";

const log = (...xs: unknown[]): void => console.log(...xs);

/** One `--events-fd` line of `supervise()`, every kind and field. */
function onSupervisorEvent(ev: SupervisorEvent): void {
  const v: 1 = ev.v;
  switch (ev.event) {
    case "spawned": {
      const pid: number = ev.pid;
      const pgid: number = ev.pgid;
      const maxStopMs: number = ev.maxStopMs;
      const containment: string | null = ev.containment;
      const containmentReason: string | null = ev.containmentReason;
      const cgroup: string | null = ev.cgroup;
      const cgroupInode: number | null = ev.cgroupInode;
      log(v, pid, pgid, maxStopMs, containment, containmentReason, cgroup, cgroupInode);
      break;
    }
    case "stopping": {
      const trigger: string = ev.trigger;
      const signal: string | null | undefined = ev.signal;
      log(trigger, signal);
      break;
    }
    case "escalated": {
      const signal: string = ev.signal;
      const remaining: number = ev.remaining;
      log(signal, remaining);
      break;
    }
    case "spawnFailed": {
      const command: string = ev.command;
      const errno: string = ev.errno;
      const errnoNumber: number | null = ev.errnoNumber;
      const exitStatus: number = ev.exitStatus;
      const message: string = ev.message;
      log(command, errno, errnoNumber, exitStatus, message);
      break;
    }
    case "exited": {
      const exitCode: number | null = ev.exitCode;
      const signal: string | null = ev.signal;
      const coreDumped: boolean = ev.coreDumped;
      const treeGone: boolean = ev.treeGone;
      const escalated: boolean = ev.escalated;
      const trigger: string | null = ev.trigger;
      const exitStatus: number | string = ev.exitStatus;
      // Deprecated (schema v1 only), still typed: `exitCode` and `exitStatus` under old names.
      const code: number | null = ev.code;
      const status: number | string = ev.status;
      log(exitCode, signal, coreDumped, treeGone, escalated, trigger, exitStatus, code, status);
      break;
    }
    default: {
      const none: never = ev;
      log(none);
    }
  }
}

/** One line of `events()`, every kind and field. Returns its `seq` (the resume cursor). */
function onEntryEvent(ev: EntryEvent): number {
  const v: 1 = ev.v;
  const seq: number = ev.seq;
  const atMs: number = ev.atMs;
  const id: string = ev.id;
  const name: string = ev.name;
  const sessionId: string | null = ev.sessionId;
  log(v, atMs, id, name, sessionId);
  switch (ev.event) {
    case "started": {
      const pid: number = ev.pid;
      const pgid: number | null = ev.pgid;
      log(pid, pgid);
      break;
    }
    case "ready": {
      const afterMs: number = ev.afterMs;
      const matched: string | null = ev.matched;
      const port: number | null = ev.port;
      log(afterMs, matched, port);
      break;
    }
    case "exited": {
      const status: string = ev.status;
      const statusText: string = ev.statusText;
      const exitCode: number | null = ev.exitCode;
      const signal: string | null = ev.signal;
      const coreDumped: boolean = ev.coreDumped;
      const stopReason: string | null = ev.stopReason;
      const treeGone: boolean | null = ev.treeGone;
      log(status, statusText, exitCode, signal, coreDumped, stopReason, treeGone);
      break;
    }
    case "stopped": {
      const alreadyFinished: boolean = ev.alreadyFinished;
      const treeGone: boolean = ev.treeGone;
      const ok: boolean = ev.ok;
      const cleanupError: string | null = ev.cleanupError;
      log(alreadyFinished, treeGone, ok, cleanupError);
      break;
    }
    case "cleanupFinished": {
      const exitCode: number | null = ev.exitCode;
      const signal: string | null = ev.signal;
      const timedOut: boolean = ev.timedOut;
      const durationMs: number = ev.durationMs;
      const ranBy: string = ev.ranBy;
      log(exitCode, signal, timedOut, durationMs, ranBy);
      break;
    }
    case "cleared":
      break;
    case "setAside": {
      const reason: string = ev.reason;
      const movedTo: string | null = ev.movedTo;
      log(reason, movedTo);
      break;
    }
    default: {
      const none: never = ev;
      log(none);
    }
  }
  return seq;
}

/** Every function, each form, with its result typed. */
async function everyFunction(stateDir: string): Promise<void> {
  const grace: Duration = "1s";
  const child = sheepdog.supervise("codex", ["app-server"], {
    owner: false,
    stdin: "relay",
    onOwnerDeath: "close-stdin",
    afterProviderExit: "kill",
    onStdinEof: "stop",
    stdinGrace: grace,
    termGrace: 3000,
    killWait: "1.5s",
    timeout: "10m",
    containment: "auto",
    stdio: ["pipe", "pipe", "inherit"],
    stateDir,
  });
  child.on("sheepdog", onSupervisorEvent);
  child.on("spawned", (e) => log(e.pid));
  child.on("stopping", (e) => log(e.trigger));
  child.on("escalated", (e) => log(e.remaining));
  child.on("spawnFailed", (e) => log(e.errno));
  child.on("exited", (e) => log(e.exitStatus, e.treeGone));
  child.once("close", (code, signal) => log(code, signal));
  const orca = sheepdog.supervise("claude", [], { ownerPid: process.pid, lifetime: "session", closeRequest: "stdin-end" });
  log(orca.pid);

  const started: StartResult = await sheepdog.start("npm", ["run", "dev"], {
    stateDir,
    name: "web",
    session: "chat-1",
    env: { PORT: "3000" },
    readyPort: 3000,
    cleanup: "docker rm -f db",
    stdin: "pipe",
  });
  const sv: 1 = started.v;
  const id: string = started.id;
  const warnings: string[] = started.warnings.map((w) => `${w.kind}: ${w.message}`);
  const readyOk: boolean | undefined = started.ready?.ok;
  const views: EntryView[] = await sheepdog.list({ stateDir, session: "chat-1", all: true });
  const logs: LogsResult = await sheepdog.logs(id, { stateDir, tail: 20, stream: "all" });
  const more: LogsResult = await sheepdog.logs(id, { stateDir, cursor: logs.cursor });
  const sent: SendResult = await sheepdog.send(id, "y\n", { stateDir, eof: true });
  const sentV: 1 = sent.v;
  const bytes: number = sent.bytes;
  const ended: boolean = sent.eof;
  const sentTo: string = sent.id;
  const updated: UpdateResult = await sheepdog.update(id, { stateDir, cleanup: null, name: "web2" });
  const uv: 1 = updated.v;
  const restarted: RestartView[] = await sheepdog.restart(id, { stateDir, termGrace: grace });
  const waited: WaitResult = await sheepdog.wait([restarted[0].id], { stateDir, timeout: 5000 });
  const waitedV: 1 = waited.v;
  const exitStatus: number = waited.exitStatus;
  const bySession: WaitResult = await sheepdog.wait({ session: "chat-1", stateDir });
  const stopped: StopView[] = await sheepdog.stop(id, { stateDir, termGrace: "1s" });
  const cancel: StopView[] = await sheepdog.stop({ session: "chat-1", missingOk: true, stateDir });
  const all: StopView[] = await sheepdog.stop({ all: true, stateDir });
  const reaped: ReapResult = await sheepdog.reap({ stateDir, dryRun: true });
  reaped.actions.forEach((a) => log(a.id, a.action));
  const cleared: EntryView[] = await sheepdog.clear([id], { stateDir, force: true });
  const finished: EntryView[] = await sheepdog.clear({ finished: true, stateDir });
  let since = 0;
  for await (const ev of sheepdog.events({ stateDir, session: "chat-1", id, since })) since = onEntryEvent(ev);
  const resumed = sheepdog.events({ stateDir, since });
  await resumed.return();
  const bin: string = sheepdog.binaryPath();
  log(sv, warnings, readyOk, views, more.eof, sentV, bytes, ended, sentTo, uv, waitedV, exitStatus, bySession);
  log(stopped, cancel, all, cleared, finished, bin);
}

everyFunction("/tmp/state").catch((e: unknown) => {
  if (e instanceof sheepdog.SheepdogError) {
    const doc: ErrorDocument | null = e.document;
    const v: 1 | undefined = doc?.v;
    const status: number | undefined = doc?.error.exitStatus;
    log(v, status, doc?.error.message, e.exitStatus, e.signal, e.stderr, e.args, e.name);
  }
});
