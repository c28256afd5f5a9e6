"""The DDP hook's error-feedback residuals are kept per parameter, so they follow a parameter
across DDP's bucket rebuilds and across a checkpoint into a fresh DDP (single process: the hook
only reads a bucket's index, parameters and buffer, which a stand-in provides)."""

from __future__ import annotations

import io

import torch

from zccl_torch.hooks import ZcclHookState


class FakeBucket:
    """The part of ``dist.GradBucket`` the residual bookkeeping reads."""

    def __init__(self, index: int, params: list[torch.Tensor]) -> None:
        self._index = index
        self._params = params
        self._buffer = torch.zeros(sum(p.numel() for p in params))

    def index(self) -> int:
        return self._index

    def parameters(self) -> list[torch.Tensor]:
        return self._params

    def buffer(self) -> torch.Tensor:
        return self._buffer


def two_layer() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))


def test_residual_follows_parameters_into_another_bucket_order() -> None:
    model = two_layer()
    params = list(model.parameters())  # 0.weight(6), 0.bias(2), 1.weight(2), 1.bias(1)
    state = ZcclHookState(model=model)
    initial = FakeBucket(0, params[::-1])  # DDP's initial buckets: reverse order
    state._store_residual(initial, torch.arange(11.0))
    rebuilt = FakeBucket(0, [params[2], params[3], params[0], params[1]])  # same index, other order
    got = state.bucket_residual(rebuilt)
    # initial layout: 1.bias=[0], 1.weight=[1,2], 0.bias=[3,4], 0.weight=[5..10]
    want = torch.tensor([1.0, 2.0, 0.0, 5, 6, 7, 8, 9, 10, 3, 4])
    assert got is not None and torch.equal(got, want)
    # A bucket of other parameters sees no residual; an unknown parameter gets zeros.
    assert state.bucket_residual(FakeBucket(1, [torch.nn.Parameter(torch.zeros(4))])) is None


def test_residuals_survive_a_checkpoint_with_and_without_names() -> None:
    for with_names in (True, False):
        model = two_layer()
        state = ZcclHookState(model=model if with_names else None)
        params = list(model.parameters())
        state._store_residual(FakeBucket(0, params[::-1]), torch.arange(11.0))
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        restored = torch.load(buf, weights_only=False)
        fresh = two_layer()  # new parameter objects, as in a resumed process
        if with_names:
            restored.model = fresh
        got = restored.bucket_residual(FakeBucket(0, list(fresh.parameters())[::-1]))
        assert got is not None and torch.equal(got, torch.arange(11.0)), with_names


def test_residual_of_other_size_or_dtype_is_not_reused() -> None:
    model = two_layer()
    state = ZcclHookState(model=model)
    params = list(model.parameters())
    state._store_residual(FakeBucket(0, params), torch.ones(11))
    state.residuals["0.bias"] = torch.ones(5)  # a checkpoint of another model shape
    got = state.bucket_residual(FakeBucket(0, params), torch.float32)
    assert got is not None and torch.equal(got[6:8], torch.zeros(2)) and float(got.sum()) == 9.0
    got64 = state.bucket_residual(FakeBucket(0, params), torch.float64)
    assert got64 is not None and float(got64.abs().sum()) == 0.0


def test_live_residual_is_the_stored_buffer_only_when_back_to_back() -> None:
    model = two_layer()
    params = list(model.parameters())
    state = ZcclHookState(model=model)
    bucket = FakeBucket(0, params)
    stored = torch.arange(11, dtype=torch.float32)
    state._store_residual(bucket, stored)
    live = state.bucket_residual(bucket, live=True)
    copy = state.bucket_residual(bucket)
    assert torch.equal(live, stored) and torch.equal(copy, stored)
    assert live.data_ptr() == stored.data_ptr()  # no copy: the hook overwrites it in place
    assert copy.data_ptr() != stored.data_ptr()  # the public default stays a new tensor
    # Another order (a rebuilt bucket): not back to back, so a copy in the new order.
    rebuilt = FakeBucket(0, params[::-1])
    reordered = state.bucket_residual(rebuilt, live=True)
    assert reordered.data_ptr() != stored.data_ptr()
    assert torch.equal(reordered, torch.cat([stored[10:], stored[8:10], stored[6:8], stored[:6]]))
    # Another dtype: converted, never the stored buffer.
    assert state.bucket_residual(bucket, torch.float64, live=True).data_ptr() != stored.data_ptr()


def test_staging_buffers_are_reused_resized_and_not_saved() -> None:
    state = ZcclHookState()
    first = state._staged(0, 1, "payload", 100, torch.float32)
    # Same bucket, payload, role, size and dtype: the same memory (no allocation per step).
    assert state._staged(0, 1, "payload", 100, torch.float32).data_ptr() == first.data_ptr()
    # Another role or payload has its own buffer; a new size or dtype replaces the old one.
    assert state._staged(0, 1, "residual", 100, torch.float32).data_ptr() != first.data_ptr()
    assert state._staged(0, 2, "payload", 100, torch.float32).data_ptr() != first.data_ptr()
    grown = state._staged(0, 1, "payload", 101, torch.float32)
    assert grown.numel() == 101 and grown.dtype == torch.float32
    wide = state._staged(0, 1, "payload", 101, torch.float64)
    assert wide.numel() == 101 and wide.dtype == torch.float64
    buf = io.BytesIO()
    torch.save(state, buf)  # scratch memory is not part of a checkpoint
    buf.seek(0)
    restored = torch.load(buf, weights_only=False)
    assert restored._staging == {} and "_staging" not in state.__getstate__()
