// arbiter-slurm's decisions (docs/slurm.md): what to tell Arbiter and Slurm,
// from what the bridge has seen of Slurm's jobs and Arbiter's allocations.
// No I/O: the binary (main.cc) feeds it `squeue --json` snapshots, asks it
// for the actions due (Plan), carries them out (scontrol, scancel and
// arbiterd's API) and reports the outcomes (Done). That is what the unit
// tests drive.
//
// The rules, for each job that asks for GPUs (a job that does not is never
// touched):
//   - a held job (the job_submit plugin holds every GPU job at submission)
//     is asked for in Arbiter: one RequestCapacity per run of the job, with
//     the idempotency key "slurm:<cluster>/<job>.<restart>", team = account,
//     pool = partition (or --partition-pool), members = nodes, whole GPUs per
//     node of the mapped model. The request's id is written to the job's
//     admin comment, so a restarted bridge finds it again;
//   - while the request waits, the job stays held and its comment shows
//     Arbiter's reason ("arbiter: queued: QUOTA_EXCEEDED: ...");
//   - once admitted, the allocation is claimed for "slurm:<cluster>/<job>",
//     the job is pinned to the placement's nodes and released, in that
//     order: no job runs without an admitted, claimed allocation;
//   - a denied request cancels the job, its comment saying why; so does an
//     account Arbiter does not know, a GPU type outside --gpu-type, or GPUs
//     asked other than per node;
//   - a GPU job found pending unheld without an admitted allocation is held
//     again; one found running without one is cancelled (requeued, held,
//     when it may be): it started around the bridge;
//   - the lease of a released or running job is renewed every
//     `renew_every`; the renewal also brings the allocation's state;
//   - a preemption notice signals the job (--checkpoint-signal, once), and
//     at the notice's deadline requeues it held (cancels it when it may not
//     be requeued); the requeued run is asked for anew, and the preempted
//     allocation released, which confirms the preemption;
//   - an allocation that ended in Arbiter while its job runs (its lease
//     expired, its node failed, someone released it) requeues or cancels
//     the job the same way;
//   - a job that ended, or left squeue, releases its allocation; a job that
//     ended after it ran (it had nodes) reports its run (Slurm's start and
//     end, as sacct has them), so that Arbiter charges the run. A release
//     whose run Arbiter refuses (a clock far from arbiterd's) is made again
//     without it;
//   - a call that failed is made again after retry_every, not sooner.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "clients/slurm/jobs.h"

namespace arbiter::slurm {

struct BridgeOptions {
  // The Arbiter cluster the Slurm cluster's nodes are in (holders and keys
  // name it).
  std::string cluster;
  // Slurm GRES type -> Arbiter GPU model ("h100" -> "H100-80GB"). A job
  // asking for another type is refused; an untyped job may use any model.
  std::map<std::string, std::string> gpu_types;
  // Partition -> pool; a partition not listed is the pool of its name.
  std::map<std::string, std::string> partition_pools;
  // Jobs in this QOS are preemptible (may borrow beyond quota).
  std::string preemptible_qos = "preemptible";
  absl::Duration renew_every = absl::Seconds(10);
  // A failed call is retried, and a request the bridge has not seen yet
  // (after its restart) is looked up, this often.
  absl::Duration retry_every = absl::Seconds(2);
  // A waiting request is looked at again this often: its admission comes
  // through the watch (AllocationChanged) at once; the lookup catches a
  // denial or a new reason, and a watch that missed something.
  absl::Duration lookup_every = absl::Seconds(10);
};

// What Arbiter says of a job's request.
struct RequestView {
  enum class Phase { kWaiting, kAdmitted, kPreempting, kEnded };
  int64_t id = 0;
  Phase phase = Phase::kWaiting;
  std::string state;  // REQUEST_STATE_... without the prefix, e.g. "QUEUED".
  std::string reason_code;
  std::string reason;
  std::vector<std::string> nodes;                // One per member, when placed.
  absl::Time deadline = absl::InfiniteFuture();  // kPreempting.
};

// A RequestCapacity call for a job.
struct Ask {
  std::string idempotency_key;
  std::string team;
  std::string pool;
  int32_t members = 1;
  int32_t gpus_per_member = 1;
  std::string gpu_model;  // Empty: any.
  bool preemptible = false;
  int64_t duration_seconds = 0;
  std::string description;
};

struct Action {
  enum Kind {
    kAsk,      // RequestCapacity(ask); record the id in the admin comment.
    kLookup,   // GetRequest(request).
    kShow,     // The job's comment := text.
    kAdmit,    // Claim(request, holder), pin to nodes, record, release.
    kRenew,    // RenewLease(request, holder).
    kRelease,  // ReleaseAllocation(request).
    kHold,     // scontrol hold job.
    kSignal,   // scancel --signal=<checkpoint signal> --full job.
    kRequeue,  // scontrol requeuehold job (requeueable) or scancel; text: why.
    kCancel,   // Comment := text, then scancel job.
  };
  Kind kind = kAsk;
  int64_t job = 0;
  int32_t restart = 0;
  int64_t request = 0;
  bool requeueable = false;        // kRequeue.
  Ask ask;                         // kAsk.
  std::string holder;              // kAdmit, kRenew.
  std::vector<std::string> nodes;  // kAdmit: distinct, in member order.
  std::string text;                // kShow, kCancel, kRequeue.
  // kRelease: the job's run in Unix seconds, 0 when none is reported.
  int64_t run_started = 0;
  int64_t run_ended = 0;

