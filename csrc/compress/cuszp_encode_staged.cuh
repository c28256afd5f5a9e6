// The GPU encoder for chunks whose integer codes fit in shared memory (the default 5120-value
// chunk and anything up to the host's kCodesBudget; larger chunks take encode_kernel in
// cuszp_kernels.cuh). Same stream bytes as encode_kernel and fzlight.cpp (format version 3).
//
// Why a second encoder: encode_kernel sizes a chunk in one pass and writes it in a second, so it
// quantises every value twice, and both passes run in tiles whose warps exchange a summary
// through shared memory behind two barriers per tile (Nsight Compute on an H200: issue-bound,
// SM 69 %, DRAM 7 %). Here each value is quantised once and the passes over the chunk need no
// barrier inside them; the chunk-wide dependencies (the code carried into each block, payload
// and outlier offsets) are three short scans over the chunk's blocks between the passes:
//
//   A  quantise (warps independent): codes[i] = q_i, or kNoCode for a value stored exactly and
//      for padding; per block the last quantised code (kNoCode when none).
//   S1 carry scan: per block, the effective code entering it (the last quantised code of the
//      blocks before it, 0 before the chunk's first value: fzlight's "outliers take the
//      prediction").
//   C  sizes (warps independent): per block the code length of its Lorenzo deltas of effective
//      codes (an encoded chunk) and of its codes themselves (a direct chunk: kNoCode codes 0),
//      and its outlier mask. The codes stay as they are.
//   S2 bitmap scan: both kinds' bitmaps, code-length byte ranks and payload sizes and the outlier
//      offsets in one scan; the chunk kind (ChunkPlan::settle), the chosen kind's per-block
//      payload offsets, the chunk's size; then the look-back places the chunk.
//   D  write (warps independent): the chosen kind's values again from the codes (one helper,
//      staged_lorenzo, gives C's and D's deltas), sign and magnitude planes, outlier indices and
//      values.
#pragma once

#include "cuszp_kernels.cuh"

namespace zccl::gpu::kern {

inline constexpr int32_t kNoCode = INT32_MIN;  // codes stay within +-(2^30 - 1)

// Per-block arrays after the codes in dynamic shared memory (nb_cap entries each).
struct StagedBlocks {
  int32_t* codes;     // chunk_len values: codes (kNoCode: stored exactly, or padding)
  int32_t* carry;     // A: last quantised code; S1: effective code entering the block
  uint32_t* omask;    // C: bit l set when value 32b + l is stored exactly
  uint32_t* pay_off;  // S2: payload bytes before the block (the chosen chunk kind's)
  uint32_t* out_off;  // S2: outliers before the block
  uint8_t* lens;      // C: code length as an encoded chunk (Lorenzo deltas)
  uint8_t* dlens;     // C: code length as a direct chunk (the codes)
};

// Dynamic shared memory of encode_staged_kernel for chunks of chunk_len values.
__host__ __device__ constexpr size_t staged_smem_bytes(uint32_t chunk_len) {
  return 4 * static_cast<size_t>(chunk_len) + 18 * static_cast<size_t>((chunk_len + 31) / 32) + 16;
}

__device__ inline StagedBlocks staged_blocks(uint4* dyn, uint32_t chunk_len) {
  const uint32_t nb_cap = (chunk_len + 31) / 32;
  StagedBlocks s;
  s.codes = reinterpret_cast<int32_t*>(dyn);
  s.carry = s.codes + chunk_len;
  s.omask = reinterpret_cast<uint32_t*>(s.carry + nb_cap);
  s.pay_off = s.omask + nb_cap;
  s.out_off = s.pay_off + nb_cap;
  s.lens = reinterpret_cast<uint8_t*>(s.out_off + nb_cap);
  s.dlens = s.lens + nb_cap;
  return s;
}

// Mask of the valid values of block b of a chunk of m values.
__device__ inline uint32_t valid_mask(uint32_t b, uint32_t m) {
  const uint32_t left = m - 32 * b;  // >= 1 for b < nb
  return left >= 32 ? kFull : (1u << left) - 1u;
}

// Pass A. Warp w takes groups of kR consecutive blocks (w, w + kWarps, ...); loads first.
template <class K, int kR>
__device__ inline void staged_quantise(const EncodeArgs<K>& a, const StagedBlocks& s,
                                       const typename lane::Kind<K>::S* x, uint32_t m, uint32_t nb) {
  using B = typename lane::Kind<K>::S;
  const unsigned lane = lane_id();
  for (uint32_t g = warp_id(); g * kR < nb; g += kWarps) {
    B bits[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t i = (g * kR + r) * 32 + lane;
      bits[r] = i < m ? x[i] : B{0};
    }
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t b = g * kR + r;
      if (b >= nb) break;  // warp-uniform
      const uint32_t i = b * 32 + lane;
      int32_t q = 0;
      const bool good = i < m && lane::quantize_bits<K>(bits[r], a.inv_bin, a.bin, a.eb, q);
      s.codes[i] = good ? q : kNoCode;
      const uint32_t gmask = __ballot_sync(kFull, good);
      const int32_t last = __shfl_sync(kFull, q, gmask != 0 ? 31 - __clz(static_cast<int>(gmask)) : 0);
      if (lane == 0) s.carry[b] = gmask != 0 ? last : kNoCode;
    }
  }
}

