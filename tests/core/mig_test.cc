#include "core/mig.h"

#include <iterator>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/placement.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::vector<MigProfile>& H100() { return *BuiltinMigProfiles("H100-80GB"); }
const std::vector<MigProfile>& A100() { return *BuiltinMigProfiles("A100-40GB"); }

std::vector<MigInstance> Layout(absl::string_view text) {
  std::vector<MigInstance> layout;
  EXPECT_THAT(ParseMigLayout(text, &layout), IsOk());
  return layout;
}

TEST(MigGeometryTest, CatalogCoversTheFiveMigModels) {
  for (const char* model : {"A100-40GB", "A100-80GB", "H100-80GB", "H200-141GB", "B200"}) {
    ASSERT_NE(BuiltinMigProfiles(model), nullptr) << model;
    EXPECT_EQ(BuiltinMigProfiles(model)->size(), 7u) << model;
  }
  EXPECT_EQ(BuiltinMigProfiles("L4"), nullptr);
  EXPECT_EQ(FindMigProfile(H100(), "3g.40gb")->sm_count, 60);
}

TEST(MigGeometryTest, ValidatesTheNvidiaRules) {
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("4g.40gb@0,3g.40gb@4")), IsOk());
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("2g.20gb@0,2g.20gb@2,2g.20gb@4,1g.20gb@6")), IsOk());
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("1g.20gb@0,1g.20gb@2,1g.20gb@4,1g.20gb@6")), IsOk());
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("3g.40gb@0,3g.40gb@2")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot start")));
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("4g.40gb@0,2g.20gb@2")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("overlaps")));
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("1g.10gb+me@0,1g.10gb+me@1")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("+me")));
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("4g.40gb@0,2g.20gb@4,2g.20gb@6")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("3g.40gb@0,1g.10gb@4,1g.10gb@5,1g.10gb@6,"
                                               "1g.10gb@7")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(ValidateMigLayout(H100(), Layout("5g.50gb@0")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("unknown")));
}

// NVIDIA's B200 table (MIG User Guide, "GPU Instance Profiles on B200"):
// memory eighths, compute sevenths and instance counts; and the rules hold
// for every profile and the documented pairings.
TEST(MigGeometryTest, TheB200TableKeepsNvidiasRules) {
  const std::vector<MigProfile>& b200 = *BuiltinMigProfiles("B200");
  EXPECT_THAT(ValidateMigProfiles(b200, "b200"), IsOk());
  struct Row {
    const char* name;
    int32_t memory_slices, compute_slices, instances;
  };
  const Row kNvidia[] = {{"1g.23gb", 1, 1, 7}, {"1g.23gb+me", 1, 1, 1}, {"1g.45gb", 2, 1, 4},
                         {"2g.45gb", 2, 2, 3}, {"3g.90gb", 4, 3, 2},    {"4g.90gb", 4, 4, 1},
                         {"7g.180gb", 8, 7, 1}};
  ASSERT_EQ(b200.size(), std::size(kNvidia));
  for (const Row& row : kNvidia) {
    SCOPED_TRACE(row.name);
    const MigProfile* p = FindMigProfile(b200, row.name);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->memory_slices, row.memory_slices);
    EXPECT_EQ(p->compute_slices, row.compute_slices);
    EXPECT_EQ(p->max_instances, row.instances);
    EXPECT_EQ(p->media_extensions, absl::EndsWith(row.name, "+me"));
    // An empty GPU holds exactly NVIDIA's count of the profile, and the full
    // layout around it keeps the rules and charges at most one GPU.
    const std::vector<MigInstance> alone = PlanMigLayout(b200, *p, {});
    EXPECT_EQ(static_cast<int32_t>(alone.size()), row.instances);
    const std::vector<MigInstance> full = PlanMigLayout(
        b200, *p, {"7g.180gb", "4g.90gb", "3g.90gb", "2g.45gb", "1g.45gb", "1g.23gb"});
    EXPECT_THAT(ValidateMigLayout(b200, full), IsOk());
    int64_t milli = 0;
    for (const MigInstance& i : full) milli += MigMilli(b200, *FindMigProfile(b200, i.profile));
    EXPECT_LE(milli, 1000);
  }
  EXPECT_THAT(ValidateMigLayout(b200, Layout("4g.90gb@0,3g.90gb@4")), IsOk());
  EXPECT_THAT(ValidateMigLayout(b200, Layout("1g.45gb@0,1g.45gb@2,1g.45gb@4,1g.45gb@6")), IsOk());
  EXPECT_THAT(ValidateMigLayout(b200, Layout("3g.90gb@0,4g.90gb@4")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot start")));
  EXPECT_THAT(ValidateMigLayout(b200, Layout("1g.23gb+me@0,1g.23gb+me@1")),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("+me")));
  EXPECT_THAT(ValidateMigLayout(b200, Layout("4g.90gb@0,2g.45gb@4,2g.45gb@6")),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(MigMilli(b200, *FindMigProfile(b200, "3g.90gb")), 54 * 1000 / 148);
}

TEST(MigGeometryTest, PlansFullLayoutsAroundTheWantedProfile) {
  auto plan = [](absl::string_view name) {
    return FormatMigLayout(
        PlanMigLayout(H100(), *FindMigProfile(H100(), name),
                      {"7g.80gb", "4g.40gb", "3g.40gb", "2g.20gb", "1g.20gb", "1g.10gb"}));
  };
  EXPECT_EQ(plan("3g.40gb"), "3g.40gb@0,3g.40gb@4");
  EXPECT_EQ(plan("4g.40gb"), "4g.40gb@0,3g.40gb@4");
  EXPECT_EQ(plan("2g.20gb"), "2g.20gb@0,2g.20gb@2,2g.20gb@4,1g.20gb@6");
  EXPECT_EQ(plan("1g.10gb"),
            "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6");
  EXPECT_EQ(plan("7g.80gb"), "7g.80gb@0");
  EXPECT_EQ(plan("1g.10gb+me").substr(0, 13), "1g.10gb+me@0,");
}

TEST(MigGeometryTest, ChargesTheSmShare) {
  EXPECT_EQ(MigMilli(H100(), *FindMigProfile(H100(), "3g.40gb")), 454);  // 60 of 132 SMs.
  EXPECT_EQ(MigMilli(A100(), *FindMigProfile(A100(), "3g.20gb")), 428);  // 42 of 98.
  EXPECT_EQ(MigMilli(H100(), *FindMigProfile(H100(), "7g.80gb")), 1000);
}

CapacityRequestSpec MigSpec(const std::string& key, const std::string& profile, int members = 1) {
  CapacityRequestSpec spec = WholeSpec(key, members, 1);
  spec.shape.gpu = MigShape{profile, 0};
  return spec;
}

CapacityRequest Decide(State& s, const CapacityRequestSpec& spec) {
  ChangeSet changes;
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, kT0, changes);
  EXPECT_THAT(out, IsOk());
  return out.ok() ? out->request : CapacityRequest{};
}

