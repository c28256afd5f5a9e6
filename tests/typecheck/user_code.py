"""Code written as a user of zccl-torch writes it: `mypy` (strict, see pyproject.toml) must accept
it against the package's own types (py.typed, zccl_torch/_C.pyi). Never run, only type-checked:
tests/test_typing.py runs mypy on it, and on tests/typecheck/misuse.py, which it must reject."""

from __future__ import annotations

import datetime

import torch
import torch.distributed as dist

import zccl_torch
from zccl_torch import metrics
from zccl_torch.hooks import ZcclHookState, compressed_allreduce_hook
from zccl_torch.policy import EndToEnd, NormRelative, Rules, use_policy


def compress_round_trip(x: torch.Tensor) -> float:
    stream: torch.Tensor = zccl_torch.compress(x, 1e-4, mode="rel", threads=2)
    y: torch.Tensor = zccl_torch.decompress(stream)
    eb: float = zccl_torch.resolve_error_bound(x, 1e-4, "rel")
    info = zccl_torch.stream_info(stream)
    assert info.numel == x.numel()
    assert zccl_torch.max_compressed_size(x.dtype, x.numel()) >= stream.numel()
    grid, residual = zccl_torch.quantize(x, eb, residual=True)
    assert grid.shape == residual.shape
    assert zccl_torch.quantize(x, eb, threads=1).sub_(x).abs().max() <= eb
    first: torch.Tensor = zccl_torch.decompress_chunk(stream, 0)
    assert first.numel() <= zccl_torch.DEFAULT_CHUNK_SIZE
    ratio: float = metrics.compression_ratio(x, stream)
    return ratio + metrics.psnr(x, y)


def train(model: torch.nn.Module) -> None:
    options = zccl_torch.Options(error_bound=1e-3, mode="abs", algorithm="ring", threads=2)
    dist.init_process_group("zccl", pg_options=options, timeout=datetime.timedelta(minutes=5))
    assert zccl_torch.current_options().error_bound == 1e-3
    link: zccl_torch.LinkEstimate = zccl_torch.measure_link(probe_bytes=1 << 20)
    with zccl_torch.config(**link.settings()):
        dist.broadcast(torch.randn(10), src=0)
    measured = zccl_torch.Options(error_bound=1e-3, **link.settings())
    assert measured.link_gbps == link.gbps
    with zccl_torch.config(error_bound=1e-2) as effective:
        t = torch.randn(1000)
        dist.all_reduce(t)
        assert effective.effective_algorithm == "ring"
    stats: dict[str, object] = zccl_torch.last_stats()
    print(stats["bytes_sent"], zccl_torch.total_stats(reset=True))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    state = ZcclHookState(policy=Rules(NormRelative(1e-3)), error_feedback=True, model=model)
    ddp.register_comm_hook(state, compressed_allreduce_hook)
    with use_policy(EndToEnd(1e-3)):
        dist.broadcast(t, src=0)
    try:
        zccl_torch.decompress(torch.zeros(8, dtype=torch.uint8))
    except zccl_torch.CorruptStreamError as exc:
        print("corrupt:", exc)
    dist.destroy_process_group()
