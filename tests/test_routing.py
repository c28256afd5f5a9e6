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
    assert route("all_reduce", 32 << 10, 4) == (True, "recursive_doubling")
    assert route("all_reduce", 64 << 10, 4) == (True, "ring")
    assert route("all_reduce", MB64, 4) == (True, "ring")
    # At 100 Gbit/s one thread loses to MPI's exact allreduce; 16 threads per rank win again
    # (the SimGrid model: 3.4-3.7x MPI at 16 hosts with 16 threads).
    assert route("all_reduce", MB64, 16, link_gbps=100.0) == (False, "mpi")
    assert route("all_reduce", MB64, 16, link_gbps=100.0, threads=16) == (True, "ring")
    # Halving-doubling from 64 ranks where SimGrid measured it ahead of the ring (100 Gbit/s)
    assert route("all_reduce", MB64, 64, threads=16, link_gbps=100.0)[1] == "halving_doubling"
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


# The compression ratio: sampled from the data by the backend (tests/mpi/auto_ratio_checks.py),
# here given to route() directly.


@pytest.mark.parametrize("p", [2, 3, 4, 16])
def test_unset_ratio_is_the_fixed_five(p: int) -> None:
    for collective in DATA_MOVEMENT + REDUCTIONS:
        for nbytes in (4096, 256 << 10, 4 << 20, MB64):
            for g in (1.0, 10.0, 100.0):
                unset = route(collective, nbytes, p, link_gbps=g)
                assert unset == route(collective, nbytes, p, link_gbps=g, ratio=5.0)


@pytest.mark.parametrize("collective", REDUCTIONS)
@pytest.mark.parametrize("ratio", [0.5, 0.999, 1.0])
def test_reductions_of_data_that_does_not_compress_go_exact(collective: str, ratio: float) -> None:
    # At a ratio of 1 the compressed bytes take as long on the wire as the values: the codec
    # and the ring's extra steps can only add to that, against bandwidth-optimal exact
    # schedules. (On links of 10 Gbit/s and more the model lets the ring win at a ratio of 1 for
    # small p: it overlaps the sum's arithmetic with the wire, 0.81 against MPI's 0.90 ns per
    # byte at p = 2, 10 Gbit/s.)
    for p in (2, 4, 16, 64):
        for g in (0.01, 1.0):
            for threads in (1, 16):
                got = route(collective, MB64, p, link_gbps=g, threads=threads, ratio=ratio)
                assert got == (False, "mpi"), (p, g, threads, got)


@pytest.mark.parametrize("collective", DATA_MOVEMENT)
def test_data_movement_does_not_weigh_the_ratio(collective: str) -> None:
    # At a ratio of 1 zccl's schedules send what the exact ones send; the codec's speed against
    # the link decides alone (route.cpp says why: zccl's ring all_gather of raw chunks beat
    # Open MPI's exact one on the emulated cluster).
    for p in (2, 3, 4, 16):
        for g in (1.0, 10.0, 40.0, 100.0):
            for exact in ("bandwidth_optimal", "open_mpi"):
                kw = {"link_gbps": g, "exact": exact}
                choices = {route(collective, MB64, p, ratio=r, **kw) for r in (0.5, 1.0, 5.0, 1e3)}
                assert len(choices) == 1, (p, kw, choices)
                assert not _C.ratio_matters(collective, MB64, p, **kw)


@pytest.mark.parametrize("collective", DATA_MOVEMENT + REDUCTIONS)
def test_a_better_ratio_never_stops_compression(collective: str) -> None:
    ratios = [1.0, 1.05, 1.2, 1.5, 2.0, 3.0, 5.0, 10.0, 50.0, 1e3]
    for p in (2, 5, 16):
        for nbytes in (256 << 10, 4 << 20, MB64):
            for g in (1.0, 10.0, 40.0):
                compressed = [route(collective, nbytes, p, link_gbps=g, ratio=r)[0] for r in ratios]
                first = compressed.index(True) if True in compressed else len(ratios)
                assert all(compressed[first:]), (p, nbytes, g, compressed)


def test_the_ratio_moves_the_all_reduce_choice() -> None:
    # p = 4, 1 Gbit/s: 4 KiB compresses at the fixed ratio of 5, not at 3; 1 MiB at 1.2, not
    # at 1.15; 64 MiB at 1.1, not at 1.05
    assert route("all_reduce", 4096, 4) == (True, "recursive_doubling")
    assert route("all_reduce", 4096, 4, ratio=3.0) == (False, "mpi")
    assert route("all_reduce", 1 << 20, 4, ratio=1.2) == (True, "ring")
    assert route("all_reduce", 1 << 20, 4, ratio=1.15) == (False, "mpi")
    assert route("all_reduce", MB64, 4, ratio=1.1) == (True, "ring")
    assert route("all_reduce", MB64, 4, ratio=1.05) == (False, "mpi")


