// ImportOrganisation (a whole organisation's teams and quotas in one
// decision, all or nothing, idempotent) and QueuePositions (a queued
// request's place in its pool's decision order).
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

#include "core/arbitration.h"
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

// Cohort "ml" with teams "nlp" and "vision" under it, each with a quota in
// both pools.
Organisation MlCohort() {
  Organisation org;
  org.teams = {{"ml", "", 1000}, {"nlp", "ml", 2000}, {"vision", "ml", 1000}};
  for (const char* team : {"nlp", "vision"}) {
    for (const char* pool : {"serving", "batch"}) {
      Quota q{team, pool, 8000};
      q.borrowing_limit_milli = kUnlimited;
      org.quotas.push_back(q);
    }
  }
  return org;
}

TEST(ImportOrganisationTest, CreatesTheTeamsAndSetsTheQuotas) {
  State s = MakeState();
  ChangeSet changes;
  absl::StatusOr<ImportCounts> counts = ImportOrganisation(s, MlCohort(), kT0, changes);
  ASSERT_THAT(counts, IsOk());
  EXPECT_EQ(counts->teams_created, 3);
  EXPECT_EQ(counts->quotas_set, 4);
  EXPECT_EQ(changes.changes.size(), 7u);
  ASSERT_NE(s.FindTeam("nlp"), nullptr);
  EXPECT_EQ(s.FindTeam("nlp")->parent, "ml");
  EXPECT_EQ(s.FindTeam("nlp")->weight_milli, 2000);
  ASSERT_NE(s.FindQuota("vision", "batch"), nullptr);
  EXPECT_EQ(s.FindQuota("vision", "batch")->nominal_milli, 8000);
}

TEST(ImportOrganisationTest, TakesTheTeamsInAnyOrderAndCreatesParentsFirst) {
  State s = MakeState();
  Organisation org = MlCohort();
  org.teams.push_back({"cv", "vision", 1000});
  std::reverse(org.teams.begin(), org.teams.end());  // cv, vision, nlp, ml.
  ChangeSet changes;
  ASSERT_THAT(ImportOrganisation(s, org, kT0, changes), IsOk());
  std::vector<std::string> created;
  for (const Change& c : changes.changes) {
    if (const Team* t = std::get_if<Team>(&c)) created.push_back(t->name);
  }
  EXPECT_EQ(created, (std::vector<std::string>{"ml", "vision", "cv", "nlp"}));
  EXPECT_EQ(s.CohortOf("cv"), "ml");
}

