// The TypeScript a reader is shown: every ```ts / ```typescript block of README.md and docs/*.md
// compiles under `tsc --strict` against the installed package's types (npm/sheepdog/lib/*.d.ts),
// as tests/docs.rs runs the shell blocks. Each block is its own ES module (top-level await works),
// padded with blank lines so tsc's line numbers are the page's. A block that cannot compile for a
// good reason says so in its info string: ```` ```ts norun: REASON ````. The Python blocks are
// python/tests/test_docs.py's.

import test from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { findTsc, installProject, repo, strictCompile } from "./helpers.mjs";

/** README.md and every docs/*.md, as paths relative to the repository. */
function pages() {
  const docs = fs.readdirSync(path.join(repo, "docs")).filter((n) => n.endsWith(".md")).sort();
  return ["README.md", ...docs.map((n) => `docs/${n}`)];
}

/** The fenced blocks of a page: `{ info, text, line }` (line: the page's line of the block's first line, 1-based). */
function blocks(text) {
  const out = [];
  let open = null;
  text.split("\n").forEach((l, i) => {
    const t = l.trimStart();
    if (!open) {
      const fence = ["````", "```"].find((f) => t.startsWith(f));
      if (fence) open = { fence, info: t.slice(fence.length).trim(), lines: [], line: i + 2 };
    } else if (t.startsWith(open.fence) && t.slice(open.fence.length).trim() === "") {
      out.push({ info: open.info, text: open.lines.join("\n"), line: open.line });
      open = null;
    } else {
      open.lines.push(l);
    }
  });
  return out;
}

const lang = (info) => info.split(/\s+/)[0];
/** The REASON of `norun: REASON`, "" when the info string has `norun:` without one, null without `norun:`. */
const norun = (info) => (info.includes("norun:") ? info.slice(info.indexOf("norun:") + 6).trim() : null);

test("every TypeScript block of README.md and docs/ compiles under tsc --strict against the package's types", (t) => {
  const found = [];
  const bad = [];
  for (const page of pages()) {
    for (const b of blocks(fs.readFileSync(path.join(repo, page), "utf8"))) {
      if (!["ts", "typescript"].includes(lang(b.info))) continue;
      const why = norun(b.info);
      if (why === "") bad.push(`${page}:${b.line}: \`norun:\` without a reason`);
      if (why === null) found.push({ page, ...b });
    }
  }
  assert.deepEqual(bad, []);
  // The README's and the packages page's examples at least: a parser that finds none checks nothing.
  assert.ok(found.some((b) => b.page === "README.md") && found.some((b) => b.page === "docs/packages.md"), JSON.stringify(found.map((b) => `${b.page}:${b.line}`)));
  const tsc = findTsc();
  if (!tsc) {
    t.skip("SKIPPED: no typescript (npm i -g typescript @types/node)");
    return;
  }
  const dir = path.join(installProject(), "doc-blocks");
  fs.mkdirSync(dir, { recursive: true });
  const files = {};
  for (const b of found) {
    const file = `${b.page.replace(/[/.]/g, "_")}_${b.line}.mts`;
    files[file] = b.page;
    fs.writeFileSync(path.join(dir, file), "\n".repeat(b.line - 1) + b.text + "\n");
  }
  const r = strictCompile(tsc, dir, Object.keys(files));
  // tsc names the temp files; the page's name and line are what a reader fixes.
  const said = r.output.replace(/(\S+\.mts)\((\d+),\d+\)/g, (m, f, l) => (files[f] ? `${files[f]}:${l}` : m));
  assert.equal(r.status, 0, said);
});