def test_ratio_matters_exactly_where_the_choice_moves() -> None:
    for collective in DATA_MOVEMENT + REDUCTIONS:
        for p in (1, 2, 4, 16):
            for nbytes in (0, 4096, 64 << 10, 4 << 20):
                for g in (1.0, 100.0):
                    for algorithm in ("auto", "ring", "mpi"):
                        kw = {"link_gbps": g, "algorithm": algorithm}
                        moves = route(collective, nbytes, p, ratio=1.0, **kw) != route(
                            collective, nbytes, p, ratio=1e4, **kw
                        )
                        matters = _C.ratio_matters(collective, nbytes, p, **kw)
                        assert matters == moves, (collective, p, nbytes, g, algorithm)
    # An explicit algorithm, one rank, nothing to send, a lossless reduction, a payload below
    # min_compress_bytes, or a codec too slow for the link whatever the ratio: no sample.
    assert not _C.ratio_matters("broadcast", MB64, 4, algorithm="ring")
    assert not _C.ratio_matters("all_reduce", MB64, 1)
    assert not _C.ratio_matters("all_gather", 0, 4)
    assert not _C.ratio_matters("all_reduce", MB64, 4, lossless=True)
    assert not _C.ratio_matters("scatter", 1000, 4, min_compress_bytes=4096)
    assert not _C.ratio_matters("broadcast", MB64, 16)  # data movement: never
    assert _C.ratio_matters("all_reduce", MB64, 16)
    assert not _C.ratio_matters("all_reduce", MB64, 16, link_gbps=100.0)  # MPI at any ratio


def test_bad_ratio_raises() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="ratio"):
            _C.route("all_reduce", MB64, 4, ratio=bad)
        with pytest.raises(ValueError, match="auto_ratio"):
            Options(auto_ratio=bad)
    assert Options.from_env({"ZCCL_AUTO_RATIO": "2.5"}).auto_ratio == 2.5
    assert Options().auto_ratio == 5.0  # fixed by default; 0 samples the data


# The exact side of the choice: what the transport's exact collectives cost.


def test_open_mpi_schedules_make_exact_dearer_where_libnbc_sends_more() -> None:
    mb16 = 16 << 20
    om = {"exact": "open_mpi", "ratio": 1.0}
    # MPI_Iallreduce below 4 ranks: reduce + broadcast down binomial trees, 4 n bytes through
    # the root at p = 3 against the ring's 4/3 n: zccl's ring wins even on incompressible data
    # (measured 2.1-2.8x at 1-16 MiB on the emulated 1 Gbit/s cluster, benchmarks/auto_ratio.py).
    assert route("all_reduce", mb16, 3, **om) == (True, "ring")
    assert route("all_reduce", mb16, 3, ratio=1.0) == (False, "mpi")
    # From 4 ranks and 64 KiB, Rabenseifner: as good as the ring at a ratio of 1.
    assert route("all_reduce", mb16, 4, **om) == (False, "mpi")
    # MPI_Ibcast sends p - 1 copies from the root up to 4 ranks, ceil(log2 p) beyond: at
    # 40 Gbit/s one thread's codec (0.33 ns per byte) is slower than one copy on the link (0.2)
    # but faster than two, so the pipelined chain wins from 3 ranks (measured 1.9x at p = 3,
    # 1 Gbit/s, on incompressible data).
    fast = {"link_gbps": 40.0}
    for p in (2, 3, 4, 8, 16):
        assert route("broadcast", mb16, p, exact="open_mpi", **fast)[0] == (p > 2), p
        assert route("broadcast", mb16, p, **fast) == (False, "mpi"), p
    # libnbc's other data movement sends each byte once: the same choice as bandwidth-optimal.
    for collective in ("all_gather", "gather", "scatter", "all_to_all"):
        for g in (1.0, 40.0):
            kw = {"link_gbps": g}
            assert route(collective, mb16, 4, exact="open_mpi", **kw) == route(
                collective, mb16, 4, **kw
            ), (collective, g)


