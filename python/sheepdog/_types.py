"""The JSON documents sheepdog prints, as TypedDicts.

This is the one file ``scripts/gen-types`` writes from ``schema/*.json`` when the repository has
that directory (the schema issue); until then it is written by hand, for the fields the API and
README.md describe. Field names are sheepdog's own (camelCase). Times are ms since the Unix epoch
unless the name says otherwise; durations are ms (``...Ms``); sizes are bytes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional, TypedDict, Union

Status = Literal["starting", "running", "exited", "killed", "stopped", "timedOut", "orphaned", "reaped", "lost"]
Containment = Literal["cgroup", "subreaper", "group"]
Trigger = Literal["signal", "owner", "stdinEof", "timeout", "supervisorKilled", "providerExited"]


class CleanupConfig(TypedDict):
    command: str
    timeoutMs: int


class CleanupResult(TypedDict):
    exitCode: Optional[int]
    signal: Optional[str]
    timedOut: bool
    durationMs: int
    output: str
    ranBy: str


class StopTimings(TypedDict):
    stdinGraceMs: int
    termGraceMs: int
    killWaitMs: int
    maxStopMs: int


class LogPaths(TypedDict):
    stdout: str
    stderr: str
    combined: str


class _EntryContainment(TypedDict, total=False):
    containment: Optional[Containment]
    containmentReason: Optional[str]
    cgroup: Optional[str]
    cgroupInode: Optional[int]
    usage: Optional[Dict[str, Optional[int]]]


class EntryView(_EntryContainment):
    """The one entry view every command prints."""

    id: str
    name: str
    nameGiven: bool
    sessionId: Optional[str]
    status: Status
    statusText: str
    exitCode: Optional[int]
    signal: Optional[str]
    pid: Optional[int]
    pgid: Optional[int]
    supervisorPid: Optional[int]
    ownerPid: Optional[int]
    startedAt: int
    endedAt: Optional[int]
    commandPreview: str
    argv: List[str]
    cwd: str
    envKeys: List[str]
    ports: List[int]
    cleanup: Optional[CleanupConfig]
    cleanupResult: Optional[CleanupResult]
    cleanupStartedAt: Optional[int]
    timeoutMs: Optional[int]
    stop: StopTimings
    stopReason: Optional[str]
    treeGone: Optional[bool]
    logMaxBytes: Optional[int]
    restartOf: Optional[str]
    logs: LogPaths


class StartWarning(TypedDict):
    """Advice ``start`` gives about a command (a "nudge")."""

    kind: str
    message: str
    matched: str


class StartResult(EntryView):
    ready: Optional[Dict[str, Any]]
    warnings: List[StartWarning]


class StopView(EntryView):
    alreadyFinished: bool
    ok: bool
    cleanupError: Optional[str]


class WaitedView(EntryView):
    finished: bool
    exitStatus: Optional[int]
    lastLines: List[str]


class WaitResult(TypedDict):
    waited: List[WaitedView]
    exitCode: Optional[int]


class LogsResult(TypedDict):
    id: str
    stream: Literal["out", "err", "all"]
    lines: List[str]
    cursor: str
    truncated: bool
    eof: bool
    skippedLines: int
    path: str


class ReapAction(TypedDict):
    id: str
    name: str
    action: str
    signalled: bool
    treeGone: Optional[bool]
    reason: Optional[str]
    entry: EntryView


class ReapResult(TypedDict):
    dryRun: bool
    actions: List[ReapAction]


class ErrorBody(TypedDict):
    message: str
    exitCode: int


class ErrorDocument(TypedDict):
    error: ErrorBody


#: One ``--events-fd`` line (``spawned``, ``stopping``, ``escalated``, ``exited``).
SupervisorEvent = Dict[str, Any]
#: One line of ``sheepdog events --json``.
EntryEvent = Dict[str, Any]
Json = Union[Dict[str, Any], List[Any]]
