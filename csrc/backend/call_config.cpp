#include "call_config.h"

#include <c10/util/Exception.h>
#include <sched.h>
#include <strings.h>

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

namespace {
int positive_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);  // OMP_NUM_THREADS may be a list: its first entry
  return end != v && n > 0 && n < 1 << 16 ? static_cast<int>(n) : 0;
}

// The cores this process may use and the ranks on its host, as the launchers say it. Computed
// once: the environment and the affinity mask are the launcher's, fixed at start.
struct HostShare {
  int cores = 1;
  int local_ranks = 1;
};
const HostShare& host_share() {
  static const HostShare share = [] {
    HostShare h;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0) h.cores = std::max(1, CPU_COUNT(&set));
    for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "LOCAL_WORLD_SIZE", "MPI_LOCALNRANKS"}) {
      if (const int n = positive_env(name)) {
        h.local_ranks = n;
        break;
      }
    }
    return h;
  }();
  return share;
}

// OpenMP threads that spin while they wait take the cores the other ranks' threads need when a
// host is oversubscribed: measured on 2 cores, 2 ranks with threads=2 ran a 64 MB ring all_reduce
// 40x slower (808 vs 21 ms) unless OMP_WAIT_POLICY=passive. Said once per process.
void warn_if_oversubscribed(int threads) {
  const HostShare& h = host_share();
  if (threads <= 1 || threads * h.local_ranks <= h.cores) return;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  if (policy != nullptr && strcasecmp(policy, "passive") == 0) return;
  TORCH_WARN_ONCE("zccl: threads=", threads, " on each of ", h.local_ranks,
                  " rank(s) oversubscribes the ", h.cores,
                  " core(s) of this host; OpenMP threads that spin while waiting can then slow "
                  "the collectives many times over. Use fewer threads (threads=0 picks cores / "
                  "ranks) or start the ranks with OMP_WAIT_POLICY=passive.");
}
}  // namespace

CallConfig resolve_for_call(const CallConfig& defaults) {
  CallConfig c = resolve_for_thread(defaults);
  if (c.threads <= 0) c.threads = automatic_threads();
  warn_if_oversubscribed(c.threads);
  return c;
}

transport::WaitPolicy wait_policy(const CallConfig& c) {
  switch (c.wait) {
    case WaitMode::Spin: return transport::WaitPolicy::Spin;
    case WaitMode::Sleep: return transport::WaitPolicy::Sleep;
    case WaitMode::Auto: break;
  }
  const HostShare& h = host_share();
  const int64_t want = static_cast<int64_t>(std::max(1, c.threads)) * h.local_ranks;
  return want <= h.cores ? transport::WaitPolicy::Spin : transport::WaitPolicy::Sleep;
}

int automatic_threads() {
  static const int threads = [] {
    if (const int omp = positive_env("OMP_NUM_THREADS")) return omp;
    const HostShare& h = host_share();
    return std::max(1, h.cores / h.local_ranks);
  }();
  return threads;
}

}  // namespace zccl::backend
