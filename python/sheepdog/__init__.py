"""sheepdog from Python: the binaries this wheel put on PATH, and a small typed API over them.

Thin on purpose: every function runs the ``sheepdog`` binary (argv, never a shell) with
``--json`` and returns the document it printed (TypedDicts in ``sheepdog._types``); a failure
raises :class:`SheepdogError`. Durations are a number of milliseconds or sheepdog's own form
(``"250ms"``, ``"1.5s"``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import IO, Any, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._types import (
    EntryEvent,
    EntryView,
    ErrorDocument,
    LogsResult,
    ReapResult,
    RestartView,
    SendResult,
    StartResult,
    StopView,
    SupervisorEvent,
    UpdateResult,
    WaitResult,
)

__all__ = [
    "SheepdogError",
    "SpawnFailed",
    "Supervised",
    "binary_path",
    "supervise",
    "start",
    "list",
    "logs",
    "stop",
    "restart",
    "update",
    "wait",
    "reap",
    "clear",
    "send",
    "events",
]

Duration = Union[int, float, str]
_list = list


class SheepdogError(Exception):
    """A sheepdog command that failed.

    ``document`` is the error document it printed (``{"v": 1, "error": {"message", "exitStatus"}}``) or
    None; ``exit_status`` its exit status (125 for bad input, 1, 74, 124, ...; negative: killed by
    that signal); ``stderr`` what it said.
    """

    def __init__(
        self, message: str, document: Optional[ErrorDocument], exit_status: Optional[int], stderr: str, args: Sequence[str]
    ) -> None:
        super().__init__(message)
        self.message = message
        self.document = document
        self.exit_status = exit_status
        self.stderr = stderr
        self.argv = _list(args)


def binary_path() -> str:
    """The ``sheepdog`` binary: ``$SHEEPDOG_BINARY``, else the one this wheel installed, else PATH's."""
    env = os.environ.get("SHEEPDOG_BINARY")
    if env:
        return env
    for scheme in (None, f"{os.name}_user"):
        try:
            scripts = sysconfig.get_path("scripts") if scheme is None else sysconfig.get_path("scripts", scheme)
        except KeyError:
            continue
        cand = os.path.join(scripts, "sheepdog")
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("sheepdog")
    if found:
        return found
    raise SheepdogError("sheepdog: no sheepdog binary found (reinstall the wheel, or set SHEEPDOG_BINARY)", None, None, "", [])


def _dur(v: Duration) -> str:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return f"{round(v)}ms"
    return str(v)


def _env_key(k: str) -> str:
    """An ``env`` key as sheepdog takes it: a variable's name, so not empty and without ``=``, a
    newline or NUL (``{"A=B": "c"}`` would otherwise reach the command as ``A=B=c``). Raises
    ValueError."""
    if not k or any(c in k for c in "=\n\0"):
        raise ValueError(f"sheepdog: env key {k!r} is not a variable name (empty, or holds '=', a newline or NUL)")
    return k


def _flags(opts: Mapping[str, Any], table: Sequence[tuple]) -> List[str]:
    out: List[str] = []
    for key, flag, kind in table:
        v = opts.get(key)
        if v is None or v is False:
            continue
        if kind == "bool":
            out.append(flag)
        elif kind == "dur":
            out += [flag, _dur(v)]
        elif kind == "env":
            for k, x in v.items():
                out += [flag, f"{_env_key(k)}={x}"]
        else:
            out += [flag, str(v)]
    return out


def _global(state_dir: Optional[str]) -> List[str]:
    return (["--state-dir", str(state_dir)] if state_dir else []) + ["--json"]


