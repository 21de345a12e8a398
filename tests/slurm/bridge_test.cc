#include "clients/slurm/bridge.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "clients/slurm/jobs.h"

namespace arbiter::slurm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Phase = RequestView::Phase;

const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

BridgeOptions Options() {
  BridgeOptions o;
  o.cluster = "hpc";
  o.gpu_types = {{"h100", "H100-80GB"}, {"a100", "A100-80GB"}};
  o.partition_pools = {{"gpu-short", "shared"}};
  o.preemptible_qos = "preemptible";
  o.renew_every = absl::Seconds(10);
  o.retry_every = absl::Seconds(2);
  o.lookup_every = absl::Seconds(2);
  return o;
}

// A GPU job as the job_submit plugin leaves it: pending, held (priority 0),
// two nodes of four H100s each.
SlurmJob HeldJob(int64_t id = 7, int32_t restart = 0) {
  SlurmJob j;
  j.id = id;
  j.name = "train";
  j.user = "alice";
  j.state = "PENDING";
  j.reason = "JobHeldAdmin";
  j.held = true;
  j.account = "research";
  j.partition = "gpu";
  j.qos = "normal";
  j.nodes = 2;
  j.gpus = GpuAsk{true, "h100", 4};
  j.restart_count = restart;
  j.requeue = true;
  j.time_limit_minutes = 90;
  return j;
}

SlurmJob Running(SlurmJob j) {
  j.state = "RUNNING";
  j.reason = "None";
  j.held = false;
  j.node_list = {"n1", "n2"};
  return j;
}

SlurmJob Unheld(SlurmJob j) {
  j.held = false;
  j.reason = "Priority";
  return j;
}

RequestView Waiting(int64_t id, std::string reason_code = "QUOTA_EXCEEDED") {
  RequestView v;
  v.id = id;
  v.phase = Phase::kWaiting;
  v.state = "QUEUED";
  v.reason_code = std::move(reason_code);
  v.reason = "team research is over its H100 quota";
  return v;
}

RequestView Admitted(int64_t id, std::vector<std::string> nodes = {"n1", "n2"}) {
  RequestView v;
  v.id = id;
  v.phase = Phase::kAdmitted;
  v.state = "ADMITTED";
  v.nodes = std::move(nodes);
  return v;
}

RequestView Preempting(int64_t id, absl::Time deadline) {
  RequestView v = Admitted(id);
  v.phase = Phase::kPreempting;
  v.state = "PREEMPTING";
  v.reason = "team vision reclaims its quota";
  v.deadline = deadline;
  return v;
}

RequestView Ended(int64_t id) {
  RequestView v = Admitted(id);
  v.phase = Phase::kEnded;
  v.state = "EXPIRED";
  v.reason = "lease expired";
  return v;
}

Outcome Ok() { return Outcome{absl::OkStatus(), std::nullopt}; }
Outcome Answer(const RequestView& view) { return Outcome{absl::OkStatus(), view}; }
Outcome Error(absl::Status status) { return Outcome{std::move(status), std::nullopt}; }

std::string Describe(const std::vector<Action>& actions) {
  std::vector<std::string> out;
  for (const Action& a : actions) out.push_back(a.Describe());
  return "[" + absl::StrJoin(out, "; ") + "]";
}

class BridgeTest : public ::testing::Test {
 protected:
  // The one action planned at `now` (job -1 when there is none or several,
  // a failure already recorded).
  Action One(absl::Time now, Bridge* bridge = nullptr) {
    std::vector<Action> actions = (bridge ? bridge : &bridge_)->Plan(now);
    EXPECT_EQ(actions.size(), 1u) << Describe(actions);
    if (actions.size() != 1) {
      Action none;
      none.job = -1;
      return none;
    }
    return actions.front();
  }

  // Nothing is due at `now`.
  void Idle(absl::Time now) {
    std::vector<Action> actions = bridge_.Plan(now);
    EXPECT_TRUE(actions.empty()) << "at +" << absl::FormatDuration(now - kStart) << ": "
                                 << Describe(actions);
  }

