// pi-processes' flows through the installed npm package: cleanups and nudges.

import test from "node:test";
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { api, stateDir } from "./helpers.mjs";

test("start with a cleanup, update it after start, stop with a failing cleanup: the result says so", async (t) => {
  const { dir, guard } = stateDir(t);
  const sd = api();
  const mark = path.join(dir, "cleanup-ran");
  const started = await sd.start("sleep", ["100"], { stateDir: dir, name: "devserver", cleanup: `echo first > ${mark}` });
  [started.pid, started.supervisorPid].forEach((p) => guard.track(p));
  assert.equal(started.cleanup.command, `echo first > ${mark}`);
  const updated = await sd.update("devserver", { stateDir: dir, cleanup: `echo second > ${mark}; exit 3` });
  assert.equal(updated.cleanup.command, `echo second > ${mark}; exit 3`);
  const [stopped] = await sd.stop("devserver", { stateDir: dir, termGrace: "1s" });
  assert.equal(stopped.id, started.id);
  assert.equal(stopped.treeGone, true);
  assert.equal(stopped.ok, false, JSON.stringify(stopped));
  assert.match(stopped.cleanupError, /3/);
  assert.equal(stopped.cleanupResult.exitCode, 3);
  assert.equal(fs.readFileSync(mark, "utf8"), "second\n");
  const [entry] = await sd.list({ stateDir: dir, all: true });
  assert.equal(entry.status, "stopped");
});

test("a nudge in the start result", async (t) => {
  const { dir, guard } = stateDir(t);
  const sd = api();
  const started = await sd.start("sh", ["-c", "sleep 100 &"], { stateDir: dir });
  [started.pid, started.supervisorPid].forEach((p) => guard.track(p));
  assert.equal(started.warnings.length, 1, JSON.stringify(started.warnings));
  assert.equal(started.warnings[0].kind, "stoppedOnExit");
  assert.equal(started.warnings[0].matched, "&");
  const plain = await sd.start("sleep", ["100"], { stateDir: dir });
  [plain.pid, plain.supervisorPid].forEach((p) => guard.track(p));
  assert.deepEqual(plain.warnings, []);
});

test("logs, wait, restart and clear return their documents; bad input is a SheepdogError with 125", async (t) => {
  const { dir, guard } = stateDir(t);
  const sd = api();
  const job = await sd.start("sh", ["-c", "echo working; exit 2"], { stateDir: dir, name: "job" });
  guard.track(job.supervisorPid);
  const waited = await sd.wait("job", { stateDir: dir, timeout: "10s" });
  assert.equal(waited.exitCode, 2);
  assert.equal(waited.waited[0].status, "exited");
  const out = await sd.logs("job", { stateDir: dir, stream: "out" });
  assert.deepEqual(out.lines, ["working"]);
  assert.equal(out.eof, true);
  const [again] = await sd.restart("job", { stateDir: dir });
  guard.track(again.supervisorPid);
  assert.equal(again.restartOf, job.id);
  await sd.wait(again.id, { stateDir: dir, timeout: "10s" });
  const cleared = await sd.clear({ finished: true, stateDir: dir });
  assert.deepEqual(cleared.map((e) => e.id).sort(), [job.id, again.id].sort());
  await assert.rejects(sd.logs("nope", { stateDir: dir }), (e) => {
    assert.ok(e instanceof sd.SheepdogError);
    assert.equal(e.exitStatus, 125);
    // The error document of schema v1 (issue 19): `exitStatus`, with `exitCode` kept for v1.
    assert.deepEqual(e.document, {
      v: 1,
      error: { message: "no entry with id or name 'nope'", exitStatus: 125, exitCode: 125 },
    });
    assert.equal(e.message, "sheepdog: no entry with id or name 'nope'");
    return true;
  });
});
