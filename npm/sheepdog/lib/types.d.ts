// The JSON documents sheepdog prints, as TypeScript types.
//
// This is the one file `scripts/gen-types` writes from `schema/*.json` when the repository has
// that directory (the schema issue); until then it is written by hand, for the fields the API
// and README.md describe. Field names are sheepdog's own (camelCase). Times are ms since the
// Unix epoch unless the name says otherwise; durations are ms (`...Ms`); sizes are bytes.

/** One status token (README: "One JSON contract"). */
export type Status =
  | "starting"
  | "running"
  | "exited"
  | "killed"
  | "stopped"
  | "timedOut"
  | "orphaned"
  | "reaped"
  | "lost";

/** The containment tier that keeps a tree. */
export type Containment = "cgroup" | "subreaper" | "group";

/** A cleanup command as configured. */
export interface CleanupConfig {
  command: string;
  timeoutMs: number;
}

/** How a cleanup ran. */
export interface CleanupResult {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  durationMs: number;
  output: string;
  ranBy: string;
  [key: string]: unknown;
}

/** Recorded stop timings (ms). */
export interface StopTimings {
  stdinGraceMs: number;
  termGraceMs: number;
  killWaitMs: number;
  maxStopMs: number;
}

/** A cgroup-tier entry's usage; null fields where a controller is absent. */
export interface Usage {
  cpuMs: number | null;
  memoryBytes: number | null;
  tasks: number | null;
}

/** The one entry view every command prints (`ps` entries, `stop` stopped, ...). */
export interface EntryView {
  id: string;
  name: string;
  nameGiven: boolean;
  sessionId: string | null;
  status: Status;
  statusText: string;
  exitCode: number | null;
  signal: string | null;
  pid: number | null;
  pgid: number | null;
  supervisorPid: number | null;
  ownerPid: number | null;
  startedAt: number;
  endedAt: number | null;
  commandPreview: string;
  argv: string[];
  cwd: string;
  envKeys: string[];
  ports: number[];
  cleanup: CleanupConfig | null;
  cleanupResult: CleanupResult | null;
  cleanupStartedAt: number | null;
  timeoutMs: number | null;
  stop: StopTimings;
  stopReason: string | null;
  treeGone: boolean | null;
  logMaxBytes: number | null;
  restartOf: string | null;
  logs: { stdout: string; stderr: string; combined: string };
  containment?: Containment | null;
  containmentReason?: string | null;
  cgroup?: string | null;
  cgroupInode?: number | null;
  usage?: Usage | null;
  [key: string]: unknown;
}

/** Advice `start` gives about a command (a "nudge"): work it hides from the tree, or outside it. */
export interface Warning {
  kind: "stoppedOnExit" | "outsideTree" | (string & {});
  message: string;
  matched: string;
}

/** The readiness outcome of `start`/`restart` with a `--ready-*` option. */
export interface ReadyOutcome {
  ok: boolean;
  afterMs: number;
  matched: string | null;
  port: number | null;
  reason?: "exited" | "timeout";
  output?: string[];
  [key: string]: unknown;
}

/** The readiness configuration an entry was started with. */
export interface ReadyConfig {
  port: number | null;
  log: string | null;
  listen: boolean;
  timeoutMs: number;
}

/** `start --json`: the entry view, the readiness outcome (with `--ready-*`) and the warnings. */
export interface StartResult extends EntryView {
  ready: ReadyOutcome | ReadyConfig | null;
  warnings: Warning[];
}

/** `stop --json` `stopped[]`. */
export interface StopView extends EntryView {
  alreadyFinished: boolean;
  treeGone: boolean | null;
  ok: boolean;
  /** The cleanup's failure line, or null. */
  cleanupError: string | null;
}

/** `restart --json` `restarted[]`. */
export interface RestartView extends EntryView {
  restartOf: string;
}

/** `wait --json` `waited[]`. */
export interface WaitedView extends EntryView {
  finished: boolean;
  exitStatus: number | null;
  lastLines: string[];
}

/** `wait --json`. */
export interface WaitResult {
  waited: WaitedView[];
  exitCode: number | null;
  [key: string]: unknown;
}

/** `logs --json`. */
export interface LogsResult {
  id: string;
  stream: "out" | "err" | "all";
  lines: string[];
  /** Pass to the next `logs` call to get only what came after. */
  cursor: string;
  truncated: boolean;
  /** The entry is final and the read reached the end: stop polling. */
  eof: boolean;
  skippedLines: number;
  path: string;
  [key: string]: unknown;
}

/** `reap --json` `actions[]`. */
export interface ReapAction {
  id: string;
  name: string;
  action: string;
  signalled: boolean;
  treeGone: boolean | null;
  reason: string | null;
  entry: EntryView;
  [key: string]: unknown;
}

/** `reap --json`. */
export interface ReapResult {
  dryRun: boolean;
  actions: ReapAction[];
  [key: string]: unknown;
}

/** The error document every `--json` command prints on failure. */
export interface ErrorDocument {
  error: { message: string; exitCode: number; [key: string]: unknown };
}

/** What ended a supervisor's work (`--events-fd` `trigger`). */
export type Trigger = "signal" | "owner" | "stdinEof" | "timeout" | "supervisorKilled" | "providerExited";

/** `--events-fd` `spawned`. */
export interface SpawnedEvent {
  event: "spawned";
  pid: number;
  pgid: number;
  maxStopMs: number;
  containment: Containment | null;
  containmentReason: string | null;
  cgroup: string | null;
  cgroupInode: number | null;
}

/** `--events-fd` `stopping`. */
export interface StoppingEvent {
  event: "stopping";
  trigger: Trigger;
  signal?: string;
}

/** `--events-fd` `escalated`. */
export interface EscalatedEvent {
  event: "escalated";
  signal: "SIGKILL";
  remaining: number;
}

/** `--events-fd` `exited`: `code`/`signal` describe the command, `status` sheepdog's own exit. */
export interface ExitedEvent {
  event: "exited";
  code: number | null;
  signal: string | null;
  treeGone: boolean;
  escalated: boolean;
  trigger: Trigger | null;
  status: number | string;
}

/** One `--events-fd` line. */
export type SupervisorEvent = SpawnedEvent | StoppingEvent | EscalatedEvent | ExitedEvent;

/** One line of `sheepdog events --json` (the schema issue defines the full set). */
export interface EntryEvent {
  event: string;
  id?: string;
  cursor?: string;
  [key: string]: unknown;
}
