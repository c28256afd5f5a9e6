// The op bodies of the zccl backend, written once for every device (device.h) and run on the
// group's worker thread. Each one:
//   1. decides whether the payload takes the compressed path (float dtype, supported reduce op,
//      at least min_compress_bytes, algorithm not "mpi");
//   2. stages the tensor (contiguous; half types widened to float32 for the reductions, which
//      accumulate in float32; data movement keeps the tensor's type);
//   3. agrees with the other ranks on what the call is, in one small exchange that also carries
//      the value range a REL bound needs (agreement.h): a mismatch raises on every rank;
//   4. runs the device's compressed collective or the exact one on the transport, records stats;
//   5. writes the staged result back into the caller's tensor.
#include "zccl_backend.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "../compress/ratio_sample.h"
#include "agreement.h"
#include "routing.h"
#include "staged.h"

namespace zccl::backend {
namespace {

bool is_half(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

CallDescription describe(OpKind op, at::ScalarType dtype, uint64_t count, int reduce_op = -1,
                         int root = -1) {
  return describe_call(op, static_cast<int>(dtype), count, reduce_op, root);
}

int reduce_code(const c10d::ReduceOp& op) { return static_cast<int>(op.op_); }

// A tensor a collective reads (`read`: its values go in) or writes (`write`: the call's result
// comes back into it). Undefined tensors pass a null pointer (non-root sides).
struct HostArg {
  at::Tensor* tensor;
  bool read;
  bool write;
};
using Pointers = std::vector<void*>;

// Runs `call` on the device's host views of `args` (Device::host_view: the tensors themselves
// on the CPU), then writes the results back. `device_ok`: only a transport that reads device
// memory (Comm::device_memory()) reads them, not the CPU's codec.
void on_host(Device& dev, const std::vector<HostArg>& args, bool device_ok,
             const std::function<void(const Pointers&)>& call) {
  std::vector<at::Tensor> views;
  Pointers ptrs;
  for (const HostArg& a : args) {
    views.push_back(a.tensor->defined() ? dev.host_view(*a.tensor, a.read, device_ok)
                                        : at::Tensor());
    ptrs.push_back(views.back().defined() ? views.back().data_ptr() : nullptr);
  }
  call(ptrs);
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i].write && views[i].defined()) dev.from_host(*args[i].tensor, views[i]);
  }
}

// Runs the compressed collective `op` on buffers of `dtype` by `call(device, pointers of args)`:
// on `dev` itself where it has that collective, else on the CPU device `cpu` with host copies of
// `args` (on the CUDA device: reduce, reduce_scatter, gather, all_to_all and half-precision data
// movement; the same fZ-light streams travel, coded by the CPU, with the CPU's bounds).
void compressed(Device& dev, Device& cpu, DeviceOp op, at::ScalarType dtype,
                const std::vector<HostArg>& args,
                const std::function<void(Device&, const Pointers&)>& call) {
  if (!dev.compresses(op, dtype)) {
    on_host(dev, args, /*device_ok=*/false, [&](const Pointers& p) { call(cpu, p); });
    return;
  }
  Pointers ptrs;
  for (const HostArg& a : args) {
    ptrs.push_back(a.tensor->defined() ? a.tensor->data_ptr() : nullptr);
  }
  call(dev, ptrs);
}

// What a receiver of data only the root compressed records as its bound: the REL bound is the
// root's (from its value range), which the receiver reads in the stream it decoded; NaN when no
// stream said (a device whose codec does not report it).
double received_bound(const coll::Stats& stats, const CallConfig& cfg, double eb) {
  if (cfg.mode != BoundMode::Rel) return eb;
  return stats.received_error_bound >= 0.0 ? stats.received_error_bound
                                           : std::numeric_limits<double>::quiet_NaN();
}