  // `job` (held) asked for, answered as request `request` admitted on n1
  // and n2, claimed, pinned and released at `now`; then listed running.
  void AdmitAndRun(const SlurmJob& job, int64_t request, absl::Time now) {
    bridge_.Jobs({job}, now);
    const Action ask = One(now);
    ASSERT_EQ(ask.kind, Action::kAsk) << ask.Describe();
    bridge_.Done(ask, Answer(Admitted(request)), now);
    const Action admit = One(now);
    ASSERT_EQ(admit.kind, Action::kAdmit) << admit.Describe();
    bridge_.Done(admit, Ok(), now);
    bridge_.Jobs({Running(job)}, now);
    Idle(now);
  }

  Bridge bridge_{Options()};
};

// A held GPU job is asked for: one request per run, keyed by cluster, job and
// restart; team = account, pool = partition, members = nodes, GPUs per node
// of the mapped model, duration = time limit.
TEST_F(BridgeTest, AHeldGpuJobIsAskedFor) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  EXPECT_EQ(bridge_.followed(), 1u);
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kAsk) << a.Describe();
  EXPECT_EQ(a.job, 7);
  EXPECT_EQ(a.restart, 0);
  EXPECT_EQ(a.request, 0);
  EXPECT_EQ(a.ask.idempotency_key, "slurm:hpc/7.0");
  EXPECT_EQ(a.ask.team, "research");
  EXPECT_EQ(a.ask.pool, "gpu");
  EXPECT_EQ(a.ask.members, 2);
  EXPECT_EQ(a.ask.gpus_per_member, 4);
  EXPECT_EQ(a.ask.gpu_model, "H100-80GB");
  EXPECT_FALSE(a.ask.preemptible);
  EXPECT_EQ(a.ask.duration_seconds, 90 * 60);
}

// --partition-pool maps a partition to its pool; the preemptible QOS asks
// for a preemptible request; an untyped job may use any model; no time limit
// asks for no duration.
TEST_F(BridgeTest, AHeldGpuJobsPoolAndPreemptibilityComeFromPartitionAndQos) {
  SlurmJob job = HeldJob(8, 3);
  job.partition = "gpu-short";
  job.qos = "preemptible";
  job.nodes = 1;
  job.gpus = GpuAsk{true, "", 1};
  job.time_limit_minutes = 0;
  bridge_.Jobs({job}, At(0));
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kAsk) << a.Describe();
  EXPECT_EQ(a.restart, 3);
  EXPECT_EQ(a.ask.idempotency_key, "slurm:hpc/8.3");
  EXPECT_EQ(a.ask.pool, "shared");
  EXPECT_EQ(a.ask.members, 1);
  EXPECT_EQ(a.ask.gpus_per_member, 1);
  EXPECT_EQ(a.ask.gpu_model, "");
  EXPECT_TRUE(a.ask.preemptible);
  EXPECT_EQ(a.ask.duration_seconds, 0);
}

TEST_F(BridgeTest, AJobWithoutGpusIsNeverTouched) {
  SlurmJob pending = Unheld(HeldJob(7));
  pending.gpus = GpuAsk{};
  SlurmJob running = Running(HeldJob(8));
  running.gpus = GpuAsk{};
  SlurmJob held = HeldJob(9);
  held.gpus = GpuAsk{};
  bridge_.Jobs({pending, running, held}, At(0));
  EXPECT_EQ(bridge_.followed(), 0u);
  Idle(At(0));
  Idle(At(100));
}

TEST_F(BridgeTest, AnUnknownGpuTypeCancelsTheJob) {
  SlurmJob job = HeldJob(7);
  job.gpus.type = "v100";
  bridge_.Jobs({job}, At(0));
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kCancel) << a.Describe();
  EXPECT_EQ(a.job, 7);
  EXPECT_THAT(a.text, StartsWith("arbiter: refused: "));
  EXPECT_THAT(a.text, HasSubstr("'v100'"));
  bridge_.Done(a, Ok(), At(0));
  Idle(At(10));
}

