#include "clients/kube/controller.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace arbiter::kube {
namespace {

using json = nlohmann::json;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

PodInfo Pod(const std::string& name, int64_t allocation, int32_t member = 0) {
  PodInfo p;
  p.uid = "uid-" + name;
  p.ns = "research";
  p.name = name;
  p.node = "gpu-0";
  p.allocation = allocation;
  p.member = member;
  p.asks_for_gpus = true;
  return p;
}

std::vector<std::string> Describe(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(a.Describe());
  return out;
}

// What Arbiter answers by default: team research, its members held by the
// pods train-0 (member 0) and train-1 (member 1).
Outcome Ok(AllocationPhase phase = AllocationPhase::kAdmitted,
           absl::Time deadline = absl::InfiniteFuture()) {
  Outcome o{absl::OkStatus(), phase, deadline, "research"};
  o.holders =
      std::map<int32_t, std::string>{{0, "pod:research/train-0"}, {1, "pod:research/train-1"}};
  return o;
}

// Plans at `now` and reports every action done with `outcome`.
std::vector<std::string> Step(Controller& c, absl::Time now, const Outcome& outcome = Ok()) {
  std::vector<Action> actions = c.Plan(now);
  for (const Action& a : actions) c.Done(a, outcome, now);
  return Describe(actions);
}

ControllerOptions Options() {
  ControllerOptions o;
  o.renew_every = absl::Seconds(20);
  o.drain_grace = absl::Seconds(300);
  o.not_ready_after = absl::Seconds(120);
  o.retry_after = absl::Seconds(5);
  return o;
}

TEST(ControllerTest, LooksUpANewAllocationThenRenewsItsPodsLease) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  EXPECT_EQ(Step(c, kStart), std::vector<std::string>{"look up allocation 7"});
  EXPECT_EQ(c.PhaseOf(7), AllocationPhase::kAdmitted);
  EXPECT_EQ(Step(c, kStart),
            std::vector<std::string>{"renew allocation 7 for pod:research/train-0"});
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(19)).empty());
  EXPECT_EQ(Step(c, kStart + absl::Seconds(20)),
            std::vector<std::string>{"renew allocation 7 for pod:research/train-0"});
}

TEST(ControllerTest, AnActionInFlightIsNotPlannedTwice) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  ASSERT_EQ(c.Plan(kStart).size(), 1u);
  EXPECT_TRUE(c.Plan(kStart + absl::Seconds(30)).empty());
}

TEST(ControllerTest, ReleasesWhenEveryPodOfTheAllocationHasFinished) {
  Controller c(Options());
  c.AllocationChanged(7, AllocationPhase::kAdmitted, absl::InfiniteFuture(),
                      "research");  // Unknown: ignored.
  c.PodChanged(Pod("train-0", 7, 0), kStart);
  c.PodChanged(Pod("train-1", 7, 1), kStart);
  Step(c, kStart);  // Look up.
  Step(c, kStart);  // Renew both.
  PodInfo done = Pod("train-0", 7, 0);
  done.finished = true;
  c.PodChanged(done, kStart);
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(1)).empty()) << "one member still runs";
  PodInfo gone = Pod("train-1", 7, 1);
  c.PodGone(gone.uid, kStart);
  EXPECT_EQ(Step(c, kStart + absl::Seconds(2)), std::vector<std::string>{"release allocation 7"});
  EXPECT_EQ(c.PhaseOf(7), AllocationPhase::kEnded);
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(3)).empty()) << "released once";
  c.PodGone(done.uid, kStart);
  Step(c, kStart + absl::Seconds(4));
  EXPECT_EQ(c.pods(), 0u) << "forgotten once released and gone";
}

TEST(ControllerTest, AFailedReleaseIsRetriedAfterTheRetryInterval) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  Step(c, kStart);
  c.PodGone("uid-train-0", kStart);
  EXPECT_EQ(Step(c, kStart, Outcome{absl::UnavailableError("down")}),
            std::vector<std::string>{"release allocation 7"});
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(4)).empty());
  EXPECT_EQ(Step(c, kStart + absl::Seconds(5)), std::vector<std::string>{"release allocation 7"});
}

