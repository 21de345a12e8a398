#include "app/arbiter.h"

#include <algorithm>
#include <utility>
#include <variant>
#include <vector>

#include <spdlog/spdlog.h>

#include "app/real_clock.h"
#include "app/thread_name.h"
#include "core/arbitration.h"
#include "core/budget.h"
#include "core/status_macros.h"

namespace arbiter::app {

absl::Status NotLeaderError(const std::string& leader_address) {
  absl::Status status = absl::UnavailableError(
      leader_address.empty()
          ? std::string("this replica is not the leader and no leader is elected yet; retry")
          : absl::StrCat("this replica is not the leader; retry at leader=", leader_address));
  status.SetPayload(kLeaderPayload, absl::Cord(leader_address));
  return status;
}

namespace {

// What the arbiter loads of the history at `now`: the keys its memory
// keeps (the window's, or its last minutes: ended_key_memory, at least
// kEndedKeyLoadSpan) and the budgets' month.
store::LoadScope ScopeAt(absl::Time now, const ArbiterOptions& options) {
  const absl::Duration keys =
      std::min(options.idempotency_window, std::max(options.ended_key_memory, kEndedKeyLoadSpan));
  return store::LoadScope{now - keys, core::MonthStart(now)};
}

}  // namespace

absl::StatusOr<std::unique_ptr<Arbiter>> Arbiter::Create(store::Store* store, Clock* clock,
                                                         WatchHub* hub, NodeDirectory* nodes,
                                                         const ArbiterOptions& options,
                                                         Authorizer* authz) {
  ARBITER_ASSIGN_OR_RETURN(core::State state, store->LoadState(ScopeAt(clock->TimeNow(), options)));
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
      state_(std::move(state)),
      last_reload_(clock->TimeNow()),
      leading_(!options.start_following) {
  IndexNodes();
  NoteLoad(last_reload_);  // Later than the load began: forgets later.
  hub_->Reset(store_->LedgerHead(),
              options.start_following ? NotLeaderError("") : absl::OkStatus());
  responder_ = StartNamedThread("arb-responder", [this] { RunResponder(); });
  committer_ = StartNamedThread("arb-committer", [this] { RunCommitter(); });
  thread_ = StartNamedThread("arb-arbiter", [this] { Run(); });
}

Arbiter::~Arbiter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
  // What was decided is still committed and answered.
  {
    absl::MutexLock lock(&mu_);
    committer_stopping_ = true;
  }
  committer_.join();
  {
    absl::MutexLock lock(&answers_mu_);
    responder_stopping_ = true;
  }
  responder_.join();
}

void Arbiter::Submit(Decide decide, Done done, std::string actor) {
  absl::Status refusal;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) {
      refusal = NotLeaderError(leader_address_);
    } else if (stopping_ || queue_.size() >= options_.max_queued) {
      refusal =
          absl::ResourceExhaustedError("the arbiter is shutting down or overloaded; retry later");
    } else {
      queue_.push_back(Command{std::move(decide), std::move(done), std::move(actor)});
      return;
    }
  }
  done(refusal);
}

void Arbiter::Lead(int64_t epoch) {
  absl::MutexLock lock(&mu_);
  ++generation_;
  leading_ = true;
  pending_epoch_ = epoch;
  leader_address_.clear();
}

void Arbiter::Follow(const std::string& leader_address) {
  std::deque<Command> refused;
  {
    absl::MutexLock lock(&mu_);
    if (leading_) {
      spdlog::warn("no longer leading; the leader is at {}",
                   leader_address.empty() ? "(unknown)" : leader_address);
      ++generation_;
    }
    leading_ = false;
    pending_epoch_ = 0;
    leader_address_ = leader_address;
    refused.swap(queue_);
  }
  hub_->Reset(-1, NotLeaderError(leader_address));
  for (Command& c : refused) c.done(NotLeaderError(leader_address));
}

