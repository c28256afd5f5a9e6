"""Per-rank benchmark inputs: generated fields, distinct per rank, cached on disk.

A 256^3 RTM-like wavefield (64 MB float32) takes about 30 s to simulate on one core, so each
(kind, seed) field is simulated once and kept under ``benchmarks/.cache/`` (gitignored).
Sizes up to 64 MB are a window of the rank's field centred on its middle depth plane (the top
planes are the absorbing sponge and mostly zero, which would flatter small sizes). Larger
sizes concatenate the field with mirrored and transposed copies of itself: fZ-light compresses
each 5120-value chunk on its own, with no
dictionary across chunks, so the copies cannot compress better than the original does.

Environment: ``ZCCL_BENCH_CACHE`` moves the cache; ``ZCCL_BENCH_EDGE`` (default 256) simulates
smaller fields for smoke runs and tests (64^3 takes 0.2 s): the same models, fewer values, so
figures from it are not the benchmarks' figures. The cache keeps fields of each edge apart.
"""

from __future__ import annotations

import os
from pathlib import Path

import sample_fields  # benchmarks/sample_fields.py
import torch

CACHE = Path(os.environ.get("ZCCL_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))


def _edge() -> int:
    text = os.environ.get("ZCCL_BENCH_EDGE", "256")
    if not text.isdigit() or int(text) < 16:
        raise ValueError(f"ZCCL_BENCH_EDGE must be an integer >= 16, got {text!r}")
    return int(text)


EDGE = _edge()  # 256^3 float32 = 64 MiB per field by default
KINDS = ("wavefield", "smooth")


def _simulate(kind: str, seed: int) -> torch.Tensor:
    shape = (EDGE, EDGE, EDGE)
    if kind == "wavefield":
        return sample_fields.acoustic_wavefield_3d(shape, seed=seed)
    if kind == "smooth":
        return sample_fields.smooth_random_field(shape, correlation_length=12.0, seed=seed)
    raise ValueError(f"unknown data kind {kind!r}; expected one of {KINDS}")


def field(kind: str, seed: int) -> torch.Tensor:
    """The (EDGE,)*3 float32 field of ``kind`` for ``seed``, simulated once then read from disk."""
    path = CACHE / f"{kind}-{EDGE}-{seed}.pt"
    if path.exists():
        return torch.load(path)
    data = _simulate(kind, seed).contiguous()
    CACHE.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(data, tmp)
    tmp.replace(path)  # atomic: concurrent ranks never read a half-written file
    return data


def values(kind: str, seed: int, numel: int) -> torch.Tensor:
    """``numel`` float32 values for one rank: the field, then mirrored/transposed copies of it."""
    base = field(kind, seed)
    variants = [base, base.flip(1), base.flip(2), base.transpose(1, 2), base.flip(0)]
    flat: list[torch.Tensor] = []
    have = 0
    for v in variants * (1 + numel // (len(variants) * base.numel())):
        if have >= numel:
            break
        flat.append(v.reshape(-1))
        have += base.numel()
    if len(flat) > 1:
        return torch.cat(flat)[:numel].clone()
    start = (base.numel() - numel) // 2
    return flat[0][start : start + numel].clone()
