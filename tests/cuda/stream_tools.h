// Stream helpers shared by the CPU host-model test (host_model_test.cpp) and the GPU test program
// (test_cuszp.cu): resealing CRCs after a mutation, listing chunks, the mutation generator of the
// differential corruption tests, and converters from today's version-3 streams to version 1 and
// version 2 (direct chunks re-encoded as Lorenzo chunks), so both decoders' v1 and v2 paths are
// exercised without keeping old encoders. Header-only, host code, no CUDA.
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

// Fixed part of an encoded (mode 0: mode, q_start, n_outliers) or direct (mode 4: mode,
// n_outliers) chunk starting at p; n_outliers is its last 4 bytes.
inline size_t fixed_part(const uint8_t* p) {
  return p[0] == tfmt::kChunkDirect ? tfmt::kDirectChunkFixedBytes : tfmt::kEncodedChunkFixedBytes;
}

// Header length (fixed part, bitmap or length bytes, length bytes) of an encoded or direct chunk
// of a valid stream: where its planes start.
inline size_t encoded_header(const uint8_t* p, uint32_t m, uint8_t version) {
  const uint32_t nb = (m + 31) / 32;
  const size_t fixed = fixed_part(p);
  if (version == tfmt::kVersion1) return fixed + nb;
  const uint32_t bm = tfmt::bitmap_bytes(nb);
  size_t nonzero = 0;
  for (uint32_t i = 0; i < bm; ++i) nonzero += static_cast<size_t>(__builtin_popcount(p[fixed + i]));
  return fixed + bm + nonzero;
}

// The codes a direct chunk's planes hold (32 per block, padding lanes included), from the chunk
// of a valid version-3 stream at p (its layout: fzlight_format.h).
inline std::vector<int32_t> direct_codes(const uint8_t* p, uint32_t m) {
  const uint32_t nb = (m + 31) / 32;
  const uint32_t bm = tfmt::bitmap_bytes(nb);
  const uint8_t* bitmap = p + tfmt::kDirectChunkFixedBytes;
  const uint8_t* lens = bitmap + bm;
  size_t nonzero = 0;
  for (uint32_t i = 0; i < bm; ++i) nonzero += static_cast<size_t>(__builtin_popcount(bitmap[i]));
  const uint8_t* w = lens + nonzero;
  std::vector<int32_t> codes(size_t{nb} * 32, 0);
  size_t k = 0;
  for (uint32_t b = 0; b < nb; ++b) {
    if (((bitmap[b / 8] >> (b % 8)) & 1u) == 0) continue;
    const uint32_t len = lens[k++];
    const uint32_t sign = tfmt::load<uint32_t>(w);
    for (uint32_t l = 0; l < 32; ++l) {
      uint32_t mag = 0;
      for (uint32_t j = 0; j < len; ++j) mag |= ((tfmt::load<uint32_t>(w + 4 + 4 * j) >> l) & 1u) << j;
      codes[size_t{b} * 32 + l] = ((sign >> l) & 1u) ? static_cast<int32_t>(0u - mag) : static_cast<int32_t>(mag);
    }
    w += 4 * (len + 1);
  }
  return codes;
}

