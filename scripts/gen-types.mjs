#!/usr/bin/env node
// scripts/gen-types.mjs: the npm and Python packages' document types from schema/*.json.
//
// Writes npm/sheepdog/lib/types.d.ts (TypeScript) and python/sheepdog/_types.py (TypedDicts)
// from the JSON Schemas the repository keeps in schema/ (one document per file, named by its
// `title` or file name; `$defs`/`definitions` become named types too). Without schema/ it does
// nothing: the hand-written files stay. No dependencies: the schemas are the subset schemars
// writes (object, array, enum, const, $ref, anyOf/oneOf/allOf, nullable type lists).
//
// The API's own names (index.d.ts imports them) must each be a type of the schema, directly or
// through ALIASES below; a name that is missing is an error, so a schema change that breaks
// the API is seen at package time.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const schemaDir = process.argv[2] ? path.resolve(process.argv[2]) : path.join(root, "schema");
const tsOut = process.argv[3] ? path.resolve(process.argv[3]) : path.join(root, "npm/sheepdog/lib/types.d.ts");
const pyOut = process.argv[4] ? path.resolve(process.argv[4]) : path.join(root, "python/sheepdog/_types.py");

/** The names index.d.ts and the Python API use, each with the schema names it may have. */
const ALIASES = {
  EntryView: ["EntryView", "Entry", "View"],
  StartResult: ["StartResult", "StartView", "Started"],
  StopView: ["StopView", "Stopped", "StopResult"],
  RestartView: ["RestartView", "Restarted", "RestartResult", "StartView"],
  WaitResult: ["WaitResult", "Wait", "WaitDocument", "WaitDoc"],
  LogsResult: ["LogsResult", "LogRead", "Logs", "LogsDoc"],
  ReapResult: ["ReapResult", "Reap", "ReapReport", "ReapDoc"],
  ErrorDocument: ["ErrorDocument", "Error", "ErrorView", "ErrorDoc"],
  SpawnedEvent: ["SpawnedEvent", "EventLine"],
  StoppingEvent: ["StoppingEvent", "EventLine"],
  EscalatedEvent: ["EscalatedEvent", "EventLine"],
  ExitedEvent: ["ExitedEvent", "EventLine"],
  SpawnFailedEvent: ["SpawnFailedEvent", "EventLine"],
  SupervisorEvent: ["SupervisorEvent", "RunEvent", "Event", "EventLine"],
  EntryEvent: ["EntryEvent", "StreamEvent", "EventsLine", "Record"],
};

/** API names that are one variant of a tagged union: its `event` value. */
const VARIANTS = {
  SpawnedEvent: "spawned",
  StoppingEvent: "stopping",
  EscalatedEvent: "escalated",
  ExitedEvent: "exited",
  SpawnFailedEvent: "spawnFailed",
};

if (!fs.existsSync(schemaDir)) {
  console.error(`gen-types: no ${path.relative(root, schemaDir) || schemaDir}/: keeping the hand-written types`);
  process.exit(0);
}

const ident = (s) =>
  String(s)
    .replace(/\.json$/, "")
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join("");

/** name -> schema, over every file's root and its definitions. */
const types = new Map();
for (const file of fs.readdirSync(schemaDir).filter((f) => f.endsWith(".json")).sort()) {
  const doc = JSON.parse(fs.readFileSync(path.join(schemaDir, file), "utf8"));
  for (const [k, v] of Object.entries({ ...(doc.definitions || {}), ...(doc.$defs || {}) })) {
    if (!types.has(ident(k))) types.set(ident(k), v);
  }
  const { $defs, definitions, ...rest } = doc;
  void $defs;
  void definitions;
  types.set(ident(doc.title || file), rest);
}

const refName = (ref) => ident(ref.split("/").pop());

function ts(s, indent = "") {
  if (s === true || s === undefined || (typeof s === "object" && Object.keys(s).length === 0)) return "unknown";
  if (s === false) return "never";
  if (s.$ref) return refName(s.$ref);
  if ("const" in s) return JSON.stringify(s.const);
  if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  if (s.anyOf || s.oneOf) return (s.anyOf || s.oneOf).map((x) => paren(ts(x, indent))).join(" | ");
  if (s.allOf) return s.allOf.map((x) => paren(ts(x, indent))).join(" & ");
  const t = Array.isArray(s.type) ? s.type : [s.type];
  return t
    .map((one) => {
      switch (one) {
        case "null":
          return "null";
        case "string":
          return "string";
        case "integer":
        case "number":
          return "number";
        case "boolean":
          return "boolean";
        case "array":
          return `${paren(ts(s.items, indent))}[]`;
        case "object":
          return object(s, indent);
        default:
          return s.properties ? object(s, indent) : "unknown";
      }
    })
    .join(" | ");
}

const paren = (t) => (/[|&]/.test(t) && !t.startsWith("{") ? `(${t})` : t);

