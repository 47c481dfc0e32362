// The install README gives for Claude Code: the repository as a marketplace (its root's
// .claude-plugin/marketplace.json), then `plugin install`, into a fresh home; the next `claude -p`
// runs its Bash calls under sheepdog with no --plugin-dir.

import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import path from "node:path";

import { Guard, claudeSetup, hostPath, hostsDir, repo, runClaude, startModel, toolResults } from "./harness.mjs";

let model;
const guard = new Guard();
after(async () => {
  guard.killAll();
  await model?.close();
});

test("/plugin marketplace add, then /plugin install: the next session's Bash calls run under sheepdog", async () => {
  const setup = claudeSetup({ plugin: false });
  const claude = (args) =>
    spawnSync(path.join(hostsDir(), "node_modules", ".bin", "claude"), args, {
      cwd: setup.proj,
      env: { PATH: hostPath(), HOME: setup.home, LANG: "C.UTF-8", DISABLE_AUTOUPDATER: "1" },
      encoding: "utf8",
      timeout: 60_000,
    });
  const added = claude(["plugin", "marketplace", "add", repo]);
  assert.equal(added.status, 0, added.stdout + added.stderr);
  const installed = claude(["plugin", "install", "sheepdog@sheepdog"]);
  assert.equal(installed.status, 0, installed.stdout + installed.stderr);
  const list = claude(["plugin", "list"]);
  assert.match(list.stdout, /sheepdog@sheepdog[\s\S]*enabled/, list.stdout);
  model = await startModel([
    { tool: "Bash", input: { command: "cat /proc/$PPID/comm", description: "test" } },
    { text: "done" },
  ]);
  const r = await runClaude(model, setup, { guard });
  assert.equal(r.code, 0, r.out);
  const results = toolResults(model.requests);
  assert.equal(results.at(-1)?.text, "sheepdog", "the call's shell runs under sheepdog");
});
