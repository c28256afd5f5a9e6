"""Quality metrics for lossy reconstructions, computed in float64.

Conventions (the ones SZ-family papers use): the *value range* is max - min of the original's
finite values; PSNR = 20*log10(range) - 10*log10(MSE); NRMSE = RMSE / range. Errors are taken over
positions where the original is finite; a non-finite original value must be reproduced exactly
(same NaN-ness, same infinity) or the error is infinite.
"""

from __future__ import annotations

import math

import torch

__all__ = ["compression_ratio", "error_summary", "max_abs_error", "nrmse", "psnr", "value_range"]


def _pair(original: torch.Tensor, reconstructed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if original.shape != reconstructed.shape:
        raise ValueError(
            f"shape mismatch: original {tuple(original.shape)} vs "
            f"reconstructed {tuple(reconstructed.shape)}"
        )
    return original.detach().reshape(-1).double(), reconstructed.detach().reshape(-1).double()


def _nonfinite_mismatch(x: torch.Tensor, y: torch.Tensor) -> bool:
    """True if a non-finite value changed, or a finite one came back non-finite."""
    x_finite, y_finite = torch.isfinite(x), torch.isfinite(y)
    if bool((x_finite & ~y_finite).any()):
        return True
    bad = ~x_finite
    if not bool(bad.any()):
        return False
    same_nan = torch.isnan(x[bad]) & torch.isnan(y[bad])
    same_inf = x[bad] == y[bad]
    return not bool((same_nan | same_inf).all())


def value_range(original: torch.Tensor) -> float:
    """max - min over the finite values of ``original`` (0 for an empty or all-non-finite one)."""
    x = original.detach().reshape(-1).double()
    x = x[torch.isfinite(x)]
    return float(x.max() - x.min()) if x.numel() else 0.0


def max_abs_error(original: torch.Tensor, reconstructed: torch.Tensor) -> float:
    """Largest |x - x'| over finite x, in float64; ``inf`` if a non-finite value changed."""
    x, y = _pair(original, reconstructed)
    if _nonfinite_mismatch(x, y):
        return math.inf
    finite = torch.isfinite(x)
    if not bool(finite.any()):
        return 0.0
    return float((x[finite] - y[finite]).abs().max())


def _mse(x: torch.Tensor, y: torch.Tensor) -> float:
    finite = torch.isfinite(x)
    if not bool(finite.any()):
        return 0.0
    return float(((x[finite] - y[finite]) ** 2).mean())


def psnr(original: torch.Tensor, reconstructed: torch.Tensor) -> float:
    """Peak signal-to-noise ratio in dB over the original's value range (``inf`` if exact)."""
    x, y = _pair(original, reconstructed)
    if _nonfinite_mismatch(x, y):
        return -math.inf
    mse = _mse(x, y)
    if mse == 0.0:
        return math.inf
    rng = value_range(x)
    if rng == 0.0:
        return -math.inf
    return 20.0 * math.log10(rng) - 10.0 * math.log10(mse)


def nrmse(original: torch.Tensor, reconstructed: torch.Tensor) -> float:
    """Root-mean-square error divided by the original's value range (0 if exact)."""
    x, y = _pair(original, reconstructed)
    if _nonfinite_mismatch(x, y):
        return math.inf
    rmse = math.sqrt(_mse(x, y))
    if rmse == 0.0:
        return 0.0
    rng = value_range(x)
    return rmse / rng if rng > 0 else math.inf


def compression_ratio(original: torch.Tensor, stream: torch.Tensor | int) -> float:
    """Uncompressed bytes of ``original`` over the stream's bytes (a tensor or a byte count)."""
    raw = original.numel() * original.element_size()
    size = stream if isinstance(stream, int) else stream.numel() * stream.element_size()
    if size <= 0:
        raise ValueError("compressed size must be positive")
    return raw / size


def error_summary(
    original: torch.Tensor, reconstructed: torch.Tensor, stream: torch.Tensor | int | None = None
) -> dict[str, float]:
    """All of the above in one dict (``ratio`` only when a stream or its size is given)."""
    out = {
        "max_abs_error": max_abs_error(original, reconstructed),
        "psnr": psnr(original, reconstructed),
        "nrmse": nrmse(original, reconstructed),
        "value_range": value_range(original),
    }
    if stream is not None:
        out["ratio"] = compression_ratio(original, stream)
    return out