TEST_F(BridgeTest, AJobWithoutAccountIsCancelled) {
  SlurmJob job = HeldJob(7);
  job.account = "";
  bridge_.Jobs({job}, At(0));
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kCancel) << a.Describe();
  EXPECT_THAT(a.text, StartsWith("arbiter: refused: "));
  EXPECT_THAT(a.text, HasSubstr("no account"));
  bridge_.Done(a, Ok(), At(0));
  Idle(At(10));
}

TEST_F(BridgeTest, GpusAskedOtherThanPerNodeCancelTheJob) {
  SlurmJob job = HeldJob(7);
  job.gpus = GpuAsk{};
  job.gpus_not_per_node = true;  // --gpus=8, say.
  bridge_.Jobs({job}, At(0));
  EXPECT_EQ(bridge_.followed(), 1u);
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kCancel) << a.Describe();
  EXPECT_THAT(a.text, StartsWith("arbiter: refused: "));
  EXPECT_THAT(a.text, HasSubstr("per node"));
  bridge_.Done(a, Ok(), At(0));
  Idle(At(10));
}

// While the request waits the job stays held, its comment showing Arbiter's
// reason; the request is looked at again every lookup_every; never admitted.
TEST_F(BridgeTest, AWaitingRequestIsShownAndLookedAtAgain) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  bridge_.Done(One(At(0)), Answer(Waiting(42)), At(0));

  const Action show = One(At(0));
  EXPECT_EQ(show.kind, Action::kShow) << show.Describe();
  EXPECT_EQ(show.request, 42);
  EXPECT_EQ(show.text, CommentFor(Waiting(42)));
  EXPECT_EQ(show.text, "arbiter: queued: QUOTA_EXCEEDED: team research is over its H100 quota");
  bridge_.Done(show, Ok(), At(0));

  Idle(At(1.999));
  for (int tick = 1; tick <= 3; ++tick) {
    const absl::Time now = At(2 * tick);
    const Action lookup = One(now);
    EXPECT_EQ(lookup.kind, Action::kLookup) << lookup.Describe();
    EXPECT_EQ(lookup.request, 42);
    bridge_.Done(lookup, Answer(Waiting(42)), now);
    Idle(now + absl::Seconds(1));
  }

  // A new reason is shown; the job still waits.
  const Action lookup = One(At(8));
  bridge_.Done(lookup, Answer(Waiting(42, "POOL_FULL")), At(8));
  const Action again = One(At(8));
  EXPECT_EQ(again.kind, Action::kShow) << again.Describe();
  EXPECT_EQ(again.text, CommentFor(Waiting(42, "POOL_FULL")));
  bridge_.Done(again, Ok(), At(8));
  EXPECT_EQ(One(At(10)).kind, Action::kLookup);
}

// The watch brings the admission at once; lookups of a waiting request wait
// for lookup_every, not retry_every.
TEST_F(BridgeTest, TheWatchAdmitsWithoutWaitingForALookup) {
  BridgeOptions o = Options();
  o.lookup_every = absl::Seconds(30);
  Bridge bridge(o);
  bridge.Jobs({HeldJob(7)}, At(0));
  bridge.Done(One(At(0), &bridge), Answer(Waiting(42)), At(0));
  bridge.Done(One(At(0), &bridge), Ok(), At(0));  // Show.
  EXPECT_TRUE(bridge.Plan(At(10)).empty());

  bridge.AllocationChanged(Admitted(42, {"n1"}));
  const Action admit = One(At(11), &bridge);
  EXPECT_EQ(admit.kind, Action::kAdmit) << admit.Describe();
  EXPECT_EQ(admit.nodes, std::vector<std::string>{"n1"});
}

