// EndedKeyLookup: which idempotency keys of new capacity requests an ended
// request of the idempotency window already used, asked of the store, so
// that the engine's memory keeps the live keys and those of its last
// minutes only (core::State::ended_key_memory), not a window of decisions.
//
// Lookups are batched: those that arrive while a query runs go together in
// the next one (one statement, many keys), on one thread of the lookup's
// own. A lookup is answered with the time it started, which the engine
// checks against its memory (core::RequestCapacity's
// `ended_keys_checked_at`).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

#include "core/clock.h"
#include "store/request_store.h"

namespace arbiter::app {

struct EndedKeyLookupOptions {
  // The idempotency window: ended requests older than this are not found.
  absl::Duration window = absl::Hours(24);
  // Whether to ask the store at all. False when the engine's memory covers
  // the window: every lookup is then answered at once, found nothing.
  bool enabled = true;
  // Most keys in one query. Default: 1024.
  size_t max_batch = 1024;
  // Most lookups waiting; more are refused RESOURCE_EXHAUSTED. Default: 65536.
  size_t max_waiting = 65536;
};

class EndedKeyLookup {
 public:
  struct Result {
    // The ended request that used the key within the window, if any.
    std::optional<store::EndedKey> found;
    // When the lookup started: nothing that ended before was missed.
    absl::Time checked_at;
  };
  // Called exactly once, on the lookup's thread (or on the caller's, when
  // refused or not enabled). It must not block. Errors: the store's
  // (UNAVAILABLE, INTERNAL), RESOURCE_EXHAUSTED when too many lookups
  // wait, UNAVAILABLE once stopping.
  using Done = std::function<void(absl::StatusOr<Result>)>;

  // `store` and `clock` must outlive the lookup. Starts its thread when
  // enabled.
  EndedKeyLookup(store::RequestReads* store, Clock* clock, EndedKeyLookupOptions options);
  // Stop(), if not stopped yet.
  ~EndedKeyLookup();

  // Looks up `key`.
  void Find(std::string key, Done done) ABSL_LOCKS_EXCLUDED(mu_);
  // Answers what waits (looked up), refuses what comes later, and joins
  // the thread. REQUIRES: not called from a Done.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Queries made and keys looked up, since start.
  int64_t queries() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t lookups() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiting {
    std::string key;
    Done done;
  };
  void Run();
  // Looks up `batch` in one query and answers each.
  void Answer(std::vector<Waiting> batch);

  store::RequestReads* const store_;
  Clock* const clock_;
  const EndedKeyLookupOptions options_;
  mutable absl::Mutex mu_;
  std::vector<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t queries_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t lookups_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace arbiter::app