function doc(s, indent) {
  return s && s.description ? `${indent}/** ${s.description.replace(/\*\//g, "*\\/").replace(/\n/g, ` `)} */\n` : "";
}

function object(s, indent) {
  const req = new Set(s.required || []);
  const inner = `${indent}  `;
  let body = "";
  for (const [k, v] of Object.entries(s.properties || {})) {
    const key = /^[A-Za-z_$][A-Za-z0-9_$]*$/.test(k) ? k : JSON.stringify(k);
    body += `${doc(v, inner)}${inner}${key}${req.has(k) ? "" : "?"}: ${ts(v, inner)};\n`;
  }
  if (s.additionalProperties && typeof s.additionalProperties === "object") {
    body += `${inner}[key: string]: ${ts(s.additionalProperties, inner)};\n`;
  }
  return body ? `{\n${body}${indent}}` : "Record<string, unknown>";
}

let out =
  "// The JSON documents sheepdog prints, as TypeScript types.\n" +
  "// GENERATED by scripts/gen-types.mjs from schema/*.json: do not edit by hand.\n\n";
for (const [name, s] of types) out += `${doc(s, "")}export type ${name} = ${ts(s, "")};\n\n`;
const missing = [];
for (const [api, candidates] of Object.entries(ALIASES)) {
  if (types.has(api)) continue;
  const found = candidates.find((c) => types.has(c));
  // One variant of a union tagged by `event` (the `--events-fd` lines share one schema).
  const tag = VARIANTS[api];
  if (found && tag) out += `export type ${api} = Extract<${found}, { event: ${JSON.stringify(tag)} }>;\n`;
  else if (found) out += `export type ${api} = ${found};\n`;
  else missing.push(api);
}
if (missing.length) {
  console.error(`gen-types: schema/ has no type for ${missing.join(", ")}: add its name to ALIASES in scripts/gen-types.mjs`);
  process.exit(1);
}

// Python: a TypedDict per object type (required keys in the class, the others in a total=False
// base), an alias per other type; names are quoted so the order of definitions does not matter.
function py(s) {
  if (s === true || s === undefined || (typeof s === "object" && Object.keys(s).length === 0)) return "Any";
  if (s.$ref) return JSON.stringify(refName(s.$ref));
  if ("const" in s) return `Literal[${JSON.stringify(s.const)}]`;
  if (s.enum) return `Literal[${s.enum.map((v) => JSON.stringify(v)).join(", ")}]`;
  if (s.anyOf || s.oneOf) return `Union[${(s.anyOf || s.oneOf).map(py).join(", ")}]`;
  if (s.allOf) return "Dict[str, Any]";
  const t = Array.isArray(s.type) ? s.type : [s.type];
  const parts = t.map((one) =>
    ({ null: "None", string: "str", integer: "int", number: "float", boolean: "bool" })[one] ||
    (one === "array" ? `List[${py(s.items)}]` : "Dict[str, Any]"),
  );
  return parts.length === 1 ? parts[0] : `Union[${parts.join(", ")}]`;
}

let p =
  '"""The JSON documents sheepdog prints, as TypedDicts.\n\nGENERATED by scripts/gen-types.mjs from schema/*.json: do not edit by hand.\n"""\n\n' +
  "from typing import Any, Dict, List, Literal, TypedDict, Union\n\n";
for (const [name, s] of types) {
  const isObject = s.properties && (s.type === "object" || (Array.isArray(s.type) && s.type.includes("object")) || !s.type);
  if (!isObject) {
    p += `${name} = ${py(s)}\n\n`;
    continue;
  }
  const req = new Set(s.required || []);
  const entries = Object.entries(s.properties);
  const fields = (keep) =>
    entries
      .filter(([k]) => keep(req.has(k)))
      .map(([k, v]) => `    ${JSON.stringify(k)}: ${py(v)},\n`)
      .join("");
  p += `_${name}Optional = TypedDict("_${name}Optional", {\n${fields((r) => !r)}}, total=False)\n\n`;
  p += `class ${name}(_${name}Optional):\n`;
  const reqFields = entries.filter(([k]) => req.has(k) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(k));
  p += reqFields.length ? reqFields.map(([k, v]) => `    ${k}: ${py(v)}\n`).join("") : "    pass\n";
  p += "\n\n";
}
for (const [api, candidates] of Object.entries(ALIASES)) {
  if (!types.has(api)) p += `${api} = ${candidates.find((c) => types.has(c))}\n`;
}
p += 'Json = Union[Dict[str, Any], List[Any]]\n';

fs.writeFileSync(tsOut, out);
fs.writeFileSync(pyOut, p);
console.error(`gen-types: ${types.size} types from ${path.relative(root, schemaDir)}/ into ${path.relative(root, tsOut)} and ${path.relative(root, pyOut)}`);
