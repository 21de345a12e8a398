// A Clock for tests: time moves only when the test advances it.
#pragma once

#include "absl/synchronization/mutex.h"

#include "core/clock.h"

namespace arbiter::testing {

// Thread-safe.
class SimulatedClock final : public Clock {
 public:
  explicit SimulatedClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : now_(start) {}
  absl::Time TimeNow() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void SleepFor(absl::Duration d) override { Advance(d); }
  void SleepUntil(absl::Time t) override {
    absl::MutexLock lock(&mu_);
    if (t > now_) now_ = t;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace arbiter::testing
