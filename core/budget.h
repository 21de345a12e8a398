// Money: the price book and team budgets. Prices are per GPU-hour of a GPU
// model in pools of a latency class, versioned by the time they take effect;
// budgets are per team per calendar month (UTC). Money is in micros.
//
// Pure functions over `State`; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

#include "core/model.h"
#include "core/state.h"

namespace arbiter::core {

// The first instant of the calendar month (UTC) that holds `t`, and of the
// month after.
absl::Time MonthStart(absl::Time t);
absl::Time NextMonthStart(absl::Time t);

// The price in force for `model` in a `latency_class` pool at `at`.
std::optional<int64_t> PriceAt(const State& state, const std::string& model,
                               LatencyClass latency_class, absl::Time at);
// As PriceAt, the price of a burst above quota into a pool's headroom.
std::optional<int64_t> BurstPriceAt(const State& state, const std::string& model,
                                    LatencyClass latency_class, absl::Time at);

// The class whose prices `spec` pays in `pool`: SPOT for spot work, else
// the pool's latency class.
LatencyClass PricedClass(const Pool& pool, const CapacityRequestSpec& spec);

// Micros for holding `gpu_milli` for `held` at `micros_per_gpu_hour`,
// rounded up to a whole micro.
int64_t CostMicros(int64_t micros_per_gpu_hour, int64_t gpu_milli, absl::Duration held);

// The cost of `request`'s placements held over [from, to), at the prices in
// force at `from` for its class (PricedClass), burst prices for a burst
// (GPUs without a price cost nothing).
int64_t PlacedCost(const State& state, const CapacityRequest& request, absl::Time from,
                   absl::Time to);

// When work admitted at `now` is projected to end: its declared end, the end
// of its burst, or for open-ended work the end of the month.
absl::Time ProjectedEnd(const CapacityRequestSpec& spec, absl::Time now);

// A ceiling of what `spec` would cost if admitted at `now`: the whole gang
// at the dearest price among the GPU models it may land on, to its
// projected end. Used before placement to check the budget.
int64_t CeilingCost(const State& state, const CapacityRequestSpec& spec, absl::Time now);

}  // namespace arbiter::core