// LastStats::auto_ratio of a call that could compress: the ratio the automatic choice assumed
// (0 when the algorithm was not "auto", and on a GPU, whose choices do not weigh it).
double auto_ratio_of(const Device& dev, const CallConfig& cfg, const AutoModel& model) {
  if (cfg.algorithm != coll::Algorithm::Auto || dev.kind() != coll::Device::Cpu) return 0.0;
  coll::Config c;
  c.model_ratio = model.ratio;
  return coll::assumed_ratio(c);
}

}  // namespace

// The absolute bound for data only this rank compresses (broadcast/scatter roots, sends): a REL
// bound needs no agreement then, the sender's own value range (over all its parts) defines it.
double ZcclBackend::local_bound(Device& dev, const std::vector<at::Tensor>& parts,
                                const CallConfig& cfg) const {
  if (cfg.mode == BoundMode::Lossless) return 0.0;
  if (cfg.mode != BoundMode::Rel) return cfg.error_bound;
  double lo = std::numeric_limits<double>::infinity();
  double hi = -lo;
  for (const auto& part : parts) {
    if (part.numel() == 0) continue;
    const fz::FiniteRange r = dev.value_range(part.contiguous(), cfg.threads);
    if (!r.any_finite) continue;
    lo = std::min(lo, r.min);
    hi = std::max(hi, r.max);
  }
  return rel_bound(cfg.error_bound, lo, hi);
}

void ZcclBackend::record(const char* op, const coll::Stats& stats, double eb, double auto_ratio) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  last_.stats = stats;
  last_.error_bound = eb;
  last_.op = op;
  last_.auto_ratio = auto_ratio;
  totals_[op].add(stats);
}

void OpTotals::add(const coll::Stats& s) {
  ++calls;
  bytes_in += s.bytes_in;
  if (s.algorithm == coll::Algorithm::Mpi) return;
  ++compressed_calls;
  bytes_sent += s.bytes_sent;
  bytes_compressed += s.bytes_compressed;
  compress_seconds += s.compress_seconds;
  decompress_seconds += s.decompress_seconds;
  seconds += s.total_seconds;
}

void ZcclBackend::record_exact(const char* op, uint64_t bytes_in, double eb, double auto_ratio) {
  coll::Stats stats;
  stats.algorithm = coll::Algorithm::Mpi;
  stats.bytes_in = bytes_in;
  record(op, stats, eb, auto_ratio);
}

bool ZcclBackend::codec_pays(const Device& dev, coll::Collective c, const CallConfig& cfg,
                             const AutoModel& model) const {
  return coll::compression_pays(c, comm_->size(), coll_config(cfg, 0.0, model), dev.kind());
}

bool ZcclBackend::compressed_path(at::ScalarType dtype, uint64_t numel, const CallConfig& cfg) const {
  if (!is_compressible_dtype(dtype)) return false;
  coll::Config c;
  c.algorithm = cfg.algorithm;
  c.min_compress_bytes = cfg.min_compress_bytes;
  return coll::may_compress(numel * c10::elementSize(dtype), c);
}

std::optional<coll::ReduceOp> ZcclBackend::reduction_path(const c10d::ReduceOp& op,
                                                          at::ScalarType dtype, uint64_t numel,
                                                          const CallConfig& cfg) const {
  const auto cop = compressed_op(op);
  if (!cop || !compressed_path(dtype, numel, cfg)) return std::nullopt;
  return cop;
}

coll::Config ZcclBackend::coll_config(const CallConfig& cfg, double eb,
                                      const AutoModel& model) const {
  coll::Config c;
  c.error_bound = eb;
  c.threads = cfg.threads;
  c.model_threads = model.threads;
  c.model_ratio = model.ratio;
  c.exact_schedules = comm_->exact_schedules();
  c.chunk_len = cfg.chunk_len;
  c.algorithm = cfg.algorithm;
  c.min_compress_bytes = 0;  // the backend already decided to compress
  c.owner_exact = cfg.owner_exact;
  c.integer_ring = cfg.integer_ring;
  c.link_gbps = cfg.link_gbps;
  c.link_latency_us = cfg.link_latency_us;
  return c;
}

