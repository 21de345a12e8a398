// WorkerPool: a fixed set of threads for blocking work (database reads), so
// that gRPC reactions never block. Tasks run in FIFO order.
//
// Thread-safe.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace arbiter::app {

class WorkerPool {
 public:
  // Starts `threads` workers; at most `max_queued` tasks may wait.
  WorkerPool(int threads, size_t max_queued);
  // Stop(), if not stopped yet.
  ~WorkerPool();

  // Refuses new tasks, runs the queued ones, then joins the workers. Later
  // Submits return false. REQUIRES: not called from a task, nor from two
  // threads at once.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);

  // Queues `task`. Returns false (and drops it) when the queue is full or the
  // pool is stopping; the caller answers RESOURCE_EXHAUSTED.
  [[nodiscard]] bool Submit(std::function<void()> task) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Run();

  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace arbiter::app