TEST(ControllerTest, PreemptionEvictsAtOnceDeletesAtTheDeadlineAndConfirmsByRelease) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  Step(c, kStart);
  Step(c, kStart);
  const absl::Time deadline = kStart + absl::Seconds(60);
  c.AllocationChanged(7, AllocationPhase::kPreempting, deadline, "research");
  EXPECT_EQ(Step(c, kStart + absl::Seconds(1)),
            std::vector<std::string>{"evict pod research/train-0 (allocation 7)"});
  PodInfo terminating = Pod("train-0", 7);
  terminating.deleting = true;
  c.PodChanged(terminating, kStart + absl::Seconds(1));
  // Still renewed while it stops, until the deadline; not evicted twice.
  EXPECT_EQ(Step(c, kStart + absl::Seconds(20), Ok(AllocationPhase::kPreempting, deadline)),
            std::vector<std::string>{"renew allocation 7 for pod:research/train-0"});
  EXPECT_EQ(Step(c, deadline),
            std::vector<std::string>{"delete pod research/train-0 (allocation 7)"});
  c.PodGone("uid-train-0", deadline);
  EXPECT_EQ(Step(c, deadline + absl::Seconds(1)), std::vector<std::string>{"release allocation 7"});
}

TEST(ControllerTest, AnEvictionRefusedByADisruptionBudgetIsRetried) {
  Controller c(Options());
  c.PodChanged(Pod("serve-0", 9), kStart);
  Step(c, kStart, Ok(AllocationPhase::kPreempting, kStart + absl::Seconds(60)));
  std::vector<Action> evict = c.Plan(kStart);
  ASSERT_EQ(Describe(evict)[0], "evict pod research/serve-0 (allocation 9)");
  for (const Action& a : evict) c.Done(a, Outcome{absl::ResourceExhaustedError("429")}, kStart);
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(4)).empty());
  EXPECT_EQ(Describe(c.Plan(kStart + absl::Seconds(5)))[0],
            "evict pod research/serve-0 (allocation 9)");
}

TEST(ControllerTest, PodsOfAnAllocationThatEndedInArbiterAreDeleted) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  Step(c, kStart);
  // The lease expired while the controller was away: the renewal is refused.
  std::vector<Action> renew = c.Plan(kStart);
  ASSERT_EQ(renew.size(), 1u);
  c.Done(renew[0], Outcome{absl::FailedPreconditionError("allocation 7 is RELEASED")}, kStart);
  EXPECT_EQ(Step(c, kStart + absl::Seconds(5), Ok(AllocationPhase::kEnded)),
            std::vector<std::string>{"look up allocation 7"});
  EXPECT_EQ(Step(c, kStart + absl::Seconds(6)),
            std::vector<std::string>{"delete pod research/train-0 (allocation 7)"});
  c.PodGone("uid-train-0", kStart);
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(7)).empty()) << "nothing to release";
  EXPECT_EQ(c.pods(), 0u);
}

TEST(ControllerTest, ARelistDropsThePodsItNoLongerHolds) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  c.PodChanged(Pod("train-1", 8, 1), kStart);
  Step(c, kStart);
  Step(c, kStart);
  c.ResetPods({Pod("train-1", 8, 1)}, kStart);  // train-0 was deleted during a 410.
  EXPECT_EQ(Step(c, kStart + absl::Seconds(1)), std::vector<std::string>{"release allocation 7"});
}

// What Arbiter says of allocation 7's holders.
Outcome Held(std::map<int32_t, std::string> holders) {
  Outcome o = Ok();
  o.holders = std::move(holders);
  return o;
}

TEST(ControllerTest, APodAdmittedUnclaimedIsClaimedForThenRenewed) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  EXPECT_EQ(Step(c, kStart, Held({})), std::vector<std::string>{"look up allocation 7"});
  std::vector<Action> claim = c.Plan(kStart);
  ASSERT_EQ(Describe(claim),
            std::vector<std::string>{"claim allocation 7 member 0 for pod:research/train-0"});
  c.Done(claim[0], Held({{0, "pod:research/train-0"}}), kStart);
  EXPECT_EQ(Step(c, kStart),
            std::vector<std::string>{"renew allocation 7 for pod:research/train-0"});
}

