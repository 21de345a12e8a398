#include "core/externality.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

#include "core/budget.h"
#include "core/status_macros.h"
#include "core/validate.h"

namespace arbiter::core {
namespace {

using Wide = __int128;
constexpr int64_t kMicrosPerSecond = 1000000;

int64_t Gpus(const HeldMember& m) { return static_cast<int64_t>(m.gpu_indices.size()); }
int64_t MilliOf(const HeldMember& m) { return m.gpu_milli * Gpus(m); }

bool ActiveAt(const HeldMember& m, absl::Time t) { return m.from <= t && t < m.until; }
bool ActiveAt(const WaitingRequest& w, absl::Time t) { return w.from <= t && t < w.until; }
bool SoftShared(const HeldMember& m) { return !m.exclusive && m.mig_profile.empty(); }

// The times in [from, to) where what is held or waiting may change.
std::vector<absl::Time> Boundaries(absl::Span<const HeldMember> held,
                                   absl::Span<const WaitingRequest> waiting, absl::Time from,
                                   absl::Time to) {
  std::set<absl::Time> at = {from, to};
  auto add = [&](absl::Time t) {
    if (t > from && t < to) at.insert(t);
  };
  for (const HeldMember& m : held) {
    add(m.from);
    add(m.until);
  }
  for (const WaitingRequest& w : waiting) {
    add(w.from);
    add(w.until);
  }
  return {at.begin(), at.end()};
}

// The members held at each of a rising series of instants, kept as the
// instants advance: each member enters and leaves the set once, so a sweep
// over the boundaries of many members costs the members active at each,
// not all of them.
class ActiveSweep {
 public:
  explicit ActiveSweep(absl::Span<const HeldMember> held) : held_(held), order_(held.size()) {
    std::iota(order_.begin(), order_.end(), size_t{0});
    std::stable_sort(order_.begin(), order_.end(),
                     [&](size_t a, size_t b) { return held_[a].from < held_[b].from; });
  }
  // The members active at `t`. REQUIRES: `t` not before the last call's.
  const std::vector<const HeldMember*>& At(absl::Time t) {
    while (next_ < order_.size() && held_[order_[next_]].from <= t) {
      active_.push_back(&held_[order_[next_++]]);
    }
    std::erase_if(active_, [t](const HeldMember* m) { return !ActiveAt(*m, t); });
    return active_;
  }

 private:
  absl::Span<const HeldMember> held_;
  std::vector<size_t> order_;  // By admission.
  size_t next_ = 0;
  std::vector<const HeldMember*> active_;
};

// Milli-GPU microseconds per team, turned into milli-GPU seconds at the end.
class Accumulator {
 public:
  void Add(const std::string& team, Wide milli_micros) { sums_[team] += milli_micros; }
  std::map<std::string, int64_t> MilliSeconds() const {
    std::map<std::string, int64_t> out;
    for (const auto& [team, v] : sums_) {
      const int64_t ms = static_cast<int64_t>(v / kMicrosPerSecond);
      if (ms > 0) out[team] = ms;
    }
    return out;
  }

