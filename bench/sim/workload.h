// daysim's workload: the jobs a scenario's streams submit and the spikes of
// its services, drawn once from the scenario's seed so that every policy
// faces the same week. Times are seconds from the scenario's start.
//
// Thread-compatible value types.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/sim/scenario.h"

namespace arbiter::daysim {

// A small deterministic generator (SplitMix64) with its distributions
// written out here: the same seed gives the same draws on every platform,
// unlike the standard library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : state_(seed) {}
  uint64_t Next();
  // Uniform in [lo, hi]. REQUIRES: lo <= hi.
  int64_t Uniform(int64_t lo, int64_t hi);
  // Exponentially distributed with mean `mean`, rounded to whole units.
  int64_t Exponential(double mean);
  // Uniform in the open interval (0, 1).
  double Unit();
  // Standard normal (Marsaglia's polar method; the pair's second on the
  // next call).
  double Normal();
  // Gamma with shape `shape` and scale 1, mean `shape` (Marsaglia-Tsang;
  // shape < 1 by the boost U^(1/shape)). REQUIRES: shape > 0.
  double Gamma(double shape);

 private:
  uint64_t state_;
  double spare_normal_ = 0;
  bool has_spare_normal_ = false;
};

struct JobDraw {
  int32_t stream = 0;
  int64_t arrival = 0;  // Seconds from the start.
  int64_t work_seconds = 0;
  int64_t idle_tail_seconds = 0;
  // kind "daily": the gang's place in its day's batch (0 first); the day's
  // gangs arrive together and are submitted in order.
  int32_t gang = 0;
};

struct Workload {
  std::vector<JobDraw> jobs;  // By arrival, then stream, then gang.
  // Per service: the spikes' start times.
  std::vector<std::vector<int64_t>> spikes;
};

// Draws the week. Each stream and service draws from its own generator, so
// that changing one leaves the others' draws as they were.
Workload DrawWorkload(const Scenario& scenario);

// Whether day `day` (0: the scenario's first day) is a Saturday or Sunday.
bool IsWeekend(const Scenario& scenario, int64_t day);

}  // namespace arbiter::daysim
