#include "settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>

#include "call_config.h"

namespace zccl::backend {
namespace {

// Row builders: each ties a row to its CallConfig member, so reads and writes need no switch.

template <auto Member>
Setting real(const char* name, const char* env, double min, const char* doc) {
  Setting s{name, env, SettingType::Real, doc};
  s.min = min;
  s.read = [](const Setting&, const CallConfig& c) -> SettingValue { return c.*Member; };
  s.write = [](const Setting&, CallConfig& c, const SettingValue& v) { c.*Member = std::get<double>(v); };
  return s;
}

// `max`: a documented upper bound; without one, the member type's limit (not in messages).
template <auto Member>
Setting integer(const char* name, const char* env, int64_t min, std::optional<int64_t> max,
                int64_t multiple_of, const char* note, const char* doc) {
  using T = std::remove_reference_t<decltype(std::declval<CallConfig&>().*Member)>;
  constexpr auto limit = std::min<uint64_t>(std::numeric_limits<T>::max(),
                                            std::numeric_limits<int64_t>::max());
  Setting s{name, env, SettingType::Int, doc};
  s.min = static_cast<double>(min);
  s.max = static_cast<double>(max.value_or(static_cast<int64_t>(limit)));
  s.max_in_message = max.has_value();
  s.multiple_of = multiple_of;
  s.note = note;
  s.read = [](const Setting&, const CallConfig& c) -> SettingValue {
    return static_cast<int64_t>(c.*Member);
  };
  s.write = [](const Setting&, CallConfig& c, const SettingValue& v) {
    c.*Member = static_cast<T>(std::get<int64_t>(v));  // checked() kept it within T
  };
  return s;
}

template <auto Member>
Setting flag(const char* name, const char* env, const char* doc) {
  Setting s{name, env, SettingType::Bool, doc};
  s.read = [](const Setting&, const CallConfig& c) -> SettingValue { return c.*Member; };
  s.write = [](const Setting&, CallConfig& c, const SettingValue& v) { c.*Member = std::get<bool>(v); };
  return s;
}

// An enum member whose values are 0, 1, ... in the order of `names`.
template <auto Member>
Setting enum_choice(const char* name, const char* env, std::vector<std::string> names,
                    const char* doc) {
  using E = std::remove_reference_t<decltype(std::declval<CallConfig&>().*Member)>;
  Setting s{name, env, SettingType::Choice, doc};
  s.choices = std::move(names);
  s.read = [](const Setting& self, const CallConfig& c) -> SettingValue {
    return self.choices.at(static_cast<size_t>(c.*Member));
  };
  s.write = [](const Setting& self, CallConfig& c, const SettingValue& v) {
    const std::string& chosen = std::get<std::string>(v);
    for (size_t i = 0; i < self.choices.size(); ++i) {
      if (self.choices[i] == chosen) c.*Member = static_cast<E>(i);
    }
  };
  return s;
}

std::vector<std::string> algorithm_names(std::initializer_list<coll::Algorithm> algorithms) {
  std::vector<std::string> names;
  for (coll::Algorithm a : algorithms) names.emplace_back(coll::algorithm_name(a));
  return names;
}

std::vector<Setting> make_table() {
  using coll::Algorithm;
  Setting baseline{"baseline", "ZCCL_BASELINE", SettingType::Choice,
                   R"(`"mpi"` or `"cprp2p"`: overrides `algorithm` (benchmarks))"};
  baseline.choices = algorithm_names({Algorithm::Mpi, Algorithm::CprP2P});
  baseline.none_allowed = true;
  // A CallConfig holds the algorithm that runs: the baseline is folded into it, never kept.
  baseline.read = [](const Setting&, const CallConfig&) -> SettingValue { return std::monostate{}; };
  baseline.write = [](const Setting&, CallConfig& c, const SettingValue& v) {
    if (const auto* name = std::get_if<std::string>(&v)) c.algorithm = coll::algorithm_from_name(*name);
  };

  std::vector<Setting> table;
  table.push_back(real<&CallConfig::error_bound>("error_bound", "ZCCL_ERROR_BOUND", 0.0,
                                                 "bound per compression"));
  table.push_back(enum_choice<&CallConfig::mode>(
      "mode", "ZCCL_MODE", {"abs", "rel", "lossless"},
      R"(`"abs"`, `"rel"` to the value range agreed across ranks, or `"lossless"` (bit-exact; )"
      R"(`error_bound` ignored; with `algorithm="auto"` reductions then take MPI's exact )"
      R"(allreduce, data movement and `algorithm="ring"` run the lossless codec))"));
  table.push_back(integer<&CallConfig::threads>(
      "threads", "ZCCL_THREADS", 0, std::nullopt, 1, "0 = automatic",
      "compression threads per rank, also inside the pipelined ring, broadcast and scatter "
      "(0: `OMP_NUM_THREADS` if set, else the cores this process may use divided by the ranks "
      "on its host); may differ between ranks: `algorithm=\"auto\"` then assumes the "
      "smallest count (one thread with `check_agreement=False`)"));
  table.push_back(integer<&CallConfig::chunk_len>(
      "chunk_size", "ZCCL_CHUNK_SIZE", fz::kBlockLen, fz::kMaxChunkLen, fz::kBlockLen, "",
      "chunk of the (pipelined) compressor, values"));
  table.push_back(integer<&CallConfig::min_compress_bytes>(
      "min_compress_bytes", "ZCCL_MIN_COMPRESS_BYTES", 0, std::nullopt, 1, "",
      "smaller payloads go through MPI uncompressed"));
  table.push_back(enum_choice<&CallConfig::algorithm>(
      "algorithm", "ZCCL_ALGORITHM",
      algorithm_names({Algorithm::Auto, Algorithm::Ring, Algorithm::RecursiveDoubling,
                       Algorithm::Mpi, Algorithm::CprP2P, Algorithm::HalvingDoubling}),
      "`auto`, `ring`, `recursive_doubling`, `halving_doubling`, `mpi`, `cprp2p`"));
  table.push_back(std::move(baseline));  // after algorithm: a baseline overrides it
  table.push_back(flag<&CallConfig::check_agreement>(
      "check_agreement", "ZCCL_CHECK_AGREEMENT",
      "agree on what each collective is before it runs (see Agreement); a mismatch raises on "
      "every rank"));
  table.push_back(flag<&CallConfig::owner_exact>(
      "owner_exact", "ZCCL_OWNER_EXACT",
      "broadcast / all_gather: the root / owner keeps exact values (outputs then differ across "
      "ranks within `eb`)"));
  table.push_back(flag<&CallConfig::integer_ring>(
      "integer_ring", "ZCCL_INTEGER_RING",
      "ring all_reduce (SUM/AVG, lossy): hops add quantisation codes as integers, `threads` "
      "segments at a time; `false`: decode, add in floating point and recompress at each hop, "
      "chunks coded by `threads` threads (same bound, `p * eb`; same bits for any `threads`)"));
  table.push_back(enum_choice<&CallConfig::wait>(
      "wait", "ZCCL_WAIT", {"auto", "spin", "sleep"},
      R"(how a rank waits for its transfers: `"spin"` polls and yields, never sleeping )"
      R"((lowest latency; fast links), `"sleep"` backs off into sleeps of up to 200 us (leaves )"
      R"(the cores to other ranks), `"auto"`: `"spin"` when `threads` times the ranks on this )"
      R"(host fit the cores this process may use, else `"sleep"`)"));
  table.push_back(real<&CallConfig::link_gbps>(
      "link_gbps", "ZCCL_LINK_GBPS", 1e-3,
      R"(network bandwidth per rank in Gbit/s that `algorithm="auto"` assumes: it picks the )"
      R"(all_reduce algorithm by it, and broadcast, scatter, gather, all_gather and all_to_all )"
      R"(go uncompressed where the codec (about 3 GB/s per thread) cannot keep up with the )"
      R"(link, e.g. at 100 with one thread; set it to your network's, or let each group )"
      R"(measure it: `ZCCL_MEASURE_LINK=1` (see Configuration))"));
  table.push_back(real<&CallConfig::link_latency_us>(
      "link_latency_us", "ZCCL_LINK_LATENCY_US", 0.0,
      R"(one-way network latency in microseconds that `algorithm="auto"` assumes (the )"
      R"(all_reduce choice for small and medium messages); measured with `link_gbps`)"));
  table.push_back(real<&CallConfig::auto_ratio>(
      "auto_ratio", "ZCCL_AUTO_RATIO", 0.0,
      R"(compression ratio `algorithm="auto"` assumes in choosing a reduction's algorithm )"
      R"((all_reduce, reduce, reduce_scatter); 0: measured on each call's data where the ratio )"
      R"(could change the choice (every rank codes a sample of 1/16 of its payload, 2048 to )"
      R"(65536 values, and the ranks take the smallest ratio; opt-in, see "The data's )"
      R"(compression ratio"))"));
  return table;
}

// "0" for 0.0, "65536" for 65536.0: the integer settings' bounds.
std::string integer_text(double v) { return std::to_string(static_cast<int64_t>(v)); }

// A real setting's bound as Python prints short floats: "0", "0.001" (link_gbps' minimum read
// ">= 0" when it went through integer_text, next to the 0.0005 it refused).
std::string real_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = make_table();
  return table;
}

const Setting* find_setting(std::string_view name) {
  for (const Setting& s : settings()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

SettingValue Setting::default_value() const { return read(*this, CallConfig{}); }

std::string Setting::requirement() const {
  switch (type) {
    case SettingType::Real: return "must be finite and >= " + real_text(min);
    case SettingType::Int: {
      if (max_in_message) {
        return "must be a multiple of " + std::to_string(multiple_of) + " in [" +
               integer_text(min) + ", " + integer_text(max) + "]";
      }
      return "must be an int >= " + integer_text(min) + (note.empty() ? "" : " (" + note + ")");
    }
    case SettingType::Bool: return "must be a bool";
    case SettingType::Choice: {
      // Written as Python writes the tuple of allowed values.
      std::string text = none_allowed ? "(None" : "(";
      for (const std::string& c : choices) text += (text.size() > 1 ? ", '" : "'") + c + "'";
      return "must be one of " + text + ")";
    }
  }
  return "is unknown";
}

SettingError Setting::type_error() const {
  switch (type) {
    case SettingType::Real: return SettingError(name + " must be a real number", true);
    case SettingType::Bool: return SettingError(name + " " + requirement(), true);
    default: return SettingError(name + " " + requirement(), false);
  }
}

SettingValue Setting::checked(const SettingValue& given) const {
  const auto out_of_range = [this] { return SettingError(name + " " + requirement(), false); };
  switch (type) {
    case SettingType::Real: {
      double v = 0.0;
      if (const auto* d = std::get_if<double>(&given)) v = *d;
      else if (const auto* i = std::get_if<int64_t>(&given)) v = static_cast<double>(*i);
      else throw type_error();
      if (!std::isfinite(v) || v < min) throw out_of_range();
      return v;
    }
    case SettingType::Int: {
      const auto* i = std::get_if<int64_t>(&given);
      if (i == nullptr) throw type_error();
      const double v = static_cast<double>(*i);
      if (v < min || v > max || *i % multiple_of != 0) throw out_of_range();
      return *i;
    }
    case SettingType::Bool:
      if (!std::holds_alternative<bool>(given)) throw type_error();
      return given;
    case SettingType::Choice:
      if (std::holds_alternative<std::monostate>(given) && none_allowed) return given;
      if (const auto* s = std::get_if<std::string>(&given)) {
        for (const std::string& c : choices) {
          if (c == *s) return given;
        }
      }
      throw type_error();
  }
  throw type_error();
}

}  // namespace zccl::backend
