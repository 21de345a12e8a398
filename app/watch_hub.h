// WatchHub: fans committed allocation events out to `WatchAllocations`
// streams, off the commit path.
//
// Revisions. Every committed change has a revision, the sequence number of
// its ledger entry; a commit batch's revision is its last entry's. An event
// carries the revision of its request write. Store reads that answer
// "list" (store::RequestPage) carry the revision they reflect, so a client
// that lists and then watches from the list's revision misses nothing and
// repeats nothing.
//
// The path of an event. The arbiter's responder hands each committed batch
// to `Publish`, which only queues it. The hub's fan-out thread encodes each
// event once (`WatchOptions::encode`, the edge's wire bytes), keeps it in a
// bounded window of recent events, finds the streams whose filters it
// matches through indexes (request, node, cluster, team, pool; streams with
// none of those are checked for every event), and hands each stream the
// batch's matching events together. Encoded events are immutable and
// shared by the window and every stream.
//
// Resumption. A stream may start after a revision. Events after it that
// are still in the window are replayed from memory; older ones are read
// from the store's ledger by the hub's catch-up thread, page by page, at
// the pace the stream drains: each carries the request as its ledger entry
// recorded it (state, reason, placements, approvals, cost) over the stored
// row for what never changes (the spec). Then the stream follows live. A
// revision more than `WatchOptions::replay_limit` behind the head is
// refused OUT_OF_RANGE: the client lists again; so is one ahead of the
// last committed revision.
//
// Unfiltered streams that follow live share one WatchBatch per commit
// batch: their cost per batch does not grow with the batch's events.
//
// Leadership. Only a leader's hub serves (`Reset`); a follower refuses new
// streams with the status it was reset with, and a leader that steps down or
// reloads its state ends its streams UNAVAILABLE so that they resume from
// their last revision, at the leader.
//
// Thread-safe. Subscriber callbacks run on the hub's threads (or the one
// calling Reset or Stop) with the hub's lock held, one at a time, in revision order per stream;
// they must not block and must not call back into the hub (except `AddQueuedBytes`).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "app/node_directory.h"
#include "core/clock.h"
#include "core/model.h"
#include "store/store.h"

namespace arbiter::app {

enum class EventType {
  kAdmitted,
  kQueued,
  kDenied,
  kReleased,
  kCancelled,
  kPreempting,  // A preemption notice: vacate by request.preempt_deadline.
  kPreempted,
  kReserved,
  kPendingApproval,
};

// The watch event a request state stands for (kAdmitted for live states
// without an event of their own).
EventType EventTypeOfState(core::RequestState state);

struct AllocationEvent {
  EventType type = EventType::kAdmitted;
  core::CapacityRequest request;
  absl::Time committed_at;
  int64_t revision = 0;  // The sequence number of its ledger entry.
  // A queued request's new explanation (core::ChangeSet::explained): not
  // ledgered, so it carries the revision of the change before it, is
  // delivered to live streams only and is never replayed.
  bool explanation = false;
};

// A committed event as the hub keeps it: immutable, shared (hence
// shared_ptr) by the window and by every stream that has it queued.
struct WatchEvent {
  AllocationEvent event;
  // `WatchOptions::encode`'s bytes; empty without an encoder.
  std::string encoded;
  // "cluster/node" of each distinct node the request is placed on, and each
  // distinct cluster.
  std::vector<std::string> nodes;
  std::vector<std::string> clusters;
};
using WatchEventPtr = std::shared_ptr<const WatchEvent>;

// Events handed to a stream together: a commit batch's matching events, or
// a page of a replay. Immutable and shared: every unfiltered stream gets the
// same one for a commit batch.
struct WatchBatch {
  std::vector<WatchEventPtr> events;
  // The events' `encoded` bytes, concatenated: the body of one batched
  // message, written as it is. Empty without an encoder.
  std::string encoded;
};
using WatchBatchPtr = std::shared_ptr<const WatchBatch>;
WatchBatchPtr MakeWatchBatch(std::vector<WatchEventPtr> events);

// What a stream wants; empty fields match everything. Fields combine with
// AND; `cluster` and `node` match when any placement of the request does.
struct WatchFilter {
  std::string team;
  std::string pool;
  std::string cluster;
  std::string node;  // REQUIRES: `cluster` set with it.
  int64_t request_id = 0;
  // Bit (1 << EventType) per type wanted; 0: every type.
  uint32_t types = 0;