// The reductions accumulate half tensors in float32 (the staged widening) and, when lossy and the
// device running the collective (the CPU's for host-staged ops) sends half streams, send every
// partial result as a half stream: half the bytes of a float32 stream, each hop rounding to the
// half type as a half-precision allreduce does.
// Lossless (eb 0) keeps float32 streams, so the result is the float32 sum rounded once, as on the
// exact path.
coll::Config ZcclBackend::reduction_config(const Device& dev, const CallConfig& cfg, double eb,
                                           at::ScalarType t, const AutoModel& model) const {
  coll::Config c = coll_config(cfg, eb, model);
  if (eb > 0.0 && is_half(t) && !dev.widens_halves()) c.wire_half = compressed_dtype(t);
  return c;
}

// Steps 1-3 of an in-place reduction (all_reduce, reduce): the path, the staging (float32 for
// half types, which accumulate in float32; PREMUL_SUM's factor applied to the staged copy, so
// that the REL range is the scaled data's and the caller's tensor is untouched until the
// result is written back) and the agreed bound.
ZcclBackend::StagedReduction ZcclBackend::stage_reduction(Device& dev, OpKind kind,
                                                          const char* what, at::Tensor& t,
                                                          const c10d::ReduceOp& op, int root,
                                                          const CallConfig& cfg) const {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  const auto cop = reduction_path(op, t.scalar_type(), n, cfg);
  Staged s(t, cop.has_value() || is_half(t.scalar_type()), is_premul_sum(op));
  premultiply_staged(s.buffer, op);
  const coll::Collective c =
      kind == OpKind::Reduce ? coll::Collective::Reduce : coll::Collective::AllReduce;
  const Agreement agreed =
      agree(dev, what, describe(kind, t.scalar_type(), n, reduce_code(op), root), &s.buffer, cfg,
            cop.has_value(), c);
  return StagedReduction{cop, s, agreed.error_bound, agreed.model};
}

Agreement ZcclBackend::agree(Device& dev, const char* what, const CallDescription& call,
                             const at::Tensor* data, const CallConfig& cfg, bool rel_needed,
                             std::optional<coll::Collective> sampled_as) const {
  std::optional<fz::FiniteRange> range;
  if (rel_needed && cfg.mode == BoundMode::Rel && data != nullptr && data->numel() > 0) {
    range = dev.value_range(data->contiguous(), cfg.threads);
  }
  const double sampled = sampled_as && rel_needed && data != nullptr
                             ? ratio_sample(dev, *sampled_as, *data, cfg, range)
                             : 0.0;
  return backend::agree(*comm_, what, call, cfg, range, rel_needed, false, sampled);
}

double ZcclBackend::ratio_sample(Device& dev, coll::Collective c, const at::Tensor& data,
                                 const CallConfig& cfg,
                                 const std::optional<fz::FiniteRange>& range) const {
  const uint64_t values = static_cast<uint64_t>(data.numel());
  if (!cfg.check_agreement || cfg.auto_ratio > 0.0 || dev.kind() != coll::Device::Cpu ||
      values == 0 || !is_compressible_dtype(data.scalar_type())) {
    return 0.0;
  }
  // Whether the choice depends on the ratio, before any pass over the data. The bound only
  // matters there by being 0 (then a reduction is exact whatever the ratio); a REL bound that
  // turns out 0 (constant data) costs a needless, cheap sample.
  coll::Config model = coll_config(cfg, cfg.mode == BoundMode::Lossless ? 0.0 : cfg.error_bound,
                                   AutoModel{std::max(1, cfg.threads), 0.0});
  model.min_compress_bytes = cfg.min_compress_bytes;
  if (!coll::ratio_matters(c, values * data.element_size(), comm_->size(), model)) return 0.0;

  // The bound this rank would compress with. REL on its own range (agree() found it): the
  // agreed range is at least as wide, its bound at least as loose, so the sample errs low.
  fz::CompressParams params;
  if (cfg.mode == BoundMode::Abs) {
    params.error_bound = cfg.error_bound;
  } else if (cfg.mode == BoundMode::Rel && range && range->any_finite) {
    params.error_bound = rel_bound(cfg.error_bound, range->min, range->max);
  }
  params.chunk_len = cfg.chunk_len;
  const uint64_t budget = coll::ratio_sample_values(values);
  const at::Tensor whole = data.contiguous();
  return fz::sample_ratio(whole.data_ptr(), compressed_dtype(whole.scalar_type()), values, params,
                          budget)
      .ratio();
}