 private:
  std::map<std::string, Wide> sums_;
};

// Adds `amount` milli held for `micros`, split among `weights` by weight.
void AddShares(Accumulator& acc, const std::map<std::string, int64_t>& weights, int64_t amount,
               int64_t micros) {
  if (amount <= 0) return;
  Wide total = 0;
  for (const auto& [team, w] : weights) total += w;
  if (total <= 0) return;
  for (const auto& [team, w] : weights) {
    acc.Add(team, static_cast<Wide>(amount) * w * micros / total);
  }
}

// What each team held in a pool at one instant: in all, and of that the part
// lent to a class the pool takes only as a borrower.
struct Holding {
  int64_t milli = 0;
  int64_t lent_milli = 0;
};

// `active`: the members held at that instant.
std::map<std::string, Holding> HeldByTeam(absl::Span<const HeldMember* const> active,
                                          const std::string& pool, uint32_t lent_classes) {
  std::map<std::string, Holding> out;
  for (const HeldMember* held : active) {
    const HeldMember& m = *held;
    if (m.pool != pool) continue;
    Holding& h = out[m.team];
    h.milli += MilliOf(m);
    if (lent_classes & (1u << static_cast<int>(m.workload_class))) h.lent_milli += MilliOf(m);
  }
  return out;
}

// Each team's borrowed capacity (teams other than `skip`): its use beyond its
// nominal quota, or, when more, what a serving pool lent it.
std::map<std::string, int64_t> Excess(const std::map<std::string, Holding>& held_by_team,
                                      const std::map<std::string, int64_t>& nominal,
                                      const std::string& skip) {
  std::map<std::string, int64_t> out;
  for (const auto& [team, h] : held_by_team) {
    if (team == skip) continue;
    auto it = nominal.find(team);
    const int64_t over = std::max(h.milli - (it == nominal.end() ? 0 : it->second), h.lent_milli);
    if (over > 0) out[team] = over;
  }
  return out;
}

int64_t Sum(const std::map<std::string, int64_t>& m) {
  int64_t s = 0;
  for (const auto& [k, v] : m) s += v;
  return s;
}

struct Pressure {
  Accumulator borrowed, co_tenancy, admission;
  std::map<std::string, std::set<int64_t>> requests;
};

// The pressure on the victim over one segment [a, a + micros), in which
// `active` are held.
void AddSegment(const AttributionInputs& in, absl::Span<const HeldMember* const> active,
                absl::Time a, int64_t micros, Pressure& p) {
  const std::string& victim = in.slo.team;
  const std::map<std::string, Holding> held = HeldByTeam(active, in.slo.pool, in.lent_classes);
  auto nominal_it = in.nominal_milli.find(victim);
  const int64_t victim_nominal = nominal_it == in.nominal_milli.end() ? 0 : nominal_it->second;
  auto held_it = held.find(victim);
  const int64_t shortfall =
      std::max<int64_t>(0, victim_nominal - (held_it == held.end() ? 0 : held_it->second.milli));

  // Borrowed: capacity others held beyond their nominal, up to the shortfall.
  const std::map<std::string, int64_t> excess = Excess(held, in.nominal_milli, victim);
  const int64_t borrowed = std::min(shortfall, Sum(excess));
  AddShares(p.borrowed, excess, borrowed, micros);

  // Admission delay: lower-priority holds while a victim request waited.
  int64_t waiting_milli = 0;
  int32_t top_priority = INT32_MIN;
  for (const WaitingRequest& w : in.waiting) {
    if (!ActiveAt(w, a)) continue;
    waiting_milli += w.gpu_milli;
    top_priority = std::max(top_priority, w.priority);
  }
  std::map<std::string, int64_t> blockers;
  if (waiting_milli > 0) {
    for (const HeldMember* held_member : active) {
      const HeldMember& m = *held_member;
      if (m.team == victim || m.pool != in.slo.pool) continue;
      if (m.priority >= top_priority) continue;
      blockers[m.team] += MilliOf(m);
      p.requests[m.team].insert(m.request_id);
    }
  }
  const int64_t delayed = std::max<int64_t>(0, std::min(waiting_milli, shortfall) - borrowed);
  AddShares(p.admission, blockers, std::min(delayed, Sum(blockers)), micros);

  // Co-tenancy: soft-shared neighbours on the victim's soft-shared GPUs.
  std::set<std::pair<int64_t, int32_t>> victim_gpus;
  for (const HeldMember* m : active) {
    if (m->team != victim || m->pool != in.slo.pool || !SoftShared(*m)) continue;
    for (int32_t g : m->gpu_indices) victim_gpus.insert({m->node_id, g});
  }
  for (const HeldMember* held_member : active) {
    const HeldMember& m = *held_member;
    if (m.team == victim || !SoftShared(m)) continue;
    int64_t shared = 0;
    for (int32_t g : m.gpu_indices) shared += victim_gpus.count({m.node_id, g});
    if (shared == 0) continue;
    p.co_tenancy.Add(m.team, static_cast<Wide>(m.gpu_milli) * shared * micros);
    p.requests[m.team].insert(m.request_id);
  }
  // Borrowers' requests: those of teams over nominal, held in the pool.
  if (borrowed > 0) {
    for (const HeldMember* m : active) {
      if (m->pool == in.slo.pool && excess.contains(m->team)) {
        p.requests[m->team].insert(m->request_id);
      }
    }
  }
}

int64_t ReservedCost(const AttributionInputs& in) {
  int64_t total = 0;
  for (const HeldMember& m : in.held) {
    if (m.team != in.slo.team || m.pool != in.slo.pool) continue;
    auto price = in.micros_per_gpu_hour.find(m.gpu_model);
    if (price == in.micros_per_gpu_hour.end()) continue;
    const absl::Time from = std::max(m.from, in.window.start);
    const absl::Time to = std::min(m.until, in.window.end);
    if (to > from) total += CostMicros(price->second, MilliOf(m), to - from);
  }
  return total;
}

}  // namespace

absl::string_view PressureKindName(PressureKind k) {
  switch (k) {
    case PressureKind::kBorrowed:
      return "borrowed";
    case PressureKind::kCoTenancy:
      return "co_tenancy";
    case PressureKind::kAdmissionDelay:
      return "admission_delay";
  }
  return "unknown";
}

absl::Status ValidateSlo(const Slo& slo) {
  ARBITER_RETURN_IF_ERROR(ValidateName("slo.team", slo.team));
  ARBITER_RETURN_IF_ERROR(ValidateName("slo.service", slo.service, kMaxServiceNameLength));
  ARBITER_RETURN_IF_ERROR(ValidateName("slo.pool", slo.pool));
  ARBITER_RETURN_IF_ERROR(
      ValidateRange("slo.p99_target_us", slo.p99_target_us, 1, kMaxLatencyMicros));
  if (slo.window < absl::Minutes(1) || slo.window > absl::Hours(24) ||
      slo.window % absl::Seconds(1) != absl::ZeroDuration()) {
    return absl::InvalidArgumentError("slo.window_seconds: must be whole seconds from 60 to 86400");
  }
  // Bounded so that a day of penalties stays far inside 64 bits.
  return ValidateRange("slo.penalty_micros_per_minute", slo.penalty_micros_per_minute, 0,
                       kMaxMicros / (24 * 60));
}

absl::Status ValidateLatencyWindowNames(const LatencyWindow& w) {
  ARBITER_RETURN_IF_ERROR(ValidateName("window.team", w.team));
  return ValidateName("window.service", w.service, kMaxServiceNameLength);
}

absl::Status ValidateLatencyWindow(const LatencyWindow& w, const Slo& slo) {
  ARBITER_RETURN_IF_ERROR(ValidateLatencyWindowNames(w));
  if (w.end - w.start != slo.window) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window: from window.start to window.end must be the SLO's ",
        absl::FormatDuration(slo.window), "; it is ", absl::FormatDuration(w.end - w.start)));
  }
  ARBITER_RETURN_IF_ERROR(ValidateRange("window.p50_us", w.p50_us, 0, kMaxLatencyMicros));
  ARBITER_RETURN_IF_ERROR(ValidateRange("window.p99_us", w.p99_us, 0, kMaxLatencyMicros));
  if (w.p99_us < w.p50_us) {
    return absl::InvalidArgumentError("window.p99_us: must not be below window.p50_us");
  }
  return ValidateRange("window.requests_milli_per_second", w.requests_milli_per_second, 0,
                       kMaxRequestsMilliPerSecond);
}

