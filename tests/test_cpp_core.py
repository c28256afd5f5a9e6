"""C++ tests of the torch-free compressor core (csrc/compress), run under ASan + UBSan.

Builds, into tests/cpp/bin/ (git-ignored; objects are cached by a hash of compiler, flags and
sources, so a rerun after no change only runs the programs):

* ``san``        -O1 -g -fsanitize=address,undefined, portable kernels (scalar, table CRC)
* ``san-native`` the same with -march=native (AVX2 kernels and hardware CRC on x86-64 with AVX2)
* ``o2``         -O2 -Wall -Wextra -Werror, no sanitizers (the core stays warning-clean)
* ``o2-native``  -O2 -march=native -ffp-contract=fast: FMA contraction allowed in the core
* ``san-avx2``   the sanitizer build for x86-64 with AVX2 but no AVX-512 (-march=haswell): where
                 the machine has AVX-512, -march=native takes the AVX-512 plane loops, and this
                 build keeps the AVX2 ones tested (skipped where the CPU lacks AVX2)
* ``san-avx512`` the same for AVX-512 without GFNI and AVX512-VBMI (-march=skylake-avx512):
                 where the machine has those, -march=native transposes the bit planes with
                 them, and this build keeps the AVX-512 plane loops tested (skipped where the
                 CPU lacks AVX-512 F/BW/VL/DQ)

and runs ``tests/cpp/core_test.cpp`` (round trips, strict bound, determinism, chunking, shapes,
progress, argument errors) and ``tests/cpp/fuzz_decoder.cpp`` (random, mutated, resealed and
synthesized streams through every decoder entry point) under the sanitizers, and checks that the
builds produce byte-identical streams and decoded values (``core_test --digest``). The sanitizer
variants' core_test runs go two at a time (fixture ``sanitizer_runs``), their builds one at a
time, so that the two cores stay busy.

Where ``zstd.h`` is installed (as for the extension, see setup.py) every build defines
``ZCCL_WITH_ZSTD=1`` and links ``-lzstd``, so the lossless codec 1 is tested too;
``ZCCL_WITH_ZSTD=0`` builds without it (the codec-1 cases then check the refusals instead).

The test programs themselves are compiled with -ffp-contract=off so their input data does not
depend on the build; only the core's flags vary.

Environment knobs: ``CI=true`` (shorter runs), ``ZCCL_FUZZ_SEED``, ``ZCCL_FUZZ_ITERS``,
``ZCCL_CXX`` (compiler, default g++). A failing fuzz input is saved in tests/cpp/bin/ and can be
replayed with ``tests/cpp/bin/fuzz_decoder-san --replay FILE``.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import cpp_build
import pytest
from cpp_build import (
    BIN_DIR,
    CPP_DIR,
    CSRC,
    CXX,
    IN_CI,
    BuildError,
    assert_ok,
    build_or_fail,
    compile_objects,
    headers,
    link,
    native_supported,
    needs_cxx,
    object_job,
    run,
)

CORE_DIR = CSRC / "compress"

pytestmark = needs_cxx


def _zstd_flags() -> tuple[list[str], list[str]]:
    """Compile and link flags for the lossless codec 1 (libzstd), as setup.py builds the
    extension: with it when zstd.h is installed, unless ZCCL_WITH_ZSTD=0."""
    if os.environ.get("ZCCL_WITH_ZSTD", "").strip() == "0":
        return [], []
    if any(Path(d, "zstd.h").is_file() for d in ("/usr/include", "/usr/local/include")):
        return ["-DZCCL_WITH_ZSTD=1"], ["-lzstd"]
    return [], []


ZSTD_COMPILE, ZSTD_LINK = _zstd_flags()
COMMON = ["-std=c++17", "-fopenmp", "-Wall", "-Wextra", "-Werror", f"-I{CORE_DIR}", *ZSTD_COMPILE]
# cpp_build's sanitizer flags plus two checks for the codec's own code: float-to-integer casts
# out of range (the quantiser's), and libstdc++'s vector annotations for ASan. GCC applies
# -fno-sanitize-recover=all to a -fsanitize named after it too (checked: the cast still aborts).
SANITIZE = [*cpp_build.SANITIZE, "-fsanitize=float-cast-overflow", "-D_GLIBCXX_SANITIZE_VECTOR"]
SANITIZE_LINK = [*cpp_build.SANITIZE_LINK, "-fsanitize=float-cast-overflow"]
VARIANTS = {
    # name: (compile flags, link flags, test-program object variant)
    "san": (SANITIZE, SANITIZE_LINK, "san"),
    "san-native": ([*SANITIZE, "-march=native"], SANITIZE_LINK, "san"),
    "o2": (["-O2"], [], "o2"),
    "o2-native": (["-O2", "-march=native", "-ffp-contract=fast"], [], "o2"),
    "san-avx2": ([*SANITIZE, "-march=haswell"], SANITIZE_LINK, "san"),
    "san-avx512": ([*SANITIZE, "-march=skylake-avx512"], SANITIZE_LINK, "san"),
}
# What the CPU must have to run a variant built for an older x86-64 than itself.
CPU_FLAGS = {
    "san-avx2": ("avx2", "fma", "f16c", "bmi2", "sse4_2"),
    "san-avx512": (
        "avx2",
        "fma",
        "f16c",
        "bmi2",
        "sse4_2",
        "avx512f",
        "avx512bw",
        "avx512vl",
        "avx512dq",
        "avx512cd",
    ),
}
TEST_ONLY_FLAGS = ["-ffp-contract=off"]
PROGRAMS = ("core_test", "fuzz_decoder")

RUN_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1",
    # abort_on_error: the fuzzer's SIGABRT handler then saves the input that triggered a report.
    "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:abort_on_error=1",
    # The machines this runs on have few cores: waiting threads should sleep, not spin.
    "OMP_WAIT_POLICY": "passive",
}

CORE_TEST_TIMEOUT = 600
FUZZ_TIMEOUT = 600


@functools.cache
def build(variant: str) -> dict[str, Path]:
    """Builds core_test and fuzz_decoder for a variant; returns {program: path}."""
    flags, link_flags, test_variant = VARIANTS[variant]
    test_flags = [*COMMON, *VARIANTS[test_variant][0], *TEST_ONLY_FLAGS]
    deps = headers(CORE_DIR)  # the core alone: edits elsewhere in csrc/ rebuild nothing here
    core = [
        object_job(src, [*COMMON, *flags], variant, deps) for src in sorted(CORE_DIR.glob("*.cpp"))
    ]
    if not core:
        raise BuildError(f"no sources in {CORE_DIR}")
    progs = {
        name: object_job(CPP_DIR / f"{name}.cpp", test_flags, f"{test_variant}-test", deps)
        for name in PROGRAMS
    }
    compile_objects([*core, *progs.values()])
    core_objects = [job.out for job in core]
    link_flags = ["-fopenmp", *link_flags, *ZSTD_LINK]
    return {
        name: link(BIN_DIR / f"{name}-{variant}", [job.out, *core_objects], link_flags)
        for name, job in progs.items()
    }


def _cpu_runs(variant: str) -> bool:
    """Whether this machine can run the variant's code (x86-64 Linux with its CPU_FLAGS)."""
    needed = CPU_FLAGS.get(variant, ())
    if not needed:
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return all(re.search(rf"\b{f}\b", flags) for f in needed)


