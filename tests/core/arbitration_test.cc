#include "core/arbitration.h"

#include "gtest/gtest.h"

#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::FractionSpec;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;
using ::testing::StartsWith;

CapacityRequest Decide(State& s, const CapacityRequestSpec& spec, ChangeSet* changes = nullptr) {
  ChangeSet local;
  absl::StatusOr<RequestOutcome> out = RequestCapacity(s, spec, kT0, changes ? *changes : local);
  EXPECT_THAT(out, IsOk());
  return out.ok() ? out->request : CapacityRequest{};
}

TEST(ArbitrationTest, AdmitsWholeGpusWithEachMemberOnOneNode) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  AddNode(s, MakeNode("n2", 8, "H100-80GB"));
  ChangeSet changes;
  CapacityRequest r = Decide(s, WholeSpec("k", 3, 4), &changes);
  ASSERT_EQ(r.state, RequestState::kAdmitted);
  ASSERT_EQ(r.placements.size(), 3u);
  for (const Placement& p : r.placements) {
    EXPECT_EQ(p.gpu_indices.size(), 4u);
    EXPECT_TRUE(p.exclusive);
  }
  EXPECT_EQ(s.UsedMilli("t", "serving"), 12'000);
  ASSERT_EQ(changes.changes.size(), 1u);
  EXPECT_TRUE(std::get<RequestWrite>(changes.changes[0]).is_new);
}

TEST(ArbitrationTest, WholeGpuNeedsAnEmptyGpu) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 1, "H100-80GB"));
  EXPECT_EQ(Decide(s, FractionSpec("f", 1, 100, 1000)).state, RequestState::kAdmitted);
  CapacityRequest whole = Decide(s, WholeSpec("w", 1, 1));
  EXPECT_EQ(whole.state, RequestState::kQueued);
  EXPECT_EQ(whole.reason_code, kReasonInsufficientCapacity);
}

TEST(ArbitrationTest, ScatteredFreeMemoryNeverCountsAsOneBlock) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 2, "A100-40GB"));
  // 30 GiB on each GPU leaves 10 GiB free on each: 20 GiB in total.
  EXPECT_EQ(Decide(s, FractionSpec("a", 2, 200, 30 * 1024)).state, RequestState::kAdmitted);
  const Node& n = *s.FindNode("c", "n1");
  EXPECT_EQ(n.gpus[0].allocated_memory_mib + n.gpus[1].allocated_memory_mib, 60 * 1024);
  // 15 GiB fits neither GPU although 20 GiB are free in sum.
  CapacityRequest r = Decide(s, FractionSpec("b", 1, 100, 15 * 1024));
  EXPECT_EQ(r.state, RequestState::kQueued);
  EXPECT_EQ(r.reason_code, kReasonInsufficientCapacity);
}

TEST(ArbitrationTest, FractionsPreferAlreadySharedGpus) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 4, "H100-80GB"));
  CapacityRequest a = Decide(s, FractionSpec("a", 1, 300, 1000));
  CapacityRequest b = Decide(s, FractionSpec("b", 1, 300, 1000));
  ASSERT_EQ(b.state, RequestState::kAdmitted);
  EXPECT_EQ(a.placements[0].gpu_indices, b.placements[0].gpu_indices);
  // Three GPUs stay whole for whole-GPU work.
  EXPECT_EQ(Decide(s, WholeSpec("w", 1, 3)).state, RequestState::kAdmitted);
}

TEST(ArbitrationTest, FractionMemoryBeyondEveryAllowedModelIsInvalid) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 1, "L4"));
  CapacityRequestSpec spec = FractionSpec("k", 1, 500, 30 * 1024);
  spec.gpu_models = {"L4"};
  ChangeSet changes;
  EXPECT_THAT(
      RequestCapacity(s, spec, kT0, changes),
      StatusIs(absl::StatusCode::kInvalidArgument, StartsWith("shape.fraction.memory_mib:")));
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(s.next_request_id(), 1);
  EXPECT_EQ(s.FindIdempotencyKey("k"), nullptr);
}

