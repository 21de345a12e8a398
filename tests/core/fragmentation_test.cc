#include "core/fragmentation.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "core/demand_profile.h"
#include "core/placement.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

// Half the GPU demand is a 500-milli fraction needing 1 core, half needs two
// whole GPUs; two host-only tasks of 4 cores fragment no GPU but count in the
// mix's host demand: 9000 milli-CPU for 2500 milli-GPU, 3.6 per milli-GPU.
FragmentationModel Model() {
  DemandProfile profile;
  profile.Observe({1, 500, 1000, 0});
  profile.Observe({2, 1000, 0, 0});
  profile.Observe({0, 0, 4000, 0}, 2);
  FragmentationModel model;
  model.Reset(profile);
  return model;
}

constexpr double kCpuPerGpuMilli = 9000.0 / 2500.0;

// However varied the host sizes asked for, the profile keeps at most
// kMaxShapes shapes, with the proportions of the frequent ones.
TEST(DemandProfileTest, KeepsABoundedNumberOfShapes) {
  DemandProfile profile;
  for (int64_t cpu = 1; cpu <= 100'000; ++cpu) {
    profile.Observe({1, 500, 8'000, 0});  // A frequent shape...
    profile.Observe({1, 1000, cpu, 0});   // ...among ever new ones.
  }
  const std::vector<DemandProfile::Entry> entries = profile.Entries();
  EXPECT_LE(entries.size(), DemandProfile::kMaxShapes);
  int64_t total = 0;
  int64_t frequent = 0;
  for (const DemandProfile::Entry& e : entries) {
    total += e.count;
    if (e.shape.gpu_milli == 500) frequent = e.count;
  }
  EXPECT_EQ(total, profile.total());
  EXPECT_GT(frequent, profile.total() / 2) << "the frequent shape still dominates";
}

TEST(FragmentationTest, WeighsEachShapesUnusableCapacity) {
  // Enough CPU to feed all 2800 free milli (10080 needed). Fraction 500: only
  // the 200 GPU is unusable. Two whole GPUs: both empty GPUs are usable, the
  // partly used 200 and 600 are not.
  EXPECT_DOUBLE_EQ(Model().Expected({{200, 600, 1000, 1000}, 20000, 1000}), 0.5 * 200 + 0.5 * 800);
}

TEST(FragmentationTest, CountsGpuCapacityTheNodesCpuCannotFeed) {
  // 8000 milli-CPU feed 8000 / 3.6 = 2222 of the 2800 free milli-GPU.
  EXPECT_DOUBLE_EQ(Model().Expected({{200, 600, 1000, 1000}, 8000, 1000}),
                   0.5 * 200 + 0.5 * 800 + (2800 - 8000 / kCpuPerGpuMilli));
}

TEST(FragmentationTest, ANodeWithoutTheCpuStrandsAllItsGpus) {
  // The fraction needs a core the node lacks: all 2800 free milli are lost to
  // it, and 500 milli-CPU feed almost nothing.
  EXPECT_DOUBLE_EQ(Model().Expected({{200, 600, 1000, 1000}, 500, 1000}),
                   0.5 * 2800 + 0.5 * 800 + (2800 - 500 / kCpuPerGpuMilli));
}

TEST(FragmentationTest, TooFewEmptyGpusStrandThemAll) {
  EXPECT_DOUBLE_EQ(Model().Expected({{0, 1000}, 20000, 1000}), 0.5 * 0 + 0.5 * 1000);
  EXPECT_DOUBLE_EQ(Model().Expected({{0, 0}, 20000, 1000}), 0);
}

TEST(FragmentationTest, EmptyModelScoresZero) {
  FragmentationModel model;
  model.Reset(DemandProfile());
  EXPECT_TRUE(model.empty());
  EXPECT_DOUBLE_EQ(model.Expected({{300}, 1, 1}), 0);
}

TEST(FragmentationTest, PackerCompletesAGpuRatherThanOpeningOne) {
  // With a learnt mix of 500-milli fractions, a second 500 goes onto the
  // half-used GPU, not onto an empty GPU.
  State s = ::arbiter::testing::MakeState();
  ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode("a", 2, "H100-80GB"));
  ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode("b", 2, "H100-80GB"));
  CapacityRequestSpec spec = ::arbiter::testing::FractionSpec("k1", 1, 500, 1024);
  for (int i = 0; i < 8; ++i) s.ObserveDemand(spec);
  GangPlacement first = PlaceGang(s, spec);
  ASSERT_EQ(first.result, FitResult::kPlaced);
  GangPlacement second = PlaceGang(s, spec);
  ASSERT_EQ(second.result, FitResult::kPlaced);
  EXPECT_EQ(first.placements[0].node_id, second.placements[0].node_id);
  EXPECT_EQ(first.placements[0].gpu_indices, second.placements[0].gpu_indices);
}

