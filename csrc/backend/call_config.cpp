#include "call_config.h"

namespace zccl::backend {
namespace {
thread_local std::optional<CallOverride> g_override;  // per thread, so no lock is needed
}  // namespace

CallConfig CallOverride::apply(const CallConfig& base) const {
  CallConfig c = base;
  if (fields & kErrorBound) c.error_bound = values.error_bound;
  if (fields & kMode) c.mode = values.mode;
  if (fields & kThreads) c.threads = values.threads;
  if (fields & kChunkLen) c.chunk_len = values.chunk_len;
  if (fields & kMinCompressBytes) c.min_compress_bytes = values.min_compress_bytes;
  if (fields & kAlgorithm) c.algorithm = values.algorithm;
  if (fields & kCheckAgreement) c.check_agreement = values.check_agreement;
  if (fields & kOwnerExact) c.owner_exact = values.owner_exact;
  return c;
}

void set_thread_override(std::optional<CallOverride> config) { g_override = std::move(config); }
const std::optional<CallOverride>& thread_override() { return g_override; }

CallConfig resolve_for_thread(const CallConfig& defaults) {
  return g_override ? g_override->apply(defaults) : defaults;
}

}  // namespace zccl::backend
