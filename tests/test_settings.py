"""The settings table (csrc/backend/settings.cpp) is the one definition of every setting: the
Python Options, the ZCCL_* variables, the C++ CallConfig and README's configuration table must
all agree with it."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import threading
import typing
from pathlib import Path
from typing import Any

import pytest

import zccl_torch
from zccl_torch import _C
from zccl_torch.compressor import MODES

cfg = sys.modules["zccl_torch.config"]  # the module (zccl_torch.config is the function)
ROOT = Path(__file__).resolve().parent.parent
TABLE = _C.settings()
PY_TYPES = {"float": (float,), "int": (int,), "bool": (bool,), "choice": (str, type(None))}


def other_value(row: dict[str, Any]) -> Any:
    """An allowed value of the setting that is not its default."""
    default = row["default"]
    if row["type"] == "float":
        return default * 2 + 0.5
    if row["type"] == "int":
        step = 32 if row["name"] == "chunk_size" else 1
        return default + step
    if row["type"] == "bool":
        return not default
    return next(c for c in row["choices"] if c != default and c is not None)


def env_text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_table_is_well_formed() -> None:
    names = [row["name"] for row in TABLE]
    assert len(set(names)) == len(names)
    for row in TABLE:
        assert row["env"] == "ZCCL_" + row["name"].upper(), row
        assert isinstance(row["default"], PY_TYPES[row["type"]]), row
        assert row["doc"] and "\n" not in row["doc"] and "|" not in row["doc"], row
        assert row["requirement"].startswith("must be "), row
        if row["type"] == "choice":
            assert row["default"] in row["choices"], row
            for choice in row["choices"]:  # the documentation names every allowed value
                assert (
                    choice is None or f"`{choice}`" in row["doc"] or f'`"{choice}"`' in row["doc"]
                ), (row["name"], choice)
        else:
            assert row["choices"] == (), row


def test_options_fields_are_the_table() -> None:
    fields = dataclasses.fields(zccl_torch.Options)
    hints = typing.get_type_hints(zccl_torch.Options)  # the annotations are text (config.py)
    assert [f.name for f in fields] == [row["name"] for row in TABLE]
    defaults = zccl_torch.Options()
    for f, row in zip(fields, TABLE, strict=True):
        assert f.default == row["default"] and type(f.default) is type(row["default"]), row
        assert getattr(defaults, f.name) == row["default"]
        allowed = (str | None) if None in row["choices"] else str
        expected = {"float": float, "int": int, "bool": bool, "choice": allowed}[row["type"]]
        assert hints[f.name] == expected, (f.name, f.type)
        assert f.name in zccl_torch.Options.__doc__


def test_choices_agree() -> None:
    choices = {row["name"]: row["choices"] for row in TABLE}
    assert cfg.ALGORITHMS == choices["algorithm"]
    assert cfg.BASELINES == choices["baseline"] and cfg.BASELINES[0] is None
    assert MODES == choices["mode"]  # the compressor's modes are the backend's
    assert set(choices["baseline"]) - {None} <= set(choices["algorithm"])


@pytest.mark.parametrize("row", TABLE, ids=[row["name"] for row in TABLE])
def test_environment_variable_sets_the_field(row: dict[str, Any]) -> None:
    value = other_value(row)
    assert getattr(zccl_torch.Options.from_env({row["env"]: env_text(value)}), row["name"]) == value
    assert zccl_torch.Options.from_env({row["env"]: ""}) == zccl_torch.Options()
    with pytest.raises(ValueError, match=f"{row['env']}=.* is not a valid {row['name']}|must be"):
        zccl_torch.Options.from_env({row["env"]: "no such value"})


@pytest.mark.parametrize("row", TABLE, ids=[row["name"] for row in TABLE])
def test_cpp_config_holds_each_setting(row: dict[str, Any]) -> None:
    """A group's options and a config() block reach the C++ member the row names."""
    name, value = row["name"], other_value(row)
    shown = "algorithm" if name == "baseline" else name  # a CallConfig holds it folded
    native = zccl_torch.Options(**{name: value}).to_native()
    assert _C.resolve_call_config(native)[shown] == value
    with zccl_torch.config(**{name: value}):
        assert _C.resolve_call_config(zccl_torch.Options().to_native())[shown] == value
        assert getattr(zccl_torch.current_options(), name) == value
    for choice in row["choices"]:  # every choice reaches C++ as itself (enum order included)
        if choice is not None:
            with zccl_torch.config(**{name: choice}):
                assert _C.resolve_call_config(zccl_torch.Options().to_native())[shown] == choice
    defaults = _C.resolve_call_config(zccl_torch.Options().to_native())
    assert defaults == {r["name"]: r["default"] for r in TABLE}  # the table's defaults


@pytest.mark.parametrize("row", TABLE, ids=[row["name"] for row in TABLE])
def test_invalid_values_name_the_requirement(row: dict[str, Any]) -> None:
    bad = {"float": -1.0, "int": -1, "bool": "yes", "choice": "no such value"}[row["type"]]
    exc = TypeError if row["type"] == "bool" else ValueError
    with pytest.raises(exc, match=re.escape(f"{row['name']} {row['requirement']}, got ")):
        zccl_torch.Options(**{row["name"]: bad})
    with pytest.raises(exc, match=re.escape(f"{row['name']} {row['requirement']}")):
        _C.set_call_override({row["name"]: bad})
    assert _C.call_override() is None


