// Device code of the GPU codec (host side: cuszp.cu; design and contracts: cuszp.h; stream
// layout: fzlight_format.h). Included by cuszp.cu only. After the design of cuSZp (Huang et al.,
// SC'23: fused quantisation/prediction/fixed-length encoding, block offsets by a global prefix
// sum) with the single-pass decoupled look-back scan of Merrill & Garland (NVIDIA TR, 2016);
// written from the papers, no code taken.
//
// Kernels, templated on the storage kind K (float, double, lane::Half, lane::BFloat16; see
// cuszp_lane.h), in the order a call runs them:
//   compress:    encode_kernel   (constant/repeat detection, fused quantise + Lorenzo or direct
//                                 codes + bit planes, look-back, chunk CRC; stream format version
//                                 3), or, for chunks whose codes fit in shared memory (the
//                                 default chunk length), encode_staged_kernel
//                                 (cuszp_encode_staged.cuh: same bytes, one quantisation per value)
//                finalize_kernel (header fields, total size, header CRC)
//   decompress:  parse_kernel    (header + table validation, chunk offsets; versions 1, 2 and 3)
//                decode_kernel   (chunk CRC + structure checks + decode [+ reduce])
//   also:        range_partial_kernel / range_final_kernel, reduce_kernel, divide_kernel
//
// Every kernel runs kThreads threads per block; "CTA-wide" helpers must be called by all of them.
#pragma once

#include <cuda/atomic>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "crc32c_combine.h"
#include "cuszp.h"
#include "cuszp_lane.h"
#include "fzlight_format.h"

namespace zccl::gpu::kern {

namespace crc = fz::crc;

inline constexpr int kWarps = 8;  // power of two (the cross-warp CRC fold relies on it)
inline constexpr int kThreads = 32 * kWarps;
inline constexpr unsigned kFull = 0xFFFFFFFFu;
inline constexpr uint32_t kMaxBlocksPerChunk = fz::kMaxChunkLen / fz::kBlockLen;  // 2048
inline constexpr int kCrcMinLog2Slice = 5;   // >= 32 bytes per thread: few fold levels per byte
inline constexpr size_t kControlBytes = 256;  // control words at the start of the workspace
inline constexpr int kRangeMaxBlocks = 1024;  // partial results of finite_range
inline constexpr size_t kMinWorkspaceWords = 2 * kRangeMaxBlocks;  // 8-byte words after control
inline constexpr size_t kFixedHeaderMax = 48 + 8 * fz::kMaxDims;
inline constexpr size_t kEncodedFixed = fz::format::kEncodedChunkFixedBytes;  // mode, q_start, n_outliers
inline constexpr size_t kDirectFixed = fz::format::kDirectChunkFixedBytes;     // mode, n_outliers
static_assert(kEncodedFixed == 9 && kDirectFixed == 5, "chunk fixed parts as in fzlight_format.h");

static_assert((kWarps & (kWarps - 1)) == 0 && kWarps <= 32, "kWarps must be a power of two <= 32");
// One thread per byte of a chunk's block bitmap (versions >= 2; encoder and decoder).
static_assert(lane::bitmap_bytes(kMaxBlocksPerChunk) <= static_cast<uint32_t>(kThreads),
              "a chunk's block bitmap must fit one byte per thread");

// Look-back status words (Merrill & Garland): flag in the top two bits, byte count below.
inline constexpr unsigned long long kFlagAggregate = 1ull << 62;
inline constexpr unsigned long long kFlagInclusive = 2ull << 62;
inline constexpr unsigned long long kValueMask = (1ull << 62) - 1;

// The first kControlBytes of the workspace; zeroed (cudaMemsetAsync) at the start of each call.
struct Control {
  unsigned long long ticket;  // encoder: next chunk to take
  unsigned long long size;    // encoder: stream bytes (copied to the caller's pinned size_t)
  int32_t err;                // first Error (copied to the caller's pinned int32)
  int32_t pad;
  DeviceStreamInfo info;      // parse_kernel's result
  RangeResult range;          // finite_range's result
};
static_assert(sizeof(Control) <= kControlBytes, "control block overflows its slot");

__constant__ uint32_t c_xpow2[crc::kXPow2Count] = {ZCCL_CRC32C_XPOW2_VALUES};

__device__ inline void fail(Control* ctl, Error e) {
  atomicCAS(&ctl->err, 0, static_cast<int32_t>(e));
}

// ------------------------------------------------------------------------------------------
// Loads and stores at any byte address. Stream fields sit at arbitrary offsets; wide accesses
// are used when the address allows, bytes otherwise, so nothing outside the field is touched.

__device__ inline uint32_t ld_u32(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) return *reinterpret_cast<const uint32_t*>(p);
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
__device__ inline uint16_t ld_u16(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) return *reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint16_t>(p[0] | p[1] << 8);
}
__device__ inline uint64_t ld_u64(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 7u) == 0) return *reinterpret_cast<const uint64_t*>(p);
  return static_cast<uint64_t>(ld_u32(p)) | static_cast<uint64_t>(ld_u32(p + 4)) << 32;
}
__device__ inline void st_u32(uint8_t* p, uint32_t v) {
  if ((reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = v;
    return;
  }
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v >> 16);
  p[3] = static_cast<uint8_t>(v >> 24);
}
__device__ inline void st_u16(uint8_t* p, uint16_t v) {
  if ((reinterpret_cast<uintptr_t>(p) & 1u) == 0) {
    *reinterpret_cast<uint16_t*>(p) = v;
    return;
  }
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
__device__ inline void st_u64(uint8_t* p, uint64_t v) {
  if ((reinterpret_cast<uintptr_t>(p) & 7u) == 0) {
    *reinterpret_cast<uint64_t*>(p) = v;
    return;
  }
  st_u32(p, static_cast<uint32_t>(v));
  st_u32(p + 4, static_cast<uint32_t>(v >> 32));
}
__device__ inline uint16_t ld_bits(const uint8_t* p, uint16_t) { return ld_u16(p); }
__device__ inline uint32_t ld_bits(const uint8_t* p, uint32_t) { return ld_u32(p); }
__device__ inline uint64_t ld_bits(const uint8_t* p, uint64_t) { return ld_u64(p); }
__device__ inline void st_bits(uint8_t* p, uint16_t v) { st_u16(p, v); }
__device__ inline void st_bits(uint8_t* p, uint32_t v) { st_u32(p, v); }
__device__ inline void st_bits(uint8_t* p, uint64_t v) { st_u64(p, v); }

// A 4-byte field at any address inside a chunk staged in shared memory by cta_stage_bytes: the
// two aligned words around it and one funnel shift, instead of four byte loads. May read up to 7
// bytes past the field, which the stage's kStageSlack bytes of slack cover.
inline constexpr uint32_t kStageSlack = 32;
__device__ inline uint32_t ld_u32_staged(const uint8_t* p) {
  const uint32_t* w = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{3});
  return __funnelshift_r(w[0], w[1], 8u * static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 3u));
}

// ------------------------------------------------------------------------------------------
// Value <-> bits. Values travel as bits wherever they are only moved, so NaN payloads and
// signed zeros are kept exactly.

template <class T>
struct Bits;
template <>
struct Bits<float> {
  using type = uint32_t;
  __device__ static float value(uint32_t b) { return __uint_as_float(b); }
  __device__ static uint32_t of(float v) { return __float_as_uint(v); }
  __device__ static float add(float a, float b) { return __fadd_rn(a, b); }
  __device__ static float div(float a, float b) { return __fdiv_rn(a, b); }
  __device__ static bool finite(float v) { return fabsf(v) <= FLT_MAX; }
  __device__ static float inf() { return __uint_as_float(0x7F800000u); }
};
template <>
struct Bits<double> {
  using type = uint64_t;
  __device__ static double value(uint64_t b) { return __longlong_as_double(static_cast<long long>(b)); }
  __device__ static uint64_t of(double v) { return static_cast<uint64_t>(__double_as_longlong(v)); }
  __device__ static double add(double a, double b) { return __dadd_rn(a, b); }
  __device__ static double div(double a, double b) { return __ddiv_rn(a, b); }
  __device__ static bool finite(double v) { return fabs(v) <= DBL_MAX; }
  __device__ static double inf() { return __longlong_as_double(0x7FF0000000000000LL); }
};

// ------------------------------------------------------------------------------------------
// Warp helpers.

__device__ inline unsigned lane_id() { return threadIdx.x & 31u; }
__device__ inline unsigned warp_id() { return threadIdx.x >> 5; }
__device__ inline uint32_t lanes_below(unsigned lane) { return (1u << lane) - 1u; }
__device__ inline uint32_t lanes_upto(unsigned lane) { return (2u << lane) - 1u; }  // 0 - 1 at 31

__device__ inline uint32_t warp_or(uint32_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  return __reduce_or_sync(kFull, v);
#else
  for (int o = 16; o > 0; o >>= 1) v |= __shfl_xor_sync(kFull, v, o);
  return v;
#endif
}

__device__ inline uint64_t warp_sum_u64(uint64_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  return v;
}

// Inclusive prefix sums across the warp (uint32 wraps, as the CPU decoder's carry does).
template <class T>
__device__ inline T warp_scan(T v) {
  const unsigned lane = lane_id();
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(kFull, v, o);
    if (lane >= static_cast<unsigned>(o)) v += up;
  }
  return v;
}

