// The compressor as the CPU collectives call it: fZ-light with one error bound, accounting into
// Stats, with every received stream checked against the expected count and dtype before it is
// decoded ("size mismatch across ranks" otherwise), the errors of that check, and codec calls
// whose errors wait until the relaying is done.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>

#include "../../compress/fzcodes.h"
#include "../collectives.h"
#include "buffers.h"

namespace zccl::coll::toolkit {

// std::runtime_error "zccl: size mismatch across ranks: <op>: <detail>"; the second form returns
// it, for collectives that must finish relaying before they report it.
[[noreturn]] void throw_size_mismatch(const char* op, const std::string& detail);
std::exception_ptr size_mismatch(const char* op, const std::string& detail);

// Runs `fn` (a codec call) unless `error` is already set. A codec or size error is recorded in
// `error` instead of thrown, so the caller keeps relaying or draining (its peers must not be
// left waiting); transport errors propagate, as the call cannot go on after them.
template <class Fn>
void run_recording(std::exception_ptr& error, Fn&& fn) {
  if (error) return;
  try {
    fn();
  } catch (const transport::TransportError&) {
    throw;
  } catch (const transport::TimeoutError&) {
    throw;
  } catch (...) {
    error = std::current_exception();
  }
}

class Codec {
 public:
  // Streams of the data's own dtype (the data-movement collectives; cfg.wire_half does not
  // apply). `op` names the collective in size-mismatch errors.
  static Codec for_data(DType dt, const Config& cfg, Stats& stats, const char* op) {
    return Codec(dt, dt, cfg.error_bound, cfg, stats, op);
  }
  // Streams of bound `eb` for the reductions: with cfg.wire_half (float32 data only) values are
  // narrowed to that half type before compression and widened after decoding, so the
  // algorithms keep working on float32 while the streams are half streams.
  static Codec for_reduction(DType dt, double eb, const Config& cfg, Stats& stats) {
    return Codec(dt, reduction_wire(dt, cfg), eb, cfg, stats, nullptr);
  }

  double error_bound() const { return eb_; }
  // Worst-case stream size for n values.
  size_t capacity(size_t n) const;
  // Compresses n values into dst (capacity(n) bytes); returns the stream size. With `progress`,
  // chunk by chunk on this thread (pipelined, MPI polled between chunks at most every 50 us),
  // otherwise with cfg.threads OpenMP threads. Adds to compress_seconds and bytes_compressed.
  size_t compress(const void* src, size_t n, uint8_t* dst, size_t cap,
                  const fz::Progress* progress = nullptr);
  // The same into `out`, resized to the stream.
  void compress(const void* src, size_t n, Bytes& out);
  // Decodes a stream of `len` bytes that must hold exactly `expected` values into dst (nothing
  // outside its `expected` values is written); `peer` names the sender. Another count or dtype
  // throws "size mismatch across ranks", a corrupt stream fz::StreamError. Adds to
  // decompress_seconds.
  void decompress(const uint8_t* src, size_t len, void* dst, size_t expected, int peer,
                  const fz::Progress* progress = nullptr);
  // SUM of a received stream into a partial result: dst[i] = addend[i] + decoded[i] (float32
  // or float64 values; dst may be addend), with the checks of decompress. Decoded and added
  // chunk by chunk while in cache, unless the streams are half streams (cfg.wire_half: widen,
  // then add). The time counts as decompress_seconds.
  template <class T>
  void decompress_add(const uint8_t* src, size_t len, const T* addend, T* dst, size_t expected,
                      int peer, const fz::Progress* progress = nullptr);

  // One hop of a ring reduction (SUM): compresses addend + decoded(src) into dst (capacity(n))
  // and returns the stream size, with the checks of decompress. Chunk by chunk without writing
  // the sum (fz::recompress_add) when the stream has the data's dtype and cfg.chunk_len, the
  // time counted as compress_seconds; otherwise (half streams, another chunk length)
  // decompress_add into `scratch` (n values), then compress.
  template <class T>
  size_t recompress_add(const uint8_t* src, size_t len, const T* addend, size_t n, int peer,
                        T* scratch, uint8_t* dst, size_t cap, const fz::Progress* progress);

 private:
  Codec(DType dt, DType wire, double eb, const Config& cfg, Stats& stats, const char* op)
      : dt_(dt), wire_(wire), eb_(eb), cfg_(cfg), stats_(stats), op_(op) {}
  static DType reduction_wire(DType dt, const Config& cfg);
  fz::CompressParams params() const;
  void check_stream(const fz::StreamInfo& info, size_t expected, int peer) const;
  // What decompress and decompress_add share: timed into decompress_seconds, the stream checked
  // against `expected` values from `peer`, then decode(the throttled progress hook or nullptr).
  template <class Decode>
  void decode_checked(const uint8_t* src, size_t len, size_t expected, int peer,
                      const fz::Progress* progress, Decode&& decode);
  // A half stream (wire_ != dt_) decoded into the kSlotWireIn workspace; returns it.
  uint8_t* decode_half(const uint8_t* src, size_t len, size_t expected, const fz::Progress* hook);

  DType dt_;    // the values the algorithm works on
  DType wire_;  // the values the streams hold (dt_, or the half type of cfg.wire_half)
  double eb_;
  const Config& cfg_;
  Stats& stats_;
  const char* op_;  // data movement: the collective's name; reductions: nullptr
};

// The integer code segments (compress/fzcodes.h) as the ring all_reduce calls them: one grid
// for the p ranks of the call, accounting into Stats (combine counts as compression, decode as
// decompression), MPI polled at most every 50 us, and a segment of another count reported as
// "size mismatch across ranks".
class CodeCodec {
 public:
  // nullopt when eb cannot be met on an integer grid (0, or below float64's smallest normal).
  static std::optional<CodeCodec> for_reduction(double eb, int ranks, Stats& stats);

  size_t capacity(size_t n) const { return fz::codes::max_segment_bytes(n); }
  // Segment of (in + quantised x) into dst; in == nullptr: x alone. `peer` sent `in`.
  // `values` (may be x): also the segment's decoded values (see fz::codes::combine).
  template <class T>
  size_t combine(const uint8_t* in, size_t in_len, const T* x, size_t n, uint8_t* dst,
                 size_t cap, int peer, const fz::Progress* progress, T* values = nullptr);
  // The values of a segment from `peer` (this rank: its own) into out.
  template <class T>
  void decode(const uint8_t* src, size_t len, T* out, size_t n, int peer,
              const fz::Progress* progress);

 private:
  CodeCodec(const fz::codes::Grid& grid, Stats& stats) : grid_(grid), stats_(stats) {}
  fz::codes::Grid grid_;
  Stats& stats_;
};

}  // namespace zccl::coll::toolkit