TEST(FragmentationTest, CpuHungryWorkGoesWhereCpuIsPlentiful) {
  // The mix needs 6 cores per GPU on average. On the CPU-poor node (6 cores
  // per GPU) a 12-core pod would leave 1 of the 3 remaining GPUs without CPU;
  // on the CPU-rich node (52 per GPU) it strands nothing. Best fit alone
  // would pick the poor node (it keeps fewer GPUs free).
  State s = ::arbiter::testing::MakeState();
  ::arbiter::testing::AddNode(
      s, ::arbiter::testing::MakeNode("poor", 4, "H100-80GB", "serving", 24'000, 512'000));
  ::arbiter::testing::AddNode(
      s, ::arbiter::testing::MakeNode("rich", 8, "H100-80GB", "serving", 416'000, 512'000));
  CapacityRequestSpec hungry = ::arbiter::testing::WholeSpec("hungry", 1, 1);
  hungry.shape.cpu_milli = 12'000;
  const CapacityRequestSpec light = ::arbiter::testing::WholeSpec("light", 1, 1);
  // 40 observations: the model refreshes its snapshot after the first 32.
  for (int i = 0; i < 20; ++i) {
    s.ObserveDemand(hungry);
    s.ObserveDemand(light);
  }
  GangPlacement placed = PlaceGang(s, hungry);
  ASSERT_EQ(placed.result, FitResult::kPlaced);
  EXPECT_EQ(placed.placements[0].node_id, s.FindNode("c", "rich")->id);
}

TEST(DemandProfileTest, ModelSetsAreCanonical) {
  EXPECT_EQ(ModelSetKey({"V100M32", "V100M16", "V100M32"}), "V100M16|V100M32");
  EXPECT_EQ(ModelSetKey({}), "");
}

// FGD's measure: a shape that may use T4s only has every free GPU of a node
// of another model as its fragment ("no access"); on a T4 node, or one of
// several models, only the GPUs it cannot fill. Arbiter's measure leaves
// models to ModelPressure.
TEST(FragmentationTest, AShapeLimitedToOtherModelsCannotUseANodesGpus) {
  DemandProfile profile;
  profile.Observe({1, 500, 0, 0, "T4"});
  FragmentationModel model;
  model.Reset(profile, FragmentationModel::Measure::kFgd);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 8000, 1000, "T4"}), 200);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 8000, 1000, "G2"}), 1200);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 8000, 1000, ""}), 200) << "several models";
  // An unconstrained shape uses any model.
  profile.Observe({1, 500, 0, 0, ""});
  model.Reset(profile, FragmentationModel::Measure::kFgd);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 8000, 1000, "G2"}), 0.5 * 1200 + 0.5 * 200);
  model.Reset(profile, FragmentationModel::Measure::kArbiter);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 8000, 1000, "G2"}), 200);
}

