// RequestBook: the live capacity requests (queued, admitted, preempting,
// reserved, pending approval) and the indexes arbitration walks: the queue
// and the holders of each pool, the timers, the victims of each preemptor
// and the idempotency keys. A part of core::State, which charges admitted
// requests to the quota book and reservations' holds to the inventory.
// `RequestWrite` is the change type that records a request.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

#include "core/model.h"

namespace arbiter::core {

// A request row to write: inserted when new, otherwise its state, reason,
// placements and `updated_at` are updated.
struct RequestWrite {
  CapacityRequest request;
  bool is_new = false;
};

// How long an ended request's idempotency key is remembered (State::
// idempotency_window), as Stripe keeps its keys.
inline constexpr absl::Duration kDefaultIdempotencyWindow = absl::Hours(24);

struct IdempotencyEntry {
  int64_t request_id = 0;
  uint64_t body_hash = 0;
  bool ended = false;  // The request is final; its key is forgotten in time.
};

// What decides a queued request, as a key: everything arbitration reads of
// it (its resolved spec but the idempotency key and description, its
// approvals), and its id when it waits for victims or holds GPUs, so that
// such a request is a group of its own.
std::string AdmissionKey(const CapacityRequest& request);

class RequestBook {
 public:
  const CapacityRequest* FindLive(int64_t id) const;
  const IdempotencyEntry* FindIdempotencyKey(const std::string& key) const;
  const absl::flat_hash_map<int64_t, CapacityRequest>& live() const { return live_; }
  // Queued request ids of `pool`, oldest first.
  const std::set<int64_t>& QueuedIn(const std::string& pool) const;
  // The queued requests of `pool` grouped by what decides them (see
  // AdmissionKey): from the same state at the same time, every request of
  // a group gets the same decision. Keys are opaque.
  const absl::flat_hash_map<std::string, std::set<int64_t>>& QueueGroupsIn(
      const std::string& pool) const;
  // Queued request ids of `pool` that wait for victims to vacate (reason
  // kReasonPreempting), oldest first.
  const std::set<int64_t>& WaitingIn(const std::string& pool) const;
  // Ids of the requests that hold capacity (admitted or preempting) in
  // `pool`, oldest first.
  const std::set<int64_t>& HoldingIn(const std::string& pool) const;
  // The backfill head of `pool`'s queue (CapacityRequest::planned_start);
  // 0 when it has none.
  int64_t HeadOf(const std::string& pool) const;
  // Ids of the PREEMPTING requests that vacate for `preemptor`.
  const std::set<int64_t>& VictimsOf(int64_t preemptor) const;
  // Timed events, earliest first: preemption deadlines, reservation starts
  // and approval deadlines, as (time, request id).
  const std::set<std::pair<absl::Time, int64_t>>& timers() const { return timers_; }

  // Identifier the next new request will get; ids are dense from 1.
  int64_t next_id() const { return next_id_; }
  int64_t TakeId() { return next_id_++; }
  // Makes ids from `id` + 1 on free, for requests loaded from the store.
  void SeeId(int64_t id) {
    if (id >= next_id_) next_id_ = id + 1;
  }

  // Idempotency keys remembered: those of the live requests and of the
  // ended ones not yet forgotten.
  size_t remembered_keys() const { return keys_.by_key.size(); }
  // Forgets the keys of the requests that ended (by their `updated_at`)
  // before `cutoff`. Amortized O(1) per key forgotten: ended keys are kept
  // in the order they ended.
  void ForgetKeysEndedBefore(absl::Time cutoff);
  // How many ended keys have been put in all: a position in the order they
  // ended, which ForgetFirstEndedKeys takes.
  uint64_t ended_keys_put() const { return keys_.put; }
  // Records that the ended keys put before position `keys_put` (an
  // ended_keys_put() of the past) are in the store since `stored_at`.
  // Marks are noted in the order of their positions.
  void NoteKeysStored(uint64_t keys_put, absl::Time stored_at);
  // Whether any mark was noted since this book was made.
  bool notes_stores() const { return keys_.notes_stores; }
  // Forgets the keys of the marks stored before `cutoff`, however recently
  // their requests ended.
  void ForgetKeysStoredBefore(absl::Time cutoff);

  // A copy that holds only the live requests of `pool`, with their queue,
  // holder and timer indexes and the victims of those that preempt, and no
  // idempotency keys (as a copy of the whole book). Victims preempted by no
  // request (drains, node failures: preemptor 0) are not kept.
  // O(live requests) to find them, O(those of `pool`) to copy.
  RequestBook CopyOfPool(const std::string& pool) const;

  // Stores a new or changed request and records its idempotency key; a
  // final one leaves the live set, and its key is remembered until
  // ForgetKeysEndedBefore passes its `updated_at`. The caller undoes what the copy it
  // replaces charged elsewhere before calling (see State::PutRequest).
  void Put(const CapacityRequest& request);
  // Clears the holds of live request `id` (and its plan, when it is a
  // backfill head); nothing when it is not live.
  void ClearHolds(int64_t id);

 private:
  // Removes `old` from the queue, holder, timer and victim indexes.
  void Unindex(const CapacityRequest& old);
  void Index(const CapacityRequest& request);
  // REQUIRES: keys_.ended is not empty.
  void ForgetFirstEndedKey();
  // Forgets the keys put before position `count`.
  void ForgetFirstEndedKeys(uint64_t count);

  absl::flat_hash_map<int64_t, CapacityRequest> live_;
  absl::flat_hash_map<std::string, std::set<int64_t>> queued_;
  // Pool -> admission key -> queued ids.
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, std::set<int64_t>>>
      queue_groups_;
  absl::flat_hash_map<std::string, std::set<int64_t>> waiting_;
  absl::flat_hash_map<std::string, std::set<int64_t>> holding_;
  absl::flat_hash_map<std::string, int64_t> heads_;  // Pool -> backfill head.
  std::set<std::pair<absl::Time, int64_t>> timers_;
  absl::flat_hash_map<int64_t, std::set<int64_t>> victims_;  // Preemptor -> victims.
  // The idempotency keys, which a copy (State::Clone, for what-if
  // planning, which never takes a new request) starts without: copying
  // a day of keys for every trial placement would cost more than the trial.
  struct Keys {
    Keys() = default;
    Keys(const Keys&) {}
    Keys& operator=(const Keys&) {
      by_key.clear();
      ended.clear();
      stored.clear();
      put = forgotten = 0;
      notes_stores = false;
      return *this;
    }
    Keys(Keys&&) = default;
    Keys& operator=(Keys&&) = default;

    absl::flat_hash_map<std::string, IdempotencyEntry> by_key;
    struct Ended {
      absl::Time at;
      int64_t request_id;
      std::string key;
    };
    // The keys of ended requests, in the order they were put: by end
    // time, but for a clock step back (such a key waits behind later ones).
    std::deque<Ended> ended;
    uint64_t put = 0;        // Ended keys ever pushed onto `ended`.
    uint64_t forgotten = 0;  // Ended keys ever popped from it.
    struct Stored {
      uint64_t keys_put;
      absl::Time at;
    };
    std::deque<Stored> stored;  // NoteKeysStored's marks, not yet applied.
    bool notes_stores = false;
  };
  Keys keys_;
  int64_t next_id_ = 1;
};

}  // namespace arbiter::core