// 32x32 bit transpose across the warp (see lane::transpose_stage): a shuffle, a rotate and a
// select per stage, given the lane's constants. Every kernel builds them into a TransposeTable in
// shared memory; a kernel with registers to spare loads its lane's column once into a
// TransposeLane (ten registers), one short of them reads the table at every stage. Constants
// computed from the lane index instead are recomputed by the compiler at every use, where they
// cost as much as the stage itself (SASS of the encoder, third GPU session).
struct TransposeLane {
  uint32_t keep[5];
  uint32_t rot[5];
};

__device__ inline TransposeLane transpose_lane() {
  const unsigned lane = lane_id();
  TransposeLane t;
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    t.keep[k] = lane::transpose_keep(lane, 16 >> k);
    t.rot[k] = lane::transpose_rot(lane, 16 >> k);
  }
  return t;
}

// The constants of every lane, [stage][lane] (conflict-free loads).
struct TransposeTable {
  uint32_t keep[5][32];
  uint32_t rot[5][32];
};

// Fills the table; the caller synchronises the block before the first use.
__device__ inline void init_transpose_table(TransposeTable& t) {
  if (threadIdx.x < 32) {
    const TransposeLane l = transpose_lane();
#pragma unroll
    for (int k = 0; k < 5; ++k) {
      t.keep[k][threadIdx.x] = l.keep[k];
      t.rot[k][threadIdx.x] = l.rot[k];
    }
  }
}

// This lane's constants as registers, loaded from the table: loaded values the compiler keeps,
// where constants it computed from the lane index it recomputes at every use.
__device__ inline TransposeLane load_transpose_lane(const TransposeTable& t) {
  const unsigned lane = lane_id();
  TransposeLane l;
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    l.keep[k] = t.keep[k][lane];
    l.rot[k] = t.rot[k][lane];
  }
  return l;
}

__device__ inline uint32_t warp_transpose(uint32_t x, const TransposeTable& t) {
  const unsigned lane = lane_id();
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const uint32_t partner = __shfl_xor_sync(kFull, x, 16 >> k);
    x = lane::transpose_stage(x, partner, t.keep[k][lane], t.rot[k][lane]);
  }
  return x;
}

__device__ inline uint32_t warp_transpose(uint32_t x, const TransposeLane& t) {
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const uint32_t partner = __shfl_xor_sync(kFull, x, 16 >> k);
    x = lane::transpose_stage(x, partner, t.keep[k], t.rot[k]);
  }
  return x;
}

// ------------------------------------------------------------------------------------------
// CTA-wide helpers (all kThreads threads call them, with uniform arguments).

// Sum over the block; `scratch` holds kWarps words. Returns the total in every thread.
__device__ inline uint64_t cta_sum(uint64_t v, uint64_t* scratch) {
  v = warp_sum_u64(v);
  __syncthreads();  // scratch may still be read by the previous call
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  uint64_t total = 0;
  for (int w = 0; w < kWarps; ++w) total += scratch[w];
  return total;
}

// Exclusive prefix over the block in thread order; *total gets the block's sum.
__device__ inline uint64_t cta_exclusive_scan(uint64_t v, uint64_t* scratch, uint64_t* total) {
  const uint64_t incl = warp_scan<uint64_t>(v);
  __syncthreads();
  if (lane_id() == 31) scratch[warp_id()] = incl;
  __syncthreads();
  uint64_t before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < static_cast<int>(warp_id())) before += scratch[w];
    all += scratch[w];
  }
  *total = all;
  return before + incl - v;
}

// Two exclusive prefixes over the block at once, behind the same two barriers (the encoders size
// a chunk both ways, encoded and direct, in one scan); `scratch` holds 2 * kWarps words. a and b
// become their exclusive prefixes, total_a and total_b the block's sums.
__device__ inline void cta_exclusive_scan2(uint64_t& a, uint64_t& b, uint64_t* scratch, uint64_t& total_a,
                                           uint64_t& total_b) {
  const uint64_t incl_a = warp_scan<uint64_t>(a);
  const uint64_t incl_b = warp_scan<uint64_t>(b);
  __syncthreads();  // scratch may still be read by the previous call
  if (lane_id() == 31) {
    scratch[warp_id()] = incl_a;
    scratch[kWarps + warp_id()] = incl_b;
  }
  __syncthreads();
  uint64_t before_a = 0, before_b = 0, all_a = 0, all_b = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < static_cast<int>(warp_id())) {
      before_a += scratch[w];
      before_b += scratch[kWarps + w];
    }
    all_a += scratch[w];
    all_b += scratch[kWarps + w];
  }
  total_a = all_a;
  total_b = all_b;
  a = before_a + incl_a - a;
  b = before_b + incl_b - b;
}

// The slicing-by-4 tables, built in shared memory at kernel start.
__device__ inline void init_crc_tables(crc::Tables& tab) {
  for (int e = threadIdx.x; e < 4 * 256; e += kThreads) {
    tab.t[e >> 8][e & 255] = crc::table_entry(e >> 8, static_cast<uint32_t>(e & 255));
  }
  __syncthreads();
}

struct CrcScratch {
  uint32_t warp[kWarps];
  uint32_t result;
};

// CRC-32C of n bytes at p by the whole block (plan: crc32c_combine.h). Every thread CRCs its
// slice, the slices are folded pairwise inside each warp and then across warps by warp 0.
__device__ inline uint32_t cta_crc32c(const uint8_t* p, uint64_t n, const crc::Tables& tab,
                                      CrcScratch& sc) {
  if (n == 0) return 0;
  const crc::SlicePlan plan = crc::plan_slices(n, kThreads, kCrcMinLog2Slice);
  const crc::Slice s = crc::slice_of(plan, threadIdx.x);
  uint32_t v = 0;
  if (s.end > s.begin) v = crc::update(s.first ? ~0u : 0u, p, s.begin, s.end, tab);
  const unsigned lane = lane_id();
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const uint32_t right = __shfl_down_sync(kFull, v, 1u << k);
    if ((lane & ((2u << k) - 1u)) == 0) v = crc::fold(v, right, plan, k, c_xpow2);
  }
  __syncthreads();  // sc may still be read by the previous call
  if (lane == 0) sc.warp[warp_id()] = v;
  __syncthreads();
  if (warp_id() == 0) {
    uint32_t w = lane < static_cast<unsigned>(kWarps) ? sc.warp[lane] : 0u;
    for (int k = 0; (1 << k) < kWarps; ++k) {
      const uint32_t right = __shfl_down_sync(kFull, w, 1u << k);
      if ((lane & ((2u << k) - 1u)) == 0) w = crc::fold(w, right, plan, 5 + k, c_xpow2);
    }
    if (lane == 0) sc.result = ~w;
  }
  __syncthreads();
  return sc.result;
}

// CRC-32C of n bytes at p by one warp (the same plan with 32 slices; every lane gets the result).
// For chunks of up to kWarpCrcMax bytes, the encoded and direct chunks of lossy data: the other
// warps are spared the fold loops and the block two barriers, and with several blocks per
// multiprocessor their warps fill the time. -DZCCL_GPU_WARP_CRC_MAX=0 gives every chunk the whole block.
#ifndef ZCCL_GPU_WARP_CRC_MAX
#define ZCCL_GPU_WARP_CRC_MAX 4096
#endif
inline constexpr uint64_t kWarpCrcMax = ZCCL_GPU_WARP_CRC_MAX;
__device__ inline uint32_t warp_crc32c(const uint8_t* p, uint64_t n, const crc::Tables& tab) {
  if (n == 0) return 0;
  const crc::SlicePlan plan = crc::plan_slices(n, 32, kCrcMinLog2Slice);
  const unsigned lane = lane_id();
  const crc::Slice s = crc::slice_of(plan, lane);
  uint32_t v = 0;
  if (s.end > s.begin) v = crc::update(s.first ? ~0u : 0u, p, s.begin, s.end, tab);
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const uint32_t right = __shfl_down_sync(kFull, v, 1u << k);
    if ((lane & ((2u << k) - 1u)) == 0) v = crc::fold(v, right, plan, k, c_xpow2);
  }
  return ~__shfl_sync(kFull, v, 0);
}

// Copies n values from global x to shared `cache` with 16-byte loads where x allows, so the whole
// chunk's loads are in flight at once (the passes then run at shared-memory latency).
template <class B>
__device__ inline void cta_stage_values(B* cache, const B* x, uint32_t n) {
  __syncthreads();  // the previous chunk may still be read from `cache`
  uint32_t done = 0;
  if ((reinterpret_cast<uintptr_t>(x) & 15u) == 0) {
    const uint32_t vecs = static_cast<uint32_t>(n * sizeof(B) / 16);
    const uint4* src = reinterpret_cast<const uint4*>(x);
    uint4* dst = reinterpret_cast<uint4*>(cache);
    for (uint32_t v = threadIdx.x; v < vecs; v += kThreads) dst[v] = src[v];
    done = static_cast<uint32_t>(vecs * 16 / sizeof(B));
  }
  for (uint32_t i = done + threadIdx.x; i < n; i += kThreads) cache[i] = x[i];
  __syncthreads();
}

