"""Types of the native extension ``zccl_torch._C`` (csrc/python/bindings.cpp), for type checkers.

The Python modules are the public API; these are the calls they make. tests/test_typing.py keeps
the two in step: every name here exists in the built module and the reverse (mypy's stubtest),
and every function takes the parameters pybind11 reports, with the same names and defaults.
"""

from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat, SupportsIndex, SupportsInt, TypeAlias

import torch
from torch._C._distributed_c10d import Backend

_Int: TypeAlias = SupportsInt | SupportsIndex
_Float: TypeAlias = SupportsFloat | SupportsIndex
# compress/decompress: called between chunks with (chunks done, chunks in all), or None.
_Progress: TypeAlias = Callable[[int, int], object] | None

BLOCK_LEN: int
DEFAULT_CHUNK_LEN: int
MAX_CHUNK_LEN: int
MAX_DIMS: int
FORMAT_VERSION: int
SOURCE_DIGEST: str
MPI_TRANSPORT: bool
NO_MPI_TRANSPORT_MESSAGE: str
with_cuda: bool

class CorruptStreamError(ValueError): ...

class TcpListener:
    def __init__(self, host: str) -> None: ...
    @property
    def address(self) -> str: ...

# The compressor.
def compress(
    src: torch.Tensor,
    dtype_code: _Int,
    error_bound: _Float,
    chunk_len: _Int,
    threads: _Int,
    shape: Sequence[_Int],
    progress: _Progress,
    lossless_codec: _Int = 255,
    out: torch.Tensor | None = None,
) -> torch.Tensor: ...
def decompress(
    stream: torch.Tensor,
    threads: _Int,
    progress: _Progress,
    out: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
) -> torch.Tensor: ...
def decompress_chunk(stream: torch.Tensor, index: _Int) -> torch.Tensor: ...
def recompress_add(
    stream: torch.Tensor,
    add: torch.Tensor,
    error_bound: _Float,
    threads: _Int,
    progress: _Progress,
    out: torch.Tensor | None = None,
) -> torch.Tensor: ...
def stream_info(stream: torch.Tensor) -> dict[str, Any]: ...
def max_compressed_size(dtype_code: _Int, n: _Int, chunk_len: _Int, ndim: _Int) -> int: ...
def finite_range(src: torch.Tensor, threads: _Int = 0) -> tuple[float, float, bool]: ...
def lossless_codec_available(codec: _Int) -> bool: ...

# Error feedback's quantiser and the integer codes of the ring's integer hop.
def quantize(
    src: torch.Tensor,
    dtype_code: _Int,
    error_bound: _Float,
    threads: _Int,
    out: torch.Tensor,
    residual: torch.Tensor | None,
) -> None: ...
def quantizer_bins(dtype_code: _Int, error_bound: _Float) -> tuple[float, float] | None: ...
def sample_ratio(
    src: torch.Tensor, dtype_code: _Int, error_bound: _Float, chunk_len: _Int, max_values: _Int
) -> tuple[int, float, int]: ...
def codes_combine(
    incoming: torch.Tensor | None,
    x: torch.Tensor,
    error_bound: _Float,
    ranks: _Int,
    out: torch.Tensor | None = None,
) -> torch.Tensor: ...
def codes_decode(
    segment: torch.Tensor, error_bound: _Float, ranks: _Int, out: torch.Tensor | None = None
) -> torch.Tensor: ...
def codes_max_segment_bytes(n: _Int) -> int: ...

# Settings: the table (name, env, type, default, choices, requirement, doc of each) and the
# per-thread override that config() blocks set.
def settings() -> list[dict[str, Any]]: ...
def check_settings(values: dict[str, Any]) -> None: ...
def set_call_override(config: dict[str, Any] | None) -> None: ...
def call_override() -> dict[str, Any] | None: ...
def resolve_call_config(config: dict[str, Any]) -> dict[str, Any]: ...
def wait_policy(config: dict[str, Any]) -> str: ...
def default_threads() -> int: ...
def automatic_threads() -> int: ...
def output_error_bound(algorithm: str, op: str, p: _Int, eb: _Float, allreduce: bool) -> float: ...
def route(
    collective: str,
    bytes: _Int,
    p: _Int,
    threads: _Int = 1,
    link_gbps: _Float = 1.0,
    link_latency_us: _Float = 25.0,
    algorithm: str = "auto",
    lossless: bool = False,
    integer_ring: bool = False,
    min_compress_bytes: _Int = 0,
    ratio: _Float = 0.0,
    exact: str = "bandwidth_optimal",
) -> tuple[bool, str]: ...
def ratio_matters(
    collective: str,
    bytes: _Int,
    p: _Int,
    threads: _Int = 1,
    link_gbps: _Float = 1.0,
    link_latency_us: _Float = 25.0,
    algorithm: str = "auto",
    lossless: bool = False,
    integer_ring: bool = False,
    min_compress_bytes: _Int = 0,
    exact: str = "bandwidth_optimal",
) -> bool: ...
def allreduce_cost(
    algorithm: str,
    bytes: _Int,
    p: _Int,
    threads: _Int = 1,
    link_gbps: _Float = 1.0,
    link_latency_us: _Float = 25.0,
    integer_ring: bool = False,
    ratio: _Float = 0.0,
    exact: str = "bandwidth_optimal",
) -> float: ...
def ratio_sample_values(count: _Int) -> int: ...

# The process-group backend and its transports.
def create_backend(
    rank: _Int,
    size: _Int,
    global_ranks: Sequence[_Int],
    group_id: str,
    timeout_seconds: _Float,
    config: dict[str, Any],
) -> Backend: ...
def create_backend_tcp(
    listener: TcpListener,
    addresses: Sequence[str],
    session: _Int,
    rank: _Int,
    size: _Int,
    timeout_seconds: _Float,
    config: dict[str, Any],
) -> Backend: ...
def set_link_model(backend: Backend, gbps: _Float, latency_us: _Float) -> None: ...
def time_link(backend: Backend, probe_bytes: _Int) -> tuple[float, float]: ...
def link_model(backend: Backend) -> tuple[float, float]: ...
def last_stats(backend: Backend) -> dict[str, Any]: ...
def exact_schedules(backend: Backend) -> str: ...
def total_stats(backend: Backend, reset: bool = False) -> dict[str, Any]: ...
def mpi_is_initialized() -> bool: ...
def mpi_library_version() -> str: ...
def abort_mpi_if_owned(code: _Int) -> bool: ...
def finalize_mpi_if_owned() -> None: ...