TEST(ControllerTest, APodWhoseMemberAnotherHoldsIsDeletedAndNotReleasedFor) {
  Controller c(Options());
  c.PodChanged(Pod("intruder", 7), kStart);
  Step(c, kStart, Held({{0, "slurm:4242.0"}}));
  EXPECT_EQ(Step(c, kStart),
            std::vector<std::string>{"delete pod research/intruder (allocation 7)"});
  c.PodGone("uid-intruder", kStart);
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(30)).empty())
      << "the allocation is slurm:4242.0's: the intruder's end releases nothing";
}

TEST(ControllerTest, AClaimLostToAnotherPodIsLookedUpAgainThenDeleted) {
  Controller c(Options());
  c.PodChanged(Pod("train-1", 7), kStart);
  Step(c, kStart, Held({}));
  std::vector<Action> claim = c.Plan(kStart);
  ASSERT_EQ(claim.size(), 1u);
  c.Done(claim[0], Outcome{absl::FailedPreconditionError("claimed by pod:research/train-0")},
         kStart);
  EXPECT_EQ(Step(c, kStart + absl::Seconds(5), Held({{0, "pod:research/train-0"}})),
            std::vector<std::string>{"look up allocation 7"});
  EXPECT_EQ(Step(c, kStart + absl::Seconds(5)),
            std::vector<std::string>{"delete pod research/train-1 (allocation 7)"});
}

TEST(ControllerTest, PodsOutsideTheTeamsNamespaceOrWithoutGpusAreNotItsWorkloads) {
  Controller c(Options());
  PodInfo elsewhere = Pod("train-0", 7);
  elsewhere.ns = "evil";
  elsewhere.uid = "uid-evil";
  PodInfo idle = Pod("train-1", 7, 1);
  idle.asks_for_gpus = false;
  c.PodChanged(elsewhere, kStart);
  c.PodChanged(idle, kStart);
  EXPECT_EQ(Step(c, kStart, Held({})), std::vector<std::string>{"look up allocation 7"});
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(30), Held({})).empty())
      << "neither is claimed for, renewed, deleted or released for";
}

TEST(ControllerTest, ARenewalAnsweredBeforeANoticeDoesNotUndoIt) {
  Controller c(Options());
  c.PodChanged(Pod("train-0", 7), kStart);
  Step(c, kStart);
  std::vector<Action> renew = c.Plan(kStart);
  ASSERT_EQ(renew.size(), 1u);
  const absl::Time deadline = kStart + absl::Seconds(60);
  c.AllocationChanged(7, AllocationPhase::kPreempting, deadline, "research");
  c.Done(renew[0], Ok(AllocationPhase::kAdmitted), kStart);  // Sent before the notice.
  EXPECT_EQ(c.PhaseOf(7), AllocationPhase::kPreempting);
  EXPECT_EQ(Step(c, kStart + absl::Seconds(1)),
            std::vector<std::string>{"evict pod research/train-0 (allocation 7)"});
}

NodeInfo Node(const std::string& name, bool ready = true, bool unschedulable = false,
              absl::Time since = kStart) {
  return NodeInfo{name, unschedulable, ready, since};
}

TEST(ControllerTest, ACordonedNodeIsDrainedAndUncordonedWhenSchedulableAgain) {
  Controller c(Options());
  c.ResetNodes({Node("gpu-0"), Node("gpu-1")});
  EXPECT_TRUE(Step(c, kStart).empty()) << "an admin's cordon in Arbiter is left alone";
  c.NodeChanged(Node("gpu-0", true, true));
  EXPECT_EQ(Step(c, kStart), std::vector<std::string>{"drain node gpu-0"});
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(10)).empty());
  c.NodeChanged(Node("gpu-0"));
  EXPECT_EQ(Step(c, kStart + absl::Seconds(11)), std::vector<std::string>{"uncordon node gpu-0"});
}

TEST(ControllerTest, WithoutADrainGraceACordonIsACordon) {
  ControllerOptions o = Options();
  o.drain_grace = absl::ZeroDuration();
  Controller c(o);
  c.ResetNodes({Node("gpu-0", true, true)});
  EXPECT_EQ(Step(c, kStart), std::vector<std::string>{"cordon node gpu-0"});
}

