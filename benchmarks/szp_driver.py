"""ctypes driver for the public SZp compressor (github.com/szcompressor/SZp), for benchmarks.

Nothing of SZp is part of this project: build it separately (``benchmarks/szp_build.sh SRC
BUILD``) and point :class:`SZp` at the directory holding ``libSZp.so``.

SZp's C API, as declared in its headers (``szp_float.h``, ``szpd_float.h``, ``szp_double.h``,
``szpd_double.h``, ``szp.h``; all ``extern "C"``):

* serial, caller-owned buffers (what :meth:`SZp.compress` / :meth:`SZp.decompress` use)::

      void szp_float_single_thread_arg(unsigned char *output, float *oriData, size_t *outSize,
                                       float absErrBound, size_t nbEle, int blockSize);
      void szp_float_decompress_single_thread_arg(float *newData, size_t nbEle,
                                                  float absErrBound, int blockSize,
                                                  unsigned char *cmpBytes);

  and the same with ``double`` (``szp_double_single_thread_arg``,
  ``szp_double_decompress_single_thread_arg``).
* OpenMP, SZp-owned (``malloc``'d) results (what :meth:`SZp.compress_omp` /
  :meth:`SZp.decompress_omp` use; the caller must ``free`` them)::

      unsigned char *szp_compress(int fastMode, int dataType, void *data, size_t *outSize,
                                  int errBoundMode, double absErrBound, double relBoundRatio,
                                  size_t nbEle, int blockSize);
      void *szp_decompress(int fastMode, int dataType, unsigned char *bytes, size_t byteLength,
                           size_t nbEle, int blockSize);

The stream, as SZp writes it: the bound (big-endian; 4 bytes for float32, 8 for float64), one
native ``size_t`` offset per OpenMP thread (one, ``0``, for the serial path), then per thread
the first value's quantum as a raw ``int32`` followed by blocks of ``blockSize`` values (the
last one shorter). Each block is one byte ``b`` (bit width of the largest delta magnitude, as
``(int)log2f(max) + 1``; ``0`` = all deltas zero, nothing else stored) or ``b`` followed by one
sign bit per value and ``b`` bits per delta magnitude. Quanta are ``(int)(x * (1 / bound))``
(truncation towards zero), deltas run on across blocks, and values are rebuilt as
``quantum * bound`` in the data's precision. The stream holds neither the value count nor the
block size, so the decoder must be told both; the OpenMP stream also depends on the thread
count, which must be the same at both ends.

SZp defects this driver works around or reports: the serial float64 decoder skips no thread
offset (see :meth:`SZp.decompress`); quantisation truncates instead of rounding, so errors reach
the full bound, and float32 rebuilding (``(float)q * bound`` in float32) can exceed it by a few
float32 ulps of the value.

Safety: SZp checks nothing, and its serial compressor writes into an internal scratch buffer of
``nbEle * sizeof(T)`` bytes, quantises with C ``int`` arithmetic and its decoders read up to one
byte past the stream. This driver therefore (unless ``check=False``) rejects non-finite data,
quanta that could overflow ``int32`` and inputs whose worst-case encoding would not fit SZp's
buffers; it gives SZp output buffers sized for the worst case, pads streams it decodes, and
walks a stream's block headers before decoding it.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["SZp", "SZpError", "available_block_sizes"]

#: File name of the shared library that SZp's CMake build produces.
LIBRARY_NAME = "libSZp.so"

# szp_defines.h
_SZ_FLOAT = 0
_SZ_DOUBLE = 1
_ABS = 0
_SZP_NONRANDOMACCESS = 1

_INT32_MAX = 2**31 - 1
_MAX_BITS = 32  # bit widths above this cannot come from SZp's encoder
_DECODE_PAD = 8  # bytes appended to a stream before decoding (SZp over-reads up to one)
_MAX_BLOCK_SIZE = 1 << 20  # SZp allows any positive int; this keeps its scratch mallocs sane


class SZpError(RuntimeError):
    """The SZp library could not be loaded, lacks a symbol, or a call failed."""


def available_block_sizes() -> tuple[int, ...]:
    """Block sizes to benchmark SZp with: the powers of two from 8 to 1024.

    SZp's API itself takes any positive ``int`` (values per block sharing one bit width and one
    header byte); this driver accepts any size in ``[1, 2**20]`` but rejects inputs whose worst
    case would overflow SZp's buffers (small blocks on poorly compressible data).
    """
    return tuple(2**k for k in range(3, 11))


def _block_bytes(length: int, bits: int) -> int:
    """Bytes SZp writes for a block of ``length`` values whose header says ``bits``."""
    if length == 0:
        return 0
    if bits == 0:
        return 1
    # header byte, sign bits, then whole bytes and leftover bits of each magnitude
    return 1 + (length + 7) // 8 + (bits // 8) * length + ((bits % 8) * length + 7) // 8


def _worst_segment_bytes(m: int, block_size: int, bits: int) -> int:
    """Largest encoding of ``m`` values by one SZp thread with deltas of at most ``bits`` bits."""
    if m == 0:
        return 0
    full, tail = divmod(m - 1, block_size)
    return 4 + full * _block_bytes(block_size, bits) + _block_bytes(tail, bits)


def _dtype_info(dtype: DTypeLike) -> tuple[np.dtype, int]:
    dt = np.dtype(dtype)
    if dt == np.float32:
        return dt, _SZ_FLOAT
    if dt == np.float64:
        return dt, _SZ_DOUBLE
    raise TypeError(f"SZp handles float32 and float64 only, got {dt}")


def _check_block_size(block_size: int) -> int:
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)):
        raise TypeError(f"block_size must be an int, got {type(block_size).__name__}")
    block_size = int(block_size)
    if not 1 <= block_size <= _MAX_BLOCK_SIZE:
        raise ValueError(f"block_size must be in [1, {_MAX_BLOCK_SIZE}], got {block_size}")
    return block_size


def _stored_bound(abs_bound: float, dt: np.dtype) -> tuple[float, float]:
    """The bound SZp stores and its reciprocal, both computed as SZp's C code does."""
    bound = float(abs_bound)
    if not np.isfinite(bound) or bound <= 0:
        raise ValueError(f"abs_bound must be finite and > 0, got {abs_bound!r}")
    if dt == np.float32:
        with np.errstate(over="ignore", divide="ignore"):
            eb32 = np.float32(bound)
            inv = float(np.float32(1) / eb32)  # `1 / absErrBound` is a float division in SZp
        stored = float(eb32)
    else:
        stored = bound
        with np.errstate(over="ignore", divide="ignore"):
            inv = float(np.float64(1) / np.float64(bound))
    if stored <= 0 or not np.isfinite(inv):
        raise ValueError(f"abs_bound {abs_bound!r} is not representable for SZp with {dt}")
    return stored, inv


