// Claims and leases (docs/enforcement.md): exactly one holder per member,
// idempotent for that holder; a lease that is not renewed ends the
// allocation LEASE_EXPIRED, charged to its last renewal; an allocation not
// claimed by the pool's claim deadline ends UNCLAIMED; capacity returns
// either way, and a reload renews every lease.
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
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Pool "enforced" (batch) with a claim deadline of 60 s and a lease of 30 s,
// one node of 4 H100s, team t with quota for all of it.
State EnforcedState() {
  State s = ::arbiter::testing::MakeState();
  ChangeSet ch;
  Pool pool{"enforced", LatencyClass::kBatch, ""};
  pool.claim_deadline_seconds = 60;
  pool.lease_seconds = 30;
  EXPECT_THAT(CreatePool(s, pool, ch), IsOk());
  EXPECT_THAT(SetQuota(s, {"t", "enforced", 4000}, kT0, ch), IsOk());
  AddNode(s, MakeNode("e1", 4, "H100-80GB", "enforced"));
  return s;
}

CapacityRequest Admit(State& s, const char* key, int members, absl::Time at = kT0) {
  CapacityRequestSpec spec = WholeSpec(key, members, 1);
  spec.pool = "enforced";
  spec.workload_class = WorkloadClass::kTraining;
  ChangeSet ch;
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, at, ch);
  EXPECT_THAT(out, IsOk());
  EXPECT_EQ(out->request.state, RequestState::kAdmitted);
  return out->request;
}

// Runs what is due at `at`; returns what changed.
ChangeSet TickAt(State& s, absl::Time at) {
  ChangeSet ch;
  Tick(s, at, ch);
  return ch;
}

TEST(ClaimsTest, OneHolderPerMemberAndIdempotentForIt) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "a", 2);
  ChangeSet first;
  absl::StatusOr<CapacityRequest> claimed =
      ClaimAllocation(s, r.id, "pod:1111", {0}, kT0 + absl::Seconds(5), first);
  ASSERT_THAT(claimed, IsOk());
  ASSERT_EQ(claimed->claims.size(), 1u);
  EXPECT_EQ(claimed->claims[0].holder, "pod:1111");
  EXPECT_EQ(first.changes.size(), 1u);  // A new claim is written.
  // The same holder again: a renewal, nothing written.
  ChangeSet again;
  ASSERT_THAT(ClaimAllocation(s, r.id, "pod:1111", {0}, kT0 + absl::Seconds(6), again), IsOk());
  EXPECT_TRUE(again.empty());
  // Another holder of the same member is refused, naming the holder.
  ChangeSet stranger;
  EXPECT_THAT(ClaimAllocation(s, r.id, "pod:2222", {1, 0}, kT0 + absl::Seconds(7), stranger),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(StartsWith("members[1]: "), HasSubstr("pod:1111"))));
  EXPECT_TRUE(stranger.empty());
  EXPECT_EQ(s.FindLiveRequest(r.id)->claims.size(), 1u);  // Member 1 was not taken either.
  // The other member by another holder is fine.
  ChangeSet second;
  ASSERT_THAT(ClaimAllocation(s, r.id, "pod:2222", {1}, kT0 + absl::Seconds(8), second), IsOk());
  EXPECT_EQ(s.FindLiveRequest(r.id)->claims.size(), 2u);
}

TEST(ClaimsTest, BadClaimsNameTheFieldAndChangeNothing) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "a", 2);
  struct Case {
    int64_t id;
    const char* holder;
    std::vector<int32_t> members;
    absl::StatusCode code;
    const char* field;
  };
  for (const Case& c : std::vector<Case>{
           {0, "pod:1", {}, absl::StatusCode::kInvalidArgument, "id:"},
           {r.id + 100, "pod:1", {}, absl::StatusCode::kNotFound, "id:"},
           {r.id, "", {}, absl::StatusCode::kInvalidArgument, "holder:"},
           {r.id, "pod 1", {}, absl::StatusCode::kInvalidArgument, "holder:"},
           {r.id, "pod:1", {2}, absl::StatusCode::kInvalidArgument, "members[0]:"},
           {r.id, "pod:1", {-1}, absl::StatusCode::kInvalidArgument, "members[0]:"},
           {r.id, "pod:1", {1, 1}, absl::StatusCode::kInvalidArgument, "members[1]:"}}) {
    SCOPED_TRACE(c.field);
    ChangeSet ch;
    EXPECT_THAT(ClaimAllocation(s, c.id, c.holder, c.members, kT0, ch),
                StatusIs(c.code, StartsWith(c.field)));
    EXPECT_TRUE(ch.empty());
  }
  EXPECT_TRUE(s.FindLiveRequest(r.id)->claims.empty());
  // Renewing what the holder does not hold names who does.
  EXPECT_THAT(RenewLease(s, r.id, "pod:1", kT0),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("nobody has claimed")));
}

