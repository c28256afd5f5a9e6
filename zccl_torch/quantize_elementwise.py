"""fZ-light's quantiser written with elementwise torch operations, for tensors on any device.

:func:`zccl_torch.quantize` runs the C++ quantiser (SIMD, OpenMP) on CPU tensors; for a CUDA
tensor it runs this instead, on the tensor's own device, so error feedback never copies gradients
to the host. It reproduces ``fz::quantize`` (csrc/compress/fzlight.cpp, fzlight_block.h) bit for
bit, step by step in the same arithmetic type (C: float32 for float32/float16/bfloat16 values,
float64 for float64), each step one IEEE operation rounded to nearest even:

* ``bin``, ``1/bin``: from the C++ side (``_C.quantizer_bins``), so the bins cannot drift;
* ``scaled = C(x) * inv_bin``; a value with ``|scaled| >= 2^30 - 64``, NaN or Inf is kept exactly;
* ``q = int32(rint(scaled))`` (ties to even; through int32 as in C++, so -0.0 becomes 0);
* ``x' = S(C(q) * bin)`` (S: the storage type, so half types round once, to nearest even);
* kept exactly too when ``|double(x) - double(x')| > eb`` (the bound, checked in float64);
* residual ``S(C(x) - C(x'))``, 0 where a value is kept exactly.

tests/test_quantize.py compares it with the C++ quantiser bit for bit on CPU tensors; the GPU
check ``quantize_on_cuda_matches_cpu`` (tests/mpi/gpu_backend_checks.py) does so on CUDA ones.
"""

from __future__ import annotations

import torch

from zccl_torch._native import _C

CODE_LIMIT = 1073741760.0  # 2^30 - 64, exact in float32 and float64 (fzlight_block.h kCodeLimit)
PIECE = 1 << 20  # values per piece: bounds the temporaries (some 70 bytes per value)


def quantize_into(
    src: torch.Tensor, dtype_code: int, eb: float, grid: torch.Tensor, rest: torch.Tensor | None
) -> None:
    """Writes the quantised values of contiguous ``src`` into ``grid`` (may be ``src``) and, when
    given, ``src - grid`` into ``rest``; all three contiguous, same dtype, size and device."""
    bins = _C.quantizer_bins(dtype_code, eb)
    flat_src, flat_grid = src.view(-1), grid.view(-1)
    flat_rest = None if rest is None else rest.view(-1)
    if bins is None:  # lossless, or a bound below the quantiser's floor: every value exact
        if flat_grid.data_ptr() != flat_src.data_ptr():
            flat_grid.copy_(flat_src)
        if flat_rest is not None:
            flat_rest.zero_()
        return
    compute = torch.float64 if src.dtype == torch.float64 else torch.float32
    bin_c = torch.tensor(bins[0], dtype=compute, device=src.device)
    inv_bin_c = torch.tensor(bins[1], dtype=compute, device=src.device)
    for start in range(0, flat_src.numel(), PIECE):
        x = flat_src[start : start + PIECE]
        xc = x.to(compute)
        scaled = xc * inv_bin_c
        codable = scaled.abs() < CODE_LIMIT  # False for NaN and +/-Inf
        q = torch.where(codable, scaled, 0).round().to(torch.int32).to(compute)
        recon = (q * bin_c).to(src.dtype)
        exact = ~(codable & ((x.double() - recon.double()).abs() <= eb))
        if flat_rest is not None:  # before grid: grid may alias src
            r = (xc - recon.to(compute)).to(src.dtype)
            flat_rest[start : start + PIECE].copy_(r.masked_fill_(exact, 0))
        flat_grid[start : start + PIECE].copy_(torch.where(exact, x, recon))