def _as_flat(x: np.ndarray) -> tuple[np.ndarray, np.dtype, int]:
    if not isinstance(x, np.ndarray):
        raise TypeError(f"expected a numpy array, got {type(x).__name__}")
    dt, code = _dtype_info(x.dtype)
    flat = np.ascontiguousarray(x).reshape(-1)
    return flat, dt, code


def _delta_bits(flat: np.ndarray, inv: float) -> int:
    """Upper bound of the bit width of SZp's deltas; raises where its int arithmetic overflows."""
    if flat.size == 0:
        return 0
    if not np.isfinite(flat).all():
        raise ValueError("SZp cannot handle NaN or Inf (its quantiser casts them to int)")
    qmax = float(np.abs(flat).max()) * inv
    if 2 * qmax >= _INT32_MAX:
        raise ValueError(
            f"max |x| / bound = {qmax:.3g}: SZp's int32 quanta or deltas would overflow; "
            "use a larger bound"
        )
    bits = (2 * int(qmax)).bit_length()
    # SZp computes the width as (int)log2f(max) + 1 in float, which for max >= ~2**20 just
    # below a power of two rounds up to one bit more than needed.
    return bits + 1 if bits >= 16 else bits


class SZp:
    """SZp loaded from ``build_dir/libSZp.so``; see the module docstring for its API."""

    def __init__(self, build_dir: Path) -> None:
        """Loads the library and binds the functions used; raises :class:`SZpError` if missing."""
        build_dir = Path(build_dir)
        path = build_dir / LIBRARY_NAME
        if not path.is_file():
            raise SZpError(
                f"{path} not found; build SZp first, e.g. "
                f"`benchmarks/szp_build.sh /path/to/SZp {build_dir}`"
            )
        try:
            self._lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise SZpError(f"cannot load {path}: {exc}") from exc
        self.path = path

        vp, sz, szp_ = ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)
        i32, f32, f64 = ctypes.c_int, ctypes.c_float, ctypes.c_double
        self._cmp = {
            _SZ_FLOAT: self._bind(
                "szp_float_single_thread_arg", None, [vp, vp, szp_, f32, sz, i32]
            ),
            _SZ_DOUBLE: self._bind(
                "szp_double_single_thread_arg", None, [vp, vp, szp_, f64, sz, i32]
            ),
        }
        self._dec = {
            _SZ_FLOAT: self._bind(
                "szp_float_decompress_single_thread_arg", None, [vp, sz, f32, i32, vp]
            ),
            _SZ_DOUBLE: self._bind(
                "szp_double_decompress_single_thread_arg", None, [vp, sz, f64, i32, vp]
            ),
        }
        self._cmp_omp = self._bind("szp_compress", vp, [i32, i32, vp, szp_, i32, f64, f64, sz, i32])
        self._dec_omp = self._bind("szp_decompress", vp, [i32, i32, vp, sz, sz, i32])
        # SZp links libgomp; omp_get_max_threads is found through the library's dependencies.
        self._omp_max_threads = self._bind("omp_get_max_threads", i32, [])
        # SZp's malloc resolves in the process's global scope, which includes any allocator
        # preloaded in front of libc (jemalloc, ASan, ...); take free from the same scope, not
        # from a handle on libc itself, so that the pair always matches.
        try:
            self._free = ctypes.CDLL(None).free
        except AttributeError as exc:
            raise SZpError("cannot find free() to release SZp's malloc'd buffers") from exc
        self._free.argtypes, self._free.restype = [vp], None

    def _bind(self, name: str, restype: Any, argtypes: list[Any]) -> Any:
        try:
            fn = getattr(self._lib, name)
        except AttributeError as exc:
            raise SZpError(f"{self.path} does not export {name!r} (wrong or old SZp?)") from exc
        fn.restype, fn.argtypes = restype, argtypes
        return fn

    # ----------------------------------------------------------------------------- serial path

    def compress(
        self, x: np.ndarray, abs_bound: float, block_size: int, *, check: bool = True
    ) -> bytes:
        """Compresses ``x`` (float32/float64, any shape, flattened in C order) on one thread.

        Args:
            x: the data.
            abs_bound: absolute error bound; SZp stores it in ``x``'s precision (float32 data:
                ``float32(abs_bound)``) and rebuilds values as ``quantum * bound``.
            block_size: values per block (one bit width per block).
            check: validate the data (finite, no int32 overflow, fits SZp's scratch buffer).
                Only skip it for data already checked with the same bound and block size.

        Returns:
            SZp's stream (its serial layout; it holds neither the count nor the block size).
        """
        flat, dt, code = _as_flat(x)
        block_size = _check_block_size(block_size)
        stored, inv = _stored_bound(abs_bound, dt)
        n = flat.size
        hdr = dt.itemsize + 8  # bound + one size_t offset
        if check:
            bits = _delta_bits(flat, inv)
            if _worst_segment_bytes(n, block_size, bits) > dt.itemsize * n:
                raise ValueError(
                    f"block_size {block_size} on this data may overflow SZp's internal buffer "
                    f"({dt.itemsize * n} bytes for {n} values); use a larger block size"
                )
        capacity = hdr + _worst_segment_bytes(n, block_size, _MAX_BITS)
        out = np.empty(capacity, dtype=np.uint8)
        size = ctypes.c_size_t(0)
        self._cmp[code](
            out.ctypes.data, flat.ctypes.data, ctypes.byref(size), stored, n, block_size
        )
        if size.value > capacity:  # cannot happen; memory is already corrupt if it does
            raise SZpError(f"SZp wrote {size.value} bytes into a {capacity}-byte buffer")
        return out[: size.value].tobytes()

    def decompress(
        self,
        stream: bytes,
        n: int,
        dtype: DTypeLike,
        abs_bound: float | None,
        block_size: int,
        *,
        check: bool = True,
    ) -> np.ndarray:
        """Decodes a stream made by :meth:`compress` into a new 1-D array of ``n`` values.

        Args:
            stream: the stream.
            n: number of values (SZp does not store it).
            dtype: float32 or float64, as compressed.
            abs_bound: the bound given to :meth:`compress`, checked against the one stored in
                the stream; ``None`` uses the stored one. Decoding always uses the stored value.
            block_size: the block size given to :meth:`compress` (SZp does not store it).
            check: walk the block headers first and raise ``ValueError`` if the stream does
                not match ``n``/``block_size`` (SZp would read out of bounds instead).
        """
        dt, code = _dtype_info(dtype)
        block_size = _check_block_size(block_size)
        n = int(n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        view = memoryview(stream).cast("B")
        stored = self._read_bound(view, dt, abs_bound)
        if check:
            _check_stream(view, n, dt.itemsize, block_size)
        buf = np.zeros(len(view) + _DECODE_PAD, dtype=np.uint8)
        buf[: len(view)] = np.frombuffer(view, dtype=np.uint8)
        if code == _SZ_DOUBLE:
            # SZp bug: szp_double_decompress_single_thread_arg sets nbThreads = 0, so it does not
            # skip the one size_t thread offset and starts decoding at cmpBytes + offsets[0].
            # Setting that offset (in our copy) to its own size makes it start at the data.
            buf[dt.itemsize : dt.itemsize + 8] = np.frombuffer(
                np.uint64(8).tobytes(), dtype=np.uint8
            )
        out = np.empty(n, dtype=dt)
        if n:
            self._dec[code](out.ctypes.data, n, stored, block_size, buf.ctypes.data + dt.itemsize)
        return out

    @staticmethod
    def _read_bound(view: memoryview, dt: np.dtype, abs_bound: float | None) -> float:
        if len(view) < dt.itemsize + 8:
            raise ValueError(f"SZp stream too short ({len(view)} bytes)")
        big_endian = dt.newbyteorder(">")  # SZp writes the bound big-endian
        stored = float(np.frombuffer(view[: dt.itemsize], dtype=big_endian)[0])
        if abs_bound is not None:
            expected, _ = _stored_bound(abs_bound, dt)
            if expected != stored:
                raise ValueError(f"the stream holds bound {stored!r}, not {expected!r}")
        if not np.isfinite(stored) or stored <= 0:
            raise ValueError(f"the stream holds an invalid bound {stored!r}")
        return stored

    # ----------------------------------------------------------------------------- OpenMP path

    def omp_max_threads(self) -> int:
        """OpenMP's current maximum thread count (what SZp's OpenMP path will use)."""
        return int(self._omp_max_threads())

    def compress_omp(self, x: np.ndarray, abs_bound: float, block_size: int) -> bytes:
        """Compresses through SZp's main entry ``szp_compress`` (OpenMP, non-random-access).

        With ``OMP_NUM_THREADS=1`` the stream equals :meth:`compress`'s. SZp ``malloc``'s the
        result; it is copied into ``bytes`` and freed here. The data is always checked: SZp's
        buffers here are ``(n + 1) * sizeof(T)`` bytes for all threads' output and
        ``n * sizeof(T) / threads`` per thread.
        """
        flat, dt, code = _as_flat(x)
        block_size = _check_block_size(block_size)
        stored, inv = _stored_bound(abs_bound, dt)
        n = flat.size
        if n == 0:
            raise ValueError("szp_compress needs at least one value")
        bits = _delta_bits(flat, inv)
        threads = max(1, self.omp_max_threads())
        per, last = n // threads, n - (threads - 1) * (n // threads)
        per_thread_cap = (dt.itemsize * n + threads - 1) // threads  # SZp's scratch per thread
        worst_last = _worst_segment_bytes(last, block_size, bits)
        worst = (
            dt.itemsize
            + 8 * threads
            + (threads - 1) * _worst_segment_bytes(per, block_size, bits)
            + worst_last
        )
        if worst > dt.itemsize * (n + 1) or worst_last > per_thread_cap:
            raise ValueError(
                f"block_size {block_size} with {threads} threads may overflow szp_compress's "
                f"{dt.itemsize * (n + 1)}-byte buffer; use a larger block size or fewer threads"
            )
        size = ctypes.c_size_t(0)
        ptr = self._cmp_omp(
            _SZP_NONRANDOMACCESS,
            code,
            flat.ctypes.data,
            ctypes.byref(size),
            _ABS,
            stored,
            0.0,
            n,
            block_size,
        )
        if not ptr:
            raise SZpError("szp_compress returned NULL (library built without OpenMP?)")
        try:
            return ctypes.string_at(ptr, size.value)
        finally:
            self._free(ptr)

    def decompress_omp(
        self, stream: bytes, n: int, dtype: DTypeLike, block_size: int
    ) -> np.ndarray:
        """Decodes through ``szp_decompress`` (OpenMP); frees SZp's ``malloc``'d result.

        The stream must come from :meth:`compress_omp` with the same OpenMP thread count (SZp
        splits the values by the decoder's thread count). Only the header is checked here.
        """
        dt, code = _dtype_info(dtype)
        block_size = _check_block_size(block_size)
        n = int(n)
        if n <= 0:
            raise ValueError(f"n must be > 0, got {n}")
        view = memoryview(stream).cast("B")
        self._read_bound(view, dt, None)
        threads = max(1, self.omp_max_threads())
        if threads == 1:
            _check_stream(view, n, dt.itemsize, block_size)
        buf = np.zeros(len(view) + _DECODE_PAD, dtype=np.uint8)
        buf[: len(view)] = np.frombuffer(view, dtype=np.uint8)
        ptr = self._dec_omp(_SZP_NONRANDOMACCESS, code, buf.ctypes.data, len(view), n, block_size)
        if not ptr:
            raise SZpError("szp_decompress returned NULL")
        try:
            return np.ctypeslib.as_array(
                ctypes.cast(
                    ptr, ctypes.POINTER(ctypes.c_float if code == _SZ_FLOAT else ctypes.c_double)
                ),
                shape=(n,),
            ).copy()
        finally:
            self._free(ptr)


def _check_stream(view: memoryview, n: int, itemsize: int, block_size: int) -> None:
    """Walks a serial SZp stream's block headers; raises ValueError unless it fits exactly."""
    data = bytes(view)  # indexing bytes is much faster than indexing a numpy array
    offset = int(np.frombuffer(view[itemsize : itemsize + 8], dtype=np.uint64)[0])
    if offset != 0:
        raise ValueError(f"not a serial SZp stream (thread offset {offset}, expected 0)")
    pos = itemsize + 8
    if n:
        pos += 4
        full, tail = divmod(n - 1, block_size)
        lengths = [block_size] * full + ([tail] if tail else [])
        size_of: dict[tuple[int, int], int] = {}
        for length in lengths:
            if pos >= len(data):
                raise ValueError("SZp stream truncated (or wrong n / block_size)")
            bits = data[pos]
            if bits > _MAX_BITS:
                raise ValueError(f"corrupt SZp stream (bit width {bits} at byte {pos})")
            key = (length, bits)
            if key not in size_of:
                size_of[key] = _block_bytes(length, bits)
            pos += size_of[key]
    if pos != len(data):
        raise ValueError(
            f"SZp stream is {len(data)} bytes but n={n}, block_size={block_size} need {pos} "
            "(wrong n / block_size / dtype?)"
        )
