// Sparse COO all_reduce (SUM), exact, the way Gloo does it: each rank coalesces its tensor, the
// ranks all-gather their non-zero counts, then their indices and values (uncompressed: sparse
// gradients are usually embeddings' rows, whose values are few and whose indices must be exact),
// and every rank sums the p sparse tensors in rank order, so every rank holds the same bits.
// Cost: 3 allgather(v)s; bytes ~ sum over ranks of nnz * (sparse_dim * 8 + dense row bytes).
#include "zccl_backend.h"

#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "agreement.h"
#include "routing.h"

namespace zccl::backend {

void ZcclBackend::run_sparse_allreduce(at::Tensor& t, const CallConfig& cfg) {
  const int p = comm_->size();
  const at::Tensor mine = t.coalesce();
  // The agreement compares dtype and the dense element count; the exact shape and the
  // sparse/dense split go in the metadata exchange below.
  const CallDescription call =
      describe_call(OpKind::SparseAllReduce, static_cast<int>(t.scalar_type()), static_cast<uint64_t>(t.numel()),
                    static_cast<int>(c10d::ReduceOp::SUM));
  backend::agree(*comm_, "all_reduce (sparse)", call, cfg, std::nullopt, false);

  const int64_t sparse_dim = mine.sparse_dim();
  const at::Tensor indices = mine._indices().contiguous();  // [sparse_dim, nnz] int64
  const at::Tensor values = mine._values().contiguous();    // [nnz, dense dims...]
  const int64_t nnz = mine._nnz();
  int64_t row_elems = 1;  // values per non-zero (the dense dimensions)
  for (int64_t d = sparse_dim; d < t.dim(); ++d) row_elems *= t.size(d);

  // Metadata: nnz, then the shape signature (sparse_dim, ndim, sizes...) checked across ranks.
  std::vector<int64_t> meta = {nnz, sparse_dim, t.dim()};
  for (int64_t d = 0; d < t.dim(); ++d) meta.push_back(t.size(d));
  const size_t m = meta.size();
  std::vector<int64_t> all(static_cast<size_t>(p) * m);
  comm_->allgather(meta.data(), all.data(), m, transport::ElemType::Int64);
  std::vector<size_t> nnzs(p);
  for (int q = 0; q < p; ++q) {
    for (size_t k = 1; k < m; ++k) {
      if (all[q * m + k] != meta[k]) {
        throw std::invalid_argument("zccl: all_reduce (sparse): rank " + std::to_string(q) +
                                    " passes a sparse tensor of another shape or sparse_dim than rank " +
                                    std::to_string(comm_->rank()) + " (shape " +
                                    c10::str(t.sizes()) + ", sparse_dim " + std::to_string(sparse_dim) + ")");
      }
    }
    nnzs[q] = static_cast<size_t>(all[q * m]);
  }
  const size_t total = std::accumulate(nnzs.begin(), nnzs.end(), size_t{0});

  // Indices travel as [nnz, sparse_dim] rows so each rank's block is contiguous.
  const at::Tensor my_idx = indices.t().contiguous();
  at::Tensor all_idx = at::empty({static_cast<int64_t>(total), sparse_dim}, indices.options());
  std::vector<size_t> idx_counts(p), val_counts(p);
  for (int q = 0; q < p; ++q) {
    idx_counts[q] = nnzs[q] * static_cast<size_t>(sparse_dim);
    val_counts[q] = nnzs[q] * static_cast<size_t>(row_elems);
  }
  comm_->allgatherv(my_idx.data_ptr(), idx_counts[comm_->rank()], all_idx.data_ptr(), idx_counts, transport::ElemType::Int64);
  std::vector<int64_t> value_shape = {static_cast<int64_t>(total)};
  for (int64_t d = sparse_dim; d < t.dim(); ++d) value_shape.push_back(t.size(d));
  at::Tensor all_val = at::empty(value_shape, values.options());
  comm_->allgatherv(values.data_ptr(), val_counts[comm_->rank()], all_val.data_ptr(), val_counts,
                    elem_type(values.scalar_type()));

  // Sum in rank order: the concatenation of every rank's entries, coalesced (duplicates add up).
  at::Tensor sum = at::_sparse_coo_tensor_unsafe(all_idx.t().contiguous(), all_val, t.sizes(), t.options())
                       .coalesce();
  t.copy_(sum);
  record_exact("all_reduce (sparse)", static_cast<uint64_t>(values.numel()) * values.element_size());
}

}  // namespace zccl::backend