// Copies n stream bytes at p (any alignment) into shared `stage` (16-byte aligned, n + 15 bytes)
// at the same address residue mod 16, so the body moves in aligned 16-byte pieces; returns where
// byte 0 landed. Reads nothing outside [p, p + n).
__device__ inline const uint8_t* cta_stage_bytes(uint8_t* stage, const uint8_t* p, uint64_t n) {
  __syncthreads();  // the previous chunk may still be read from `stage`
  const uint32_t mis = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p) & 15u);
  uint8_t* dst = stage + mis;
  const uint64_t head = min(n, static_cast<uint64_t>((16u - mis) & 15u));
  const uint64_t vecs = (n - head) / 16;
  const uint64_t tail = head + 16 * vecs;
  for (uint64_t k = threadIdx.x; k < head; k += kThreads) dst[k] = p[k];
  const uint4* src4 = reinterpret_cast<const uint4*>(p + head);
  uint4* dst4 = reinterpret_cast<uint4*>(dst + head);
  for (uint64_t v = threadIdx.x; v < vecs; v += kThreads) dst4[v] = src4[v];
  for (uint64_t k = tail + threadIdx.x; k < n; k += kThreads) dst[k] = p[k];
  __syncthreads();
  return dst;
}

// ------------------------------------------------------------------------------------------
// Encoder.

template <class K>
struct EncodeArgs {
  using C = typename lane::Kind<K>::C;
  const typename lane::Kind<K>::S* src;
  uint8_t* dst;
  uint64_t count;
  uint64_t num_chunks;
  uint64_t data_base;   // header bytes: chunk data starts here
  uint64_t table_off;   // chunk table offset
  uint32_t chunk_len;
  uint32_t cache_values;  // chunk input staged in dynamic shared memory (0: read global memory)
  C bin;
  C inv_bin;
  double eb;
  int lossy;
  Control* ctl;
  unsigned long long* status;  // num_chunks look-back words (zeroed)
};

struct WarpSummary {
  int32_t has_good;  // the warp's block(s) have a quantised (non-outlier) value
  int32_t last;      // the last quantised code
  uint32_t outliers;
  uint32_t payload;  // write pass: payload bytes of the warp's blocks
};

struct EncodeShared {
  crc::Tables crc_tab;
  TransposeTable transpose;
  CrcScratch crc_scratch;
  uint8_t lens[kMaxBlocksPerChunk];   // code length per block, from the sizing pass: encoded
  uint8_t dlens[kMaxBlocksPerChunk];  // and direct
  WarpSummary sum[2][kWarps];         // per tile, double-buffered (one barrier per tile)
  uint64_t scratch[2 * kWarps];
  unsigned long long chunk;
  unsigned long long offset;          // the chunk's exclusive prefix in bytes
  int32_t q_start;
  alignas(16) uint8_t const_bytes[16];  // a constant chunk's bytes (mode 2 + value), for its CRC
};

// True when all n values at x have the bits v (uniform over the block). A tile of kThreads values
// per barrier, so varied data stops after its first tile.
template <class B>
__device__ inline bool cta_all_equal(const B* x, uint32_t n, B v) {
  for (uint32_t base = 0; base < n; base += kThreads) {
    const uint32_t i = base + threadIdx.x;
    if (__syncthreads_or(i < n && x[i] != v) != 0) return false;
  }
  return true;
}

// Blocks per warp in each tile of the encoder's passes and the decoder, and the resident blocks
// per multiprocessor each kernel is compiled for (its register budget). Chosen on an H200
// (benchmarks/RESULTS.md, GPU section; test_cuszp --bench, 256 MiB wavefield, REL 1e-2): 4 blocks
// per warp took compress from 1.66 to 1.00 ms and decompress from 1.20 to 0.79 ms; both kernels
// are fastest held to 64 registers (4 resident blocks: decompress 0.79 ms, against 0.85 ms at
// 80 registers and 1.04 ms at 110, although it spills a little there); 5 blocks per warp in the
// encoder gained nothing measurable (0.985 ms). encode_staged_kernel (cuszp_encode_staged.cuh)
// has its own budget, kStagedMinBlocks: held to 5 resident blocks (48 registers, no spill) it
// compressed in 0.618 / 0.642 / 0.742 ms at REL 1e-2 / 1e-3 / 1e-4 against 0.689 / 0.720 /
// 0.806 ms at 4 (H200, third GPU session, run 8). Override with -DZCCL_GPU_...=N to compare.
#ifndef ZCCL_GPU_ENCODE_BLOCKS_PER_WARP
#define ZCCL_GPU_ENCODE_BLOCKS_PER_WARP 4
#endif
#ifndef ZCCL_GPU_DECODE_BLOCKS_PER_WARP
#define ZCCL_GPU_DECODE_BLOCKS_PER_WARP 4
#endif
#ifndef ZCCL_GPU_ENCODE_MIN_BLOCKS
#define ZCCL_GPU_ENCODE_MIN_BLOCKS 4
#endif
#ifndef ZCCL_GPU_DECODE_MIN_BLOCKS
#define ZCCL_GPU_DECODE_MIN_BLOCKS 4
#endif
#ifndef ZCCL_GPU_STAGED_MIN_BLOCKS
#define ZCCL_GPU_STAGED_MIN_BLOCKS 5
#endif
inline constexpr int kEncodeBlocksPerWarp = ZCCL_GPU_ENCODE_BLOCKS_PER_WARP;
inline constexpr int kDecodeBlocksPerWarp = ZCCL_GPU_DECODE_BLOCKS_PER_WARP;
inline constexpr int kEncodeMinBlocks = ZCCL_GPU_ENCODE_MIN_BLOCKS;
inline constexpr int kDecodeMinBlocks = ZCCL_GPU_DECODE_MIN_BLOCKS;
inline constexpr int kStagedMinBlocks = ZCCL_GPU_STAGED_MIN_BLOCKS;
static_assert(kEncodeBlocksPerWarp >= 1 && kEncodeBlocksPerWarp <= 8, "1..8 blocks per warp");
static_assert(kDecodeBlocksPerWarp >= 1 && kWarps * kDecodeBlocksPerWarp <= 32,
              "a decoder tile's blocks must fit one warp's lanes");

