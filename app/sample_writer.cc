#include "app/sample_writer.h"

#include <utility>

#include "absl/status/status.h"

namespace arbiter::app {

SampleWriter::SampleWriter(store::TelemetryStore* store, WorkerPool* workers,
                           size_t max_samples_per_commit, size_t max_waiting_samples,
                           absl::Duration gather)
    : store_(store),
      workers_(workers),
      max_samples_per_commit_(max_samples_per_commit),
      max_waiting_samples_(max_waiting_samples),
      gather_(gather) {}

void SampleWriter::Write(std::vector<core::GpuSample> samples, Done done) {
  bool refused = false;
  bool start_flush = false;
  {
    absl::MutexLock lock(&mu_);
    if (waiting_samples_ + samples.size() > max_waiting_samples_) {
      refused = true;
    } else {
      waiting_samples_ += samples.size();
      waiting_.push_back(Waiting{std::move(samples), std::move(done)});
      start_flush = !flushing_;  // Else the flush in progress takes it.
      flushing_ = true;
    }
  }
  if (refused) {
    return done(absl::ResourceExhaustedError("too many samples waiting to be stored; retry"),
                samples);
  }
  if (!start_flush) return;
  if (workers_->Submit([this] { Flush(); })) return;
  // The workers are stopping or full: answer everything that waits.
  std::deque<Waiting> unsent;
  {
    absl::MutexLock lock(&mu_);
    unsent.swap(waiting_);
    waiting_samples_ = 0;
    flushing_ = false;
  }
  for (Waiting& w : unsent) {
    w.done(absl::ResourceExhaustedError("server busy; retry"), w.samples);
  }
}

void SampleWriter::Flush() {
  for (;;) {
    std::vector<Waiting> group;
    size_t samples = 0;
    {
      absl::MutexLock lock(&mu_);
      if (waiting_.empty()) {
        flushing_ = false;
        return;
      }
      if (gather_ > absl::ZeroDuration()) {
        auto full = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return waiting_samples_ >= max_samples_per_commit_;
        };
        mu_.AwaitWithTimeout(absl::Condition(&full), gather_);
      }
      while (!waiting_.empty() && (group.empty() || samples + waiting_.front().samples.size() <=
                                                        max_samples_per_commit_)) {
        samples += waiting_.front().samples.size();
        group.push_back(std::move(waiting_.front()));
        waiting_.pop_front();
      }
      waiting_samples_ -= samples;
    }
    std::vector<std::vector<core::GpuSample>> batches;
    batches.reserve(group.size());
    for (Waiting& w : group) batches.push_back(std::move(w.samples));
    absl::StatusOr<std::vector<int64_t>> stored = store_->InsertSampleBatches(batches);
    for (size_t i = 0; i < group.size(); ++i) {
      if (!stored.ok()) {
        group[i].done(stored.status(), batches[i]);
      } else {
        group[i].done((*stored)[i], batches[i]);
      }
    }
  }
}

}  // namespace arbiter::app
