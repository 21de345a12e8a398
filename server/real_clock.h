// The wall clock: the only place in Arbiter that reads the time.
#pragma once

#include "core/clock.h"

namespace arbiter::server {

// Thread-safe.
class RealClock final : public Clock {
 public:
  absl::Time TimeNow() override;
  void SleepFor(absl::Duration d) override;
  void SleepUntil(absl::Time t) override;
};

}  // namespace arbiter::server
