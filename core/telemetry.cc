#include "core/telemetry.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#include "core/mig.h"

namespace arbiter::core {
namespace {

using GpuKey = std::pair<int64_t, int32_t>;  // (node id, GPU index).

// "3g.40gb" -> (3, 40); (-1, -1) when the name has another shape.
std::pair<int32_t, int32_t> ProfileSize(absl::string_view name) {
  std::pair<int32_t, int32_t> size{-1, -1};
  absl::ConsumeSuffix(&name, "+me");
  std::vector<absl::string_view> parts = absl::StrSplit(name, '.');
  if (parts.size() != 2) return size;
  absl::string_view compute = parts[0];
  absl::string_view memory = parts[1];
  if (!absl::ConsumeSuffix(&compute, "g") || !absl::ConsumeSuffix(&memory, "gb")) return size;
  if (!absl::SimpleAtoi(compute, &size.first) || !absl::SimpleAtoi(memory, &size.second)) {
    return {-1, -1};
  }
  return size;
}

// Whether an instance the source names `reported` is one of `profile`: the
// same name, or the same compute slices with memory within 1 GB (DCGM may
// report "7g.79gb" for a "7g.80gb" instance).
bool SameProfile(absl::string_view profile, absl::string_view reported) {
  if (profile == reported) return true;
  auto [c1, m1] = ProfileSize(profile);
  auto [c2, m2] = ProfileSize(reported);
  return c1 > 0 && c1 == c2 && std::abs(m1 - m2) <= 1;
}

bool Holds(const HeldMember& m, absl::Time t) { return m.from <= t && t < m.until; }

int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

// Accumulates in milli x milliseconds, and mW x ms for energy, so that the
// integer results are exact until the final division.
struct Accumulator {
  int64_t allocated = 0;
  int64_t sampled = 0;
  int64_t used = 0;
  int64_t energy = 0;
  int32_t peak_busy = 0;
  int64_t peak_memory = 0;
};

constexpr int64_t kMwMsPerMwh = 3'600'000;

}  // namespace

std::vector<MemberUsage> RollUp(absl::Span<const HeldMember> members,
                                absl::Span<const GpuSample> samples, absl::Time from,
                                absl::Time to) {
  absl::flat_hash_map<GpuKey, std::vector<size_t>> on_gpu;
  for (size_t i = 0; i < members.size(); ++i) {
    for (int32_t g : members[i].gpu_indices) on_gpu[{members[i].node_id, g}].push_back(i);
  }
  std::vector<Accumulator> acc(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    const HeldMember& m = members[i];
    const absl::Time a = std::max(from, m.from);
    const absl::Time b = std::min(to, m.until);
    if (a < b) {
      acc[i].allocated = m.gpu_milli * static_cast<int64_t>(m.gpu_indices.size()) * Millis(b - a);
    }
  }

  // Each reading stands until the next of its series, its interval, or
  // `to`, whichever comes first: readings closer than their interval never
  // count the same time twice. Readings before `from` count for the part of
  // their span in the window.
  // The readings before `to`, by series and then time: one sort instead of
  // a container per series.
  std::vector<size_t> by_series;
  by_series.reserve(samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].at < to) by_series.push_back(i);
  }
  auto series_and_time = [&](size_t i) {
    const GpuSample& s = samples[i];
    return std::tuple(s.node_id, s.gpu_index, s.mig_instance, s.at);
  };
  std::sort(by_series.begin(), by_series.end(),
            [&](size_t a, size_t b) { return series_and_time(a) < series_and_time(b); });
  std::vector<absl::Duration> span(samples.size());
  for (size_t k = 0; k < by_series.size(); ++k) {
    const GpuSample& s = samples[by_series[k]];
    absl::Duration d = std::min(s.interval, to - s.at);
    if (k + 1 < by_series.size()) {
      const GpuSample& next = samples[by_series[k + 1]];
      if (next.node_id == s.node_id && next.gpu_index == s.gpu_index &&
          next.mig_instance == s.mig_instance) {
        d = std::min(d, next.at - s.at);
      }
    }
    span[by_series[k]] = d;
  }
  // The time reading `si` stands within [from, to).
  auto within = [&](size_t si) {
    const absl::Time a = std::max(samples[si].at, from);
    const absl::Time b = std::min(samples[si].at + span[si], to);
    return b > a ? b - a : absl::ZeroDuration();
  };
  // Distinct instance series per GPU, to average over for MIG members.
  absl::flat_hash_map<GpuKey, std::vector<std::pair<int32_t, std::string>>> instances;
  for (size_t si = 0; si < samples.size(); ++si) {
    const GpuSample& s = samples[si];
    if (s.mig_instance < 0 || within(si) == absl::ZeroDuration()) continue;
    auto& seen = instances[{s.node_id, s.gpu_index}];
    std::pair<int32_t, std::string> series{s.mig_instance, s.mig_profile};
    if (std::find(seen.begin(), seen.end(), series) == seen.end()) seen.push_back(series);
  }

  for (size_t si = 0; si < samples.size(); ++si) {
    const GpuSample& s = samples[si];
    auto it = on_gpu.find({s.node_id, s.gpu_index});
    if (it == on_gpu.end()) continue;
    const int64_t dt = Millis(within(si));
    if (dt <= 0) continue;
    int64_t all_milli = 0;    // Every holder: the split of power.
    int64_t whole_milli = 0;  // Non-MIG holders: the split of a GPU's busy time.
    for (size_t i : it->second) {
      if (!Holds(members[i], s.at)) continue;
      all_milli += members[i].gpu_milli;
      if (members[i].mig_profile.empty()) whole_milli += members[i].gpu_milli;
    }
    if (all_milli == 0) continue;
    const int32_t busy = s.busy_milli();
    for (size_t i : it->second) {
      const HeldMember& m = members[i];
      if (!Holds(m, s.at)) continue;
      Accumulator& a = acc[i];
      if (s.mig_instance < 0) {
        if (s.power_mw >= 0) a.energy += s.power_mw * dt * m.gpu_milli / all_milli;
        if (!m.mig_profile.empty()) continue;
        if (busy >= 0) {
          a.sampled += m.gpu_milli * dt;
          a.used += busy * dt * m.gpu_milli / whole_milli;
          a.peak_busy = std::max(a.peak_busy, busy);
        }
        a.peak_memory = std::max(a.peak_memory, s.fb_used_mib);
        continue;
      }
      if (m.mig_profile.empty() || !SameProfile(m.mig_profile, s.mig_profile)) continue;
      int64_t series = 0;
      for (const auto& [id, profile] : instances[{s.node_id, s.gpu_index}]) {
        if (SameProfile(m.mig_profile, profile)) ++series;
      }
      if (busy >= 0) {
        a.sampled += m.gpu_milli * dt / series;
        a.used += busy * dt * m.gpu_milli / 1000 / series;
        a.peak_busy = std::max(a.peak_busy, busy);
      }
      a.peak_memory = std::max(a.peak_memory, s.fb_used_mib);
    }
  }

  std::vector<MemberUsage> out(members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    out[i].request_id = members[i].request_id;
    out[i].member = members[i].member;
    out[i].allocated_milli_seconds = acc[i].allocated / 1000;
    out[i].sampled_milli_seconds = std::min(acc[i].sampled, acc[i].allocated) / 1000;
    out[i].used_milli_seconds = acc[i].used / 1000;
    out[i].peak_busy_milli = acc[i].peak_busy;
    out[i].peak_memory_mib = acc[i].peak_memory;
    out[i].energy_mwh = acc[i].energy / kMwMsPerMwh;
  }
  return out;
}