def _build_or_fail(variant: str) -> dict[str, Path]:
    if variant.endswith("-native") and not native_supported():
        pytest.skip(f"{CXX} does not accept -march=native on this machine")
    if not _cpu_runs(variant):
        needed = ", ".join(CPU_FLAGS[variant])
        pytest.skip(f"this CPU cannot run the {variant} build (needs {needed})")
    return build_or_fail(build, variant)


# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["o2", "o2-native"])
def test_core_builds_warning_clean(variant):
    """The core and the test programs compile at -O2 with -Wall -Wextra -Werror."""
    progs = _build_or_fail(variant)
    assert all(p.exists() for p in progs.values())


SANITIZER_VARIANTS = ["san", "san-native", "san-avx2", "san-avx512"]


# One build at a time (each compiles its sources in parallel already, and the variants share
# the test programs' objects); the runs overlap with the next build and with each other.
_BUILD_LOCK = threading.Lock()


def _core_test_under_sanitizers(variant: str) -> subprocess.CompletedProcess:
    """Builds a sanitizer variant and runs its core_test (checked by the test that asks)."""
    with _BUILD_LOCK:
        progs = _build_or_fail(variant)
    # The large (~1e6 values) cases once, on the portable build outside CI.
    quick = IN_CI or variant != "san"
    cmd = [str(progs["core_test"])] + (["--quick"] if quick else [])
    return run(cmd, CORE_TEST_TIMEOUT, RUN_ENV)


