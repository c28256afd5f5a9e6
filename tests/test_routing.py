"""The automatic choices of route() (csrc/collectives/route.cpp) against the network they assume.

No MPI: ``zccl_torch._C.route`` asks the same function every collective asks. The multi-rank side
(the ranks agree on the thread count and on link_gbps, data movement really runs exact at
100 Gbit/s) is in tests/mpi/conformance_checks.py.
"""

from __future__ import annotations

import pytest

from zccl_torch import _C, Options

DATA_MOVEMENT = ("broadcast", "scatter", "gather", "all_gather", "all_to_all")
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter")
MB64 = 64 << 20


def route(collective: str, nbytes: int, p: int, **kw: object) -> tuple[bool, str]:
    compressed, algorithm = _C.route(collective, nbytes, p, **kw)
    assert compressed == (algorithm != "mpi"), (compressed, algorithm)
    return compressed, algorithm


@pytest.mark.parametrize("p", [2, 3, 4, 7, 16, 64])
@pytest.mark.parametrize("collective", DATA_MOVEMENT)
def test_default_network_compresses_data_movement(collective: str, p: int) -> None:
    # 1 Gbit/s, one thread: the codec (~3-4 GB/s) is far faster than the link (0.125 GB/s).
    for nbytes in (1, 4096, MB64):
        assert route(collective, nbytes, p)[0], (collective, p, nbytes)


@pytest.mark.parametrize("collective", DATA_MOVEMENT)
def test_fast_link_one_thread_sends_data_movement_exact(collective: str) -> None:
    # At 100 Gbit/s (12.5 GB/s) one thread's codec cannot keep up: SimGrid measured 0.16-0.57x
    # of MPI for broadcast, scatter and all_gather there (benchmarks/simgrid/README.md).
    assert route(collective, MB64, 16, link_gbps=100.0) == (False, "mpi")
    # 16 threads code fast enough again
    assert route(collective, MB64, 16, link_gbps=100.0, threads=16)[0]
    # An explicit algorithm is obeyed whatever the network
    assert route(collective, MB64, 16, link_gbps=100.0, algorithm="cprp2p") == (True, "cprp2p")


def test_all_reduce_follows_the_link() -> None:
    # README's documented choices at the default network, p = 4
    assert route("all_reduce", 2048, 4) == (False, "mpi")
    assert route("all_reduce", 256 << 10, 4) == (True, "recursive_doubling")
    assert route("all_reduce", MB64, 4) == (True, "ring")
    # At 100 Gbit/s one thread loses to MPI's exact allreduce; 16 threads per rank win again
    # (the SimGrid model: 3.4-3.7x MPI at 16 hosts with 16 threads).
    assert route("all_reduce", MB64, 16, link_gbps=100.0) == (False, "mpi")
    assert route("all_reduce", MB64, 16, link_gbps=100.0, threads=16) == (True, "ring")
    assert route("all_reduce", MB64, 64, threads=16)[1] == "halving_doubling"
    # Lossless streams never pay for a reduction
    assert route("all_reduce", MB64, 4, lossless=True) == (False, "mpi")


@pytest.mark.parametrize("collective", DATA_MOVEMENT + REDUCTIONS)
@pytest.mark.parametrize("p", [2, 5, 16])
def test_a_slower_link_never_stops_compression(collective: str, p: int) -> None:
    links = [0.01, 0.1, 1.0, 2.5, 10.0, 25.0, 40.0, 100.0, 400.0]
    for threads in (1, 4, 16):
        compressed = [route(collective, MB64, p, link_gbps=g, threads=threads)[0] for g in links]
        # once exact at some speed, exact at every faster one
        first_exact = compressed.index(False) if False in compressed else len(links)
        assert all(compressed[:first_exact]) and not any(compressed[first_exact:]), (
            collective,
            p,
            threads,
            dict(zip(links, compressed, strict=True)),
        )


def test_more_threads_never_stop_compression() -> None:
    for collective in DATA_MOVEMENT + REDUCTIONS:
        for g in (10.0, 25.0, 100.0):
            compressed = [
                route(collective, MB64, 8, link_gbps=g, threads=t)[0] for t in (1, 2, 4, 8, 16)
            ]
            first = compressed.index(True) if True in compressed else len(compressed)
            assert all(compressed[first:]), (collective, g, compressed)


def test_below_min_compress_bytes_stays_exact() -> None:
    for collective in DATA_MOVEMENT + REDUCTIONS:
        assert route(collective, 1000, 4, min_compress_bytes=4096) == (False, "mpi")


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("link_gbps", 0.0, "link_gbps"),
        ("link_gbps", float("inf"), "link_gbps"),
        ("link_latency_us", -1.0, "link_latency_us"),
        ("link_latency_us", float("nan"), "link_latency_us"),
    ],
)
def test_bad_network_settings_raise(field: str, value: float, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        Options(**{field: value})
    with pytest.raises(ValueError, match=needle):
        _C.route("all_reduce", MB64, 4, **{field: value})


def test_network_settings_from_the_environment() -> None:
    o = Options.from_env({"ZCCL_LINK_GBPS": "100", "ZCCL_LINK_LATENCY_US": "5"})
    assert (o.link_gbps, o.link_latency_us) == (100.0, 5.0)
    assert (Options().link_gbps, Options().link_latency_us) == (1.0, 25.0)
    with pytest.raises(ValueError, match="ZCCL_LINK_GBPS"):
        Options.from_env({"ZCCL_LINK_GBPS": "fast"})
