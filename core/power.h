// Power at admission (docs/power.md): watt budgets per pool, rack and site,
// and what admitted work draws against them.
//
// An allocation draws its GPU model's TDP for each whole GPU it holds; a
// fraction draws the TDP times its milli-GPU / 1000; a MIG instance draws
// the TDP times its compute slices / 7. Draws are kept in milliwatts so
// that every share is an integer. A rack is a node's topology domain (its
// NVLink domain or rack, as registered); a site is a node's cluster.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

#include "core/model.h"

namespace arbiter::core {

enum class PowerScope { kUnspecified = 0, kPool = 1, kRack = 2, kSite = 3 };
absl::string_view PowerScopeName(PowerScope s);  // "pool", "rack", "site".
// kUnspecified for an unknown name.
PowerScope PowerScopeFromName(absl::string_view name);

// A watt budget of one pool, rack or site: admitted work's draw there stays
// within `watts`. Lowering it below what runs ends nothing; with `reclaim`,
// preemptible work there (spot first) is told to vacate until the draw is
// within it again.
struct PowerBudget {
  PowerScope scope = PowerScope::kUnspecified;
  std::string name;
  int64_t watts = 0;
  bool reclaim = false;
  bool operator==(const PowerBudget&) const = default;
};

// The most watts a budget may hold (a large campus, with room to spare).
inline constexpr int64_t kMaxBudgetWatts = int64_t{1} << 40;

// Milliwatts that `gpu_milli` of one GPU of `model` draws: the TDP in
// proportion to the share; for a MIG instance of `mig_profile`, to its
// compute slices of 7.
int64_t GpuDrawMilliwatts(const GpuModel& model, int64_t gpu_milli, const std::string& mig_profile);

// One scope a placement draws in, and how much.
struct ScopeDraw {
  PowerScope scope = PowerScope::kUnspecified;
  std::string name;
  int64_t milliwatts = 0;
  bool operator==(const ScopeDraw&) const = default;
};

// Budgets and the running draw of each scope.
class PowerBook {
 public:
  // Sets or replaces the budget of (scope, name).
  void PutBudget(PowerBudget budget);
  const PowerBudget* FindBudget(PowerScope scope, const std::string& name) const;
  const std::map<std::pair<PowerScope, std::string>, PowerBudget>& budgets() const {
    return budgets_;
  }
  bool empty() const { return budgets_.empty(); }

  // Adds `sign` times each draw to its scope.
  void Charge(const std::vector<ScopeDraw>& draws, int sign);
  int64_t DrawMilliwatts(PowerScope scope, const std::string& name) const;

  // The first budget that `draws` added to what runs would exceed, with
  // the shortfall in milliwatts; nullptr when none.
  const PowerBudget* Exceeded(const std::vector<ScopeDraw>& draws, int64_t* shortfall_mw) const;

 private:
  std::map<std::pair<PowerScope, std::string>, PowerBudget> budgets_;
  std::map<std::pair<PowerScope, std::string>, int64_t> draw_mw_;
};

}  // namespace arbiter::core
