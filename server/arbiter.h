// Arbiter: the single writer. One thread owns the in-memory `core::State`;
// every mutating RPC is a command run on that thread. Commands are taken in
// batches; the changes of a whole batch are written in one PostgreSQL
// transaction (group commit), and only after COMMIT is any command of the
// batch answered and its events published.
//
// Deciding and committing overlap: while a committer thread writes batch N,
// the arbiter thread decides batch N+1 against the state N left in memory
// (at most `max_in_flight` batches decided and not yet committed). Batches
// commit in order. If a commit fails, that batch and every batch decided
// after it (they build on its state) are answered UNAVAILABLE (retry with
// the same idempotency key), and the state is reloaded from PostgreSQL
// before anything else is decided: no answer ever reflects a state that is
// not durable. Timed events (preemption deadlines, reservation starts) run as
// batches of their own when they come due, and first in any batch.
//
// Answering is a third thread's work (the responder): the committer hands
// it each committed batch and goes on to the next COMMIT, so that writing
// responses to sockets never delays a commit. Batches are answered, and
// their watch events published, in commit order.
//
// Thread-safe: `Submit` may be called from any thread; callbacks run on the
// responder thread and must not block.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "core/clock.h"
#include "core/state.h"
#include "server/authz.h"
#include "server/node_directory.h"
#include "server/watch_hub.h"
#include "store/store.h"

namespace arbiter::server {

struct ArbiterOptions {
  // Most commands decided and committed together. Default: 256.
  size_t max_batch = 256;
  // Most commands waiting; beyond it Submit answers RESOURCE_EXHAUSTED.
  // Default: 65536.
  size_t max_queued = 65536;
  // Most batches decided and not yet committed. Default: 2.
  size_t max_in_flight = 2;
  // Wait between attempts to reload state while the database is down.
  // Default: 500 ms.
  absl::Duration reload_backoff = absl::Milliseconds(500);
  // How long a request may wait for approval before it is denied.
  // Default: 24 hours.
  absl::Duration approval_timeout = absl::Hours(24);
  // Called on the committer thread after each batch's commit (or failure)
  // with the batch's size and the commit's duration; must not block.
  // Default: none.
  std::function<void(size_t commands, absl::Duration took, bool ok)> on_commit;
};

struct ArbiterStats {
  int64_t batches = 0;
  int64_t commands = 0;
  int64_t commit_failures = 0;
  int64_t reloads = 0;
  int64_t queued = 0;     // Commands waiting now.
  int64_t in_flight = 0;  // Batches decided and not yet committed now.
};

class Arbiter {
 public:
  // A command: decides against the state at `now`, appending durable changes
  // to `changes`. It must leave `state` untouched when it fails.
  using Decide =
      std::function<absl::Status(core::State& state, absl::Time now, core::ChangeSet& changes)>;
  // Called once, after the batch holding the command committed (OK or the
  // command's own error) or failed to commit (UNAVAILABLE).
  using Done = std::function<void(const absl::Status& status)>;

  // Loads the state from `store` and starts the arbiter thread.
  // Errors: those of Store::LoadState.
  // `authz` (may be null) follows the committed role bindings and teams.
  static absl::StatusOr<std::unique_ptr<Arbiter>> Create(store::Store* store, Clock* clock,
                                                         WatchHub* hub, NodeDirectory* nodes,
                                                         const ArbiterOptions& options,
                                                         Authorizer* authz = nullptr);
  // Answers every waiting command UNAVAILABLE and joins the thread.
  ~Arbiter();

  // Queues a command made by `actor` (the principal, for the ledger).
  // `done` is always called exactly once.
  void Submit(Decide decide, Done done, std::string actor = "system") ABSL_LOCKS_EXCLUDED(mu_);

  ArbiterStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Command {
    Decide decide;
    Done done;
    std::string actor;
  };
  // A committed (or failed) batch on its way to its callers.
  struct Answers {
    std::deque<Command> commands;
    std::vector<absl::Status> results;  // One per command.
    std::vector<AllocationEvent> events;
  };
  // A decided batch on its way to the database.
  struct Decided {
    std::deque<Command> commands;
    std::vector<absl::Status> results;
    core::ChangeSet changes;
    store::CommitContext context;
  };

  Arbiter(store::Store* store, Clock* clock, WatchHub* hub, NodeDirectory* nodes,
          const ArbiterOptions& options, core::State state, Authorizer* authz);
  void Run();
  // Decides one batch and hands it to the committer. Arbiter thread.
  void DecideBatch(std::deque<Command>& batch);
  void RunCommitter();
  // Commits one batch and answers its commands. Committer thread.
  void CommitBatch(Decided& decided);
  // Queues `answers` for the responder. Committer thread.
  void Respond(Answers answers) ABSL_LOCKS_EXCLUDED(answers_mu_);
  void RunResponder();
  // Waits until no batch is in flight. Arbiter thread.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether a timed event of the state is due. Arbiter thread only.
  bool TimerDue() const;
  // Replaces the state with the database's. Returns false while it cannot.
  bool Reload();
  void IndexNodes();

  store::Store* const store_;
  Clock* const clock_;
  WatchHub* const hub_;
  NodeDirectory* const nodes_;
  Authorizer* const authz_;
  const ArbiterOptions options_;

  core::State state_;        // Arbiter thread only.
  bool state_valid_ = true;  // Arbiter thread only.

  mutable absl::Mutex mu_;
  std::deque<Command> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Decided batches, oldest first; `in_flight_` counts them and the one
  // being committed.
  std::deque<Decided> decided_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when a commit failed: batches still in flight are failed too, and
  // the arbiter reloads once they are drained.
  bool commit_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool committer_stopping_ ABSL_GUARDED_BY(mu_) = false;
  ArbiterStats stats_ ABSL_GUARDED_BY(mu_);
  // Batches committed (or failed) and not yet answered, oldest first.
  absl::Mutex answers_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::deque<Answers> answers_ ABSL_GUARDED_BY(answers_mu_);
  bool responder_stopping_ ABSL_GUARDED_BY(answers_mu_) = false;
  std::thread thread_;
  std::thread committer_;
  std::thread responder_;
};

}  // namespace arbiter::server