TEST(ControllerTest, ANodeNotReadyLongEnoughIsMarkedFailedSinceItStopped) {
  Controller c(Options());
  const absl::Time since = kStart - absl::Seconds(100);
  c.ResetNodes({Node("gpu-0", false, false, since)});
  EXPECT_TRUE(Step(c, kStart).empty()) << "100 s of 120";
  std::vector<Action> fail = c.Plan(kStart + absl::Seconds(20));
  ASSERT_EQ(Describe(fail), std::vector<std::string>{"mark node gpu-0 failed"});
  EXPECT_EQ(fail[0].at, since);
  c.Done(fail[0], Ok(), kStart + absl::Seconds(20));
  c.NodeChanged(Node("gpu-0", true, false, kStart + absl::Seconds(30)));
  EXPECT_EQ(Step(c, kStart + absl::Seconds(30)), std::vector<std::string>{"uncordon node gpu-0"});
}

TEST(ControllerTest, ANodeArbiterDoesNotKnowIsNotTriedAgain) {
  Controller c(Options());
  c.ResetNodes({Node("cpu-0", true, true)});
  EXPECT_EQ(Step(c, kStart, Outcome{absl::NotFoundError("no node cpu-0")}),
            std::vector<std::string>{"drain node cpu-0"});
  EXPECT_TRUE(Step(c, kStart + absl::Seconds(60)).empty());
}

TEST(ReadPodTest, ReadsTheAnnotationsPhaseAndDeletion) {
  json pod = {{"metadata",
               {{"uid", "u1"},
                {"namespace", "research"},
                {"name", "train-1"},
                {"annotations", {{"arbiter.dev/allocation", "42"}, {"arbiter.dev/member", "1"}}},
                {"deletionTimestamp", "2026-11-26T10:00:00Z"}}},
              {"spec", {{"nodeName", "gpu-3"}}},
              {"status", {{"phase", "Succeeded"}}}};
  absl::StatusOr<std::optional<PodInfo>> read = ReadPod(pod);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_TRUE(read->has_value());
  const PodInfo& p = **read;
  EXPECT_EQ(p.allocation, 42);
  EXPECT_EQ(p.member, 1);
  EXPECT_EQ(p.node, "gpu-3");
  EXPECT_TRUE(p.finished);
  EXPECT_TRUE(p.deleting);
  EXPECT_EQ(p.holder(), "pod:research/train-1");
}

TEST(ReadPodTest, APodWithoutTheAnnotationIsNotArbiters) {
  json pod = {{"metadata", {{"uid", "u1"}, {"namespace", "a"}, {"name", "b"}}}};
  absl::StatusOr<std::optional<PodInfo>> read = ReadPod(pod);
  ASSERT_TRUE(read.ok());
  EXPECT_FALSE(read->has_value());
}

TEST(ReadPodTest, AMalformedAnnotationIsNamed) {
  json pod = {{"metadata",
               {{"uid", "u1"},
                {"namespace", "a"},
                {"name", "b"},
                {"annotations", {{"arbiter.dev/allocation", "x7"}}}}}};
  absl::StatusOr<std::optional<PodInfo>> read = ReadPod(pod);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(read.status().message().find("arbiter.dev/allocation"), std::string::npos);
}

TEST(ReadNodeTest, ReadsCordonAndReadiness) {
  json node = {{"metadata", {{"name", "gpu-0"}}},
               {"spec", {{"unschedulable", true}}},
               {"status",
                {{"conditions", json::array({{{"type", "MemoryPressure"}, {"status", "False"}},
                                             {{"type", "Ready"},
                                              {"status", "Unknown"},
                                              {"lastTransitionTime", "2026-11-26T10:00:00Z"}}})}}}};
  absl::StatusOr<NodeInfo> read = ReadNode(node);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->unschedulable);
  EXPECT_FALSE(read->ready);
  EXPECT_EQ(read->ready_since, absl::FromUnixSeconds(1'795'687'200));
}

}  // namespace
}  // namespace arbiter::kube
