// The inventory index must never hide a feasible node: with the smallest
// candidate batch (so that batching is exercised), a one-member request is
// admitted exactly when a brute-force search over every GPU of the pool finds
// room for it, across a random history of requests and releases on a pool
// of mixed models, classes and MIG layouts.
#include "core/inventory_index.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/mig.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using testing::AddNode;
using testing::kT0;
using testing::MakeNode;
using testing::MakeState;

bool ModelOk(const CapacityRequestSpec& spec, const Gpu& gpu) {
  return spec.gpu_models.empty() || std::find(spec.gpu_models.begin(), spec.gpu_models.end(),
                                              gpu.model) != spec.gpu_models.end();
}

bool ClassesOk(const State& s, const Gpu& gpu, WorkloadClass cls, Isolation needed) {
  for (size_t c = 0; c < gpu.class_tenants.size(); ++c) {
    if (gpu.class_tenants[c] > 0 &&
        s.coexistence().Rule(static_cast<WorkloadClass>(c), cls).gpu < needed) {
      return false;
    }
  }
  return true;
}

// Whether one member of `spec` fits anywhere in its pool now, by looking at
// every GPU. REQUIRES: spec.members == 1, no reservations.
bool FitsSomewhere(const State& s, const CapacityRequestSpec& spec) {
  for (size_t i : s.PoolNodes(spec.pool)) {
    const Node& node = s.nodes()[i];
    if (node.free_cpu_milli() < spec.shape.cpu_milli ||
        node.free_memory_mib() < spec.shape.memory_mib) {
      continue;
    }
    int32_t empty = 0;
    for (const Gpu& gpu : node.gpus) {
      if (!ModelOk(spec, gpu)) continue;
      if (spec.shape.is_whole()) {
        empty += gpu.empty() ? 1 : 0;
      } else if (spec.shape.is_mig()) {
        const std::vector<MigProfile>& profiles = s.MigProfilesOf(gpu);
        const MigProfile* profile = FindMigProfile(profiles, spec.shape.mig().profile);
        if (profile == nullptr) continue;
        if (gpu.empty() && !gpu.exclusive) return true;  // Partition it.
        if (!ClassesOk(s, gpu, spec.workload_class, Isolation::kMigOnly)) continue;
        for (const MigInstance& inst : gpu.mig_layout) {
          if (!inst.allocated && inst.profile == profile->name) return true;
        }
      } else {
        const GpuFraction& f = spec.shape.fraction();
        if (SharableOrEmpty(gpu) && gpu.free_milli() >= f.gpu_milli &&
            gpu.free_memory_mib() >= f.memory_mib &&
            ClassesOk(s, gpu, spec.workload_class, Isolation::kSoftSharing)) {
          return true;
        }
      }
    }
    if (spec.shape.is_whole() && empty >= spec.shape.whole_gpus()) return true;
  }
  return false;
}

CapacityRequestSpec RandomSpec(int64_t n, std::mt19937_64& rng) {
  static const WorkloadClass kClasses[] = {WorkloadClass::kTraining, WorkloadClass::kInference,
                                           WorkloadClass::kExperimentation};
  static const char* kModels[] = {"H100-80GB", "A100-40GB", "L4"};
  static const char* kProfiles[] = {"1g.10gb", "3g.40gb", "1g.5gb", "7g.80gb"};
  CapacityRequestSpec spec = testing::WholeSpec(absl::StrCat("k", n), 1, 1);
  spec.pool = "batch";
  spec.workload_class = kClasses[rng() % 3];
  const int kind = static_cast<int>(rng() % 3);
  if (kind == 0) {
    spec.shape.gpu = static_cast<int32_t>(1 + rng() % 4);
  } else if (kind == 1) {
    spec.shape.gpu = GpuFraction{static_cast<int64_t>(100 + (rng() % 9) * 100),
                                 static_cast<int64_t>(1024 + rng() % 30000)};
  } else {
    spec.shape.gpu = MigShape{kProfiles[rng() % 4]};
  }
  if (rng() % 4 == 0) spec.gpu_models = {kModels[rng() % 3]};
  spec.shape.cpu_milli = static_cast<int64_t>(rng() % 8) * 1000;
  spec.shape.memory_mib = static_cast<int64_t>(rng() % 8) * 16 * 1024;
  return spec;
}