// A direct chunk (of a valid version-3 stream, at p, `size` bytes, m values of elem bytes) as an
// encoded chunk in the version-1 layout (one code-length byte per block) or the version-2 one
// (bitmap): the same values. Effective codes as the encoder makes them: an outlier takes the
// previous value's effective code (0 for the first value), padding lanes repeat the last one;
// q_start is the first effective code, deltas are Lorenzo residuals.
inline std::vector<uint8_t> direct_as_encoded(const uint8_t* p, size_t size, uint32_t m, size_t elem,
                                              uint8_t version) {
  const uint32_t nb = (m + 31) / 32;
  const uint32_t n_out = tfmt::load<uint32_t>(p + 1);
  const size_t outlier_bytes = size_t{n_out} * (2 + elem);
  const uint8_t* idx = p + size - outlier_bytes;
  std::vector<int32_t> e = direct_codes(p, m);
  std::vector<bool> outlier(e.size(), false);
  for (uint32_t k = 0; k < n_out; ++k) outlier[tfmt::load<uint16_t>(idx + 2 * k)] = true;
  for (size_t i = 0; i < e.size(); ++i) {
    if (outlier[i] || i >= m) e[i] = i == 0 ? 0 : e[i - 1];
  }
  std::vector<uint8_t> lens(nb);
  std::vector<uint8_t> planes;
  for (uint32_t b = 0; b < nb; ++b) {
    uint32_t mag[32], sign = 0, any = 0;
    for (uint32_t l = 0; l < 32; ++l) {
      const size_t i = size_t{b} * 32 + l;
      const int32_t d = static_cast<int32_t>(static_cast<uint32_t>(e[i]) - static_cast<uint32_t>(i == 0 ? e[0] : e[i - 1]));
      mag[l] = d < 0 ? 0u - static_cast<uint32_t>(d) : static_cast<uint32_t>(d);
      sign |= uint32_t{d < 0} << l;
      any |= mag[l];
    }
    const uint32_t len = any == 0 ? 0 : 32 - static_cast<uint32_t>(__builtin_clz(any));
    lens[b] = static_cast<uint8_t>(len);
    if (len == 0) continue;
    uint8_t word[4];
    tfmt::store<uint32_t>(word, sign);
    planes.insert(planes.end(), word, word + 4);
    for (uint32_t j = 0; j < len; ++j) {
      uint32_t plane = 0;
      for (uint32_t l = 0; l < 32; ++l) plane |= ((mag[l] >> j) & 1u) << l;
      tfmt::store<uint32_t>(word, plane);
      planes.insert(planes.end(), word, word + 4);
    }
  }
  std::vector<uint8_t> out(tfmt::kEncodedChunkFixedBytes);
  out[0] = tfmt::kChunkEncoded;
  tfmt::store<int32_t>(out.data() + 1, e[0]);
  tfmt::store<uint32_t>(out.data() + 5, n_out);
  if (version == tfmt::kVersion1) {
    out.insert(out.end(), lens.begin(), lens.end());
  } else {
    std::vector<uint8_t> bitmap(tfmt::bitmap_bytes(nb), 0);
    for (uint32_t b = 0; b < nb; ++b) {
      if (lens[b] != 0) bitmap[b / 8] = static_cast<uint8_t>(bitmap[b / 8] | (1u << (b % 8)));
    }
    out.insert(out.end(), bitmap.begin(), bitmap.end());
    for (uint8_t len : lens) {
      if (len != 0) out.push_back(len);
    }
  }
  out.insert(out.end(), planes.begin(), planes.end());
  out.insert(out.end(), idx, idx + outlier_bytes);
  return out;
}

