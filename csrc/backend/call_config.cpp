#include "call_config.h"

namespace zccl::backend {
namespace {
thread_local std::optional<CallConfig> g_override;  // per thread, so no lock is needed
}  // namespace

void set_thread_override(std::optional<CallConfig> config) { g_override = std::move(config); }
const std::optional<CallConfig>& thread_override() { return g_override; }

}  // namespace zccl::backend