TEST(InventoryIndexTest, IndexedPlacementFindsRoomExactlyWhenThereIsSome) {
  State s = MakeState();
  ChangeSet setup;
  ASSERT_TRUE(SetQuota(s, {"t", "batch", 1'000'000}, kT0, setup).ok());
  s.set_placement_candidates(1);
  for (int n = 0; n < 6; ++n) AddNode(s, MakeNode(absl::StrCat("h", n), 8, "H100-80GB", "batch"));
  for (int n = 0; n < 4; ++n) AddNode(s, MakeNode(absl::StrCat("a", n), 4, "A100-40GB", "batch"));
  for (int n = 0; n < 4; ++n) AddNode(s, MakeNode(absl::StrCat("l", n), 2, "L4", "batch"));
  Node mixed = MakeNode("mixed", 4, "L4", "batch");
  mixed.gpus[2].model = mixed.gpus[3].model = "H100-80GB";
  AddNode(s, mixed);

  std::mt19937_64 rng(7);
  std::vector<int64_t> live;
  int admitted = 0, queued = 0, errors = 0, other = 0;
  for (int64_t n = 0; n < 3000; ++n) {
    ChangeSet changes;
    if (!live.empty() && rng() % 3 == 0) {
      const size_t k = rng() % live.size();
      ASSERT_TRUE(ReleaseRequest(s, live[k], kT0, changes).ok());
      live[k] = live.back();
      live.pop_back();
      continue;
    }
    const CapacityRequestSpec spec = RandomSpec(n, rng);
    const bool fits = FitsSomewhere(s, spec);
    auto out = RequestCapacity(s, spec, kT0, changes);
    if (!out.ok()) {
      ++errors;
      continue;  // E.g. a MIG profile no allowed model has.
    }
    const RequestState state = out->request.state;
    if (state == RequestState::kAdmitted) {
      ++admitted;
      live.push_back(out->request.id);
      EXPECT_TRUE(fits) << "admitted what brute force finds no room for, step " << n;
    } else {
      EXPECT_FALSE(fits && state == RequestState::kQueued)
          << "queued although room exists, step " << n << ": " << out->request.reason;
      if (state != RequestState::kQueued) ++other;
      if (state == RequestState::kQueued) {
        ++queued;
        ASSERT_TRUE(ReleaseRequest(s, out->request.id, kT0, changes).ok());
      }
    }
  }
  // The history must exercise both outcomes.
  SCOPED_TRACE(absl::StrCat("admitted ", admitted, ", queued ", queued, ", errors ", errors,
                            ", other outcomes ", other));
  EXPECT_GT(admitted, 300);
  EXPECT_LT(other, 200);
  EXPECT_GT(queued, 100);
}

// While some demand is limited to a model, the packer scores a larger batch
// (PackingModel::kLimitedDemandBatchFactor), so that ModelPressure can steer
// flexible work off that model: best fit ranks the small L4 nodes (2 GPUs
// free) before the empty 8-GPU H100 node, and a batch of 2 shows only L4s.
TEST(InventoryIndexTest, LimitedDemandWidensTheBatchBeyondTheContendedModel) {
  State s = MakeState();
  s.set_placement_candidates(2);
  for (int n = 0; n < 4; ++n) AddNode(s, MakeNode(absl::StrCat("l", n), 2, "L4"));
  AddNode(s, MakeNode("h", 8, "H100-80GB"));
  // 40 one-GPU requests that may use only L4s, each released: the mix now
  // has L4-limited demand, and the cluster is empty again.
  for (int n = 0; n < 40; ++n) {
    ChangeSet changes;
    CapacityRequestSpec limited = testing::WholeSpec(absl::StrCat("l4-", n), 1, 1);
    limited.gpu_models = {"L4"};
    auto out = RequestCapacity(s, limited, kT0, changes);
    ASSERT_TRUE(out.ok() && out->request.state == RequestState::kAdmitted);
    ASSERT_TRUE(ReleaseRequest(s, out->request.id, kT0, changes).ok());
  }
  ASSERT_TRUE(s.fragmentation().has_model_pressure());
  ASSERT_GT(s.fragmentation().ModelPressure("L4"), 0);

  ChangeSet changes;
  auto flexible = RequestCapacity(s, testing::WholeSpec("any", 1, 1), kT0, changes);
  ASSERT_TRUE(flexible.ok());
  ASSERT_EQ(flexible->request.state, RequestState::kAdmitted);
  ASSERT_EQ(flexible->request.placements.size(), 1u);
  EXPECT_EQ(s.FindNode(flexible->request.placements[0].node_id)->name, "h");
}

}  // namespace
}  // namespace arbiter::core
