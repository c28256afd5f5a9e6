#include "agreement.h"

#include <torch/csrc/distributed/c10d/Types.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "routing.h"
#include "staged.h"

namespace zccl::backend {

const char* op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Reduce: return "reduce";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Gather: return "gather";
    case OpKind::Scatter: return "scatter";
    case OpKind::AllToAll: return "all_to_all";
    case OpKind::Barrier: return "barrier";
    case OpKind::SparseAllReduce: return "all_reduce (sparse)";
    case OpKind::MeasureLink: return "measure_link";
  }
  return "unknown collective";
}

namespace {

// The compared fields, in message order. Each is carried as a double (all are integers below
// 2^53 or the error bound itself, so the comparison is exact).
enum Field : int {
  kOp,
  kReduceOp,
  kRoot,
  kDtype,
  kCount,
  kAlgorithm,
  kMode,
  kErrorBound,
  kChunkLen,
  kMinCompressBytes,
  kOwnerExact,
  kIntegerRing,
  kLinkGbps,
  kLinkLatency,
  kAutoRatio,
  kBatchSize,
  kBatchDigest,
  kCheckAgreement,
  kNumFields
};

const char* field_name(int f) {
  static const char* const names[kNumFields] = {
      "collective",       "reduce op",          "root",          "dtype",
      "element count",    "algorithm",          "mode",          "error_bound",
      "chunk_size",       "min_compress_bytes", "owner_exact",   "integer_ring",
      "link_gbps",        "link_latency_us",    "auto_ratio",    "tensors of the coalesced call",
      "the coalesced call's dtypes and counts", "check_agreement"};
  return names[f];
}

// Slots before the field pairs: -min, max of the value range; the largest count; -threads and
// -sampled ratio (so the MAX gives the smallest thread count and ratio; -inf: no sample).
constexpr int kHead = 5;
constexpr int kLen = kHead + 2 * kNumFields;

// The settings only matter to calls that may compress: a barrier, a sparse or an integer
// all_reduce runs the same way whatever they are, so they are left out of its comparison (a
// config() block around a barrier on some ranks only is not an error).
bool settings_matter(const CallDescription& call) {
  if (call.op == OpKind::Barrier || call.op == OpKind::SparseAllReduce ||
      call.op == OpKind::MeasureLink) {
    return false;
  }
  auto compressible = [](int dtype) {
    return dtype >= 0 && is_compressible_dtype(static_cast<at::ScalarType>(dtype));
  };
  // A coalesced call: if any of its tensors may compress (an integer first tensor must not hide
  // a float one whose settings differ until the integer one has moved).
  if (call.batch != nullptr) {
    return std::any_of(call.batch->begin(), call.batch->end(),
                       [&](const BatchItem& item) { return compressible(item.dtype); });
  }
  return compressible(call.dtype);
}

// FNV-1a over every tensor's (dtype, count), kept to 52 bits so that the double that carries it
// holds it exactly. Ranks with the same list always agree; different lists meet by chance with
// probability 2^-52 (then the tensors' own agreements still catch the difference, later).
double batch_digest(const std::vector<BatchItem>& items) {
  uint64_t h = 0xcbf29ce484222325ULL;
  auto mix = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xffU;
      h *= 0x100000001b3ULL;
    }
  };
  for (const BatchItem& item : items) {
    mix(static_cast<uint64_t>(static_cast<int64_t>(item.dtype)));
    mix(item.count);
  }
  return static_cast<double>(h >> 12);
}

