#include "core/serving_forecast.h"

#include <algorithm>

namespace arbiter::core {
namespace {

constexpr int64_t kQuarterHourSeconds = 15 * 60;
constexpr int64_t kWeekSeconds = 7 * 24 * 3600;
// 1970-01-01 was a Thursday; the Monday before it is 1969-12-29.
constexpr int64_t kMondayBeforeEpoch = -3 * 24 * 3600;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

int64_t SecondsSinceMonday(absl::Time t) { return absl::ToUnixSeconds(t) - kMondayBeforeEpoch; }

// `s`'s learnt figure once its observed occurrence is folded in: a higher
// peak replaces it, a lower one halves the gap.
int64_t Folded(const DemandSlot& s) {
  if (s.week < 0) return s.learnt_milli;
  return s.peak_milli >= s.learnt_milli ? s.peak_milli
                                        : s.learnt_milli - (s.learnt_milli - s.peak_milli) / 2;
}

}  // namespace

int QuarterHourOfWeek(absl::Time t) {
  const int64_t s = SecondsSinceMonday(t);
  return static_cast<int>(
      FloorDiv(s - FloorDiv(s, kWeekSeconds) * kWeekSeconds, kQuarterHourSeconds));
}

int64_t WeekOf(absl::Time t) { return FloorDiv(SecondsSinceMonday(t), kWeekSeconds); }

absl::Time QuarterHourStart(absl::Time t) {
  const int64_t s = SecondsSinceMonday(t);
  return absl::FromUnixSeconds(FloorDiv(s, kQuarterHourSeconds) * kQuarterHourSeconds +
                               kMondayBeforeEpoch);
}

std::array<DemandSlot, kQuarterHoursPerWeek> ServingForecast::MakeSlots() {
  std::array<DemandSlot, kQuarterHoursPerWeek> slots;
  for (int q = 0; q < kQuarterHoursPerWeek; ++q) slots[q].slot = q;
  return slots;
}

const DemandSlot& ServingForecast::Observe(absl::Time at, int64_t milli) {
  DemandSlot& s = slots_[QuarterHourOfWeek(at)];
  const int64_t week = WeekOf(at);
  if (s.week != week) {
    s.learnt_milli = Folded(s);
    s.week = week;
    s.peak_milli = 0;
  }
  s.peak_milli = std::max(s.peak_milli, milli);
  observed_ = true;
  return s;
}

int64_t ServingForecast::At(absl::Time t, absl::Time now) const {
  const DemandSlot& s = slots_[QuarterHourOfWeek(t)];
  const bool current = QuarterHourStart(t) == QuarterHourStart(now) && s.week == WeekOf(now);
  if (current) return std::max(s.learnt_milli, s.peak_milli);
  return Folded(s);  // A finished occurrence not yet folded counts as if it were.
}

ServingForecast::Peak ServingForecast::PeakWithin(absl::Time from, absl::Time to) const {
  Peak peak;
  for (absl::Time t = QuarterHourStart(from); t <= to; t += absl::Seconds(kQuarterHourSeconds)) {
    const int64_t milli = At(t, from);
    if (milli > peak.milli) peak = {milli, std::max(t, from)};
  }
  return peak;
}

}  // namespace arbiter::core