int64_t Attribution::attributed_micros() const {
  return std::accumulate(charges_micros.begin(), charges_micros.end(), int64_t{0});
}

std::vector<int64_t> SplitProRata(int64_t total, absl::Span<const int64_t> weights) {
  std::vector<int64_t> parts(weights.size(), 0);
  Wide sum = 0;
  for (int64_t w : weights) sum += w;
  if (sum <= 0 || total <= 0) return parts;
  std::vector<std::pair<Wide, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const Wide exact = static_cast<Wide>(total) * weights[i];
    parts[i] = static_cast<int64_t>(exact / sum);
    given += parts[i];
    remainders.push_back({exact % sum, i});
  }
  // Largest remainders first; ties to the lower index.
  std::sort(remainders.begin(), remainders.end(), [](const auto& x, const auto& y) {
    return x.first != y.first ? x.first > y.first : x.second < y.second;
  });
  for (size_t k = 0; given < total; ++k, ++given) ++parts[remainders[k].second];
  return parts;
}

Attribution AttributeIncident(const AttributionInputs& in) {
  Attribution out;
  const absl::Duration length = in.window.end - in.window.start;
  if (in.slo.penalty_micros_per_minute > 0) {
    const int64_t minutes = absl::ToInt64Seconds(absl::Ceil(length, absl::Minutes(1))) / 60;
    out.cost_micros = in.slo.penalty_micros_per_minute * minutes;
    out.cost_basis = "penalty";
  } else {
    out.cost_micros = ReservedCost(in);
    out.cost_basis = "reserved_cost";
  }

  Pressure p;
  const std::vector<absl::Time> at =
      Boundaries(in.held, in.waiting, in.window.start, in.window.end);
  ActiveSweep sweep(in.held);
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    AddSegment(in, sweep.At(at[i]), at[i], absl::ToInt64Microseconds(at[i + 1] - at[i]), p);
  }
  std::map<std::string, Interference> by_team;
  for (const auto& [team, ms] : p.borrowed.MilliSeconds())
    by_team[team].borrowed_milli_seconds = ms;
  for (const auto& [team, ms] : p.co_tenancy.MilliSeconds()) {
    by_team[team].co_tenancy_milli_seconds = ms;
  }
  for (const auto& [team, ms] : p.admission.MilliSeconds()) {
    by_team[team].admission_delay_milli_seconds = ms;
  }
  std::vector<int64_t> weights;
  for (auto& [team, f] : by_team) {
    f.team = team;
    const std::set<int64_t>& ids = p.requests[team];
    f.request_ids.assign(ids.begin(), ids.end());
    out.causes.push_back(f);
    weights.push_back(f.total());
  }
  out.charges_micros = SplitProRata(out.cost_micros, weights);
  return out;
}

