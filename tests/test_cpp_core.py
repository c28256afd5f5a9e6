"""C++ tests of the torch-free compressor core (csrc/compress), run under ASan + UBSan.

Builds, into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only runs the programs):

* ``san``        -O1 -g -fsanitize=address,undefined, portable kernels (scalar, table CRC)
* ``san-native`` the same with -march=native (AVX2 kernels and hardware CRC on x86-64 with AVX2)
* ``o2``         -O2 -Wall -Wextra -Werror, no sanitizers (the core stays warning-clean)
* ``o2-native``  -O2 -march=native -ffp-contract=fast: FMA contraction allowed in the core

and runs ``tests/cpp/core_test.cpp`` (round trips, strict bound, determinism, chunking, shapes,
progress, argument errors) and ``tests/cpp/fuzz_decoder.cpp`` (random, mutated, resealed and
synthesized streams through every decoder entry point) under the sanitizers, and checks that the
four builds produce byte-identical streams and decoded values (``core_test --digest``).

The test programs themselves are compiled with -ffp-contract=off so their input data does not
depend on the build; only the core's flags vary.

Environment knobs: ``CI=true`` (shorter runs), ``ZCCL_FUZZ_SEED``, ``ZCCL_FUZZ_ITERS``,
``ZCCL_CXX`` (compiler, default g++). A failing fuzz input is saved in tests/cpp/bin/ and can be
replayed with ``tests/cpp/bin/fuzz_decoder-san --replay FILE``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE_DIR = ROOT / "csrc" / "compress"
CPP_DIR = ROOT / "tests" / "cpp"
BIN_DIR = CPP_DIR / "bin"

CXX = shutil.which(os.environ.get("ZCCL_CXX", "g++"))
IN_CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

pytestmark = pytest.mark.skipif(CXX is None, reason="g++ not found: the C++ core tests need it")

COMMON = ["-std=c++17", "-fopenmp", "-Wall", "-Wextra", "-Werror", f"-I{CORE_DIR}"]
SANITIZE = [
    "-O1",
    "-g",
    "-fno-omit-frame-pointer",
    "-fsanitize=address,undefined,float-cast-overflow",
    "-fno-sanitize-recover=all",
    "-D_GLIBCXX_ASSERTIONS",
    "-D_GLIBCXX_SANITIZE_VECTOR",
]
SANITIZE_LINK = ["-fsanitize=address,undefined,float-cast-overflow"]
VARIANTS = {
    # name: (compile flags, link flags, test-program object variant)
    "san": (SANITIZE, SANITIZE_LINK, "san"),
    "san-native": ([*SANITIZE, "-march=native"], SANITIZE_LINK, "san"),
    "o2": (["-O2"], [], "o2"),
    "o2-native": (["-O2", "-march=native", "-ffp-contract=fast"], [], "o2"),
}
TEST_ONLY_FLAGS = ["-ffp-contract=off"]

RUN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1",
    # abort_on_error: the fuzzer's SIGABRT handler then saves the input that triggered a report.
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:abort_on_error=1",
    # The machines this runs on have few cores: waiting threads should sleep, not spin.
    "OMP_WAIT_POLICY": "passive",
}

COMPILE_TIMEOUT = 600
CORE_TEST_TIMEOUT = 600
FUZZ_TIMEOUT = 600


def _core_sources() -> list[Path]:
    return sorted(CORE_DIR.glob("*.cpp"))


def _headers() -> list[Path]:
    return sorted(CORE_DIR.glob("*.h")) + sorted(CPP_DIR.glob("*.h"))


@functools.cache
def _compiler_id() -> str:
    out = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=False)
    return CXX + "\n" + out.stdout


@functools.cache
def _native_supported() -> bool:
    out = subprocess.run(
        [CXX, "-march=native", "-dM", "-E", "-x", "c++", "-"],
        input="",
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode == 0


def _key(*parts: object) -> str:
    h = hashlib.sha256(_compiler_id().encode())
    for part in parts:
        if isinstance(part, Path):
            h.update(str(part).encode())
            h.update(part.read_bytes())
        else:
            h.update(repr(part).encode())
    return h.hexdigest()[:16]


class BuildError(Exception):
    pass


def _run_compiler(cmd: list[str], out: Path) -> None:
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    proc = subprocess.run(
        [*cmd, "-o", str(tmp)], capture_output=True, text=True, timeout=COMPILE_TIMEOUT, check=False
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise BuildError(f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    os.replace(tmp, out)  # atomic: concurrent pytest runs never see half-written files


def _object(src: Path, flags: list[str], tag: str) -> tuple[list[str], Path]:
    headers = _headers()
    key = _key(flags, src, *headers)
    out = BIN_DIR / f"{src.stem}-{tag}-{key}.o"
    return [CXX, *COMMON, *flags, "-c", str(src)], out


def _compile_all(jobs: list[tuple[list[str], Path]]) -> None:
    todo = [(cmd, out) for cmd, out in jobs if not out.exists()]
    if not todo:
        return
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        futures = [pool.submit(_run_compiler, cmd, out) for cmd, out in todo]
        errors = []
        for f in futures:
            try:
                f.result()
            except BuildError as e:
                errors.append(str(e))
    if errors:
        raise BuildError("\n\n".join(errors))


def _prune_stale(jobs: list[tuple[list[str], Path]]) -> None:
    """Removes objects of the same source and variant built from older sources or flags."""
    for _, out in jobs:
        stem_tag = out.name[: -len("-0123456789abcdef.o")]
        pattern = re.compile(re.escape(stem_tag) + r"-[0-9a-f]{16}\.o")
        for old in BIN_DIR.glob(stem_tag + "-*.o"):
            if old != out and pattern.fullmatch(old.name):
                old.unlink(missing_ok=True)


@functools.cache
def build(variant: str) -> dict[str, Path]:
    """Builds core_test and fuzz_decoder for a variant; returns {program: path}."""
    BIN_DIR.mkdir(parents=True, exist_ok=True)
    flags, link_flags, test_variant = VARIANTS[variant]
    test_flags = VARIANTS[test_variant][0] + TEST_ONLY_FLAGS
    core = [_object(src, flags, variant) for src in _core_sources()]
    if not core:
        raise BuildError(f"no sources in {CORE_DIR}")
    progs = {
        name: _object(CPP_DIR / f"{name}.cpp", test_flags, test_variant + "-test")
        for name in ("core_test", "fuzz_decoder")
    }
    _compile_all(core + list(progs.values()))
    _prune_stale(core + list(progs.values()))
    result = {}
    for name, (_, obj) in progs.items():
        objs = [obj] + [o for _, o in core]
        exe = BIN_DIR / f"{name}-{variant}"
        stamp = BIN_DIR / f"{name}-{variant}.key"
        key = _key(link_flags, *[o.name for o in objs])
        if not exe.exists() or not stamp.exists() or stamp.read_text() != key:
            _run_compiler([CXX, "-fopenmp", *link_flags, *map(str, objs)], exe)
            stamp.write_text(key)
        result[name] = exe
    return result


def _build_or_fail(variant: str) -> dict[str, Path]:
    if variant.endswith("-native") and not _native_supported():
        pytest.skip(f"{CXX} does not accept -march=native on this machine")
    try:
        return build(variant)
    except BuildError as e:
        pytest.fail(f"build of variant {variant!r} failed:\n{e}", pytrace=False)


def _run(cmd: list[str], timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.update(RUN_ENV)
    try:
        return subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=BIN_DIR, check=False
        )
    except subprocess.TimeoutExpired as e:
        out = (
            (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout
        )
        pytest.fail(f"{' '.join(cmd)} timed out after {timeout}s\n{out or ''}", pytrace=False)


def _tail(text: str, n: int = 6000) -> str:
    return text if len(text) <= n else "...\n" + text[-n:]


def _assert_ok(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        pytest.fail(
            f"{what} exited with {proc.returncode}\n--- stdout ---\n{_tail(proc.stdout)}"
            f"\n--- stderr ---\n{_tail(proc.stderr)}",
            pytrace=False,
        )


# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["o2", "o2-native"])
def test_core_builds_warning_clean(variant):
    """The core and the test programs compile at -O2 with -Wall -Wextra -Werror."""
    progs = _build_or_fail(variant)
    assert all(p.exists() for p in progs.values())


@pytest.mark.parametrize("variant", ["san", "san-native"])
def test_core_under_sanitizers(variant):
    progs = _build_or_fail(variant)
    # The large (~1e6 values) cases once, on the portable build outside CI.
    quick = IN_CI or variant != "san"
    cmd = [str(progs["core_test"])] + (["--quick"] if quick else [])
    proc = _run(cmd, CORE_TEST_TIMEOUT)
    _assert_ok(proc, " ".join(cmd))
    assert "core_test: all passed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("variant", ["san", "san-native"])
def test_fuzz_decoder_under_sanitizers(variant):
    progs = _build_or_fail(variant)
    seed = os.environ.get("ZCCL_FUZZ_SEED", "20240611" if variant == "san" else "777")
    default_iters = (
        {"san": 30000, "san-native": 15000} if not IN_CI else {"san": 10000, "san-native": 5000}
    )
    iters = int(os.environ.get("ZCCL_FUZZ_ITERS", default_iters[variant]))
    cmd = [str(progs["fuzz_decoder"]), "--seed", seed, "--iters", str(iters), "--out", str(BIN_DIR)]
    proc = _run(cmd, FUZZ_TIMEOUT)
    _assert_ok(proc, " ".join(cmd))
    m = re.search(r"plain mutations: (\d+), rejected: (\d+)", proc.stdout)
    r = re.search(r"resealed mutations: (\d+)", proc.stdout)
    d = re.search(r"decoder calls on mutated streams: (\d+)", proc.stdout)
    assert m and r and d, proc.stdout
    plain, rejected, resealed = int(m.group(1)), int(m.group(2)), int(r.group(1))
    # Meaningful even in CI: thousands of mutated streams, tens of thousands of decoder calls.
    assert plain + resealed >= iters // 2, proc.stdout
    assert int(d.group(1)) >= 2 * iters, proc.stdout
    # Every mutation of a checksummed stream must be rejected by the whole-stream decoder.
    assert rejected == plain, proc.stdout


def test_streams_identical_across_builds():
    """Scalar and AVX2 kernels (and FMA contraction) give byte-identical streams and values."""
    digests = {}
    for variant in ("o2", "o2-native"):
        if variant.endswith("-native") and not _native_supported():
            continue
        progs = _build_or_fail(variant)
        proc = _run([str(progs["core_test"]), "--digest"], CORE_TEST_TIMEOUT)
        _assert_ok(proc, f"core_test-{variant} --digest")
        m = re.search(r"DIGEST ([0-9a-f]+)", proc.stdout)
        assert m, proc.stdout
        digests[variant] = m.group(1)
    if len(digests) < 2:
        pytest.skip(f"{CXX} does not accept -march=native: nothing to compare with")
    assert len(set(digests.values())) == 1, f"streams differ between builds: {digests}"
