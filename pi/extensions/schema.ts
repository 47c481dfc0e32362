// The `process` tool's parameters: pi-processes' action names and fields (an agent that knew
// one knows the other), plus what sheepdog adds on `start` (`cleanup`, `ready`, `stdin`) and
// `update` (`cleanup` or null). Plain JSON Schema: pi validates it as it validates TypeBox
// schemas, and the package needs none of pi's own modules at run time.

/** Output caps, as pi-processes caps `output`: lines per call (default, max) and bytes. */
export const DEFAULT_TAIL_LINES = 100;
export const MAX_TAIL_LINES = 2000;
export const MAX_OUTPUT_BYTES = 50 * 1024;
/** Watches per process and pattern length, as pi-processes bounds them. */
export const MAX_WATCHES = 20;
export const MAX_PATTERN_LENGTH = 500;

export type Attention = "turn" | "context" | "ignore";
export type WatchStream = "stdout" | "stderr" | "both";

export interface Watch {
  pattern: string;
  mode?: "literal" | "regex";
  stream?: WatchStream;
  repeat?: boolean;
  on?: Attention;
}

export interface Notify {
  onSuccess?: Attention;
  onFailure?: Attention;
  onKilled?: Attention;
  logMatches?: Watch[];
}

export interface Cleanup {
  command: string;
  timeoutMs?: number;
}

export interface Ready {
  port?: number;
  logPattern?: string;
  listen?: boolean;
  timeoutMs?: number;
}

export interface Params {
  action: "start" | "list" | "output" | "stop" | "write" | "update" | "clear";
  name?: string;
  command?: string;
  cwd?: string;
  notify?: Notify;
  cleanup?: Cleanup | null;
  ready?: Ready;
  stdin?: "pipe";
  id?: string;
  limit?: number;
  sortBy?: "startTime_desc" | "startTime_asc" | "name_asc" | "name_desc" | "status_asc";
  statuses?: string[];
  stream?: "stdout" | "stderr" | "both";
  tailLines?: number;
  pattern?: string;
  mode?: "literal" | "regex";
  input?: string;
  end?: boolean;
  watches?: { mode: "append" | "replace" | "remove" | "clear"; items?: Array<Partial<Watch> & { index?: number }> };
}

const attention = (what: string) => ({
  type: "string",
  enum: ["turn", "context", "ignore"],
  description: `Attention ${what}: turn wakes or steers you, context reaches you on your next turn, ignore stays silent.`,
});

const watchItem = {
  type: "object",
  properties: {
    pattern: { type: "string", maxLength: MAX_PATTERN_LENGTH, description: "Pattern to look for in each new line." },
    mode: { type: "string", enum: ["literal", "regex"], description: "literal (default) or regex." },
    stream: { type: "string", enum: ["stdout", "stderr", "both"], description: "Stream to watch (default both)." },
    repeat: { type: "boolean", description: "Notify on every match, not only the first (default false)." },
    on: attention("for a match (default turn)"),
  },
  required: ["pattern"],
};

const cleanup = {
  type: "object",
  properties: {
    command: { type: "string", description: "Shell command (sh -c) that undoes work the process started outside its own tree (docker rm -f db, ...)." },
    timeoutMs: { type: "integer", minimum: 1, description: "Bound on the cleanup in ms (default 10000)." },
  },
  required: ["command"],
};

/** The JSON Schema of the tool's arguments. */
export const parameters = {
  type: "object",
  properties: {
    action: {
      type: "string",
      enum: ["start", "list", "output", "stop", "write", "update", "clear"],
      description: "Action to perform.",
    },
    name: { type: "string", description: "Process name (start: required; update: rename)." },
    command: { type: "string", description: "start: shell command, run as bash -lc." },
    cwd: { type: "string", description: "start: working directory (default: pi's)." },
    notify: {
      type: "object",
      description: "start: when to tell you about this process.",
      properties: {
        onSuccess: attention("on a clean exit (default turn)"),
        onFailure: attention("on a failure (default turn; ignore becomes context)"),
        onKilled: attention("when something else killed it (default context)"),
        logMatches: { type: "array", maxItems: MAX_WATCHES, items: watchItem, description: "Lines to be told about." },
      },
    },
    cleanup: {
      description:
        "start: what stop runs after the tree is gone. update: a new cleanup, or null to remove it.",
      anyOf: [cleanup, { type: "null" }],
    },
    ready: {
      type: "object",
      description: "start: return only once it is ready (a port listens, a line matches, or any port listens).",
      properties: {
        port: { type: "integer", minimum: 1, maximum: 65535 },
        logPattern: { type: "string", description: "Regex a line of output must match." },
        listen: { type: "boolean", description: "Any TCP port of the tree listens." },
        timeoutMs: { type: "integer", minimum: 1, description: "Default 30000." },
      },
    },
    stdin: { type: "string", enum: ["pipe"], description: "start: give it a stdin pipe, for write." },
    id: { type: "string", description: "Process id from start or list (proc_N); a name works too." },
    limit: { type: "number", description: "list: at most this many." },
    sortBy: { type: "string", enum: ["startTime_desc", "startTime_asc", "name_asc", "name_desc", "status_asc"] },
    statuses: {
      type: "array",
      items: { type: "string", enum: ["all", "running", "finished", "failed", "killed"] },
      description: "list: filter; finished = exited 0, failed = exited non-zero or timed out.",
    },
    stream: { type: "string", enum: ["stdout", "stderr", "both"], description: "output: default both (arrival order)." },
    tailLines: { type: "integer", minimum: 1, maximum: MAX_TAIL_LINES, description: "output: last N lines (default 100)." },
    pattern: { type: "string", maxLength: MAX_PATTERN_LENGTH, description: "output: only lines with this." },
    mode: { type: "string", enum: ["literal", "regex"], description: "output: how pattern matches (default literal)." },
    input: { type: "string", description: "write: text for its stdin, as is (add the newline a prompt waits for)." },
    end: { type: "boolean", description: "write: then close its stdin." },
    watches: {
      type: "object",
      description: "update: change the log watches.",
      properties: {
        mode: { type: "string", enum: ["append", "replace", "remove", "clear"] },
        items: {
          type: "array",
          maxItems: MAX_WATCHES,
          items: { ...watchItem, required: [], properties: { ...watchItem.properties, index: { type: "integer", minimum: 0 } } },
        },
      },
      required: ["mode"],
    },
  },
  required: ["action"],
};