@pytest.mark.parametrize(
    "row", [r for r in TABLE if r["type"] == "float"], ids=lambda r: str(r["name"])
)
def test_real_settings_name_their_true_minimum(row: dict[str, Any]) -> None:
    """The bound a real setting's message names is the one it enforces: the value named is
    allowed, one below it refused (link_gbps' message used to say ">= 0" and refuse 0)."""
    least = float(row["requirement"].rsplit(">= ", 1)[1])
    assert getattr(zccl_torch.Options(**{row["name"]: least}), row["name"]) == least
    below = least - max(abs(least) / 2, 1e-9)
    with pytest.raises(ValueError, match=re.escape(f"{row['requirement']}, got {below}")):
        zccl_torch.Options(**{row["name"]: below})


def test_cpp_rejects_incomplete_or_unknown_settings() -> None:
    native = zccl_torch.Options().to_native()
    del native["chunk_size"]
    with pytest.raises(ValueError, match="incomplete backend options"):
        _C.resolve_call_config(native)
    with pytest.raises(ValueError, match="unknown setting 'chunk_len'"):
        _C.check_settings({"chunk_len": 64})


def test_override_is_held_once_per_thread() -> None:
    assert not hasattr(cfg, "_local") and not hasattr(cfg, "_changes")
    with zccl_torch.config(error_bound=1e-3, mode="abs"):
        with zccl_torch.config(baseline="mpi"):
            assert _C.call_override() == {"error_bound": 1e-3, "mode": "abs", "baseline": "mpi"}
            seen: list[Any] = []
            thread = threading.Thread(target=lambda: seen.append(_C.call_override()))
            thread.start()
            thread.join()
            assert seen == [None]
            with zccl_torch.config(algorithm="ring") as inner:
                assert inner.effective_algorithm == "ring"  # an explicit algorithm wins
        assert _C.call_override() == {"error_bound": 1e-3, "mode": "abs"}
    assert _C.call_override() is None


def test_readme_configuration_table_is_the_table() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert cfg.markdown_table() in section, "README's table differs from markdown_table()"


# What the launchers say about the host (read once per process by the backend).
_LAUNCH_VARS = (
    "OMP_NUM_THREADS",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "LOCAL_WORLD_SIZE",
    "MPI_LOCALNRANKS",
)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"OMP_NUM_THREADS": "3"}, lambda cores: 3),
        ({"OMP_NUM_THREADS": "2,1"}, lambda cores: 2),  # a nested list: its first level
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "2"}, lambda cores: max(1, cores // 2)),
        ({"LOCAL_WORLD_SIZE": "64"}, lambda cores: max(1, cores // 64)),
        ({}, lambda cores: cores),
    ],
    ids=["omp", "omp-list", "mpirun-local-size", "torchrun-local-size", "alone"],
)
def test_automatic_threads_never_oversubscribe(env: dict[str, str], expected: Any) -> None:
    """threads = 0: OMP_NUM_THREADS when set, else this process's cores per rank of its host
    (fixed per process, so each case runs in a fresh interpreter)."""
    clean = {k: v for k, v in os.environ.items() if k not in _LAUNCH_VARS}
    done = subprocess.run(
        [sys.executable, "-c", "import zccl_torch; print(zccl_torch._C.automatic_threads())"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert int(done.stdout.strip()) == expected(len(os.sched_getaffinity(0)))


@pytest.mark.parametrize(
    ("env", "options", "expected"),
    [
        ({"OMP_NUM_THREADS": "1"}, {}, "spin"),  # one rank, one thread: a core to itself
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4096"}, {}, "sleep"),  # more ranks than cores
        ({"LOCAL_WORLD_SIZE": "4096"}, {}, "sleep"),  # torchrun says so the same way
        ({"OMP_NUM_THREADS": "1"}, {"threads": 4096}, "sleep"),  # threads beyond the cores
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "4096"}, {"wait": "spin"}, "spin"),  # asked for
        ({"OMP_NUM_THREADS": "1"}, {"wait": "sleep"}, "sleep"),
        ({"OMP_NUM_THREADS": "1", "ZCCL_WAIT": "sleep"}, None, "sleep"),  # from the environment
    ],
    ids=[
        "alone",
        "mpirun-oversubscribed",
        "torchrun-oversubscribed",
        "threads",
        "spin",
        "sleep",
        "env",
    ],
)
def test_wait_policy_auto_spins_only_with_a_core_per_thread(
    env: dict[str, str], options: dict[str, Any] | None, expected: str
) -> None:
    """wait="auto" spins when threads x ranks on the host fit the cores, else sleeps; an explicit
    choice wins (each case in a fresh interpreter: the host share is read once per process)."""
    clean = {k: v for k, v in os.environ.items() if k not in (*_LAUNCH_VARS, "ZCCL_WAIT")}
    code = (
        "import zccl_torch; "
        f"o = zccl_torch.Options.from_env() if {options is None} "
        f"else zccl_torch.Options(**{options!r}); "
        "print(zccl_torch._C.wait_policy(o.to_native()))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == expected, done.stdout + done.stderr
