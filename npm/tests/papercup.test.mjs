// Papercup's flows through the installed npm package: a Node bot that runs agent turns under
// a session, crashes, comes back and reaps; `/cancel`; a turn timeout.

import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { api, closed, host, killChain, stateDir, waitGone } from "./helpers.mjs";

/** The keeper of an entry's supervisor (issue 16), from the entry file (the view omits it). */
function keeperOf(dir, id) {
  const e = JSON.parse(fs.readFileSync(path.join(dir, "procs", id, "entry.json"), "utf8"));
  return e.keeperPid;
}

const BOT = `
const sd = require("sheepdog");
const [mode, stateDir] = process.argv.slice(2);
(async () => {
  if (mode === "run") {
    // Turn A is owned by the bot (its supervisor stops it when the bot dies); turn B is not.
    const a = await sd.start("sleep", ["100"], { stateDir, session: "chat-1", name: "turn-a", owner: process.pid });
    const b = await sd.start("sh", ["-c", "sleep 100 & wait"], { stateDir, session: "chat-1", name: "turn-b" });
    console.log("started", JSON.stringify({ a, b }));
    setInterval(() => {}, 1000);
  } else {
    console.log("reaped", JSON.stringify(await sd.reap({ stateDir })));
  }
})().catch((e) => { console.error(e); process.exit(1); });
`;

test("a bot that crashed comes back and reaps what it left, and nothing of anyone else's", async (t) => {
  const { dir, guard } = stateDir(t);
  const sd = api();
  const other = await sd.start("sleep", ["100"], { stateDir: dir, session: "someone-else", name: "theirs" });
  guard.track(other.pid);
  guard.track(other.supervisorPid);

  const bot = host(BOT, ["run", dir]);
  guard.track(bot.pid);
  const { a, b } = JSON.parse((await bot.lines.next("started ")).slice("started ".length));
  for (const e of [a, b]) [e.pid, e.supervisorPid].forEach((p) => guard.track(p));
  const bTree = (await sd.list({ stateDir: dir })).find((e) => e.id === b.id);
  assert.equal(bTree.status, "running");

  // The crash: the bot is SIGKILLed, and so is turn B's whole supervisor chain, supervisor and
  // keeper (as an OOM kill of the bot's whole cgroup would; either alone would still stop the
  // tree); turn B's tree is left behind. The keeper's pid is in the entry file, not the view.
  const keeper = keeperOf(dir, b.id);
  guard.track(keeper);
  bot.kill("SIGKILL");
  const chain = [b.supervisorPid, keeper].filter(Boolean);
  await killChain(b.supervisorPid, keeper);
  await closed(bot);
  assert.deepEqual(await waitGone([a.pid, a.supervisorPid, ...chain], 10000), [], "turn A outlived its owner");
  assert.equal((await sd.list({ stateDir: dir, all: true })).find((e) => e.id === b.id).status, "orphaned");

  const again = host(BOT, ["reap", dir]);
  const reaped = JSON.parse((await again.lines.next("reaped ")).slice("reaped ".length));
  await closed(again);
  const acted = reaped.actions.map((x) => x.id);
  assert.ok(acted.includes(b.id), `turn B not reaped: ${JSON.stringify(reaped)}`);
  assert.ok(!acted.includes(other.id), "reaped someone else's entry");
  assert.deepEqual(await waitGone([b.pid], 5000), []);
  const theirs = (await sd.list({ stateDir: dir })).find((e) => e.id === other.id);
  assert.equal(theirs.status, "running");
});

test("/cancel is stop({session}): every turn of that session is stopped, no other", async (t) => {
  const { dir, guard } = stateDir(t);
  const sd = api();
  const turns = [];
  for (const name of ["t1", "t2"]) turns.push(await sd.start("sleep", ["100"], { stateDir: dir, session: "chat-2", name }));
  const keep = await sd.start("sleep", ["100"], { stateDir: dir, session: "chat-3" });
  for (const e of [...turns, keep]) [e.pid, e.supervisorPid].forEach((p) => guard.track(p));
  const stopped = await sd.stop({ session: "chat-2", stateDir: dir, termGrace: "1s" });
  assert.deepEqual(stopped.map((s) => s.id).sort(), turns.map((e) => e.id).sort());
  assert.ok(stopped.every((s) => s.ok && s.treeGone && s.status === "stopped"), JSON.stringify(stopped));
  assert.deepEqual(await waitGone(turns.map((e) => e.pid), 1000), []);
  assert.equal((await sd.list({ stateDir: dir })).find((e) => e.id === keep.id).status, "running");
  // A session with nothing to stop is an error the bot can tell apart.
  await assert.rejects(sd.stop({ session: "chat-2", stateDir: dir }), (e) => {
    assert.equal(e.name, "SheepdogError");
    assert.equal(e.exitStatus, 1);
    assert.match(e.document.error.message, /nothing matched --session chat-2/);
    return true;
  });
});

test("a turn timeout ends a foreground turn with 'timed out' (status 124)", async () => {
  const { supervise } = api();
  const child = supervise("sh", ["-c", "sleep 100 & wait"], { timeout: "300ms", termGrace: "1s", stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  child.stderr.on("data", (d) => (err += d));
  let exited;
  child.on("exited", (e) => (exited = e));
  const t0 = Date.now();
  const [code] = await closed(child);
  assert.equal(code, 124);
  assert.ok(Date.now() - t0 >= 300);
  assert.match(err, /sheepdog: timed out after 300ms/);
  assert.equal(exited.trigger, "timeout");
  assert.equal(exited.treeGone, true);
});