@pytest.fixture(scope="module")
def sanitizer_runs(request: pytest.FixtureRequest) -> Iterator[dict[str, Future]]:
    """The selected test_core_under_sanitizers variants, built and run two at a time.

    core_test under ASan keeps about one core busy for ~30 s per variant; two side by side take
    the machine's two cores. A skip or failure inside a run reaches its own test through
    ``Future.result()``.
    """
    wanted = [
        item.callspec.params["variant"]
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.originalname == "test_core_under_sanitizers"
        and item.module is request.module
    ]
    pool = ThreadPoolExecutor(max_workers=2)
    try:
        yield {v: pool.submit(_core_test_under_sanitizers, v) for v in wanted}
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("variant", SANITIZER_VARIANTS)
def test_core_under_sanitizers(variant: str, sanitizer_runs: dict[str, Future]) -> None:
    proc = sanitizer_runs[variant].result()
    assert_ok(proc, " ".join(proc.args))
    assert "core_test: all passed" in proc.stdout, proc.stdout
    # The lossless-codec cases ran with zstd wherever the build has it.
    zstd = "yes" if ZSTD_COMPILE else "no"
    assert f"lossless codec 1 (zstd) in this build: {zstd}" in proc.stdout, proc.stdout


@pytest.mark.parametrize("variant", ["san", "san-native"])
def test_fuzz_decoder_under_sanitizers(variant):
    progs = _build_or_fail(variant)
    seed = os.environ.get("ZCCL_FUZZ_SEED", "20240611" if variant == "san" else "777")
    default_iters = (
        {"san": 30000, "san-native": 15000} if not IN_CI else {"san": 10000, "san-native": 5000}
    )
    iters = int(os.environ.get("ZCCL_FUZZ_ITERS", default_iters[variant]))
    cmd = [str(progs["fuzz_decoder"]), "--seed", seed, "--iters", str(iters), "--out", str(BIN_DIR)]
    proc = run(cmd, FUZZ_TIMEOUT, RUN_ENV)
    assert_ok(proc, " ".join(cmd))
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
    # Every format version: version-2 and version-3 streams synthesized (well-formed ones decoded
    # to the format's values, direct chunks among them, defective ones refused: the fuzzer fails
    # otherwise), direct chunks refused in version-2 and version-1 streams, version-1, 2 and 3
    # corpus streams (v3 ones with direct chunks) mutated.
    v2 = re.search(
        r"synthesized version-2 streams: well-formed (\d+) \(decoded to the model's "
        r"values: (\d+)\), with a defect (\d+)",
        proc.stdout,
    )
    v3 = re.search(
        r"synthesized version-3 streams: well-formed (\d+) \(decoded to the model's "
        r"values: (\d+); direct chunks: (\d+)\), with a defect (\d+)",
        proc.stdout,
    )
    old = re.search(
        r"direct chunks in version-1/2 streams \(all refused\): (\d+) synthesized v2 streams; "
        r"v3 streams relabelled v2 and v1: (\d+) synthesized, (\d+) from the corpus",
        proc.stdout,
    )
    corpus = re.search(
        r"corpus: (\d+) version-3 \((\d+) with direct chunks\), (\d+) version-2 and "
        r"(\d+) version-1 streams",
        proc.stdout,
    )
    assert v2 and v3 and old and corpus, proc.stdout
    for m in (v2, v3):
        assert int(m.group(1)) == int(m.group(2)) >= iters // 40, proc.stdout
        assert int(m.group(m.lastindex)) >= iters // 200, proc.stdout
    assert int(v3.group(3)) >= iters // 200, proc.stdout  # direct chunks decoded and checked
    assert all(int(n) > 0 for n in old.groups()), proc.stdout
    assert all(int(n) > 0 for n in corpus.groups()), proc.stdout


def test_streams_identical_across_builds():
    """Scalar and AVX2/F16C kernels (and FMA contraction, and the sanitizer builds) give
    byte-identical streams and values: float32/float64/float16/bfloat16, lossless codecs,
    constant runs (core_test --digest)."""
    digests = {}
    for variant in ("o2", "o2-native", "san", "san-native", "san-avx2", "san-avx512"):
        if variant.endswith("-native") and not native_supported():
            continue
        if not _cpu_runs(variant):
            continue
        progs = _build_or_fail(variant)
        proc = run([str(progs["core_test"]), "--digest"], CORE_TEST_TIMEOUT, RUN_ENV)
        assert_ok(proc, f"core_test-{variant} --digest")
        m = re.search(r"DIGEST ([0-9a-f]+) zstd=([01])", proc.stdout)
        assert m, proc.stdout
        assert m.group(2) == ("1" if ZSTD_COMPILE else "0"), proc.stdout
        digests[variant] = m.group(1)
    if len(digests) < 2:
        pytest.skip("fewer than two builds: nothing to compare with")
    assert len(set(digests.values())) == 1, f"streams differ between builds: {digests}"
