// ZCCL collectives on float32/float64 buffers, torch-free: the data-movement framework (compress
// once at the source, move compressed bytes, decompress once at the end) and the computation
// framework (ring reduce-scatter with a pipelined compressor that polls MPI between chunks).
// Every algorithm lives in its own .cpp with a comment giving its steps, cost and error bound.
// Non-float dtypes and non-compressible ops never come here: the backend sends them exactly
// through transport::Comm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../compress/fzlight.h"
#include "../transport/transport.h"

namespace zccl::coll {

using fz::DType;
using transport::Comm;

enum class ReduceOp : uint8_t { Sum, Avg, Min, Max };

// Which implementation runs. Auto picks by size and p (see choose_allreduce).
enum class Algorithm : uint8_t {
  Auto,
  Ring,               // ring reduce-scatter (+ ring allgather) / ring allgather
  RecursiveDoubling,  // recursive-doubling allreduce (fold for non-power-of-two p)
  Mpi,                // the MPI library's own uncompressed collective (baseline)
  CprP2P,             // naive: compress before every send, decompress after every receive
  HalvingDoubling,    // recursive-halving reduce-scatter + recursive-doubling allgather
};

struct Config {
  double error_bound = 0.0;  // absolute bound per compression (0: lossless fZ-light)
  int threads = 0;           // compressor OpenMP threads (0: default)
  // Threads the Auto cost model assumes (0: `threads`). The choice must be the same on every
  // rank, and `threads` may differ between ranks (hosts with other core counts): the backend
  // passes the group's smallest count, agreed before the call.
  int model_threads = 0;
  // The network the automatic choices assume (route(): which all_reduce algorithm, and whether
  // data movement compresses at all): bandwidth per rank in Gbit/s and one-way latency.
  // Must be equal on every rank (the backend's agreement checks it).
  double link_gbps = 1.0;
  double link_latency_us = 25.0;
  // The compression ratio the Auto cost model assumes (uncompressed / compressed bytes); 0: the
  // model's fixed kAssumedRatio. The backend passes a ratio measured on the call's data
  // (fz::sample_ratio, the smallest of the ranks' samples, agreed before the call) or the
  // `auto_ratio` setting. Must be equal on every rank.
  double model_ratio = 0.0;
  // How the transport's exact collectives, the Mpi side of Auto's choice, schedule their bytes
  // (transport::Comm::exact_schedules(); the backend passes its communicator's).
  transport::ExactSchedules exact_schedules = transport::ExactSchedules::BandwidthOptimal;
  uint32_t chunk_len = fz::kDefaultChunkLen;  // pipeline / stream chunk, in values
  Algorithm algorithm = Algorithm::Auto;
  size_t min_compress_bytes = 0;  // payloads below this go through MPI uncompressed
  // Pipelined broadcast/scatter: bytes of uncompressed data per segment (values per segment =
  // segment_bytes / dtype size, at least 1). 0 (default): chosen per call by a cost model. Only
  // the root's value matters (it announces its segmentation). A tuning and testing hook.
  size_t segment_bytes = 0;
  // Pipelined broadcast/scatter: largest message a segment's compressed bytes travel in (a
  // segment goes as several frames when larger). 0 (default): just under Open MPI's TCP eager
  // limit (see datamove_common.cpp). Only the root's value matters. A tuning and testing hook.
  size_t frame_bytes = 0;
  // Replica collectives (broadcast, allgather/allgatherv): whether the rank that owns a block
  // keeps its exact values. false (default): the owner decodes its own compressed stream too, so
  // every rank's output is bit-identical (what DDP and FSDP assume of a broadcast or all-gather);
  // true: the owner's values stay exact and the others hold them within error_bound. Only the
  // owner's value matters (the others never see the difference).
  bool owner_exact = false;
  // Reductions of float16/bfloat16 tensors: the caller passes the values widened to float32
  // (accumulation stays in float32) and names the half type here; every partial result then
  // travels as a half stream (rounded to nearest-even into the half type, then compressed within
  // error_bound), half the bytes of a float32 stream. Float32 (default): streams of the data type.
  DType wire_half = DType::Float32;
  // Ring all_reduce, SUM/AVG, eb > 0: true adds quantisation codes as integers at every hop
  // (allreduce_ring_integer.cpp: each value quantised once, no decode-add-recompress; `threads`
  // segments coded at a time, same bits for any count); false (default): the ZCCL computation
  // framework's float hop (allreduce_ring.cpp), whose chunks are coded by `threads` threads.
  // Same bound, p * eb;
  // must be equal on every rank (the backend's agreement checks it). Stats::integer_hop says
  // which ran.
  bool integer_ring = false;
};

// What a collective did, for stats and benchmarks (summed over the call, this rank).
struct Stats {
  uint64_t bytes_in = 0;          // uncompressed payload bytes this rank contributed
  uint64_t bytes_sent = 0;        // bytes this rank put on the wire
  uint64_t bytes_compressed = 0;  // uncompressed bytes this rank compressed
  // The ring's SUM/AVG hops decode, add and compress in one pass: compress_seconds holds them.
  double compress_seconds = 0.0;
  double decompress_seconds = 0.0;  // SUM/AVG: includes adding the decoded values (one pass)
  double total_seconds = 0.0;
  Algorithm algorithm = Algorithm::Auto;  // the one that ran
  bool integer_hop = false;  // the ring added integer codes (Config::integer_ring took effect)
  // The bound in the header of the last fZ-light stream this rank decoded (data movement: the
  // sender's bound, which a REL broadcast's or scatter's receivers do not know); -1: none.
  double received_error_bound = -1.0;
};

// ---- Data-movement framework (output error: eb per value; exact when eb == 0) ----

// recv holds size()*count values: rank r's block at r*count. Ring of compressed blocks. Every
// rank holds the same decoded blocks, its own included (its own block exact when
// cfg.owner_exact).
void allgather(Comm& comm, const void* send, void* recv, size_t count, DType dt,
               const Config& cfg, Stats* stats = nullptr);
// Allgather with a different count per rank (recv is packed in rank order).
void allgatherv(Comm& comm, const void* send, size_t count, void* recv,
                const std::vector<size_t>& counts, DType dt, const Config& cfg,
                Stats* stats = nullptr);
// Pipelined chain of compressed segments (one stream down a binomial tree for small messages);
// every rank, the root included, ends with the decompressed values (the root's buffer is left
// untouched when cfg.owner_exact).
void broadcast(Comm& comm, void* buf, size_t count, DType dt, int root, const Config& cfg,
               Stats* stats = nullptr);
// Root compresses each destination's block once, in segments sent straight to the destination
// as they are compressed; destinations decompress segments as they arrive. send holds
// size()*count values at the root (rank q's block at q*count) and is ignored elsewhere.
void scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, int root,
             const Config& cfg, Stats* stats = nullptr);