std::vector<double> describe(const CallDescription& call, const CallConfig& cfg) {
  std::vector<double> f(kNumFields, 0.0);
  f[kOp] = static_cast<double>(call.op);
  f[kReduceOp] = call.reduce_op;
  f[kRoot] = call.root;
  f[kDtype] = call.dtype;
  f[kCount] = call.count_must_match ? static_cast<double>(call.count) : 0.0;
  if (settings_matter(call)) {
    f[kAlgorithm] = static_cast<double>(cfg.algorithm);
    f[kMode] = static_cast<double>(cfg.mode);
    f[kErrorBound] = cfg.error_bound;
    f[kChunkLen] = cfg.chunk_len;
    f[kMinCompressBytes] = static_cast<double>(cfg.min_compress_bytes);
    f[kOwnerExact] = cfg.owner_exact ? 1.0 : 0.0;
    f[kIntegerRing] = cfg.integer_ring ? 1.0 : 0.0;
    f[kLinkGbps] = cfg.link_gbps;
    f[kLinkLatency] = cfg.link_latency_us;
    f[kAutoRatio] = cfg.auto_ratio;
  }
  // -1: not a coalesced call's first exchange (so that one of 1 tensor still differs from it).
  f[kBatchSize] = call.batch != nullptr ? static_cast<double>(call.batch->size()) : -1.0;
  f[kBatchDigest] = call.batch != nullptr ? batch_digest(*call.batch) : 0.0;
  f[kCheckAgreement] = cfg.check_agreement ? 1.0 : 0.0;
  return f;
}

std::string format_value(int field, double v) {
  char buf[64];
  switch (field) {
    case kOp: return op_kind_name(static_cast<OpKind>(static_cast<int>(v)));
    case kReduceOp:
      if (v < 0) return "none";
      // By the code alone: a ReduceOp built from PREMUL_SUM's code fails torch's internal
      // assert (that op needs its factor), which replaced this message with torch's.
      return op_name(static_cast<c10d::ReduceOp::RedOpType>(static_cast<int>(v)));
    case kRoot: return v < 0 ? "none" : std::to_string(static_cast<int64_t>(v));
    case kDtype:
      if (v < 0) return "none";
      return c10::toString(static_cast<at::ScalarType>(static_cast<int>(v)));
    case kAlgorithm: return coll::algorithm_name(static_cast<coll::Algorithm>(static_cast<int>(v)));
    case kMode:
      switch (static_cast<BoundMode>(static_cast<int>(v))) {
        case BoundMode::Abs: return "abs";
        case BoundMode::Rel: return "rel";
        case BoundMode::Lossless: return "lossless";
      }
      return "unknown";
    case kErrorBound:
    case kLinkGbps:
    case kLinkLatency:
    case kAutoRatio: std::snprintf(buf, sizeof(buf), "%.17g", v); return buf;
    case kBatchSize: return v < 0 ? "none (not a coalesced call)" : std::to_string(static_cast<int64_t>(v));
    case kOwnerExact:
    case kIntegerRing:
    case kCheckAgreement: return v != 0.0 ? "True" : "False";
    default: return std::to_string(static_cast<uint64_t>(v));
  }
}

// "0-2, 4" for ranks {0, 1, 2, 4}.
std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(ranks[i]);
    if (j > i) s += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return s;
}

// Which ranks hold which value of field f, over `all` (p descriptions of kNumFields each).
std::map<double, std::vector<int>> holders_of(const std::vector<double>& all, int p, int f) {
  std::map<double, std::vector<int>> holders;
  for (int q = 0; q < p; ++q) holders[all[static_cast<size_t>(q) * kNumFields + f]].push_back(q);
  return holders;
}

// The message for descriptions `all` that differ: "<what>: ranks disagree on <subject>; field:
// value on ranks ..., value on rank ...; ..." naming every field that differs but the digest (a
// number that tells a user nothing: raise_for_batch names the tensor instead).
[[noreturn]] void raise_for(const char* what, const std::string& subject,
                            const std::vector<double>& all, int p) {
  std::string msg = std::string("zccl: ") + what + ": ranks disagree on " + subject;
  bool count_differs = false;
  for (int f = 0; f < kNumFields; ++f) {
    const auto holders = holders_of(all, p, f);
    if (holders.size() < 2 || f == kBatchDigest) continue;
    count_differs = count_differs || f == kCount || f == kBatchSize;
    msg += "; ";
    msg += field_name(f);
    msg += ":";
    bool first = true;
    for (const auto& [value, ranks] : holders) {
      msg += first ? " " : ", ";
      first = false;
      msg += format_value(f, value) + (ranks.size() == 1 ? " on rank " : " on ranks ") +
             rank_list(ranks);
    }
  }
  if (count_differs) msg += " (size mismatch across ranks)";
  msg += ". Every rank raised this error; no data was moved.";
  throw std::invalid_argument(msg);
}

