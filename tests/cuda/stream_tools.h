// Stream helpers shared by the CPU host-model test (host_model_test.cpp) and the GPU test program
// (test_cuszp.cu): resealing CRCs after a mutation, listing chunks, the mutation generator of the
// differential corruption tests, and a version-2 -> version-1 converter (so both decoders' v1
// paths are exercised without keeping a v1 encoder). Header-only, host code, no CUDA.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "crc32c.h"
#include "fzlight.h"
#include "fzlight_format.h"

namespace zccl::testing {

namespace tfz = zccl::fz;
namespace tfmt = zccl::fz::format;

// Bytes per value of a dtype code as a stream states it (4 for an unknown code).
inline size_t elem_of_code(uint8_t code) { return code == 2 ? 8 : (code == 3 || code == 4) ? 2 : 4; }

// Recomputes chunk CRCs (as far as the table's sizes fit; a size-0 entry, a repeat, gets the CRC
// of the 1 + elem bytes before it when they lie in the chunk data) and the header CRC, so a
// mutation reaches the structural checks instead of stopping at a checksum.
inline void reseal(std::vector<uint8_t>& s) {
  if (s.size() < 52) return;
  const size_t ndim = s[7];
  const uint64_t count = tfmt::load<uint64_t>(s.data() + 8);
  const uint32_t cl = tfmt::load<uint32_t>(s.data() + 32);
  if (cl == 0 || ndim > 64) return;
  const uint64_t chunks = tfmt::num_chunks(count, cl);
  if (chunks > s.size() / 8) return;
  const size_t hb = tfmt::header_bytes(ndim, chunks);
  if (hb > s.size()) return;
  const size_t elem = elem_of_code(s[5]);
  uint8_t* table = s.data() + 48 + 8 * ndim;
  size_t at = hb;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint32_t sz = tfmt::load<uint32_t>(table + 8 * c);
    if (at + sz > s.size()) break;
    if (sz == 0) {
      if (at >= hb + 1 + elem) tfmt::store<uint32_t>(table + 8 * c + 4, tfz::crc32c(s.data() + at - 1 - elem, 1 + elem));
    } else {
      tfmt::store<uint32_t>(table + 8 * c + 4, tfz::crc32c(s.data() + at, sz));
    }
    at += sz;
  }
  tfmt::store<uint32_t>(s.data() + hb - 4, tfz::crc32c(s.data(), hb - 4));
}

struct ChunkRef {
  size_t at = 0, size = 0;  // size 0: a repeat
  uint32_t m = 0;
};

// The chunks of a valid stream, in order.
inline std::vector<ChunkRef> chunks_of(const std::vector<uint8_t>& s) {
  std::vector<ChunkRef> out;
  const tfz::StreamInfo info = tfz::read_info(s.data(), s.size());
  const uint8_t* table = s.data() + 48 + 8 * info.shape.size();
  size_t at = info.header_bytes;
  for (uint64_t c = 0; c < info.num_chunks; ++c) {
    ChunkRef r;
    r.at = at;
    r.size = tfmt::load<uint32_t>(table + 8 * c);
    r.m = static_cast<uint32_t>(std::min<uint64_t>(info.chunk_len, info.count - c * info.chunk_len));
    out.push_back(r);
    at += r.size;
  }
  return out;
}

// Header length (fixed part, bitmap or length bytes, length bytes) of an encoded chunk of a
// valid stream: where its planes start.
inline size_t encoded_header(const uint8_t* p, uint32_t m, uint8_t version) {
  const uint32_t nb = (m + 31) / 32;
  if (version == tfmt::kVersion1) return 9 + nb;
  const uint32_t bm = tfmt::bitmap_bytes(nb);
  size_t nonzero = 0;
  for (uint32_t i = 0; i < bm; ++i) nonzero += static_cast<size_t>(__builtin_popcount(p[9 + i]));
  return 9 + bm + nonzero;
}

