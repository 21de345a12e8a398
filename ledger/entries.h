// The ledger entries of durable changes: what each kind of core::Change
// records (action, subject, canonical payload), how a batch of changes is
// chained onto the head of the ledger, and when a checkpoint is signed.
// Every store builds its entries here, so that the bytes and hashes do not
// depend on where they are kept.
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

#include "core/state.h"
#include "ledger/chain.h"

namespace arbiter::ledger {

// Who made a batch of changes, and when: each change gets a ledger entry.
struct CommitContext {
  absl::Time at = absl::UnixEpoch();
  // actors[i] made changes.changes[i]; "system" past its end.
  std::vector<std::string> actors;
};

// A signed checkpoint of the chain at `seq`.
struct Checkpoint {
  int64_t seq = 0;
  std::string hash;
  std::string signature;  // Hex Ed25519 of CheckpointMessage(seq, hash).
  absl::Time at;          // Microsecond precision.
};

// When checkpoints are signed.
struct CheckpointPolicy {
  // Ed25519 private key (PEM); empty: no checkpoints are made.
  std::string key_pem;
  // A checkpoint is due once this many entries were added since the last
  // (values below 1 count as 1).
  int64_t every = 1000;
};

// Action ("request.admitted", "role.grant", ...), subject ("request/42") and
// payload of `change`; seq, time, actor and hashes are left unset.
Entry EntryFor(const core::Change& change);

// The request as its "request.<state>" entry recorded it: state, reason,
// placements, approvals, approvers, cost and preemption from `entry`, over
// `stored` (the request's row now) for what never changes (id, spec,
// creation). A stored placement on the entry's node and GPUs is kept whole;
// otherwise the entry's node and GPUs are all it can say. INVALID_ARGUMENT
// when `entry` is not an entry of `stored` or its payload does not parse.
absl::StatusOr<core::CapacityRequest> RequestAsOf(const core::CapacityRequest& stored,
                                                  const Entry& entry);

// The entries of `changes`, in order, chained onto the head (`head_seq`,
// `head_hash`); genesis is (0, kGenesisHash). Entry i gets seq head_seq+1+i,
// `context.at` truncated to microseconds, actor context.actors[i] (or
// "system" past its end), the previous entry's hash and its own HashOf.
std::vector<Entry> ChainEntries(int64_t head_seq, absl::string_view head_hash,
                                const core::ChangeSet& changes, const CommitContext& context);

// The checkpoint due at the head (`head_seq`, `head_hash`) when the last one
// was at `last_checkpoint_seq` (0: none), signed with `policy.key_pem` and
// dated `at` (truncated to microseconds); nullopt when none is due or no key
// is set. INVALID_ARGUMENT when the key is not an Ed25519 private key.
absl::StatusOr<std::optional<Checkpoint>> MaybeCheckpoint(const CheckpointPolicy& policy,
                                                          int64_t last_checkpoint_seq,
                                                          int64_t head_seq,
                                                          absl::string_view head_hash,
                                                          absl::Time at);

}  // namespace arbiter::ledger
