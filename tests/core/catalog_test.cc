// The GPU catalog as data (docs/catalog.md): a model added through
// SetGpuModel, with its MIG table, takes nodes and MIG placements; setting
// a model to what it is records nothing; a model in use keeps its memory
// and MIG table; bad models name their field and change nothing.
#include <vector>

#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/mig.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::IsOkAndHolds;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::StatusIs;
using ::testing::StartsWith;

// A Blackwell-like model with a three-profile MIG table.
GpuModel B200() {
  GpuModel m;
  m.name = "B200";
  m.memory_mib = 183'359;
  m.sm_count = 148;
  m.tdp_watts = 1000;
  m.mig_capable = true;
  m.nvlink_domain_size = 8;
  m.mig_profiles = {
      MigProfile{"1g.23gb", 19, 1, 1, 18, 22'528, 7, false, {0, 1, 2, 3, 4, 5, 6}},
      MigProfile{"3g.90gb", 9, 4, 3, 54, 90'624, 2, false, {0, 4}},
      MigProfile{"7g.180gb", 0, 8, 7, 148, 181'248, 1, false, {0}},
  };
  return m;
}

TEST(CatalogTest, AnAddedModelTakesNodesAndMigPlacements) {
  State s = ::arbiter::testing::MakeState();
  ChangeSet ch;
  EXPECT_THAT(SetGpuModel(s, B200(), ch), IsOkAndHolds(true));
  ASSERT_EQ(ch.changes.size(), 1u);
  EXPECT_EQ(std::get<GpuModel>(ch.changes[0]).name, "B200");
  ASSERT_THAT(RegisterNode(s, MakeNode("b1", 1, "B200"), kT0, ch), IsOk());
  CapacityRequestSpec spec = ::arbiter::testing::WholeSpec("mig", 2, 1);
  spec.shape.gpu = MigShape{"3g.90gb"};
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, kT0, ch);
  ASSERT_THAT(out, IsOk());
  ASSERT_EQ(out->request.state, RequestState::kAdmitted);
  ASSERT_EQ(out->request.placements.size(), 2u);
  EXPECT_EQ(out->request.placements[0].mig_profile, "3g.90gb");
  EXPECT_EQ(out->request.placements[0].gpu_milli, 54 * 1000 / 148);
  // The GPU's two 3g slots are taken: a third waits.
  spec.idempotency_key = "third";
  spec.members = 1;
  EXPECT_EQ(RequestCapacity(s, spec, kT0, ch)->request.state, RequestState::kQueued);
}

TEST(CatalogTest, SettingAModelAsItIsRecordsNothing) {
  State s = ::arbiter::testing::MakeState();
  ChangeSet ch;
  ASSERT_THAT(SetGpuModel(s, B200(), ch), IsOk());
  ChangeSet again;
  EXPECT_THAT(SetGpuModel(s, B200(), again), IsOkAndHolds(false));
  EXPECT_TRUE(again.empty());
  // A seeded model with its built-in table, set to exactly that, too.
  GpuModel h100 = *s.FindGpuModel("H100-80GB");
  EXPECT_THAT(SetGpuModel(s, h100, again), IsOkAndHolds(false));
  EXPECT_TRUE(again.empty());
}

TEST(CatalogTest, AModelInUseKeepsItsMemoryAndMigTable) {
  State s = ::arbiter::testing::MakeState();
  ChangeSet ch;
  ASSERT_THAT(SetGpuModel(s, B200(), ch), IsOk());
  ASSERT_THAT(RegisterNode(s, MakeNode("b1", 1, "B200"), kT0, ch), IsOk());
  GpuModel bigger = B200();
  bigger.memory_mib = 200'000;
  ChangeSet none;
  EXPECT_THAT(SetGpuModel(s, bigger, none),
              StatusIs(absl::StatusCode::kFailedPrecondition, StartsWith("gpu_model.memory_mib:")));
  GpuModel fewer = B200();
  fewer.mig_profiles.pop_back();
  EXPECT_THAT(SetGpuModel(s, fewer, none), StatusIs(absl::StatusCode::kFailedPrecondition,
                                                    StartsWith("gpu_model.mig_profiles:")));
  EXPECT_TRUE(none.empty());
  // Its power and NVLink facts may change.
  GpuModel cooler = B200();
  cooler.tdp_watts = 700;
  EXPECT_THAT(SetGpuModel(s, cooler, none), IsOkAndHolds(true));
  EXPECT_EQ(s.FindGpuModel("B200")->tdp_watts, 700);
}

TEST(CatalogTest, BadModelsNameTheFieldAndChangeNothing) {
  struct Case {
    const char* field;
    void (*edit)(GpuModel&);
  };
  for (const Case& c :
       std::vector<Case>{{"gpu_model.name:", [](GpuModel& m) { m.name = "no spaces"; }},
                         {"gpu_model.memory_mib:", [](GpuModel& m) { m.memory_mib = 0; }},
                         {"gpu_model.tdp_watts:", [](GpuModel& m) { m.tdp_watts = -1; }},
                         {"gpu_model.vendor:", [](GpuModel& m) { m.vendor = ""; }},
                         {"gpu_model.mig_capable:", [](GpuModel& m) { m.mig_capable = false; }},
                         {"gpu_model.mig_profiles:", [](GpuModel& m) { m.mig_profiles.clear(); }},
                         {"gpu_model.mig_profiles[1].start_slots:",
                          [](GpuModel& m) {
                            m.mig_profiles[1].start_slots = {0, 6};
                          }},
                         {"gpu_model.mig_profiles[2].name:",
                          [](GpuModel& m) { m.mig_profiles[2].name = "1g.23gb"; }},
                         {"gpu_model.mig_profiles[0].compute_slices:",
                          [](GpuModel& m) { m.mig_profiles[0].compute_slices = 8; }},
                         {"gpu_model.mig_profiles[2].memory_mib:",
                          [](GpuModel& m) { m.mig_profiles[2].memory_mib = 200'000; }}}) {
    SCOPED_TRACE(c.field);
    State s = ::arbiter::testing::MakeState();
    GpuModel bad = B200();
    c.edit(bad);
    ChangeSet ch;
    EXPECT_THAT(SetGpuModel(s, bad, ch),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.field)));
    EXPECT_TRUE(ch.empty());
    EXPECT_EQ(s.FindGpuModel("B200"), nullptr);
  }
}

TEST(CatalogTest, TheProfileTableRoundTripsAsText) {
  const std::vector<MigProfile> table = B200().mig_profiles;
  std::vector<MigProfile> back;
  ASSERT_THAT(ParseMigProfiles(FormatMigProfiles(table), &back), IsOk());
  EXPECT_EQ(back, table);
  EXPECT_FALSE(ParseMigProfiles("3g.90gb/9/4", &back).ok());
}

}  // namespace
}  // namespace arbiter::core