// Scan S1, in place over s.carry[0..nb): the last non-kNoCode value strictly before each block,
// 0 when none. Thread t takes a contiguous run of blocks; a "latest wins" scan over the threads.
__device__ inline void staged_carry_scan(const StagedBlocks& s, uint32_t nb, int32_t* warp_last) {
  const uint32_t per = (nb + kThreads - 1) / kThreads;
  const uint32_t lo = min(nb, threadIdx.x * per), hi = min(nb, lo + per);
  int32_t mine = kNoCode;
  for (uint32_t b = lo; b < hi; ++b) {
    if (s.carry[b] != kNoCode) mine = s.carry[b];
  }
  const unsigned lane = lane_id();
  int32_t incl = mine;  // latest non-kNoCode value over threads <= this one, in the warp
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t up = __shfl_up_sync(kFull, incl, o);
    if (lane >= static_cast<unsigned>(o) && incl == kNoCode) incl = up;
  }
  int32_t before = __shfl_up_sync(kFull, incl, 1);
  if (lane == 0) before = kNoCode;
  if (lane == 31) warp_last[warp_id()] = incl;
  __syncthreads();
  if (before == kNoCode) {
    for (int w = static_cast<int>(warp_id()) - 1; w >= 0; --w) {
      if (warp_last[w] != kNoCode) {
        before = warp_last[w];
        break;
      }
    }
  }
  int32_t run = before == kNoCode ? 0 : before;
  for (uint32_t b = lo; b < hi; ++b) {
    const int32_t last = s.carry[b];
    s.carry[b] = run;
    if (last != kNoCode) run = last;
  }
}

// Calls f(b) for this warp's blocks of passes C and D: groups of kR consecutive blocks, warp w
// taking groups w, w + kWarps, ... (the same blocks pass A gave it).
template <int kR, class F>
__device__ inline void for_warp_blocks(uint32_t nb, F&& f) {
  for (uint32_t g = warp_id(); g * kR < nb; g += kWarps) {
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const uint32_t b = g * kR + r;
      if (b >= nb) break;  // warp-uniform
      f(b);
    }
  }
}

// This lane's Lorenzo delta in block b (all 32 lanes call it; `code` is codes[32b + lane],
// `enter` the effective code entering the block): a value stored exactly (or padding) takes the
// last quantised code before it in the block, else `enter`; the chunk's first value is predicted
// by itself. `e` gets the lane's effective code.
__device__ inline int32_t staged_lorenzo(int32_t code, int32_t enter, uint32_t b, int32_t& e) {
  const unsigned lane = lane_id();
  const uint32_t gmask = __ballot_sync(kFull, code != kNoCode);
  e = code;
  if (gmask != kFull) {  // warp-uniform
    const uint32_t upto = gmask & lanes_upto(lane);
    const int32_t src = __shfl_sync(kFull, code, upto != 0 ? 31 - __clz(static_cast<int>(upto)) : 0);
    e = upto != 0 ? src : enter;
  }
  int32_t pred = __shfl_up_sync(kFull, e, 1);
  if (lane == 0) pred = b == 0 ? e : enter;
  return e - pred;
}

__device__ inline uint32_t magnitude(int32_t d) {
  return d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
}

__device__ inline uint8_t bit_length(uint32_t any) {
  return static_cast<uint8_t>(any == 0 ? 0u : 32u - static_cast<uint32_t>(__clz(static_cast<int>(any))));
}

