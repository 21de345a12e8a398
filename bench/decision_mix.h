// The decision mix of the core benchmarks: a pool "p" of 8-GPU H100 nodes
// for team "t", and requests drawn from a mixed population (training on
// whole GPUs and gangs, inference and experimentation on fractions,
// inference on MIG instances). Used by core_benchmark and arbiter-memory.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"

#include "core/arbitration.h"

namespace arbiter::core::mix {

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);
inline constexpr int64_t kCpuPerGpu = 12'000;
inline constexpr int64_t kMemoryPerGpu = 96 * 1024;

// Request `n` of the mix: key k<n>, team t, pool p.
inline CapacityRequestSpec Spec(int64_t n, std::mt19937_64& rng) {
  CapacityRequestSpec spec;
  spec.idempotency_key = absl::StrCat("k", n);
  spec.team = "t";
  spec.pool = "p";
  spec.members = 1;
  const int kind = static_cast<int>(rng() % 100);
  int64_t gpus_worth = 1000;
  if (kind < 35) {  // Training on 1, 2, 4 or 8 whole GPUs.
    static constexpr int32_t kSizes[] = {1, 1, 1, 1, 2, 2, 4, 8};
    spec.workload_class = WorkloadClass::kTraining;
    spec.shape.gpu = kSizes[rng() % 8];
    gpus_worth = 1000 * spec.shape.whole_gpus();
  } else if (kind < 40) {  // A training gang: 2 members x 4 GPUs.
    spec.workload_class = WorkloadClass::kTraining;
    spec.members = 2;
    spec.shape.gpu = int32_t{4};
    gpus_worth = 4000;
  } else if (kind < 70) {  // Inference on a fraction.
    spec.workload_class = WorkloadClass::kInference;
    const int64_t milli = 100 + static_cast<int64_t>(rng() % 9) * 100;
    spec.shape.gpu = GpuFraction{milli, milli * 80};
    gpus_worth = milli;
  } else if (kind < 85) {  // Experimentation on a quarter or a half.
    spec.workload_class = WorkloadClass::kExperimentation;
    const int64_t milli = rng() % 2 ? 250 : 500;
    spec.shape.gpu = GpuFraction{milli, milli * 40};
    gpus_worth = milli;
  } else {  // Inference on a MIG instance.
    static const char* kProfiles[] = {"1g.10gb", "2g.20gb", "3g.40gb"};
    spec.workload_class = WorkloadClass::kInference;
    const int p = static_cast<int>(rng() % 3);
    spec.shape.gpu = MigShape{kProfiles[p]};
    gpus_worth = p == 0 ? 143 : p == 1 ? 286 : 429;
  }
  spec.shape.cpu_milli = kCpuPerGpu * gpus_worth / 1000;
  spec.shape.memory_mib = kMemoryPerGpu * gpus_worth / 1000;
  return spec;
}

// Registers `gpus` / 8 nodes of 8 H100s, named `prefix`0, `prefix`1, ...,
// in cluster "c" and pool `pool`.
inline void AddNodes(State& s, const std::string& pool, const std::string& prefix, int gpus,
                     ChangeSet& ch) {
  for (int n = 0; n < gpus / 8; ++n) {
    Node node;
    node.cluster = "c";
    node.name = absl::StrCat(prefix, n);
    node.pool = pool;
    node.cpu_milli = 8 * kCpuPerGpu;
    node.memory_mib = 8 * kMemoryPerGpu;
    for (int g = 0; g < 8; ++g) node.gpus.push_back(Gpu{g, "H100-80GB"});
    (void)RegisterNode(s, node, kNow, ch);
  }
}

// A state with the catalog's H100, cluster "c", batch pool "p" (which
// admits inference too) of
// `gpus` / 8 nodes, team "t" with a quota that never binds, and
// `candidates` placement candidates per member (0: every node).
inline State PoolOf(int gpus, size_t candidates = State::kDefaultPlacementCandidates) {
  State s;
  s.set_placement_candidates(candidates);
  ChangeSet ch;
  (void)s.LoadGpuModel({"H100-80GB", 81920, 132, 700, true});
  (void)CreateCluster(s, {"c", ""}, ch);
  Pool pool{"p", LatencyClass::kBatch, ""};
  pool.class_rules = {{WorkloadClass::kInference, ClassAdmission::kAdmit}};
  (void)CreatePool(s, pool, ch);
  (void)CreateTeam(s, {"t", "", 1000}, ch);
  (void)SetQuota(s, {"t", "p", int64_t{gpus} * 1000}, kNow, ch);
  AddNodes(s, "p", "n", gpus, ch);
  return s;
}

}  // namespace arbiter::core::mix
