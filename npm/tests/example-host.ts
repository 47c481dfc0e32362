// An example host, type-checked by the package tests (tsc --noEmit --strict): what Orca's
// inline supervisor and Papercup's bot write with the package's types.
import sheepdog = require("sheepdog");
import type { EntryView, ExitedEvent, StopView } from "sheepdog";

const child = sheepdog.supervise("codex", ["app-server"], {
  onStdinEof: "stop",
  stdinGrace: "1s",
  termGrace: 3000,
  timeout: "10m",
  stdio: ["pipe", "pipe", "inherit"],
});
child.on("spawned", (e) => console.log(e.pid, e.maxStopMs, e.containment));
child.on("exited", (e: ExitedEvent) => console.log(e.treeGone, e.trigger, e.status));
child.on("close", (code, signal) => console.log(code, signal));
const pid: number | undefined = child.pid;

async function bot(): Promise<void> {
  const started = await sheepdog.start("npm", ["run", "dev"], { session: "chat-1", readyPort: 3000, cleanup: "docker rm -f db" });
  const id: string = started.id;
  for (const w of started.warnings) console.log(w.kind, w.message);
  const views: EntryView[] = await sheepdog.list({ session: "chat-1" });
  const pids: (number | null)[] = views.map((v) => v.pid);
  const stopped: StopView[] = await sheepdog.stop({ session: "chat-1" });
  const failed = stopped.filter((s) => !s.ok).map((s) => s.cleanupError);
  await sheepdog.stop(id, { termGrace: "1s" });
  await sheepdog.update(id, { cleanup: null });
  const l = await sheepdog.logs(id, { tail: 20, stream: "all" });
  const next = await sheepdog.logs(id, { cursor: l.cursor });
  const w = await sheepdog.wait([id], { timeout: 5000 });
  const code: number | null = w.exitCode;
  const r = await sheepdog.reap();
  r.actions.forEach((a) => console.log(a.id, a.action));
  await sheepdog.clear({ finished: true });
  await sheepdog.restart(id);
  await sheepdog.send(id, "y\n", { eof: true });
  for await (const ev of sheepdog.events({ session: "chat-1" })) console.log(ev.event);
  console.log(pid, pids, failed, next.eof, code);
}

bot().catch((e: unknown) => {
  if (e instanceof sheepdog.SheepdogError) console.error(e.exitStatus, e.document?.error.message);
});