// Pass C: each block's code lengths both ways, outlier mask, and q_start (the first value's
// effective code).
template <int kR>
__device__ inline void staged_sizes(const StagedBlocks& s, uint32_t m, uint32_t nb, int32_t* q_start) {
  const unsigned lane = lane_id();
  for_warp_blocks<kR>(nb, [&](uint32_t b) {
    const int32_t code = s.codes[b * 32 + lane];
    int32_t e;
    const int32_t d = staged_lorenzo(code, s.carry[b], b, e);
    const uint32_t any = warp_or(magnitude(d));
    const uint32_t dany = warp_or(magnitude(code == kNoCode ? 0 : code));
    const uint32_t gmask = __ballot_sync(kFull, code != kNoCode);
    if (lane == 0) {
      s.lens[b] = bit_length(any);
      s.dlens[b] = bit_length(dany);
      s.omask[b] = ~gmask & valid_mask(b, m);
      if (b == 0) *q_start = e;
    }
  });
}

// Pass D: the planes of the chunk kind `direct` names (uniform over the block) at
// out + planes_at + pay_off[b], outliers after all planes.
template <class K, int kR>
__device__ inline void staged_write(const StagedBlocks& s, const typename lane::Kind<K>::S* x, uint32_t nb,
                                    bool direct, uint8_t* out, size_t planes_at, size_t idx_at, size_t val_at,
                                    const TransposeLane& tl) {
  using B = typename lane::Kind<K>::S;
  const unsigned lane = lane_id();
  const uint8_t* const lens = direct ? s.dlens : s.lens;
  for_warp_blocks<kR>(nb, [&](uint32_t b) {
    const uint32_t len = lens[b];
    const uint32_t om = s.omask[b];
    const uint32_t i = b * 32 + lane;
    if (len != 0) {  // warp-uniform
      const int32_t code = s.codes[i];
      int32_t e;
      const int32_t d = direct ? (code == kNoCode ? 0 : code) : staged_lorenzo(code, s.carry[b], b, e);
      const uint32_t sign = __ballot_sync(kFull, d < 0);
      const uint32_t plane = warp_transpose(magnitude(d), tl);
      // Word k of the block's payload is the sign plane (k = 0) or plane k - 1: one store each
      // by lanes 0..len, so the unaligned-store sequence is issued once.
      const uint32_t above = __shfl_up_sync(kFull, plane, 1);
      if (lane <= len) st_u32(out + planes_at + s.pay_off[b] + 4 * lane, lane == 0 ? sign : above);
    }
    if ((om >> lane) & 1u) {
      const uint32_t k = s.out_off[b] + static_cast<uint32_t>(__popc(om & lanes_below(lane)));
      st_u16(out + idx_at + 2 * static_cast<size_t>(k), static_cast<uint16_t>(i));
      st_bits(out + val_at + static_cast<size_t>(k) * sizeof(B), x[i]);
    }
  });
}