@pytest.mark.parametrize("collective", DATA_MOVEMENT + REDUCTIONS)
def test_open_mpi_schedules_never_stop_compression(collective: str) -> None:
    # libnbc's schedules cost at least the bandwidth-optimal ones: whatever compresses against
    # the optimal exact path compresses against Open MPI's.
    for p in (2, 3, 4, 5, 8, 16):
        for nbytes in (4096, 256 << 10, 4 << 20, MB64):
            for g in (1.0, 10.0, 100.0):
                for ratio in (1.0, 2.0, 5.0):
                    kw = {"link_gbps": g, "ratio": ratio}
                    if route(collective, nbytes, p, **kw)[0]:
                        assert route(collective, nbytes, p, exact="open_mpi", **kw)[0], (p, kw)


def test_bad_exact_schedules_raise() -> None:
    with pytest.raises(ValueError, match="open_mpi"):
        _C.route("all_reduce", MB64, 4, exact="mpich")


def test_ratio_sample_size() -> None:
    """The backend samples 1/16 of a reduction's payload, all of one below 2048 values, at least
    2048 and at most 65536 values."""
    for n in (0, 1, 31, 2047, 2048, 2049, 32767, 32768, 32784, 100_000, 1 << 20, 1 << 21, 1 << 30):
        got = _C.ratio_sample_values(n)
        if n <= 2048:
            assert got == n, n
        elif n // 16 <= 2048:
            assert got == 2048, n
        elif n // 16 >= 65536:
            assert got == 65536, n
        else:
            assert got == n // 16, n


def wire_seconds(nbytes: int, p: int, gbps: float, ratio: float) -> float:
    """The ring all_reduce's bytes on one link, 2 (p-1)/p n / ratio, at gbps."""
    return 2 * (p - 1) / p * nbytes / ratio / (gbps * 1.25e8)


def test_the_ring_model_counts_the_wire_once() -> None:
    # One segment per block (n <= p MiB): the chain of hops is the wire itself plus per-hop
    # latency and codec, not an extra copy of it (the model counted it twice until 2026-12).
    for p in (2, 4, 8):
        for nbytes in (256 << 10, 1 << 20, p << 20, MB64):
            wire = wire_seconds(nbytes, p, 0.01, 5.0)
            cost = _C.allreduce_cost("ring", nbytes, p, link_gbps=0.01, ratio=5.0)
            assert wire <= cost <= 1.05 * wire, (p, nbytes, cost / wire)


def test_auto_takes_the_cheapest_modelled_all_reduce() -> None:
    # route() compresses only when the model finds it 1.1x faster than exact (kExactPreference)
    # and then takes the cheapest compressed algorithm (halving-doubling from 32 ranks).
    for exact in ("bandwidth_optimal", "open_mpi"):
        for p in (2, 3, 4, 7, 16, 32, 64):
            for nbytes in (4 << 10, 64 << 10, 1 << 20, 16 << 20):
                for g in (1.0, 10.0, 100.0):
                    for ratio in (1.0, 1.5, 5.0, 50.0):
                        kw = {"link_gbps": g, "ratio": ratio, "exact": exact}
                        names = ["ring", "recursive_doubling"]
                        names += ["halving_doubling"] if p >= 32 else []
                        cost = {a: _C.allreduce_cost(a, nbytes, p, **kw) for a in names}
                        mpi = _C.allreduce_cost("mpi", nbytes, p, **kw)
                        compressed, chosen = route("all_reduce", nbytes, p, **kw)
                        where = (exact, p, nbytes, g, ratio, chosen, cost, mpi)
                        if compressed:
                            assert mpi > 1.1 * cost[chosen], where
                            assert cost[chosen] == min(cost.values()), where
                        else:
                            assert mpi <= 1.1 * min(cost.values()), where
    with pytest.raises(ValueError, match="no model of algorithm"):
        _C.allreduce_cost("cprp2p", 1 << 20, 4)


@pytest.mark.parametrize("p", [2, 4])
def test_gradient_like_data_takes_the_ring(p: int) -> None:
    # Measured on the emulated 1 Gbit/s cluster (benchmarks/allreduce_crossover.py, white noise
    # at REL 1e-3, ratio 3.6): at p = 4 the ring ran 1.5-2.0x faster than recursive doubling
    # from 256 KiB to 4 MiB, at p = 2 1.4x at 2 and 4 MiB and within 10 % below.
    for nbytes in (256 << 10, 1 << 20, 4 << 20):
        assert route("all_reduce", nbytes, p, ratio=3.6, exact="open_mpi") == (True, "ring")
