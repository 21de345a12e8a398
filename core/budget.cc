#include "core/budget.h"

#include <algorithm>

#include "absl/time/civil_time.h"

namespace arbiter::core {

absl::Time MonthStart(absl::Time t) {
  const absl::CivilMonth month = absl::ToCivilMonth(t, absl::UTCTimeZone());
  return absl::FromCivil(month, absl::UTCTimeZone());
}

absl::Time NextMonthStart(absl::Time t) {
  const absl::CivilMonth month = absl::ToCivilMonth(t, absl::UTCTimeZone());
  return absl::FromCivil(month + 1, absl::UTCTimeZone());
}

namespace {

std::optional<int64_t> InForce(const std::map<absl::Time, int64_t>* history, absl::Time at) {
  if (history == nullptr) return std::nullopt;
  auto it = history->upper_bound(at);  // First price that starts after `at`.
  if (it == history->begin()) return std::nullopt;
  return std::prev(it)->second;
}

}  // namespace

std::optional<int64_t> PriceAt(const State& state, const std::string& model,
                               LatencyClass latency_class, absl::Time at) {
  return InForce(state.PriceHistory(model, latency_class), at);
}

std::optional<int64_t> BurstPriceAt(const State& state, const std::string& model,
                                    LatencyClass latency_class, absl::Time at) {
  return InForce(state.BurstPriceHistory(model, latency_class), at);
}

int64_t CostMicros(int64_t micros_per_gpu_hour, int64_t gpu_milli, absl::Duration held) {
  if (held <= absl::ZeroDuration() || micros_per_gpu_hour <= 0 || gpu_milli <= 0) return 0;
  // micros/hour x milli / 1000 x seconds / 3600, in 128 bits, rounded up.
  const __int128 numerator = static_cast<__int128>(micros_per_gpu_hour) * gpu_milli *
                             absl::ToInt64Seconds(absl::Ceil(held, absl::Seconds(1)));
  const __int128 denominator = 1000 * 3600;
  return static_cast<int64_t>((numerator + denominator - 1) / denominator);
}

LatencyClass PricedClass(const Pool& pool, const CapacityRequestSpec& spec) {
  return spec.spot ? LatencyClass::kSpot : pool.latency_class;
}

int64_t PlacedCost(const State& state, const CapacityRequest& request, absl::Time from,
                   absl::Time to) {
  const CapacityRequestSpec& spec = request.spec;
  const Pool* pool = state.FindPool(spec.pool);
  if (pool == nullptr) return 0;
  const bool burst = request.burst_until != absl::InfinitePast();
  int64_t total = 0;
  for (const Placement& p : request.placements) {
    const Node* node = state.FindNode(p.node_id);
    if (node == nullptr) continue;
    for (int32_t g : p.gpu_indices) {
      const std::string& model = node->gpus[g].model;
      const std::optional<int64_t> price =
          burst ? BurstPriceAt(state, model, PricedClass(*pool, spec), from)
                : PriceAt(state, model, PricedClass(*pool, spec), from);
      if (price.has_value()) total += CostMicros(*price, p.gpu_milli, to - from);
    }
  }
  return total;
}

absl::Time ProjectedEnd(const CapacityRequestSpec& spec, absl::Time now) {
  if (spec.duration > absl::ZeroDuration()) return now + spec.duration;
  if (spec.burst_seconds > 0) return now + absl::Seconds(spec.burst_seconds);
  return NextMonthStart(now);
}

int64_t CeilingCost(const State& state, const CapacityRequestSpec& spec, absl::Time now) {
  const Pool* pool = state.FindPool(spec.pool);
  if (pool == nullptr) return 0;
  int64_t dearest = 0;
  auto consider = [&](const std::string& model) {
    dearest = std::max(dearest, PriceAt(state, model, PricedClass(*pool, spec), now).value_or(0));
  };
  if (spec.gpu_models.empty()) {
    for (const auto& [name, model] : state.gpu_models()) consider(name);
  } else {
    for (const std::string& m : spec.gpu_models) consider(m);
  }
  return CostMicros(dearest, spec.total_gpu_milli(), ProjectedEnd(spec, now) - now);
}

}  // namespace arbiter::core
