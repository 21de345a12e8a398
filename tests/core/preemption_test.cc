// ChooseVictims: the cheapest victims that let a request in, and no more,
// for every number of victims needed from one to all candidates, and none
// when even all of them would not be enough; with whole GPUs (one trial
// state serves every step) and with MIG instances (a copy per trial); only
// from the preempted pool, whose live requests are all a trial copies.
#include "core/preemption.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/quota.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::WholeSpec;

constexpr int kCandidates = 40;

// `kCandidates` preemptible requests of one GPU each (or one MIG instance
// of `mig_profile`) on one-GPU nodes, admitted a second apart: the later
// one was admitted, the less work it loses, so the cheapest victims are the
// last admitted. Returns their ids in admission order.
std::vector<int64_t> FillWithPreemptible(State& s, const std::string& mig_profile = "",
                                         const std::string& pool = "serving") {
  for (int i = 0; i < kCandidates; ++i) {
    AddNode(s, MakeNode(absl::StrCat(pool, i), 1, "H100-80GB", pool));
  }
  std::vector<int64_t> ids;
  for (int i = 0; i < kCandidates; ++i) {
    CapacityRequestSpec spec = WholeSpec(absl::StrCat(pool, "-low", i), 1, 1);
    spec.pool = pool;
    if (!mig_profile.empty()) spec.shape.gpu = MigShape{mig_profile, 0};
    spec.preemptible = true;
    ChangeSet changes;
    absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, kT0 + absl::Seconds(i), changes);
    EXPECT_TRUE(out.ok() && out->request.state == RequestState::kAdmitted) << i;
    if (out.ok()) ids.push_back(out->request.id);
  }
  return ids;
}

// A priority-1 request of `members` members of one GPU (or of `mig_profile`).
CapacityRequest Urgent(const State& s, int members, const std::string& mig_profile = "",
                       const std::string& pool = "serving") {
  CapacityRequest urgent;
  urgent.id = s.requests().next_id();
  urgent.spec = WholeSpec("urgent", members, 1);
  urgent.spec.pool = pool;
  if (!mig_profile.empty()) urgent.spec.shape.gpu = MigShape{mig_profile, 0};
  urgent.spec.priority = 1;
  return urgent;
}

PreemptionPlan Plan(const State& s, const CapacityRequest& urgent) {
  const std::vector<Flavor> flavors = FlavorsOf(s, urgent.spec);
  EXPECT_FALSE(flavors.empty());
  if (flavors.empty()) return {};
  return ChooseVictims(s, urgent, flavors.front(), Window{}, kT0 + absl::Seconds(1000));
}

// The `n` last admitted, as a sorted list.
std::vector<int64_t> Cheapest(const std::vector<int64_t>& ids, int n) {
  std::vector<int64_t> last(ids.end() - n, ids.end());
  std::sort(last.begin(), last.end());
  return last;
}

std::vector<int64_t> Sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ChooseVictimsTest, TakesExactlyTheCheapestForEveryNumberNeeded) {
  State s = MakeState(/*nominal_milli=*/1'000'000);
  const std::vector<int64_t> ids = FillWithPreemptible(s);
  ASSERT_EQ(ids.size(), static_cast<size_t>(kCandidates));
  for (int needed = 1; needed <= kCandidates; ++needed) {
    const PreemptionPlan plan = Plan(s, Urgent(s, needed));
    EXPECT_EQ(Sorted(plan.victims), Cheapest(ids, needed)) << needed << " needed";
    EXPECT_EQ(plan.claim.size(), static_cast<size_t>(needed)) << needed << " needed";
  }
}

TEST(ChooseVictimsTest, NoneWhenEvenEveryCandidateIsNotEnough) {
  State s = MakeState(/*nominal_milli=*/1'000'000);
  FillWithPreemptible(s);
  AddNode(s, MakeNode("spare", 1, "H100-80GB"));  // Free: one GPU more than the candidates.
  EXPECT_EQ(Plan(s, Urgent(s, kCandidates + 1)).victims.size(), static_cast<size_t>(kCandidates));
  const PreemptionPlan plan = Plan(s, Urgent(s, kCandidates + 2));
  EXPECT_TRUE(plan.victims.empty());
  EXPECT_TRUE(plan.claim.empty());
}

