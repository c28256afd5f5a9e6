"""The training task of ``benchmarks/ddp_cluster.py``: a wide MLP on a seeded teacher task.

Inputs are standard-normal vectors; labels are the argmax of a fixed random two-layer "teacher"
network (drawn from the seed), so the task is learnable, identical on every rank and in every
run, and needs no download. The student is a plain MLP whose hidden widths are chosen so that
the gradients are large (26.2M parameters, 105 MB of float32 gradients per step at the default
``256,4096,4096,2048,10``) while a CPU still steps it in a fraction of a second at a small batch:
the cost of one step is dominated by reading and writing the weights, not by arithmetic.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch
from torch import nn

DEFAULT_DIMS = (256, 4096, 4096, 2048, 10)
SMOKE_DIMS = (64, 256, 256, 10)  # one 256x256 weight (256 KB) still crosses zccl's 64 KB floor
TEACHER_HIDDEN = 64
TEACHER_SHARPNESS = 6.0  # scales the teacher logits: clear argmax, classes roughly balanced


@dataclass(frozen=True)
class Task:
    """A fixed synthetic classification task (``seed`` picks the teacher and the samples)."""

    in_dim: int
    classes: int
    seed: int

    def teacher(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The teacher's two weight matrices (same for train and held-out samples)."""
        gen = torch.Generator().manual_seed(self.seed)
        w1 = torch.randn(self.in_dim, TEACHER_HIDDEN, generator=gen) / math.sqrt(self.in_dim)
        w2 = torch.randn(TEACHER_HIDDEN, self.classes, generator=gen) / math.sqrt(TEACHER_HIDDEN)
        return w1, w2

    def samples(self, n: int, split: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``n`` inputs ``[n, in_dim]`` (float32) and labels ``[n]`` (int64) of ``split``
        (0 train, 1 held out): distinct generators, so the splits never share a sample."""
        w1, w2 = self.teacher()
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + 17 + split)
        x = torch.randn(n, self.in_dim, generator=gen)
        labels = (torch.tanh(x @ w1) @ w2 * TEACHER_SHARPNESS).argmax(dim=1)
        return x, labels


class WideMLP(nn.Sequential):
    """Linear layers of the given widths with ReLU between them (logits out)."""

    def __init__(self, dims: tuple[int, ...]) -> None:
        if len(dims) < 2:
            raise ValueError(f"an MLP needs at least input and output widths, got {dims}")
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(itertools.pairwise(dims)):
            layers.append(nn.Linear(fan_in, fan_out))
            if i < len(dims) - 2:
                layers.append(nn.ReLU())
        super().__init__(*layers)


def parameter_count(dims: tuple[int, ...]) -> int:
    """Parameters of ``WideMLP(dims)`` without building it (weights plus biases)."""
    return sum(a * b + b for a, b in itertools.pairwise(dims))


def lr_at(step: int, steps: int, base: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 10 % of ``base``: the decay
    makes the last steps' losses steadier, so final losses of different runs compare better."""
    if step < warmup:
        return base * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return base * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def batch_indices(
    step: int, rank: int, world: int, batch: int, order: torch.Tensor
) -> torch.Tensor:
    """This rank's sample indices at ``step``: consecutive global batches of ``batch * world``
    from the fixed permutation ``order`` (wrapping around), rank ``r`` taking the r-th slice, so
    every contender sees exactly the same samples in the same order."""
    n = order.numel()
    start = (step * batch * world + rank * batch) % n
    idx = torch.arange(start, start + batch) % n
    return order[idx]