// The same with the root's blocks anywhere in memory: blocks[q] (count values) goes to rank q.
// Only the root reads `blocks` (size() entries there; others may pass an empty vector). Spares a
// caller packing a list of tensors into one buffer (a copy into fresh memory that costs more
// than the compressed scatter itself for large blocks).
void scatter(Comm& comm, const std::vector<const void*>& blocks, void* recv, size_t count,
             DType dt, int root, const Config& cfg, Stats* stats = nullptr);
// Each rank compresses its block once; binomial tree gathers compressed blocks to the root.
void gather(Comm& comm, const void* send, void* recv, size_t count, DType dt, int root,
            const Config& cfg, Stats* stats = nullptr);
// Each rank compresses each destination block once; pairwise exchange of compressed blocks.
// Counts/displacements in elements; recv_counts must match what peers send (checked).
void alltoallv(Comm& comm, const void* send, const std::vector<size_t>& send_counts,
               const std::vector<size_t>& send_displs, void* recv,
               const std::vector<size_t>& recv_counts, const std::vector<size_t>& recv_displs,
               DType dt, const Config& cfg, Stats* stats = nullptr);

// ---- Computation framework ----
// Output error bounds (proved in each algorithm's file, asserted by tests, see README); p' is
// the largest power of two <= p:
//   ring reduce-scatter SUM: (p-1)*eb;   ring allreduce SUM: (p-1)*eb + eb (allgather stage);
//   recursive doubling SUM: (p+p'-2)*eb (both partners reduce the same two decoded buffers so
//   replicas stay bit-identical; 2(p-1)*eb for power-of-two p);   cprp2p SUM: 2(p-1)*eb;
//   AVG: the SUM bound / p;   MIN/MAX: eb.   output_error_bound() returns these.

// send holds p*count values (block r for rank r); recv gets this rank's reduced block.
void reduce_scatter(Comm& comm, const void* send, void* recv, size_t count, DType dt, ReduceOp op,
                    const Config& cfg, Stats* stats = nullptr);
// In place on buf (count values).
void allreduce(Comm& comm, void* buf, size_t count, DType dt, ReduceOp op, const Config& cfg,
               Stats* stats = nullptr);
// Result on root only (buf of other ranks is left unspecified-but-valid).
void reduce(Comm& comm, void* buf, size_t count, DType dt, ReduceOp op, int root,
            const Config& cfg, Stats* stats = nullptr);

// "auto", "ring", "recursive_doubling", "mpi", "cprp2p", "halving_doubling" (the names the
// Python options use).
const char* algorithm_name(Algorithm a);
// The inverse; throws std::invalid_argument naming the unknown value.
Algorithm algorithm_from_name(const std::string& name);

// ---- Routing: compressed or not, and which algorithm (route.cpp) ----

enum class Collective : uint8_t {
  AllReduce, ReduceScatter, Reduce, Broadcast, AllGather, Gather, Scatter, AllToAll
};
// Where the call's buffers live: the CPU collectives above, or the gZ collectives
// (csrc/gpu_collectives) for device memory.
enum class Device : uint8_t { Cpu, Cuda };

