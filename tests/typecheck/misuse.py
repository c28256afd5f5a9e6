"""Mistakes a type checker must catch with the package's types: each line marked `# E: code` must
draw exactly that mypy error code, and no other line may draw one (tests/test_typing.py). Without
py.typed and the fields written out in Options, none of these would be found."""

from __future__ import annotations

import torch

import zccl_torch
from zccl_torch.hooks import ZcclHookState
from zccl_torch.policy import NormRelative

x = torch.randn(100)
zccl_torch.Options(eror_bound=1e-3)  # E: call-arg
zccl_torch.Options(error_bound="1e-3")  # E: arg-type
options = zccl_torch.Options()
options.error_bound = 1e-2  # E: misc
zccl_torch.compress(x.numpy(), 1e-3)  # E: arg-type
zccl_torch.quantize(x, 1e-3, residual=True).abs()  # E: attr-defined
zccl_torch.stream_info(zccl_torch.compress(x, 1e-3)).numel + "values"  # E: operator
ZcclHookState(policy=NormRelative("rms"))  # E: arg-type
zccl_torch.total_stats(reset="yes")  # E: arg-type
with zccl_torch.config(eror_bound=1e-3):  # E: call-arg
    pass
with zccl_torch.config(threads="2"):  # E: arg-type
    pass
