// HeapReleaser: hands the heap's free pages back to the system while they
// are many, so that arbiterd's resident memory follows what it uses.
//
// tcmalloc keeps the pages a burst of allocations freed, for the next
// burst. arbiterd's bursts are the telemetry passes: at 100,000 GPUs a pass
// reads a minute of samples (600,000 rows) and frees them, and tcmalloc
// then held 583 MiB free beside 148 MiB in use (docs/performance.md,
// "Memory"). Every `every`, when more than `keep_free_bytes` are free, the
// releaser returns them all (MallocExtension::ReleaseFreeMemory: the pages
// stay mapped and are faulted in again on use).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace arbiter::server {

// The allocator's free pages still resident, in bytes; 0 where the
// allocator does not say (not tcmalloc).
int64_t HeapFreeBytes();

class HeapReleaser {
 public:
  // Starts the thread. REQUIRES: every > 0, keep_free_bytes >= 0.
  HeapReleaser(absl::Duration every, int64_t keep_free_bytes);
  // Stops and joins the thread.
  ~HeapReleaser();

  HeapReleaser(const HeapReleaser&) = delete;
  HeapReleaser& operator=(const HeapReleaser&) = delete;

  // One check now: releases the free pages when more than keep_free_bytes
  // are free. Returns the bytes released (0 when it left them).
  int64_t ReleaseIfOver() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run() ABSL_LOCKS_EXCLUDED(mu_);

  const absl::Duration every_;
  const int64_t keep_free_bytes_;
  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace arbiter::server