TEST(ClaimsTest, ALeaseNotRenewedEndsTheAllocationAtItsLastRenewal) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "a", 1);
  ChangeSet ch;
  ASSERT_THAT(ClaimAllocation(s, r.id, "slurm:42.0", {}, kT0 + absl::Seconds(10), ch), IsOk());
  // Renewed at +35 s: the lease now runs to +65 s.
  ASSERT_THAT(RenewLease(s, r.id, "slurm:42.0", kT0 + absl::Seconds(35)), IsOk());
  EXPECT_TRUE(TickAt(s, kT0 + absl::Seconds(64)).empty());
  ASSERT_NE(s.FindLiveRequest(r.id), nullptr);
  ChangeSet ended = TickAt(s, kT0 + absl::Seconds(65));
  ASSERT_EQ(ended.changes.size(), 1u);
  const CapacityRequest& gone = std::get<RequestWrite>(ended.changes[0]).request;
  EXPECT_EQ(gone.state, RequestState::kReleased);
  EXPECT_EQ(gone.reason_code, kReasonLeaseExpired);
  EXPECT_THAT(gone.reason, HasSubstr("slurm:42.0"));
  EXPECT_EQ(gone.updated_at, kT0 + absl::Seconds(35));  // Charged to the last renewal.
  EXPECT_EQ(s.FindLiveRequest(r.id), nullptr);
  EXPECT_EQ(s.UsedMilli("t", "enforced"), 0);
  // Its GPU is free again.
  Admit(s, "b", 4, kT0 + absl::Seconds(66));
}

TEST(ClaimsTest, AnAllocationNotClaimedByTheDeadlineEnds) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "gang", 2);
  ChangeSet ch;
  ASSERT_THAT(ClaimAllocation(s, r.id, "pod:a", {0}, kT0 + absl::Seconds(1), ch), IsOk());
  // Member 0 keeps renewing; member 1 is never claimed.
  for (int t = 20; t < 60; t += 20) {
    ASSERT_THAT(RenewLease(s, r.id, "pod:a", kT0 + absl::Seconds(t)), IsOk());
    EXPECT_TRUE(TickAt(s, kT0 + absl::Seconds(t)).empty());
  }
  ChangeSet ended = TickAt(s, kT0 + absl::Seconds(60));
  ASSERT_EQ(ended.changes.size(), 1u);
  const CapacityRequest& gone = std::get<RequestWrite>(ended.changes[0]).request;
  EXPECT_EQ(gone.reason_code, kReasonUnclaimed);
  EXPECT_THAT(gone.reason, HasSubstr("1 of 2 member(s) not claimed"));
  EXPECT_EQ(s.UsedMilli("t", "enforced"), 0);
}

TEST(ClaimsTest, PoolsWithoutEnforcementNeverEndAnAllocation) {
  State s = EnforcedState();
  AddNode(s, MakeNode("s1", 1, "H100-80GB"));
  ChangeSet ch;
  CapacityRequestSpec spec = WholeSpec("free", 1, 1);  // Pool "serving": no deadline, no lease.
  const CapacityRequest r = RequestCapacity(s, spec, kT0, ch)->request;
  ASSERT_THAT(ClaimAllocation(s, r.id, "pod:x", {}, kT0, ch), IsOk());
  EXPECT_TRUE(TickAt(s, kT0 + absl::Hours(24 * 30)).empty());
  EXPECT_EQ(s.FindLiveRequest(r.id)->state, RequestState::kAdmitted);
}

TEST(ClaimsTest, AReloadRenewsEveryLease) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "a", 1);
  ChangeSet ch;
  ASSERT_THAT(ClaimAllocation(s, r.id, "pod:a", {}, kT0, ch), IsOk());
  // As if loaded at +25 s, where the renewals were not written.
  GraceLeases(s, kT0 + absl::Seconds(25));
  EXPECT_TRUE(TickAt(s, kT0 + absl::Seconds(40)).empty());
  EXPECT_EQ(TickAt(s, kT0 + absl::Seconds(55)).changes.size(), 1u);
}