// FGD's measure: host-only work counts every free GPU, memory counts nowhere.
TEST(FragmentationTest, FgdMeasureCountsHostOnlyWorkAndNotMemory) {
  DemandProfile profile;
  profile.Observe({1, 500, 1000, 4096}, 3);
  profile.Observe({0, 0, 1000, 0});
  FragmentationModel model;
  model.Reset(profile, FragmentationModel::Measure::kFgd);
  // No free memory: the fraction still fits in FGD's eyes.
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 20000, 0}), 0.75 * 200 + 0.25 * 1200);
}

// FGD's typical shapes: the most asked for until they cover 95% of tasks.
TEST(FragmentationTest, FgdMeasureKeepsTheTypicalShapes) {
  DemandProfile profile;
  profile.Observe({1, 500, 0, 0}, 96);
  profile.Observe({2, 1000, 0, 0}, 4);  // Beyond 95%: not typical.
  FragmentationModel model;
  model.Reset(profile, FragmentationModel::Measure::kFgd);
  EXPECT_DOUBLE_EQ(model.Expected({{200, 1000}, 20000, 1000}), 200);
}

// The published FGD gives whole-number node scores (100 x sigmoid of the
// fragmentation removed, per GPU), and equal scores go to the first node: a
// 500 on an empty node and on the free GPU of a node with {1000, 700} both
// remove nothing and score 50, so the first node wins, though the second
// would keep less capacity free.
TEST(FragmentationTest, PublishedFgdBreaksEqualScoresByNodeOrder) {
  for (const char* first : {"a", "b"}) {
    State s = ::arbiter::testing::MakeState();
    s.set_packing_policy(State::PackingPolicy::kFgd);
    const std::string other = std::string(first) == "a" ? "b" : "a";
    ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode(first, 2, "H100-80GB"));
    ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode(other, 2, "H100-80GB"));
    CapacityRequestSpec spec = ::arbiter::testing::FractionSpec("k1", 1, 500, 1024);
    Placement held;
    held.node_id = s.FindNode("c", "b")->id;
    held.gpu_indices = {1};
    held.gpu_milli = 300;
    held.gpu_memory_mib = 1024;
    held.workload_class = spec.workload_class;
    s.ApplyPlacement(held, +1);
    for (int i = 0; i < 40; ++i) s.ObserveDemand(spec);
    GangPlacement placed = PlaceGang(s, spec);
    ASSERT_EQ(placed.result, FitResult::kPlaced);
    EXPECT_EQ(placed.placements[0].node_id, s.FindNode("c", first)->id) << first;
    EXPECT_EQ(placed.placements[0].gpu_indices, std::vector<int32_t>{0}) << first;
  }
}

// The published best fit weighs free CPU and free GPU after the placement
// (against a 128-core, 8-GPU node): the CPU-poor 4-GPU node beats the
// CPU-rich 2-GPU one, where least GPU left free alone would pick the latter.
TEST(FragmentationTest, PublishedBestFitWeighsCpuAndGpu) {
  State s = ::arbiter::testing::MakeState();
  s.set_packing_policy(State::PackingPolicy::kBestFit);
  ::arbiter::testing::AddNode(
      s, ::arbiter::testing::MakeNode("rich", 2, "H100-80GB", "serving", 128'000, 512'000));
  ::arbiter::testing::AddNode(
      s, ::arbiter::testing::MakeNode("poor", 4, "H100-80GB", "serving", 8'000, 512'000));
  CapacityRequestSpec spec = ::arbiter::testing::WholeSpec("w", 1, 1);
  spec.shape.cpu_milli = 1'000;
  GangPlacement placed = PlaceGang(s, spec);
  ASSERT_EQ(placed.result, FitResult::kPlaced);
  // rich: 1 - (127/128 + 1/8) / 2 -> 44; poor: 1 - (7/128 + 3/8) / 2 -> 78.
  EXPECT_EQ(placed.placements[0].node_id, s.FindNode("c", "poor")->id);
}