// A version-1 stream that decodes to the same values as the version-2 stream `v2` (float32 or
// float64, codec 0): encoded chunks get one code-length byte per block (raw when that makes them
// larger than raw), constant chunks and repeats become raw chunks.
inline std::vector<uint8_t> to_v1(const std::vector<uint8_t>& v2) {
  const tfz::StreamInfo info = tfz::read_info(v2.data(), v2.size());
  if (info.version != 2 || info.lossless_codec != tfz::LosslessCodec::None ||
      (info.dtype != tfz::DType::Float32 && info.dtype != tfz::DType::Float64)) {
    throw std::invalid_argument("to_v1: needs a version-2 float32/float64 stream of codec 0");
  }
  const size_t elem = tfz::dtype_size(info.dtype);
  const size_t table_at = 48 + 8 * info.shape.size();
  std::vector<uint8_t> out(v2.begin(), v2.begin() + static_cast<std::ptrdiff_t>(info.header_bytes));
  out[4] = tfmt::kVersion1;
  tfmt::store<uint32_t>(out.data() + 36, 0);
  const std::vector<ChunkRef> chunks = chunks_of(v2);
  std::vector<uint8_t> values(static_cast<size_t>(info.chunk_len) * elem);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkRef& ch = chunks[c];
    const uint32_t nb = (ch.m + 31) / 32;
    std::vector<uint8_t> bytes;
    const uint8_t mode = ch.size == 0 ? tfmt::kChunkConstant : v2[ch.at];
    if (mode == tfmt::kChunkRaw) {
      bytes.assign(v2.begin() + static_cast<std::ptrdiff_t>(ch.at),
                   v2.begin() + static_cast<std::ptrdiff_t>(ch.at + ch.size));
    } else if (mode == tfmt::kChunkEncoded) {
      const uint8_t* p = v2.data() + ch.at;
      const uint32_t bm = tfmt::bitmap_bytes(nb);
      bytes.assign(p, p + 9);
      size_t k = 9 + bm;
      for (uint32_t b = 0; b < nb; ++b) bytes.push_back(((p[9 + b / 8] >> (b % 8)) & 1u) ? p[k++] : 0);
      bytes.insert(bytes.end(), p + k, p + ch.size);
    }
    if (bytes.empty() || bytes.size() > 1 + size_t{ch.m} * elem) {  // constant, repeat, or too big
      tfz::decompress_chunk(v2.data(), v2.size(), c, values.data(), info.chunk_len);
      bytes.assign(1, tfmt::kChunkRaw);
      bytes.insert(bytes.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(ch.m * elem));
    }
    tfmt::store<uint32_t>(out.data() + table_at + 8 * c, static_cast<uint32_t>(bytes.size()));
    tfmt::store<uint32_t>(out.data() + table_at + 8 * c + 4, tfz::crc32c(bytes.data(), bytes.size()));
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  tfmt::store<uint64_t>(out.data() + 40, out.size());
  tfmt::store<uint32_t>(out.data() + info.header_bytes - 4, tfz::crc32c(out.data(), info.header_bytes - 4));
  return out;
}

// The real version-1 streams of tests/data/format_v1 (written by the version-1 encoder, with that
// encoder's own decoder output): name, stream bytes, expected decoded bytes. Empty when `dir` is
// missing.
struct V1Fixture {
  std::string name;
  std::vector<uint8_t> stream;
  std::vector<uint8_t> decoded;
};

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::vector<V1Fixture> v1_fixtures(const std::filesystem::path& dir) {
  std::vector<V1Fixture> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  const std::string suffix = ".v1.zcfz";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    V1Fixture f;
    f.name = file.substr(0, file.size() - suffix.size());
    f.stream = read_bytes(entry.path());
    f.decoded = read_bytes(dir / (f.name + ".v1dec.bin"));
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const V1Fixture& a, const V1Fixture& b) { return a.name < b.name; });
  return out;
}

