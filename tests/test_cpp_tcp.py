"""C++ tests of the TCP transport (csrc/transport/tcp) and of the exact collectives written on
point-to-point messages (csrc/transport/p2p_exact.h), torch-free and MPI-free: the program
forks its ranks on loopback (tests/cpp/tcp_transport_test.cpp).

Two builds, cached in tests/cpp/bin/ like the other C++ tests: ``san`` (-O1, ASan + UBSan) and
``o2`` (-O2 -Wall -Wextra -Werror, the transport stays warning-clean). Rank counts cover 1, 2,
odd, non-powers of two and a prime.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from cpp_build import (
    BIN_DIR,
    CPP_DIR,
    CSRC,
    SANITIZE,
    assert_ok,
    build_or_fail,
    compile_objects,
    headers,
    link,
    needs_cxx,
    object_job,
    run,
)

pytestmark = needs_cxx

TRANSPORT = CSRC / "transport"
SOURCES = [
    CPP_DIR / "tcp_transport_test.cpp",
    TRANSPORT / "transport.cpp",
    TRANSPORT / "reduce_ops.cpp",
    TRANSPORT / "link_probe.cpp",
    TRANSPORT / "p2p_exact.cpp",
    TRANSPORT / "tcp" / "socket_mesh.cpp",
    TRANSPORT / "tcp" / "tcp_comm.cpp",
]
COMMON = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pthread"]
VARIANTS = {
    "san": SANITIZE,
    "o2": ["-O2"],
}
RUN_ENV = {"ASAN_OPTIONS": "halt_on_error=1", "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1"}


@functools.cache
def _build(variant: str) -> Path:
    flags = COMMON + VARIANTS[variant]
    deps = headers(TRANSPORT, TRANSPORT / "tcp")
    jobs = [object_job(src, flags, f"tcp-{variant}", deps) for src in SOURCES]
    compile_objects(jobs)
    exe = BIN_DIR / f"tcp_transport_test-{variant}"
    return link(exe, [j.out for j in jobs], [*flags])


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5, 7])
def test_tcp_transport(variant: str, ranks: int) -> None:
    exe = build_or_fail(_build, variant)
    proc = run([str(exe), str(ranks)], timeout=300, env=RUN_ENV)
    assert_ok(proc, f"tcp_transport_test-{variant} {ranks}")
    assert f"TCP TRANSPORT OK ({ranks} ranks)" in proc.stdout, proc.stdout