// A quarter of the GPU demand may use T4s only; the cluster has 2 T4s of 10
// GPUs: filling the cluster, that demand needs 0.25 x 10 / 2 = 1.25 T4s per
// T4, and none of the G2s. A shape allowed both models spreads its share
// over all 10.
TEST(FragmentationTest, ModelPressureIsWhatLimitedDemandNeedsOfAModel) {
  DemandProfile profile;
  profile.Observe({1, 1000, 0, 0, "T4"});
  profile.Observe({1, 1000, 0, 0, ""}, 3);
  FragmentationModel model;
  model.Reset(profile, FragmentationModel::Measure::kArbiter,
              ClusterCapacity{{{"T4", 2}, {"G2", 8}}});
  EXPECT_DOUBLE_EQ(model.ModelPressure("T4"), 1.25);
  EXPECT_DOUBLE_EQ(model.ModelPressure("G2"), 0);
  EXPECT_DOUBLE_EQ(model.ModelPressure(""), 0);
  profile.Observe({1, 1000, 0, 0, "G2|T4"}, 4);  // Now 1/8 T4-only, 4/8 either.
  model.Reset(profile, FragmentationModel::Measure::kArbiter,
              ClusterCapacity{{{"T4", 2}, {"G2", 8}}});
  EXPECT_DOUBLE_EQ(model.ModelPressure("T4"), 0.125 * 10 / 2 + 0.5 * 10 / 10);
  EXPECT_DOUBLE_EQ(model.ModelPressure("G2"), 0.5 * 10 / 10);
  // No limited demand: no pressure anywhere.
  DemandProfile open;
  open.Observe({1, 1000, 0, 0, ""});
  model.Reset(open, FragmentationModel::Measure::kArbiter, ClusterCapacity{{{"T4", 2}, {"G2", 8}}});
  EXPECT_DOUBLE_EQ(model.ModelPressure("T4"), 0);
}

// Work that may use any model leaves the L4s to the work that may use only
// them, though best fit alone would fill the small L4 node first.
TEST(FragmentationTest, FlexibleWorkLeavesAContendedModelToWorkLimitedToIt) {
  for (const bool limited_demand : {true, false}) {
    State s = ::arbiter::testing::MakeState();
    ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode("l4", 2, "L4"));
    ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode("h100", 8, "H100-80GB"));
    CapacityRequestSpec flexible = ::arbiter::testing::WholeSpec("any", 1, 1);
    CapacityRequestSpec l4_only = ::arbiter::testing::WholeSpec("l4", 1, 1);
    l4_only.gpu_models = {"L4"};
    for (int i = 0; i < 40; ++i) s.ObserveDemand(limited_demand && i % 2 == 0 ? l4_only : flexible);
    GangPlacement placed = PlaceGang(s, flexible);
    ASSERT_EQ(placed.result, FitResult::kPlaced);
    EXPECT_EQ(placed.placements[0].node_id, s.FindNode("c", limited_demand ? "h100" : "l4")->id)
        << (limited_demand ? "half the demand may use L4s only" : "no limited demand: best fit");
  }
}