struct Route {
  bool compressed;      // false: the exact MPI collective moves the data
  Algorithm algorithm;  // what runs, as Stats.algorithm reports it; Mpi iff !compressed
};

// The one decision of every collective call (each entry point takes it; so does the backend).
// Every argument must be the same on all ranks so that all take one path. `bytes` is what the
// size rules look at: the whole buffer of allreduce, reduce and broadcast; reduce_scatter's
// whole input (p blocks); one block of allgather, gather and scatter (allgatherv: the largest);
// the largest block of alltoall (kUnknownBytes where the ranks do not share one: blocks below
// min_compress_bytes then travel raw inside the compressed exchange).
//   Uncompressed: p == 1 (CPU only: the GPU collectives do a single rank's local work
//   themselves), bytes == 0, bytes < cfg.min_compress_bytes, or cfg.algorithm == Mpi.
//   AllReduce, Reduce: Auto -> the cost model (choose_allreduce; Mpi when eb == 0); on Cuda Auto
//     -> recursive doubling below 1 MiB per rank, ring above (Mpi when eb == 0), CprP2P and
//     HalvingDoubling -> Ring. Reduce: HalvingDoubling -> Ring.
//   ReduceScatter: Auto -> Ring unless the cost model says Mpi; RecursiveDoubling and
//     HalvingDoubling -> Ring.
//   AllGather: Ring (CprP2P when asked for, CPU only); Broadcast, Gather, Scatter, AllToAll:
//     Auto, meaning the collective's own compressed algorithm (CprP2P when asked for, CPU only).
//   Data movement on the CPU with cfg.algorithm == Auto: Mpi where the codec cannot keep up
//     with the link (compression_pays).
Route route(Collective c, size_t bytes, int p, const Config& cfg, Device device = Device::Cpu);
inline constexpr size_t kUnknownBytes = SIZE_MAX;

// The configuration's part of route(): a payload of `bytes` may take a compressed path (not
// cfg.algorithm == Mpi, not 0 bytes, not below cfg.min_compress_bytes). The backend asks it once
// per call, before the ranks agree (the bound and the value range depend on it); route() then
// adds the group's size and the algorithm choice.
bool may_compress(size_t bytes, const Config& cfg);

// route()'s network rule. Data movement (Broadcast, Scatter, Gather, AllGather, AllToAll) on the
// CPU with cfg.algorithm == Auto: whether the codec work of the busiest rank, per byte it puts on
// (or takes off) the wire, takes less time than the transport's exact collective spends on that
// byte over cfg.link_gbps (one send, or the copies an exact broadcast sends: see
// cfg.exact_schedules), with the codec's speed scaled by the model's threads. The compression
// ratio is not weighed (route.cpp says why). Fixed costs are min_compress_bytes' business. True for an explicit algorithm (always obeyed), the reductions
// (choose_allreduce decides) and the GPU.
bool compression_pays(Collective c, int p, const Config& cfg, Device device = Device::Cpu);

// The ratio Auto's cost model assumes when Config::model_ratio is 0: conservative for lossy
// bounds (the benchmark wavefield gives 12-17 at REL 1e-4, gradients 2-4 at 1e-3 x RMS).
inline constexpr double kAssumedRatio = 5.0;
// The ratio the cost model takes for `cfg`: model_ratio, or kAssumedRatio when that is 0.
double assumed_ratio(const Config& cfg);

// Whether route()'s choice for the call could change with the data's compression ratio: it
// differs between a ratio of 1 (incompressible) and of kRatioCeiling (constant data). False
// for an explicit algorithm, a payload that may not compress, the GPU and p < 2. The backend
// samples the data (fz::sample_ratio) only then, so that a call whose choice is settled by its
// size and the link pays nothing for it.
bool ratio_matters(Collective c, size_t bytes, int p, const Config& cfg, Device device = Device::Cpu);
inline constexpr double kRatioCeiling = 1e4;
// Values of a payload of `count` that the backend samples (fz::sample_ratio) when ratio_matters:
// 1/16 of it, at least 2048 (or all of a smaller one), at most 65536 (about 0.1 ms of coding at
// 2-3 GB/s).
uint64_t ratio_sample_values(uint64_t count);

// What Algorithm::Auto resolves to for a CPU allreduce of `bytes` on `p` ranks (the cost model
// of route.cpp).
Algorithm choose_allreduce(size_t bytes, int p, const Config& cfg);
// The cost model's time in seconds for a CPU allreduce of `bytes` on `p` ranks by `a` (Mpi,
// Ring, RecursiveDoubling or HalvingDoubling; cfg.integer_ring selects the ring's hop), with
// cfg's network, threads, ratio and exact schedules: what choose_allreduce compares.
double allreduce_cost(Algorithm a, size_t bytes, int p, const Config& cfg);

// Worst-case output error of allreduce/reduce_scatter for (algorithm, op, p, eb), as documented.
double output_error_bound(Algorithm algorithm, ReduceOp op, int p, double eb, bool allreduce);

}  // namespace zccl::coll