TEST_F(BridgeTest, CommentForIsAtMost250Characters) {
  RequestView view = Waiting(42);
  view.reason = std::string(400, 'x');
  const std::string comment = CommentFor(view);
  EXPECT_LE(comment.size(), 250u);
  EXPECT_THAT(comment, StartsWith("arbiter: queued: QUOTA_EXCEEDED: xxx"));
}

// Once admitted: claimed for "slurm:<cluster>/<job>", pinned to the
// placement's distinct nodes and released, in one action.
TEST_F(BridgeTest, AnAdmittedRequestIsClaimedPinnedAndReleased) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  bridge_.Done(One(At(0)), Answer(Waiting(42)), At(0));
  bridge_.Done(One(At(0)), Ok(), At(0));  // Show.
  const Action lookup = One(At(2));
  ASSERT_EQ(lookup.kind, Action::kLookup) << lookup.Describe();
  bridge_.Done(lookup, Answer(Admitted(42, {"n2", "n1", "n2"})), At(2));

  const Action admit = One(At(2));
  EXPECT_EQ(admit.kind, Action::kAdmit) << admit.Describe();
  EXPECT_EQ(admit.job, 7);
  EXPECT_EQ(admit.request, 42);
  EXPECT_EQ(admit.holder, "slurm:hpc/7");
  EXPECT_EQ(admit.holder, bridge_.HolderOf(7));
  EXPECT_THAT(admit.nodes, ElementsAre("n2", "n1"));
}

// The lease of a running job is renewed every renew_every, not sooner.
TEST_F(BridgeTest, ARunningJobsLeaseIsRenewedEveryRenewEvery) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  absl::Time renewed = At(0);
  for (int i = 0; i < 3; ++i) {
    bridge_.Jobs({Running(job)}, renewed + absl::Seconds(5));
    Idle(renewed + absl::Seconds(5));
    Idle(renewed + absl::Seconds(10) - absl::Milliseconds(1));
    const absl::Time now = renewed + absl::Seconds(10);
    const Action renew = One(now);
    EXPECT_EQ(renew.kind, Action::kRenew) << renew.Describe();
    EXPECT_EQ(renew.request, 42);
    EXPECT_EQ(renew.holder, "slurm:hpc/7");
    bridge_.Done(renew, Answer(Admitted(42)), now);
    renewed = now;
  }
}

// A preemption notice signals the job once; at the notice's deadline the
// job is requeued (held).
TEST_F(BridgeTest, APreemptedJobIsSignalledOnceThenRequeuedAtTheDeadline) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  const absl::Time deadline = At(45);
  const Action renew = One(At(10));
  ASSERT_EQ(renew.kind, Action::kRenew) << renew.Describe();
  bridge_.Done(renew, Answer(Preempting(42, deadline)), At(10));

  const Action signal = One(At(10));
  EXPECT_EQ(signal.kind, Action::kSignal) << signal.Describe();
  EXPECT_EQ(signal.request, 42);
  bridge_.Done(signal, Ok(), At(10));

  for (int s = 11; s < 45; ++s) {
    for (const Action& a : bridge_.Plan(At(s))) {
      EXPECT_NE(a.kind, Action::kSignal) << "at +" << s << "s: " << a.Describe();
      EXPECT_NE(a.kind, Action::kRequeue) << "at +" << s << "s: " << a.Describe();
      bridge_.Done(a, Answer(Preempting(42, deadline)), At(s));
    }
  }
  const Action requeue = One(deadline);
  EXPECT_EQ(requeue.kind, Action::kRequeue) << requeue.Describe();
  EXPECT_EQ(requeue.request, 42);
  EXPECT_TRUE(requeue.requeueable);
  EXPECT_THAT(requeue.text, HasSubstr("preempted"));
  bridge_.Done(requeue, Ok(), deadline);
  Idle(deadline + absl::Seconds(30));
}