// One pass over a chunk's blocks in tiles of kWarps * kR blocks: warp w codes blocks
// t*kWarps*kR + w*kR + r (r < kR), lane l value l of each. A tile's two barriers and its prefix
// over the kWarps warp summaries (a warp scan) are shared by kR values per thread.
// kWrite = false sizes the chunk both ways (code lengths into sm.lens for an encoded chunk and
// sm.dlens for a direct one, q_start; returns the outlier count); kWrite = true writes the planes
// of the chunk kind `direct` names (uniform over the block) at out + planes_at and its outliers
// after them (the header, bitmap and code lengths are written by the caller). `x` is the chunk's
// input, in shared memory when it was staged there, else in global memory. (`direct` is an
// argument, not a template parameter: two write passes inlined in the kernel spilled registers.)
//
// Codes of an encoded chunk: a value's effective code e_i is its own code if it quantises, else
// the effective code of the value before it (0 before the chunk's first value): fzlight's
// "outliers take the prediction". q_start = e_0, deltas are e_i - e_(i-1), and padding lanes past
// the chunk's end repeat the last code, exactly as fzlight.cpp's encoder. A direct chunk codes
// q_i itself, 0 for values stored exactly and for padding lanes.
template <class K, bool kWrite, int kR = kEncodeBlocksPerWarp>
__device__ uint32_t encode_pass(const EncodeArgs<K>& a, EncodeShared& sm,
                                const typename lane::Kind<K>::S* x, uint32_t m, uint32_t nb,
                                uint8_t* out, size_t planes_at, uint32_t payload_total,
                                uint32_t n_out_total, bool direct) {
  using B = typename lane::Kind<K>::S;
  constexpr uint32_t kTileBlocks = kWarps * kR;
  const unsigned lane = lane_id();
  const unsigned warp = warp_id();
  const uint8_t* const lens = direct ? sm.dlens : sm.lens;  // the written kind's (kWrite)
  int32_t carry_code = 0;
  uint32_t carry_out = 0;
  uint32_t carry_payload = 0;
  const size_t idx_at = planes_at + payload_total;
  const size_t val_at = idx_at + 2 * static_cast<size_t>(n_out_total);
  const uint32_t tiles = (nb + kTileBlocks - 1) / kTileBlocks;
  for (uint32_t t = 0; t < tiles; ++t) {
    const int buf = t & 1;
    const uint32_t b0 = t * kTileBlocks + warp * kR;
    B bits[kR];
    int32_t q[kR];
    uint32_t gmask[kR], omask[kR];
    bool bad[kR];
    WarpSummary mine{0, 0, 0, 0};
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t i = (b0 + r) * 32 + lane;
      const bool valid = i < m;  // implies block b0 + r < nb
      bits[r] = valid ? x[i] : B{0};
      q[r] = 0;  // stays 0 unless the value quantises (quantize_bits): a direct chunk's code
      const bool good = valid && lane::quantize_bits<K>(bits[r], a.inv_bin, a.bin, a.eb, q[r]);
      bad[r] = valid && !good;
      gmask[r] = __ballot_sync(kFull, good);
      omask[r] = __ballot_sync(kFull, bad[r]);
      if (gmask[r] != 0) {
        mine.has_good = 1;
        mine.last = __shfl_sync(kFull, q[r], 31 - __clz(static_cast<int>(gmask[r])));
      }
      mine.outliers += static_cast<uint32_t>(__popc(omask[r]));
      if (kWrite && b0 + r < nb) mine.payload += lane::block_bytes(lens[b0 + r]);
    }
    if (lane == 0) sm.sum[buf][warp] = mine;
    __syncthreads();

    // Lane k < kWarps holds warp k's summary; scans give what precedes this warp in the tile.
    const WarpSummary s = lane < kWarps ? sm.sum[buf][lane] : WarpSummary{0, 0, 0, 0};
    const uint32_t hg = __ballot_sync(kFull, s.has_good != 0);
    const uint32_t hg_below = hg & lanes_below(warp);
    const int32_t last_below = __shfl_sync(kFull, s.last, hg_below != 0 ? 31 - __clz(static_cast<int>(hg_below)) : 0);
    const int32_t last_all = __shfl_sync(kFull, s.last, hg != 0 ? 31 - __clz(static_cast<int>(hg)) : 0);
    const uint32_t out_incl = warp_scan<uint32_t>(s.outliers);
    const uint32_t pay_incl = warp_scan<uint32_t>(s.payload);
    const uint32_t out_excl = __shfl_sync(kFull, out_incl - s.outliers, warp);
    const uint32_t pay_excl = __shfl_sync(kFull, pay_incl - s.payload, warp);
    int32_t prev = hg_below != 0 ? last_below : carry_code;
    uint32_t out_before = carry_out + out_excl;
    uint32_t pay_before = carry_payload + pay_excl;
    if (hg != 0) carry_code = last_all;
    carry_out += __shfl_sync(kFull, out_incl, kWarps - 1);
    carry_payload += __shfl_sync(kFull, pay_incl, kWarps - 1);
    // The tile's summaries are read: a barrier before the next tile's writes. The double buffer
    // alone orders them too (tile t+2 writes only after tile t+1's barrier), but racecheck on an
    // H200 reported hazards here without it; with it the kernel is racecheck-clean and no slower
    // (benchmarks/results/gpu_h200/logs/run4_barrier_bench.log).
    __syncthreads();

#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t b = b0 + r;
      if (b >= nb) break;  // warp-uniform
      const uint32_t i = b * 32 + lane;
      const uint32_t upto = gmask[r] & lanes_upto(lane);
      const int32_t src_code = __shfl_sync(kFull, q[r], upto != 0 ? 31 - __clz(static_cast<int>(upto)) : 0);
      const int32_t e = upto != 0 ? src_code : prev;
      int32_t pred = __shfl_up_sync(kFull, e, 1);
      if (lane == 0) pred = b == 0 ? e : prev;
      if (!kWrite) {
        const int32_t d = e - pred;
        const uint32_t mag = d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
        const uint32_t dmag = q[r] < 0 ? 0u - static_cast<uint32_t>(q[r]) : static_cast<uint32_t>(q[r]);
        const uint32_t any = warp_or(mag);
        const uint32_t dany = warp_or(dmag);
        if (lane == 0) {
          sm.lens[b] = static_cast<uint8_t>(any == 0 ? 0 : 32 - __clz(static_cast<int>(any)));
          sm.dlens[b] = static_cast<uint8_t>(dany == 0 ? 0 : 32 - __clz(static_cast<int>(dany)));
          if (b == 0) sm.q_start = e;
        }
      } else {
        const int32_t d = direct ? q[r] : e - pred;
        const uint32_t mag = d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
        // The length again from the magnitudes (= lens[b]): reading it back from shared memory
        // instead cost encode_kernel<double> register spills.
        const uint32_t any = warp_or(mag);
        const uint32_t len = any == 0 ? 0u : 32u - static_cast<uint32_t>(__clz(static_cast<int>(any)));
        const uint32_t sign = __ballot_sync(kFull, d < 0);
        const uint32_t plane = warp_transpose(mag, sm.transpose);
        if (len != 0) {
          uint8_t* w = out + planes_at + pay_before;
          if (lane == 0) st_u32(w, sign);
          if (lane < len) st_u32(w + 4 + 4 * lane, plane);
        }
        if (bad[r]) {
          const uint32_t k = out_before + static_cast<uint32_t>(__popc(omask[r] & lanes_below(lane)));
          st_u16(out + idx_at + 2 * static_cast<size_t>(k), static_cast<uint16_t>(i));
          st_bits(out + val_at + static_cast<size_t>(k) * sizeof(B), bits[r]);
        }
        pay_before += lane::block_bytes(len);
      }
      prev = __shfl_sync(kFull, e, 31);
      out_before += static_cast<uint32_t>(__popc(omask[r]));
    }
  }
  return carry_out;
}

// ---- Per-chunk steps shared by encode_kernel and encode_staged_kernel (all threads call them).

// The chunk a block encodes next, taken by ticket (the barrier also ends every read of the
// previous chunk's shared state). False when none is left.
struct ChunkRef {
  uint64_t c;       // chunk index
  uint64_t first;   // its first value
  uint32_t m;       // values
  uint32_t nb;      // 32-value blocks
  uint32_t bm;      // bitmap bytes
};

__device__ inline bool next_chunk(Control* ctl, unsigned long long& slot, uint64_t num_chunks, uint32_t chunk_len,
                                  uint64_t count, ChunkRef& r) {
  if (threadIdx.x == 0) slot = atomicAdd(&ctl->ticket, 1ull);
  __syncthreads();
  r.c = slot;
  if (r.c >= num_chunks) return false;
  r.first = r.c * chunk_len;
  r.m = static_cast<uint32_t>(min(static_cast<uint64_t>(chunk_len), count - r.first));
  r.nb = (r.m + 31) / 32;
  r.bm = lane::bitmap_bytes(r.nb);
  return true;
}

// What a chunk becomes before its encoded size is known (fzlight.cpp's code_chunk): a repeat
// (table size 0) when it and the previous chunk (always a full one) are constant with the same
// bits, else constant when all its values have the same bits, else a candidate for encoding
// (lossy streams, when the smaller fixed part, a direct chunk's, alone is smaller than raw), else
// raw. Uniform over the block. `xin` is the chunk's input (maybe staged), `x` where it lies in
// global memory.
struct ChunkPlan {
  bool constant;
  bool repeat;
  bool encode;        // encoded or direct, unless that turns out larger than raw
  bool direct;        // settle's choice: a direct chunk (mode 4) instead of an encoded one
  uint64_t size;      // table size
  uint64_t raw_bytes;

  // Both sizes once known, from the parts that differ (code-length bytes + planes: `varying`)
  // and those they share (bitmap + outliers). fzlight.cpp's direct_wins: direct when its varying
  // part is smaller, i.e. when the chunk is smaller by more than the 4 bytes of q_start it does
  // without; encoded on a tie. The chunk stays encoded/direct when that is not larger than raw.
  __device__ void settle(uint64_t encoded_varying, uint64_t direct_varying, uint64_t shared) {
    direct = direct_varying < encoded_varying;
    const uint64_t bytes = direct ? kDirectFixed + direct_varying + shared : kEncodedFixed + encoded_varying + shared;
    if (bytes <= raw_bytes) {
      size = bytes;
    } else {
      encode = false;
    }
  }
};

template <class B>
__device__ inline ChunkPlan plan_chunk(const B* xin, const B* x, uint64_t c, uint32_t chunk_len, uint32_t m,
                                       uint32_t bm, int lossy, B& v0) {
  v0 = xin[0];
  ChunkPlan p;
  p.raw_bytes = 1 + static_cast<uint64_t>(m) * sizeof(B);
  p.constant = cta_all_equal(xin, m, v0);
  p.repeat = p.constant && c > 0 && cta_all_equal(x - chunk_len, chunk_len, v0);
  p.encode = !p.constant && lossy != 0 && kDirectFixed + bm < p.raw_bytes;
  p.direct = false;
  p.size = p.repeat ? 0 : p.constant ? 1 + sizeof(B) : p.raw_bytes;
  return p;
}

// An encoded or direct chunk's fixed fields (thread 0: mode, q_start if encoded, n_outliers),
// bitmap and code lengths (thread j < bm: bitmap byte j and the lengths of its set bits, from
// rank my_rank on).
__device__ inline void write_encoded_head(uint8_t* out, bool direct, int32_t q_start, uint32_t n_out, uint32_t bm,
                                          uint32_t my_byte, uint32_t my_rank, const uint8_t* lens) {
  const size_t fixed = direct ? kDirectFixed : kEncodedFixed;
  if (threadIdx.x == 0) {
    if (direct) {
      out[0] = fz::format::kChunkDirect;
      st_u32(out + 1, n_out);
    } else {
      out[0] = fz::format::kChunkEncoded;
      st_u32(out + 1, static_cast<uint32_t>(q_start));
      st_u32(out + 5, n_out);
    }
  }
  if (threadIdx.x < bm) {
    out[fixed + threadIdx.x] = static_cast<uint8_t>(my_byte);
    uint8_t* lens_out = out + fixed + bm + my_rank;
    for (uint32_t k = 0; k < 8; ++k) {
      if ((my_byte >> k) & 1u) *lens_out++ = lens[8 * threadIdx.x + k];
    }
  }
}

