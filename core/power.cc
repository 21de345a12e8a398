#include "core/power.h"

#include <array>

namespace arbiter::core {
namespace {

constexpr std::array<std::pair<PowerScope, absl::string_view>, 3> kScopeNames = {{
    {PowerScope::kPool, "pool"},
    {PowerScope::kRack, "rack"},
    {PowerScope::kSite, "site"},
}};

constexpr int64_t kComputeSlices = 7;

}  // namespace

absl::string_view PowerScopeName(PowerScope s) {
  for (const auto& [scope, name] : kScopeNames) {
    if (scope == s) return name;
  }
  return "unspecified";
}

PowerScope PowerScopeFromName(absl::string_view name) {
  for (const auto& [scope, n] : kScopeNames) {
    if (n == name) return scope;
  }
  return PowerScope::kUnspecified;
}

int64_t GpuDrawMilliwatts(const GpuModel& model, int64_t gpu_milli,
                          const std::string& mig_profile) {
  if (!mig_profile.empty()) {
    for (const MigProfile& p : model.mig_profiles) {
      if (p.name == mig_profile) {
        return int64_t{model.tdp_watts} * 1000 * p.compute_slices / kComputeSlices;
      }
    }
  }
  // Watts x milli-GPU = milliwatts.
  return int64_t{model.tdp_watts} * gpu_milli;
}

void PowerBook::PutBudget(PowerBudget budget) {
  const auto key = std::make_pair(budget.scope, budget.name);
  budgets_[key] = std::move(budget);
}

const PowerBudget* PowerBook::FindBudget(PowerScope scope, const std::string& name) const {
  auto it = budgets_.find({scope, name});
  return it == budgets_.end() ? nullptr : &it->second;
}

void PowerBook::Charge(const std::vector<ScopeDraw>& draws, int sign) {
  for (const ScopeDraw& d : draws) {
    int64_t& total = draw_mw_[{d.scope, d.name}];
    total += sign * d.milliwatts;
    if (total == 0) draw_mw_.erase({d.scope, d.name});
  }
}

int64_t PowerBook::DrawMilliwatts(PowerScope scope, const std::string& name) const {
  auto it = draw_mw_.find({scope, name});
  return it == draw_mw_.end() ? 0 : it->second;
}

const PowerBudget* PowerBook::Exceeded(const std::vector<ScopeDraw>& draws,
                                       int64_t* shortfall_mw) const {
  std::map<std::pair<PowerScope, std::string>, int64_t> adding;
  for (const ScopeDraw& d : draws) adding[{d.scope, d.name}] += d.milliwatts;
  for (const auto& [key, mw] : adding) {
    const PowerBudget* budget = FindBudget(key.first, key.second);
    if (budget == nullptr) continue;
    const int64_t after = DrawMilliwatts(key.first, key.second) + mw;
    if (after > budget->watts * 1000) {
      *shortfall_mw = after - budget->watts * 1000;
      return budget;
    }
  }
  return nullptr;
}

}  // namespace arbiter::core
