"""Python front end of the fZ-light compressor (CPU tensors).

The heavy lifting happens in C++ (``zccl_torch._C``); this module validates arguments, turns a
relative bound into an absolute one and restores dtype and shape.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, overload

import torch

from zccl_torch._native import _C
from zccl_torch.quantize_elementwise import quantize_into

#: Values per independently decodable chunk (also the pipelining granularity).
DEFAULT_CHUNK_SIZE: int = _C.DEFAULT_CHUNK_LEN

_CODE_OF_DTYPE = {torch.float32: 1, torch.float64: 2, torch.float16: 3, torch.bfloat16: 4}
_DTYPE_OF_CODE = {code: dtype for dtype, code in _CODE_OF_DTYPE.items()}

#: Stream format version that :func:`compress` writes (every older version still decodes).
FORMAT_VERSION: int = _C.FORMAT_VERSION

#: Lossless chunk codecs by name, as :class:`StreamInfo` reports them (see ``lossless_codecs``).
_CODEC_NAMES = {0: "none", 1: "zstd"}
_CODEC_AUTO = 255

#: Modes of :func:`compress`.
MODES = ("abs", "rel", "lossless")


def lossless_codec() -> str:
    """The codec ``mode="lossless"`` uses in this build: ``"zstd"`` (byte planes + zstd level 1
    per chunk) when the extension was built with libzstd, else ``"none"`` (raw chunks)."""
    return "zstd" if _C.lossless_codec_available(1) else "none"


ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class StreamInfo:
    """Header of a compressed stream, as :func:`stream_info` reads it.

    ``version`` is the stream format version (1, 2 or 3); ``lossless_codec`` is ``"zstd"`` for a
    stream made with ``mode="lossless"`` by a build with zstd, else ``"none"``.
    """

    version: int
    lossless_codec: str
    dtype: torch.dtype
    numel: int
    shape: tuple[int, ...]
    error_bound: float
    chunk_size: int
    num_chunks: int
    header_bytes: int
    total_bytes: int


def _check_dtype(dtype: torch.dtype) -> int:
    code = _CODE_OF_DTYPE.get(dtype)
    if code is None:
        raise TypeError(
            f"zccl_torch compresses float32, float64, float16 and bfloat16 tensors only, got "
            f"{dtype}; cast first (e.g. tensor.float()) or send it uncompressed"
        )
    return code


def _check_source(tensor: torch.Tensor, what: str) -> int:
    """The dtype code of a tensor ``what`` (compress, estimate_ratio) reads: a dense CPU tensor
    of a compressible dtype (raises naming what is wrong otherwise)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{what} expects a torch.Tensor, got {type(tensor).__name__}")
    code = _check_dtype(tensor.dtype)
    if tensor.device.type != "cpu":
        raise ValueError(f"{what} handles CPU tensors only, got a tensor on {tensor.device}")
    if tensor.layout != torch.strided:
        raise TypeError(f"{what} needs a dense (strided) tensor, got layout {tensor.layout}")
    return code


def _check_threads(threads: int | None) -> int:
    if threads is None:
        return 0
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive int or None, got {threads!r}")
    return threads


def _check_chunk_size(chunk_size: int) -> int:
    block = _C.BLOCK_LEN
    if (
        isinstance(chunk_size, bool)
        or not isinstance(chunk_size, int)
        or chunk_size < block
        or chunk_size > _C.MAX_CHUNK_LEN
        or chunk_size % block
    ):
        raise ValueError(
            f"chunk_size must be a multiple of {block} in [{block}, {_C.MAX_CHUNK_LEN}], "
            f"got {chunk_size!r}"
        )
    return chunk_size