TEST(ArbitrationTest, HonoursGpuModelConstraint) {
  State s = MakeState();
  AddNode(s, MakeNode("l4", 4, "L4"));
  AddNode(s, MakeNode("h100", 2, "H100-80GB"));
  CapacityRequestSpec spec = WholeSpec("k", 1, 2);
  spec.gpu_models = {"H100-80GB"};
  CapacityRequest r = Decide(s, spec);
  ASSERT_EQ(r.state, RequestState::kAdmitted);
  EXPECT_EQ(r.placements[0].node_id, s.FindNode("c", "h100")->id);
  spec.idempotency_key = "k2";
  EXPECT_EQ(Decide(s, spec).state, RequestState::kQueued);
}

TEST(ArbitrationTest, GangIsAllOrNothing) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 4, "H100-80GB"));
  AddNode(s, MakeNode("n2", 4, "H100-80GB"));
  ASSERT_EQ(Decide(s, WholeSpec("a", 1, 2)).state, RequestState::kAdmitted);
  // 3 members of 3 GPUs: only two nodes can hold 3 GPUs each when empty, and
  // only one has 3 free now.
  CapacityRequest r = Decide(s, WholeSpec("b", 3, 3));
  EXPECT_EQ(r.state, RequestState::kDenied);
  CapacityRequest q = Decide(s, WholeSpec("c", 2, 3));
  EXPECT_EQ(q.state, RequestState::kQueued);
  int64_t allocated = 0;
  for (const Node& n : s.nodes()) {
    for (const Gpu& g : n.gpus) allocated += g.allocated_milli;
  }
  EXPECT_EQ(allocated, 2000);  // Nothing left behind by the failed gangs.
}

TEST(ArbitrationTest, NodeCpuAndMemoryBind) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 8, "H100-80GB", "serving", /*cpu_milli=*/16'000));
  CapacityRequestSpec spec = WholeSpec("a", 1, 1);
  spec.shape.cpu_milli = 12'000;
  EXPECT_EQ(Decide(s, spec).state, RequestState::kAdmitted);
  spec.idempotency_key = "b";
  EXPECT_EQ(Decide(s, spec).state, RequestState::kQueued);
  spec.idempotency_key = "c";
  spec.shape.cpu_milli = 32'000;
  EXPECT_EQ(Decide(s, spec).state, RequestState::kDenied);
}

TEST(ArbitrationTest, QuotaQueuesThenAdmitsOnRelease) {
  State s = MakeState(/*nominal_milli=*/2000);
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  CapacityRequest a = Decide(s, WholeSpec("a", 1, 2));
  ASSERT_EQ(a.state, RequestState::kAdmitted);
  CapacityRequest b = Decide(s, WholeSpec("b", 1, 1));
  EXPECT_EQ(b.state, RequestState::kQueued);
  EXPECT_EQ(b.reason_code, kReasonQuotaExceeded);
  EXPECT_THAT(b.reason, HasSubstr("over by 1000"));
  ChangeSet changes;
  ASSERT_THAT(ReleaseRequest(s, a.id, kT0 + absl::Seconds(5), changes), IsOk());
  ASSERT_EQ(changes.changes.size(), 2u);  // The release, then b admitted.
  const auto& admitted = std::get<RequestWrite>(changes.changes[1]);
  EXPECT_EQ(admitted.request.id, b.id);
  EXPECT_EQ(admitted.request.state, RequestState::kAdmitted);
  EXPECT_FALSE(admitted.is_new);
  EXPECT_EQ(s.UsedMilli("t", "serving"), 1000);
}