TEST_F(BridgeTest, APreemptedJobThatMayNotBeRequeuedIsCancelled) {
  SlurmJob job = HeldJob(7);
  job.requeue = false;
  AdmitAndRun(job, 42, At(0));
  bridge_.AllocationChanged(Preempting(42, At(5)));
  const Action signal = One(At(1));
  EXPECT_EQ(signal.kind, Action::kSignal) << signal.Describe();
  bridge_.Done(signal, Ok(), At(1));
  Idle(At(4));
  const Action requeue = One(At(5));
  EXPECT_EQ(requeue.kind, Action::kRequeue) << requeue.Describe();
  EXPECT_FALSE(requeue.requeueable);
}

// An allocation that ended in Arbiter while its job runs (lease expired,
// node failed, released by someone) requeues the job.
TEST_F(BridgeTest, AnAllocationThatEndedWhileItsJobRunsRequeuesTheJob) {
  AdmitAndRun(HeldJob(7), 42, At(0));
  bridge_.AllocationChanged(Ended(42));
  const Action a = One(At(1));
  EXPECT_EQ(a.kind, Action::kRequeue) << a.Describe();
  EXPECT_EQ(a.request, 42);
  EXPECT_TRUE(a.requeueable);
  EXPECT_EQ(a.text, CommentFor(Ended(42)));
  EXPECT_EQ(a.text, "arbiter: request 42 expired: lease expired");
}

// A job that started around the bridge is requeued (held).
TEST_F(BridgeTest, ARunningJobWithoutARequestIsRequeued) {
  bridge_.Jobs({Running(HeldJob(7))}, At(0));
  const Action a = One(At(0));
  EXPECT_EQ(a.kind, Action::kRequeue) << a.Describe();
  EXPECT_EQ(a.job, 7);
  EXPECT_EQ(a.request, 0);
  EXPECT_TRUE(a.requeueable);
  EXPECT_THAT(a.text, HasSubstr("without an Arbiter allocation"));
  bridge_.Done(a, Ok(), At(0));
  Idle(At(10));
}

TEST_F(BridgeTest, ARunningJobWhoseRequestWaitsIsRequeued) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  bridge_.Done(One(At(0)), Answer(Waiting(42)), At(0));
  bridge_.Done(One(At(0)), Ok(), At(0));  // Show.
  bridge_.Jobs({Running(HeldJob(7))}, At(1));
  const Action a = One(At(1));
  EXPECT_EQ(a.kind, Action::kRequeue) << a.Describe();
  EXPECT_EQ(a.request, 42);
}

TEST_F(BridgeTest, APendingUnheldJobWithoutARequestIsHeld) {
  bridge_.Jobs({Unheld(HeldJob(7))}, At(0));
  const Action hold = One(At(0));
  EXPECT_EQ(hold.kind, Action::kHold) << hold.Describe();
  EXPECT_EQ(hold.job, 7);
  bridge_.Done(hold, Ok(), At(0));
  bridge_.Jobs({HeldJob(7)}, At(2));
  EXPECT_EQ(One(At(2)).kind, Action::kAsk);
}

TEST_F(BridgeTest, APendingJobUnheldWhileItsRequestWaitsIsHeldAgain) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  bridge_.Done(One(At(0)), Answer(Waiting(42)), At(0));
  bridge_.Done(One(At(0)), Ok(), At(0));  // Show.
  bridge_.Jobs({Unheld(HeldJob(7))}, At(2));
  const Action hold = One(At(2));
  EXPECT_EQ(hold.kind, Action::kHold) << hold.Describe();
  EXPECT_EQ(hold.request, 42);
}

TEST_F(BridgeTest, ACompletedJobReleasesItsAllocationOnce) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  SlurmJob completed = Running(job);
  completed.state = "COMPLETED";
  bridge_.Jobs({completed}, At(5));
  const Action release = One(At(5));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.request, 42);
  bridge_.Done(release, Ok(), At(5));
  for (int s = 6; s < 60; s += 3) {
    bridge_.Jobs({completed}, At(s));
    Idle(At(s));
  }
}

