"""The package's types, as a user's type checker sees them: the package and code written as a
user writes it pass ``mypy --strict`` (pyproject.toml), mistakes in such code are caught, and the
stub of the native extension (``zccl_torch/_C.pyi``) says what the built module takes and
returns. test_install.py checks the same from a wheel installed elsewhere (py.typed)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest

from zccl_torch import _C
from zccl_torch.config import (
    SETTINGS,
    OptionChanges,
    Options,
    _annotation_text,
    _check_changes_match,
    _with_settings,
)

ROOT = Path(__file__).resolve().parent.parent
STUB = ROOT / "zccl_torch" / "_C.pyi"
MISUSE = ROOT / "tests" / "typecheck" / "misuse.py"


def run_mypy(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def expected_errors(path: Path) -> set[tuple[int, str]]:
    """The (line, mypy error code) pairs a file marks with ``# E: code``."""
    marked = set()
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        found = re.search(r"# E: ([\w-]+)\s*$", line)
        if found:
            marked.add((number, found.group(1)))
    return marked


def reported_errors(report: str, path: Path) -> set[tuple[int, str]]:
    pattern = rf"{re.escape(path.name)}:(\d+): error: .*\[([\w-]+)\]$"
    return {(int(n), code) for n, code in re.findall(pattern, report, flags=re.MULTILINE)}


def test_package_and_user_code_pass_mypy_strict() -> None:
    done = run_mypy()  # files and strictness from pyproject.toml
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout, done.stdout


def test_mistakes_in_user_code_are_caught() -> None:
    """Each marked line draws its error and nothing else does: a type that grew to Any (say a
    stub gone missing, or Options' fields no longer written out) fails here."""
    done = run_mypy(str(MISUSE.relative_to(ROOT)))
    want = expected_errors(MISUSE)
    assert len(want) >= 8
    assert reported_errors(done.stdout, MISUSE) == want, done.stdout + done.stderr


