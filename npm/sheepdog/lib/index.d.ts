// The sheepdog npm package's API. Every function spawns the sheepdog binary (argv, no shell)
// and resolves to the JSON document it printed; failures reject with SheepdogError.
// The document types live in types.d.ts (generated from schema/ where the repository has it).

import type { ChildProcess, StdioOptions } from "node:child_process";
import type {
  EntryEvent,
  EntryView,
  ErrorDocument,
  EscalatedEvent,
  ExitedEvent,
  LogsResult,
  ReapResult,
  RestartView,
  SendResult,
  SpawnFailedEvent,
  SpawnedEvent,
  StartResult,
  StopView,
  StoppingEvent,
  SupervisorEvent,
  UpdateResult,
  WaitResult,
} from "./types";

export * from "./types";

/** A duration: a number of milliseconds, or sheepdog's own form (`"250ms"`, `"1.5s"`, `"1m30s"`). */
export type Duration = number | string;

/** Options every function takes. */
export interface CommonOptions {
  /** The registry's directory (`--state-dir`); default `$SHEEPDOG_STATE_DIR`, else sheepdog's. */
  stateDir?: string;
  /** The sheepdog binary to run; default `$SHEEPDOG_BINARY`, else the platform package's. */
  binary?: string;
  /** The environment of the sheepdog command itself (default: this process's). */
  processEnv?: NodeJS.ProcessEnv;
  /** Aborts the call (the sheepdog command is killed). */
  signal?: AbortSignal;
}

/** The containment tier and the tree's limits (`run` and `start`). */
export interface ContainmentOptions {
  containment?: "auto" | "cgroup" | "subreaper";
  /** `memory.max` of the tree's cgroup, like `"512MiB"`; refused (SheepdogError, 125) where it cannot be applied. */
  memoryMax?: string;
  /** `pids.max` of the tree's cgroup; refused (125) where it cannot be applied. */
  pidsMax?: number;
}

/** `supervise` options: `sheepdog run`'s flags and Node's own spawn options. */
export interface SuperviseOptions extends ContainmentOptions {
  /** Stop the tree when this process dies; default `process.pid` (it must be sheepdog's parent). `false`: none. */
  owner?: number | false;
  /** `"stop"`: stdin EOF stops the tree after `stdinGrace` (default `"ignore"`). */
  onStdinEof?: "ignore" | "stop";
  /**
   * `"relay"`: the command's stdin is a pipe sheepdog feeds from its own and closes when the
   * owner dies or a stop begins (`--stdin relay`); default `"inherit"` (zero-copy).
   */
  stdin?: "inherit" | "relay";
  /**
   * `"close-stdin"` (needs `stdin: "relay"`): the owner's death closes the command's stdin, then
   * `stdinGrace` to exit on its own, then the stop; default `"stop"` at once.
   */
  onOwnerDeath?: "stop" | "close-stdin";
  /** `"kill"`: once the command has exited, what it left gets SIGKILL at once; default `"grace"`. */
  afterProviderExit?: "grace" | "kill";
  /** Orca's spec: the owner (as `owner`). */
  ownerPid?: number;
  /** Orca's spec: `"session"` (stdin EOF stops, as `onStdinEof: "stop"`) or `"one-shot"` (as `afterProviderExit: "kill"`). */
  lifetime?: "session" | "one-shot";
  /** Orca's spec: `"stdin-end"` (relay, `onOwnerDeath: "close-stdin"`) or `"stdin-end-and-sigterm"` (relay, `"stop"`). */
  closeRequest?: "stdin-end" | "stdin-end-and-sigterm";
  /** Orca's spec: `stdinGrace` in ms. */
  stdinEndGraceMs?: number;
  /** Orca's spec: `termGrace` in ms. */
  sigtermGraceMs?: number;
  /** After stdin EOF, how long the command may take to exit on its own (default 1 s). */
  stdinGrace?: Duration;
  /** After SIGTERM, how long the tree may take before SIGKILL (default 3 s). */
  termGrace?: Duration;
  /** After SIGKILL, how long to wait for the kernel before exit status 124 (default 1.5 s). */
  killWait?: Duration;
  /** The turn timeout: the one stop after this long, then exit status 124 ("timed out after DUR"). */
  timeout?: Duration;
  /** As Node's spawn: fds 0-2 (default `"pipe"`); the events pipe is added after them. */
  stdio?: StdioOptions;
  cwd?: string;
  /** The whole environment of sheepdog and the command (as Node's spawn; default `process.env`). */
  env?: NodeJS.ProcessEnv;
  detached?: boolean;
  killSignal?: NodeJS.Signals | number;
  argv0?: string;
  stateDir?: string;
  binary?: string;
  signal?: AbortSignal;
}

