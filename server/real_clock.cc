#include "server/real_clock.h"

#include "absl/time/clock.h"

namespace arbiter::server {

absl::Time RealClock::TimeNow() { return absl::Now(); }
void RealClock::SleepFor(absl::Duration d) { absl::SleepFor(d); }
void RealClock::SleepUntil(absl::Time t) { absl::SleepFor(t - absl::Now()); }

}  // namespace arbiter::server
