"""The link estimate behind ZCCL_MEASURE_LINK / zccl_torch.measure_link (zccl_torch/link.py):
its arithmetic, its bounds and its argument errors, in one process. The multi-rank checks
(tests/mpi/conformance_checks.py, ``measured_link_*``) measure real groups over both transports,
and tests/test_cluster.py on the emulated 1 Gbit/s cluster."""

from __future__ import annotations

import pytest
import torch.distributed as dist

import zccl_torch
from zccl_torch import link


def test_estimate_is_the_probe_over_the_extra_time() -> None:
    # 1 MiB in 8 ms more than a one-byte exchange of 25 us: (2^20 - 1) * 8 bits / 8 ms
    est = link.estimate_link(25e-6, 25e-6 + 8e-3, 1 << 20, 5)
    assert est.gbps == 8.0 * ((1 << 20) - 1) / 8e-3 / 1e9
    assert est.latency_us == 25e-6 * 1e6
    assert (est.probe_bytes, est.repeats) == (1 << 20, 5)
    assert est.settings() == {"link_gbps": est.gbps, "link_latency_us": est.latency_us}
    # The figures are settings the backend accepts as they are.
    assert zccl_torch.Options(**est.settings()).link_gbps == est.gbps


@pytest.mark.parametrize(
    ("small", "large", "want"),
    [
        (1e-5, 1e-5, link.MAX_GBPS),  # no measurable transfer time: faster than the probe resolves
        (1e-5, 5e-6, link.MAX_GBPS),  # noise made the probe look faster than one byte
        (1e-6, 1e-6 + 1e-10, link.MAX_GBPS),  # 80 Tbit/s: clamped
        (0.0, 1e4, link.MIN_GBPS),  # 8e-10 Gbit/s: clamped to the setting's minimum
    ],
)
def test_estimate_is_clamped_to_what_the_setting_allows(
    small: float, large: float, want: float
) -> None:
    est = link.estimate_link(small, large, 1000)
    assert est.gbps == want
    zccl_torch.Options(**est.settings())  # valid settings


def test_estimate_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="probe_bytes must be >= 2"):
        link.estimate_link(1e-6, 1e-3, 1)
    with pytest.raises(ValueError, match="exchange times must be >= 0"):
        link.estimate_link(-1.0, 1e-3, 1 << 20)
    with pytest.raises(ValueError, match="exchange times must be >= 0"):
        link.estimate_link(1e-6, float("nan"), 1 << 20)


@pytest.mark.parametrize(
    ("raw", "want"), [(None, False), ("", False), ("0", False), ("1", True), (" 1 ", True)]
)
def test_measure_on_create_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch, raw: str | None, want: bool
) -> None:
    if raw is None:
        monkeypatch.delenv("ZCCL_MEASURE_LINK", raising=False)
    else:
        monkeypatch.setenv("ZCCL_MEASURE_LINK", raw)
    assert link.measure_on_create() is want


@pytest.mark.parametrize("raw", ["yes", "2", "true"])
def test_measure_on_create_refuses_other_values(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("ZCCL_MEASURE_LINK", raw)
    with pytest.raises(ValueError, match="ZCCL_MEASURE_LINK must be 0 or 1"):
        link.measure_on_create()


def test_measure_link_needs_a_process_group() -> None:
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="not initialised"):
        zccl_torch.measure_link()