void ZcclBackend::agree_coalesced(const char* what, OpKind kind, const c10d::ReduceOp* op,
                                  const std::vector<at::Tensor>& described,
                                  const CallConfig& cfg) const {
  std::vector<BatchItem> items;
  items.reserve(described.size());
  for (const at::Tensor& t : described) {
    items.push_back(BatchItem{static_cast<int>(t.scalar_type()), static_cast<uint64_t>(t.numel())});
  }
  agree_batch(*comm_, what, kind, op != nullptr ? reduce_code(*op) : -1, items, cfg);
}

// ------------------------------------------------------------------------------------------

void ZcclBackend::run_allreduce(Device& dev, at::Tensor& t, const c10d::ReduceOp& op,
                                const CallConfig& cfg) {
  // PREMUL_SUM: a SUM of the input scaled in the staged copy (stage_reduction).
  const uint64_t n = static_cast<uint64_t>(t.numel());
  auto [cop, s, eb, model] =
      stage_reduction(dev, OpKind::AllReduce, "all_reduce", t, op, -1, cfg);
  const bool chosen = cop.has_value();
  if (n == 0) return;
  const at::ScalarType type = s.buffer.scalar_type();
  const coll::Config cc = reduction_config(dev, cfg, eb, t.scalar_type(), model);
  const double ratio = auto_ratio_of(dev, cfg, model);
  const bool compress =
      chosen && coll::route(coll::Collective::AllReduce, n * s.buffer.element_size(),
                            comm_->size(), cc, dev.kind())
                    .compressed;
  const std::vector<HostArg> io = {{&s.buffer, true, true}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::AllReduce, type, io,
               [&](Device& d, const Pointers& p) {
                 d.allreduce(*comm_, p[0], n, compressed_dtype(type), *cop, cc, &stats);
               });
    record("all_reduce", stats, eb, ratio);
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->allreduce(transport::kInPlace, p[0], n, elem_type(type), reduce_kind(op, type));
    });
    if (op.op_ == c10d::ReduceOp::AVG) s.buffer.div_(comm_->size());
    // Chosen for compression, then sent exactly by the algorithm choice: the stats say so with
    // the bound that was in force, as the collectives' own exact fallback reports it.
    if (chosen) {
      record_exact("all_reduce", n * s.buffer.element_size(), eb, ratio);
    } else {
      record_exact("all_reduce", n * t.element_size());
    }
  }
  s.write_back();
}