absl::string_view IdleActionName(IdleAction a) {
  switch (a) {
    case IdleAction::kReport:
      return "report";
    case IdleAction::kNotify:
      return "notify";
    case IdleAction::kRelease:
      return "release";
  }
  return "report";
}

IdleAction IdleActionFromName(absl::string_view name) {
  if (name == "notify") return IdleAction::kNotify;
  if (name == "release") return IdleAction::kRelease;
  return IdleAction::kReport;
}

std::vector<IdlePolicy> DefaultIdlePolicies() {
  using WC = WorkloadClass;
  return {
      // Training that stops computing holds GPUs others wait for.
      {WC::kTraining, 50, absl::Hours(1), IdleAction::kNotify, absl::Minutes(15)},
      // Serving headroom idles by design: shown, never acted on.
      {WC::kInference, 20, absl::Hours(4), IdleAction::kReport, absl::Minutes(15)},
      {WC::kBatchAnalytics, 50, absl::Minutes(30), IdleAction::kRelease, absl::Minutes(10)},
      {WC::kExperimentation, 50, absl::Hours(1), IdleAction::kRelease, absl::Minutes(15)},
  };
}

std::vector<IdlePolicy> IdlePoliciesInForce(absl::Span<const IdlePolicy> stored) {
  std::map<WorkloadClass, IdlePolicy> by_class;
  for (const IdlePolicy& p : DefaultIdlePolicies()) by_class[p.workload_class] = p;
  for (const IdlePolicy& p : stored) by_class[p.workload_class] = p;
  std::vector<IdlePolicy> out;
  for (const auto& [cls, p] : by_class) out.push_back(p);
  return out;
}