def resolve_error_bound(
    tensor: torch.Tensor, error_bound: float | None, mode: str = "abs"
) -> float:
    """Returns the absolute bound that ``compress(tensor, error_bound, mode)`` would use.

    ``mode="abs"``: ``error_bound`` itself. ``mode="rel"``: ``error_bound`` times the value range
    (max - min over the finite values) of ``tensor``; a tensor with no finite values, or a constant
    one, has range 0 and so is stored exactly. ``mode="lossless"``: 0 (``error_bound`` must be
    ``None`` or 0).
    """
    if mode == "lossless":
        if error_bound is not None and error_bound != 0:
            raise ValueError(
                f"mode='lossless' takes no error bound (None or 0), got {error_bound!r}"
            )
        return 0.0
    if error_bound is None:
        raise TypeError(f"mode={mode!r} needs an error_bound (only mode='lossless' takes none)")
    if isinstance(error_bound, bool) or not isinstance(error_bound, (int, float)):
        raise TypeError(f"error_bound must be a real number, got {type(error_bound).__name__}")
    error_bound = float(error_bound)
    if math.isnan(error_bound) or error_bound < 0 or math.isinf(error_bound):
        raise ValueError(f"error_bound must be finite and >= 0, got {error_bound}")
    if mode == "abs":
        return error_bound
    if mode != "rel":
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    _check_dtype(tensor.dtype)
    lo, hi, finite = _C.finite_range(tensor.detach().contiguous(), 0)
    if not finite:
        return 0.0
    value_range = hi - lo
    if math.isinf(value_range):  # float64 data spanning more than the float64 range
        return error_bound * hi - error_bound * lo
    return error_bound * value_range


