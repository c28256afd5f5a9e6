"""How the stream format's choices were made: fZ-light's encoded-chunk layout against alternatives.

For each field and relative bound it computes, from the quantisation codes the encoder produces
(``q = round(x / bin)`` with the encoder's bin, 1-D Lorenzo deltas per 5120-value chunk), the
stream size each layout would give, and puts the real encoder's ratio beside them:

* ``v1``: one code-length byte per 32-value block (format version 1).
* ``v1 B64`` / ``v1 B128``: the same with 64- or 128-value blocks (fewer length bytes, but one
  large delta widens more values).
* ``bitmap`` (format version 2): one bit per block saying whether it is zero, a length byte per
  nonzero block.
* ``len5``: five bits per block for the length, packed.
* ``v2 + zstd``: the real version-2 stream with each chunk put through zstd level 1 as a second
  lossless stage (measured, with its extra compress time per chunk).

Estimates count the planes, lengths and per-chunk fixed bytes exactly but not the outliers (rare:
at most a few per million values here), so they sit slightly above the real encoder; they are for
comparing layouts with each other. Writes ``benchmarks/results/format_alternatives.json``.

Usage::

    python benchmarks/format_alternatives.py [--size 128]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import sample_fields  # benchmarks/sample_fields.py
import torch

import zccl_torch

CHUNK = 5120
CHUNK_FIXED = 9 + 8  # chunk header (mode, q_start, n_outliers) + chunk table entry
BOUNDS = (1e-2, 1e-3, 1e-4, 1e-5)
OUT = Path(__file__).resolve().parent / "results" / "format_alternatives.json"


def block_lengths(deltas: np.ndarray, block: int) -> np.ndarray:
    """Code length L (bits of the largest |delta|) of every block of a chunk's deltas."""
    nb = -(-deltas.size // block)
    padded = np.zeros(nb * block, dtype=np.int64)
    padded[: deltas.size] = np.abs(deltas)
    mags = padded.reshape(nb, block).max(axis=1)
    return np.where(mags > 0, np.floor(np.log2(np.maximum(mags, 1))) + 1, 0).astype(np.int64)


def layout_sizes(x: np.ndarray, eb: float) -> dict[str, float]:
    """Estimated stream bytes of every layout (see the module docstring)."""
    bin_ = 2 * eb * (1 - 2**-10)
    q = np.rint(x.astype(np.float64) / bin_).astype(np.int64)
    sizes = dict.fromkeys(("v1", "v1 B64", "v1 B128", "bitmap", "len5"), 0.0)
    for c in range(0, q.size, CHUNK):
        qc = q[c : c + CHUNK]
        if np.all(x[c : c + CHUNK] == x[c]):  # constant chunk: v2 stores one value
            blocks = {"v1": 32, "v1 B64": 64, "v1 B128": 128}
            for k in sizes:  # v1 layouts: all blocks zero, one length byte each
                sizes[k] += (
                    CHUNK_FIXED + -(-qc.size // blocks[k]) if k in blocks else (8 + 1 + x.itemsize)
                )
            continue
        d = np.diff(qc, prepend=qc[0])
        for key, block in (("v1", 32), ("v1 B64", 64), ("v1 B128", 128)):
            lens = block_lengths(d, block)
            sizes[key] += CHUNK_FIXED + lens.size + ((lens > 0) * (lens + 1) * block / 8).sum()
        lens = block_lengths(d, 32)
        planes = ((lens > 0) * (lens + 1) * 4).sum()
        sizes["bitmap"] += CHUNK_FIXED + -(-lens.size // 8) + (lens > 0).sum() + planes
        sizes["len5"] += CHUNK_FIXED + -(-lens.size * 5 // 8) + planes
    return sizes


def zstd_second_stage(stream: bytes, info: zccl_torch.StreamInfo) -> tuple[int, float]:
    """(bytes, seconds) of the stream with its data section put through zstd level 1 per
    chunk-sized slice (chunk boundaries approximated by equal slices of the data section)."""
    import zstandard

    data = stream[info.header_bytes :]
    step = max(1, -(-len(data) // max(info.num_chunks, 1)))
    cctx = zstandard.ZstdCompressor(level=1)
    t0 = time.perf_counter()
    total = info.header_bytes + sum(
        min(len(cctx.compress(data[i : i + step])), len(data[i : i + step]))
        for i in range(0, len(data), step)
    )
    return total, time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=128, help="wavefield edge (default 128)")
    args = parser.parse_args()
    cube = (args.size,) * 3
    fields = {
        "wavefield (front 55 %)": sample_fields.acoustic_wavefield_3d(cube),
        "wavefield quiet (front 12 %)": sample_fields.acoustic_wavefield_3d(cube, reach=0.12),
        "laplace": sample_fields.laplace_noise(args.size**3, scale=1e-3),
    }
    rows = []
    head = "| field | REL | real v2 | v1 | v1 B64 | v1 B128 | bitmap (v2) | len5 | v2 + zstd |"
    print(head + "\n" + "|---" * (head.count("|") - 1) + "|")
    for name, t in fields.items():
        x = t.numpy().reshape(-1)
        raw = x.size * x.itemsize
        for rel in BOUNDS:
            eb = zccl_torch.resolve_error_bound(t, rel, "rel")
            t0 = time.perf_counter()
            s = zccl_torch.compress(t, eb, threads=1)
            encode_s = time.perf_counter() - t0
            second, second_s = zstd_second_stage(s.numpy().tobytes(), zccl_torch.stream_info(s))
            ratios = {k: raw / v for k, v in layout_sizes(x, eb).items()}
            row = {
                "field": name,
                "rel": rel,
                "real_v2": raw / s.numel(),
                **ratios,
                "v2_zstd": raw / second,
                "encode_seconds": encode_s,
                "zstd_stage_seconds": second_s,
            }
            rows.append(row)
            print(
                f"| {name} | {rel:.0e} | {row['real_v2']:.1f} | {ratios['v1']:.1f} | "
                f"{ratios['v1 B64']:.1f} | {ratios['v1 B128']:.1f} | {ratios['bitmap']:.1f} | "
                f"{ratios['len5']:.1f} | {row['v2_zstd']:.1f} "
                f"(+{100 * second_s / encode_s:.0f} % time) |"
            )
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"chunk": CHUNK, "rows": rows}, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
