// StateStore: the arbitration state as a whole. The arbiter thread loads it
// at start-up (and after a failed commit) and makes every decision durable
// through Commit, each change with its ledger entry.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "core/state.h"
#include "ledger/entries.h"

namespace arbiter::store {

// Who made a batch of changes, and when: each change gets a ledger entry.
using CommitContext = ledger::CommitContext;

// What LoadState reads of the history beyond the live state. The defaults
// read all of it (tools and tests); the arbiter reads what its idempotency
// window and the budget of the current month need, so that start-up costs
// what is live, not what ever happened.
struct LoadScope {
  // The idempotency keys of requests that ended (`updated_at`) at or after
  // this time are remembered.
  absl::Time keys_ended_since = absl::InfinitePast();
  // What ended requests cost is summed per team and month of admission
  // (UTC), for the budgets, for the months that start at or after this
  // time (a month start, or the infinite past).
  absl::Time spend_since = absl::InfinitePast();
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Loads the arbitration state: catalog, inventory, governance, live
  // requests with their placements charged, and of the ended requests what
  // `scope` asks for (core::State::LoadRequest, AddSpend).
  // FAILED_PRECONDITION if the stored data breaks a core invariant.
  [[nodiscard]] virtual absl::StatusOr<core::State> LoadState(const LoadScope& scope) = 0;
  [[nodiscard]] absl::StatusOr<core::State> LoadState() { return LoadState(LoadScope{}); }

  // Makes `changes` durable in one transaction, each with its ledger entry
  // (chained to the previous one; see ledger/entries.h). Returns OK only
  // after COMMIT. On any error nothing of `changes` is written (or, for an
  // UNAVAILABLE during COMMIT, the outcome is unknown): the caller must
  // reload state. FAILED_PRECONDITION (nothing written) when the store is
  // fenced to a leader epoch that is no longer current: another replica has
  // taken over. ALREADY_EXISTS (nothing written) when a change inserts what
  // is stored already (a cluster, pool, node, team, price, role binding,
  // authority rule, request, incident, charge or closed period with the same
  // key). REQUIRES: one writer at a time (the arbiter thread).
  [[nodiscard]] virtual absl::Status Commit(const core::ChangeSet& changes,
                                            const CommitContext& context) = 0;
  [[nodiscard]] absl::Status Commit(const core::ChangeSet& changes) {
    return Commit(changes, CommitContext());
  }

  // Fences every later Commit to leader epoch `epoch` (migration 0021): a
  // Commit then writes only while `epoch` is the current one. 0, the
  // default, leaves Commit unfenced, for tools and tests that own the
  // database alone. REQUIRES: no Commit in progress (the arbiter thread).
  virtual void SetFencingEpoch(int64_t epoch) = 0;

  // The sequence number of the ledger's head as of the last LoadState or
  // successful Commit: the revision the loaded or committed state reflects.
  // A Commit of n changes advances it by n (one entry per change, in order).
  // REQUIRES: no Commit in progress on another thread.
  [[nodiscard]] virtual int64_t LedgerHead() = 0;
};

}  // namespace arbiter::store