def compress(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compresses a CPU floating-point tensor into a self-describing ``torch.uint8`` stream.

    Every finite value ``x`` comes back as ``x'`` with ``abs(x - x') <= eb`` computed in float64,
    where ``eb`` is the absolute bound (see :func:`resolve_error_bound`) and ``x'`` the value
    decoded in the tensor's own dtype. NaN and +/-Inf, and any value that cannot be quantised
    safely, are stored exactly. float16 and bfloat16 tensors are compressed natively (quantised
    in float32, reconstructed in their own precision; the stream is measured against 2-byte
    values). ``mode="lossless"`` (or ``error_bound=0``) is bit-exact for every value, NaN
    payloads, -0.0 and denormals included; its chunks are coded with :func:`lossless_codec`.
    Chunks whose values all have the same bits cost a few bytes, and a run of them 8 bytes per
    chunk, whatever the mode.

    Args:
        tensor: CPU or CUDA tensor of dtype float32, float64, float16 or bfloat16, any shape
            (a CUDA tensor is quantised on its device, in elementwise torch operations).
            Non-contiguous tensors are copied to contiguous memory first.
        error_bound: the bound, interpreted according to ``mode`` (omit it for lossless).
        mode: ``"abs"`` (absolute), ``"rel"`` (relative to the tensor's finite value range) or
            ``"lossless"``.
        chunk_size: values per independently decodable chunk (multiple of 32, at most 65536).
        threads: OpenMP threads; ``None`` uses the OpenMP default (``OMP_NUM_THREADS``).
        progress: optional ``progress(chunks_done, chunks_total)`` called between chunks (the
            pipelined mode): with ``threads`` None or 1 the compression runs chunk by chunk on
            the calling thread; with ``threads > 1`` the chunks are split among the threads
            and the calling thread alone calls ``progress`` between its own chunks
            (``chunks_done`` is then an estimate). The stream is the same either way.
        out: optional contiguous 1-D ``torch.uint8`` CPU tensor of at least
            :func:`max_compressed_size` bytes to compress into. The stream is then returned as
            a view of its first bytes. Reusing one buffer across calls skips an allocation, and
            the first-touch page faults that come with it, on every call (a cost that does not
            shrink with threads: on 2 cores, 16M values, the 2-thread speed-up was x1.59
            with a fresh buffer and x1.95 with a reused one). It must not overlap ``tensor``.

    Returns:
        A 1-D ``torch.uint8`` tensor holding the whole stream: a view of ``out`` when given,
        otherwise a tensor of its own (right-sized when the stream is much smaller than the
        worst case).
    """
    code = _check_source(tensor, "compress")
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable(chunks_done, chunks_total) or None")
    eb = resolve_error_bound(tensor, error_bound, mode)
    chunk = _check_chunk_size(chunk_size)
    if out is not None:  # before a non-contiguous tensor is copied
        need = max_compressed_size(
            tensor.dtype, tensor.numel(), chunk_size=chunk, ndim=tensor.dim()
        )
        _check_stream_out(out, need, tensor)
    src = tensor.detach().contiguous()
    return _C.compress(
        src,
        code,
        eb,
        chunk,
        _check_threads(threads),
        list(src.shape),
        progress,
        _CODEC_AUTO,
        out,
    )


def _byte_span(t: torch.Tensor) -> tuple[int, int]:
    """[first, last + 1) bytes that a strided tensor's elements occupy."""
    if t.numel() == 0:
        return (t.data_ptr(), t.data_ptr())
    last = sum((n - 1) * st for n, st in zip(t.shape, t.stride(), strict=True))
    return (t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size())


def _check_stream_out(out: torch.Tensor, need: int, src: torch.Tensor) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if out.dtype != torch.uint8:
        raise TypeError(f"out must be a torch.uint8 tensor, got {out.dtype}")
    if out.device.type != "cpu" or out.dim() != 1 or not out.is_contiguous():
        raise ValueError("out must be a contiguous 1-D CPU tensor")
    if out.numel() < need:
        raise ValueError(
            f"out holds {out.numel()} bytes but the stream may need {need} "
            "(see max_compressed_size)"
        )
    lo, hi = _byte_span(out)
    src_lo, src_hi = _byte_span(src)
    if src_lo < src_hi and lo < src_hi and src_lo < hi:
        raise ValueError("out overlaps the tensor being compressed (or the input stream)")


# What quantize returns follows `residual`: x' alone, or (x', tensor - x') when a residual is asked
# for (True, or a tensor to write it into); the overloads tell type checkers which.
@overload
def quantize(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    threads: int | None = None,
    residual: Literal[False] = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor: ...
@overload
def quantize(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    threads: int | None = None,
    residual: Literal[True] | torch.Tensor,
    out: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def quantize(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    threads: int | None = None,
    residual: bool | torch.Tensor = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]: ...
def quantize(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    threads: int | None = None,
    residual: bool | torch.Tensor = False,
    out: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The values ``decompress(compress(tensor, error_bound, mode))`` reconstructs, computed in
    one pass without building the stream.

    Each value the compressor quantises comes back as its grid value (the decoder's own
    arithmetic); values it stores exactly (NaN, +/-Inf, out-of-range codes, or a rounding that
    would miss the bound) come back unchanged, so ``abs(x - x') <= eb`` in float64 for every
    finite value, as for :func:`compress`. The result differs from the real round trip only in
    chunks the compressor stores raw (incompressible data) or as a constant: those decode to the
    input itself, here to their grid values (within the same bound). Error feedback uses this:
    it needs ``x'`` and ``x - x'``, not the stream (several times cheaper than the round trip).

    Args:
        tensor: CPU or CUDA tensor of dtype float32, float64, float16 or bfloat16, any shape
            (a CUDA tensor is quantised on its device, in elementwise torch operations).
        error_bound, mode: as for :func:`compress` (``"lossless"`` or 0 returns a copy).
        threads: OpenMP threads; ``None`` uses the OpenMP default.
        residual: ``True``: also return ``tensor - x'`` (in the tensor's dtype; 0 where a value
            is kept exactly, so NaN and +/-Inf leave 0 rather than NaN). A tensor: write that
            into it (contiguous, same dtype and size; reusing one skips an allocation).
        out: contiguous tensor of the same dtype and size to write ``x'`` into (``tensor``
            itself quantises in place); None allocates one.

    Returns:
        ``x'`` with ``tensor``'s dtype and shape, or ``(x', tensor - x')`` with a residual.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"quantize expects a torch.Tensor, got {type(tensor).__name__}")
    code = _check_dtype(tensor.dtype)
    if tensor.device.type not in ("cpu", "cuda"):
        raise ValueError(f"quantize handles CPU and CUDA tensors, got a tensor on {tensor.device}")
    if tensor.layout != torch.strided:
        raise TypeError(f"quantize needs a dense (strided) tensor, got layout {tensor.layout}")
    eb = resolve_error_bound(tensor, error_bound, mode)
    src = tensor.detach().contiguous()
    grid = torch.empty_like(src) if out is None else _check_into(out, src, "out")
    rest = None
    if isinstance(residual, torch.Tensor):
        rest = _check_into(residual, src, "residual")
    elif residual:
        rest = torch.empty_like(src)
    if src.device.type == "cuda":
        # On the tensor's device, in elementwise torch operations (the same bits as the C++
        # quantiser: quantize_elementwise.py); `threads` does not apply there.
        _check_threads(threads)
        quantize_into(src, code, eb, grid, rest)
    else:
        _C.quantize(src, code, eb, _check_threads(threads), grid, rest)
    grid = grid.view(tensor.shape)
    return grid if rest is None else (grid, rest.view(tensor.shape))


def _check_into(t: torch.Tensor, like: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != like.dtype or t.numel() != like.numel() or t.device != like.device:
        raise ValueError(
            f"{what} must be a {like.dtype} tensor of {like.numel()} values on {like.device}, "
            f"got {t.dtype} with {t.numel()} on {t.device}"
        )
    if not t.is_contiguous():
        raise ValueError(f"{what} must be contiguous")
    return t


def _as_stream(stream: torch.Tensor) -> torch.Tensor:
    if not isinstance(stream, torch.Tensor):
        raise TypeError(f"expected a torch.uint8 stream tensor, got {type(stream).__name__}")
    if stream.dtype != torch.uint8:
        raise TypeError(f"a compressed stream is a torch.uint8 tensor, got {stream.dtype}")
    if stream.device.type != "cpu":
        raise ValueError(f"decompress handles CPU streams only, got {stream.device}")
    return stream.detach().reshape(-1).contiguous()


def stream_info(stream: torch.Tensor) -> StreamInfo:
    """Reads and validates a stream's header and chunk table (raises CorruptStreamError)."""
    raw = _C.stream_info(_as_stream(stream))
    return StreamInfo(
        version=raw["version"],
        lossless_codec=_CODEC_NAMES[raw["lossless_codec"]],
        dtype=_DTYPE_OF_CODE[raw["dtype"]],
        numel=raw["count"],
        shape=tuple(raw["shape"]),
        error_bound=raw["error_bound"],
        chunk_size=raw["chunk_len"],
        num_chunks=raw["num_chunks"],
        header_bytes=raw["header_bytes"],
        total_bytes=raw["total_bytes"],
    )


def decompress(
    stream: torch.Tensor,
    *,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    out: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
) -> torch.Tensor:
    """Decompresses a stream made by :func:`compress`, restoring dtype and shape.

    Any truncated, corrupted or malformed stream raises :class:`zccl_torch.CorruptStreamError`.
    ``threads`` and ``progress`` mean what they mean for :func:`compress`; a stream decodes with
    any thread count, whatever it was compressed with. ``out``: a contiguous CPU tensor with the
    stream's dtype and number of values (any shape) to decode into and return, instead of a new
    tensor; repeated decodes of large streams then skip the allocation and its page faults.

    ``add``: a contiguous CPU tensor with the stream's dtype (float32 or float64 only) and number
    of values; the result is then ``add + decompress(stream)``, bit for bit what the separate sum
    gives (one rounding per value), with each chunk added while it is still in cache. ``out`` may
    be ``add``: ``decompress(s, add=acc, out=acc)`` accumulates decoded streams into ``acc``.
    """
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable(chunks_done, chunks_total) or None")
    stream = _as_stream(stream)
    if out is not None:
        _check_out(out, stream)
    if add is not None:
        _check_out(add, stream, "add")
        if add.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"add= takes float32 and float64 streams, not {add.dtype}")
    return _C.decompress(stream, _check_threads(threads), progress, out, add)


def recompress_add(
    stream: torch.Tensor,
    add: torch.Tensor,
    error_bound: float,
    *,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compresses ``add + decompress(stream)`` without ever materialising the sum.

    One hop of a ring reduction as one call: each chunk of ``stream`` is decoded, ``add``'s
    values are added (the arithmetic of ``decompress(stream, add=add)``) and the sum is
    compressed while still in cache. The result is byte for byte
    ``compress(decompress(stream, add=add), error_bound, chunk_size=<the stream's>)``, with
    ``add``'s shape, for any ``threads``; ``error_bound`` is absolute (a relative bound would
    need the sum's value range, i.e. the sum itself).

    Args:
        stream: a float32 or float64 stream from :func:`compress`.
        add: contiguous CPU tensor of the stream's dtype and number of values (any shape).
        error_bound: absolute bound of the new stream (0: lossless).
        threads, progress: as for :func:`compress`.
        out: as for :func:`compress`; it must overlap neither ``stream`` nor ``add``.

    Returns:
        The new stream, a 1-D ``torch.uint8`` tensor (a view of ``out`` when given).
    """
    if progress is not None and not callable(progress):
        raise TypeError("progress must be callable(chunks_done, chunks_total) or None")
    stream = _as_stream(stream)
    _check_out(add, stream, "add")
    if add.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"recompress_add takes float32 and float64 streams, not {add.dtype}")
    eb = resolve_error_bound(add, error_bound, "abs")
    if out is not None:
        chunk = stream_info(stream).chunk_size
        need = max_compressed_size(add.dtype, add.numel(), chunk_size=chunk, ndim=add.dim())
        _check_stream_out(out, need, add)
        _check_stream_out(out, need, stream)
    return _C.recompress_add(stream, add, eb, _check_threads(threads), progress, out)


def _check_out(out: torch.Tensor, stream: torch.Tensor, name: str = "out") -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(out).__name__}")
    info = stream_info(stream)
    if out.dtype != info.dtype:
        raise TypeError(f"{name} has dtype {out.dtype} but the stream holds {info.dtype}")
    if out.device.type != "cpu" or not out.is_contiguous():
        raise ValueError(f"{name} must be a contiguous CPU tensor")
    if out.numel() != info.numel:
        raise ValueError(f"{name} has {out.numel()} values but the stream holds {info.numel}")


def decompress_chunk(stream: torch.Tensor, index: int) -> torch.Tensor:
    """Decodes chunk ``index`` alone and returns its values as a 1-D tensor."""
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"chunk index must be an int, got {type(index).__name__}")
    if not 0 <= index < 2**63:
        raise IndexError(f"chunk index {index} out of range")
    return _C.decompress_chunk(_as_stream(stream), index)


#: Values :func:`estimate_ratio` codes at most by default (about 0.1 ms of one core's work).
DEFAULT_SAMPLE_VALUES: int = 65536


def estimate_ratio(
    tensor: torch.Tensor,
    error_bound: float | None = None,
    mode: str = "abs",
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    max_values: int = DEFAULT_SAMPLE_VALUES,
) -> float:
    """The compression ratio (uncompressed / compressed bytes) ``compress(tensor, error_bound,
    mode, chunk_size=chunk_size)`` would reach, estimated by compressing at most ``max_values``
    of its values on one thread: the whole tensor when it has no more, else 8 windows spread
    evenly over it (flattened). Stream headers are not counted, so for a whole tensor of at
    most ``max_values`` values the estimate is the ratio of the stream's chunks (with their
    chunk-table entries) exactly, a little above ``tensor.nbytes / len(stream)``.

    This is the sample ``algorithm="auto"`` takes of a reduction's payload with
    ``auto_ratio=0`` (README, "The data's compression ratio"). The bound is resolved on the
    whole tensor as :func:`compress` resolves it. Returns 0.0 for an empty tensor. Raises as
    :func:`compress` does for a bad tensor or bound, and ValueError for ``max_values`` < 1.
    """
    code = _check_source(tensor, "estimate_ratio")
    if isinstance(max_values, bool) or not isinstance(max_values, int) or max_values < 1:
        raise ValueError(f"max_values must be an int >= 1, got {max_values!r}")
    eb = resolve_error_bound(tensor, error_bound, mode)
    chunk = _check_chunk_size(chunk_size)
    if tensor.numel() == 0:
        return 0.0
    src = tensor.detach().contiguous().reshape(-1)
    raw, packed, _ = _C.sample_ratio(src, code, eb, chunk, max_values)
    return raw / packed


def max_compressed_size(
    dtype: torch.dtype, numel: int, *, chunk_size: int = DEFAULT_CHUNK_SIZE, ndim: int = 1
) -> int:
    """Worst-case stream size in bytes for ``numel`` values; compress never exceeds it."""
    if isinstance(numel, bool) or not isinstance(numel, int) or not 0 <= numel < 2**64:
        raise ValueError(f"numel must be a non-negative int below 2**64, got {numel!r}")
    if not isinstance(ndim, int) or ndim < 0 or ndim > _C.MAX_DIMS:
        raise ValueError(f"ndim must be in [0, {_C.MAX_DIMS}], got {ndim!r}")
    return _C.max_compressed_size(_check_dtype(dtype), numel, _check_chunk_size(chunk_size), ndim)
