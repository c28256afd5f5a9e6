"""Multi-rank checks of the compression ratio that ``algorithm="auto"`` samples from the data.

``mpirun -np P python tests/mpi/auto_ratio_checks.py [check ...]``. Before a reduction whose
choice depends on it (``_C.ratio_matters``), every rank codes a sample of its data
(``zccl_torch.estimate_ratio``'s sample) and the agreement exchange gives every rank the
smallest ratio; route() at that ratio, weighing the transport's own exact schedules, decides,
on every rank alike whoever holds which data. Data movement does not weigh the ratio (nothing
is sampled, none reported). ``auto_ratio`` (the setting) fixes the ratio instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.distributed as dist
from check_common import assert_within, exact_gather, rank, rounding, run_checks, world

import zccl_torch
from zccl_torch import _C

EB = 1e-3
TIGHT = 1e-12  # below float32's spacing of randn values: every chunk stays raw, ratio < 1
N = 1 << 16  # values per rank: 256 KiB
REDUCTIONS = ("all_reduce", "reduce", "reduce_scatter")
# auto_ratio=0: sample (the default, 5, fixes the ratio)
OPTIONS = zccl_torch.Options(error_bound=EB, mode="abs", min_compress_bytes=0, auto_ratio=0.0)
CHECKS: dict[str, Callable[[], None]] = {}


def check(fn: Callable[[], None]) -> Callable[[], None]:
    CHECKS[fn.__name__] = fn
    return fn


def smooth(r: int, n: int = N) -> torch.Tensor:
    """Compresses some 30x at EB."""
    return torch.sin(torch.linspace(0, 20, n, dtype=torch.float64) + r).float() + r


def noise(r: int, n: int = N) -> torch.Tensor:
    return torch.randn(n, generator=torch.Generator().manual_seed(1000 + r))


def same_everywhere(name: str, value: float) -> float:
    """``value`` (a float) is bit for bit the same on every rank; returns it."""
    mine = torch.tensor([value], dtype=torch.float64)
    for r, theirs in enumerate(exact_gather(mine)):
        assert torch.equal(theirs, mine), f"{name}: rank {r} has {float(theirs)}, {rank()} {value}"
    return value


def same_bits(name: str, got: torch.Tensor, want: torch.Tensor) -> None:
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), f"{name}: not bit-exact"


def calls(root: int, x: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """One call of each collective on this rank's ``x`` (N values), by name; each returns its
    result on this rank (reduce and gather: empty off the root)."""
    p = world()
    k = N // p

    def all_reduce() -> torch.Tensor:
        t = x.clone()
        dist.all_reduce(t)
        return t

    def reduce() -> torch.Tensor:
        t = x.clone()
        dist.reduce(t, dst=root)
        return t if rank() == root else torch.zeros(0)

    def reduce_scatter() -> torch.Tensor:
        out = torch.empty(k)
        dist.reduce_scatter_tensor(out, x[: k * p])
        return out

    def broadcast() -> torch.Tensor:
        t = x.clone()
        dist.broadcast(t, src=root)
        return t

    def all_gather() -> torch.Tensor:
        out = torch.empty(N * p)
        dist.all_gather_into_tensor(out, x)
        return out

    def gather() -> torch.Tensor:
        out = [torch.empty(N) for _ in range(p)] if rank() == root else None
        dist.gather(x, out, dst=root)
        return torch.cat(out) if out is not None else torch.zeros(0)

    def scatter() -> torch.Tensor:
        out = torch.empty(k)
        dist.scatter(out, list(x[: k * p].chunk(p)) if rank() == root else None, src=root)
        return out

    def all_to_all() -> torch.Tensor:
        out = torch.empty(k * p)
        dist.all_to_all_single(out, x[: k * p])
        return out

    return {
        "all_reduce": all_reduce,
        "reduce": reduce,
        "reduce_scatter": reduce_scatter,
        "broadcast": broadcast,
        "all_gather": all_gather,
        "gather": gather,
        "scatter": scatter,
        "all_to_all": all_to_all,
    }


def exact_results(root: int, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each collective's result through the exact path (algorithm="mpi")."""
    with zccl_torch.config(algorithm="mpi"):
        return {name: run() for name, run in calls(root, x).items()}