// Persistent blocks taking chunks by ticket, as encode_kernel (same choice of chunk kind, same
// look-back, same chunk CRC). Needs staged_smem_bytes(chunk_len) bytes of dynamic shared memory.
template <class K>
__global__ void __launch_bounds__(kThreads, kStagedMinBlocks) encode_staged_kernel(EncodeArgs<K> a) {
  using B = typename lane::Kind<K>::S;
  constexpr uint32_t elem = sizeof(B);
  constexpr int kR = kEncodeBlocksPerWarp;
  __shared__ crc::Tables crc_tab;
  __shared__ CrcScratch crc_scratch;
  __shared__ uint64_t scratch[2 * kWarps];
  __shared__ int32_t warp_last[kWarps];
  __shared__ unsigned long long chunk_sh, offset_sh;
  __shared__ int32_t q_start_sh;
  __shared__ alignas(16) uint8_t const_bytes[16];
  extern __shared__ uint4 dyn_smem[];
  __shared__ TransposeTable transpose_tab;
  const StagedBlocks s = staged_blocks(dyn_smem, a.chunk_len);
  init_transpose_table(transpose_tab);
  init_crc_tables(crc_tab);  // synchronises the block
  const TransposeLane tl = load_transpose_lane(transpose_tab);
  ChunkRef ref;
  while (next_chunk(a.ctl, chunk_sh, a.num_chunks, a.chunk_len, a.count, ref)) {
    const uint64_t c = ref.c;
    const uint32_t m = ref.m, nb = ref.nb, bm = ref.bm;
    const B* const x = a.src + ref.first;

    B v0;
    ChunkPlan plan = plan_chunk(x, x, c, a.chunk_len, m, bm, a.lossy, v0);
    uint32_t payload = 0, n_out = 0, nonzero = 0;
    uint32_t my_byte = 0, my_rank = 0;  // bitmap byte threadIdx.x, rank of its first set bit
    if (plan.encode) {
      staged_quantise<K, kR>(a, s, x, m, nb);
      __syncthreads();
      staged_carry_scan(s, nb, warp_last);
      __syncthreads();
      staged_sizes<kR>(s, m, nb, &q_start_sh);
      __syncthreads();
      // S2: thread j owns bitmap byte j (blocks 8j..8j+7; bm <= kThreads). One exclusive scan of
      // the encoded chunk's (payload bytes | outliers << 24 | nonzero blocks << 48) and the
      // direct chunk's (payload bytes | nonzero blocks << 32) over the threads.
      uint32_t enc_byte = 0, dir_byte = 0;  // bitmap byte j of either chunk kind
      uint64_t enc = 0, dir = 0;
      if (threadIdx.x < bm) {
        for (uint32_t k = 0; k < 8; ++k) {
          const uint32_t b = 8 * threadIdx.x + k;
          if (b >= nb) break;
          if (s.lens[b] != 0) enc_byte |= 1u << k;
          if (s.dlens[b] != 0) dir_byte |= 1u << k;
          enc += lane::block_bytes(s.lens[b]) | static_cast<uint64_t>(__popc(s.omask[b])) << 24;
          dir += lane::block_bytes(s.dlens[b]);
        }
        enc |= static_cast<uint64_t>(__popc(enc_byte)) << 48;
        dir |= static_cast<uint64_t>(__popc(dir_byte)) << 32;
      }
      uint64_t enc_total = 0, dir_total = 0;
      cta_exclusive_scan2(enc, dir, scratch, enc_total, dir_total);  // enc, dir: exclusive prefixes
      n_out = static_cast<uint32_t>((enc_total >> 24) & 0xFFFFFFu);
      const uint32_t enc_payload = static_cast<uint32_t>(enc_total & 0xFFFFFFu);
      const uint32_t enc_nonzero = static_cast<uint32_t>(enc_total >> 48);
      const uint32_t dir_payload = static_cast<uint32_t>(dir_total);
      const uint32_t dir_nonzero = static_cast<uint32_t>(dir_total >> 32);
      plan.settle(enc_nonzero + enc_payload, dir_nonzero + dir_payload,
                  bm + static_cast<uint64_t>(n_out) * (2 + elem));
      const bool direct = plan.direct;
      my_byte = direct ? dir_byte : enc_byte;
      my_rank = direct ? static_cast<uint32_t>(dir >> 32) : static_cast<uint32_t>(enc >> 48);
      nonzero = direct ? dir_nonzero : enc_nonzero;
      payload = direct ? dir_payload : enc_payload;
      if (threadIdx.x < bm) {
        const uint8_t* const lens = direct ? s.dlens : s.lens;
        uint32_t pay = direct ? static_cast<uint32_t>(dir) : static_cast<uint32_t>(enc & 0xFFFFFFu);
        uint32_t outs = static_cast<uint32_t>((enc >> 24) & 0xFFFFFFu);
        for (uint32_t k = 0; k < 8; ++k) {
          const uint32_t b = 8 * threadIdx.x + k;
          if (b >= nb) break;
          s.pay_off[b] = pay;
          s.out_off[b] = outs;
          pay += lane::block_bytes(lens[b]);
          outs += static_cast<uint32_t>(__popc(s.omask[b]));
        }
      }
    }

    if (warp_id() == 0) {
      const uint64_t off = lookback(a.status, c, plan.size);
      if (lane_id() == 0) offset_sh = off;
    }
    __syncthreads();  // offset_sh, and S2's offsets, visible to every warp
    uint8_t* const out = a.dst + a.data_base + offset_sh;

    if (plan.encode) {
      write_encoded_head(out, plan.direct, q_start_sh, n_out, bm, my_byte, my_rank, plan.direct ? s.dlens : s.lens);
      const size_t planes_at = (plan.direct ? kDirectFixed : kEncodedFixed) + bm + nonzero;
      const size_t idx_at = planes_at + payload;
      staged_write<K, kR>(s, x, nb, plan.direct, out, planes_at, idx_at, idx_at + 2 * static_cast<size_t>(n_out), tl);
    } else {
      write_plain_chunk(out, plan, v0, x, m, const_bytes);
    }
    __syncthreads();  // the chunk's bytes are visible to the whole block
    finish_chunk(out, plan.size, plan.constant, const_bytes, elem, a.dst + a.table_off + 8 * c, crc_tab,
                 crc_scratch);
  }
}

}  // namespace zccl::gpu::kern
