#include "core/chargeback.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/budget.h"

namespace arbiter::core {
namespace {

using Wide = __int128;
// Pool, model, class, spot, burst.
using LineKey = std::tuple<std::string, std::string, WorkloadClass, bool, bool>;

int64_t MemberCost(const HeldMember& m, const ChargebackInputs& in, const PriceBook& book) {
  auto cls = in.pool_classes.find(m.pool);
  if (cls == in.pool_classes.end()) return 0;
  const absl::Time from = std::max(m.from, in.from);
  const absl::Time to = std::min(m.until, in.to);
  if (to <= from) return 0;
  const LatencyClass priced = m.spot ? LatencyClass::kSpot : cls->second;
  const std::optional<int64_t> price =
      m.burst ? book.BurstAt(m.gpu_model, priced, from) : book.At(m.gpu_model, priced, from);
  if (!price.has_value()) return 0;
  return CostMicros(*price, m.gpu_milli * static_cast<int64_t>(m.gpu_indices.size()), to - from);
}

void AddLine(Statement& s, const StatementLine& l) {
  s.reserved_milli_seconds += l.reserved_milli_seconds;
  s.sampled_milli_seconds += l.sampled_milli_seconds;
  s.used_milli_seconds += l.used_milli_seconds;
  s.reserved_cost_micros += l.reserved_cost_micros;
  s.idle_cost_micros += l.idle_cost_micros;
  s.energy_mwh += l.energy_mwh;
  s.energy_measured_mwh += l.energy_measured_mwh;
  s.energy_estimated_mwh += l.energy_estimated_mwh;
}

// Milliwatt-hours a GPU model of `tdp_watts` draws at full power over
// `milli_seconds` milli-GPU seconds: milli x s x W / (1000 x 3600) Wh.
int64_t TdpEnergyMwh(int64_t milli_seconds, int64_t tdp_watts) {
  return static_cast<int64_t>(static_cast<Wide>(milli_seconds) * tdp_watts / 3600);
}

// Lines of every team from the allocations and their telemetry.
std::map<std::string, std::map<LineKey, StatementLine>> LinesByTeam(const ChargebackInputs& in) {
  const PriceBook book(in.prices);
  std::map<std::string, std::map<LineKey, StatementLine>> out;
  for (const HeldMember& m : in.held) {
    const int64_t reserved = HeldMilliSeconds(m, in.from, in.to);
    if (reserved == 0) continue;
    StatementLine& line = out[m.team][{m.pool, m.gpu_model, m.workload_class, m.spot, m.burst}];
    line.pool = m.pool;
    line.gpu_model = m.gpu_model;
    line.workload_class = m.workload_class;
    line.spot = m.spot;
    line.burst = m.burst;
    line.reserved_milli_seconds += reserved;
    line.reserved_cost_micros += MemberCost(m, in, book);
    int64_t sampled = 0;
    auto u = in.usage.find({m.request_id, m.member});
    if (u != in.usage.end()) {
      sampled = std::min(reserved, u->second.sampled_milli_seconds);
      line.sampled_milli_seconds += u->second.sampled_milli_seconds;
      line.used_milli_seconds += u->second.used_milli_seconds;
      line.energy_measured_mwh += u->second.energy_mwh;
    }
    // Time no telemetry covered: the TDP estimate (0 for an unknown model).
    auto tdp = in.tdp_watts.find(m.gpu_model);
    if (tdp != in.tdp_watts.end()) {
      line.energy_estimated_mwh += TdpEnergyMwh(reserved - sampled, tdp->second);
    }
    line.energy_mwh = line.energy_measured_mwh + line.energy_estimated_mwh;
  }
  for (auto& [team, lines] : out) {
    for (auto& [key, l] : lines) {
      const int64_t idle = std::max<int64_t>(0, l.sampled_milli_seconds - l.used_milli_seconds);
      l.idle_cost_micros =
          static_cast<int64_t>(static_cast<Wide>(l.reserved_cost_micros) *
                               std::min(idle, l.reserved_milli_seconds) / l.reserved_milli_seconds);
    }
  }
  return out;
}

// Borrowed milli-seconds per team, summed over the pools.
std::map<std::string, int64_t> Borrowed(const ChargebackInputs& in) {
  std::set<std::string> pools;
  for (const HeldMember& m : in.held) pools.insert(m.pool);
  std::map<std::string, int64_t> out;
  for (const std::string& pool : pools) {
    std::map<std::string, int64_t> nominal;
    for (const auto& [key, milli] : in.nominal_milli) {
      if (key.first == pool) nominal[key.second] = milli;
    }
    auto lent = in.lent_classes.find(pool);
    const uint32_t lent_classes = lent == in.lent_classes.end() ? 0 : lent->second;
    for (const auto& [team, ms] :
         BorrowedMilliSeconds(in.held, pool, lent_classes, nominal, in.from, in.to)) {
      out[team] += ms;
    }
  }
  return out;
}

}  // namespace

PriceBook::PriceBook(absl::Span<const Price> prices) {
  for (const Price& p : prices) {
    prices_[{p.gpu_model, p.latency_class}][p.effective_from] = p.micros_per_gpu_hour;
    burst_prices_[{p.gpu_model, p.latency_class}][p.effective_from] =
        p.burst_micros_per_gpu_hour > 0 ? p.burst_micros_per_gpu_hour : p.micros_per_gpu_hour;
  }
}

namespace {

// The version of (model, class) in `book` in force at `at`.
std::optional<int64_t> InForce(
    const std::map<std::pair<std::string, LatencyClass>, std::map<absl::Time, int64_t>>& book,
    const std::string& model, LatencyClass latency_class, absl::Time at) {
  auto it = book.find({model, latency_class});
  if (it == book.end()) return std::nullopt;
  auto version = it->second.upper_bound(at);
  if (version == it->second.begin()) return std::nullopt;
  return std::prev(version)->second;
}

}  // namespace

std::optional<int64_t> PriceBook::BurstAt(const std::string& model, LatencyClass latency_class,
                                          absl::Time at) const {
  return InForce(burst_prices_, model, latency_class, at);
}

std::optional<int64_t> PriceBook::At(const std::string& model, LatencyClass latency_class,
                                     absl::Time at) const {
  return InForce(prices_, model, latency_class, at);
}

int64_t ProRataBudget(int64_t monthly_limit_micros, absl::Time from, absl::Time to) {
  int64_t total = 0;
  for (absl::Time month = MonthStart(from); month < to; month = NextMonthStart(month)) {
    const absl::Time next = NextMonthStart(month);
    const absl::Time a = std::max(month, from);
    const absl::Time b = std::min(next, to);
    if (b <= a) continue;
    total += static_cast<int64_t>(static_cast<Wide>(monthly_limit_micros) *
                                  absl::ToInt64Seconds(b - a) / absl::ToInt64Seconds(next - month));
  }
  return total;
}

std::vector<Statement> BuildStatements(const ChargebackInputs& in) {
  std::map<std::string, Statement> by_team;
  for (const std::string& t : in.teams) by_team[t].team = t;
  for (auto& [team, lines] : LinesByTeam(in)) {
    Statement& s = by_team[team];
    s.team = team;
    for (auto& [key, line] : lines) {
      AddLine(s, line);
      s.lines.push_back(std::move(line));
    }
  }
  for (const auto& [team, ms] : Borrowed(in)) {
    by_team[team].team = team;
    by_team[team].borrowed_milli_seconds = ms;
  }
  std::map<std::string, std::set<int64_t>> caused, suffered;
  for (const ExternalityCharge& c : in.charges) {
    Statement& s = by_team[c.team];
    s.team = c.team;
    if (c.micros >= 0) {
      s.externality_charged_micros += c.micros;
      caused[c.team].insert(c.incident_id);
    } else {
      s.externality_credited_micros -= c.micros;
      suffered[c.team].insert(c.incident_id);
    }
  }
  std::map<std::string, const Budget*> budgets;
  for (const Budget& b : in.budgets) budgets[b.team] = &b;
  std::vector<Statement> out;
  for (auto& [team, s] : by_team) {
    s.from = in.from;
    s.to = in.to;
    s.incidents_caused = static_cast<int64_t>(caused[team].size());
    s.incidents_suffered = static_cast<int64_t>(suffered[team].size());
    s.net_cost_micros =
        s.reserved_cost_micros + s.externality_charged_micros - s.externality_credited_micros;
    auto b = budgets.find(team);
    if (b != budgets.end()) {
      s.budget_micros = ProRataBudget(b->second->hard_limit_micros, in.from, in.to);
      s.remainder_micros = s.budget_micros - s.net_cost_micros;
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<HourPoint> HourlyReserved(absl::Span<const HeldMember> held, const std::string& team,
                                      absl::Time from, absl::Time to) {
  std::vector<HourPoint> out;
  for (absl::Time h = from; h < to; h += absl::Hours(1)) out.push_back({h, 0, 0});
  // Each member visits only the hours it overlaps.
  for (const HeldMember& m : held) {
    if (!team.empty() && m.team != team) continue;
    const absl::Time start = std::max(m.from, from);
    const absl::Time end = std::min(m.until, to);
    if (end <= start) continue;
    for (size_t i = static_cast<size_t>((start - from) / absl::Hours(1));
         i < out.size() && out[i].hour < end; ++i) {
      out[i].reserved_milli_seconds +=
          HeldMilliSeconds(m, out[i].hour, std::min(out[i].hour + absl::Hours(1), to));
    }
  }
  return out;
}

}  // namespace arbiter::core