def _call(args: List[str], state_dir: Optional[str] = None, binary: Optional[str] = None, input: Optional[bytes] = None) -> Any:
    """Runs ``sheepdog --json ARGS``; returns its document. A document that is not an error is the
    result whatever the status (``wait`` exits with the process's code, ``stop`` with 1 when a
    cleanup failed: the document says so)."""
    full = [binary or binary_path(), *_global(state_dir), *args]
    p = subprocess.run(
        full, input=input, stdin=None if input is not None else subprocess.DEVNULL, capture_output=True, check=False
    )
    stdout = p.stdout.decode("utf-8", "replace")
    stderr = p.stderr.decode("utf-8", "replace")
    doc: Any = None
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "error" not in doc and p.returncode >= 0:
        return doc
    line = next((l for l in stderr.splitlines() if l.startswith("sheepdog: ") and not l.startswith("sheepdog: warning:")), None)
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict) and doc["error"].get("message"):
        message = "sheepdog: " + str(doc["error"]["message"])
    else:
        message = line or f"sheepdog {args[0]} exited {p.returncode}"
    raise SheepdogError(message, doc if isinstance(doc, dict) else None, p.returncode, stderr, full)


def _argv(command: str, args: Sequence[str]) -> List[str]:
    if not isinstance(command, str) or not command:
        raise TypeError("sheepdog: command must be a non-empty string")
    return ["--", command, *[str(a) for a in args]]


def _targets(id_or_name: Union[str, Sequence[str], None], session: Optional[str], all: bool = False) -> List[str]:
    if isinstance(id_or_name, str):
        return [id_or_name]
    if id_or_name is not None:
        return [str(x) for x in id_or_name]
    if session is not None:
        return ["--session", session]
    if all:
        return ["--all"]
    raise TypeError("sheepdog: give an id or name, a list of them, session= or all=True")


class Supervised(subprocess.Popen):
    """The supervisor's ``Popen`` (its pid is sheepdog's), with the ``--events-fd`` events."""

    events_file: Optional[IO[bytes]]

    def events(self) -> Iterator[SupervisorEvent]:
        """The supervisor's events (``spawned``, ``stopping``, ``escalated``, ``exited``), as they
        come; ends when the supervisor has exited."""
        f = self.events_file
        if f is None:
            return
        for line in f:
            line = line.strip()
            if line:
                yield json.loads(line)

    def wait_spawned(self) -> SupervisorEvent:
        """Reads events until the command runs: returns its ``spawned`` event, or raises
        :class:`SpawnFailed` with the ``spawnFailed`` event. :meth:`events` goes on after it."""
        for ev in self.events():
            if ev.get("event") == "spawned":
                return ev
            if ev.get("event") == "spawnFailed":
                raise SpawnFailed(ev, self.args if isinstance(self.args, _list) else [str(self.args)])
        raise SheepdogError("sheepdog: the supervisor ended before it reported a spawn", None, self.poll(), "", [])


class SpawnFailed(SheepdogError):
    """The supervised command could not start: ``event`` is the ``spawnFailed`` event (``command``,
    ``errno``, ``errnoNumber``, ``exitStatus``, ``message``), so a host never parses stderr."""

    def __init__(self, event: SupervisorEvent, args: Sequence[str]) -> None:
        message = "sheepdog: " + str(event.get("message", "the command could not start"))
        super().__init__(message, None, event.get("exitStatus"), "", args)
        self.event = event


