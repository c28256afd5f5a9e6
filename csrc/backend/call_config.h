// Per-call configuration of the zccl backend: the group's defaults, optionally overridden for a
// block of code by the Python context manager (a thread-local override on the calling thread).
// Each member's initializer is its setting's default; the rest of each setting (its name, range,
// environment variable, documentation) is its row in settings.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "../collectives/collectives.h"
#include "../transport/transport.h"
#include "settings.h"

namespace zccl::backend {

// In the order of the "mode" setting's choices (settings.cpp).
enum class BoundMode : uint8_t {
  Abs,  // error_bound is absolute
  Rel,  // error_bound is relative to the value range, agreed across ranks before compressing
  Lossless,  // bit-exact: error_bound is ignored (0), chunks go through the lossless codec
};

// In the order of the "wait" setting's choices (settings.cpp).
enum class WaitMode : uint8_t {
  Auto,   // Spin when this host's ranks times their threads fit its cores, else Sleep
  Spin,   // transport::WaitPolicy::Spin: poll and yield, never sleep (lowest latency)
  Sleep,  // transport::WaitPolicy::Sleep: spin briefly, then sleep with a capped backoff
};

struct CallConfig {
  double error_bound = 1e-4;
  BoundMode mode = BoundMode::Rel;
  int threads = 0;
  uint32_t chunk_len = fz::kDefaultChunkLen;
  size_t min_compress_bytes = 64 * 1024;
  coll::Algorithm algorithm = coll::Algorithm::Auto;
  // Agree before each collective on what it is (op, reduce op, root, dtype, counts, the settings
  // below): a disagreement raises on every rank instead of hanging or a silent wrong answer.
  bool check_agreement = true;
  // Broadcast and all_gather: the owner of a block keeps its exact values instead of taking the
  // decoded ones every other rank holds (outputs then differ across ranks within the bound).
  bool owner_exact = false;
  // Ring all_reduce (SUM/AVG, lossy): add quantisation codes as integers at each hop (one
  // quantisation per value, one thread) instead of decode, add and recompress
  // (coll::Config::integer_ring; README, "Ring hop cost"). Opt-in: see the README for why.
  bool integer_ring = false;
  // How a rank waits for its transfers (backoff.h): polling without sleeping keeps up with fast
  // links, sleeping leaves the cores to the other ranks of an oversubscribed host.
  WaitMode wait = WaitMode::Auto;
  // The network algorithm="auto" assumes (coll::Config::link_gbps, link_latency_us).
  double link_gbps = 1.0;
  double link_latency_us = 25.0;
  // The compression ratio algorithm="auto" assumes for the reductions (5: the model's fixed
  // assumption, coll::kAssumedRatio); 0: measured on each call's data where it could change the
  // choice (coll::ratio_matters, fz::sample_ratio; the ranks' smallest sample). Not the default:
  // on the emulated cluster the measured ratio moved the model's recursive-doubling/ring
  // crossover to where it measured slower (README, "The data's compression ratio").
  double auto_ratio = 5.0;
};

// Some settings laid over a group's defaults (a Python `config()` block), in the order of the
// settings table, each at most once. The fields are the table's rows, so adding a setting needs
// no change here.
struct CallOverride {
  struct Field {
    const Setting* setting;
    SettingValue value;  // allowed by the setting (Setting::checked)
  };
  std::vector<Field> fields;

  CallConfig apply(const CallConfig& base) const;
};

// Sets (or clears, with nullopt) the override for collectives issued from this thread. The only
// copy of it: Python's config() blocks read and restore it through the bindings.
void set_thread_override(std::optional<CallOverride> config);
const std::optional<CallOverride>& thread_override();
// The configuration a collective issued from this thread on a group with `defaults` uses.
// The configuration in force on this thread: `defaults` with the thread's override applied.
CallConfig resolve_for_thread(const CallConfig& defaults);
// What a call runs with: resolve_for_thread, and threads = 0 resolved to automatic_threads().
CallConfig resolve_for_call(const CallConfig& defaults);
// Compression threads per rank when the setting is 0: OMP_NUM_THREADS if set, else the cores in
// this process's affinity mask divided by the ranks on its host (OMPI_COMM_WORLD_LOCAL_SIZE,
// LOCAL_WORLD_SIZE or MPI_LOCALNRANKS; 1 when none is set), at least 1. Never oversubscribes a
// host whose launcher says how many ranks it runs.
int automatic_threads();
// The transport's wait policy for a call resolved by resolve_for_call (threads > 0): `wait`, with
// Auto resolved to Spin when threads * (ranks on this host) <= the cores this process may use
// (each polling thread then has a core of its own), else Sleep.
transport::WaitPolicy wait_policy(const CallConfig& c);

}  // namespace zccl::backend