// Calls fn(stream, len, description) for `iters` mutations of the valid stream `base` (see the
// cases), then for `random_iters` random streams of random lengths. Resealed mutations get valid
// CRCs, so they reach the structural checks. Works for either version and any dtype.
template <class F>
void for_each_mutation(const std::vector<uint8_t>& base, int iters, int random_iters, std::mt19937_64& rng,
                       const F& fn) {
  const std::vector<ChunkRef> all = chunks_of(base);
  std::vector<ChunkRef> stored;  // chunks with bytes of their own
  for (const ChunkRef& ch : all) {
    if (ch.size > 0) stored.push_back(ch);
  }
  const tfz::StreamInfo info = tfz::read_info(base.data(), base.size());
  const size_t table = 48 + 8 * info.shape.size();
  const size_t elem = tfz::dtype_size(info.dtype);
  const uint8_t version = info.version;
  if (stored.empty()) return;  // no chunk bytes to mutate (an empty stream)
  std::uniform_int_distribution<int> byte(0, 255);
  for (int it = 0; it < iters; ++it) {
    std::vector<uint8_t> s = base;
    size_t len = s.size();
    std::string what;
    const ChunkRef& ch = stored[rng() % stored.size()];
    bool do_reseal = true;
    switch (it % 14) {
      case 0: {  // any bit, no reseal
        const size_t i = rng() % s.size();
        s[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
        do_reseal = false;
        what = "bit flip at " + std::to_string(i);
        break;
      }
      case 1: {  // any byte of the fixed header or shape
        const size_t i = rng() % table;
        s[i] = static_cast<uint8_t>(byte(rng));
        what = "header byte " + std::to_string(i);
        break;
      }
      case 2: {  // a table size (0: a repeat, valid only after a constant chunk)
        const size_t c = rng() % info.num_chunks;
        const uint32_t old = tfmt::load<uint32_t>(s.data() + table + 8 * c);
        const uint32_t v[] = {0u, 1u, old - 1, old + 1, old + 8, 0xFFFFFFFFu, static_cast<uint32_t>(rng()),
                              static_cast<uint32_t>(1 + elem)};
        tfmt::store<uint32_t>(s.data() + table + 8 * c, v[rng() % 8]);
        what = "table size of chunk " + std::to_string(c);
        break;
      }
      case 3: {  // a chunk's mode byte
        s[ch.at] = static_cast<uint8_t>(rng() % 4);
        what = "chunk mode";
        break;
      }
      case 4: {  // code lengths: v1 one byte per block; v2 a bitmap bit (padding included) or a length byte
        if (s[ch.at] != 0) continue;
        const uint32_t nb = (ch.m + 31) / 32;
        if (version == tfmt::kVersion1) {
          s[ch.at + 9 + rng() % nb] = static_cast<uint8_t>(rng() % 2 ? byte(rng) : rng() % 33);
          what = "code length";
        } else {
          const uint32_t bm = tfmt::bitmap_bytes(nb);
          const size_t hdr = encoded_header(s.data() + ch.at, ch.m, version);
          if (rng() % 2 == 0 || hdr == 9 + bm) {
            s[ch.at + 9 + rng() % bm] ^= static_cast<uint8_t>(1u << (rng() % 8));
            what = "bitmap bit";
          } else {
            const uint8_t v[] = {0, 1, 31, 32, static_cast<uint8_t>(byte(rng))};
            s[ch.at + 9 + bm + rng() % (hdr - 9 - bm)] = v[rng() % 5];
            what = "code length byte";
          }
        }
        break;
      }
      case 5: {  // outlier count
        if (s[ch.at] != 0) continue;
        const uint32_t old = tfmt::load<uint32_t>(s.data() + ch.at + 5);
        const uint32_t v[] = {old + 1, old - 1, ch.m + 1, 0xFFFFFFFFu, 0u};
        tfmt::store<uint32_t>(s.data() + ch.at + 5, v[rng() % 5]);
        what = "outlier count";
        break;
      }
      case 6: {  // an outlier index (the index list sits before the values, after the payload)
        if (s[ch.at] != 0) continue;
        const uint32_t n_out = tfmt::load<uint32_t>(s.data() + ch.at + 5);
        if (n_out == 0) continue;
        const size_t idx_at = ch.at + ch.size - n_out * (2 + elem);
        const size_t k = rng() % n_out;
        const uint16_t v[] = {0, static_cast<uint16_t>(ch.m), 0xFFFF, static_cast<uint16_t>(rng())};
        tfmt::store<uint16_t>(s.data() + idx_at + 2 * k, v[rng() % 4]);
        what = "outlier index";
        break;
      }
      case 7: {  // payload bytes (values change, structure stays): both must still agree
        if (ch.size < 2) continue;
        const size_t i = ch.at + 1 + rng() % (ch.size - 1);
        s[i] = static_cast<uint8_t>(byte(rng));
        what = "payload byte";
        break;
      }
      case 8: {  // truncation
        len = rng() % s.size();
        do_reseal = false;
        what = "truncated to " + std::to_string(len);
        break;
      }
      case 9: {  // total bytes field
        const uint64_t v[] = {base.size() - 1, base.size() + 1, 0, ~0ull};
        tfmt::store<uint64_t>(s.data() + 40, v[rng() % 4]);
        what = "total bytes";
        break;
      }
      case 10: {  // count / chunk length / ndim / shape
        switch (rng() % 4) {
          case 0: tfmt::store<uint64_t>(s.data() + 8, info.count + (rng() % 3) - 1); break;
          case 1: tfmt::store<uint32_t>(s.data() + 32, static_cast<uint32_t>(32 * (rng() % 40))); break;
          case 2: s[7] = static_cast<uint8_t>(rng() % 70); break;
          default: tfmt::store<uint64_t>(s.data() + 48, rng() % 5000); break;
        }
        what = "geometry";
        break;
      }
      case 11: {  // the other format version: each version's decoder on the other's layout
        s[4] = static_cast<uint8_t>(rng() % 4 == 0 ? rng() % 4 : 3 - version);
        what = "version " + std::to_string(s[4]);
        break;
      }
      case 12: {  // lossless codec field / dtype code / bin 0 (encoded chunks in a "lossless" stream)
        const uint64_t pick = rng() % 3;
        if (pick == 0) {
          const uint32_t v[] = {0, 1, 2, static_cast<uint32_t>(rng())};
          tfmt::store<uint32_t>(s.data() + 36, v[rng() % 4]);
          what = "codec field";
        } else if (pick == 1) {
          s[5] = static_cast<uint8_t>(rng() % 6);
          what = "dtype code";
        } else {
          tfmt::store<double>(s.data() + 24, 0.0);
          what = "bin 0";
        }
        break;
      }
      default: {  // garbage after a valid-looking fixed header
        for (size_t i = 48; i < s.size(); ++i) s[i] = static_cast<uint8_t>(byte(rng));
        what = "garbage body";
        break;
      }
    }
    if (do_reseal) reseal(s);
    fn(s, len, what + " (iteration " + std::to_string(it) + ")");
  }
  // Random garbage of random lengths (most fail at the magic; some get past it).
  for (int it = 0; it < random_iters; ++it) {
    std::vector<uint8_t> s(rng() % 300);
    for (auto& b : s) b = static_cast<uint8_t>(byte(rng));
    if (s.size() >= 8 && it % 2 == 0) {
      std::memcpy(s.data(), "ZCFZ", 4);
      s[4] = static_cast<uint8_t>(1 + rng() % 2);
      s[5] = static_cast<uint8_t>(info.dtype);
      s[6] = 32;
      s[7] = static_cast<uint8_t>(rng() % 3);
      if (s.size() >= 40 && rng() % 2) tfmt::store<uint32_t>(s.data() + 36, 0);
      reseal(s);
    }
    fn(s, s.size(), "random stream " + std::to_string(it));
  }
}

}  // namespace zccl::testing