// The version-3 stream `v3` as a stream of an older version that decodes to the same values.
// Version 2: direct chunks become encoded chunks (raw when that makes them larger than raw),
// everything else stays. Version 1 (float32 or float64, codec 0): also one code-length byte per
// block instead of the bitmap, constant chunks and repeats become raw chunks. A version-2 stream
// is accepted too (nothing to re-encode).
inline std::vector<uint8_t> to_version(const std::vector<uint8_t>& v3, uint8_t version) {
  const tfz::StreamInfo info = tfz::read_info(v3.data(), v3.size());
  if (info.version < tfmt::kVersion2 || version < tfmt::kVersion1 || version >= info.version) {
    throw std::invalid_argument("to_version: converts a version-2/3 stream to an older version");
  }
  if (version == tfmt::kVersion1 && (info.lossless_codec != tfz::LosslessCodec::None ||
                                     (info.dtype != tfz::DType::Float32 && info.dtype != tfz::DType::Float64))) {
    throw std::invalid_argument("to_version: version 1 needs a float32/float64 stream of codec 0");
  }
  const size_t elem = tfz::dtype_size(info.dtype);
  const size_t table_at = 48 + 8 * info.shape.size();
  std::vector<uint8_t> out(v3.begin(), v3.begin() + static_cast<std::ptrdiff_t>(info.header_bytes));
  out[4] = version;
  const std::vector<ChunkRef> chunks = chunks_of(v3);
  std::vector<uint8_t> values(static_cast<size_t>(info.chunk_len) * elem);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const ChunkRef& ch = chunks[c];
    const uint32_t nb = (ch.m + 31) / 32;
    const uint8_t* p = v3.data() + ch.at;
    std::vector<uint8_t> bytes;
    bool keep_crc = false;  // a repeat's entry (size 0) keeps its CRC
    const uint8_t mode = ch.size == 0 ? tfmt::kChunkConstant : p[0];
    if (mode == tfmt::kChunkDirect) {
      bytes = direct_as_encoded(p, ch.size, ch.m, elem, version);
    } else if (version != tfmt::kVersion1 || mode == tfmt::kChunkRaw) {
      bytes.assign(p, p + ch.size);
      keep_crc = ch.size == 0;
    } else if (mode == tfmt::kChunkEncoded) {  // the v2 layout -> v1's length bytes
      const uint32_t bm = tfmt::bitmap_bytes(nb);
      bytes.assign(p, p + 9);
      size_t k = 9 + bm;
      for (uint32_t b = 0; b < nb; ++b) bytes.push_back(((p[9 + b / 8] >> (b % 8)) & 1u) ? p[k++] : 0);
      bytes.insert(bytes.end(), p + k, p + ch.size);
    }
    const bool too_big = bytes.size() > 1 + size_t{ch.m} * elem;
    if ((bytes.empty() && !keep_crc) || too_big) {  // v1's constant or repeat, or larger than raw
      tfz::decompress_chunk(v3.data(), v3.size(), c, values.data(), info.chunk_len);
      bytes.assign(1, tfmt::kChunkRaw);
      bytes.insert(bytes.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(ch.m * elem));
    }
    tfmt::store<uint32_t>(out.data() + table_at + 8 * c, static_cast<uint32_t>(bytes.size()));
    if (!keep_crc) {
      tfmt::store<uint32_t>(out.data() + table_at + 8 * c + 4, tfz::crc32c(bytes.data(), bytes.size()));
    }
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  tfmt::store<uint64_t>(out.data() + 40, out.size());
  tfmt::store<uint32_t>(out.data() + info.header_bytes - 4, tfz::crc32c(out.data(), info.header_bytes - 4));
  return out;
}

inline std::vector<uint8_t> to_v1(const std::vector<uint8_t>& s) { return to_version(s, tfmt::kVersion1); }
inline std::vector<uint8_t> to_v2(const std::vector<uint8_t>& s) { return to_version(s, tfmt::kVersion2); }

// The chunk kinds a stream holds: modes 0..4 by index, [5] a repeat.
inline std::vector<bool> chunk_kinds(const std::vector<uint8_t>& s) {
  std::vector<bool> have(6, false);
  for (const ChunkRef& ch : chunks_of(s)) {
    if (ch.size == 0) {
      have[5] = true;
    } else if (s[ch.at] < 5) {
      have[s[ch.at]] = true;
    }
  }
  return have;
}

// Real streams of an older format version, written by that version's encoder, with that
// encoder's own decoder output: tests/data/format_v1 (NAME.v1.zcfz, NAME.v1dec.bin) and
// tests/data/format_v2 (NAME.v2.zcfz, NAME.v2dec.bin). Name, stream bytes, expected decoded
// bytes; empty when `dir` is missing.
struct Fixture {
  std::string name;
  std::vector<uint8_t> stream;
  std::vector<uint8_t> decoded;
};
using V1Fixture = Fixture;

inline std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline std::vector<Fixture> fixtures(const std::filesystem::path& dir, int version) {
  std::vector<Fixture> out;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) return out;
  const std::string v = ".v" + std::to_string(version);
  const std::string suffix = v + ".zcfz";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() <= suffix.size() || file.compare(file.size() - suffix.size(), suffix.size(), suffix) != 0) continue;
    Fixture f;
    f.name = file.substr(0, file.size() - suffix.size());
    f.stream = read_bytes(entry.path());
    f.decoded = read_bytes(dir / (f.name + v + "dec.bin"));
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const Fixture& a, const Fixture& b) { return a.name < b.name; });
  return out;
}

