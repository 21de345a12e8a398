// Allocations: request, inspect, approve, deny and release capacity, and
// subscribe to its events. Each call checks the caller's access first (see
// app/authz.cc for the table), then either runs a read on the read workers
// or submits a command to the engine, answered after COMMIT. See
// proto/arbiter/v1/allocation.proto for each call's contract.
//
// Status codes besides those of the access check and of the core's
// decisions (core/arbitration.h): UNAVAILABLE when the decision could not be
// made durable or this replica follows (retry with the same idempotency
// key); RESOURCE_EXHAUSTED when too much work is waiting.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "app/authz.h"
#include "app/context.h"
#include "app/watch_hub.h"
#include "core/model.h"
#include "store/store.h"

namespace arbiter::app {

// A decided capacity request. A replay (the idempotency key was seen with
// the same body) carries the request as stored now.
struct RequestDecision {
  core::CapacityRequest request;
  bool replayed = false;
  // A preview (validate_only): nothing was written.
  bool preview = false;
  // A preview's victims: the running requests it would preempt, as they
  // would be.
  std::vector<core::CapacityRequest> would_preempt;
};

// Keeps an occasional job to at most 1/`share` of a thread's time: after a
// run that took d, the next is refused until (share - 1) d have passed.
// Thread-safe.
class DutyLimiter {
 public:
  explicit DutyLimiter(int share) : share_(share) {}
  // OK when a run may start at `now`; RESOURCE_EXHAUSTED saying when to
  // retry otherwise.
  absl::Status Admit(absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);
  // Records a run over [started, ended).
  void Charge(absl::Time started, absl::Time ended) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int share_;
  mutable absl::Mutex mu_;
  absl::Time free_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class Allocations {
 public:
  explicit Allocations(const Context& ctx)
      : ctx_(ctx), preview_budget_(std::make_shared<DutyLimiter>(kPreviewShare)) {}

  // Arbitrates `spec` for `target` (the team and pool the caller named).
  // The spec's conversion error, if any, is answered after the access
  // check, so that an unauthorized caller learns nothing from validation.
  // With `preview`, the decision is made on a clone of the arbiter's state,
  // in its thread and turn, and nothing is written (RequestDecision::
  // preview, would_preempt).
  void RequestCapacity(const Caller& caller, const Resource& target,
                       absl::StatusOr<core::CapacityRequestSpec> spec, Reply<RequestDecision> reply,
                       bool preview = false) const;
  // NOT_FOUND when there is no request `id`; INVALID_ARGUMENT when id <= 0.
  void GetRequest(const Caller& caller, int64_t id, Reply<core::CapacityRequest> reply) const;
  // Requests matching `filter` (or its conversion error), newest first,
  // with the revision the page reflects (watch from it: app/watch_hub.h).
  void ListRequests(const Caller& caller, absl::StatusOr<store::RequestFilter> filter,
                    Reply<store::RequestPage> reply) const;
  // An approval or denial by the caller, as the authority rules allow
  // (PERMISSION_DENIED, recorded, when they name someone else).
  void ApproveRequest(const Caller& caller, int64_t id, Reply<core::CapacityRequest> reply) const;
  // What ApproveRequest would do now, decided as Preview decides: the
  // request as it would be and the requests it would preempt; nothing
  // written. The same status codes.
  void PreviewApproval(const Caller& caller, int64_t id, Reply<RequestDecision> reply) const;
  void DenyRequest(const Caller& caller, int64_t id, std::string reason,
                   Reply<core::CapacityRequest> reply) const;
  // Releases a live request of a team the caller acts for, charged for
  // `run` when its enforcer reports one (core::ReleaseRequest). Callers
  // without any team role are refused before the request is looked up, so
  // that they learn nothing about it.
  void ReleaseAllocation(const Caller& caller, int64_t id, core::WorkloadRun run,
                         Reply<core::CapacityRequest> reply) const;
  // Claims members of an admitted allocation for `holder`, and renews the
  // leases `holder` holds on one (core::ClaimAllocation, core::RenewLease),
  // for an enforcer (agent) or the allocation's team, checked like release.
  void ClaimAllocation(const Caller& caller, int64_t id, std::string holder,
                       std::vector<int32_t> members, Reply<core::CapacityRequest> reply) const;
  void RenewLease(const Caller& caller, int64_t id, std::string holder,
                  Reply<core::CapacityRequest> reply) const;

  // Whether the caller may watch allocation events (WatchHub::Subscribe).
  [[nodiscard]] absl::Status CheckWatch(const Caller& caller) const;
  // Subscribes `subscriber` to the events matching `filter` after
  // `start_revision`, once the caller may watch. Returns the subscription
  // (WatchHub::Unsubscribe it when the stream ends). Errors: the access
  // check's, then WatchHub::Subscribe's.
  [[nodiscard]] absl::StatusOr<int64_t> Watch(const Caller& caller, const WatchFilter& filter,
                                              int64_t start_revision,
                                              WatchSubscriber* subscriber) const;

 private:
  // RequestCapacity once its key was looked up among the window's ended
  // requests at `keys_checked_at` and not found: decided by the engine.
  void Decide(core::CapacityRequestSpec spec, absl::Time keys_checked_at, std::string actor,
              Reply<RequestDecision> reply) const;
  // RequestCapacity's preview: decided in the arbiter's turn on a clone of
  // its state; replies with what would be, having written nothing.
  void Preview(core::CapacityRequestSpec spec, absl::Time keys_checked_at, std::string actor,
               Reply<RequestDecision> reply) const;
  // RequestCapacity of a key that `ended` used within the window: its
  // stored request, replayed (FAILED_PRECONDITION for another body).
  void ReplayEnded(const core::CapacityRequestSpec& spec, const store::EndedKey& ended,
                   bool preview, Reply<RequestDecision> reply) const;
  // Runs `decide` in the arbiter's turn on a clone of its state (`state` is
  // the arbiter's own, to read) and replies with the request it decided (as
  // its last write leaves it) and the running requests its changes would
  // preempt. `decide` returns the id of the request it decided, and whether
  // it only replayed a key (then the stored request is read and answered).
  using PreviewDecide = std::function<absl::StatusOr<std::pair<int64_t, bool>>(
      const core::State& state, core::State& what_if, absl::Time now, core::ChangeSet& changes)>;
  void RunPreview(PreviewDecide decide, std::string actor, Reply<RequestDecision> reply) const;

  // Previews take the single writer's time (a state clone: 134 ms at
  // 100,000 GPUs, bench/core_benchmark BM_Preview): they may use at most a
  // tenth of it (DutyLimiter).
  static constexpr int kPreviewShare = 10;
  const Context ctx_;
  const std::shared_ptr<DutyLimiter> preview_budget_;
};

}  // namespace arbiter::app
