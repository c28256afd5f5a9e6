// Argument checks of every collectives entry point, CPU and GPU. Each throws
// std::invalid_argument "zccl: <op>: ..." naming the collective and the offending value.
#pragma once

#include <cstddef>
#include <vector>

#include "../collectives.h"

namespace zccl::coll::toolkit {

// The settings: a known algorithm, a finite error bound >= 0, threads >= 0, a chunk length
// the codec accepts, and a network (link_gbps > 0, link_latency_us >= 0, both finite).
void check_config(const Config& cfg, const char* op);
// The reductions' data: float32/float64 and a known ReduceOp.
void check_reduction(DType dt, ReduceOp rop, const char* op);
// A buffer `name` that must hold `count` values (null only when count == 0).
void check_buffer(const void* p, size_t count, const char* op, const char* name);
void check_root(int root, int p, const char* op);
// A root's list of per-rank blocks: one per rank.
void check_block_list(size_t blocks, int p, const char* op);
// Per-rank counts (allgatherv): p entries, counts[rank] == count, a total that fits size_t;
// returns the total.
size_t check_counts(const std::vector<size_t>& counts, size_t count, int p, int rank,
                    const char* op);
// blocks * count values of dt, in bytes, throwing when that overflows size_t.
size_t payload_bytes(size_t count, DType dt, const char* op, size_t blocks = 1);
// A rooted collective over p blocks of `count` values (gather, scatter): a valid root and a
// p-block buffer that fits size_t. Returns the bytes of one block.
size_t check_rooted_blocks(int root, int p, size_t count, DType dt, const char* op);

}  // namespace zccl::coll::toolkit