def route_bytes(name: str) -> int:
    """The payload size route() weighs for this file's call of ``name``."""
    p = world()
    return (N // p) * p * 4 if name == "reduce_scatter" else N * 4


def exact_schedules() -> str:
    return _C.exact_schedules(zccl_torch.backend.get_backend())


def auto_compresses(name: str, ratio: float) -> bool:
    """Whether route() compresses this file's call of ``name`` at ``ratio`` on this group's
    transport (one thread, as the launcher's OMP_NUM_THREADS=1 gives every rank)."""
    return _C.route(name, route_bytes(name), world(), ratio=ratio, exact=exact_schedules())[0]


def ratio_matters(name: str) -> bool:
    return _C.ratio_matters(name, route_bytes(name), world(), exact=exact_schedules())


def close_to(label: str, got: torch.Tensor, want: torch.Tensor, stats: dict, eb: float) -> None:
    """A compressed result against the exact path's: within the collective's bound, plus float
    rounding of sums of values as large as the inputs (the two paths add in other orders)."""
    bound = eb
    if label.split()[0] in REDUCTIONS:
        p = world()
        scale = max(float(want.abs().max()) if want.numel() else 0.0, 1.0)
        bound = _C.output_error_bound(stats["algorithm"], "sum", p, eb, True)
        bound += 4 * p * torch.finfo(torch.float32).eps * scale
    assert_within(label, got, want, bound)


def check_choice(
    label: str, name: str, stats: dict, got: torch.Tensor, want: torch.Tensor, eb: float
) -> float | None:
    """The call took route()'s choice: for a reduction at the agreed ratio (the same on every
    rank; sampled where the choice depends on it, else the fixed 5), for data movement at any
    ratio (none reported). Exact means bit for bit what algorithm="mpi" gives; compressed,
    within the bound. Returns the reported ratio."""
    ratio = stats["auto_ratio"]
    if name in REDUCTIONS:
        ratio = same_everywhere(f"{label}: auto_ratio", ratio)
        if not ratio_matters(name):
            assert ratio == 5.0, (label, ratio)
    else:
        assert ratio is None, (label, ratio)
        assert not ratio_matters(name), label
    compressed = stats["algorithm"] != "mpi"
    expected = auto_compresses(name, ratio if ratio is not None else 5.0)
    assert compressed == expected, (label, ratio, exact_schedules(), stats)
    if compressed:
        close_to(label, got, want, stats, eb)
    else:
        same_bits(label, got, want)
    return ratio


@check
def incompressible_data() -> None:
    """Data that does not compress at the bound (ratio < 1: every chunk raw) on every rank:
    each call takes route()'s choice at the agreed ratio (below 1 wherever it was sampled),
    bit-exact when exact. Over the TCP transport, whose exact reductions are bandwidth-optimal,
    the reductions go exact; under Open MPI below 4 ranks the ring beats libnbc's binomial
    trees even so. With the ratio fixed at 5 (the assumption before sampling), every call
    compresses."""
    p = world()
    x = noise(rank())
    for root in sorted({0, p - 1}):
        with zccl_torch.config(error_bound=TIGHT):
            want = exact_results(root, x)
            for name, run in calls(root, x).items():
                got = run()
                stats = zccl_torch.last_stats()
                label = f"{name} root {root}"
                if p == 1:
                    assert stats["algorithm"] == "mpi", (label, stats)
                    continue
                ratio = check_choice(label, name, stats, got, want[name], TIGHT)
                if name in REDUCTIONS and ratio_matters(name):
                    assert ratio is not None and 0.9 < ratio < 1.0, (label, ratio)
                if name in REDUCTIONS and exact_schedules() == "bandwidth_optimal":
                    assert stats["algorithm"] == "mpi", (label, stats)
        if p == 1:
            continue
        with zccl_torch.config(error_bound=TIGHT, auto_ratio=5.0):
            for name, run in calls(root, x).items():
                run()
                stats = zccl_torch.last_stats()
                assert stats["algorithm"] != "mpi", (name, stats)
                assert stats["auto_ratio"] == (5.0 if name in REDUCTIONS else None), stats


@check
def compressible_data_compresses() -> None:
    """Smooth data: every collective compresses (within its bound). A reduction's ratio, where
    its choice depends on it, is the smallest of the ranks' samples: exactly the smallest
    ``estimate_ratio`` of each rank's data with the backend's sample size."""
    p = world()
    if p == 1:
        return
    x = smooth(rank())
    want = exact_results(0, x)
    samples = [
        zccl_torch.estimate_ratio(smooth(r), EB, max_values=_C.ratio_sample_values(N))
        for r in range(p)
    ]
    for name, run in calls(0, x).items():
        got = run()
        stats = zccl_torch.last_stats()
        ratio = check_choice(name, name, stats, got, want[name], EB)
        assert stats["algorithm"] != "mpi", (name, stats)
        if name in ("all_reduce", "reduce") and ratio_matters(name):
            assert ratio == min(samples), (name, ratio, samples)
            assert ratio > 10, (name, ratio)


@check
def the_least_compressible_rank_decides() -> None:
    """Rank p-1 holds incompressible data, the others smooth data: every rank takes the
    choice for the smallest sample (route() at that ratio), without a hang and with the same
    ratio, below 1 wherever it was sampled."""
    p = world()
    if p == 1:
        return
    noisy = p - 1

    def mine(r: int) -> torch.Tensor:
        # Noise times 1e9 has codes beyond the quantiser's range at EB: every chunk raw.
        return noise(r) * 1e9 if r == noisy else smooth(r)

    x = mine(rank())
    for root in (0, noisy):
        want = exact_results(root, x)
        for name, run in calls(root, x).items():
            got = run()
            stats = zccl_torch.last_stats()
            label = f"{name} root {root}"
            ratio = check_choice(label, name, stats, got, want[name], EB)
            if name in REDUCTIONS and ratio_matters(name):
                assert ratio is not None and ratio < 1.0, (label, ratio)


@check
def fixed_ratio_and_no_agreement_skip_the_sample() -> None:
    """auto_ratio > 0 replaces the sample (reported as set); check_agreement=False has no
    exchange to carry a sample, so the fixed 5 stands; an explicit algorithm reports no ratio;
    ranks that set different auto_ratio values raise on every rank, naming it."""
    p = world()
    if p == 1:
        return
    x = smooth(rank())
    for settings, want in (
        ({"auto_ratio": 2.5}, 2.5),
        ({"check_agreement": False}, 5.0),
        ({"algorithm": "ring"}, None),
    ):
        with zccl_torch.config(**settings):
            t = x.clone()
            dist.all_reduce(t)
            stats = zccl_torch.last_stats()
            assert stats["auto_ratio"] == want, (settings, stats)
    with zccl_torch.config(auto_ratio=3.0 if rank() == 0 else 4.0):
        try:
            dist.all_reduce(x.clone())
        except ValueError as exc:
            assert "auto_ratio" in str(exc) and "3 on rank 0" in str(exc), str(exc)
        else:
            raise AssertionError("auto_ratio differing across ranks did not raise")
    dist.barrier()


@check
def half_tensors_sample_their_float32_sums() -> None:
    """A half-precision all_reduce accumulates in float32 (the staged widening): its sample is
    of those float32 values, the smallest of the ranks' ``estimate_ratio`` of them, and the
    result lies within the bound, rounded to the half type."""
    p = world()
    if p == 1:
        return
    for dtype in (torch.float16, torch.bfloat16):
        x = smooth(rank()).to(dtype)
        widened = [smooth(r).to(dtype).float() for r in range(p)]
        samples = [
            zccl_torch.estimate_ratio(w, EB, max_values=_C.ratio_sample_values(N)) for w in widened
        ]
        t = x.clone()
        dist.all_reduce(t)
        stats = zccl_torch.last_stats()
        ratio = same_everywhere(f"{dtype}: auto_ratio", stats["auto_ratio"])
        if ratio_matters("all_reduce"):
            assert ratio == min(samples), (dtype, ratio, samples)
        # The bound of backend_checks.py's half_precision_allreduce: the collective's, one
        # rounding to the half type per hop that carries a partial or final result, and float32
        # accumulation.
        bound = _C.output_error_bound(stats["algorithm"], "sum", p, EB, True)
        magnitude = sum(w.double().abs() for w in widened) + p * EB
        half_roundings = (p + 1) * torch.finfo(dtype).eps / 2 * magnitude
        exact = sum(w.double() for w in widened)
        tol = bound + half_roundings + rounding(widened, EB)
        assert_within(f"{dtype} all_reduce", t, exact, tol)


def main(argv: list[str]) -> int:
    return run_checks(CHECKS, argv, OPTIONS, timeout_s=120, scoped=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
