#include "server/arbiter.h"

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/arbitration.h"
#include "core/status_macros.h"

namespace arbiter::server {
namespace {

// The watch event a committed request write stands for.
EventType EventTypeOf(const core::RequestWrite& write) {
  switch (write.request.state) {
    case core::RequestState::kQueued:
      return EventType::kQueued;
    case core::RequestState::kDenied:
      return EventType::kDenied;
    case core::RequestState::kReleased:
      return EventType::kReleased;
    case core::RequestState::kCancelled:
      return EventType::kCancelled;
    case core::RequestState::kPreempting:
      return EventType::kPreempting;
    case core::RequestState::kPreempted:
      return EventType::kPreempted;
    case core::RequestState::kReserved:
      return EventType::kReserved;
    case core::RequestState::kPendingApproval:
      return EventType::kPendingApproval;
    default:
      return EventType::kAdmitted;
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Arbiter>> Arbiter::Create(store::Store* store, Clock* clock,
                                                         WatchHub* hub, NodeDirectory* nodes,
                                                         const ArbiterOptions& options,
                                                         Authorizer* authz) {
  ARBITER_ASSIGN_OR_RETURN(core::State state, store->LoadState());
  return std::unique_ptr<Arbiter>(
      new Arbiter(store, clock, hub, nodes, options, std::move(state), authz));
}

Arbiter::Arbiter(store::Store* store, Clock* clock, WatchHub* hub, NodeDirectory* nodes,
                 const ArbiterOptions& options, core::State state, Authorizer* authz)
    : store_(store),
      clock_(clock),
      hub_(hub),
      nodes_(nodes),
      authz_(authz),
      options_(options),
      state_(std::move(state)) {
  IndexNodes();
  thread_ = std::thread([this] { Run(); });
}

Arbiter::~Arbiter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void Arbiter::Submit(Decide decide, Done done, std::string actor) {
  {
    absl::MutexLock lock(&mu_);
    if (!stopping_ && queue_.size() < options_.max_queued) {
      queue_.push_back(Command{std::move(decide), std::move(done), std::move(actor)});
      return;
    }
  }
  done(absl::ResourceExhaustedError("the arbiter is shutting down or overloaded; retry later"));
}

ArbiterStats Arbiter::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Arbiter::Run() {
  for (;;) {
    std::deque<Command> batch;
    // Wake for the first timed event (a preemption deadline, a reservation's
    // start) even when no command comes; at least every second, so that a
    // clock that jumps (tests) is noticed.
    absl::Duration wait = absl::Seconds(1);
    if (state_valid_ && !state_.timers().empty()) {
      wait = std::clamp(state_.timers().begin()->first - clock_->TimeNow(), absl::ZeroDuration(),
                        absl::Seconds(1));
    }
    {
      absl::MutexLock lock(&mu_);
      const bool woken = mu_.AwaitWithTimeout(absl::Condition(
                                                  +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                                    return a->stopping_ || !a->queue_.empty();
                                                  },
                                                  this),
                                              wait);
      if (!woken && !TimerDue()) continue;
      if (stopping_) {
        batch.swap(queue_);
      } else {
        while (!queue_.empty() && batch.size() < options_.max_batch) {
          batch.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
      }
      if (stopping_) {
        for (Command& c : batch) c.done(absl::UnavailableError("arbiter stopped"));
        return;
      }
    }
    if (!state_valid_ && !Reload()) {
      for (Command& c : batch) {
        c.done(absl::UnavailableError("arbiter state is reloading; database unreachable"));
      }
      clock_->SleepFor(options_.reload_backoff);
      continue;
    }
    ProcessBatch(batch);
  }
}

bool Arbiter::TimerDue() const {
  return state_valid_ && !state_.timers().empty() &&
         state_.timers().begin()->first <= clock_->TimeNow();
}

void Arbiter::ProcessBatch(std::deque<Command>& batch) {
  const absl::Time now = clock_->TimeNow();
  core::ChangeSet changes;
  store::CommitContext context;
  context.at = now;
  // What is due first: deadlines and reservations come before the commands.
  core::Tick(state_, now, changes);
  context.actors.assign(changes.changes.size(), "arbiter");
  std::vector<absl::Status> results;
  results.reserve(batch.size());
  for (Command& c : batch) {
    results.push_back(c.decide(state_, now, changes));
    context.actors.resize(changes.changes.size(), c.actor);
  }

  const absl::Status commit = store_->Commit(changes, context);
  {
    absl::MutexLock lock(&mu_);
    stats_.batches++;
    stats_.commands += static_cast<int64_t>(batch.size());
    if (!commit.ok()) stats_.commit_failures++;
  }
  if (!commit.ok()) {
    // The in-memory state now runs ahead of the database: fail stop.
    spdlog::error("commit of {} commands failed, reloading state: {}", batch.size(),
                  commit.ToString());
    state_valid_ = false;
    for (Command& c : batch) {
      c.done(absl::UnavailableError(absl::StrCat("decision not committed: ", commit.message())));
    }
    return;
  }

  std::vector<AllocationEvent> events;
  for (const core::Change& change : changes.changes) {
    if (authz_ != nullptr) authz_->Apply(change);
    if (const auto* node = std::get_if<core::Node>(&change)) {
      nodes_->Put(node->id, node->cluster, node->name);
    } else if (const auto* write = std::get_if<core::RequestWrite>(&change)) {
      events.push_back(AllocationEvent{EventTypeOf(*write), write->request, now});
    }
  }
  for (size_t i = 0; i < batch.size(); ++i) batch[i].done(results[i]);
  if (!events.empty()) hub_->Publish(events);
}

bool Arbiter::Reload() {
  absl::StatusOr<core::State> loaded = store_->LoadState();
  if (!loaded.ok()) {
    spdlog::warn("reloading state failed: {}", loaded.status().ToString());
    return false;
  }
  state_ = std::move(*loaded);
  state_valid_ = true;
  IndexNodes();
  {
    absl::MutexLock lock(&mu_);
    stats_.reloads++;
  }
  spdlog::info("state reloaded: {} nodes, {} live requests", state_.nodes().size(),
               state_.live_requests().size());
  return true;
}

void Arbiter::IndexNodes() {
  state_.set_approval_timeout(options_.approval_timeout);
  for (const core::Node& n : state_.nodes()) nodes_->Put(n.id, n.cluster, n.name);
  if (authz_ != nullptr) authz_->Reset(state_);
}

}  // namespace arbiter::server