void ZcclBackend::run_broadcast(Device& dev, at::Tensor& t, int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  Staged s(t, false);  // data movement: the tensor's own type (half streams for half tensors)
  // Only the root compresses, so a REL bound needs no agreement: the root's own range.
  const Agreement agreed =
      agree(dev, "broadcast", describe(OpKind::Broadcast, t.scalar_type(), n, -1, root),
            nullptr, cfg, false);
  const bool compress =
      compressed_path(t.scalar_type(), n, cfg) &&
      codec_pays(dev, coll::Collective::Broadcast, cfg, agreed.model);
  double eb = agreed.error_bound;
  if (n == 0) return;
  const bool at_root = comm_->rank() == root;
  // The compressed broadcast's root decodes its own stream (every rank the same bits), so a
  // host-staged root gets its buffer back too, unless owner_exact leaves it untouched.
  const bool root_decodes = compress && !cfg.owner_exact;
  const std::vector<HostArg> io = {{&s.buffer, at_root, !at_root || root_decodes}};
  if (compress) {
    if (at_root) eb = local_bound(dev, {s.buffer}, cfg);
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::Broadcast, s.buffer.scalar_type(), io,
               [&](Device& d, const Pointers& p) {
                 d.broadcast(*comm_, p[0], n, compressed_dtype(s.buffer.scalar_type()), root,
                             coll_config(cfg, eb, agreed.model), &stats);
               });
    record("broadcast", stats, at_root ? eb : received_bound(stats, cfg, eb));
  } else {
    const at::ScalarType type = s.buffer.scalar_type();
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->bcast(p[0], n, moved_as(type), root);
    });
    record_exact("broadcast", n * t.element_size());
  }
  s.write_back();
}

void ZcclBackend::run_reduce(Device& dev, at::Tensor& t, const c10d::ReduceOp& op, int root,
                             const CallConfig& cfg) {
  const bool at_root = comm_->rank() == root;
  // PREMUL_SUM: then a SUM of the staged, scaled copies; the root's tensor takes the result,
  // the others' stay as they were.
  const uint64_t n = static_cast<uint64_t>(t.numel());
  auto [cop, s, eb, model] = stage_reduction(dev, OpKind::Reduce, "reduce", t, op, root, cfg);
  const bool compress = cop.has_value();
  if (n == 0) return;
  const at::ScalarType type = s.buffer.scalar_type();
  const std::vector<HostArg> io = {{&s.buffer, true, at_root}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::Reduce, type, io,
               [&](Device& d, const Pointers& p) {
                 d.reduce(*comm_, p[0], n, compressed_dtype(type), *cop, root,
                          reduction_config(d, cfg, eb, t.scalar_type(), model), &stats);
               });
    record("reduce", stats, eb, auto_ratio_of(dev, cfg, model));
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->reduce(at_root ? transport::kInPlace : p[0], p[0], n, elem_type(type), reduce_kind(op, type),
                    root);
    });
    if (at_root && op.op_ == c10d::ReduceOp::AVG) s.buffer.div_(comm_->size());
    record_exact("reduce", n * t.element_size());
  }
  if (at_root) s.write_back();
}

void ZcclBackend::run_allgather(Device& dev, const at::Tensor& in, at::Tensor& flat_out,
                                const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(in.numel());
  const bool may = compressed_path(in.scalar_type(), n, cfg);
  Staged src(in, false);
  Staged dst(flat_out, false);
  const Agreement agreed =
      agree(dev, "all_gather", describe(OpKind::AllGather, in.scalar_type(), n), &src.buffer,
            cfg, may);
  const bool compress = may && codec_pays(dev, coll::Collective::AllGather, cfg, agreed.model);
  const double eb = agreed.error_bound;
  if (n == 0) return;
  const std::vector<HostArg> io = {{&src.buffer, true, false}, {&dst.buffer, false, true}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::AllGather, in.scalar_type(), io,
               [&](Device& d, const Pointers& p) {
                 d.allgather(*comm_, p[0], p[1], n, compressed_dtype(src.buffer.scalar_type()),
                             coll_config(cfg, eb, agreed.model), &stats);
               });
    record("all_gather", stats, eb);
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->allgather(p[0], p[1], n, moved_as(in.scalar_type()));
    });
    record_exact("all_gather", n * in.element_size());
  }
  dst.write_back();
}