// A job that ended reports its run as Slurm recorded it, which Arbiter
// charges; a run Arbiter refuses (a clock far off) is released without it.
TEST_F(BridgeTest, AnEndedJobReportsItsRunAndReleasesWithoutItIfRefused) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  SlurmJob completed = Running(job);
  completed.state = "COMPLETED";
  completed.start_time = 1'800'000'001;
  completed.end_time = 1'800'000'004;
  bridge_.Jobs({completed}, At(5));
  const Action release = One(At(5));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.run_started, 1'800'000'001);
  EXPECT_EQ(release.run_ended, 1'800'000'004);
  bridge_.Done(release, Error(absl::InvalidArgumentError("workload_started_at: ...")), At(5));
  const Action again = One(At(5));
  EXPECT_EQ(again.kind, Action::kRelease) << again.Describe();
  EXPECT_EQ(again.run_started, 0);
  bridge_.Done(again, Ok(), At(5));
  Idle(At(6));
}

// A job cancelled before it started (no nodes) reports no run, though Slurm
// gives it a start and an end.
TEST_F(BridgeTest, AJobCancelledBeforeItRanReportsNoRun) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  SlurmJob cancelled = job;
  cancelled.held = false;
  cancelled.state = "CANCELLED";
  cancelled.start_time = cancelled.end_time = 1'800'000'003;
  cancelled.node_list.clear();
  bridge_.Jobs({cancelled}, At(5));
  const Action release = One(At(5));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.run_started, 0);
}

// A release that fails is made again after retry_every, not sooner, and the
// job is not forgotten meanwhile though it left squeue.
TEST_F(BridgeTest, AFailedReleaseIsRetriedAfterRetryEvery) {
  AdmitAndRun(HeldJob(7), 42, At(0));
  bridge_.Jobs({}, At(5));
  const Action release = One(At(5));
  bridge_.Done(release, Error(absl::UnavailableError("arbiterd down")), At(5));
  Idle(At(6.9));
  EXPECT_EQ(bridge_.followed(), 1u);
  const Action again = One(At(7));
  EXPECT_EQ(again.kind, Action::kRelease) << again.Describe();
}

// A job gone from squeue has no run to report.
TEST_F(BridgeTest, AJobThatLeavesSqueueIsReleasedThenForgotten) {
  AdmitAndRun(HeldJob(7), 42, At(0));
  bridge_.Jobs({}, At(5));
  const Action release = One(At(5));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.request, 42);
  EXPECT_EQ(release.run_started, 0);
  EXPECT_EQ(bridge_.followed(), 1u);
  bridge_.Done(release, Ok(), At(5));
  Idle(At(6));
  EXPECT_EQ(bridge_.followed(), 0u);
}

// The requeued run (restart_cnt + 1) releases the preempted allocation, then
// is asked for anew under its own key.
TEST_F(BridgeTest, ARequeuedJobReleasesTheOldRequestThenAsksForTheNewRun) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  bridge_.AllocationChanged(Preempting(42, At(1.5)));
  const Action signal = One(At(1));
  ASSERT_EQ(signal.kind, Action::kSignal) << signal.Describe();
  bridge_.Done(signal, Ok(), At(1));
  const Action requeue = One(At(1.5));
  ASSERT_EQ(requeue.kind, Action::kRequeue) << requeue.Describe();
  bridge_.Done(requeue, Ok(), At(1.5));

  SlurmJob requeued = HeldJob(7, /*restart=*/1);
  requeued.admin_comment = AdminCommentFor(42, 0);
  bridge_.Jobs({requeued}, At(2));
  const Action release = One(At(2));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.request, 42);
  bridge_.Done(release, Ok(), At(2));

  const Action ask = One(At(2));
  EXPECT_EQ(ask.kind, Action::kAsk) << ask.Describe();
  EXPECT_EQ(ask.restart, 1);
  EXPECT_EQ(ask.ask.idempotency_key, "slurm:hpc/7.1");
  bridge_.Done(ask, Answer(Waiting(43)), At(2));
  const Action show = One(At(2));
  EXPECT_EQ(show.kind, Action::kShow) << show.Describe();
  EXPECT_EQ(show.request, 43);
}

