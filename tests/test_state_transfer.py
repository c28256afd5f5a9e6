"""torch's state-transfer paths run exact on zccl groups (zccl_torch/state_transfer.py).

Under real mpirun (tests/mpi/state_transfer_checks.py, 2 and 3 ranks, every payload
compressible): distribute_tensor, DTensor.from_local(run_check=True), DDP's construction,
parallelize_module, the checkpoint state-dict API (full state dicts, broadcast_from_rank0 loads),
FSDP1's full state dicts, DCP's BroadcastingTorchSaveReader, ShardedTensor's
ChunkShardingSpec.shard, ZeroRedundancyOptimizer's parameter sync and model averaging copy state
bit for bit, while training and the functional collectives compress. Without the patches each of
those eleven checks fails (values move by up to eb).

Here, without MPI: every target of the pinned torch is patched whatever the import order, once.
"""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

from tests.mpi_launch import ROOT, assert_every_check_passed, mpirun, python_argv

SCRIPT = "tests/mpi/state_transfer_checks.py"

# Every target module imported before zccl_torch, or after it: either way all are patched.
PROBE = """
import importlib, sys
names = {names!r}
if {before}:
    for n in names: importlib.import_module(n)
import zccl_torch
from zccl_torch import state_transfer as st
missing = []
for n, paths in st.TARGETS.items():
    module = importlib.import_module(n)
    missing += [f"{{n}}.{{p}}" for p in paths if not st.is_exact(module, p)]
print("NOT EXACT:", missing)
"""


@pytest.mark.parametrize("nprocs", [2, 3])
def test_state_transfer_exact_on_zccl(nprocs: int) -> None:
    done = mpirun(nprocs, python_argv(SCRIPT), timeout=600)
    report = done.stdout + done.stderr
    assert done.returncode == 0, report[-8000:]
    assert_every_check_passed(report, nprocs)


@pytest.mark.parametrize("before", [True, False], ids=["torch-modules-first", "zccl-first"])
def test_every_target_patched_whatever_the_import_order(before: bool) -> None:
    from zccl_torch import state_transfer

    code = PROBE.format(names=list(state_transfer.TARGETS), before=before)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "NOT EXACT: []" in done.stdout, done.stdout + done.stderr[-2000:]


def test_patch_is_idempotent_and_skips_absent_names() -> None:
    import zccl_torch
    from zccl_torch import state_transfer

    class Holder:
        @staticmethod
        def method() -> object:
            return zccl_torch.current_options().algorithm

    module = types.ModuleType("fake_torch_module")
    module.function = lambda: zccl_torch.current_options().algorithm  # type: ignore[attr-defined]
    module.Holder = Holder  # type: ignore[attr-defined]
    paths = ("function", "Holder.method", "absent", "Absent.method")
    state_transfer._patch(paths, module)
    once = module.function  # type: ignore[attr-defined]
    state_transfer._patch(paths, module)  # a second time: nothing wrapped twice
    assert module.function is once  # type: ignore[attr-defined]
    assert state_transfer.is_exact(module, "function")
    assert state_transfer.is_exact(module, "Holder.method")
    assert not state_transfer.is_exact(module, "absent")
    assert not hasattr(module, "absent")
    # The wrapped functions run with algorithm="mpi"; outside them the setting is back.
    assert module.function() == "mpi"  # type: ignore[attr-defined]
    assert Holder.method() == "mpi"
    assert zccl_torch.current_options().algorithm != "mpi"