/** The supervisor's ChildProcess, with its `--events-fd` events. */
export interface SupervisedProcess extends ChildProcess {
  on(event: "spawned", listener: (ev: SpawnedEvent) => void): this;
  on(event: "stopping", listener: (ev: StoppingEvent) => void): this;
  on(event: "escalated", listener: (ev: EscalatedEvent) => void): this;
  on(event: "exited", listener: (ev: ExitedEvent) => void): this;
  on(event: "spawnFailed", listener: (ev: SpawnFailedEvent) => void): this;
  on(event: "sheepdog", listener: (ev: SupervisorEvent) => void): this;
  on(event: "close", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  on(event: "error", listener: (err: Error) => void): this;
  on(event: string, listener: (...args: any[]) => void): this;
  once(event: "spawned", listener: (ev: SpawnedEvent) => void): this;
  once(event: "stopping", listener: (ev: StoppingEvent) => void): this;
  once(event: "escalated", listener: (ev: EscalatedEvent) => void): this;
  once(event: "exited", listener: (ev: ExitedEvent) => void): this;
  once(event: "spawnFailed", listener: (ev: SpawnFailedEvent) => void): this;
  once(event: "sheepdog", listener: (ev: SupervisorEvent) => void): this;
  once(event: "close", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  once(event: "exit", listener: (code: number | null, signal: NodeJS.Signals | null) => void): this;
  once(event: "error", listener: (err: Error) => void): this;
  once(event: string, listener: (...args: any[]) => void): this;
}

/**
 * Runs `command args` under `sheepdog run --owner <this process>`: the returned ChildProcess's
 * pid is the supervisor's, `kill()` stops the whole tree, and `close` comes after the tree is
 * gone. Exit status as docs/reference.md's table (124 for `timeout`).
 */
export function supervise(command: string, args?: readonly string[], options?: SuperviseOptions): SupervisedProcess;

/** `start` options (`sheepdog start`'s flags). */
export interface StartOptions extends CommonOptions, ContainmentOptions {
  name?: string;
  session?: string;
  /** Stop when this process dies (any process, identity-checked). */
  owner?: number;
  /** The command's working directory (`--cwd`). */
  cwd?: string;
  /** Variables added to the command's environment (`--env K=V`; values are never shown). */
  env?: Record<string, string>;
  timeout?: Duration;
  termGrace?: Duration;
  killWait?: Duration;
  /** A shell command that undoes work outside the tree, run after the stop. */
  cleanup?: string;
  cleanupTimeout?: Duration;
  /** The log cap, like `"10MiB"`. */
  logMax?: string;
  readyPort?: number;
  readyLog?: string;
  readyListen?: boolean;
  readyTimeout?: Duration;
  replace?: boolean;
  /** `"pipe"`: a stdin pipe held by the supervisor, for `send` (where the binary supports it). */
  stdin?: "pipe" | "null";
}

/** Starts `command args` in the background under its own supervisor. */
export function start(command: string, args?: readonly string[], options?: StartOptions): Promise<StartResult>;

export interface ListOptions extends CommonOptions {
  all?: boolean;
  session?: string;
  status?: string;
}

/** The entry views (`sheepdog ps`): running ones, recent failures; `all` for every one. */
export function list(options?: ListOptions): Promise<EntryView[]>;

export interface LogsOptions extends CommonOptions {
  stream?: "out" | "err" | "all";
  tail?: number;
  head?: number;
  grep?: string;
  since?: Duration;
  /** The `cursor` of a previous read: only what came after it. */
  cursor?: string;
}

export function logs(idOrName: string, options?: LogsOptions): Promise<LogsResult>;

/** Several entries at once: a session's, or every one. */
export type Selector = { session: string } | { all: true };

export interface StopOptions extends CommonOptions {
  termGrace?: Duration;
  session?: string;
  all?: boolean;
  /** With `session`: resolve to `[]` when nothing of it is left to stop (an idempotent cancel). */
  missingOk?: boolean;
}

/** Stops entries (tree, then cleanup). A failed cleanup is in the result (`ok`, `cleanupError`), not an error. */
export function stop(idOrName: string | readonly string[], options?: StopOptions): Promise<StopView[]>;
export function stop(selector: Selector & StopOptions): Promise<StopView[]>;

export interface RestartOptions extends CommonOptions {
  termGrace?: Duration;
}

export function restart(idOrName: string | readonly string[], options?: RestartOptions): Promise<RestartView[]>;

export interface UpdateOptions extends CommonOptions {
  /** The new cleanup command; `null` removes it. */
  cleanup?: string | null;
  cleanupTimeout?: Duration;
  name?: string;
}

/** Changes an entry's cleanup or name; resolves to its view after the change (with `v`). */
export function update(idOrName: string, options: UpdateOptions): Promise<UpdateResult>;

export interface WaitOptions extends CommonOptions {
  any?: boolean;
  timeout?: Duration;
  session?: string;
}

/**
 * Waits until the processes have exited (and their triggered cleanups finished); resolves to
 * `{v, waited, exitStatus}`, also when a process failed (its status is the result).
 */
export function wait(idOrName: string | readonly string[], options?: WaitOptions): Promise<WaitResult>;
export function wait(selector: { session: string } & WaitOptions): Promise<WaitResult>;

export interface ReapOptions extends CommonOptions {
  dryRun?: boolean;
}

/** After a crash: stops what supervisors that are gone left running, and records it. */
export function reap(options?: ReapOptions): Promise<ReapResult>;

export interface ClearOptions extends CommonOptions {
  force?: boolean;
}

export function clear(idOrName: string | readonly string[], options?: ClearOptions): Promise<EntryView[]>;
export function clear(selector: { finished: true } & ClearOptions): Promise<EntryView[]>;

export interface SendOptions extends CommonOptions {
  /** Close the process's stdin after the input. */
  eof?: boolean;
}

/**
 * Writes `input` to the stdin of a process started with `stdin: "pipe"` (`sheepdog send`);
 * resolves to `{v, id, bytes, eof}` once all of it is written.
 */
export function send(idOrName: string, input: string | Uint8Array, options?: SendOptions): Promise<SendResult>;

export interface EventsOptions extends CommonOptions {
  session?: string;
  id?: string;
  /**
   * The `seq` of an event seen before: resume after it (`0`: every kept event). Its decimal
   * text (`"42"`) is taken too, as callers before `seq` was typed passed it.
   */
  since?: number | string;
}

/** `sheepdog events --json` as an async iterator; leaving the loop ends the reader. */
export function events(options?: EventsOptions): AsyncGenerator<EntryEvent, void, undefined>;

/** The path of the sheepdog binary the functions run. */
export function binaryPath(): string;

/** A sheepdog command that failed: its error document and exit status. */
export class SheepdogError extends Error {
  readonly name: "SheepdogError";
  /** The error document sheepdog printed, or null when it printed none. */
  readonly document: ErrorDocument | null;
  /** The command's exit status (125 for bad input, 1, 74, 124, ...); null if it died by a signal. */
  readonly exitStatus: number | null;
  readonly signal: NodeJS.Signals | null;
  /** What the command wrote on stderr. */
  readonly stderr: string;
  /** The sheepdog arguments that failed. */
  readonly args: string[];
}
