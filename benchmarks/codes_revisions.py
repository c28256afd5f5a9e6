"""The integer codes of two revisions side by side: one ring hop's segment size and one-thread
combine / decode speed (``integer_ring=True``'s hop, csrc/compress/fzcodes.h).

Compiles ``csrc/compress`` of a git revision (``--base``, default ``HEAD``) and of the working
tree with the extension's flags (``-O3 -march=native -ffp-contract=off``), each under its own
namespace, into one program (``codec_speed/codes_hop*``) that alternates the two call by
call on the same inputs: the hop of ``integer_hop_cost.py`` (the incoming segment holds one
rank's codes, the local rank adds its values) on the RTM-like wavefield and on Gaussian noise,
REL 1e-2..1e-4 of the sum's range on a 4-rank grid. Prints the medians and writes
``results/codes_revisions.json``.

    python benchmarks/codes_revisions.py --base REV [--mvalues 4] [--repeats 41]

A process of its own per input keeps the two revisions' timings comparable; compare the two
columns of one row only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

import codec_revisions
import integer_hop_cost

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "results" / "codes_revisions.json"
SOURCES = ("fzcodes.cpp", "fzlight.cpp", "crc32c.cpp")
FLAGS = ["-std=c++17", "-O3", "-march=native", "-ffp-contract=off", "-fopenmp"]


def _build(base_src: Path, tree_src: Path, exe: Path) -> None:
    """The driver with both revisions' sources, each in its own namespace (codes_hop.h)."""
    zstd = codec_revisions.zstd_available()
    extra = ["-DZCCL_WITH_ZSTD=1"] if zstd else []
    speed = HERE / "codec_speed"
    objects = []
    for label, src in (("base", base_src), ("tree", tree_src)):
        common = [*FLAGS, *extra, f"-Dzccl=zccl_{label}", f"-I{src}", f"-I{speed}"]
        units = [src / name for name in SOURCES] + [speed / "codes_hop_api.cpp"]
        for unit in units:
            obj = exe.parent / f"{label}_{unit.name}.o"
            define = [f"-DHOP_API_NAME=hop_api_{label}"] if unit.parent == speed else []
            subprocess.run(["g++", *common, *define, "-c", str(unit), "-o", str(obj)], check=True)
            objects.append(str(obj))
    cmd = ["g++", *FLAGS, str(speed / "codes_hop.cpp"), *objects, "-o", str(exe)]
    subprocess.run(cmd + (["-lzstd"] if zstd else []), check=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="HEAD", help="git revision to compare against (default HEAD)")
    p.add_argument("--mvalues", type=float, default=4.0, help="million float32 values per rank")
    p.add_argument("--repeats", type=int, default=41)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    base = codec_revisions.short_revision(args.base)
    n = int(args.mvalues * 1e6)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        exe = t / "codes_hop"
        base_src = codec_revisions.sources(base, t / "base")
        _build(base_src, codec_revisions.sources(None, t / "tree"), exe)
        print(
            f"| data | REL | hop bytes {base} / tree | combine ms {base} / tree | "
            f"decode ms {base} / tree |\n|---|---|---|---|---|"
        )
        for kind in ("wavefield", "noise"):
            incoming, local = integer_hop_cost.inputs(kind, n)
            paths = [t / f"{kind}_in.f32", t / f"{kind}_local.f32"]
            for path, x in zip(paths, (incoming, local), strict=True):
                x.numpy().tofile(path)
            total = incoming.double() + local.double()
            for rel in (1e-2, 1e-3, 1e-4):
                eb = rel * float(total.max() - total.min())
                out = subprocess.run(
                    [
                        str(exe),
                        *map(str, paths),
                        repr(eb),
                        str(integer_hop_cost.RANKS),
                        str(args.repeats),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                ).stdout
                got = json.loads(out)
                for which in ("base", "tree"):
                    assert got[which]["err_over_bound"] <= 1.0, (which, kind, rel, got)
                row = {"data": kind, "rel": rel, "eb": eb, "values": n, **got}
                rows.append(row)
                b, tr = got["base"], got["tree"]
                print(
                    f"| {kind} | {rel:.0e} | {b['bytes']} / {tr['bytes']} "
                    f"({tr['bytes'] / b['bytes'] - 1:+.1%}) | "
                    f"{b['combine_s'] * 1e3:.2f} / {tr['combine_s'] * 1e3:.2f} "
                    f"({tr['combine_s'] / b['combine_s']:.2f}x) | "
                    f"{b['decode_s'] * 1e3:.2f} / {tr['decode_s'] * 1e3:.2f} "
                    f"({tr['decode_s'] / b['decode_s']:.2f}x) |",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    command = f"python benchmarks/codes_revisions.py --base {base} --mvalues {args.mvalues:g} "
    command += f"--repeats {args.repeats}"
    args.out.write_text(
        json.dumps(
            {"benchmark": "codes_revisions", "command": command, "base": base, "rows": rows},
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