// Fair share counts measured usage: of two teams within their quotas, the
// one that kept its GPUs busier recently waits behind the other, even with
// the older request.
TEST(ArbitrationTest, MeasuredUsageOrdersTeamsOfEqualShare) {
  for (bool measured : {false, true}) {
    State s = MakeState();
    AddNode(s, MakeNode("n1", 1, "H100-80GB"));
    ChangeSet setup;
    for (const char* team : {"heavy", "light"}) {
      ASSERT_THAT(CreateTeam(s, {team, "", 1000}, setup), IsOk());
      ASSERT_THAT(SetQuota(s, {team, "serving", 8000}, kT0, setup), IsOk());
    }
    CapacityRequest holder = Decide(s, WholeSpec("holder", 1, 1));
    ASSERT_EQ(holder.state, RequestState::kAdmitted);
    CapacityRequestSpec heavy = WholeSpec("heavy", 1, 1);
    heavy.team = "heavy";
    CapacityRequestSpec light = WholeSpec("light", 1, 1);
    light.team = "light";
    const CapacityRequest older = Decide(s, heavy);
    const CapacityRequest newer = Decide(s, light);
    ASSERT_EQ(older.state, RequestState::kQueued);
    ASSERT_EQ(newer.state, RequestState::kQueued);
    if (measured) s.SetMeasuredUsage({{"heavy", 36'000'000}, {"light", 3'600'000}});
    ChangeSet changes;
    ASSERT_THAT(ReleaseRequest(s, holder.id, kT0 + absl::Seconds(5), changes), IsOk());
    const int64_t first = measured ? newer.id : older.id;
    EXPECT_EQ(s.FindLiveRequest(first)->state, RequestState::kAdmitted) << measured;
  }
}