// At the deadline the job is requeued even if its signal never went out.
TEST_F(BridgeTest, TheDeadlineRequeuesEvenIfTheSignalKeepsFailing) {
  AdmitAndRun(HeldJob(7), 42, At(0));
  bridge_.AllocationChanged(Preempting(42, At(10)));
  for (int s = 1; s < 10; s += 2) {
    const Action signal = One(At(s));
    ASSERT_EQ(signal.kind, Action::kSignal) << signal.Describe();
    bridge_.Done(signal, Error(absl::UnavailableError("scancel failed")), At(s));
  }
  const Action requeue = One(At(11));
  EXPECT_EQ(requeue.kind, Action::kRequeue) << requeue.Describe();
}

// A restarted bridge finds each job's request in its admin comment and
// looks it up instead of asking again.
TEST_F(BridgeTest, ARestartedBridgeFindsTheRequestInTheAdminComment) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  bridge_.Done(One(At(0)), Answer(Waiting(42)), At(0));

  SlurmJob recorded = HeldJob(7);
  recorded.admin_comment = AdminCommentFor(42, 0);
  recorded.comment = CommentFor(Waiting(42));
  Bridge restarted(Options());
  restarted.Jobs({recorded}, At(10));
  const Action lookup = One(At(10), &restarted);
  EXPECT_EQ(lookup.kind, Action::kLookup) << lookup.Describe();
  EXPECT_EQ(lookup.request, 42);
  restarted.Done(lookup, Answer(Admitted(42)), At(10));
  const Action admit = One(At(10), &restarted);
  EXPECT_EQ(admit.kind, Action::kAdmit) << admit.Describe();
  EXPECT_EQ(admit.request, 42);
}

TEST_F(BridgeTest, ARestartedBridgeLooksUpARunningJobsRequestThenRenews) {
  SlurmJob running = Running(HeldJob(7));
  running.admin_comment = AdminCommentFor(42, 0);
  bridge_.Jobs({running}, At(0));
  const Action lookup = One(At(0));
  EXPECT_EQ(lookup.kind, Action::kLookup) << lookup.Describe();
  EXPECT_EQ(lookup.request, 42);
  bridge_.Done(lookup, Answer(Admitted(42)), At(0));
  EXPECT_EQ(One(At(0)).kind, Action::kRenew);
}

// Arbiter not answering: the job stays held, its comment says so, and the
// ask is retried after retry_every.
TEST_F(BridgeTest, AnUnansweredAskIsShownAndRetried) {
  bridge_.Jobs({HeldJob(7)}, At(0));
  const Action ask = One(At(0));
  ASSERT_EQ(ask.kind, Action::kAsk);
  bridge_.Done(ask, Error(absl::UnavailableError("connection refused")), At(0));

  const Action show = One(At(0));
  EXPECT_EQ(show.kind, Action::kShow) << show.Describe();
  EXPECT_THAT(show.text, HasSubstr("did not answer"));
  EXPECT_THAT(show.text, HasSubstr("connection refused"));
  bridge_.Done(show, Ok(), At(0));
  Idle(At(1.999));

  const Action retry = One(At(2));
  EXPECT_EQ(retry.kind, Action::kAsk) << retry.Describe();
  EXPECT_EQ(retry.ask.idempotency_key, "slurm:hpc/7.0");
  bridge_.Done(retry, Answer(Waiting(42)), At(2));
  const Action queued = One(At(2));
  EXPECT_EQ(queued.kind, Action::kShow) << queued.Describe();
  EXPECT_EQ(queued.text, CommentFor(Waiting(42)));
}

