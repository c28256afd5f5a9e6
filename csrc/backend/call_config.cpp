#include "call_config.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>

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

CallConfig resolve_for_call(const CallConfig& defaults) {
  CallConfig c = resolve_for_thread(defaults);
  if (c.threads <= 0) c.threads = automatic_threads();
  return c;
}

namespace {
int positive_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);  // OMP_NUM_THREADS may be a list: its first entry
  return end != v && n > 0 && n < 1 << 16 ? static_cast<int>(n) : 0;
}
}  // namespace

int automatic_threads() {
  // Computed once: the environment and the affinity mask are the launcher's, fixed at start.
  static const int threads = [] {
    if (const int omp = positive_env("OMP_NUM_THREADS")) return omp;
    cpu_set_t set;
    CPU_ZERO(&set);
    const int cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
    int local = 1;  // ranks on this host, as the launchers say it
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"}) {
      if (const int n = positive_env(name)) {
        local = n;
        break;
      }
    }
    return std::max(1, cores / local);
  }();
  return threads;
}

}  // namespace zccl::backend
