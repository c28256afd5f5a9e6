"""The fast, representative part of torch's distributed suite that pytest runs on "zccl".

One or more tests per capability, each well under a second at 3 ranks, so the subset in both
configs fits in about three minutes on 2 cores (most of it is starting the ranks). torch's suite
has no CPU reduce_scatter test (only ``*_cuda`` variants), so none is listed for it.
"""

from __future__ import annotations

SUBSET: tuple[str, ...] = (
    # all_reduce: ops, async work, a complex dtype, a subgroup of ranks [1, 2], the full group
    "test_all_reduce_sum",
    "test_all_reduce_max",
    "test_all_reduce_product",
    "test_all_reduce_sum_async",
    "test_all_reduce_sum_complex",
    "test_all_reduce_group_sum",
    "test_all_reduce_full_group_min",
    # broadcast / reduce / gather / scatter / all_gather, world and subgroup
    "test_broadcast",
    "test_broadcast_group",
    "test_reduce_sum",
    "test_reduce_group_max",
    "test_reduce_sum_twice",
    "test_all_gather",
    "test_all_gather_group",
    "test_all_gather_object_default_pg",
    "test_scatter_object_list",
    "test_gather",
    "test_gather_group",
    "test_gather_checks",
    "test_scatter",
    "test_scatter_group",
    "test_scatter_checks",
    # all_to_all (torch gates these to "mpi"; skips.UNGATED runs them, as others marked so)
    "test_all_to_all",
    "test_all_to_all_single_equal_split",
    "test_all_to_all_single_unequal_split_group",
    # barrier
    "test_barrier",
    "test_barrier_group",
    # point to point
    "test_send_recv",
    "test_send_recv_with_tag",
    "test_send_recv_any_source",
    "test_isend",
    "test_irecv",
    "test_batch_isend_irecv_gloo",
    # coalesced collectives
    "test_all_reduce_coalesced_sum",
    "test_all_gather_coalesced_simple",
    # DistributedDataParallel on CPU, futures
    "test_DistributedDataParallelCPU",
    "test_DistributedDataParallel_requires_grad",
    "test_get_future",
    # process groups: new_group subgroups, destroy, queries
    "test_get_rank_size_group",
    "test_destroy_group",
)
