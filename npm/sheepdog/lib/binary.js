"use strict";
// Where the sheepdog binary is: the per-platform package that npm installed through
// optionalDependencies (as esbuild and biome ship theirs), unless SHEEPDOG_BINARY names another.
// sheepdog-mcp and sheepdog-top sit next to it in the same directory (`sheepdog mcp` and
// `sheepdog top` exec them from there).

const path = require("node:path");
const fs = require("node:fs");

/**
 * The per-platform package of each platform, by `${process.platform}-${process.arch}`. The darwin
 * names are reserved for when macOS builds exist (they are made on macOS); the ones this version
 * ships are those in package.json's optionalDependencies.
 */
const PLATFORMS = {
  "linux-x64": "sheepdog-linux-x64",
  "linux-arm64": "sheepdog-linux-arm64",
  "darwin-arm64": "sheepdog-darwin-arm64",
  "darwin-x64": "sheepdog-darwin-x64",
};

/** Whether this version of the package ships `pkg` (lists it in optionalDependencies). */
function shipped(pkg) {
  const deps = require("../package.json").optionalDependencies || {};
  return Object.prototype.hasOwnProperty.call(deps, pkg);
}

/**
 * The path of the `sheepdog` binary to run. Throws an Error naming the platform when none is
 * installed (the platform package is optional, so npm skips it silently on other platforms).
 */
function binaryPath() {
  const env = process.env.SHEEPDOG_BINARY;
  if (env) return env;
  const key = `${process.platform}-${process.arch}`;
  const pkg = PLATFORMS[key];
  if (pkg) {
    let dir;
    try {
      dir = path.dirname(require.resolve(`${pkg}/package.json`));
    } catch {
      dir = undefined;
    }
    if (dir) {
      const bin = path.join(dir, "bin", "sheepdog");
      if (fs.existsSync(bin)) return bin;
    }
  }
  const hint =
    pkg && shipped(pkg)
      ? `the package ${pkg} is not installed (reinstall without --no-optional / --omit=optional)`
      : `no binary is built for ${key} yet (build one from the repository with 'cargo install --path .')`;
  throw new Error(`sheepdog: no sheepdog binary for ${key}: ${hint}; or set SHEEPDOG_BINARY to a sheepdog binary`);
}

module.exports = { binaryPath, PLATFORMS, shipped };
