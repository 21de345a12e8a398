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
// their watch events handed to the hub (which only queues them; see
// app/watch_hub.h), in commit order. Each event carries its revision, the
// sequence number of its ledger entry; the hub is reset to the store's head
// whenever the state is (re)loaded, and told when this arbiter stops leading.
//
// Replicas (server/leader_election.h): an arbiter leads or follows. A
// follower answers every command UNAVAILABLE naming the leader
// (NotLeaderError) and reloads its state every `follower_refresh`, so that
// role bindings and nodes stay current for the reads it serves. Lead(epoch)
// fences the store to the new epoch and reloads the state before anything is
// decided; a commit refused as fenced makes it follow.
//
// Thread-safe: `Submit`, `Lead` and `Follow` may be called from any thread;
// callbacks run on the responder thread (or, for a refused command, the
// caller's) and must not block.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

#include "app/authz.h"
#include "app/explanations.h"
#include "app/node_directory.h"
#include "app/watch_hub.h"
#include "core/clock.h"
#include "core/state.h"
#include "store/store.h"

namespace arbiter::app {

// ArbiterOptions::ended_key_memory by default: a key lookup may be 20 s old.
inline constexpr absl::Duration kDefaultEndedKeyMemory = absl::Seconds(40);
// The least span of ended requests' keys a load reads (see ScopeAt in
// arbiter.cc): a lookup's greatest age plus two commits at the statement
// timeout (30 s), which a lookup begun before the load may have missed.
inline constexpr absl::Duration kEndedKeyLoadSpan = absl::Minutes(2);

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
  // How long an ended request's idempotency key is remembered (see
  // core::State::idempotency_window). Start-up loads the ended requests of
  // this window only. Default: 24 hours.
  absl::Duration idempotency_window = core::kDefaultIdempotencyWindow;
  // Sets how long ago a new request's key may have been looked up in the
  // store (app/ended_keys.h): half of this (core::State::
  // key_lookup_max_age); older, the request is refused UNAVAILABLE (retry).
  // The engine's memory keeps the live keys and each ended one until its
  // commit is that old; the other keys of the window are the store's.
  // Shorter keeps fewer keys (the rate times the commit's time and the
  // lookup's age) and refuses more requests that waited in the queue. A
  // load reads the keys of this span, at least kEndedKeyLoadSpan, or of
  // the window when it is shorter. At least the window: no lookups, every
  // key of the window in memory. Default: 40 s.
  absl::Duration ended_key_memory = kDefaultEndedKeyMemory;
  // A node whose agent heartbeats turns unreachable after this long without
  // one (core::State::node_heartbeat_timeout); zero: never.
  absl::Duration node_heartbeat_timeout = core::kDefaultNodeHeartbeatTimeout;
  // Called on the committer thread after each batch's commit (or failure)
  // with the batch's size and the commit's duration; must not block.
  // Default: none.
  std::function<void(size_t commands, absl::Duration took, bool ok)> on_commit;
  // Start following (replicas): commands are refused until Lead(). Default:
  // false, lead unfenced (a lone arbiter that owns its database).
  bool start_following = false;
  // How often a follower reloads its state. Default: 2 s.
  absl::Duration follower_refresh = absl::Seconds(2);
};

// What a follower answers a command: UNAVAILABLE, with "leader=host:port" in
// the message when the leader is known (clients resend there; see
// docs/operations.md) and the address as the payload kLeaderPayload.
inline constexpr char kLeaderPayload[] = "type.arbiter.dev/leader";
[[nodiscard]] absl::Status NotLeaderError(const std::string& leader_address);

struct ArbiterStats {
  int64_t batches = 0;
  int64_t commands = 0;
  int64_t commit_failures = 0;
  int64_t reloads = 0;
  int64_t queued = 0;     // Commands waiting now.
  int64_t in_flight = 0;  // Batches decided and not yet committed now.
  // Idempotency keys the engine holds: the live requests' and those of
  // ended requests a key lookup might still miss. As of the last batch.
  int64_t keys_in_memory = 0;
  bool leading = false;
  int64_t epoch = 0;  // The leader epoch of the last Lead(); 0: unfenced.
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
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Arbiter>> Create(
      store::Store* store, Clock* clock, WatchHub* hub, NodeDirectory* nodes,
      const ArbiterOptions& options, Authorizer* authz = nullptr);
  // Answers every waiting command UNAVAILABLE and joins the thread.
  ~Arbiter();

  // Queues a command made by `actor` (the principal, for the ledger).
  // `done` is always called exactly once.
  void Submit(Decide decide, Done done, std::string actor = "system") ABSL_LOCKS_EXCLUDED(mu_);

  ArbiterStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // The current explanations of queued requests, for reads from the store.
  const Explanations& explanations() const { return explanations_; }

  // Leads from now on, with the store fenced to `epoch` (> 0). The state is
  // reloaded before the next command is decided.
  void Lead(int64_t epoch) ABSL_LOCKS_EXCLUDED(mu_);
  // Follows the leader at `leader_address` ("" when unknown): commands
  // waiting and to come are refused with NotLeaderError. Batches already
  // decided still commit, or fail fenced. Idempotent.
  void Follow(const std::string& leader_address) ABSL_LOCKS_EXCLUDED(mu_);

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
    // The committed batch's revisions and events, for the watch hub.
    bool committed = false;
    CommittedBatch batch;
  };
  // A decided batch on its way to the database.
  struct Decided {
    std::deque<Command> commands;
    std::vector<absl::Status> results;
    core::ChangeSet changes;
    store::CommitContext context;
    uint64_t generation = 0;  // generation_ when it was decided.
    // The state's ended keys put once it was decided, and which load of
    // the state it was decided on (loads_).
    uint64_t ended_keys_put = 0;
    uint64_t load = 0;
  };
  // A committed batch's ended keys, for the state to forget in time
  // (core::State::NoteKeysStored).
  struct KeysStored {
    uint64_t load = 0;
    uint64_t keys_put = 0;
    absl::Time at;
  };

  Arbiter(store::Store* store, Clock* clock, WatchHub* hub, NodeDirectory* nodes,
          const ArbiterOptions& options, core::State state, Authorizer* authz);
  void Run();
  // Decides one batch and hands it to the committer. Arbiter thread.
  void DecideBatch(std::deque<Command>& batch);
  // Hands the state the commits of its ended keys since the last call.
  // Arbiter thread.
  void NoteKeysStored() ABSL_LOCKS_EXCLUDED(mu_);
  void RunCommitter();
  // Commits one batch and answers its commands. Committer thread.
  void CommitBatch(Decided& decided);
  // Queues `answers` for the responder. Committer thread.
  void Respond(Answers answers) ABSL_LOCKS_EXCLUDED(answers_mu_);
  void RunResponder();
  // Waits until no batch is in flight. Arbiter thread.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);
  // Fences the store to the new epoch and drops the state. Arbiter thread.
  void TakeOver(int64_t epoch);
  // Reloads a follower's state when `follower_refresh` has passed.
  void RefreshFollower();
  // Whether a timed event of the state is due. Arbiter thread only.
  bool TimerDue() const;
  // Replaces the state with the database's. Returns false while it cannot.
  bool Reload();
  // Counts a load of state_ begun at `started` and notes its keys stored.
  // Arbiter thread (or the constructor).
  void NoteLoad(absl::Time started);
  void IndexNodes();

  store::Store* const store_;
  Clock* const clock_;
  WatchHub* const hub_;
  NodeDirectory* const nodes_;
  Authorizer* const authz_;
  const ArbiterOptions options_;
  Explanations explanations_;  // Set by the committer, read by anyone.

  core::State state_;        // Arbiter thread only.
  bool state_valid_ = true;  // Arbiter thread only.
  absl::Time last_reload_;   // Arbiter thread only.
  uint64_t loads_ = 0;       // Arbiter thread only: loads of state_.

  mutable absl::Mutex mu_;
  std::deque<Command> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Decided batches, oldest first; `in_flight_` counts them and the one
  // being committed.
  std::deque<Decided> decided_ ABSL_GUARDED_BY(mu_);
  // Committed batches' ended keys, for the arbiter thread, oldest first.
  std::vector<KeysStored> keys_stored_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Set when a commit failed: batches still in flight are failed too, and
  // the arbiter reloads once they are drained.
  bool commit_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool committer_stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool leading_ ABSL_GUARDED_BY(mu_);
  // Set by Lead(), taken by the arbiter thread; 0: none pending.
  int64_t pending_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  // Counts changes of leadership; a fenced batch makes the arbiter follow
  // only if no change came since it was decided.
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string leader_address_ ABSL_GUARDED_BY(mu_);
  ArbiterStats stats_ ABSL_GUARDED_BY(mu_);
  // Batches committed (or failed) and not yet answered, oldest first.
  absl::Mutex answers_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::deque<Answers> answers_ ABSL_GUARDED_BY(answers_mu_);
  bool responder_stopping_ ABSL_GUARDED_BY(answers_mu_) = false;
  std::thread thread_;
  std::thread committer_;
  std::thread responder_;
};

}  // namespace arbiter::app