// Coalesced calls of as many tensors whose lists differ: every rank's list, then the message
// about the first tensor in which any rank differs, as its own agreement would have put it (with
// whatever else differs, e.g. the collective).
[[noreturn]] void raise_for_batch(const transport::Comm& comm, const char* what,
                                  const std::vector<double>& all,
                                  const std::vector<BatchItem>& batch) {
  const int p = comm.size();
  const size_t n = batch.size();
  std::vector<double> mine(2 * n), lists(static_cast<size_t>(p) * 2 * n);
  for (size_t k = 0; k < n; ++k) {
    mine[2 * k] = batch[k].dtype;
    mine[2 * k + 1] = static_cast<double>(batch[k].count);
  }
  comm.allgather(mine.data(), lists.data(), 2 * n, transport::ElemType::Float64);
  for (size_t k = 0; k < n; ++k) {
    std::vector<double> tensor_k = all;
    bool differs = false;
    for (int q = 0; q < p; ++q) {
      double* d = &tensor_k[static_cast<size_t>(q) * kNumFields];
      d[kDtype] = lists[(static_cast<size_t>(q) * n + k) * 2];
      d[kCount] = lists[(static_cast<size_t>(q) * n + k) * 2 + 1];
      differs = differs || d[kDtype] != tensor_k[kDtype] || d[kCount] != tensor_k[kCount];
    }
    if (differs) {
      raise_for(what, "tensor " + std::to_string(k) + " of the " + std::to_string(n) +
                          " in the coalesced call", tensor_k, p);
    }
  }
  // Digests that differ for equal lists cannot happen (the digest is a function of the list).
  raise_for(what, "the collective they called", all, p);
}

// Error path: every rank's description, then one message (the same on every rank but for the
// "what" prefix) naming each differing field and which ranks hold which value.
[[noreturn]] void raise_disagreement(const transport::Comm& comm, const char* what,
                                     const std::vector<double>& mine,
                                     const std::vector<BatchItem>* batch) {
  const int p = comm.size();
  std::vector<double> all(static_cast<size_t>(p) * kNumFields);
  comm.allgather(mine.data(), all.data(), kNumFields, transport::ElemType::Float64);
  // Every rank in a coalesced call's first exchange (no other has this size), lists that differ.
  if (batch != nullptr && holders_of(all, p, kBatchSize).size() == 1 &&
      holders_of(all, p, kBatchDigest).size() > 1) {
    raise_for_batch(comm, what, all, *batch);
  }
  raise_for(what, "the collective they called", all, p);
}

}  // namespace

