// Builders of core::State for unit tests, through the same arbitration
// functions arbiterd uses.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>

#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/state.h"

namespace arbiter::testing {

inline const absl::Time kT0 = absl::FromUnixSeconds(1'800'000'000);

// The seed of a randomized test: ARBITER_TEST_SEED when set (to rerun a
// failure), else a fresh one. Tests print it.
inline uint64_t TestSeed() {
  if (const char* s = std::getenv("ARBITER_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

// A state with a catalog, cluster "c", pools "serving" and "batch", and team
// "t" with `nominal_milli` in "serving".
// Pools "serving" and "batch" (queued by `batch_queueing`), team "t" with
// `nominal_milli` on serving, three GPU models.
inline core::State MakeState(int64_t nominal_milli = 64'000, core::QueueingPolicy batch_queueing =
                                                                 core::QueueingPolicy::kBackfill) {
  core::State s;
  EXPECT_TRUE(s.LoadGpuModel({"H100-80GB", 81920, 132, 700, true}).ok());
  EXPECT_TRUE(s.LoadGpuModel({"A100-40GB", 40960, 108, 400, true}).ok());
  EXPECT_TRUE(s.LoadGpuModel({"L4", 24576, 58, 72, false}).ok());
  core::ChangeSet ch;
  EXPECT_TRUE(core::CreateCluster(s, {"c", ""}, ch).ok());
  EXPECT_TRUE(core::CreatePool(s, {"serving", core::LatencyClass::kServing, ""}, ch).ok());
  core::Pool batch{"batch", core::LatencyClass::kBatch, ""};
  batch.queueing = batch_queueing;
  // The tests' requests are inference by default (WholeSpec); this batch
  // pool admits it by rule (a batch pool denies it by default).
  batch.class_rules = {{core::WorkloadClass::kInference, core::ClassAdmission::kAdmit}};
  EXPECT_TRUE(core::CreatePool(s, batch, ch).ok());
  EXPECT_TRUE(core::CreateTeam(s, {"t", "", 1000}, ch).ok());
  EXPECT_TRUE(core::SetQuota(s, {"t", "serving", nominal_milli}, kT0, ch).ok());
  return s;
}

inline core::Node MakeNode(const std::string& name, int gpus, const std::string& model,
                           const std::string& pool = "serving", int64_t cpu_milli = 64'000,
                           int64_t memory_mib = 512'000) {
  core::Node n;
  n.cluster = "c";
  n.name = name;
  n.pool = pool;
  n.cpu_milli = cpu_milli;
  n.memory_mib = memory_mib;
  for (int i = 0; i < gpus; ++i) {
    core::Gpu g;
    g.index = i;
    g.model = model;
    n.gpus.push_back(g);
  }
  return n;
}

inline void AddNode(core::State& s, const core::Node& n) {
  core::ChangeSet ch;
  ASSERT_TRUE(core::RegisterNode(s, n, kT0, ch).ok());
}

inline core::CapacityRequestSpec WholeSpec(const std::string& key, int members, int gpus) {
  core::CapacityRequestSpec spec;
  spec.idempotency_key = key;
  spec.team = "t";
  spec.pool = "serving";
  spec.workload_class = core::WorkloadClass::kInference;
  spec.members = members;
  spec.shape.gpu = int32_t{gpus};
  return spec;
}

inline core::CapacityRequestSpec FractionSpec(const std::string& key, int members, int64_t milli,
                                              int64_t memory_mib) {
  core::CapacityRequestSpec spec = WholeSpec(key, members, 1);
  spec.shape.gpu = core::GpuFraction{milli, memory_mib};
  return spec;
}

}  // namespace arbiter::testing