// A preemptible allocation of all 4 GPUs, claimed by "pod:low", and a
// priority-10 request for one GPU that preempts it (the pool's grace: 30 s).
struct Preemption {
  State s = EnforcedState();
  CapacityRequest low;
  CapacityRequest urgent;

  Preemption() {
    CapacityRequestSpec spec = WholeSpec("low", 4, 1);
    spec.pool = "enforced";
    spec.workload_class = WorkloadClass::kTraining;
    spec.preemptible = true;
    ChangeSet ch;
    low = RequestCapacity(s, spec, kT0, ch)->request;
    EXPECT_THAT(ClaimAllocation(s, low.id, "pod:low", {}, kT0, ch), IsOk());
    CapacityRequestSpec hi = WholeSpec("urgent", 1, 1);
    hi.pool = "enforced";
    hi.workload_class = WorkloadClass::kTraining;
    hi.priority = 10;
    urgent = RequestCapacity(s, hi, kT0 + absl::Seconds(10), ch)->request;
    EXPECT_EQ(urgent.state, RequestState::kQueued);
    EXPECT_EQ(s.FindLiveRequest(low.id)->state, RequestState::kPreempting);
    EXPECT_EQ(s.FindLiveRequest(low.id)->preempt_deadline, kT0 + absl::Seconds(40));
  }
};

TEST(ClaimsTest, APreemptionConfirmedByReleaseGivesTheCapacityAtOnce) {
  Preemption p;
  ChangeSet ch;
  ASSERT_THAT(ReleaseRequest(p.s, p.low.id, kT0 + absl::Seconds(20), ch), IsOk());
  EXPECT_EQ(p.s.FindLiveRequest(p.urgent.id)->state, RequestState::kAdmitted);
}

TEST(ClaimsTest, AClaimedVictimHoldsItsCapacityUntilItsLeaseEndsUnconfirmed) {
  Preemption p;
  // The enforcer renews while it stops the workload, up to the deadline.
  ASSERT_THAT(RenewLease(p.s, p.low.id, "pod:low", kT0 + absl::Seconds(35)), IsOk());
  // Past the deadline the capacity is still the victim's: only a release or
  // the lease's end hands it over.
  EXPECT_TRUE(TickAt(p.s, kT0 + absl::Seconds(40)).empty());
  EXPECT_EQ(p.s.FindLiveRequest(p.low.id)->state, RequestState::kPreempting);
  EXPECT_EQ(p.s.FindLiveRequest(p.urgent.id)->state, RequestState::kQueued);
  EXPECT_THAT(RenewLease(p.s, p.low.id, "pod:low", kT0 + absl::Seconds(41)),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("release it to confirm")));
  EXPECT_TRUE(TickAt(p.s, kT0 + absl::Seconds(64)).empty());
  ChangeSet ended = TickAt(p.s, kT0 + absl::Seconds(65));  // Renewed at 35 s, lease 30 s.
  ASSERT_FALSE(ended.changes.empty());
  const CapacityRequest& gone = std::get<RequestWrite>(ended.changes[0]).request;
  EXPECT_EQ(gone.id, p.low.id);
  EXPECT_EQ(gone.state, RequestState::kPreempted);
  EXPECT_EQ(gone.updated_at, kT0 + absl::Seconds(35));  // Charged to the last renewal.
  EXPECT_THAT(gone.reason, HasSubstr("not confirmed by pod:low"));
  EXPECT_EQ(p.s.FindLiveRequest(p.urgent.id)->state, RequestState::kAdmitted);
}

TEST(ClaimsTest, AnUnclaimedVictimVacatesAtItsDeadline) {
  State s = EnforcedState();
  CapacityRequestSpec spec = WholeSpec("low", 4, 1);
  spec.pool = "enforced";
  spec.workload_class = WorkloadClass::kTraining;
  spec.preemptible = true;
  ChangeSet ch;
  const CapacityRequest low = RequestCapacity(s, spec, kT0, ch)->request;
  CapacityRequestSpec hi = WholeSpec("urgent", 1, 1);
  hi.pool = "enforced";
  hi.workload_class = WorkloadClass::kTraining;
  hi.priority = 10;
  const CapacityRequest urgent = RequestCapacity(s, hi, kT0 + absl::Seconds(10), ch)->request;
  ASSERT_EQ(s.FindLiveRequest(low.id)->state, RequestState::kPreempting);
  TickAt(s, kT0 + absl::Seconds(40));
  EXPECT_EQ(s.FindLiveRequest(low.id), nullptr);
  EXPECT_EQ(s.FindLiveRequest(urgent.id)->state, RequestState::kAdmitted);
}

