// SampleWriter: stores agents' sample batches with group commit. A batch
// that arrives while a transaction is in flight waits, and every batch
// waiting then goes in the next transaction together
// (store::TelemetryStore::InsertSampleBatches): however many agents send,
// one transaction is in flight at a time, and its cost is shared by all the
// batches in it. Each batch still learns how many of its own samples were
// new. The transactions run on the read workers, one at a time.
//
// Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

#include "app/worker_pool.h"
#include "core/telemetry.h"
#include "store/telemetry_store.h"

namespace arbiter::app {

class SampleWriter {
 public:
  // Called once per batch, on a read worker, after its transaction: how
  // many of `samples` (the batch as written) were new, or the transaction's
  // error (every batch of it gets the same one; none was stored). It must
  // not block.
  using Done = std::function<void(absl::StatusOr<int64_t> stored,
                                  absl::Span<const core::GpuSample> samples)>;

  // At most `max_samples_per_commit` samples go in one transaction (a batch
  // larger than that goes alone); at most `max_waiting_samples` wait.
  // `gather`: how long a transaction waits, once a worker has taken it up,
  // for more batches to join it (unless max_samples_per_commit already
  // wait). Agents send a batch a minute, so a fraction of a second
  // costs them nothing, and a busy fleet's batches share far fewer
  // transactions: each costs PostgreSQL a commit, its WAL flush and a
  // handful of round trips whatever its size. The wait holds the read
  // worker the transaction runs on. Zero: write as soon as a worker is free.
  // REQUIRES: `store` and `workers` outlive the writer, and the workers are
  // stopped (running what was queued) before it is destroyed.
  static constexpr size_t kMaxSamplesPerCommit = 20000;
  static constexpr size_t kMaxWaitingSamples = 1000000;
  SampleWriter(store::TelemetryStore* store, WorkerPool* workers,
               size_t max_samples_per_commit = kMaxSamplesPerCommit,
               size_t max_waiting_samples = kMaxWaitingSamples,
               absl::Duration gather = absl::ZeroDuration());

  // Queues `samples` for the next transaction. RESOURCE_EXHAUSTED (through
  // `done`, at once) when too many samples wait or the workers refuse work.
  void Write(std::vector<core::GpuSample> samples, Done done) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Waiting {
    std::vector<core::GpuSample> samples;
    Done done;
  };

  // Writes what waits, a transaction at a time, until nothing does.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);

  store::TelemetryStore* const store_;
  WorkerPool* const workers_;
  const size_t max_samples_per_commit_;
  const size_t max_waiting_samples_;
  const absl::Duration gather_;
  absl::Mutex mu_;
  std::deque<Waiting> waiting_ ABSL_GUARDED_BY(mu_);
  size_t waiting_samples_ ABSL_GUARDED_BY(mu_) = 0;
  bool flushing_ ABSL_GUARDED_BY(mu_) = false;  // A Flush is queued or running.
};

}  // namespace arbiter::app