TEST(ChooseVictimsTest, LeavesTheStateAsItWas) {
  State s = MakeState(/*nominal_milli=*/1'000'000);
  const std::vector<int64_t> ids = FillWithPreemptible(s);
  const int64_t used = s.UsedMilli("t", "serving");
  ASSERT_EQ(Plan(s, Urgent(s, 7)).victims.size(), 7u);
  EXPECT_EQ(s.UsedMilli("t", "serving"), used);
  for (int64_t id : ids) EXPECT_EQ(s.FindLiveRequest(id)->state, RequestState::kAdmitted);
}

// A plan copies only the preempted pool's live requests (State::
// CloneForPool): the other pool's, as cheap and as preemptible, are never
// taken, and the plan is the same as with the pool alone.
TEST(ChooseVictimsTest, TakesOnlyFromThePreemptedPool) {
  State s = MakeState(/*nominal_milli=*/1'000'000);
  ChangeSet ch;
  ASSERT_TRUE(SetQuota(s, {"t", "batch", 1'000'000}, kT0, ch).ok());
  ASSERT_TRUE(SetPowerBudget(s, {PowerScope::kPool, "batch", 1'000'000, false}, kT0, ch).ok());
  const std::vector<int64_t> serving = FillWithPreemptible(s);
  const std::vector<int64_t> batch = FillWithPreemptible(s, "", "batch");
  ASSERT_EQ(batch.size(), static_cast<size_t>(kCandidates));
  for (int needed : {1, 6, kCandidates}) {
    EXPECT_EQ(Sorted(Plan(s, Urgent(s, needed)).victims), Cheapest(serving, needed)) << needed;
    EXPECT_EQ(Sorted(Plan(s, Urgent(s, needed, "", "batch")).victims), Cheapest(batch, needed))
        << needed;
  }
  EXPECT_TRUE(Plan(s, Urgent(s, kCandidates + 1)).victims.empty());
  // The other pool's requests are gone from the copy; what they are charged
  // (quota, watts) is not.
  const State copy = s.CloneForPool("serving");
  EXPECT_EQ(copy.FindLiveRequest(batch.front()), nullptr);
  ASSERT_NE(copy.FindLiveRequest(serving.front()), nullptr);
  EXPECT_EQ(copy.UsedMilli("t", "batch"), s.UsedMilli("t", "batch"));
  EXPECT_GT(s.power().DrawMilliwatts(PowerScope::kPool, "batch"), 0);
  EXPECT_EQ(copy.power().DrawMilliwatts(PowerScope::kPool, "batch"),
            s.power().DrawMilliwatts(PowerScope::kPool, "batch"));
  EXPECT_EQ(copy.HoldingIn("serving"), s.HoldingIn("serving"));
  EXPECT_TRUE(copy.HoldingIn("batch").empty());
}

TEST(ChooseVictimsTest, WithMigInstancesTakesExactlyTheCheapest) {
  State s = MakeState(/*nominal_milli=*/1'000'000);
  // A 7g.80gb instance fills its GPU: each victim frees one for the next.
  const std::vector<int64_t> ids = FillWithPreemptible(s, "7g.80gb");
  ASSERT_EQ(ids.size(), static_cast<size_t>(kCandidates));
  for (int needed : {1, 2, 3, 5, 9, 17, kCandidates}) {
    const PreemptionPlan plan = Plan(s, Urgent(s, needed, "7g.80gb"));
    EXPECT_EQ(Sorted(plan.victims), Cheapest(ids, needed)) << needed << " needed";
  }
  EXPECT_TRUE(Plan(s, Urgent(s, kCandidates + 1, "7g.80gb")).victims.empty());
}

}  // namespace
}  // namespace arbiter::core