  bool Matches(const WatchEvent& e) const;
};

// One committed batch on its way to the hub: the ledger head before and
// after it, and its request events (each with its revision).
struct CommittedBatch {
  int64_t from_revision = 0;
  int64_t revision = 0;
  std::vector<AllocationEvent> events;
};

class WatchSubscriber {
 public:
  virtual ~WatchSubscriber() = default;
  // Matching events, in revision order; several when one commit (or one
  // page of a replay) holds several. Never empty.
  virtual void Deliver(const WatchBatchPtr& batch) = 0;
  // Nothing was delivered for `WatchOptions::bookmark_every`: the stream has
  // seen every matching event up to `revision`.
  virtual void Bookmark(int64_t revision) = 0;
  // The hub ends the stream with `status`; nothing is called after this.
  virtual void End(const absl::Status& status) = 0;
  // Events delivered and not yet written; a catching-up stream is fed only
  // while this is small.
  virtual size_t Backlog() const = 0;
};

struct WatchOptions {
  // Encodes an event once for every stream (server/ sets the wire bytes).
  // Default: none (events carry no bytes; tests of app/).
  std::function<std::string(const AllocationEvent&, const NodeDirectory&)> encode;
  // Recent events kept in memory for resumption. Default: 16384.
  size_t window_events = 16384;
  // How far behind the head (in revisions) a start revision may be; older
  // ones are refused OUT_OF_RANGE. Default: 1,000,000.
  int64_t replay_limit = 1'000'000;
  // A stream with nothing delivered for this long gets a bookmark. A new
  // stream's first one comes at a point of the period fixed by its id, so
  // that streams opened together (agents reconnecting after a failover) do
  // not all get theirs in the same tick. Default: 60 s, the cadence of the
  // Kubernetes API server's watch bookmarks: 10,000 idle streams then cost
  // 167 writes/s.
  absl::Duration bookmark_every = absl::Seconds(60);
  // A batched stream (WatchAllocationsRequest.batched) starts a write at
  // most once per this: the events committed meanwhile go out together in
  // the next message, so that an unfiltered watcher costs a write per
  // period rather than per commit (bench/watch-fanout: 200 unfiltered
  // streams cost 1.44x arbiterd CPU per decision at 50 ms, 2.17x without).
  // A write after a quiet period starts at once. Zero: write as soon as the
  // last write is done. Default: 50 ms.
  absl::Duration batch_every = absl::Milliseconds(50);
  // Most streams in all, and per caller (principal); beyond either,
  // Subscribe answers RESOURCE_EXHAUSTED. Default: 20,000 and 12,000.
  int64_t max_streams = 20'000;
  int64_t max_streams_per_caller = 12'000;
};

struct WatchStats {
  int64_t streams = 0;       // Subscribed now.
  int64_t catching_up = 0;   // Of them, replaying before they follow live.
  int64_t queued_bytes = 0;  // Encoded bytes delivered and not yet written.
  int64_t events = 0;        // Events published since start.
  int64_t deliveries = 0;    // Event deliveries to streams since start.
  int64_t bookmarks = 0;     // Bookmarks sent since start.
  int64_t cutoffs = 0;       // Streams ended for falling behind.
  int64_t refused = 0;       // Subscriptions refused for the limits.
  int64_t head = 0;          // The revision published last.
  int64_t window_start = 0;  // Events after it are in memory.
};

class WatchHub {
 public:
  // `nodes` and `clock` must outlive the hub. The hub refuses streams until
  // the first `Reset` with OK.
  WatchHub(const WatchOptions& options, const NodeDirectory* nodes, Clock* clock);

  const WatchOptions& options() const { return options_; }
  // Stop(), if not stopped yet.
  ~WatchHub();

  // Starts the fan-out and catch-up threads; catch-up reads `store`, which
  // must outlive the hub (or Stop). REQUIRES: called once.
  void Start(store::Store* store) ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);
  // Ends every stream (UNAVAILABLE), publishes what is queued no more and
  // joins the threads. Idempotent.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);

  // Queues a committed batch; returns at once (the commit path).
  void Publish(CommittedBatch batch) ABSL_LOCKS_EXCLUDED(queue_mu_);
  // The store's head is `head` (-1: unchanged; the engine calls this after
  // each load of its state) and the hub serves when `serving` is OK, else
  // refuses new streams with it. Streams end UNAVAILABLE (resume from the
  // last revision) when the head moved without the hub seeing the batches,
  // and with `serving` when it is not OK. Batches queued before it and at or
  // below `head` are dropped when they come. Callbacks run on the caller's
  // thread.
  void Reset(int64_t head, absl::Status serving) ABSL_LOCKS_EXCLUDED(mu_);