TEST(ArbitrationTest, DeniesWhatCanNeverBeGranted) {
  State s = MakeState(/*nominal_milli=*/4000);
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  CapacityRequest over = Decide(s, WholeSpec("a", 1, 5));
  EXPECT_EQ(over.state, RequestState::kDenied);
  EXPECT_EQ(over.reason_code, kReasonQuotaExceeded);
  CapacityRequestSpec other_pool = WholeSpec("b", 1, 1);
  other_pool.pool = "batch";
  EXPECT_EQ(Decide(s, other_pool).reason_code, kReasonNoQuota);
  ChangeSet ch;
  ASSERT_THAT(SetQuota(s, {"t", "serving", 100'000}, kT0, ch), IsOk());
  CapacityRequest too_big = Decide(s, WholeSpec("c", 1, 16));
  EXPECT_EQ(too_big.state, RequestState::kDenied);
  EXPECT_EQ(too_big.reason_code, kReasonNoFeasibleNode);
}

TEST(ArbitrationTest, ReplayIsIdempotentAndKeyReuseIsRejected) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  CapacityRequest a = Decide(s, WholeSpec("k", 1, 2));
  ChangeSet changes;
  absl::StatusOr<RequestOutcome> replay = RequestCapacity(s, WholeSpec("k", 1, 2), kT0, changes);
  ASSERT_THAT(replay, IsOk());
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->request.id, a.id);
  EXPECT_TRUE(changes.empty());
  EXPECT_THAT(RequestCapacity(s, WholeSpec("k", 1, 3), kT0, changes),
              StatusIs(absl::StatusCode::kFailedPrecondition, StartsWith("idempotency_key:")));
  EXPECT_TRUE(changes.empty());
  EXPECT_EQ(s.UsedMilli("t", "serving"), 2000);
}

TEST(ArbitrationTest, AnEndedRequestsKeyIsForgottenPastTheWindow) {
  State s = MakeState();
  s.set_idempotency_window(absl::Hours(1));
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  auto request = [&](const std::string& key, absl::Time at) {
    ChangeSet ch;
    absl::StatusOr<RequestOutcome> out = RequestCapacity(s, WholeSpec(key, 1, 1), at, ch);
    EXPECT_THAT(out, IsOk());
    return out.ok() ? *out : RequestOutcome{};
  };
  const RequestOutcome ended = request("ended", kT0);
  const RequestOutcome live = request("live", kT0);
  ChangeSet ch;
  ASSERT_THAT(ReleaseRequest(s, ended.request.id, kT0 + absl::Minutes(10), ch), IsOk());
  EXPECT_EQ(s.requests().remembered_keys(), 2u);

  // Within the window after the end, a replay answers with the request.
  RequestOutcome again = request("ended", kT0 + absl::Minutes(69));
  EXPECT_TRUE(again.replayed);
  EXPECT_EQ(again.request.id, ended.request.id);
  // Past it, the key is forgotten and starts a new request; a live
  // request's key is remembered however old.
  again = request("ended", kT0 + absl::Minutes(71));
  EXPECT_FALSE(again.replayed);
  EXPECT_NE(again.request.id, ended.request.id);
  EXPECT_EQ(again.request.state, RequestState::kAdmitted);
  const RequestOutcome still = request("live", kT0 + absl::Hours(5));
  EXPECT_TRUE(still.replayed);
  EXPECT_EQ(still.request.id, live.request.id);
  EXPECT_EQ(s.requests().remembered_keys(), 2u);
  // What-if copies carry no keys: they never take a new request.
  EXPECT_EQ(s.Clone().FindIdempotencyKey("live"), nullptr);
}

// With a memory of ended keys shorter than the window, an ended request's
// key stays in memory for that memory only; a new request needs the
// caller's lookup of the older ones, and a lookup older than half the
// memory is refused UNAVAILABLE, writing nothing.
TEST(ArbitrationTest, AShortKeyMemoryNeedsAFreshLookupOfTheWindow) {
  State s = MakeState();
  s.set_idempotency_window(absl::Hours(24));
  s.set_ended_key_memory(absl::Minutes(2));
  EXPECT_FALSE(s.RemembersWholeWindow());
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  auto request = [&](const std::string& key, absl::Time at, absl::Time checked_at) {
    ChangeSet ch;
    return RequestCapacity(s, WholeSpec(key, 1, 1), at, ch, checked_at);
  };
  absl::StatusOr<RequestOutcome> first = request("k", kT0, kT0);
  ASSERT_THAT(first, IsOk());
  EXPECT_FALSE(first->replayed);
  // No lookup, or one older than a minute: refused, nothing decided.
  const int64_t next = s.requests().next_id();
  EXPECT_THAT(request("other", kT0, absl::InfinitePast()),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("idempotency_key:")));
  EXPECT_THAT(request("other", kT0 + absl::Seconds(61), kT0),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("idempotency_key:")));
  EXPECT_EQ(s.requests().next_id(), next);
  // A key in memory needs no lookup: a live one, and an ended one for two
  // minutes after it ended.
  absl::StatusOr<RequestOutcome> replay = request("k", kT0 + absl::Hours(3), absl::InfinitePast());
  ASSERT_THAT(replay, IsOk());
  EXPECT_TRUE(replay->replayed);
  ChangeSet ch;
  ASSERT_THAT(ReleaseRequest(s, first->request.id, kT0 + absl::Hours(3), ch), IsOk());
  replay = request("k", kT0 + absl::Hours(3) + absl::Seconds(119), absl::InfinitePast());
  ASSERT_THAT(replay, IsOk());
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(s.requests().remembered_keys(), 1u);
  // Past the memory the key is the store's to find; memory holds nothing.
  const absl::Time later = kT0 + absl::Hours(3) + absl::Minutes(3);
  EXPECT_THAT(request("k", later, absl::InfinitePast()), StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(s.requests().remembered_keys(), 0u);
  absl::StatusOr<RequestOutcome> fresh = request("fresh", later, later - absl::Seconds(59));
  ASSERT_THAT(fresh, IsOk());
  EXPECT_FALSE(fresh->replayed);
}

