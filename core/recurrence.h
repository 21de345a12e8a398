// Recurring windows of local time, such as "weekdays 01:00-06:00
// Europe/Berlin", for reservations and lending policies: the value type, its
// text form, its validation, and exact queries (does a window contain an
// instant, when does it next occur, which intervals does it cover).
//
// Local times are converted with abseil's time zones, which read the IANA
// database under /usr/share/zoneinfo (or $TZDIR) the first time a zone is
// named and keep it for the life of the process (a name that fails to load is
// remembered too, so a server should not feed it unbounded distinct names).
// That read is the one piece of I/O in this file; the rest is pure, like the
// rest of core.
//
// Semantics:
//   - An occurrence starts on each listed weekday, in the window's time zone,
//     at `start_minute` local time and lasts until `end_minute` local time of
//     the same day; when `end_minute <= start_minute` it ends on the next day,
//     so "fri 22:00-02:00" runs from Friday 22:00 to Saturday 02:00 and "mon
//     00:00-24:00" is all of Monday. The weekday is always the start's.
//   - Daylight-saving rules: a local time that does not exist (the clock
//     jumps over it, e.g. 02:30 in Europe/Berlin on 2026-03-29) maps to the
//     instant the gap ends (the jump itself, 03:00 local); a local time that
//     occurs twice (the clock falls back) maps to its first occurrence. So
//     "daily 01:00-06:00 Europe/Berlin" lasts 4 h on the night the clocks go
//     forward and 6 h on the night they fall back. An occurrence whose start
//     and end both fall in the same gap is empty and does not occur.
//   - Occurrences never overlap one another; consecutive ones may touch.
//   - `from` and `until` bound the window: only the parts of occurrences
//     inside [from, until) count, so an occurrence in progress at `from` is
//     cut to start at `from`.
//
// Text form (ParseRecurringWindow, FormatRecurringWindow):
//   <days> <HH:MM>-<HH:MM> <time zone> [from <RFC 3339>] [until <RFC 3339>]
// where <days> is a comma-separated list of day names (mon..sun or
// monday..sunday, any case), ranges of them ("sat-sun"; "fri-mon" wraps
// through the weekend), and the words "daily", "weekdays" (mon-fri) and
// "weekends" (sat-sun); no day may be listed twice. Times are two-digit
// hours and minutes, 00:00 to 23:59; an end may also be 24:00. The time
// zone is an IANA name such as "Europe/Berlin" or "UTC". Examples:
//   "weekdays 01:00-06:00 Europe/Berlin"
//   "mon,wed,fri 09:00-17:30 America/New_York"
//   "daily 22:00-02:00 UTC from 2026-04-01T00:00:00+00:00"
//
// Thread-compatible value types; the functions are thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace arbiter::core {

inline constexpr int32_t kMinutesPerDay = 24 * 60;

// A half-open interval of absolute time, [start, end).
struct Interval {
  absl::Time start;
  absl::Time end;

  bool operator==(const Interval&) const = default;
};

// A window of local time that recurs on chosen days of the week. See the
// file comment for its semantics.
struct RecurringWindow {
  // The days on which an occurrence starts, indexed by `absl::Weekday`
  // (monday = 0 ... sunday = 6). Default: none (invalid).
  std::array<bool, 7> weekdays = {};
  // Local start, in minutes after midnight: [0, 1439].
  int32_t start_minute = 0;
  // Local end, in minutes after midnight: [0, 1440], 1440 being 24:00. At or
  // before `start_minute`: on the next day. Never equal to `start_minute`.
  int32_t end_minute = 0;
  // IANA time zone name, e.g. "Europe/Berlin".
  std::string time_zone;
  // Nothing of the window exists before `from` or at or after `until`.
  // Default: unbounded (InfinitePast, InfiniteFuture).
  absl::Time from = absl::InfinitePast();
  absl::Time until = absl::InfiniteFuture();

  bool operator==(const RecurringWindow&) const = default;
};

// Parses the text form (see the file comment) and validates the result with
// `ValidateRecurringWindow`. Returns kInvalidArgument, with a message that
// starts with "<field>: " and names what is wrong (an unknown day, a bad time,
// an unknown time zone, a window of zero length, a window that never
// occurs, ...).
absl::StatusOr<RecurringWindow> ParseRecurringWindow(absl::string_view text,
                                                     absl::string_view field);

// Returns the canonical text form of `w`, which `ParseRecurringWindow` reads
// back to an equal window: the days as "daily", "weekdays", "weekends" or a
// list such as "mon,wed,fri"; `from` and `until`, when set, in RFC 3339 UTC.
std::string FormatRecurringWindow(const RecurringWindow& w);

// Returns OK if `w` is well formed and occurs at least once: some weekday,
// times in range, an end unequal to the start, a known IANA time zone,
// `from` < `until`, and at least one occurrence overlapping [from, until)
// (checked exactly, by computing the first one). Otherwise kInvalidArgument
// with a message that starts with "<field>: ".
[[nodiscard]] absl::Status ValidateRecurringWindow(const RecurringWindow& w,
                                                   absl::string_view field);

// The queries below are exact across daylight-saving changes.
// REQUIRES (all of them): `ValidateRecurringWindow(w, ...)` is OK.

// Returns true if `t` lies within an occurrence of `w` and within
// [w.from, w.until).
bool Contains(const RecurringWindow& w, absl::Time t);

// Returns the first occurrence of `w` that ends after `after`, so one in
// progress at `after` is returned whole, clipped to [w.from, w.until). Returns
// nullopt if there is none: `after` is at or past the last one, or `after`
// and `w.from` are both InfinitePast (there is no first occurrence).
std::optional<Interval> NextOccurrence(const RecurringWindow& w, absl::Time after);

// Returns every occurrence of `w` that overlaps [begin, end), clipped to
// it and to [w.from, w.until), in order, with occurrences that touch merged
// into one interval (so "daily 00:00-24:00" yields a single interval). Costs
// time in proportion to the days spanned.
// REQUIRES: [max(begin, w.from), min(end, w.until)) is empty or finite.
std::vector<Interval> Occurrences(const RecurringWindow& w, absl::Time begin, absl::Time end);

}  // namespace arbiter::core