absl::Status ValidateIdlePolicy(const IdlePolicy& p) {
  if (p.workload_class == WorkloadClass::kUnspecified) {
    return absl::InvalidArgumentError("policy.workload_class: required");
  }
  if (p.threshold_milli < 1 || p.threshold_milli > 1000) {
    return absl::InvalidArgumentError("policy.threshold_milli: must be in 1..1000");
  }
  if (p.window < absl::Minutes(1) || p.window > absl::Hours(24 * 7)) {
    return absl::InvalidArgumentError("policy.window_seconds: must be 60 s to 7 days");
  }
  if (p.notice < absl::ZeroDuration() || p.notice > absl::Hours(24)) {
    return absl::InvalidArgumentError("policy.notice_seconds: must be 0 to 1 day");
  }
  return absl::OkStatus();
}

const IdlePolicy& IdlePolicyFor(WorkloadClass c, absl::Span<const IdlePolicy> policies) {
  static const std::vector<IdlePolicy>* const kDefaults =
      new std::vector<IdlePolicy>(DefaultIdlePolicies());
  for (const IdlePolicy& p : policies) {
    if (p.workload_class == c) return p;
  }
  for (const IdlePolicy& p : *kDefaults) {
    if (p.workload_class == c) return p;
  }
  return kDefaults->front();
}

std::optional<IdleFinding> JudgeIdle(const HeldMember& first, const IdlePolicy& policy,
                                     int64_t allocated, int64_t sampled, int32_t peak) {
  if (allocated == 0 || sampled * 10 < allocated * 9 || peak >= policy.threshold_milli) {
    return std::nullopt;
  }
  IdleFinding f;
  f.request_id = first.request_id;
  f.team = first.team;
  f.pool = first.pool;
  f.workload_class = first.workload_class;
  f.peak_busy_milli = peak;
  f.idle_milli_seconds = allocated;
  f.action = policy.action;
  if (f.action == IdleAction::kRelease && !first.preemptible) f.action = IdleAction::kNotify;
  if (first.guaranteed) f.action = IdleAction::kReport;
  return f;
}

std::vector<IdleFinding> FindIdle(absl::Span<const HeldMember> members,
                                  absl::Span<const GpuSample> samples,
                                  absl::Span<const IdlePolicy> policies, absl::Time now) {
  // Members by request, in request order; samples by GPU, so that each
  // request's rollup reads the samples of its own GPUs only.
  std::map<int64_t, std::vector<const HeldMember*>> by_request;
  for (const HeldMember& m : members) by_request[m.request_id].push_back(&m);
  std::map<GpuKey, std::vector<GpuSample>> on_gpu;
  for (const GpuSample& s : samples) on_gpu[{s.node_id, s.gpu_index}].push_back(s);

  std::vector<IdleFinding> out;
  for (const auto& [request_id, group] : by_request) {
    const HeldMember& first = *group.front();
    const IdlePolicy& policy = IdlePolicyFor(first.workload_class, policies);
    const absl::Time start = now - policy.window;
    std::vector<HeldMember> held;
    bool whole_window = true;
    for (const HeldMember* m : group) {
      whole_window = whole_window && m->from <= start && m->until >= now;
      held.push_back(*m);
    }
    if (!whole_window) continue;
    std::set<GpuKey> gpus;
    for (const HeldMember& m : held) {
      for (int32_t g : m.gpu_indices) gpus.insert({m.node_id, g});
    }
    std::vector<GpuSample> own;
    for (const GpuKey& g : gpus) {
      auto it = on_gpu.find(g);
      if (it != on_gpu.end()) own.insert(own.end(), it->second.begin(), it->second.end());
    }
    std::vector<MemberUsage> usage = RollUp(held, own, start, now);
    int64_t allocated = 0;
    int64_t sampled = 0;
    int32_t peak = 0;
    for (const MemberUsage& u : usage) {
      allocated += u.allocated_milli_seconds;
      sampled += u.sampled_milli_seconds;
      peak = std::max(peak, u.peak_busy_milli);
    }
    std::optional<IdleFinding> f = JudgeIdle(first, policy, allocated, sampled, peak);
    if (f.has_value()) out.push_back(*std::move(f));
  }
  return out;
}