// An answer that no retry changes cancels the job, its comment saying why.
TEST_F(BridgeTest, APermanentAnswerToAnAskCancelsTheJob) {
  bridge_.Jobs({HeldJob(7), HeldJob(8)}, At(0));
  std::vector<Action> asks = bridge_.Plan(At(0));
  ASSERT_EQ(asks.size(), 2u) << Describe(asks);
  for (const Action& a : asks) {
    ASSERT_EQ(a.kind, Action::kAsk) << a.Describe();
    bridge_.Done(a,
                 Error(a.job == 7 ? absl::InvalidArgumentError("team research is unknown")
                                  : absl::NotFoundError("pool gpu does not exist")),
                 At(0));
  }
  std::vector<Action> cancels = bridge_.Plan(At(0));
  ASSERT_EQ(cancels.size(), 2u) << Describe(cancels);
  for (const Action& a : cancels) {
    EXPECT_EQ(a.kind, Action::kCancel) << a.Describe();
    EXPECT_THAT(a.text, StartsWith("arbiter: refused: "));
    EXPECT_THAT(a.text,
                HasSubstr(a.job == 7 ? "team research is unknown" : "pool gpu does not exist"));
    bridge_.Done(a, Ok(), At(0));
  }
  Idle(At(10));
}

TEST_F(BridgeTest, OneActionInFlightPerJob) {
  bridge_.Jobs({HeldJob(7), HeldJob(8)}, At(0));
  std::vector<Action> first = bridge_.Plan(At(0));
  ASSERT_EQ(first.size(), 2u) << Describe(first);
  Idle(At(0));
  Idle(At(100));
  bridge_.Done(first[0], Answer(Waiting(42)), At(100));
  const Action next = One(At(100));
  EXPECT_EQ(next.job, first[0].job);
  EXPECT_EQ(next.kind, Action::kShow) << next.Describe();
}

// A Done for an earlier run of the job (before a requeue): its answer is not
// taken for the new run's request, and a request it asked for is released
// first.
TEST_F(BridgeTest, ADoneForAnEarlierRunIsIgnored) {
  bridge_.Jobs({HeldJob(7, 0)}, At(0));
  const Action old_ask = One(At(0));
  ASSERT_EQ(old_ask.restart, 0);
  bridge_.Jobs({HeldJob(7, 1)}, At(1));
  bridge_.Done(old_ask, Answer(Admitted(42)), At(1));

  const Action release = One(At(1));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.request, 42);
  bridge_.Done(release, Ok(), At(1));
  const Action ask = One(At(1));
  EXPECT_EQ(ask.kind, Action::kAsk) << ask.Describe();
  EXPECT_EQ(ask.restart, 1);
  EXPECT_EQ(ask.request, 0);
  EXPECT_EQ(ask.ask.idempotency_key, "slurm:hpc/7.1");
}

// "At most one per job at a time: a job with an action in flight waits for
// its Done" holds when a snapshot shows the job requeued meanwhile.
TEST_F(BridgeTest, AnActionInFlightHoldsBackTheJobAcrossARequeue) {
  const SlurmJob job = HeldJob(7);
  AdmitAndRun(job, 42, At(0));
  bridge_.AllocationChanged(Ended(42));
  const Action requeue = One(At(1));
  ASSERT_EQ(requeue.kind, Action::kRequeue) << requeue.Describe();
  // Slurm requeues the job before the bridge hears back from scontrol.
  SlurmJob requeued = HeldJob(7, /*restart=*/1);
  requeued.admin_comment = AdminCommentFor(42, 0);
  bridge_.Jobs({requeued}, At(2));
  Idle(At(2));  // The requeue is still in flight.
  bridge_.Done(requeue, Ok(), At(2));
  const Action release = One(At(2));
  EXPECT_EQ(release.kind, Action::kRelease) << release.Describe();
  EXPECT_EQ(release.request, 42);
}

}  // namespace
}  // namespace arbiter::slurm
