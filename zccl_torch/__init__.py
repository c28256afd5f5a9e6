"""zccl-torch: error-bounded lossy compression inside collective communication.

Importing the package loads the compiled extension (``zccl_torch._C``) and registers the
``"zccl"`` torch.distributed backend. It never initialises MPI (the first zccl group does).

Public API (compressor layer)::

    stream = zccl_torch.compress(tensor, error_bound=1e-4, mode="rel")
    restored = zccl_torch.decompress(stream)          # dtype and shape restored
    exact = zccl_torch.compress(tensor, mode="lossless")  # bit-exact
    info = zccl_torch.stream_info(stream)             # header fields
    zccl_torch.max_compressed_size(torch.float32, n)  # worst-case stream bytes
    grid = zccl_torch.quantize(tensor, 1e-4)           # the round trip's values, no stream

See README.md for the error-bound contract and the stream format.
"""

from zccl_torch import backend as _backend
from zccl_torch.compressor import (
    DEFAULT_CHUNK_SIZE,
    FORMAT_VERSION,
    StreamInfo,
    compress,
    decompress,
    decompress_chunk,
    estimate_ratio,
    lossless_codec,
    max_compressed_size,
    quantize,
    recompress_add,
    resolve_error_bound,
    stream_info,
)
from zccl_torch.config import Options, config, current_options
from zccl_torch.errors import CorruptStreamError
from zccl_torch.link import LinkEstimate, measure_link

_backend.register()
last_stats = _backend.last_stats
total_stats = _backend.total_stats
mpi_transport_built = _backend.mpi_transport_built

# Submodules users reach as zccl_torch.policy / zccl_torch.hooks (imported after registration).
from zccl_torch import hooks, policy  # noqa: E402

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "FORMAT_VERSION",
    "CorruptStreamError",
    "LinkEstimate",
    "Options",
    "StreamInfo",
    "compress",
    "config",
    "current_options",
    "decompress",
    "decompress_chunk",
    "estimate_ratio",
    "hooks",
    "last_stats",
    "lossless_codec",
    "max_compressed_size",
    "measure_link",
    "mpi_transport_built",
    "policy",
    "quantize",
    "recompress_add",
    "resolve_error_bound",
    "stream_info",
    "total_stats",
]

__version__ = "0.1.0"
