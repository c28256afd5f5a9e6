"""The single-tensor collectives under the names the installed torch has.

torch 2.13 renamed ``all_gather_into_tensor`` / ``reduce_scatter_tensor`` to
``all_gather_single`` / ``reduce_scatter_single``, and its old names warn (FutureWarning) at every
call; older torch has only the old names. The policy wrappers, the benchmarks and the tests call
these two, so they warn on neither and the fallback is written once.
"""

import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
