#include "app/real_clock.h"

#include <chrono>

#include "absl/time/clock.h"

namespace arbiter::app {

absl::Time RealClock::TimeNow() { return absl::Now(); }
void RealClock::SleepFor(absl::Duration d) { absl::SleepFor(d); }
void RealClock::SleepUntil(absl::Time t) { absl::SleepFor(t - absl::Now()); }

namespace {
int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

Stopwatch::Stopwatch() : start_ns_(MonotonicNanos()) {}

absl::Duration Stopwatch::Elapsed() const {
  return absl::Nanoseconds(MonotonicNanos() - start_ns_);
}

}  // namespace arbiter::app
