#include "core/mig_fragmentation.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/placement.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::WholeSpec;

// H100-80GB: compute slices 1g 1, 2g 2, 3g 3, 4g 4, 7g 7; MigMilli (SMs of
// 132) 1g.10gb 121, 1g.20gb 196, 2g.20gb 242, 3g.40gb 454, 4g.40gb 484.
const std::vector<MigProfile>& H100() { return *BuiltinMigProfiles("H100-80GB"); }

// "4g.40gb@0*,3g.40gb@4": a layout, allocated instances starred.
std::vector<MigInstance> Layout(absl::string_view text) {
  std::vector<MigInstance> layout;
  std::string plain(text);
  plain.erase(std::remove(plain.begin(), plain.end(), '*'), plain.end());
  EXPECT_THAT(ParseMigLayout(plain, &layout), IsOk());
  size_t i = 0;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    layout[i++].allocated = absl::EndsWith(part, "*");
  }
  return layout;
}

MigStranded For(absl::string_view layout, absl::string_view profile) {
  return MigStrandedFor(H100(), Layout(layout), profile);
}

int32_t Usable(absl::string_view layout, absl::string_view profile) {
  return MigUsableInstances(H100(), Layout(layout), *FindMigProfile(H100(), profile));
}

TEST(MigStrandedTest, AFixedLayoutOffersOnlyItsFreeInstances) {
  // 4g.40gb@0 in use, 3g.40gb@4 free: 3 slices and 516 milli are free.
  const char* kLayout = "4g.40gb@0*,3g.40gb@4";
  EXPECT_EQ(Usable(kLayout, "3g.40gb"), 1);
  EXPECT_EQ(Usable(kLayout, "1g.10gb"), 0);
  EXPECT_EQ(Usable(kLayout, "2g.20gb"), 0);
  EXPECT_EQ(For(kLayout, "1g.10gb"), (MigStranded{3000, 516}));
  EXPECT_EQ(For(kLayout, "2g.20gb"), (MigStranded{3000, 516}));
  EXPECT_EQ(For(kLayout, "3g.40gb"), (MigStranded{0, 516 - 454}));
  EXPECT_EQ(For(kLayout, "7g.80gb"), (MigStranded{3000, 516}));
  // Another model's profile cannot use the GPU at all.
  EXPECT_EQ(For(kLayout, "3g.20gb"), (MigStranded{3000, 516}));
  // Without the 3g instance no new one may be made while the 4g is in use.
  EXPECT_EQ(For("4g.40gb@0*", "3g.40gb"), (MigStranded{3000, 516}));
  EXPECT_EQ(For("4g.40gb@0*", "1g.10gb"), (MigStranded{3000, 516}));
}

TEST(MigStrandedTest, AFixedLayoutStrandsWhatItsStartSlotsLeave) {
  // One 2g in use: two 2g instances and a 1g.20gb are free, 5 slices.
  const char* kLayout = "2g.20gb@0*,2g.20gb@2,2g.20gb@4,1g.20gb@6";
  EXPECT_EQ(For(kLayout, "2g.20gb"), (MigStranded{1000, 758 - 2 * 242}));
  EXPECT_EQ(For(kLayout, "1g.20gb"), (MigStranded{4000, 758 - 196}));
  EXPECT_EQ(For(kLayout, "1g.10gb"), (MigStranded{5000, 758}));
  // Two 3g instances leave one slice no profile can take.
  EXPECT_EQ(For("3g.40gb@0*,3g.40gb@4*", "1g.10gb"), (MigStranded{1000, 92}));
  // A full GPU strands nothing.
  EXPECT_EQ(For("7g.80gb@0*", "1g.10gb"), (MigStranded{0, 0}));
}