void ZcclBackend::run_reduce_scatter(Device& dev, const at::Tensor& flat_in, at::Tensor& out,
                                     const c10d::ReduceOp& op, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(out.numel());
  const auto cop = reduction_path(op, out.scalar_type(), n, cfg);
  const bool compress = cop.has_value();
  const bool widen = compress || is_half(out.scalar_type());
  Staged src(flat_in, widen, is_premul_sum(op));  // an input: PREMUL_SUM scales a copy
  premultiply_staged(src.buffer, op);               // then a SUM
  Staged dst(out, widen);
  const Agreement agreed =
      agree(dev, "reduce_scatter",
            describe(OpKind::ReduceScatter, out.scalar_type(), n, reduce_code(op)), &src.buffer,
            cfg, compress, coll::Collective::ReduceScatter);
  const double eb = agreed.error_bound;
  if (n == 0) return;
  const at::ScalarType type = src.buffer.scalar_type();
  const std::vector<HostArg> io = {{&src.buffer, true, false}, {&dst.buffer, false, true}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::ReduceScatter, type, io,
               [&](Device& d, const Pointers& p) {
                 d.reduce_scatter(*comm_, p[0], p[1], n, compressed_dtype(type), *cop,
                                  reduction_config(d, cfg, eb, out.scalar_type(), agreed.model),
                                  &stats);
               });
    record("reduce_scatter", stats, eb, auto_ratio_of(dev, cfg, agreed.model));
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->reduce_scatter_block(p[0], p[1], n, elem_type(type), reduce_kind(op, type));
    });
    if (op.op_ == c10d::ReduceOp::AVG) dst.buffer.div_(comm_->size());
    record_exact("reduce_scatter", n * out.element_size());
  }
  dst.write_back();
}

void ZcclBackend::run_gather(Device& dev, const at::Tensor& in, at::Tensor* flat_out, int root,
                             const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(in.numel());
  const bool may = compressed_path(in.scalar_type(), n, cfg);
  Staged src(in, false);
  std::optional<Staged> dst;
  if (flat_out != nullptr) dst.emplace(*flat_out, false);
  const Agreement agreed =
      agree(dev, "gather", describe(OpKind::Gather, in.scalar_type(), n, -1, root), &src.buffer,
            cfg, may);
  const bool compress = may && codec_pays(dev, coll::Collective::Gather, cfg, agreed.model);
  const double eb = agreed.error_bound;
  if (n == 0) return;
  at::Tensor none;
  const std::vector<HostArg> io = {{&src.buffer, true, false},
                                   {dst ? &dst->buffer : &none, false, true}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::Gather, in.scalar_type(), io,
               [&](Device& d, const Pointers& p) {
                 d.gather(*comm_, p[0], p[1], n, compressed_dtype(src.buffer.scalar_type()), root,
                          coll_config(cfg, eb, agreed.model), &stats);
               });
    record("gather", stats, eb);
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& p) {
      comm_->gather(p[0], p[1], n, moved_as(in.scalar_type()), root);
    });
    record_exact("gather", n * in.element_size());
  }
  if (dst) dst->write_back();
}