Agreement agree(const transport::Comm& comm, const char* what, const CallDescription& call,
                const CallConfig& cfg, const std::optional<fz::FiniteRange>& range,
                bool rel_needed, bool largest_needed, double sampled_ratio) {
  Agreement out;
  out.error_bound = cfg.mode == BoundMode::Lossless ? 0.0 : cfg.error_bound;
  out.largest_count = call.count;
  out.model.ratio = cfg.auto_ratio;
  const bool rel = rel_needed && cfg.mode == BoundMode::Rel;
  if (!cfg.check_agreement && !rel && !largest_needed) return out;

  std::vector<double> v(kLen, -std::numeric_limits<double>::infinity());
  if (rel && range && range->any_finite) {
    v[0] = -range->min;
    v[1] = range->max;
  }
  v[2] = static_cast<double>(call.count);
  v[3] = -static_cast<double>(std::max(1, cfg.threads));
  if (sampled_ratio > 0.0) v[4] = -sampled_ratio;
  const std::vector<double> mine = describe(call, cfg);
  for (int f = 0; f < kNumFields; ++f) {
    v[kHead + 2 * f] = mine[f];
    v[kHead + 2 * f + 1] = -mine[f];
  }
  std::vector<double> agreed(kLen);
  comm.allreduce(v.data(), agreed.data(), kLen, transport::ElemType::Float64,
                 transport::ReduceKind::Max);

  // Compare when any rank asked for it, so a rank that opted out still fails with the others.
  if (agreed[kHead + 2 * kCheckAgreement] != 0.0) {
    for (int f = 0; f < kNumFields; ++f) {
      if (agreed[kHead + 2 * f] != -agreed[kHead + 2 * f + 1]) {
        raise_disagreement(comm, what, mine, call.batch);
      }
    }
  }
  out.largest_count = static_cast<uint64_t>(agreed[2]);
  if (cfg.check_agreement) {
    out.model.threads = static_cast<int>(-agreed[3]);
    // auto_ratio is a compared field: equal on every rank here.
    if (cfg.auto_ratio <= 0.0 && std::isfinite(agreed[4])) out.model.ratio = -agreed[4];
  }
  if (rel) out.error_bound = rel_bound(cfg.error_bound, -agreed[0], agreed[1]);
  return out;
}

void agree_batch(const transport::Comm& comm, const char* what, OpKind op, int reduce_op,
                 const std::vector<BatchItem>& items, const CallConfig& cfg) {
  // Described as its first tensor (a call of one tensor then differs from the single op only
  // in being coalesced), with every tensor in the digest.
  CallDescription call;
  call.op = op;
  call.reduce_op = reduce_op;
  if (!items.empty()) {
    call.dtype = items.front().dtype;
    call.count = items.front().count;
  }
  call.batch = &items;
  agree(comm, what, call, cfg, std::nullopt, /*rel_needed=*/false);
}

void agree_splits(const transport::Comm& comm, const char* what,
                  const std::vector<size_t>& send_counts, const std::vector<size_t>& recv_counts) {
  const int p = comm.size();
  const size_t n = static_cast<size_t>(p);
  std::vector<uint64_t> sent_to_me(n);
  std::vector<size_t> ones(n, 1), displs(n);
  std::iota(displs.begin(), displs.end(), size_t{0});
  const std::vector<uint64_t> mine(send_counts.begin(), send_counts.end());
  comm.alltoallv(mine.data(), ones, displs, sent_to_me.data(), ones, displs,
                 transport::ElemType::UInt64);
  // This rank's first mismatch: (sender, values sent, values expected, mismatched senders).
  std::vector<uint64_t> report(4, 0);
  for (size_t q = 0; q < n; ++q) {
    if (sent_to_me[q] == recv_counts[q]) continue;
    if (report[3] == 0) report = {q, sent_to_me[q], recv_counts[q], 0};
    ++report[3];
  }
  std::vector<uint64_t> all(4 * n);
  comm.allgather(report.data(), all.data(), 4, transport::ElemType::UInt64);
  std::string msg;
  uint64_t pairs = 0;
  for (size_t r = 0; r < n; ++r) {
    const uint64_t* rep = &all[4 * r];
    if (rep[3] == 0) continue;
    if (pairs == 0) {
      msg = "rank " + std::to_string(rep[0]) + " sends " + std::to_string(rep[1]) +
            " values to rank " + std::to_string(r) + ", which expects " +
            std::to_string(rep[2]);
    }
    pairs += rep[3];
  }
  if (pairs == 0) return;
  if (pairs > 1) msg += " (" + std::to_string(pairs - 1) + " more pairs differ)";
  throw std::invalid_argument(std::string("zccl: ") + what +
                              ": size mismatch across ranks: the split sizes disagree: " + msg +
                              ". Every rank raised this error; no data was moved.");
}

}  // namespace zccl::backend