TEST(MigStrandedTest, AnIdleGpuCountsAsEmptyWhateverItsLayout) {
  for (const char* layout : {"", "3g.40gb@0,3g.40gb@4"}) {
    SCOPED_TRACE(layout);
    EXPECT_EQ(Usable(layout, "1g.10gb"), 7);  // The 7-slice limit; slot 7 stays free.
    EXPECT_EQ(Usable(layout, "1g.20gb"), 4);  // Start slots 0, 2, 4, 6.
    EXPECT_EQ(Usable(layout, "2g.20gb"), 3);  // Start slots 0, 2, 4.
    EXPECT_EQ(Usable(layout, "3g.40gb"), 2);
    EXPECT_EQ(Usable(layout, "4g.40gb"), 1);  // Start slot 0 only.
    EXPECT_EQ(Usable(layout, "1g.10gb+me"), 1);
    EXPECT_EQ(For(layout, "1g.10gb"), (MigStranded{0, 1000 - 7 * 121}));
    EXPECT_EQ(For(layout, "1g.20gb"), (MigStranded{3000, 1000 - 4 * 196}));
    EXPECT_EQ(For(layout, "2g.20gb"), (MigStranded{1000, 1000 - 3 * 242}));
    EXPECT_EQ(For(layout, "3g.40gb"), (MigStranded{1000, 1000 - 2 * 454}));
    EXPECT_EQ(For(layout, "4g.40gb"), (MigStranded{3000, 1000 - 484}));
    EXPECT_EQ(For(layout, "7g.80gb"), (MigStranded{0, 0}));
    EXPECT_EQ(For(layout, "1g.10gb+me"), (MigStranded{6000, 1000 - 121}));
  }
}

TEST(MigStrandedTest, OnlyOneMediaInstancePerGpu) {
  // The +me instance is in use: no other +me instance can exist.
  const char* kLayout = "1g.10gb+me@0*,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6";
  EXPECT_EQ(For(kLayout, "1g.10gb+me"), (MigStranded{6000, 879}));
  EXPECT_EQ(For(kLayout, "1g.10gb"), (MigStranded{0, 879 - 6 * 121}));
}

TEST(MigStrandedTest, TheExpectationWeighsEachProfileByItsShare) {
  const MigMix mix = {{"1g.10gb", 1}, {"2g.20gb", 1}, {"3g.40gb", 2}};
  const std::vector<MigInstance> layout = Layout("4g.40gb@0*,3g.40gb@4");
  // 1 x 3000 + 1 x 3000 + 2 x 0 slices; 516 + 516 + 2 x 62 milli.
  EXPECT_EQ(MigStrandedWeighted(H100(), layout, mix), (MigStranded{6000, 1156}));
  EXPECT_EQ(ExpectedMigStranded(H100(), layout, mix), (MigStranded{1500, 289}));
  EXPECT_EQ(ExpectedMigStranded(H100(), layout, {}), (MigStranded{0, 0}));
}

TEST(MigStrandedTest, TakingAnInstanceOfAFixedLayoutGrowsAsLittleAsPossible) {
  const MigMix mix = {{"4g.40gb", 3}, {"3g.40gb", 1}};
  // Fixed: taking the free 3g lowers the 4g demand's fragment by 3 slices.
  EXPECT_EQ(MigStrandedGrowth(H100(), Layout("3g.40gb@0*,3g.40gb@4"), 1, mix).milli_slices,
            -3 * 3000);
  // Idle: taking the 3g of "3g,3g" fixes a layout with no 4g (3 x +1000,
  // 1 x 0); of "4g,3g" one that keeps the 4g (3 x -3000, 1 x +3000).
  EXPECT_EQ(MigStrandedGrowth(H100(), Layout("3g.40gb@0,3g.40gb@4"), 0, mix).milli_slices, 3000);
  EXPECT_EQ(MigStrandedGrowth(H100(), Layout("4g.40gb@0,3g.40gb@4"), 1, mix).milli_slices, -6000);
}

std::string Best(const MigMix& mix, absl::string_view wanted,
                 const std::vector<std::string>& fill_order = {}) {
  const MigProfile& w = *FindMigProfile(H100(), wanted);
  return FormatMigLayout(
      LeastStrandingMigLayout(H100(), w, mix, PlanMigLayout(H100(), w, fill_order)));
}