// Once the caller reports its commits (NoteKeysStored), an ended key stays
// in memory until its commit is older than a lookup may be (half the
// memory), however recently it ended, and not past that: memory then holds
// what the commit's time and the lookup's age make, not the whole memory.
TEST(ArbitrationTest, ReportedCommitsBoundTheKeysInMemory) {
  State s = MakeState();
  s.set_idempotency_window(absl::Hours(24));
  s.set_ended_key_memory(absl::Seconds(40));
  EXPECT_EQ(s.key_lookup_max_age(), absl::Seconds(20));
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  auto request = [&](const std::string& key, absl::Time at) {
    ChangeSet ch;
    return RequestCapacity(s, WholeSpec(key, 1, 1), at, ch, at);
  };
  auto end = [&](const std::string& key, absl::Time at) {
    absl::StatusOr<RequestOutcome> r = request(key, at);
    ASSERT_THAT(r, IsOk());
    ChangeSet ch;
    ASSERT_THAT(ReleaseRequest(s, r->request.id, at, ch), IsOk());
  };
  end("a", kT0);
  end("b", kT0 + absl::Seconds(1));
  const uint64_t through_b = s.ended_keys_put();
  EXPECT_EQ(through_b, 2u);
  end("c", kT0 + absl::Seconds(2));
  // "a" and "b" committed at 3 s; "c" not yet.
  s.NoteKeysStored(through_b, kT0 + absl::Seconds(3));
  // Until 23 s, a lookup begun before 3 s may still come: all stay.
  s.ForgetExpiredKeys(kT0 + absl::Seconds(23));
  EXPECT_EQ(s.requests().remembered_keys(), 3u);
  EXPECT_TRUE(request("a", kT0 + absl::Seconds(23))->replayed);
  // Past it "a" and "b" are the store's; "c", uncommitted, stays past the
  // 40 s a memory without reports would keep it.
  s.ForgetExpiredKeys(kT0 + absl::Seconds(23) + absl::Milliseconds(1));
  EXPECT_EQ(s.requests().remembered_keys(), 1u);
  EXPECT_EQ(s.FindIdempotencyKey("a"), nullptr);
  s.ForgetExpiredKeys(kT0 + absl::Minutes(5));
  ASSERT_NE(s.FindIdempotencyKey("c"), nullptr);
  s.NoteKeysStored(s.ended_keys_put(), kT0 + absl::Minutes(5));
  s.ForgetExpiredKeys(kT0 + absl::Minutes(5) + absl::Seconds(21));
  EXPECT_EQ(s.requests().remembered_keys(), 0u);
  // A lookup older than 20 s is refused, writing nothing.
  const int64_t next = s.requests().next_id();
  ChangeSet ch;
  const absl::Time now = kT0 + absl::Minutes(6);
  EXPECT_THAT(RequestCapacity(s, WholeSpec("d", 1, 1), now, ch, now - absl::Seconds(21)),
              StatusIs(absl::StatusCode::kUnavailable, StartsWith("idempotency_key:")));
  EXPECT_EQ(s.requests().next_id(), next);
  EXPECT_TRUE(ch.empty());
  // Reports mean nothing while the whole window is remembered.
  State whole = MakeState();
  ASSERT_TRUE(whole.RemembersWholeWindow());
  whole.NoteKeysStored(0, kT0);
  EXPECT_FALSE(whole.requests().notes_stores());
}

TEST(ArbitrationTest, UnknownReferencesAreNotFound) {
  State s = MakeState();
  ChangeSet changes;
  CapacityRequestSpec spec = WholeSpec("k", 1, 1);
  spec.team = "nobody";
  EXPECT_THAT(RequestCapacity(s, spec, kT0, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("team:")));
  spec = WholeSpec("k", 1, 1);
  spec.pool = "nowhere";
  EXPECT_THAT(RequestCapacity(s, spec, kT0, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("pool:")));
  spec = WholeSpec("k", 1, 1);
  spec.gpu_models = {"H100-80GB", "TPU"};
  EXPECT_THAT(RequestCapacity(s, spec, kT0, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("gpu_models[1]:")));
  EXPECT_THAT(RegisterNode(s, MakeNode("n", 1, "TPU"), kT0, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("node.gpus[0].model:")));
  EXPECT_THAT(CreateTeam(s, {"x", "ghost", 1000}, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("team.parent:")));
  EXPECT_THAT(SetQuota(s, {"t", "nowhere", 1}, kT0, changes),
              StatusIs(absl::StatusCode::kNotFound, StartsWith("quota.pool:")));
  EXPECT_TRUE(changes.empty());
}