def supervise(
    command: str,
    args: Sequence[str] = (),
    *,
    owner: Union[int, bool, None] = None,
    relay_stdin: bool = False,
    on_owner_death: Optional[str] = None,
    after_provider_exit: Optional[str] = None,
    close_request: Optional[str] = None,
    lifetime: Optional[str] = None,
    on_stdin_eof: Optional[str] = None,
    stdin_grace: Optional[Duration] = None,
    term_grace: Optional[Duration] = None,
    kill_wait: Optional[Duration] = None,
    timeout: Optional[Duration] = None,
    containment: Optional[str] = None,
    memory_max: Optional[str] = None,
    pids_max: Optional[int] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
    **popen: Any,
) -> Supervised:
    """Runs ``command args`` under ``sheepdog run --owner <this process>``: a ``subprocess.Popen``
    whose pid is the supervisor's; ``terminate()`` stops the whole tree and ``wait()`` returns
    after it is gone (status as docs/reference.md's table; 124 for ``timeout``). ``owner=False`` leaves
    the owner out. Other keyword arguments go to ``Popen`` (stdin, stdout, cwd, env, ...).

    ``relay_stdin`` is ``--stdin relay``; ``on_owner_death`` (``"stop"``, ``"close-stdin"``) and
    ``after_provider_exit`` (``"grace"``, ``"kill"``) are the flags of those names. Orca's spec
    names map onto them as docs/packages.md's table says: ``close_request`` (``"stdin-end"``,
    ``"stdin-end-and-sigterm"``) relays stdin and sets ``on_owner_death``; ``lifetime``
    ``"session"`` sets ``on_stdin_eof="stop"``, ``"one-shot"`` ``after_provider_exit="kill"``.
    A spawn that fails arrives as the ``spawnFailed`` event (:meth:`Supervised.wait_spawned`
    raises :class:`SpawnFailed`)."""
    if close_request is not None:
        relay_stdin = True
        on_owner_death = on_owner_death or ("close-stdin" if close_request == "stdin-end" else "stop")
    if lifetime == "session":
        on_stdin_eof = on_stdin_eof or "stop"
    elif lifetime == "one-shot":
        after_provider_exit = after_provider_exit or "kill"
    opts = {
        "stdin": "relay" if relay_stdin else None,
        "on_owner_death": on_owner_death,
        "after_provider_exit": after_provider_exit,
        "on_stdin_eof": on_stdin_eof,
        "stdin_grace": stdin_grace,
        "term_grace": term_grace,
        "kill_wait": kill_wait,
        "timeout": timeout,
        "containment": containment,
        "memory_max": memory_max,
        "pids_max": pids_max,
    }
    run = ["run"]
    if owner is not False:
        run += ["--owner", str(os.getpid() if owner in (None, True) else owner)]
    run += _flags(
        opts,
        [
            ("stdin", "--stdin", "str"),
            ("on_owner_death", "--on-owner-death", "str"),
            ("after_provider_exit", "--after-provider-exit", "str"),
            ("on_stdin_eof", "--on-stdin-eof", "str"),
            ("stdin_grace", "--stdin-grace", "dur"),
            ("term_grace", "--term-grace", "dur"),
            ("kill_wait", "--kill-wait", "dur"),
            ("timeout", "--timeout", "dur"),
            ("containment", "--containment", "str"),
            ("memory_max", "--memory-max", "str"),
            ("pids_max", "--pids-max", "str"),
        ],
    )
    r, w = os.pipe()
    run += ["--events-fd", str(w), *_argv(command, args)]
    full = [binary or binary_path(), *(["--state-dir", str(state_dir)] if state_dir else []), *run]
    pass_fds = tuple(popen.pop("pass_fds", ())) + (w,)
    try:
        proc = Supervised(full, pass_fds=pass_fds, **popen)
    except BaseException:
        os.close(r)
        os.close(w)
        raise
    os.close(w)
    proc.events_file = os.fdopen(r, "rb")
    return proc


