#include "core/share_prices.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "core/linear_program.h"
#include "core/model.h"

namespace arbiter::core {
namespace {

// A pattern is over-valued when its prices add up to more than one GPU by
// more than this.
constexpr double kTolerance = 1e-7;
// Rounds of row generation; each adds up to one row per size.
constexpr int kMaxRounds = 60;

// The unbounded knapsack over `sizes` priced `prices`: best[c] is the most a
// multiset of sizes within c milli is worth, and last[c] the index of a size
// in such a multiset (-1: the best for c is the best for c - 1, or nothing).
struct Knapsack {
  std::vector<double> best;
  std::vector<int> last;
};

Knapsack SolveKnapsack(const std::vector<int64_t>& sizes, const std::vector<double>& prices) {
  Knapsack k{std::vector<double>(kMilliPerGpu + 1, 0.0), std::vector<int>(kMilliPerGpu + 1, -1)};
  for (int64_t c = 1; c <= kMilliPerGpu; ++c) {
    k.best[c] = k.best[c - 1];
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (sizes[i] > c) continue;
      const double v = k.best[c - sizes[i]] + prices[i];
      if (v > k.best[c] + 1e-12) {
        k.best[c] = v;
        k.last[c] = static_cast<int>(i);
      }
    }
  }
  return k;
}

// The multiset behind k.best[c], as a count per size.
std::vector<double> PatternOf(const Knapsack& k, int64_t c, const std::vector<int64_t>& sizes) {
  std::vector<double> counts(sizes.size(), 0.0);
  while (c > 0) {
    if (k.last[c] < 0) {
      --c;
      continue;
    }
    counts[k.last[c]] += 1;
    c -= sizes[k.last[c]];
  }
  return counts;
}

// Fraction sizes of the mix with their counts, the most frequent first (ties:
// smaller size first), at most kMaxSizes of them.
std::vector<std::pair<int64_t, int64_t>> FractionSizes(const DemandProfile& profile) {
  std::map<int64_t, int64_t> by_size;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    if (e.shape.fractional() && e.shape.gpu_milli > 0) by_size[e.shape.gpu_milli] += e.count;
  }
  std::vector<std::pair<int64_t, int64_t>> sizes(by_size.begin(), by_size.end());
  std::stable_sort(sizes.begin(), sizes.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (sizes.size() > SharePrices::kMaxSizes) sizes.resize(SharePrices::kMaxSizes);
  return sizes;
}

}  // namespace

void SharePrices::Reset(const DemandProfile& profile) {
  sizes_.clear();
  prices_.clear();
  hole_value_.clear();
  price_of_.clear();
  ask_cpu_milli_.clear();
  ask_memory_mib_.clear();
  largest_ask_cpu_milli_ = 0;
  largest_ask_memory_mib_ = 0;
  gpu_share_cpu_milli_ = 0;
  gpu_share_memory_mib_ = 0;
  const std::vector<std::pair<int64_t, int64_t>> mix = FractionSizes(profile);
  if (mix.empty()) return;

  LinearProgram lp;
  for (const auto& [size, count] : mix) {
    sizes_.push_back(size);
    lp.objective.push_back(static_cast<double>(count));
  }
  // One row per size: as many of it as fit on one GPU.
  for (size_t i = 0; i < sizes_.size(); ++i) {
    std::vector<double> row(sizes_.size(), 0.0);
    row[i] = static_cast<double>(kMilliPerGpu / sizes_[i]);
    lp.constraints.push_back(std::move(row));
    lp.bounds.push_back(1.0);
  }
  std::set<std::vector<double>> rows(lp.constraints.begin(), lp.constraints.end());
  Knapsack k;
  for (int round = 0; round < kMaxRounds; ++round) {
    prices_ = Maximize(lp).x;
    k = SolveKnapsack(sizes_, prices_);
    // For each size, the best pattern that holds it; add those worth more
    // than a GPU.
    bool added = false;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      const int64_t rest = kMilliPerGpu - sizes_[i];
      if (prices_[i] + k.best[rest] <= 1.0 + kTolerance) continue;
      std::vector<double> row = PatternOf(k, rest, sizes_);
      row[i] += 1;
      if (!rows.insert(row).second) continue;
      lp.constraints.push_back(std::move(row));
      lp.bounds.push_back(1.0);
      added = true;
    }
    if (!added) break;
  }
  // Out of rounds, the prices may still over-value some pattern: scale them
  // down until none is worth more than a GPU (`k` is the knapsack of the
  // last prices).
  const double most = k.best[kMilliPerGpu];
  if (most > 1.0) {
    for (double& p : prices_) p /= most;
    k = SolveKnapsack(sizes_, prices_);
  }
  hole_value_ = std::move(k.best);
  price_of_ = hole_value_;
  for (size_t i = 0; i < sizes_.size(); ++i) price_of_[static_cast<size_t>(sizes_[i])] = prices_[i];
  SetHostAsks(profile);
}