void ZcclBackend::run_scatter(Device& dev, const std::vector<at::Tensor>& ins, at::Tensor& out,
                              int root, const CallConfig& cfg) {
  const uint64_t n = static_cast<uint64_t>(out.numel());
  Staged dst(out, false);
  const Agreement agreed =
      agree(dev, "scatter", describe(OpKind::Scatter, out.scalar_type(), n, -1, root), nullptr,
            cfg, false);
  const bool compress = compressed_path(out.scalar_type(), n, cfg) &&
                        codec_pays(dev, coll::Collective::Scatter, cfg, agreed.model);
  double eb = agreed.error_bound;
  if (n == 0) return;
  if (!compress) {
    // MPI_Scatter wants the blocks back to back; the uncompressed path pays that one copy.
    std::vector<at::Tensor> flat_parts;
    for (const auto& t : ins) flat_parts.push_back(t.reshape({-1}));
    at::Tensor flat = ins.empty() ? at::Tensor() : at::cat(flat_parts);
    on_host(dev, {{&flat, true, false}, {&dst.buffer, false, true}}, comm_->device_memory(),
            [&](const Pointers& p) {
              comm_->scatter(p[0], p[1], n, moved_as(out.scalar_type()), root);
            });
    record_exact("scatter", n * out.element_size());
    dst.write_back();
    return;
  }
  // The compressed path reads each block where it lies (a contiguous block of a type the codec
  // takes is not copied at all): packing a list of 64 MB blocks into one buffer took longer than
  // compressing it.
  std::vector<at::Tensor> staged;
  for (const auto& t : ins) staged.push_back(t.contiguous());
  if (!staged.empty()) eb = local_bound(dev, staged, cfg);
  std::vector<HostArg> io;
  for (auto& block : staged) io.push_back({&block, true, false});
  io.push_back({&dst.buffer, false, true});
  coll::Stats stats;
  compressed(dev, *cpu_, DeviceOp::Scatter, out.scalar_type(), io,
             [&](Device& d, const Pointers& p) {
               const std::vector<const void*> blocks(p.begin(), p.end() - 1);
               d.scatter(*comm_, blocks, p.back(), n, compressed_dtype(out.scalar_type()), root,
                         coll_config(cfg, eb, agreed.model), &stats);
             });
  record("scatter", stats, comm_->rank() == root ? eb : received_bound(stats, cfg, eb));
  dst.write_back();
}

void ZcclBackend::run_alltoall(Device& dev, const at::Tensor& in, at::Tensor& out,
                               const std::vector<size_t>& send_counts,
                               const std::vector<size_t>& recv_counts, const CallConfig& cfg) {
  const int p = comm_->size();
  std::vector<size_t> sd(p, 0), rd(p, 0);
  for (int r = 1; r < p; ++r) {
    sd[r] = sd[r - 1] + send_counts[r - 1];
    rd[r] = rd[r - 1] + recv_counts[r - 1];
  }
  // Counts differ per rank, so the decision to compress is taken on the largest payload, which
  // the agreement exchange returns along with the REL range (one message for both).
  const uint64_t mine = static_cast<uint64_t>(in.numel());
  const bool may_compress =
      is_compressible_dtype(in.scalar_type()) && cfg.algorithm != coll::Algorithm::Mpi;
  Staged src(in, false);
  CallDescription call = describe(OpKind::AllToAll, in.scalar_type(), mine);
  call.count_must_match = false;
  std::optional<fz::FiniteRange> range;
  if (may_compress && cfg.mode == BoundMode::Rel && mine > 0) {
    range = dev.value_range(src.buffer, cfg.threads);
  }
  const Agreement agreed =
      backend::agree(*comm_, "all_to_all", call, cfg, range, may_compress, /*largest_needed=*/true);
  if (cfg.check_agreement) agree_splits(*comm_, "all_to_all", send_counts, recv_counts);
  const bool compress =
      compressed_path(in.scalar_type(), agreed.largest_count, cfg) &&
      codec_pays(dev, coll::Collective::AllToAll, cfg, agreed.model);
  Staged dst(out, false);
  const std::vector<HostArg> io = {{&src.buffer, true, false}, {&dst.buffer, false, true}};
  if (compress) {
    coll::Stats stats;
    compressed(dev, *cpu_, DeviceOp::AllToAll, in.scalar_type(), io,
               [&](Device& d, const Pointers& p) {
                 d.alltoallv(*comm_, p[0], send_counts, sd, p[1], recv_counts, rd,
                             compressed_dtype(src.buffer.scalar_type()),
                             coll_config(cfg, agreed.error_bound, agreed.model), &stats);
               });
    record("all_to_all", stats, agreed.error_bound);
  } else {
    on_host(dev, io, comm_->device_memory(), [&](const Pointers& ptr) {
      comm_->alltoallv(ptr[0], send_counts, sd, ptr[1], recv_counts, rd,
                       moved_as(in.scalar_type()));
    });
    record_exact("all_to_all", mine * in.element_size());
  }
  dst.write_back();
}

}  // namespace zccl::backend