ArbiterStats Arbiter::stats() const {
  absl::MutexLock lock(&mu_);
  ArbiterStats stats = stats_;
  stats.queued = static_cast<int64_t>(queue_.size());
  stats.in_flight = static_cast<int64_t>(in_flight_);
  stats.leading = leading_;
  stats.epoch = epoch_;
  return stats;
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
    bool failed = false;
    bool leading = false;
    bool idle = false;
    int64_t new_epoch = 0;
    {
      absl::MutexLock lock(&mu_);
      // Room for one more batch in flight, then a command (or a timer).
      mu_.Await(absl::Condition(
          +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->stopping_ || a->commit_failed_ || a->pending_epoch_ != 0 ||
                   a->in_flight_ < a->options_.max_in_flight;
          },
          this));
      const bool woken = mu_.AwaitWithTimeout(absl::Condition(
                                                  +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                                                    return a->stopping_ || a->commit_failed_ ||
                                                           a->pending_epoch_ != 0 ||
                                                           !a->queue_.empty();
                                                  },
                                                  this),
                                              wait);
      failed = commit_failed_;
      leading = leading_;
      new_epoch = std::exchange(pending_epoch_, 0);
      if (stopping_) {
        batch.swap(queue_);
        for (Command& c : batch) c.done(absl::UnavailableError("arbiter stopped"));
        return;
      }
      idle = !woken && !failed && new_epoch == 0 && !(leading && TimerDue());
      while (!idle && !queue_.empty() && batch.size() < options_.max_batch) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    if (idle) {
      if (!leading) RefreshFollower();
      continue;
    }
    if (failed) {
      // The in-memory state ran ahead of the database: wait for the batches
      // in flight to fail too, then reload.
      Drain();
      state_valid_ = false;
      absl::MutexLock lock(&mu_);
      commit_failed_ = false;
    }
    if (new_epoch != 0) TakeOver(new_epoch);
    if (!leading) {
      // Queued before this replica stopped leading.
      for (Command& c : batch) c.done(NotLeaderError(""));
      continue;
    }
    if (!state_valid_ && !Reload()) {
      for (Command& c : batch) {
        c.done(absl::UnavailableError("arbiter state is reloading; database unreachable"));
      }
      clock_->SleepFor(options_.reload_backoff);
      continue;
    }
    DecideBatch(batch);
  }
}

void Arbiter::TakeOver(int64_t epoch) {
  // Batches decided under the old epoch commit (or fail fenced) first.
  Drain();
  store_->SetFencingEpoch(epoch);
  state_valid_ = false;
  {
    absl::MutexLock lock(&mu_);
    epoch_ = epoch;
    commit_failed_ = false;
  }
  spdlog::info("leading with epoch {}; loading the state", epoch);
}

void Arbiter::RefreshFollower() {
  if (clock_->TimeNow() - last_reload_ >= options_.follower_refresh) Reload();
}

bool Arbiter::TimerDue() const {
  if (!state_valid_) return false;
  const absl::Time now = clock_->TimeNow();
  return (!state_.timers().empty() && state_.timers().begin()->first <= now) ||
         state_.heartbeat_check_at() <= now || state_.demand_sample_at() <= now;
}

void Arbiter::Drain() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS { return a->in_flight_ == 0; }, this));
}

void Arbiter::NoteKeysStored() {
  std::vector<KeysStored> stored;
  {
    absl::MutexLock lock(&mu_);
    stored.swap(keys_stored_);
  }
  for (const KeysStored& s : stored) {
    // Marks of a state since replaced mean nothing to this one.
    if (s.load == loads_) state_.NoteKeysStored(s.keys_put, s.at);
  }
}