// 8-GPU tasks of 120 cores fit only the "big" nodes (8 GPUs, 128 cores), 8
// of the cluster's 48 GPUs, and are a third of the GPU demand (16 of 48
// GPUs): each node that can hold them carries (16 / 48) x 48 / 8 = 2. 8-GPU
// tasks of 64 cores fit the 32 GPUs of all 8-GPU nodes, more than half of
// the cluster: not scarce. 1-GPU tasks fit anything. Tasks limited to a
// model are ModelPressure's, not this.
TEST(FragmentationTest, TypePressureIsWhatDemandOnlyFewNodesHoldNeedsOfThem) {
  ClusterCapacity cluster;
  cluster.gpus_by_model = {{"G", 48}};
  cluster.node_types = {{"G", 8, 128'000, 1'000'000, 8},
                        {"G", 8, 96'000, 1'000'000, 24},
                        {"G", 2, 32'000, 1'000'000, 16}};
  DemandProfile profile;
  profile.Observe({8, 1000, 120'000, 0}, 2);  // 16 GPUs.
  profile.Observe({8, 1000, 64'000, 0}, 2);   // 16 GPUs.
  profile.Observe({1, 1000, 8'000, 0}, 16);   // 16 GPUs.
  FragmentationModel model;
  model.Reset(profile, FragmentationModel::Measure::kArbiter, cluster);
  FreeCapacity big, mid, small;
  big.gpu_model = mid.gpu_model = small.gpu_model = "G";
  big.node_gpus = mid.node_gpus = 8;
  small.node_gpus = 2;
  big.node_cpu_milli = 128'000;
  mid.node_cpu_milli = 96'000;
  small.node_cpu_milli = 32'000;
  big.node_memory_mib = mid.node_memory_mib = small.node_memory_mib = 1'000'000;
  EXPECT_DOUBLE_EQ(model.TypePressure(big), 16.0 / 48 * 48 / 8);
  EXPECT_DOUBLE_EQ(model.TypePressure(mid), 0);
  EXPECT_DOUBLE_EQ(model.TypePressure(small), 0);
  EXPECT_FALSE(model.has_model_pressure());

  DemandProfile limited;
  limited.Observe({8, 1000, 120'000, 0, "G"}, 2);
  limited.Observe({1, 1000, 8'000, 0}, 16);
  model.Reset(limited, FragmentationModel::Measure::kArbiter, cluster);
  EXPECT_DOUBLE_EQ(model.TypePressure(big), 0);
}

// One 8-GPU node of 128 cores, the only one that holds the 8-GPU tasks of
// 120 cores, and three 4-GPU nodes of 48 cores. Most tasks ask for 4 GPUs,
// so a 1-GPU task on a 4-GPU node strands 3 GPUs for them, and the
// fragmentation measure alone (the wide tasks are few by count) sends it to
// the big node; the big node's TypePressure (the wide tasks are a third of
// the GPU demand) keeps it for them.
TEST(FragmentationTest, FlexibleWorkLeavesTheOnlyNodesThatHoldScarceShapes) {
  for (const bool scarce_demand : {true, false}) {
    State s = ::arbiter::testing::MakeState();
    ::arbiter::testing::AddNode(
        s, ::arbiter::testing::MakeNode("big", 8, "H100-80GB", "serving", 128'000));
    for (int n = 0; n < 3; ++n) {
      ::arbiter::testing::AddNode(s, ::arbiter::testing::MakeNode(absl::StrCat("mid", n), 4,
                                                                  "H100-80GB", "serving", 48'000));
    }
    CapacityRequestSpec one = ::arbiter::testing::WholeSpec("one", 1, 1);
    one.shape.cpu_milli = 8'000;
    CapacityRequestSpec four = ::arbiter::testing::WholeSpec("four", 1, 4);
    four.shape.cpu_milli = 32'000;
    CapacityRequestSpec wide = ::arbiter::testing::WholeSpec("wide", 1, 8);
    wide.shape.cpu_milli = 120'000;
    // In every 15 tasks: 7 of 4 GPUs, 2 wide ones (or 1-GPU ones), 6 of 1.
    for (int i = 0; i < 90; ++i) {
      const int k = i % 15;
      s.ObserveDemand(k < 7 ? four : k < 9 ? (scarce_demand ? wide : one) : one);
    }
    GangPlacement placed = PlaceGang(s, one);
    ASSERT_EQ(placed.result, FitResult::kPlaced);
    EXPECT_EQ(placed.placements[0].node_id, s.FindNode("c", scarce_demand ? "mid0" : "big")->id)
        << (scarce_demand ? "the wide tasks need the big node" : "nothing needs it");
  }
}

}  // namespace
}  // namespace arbiter::core