// A constant chunk (nothing for a repeat: its CRC is that of the constant chunk it repeats, the
// same bytes, kept in const_bytes) or a raw one.
template <class B>
__device__ inline void write_plain_chunk(uint8_t* out, const ChunkPlan& p, B v0, const B* xin, uint32_t m,
                                         uint8_t* const_bytes) {
  if (p.constant) {
    if (threadIdx.x == 0) {
      const_bytes[0] = fz::format::kChunkConstant;
      st_bits(const_bytes + 1, v0);
      if (!p.repeat) {
        out[0] = fz::format::kChunkConstant;
        st_bits(out + 1, v0);
      }
    }
  } else {
    if (threadIdx.x == 0) out[0] = fz::format::kChunkRaw;
    for (uint32_t i = threadIdx.x; i < m; i += kThreads) st_bits(out + 1 + i * sizeof(B), xin[i]);
  }
}

// After the barrier that makes the chunk's bytes visible: its CRC and table entry. Small chunks
// are CRC'd by warp 0 alone (the next chunk's first barrier keeps const_bytes in place until it
// is done).
__device__ inline void finish_chunk(const uint8_t* out, uint64_t size, bool constant, const uint8_t* const_bytes,
                                    uint32_t elem, uint8_t* entry, const crc::Tables& tab, CrcScratch& sc) {
  uint32_t crc = 0;
  if (!constant && size > kWarpCrcMax) {
    crc = cta_crc32c(out, size, tab, sc);
  } else if (warp_id() == 0) {
    crc = constant ? warp_crc32c(const_bytes, 1 + elem, tab) : warp_crc32c(out, size, tab);
  }
  if (threadIdx.x == 0) {
    st_u32(entry, static_cast<uint32_t>(size));
    st_u32(entry + 4, crc);
  }
}

// Decoupled look-back by warp 0: publishes this chunk's aggregate, waits for the window of 32
// predecessors to publish anything, adds aggregates back to the nearest inclusive prefix, and
// publishes its own inclusive prefix. Chunks are taken in ticket order by running blocks and a
// block publishes its aggregate before it ever waits, so the wait always ends.
__device__ inline uint64_t lookback(unsigned long long* status, uint64_t c, uint64_t aggregate) {
  using Ref = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;
  const unsigned lane = lane_id();
  if (c == 0) {
    if (lane == 0) Ref(status[0]).store(kFlagInclusive | aggregate, cuda::memory_order_relaxed);
    return 0;
  }
  if (lane == 0) Ref(status[c]).store(kFlagAggregate | aggregate, cuda::memory_order_relaxed);
  uint64_t exclusive = 0;
  int64_t top = static_cast<int64_t>(c) - 1;  // window: predecessors top, top-1, ..., top-31
  for (;;) {
    const int64_t j = top - static_cast<int64_t>(lane);
    unsigned long long s = kFlagInclusive;  // before chunk 0: an inclusive prefix of 0
    if (j >= 0) s = Ref(status[j]).load(cuda::memory_order_relaxed);
    if (__any_sync(kFull, (s >> 62) == 0)) {  // some predecessor has published nothing yet
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
      __nanosleep(64);
#endif
      continue;
    }
    const uint32_t inclusive = __ballot_sync(kFull, (s >> 62) == 2);
    const unsigned stop = inclusive != 0 ? static_cast<unsigned>(__ffs(static_cast<int>(inclusive)) - 1) : 31u;
    exclusive += warp_sum_u64(lane <= stop ? (s & kValueMask) : 0);
    if (inclusive != 0) break;
    top -= 32;
  }
  if (lane == 0) Ref(status[c]).store(kFlagInclusive | (exclusive + aggregate), cuda::memory_order_relaxed);
  return exclusive;
}

// Persistent blocks; each takes chunks by ticket until none is left. Per chunk, fzlight.cpp's
// code_chunk: a repeat (table size 0) when the chunk and the previous one are constant with the
// same bits, else a constant chunk when all values have the same bits, else (lossy streams) the
// smaller of the encoded and the direct chunk (ChunkPlan::settle) when that is not larger than
// raw, else raw. Version-3 layout (fzlight_format.h).
template <class K>
__global__ void __launch_bounds__(kThreads, kEncodeMinBlocks) encode_kernel(EncodeArgs<K> a) {
  using B = typename lane::Kind<K>::S;
  constexpr uint32_t elem = sizeof(B);
  __shared__ EncodeShared sm;
  extern __shared__ uint4 dyn_smem[];  // 16-byte aligned
  B* const cache = a.cache_values != 0 ? reinterpret_cast<B*>(dyn_smem) : nullptr;
  init_transpose_table(sm.transpose);
  init_crc_tables(sm.crc_tab);  // synchronises the block
  ChunkRef ref;
  while (next_chunk(a.ctl, sm.chunk, a.num_chunks, a.chunk_len, a.count, ref)) {
    const uint64_t c = ref.c;
    const uint32_t m = ref.m, nb = ref.nb, bm = ref.bm;
    const B* const x = a.src + ref.first;

    // The encoded path reads the chunk twice (size, write): stage it once when it fits.
    const B* xin = x;
    if (a.lossy != 0 && cache != nullptr) {
      cta_stage_values(cache, x, m);
      xin = cache;
    }
    B v0;
    ChunkPlan plan = plan_chunk(xin, x, c, a.chunk_len, m, bm, a.lossy, v0);
    uint32_t payload = 0, n_out = 0, nonzero = 0;
    uint32_t my_byte = 0, my_rank = 0;  // bitmap byte threadIdx.x, rank of its first set bit
    if (plan.encode) {
      n_out = encode_pass<K, false>(a, sm, xin, m, nb, nullptr, 0, 0, 0, false);
      __syncthreads();  // sm.lens, sm.dlens and sm.q_start complete
      // Thread j owns bitmap byte j (blocks 8j..8j+7; bm <= kThreads) of either chunk kind
      // (enc_: encoded, dir_: direct). One exclusive scan of both ranks their nonzero blocks'
      // code-length bytes (high half) and sums their payload (low half).
      uint32_t enc_byte = 0, dir_byte = 0;
      uint64_t enc = 0, dir = 0;
      if (threadIdx.x < bm) {
        for (uint32_t k = 0; k < 8; ++k) {
          const uint32_t b = 8 * threadIdx.x + k;
          if (b >= nb) break;
          if (sm.lens[b] != 0) enc_byte |= 1u << k;
          if (sm.dlens[b] != 0) dir_byte |= 1u << k;
          enc += lane::block_bytes(sm.lens[b]);
          dir += lane::block_bytes(sm.dlens[b]);
        }
        enc |= static_cast<uint64_t>(__popc(enc_byte)) << 32;
        dir |= static_cast<uint64_t>(__popc(dir_byte)) << 32;
      }
      uint64_t enc_total = 0, dir_total = 0;
      cta_exclusive_scan2(enc, dir, sm.scratch, enc_total, dir_total);
      plan.settle((enc_total >> 32) + static_cast<uint32_t>(enc_total),
                  (dir_total >> 32) + static_cast<uint32_t>(dir_total), bm + static_cast<uint64_t>(n_out) * (2 + elem));
      const uint64_t excl = plan.direct ? dir : enc, total = plan.direct ? dir_total : enc_total;
      my_byte = plan.direct ? dir_byte : enc_byte;
      my_rank = static_cast<uint32_t>(excl >> 32);
      nonzero = static_cast<uint32_t>(total >> 32);
      payload = static_cast<uint32_t>(total);
    }

    // Place the chunk: global exclusive prefix of chunk sizes.
    if (warp_id() == 0) {
      const uint64_t off = lookback(a.status, c, plan.size);
      if (lane_id() == 0) sm.offset = off;
    }
    __syncthreads();
    uint8_t* const out = a.dst + a.data_base + sm.offset;

    if (plan.encode) {
      write_encoded_head(out, plan.direct, sm.q_start, n_out, bm, my_byte, my_rank, plan.direct ? sm.dlens : sm.lens);
      const size_t fixed = plan.direct ? kDirectFixed : kEncodedFixed;
      encode_pass<K, true>(a, sm, xin, m, nb, out, fixed + bm + nonzero, payload, n_out, plan.direct);
    } else {
      write_plain_chunk(out, plan, v0, xin, m, sm.const_bytes);
    }
    __syncthreads();  // the chunk's bytes are visible to the whole block
    finish_chunk(out, plan.size, plan.constant, sm.const_bytes, elem, a.dst + a.table_off + 8 * c, sm.crc_tab,
                 sm.crc_scratch);
  }
}

// ------------------------------------------------------------------------------------------
// The header as fzlight.cpp's write_header lays it out, except the total (offset 40), which only
// the device knows; then the header CRC. One block.
struct FinalizeArgs {
  uint8_t* dst;
  uint64_t num_chunks;
  uint64_t header_bytes;
  uint32_t fixed_len;  // 48 + 8 ndim
  uint8_t fixed[kFixedHeaderMax];
  Control* ctl;
  const unsigned long long* status;
};

