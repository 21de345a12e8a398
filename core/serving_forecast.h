// ServingForecast: a SERVING pool's demand profile, learnt from what its own
// classes held and asked for, one figure per quarter hour of the week (UTC),
// and the forecast it gives for the hours ahead (docs/pools.md, "Proactive
// reclaim").
//
// Learning. Every observation of quarter hour q in week w raises the peak of
// that occurrence. When q is next observed in a later week, the finished
// occurrence is folded into the learnt figure: a peak above it replaces it
// at once, a peak below it halves the gap. A rise is learnt in one week; a
// fall fades over a few.
//
// Forecast. For a quarter hour of the future, the learnt figure; for the
// current quarter hour, the larger of that and what was seen in it so far.
//
// Thread-compatible. Memory is fixed: 672 slots per pool.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace arbiter::core {

inline constexpr int kQuarterHoursPerWeek = 7 * 24 * 4;
// How often arbiterd observes serving demand and revisits its forecasts.
inline constexpr absl::Duration kDemandSampleEvery = absl::Minutes(1);

// The quarter hour of the week `t` falls in, Monday 00:00 UTC = 0.
int QuarterHourOfWeek(absl::Time t);
// The weeks since the Monday 00:00 UTC before 1970-01-01; each quarter
// hour of the week occurs once per week.
int64_t WeekOf(absl::Time t);
// The start of the quarter hour `t` falls in.
absl::Time QuarterHourStart(absl::Time t);

// One quarter hour of the week, as stored (store/ persists each one that an
// observation changed).
struct DemandSlot {
  int32_t slot = 0;          // 0..kQuarterHoursPerWeek-1.
  int64_t learnt_milli = 0;  // Folded over the finished occurrences.
  int64_t peak_milli = 0;    // Of the occurrence in `week`.
  int64_t week = -1;         // The occurrence last observed; -1: never.
};

// A change to one pool's profile, persisted with the batch (never ledgered:
// a forecast is state, and the reclaims it causes are the decisions).
struct DemandSlotWrite {
  std::string pool;
  DemandSlot slot;
};

class ServingForecast {
 public:
  // Notes that the pool's own classes held or asked for `milli` at `at`;
  // returns the slot as it now stands.
  const DemandSlot& Observe(absl::Time at, int64_t milli);
  // Restores a stored slot. REQUIRES: 0 <= slot.slot < kQuarterHoursPerWeek.
  void Load(const DemandSlot& slot) { slots_[slot.slot] = slot; }

  // The forecast demand of the quarter hour starting at or containing `t`,
  // as known at `now` (<= t).
  int64_t At(absl::Time t, absl::Time now) const;
  // The highest forecast over [from, to], and the start of the first
  // quarter hour that has it (InfiniteFuture when it is 0).
  struct Peak {
    int64_t milli = 0;
    absl::Time at = absl::InfiniteFuture();
  };
  Peak PeakWithin(absl::Time from, absl::Time to) const;
  // Whether any quarter hour has been observed.
  bool observed() const { return observed_; }
  const DemandSlot& slot(int q) const { return slots_[q]; }

 private:
  std::array<DemandSlot, kQuarterHoursPerWeek> slots_ = MakeSlots();
  bool observed_ = false;

  static std::array<DemandSlot, kQuarterHoursPerWeek> MakeSlots();
};

}  // namespace arbiter::core