std::map<std::string, int64_t> BorrowedMilliSeconds(
    absl::Span<const HeldMember> held, const std::string& pool, uint32_t lent_classes,
    const std::map<std::string, int64_t>& nominal_milli, absl::Time from, absl::Time to) {
  Accumulator acc;
  const std::vector<absl::Time> at = Boundaries(held, {}, from, to);
  ActiveSweep sweep(held);
  for (size_t i = 0; i + 1 < at.size(); ++i) {
    const int64_t micros = absl::ToInt64Microseconds(at[i + 1] - at[i]);
    for (const auto& [team, over] :
         Excess(HeldByTeam(sweep.At(at[i]), pool, lent_classes), nominal_milli, "")) {
      acc.Add(team, static_cast<Wide>(over) * micros);
    }
  }
  return acc.MilliSeconds();
}

int64_t HeldMilliSeconds(const HeldMember& m, absl::Time from, absl::Time to) {
  const absl::Time a = std::max(m.from, from);
  const absl::Time b = std::min(m.until, to);
  if (b <= a) return 0;
  const Wide micros = absl::ToInt64Microseconds(b - a);
  return static_cast<int64_t>(static_cast<Wide>(MilliOf(m)) * micros / kMicrosPerSecond);
}

std::vector<ExternalityCharge> ChargesOf(const Incident& incident) {
  std::vector<ExternalityCharge> out;
  const Attribution& a = incident.attribution;
  int64_t credited = 0;
  for (size_t i = 0; i < a.causes.size(); ++i) {
    if (a.charges_micros[i] == 0) continue;
    out.push_back(
        {incident.id, a.causes[i].team, a.charges_micros[i], a.causes[i], incident.recorded_at});
    credited += a.charges_micros[i];
  }
  if (credited > 0) {
    out.push_back(
        {incident.id, incident.slo.team, -credited, Interference{}, incident.recorded_at});
  }
  return out;
}

}  // namespace arbiter::core