TEST(MigPlacementTest, PartitionsAnEmptyGpuThenFillsItsInstances) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 2, "H100-80GB"));
  CapacityRequest a = Decide(s, MigSpec("a", "3g.40gb"));
  ASSERT_EQ(a.state, RequestState::kAdmitted);
  EXPECT_EQ(FormatMigLayout(a.placements[0].mig_new_layout), "3g.40gb@0,3g.40gb@4");
  EXPECT_EQ(a.placements[0].mig_start, 0);
  EXPECT_EQ(a.placements[0].gpu_milli, 454);
  CapacityRequest b = Decide(s, MigSpec("b", "3g.40gb"));
  ASSERT_EQ(b.state, RequestState::kAdmitted);
  EXPECT_TRUE(b.placements[0].mig_new_layout.empty());  // No change: a free instance.
  EXPECT_EQ(b.placements[0].gpu_indices, a.placements[0].gpu_indices);
  EXPECT_EQ(b.placements[0].mig_start, 4);
  EXPECT_EQ(s.UsedMilli("t", "serving"), 908);
  // The partitioned GPU is full; whole work takes the other one.
  CapacityRequest w = Decide(s, WholeSpec("w", 1, 1));
  ASSERT_EQ(w.state, RequestState::kAdmitted);
  EXPECT_NE(w.placements[0].gpu_indices, a.placements[0].gpu_indices);
  CapacityRequest c = Decide(s, MigSpec("c", "1g.10gb"));
  EXPECT_EQ(c.state, RequestState::kQueued);
}

TEST(MigPlacementTest, AnIdlePartitionedGpuIsTakenBackForWholeWork) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 1, "H100-80GB"));
  CapacityRequest a = Decide(s, MigSpec("a", "2g.20gb"));
  ChangeSet ch;
  ASSERT_THAT(ReleaseRequest(s, a.id, kT0, ch), IsOk());
  EXPECT_FALSE(s.FindNode("c", "n")->gpus[0].mig_layout.empty());  // Layout stays while idle.
  CapacityRequest w = Decide(s, WholeSpec("w", 1, 1));
  ASSERT_EQ(w.state, RequestState::kAdmitted);
  EXPECT_TRUE(w.placements[0].mig_layout_cleared);
  EXPECT_TRUE(s.FindNode("c", "n")->gpus[0].mig_layout.empty());
}

TEST(MigPlacementTest, FractionsNeverShareAPartitionedGpuInUse) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 1, "H100-80GB"));
  ASSERT_EQ(Decide(s, MigSpec("a", "1g.10gb")).state, RequestState::kAdmitted);
  CapacityRequest f = Decide(s, ::arbiter::testing::FractionSpec("f", 1, 100, 1024));
  EXPECT_EQ(f.state, RequestState::kQueued);
}

TEST(MigPlacementTest, AFailedGangLeavesLayoutsAsTheyWere) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 2, "H100-80GB"));
  ASSERT_EQ(Decide(s, WholeSpec("w", 1, 1)).state, RequestState::kAdmitted);
  // Two 7g instances need two empty GPUs; one is left.
  CapacityRequest g = Decide(s, MigSpec("g", "7g.80gb", 2));
  EXPECT_EQ(g.state, RequestState::kQueued);
  for (const Gpu& gpu : s.FindNode("c", "n")->gpus) EXPECT_TRUE(gpu.mig_layout.empty());
}

TEST(MigPlacementTest, UnknownOrUnsupportedProfilesAreNotFound) {
  State s = MakeState();
  AddNode(s, MakeNode("n", 1, "L4"));
  ChangeSet ch;
  EXPECT_THAT(RequestCapacity(s, MigSpec("a", "3g.41gb"), kT0, ch),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("shape.mig_profile:")));
  CapacityRequestSpec on_l4 = MigSpec("b", "3g.40gb");
  on_l4.gpu_models = {"L4"};
  EXPECT_THAT(RequestCapacity(s, on_l4, kT0, ch),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("shape.mig_profile:")));
  CapacityRequestSpec bad = MigSpec("c", "3G 40GB");
  EXPECT_THAT(RequestCapacity(s, bad, kT0, ch),
              StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("shape.mig_profile:")));
  EXPECT_TRUE(ch.empty());
  // A model that has the profile exists, but the pool has only L4s.
  EXPECT_EQ(Decide(s, MigSpec("d", "3g.40gb")).state, RequestState::kDenied);
}

}  // namespace
}  // namespace arbiter::core
