// One arbitration decision (request, then release) on a pool of N 8-GPU
// nodes held at about 80% occupancy by a mixed population of whole-GPU and
// fractional allocations. Measures the current core, which scans the pool's
// nodes per decision; indexes arrive with the throughput work.
//
//   build/bench/core_benchmark                # full run
//   build/bench/core_benchmark --benchmark_min_time=0   # smoke (tests/run)
#include <random>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"

#include "core/arbitration.h"

namespace arbiter::core {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

CapacityRequestSpec Spec(int n, std::mt19937_64& rng) {
  CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("k", n);
  spec.team = "t";
  spec.pool = "p";
  spec.workload_class = WorkloadClass::kTraining;
  spec.members = 1;
  if (rng() % 2) {
    spec.shape.gpu = static_cast<int32_t>(1 << (rng() % 3));
  } else {
    spec.shape.gpu = GpuFraction{static_cast<int64_t>(100 + rng() % 800),
                                 static_cast<int64_t>(1024 + rng() % 20000)};
  }
  return spec;
}

void BM_Decision(benchmark::State& bench) {
  const int gpus = static_cast<int>(bench.range(0));
  State s;
  ChangeSet ch;
  (void)s.LoadGpuModel({"H100-80GB", 81920, 132, 700, true});
  (void)CreateCluster(s, {"c", ""}, ch);
  (void)CreatePool(s, {"p", LatencyClass::kBatch, ""}, ch);
  (void)CreateTeam(s, {"t", "", 1000}, ch);
  (void)SetQuota(s, {"t", "p", int64_t{gpus} * 1000}, kNow, ch);
  for (int n = 0; n < gpus / 8; ++n) {
    Node node;
    node.cluster = "c";
    node.name = absl::StrCat("n", n);
    node.pool = "p";
    node.cpu_milli = 1'000'000;
    node.memory_mib = 4'000'000;
    for (int g = 0; g < 8; ++g) node.gpus.push_back(Gpu{g, "H100-80GB"});
    (void)RegisterNode(s, node, kNow, ch);
  }
  std::mt19937_64 rng(42);
  int key = 0;
  int64_t held = 0;
  while (held < int64_t{gpus} * 800) {  // Fill to about 80%.
    ChangeSet fill;
    auto out = RequestCapacity(s, Spec(key++, rng), kNow, fill);
    if (!out.ok() || out->request.state != RequestState::kAdmitted) break;
    held += out->request.spec.total_gpu_milli();
  }
  for (auto _ : bench) {
    ChangeSet changes;
    auto out = RequestCapacity(s, Spec(key++, rng), kNow, changes);
    if (out.ok() && out->request.state != RequestState::kDenied) {
      auto released = ReleaseRequest(s, out->request.id, kNow, changes);
      benchmark::DoNotOptimize(released);
    }
  }
  bench.counters["gpus"] = gpus;
}
BENCHMARK(BM_Decision)->Arg(1'000)->Arg(10'000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace arbiter::core

BENCHMARK_MAIN();