void Arbiter::DecideBatch(std::deque<Command>& batch) {
  NoteKeysStored();
  const absl::Time now = clock_->TimeNow();
  Decided decided;
  decided.context.at = now;
  // What is due first: deadlines and reservations come before the commands.
  core::Tick(state_, now, decided.changes);
  decided.context.actors.assign(decided.changes.changes.size(), "arbiter");
  decided.results.reserve(batch.size());
  for (Command& c : batch) {
    decided.results.push_back(c.decide(state_, now, decided.changes));
    decided.context.actors.resize(decided.changes.changes.size(), c.actor);
  }
  decided.commands = std::move(batch);
  decided.ended_keys_put = state_.ended_keys_put();
  decided.load = loads_;
  const auto keys_in_memory = static_cast<int64_t>(state_.requests().remembered_keys());
  absl::MutexLock lock(&mu_);
  stats_.keys_in_memory = keys_in_memory;
  decided.generation = generation_;
  decided_.push_back(std::move(decided));
  ++in_flight_;
}

void Arbiter::RunCommitter() {
  for (;;) {
    Decided decided;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->committer_stopping_ || !a->decided_.empty();
          },
          this));
      if (decided_.empty()) return;  // Stopping, and nothing left.
      decided = std::move(decided_.front());
      decided_.pop_front();
    }
    CommitBatch(decided);
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
}

void Arbiter::CommitBatch(Decided& decided) {
  std::deque<Command>& batch = decided.commands;
  bool after_failure = false;
  {
    absl::MutexLock lock(&mu_);
    after_failure = commit_failed_;
  }
  // A batch decided after a failed one builds on state that is not durable.
  const Stopwatch commit_timer;
  const absl::Status commit = after_failure
                                  ? absl::UnavailableError("an earlier batch failed to commit")
                                  : store_->Commit(decided.changes, decided.context);
  {
    absl::MutexLock lock(&mu_);
    stats_.batches++;
    stats_.commands += static_cast<int64_t>(batch.size());
    if (!commit.ok()) {
      stats_.commit_failures++;
      commit_failed_ = true;
    } else {
      keys_stored_.push_back({decided.load, decided.ended_keys_put, clock_->TimeNow()});
    }
    if (commit.code() == absl::StatusCode::kFailedPrecondition &&
        decided.generation == generation_ && leading_) {
      // Fenced: another replica took over. The election will name it.
      spdlog::warn("a newer leader took over: {}", std::string(commit.message()));
      leading_ = false;
    }
  }
  if (!commit.ok() && commit.code() == absl::StatusCode::kFailedPrecondition) {
    hub_->Reset(-1, NotLeaderError(""));
  }
  if (options_.on_commit) options_.on_commit(batch.size(), commit_timer.Elapsed(), commit.ok());
  Answers answers;
  answers.commands = std::move(batch);
  if (!commit.ok()) {
    spdlog::error("commit of {} commands failed, reloading state: {}", answers.commands.size(),
                  commit.ToString());
    answers.results.assign(answers.commands.size(),
                           commit.code() == absl::StatusCode::kFailedPrecondition
                               ? NotLeaderError("")
                               : absl::UnavailableError(absl::StrCat("decision not acknowledged: ",
                                                                     commit.message())));
    Respond(std::move(answers));
    return;
  }

  // Role bindings and nodes are followed before any command of the batch is
  // answered, so that an answer is never ahead of what the server checks.
  // Change i has ledger entry (and revision) from + 1 + i.
  const absl::Time now = decided.context.at;
  answers.batch.revision = store_->LedgerHead();
  answers.batch.from_revision =
      answers.batch.revision - static_cast<int64_t>(decided.changes.changes.size());
  // Explanations go out in order among the changes, each with the revision
  // of the change before it.
  std::vector<core::ChangeSet::Explanation>& explained = decided.changes.explained;
  size_t next_explained = 0;
  auto explain_until = [&](size_t changes_before, int64_t revision) {
    for (; next_explained < explained.size() && explained[next_explained].after <= changes_before;
         ++next_explained) {
      core::CapacityRequest& r = explained[next_explained].request;
      explanations_.Set(r);
      answers.batch.events.push_back(
          AllocationEvent{EventTypeOfState(r.state), std::move(r), now, revision, true});
    }
  };
  int64_t revision = answers.batch.from_revision;
  for (size_t i = 0; i < decided.changes.changes.size(); ++i) {
    explain_until(i, revision);
    core::Change& change = decided.changes.changes[i];
    ++revision;
    if (authz_ != nullptr) authz_->Apply(change);
    if (const auto* node = std::get_if<core::Node>(&change)) {
      nodes_->Put(*node);
    } else if (const auto* node_write = std::get_if<core::NodeWrite>(&change)) {
      if (node_write->event == core::NodeEvent::kRemove) {
        nodes_->Remove(node_write->node);
      } else if (node_write->event == core::NodeEvent::kUpdate) {
        nodes_->Put(node_write->node);
      }
    } else if (auto* write = std::get_if<core::RequestWrite>(&change)) {
      // The row holds the request's explanation as of this decision.
      explanations_.Erase(write->request.id);
      answers.batch.events.push_back(AllocationEvent{EventTypeOfState(write->request.state),
                                                     std::move(write->request), now, revision});
    }
  }
  explain_until(decided.changes.changes.size(), revision);
  answers.committed = true;
  answers.results = std::move(decided.results);
  Respond(std::move(answers));
}