void SharePrices::SetHostAsks(const DemandProfile& profile) {
  // Count-weighted sums per priced size, and over whole-GPU work per GPU.
  struct Sums {
    double count = 0;
    double cpu = 0;
    double memory = 0;
  };
  std::vector<Sums> sums(sizes_.size());
  double gpus = 0, gpu_cpu = 0, gpu_memory = 0;
  for (const DemandProfile::Entry& e : profile.Entries()) {
    const double n = static_cast<double>(e.count);
    if (e.shape.gpus >= 1 && !e.shape.fractional()) {
      gpus += n * e.shape.gpus;
      gpu_cpu += n * static_cast<double>(e.shape.cpu_milli);
      gpu_memory += n * static_cast<double>(e.shape.memory_mib);
      continue;
    }
    if (!e.shape.fractional()) continue;
    auto it = std::find(sizes_.begin(), sizes_.end(), e.shape.gpu_milli);
    if (it == sizes_.end()) continue;
    const size_t i = static_cast<size_t>(it - sizes_.begin());
    sums[i].count += n;
    sums[i].cpu += n * static_cast<double>(e.shape.cpu_milli);
    sums[i].memory += n * static_cast<double>(e.shape.memory_mib);
  }
  ask_cpu_milli_.assign(sizes_.size(), 0);
  ask_memory_mib_.assign(sizes_.size(), 0);
  for (size_t i = 0; i < sizes_.size(); ++i) {
    // Every priced size has fractions in the mix (FractionSizes).
    ask_cpu_milli_[i] = std::llround(sums[i].cpu / sums[i].count);
    ask_memory_mib_[i] = std::llround(sums[i].memory / sums[i].count);
    largest_ask_cpu_milli_ = std::max(largest_ask_cpu_milli_, ask_cpu_milli_[i]);
    largest_ask_memory_mib_ = std::max(largest_ask_memory_mib_, ask_memory_mib_[i]);
  }
  if (gpus > 0) {
    gpu_share_cpu_milli_ = std::llround(gpu_cpu / gpus);
    gpu_share_memory_mib_ = std::llround(gpu_memory / gpus);
  }
}

double SharePrices::FedHolesValue(absl::Span<const int64_t> free_milli, int64_t free_cpu_milli,
                                  int64_t free_memory_mib) const {
  if (hole_value_.empty()) return 0;
  for (int64_t f : free_milli) {
    if (f >= kMilliPerGpu) {
      free_cpu_milli -= gpu_share_cpu_milli_;
      free_memory_mib -= gpu_share_memory_mib_;
    }
  }
  double value = 0;
  for (auto it = free_milli.rbegin(); it != free_milli.rend(); ++it) {
    const int64_t hole = *it;
    if (hole <= 0 || hole >= kMilliPerGpu) continue;
    double best = 0;
    size_t fed = sizes_.size();
    for (size_t i = 0; i < sizes_.size(); ++i) {
      if (sizes_[i] > hole || ask_cpu_milli_[i] > free_cpu_milli ||
          ask_memory_mib_[i] > free_memory_mib) {
        continue;
      }
      const double v = prices_[i] + HoleValue(hole - sizes_[i]);
      if (v > best) {
        best = v;
        fed = i;
      }
    }
    if (fed == sizes_.size()) continue;
    value += best;
    free_cpu_milli -= ask_cpu_milli_[fed];
    free_memory_mib -= ask_memory_mib_[fed];
  }
  return value;
}

double SharePrices::HoleValue(int64_t free_milli) const {
  if (hole_value_.empty()) return 0;
  return hole_value_[static_cast<size_t>(std::clamp<int64_t>(free_milli, 0, kMilliPerGpu))];
}

double SharePrices::Price(int64_t size_milli) const {
  if (price_of_.empty()) return 0;
  return price_of_[static_cast<size_t>(std::clamp<int64_t>(size_milli, 0, kMilliPerGpu))];
}

double SharePrices::Loss(int64_t had, int64_t take) const {
  if (hole_value_.empty()) return 0;
  return HoleValue(had) - HoleValue(had - take) - Price(take);
}

}  // namespace arbiter::core
