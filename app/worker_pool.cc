#include "app/worker_pool.h"

#include "app/thread_name.h"

namespace arbiter::app {

WorkerPool::WorkerPool(int threads, size_t max_queued) : max_queued_(max_queued) {
  for (int i = 0; i < threads; ++i)
    threads_.push_back(StartNamedThread("arb-reads", [this] { Run(); }));
}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkerPool::Submit(std::function<void()> task) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || tasks_.size() >= max_queued_) return false;
  tasks_.push_back(std::move(task));
  return true;
}

void WorkerPool::Run() {
  for (;;) {
    std::function<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](WorkerPool* p)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return p->stopping_ || !p->tasks_.empty(); },
          this));
      if (tasks_.empty()) return;  // Stopping and drained.
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

}  // namespace arbiter::app