inline std::vector<Fixture> v1_fixtures(const std::filesystem::path& dir) { return fixtures(dir, 1); }

// Calls fn(stream, len, description) for `iters` mutations of the valid stream `base` (see the
// cases), then for `random_iters` random streams of random lengths. Resealed mutations get valid
// CRCs, so they reach the structural checks. Works for any version (1..3) and dtype; the chunk
// mutations (modes, code lengths, outliers) reach encoded and direct chunks alike.
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
  // Chunks with code lengths, outliers and planes: encoded, and direct in version 3.
  const auto coded = [version](uint8_t mode) {
    return mode == tfmt::kChunkEncoded || (mode == tfmt::kChunkDirect && version >= 3);
  };
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
      case 3: {  // a chunk's mode byte (4, direct, is valid in version 3 only)
        s[ch.at] = static_cast<uint8_t>(rng() % 5);
        what = "chunk mode";
        break;
      }
      case 4: {  // code lengths: v1 one byte per block; v2/v3 a bitmap bit (padding included) or a length byte
        if (!coded(s[ch.at])) continue;
        const uint32_t nb = (ch.m + 31) / 32;
        const size_t fixed = fixed_part(s.data() + ch.at);
        if (version == tfmt::kVersion1) {
          s[ch.at + fixed + rng() % nb] = static_cast<uint8_t>(rng() % 2 ? byte(rng) : rng() % 33);
          what = "code length";
        } else {
          const uint32_t bm = tfmt::bitmap_bytes(nb);
          const size_t hdr = encoded_header(s.data() + ch.at, ch.m, version);
          if (rng() % 2 == 0 || hdr == fixed + bm) {
            s[ch.at + fixed + rng() % bm] ^= static_cast<uint8_t>(1u << (rng() % 8));
            what = "bitmap bit";
          } else {
            const uint8_t v[] = {0, 1, 31, 32, static_cast<uint8_t>(byte(rng))};
            s[ch.at + fixed + bm + rng() % (hdr - fixed - bm)] = v[rng() % 5];
            what = "code length byte";
          }
        }
        break;
      }
      case 5: {  // outlier count
        if (!coded(s[ch.at])) continue;
        const size_t at = ch.at + fixed_part(s.data() + ch.at) - 4;
        const uint32_t old = tfmt::load<uint32_t>(s.data() + at);
        const uint32_t v[] = {old + 1, old - 1, ch.m + 1, 0xFFFFFFFFu, 0u};
        tfmt::store<uint32_t>(s.data() + at, v[rng() % 5]);
        what = "outlier count";
        break;
      }
      case 6: {  // an outlier index (the index list sits before the values, after the payload)
        if (!coded(s[ch.at])) continue;
        const uint32_t n_out = tfmt::load<uint32_t>(s.data() + ch.at + fixed_part(s.data() + ch.at) - 4);
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
      case 11: {  // another format version: each version's decoder on the others' layouts
        const uint8_t other = static_cast<uint8_t>(1 + (version + rng() % 2) % 3);  // 1..3, not version
        s[4] = static_cast<uint8_t>(rng() % 4 == 0 ? rng() % 5 : other);
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
    // Cases 3..7 change chunk ch: say when it is a direct chunk (callers count those).
    const int kase = it % 14;
    if (kase >= 3 && kase <= 7 && base[ch.at] == tfmt::kChunkDirect) what += " (direct chunk)";
    if (do_reseal) reseal(s);
    fn(s, len, what + " (iteration " + std::to_string(it) + ")");
  }
  // Random garbage of random lengths (most fail at the magic; some get past it).
  for (int it = 0; it < random_iters; ++it) {
    std::vector<uint8_t> s(rng() % 300);
    for (auto& b : s) b = static_cast<uint8_t>(byte(rng));
    if (s.size() >= 8 && it % 2 == 0) {
      std::memcpy(s.data(), "ZCFZ", 4);
      s[4] = static_cast<uint8_t>(1 + rng() % 3);
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