  // Subscribes `subscriber` (made by `caller`) with `filter`, to the events
  // after `start_revision` (0: from now on). Returns the subscription's id.
  // INVALID_ARGUMENT for a negative start revision or a node without a
  // cluster; OUT_OF_RANGE for a start revision more than `replay_limit`
  // behind the head, or ahead of the last committed revision (one that is
  // committed and not yet published is accepted: its events follow);
  // RESOURCE_EXHAUSTED beyond the stream
  // limits; the status of the last Reset while the hub does not serve.
  [[nodiscard]] absl::StatusOr<int64_t> Subscribe(const std::string& caller,
                                                  const WatchFilter& filter, int64_t start_revision,
                                                  WatchSubscriber* subscriber)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After this returns, no callback of the subscriber runs or will run.
  void Unsubscribe(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Streams report the bytes they hold queued (+) and write (-).
  void AddQueuedBytes(int64_t delta) { queued_bytes_.fetch_add(delta); }
  // A stream ended itself for falling behind.
  void CountCutoff() { cutoffs_.fetch_add(1); }

  WatchStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Subscription {
    WatchSubscriber* subscriber = nullptr;
    WatchFilter filter;
    std::string caller;
    // Events at or below it are not delivered: the start revision, then
    // (while catching up) the last revision replayed.
    int64_t after = 0;
    bool live = false;
    absl::Time last_sent;
  };

  void RunFanOut();
  void RunCatchUp();
  // Whether `revision` is committed: published to the hub, or in the
  // store's ledger. Reads the store when the hub has not seen it yet.
  bool Committed(int64_t revision) ABSL_LOCKS_EXCLUDED(mu_, queue_mu_);
  // Encodes and indexes `batch`'s events. No lock.
  std::vector<WatchEventPtr> Prepare(std::vector<AllocationEvent> events) const;
  WatchEventPtr PrepareOne(AllocationEvent event) const;
  void ApplyBatch(const CommittedBatch& batch, std::vector<WatchEventPtr> events)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyReset(int64_t head, const absl::Status& serving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendBookmarks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends every stream with `status` and forgets the window.
  void EndAllLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(int64_t id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void IndexLocked(int64_t id, const WatchFilter& filter, bool add)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One step of a catch-up: returns true when `id` needs more steps.
  bool CatchUpStep(int64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  // The request events of the ledger after `after` (one page), from the
  // store; `*last` is the last entry read (after, when none).
  absl::StatusOr<std::vector<WatchEventPtr>> ReadStored(int64_t after, int64_t* last) const;

  const WatchOptions options_;
  const NodeDirectory* const nodes_;
  Clock* const clock_;
  store::Store* store_ = nullptr;

  std::atomic<int64_t> queued_bytes_{0};
  std::atomic<int64_t> cutoffs_{0};

  absl::Mutex queue_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::deque<CommittedBatch> queue_ ABSL_GUARDED_BY(queue_mu_);
  int64_t published_ ABSL_GUARDED_BY(queue_mu_) = 0;  // The last batch's revision.
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;

  mutable absl::Mutex mu_;
  absl::Status serving_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("this replica is not serving watches yet; retry");
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  int64_t head_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t window_start_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<WatchEventPtr> window_ ABSL_GUARDED_BY(mu_);
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<int64_t, Subscription> subs_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, int64_t> per_caller_ ABSL_GUARDED_BY(mu_);
  // Live streams by the most selective filter they set.
  absl::flat_hash_map<int64_t, absl::flat_hash_set<int64_t>> by_request_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<int64_t>> by_node_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<int64_t>> by_cluster_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<int64_t>> by_team_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::flat_hash_set<int64_t>> by_pool_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<int64_t> unfiltered_ ABSL_GUARDED_BY(mu_);
  // Streams waiting for a catch-up step, in turn.
  std::deque<int64_t> catching_up_ ABSL_GUARDED_BY(mu_);
  absl::Time last_bookmarks_ ABSL_GUARDED_BY(mu_);
  WatchStats stats_ ABSL_GUARDED_BY(mu_);

  std::thread fan_out_;
  std::thread catch_up_;
};

}  // namespace arbiter::app
