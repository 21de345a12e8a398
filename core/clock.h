// The time seam. Components that wait or schedule take a `Clock&`; core
// functions take `absl::Time now` as a parameter and never read a clock.
// `RealClock` lives in server/ (the only place that reads the wall clock);
// tests use `tests/testing/simulated_clock.h`.
#pragma once

#include "absl/time/time.h"

namespace arbiter {

// Thread-safe implementations required.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time TimeNow() = 0;
  virtual void SleepFor(absl::Duration d) = 0;
  virtual void SleepUntil(absl::Time t) = 0;
};

}  // namespace arbiter
