"""The CPU codec of two revisions side by side: ratio, one-thread compress / decompress speed and
the ring all_reduce's float hop (recompress_add; the base must have it: 4cb5743 or later).

Builds ``codec_speed/codec_speed.cpp`` against ``csrc/compress`` of a git revision (``--base``,
default ``HEAD``) and of the working tree, with the extension's flags (``-O3 -march=native
-ffp-contract=off``, zstd when present), then runs both, interleaved, on the same inputs: the
GPU comparison's gradient-like noise and wavefield (``gpu_codec.py``; ``predictor_choice.py``
uses them too) at REL 1e-2..1e-4, one thread: ``--rounds`` runs of each program, alternating, each
timing ``--repeats`` calls; medians. Prints a table and
writes ``results/codec_revisions.json``.

    python benchmarks/codec_revisions.py --base 6113997 [--mb 64] [--repeats 7] [--rounds 3]

Speeds on a shared VM drift between runs; compare the two columns of one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bench_data  # benchmarks/bench_data.py
import gpu_codec
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "codec_revisions.json"
SOURCES = ("fzlight.cpp", "crc32c.cpp")


def sources(rev: str | None, into: Path) -> Path:
    """csrc/compress of ``rev`` (None: the working tree) copied into ``into``."""
    into.mkdir(parents=True)
    if rev is None:
        for path in (ROOT / "csrc" / "compress").iterdir():
            if path.is_file():
                shutil.copy(path, into / path.name)
        return into
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", rev, "csrc/compress/"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in names:
        blob = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        (into / Path(path).name).write_bytes(blob)
    return into


def zstd_available() -> bool:
    """Whether libzstd can be linked (the extension's lossless codec)."""
    return bool(
        shutil.which("pkg-config")
        and subprocess.run(["pkg-config", "--exists", "libzstd"], check=False).returncode == 0
    )


def short_revision(rev: str) -> str:
    """``git rev-parse --short`` of rev."""
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _build(src: Path, exe: Path, march: str = "native") -> None:
    zstd = zstd_available()
    cmd = ["g++", "-std=c++17", "-O3", f"-march={march}", "-ffp-contract=off", "-fopenmp"]
    cmd += ["-DZCCL_WITH_ZSTD=1"] if zstd else []
    cmd += [f"-I{src}", str(HERE / "codec_speed" / "codec_speed.cpp")]
    cmd += [str(src / s) for s in SOURCES] + ["-o", str(exe)] + (["-lzstd"] if zstd else [])
    subprocess.run(cmd, check=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    p.add_argument("--mb", type=int, default=64, help="MiB of float32 per input (default 64)")
    p.add_argument("--repeats", type=int, default=7, help="timed calls per run")
    p.add_argument("--rounds", type=int, default=3, help="alternating runs of the two programs")
    p.add_argument(
        "--march",
        default="native",
        help="-march of both builds (default native; e.g. x86-64-v3 for the AVX2 kernels, "
        "skylake-avx512 for AVX-512 without GFNI, x86-64-v2 for the scalar ones)",
    )
    p.add_argument("--rels", default="1e-2,1e-3,1e-4")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    base = short_revision(args.base)
    n = args.mb * (1 << 20) // 4
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exes = {"base": t / "base_speed", "tree": t / "tree_speed"}
        # Both programs compile at once (each is one g++ of the codec, ~20 s on this VM).
        srcs = {"base": sources(base, t / "base"), "tree": sources(None, t / "tree")}
        with ThreadPoolExecutor(max_workers=2) as pool:
            for done in [pool.submit(_build, srcs[w], exes[w], args.march) for w in exes]:
                done.result()
        print(
            f"| data | REL | ratio {base} | ratio tree | compress GB/s {base} / tree | "
            f"decompress GB/s {base} / tree | hop GB/s {base} / tree |\n"
            "|---|---|---|---|---|---|---|"
        )
        for data in ("gradients", "wavefield"):
            x = gpu_codec.GENERATORS[data](n)
            path = t / f"{data}.f32"
            x.astype(np.float32).tofile(path)
            for rel in (float(r) for r in args.rels.split(",")):
                eb = gpu_codec.absolute_bound(x, rel)
                # Rounds alternate the two programs, so a slow spell of the shared VM falls on
                # both; each time is the median over the rounds of each run's median.
                runs: dict[str, list[dict[str, float]]] = {which: [] for which in exes}
                for _ in range(args.rounds):
                    for which, exe in exes.items():
                        out = subprocess.run(
                            [str(exe), str(path), repr(eb), str(args.repeats)],
                            check=True,
                            capture_output=True,
                            text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"},
                        ).stdout
                        runs[which].append(json.loads(out))
                        assert runs[which][-1]["err_over_eb"] <= 1.0, (which, data, rel, out)
                got = {
                    which: {key: statistics.median(r[key] for r in rs) for key in rs[0]}
                    for which, rs in runs.items()
                }
                gb = x.nbytes / 1e9
                row = {"data": data, "rel": rel, "eb": eb, "n": int(x.size)}
                for which in exes:
                    row[f"{which}_ratio"] = got[which]["ratio"]
                    row[f"{which}_compress_gbps"] = gb / got[which]["compress_s"]
                    row[f"{which}_decompress_gbps"] = gb / got[which]["decompress_s"]
                    # the hop codes half of the input (its second half is the addend)
                    row[f"{which}_hop_gbps"] = gb / 2 / got[which]["hop_s"]
                rows.append(row)
                print(
                    f"| {data} | {rel:.0e} | {row['base_ratio']:.2f} | {row['tree_ratio']:.2f} | "
                    f"{row['base_compress_gbps']:.2f} / {row['tree_compress_gbps']:.2f} | "
                    f"{row['base_decompress_gbps']:.2f} / {row['tree_decompress_gbps']:.2f} | "
                    f"{row['base_hop_gbps']:.2f} / {row['tree_hop_gbps']:.2f} |",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "codec_revisions",
                "command": f"python benchmarks/codec_revisions.py --base {base} --mb {args.mb} "
                f"--repeats {args.repeats} --rounds {args.rounds} --march {args.march}",
                "march": args.march,
                "base": base,
                "threads": 1,
                # ZCCL_BENCH_EDGE: smoke runs simulate a smaller wavefield (not the benchmark's)
                "field_edge": bench_data.EDGE,
                "rows": rows,
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
