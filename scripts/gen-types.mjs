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
  StartResult: ["StartResult", "StartDoc", "StartView", "Started"],
  UpdateResult: ["UpdateResult", "EntryDoc", "EntryView"],
  SendResult: ["SendResult", "SendDoc"],
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
  EntryEvent: ["EntryEvent", "StreamEvent", "EventsLine", "JournalRecord"],
};

/**
 * Schema names that would shadow a global of TypeScript or Python (`Record<K, V>` is one
 * TypeScript's own code uses), and what they are called here instead.
 */
const RENAMES = { Record: "JournalRecord" };
const GLOBALS = new Set(["Record", "Partial", "Required", "Readonly", "Pick", "Omit", "Exclude", "Extract", "Error", "Map", "Set", "Date", "Array", "Promise", "Object", "String", "Number", "Boolean", "Function", "Symbol", "Any", "Dict", "List", "Literal", "TypedDict", "Union", "Json"]);

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

const ident = (s) => {
  const name = String(s)
    .replace(/\.json$/, "")
    .split(/[^A-Za-z0-9]+/)
    .filter(Boolean)
    .map((w) => w[0].toUpperCase() + w.slice(1))
    .join("");
  return RENAMES[name] || name;
};

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

for (const name of types.keys()) {
  if (GLOBALS.has(name)) {
    console.error(`gen-types: the schema name ${name} would shadow a global type: add it to RENAMES in scripts/gen-types.mjs`);
    process.exit(1);
  }
}

const refName = (ref) => ident(ref.split("/").pop());

/**
 * An object whose `properties` hold what every variant has and whose `oneOf`/`anyOf` the
 * variants (`{"v", "seq", ..., "oneOf": [{"event": "started", ...}, ...]}`, as schemars writes a
 * struct with a flattened tagged enum): one object per variant, the common fields first.
 * Returns null for any other schema.
 */
function variants(s) {
  const alts = s && typeof s === "object" && s.properties && (s.oneOf || s.anyOf);
  if (!alts) return null;
  return alts.map((alt) => {
    if (!alt || typeof alt !== "object" || alt.$ref || !alt.properties) return { common: s, alt };
    // The tag: the variant's own property with a constant value (`event: "started"`).
    const tag = Object.entries(alt.properties).find(([, p]) => p && typeof p === "object" && "const" in p);
    return {
      tag,
      description: alt.description,
      type: "object",
      properties: { ...s.properties, ...alt.properties },
      required: [...new Set([...(s.required || []), ...(alt.required || [])])],
      ...(alt.additionalProperties !== undefined ? { additionalProperties: alt.additionalProperties } : {}),
    };
  });
}

/** A variant's name: the schema's, then the value of its tag (`event: "started"` → `Started`). */
function variantName(name, v, i) {
  return `${name}${v.tag ? ident(String(v.tag[1].const)) : i + 1}`;
}

function ts(s, indent = "") {
  if (s === true || s === undefined || (typeof s === "object" && Object.keys(s).length === 0)) return "unknown";
  if (s === false) return "never";
  if (s.$ref) return refName(s.$ref);
  if ("const" in s) return JSON.stringify(s.const);
  if (s.enum) return s.enum.map((v) => JSON.stringify(v)).join(" | ");
  const vs = variants(s);
  if (vs) {
    const { oneOf, anyOf, ...common } = s;
    void oneOf;
    void anyOf;
    return vs.map((v) => (v.alt ? `(${ts(common, indent)} & ${paren(ts(v.alt, indent))})` : ts(v, indent))).join(" | ");
  }
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
  if (!s || !s.description) return "";
  const text = s.description.replace(/\*\//g, "*\\/").replace(/\n/g, ` `);
  // "Deprecated, schema v1 only: ..." fields get the tag editors and linters read.
  if (s.deprecated || /^Deprecated\b/.test(text)) return `${indent}/**\n${indent} * ${text}\n${indent} * @deprecated\n${indent} */\n`;
  return `${indent}/** ${text} */\n`;
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
for (const [name, s] of types) {
  out += `${doc(s, "")}export type ${name} = ${ts(s, "")};\n\n`;
  // Each variant by name too (`JournalRecordExited`), as the Python side has them.
  const vs = variants(s);
  if (vs && vs.every((v) => !v.alt)) {
    vs.forEach((v, i) => {
      if (v.tag) out += `export type ${variantName(name, v, i)} = Extract<${name}, { ${v.tag[0]}: ${JSON.stringify(v.tag[1].const)} }>;\n`;
    });
    out += "\n";
  }
}
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
  if (variants(s)) return "Dict[str, Any]";
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
/** A TypedDict for object schema `s`: the required keys in the class, the others in a base. */
function typedDict(name, s) {
  const req = new Set(s.required || []);
  const entries = Object.entries(s.properties);
  const fields = (keep) =>
    entries
      .filter(([k]) => keep(req.has(k)))
      .map(([k, v]) => `    ${JSON.stringify(k)}: ${py(v)},\n`)
      .join("");
  let t = `_${name}Optional = TypedDict("_${name}Optional", {\n${fields((r) => !r)}}, total=False)\n\n`;
  t += `class ${name}(_${name}Optional):\n`;
  const reqFields = entries.filter(([k]) => req.has(k) && /^[A-Za-z_][A-Za-z0-9_]*$/.test(k));
  t += reqFields.length ? reqFields.map(([k, v]) => `    ${k}: ${py(v)}\n`).join("") : "    pass\n";
  return `${t}\n\n`;
}

/** Names of the variant TypedDicts written (`EventLineSpawned`), for the API's aliases. */
const pyVariants = new Set();
for (const [name, s] of types) {
  const vs = variants(s);
  if (vs && vs.every((v) => !v.alt)) {
    // One TypedDict per variant (`JournalRecordStarted`), and the union of them.
    const names = vs.map((v, i) => variantName(name, v, i));
    vs.forEach((v, i) => {
      p += typedDict(names[i], v);
      pyVariants.add(names[i]);
    });
    // Unquoted: the classes are defined just above, and a forward reference here would be
    // evaluated in the API module's namespace by typing.get_type_hints(sheepdog.events).
    p += `${name} = Union[${names.join(", ")}]\n\n`;
    continue;
  }
  const isObject = s.properties && (s.type === "object" || (Array.isArray(s.type) && s.type.includes("object")) || !s.type);
  if (!isObject) {
    p += `${name} = ${py(s)}\n\n`;
    continue;
  }
  p += typedDict(name, s);
}
for (const [api, candidates] of Object.entries(ALIASES)) {
  if (types.has(api)) continue;
  const found = candidates.find((c) => types.has(c));
  const variant = VARIANTS[api] && `${found}${ident(VARIANTS[api])}`;
  p += `${api} = ${variant && pyVariants.has(variant) ? variant : found}\n`;
}
p += 'Json = Union[Dict[str, Any], List[Any]]\n';

fs.writeFileSync(tsOut, out);
fs.writeFileSync(pyOut, p);
console.error(`gen-types: ${types.size} types from ${path.relative(root, schemaDir)}/ into ${path.relative(root, tsOut)} and ${path.relative(root, pyOut)}`);