__global__ void __launch_bounds__(kThreads) finalize_kernel(FinalizeArgs a) {
  __shared__ crc::Tables tab;
  __shared__ CrcScratch sc;
  init_crc_tables(tab);
  const uint64_t data = a.num_chunks == 0 ? 0 : (a.status[a.num_chunks - 1] & kValueMask);
  const uint64_t total = a.header_bytes + data;
  for (uint32_t j = threadIdx.x; j < a.fixed_len; j += kThreads) {
    a.dst[j] = (j >= 40 && j < 48) ? static_cast<uint8_t>(total >> (8 * (j - 40))) : a.fixed[j];
  }
  __syncthreads();
  const uint32_t crc = cta_crc32c(a.dst, a.header_bytes - 4, tab, sc);
  if (threadIdx.x == 0) {
    st_u32(a.dst + a.header_bytes - 4, crc);
    a.ctl->size = total;
  }
}

// ------------------------------------------------------------------------------------------
// Decoder, step 1: the header and chunk table (fzlight.cpp's parse(), on the device). One block.

struct ParseArgs {
  const uint8_t* src;
  uint64_t len_bound;
  int32_t want_dtype;    // 0: any (inspect)
  int32_t count_rule;    // 0: no check (inspect), 1: count <= dst_count, 2: count == dst_count
  uint64_t dst_count;
  uint64_t cap_chunks;   // chunks the workspace holds offsets for
  Control* ctl;
  unsigned long long* offsets;  // num_chunks + 1 entries
};

struct ParseShared {
  crc::Tables crc_tab;
  CrcScratch crc_scratch;
  uint64_t scratch[kWarps];
  DeviceStreamInfo info;
  int32_t err;
};

__device__ inline uint64_t chunk_values(uint64_t count, uint32_t chunk_len, uint64_t c) {
  return min(static_cast<uint64_t>(chunk_len), count - c * chunk_len);
}

// Bytes per value of a stream dtype code (1 float32, 2 float64, 3 float16, 4 bfloat16).
__device__ inline uint32_t dtype_bytes(uint8_t dtype) { return dtype == 2 ? 8u : dtype == 1 ? 4u : 2u; }

// Fixed fields (thread 0): everything up to the header CRC.
__device__ inline Error parse_fixed(const ParseArgs& a, DeviceStreamInfo& info) {
  const uint8_t* s = a.src;
  if (a.len_bound < fz::format::kFixedHeaderBytes + fz::format::kHeaderCrcBytes) return Error::Truncated;
  if (s[0] != 'Z' || s[1] != 'C' || s[2] != 'F' || s[3] != 'Z') return Error::BadMagic;
  static_assert(fz::format::kVersion == 3, "the decoder reads versions 1..3: a new version needs its checks");
  if (s[4] != fz::format::kVersion1 && s[4] != fz::format::kVersion2 && s[4] != fz::format::kVersion) {
    return Error::BadVersion;
  }
  info.version = s[4];
  // Version 1 knows float32/float64; versions 2 and 3 add float16 (3) and bfloat16 (4).
  if (s[5] < 1 || s[5] > (info.version == fz::format::kVersion1 ? 2 : 4)) return Error::BadDType;
  info.dtype = s[5];
  if (a.want_dtype != 0 && s[5] != a.want_dtype) return Error::DTypeMismatch;
  if (s[6] != fz::kBlockLen) return Error::BadBlockLen;
  info.ndim = s[7];
  if (info.ndim > fz::kMaxDims) return Error::BadNdim;
  info.count = ld_u64(s + 8);
  info.error_bound = __longlong_as_double(static_cast<long long>(ld_u64(s + 16)));
  info.bin = __longlong_as_double(static_cast<long long>(ld_u64(s + 24)));
  info.chunk_len = ld_u32(s + 32);
  info.codec = ld_u32(s + 36);
  if (info.version == fz::format::kVersion1 && info.codec != 0) return Error::BadReserved;
  if (info.codec > fz::format::kCodecShuffleZstd) return Error::BadCodec;
  info.total_bytes = ld_u64(s + 40);
  const uint32_t cl = info.chunk_len;
  if (cl < fz::kBlockLen || cl > fz::kMaxChunkLen || cl % fz::kBlockLen != 0) return Error::BadChunkLen;
  info.num_chunks = info.count == 0 ? 0 : (info.count - 1) / cl + 1;
  if (info.num_chunks > a.len_bound / fz::format::kTableEntryBytes) return Error::TableTooLarge;
  info.header_bytes = fz::format::kFixedHeaderBytes + 8 * static_cast<uint64_t>(info.ndim) +
                      fz::format::kTableEntryBytes * info.num_chunks + fz::format::kHeaderCrcBytes;
  if (info.header_bytes > a.len_bound) return Error::Truncated;
  return Error::Ok;
}

// Fields checked after the header CRC (thread 0).
__device__ inline Error parse_checked(const ParseArgs& a, const DeviceStreamInfo& info) {
  if (info.total_bytes > a.len_bound) return Error::BadTotalBytes;
  const double eb = info.error_bound, bin = info.bin;
  if (!isfinite(eb) || eb < 0) return Error::BadErrorBound;
  if (!isfinite(bin) || bin < 0) return Error::BadBin;
  if (bin > 2.0 * eb) return Error::BadBin;
  if (info.dtype != 2 && static_cast<double>(__double2float_rn(bin)) != bin) return Error::BadBin;
  if (info.codec != 0 && bin != 0.0) return Error::LosslessCodecInLossyStream;
  // Codec 1 chunks are zstd frames: the CPU decodes them (fz::decompress), the GPU cannot.
  if (info.codec == fz::format::kCodecShuffleZstd) return Error::LosslessCodecOnHost;
  uint64_t product = 1;
  for (uint32_t d = 0; d < info.ndim; ++d) {
    const uint64_t dim = ld_u64(a.src + 48 + 8 * d);
    if (dim != 0 && product > ~0ull / dim) return Error::ShapeMismatch;
    product *= dim;
  }
  if (product != info.count) return Error::ShapeMismatch;
  if (a.count_rule == 1 && info.count > a.dst_count) return Error::CountMismatch;
  if (a.count_rule == 2 && info.count != a.dst_count) return Error::CountMismatch;
  if (info.num_chunks > a.cap_chunks) return Error::WorkspaceTooSmall;
  return Error::Ok;
}

__global__ void __launch_bounds__(kThreads) parse_kernel(ParseArgs a) {
  __shared__ ParseShared sm;
  init_crc_tables(sm.crc_tab);
  if (threadIdx.x == 0) {
    sm.info = DeviceStreamInfo{};
    sm.err = static_cast<int32_t>(parse_fixed(a, sm.info));
  }
  __syncthreads();
  if (sm.err == 0) {
    const uint64_t hb = sm.info.header_bytes;
    const uint32_t crc = cta_crc32c(a.src, hb - 4, sm.crc_tab, sm.crc_scratch);
    if (threadIdx.x == 0) {
      if (crc != ld_u32(a.src + hb - 4)) {
        sm.err = static_cast<int32_t>(Error::HeaderCrc);
      } else {
        sm.err = static_cast<int32_t>(parse_checked(a, sm.info));
      }
    }
    __syncthreads();
  }
  if (sm.err == 0) {
    // Chunk sizes -> offsets (block-wide scan, kThreads entries at a time).
    const DeviceStreamInfo info = sm.info;
    const uint64_t elem = dtype_bytes(info.dtype);
    const uint8_t* table = a.src + fz::format::kFixedHeaderBytes + 8 * static_cast<uint64_t>(info.ndim);
    uint64_t run = info.header_bytes;
    bool bad = false;
    for (uint64_t base = 0; base < info.num_chunks; base += kThreads) {
      const uint64_t c = base + threadIdx.x;
      uint64_t bytes = 0;
      if (c < info.num_chunks) {
        bytes = ld_u32(table + 8 * c);
        // Size 0 is a repeat (versions >= 2): it follows a constant chunk (1 + elem bytes) or
        // another repeat, so the constant chunk's bytes end where it starts.
        const uint64_t prev = c > 0 ? ld_u32(table + 8 * (c - 1)) : 0;
        const bool repeat_ok = info.version >= 2 && c > 0 && (prev == 0 || prev == 1 + elem);
        if ((bytes == 0 && !repeat_ok) || bytes > 1 + chunk_values(info.count, info.chunk_len, c) * elem) {
          bad = true;
        }
      }
      uint64_t tile = 0;
      const uint64_t excl = cta_exclusive_scan(bytes, sm.scratch, &tile);
      if (c < info.num_chunks) a.offsets[c] = run + excl;
      run += tile;
    }
    bad = __syncthreads_or(bad) != 0;
    if (threadIdx.x == 0) {
      a.offsets[info.num_chunks] = run;
      if (bad) {
        sm.err = static_cast<int32_t>(Error::BadChunkSize);
      } else if (run != info.total_bytes) {
        sm.err = static_cast<int32_t>(Error::ChunkSizesSum);
      }
    }
  }
  if (threadIdx.x == 0) {
    sm.info.error = sm.err;
    a.ctl->info = sm.info;
    if (sm.err != 0) fail(a.ctl, static_cast<Error>(sm.err));
  }
}

// ------------------------------------------------------------------------------------------
// Decoder, step 2: the chunks. Persistent blocks, chunk c by block c % gridDim.x.

enum class Mode : int { Store, Sum, Min, Max };

template <class K>
struct DecodeArgs {
  const uint8_t* src;
  const typename lane::Kind<K>::S* a;  // reduce: first operand
  typename lane::Kind<K>::S* out;
  Control* ctl;
  const unsigned long long* offsets;
  uint32_t stage_bytes;  // chunks up to this size are staged in dynamic shared memory first
};

