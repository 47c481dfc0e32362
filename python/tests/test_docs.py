"""The Python a reader is shown: every ```python block of README.md and docs/*.md compiles, and
what it calls of the installed `sheepdog` package exists and takes the arguments it passes
(inspect.signature), and a document it indexes (``sheepdog.wait(x)["exitStatus"]``, or a name
bound to one, or a loop over a list of them) has that key. Checked in the venv's python, against
the wheel. A block that cannot compile for a good reason says so in its info string: ```` ```python
norun: REASON ````. The TypeScript blocks are npm/tests/docs.test.mjs's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pages():
    return ["README.md"] + [f"docs/{p.name}" for p in sorted((REPO / "docs").glob("*.md"))]


def blocks(text):
    """The fenced blocks of a page: (info, text, line of its first line, 1-based)."""
    out, open_ = [], None
    for i, line in enumerate(text.split("\n")):
        t = line.lstrip()
        if open_ is None:
            fence = next((f for f in ("````", "```") if t.startswith(f)), None)
            if fence:
                open_ = (fence, t[len(fence) :].strip(), [], i + 2)
        elif t.startswith(open_[0]) and not t[len(open_[0]) :].strip():
            out.append((open_[1], "\n".join(open_[2]), open_[3]))
            open_ = None
        else:
            open_[2].append(line)
    return out


# Run by the venv's python: argv[1] is a JSON list of [where, source], the source padded so its
# line numbers are the page's. Prints a JSON list of what is wrong.
CHECK = r'''
import ast, inspect, json, sys, typing
import sheepdog

def keys(tp):
    """The keys of a TypedDict type, or None when tp is not one."""
    if isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__"):
        return set(typing.get_type_hints(tp))
    if typing.get_origin(tp) is typing.Union:  # a union of TypedDicts (an event): any one's key
        ks = [keys(a) for a in typing.get_args(tp)]
        return set().union(*ks) if all(k is not None for k in ks) else None
    return None

def returns(f):
    try:
        return typing.get_type_hints(f).get("return")
    except Exception:
        return None

bad = []
for where, src in json.loads(sys.argv[1]):
    try:
        tree = ast.parse(src, where)
        compile(tree, where, "exec")
    except SyntaxError as e:
        bad.append(f"{where}: line {e.lineno}: {e.msg}")
        continue
    mods, names = set(), {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Import):
            mods |= {a.asname or a.name for a in n.names if a.name == "sheepdog"}
        elif isinstance(n, ast.ImportFrom) and n.module == "sheepdog":
            for a in n.names:
                if not hasattr(sheepdog, a.name):
                    bad.append(f"{where}: line {n.lineno}: sheepdog has no {a.name}")
                names[a.asname or a.name] = a.name

    def target(f):
        """The sheepdog attribute an expression names, or None."""
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in mods:
            return f.attr
        if isinstance(f, ast.Name) and f.id in names:
            return names[f.id]
        return None

    doc = {}  # a name bound to a call's result -> the TypedDict keys of that result
    def result(e, elem=False):
        if isinstance(e, ast.Call) and (a := target(e.func)) and callable(getattr(sheepdog, a, None)):
            tp = returns(getattr(sheepdog, a))
            if elem:
                args = typing.get_args(tp) if typing.get_origin(tp) in (list, typing.List) else ()
                tp = args[0] if args else None
            return keys(tp) if tp is not None else None
        if isinstance(e, ast.Name):
            return None if elem else doc.get(e.id)
        return None

    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            if (k := result(n.value)) is not None:
                doc[n.targets[0].id] = k
        elif isinstance(n, (ast.For, ast.comprehension)) and isinstance(n.target, ast.Name):
            if (k := result(n.iter, elem=True)) is not None:
                doc[n.target.id] = k
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and (a := target(n)) and not hasattr(sheepdog, a):
            bad.append(f"{where}: line {n.lineno}: sheepdog has no {a}")
        if isinstance(n, ast.Call) and (a := target(n.func)) and callable(getattr(sheepdog, a, None)):
            if any(isinstance(x, ast.Starred) for x in n.args) or any(k.arg is None for k in n.keywords):
                continue  # *args / **kw: what they hold is not known here
            try:
                inspect.signature(getattr(sheepdog, a)).bind(*n.args, **{k.arg: k.value for k in n.keywords})
            except TypeError as e:
                bad.append(f"{where}: line {n.lineno}: sheepdog.{a}(...): {e}")
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            k = result(n.value)
            if k is not None and n.slice.value not in k:
                bad.append(f"{where}: line {n.lineno}: [{n.slice.value!r}]: not a key of that document ({sorted(k)})")
print(json.dumps(bad))
'''


def test_every_python_block_of_the_readme_and_docs_compiles_and_calls_the_api_as_it_is(venv):
    found, bad = [], []
    for page in pages():
        for info, text, line in blocks((REPO / page).read_text()):
            if info.split(" ")[0] != "python":
                continue
            if "norun:" in info:
                if not info.split("norun:", 1)[1].strip():
                    bad.append(f"{page}:{line}: `norun:` without a reason")
                continue
            found.append([f"{page}:{line}", "\n" * (line - 1) + text + "\n"])
    assert bad == []
    # The README's and the packages page's examples at least: a parser that finds none checks nothing.
    assert {w.split(":")[0] for w, _ in found} >= {"README.md", "docs/packages.md"}, found
    r = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, json.dumps(found)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [], "\n".join(json.loads(r.stdout))


def test_the_block_check_sees_a_wrong_keyword_a_missing_function_and_a_wrong_key(venv):
    src = (
        "import sheepdog\n"
        "from sheepdog import stop\n"
        "sheepdog.start('x', redy_port=1)\n"
        "sheepdog.nope()\n"
        "w = sheepdog.wait('x')\n"
        "print(w['exit_status'], [e['pid'] for e in sheepdog.list()])\n"
        "stop(session='s', missing_ok=True)\n"
    )
    r = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK, json.dumps([["t", src]])], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert len(got) == 3, got
    assert any("line 3" in g and "redy_port" in g for g in got), got
    assert any("sheepdog has no nope" in g for g in got), got
    assert any("'exit_status'" in g for g in got), got