def start(
    command: str,
    args: Sequence[str] = (),
    *,
    name: Optional[str] = None,
    session: Optional[str] = None,
    owner: Optional[int] = None,
    cwd: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    timeout: Optional[Duration] = None,
    term_grace: Optional[Duration] = None,
    kill_wait: Optional[Duration] = None,
    cleanup: Optional[str] = None,
    cleanup_timeout: Optional[Duration] = None,
    log_max: Optional[str] = None,
    ready_port: Optional[int] = None,
    ready_log: Optional[str] = None,
    ready_listen: bool = False,
    ready_timeout: Optional[Duration] = None,
    replace: bool = False,
    stdin: Optional[str] = None,
    containment: Optional[str] = None,
    memory_max: Optional[str] = None,
    pids_max: Optional[int] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> StartResult:
    """``sheepdog start``: returns once the command runs (or is ready, with ``ready_*``)."""
    opts = dict(locals())
    a = ["start"] + _flags(
        opts,
        [
            ("name", "--name", "str"),
            ("session", "--session", "str"),
            ("owner", "--owner", "str"),
            ("cwd", "--cwd", "str"),
            ("env", "--env", "env"),
            ("timeout", "--timeout", "dur"),
            ("term_grace", "--term-grace", "dur"),
            ("kill_wait", "--kill-wait", "dur"),
            ("cleanup", "--cleanup", "str"),
            ("cleanup_timeout", "--cleanup-timeout", "dur"),
            ("log_max", "--log-max", "str"),
            ("ready_port", "--ready-port", "str"),
            ("ready_log", "--ready-log", "str"),
            ("ready_listen", "--ready-listen", "bool"),
            ("ready_timeout", "--ready-timeout", "dur"),
            ("replace", "--replace", "bool"),
            ("stdin", "--stdin", "str"),
            ("containment", "--containment", "str"),
            ("memory_max", "--memory-max", "str"),
            ("pids_max", "--pids-max", "str"),
        ],
    )
    return _call(a + _argv(command, args), state_dir, binary)


def list(  # noqa: A001 - the API's name, as in the npm package
    *,
    all: bool = False,
    session: Optional[str] = None,
    status: Optional[str] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> List[EntryView]:
    """``sheepdog ps``: the entry views (running ones, recent failures; ``all`` for every one)."""
    a = ["ps"] + _flags(
        {"all": all, "session": session, "status": status},
        [("all", "--all", "bool"), ("session", "--session", "str"), ("status", "--status", "str")],
    )
    return _call(a, state_dir, binary)["entries"]


def logs(
    id_or_name: str,
    *,
    stream: Optional[str] = None,
    tail: Optional[int] = None,
    head: Optional[int] = None,
    grep: Optional[str] = None,
    since: Optional[Duration] = None,
    cursor: Optional[str] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> LogsResult:
    """``sheepdog logs ID``: one read; pass ``cursor`` to continue after the last one."""
    opts = {"stream": stream, "tail": tail, "head": head, "grep": grep, "since": since, "cursor": cursor}
    a = ["logs", str(id_or_name)] + _flags(
        opts,
        [
            ("stream", "--stream", "str"),
            ("tail", "--tail", "str"),
            ("head", "--head", "str"),
            ("grep", "--grep", "str"),
            ("since", "--since", "dur"),
            ("cursor", "--cursor", "str"),
        ],
    )
    return _call(a, state_dir, binary)


def stop(
    id_or_name: Union[str, Sequence[str], None] = None,
    *,
    session: Optional[str] = None,
    all: bool = False,
    missing_ok: bool = False,
    term_grace: Optional[Duration] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> List[StopView]:
    """``sheepdog stop``: by id or name (or several), ``session=`` or ``all=True``. A failed
    cleanup is in the result (``ok``, ``cleanupError``), not an exception. ``session=S,
    missing_ok=True`` returns ``[]`` when nothing of the session is left to stop (an idempotent
    cancel); without it, that raises SheepdogError."""
    a = ["stop", *_targets(id_or_name, session, all)] + _flags(
        {"m": missing_ok, "t": term_grace}, [("m", "--missing-ok", "bool"), ("t", "--term-grace", "dur")]
    )
    return _call(a, state_dir, binary)["stopped"]


def restart(
    id_or_name: Union[str, Sequence[str]],
    *,
    term_grace: Optional[Duration] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> List[RestartView]:
    """``sheepdog restart``: the new entries' views (each with ``restartOf``, ``ready`` and
    ``warnings``)."""
    a = ["restart", *_targets(id_or_name, None)] + _flags({"t": term_grace}, [("t", "--term-grace", "dur")])
    return _call(a, state_dir, binary)["restarted"]


_UNSET: Any = object()


def update(
    id_or_name: str,
    *,
    cleanup: Optional[str] = _UNSET,
    cleanup_timeout: Optional[Duration] = None,
    name: Optional[str] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> UpdateResult:
    """``sheepdog update ID``: change the cleanup (``cleanup=None`` removes it) or the name;
    returns the entry's view after the change (with ``v``)."""
    a = ["update", str(id_or_name)]
    if cleanup is None:
        a.append("--no-cleanup")
    elif cleanup is not _UNSET:
        a += ["--cleanup", str(cleanup)]
    a += _flags({"ct": cleanup_timeout, "n": name}, [("ct", "--cleanup-timeout", "dur"), ("n", "--name", "str")])
    return _call(a, state_dir, binary)


def wait(
    id_or_name: Union[str, Sequence[str], None] = None,
    *,
    session: Optional[str] = None,
    any: bool = False,
    timeout: Optional[Duration] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> WaitResult:
    """``sheepdog wait``: ``{v, waited, exitStatus}``, also when a process failed (its status is
    the result)."""
    a = ["wait", *_targets(id_or_name, session)] + _flags(
        {"any": any, "t": timeout}, [("any", "--any", "bool"), ("t", "--timeout", "dur")]
    )
    return _call(a, state_dir, binary)


def reap(*, dry_run: bool = False, state_dir: Optional[str] = None, binary: Optional[str] = None) -> ReapResult:
    """``sheepdog reap``: stops what supervisors that are gone left running, and records it."""
    return _call(["reap"] + (["--dry-run"] if dry_run else []), state_dir, binary)


def clear(
    id_or_name: Union[str, Sequence[str], None] = None,
    *,
    finished: bool = False,
    force: bool = False,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> List[EntryView]:
    """``sheepdog clear``: ids/names, or ``finished=True``; the cleared entries' views."""
    if id_or_name is None and not finished:
        raise TypeError("sheepdog: clear takes an id or name, a list of them, or finished=True")
    a = ["clear", *(["--finished"] if id_or_name is None else _targets(id_or_name, None))]
    if force:
        a.append("--force")
    return _call(a, state_dir, binary)["cleared"]


def send(
    id_or_name: str,
    input: Union[str, bytes],
    *,
    eof: bool = False,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> SendResult:
    """``sheepdog send ID -``: writes ``input`` to the stdin of a process started with
    ``stdin="pipe"``; returns ``{v, id, bytes, eof}``."""
    data = input.encode() if isinstance(input, str) else bytes(input)
    a = ["send", str(id_or_name)] + (["--eof"] if eof else []) + ["-"]
    return _call(a, state_dir, binary, input=data)


def events(
    *,
    session: Optional[str] = None,
    id: Optional[str] = None,
    since: Optional[int] = None,
    state_dir: Optional[str] = None,
    binary: Optional[str] = None,
) -> Iterator[EntryEvent]:
    """``sheepdog events --json`` as an iterator; closing it (or leaving the loop) ends the reader.
    ``since`` is the ``seq`` of an event seen before: resume after it (``0``: the whole journal)."""
    a = [binary or binary_path(), *_global(state_dir), "events"] + _flags(
        {"s": session, "i": id, "c": since}, [("s", "--session", "str"), ("i", "--id", "str"), ("c", "--since", "str")]
    )
    p = subprocess.Popen(a, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    done = False
    try:
        assert p.stdout is not None
        for line in p.stdout:
            if line.strip():
                yield json.loads(line)
        done = True
    finally:
        if not done and p.poll() is None:
            p.terminate()
        err = p.stderr.read().decode("utf-8", "replace") if p.stderr else ""
        code = p.wait()
        if p.stdout:
            p.stdout.close()
        if p.stderr:
            p.stderr.close()
    if code != 0:
        line = next((l for l in err.splitlines() if l.startswith("sheepdog: ")), f"sheepdog events exited {code}")
        raise SheepdogError(line, None, code, err, a)


def _main() -> None:  # pragma: no cover - `python -m sheepdog ...` runs the binary
    path = binary_path()
    os.execv(path, [path, *sys.argv[1:]])