// An enforcer reports the workload's run at the release (a Slurm job's start
// and end): the allocation is charged for the run, not from admission to
// release, and the run is kept with the request.
TEST(WorkloadRunTest, TheReleaseChargesTheReportedRun) {
  State s = EnforcedState();
  ChangeSet price;
  ASSERT_THAT(SetPrice(s, Price{"H100-80GB", LatencyClass::kBatch, 3'600'000, kT0}, price),
              IsOk());  // 1,000 micros a GPU-second.
  const CapacityRequest r = Admit(s, "run", 2);
  // Admitted at kT0; the job ran from +10 s to +70 s; released at +75 s.
  const WorkloadRun run{kT0 + absl::Seconds(10), kT0 + absl::Seconds(70)};
  ChangeSet ch;
  absl::StatusOr<CapacityRequest> released =
      ReleaseRequest(s, r.id, kT0 + absl::Seconds(75), ch, run);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(released->state, RequestState::kReleased);
  EXPECT_EQ(released->run_started_at, run.started);
  EXPECT_EQ(released->run_ended_at, run.ended);
  // 2 GPUs x 60 s at 1,000 micros a GPU-second.
  EXPECT_EQ(released->cost_micros, 2 * 60 * 1000);

  // Without a run: admission to release.
  const CapacityRequest plain = Admit(s, "plain", 1, kT0 + absl::Seconds(100));
  ChangeSet ch2;
  absl::StatusOr<CapacityRequest> held = ReleaseRequest(s, plain.id, kT0 + absl::Seconds(130), ch2);
  ASSERT_THAT(held, IsOk());
  EXPECT_EQ(held->run_started_at, absl::InfinitePast());
  EXPECT_EQ(held->cost_micros, 30 * 1000);
}

// A run that cannot have happened on the allocation is refused, naming the
// field, and nothing changes: the allocation stays admitted.
TEST(WorkloadRunTest, AnImpossibleRunIsRefusedAndNothingChanges) {
  State s = EnforcedState();
  const CapacityRequest r = Admit(s, "r", 1, kT0 + absl::Seconds(100));
  const absl::Time now = kT0 + absl::Seconds(200);
  struct Case {
    WorkloadRun run;
    const char* field;
  };
  const Case cases[] = {
      {{kT0 + absl::Seconds(110), absl::InfinitePast()}, "workload_ended_at: required"},
      {{absl::InfinitePast(), kT0 + absl::Seconds(110)}, "workload_started_at: required"},
      {{kT0 + absl::Seconds(150), kT0 + absl::Seconds(140)}, "workload_ended_at: before"},
      {{kT0 + absl::Seconds(98), kT0 + absl::Seconds(140)}, "workload_started_at: "},
      {{kT0 + absl::Seconds(120), now + absl::Seconds(2)}, "workload_ended_at: "},
  };
  for (const Case& c : cases) {
    ChangeSet ch;
    EXPECT_THAT(ReleaseRequest(s, r.id, now, ch, c.run),
                StatusIs(absl::StatusCode::kInvalidArgument, StartsWith(c.field)))
        << c.field;
    EXPECT_TRUE(ch.empty());
    EXPECT_EQ(s.FindLiveRequest(r.id)->state, RequestState::kAdmitted);
  }
  // A second of slack at each end: platforms record whole seconds.
  ChangeSet ok;
  EXPECT_THAT(ReleaseRequest(s, r.id, now, ok,
                             WorkloadRun{kT0 + absl::Seconds(99.5), now + absl::Seconds(0.5)}),
              IsOk());
}

// A request that never held capacity (a cancellation) has no run to report.
TEST(WorkloadRunTest, ACancellationTakesNoRun) {
  State s = EnforcedState();
  (void)Admit(s, "all", 4);
  CapacityRequestSpec spec = WholeSpec("waits", 1, 1);
  spec.pool = "enforced";
  spec.workload_class = WorkloadClass::kTraining;
  ChangeSet ch;
  absl::StatusOr<RequestOutcome> queued = RequestCapacity(s, spec, kT0, ch);
  ASSERT_THAT(queued, IsOk());
  ASSERT_EQ(queued->request.state, RequestState::kQueued);
  ChangeSet cancel;
  EXPECT_THAT(ReleaseRequest(s, queued->request.id, kT0 + absl::Seconds(5), cancel,
                             WorkloadRun{kT0, kT0 + absl::Seconds(1)}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds no allocation to have run on")));
  EXPECT_TRUE(cancel.empty());
}

}  // namespace
}  // namespace arbiter::core