TEST(MigLayoutTest, TheLayoutForAnEmptyGpuStrandsLeastForTheMix) {
  // Only 3g asked for: PlanMigLayout's two 3g instances.
  EXPECT_EQ(Best({{"3g.40gb", 1}}, "3g.40gb"), "3g.40gb@0,3g.40gb@4");
  // 4g asked for more than 3g: the 3g goes at 4, leaving room for a 4g
  // (4 slices stranded for 3g, none for 4g: 1 x 4000 against 2 x 4000 +
  // 1 x 1000 for two 3g instances).
  EXPECT_EQ(Best({{"4g.40gb", 2}, {"3g.40gb", 1}}, "3g.40gb"), "4g.40gb@0,3g.40gb@4");
  // Mostly 1g: four 1g instances beside the 3g (every slice usable).
  EXPECT_EQ(Best({{"1g.10gb", 9}, {"3g.40gb", 1}}, "3g.40gb"),
            "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,3g.40gb@4");
  // No mix: PlanMigLayout's layout as it is.
  EXPECT_EQ(Best({}, "2g.20gb", {"1g.10gb"}), "2g.20gb@0,2g.20gb@2,2g.20gb@4,1g.10gb@6");
  // A tie keeps PlanMigLayout's layout (4g then 3g; 4g alone strands as much).
  EXPECT_EQ(Best({{"4g.40gb", 1}}, "4g.40gb", {"3g.40gb"}), "4g.40gb@0,3g.40gb@4");
  // A +me profile only where asked for.
  EXPECT_EQ(Best({{"1g.10gb", 1}}, "1g.10gb"),
            "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6");
  const std::string with_me = Best({{"1g.10gb", 1}, {"1g.10gb+me", 6}}, "1g.10gb");
  EXPECT_NE(with_me.find("1g.10gb+me@"), std::string::npos) << with_me;
}

TEST(MigLayoutTest, EveryChosenLayoutKeepsTheRules) {
  const MigMix mixes[] = {{{"1g.10gb", 5}, {"2g.20gb", 3}, {"3g.40gb", 2}},
                          {{"4g.40gb", 1}, {"1g.20gb", 7}},
                          {{"7g.80gb", 9}, {"2g.20gb", 1}, {"1g.10gb+me", 1}}};
  for (const MigMix& mix : mixes) {
    for (const MigProfile& p : H100()) {
      const std::vector<MigInstance> layout =
          LeastStrandingMigLayout(H100(), p, mix, PlanMigLayout(H100(), p, {}));
      SCOPED_TRACE(FormatMigLayout(layout));
      EXPECT_THAT(ValidateMigLayout(H100(), layout), IsOk());
      EXPECT_TRUE(std::any_of(layout.begin(), layout.end(),
                              [&](const MigInstance& i) { return i.profile == p.name; }));
    }
  }
}

CapacityRequestSpec MigSpec(const std::string& key, const std::string& profile) {
  CapacityRequestSpec spec = WholeSpec(key, 1, 1);
  spec.shape.gpu = MigShape{profile, 0};
  return spec;
}

// Places `profile` as the packer would after the demand of `mix` arrived.
GangPlacement Place(State& s, const std::string& key, const std::string& profile) {
  const CapacityRequestSpec spec = MigSpec(key, profile);
  s.ObserveDemand(spec);
  return PlaceGang(s, spec);
}

