#include "core/fragmentation.h"

#include "gtest/gtest.h"

#include "core/placement.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

// Half the demand is a 500-milli fraction needing 1 core, half needs two
// whole GPUs; host-only tasks are in the mix but fragment no GPU.
FragmentationModel Model() {
  DemandProfile profile;
  profile.Observe({1, 500, 1000, 0});
  profile.Observe({2, 1000, 0, 0});
  profile.Observe({0, 0, 4000, 0}, 2);
  FragmentationModel model;
  model.Reset(profile);
  return model;
}

TEST(FragmentationTest, WeighsEachShapesUnusableCapacity) {
  // Fraction 500: only the 200 GPU is unusable. Two whole GPUs: both empty
  // GPUs are usable, the partly used 200 and 600 are not.
  EXPECT_DOUBLE_EQ(Model().Expected({{200, 600, 1000, 1000}, 8000, 1000}), 0.5 * 200 + 0.5 * 800);
}

TEST(FragmentationTest, ANodeWithoutTheCpuStrandsAllItsGpus) {
  // The fraction needs a core the node lacks: all 2800 free milli are lost.
  EXPECT_DOUBLE_EQ(Model().Expected({{200, 600, 1000, 1000}, 500, 1000}), 0.5 * 2800 + 0.5 * 800);
}

TEST(FragmentationTest, TooFewEmptyGpusStrandThemAll) {
  EXPECT_DOUBLE_EQ(Model().Expected({{0, 1000}, 8000, 1000}), 0.5 * 0 + 0.5 * 1000);
  EXPECT_DOUBLE_EQ(Model().Expected({{0, 0}, 8000, 1000}), 0);
}

TEST(FragmentationTest, EmptyModelScoresZero) {
  FragmentationModel model;
  model.Reset(DemandProfile());
  EXPECT_TRUE(model.empty());
  EXPECT_DOUBLE_EQ(model.Expected({{300}, 1, 1}), 0);
}

TEST(FragmentationTest, PackerCompletesAGpuRatherThanOpeningOne) {
  // With a learnt mix of 500-milli fractions, a second 500 goes onto the
  // half-used GPU on the other node, not onto an empty GPU next to it.
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

}  // namespace
}  // namespace arbiter::core
