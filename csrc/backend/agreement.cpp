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
  kCheckAgreement,
  kNumFields
};

const char* field_name(int f) {
  static const char* const names[kNumFields] = {
      "collective",       "reduce op",          "root",          "dtype",
      "element count",    "algorithm",          "mode",          "error_bound",
      "chunk_size",       "min_compress_bytes", "owner_exact",   "integer_ring",
      "link_gbps",        "link_latency_us",    "check_agreement"};
  return names[f];
}

// Slots before the field pairs: -min, max of the value range; the largest count; -threads (so
// the MAX gives the smallest thread count).
constexpr int kHead = 4;
constexpr int kLen = kHead + 2 * kNumFields;

// The settings only matter to calls that may compress: a barrier, a sparse or an integer
// all_reduce runs the same way whatever they are, so they are left out of its comparison (a
// config() block around a barrier on some ranks only is not an error).
bool settings_matter(const CallDescription& call) {
  if (call.op == OpKind::Barrier || call.op == OpKind::SparseAllReduce || call.dtype < 0) return false;
  return is_compressible_dtype(static_cast<at::ScalarType>(call.dtype));
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
  }
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
    case kLinkLatency: std::snprintf(buf, sizeof(buf), "%.17g", v); return buf;
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

// Error path: every rank's description, then one message (the same on every rank but for the
// "what" prefix) naming each differing field and which ranks hold which value.
[[noreturn]] void raise_disagreement(const transport::Comm& comm, const char* what,
                                     const std::vector<double>& mine) {
  const int p = comm.size();
  std::vector<double> all(static_cast<size_t>(p) * kNumFields);
  comm.allgather(mine.data(), all.data(), kNumFields, transport::ElemType::Float64);
  std::string msg = std::string("zccl: ") + what + ": ranks disagree on the collective they called";
  bool count_differs = false;
  for (int f = 0; f < kNumFields; ++f) {
    std::map<double, std::vector<int>> holders;
    for (int q = 0; q < p; ++q) holders[all[static_cast<size_t>(q) * kNumFields + f]].push_back(q);
    if (holders.size() < 2) continue;
    count_differs = count_differs || f == kCount;
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

}  // namespace

Agreement agree(const transport::Comm& comm, const char* what, const CallDescription& call,
                const CallConfig& cfg, const std::optional<fz::FiniteRange>& range,
                bool rel_needed, bool largest_needed) {
  Agreement out;
  out.error_bound = cfg.mode == BoundMode::Lossless ? 0.0 : cfg.error_bound;
  out.largest_count = call.count;
  const bool rel = rel_needed && cfg.mode == BoundMode::Rel;
  if (!cfg.check_agreement && !rel && !largest_needed) return out;

  std::vector<double> v(kLen, -std::numeric_limits<double>::infinity());
  if (rel && range && range->any_finite) {
    v[0] = -range->min;
    v[1] = range->max;
  }
  v[2] = static_cast<double>(call.count);
  v[3] = -static_cast<double>(std::max(1, cfg.threads));
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
      if (agreed[kHead + 2 * f] != -agreed[kHead + 2 * f + 1]) raise_disagreement(comm, what, mine);
    }
  }
  out.largest_count = static_cast<uint64_t>(agreed[2]);
  if (cfg.check_agreement) out.model_threads = static_cast<int>(-agreed[3]);
  if (rel) out.error_bound = rel_bound(cfg.error_bound, -agreed[0], agreed[1]);
  return out;
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
