// The wall clock: the only place in Arbiter that reads the time.
#pragma once

#include <cstdint>

#include "core/clock.h"

namespace arbiter::app {

// Thread-safe.
// Measures elapsed time on the monotonic clock (for metrics, not
// decisions: decisions read time through Clock). Not thread-safe.
class Stopwatch {
 public:
  Stopwatch();
  absl::Duration Elapsed() const;

 private:
  int64_t start_ns_;
};

class RealClock final : public Clock {
 public:
  absl::Time TimeNow() override;
  void SleepFor(absl::Duration d) override;
  void SleepUntil(absl::Time t) override;
};

}  // namespace arbiter::app