TEST(ArbitrationTest, DuplicatesAreAlreadyExists) {
  State s = MakeState();
  ChangeSet changes;
  EXPECT_THAT(CreateCluster(s, {"c", ""}, changes), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(CreatePool(s, {"serving", LatencyClass::kDev, ""}, changes),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(CreateTeam(s, {"t", "", 1000}, changes), StatusIs(absl::StatusCode::kAlreadyExists));
  AddNode(s, MakeNode("n1", 1, "L4"));
  EXPECT_THAT(RegisterNode(s, MakeNode("n1", 1, "L4"), kT0, changes),
              StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_TRUE(changes.empty());
}

TEST(ArbitrationTest, ReleaseErrors) {
  State s = MakeState(/*nominal_milli=*/1000);
  AddNode(s, MakeNode("n1", 1, "L4"));
  CapacityRequest a = Decide(s, WholeSpec("a", 1, 1));
  CapacityRequest q = Decide(s, WholeSpec("b", 1, 1));
  ASSERT_EQ(q.state, RequestState::kQueued);
  ChangeSet changes;
  EXPECT_THAT(ReleaseRequest(s, 0, kT0, changes), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ReleaseRequest(s, 99, kT0, changes), StatusIs(absl::StatusCode::kNotFound));
  // Cancelling the queued one first keeps it from being admitted.
  absl::StatusOr<CapacityRequest> cancelled = ReleaseRequest(s, q.id, kT0, changes);
  ASSERT_THAT(cancelled, IsOk());
  EXPECT_EQ(cancelled->state, RequestState::kCancelled);
  ASSERT_THAT(ReleaseRequest(s, a.id, kT0, changes), IsOk());
  EXPECT_THAT(ReleaseRequest(s, a.id, kT0, changes),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(s.UsedMilli("t", "serving"), 0);
}

// A window in the past is refused, naming start_time, and nothing is
// written; a start a little in the past (clock skew) means now.
TEST(ArbitrationTest, AWindowInThePastIsRefusedNotAdmitted) {
  State s = MakeState();
  AddNode(s, MakeNode("n1", 8, "H100-80GB"));
  struct Case {
    const char* key;
    absl::Duration start_before_now;
    absl::Duration duration;
    const char* says;
  };
  for (const Case& c : {Case{"ended", absl::Hours(2), absl::Hours(1), "has already ended"},
                        Case{"began", absl::Hours(2), absl::Hours(3), "is in the past"},
                        Case{"open-ended", absl::Hours(2), absl::ZeroDuration(), "in the past"},
                        Case{"just-ended", absl::Minutes(3), absl::Minutes(1), "ended"}}) {
    SCOPED_TRACE(c.key);
    CapacityRequestSpec spec = WholeSpec(c.key, 1, 1);
    spec.start_at = kT0 - c.start_before_now;
    spec.duration = c.duration;
    ChangeSet changes;
    EXPECT_THAT(RequestCapacity(s, spec, kT0, changes),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(StartsWith("start_time: "), HasSubstr(c.says))));
    EXPECT_TRUE(changes.empty());
    EXPECT_EQ(s.FindIdempotencyKey(c.key), nullptr);
  }
  EXPECT_EQ(s.UsedMilli("t", "serving"), 0);
  CapacityRequestSpec skewed = WholeSpec("skewed", 1, 1);
  skewed.start_at = kT0 - absl::Minutes(2);
  skewed.duration = absl::Hours(1);
  EXPECT_EQ(Decide(s, skewed).state, RequestState::kAdmitted);
}

}  // namespace
}  // namespace arbiter::core