TEST(ImportOrganisationTest, TheSameImportTwiceChangesNothing) {
  State s = MakeState();
  ChangeSet first;
  ASSERT_THAT(ImportOrganisation(s, MlCohort(), kT0, first), IsOk());
  ChangeSet second;
  absl::StatusOr<ImportCounts> counts = ImportOrganisation(s, MlCohort(), kT0, second);
  ASSERT_THAT(counts, IsOk());
  EXPECT_EQ(counts->teams_created, 0);
  EXPECT_EQ(counts->teams_unchanged, 3);
  EXPECT_EQ(counts->quotas_set, 0);
  EXPECT_EQ(counts->quotas_unchanged, 4);
  EXPECT_TRUE(second.empty());
  // A changed quota is set; the rest are left.
  Organisation raised = MlCohort();
  raised.quotas[0].nominal_milli = 16'000;
  ChangeSet third;
  counts = ImportOrganisation(s, raised, kT0, third);
  ASSERT_THAT(counts, IsOk());
  EXPECT_EQ(counts->quotas_set, 1);
  EXPECT_EQ(third.changes.size(), 1u);
  EXPECT_EQ(s.FindQuota("nlp", "serving")->nominal_milli, 16'000);
}

// Each bad import is refused naming its entry, and leaves the state and the
// change set as they were.
TEST(ImportOrganisationTest, RefusesABadEntryByNameAndWritesNothing) {
  struct Case {
    const char* what;
    void (*spoil)(Organisation&);
    absl::StatusCode code;
    const char* field;
  };
  const std::vector<Case> cases = {
      {"unknown parent", [](Organisation& o) { o.teams[2].parent = "nowhere"; },
       absl::StatusCode::kNotFound, "teams[2].parent"},
      {"a cohort cycle",
       [](Organisation& o) {
         o.teams[0].parent = "vision";  // ml -> vision -> ml.
       },
       absl::StatusCode::kInvalidArgument,
       "teams[0].parent: 'vision' makes a cohort cycle: "
       "ml -> vision -> ml"},
      {"team given twice", [](Organisation& o) { o.teams.push_back(o.teams[2]); },
       absl::StatusCode::kAlreadyExists, "teams[3].name"},
      {"existing team with another weight",
       [](Organisation& o) {
         o.teams.push_back({"t", "", 5000});
       },
       absl::StatusCode::kAlreadyExists, "teams[3].name"},
      {"bad team name", [](Organisation& o) { o.teams[1].name = "no spaces"; },
       absl::StatusCode::kInvalidArgument, "teams[1].name"},
      {"unknown pool", [](Organisation& o) { o.quotas[2].pool = "nowhere"; },
       absl::StatusCode::kNotFound, "quotas[2].pool"},
      {"unknown team", [](Organisation& o) { o.quotas[3].team = "nobody"; },
       absl::StatusCode::kNotFound, "quotas[3].team"},
      {"unknown model", [](Organisation& o) { o.quotas[1].gpu_model = "Z9"; },
       absl::StatusCode::kNotFound, "quotas[1].gpu_model"},
      {"negative nominal", [](Organisation& o) { o.quotas[3].nominal_milli = -1; },
       absl::StatusCode::kInvalidArgument, "quotas[3].nominal_milli"},
      {"quota given twice", [](Organisation& o) { o.quotas.push_back(o.quotas[1]); },
       absl::StatusCode::kInvalidArgument,
       "quotas[4]: the same team, pool and GPU model as "
       "quotas[1]"},
      {"nothing", [](Organisation& o) { o = Organisation{}; }, absl::StatusCode::kInvalidArgument,
       "teams:"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    State s = MakeState();
    Organisation org = MlCohort();
    c.spoil(org);
    ChangeSet changes;
    EXPECT_THAT(ImportOrganisation(s, org, kT0, changes), StatusIs(c.code, StartsWith(c.field)));
    EXPECT_TRUE(changes.empty());
    EXPECT_EQ(s.FindTeam("ml"), nullptr);
    EXPECT_EQ(s.FindTeam("nlp"), nullptr);
    EXPECT_EQ(s.FindQuota("vision", "batch"), nullptr);
  }
}

TEST(ImportOrganisationTest, RefusesMoreThanTheLimit) {
  State s = MakeState();
  Organisation org;
  org.quotas.assign(kMaxImportEntries + 1, Quota{"t", "batch", 1000});
  ChangeSet changes;
  EXPECT_THAT(ImportOrganisation(s, org, kT0, changes),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at most")));
  EXPECT_TRUE(changes.empty());
}

TEST(ImportOrganisationTest, AdmitsWhatTheNewQuotasMakeRoomFor) {
  State s = MakeState(/*nominal_milli=*/2000);
  AddNode(s, MakeNode("n1", 4, "H100-80GB"));
  ChangeSet changes;
  ASSERT_EQ(RequestCapacity(s, WholeSpec("a", 1, 1), kT0, changes)->request.state,
            RequestState::kAdmitted);
  const CapacityRequest waiting = RequestCapacity(s, WholeSpec("b", 1, 2), kT0, changes)->request;
  ASSERT_EQ(waiting.state, RequestState::kQueued);
  Organisation org;
  org.quotas = {Quota{"t", "serving", 4000}};
  ChangeSet imported;
  ASSERT_THAT(ImportOrganisation(s, org, kT0, imported), IsOk());
  EXPECT_EQ(s.FindLiveRequest(waiting.id)->state, RequestState::kAdmitted);
}

TEST(QueuePositionsTest, FollowThePoolsDecisionOrder) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 1, "H100-80GB"));
  ChangeSet ch;
  auto request = [&](const char* key, int32_t priority) {
    CapacityRequestSpec spec = WholeSpec(key, 1, 1);
    spec.priority = priority;
    return RequestCapacity(s, spec, kT0, ch)->request;
  };
  const CapacityRequest running = request("running", 0);
  ASSERT_EQ(running.state, RequestState::kAdmitted);
  const CapacityRequest old_low = request("old-low", 0);
  const CapacityRequest high = request("high", 5);
  const CapacityRequest new_low = request("new-low", 0);
  const CapacityRequest middle = request("middle", 2);
  // Asked in any order, with ids that are not queued or not known.
  const std::vector<int64_t> positions =
      QueuePositions(s, {new_low.id, running.id, high.id, 999'999, middle.id, old_low.id});
  EXPECT_EQ(positions, (std::vector<int64_t>{4, 0, 1, 0, 2, 3}));
  // Asked one at a time, the same.
  EXPECT_EQ(QueuePositions(s, {old_low.id}), std::vector<int64_t>{3});
  EXPECT_EQ(QueuePositions(s, {high.id}), std::vector<int64_t>{1});
  // The first in the order is the one a freed GPU goes to.
  ChangeSet released;
  ASSERT_THAT(ReleaseRequest(s, running.id, kT0, released), IsOk());
  EXPECT_EQ(s.FindLiveRequest(high.id)->state, RequestState::kAdmitted);
  EXPECT_EQ(QueuePositions(s, {old_low.id, middle.id, new_low.id}),
            (std::vector<int64_t>{2, 1, 3}));
}

}  // namespace
}  // namespace arbiter::core
