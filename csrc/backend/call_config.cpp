#include "call_config.h"

namespace zccl::backend {
namespace {
// The override is held here and only here. The backend reads it on the thread that issues each
// collective, where it must not take the GIL; Python's config() and current_options() reach it
// through the bindings, so a Python-side copy would only be a second state to keep in step.
// Per thread, so no lock is needed.
thread_local std::optional<CallOverride> g_override;
}  // namespace

CallConfig CallOverride::apply(const CallConfig& base) const {
  CallConfig c = base;
  for (const Field& f : fields) f.setting->write(*f.setting, c, f.value);
  return c;
}

void set_thread_override(std::optional<CallOverride> config) { g_override = std::move(config); }
const std::optional<CallOverride>& thread_override() { return g_override; }

CallConfig resolve_for_thread(const CallConfig& defaults) {
  return g_override ? g_override->apply(defaults) : defaults;
}

}  // namespace zccl::backend
