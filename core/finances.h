// Finances: the price book (every version of every price), the monthly
// budgets of teams, and what each team was charged per month. A part of
// core::State, which checks that what a price or budget names exists before
// it is kept here.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/time/time.h"

#include "core/model.h"

namespace arbiter::core {

class Finances {
 public:
  // Adds a version of a price; false when the model and class already have
  // a price from that time.
  bool AddPrice(const Price& price) {
    const bool added = prices_[{price.gpu_model, price.latency_class}]
                           .emplace(price.effective_from, price.micros_per_gpu_hour)
                           .second;
    if (added) {
      burst_prices_[{price.gpu_model, price.latency_class}][price.effective_from] =
          price.burst_micros_per_gpu_hour > 0 ? price.burst_micros_per_gpu_hour
                                              : price.micros_per_gpu_hour;
    }
    return added;
  }
  // Prices of `model` in `latency_class` pools by the time they take effect;
  // nullptr when none.
  const std::map<absl::Time, int64_t>* PriceHistory(const std::string& model,
                                                    LatencyClass latency_class) const {
    auto it = prices_.find({model, latency_class});
    return it == prices_.end() ? nullptr : &it->second;
  }
  // As PriceHistory, the price of a burst above quota (the price itself
  // where a version sets none).
  const std::map<absl::Time, int64_t>* BurstPriceHistory(const std::string& model,
                                                         LatencyClass latency_class) const {
    auto it = burst_prices_.find({model, latency_class});
    return it == burst_prices_.end() ? nullptr : &it->second;
  }

  // One budget per team, replaced when set again.
  void PutBudget(Budget budget) {
    const std::string team = budget.team;
    budgets_[team] = std::move(budget);
  }
  const Budget* FindBudget(const std::string& team) const {
    auto it = budgets_.find(team);
    return it == budgets_.end() ? nullptr : &it->second;
  }

  // Spend charged to `team` for the month starting at `month_start`.
  int64_t Spend(const std::string& team, absl::Time month_start) const {
    auto it = spend_.find({team, month_start});
    return it == spend_.end() ? 0 : it->second;
  }
  void AddSpend(const std::string& team, absl::Time month_start, int64_t micros) {
    spend_[{team, month_start}] += micros;
  }

 private:
  std::map<std::pair<std::string, LatencyClass>, std::map<absl::Time, int64_t>> prices_;
  std::map<std::pair<std::string, LatencyClass>, std::map<absl::Time, int64_t>> burst_prices_;
  std::map<std::string, Budget> budgets_;
  std::map<std::pair<std::string, absl::Time>, int64_t> spend_;
};

}  // namespace arbiter::core
