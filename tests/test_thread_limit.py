"""The CPU codec under OMP_THREAD_LIMIT below the ``threads`` asked for.

OpenMP then hands out teams smaller than asked (as it does in a nested region). The threaded
compressor once left the runs of chunks between the team's size and the threads asked for
uncoded (a corrupt stream), and the value-range scan behind ``mode="rel"`` left slices unread
(a silently wider range, so a looser bound than documented). A thread limit is fixed when a
process starts, so each case runs in a fresh interpreter and is compared with this process's
results (no limit).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import zccl_torch

ROOT = Path(__file__).resolve().parents[1]

# Values in [5, 10]: an unread slice of the range scan would show as a minimum of 0.
SCRIPT = """
import hashlib, json, torch, zccl_torch
x = 5.0 + 5.0 * torch.rand(3_000_017, generator=torch.Generator().manual_seed(5))
out = {"eb": zccl_torch.resolve_error_bound(x, 1e-3, "rel")}
for threads in (1, 2, 4):
    for hooked in (False, True):
        hook = (lambda done, total: None) if hooked else None
        s = zccl_torch.compress(x, 1e-3, mode="rel", threads=threads, progress=hook)
        y = zccl_torch.decompress(s, threads=threads)
        digest = hashlib.sha256(s.numpy().tobytes()).hexdigest()
        out[f"{threads}-{hooked}"] = [digest, float((x.double() - y.double()).abs().max())]
print(json.dumps(out))
"""


def run(limit: str | None) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_THREAD_LIMIT"}
    if limit is not None:
        env["OMP_THREAD_LIMIT"] = limit
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("limit", ["1", "3"])
def test_streams_and_rel_bound_ignore_the_thread_limit(limit: str) -> None:
    free, limited = run(None), run(limit)
    x = 5.0 + 5.0 * torch.rand(3_000_017, generator=torch.Generator().manual_seed(5))
    eb = 1e-3 * (float(x.max()) - float(x.min()))
    assert free["eb"] == eb and limited["eb"] == eb, (free["eb"], limited["eb"], eb)
    for key in free:
        if key == "eb":
            continue
        assert limited[key][0] == free[key][0], f"stream differs under the limit: {key}"
        assert limited[key][1] <= eb, (key, limited[key][1], eb)
    assert zccl_torch.resolve_error_bound(x, 1e-3, "rel") == eb
