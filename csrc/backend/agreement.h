// Agreement on what a collective is, before it moves any data. Every rank describes the call it
// is about to run (op, reduce op, root, dtype, element count and every setting that must match)
// and the ranks compare the descriptions in ONE small exact MPI_Allreduce (MAX over each field
// and its negation: a field agrees iff max(f) == -max(-f)). The same message carries the value
// range a REL bound needs and the largest count of an all_to_all, so checking costs no extra
// message. Any disagreement raises on every rank, naming the field and which ranks hold which
// value (found by one extra all-gather of the descriptions, on the error path only).
//
// This is why mismatched calls fail fast instead of hanging in a ring or silently reducing with
// different operators: every op body calls agree() first, with the same message shape, so even
// ranks that called different collectives meet in this exchange and see the difference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "../compress/fzlight.h"
#include "../transport/transport.h"
#include "call_config.h"

namespace zccl::backend {

// The collectives the agreement distinguishes (sent as numbers: keep the values stable).
enum class OpKind : int {
  AllReduce = 1,
  Broadcast = 2,
  Reduce = 3,
  AllGather = 4,
  ReduceScatter = 5,
  Gather = 6,
  Scatter = 7,
  AllToAll = 8,
  Barrier = 9,
  SparseAllReduce = 10,
  MeasureLink = 11,
};
const char* op_kind_name(OpKind op);

// One tensor of a coalesced call: what its own agreement will compare (dtype: an
// at::ScalarType value; count: elements per rank block).
struct BatchItem {
  int dtype = -1;
  uint64_t count = 0;
};

// What this rank is about to run. Fields that do not apply stay at their defaults (the same on
// every rank, so they always agree).
struct CallDescription {
  OpKind op = OpKind::Barrier;
  int reduce_op = -1;         // c10d::ReduceOp::RedOpType, -1 when none
  int root = -1;              // -1 when none
  int dtype = -1;             // at::ScalarType, -1 when none
  uint64_t count = 0;         // elements per rank block
  bool count_must_match = true;  // false: all_to_all (per-rank counts differ legitimately)
  // A coalesced call's first exchange (agree_batch): its tensors, else nullptr.
  const std::vector<BatchItem>* batch = nullptr;
};

// A description from its parts (dtype: an at::ScalarType value; -1 for "none").
inline CallDescription describe_call(OpKind op, int dtype, uint64_t count, int reduce_op = -1,
                                     int root = -1) {
  return CallDescription{op, reduce_op, root, dtype, count, /*count_must_match=*/true};
}

// What the automatic algorithm choice (algorithm="auto") assumes for a call: the same on every
// rank, which its inputs need not be.
struct AutoModel {
  // The smallest compression thread count of the ranks (coll::Config::model_threads): `threads`
  // may differ between ranks. 1 with check_agreement off (no exchange to agree it in).
  int threads = 1;
  // The compression ratio (coll::Config::model_ratio): the auto_ratio setting when > 0 (5 by
  // default), else the smallest ratio any rank sampled from its data, else 0 (no rank sampled:
  // the model's fixed ratio). With check_agreement off: the auto_ratio setting (ranks then do
  // not sample).
  double ratio = 0.0;
};

struct Agreement {
  double error_bound = 0.0;  // absolute bound to compress with (REL resolved on the agreed range)
  uint64_t largest_count = 0;  // max of every rank's count
  AutoModel model;
};

// Runs the exchange on `comm` (collective: every rank of the group must call it). `range`: this
// rank's finite value range when a REL bound must be agreed (rel_needed), else nullopt.
// `sampled_ratio`: this rank's estimate of its data's compression ratio (fz::sample_ratio),
// 0 when it took none; the smallest across the ranks becomes Agreement::model.ratio.
// With cfg.check_agreement == false only the parts that are needed (a REL range, the largest
// count) are exchanged, and nothing at all when neither is. Throws std::invalid_argument naming
// the field(s) and ranks on disagreement.
Agreement agree(const transport::Comm& comm, const char* what, const CallDescription& call,
                const CallConfig& cfg, const std::optional<fz::FiniteRange>& range,
                bool rel_needed, bool largest_needed = false, double sampled_ratio = 0.0);

// The coalesced calls (all_reduce_coalesced, all_gather_coalesced and the *_tensor_coalesced
// ones) run one collective per tensor, each with its own agree(). This exchange comes first and
// describes the whole call: its collective and reduce op, its first tensor's dtype and count
// and its settings, how many tensors, and a 52-bit digest of every tensor's dtype and count. So
// a tensor the ranks disagree on raises on every rank before any tensor has moved (with agree()
// alone, the tensors before it were already reduced or gathered when the error said that no
// data was moved); the message names the first such tensor and what differs in it (one
// all-gather of every rank's list, on the error path only). Same message shape and options as
// agree(): nothing is exchanged with check_agreement off.
void agree_batch(const transport::Comm& comm, const char* what, OpKind op, int reduce_op,
                 const std::vector<BatchItem>& items, const CallConfig& cfg);

// all_to_all, after agree() (every rank is then in the same all_to_all, so the extra exchanges
// below always match): the values each rank sends to each other one must be what that one
// expects to receive from it. One exact all-to-all of the counts (a uint64 per peer) and one
// all-gather of each rank's first mismatch; throws std::invalid_argument on every rank, naming
// the same pair, when any pair differs. Without it the exact path moved the shorter of the two
// silently (the rest of the output left as it was) and the compressed path raised on the
// receiver only, leaving the other ranks with a result.
void agree_splits(const transport::Comm& comm, const char* what,
                  const std::vector<size_t>& send_counts, const std::vector<size_t>& recv_counts);

}  // namespace zccl::backend
