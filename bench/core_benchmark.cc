// One arbitration decision on a pool of N 8-GPU H100 nodes held at about 80%
// occupancy by a mixed population: training on whole GPUs (1, 2, 4, 8 and
// gangs of 2 x 4), inference and experimentation on GPU fractions, inference
// on MIG instances. Each iteration asks for one more allocation of the mix
// and releases a random live one, so the occupancy stays put while the
// layout churns. Both calls are decisions and both are timed one by one:
// the counters p50_us, p99_us and p999_us are per decision, `state_mib` is
// the heap the state holds (GPUs, allocations and indexes).
//
//   build/bench/core_benchmark                                  # full run
//   build/bench/core_benchmark --benchmark_min_time=0 --benchmark_filter=gpus:1000/  # smoke
//   build/bench/core_benchmark --benchmark_filter=QueuePositions  # a read's position cost
//   build/bench/core_benchmark --benchmark_filter=Preview  # a dry run's clone + decision
//   build/bench/core_benchmark --benchmark_filter=ChooseVictims  # a preemption's plan
#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include <malloc.h>

#include "bench/decision_mix.h"
#include "core/arbitration.h"
#include "core/packing_model.h"
#include "core/preemption.h"
#include "core/quota.h"
#include "core/share_prices.h"

namespace arbiter::core {
namespace {

using mix::kNow;
using mix::Spec;

size_t HeapInUse() { return mallinfo2().uordblks; }

int64_t Percentile(std::vector<int64_t>& ns, double q) {
  if (ns.empty()) return 0;
  const size_t k = std::min(ns.size() - 1, static_cast<size_t>(q * ns.size()));
  std::nth_element(ns.begin(), ns.begin() + k, ns.end());
  return ns[k];
}

// Fills `s` (a pool of `gpus` GPUs) to about 80% with the mix, skipping
// what does not fit; the admitted ids go to `live`.
void FillTo80(State& s, int gpus, std::mt19937_64& rng, int64_t& key, std::vector<int64_t>& live) {
  for (int misses = 0; s.UsedMilli("t", "p") < int64_t{gpus} * 800 && misses < 1000;) {
    ChangeSet fill;
    auto out = RequestCapacity(s, Spec(key++, rng), kNow, fill);
    if (out.ok() && out->request.state == RequestState::kAdmitted) {
      live.push_back(out->request.id);
    } else {
      ++misses;
      if (out.ok()) (void)ReleaseRequest(s, out->request.id, kNow, fill);
    }
  }
}

void BM_Decision(benchmark::State& bench) {
  const int gpus = static_cast<int>(bench.range(0));
  const size_t heap_before = HeapInUse();
  State s = mix::PoolOf(gpus, static_cast<size_t>(bench.range(1)));
  std::mt19937_64 rng(42);
  int64_t key = 0;
  std::vector<int64_t> live;
  FillTo80(s, gpus, rng, key, live);
  const size_t heap_state = HeapInUse() - heap_before;
  const double occupancy = static_cast<double>(s.UsedMilli("t", "p")) / (gpus * 1000.0);

  std::vector<int64_t> ns;
  ns.reserve(1 << 20);
  int64_t admitted = 0;
  auto timed = [&](auto&& decide) {
    const auto start = std::chrono::steady_clock::now();
    decide();
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  };
  for (auto _ : bench) {
    ChangeSet changes;
    absl::StatusOr<RequestOutcome> out;
    timed([&] { out = RequestCapacity(s, Spec(key++, rng), kNow, changes); });
    if (out.ok() && out->request.state == RequestState::kAdmitted) {
      ++admitted;
      live.push_back(out->request.id);
    } else if (out.ok()) {
      timed([&] { (void)ReleaseRequest(s, out->request.id, kNow, changes); });
    }
    if (!live.empty()) {
      const size_t victim = rng() % live.size();
      const int64_t id = live[victim];
      live[victim] = live.back();
      live.pop_back();
      timed([&] { benchmark::DoNotOptimize(ReleaseRequest(s, id, kNow, changes)); });
    }
  }
  bench.counters["gpus"] = gpus;
  bench.counters["occupancy"] = occupancy;
  bench.counters["admitted"] =
      benchmark::Counter(static_cast<double>(admitted) / bench.iterations());
  bench.counters["p50_us"] = Percentile(ns, 0.50) / 1000.0;
  bench.counters["p99_us"] = Percentile(ns, 0.99) / 1000.0;
  bench.counters["p999_us"] = Percentile(ns, 0.999) / 1000.0;
  bench.counters["state_mib"] = static_cast<double>(heap_state) / (1 << 20);
}
// Args: GPUs, candidate nodes scored per member (0: every node, the scan the
// index replaced; for comparison; kLimitedDemandBatch: the batch while some
// demand is limited to GPU models, PlaceMemberIndexed).
constexpr int64_t kLimitedDemandBatch =
    int64_t{PackingModel::kLimitedDemandBatchFactor} * State::kDefaultPlacementCandidates;
BENCHMARK(BM_Decision)
    ->ArgNames({"gpus", "candidates"})
    ->Args({1'000, State::kDefaultPlacementCandidates})
    ->Args({10'000, State::kDefaultPlacementCandidates})
    ->Args({100'000, State::kDefaultPlacementCandidates})
    ->Args({100'000, kLimitedDemandBatch})
    ->Args({1'000, 0})
    ->Args({10'000, 0})
    ->Args({100'000, 0})
    ->Unit(benchmark::kMicrosecond);

// A preview (RequestCapacity with validate_only), as app::Allocations::
// RunPreview makes it on the arbiter's thread: the state of the same 80%
// full pool cloned, and one request of the mix decided on the clone. Its
// time is what a preview takes from the single writer.
void BM_Preview(benchmark::State& bench) {
  const int gpus = static_cast<int>(bench.range(0));
  State s = mix::PoolOf(gpus, State::kDefaultPlacementCandidates);
  std::mt19937_64 rng(42);
  int64_t key = 0;
  std::vector<int64_t> live;
  FillTo80(s, gpus, rng, key, live);
  for (auto _ : bench) {
    State what_if = s.Clone();
    ChangeSet discarded;
    benchmark::DoNotOptimize(RequestCapacity(what_if, Spec(key++, rng), kNow, discarded));
  }
  bench.counters["gpus"] = gpus;
  bench.counters["live"] = static_cast<double>(live.size());
}
BENCHMARK(BM_Preview)
    ->ArgNames({"gpus"})
    ->Arg(1'000)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond);

// QueuePositions as a read asks it: a full 64-GPU pool with `queued`
// requests of the mix waiting, `asked` of them, at random, per read (1: a
// GetRequest; 100: a page of ListRequests). Runs on the arbiter thread.
void BM_QueuePositions(benchmark::State& bench) {
  const auto queued = static_cast<size_t>(bench.range(0));
  State s = mix::PoolOf(64);
  std::mt19937_64 rng(42);
  std::vector<int64_t> waiting;
  for (int64_t key = 0; waiting.size() < queued; ++key) {
    ChangeSet changes;
    auto out = RequestCapacity(s, Spec(key, rng), kNow, changes);
    if (out.ok() && out->request.state == RequestState::kQueued) {
      waiting.push_back(out->request.id);
    }
  }
  std::vector<int64_t> ids(static_cast<size_t>(bench.range(1)));
  for (auto _ : bench) {
    for (int64_t& id : ids) id = waiting[rng() % waiting.size()];
    benchmark::DoNotOptimize(QueuePositions(s, ids));
  }
}
BENCHMARK(BM_QueuePositions)
    ->ArgNames({"queued", "asked"})
    ->Args({1'000, 1})
    ->Args({1'000, 100})
    ->Args({100'000, 1})
    ->Args({100'000, 100})
    ->Unit(benchmark::kMillisecond);

// Choosing victims (ChooseVictims), as a request of a higher priority
// does in a pool full of preemptible work of its own team: a pool of
// `gpus` GPUs held by 1-GPU requests, beside a pool of `others` GPUs held
// by work that may not be preempted, and a 1-GPU request of priority 1
// that needs one of the first pool's GPUs. The state is not changed, so
// every iteration plans the same preemption. Its cost is the copy of the
// state for the trials and the candidates taken out and put back.
void BM_ChooseVictims(benchmark::State& bench) {
  const int gpus = static_cast<int>(bench.range(0));
  const int others = static_cast<int>(bench.range(1));
  State s = mix::PoolOf(gpus);
  ChangeSet setup;
  Pool other{"q", LatencyClass::kBatch, ""};
  (void)CreatePool(s, other, setup);
  (void)SetQuota(s, {"t", "q", int64_t{others} * 1000}, kNow, setup);
  mix::AddNodes(s, "q", "q", others, setup);
  int64_t key = 0;
  auto one_gpu = [&key](const char* pool, bool preemptible) {
    CapacityRequestSpec spec;
    spec.idempotency_key = absl::StrCat("k", key++);
    spec.team = "t";
    spec.pool = pool;
    spec.workload_class = WorkloadClass::kTraining;
    spec.shape.gpu = int32_t{1};
    spec.shape.cpu_milli = mix::kCpuPerGpu;
    spec.shape.memory_mib = mix::kMemoryPerGpu;
    spec.preemptible = preemptible;
    return spec;
  };
  auto fill = [&](const char* pool, bool preemptible) {
    for (;;) {
      ChangeSet changes;
      auto out = RequestCapacity(s, one_gpu(pool, preemptible), kNow, changes);
      if (!out.ok() || out->request.state != RequestState::kAdmitted) return;
    }
  };
  fill("p", true);
  fill("q", false);
  CapacityRequest urgent;
  urgent.id = s.requests().next_id();
  urgent.spec = one_gpu("p", false);
  urgent.spec.priority = 1;
  const std::vector<Flavor> flavors = FlavorsOf(s, urgent.spec);
  size_t victims = 0;
  for (auto _ : bench) {
    PreemptionPlan plan = ChooseVictims(s, urgent, flavors.front(), Window{}, kNow);
    victims = plan.victims.size();
    benchmark::DoNotOptimize(plan);
  }
  bench.counters["live"] = static_cast<double>(s.live_requests().size());
  bench.counters["victims"] = static_cast<double>(victims);
}
BENCHMARK(BM_ChooseVictims)
    ->ArgNames({"gpus", "others"})
    ->Args({64, 10'000})
    ->Args({1'000, 0})
    ->Args({10'000, 0})
    ->Unit(benchmark::kMicrosecond);

// Pricing the fraction sizes of a mix (SharePrices::Reset, run once per
// demand epoch): the fraction mix of the openb trace's first 100% of seed 42,
// 20 sizes, with one-GPU work beside it.
void BM_SharePrices(benchmark::State& bench) {
  const std::vector<std::pair<int64_t, int64_t>> mix = {
      {810, 1117}, {470, 768}, {320, 334}, {650, 265}, {230, 144}, {460, 138}, {160, 79},
      {590, 72},   {550, 71},  {220, 65},  {370, 56},  {110, 25},  {480, 18},  {50, 8},
      {330, 7},    {350, 6},   {270, 4},   {440, 3},   {290, 2},   {140, 1}};
  DemandProfile profile;
  for (const auto& [milli, count] : mix) profile.Observe({1, milli, 8'000, 0}, count);
  profile.Observe({1, 1000, 8'000, 0}, 4'000);
  SharePrices prices;
  for (auto _ : bench) {
    prices.Reset(profile);
    benchmark::DoNotOptimize(prices.HoleValue(1000));
  }
}
BENCHMARK(BM_SharePrices)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace arbiter::core

BENCHMARK_MAIN();