// Without the measure the 3g request gets PlanMigLayout's "3g,3g" and the 4g
// needs a second GPU.
TEST(MigPackerTest, A3gLeavesRoomForThe4gDemandThatDominates) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 2, "H100-80GB"));
  s.ObserveDemand(MigSpec("past-1", "4g.40gb"));
  s.ObserveDemand(MigSpec("past-2", "4g.40gb"));
  const GangPlacement a = Place(s, "a", "3g.40gb");
  ASSERT_EQ(a.result, FitResult::kPlaced);
  EXPECT_EQ(FormatMigLayout(a.placements[0].mig_new_layout), "4g.40gb@0,3g.40gb@4");
  EXPECT_EQ(a.placements[0].mig_start, 4);
  const GangPlacement b = Place(s, "b", "4g.40gb");
  ASSERT_EQ(b.result, FitResult::kPlaced);
  EXPECT_EQ(b.placements[0].gpu_indices, a.placements[0].gpu_indices);
  EXPECT_TRUE(b.placements[0].mig_new_layout.empty());
  const Gpu& gpu = s.FindNode("c", "n")->gpus[a.placements[0].gpu_indices[0]];
  EXPECT_EQ(ExpectedMigStranded(H100(), gpu.mig_layout, s.MigMixOf(*s.FindGpuModel("H100-80GB"))),
            (MigStranded{0, 62}));
}

// Two idle GPUs hold a free 3g; the one whose layout keeps a 4g is taken
// (without the measure: the first, by GPU index).
TEST(MigPackerTest, AnIdleLayoutIsChosenByWhatItStrands) {
  State s = MakeState();
  Node n = MakeNode("n", 2, "H100-80GB");
  n.gpus[0].mig_layout = Layout("3g.40gb@0,3g.40gb@4");
  n.gpus[1].mig_layout = Layout("4g.40gb@0,3g.40gb@4");
  AddNode(s, n);
  for (const char* key : {"past-1", "past-2", "past-3"}) s.ObserveDemand(MigSpec(key, "4g.40gb"));
  const GangPlacement a = Place(s, "a", "3g.40gb");
  ASSERT_EQ(a.result, FitResult::kPlaced);
  EXPECT_EQ(a.placements[0].gpu_indices, std::vector<int32_t>{1});
  EXPECT_EQ(a.placements[0].mig_start, 4);
  EXPECT_TRUE(a.placements[0].mig_new_layout.empty());  // The layout is kept.
}

// A GPU whose layout is in use is filled before an idle one.
TEST(MigPackerTest, AFixedLayoutIsFilledBeforeAnIdleOne) {
  State s = MakeState();
  Node n = MakeNode("n", 2, "H100-80GB");
  n.gpus[0].mig_layout = Layout("3g.40gb@0,3g.40gb@4");
  n.gpus[1].mig_layout = Layout("3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6");
  AddNode(s, n);
  ASSERT_EQ(Place(s, "a", "1g.10gb").placements[0].gpu_indices, std::vector<int32_t>{1});
  const GangPlacement b = Place(s, "b", "3g.40gb");
  ASSERT_EQ(b.result, FitResult::kPlaced);
  EXPECT_EQ(b.placements[0].gpu_indices, std::vector<int32_t>{1});
}

// The first-fit baseline: the first GPU with a free instance, else the first
// empty GPU, laid out larger profiles first, whatever the mix.
TEST(MigPackerTest, TheFirstFitBaselineIgnoresTheMix) {
  State s = MakeState();
  s.set_mig_packing_policy(State::MigPackingPolicy::kFirstFit);
  AddNode(s, MakeNode("n", 2, "H100-80GB"));
  s.ObserveDemand(MigSpec("past-1", "4g.40gb"));
  s.ObserveDemand(MigSpec("past-2", "4g.40gb"));
  const GangPlacement a = Place(s, "a", "3g.40gb");
  ASSERT_EQ(a.result, FitResult::kPlaced);
  EXPECT_EQ(a.placements[0].gpu_indices, std::vector<int32_t>{0});
  EXPECT_EQ(FormatMigLayout(a.placements[0].mig_new_layout), "3g.40gb@0,3g.40gb@4");
  const GangPlacement b = Place(s, "b", "2g.20gb");
  EXPECT_EQ(FormatMigLayout(b.placements[0].mig_new_layout),
            "2g.20gb@0,2g.20gb@2,2g.20gb@4,1g.20gb@6");
  EXPECT_EQ(b.placements[0].gpu_indices, std::vector<int32_t>{1});
}

}  // namespace
}  // namespace arbiter::core