struct DecodeShared {
  crc::Tables crc_tab;
  TransposeTable transpose;
  CrcScratch crc_scratch;
  uint8_t lens[kMaxBlocksPerChunk];
  uint32_t outlier_bits[kMaxBlocksPerChunk];  // bit i of word b: value 32b+i is an outlier
  uint32_t total[2][kWarps];                  // per tile: each block's sum of deltas
  uint64_t scratch[kWarps];
  // Chunk fields that steer control flow, read once and broadcast, so the block cannot split at
  // a barrier even if the stream's global bytes changed under it (e.g. an overlapping output).
  uint32_t want_crc;
  uint32_t mode;
  uint32_t n_out;
};

// out[at] = v, or op(ab, v) with ab = a[at] loaded by the caller (early, to hide its latency).
// The reduce modes exist for float and double only (the host refuses halves).
template <class K, Mode kMode>
__device__ inline void emit(const DecodeArgs<K>& a, uint64_t at, typename lane::Kind<K>::S ab,
                            typename lane::Kind<K>::S v) {
  if constexpr (kMode == Mode::Store) {
    a.out[at] = v;
  } else {
    using BT = Bits<K>;
    const K x = BT::value(ab), y = BT::value(v);
    if constexpr (kMode == Mode::Sum) {
      a.out[at] = BT::of(BT::add(x, y));
    } else if constexpr (kMode == Mode::Min) {
      a.out[at] = lane::min_takes_b(x, y) ? v : ab;
    } else {
      a.out[at] = lane::max_takes_b(x, y) ? v : ab;
    }
  }
}

// An encoded chunk's values: bit planes -> magnitudes (warp transpose), signed deltas, prefix
// sums carried across blocks (uint32 wrap, like the CPU), x' = narrow(C(code) * bin), outliers
// patched in. Tiles of kWarps * kR <= 32 blocks, kR consecutive ones per warp, so one warp scan
// over a tile's blocks gives every block's payload offset and outliers before it.
// kDirect: a direct chunk (mode 4), whose signed magnitudes are the codes themselves: no prefix
// sums, so no carry between warps and none of the tile's barriers (the choice is uniform over
// the block, a template argument).
template <class K, Mode kMode, bool kStaged, bool kDirect, int kR = kDecodeBlocksPerWarp>
__device__ inline void decode_tiles(const DecodeArgs<K>& a, DecodeShared& sm,
                                    const uint8_t* planes, const uint8_t* vals,
                                    uint32_t carry, typename lane::Kind<K>::C bin,
                                    uint64_t first, uint32_t m, uint32_t nb) {
  using B = typename lane::Kind<K>::S;
  constexpr uint32_t elem = sizeof(B);
  constexpr uint32_t kTileBlocks = kWarps * kR;
  const unsigned lane = lane_id();
  const unsigned warp = warp_id();
  uint32_t out_run = 0, pay_run = 0;
  const uint32_t tiles = (nb + kTileBlocks - 1) / kTileBlocks;
  for (uint32_t t = 0; t < tiles; ++t) {
    const uint32_t b0 = t * kTileBlocks + warp * kR;
    // Lane j: block t * kTileBlocks + j's payload bytes and outliers, scanned over the tile.
    const uint32_t bj = t * kTileBlocks + lane;
    const bool in = lane < kTileBlocks && bj < nb;
    const uint32_t bytes_j = in ? lane::block_bytes(sm.lens[bj]) : 0u;
    const uint32_t outs_j = in ? static_cast<uint32_t>(__popc(sm.outlier_bits[bj])) : 0u;
    const uint32_t bytes_incl = warp_scan<uint32_t>(bytes_j);
    const uint32_t outs_incl = warp_scan<uint32_t>(outs_j);
    B ab[kR];
    uint32_t incl[kR], out_before[kR];
    uint32_t run = 0;  // this warp's deltas before block r
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t b = b0 + r;
      const uint32_t i = b * 32 + lane;
      ab[r] = 0;  // reduce operand, loaded first so its latency overlaps the decoding
      if (kMode != Mode::Store && i < m) ab[r] = a.a[first + i];
      const uint32_t pay_before = pay_run + __shfl_sync(kFull, bytes_incl - bytes_j, warp * kR + r);
      out_before[r] = out_run + __shfl_sync(kFull, outs_incl - outs_j, warp * kR + r);
      uint32_t mag = 0, sign = 0;
      if (b < nb) {  // warp-uniform
        const uint32_t len = sm.lens[b];
        if (len != 0) {
          const uint8_t* w = planes + pay_before;
          sign = kStaged ? ld_u32_staged(w) : ld_u32(w);
          const uint32_t row = lane < len ? (kStaged ? ld_u32_staged(w + 4 + 4 * lane) : ld_u32(w + 4 + 4 * lane)) : 0u;
          mag = warp_transpose(row, sm.transpose);
        }
      }
      const uint32_t delta = ((sign >> lane) & 1u) ? 0u - mag : mag;
      if constexpr (kDirect) {
        incl[r] = delta;  // the code itself
      } else {
        incl[r] = run + warp_scan<uint32_t>(delta);
        run = __shfl_sync(kFull, incl[r], 31);
      }
    }
    uint32_t before = 0, tile_total = 0;
    if constexpr (!kDirect) {
      const int buf = t & 1;
      if (lane == 0) sm.total[buf][warp] = run;
      __syncthreads();
      const uint32_t wt = lane < kWarps ? sm.total[buf][lane] : 0u;
      const uint32_t wt_incl = warp_scan<uint32_t>(wt);
      before = carry + __shfl_sync(kFull, wt_incl - wt, warp);
      tile_total = __shfl_sync(kFull, wt_incl, kWarps - 1);
      __syncthreads();  // the tile's totals are read (as in encode_pass: racecheck-clean with it)
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t b = b0 + r;
      const uint32_t i = b * 32 + lane;
      if (i >= m) continue;  // also every lane of a block past nb
      const uint32_t obits = sm.outlier_bits[b];
      B v;
      if ((obits >> lane) & 1u) {
        const uint32_t k = out_before[r] + static_cast<uint32_t>(__popc(obits & lanes_below(lane)));
        v = ld_bits(vals + static_cast<size_t>(k) * elem, B{});
      } else {
        v = lane::reconstruct_bits<K>(static_cast<int32_t>(before + incl[r]), bin);
      }
      emit<K, kMode>(a, first + i, ab[r], v);
    }
    carry += tile_total;
    pay_run += __shfl_sync(kFull, bytes_incl, 31);
    out_run += __shfl_sync(kFull, outs_incl, 31);
  }
}