def test_stub_names_what_the_module_has() -> None:
    """mypy's stubtest: every name of the built module is in the stub and the reverse. It cannot
    read pybind11's signatures (the next test does) and reports pybind11's own metaclass for
    each class (allowed by name)."""
    here = ROOT / "tests" / "typecheck"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy.stubtest",
            "zccl_torch._C",
            "--allowlist",
            str(here / "stubtest_allowlist.txt"),
            "--mypy-config-file",
            str(here / "stubtest.ini"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# pybind11 spells some types longer than the stub, which names them once at its top.
_SPELLINGS = {
    "typing.SupportsInt | typing.SupportsIndex": "_Int",
    "typing.SupportsFloat | typing.SupportsIndex": "_Float",
    "collections.abc.Sequence": "Sequence",
    "torch._C._distributed_c10d.Backend": "Backend",
    "zccl_torch._C.TcpListener": "TcpListener",
}


def _pybind_type(text: str) -> str:
    for long, short in _SPELLINGS.items():
        text = text.replace(long, short)
    return text.strip()


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def pybind_signature(doc: str) -> tuple[list[tuple[str, str, Any]], str]:
    """([(name, type, default or ...)], return type) from the first line of pybind11's doc."""
    found = re.match(r"\w+\((.*)\) -> (.+)$", doc.splitlines()[0])
    assert found, doc
    params = []
    for part in _split_top_level(found.group(1)):
        head, _, default = part.partition(" = ")
        name, _, kind = head.partition(": ")
        params.append((name, _pybind_type(kind), ast.literal_eval(default) if default else ...))
    return params, _pybind_type(found.group(2))


def stub_signatures() -> dict[str, tuple[list[tuple[str, str, Any]], str]]:
    """Each function of the stub (TcpListener.__init__ too) as pybind_signature gives it."""
    out = {}
    tree = ast.parse(STUB.read_text())
    nodes: list[tuple[str, ast.FunctionDef]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            nodes.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            nodes += [
                (f"{node.name}.{f.name}", f) for f in node.body if isinstance(f, ast.FunctionDef)
            ]
    for name, fn in nodes:
        args = fn.args.args
        defaults = [...] * (len(args) - len(fn.args.defaults)) + [
            ast.literal_eval(d) for d in fn.args.defaults
        ]
        params = [
            (a.arg, ast.unparse(a.annotation) if a.annotation else "", d)
            for a, d in zip(args, defaults, strict=True)
        ]
        out[name] = (params, ast.unparse(fn.returns) if fn.returns else "")
    return out


def types_agree(pybind: str, stub: str) -> bool:
    """The stub's type is pybind11's, or refines one pybind11 leaves open (object, dict, list)."""
    if pybind == stub or pybind == "object":
        return True
    return pybind in ("dict", "list") and stub.startswith(f"{pybind}[")


def test_stub_signatures_match_the_bindings() -> None:
    """Parameter names, order, defaults and types of every function the stub declares against
    the signature pybind11 reports (csrc/python/bindings.cpp): a parameter renamed or added in
    C++, a default changed, or a type changed, fails here."""
    stub = stub_signatures()
    assert len(stub) >= 30, sorted(stub)  # the parser found them
    for name, (stub_params, stub_return) in stub.items():
        if name == "TcpListener.address":
            continue
        obj: Any = _C
        for part in name.split("."):
            obj = getattr(obj, part)
        params, returns = pybind_signature(obj.__doc__)
        if name.endswith("__init__"):
            params = params[1:]  # self
            stub_params = stub_params[1:]
        assert [p[0] for p in stub_params] == [p[0] for p in params], name
        assert [p[2] for p in stub_params] == [p[2] for p in params], name
        for (arg, pybind_kind, _), (_, stub_kind, _) in zip(params, stub_params, strict=True):
            assert types_agree(pybind_kind, stub_kind), (name, arg, pybind_kind, stub_kind)
        assert types_agree(returns, stub_return), (name, returns, stub_return)


def test_stub_constants_have_their_types() -> None:
    tree = ast.parse(STUB.read_text())
    declared = {
        node.target.id: ast.unparse(node.annotation)
        for node in tree.body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and not node.target.id.startswith("_")
    }
    assert declared, "no constants in the stub"
    for name, kind in declared.items():
        assert type(getattr(_C, name)).__name__ == kind, (name, kind)


def test_options_fields_must_match_the_settings_table() -> None:
    """Options writes its fields out for type checkers; a field that differs from the C++ table
    (name, type, default, order, one missing or extra) fails the import, naming it."""
    table = {s.name: s for s in SETTINGS}

    def declare(**changes: Any) -> type:
        fields = {name: (_annotation_text(s), s.default) for name, s in table.items()}
        fields.update(changes)
        body: dict[str, Any] = {n: d for n, (_, d) in fields.items() if d is not ...}
        body["__annotations__"] = {n: k for n, (k, _) in fields.items() if k is not ...}
        body["__doc__"] = "Doc."
        return type("Declared", (), body)

    _with_settings(declare())  # the table itself passes
    # Without `wait`, every later field moves up one place: the table's last is then unmatched.
    last = list(table)[-1]
    for changes, named in (
        ({"error_bound": ("float", 1e-3)}, "error_bound defaults to 0.001"),
        ({"threads": ("float", 0)}, "('threads', 'float') != ('threads', 'int')"),
        ({"spare": ("int", 1)}, "only in Options: ('spare', 'int')"),
        ({"wait": (..., ...)}, f"only in the table: ('{last}', '{_annotation_text(table[last])}')"),
        ({"check_agreement": ("bool", 1)}, "check_agreement defaults to 1"),
    ):
        with pytest.raises(RuntimeError, match=re.escape(named)):
            _with_settings(declare(**changes))


def test_config_changes_must_match_options() -> None:
    """config()'s keyword arguments are typed by OptionChanges, written out too: the import
    fails if they differ from Options' fields, naming each difference."""
    _check_changes_match(OptionChanges, Options)

    class Fewer(TypedDict, total=False):
        error_bound: float

    with pytest.raises(RuntimeError, match=r"Fewer' fields differ .*threads: missing != <class"):
        _check_changes_match(Fewer, Options)

    class Retyped(OptionChanges, total=False):
        spare: int

    with pytest.raises(RuntimeError, match=r"spare: <class 'int'> != missing"):
        _check_changes_match(Retyped, Options)