  std::string Describe() const;
};

struct Outcome {
  absl::Status status;
  std::optional<RequestView> request;  // What the call answered, if it did.
};

class Bridge {
 public:
  explicit Bridge(BridgeOptions options);

  // The jobs squeue lists now (all of them: the bridge picks GPU jobs).
  void Jobs(const std::vector<SlurmJob>& jobs, absl::Time now);
  // An allocation changed in Arbiter (the watch): applied to its job now
  // rather than at the next lookup or renewal.
  void AllocationChanged(const RequestView& view);
  // The actions due at `now`. At most one per job at a time: a job with an
  // action in flight waits for its Done.
  std::vector<Action> Plan(absl::Time now);
  void Done(const Action& action, const Outcome& outcome, absl::Time now);

  // "slurm:<cluster>/<job>".
  std::string HolderOf(int64_t job) const;
  // How many jobs the bridge follows (tests, metrics).
  size_t followed() const { return tracked_.size(); }

 private:
  // What the bridge keeps of one GPU job's current run.
  struct Tracked {
    SlurmJob job;
    bool listed = true;  // In the last snapshot.
    int64_t request = 0;
    std::optional<RequestView> view;
    bool claimed = false;   // Admitted by this bridge: claimed and released.
    bool released = false;  // The allocation was released by this bridge.
    bool signalled = false;
    bool run_refused = false;  // Arbiter refused the reported run.
    bool finished = false;     // Cancelled or requeued by this bridge.
    bool in_flight = false;
    absl::Time acted_at = absl::InfinitePast();  // The last ask, lookup or hold.
    absl::Time renewed_at = absl::InfinitePast();
    absl::Time failed_at = absl::InfinitePast();  // The last failed show, release, ...
    std::string shown;                            // The comment last written.
    // Why Arbiter will never admit the job as it is (its comment, then it
    // is cancelled); and why it is held for now (Arbiter unreachable).
    std::string refusal;
    std::string trouble;
    // Allocations of earlier runs still to release (requeued jobs).
    std::vector<int64_t> to_release;
  };

  std::optional<Action> Next(Tracked& t, absl::Time now) const;
  std::optional<Action> ForPending(Tracked& t, absl::Time now) const;
  std::optional<Action> ForActive(Tracked& t, absl::Time now) const;
  // An action on `t`'s job.
  Action On(const Tracked& t, Action::Kind kind) const;
  // The Ask for `job`, or the reason the job cannot be asked for.
  absl::StatusOr<Ask> AskFor(const SlurmJob& job) const;

  const BridgeOptions options_;
  std::map<int64_t, Tracked> tracked_;  // By job id.
};

// "arbiter: queued: QUOTA_EXCEEDED: ..." for a waiting request, as the
// job's comment shows it (at most 250 characters).
std::string CommentFor(const RequestView& view);

}  // namespace arbiter::slurm