void Arbiter::Respond(Answers answers) {
  absl::MutexLock lock(&answers_mu_);
  answers_.push_back(std::move(answers));
}

void Arbiter::RunResponder() {
  for (;;) {
    std::deque<Answers> ready;
    {
      absl::MutexLock lock(&answers_mu_);
      answers_mu_.Await(absl::Condition(
          +[](Arbiter* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->responder_stopping_ || !a->answers_.empty();
          },
          this));
      if (answers_.empty()) return;  // Stopping, and nothing left.
      ready.swap(answers_);
    }
    for (Answers& a : ready) {
      for (size_t i = 0; i < a.commands.size(); ++i) a.commands[i].done(a.results[i]);
      if (a.committed) hub_->Publish(std::move(a.batch));
    }
  }
}

bool Arbiter::Reload() {
  // A follower's periodic refresh replaces a valid state; it is not counted
  // as a reload and logs quietly.
  const bool refresh = state_valid_;
  const absl::Time load_started = clock_->TimeNow();
  absl::StatusOr<core::State> loaded = store_->LoadState(ScopeAt(load_started, options_));
  if (!loaded.ok()) {
    spdlog::warn("reloading state failed: {}", loaded.status().ToString());
    return false;
  }
  state_ = std::move(*loaded);
  state_valid_ = true;
  // Lease renewals are not written: every lease runs from the load.
  core::GraceLeases(state_, clock_->TimeNow());
  // The loaded state holds the stored explanations.
  explanations_.Clear();
  last_reload_ = clock_->TimeNow();
  IndexNodes();
  NoteLoad(load_started);
  // Heartbeats are not written either: each node's silence counts from now.
  core::GraceHeartbeats(state_, clock_->TimeNow());
  // A leader's streams continue only if nothing moved; a follower serves
  // none.
  absl::Status serving;
  {
    absl::MutexLock lock(&mu_);
    if (!leading_) serving = NotLeaderError(leader_address_);
  }
  hub_->Reset(store_->LedgerHead(), serving);
  if (refresh) {
    spdlog::debug("follower state refreshed: {} nodes", state_.nodes().size());
    return true;
  }
  {
    absl::MutexLock lock(&mu_);
    stats_.reloads++;
  }
  spdlog::info("state reloaded: {} nodes, {} live requests", state_.nodes().size(),
               state_.live_requests().size());
  return true;
}

void Arbiter::NoteLoad(absl::Time started) {
  ++loads_;
  // Every key loaded was committed before the load began.
  state_.NoteKeysStored(state_.ended_keys_put(), started);
}

void Arbiter::IndexNodes() {
  state_.set_approval_timeout(options_.approval_timeout);
  state_.set_idempotency_window(options_.idempotency_window);
  state_.set_ended_key_memory(options_.ended_key_memory);
  state_.set_node_heartbeat_timeout(options_.node_heartbeat_timeout);
  for (const core::Node& n : state_.nodes()) nodes_->Put(n);
  if (authz_ != nullptr) authz_->Reset(state_);
}

}  // namespace arbiter::app