RightSizeAdvice AdviseRightSize(const HeldMember& member, const MemberUsage& usage,
                                const GpuModel& model, int32_t headroom_milli) {
  RightSizeAdvice advice;
  advice.request_id = member.request_id;
  advice.member = member.member;
  advice.current_milli = member.gpu_milli;
  advice.peak_busy_milli = usage.peak_busy_milli;
  advice.peak_memory_mib = usage.peak_memory_mib;
  advice.advised_milli = member.gpu_milli;
  advice.advised_memory_mib = member.gpu_memory_mib;
  // Too little evidence (under half the time sampled): no advice.
  if (usage.allocated_milli_seconds == 0 ||
      usage.sampled_milli_seconds * 2 < usage.allocated_milli_seconds ||
      usage.peak_memory_mib <= 0) {
    return advice;
  }
  // Compute needed, in milli of a whole GPU. A MIG instance's busy fraction
  // is of the instance; a shared GPU's is of the whole GPU, and counts
  // against each tenant (conservative).
  int64_t need_milli = member.mig_profile.empty()
                           ? std::min<int64_t>(usage.peak_busy_milli, member.gpu_milli)
                           : int64_t{usage.peak_busy_milli} * member.gpu_milli / 1000;
  if (member.exclusive) need_milli = usage.peak_busy_milli;
  const int64_t scale = 1000 + headroom_milli;
  need_milli = (need_milli * scale + 999) / 1000;
  const int64_t need_memory = (usage.peak_memory_mib * scale + 999) / 1000;

  int64_t best_milli = member.gpu_milli;
  std::string best_profile;
  int64_t best_memory = member.gpu_memory_mib;
  if (model.mig_capable) {
    for (const MigProfile& p : model.mig_profiles) {
      if (p.media_extensions || p.memory_mib < need_memory) continue;
      const int64_t milli = MigMilli(model.mig_profiles, p);
      if (milli < need_milli || milli >= best_milli) continue;
      best_milli = milli;
      best_profile = p.name;
      best_memory = p.memory_mib;
    }
  }
  if (best_profile.empty()) {
    constexpr int64_t kStep = 50;
    const int64_t milli = std::max<int64_t>(kStep, (need_milli + kStep - 1) / kStep * kStep);
    if (milli < best_milli && need_memory <= model.memory_mib) {
      best_milli = milli;
      best_memory = need_memory;
    }
  }
  advice.advised_mig_profile = best_profile;
  advice.advised_milli = best_milli;
  advice.advised_memory_mib = best_memory;
  advice.saving_milli = member.gpu_milli - best_milli;
  return advice;
}

void AddUsage(MemberUsage& sum, const MemberUsage& u) {
  sum.allocated_milli_seconds += u.allocated_milli_seconds;
  sum.sampled_milli_seconds += u.sampled_milli_seconds;
  sum.used_milli_seconds += u.used_milli_seconds;
  sum.energy_mwh += u.energy_mwh;
  sum.peak_busy_milli = std::max(sum.peak_busy_milli, u.peak_busy_milli);
  sum.peak_memory_mib = std::max(sum.peak_memory_mib, u.peak_memory_mib);
}

}  // namespace arbiter::core