template <class K, Mode kMode>
__global__ void __launch_bounds__(kThreads, kDecodeMinBlocks) decode_kernel(DecodeArgs<K> a) {
  using B = typename lane::Kind<K>::S;
  using C = typename lane::Kind<K>::C;
  namespace fmt = fz::format;
  __shared__ DecodeShared sm;
  extern __shared__ uint4 stage[];  // a.stage_bytes + kStageSlack bytes
  init_transpose_table(sm.transpose);
  init_crc_tables(sm.crc_tab);  // synchronises the block
  const DeviceStreamInfo info = a.ctl->info;  // written by parse_kernel, earlier on the stream
  // Only parse_kernel's verdict: ctl->err may change while this kernel runs (another block's
  // chunk failing), and a block must not split on it at its barriers.
  if (info.error != 0) return;
  const C bin = static_cast<C>(info.bin);
  constexpr uint32_t elem = sizeof(B);
  const bool v1 = info.version == fmt::kVersion1;
  const uint8_t* table = a.src + fmt::kFixedHeaderBytes + 8 * static_cast<uint64_t>(info.ndim);
  Control* const ctl = a.ctl;

  for (uint64_t c = blockIdx.x; c < info.num_chunks; c += gridDim.x) {
    uint64_t off = a.offsets[c];
    uint64_t size = a.offsets[c + 1] - off;
    // A repeat (table size 0): the constant chunk whose bytes end here. parse_kernel checked
    // that it follows a chunk of 1 + elem bytes or another repeat, so those bytes exist.
    const bool repeat = size == 0;
    if (repeat) {
      size = 1 + elem;
      off -= size;
    }
    // The chunk's bytes, staged in shared memory when they fit (one burst of wide loads).
    const uint8_t* p = a.src + off;
    const bool staged = size <= a.stage_bytes;
    if (staged) p = cta_stage_bytes(reinterpret_cast<uint8_t*>(stage), p, size);
    const uint32_t m = static_cast<uint32_t>(chunk_values(info.count, info.chunk_len, c));
    const uint32_t nb = (m + 31) / 32;
    const uint64_t first = c * info.chunk_len;

    // fzlight.cpp's decode_one + decode_chunk + check_encoded checks, in its order. Every branch
    // below is uniform over the block (the values come from shared memory or the same global
    // bytes, read once by thread 0).
    uint32_t crc = 0;
    if (size > kWarpCrcMax) {
      crc = cta_crc32c(p, size, sm.crc_tab, sm.crc_scratch);
    } else if (warp_id() == 0) {
      crc = warp_crc32c(p, size, sm.crc_tab);
      if (lane_id() == 0) sm.crc_scratch.result = crc;
    }
    if (threadIdx.x == 0) {
      sm.want_crc = ld_u32(table + 8 * c + 4);
      sm.mode = p[0];  // size >= 1 (parse)
      // n_outliers ends the fixed part (mode 0: offset 5; mode 4: offset 1); read only when present.
      const uint64_t fixed = p[0] == fmt::kChunkDirect ? kDirectFixed : kEncodedFixed;
      sm.n_out = size >= fixed ? ld_u32(p + fixed - 4) : 0u;
    }
    __syncthreads();
    if (size <= kWarpCrcMax) crc = sm.crc_scratch.result;
    const uint32_t mode = sm.mode;
    if (repeat && mode != fmt::kChunkConstant) {
      if (threadIdx.x == 0) fail(ctl, Error::RepeatNotConstant);
      continue;
    }
    if (crc != sm.want_crc) {
      if (threadIdx.x == 0) fail(ctl, Error::ChunkCrc);
      continue;
    }
    if (mode == fmt::kChunkRaw) {
      if (size != 1 + static_cast<uint64_t>(m) * elem) {
        if (threadIdx.x == 0) fail(ctl, Error::BadRawSize);
        continue;
      }
      for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
        const B ab = kMode == Mode::Store ? B{0} : a.a[first + i];
        emit<K, kMode>(a, first + i, ab, ld_bits(p + 1 + static_cast<size_t>(i) * elem, B{}));
      }
      continue;
    }
    if (mode == fmt::kChunkConstant && !v1) {
      if (size != 1 + elem) {
        if (threadIdx.x == 0) fail(ctl, Error::BadConstantSize);
        continue;
      }
      const B v = ld_bits(p + 1, B{});
      for (uint32_t i = threadIdx.x; i < m; i += kThreads) {
        const B ab = kMode == Mode::Store ? B{0} : a.a[first + i];
        emit<K, kMode>(a, first + i, ab, v);
      }
      continue;
    }
    // Mode 3 (zstd frames) exists only in codec-1 streams, which parse_kernel refused; mode 4
    // (direct) only in version-3 streams.
    const bool direct = mode == fmt::kChunkDirect && info.version >= 3;
    if (mode != fmt::kChunkEncoded && !direct) {
      if (threadIdx.x == 0) fail(ctl, Error::BadChunkMode);
      continue;
    }
    if (info.bin == 0.0) {
      if (threadIdx.x == 0) fail(ctl, Error::LosslessEncoded);
      continue;
    }
    // Code lengths into sm.lens (0 for a zero block). Version 1: one byte per block. Versions 2
    // and 3: a bitmap, then one byte per set bit; thread j owns bitmap byte j (blocks 8j..8j+7,
    // and bm <= kThreads), whose exclusive popcount scan is the rank of its first length byte.
    // A direct chunk has the same layout after its shorter fixed part (no q_start).
    const uint32_t bm = lane::bitmap_bytes(nb);
    const uint64_t fixed = direct ? kDirectFixed : kEncodedFixed;
    uint64_t header = fixed + (v1 ? nb : bm);
    if (size < header) {
      if (threadIdx.x == 0) fail(ctl, Error::ChunkTooShort);
      continue;
    }
    bool bad = false;
    if (v1) {
      for (uint32_t b = threadIdx.x; b < nb; b += kThreads) {
        const uint8_t len = p[fixed + b];
        sm.lens[b] = len;
        sm.outlier_bits[b] = 0;
        bad = bad || len > 31;
      }
    } else {
      const uint32_t j = threadIdx.x;
      const uint32_t byte = j < bm ? p[fixed + j] : 0u;
      const bool padding = j + 1 == bm && nb % 8 != 0 && (byte >> (nb % 8)) != 0;
      uint64_t nonzero = 0;
      const uint64_t pop = static_cast<uint64_t>(__popc(byte));
      uint32_t rank = static_cast<uint32_t>(cta_exclusive_scan(pop, sm.scratch, &nonzero));
      if (__syncthreads_or(padding) != 0) {
        if (threadIdx.x == 0) fail(ctl, Error::BadBitmapPadding);
        continue;
      }
      if (size < header + nonzero) {
        if (threadIdx.x == 0) fail(ctl, Error::ChunkTooShort);
        continue;
      }
      for (uint32_t k = 0; k < 8; ++k) {
        const uint32_t b = 8 * j + k;
        if (b >= nb) break;
        const bool set = (byte >> k) & 1u;
        const uint8_t len = set ? p[header + rank++] : 0;
        sm.lens[b] = len;
        sm.outlier_bits[b] = 0;
        bad = bad || (set && (len == 0 || len > 31));
      }
      header += nonzero;
    }
    if (__syncthreads_or(bad) != 0) {
      if (threadIdx.x == 0) fail(ctl, Error::BadCodeLength);
      continue;
    }
    const uint32_t n_out = sm.n_out;
    if (n_out > m) {
      if (threadIdx.x == 0) fail(ctl, Error::TooManyOutliers);
      continue;
    }
    uint64_t mine = 0;
    for (uint32_t b = threadIdx.x; b < nb; b += kThreads) mine += lane::block_bytes(sm.lens[b]);
    const uint64_t payload = cta_sum(mine, sm.scratch);
    if (header + payload + static_cast<uint64_t>(n_out) * (2 + elem) != size) {
      if (threadIdx.x == 0) fail(ctl, Error::ChunkSizeMismatch);
      continue;
    }
    const uint8_t* const idx = p + header + payload;
    const uint8_t* const vals = idx + 2 * static_cast<size_t>(n_out);
    for (uint32_t k = threadIdx.x; k < n_out; k += kThreads) {
      const uint32_t i = ld_u16(idx + 2 * static_cast<size_t>(k));
      if (i >= m || (k > 0 && i <= ld_u16(idx + 2 * static_cast<size_t>(k - 1)))) {
        bad = true;
      } else {
        atomicOr(&sm.outlier_bits[i >> 5], 1u << (i & 31));
      }
    }
    if (__syncthreads_or(bad) != 0) {
      if (threadIdx.x == 0) fail(ctl, Error::BadOutlierIndex);
      continue;
    }

    if (direct) {
      if (staged) {
        decode_tiles<K, kMode, true, true>(a, sm, p + header, vals, 0, bin, first, m, nb);
      } else {
        decode_tiles<K, kMode, false, true>(a, sm, p + header, vals, 0, bin, first, m, nb);
      }
    } else if (staged) {
      decode_tiles<K, kMode, true, false>(a, sm, p + header, vals, ld_u32(p + 1) /* q_start */, bin, first, m, nb);
    } else {
      decode_tiles<K, kMode, false, false>(a, sm, p + header, vals, ld_u32(p + 1) /* q_start */, bin, first, m, nb);
    }
  }
}

// ------------------------------------------------------------------------------------------
// finite_range: per-block partial min/max over finite values, then one block folds them.

// Half kinds are widened to float32 (exact), as fz::finite_range does.
template <class K>
__global__ void __launch_bounds__(kThreads) range_partial_kernel(const typename lane::Kind<K>::S* x,
                                                                uint64_t n, double* partial) {
  using C = typename lane::Kind<K>::C;
  __shared__ C lo_w[kWarps], hi_w[kWarps];
  C lo = Bits<C>::inf(), hi = -Bits<C>::inf();
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(kThreads) + threadIdx.x; i < n; i += stride) {
    const C v = lane::Kind<K>::widen(x[i]);
    if (Bits<C>::finite(v)) {
      lo = min(lo, v);
      hi = max(hi, v);
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(kFull, lo, o));
    hi = max(hi, __shfl_xor_sync(kFull, hi, o));
  }
  if (lane_id() == 0) {
    lo_w[warp_id()] = lo;
    hi_w[warp_id()] = hi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      lo = min(lo, lo_w[w]);
      hi = max(hi, hi_w[w]);
    }
    lo = min(lo, lo_w[0]);
    hi = max(hi, hi_w[0]);
    partial[2 * blockIdx.x] = static_cast<double>(lo);
    partial[2 * blockIdx.x + 1] = static_cast<double>(hi);
  }
}

__global__ void range_final_kernel(const double* partial, int blocks, Control* ctl) {
  if (threadIdx.x != 0) return;
  double lo = partial[0], hi = partial[1];
  for (int b = 1; b < blocks; ++b) {
    lo = min(lo, partial[2 * b]);
    hi = max(hi, partial[2 * b + 1]);
  }
  RangeResult r{};
  if (lo <= hi) {
    r.min = lo;
    r.max = hi;
    r.any_finite = 1;
  }
  ctl->range = r;
}

// ------------------------------------------------------------------------------------------
// Elementwise reduce and the AVG division.

template <class T, Mode kMode>
__global__ void __launch_bounds__(kThreads) reduce_kernel(typename Bits<T>::type* out,
                                                         const typename Bits<T>::type* a,
                                                         const typename Bits<T>::type* b, uint64_t n) {
  DecodeArgs<T> args{nullptr, a, out, nullptr, nullptr, 0};
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(kThreads) + threadIdx.x; i < n; i += stride) {
    emit<T, kMode>(args, i, a[i], b[i]);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) divide_kernel(T* x, uint64_t n, T d) {
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * kThreads;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(kThreads) + threadIdx.x; i < n; i += stride) {
    x[i] = Bits<T>::div(x[i], d);
  }
}

}  // namespace zccl::gpu::kern
