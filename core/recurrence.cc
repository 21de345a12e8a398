#include "core/recurrence.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"

#include "core/status_macros.h"

namespace arbiter::core {
namespace {

// Indexed by `absl::Weekday`: monday = 0 ... sunday = 6.
using WeekdaySet = std::array<bool, 7>;

constexpr std::array<absl::string_view, 7> kDayNames = {"mon", "tue", "wed", "thu",
                                                        "fri", "sat", "sun"};
constexpr std::array<absl::string_view, 7> kLongDayNames = {
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};
constexpr absl::string_view kExpectedForm =
    "expected \"<days> <HH:MM>-<HH:MM> <time zone> [from <time>] [until <time>]\"";

// How far `NextOccurrence` looks: two days back (an occurrence that began
// earlier may still be in progress), then a year of weeks. A listed weekday
// recurs every week, and no zone's gaps swallow a year of its occurrences.
constexpr int kSearchDays = 2 + 7 * 53;

absl::Status Invalid(absl::string_view field, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", absl::CHexEscape(s), "\""); }

bool IsFinite(absl::Time t) { return t != absl::InfinitePast() && t != absl::InfiniteFuture(); }

std::string FormatTimeUtc(absl::Time t) {
  return absl::FormatTime(absl::RFC3339_full, t, absl::UTCTimeZone());
}

// ---- Days ------------------------------------------------------------------

// The days `first` through `last`, wrapping from sunday to monday.
WeekdaySet DayRange(int first, int last) {
  WeekdaySet days = {};
  for (int d = first;; d = (d + 1) % 7) {
    days[d] = true;
    if (d == last) {
      return days;
    }
  }
}

absl::StatusOr<int> ParseDayName(absl::string_view name, absl::string_view field) {
  for (int d = 0; d < 7; ++d) {
    if (absl::EqualsIgnoreCase(name, kDayNames[d]) ||
        absl::EqualsIgnoreCase(name, kLongDayNames[d])) {
      return d;
    }
  }
  return Invalid(field, absl::StrCat("unknown day ", Quote(name),
                                     " (expected mon..sun, daily, weekdays or weekends)"));
}

// One item of the comma-separated list: a keyword, a day or a range of days.
absl::StatusOr<WeekdaySet> ParseDayItem(absl::string_view item, absl::string_view field) {
  if (absl::EqualsIgnoreCase(item, "daily")) {
    return DayRange(0, 6);
  }
  if (absl::EqualsIgnoreCase(item, "weekdays")) {
    return DayRange(0, 4);
  }
  if (absl::EqualsIgnoreCase(item, "weekends")) {
    return DayRange(5, 6);
  }
  const size_t dash = item.find('-');
  if (dash == absl::string_view::npos) {
    ARBITER_ASSIGN_OR_RETURN(const int day, ParseDayName(item, field));
    return DayRange(day, day);
  }
  ARBITER_ASSIGN_OR_RETURN(const int first, ParseDayName(item.substr(0, dash), field));
  ARBITER_ASSIGN_OR_RETURN(const int last, ParseDayName(item.substr(dash + 1), field));
  if (first == last) {
    return Invalid(field, absl::StrCat("day range ", Quote(item), " starts and ends on one day"));
  }
  return DayRange(first, last);
}

absl::StatusOr<WeekdaySet> ParseDays(absl::string_view text, absl::string_view field) {
  WeekdaySet days = {};
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    ARBITER_ASSIGN_OR_RETURN(const WeekdaySet more, ParseDayItem(item, field));
    for (int d = 0; d < 7; ++d) {
      if (more[d] && days[d]) {
        return Invalid(field,
                       absl::StrCat("day ", kDayNames[d], " is listed twice in ", Quote(text)));
      }
      days[d] = days[d] || more[d];
    }
  }
  return days;
}

std::string FormatDays(const WeekdaySet& days) {
  if (days == DayRange(0, 6)) {
    return "daily";
  }
  if (days == DayRange(0, 4)) {
    return "weekdays";
  }
  if (days == DayRange(5, 6)) {
    return "weekends";
  }
  std::vector<absl::string_view> names;
  for (int d = 0; d < 7; ++d) {
    if (days[d]) {
      names.push_back(kDayNames[d]);
    }
  }
  return absl::StrJoin(names, ",");
}

// ---- Times of day ----------------------------------------------------------

// "HH:MM" to minutes after midnight; "24:00" (1440) only when `is_end`.
absl::StatusOr<int32_t> ParseClock(absl::string_view text, bool is_end, absl::string_view field) {
  const auto digit = [&](size_t i) { return absl::ascii_isdigit(text[i]); };
  if (text.size() != 5 || !digit(0) || !digit(1) || text[2] != ':' || !digit(3) || !digit(4)) {
    return Invalid(field, absl::StrCat("bad time ", Quote(text), " (expected HH:MM)"));
  }
  const int32_t hours = (text[0] - '0') * 10 + (text[1] - '0');
  const int32_t minutes = (text[3] - '0') * 10 + (text[4] - '0');
  if (hours == 24 && minutes == 0 && !is_end) {
    return Invalid(field, "bad time \"24:00\": only an end time may be 24:00");
  }
  if (minutes > 59 || hours > 24 || (hours == 24 && minutes != 0)) {
    return Invalid(field, absl::StrCat("bad time ", Quote(text),
                                       " (expected 00:00 to 23:59, or 24:00 as an end)"));
  }
  return hours * 60 + minutes;
}

std::string FormatClock(int32_t minute) {
  return absl::StrCat(absl::Dec(minute / 60, absl::kZeroPad2), ":",
                      absl::Dec(minute % 60, absl::kZeroPad2));
}

// "HH:MM-HH:MM" into `w.start_minute` and `w.end_minute`.
absl::Status ParseClockRange(absl::string_view text, RecurringWindow& w, absl::string_view field) {
  const size_t dash = text.find('-');
  if (dash == absl::string_view::npos) {
    return Invalid(field, absl::StrCat("bad time range ", Quote(text), " (expected HH:MM-HH:MM)"));
  }
  ARBITER_ASSIGN_OR_RETURN(w.start_minute, ParseClock(text.substr(0, dash), false, field));
  ARBITER_ASSIGN_OR_RETURN(w.end_minute, ParseClock(text.substr(dash + 1), true, field));
  return absl::OkStatus();
}

// ---- Bounds ----------------------------------------------------------------

absl::StatusOr<absl::Time> ParseBound(absl::string_view keyword, absl::string_view text,
                                      absl::string_view field) {
  absl::Time t;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &error)) {
    return Invalid(field, absl::StrCat("bad ", keyword, " time ", Quote(text),
                                       " (expected RFC 3339, e.g. 2026-04-01T00:00:00Z): ", error));
  }
  if (!IsFinite(t)) {
    return Invalid(field, absl::StrCat("bad ", keyword, " time ", Quote(text),
                                       ": must be a finite time; leave it out for no bound"));
  }
  return t;
}

// The optional "from <time>" and "until <time>", in that order, from
// `tokens[first]` on.
absl::Status ParseBounds(const std::vector<absl::string_view>& tokens, size_t first,
                         RecurringWindow& w, absl::string_view field) {
  size_t i = first;
  if (i + 1 < tokens.size() && tokens[i] == "from") {
    ARBITER_ASSIGN_OR_RETURN(w.from, ParseBound("from", tokens[i + 1], field));
    i += 2;
  }
  if (i + 1 < tokens.size() && tokens[i] == "until") {
    ARBITER_ASSIGN_OR_RETURN(w.until, ParseBound("until", tokens[i + 1], field));
    i += 2;
  }
  if (i + 1 == tokens.size() && (tokens[i] == "from" || tokens[i] == "until")) {
    return Invalid(field, absl::StrCat(tokens[i], " needs a time"));
  }
  if (i < tokens.size()) {
    return Invalid(field, absl::StrCat("unexpected ", Quote(tokens[i]),
                                       " (expected from <time>, then until <time>)"));
  }
  return absl::OkStatus();
}

// ---- Time zones ------------------------------------------------------------

// An IANA zone name: letters, digits and "/_+-", starting with a letter. This
// keeps out what abseil would also accept but is no IANA zone: "localtime"
// (the process's environment), "libc:..." and "Fixed/..." names, and paths.
bool IsIanaZoneName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || !absl::ascii_isalpha(name[0]) || name == "localtime" ||
      absl::EndsWith(name, "/") || absl::StrContains(name, "//")) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(c) || c == '/' || c == '_' || c == '+' || c == '-';
  });
}

absl::StatusOr<absl::TimeZone> LoadZone(absl::string_view name, absl::string_view field) {
  absl::TimeZone zone;
  if (!IsIanaZoneName(name) || !absl::LoadTimeZone(std::string(name), &zone)) {
    return Invalid(field, absl::StrCat("unknown time zone ", Quote(name),
                                       " (expected an IANA name such as Europe/Berlin)"));
  }
  return zone;
}

// REQUIRES: `w.time_zone` passed `LoadZone`.
absl::TimeZone ZoneOf(const RecurringWindow& w) {
  absl::TimeZone zone;
  const bool loaded = IsIanaZoneName(w.time_zone) && absl::LoadTimeZone(w.time_zone, &zone);
  ARBITER_CHECK(loaded);
  return zone;
}

// ---- Occurrences -----------------------------------------------------------

// The instant of local time `local`: the end of the gap when the clock skips
// it, the first occurrence when the clock passes it twice.
absl::Time ToInstant(absl::CivilMinute local, const absl::TimeZone& zone) {
  const absl::TimeZone::TimeInfo info = zone.At(absl::CivilSecond(local));
  return info.kind == absl::TimeZone::TimeInfo::SKIPPED ? info.trans : info.pre;
}

int32_t LengthMinutes(const RecurringWindow& w) {
  return w.end_minute > w.start_minute ? w.end_minute - w.start_minute
                                       : w.end_minute + kMinutesPerDay - w.start_minute;
}

// The unclipped occurrence that starts on local day `day`, if any: none when
// `day` is not a listed weekday or the occurrence lies wholly in a gap.
std::optional<Interval> OccurrenceOn(const RecurringWindow& w, const absl::TimeZone& zone,
                                     absl::CivilDay day) {
  if (!w.weekdays[static_cast<int>(absl::GetWeekday(day))]) {
    return std::nullopt;
  }
  const absl::CivilMinute start = absl::CivilMinute(day) + w.start_minute;
  const Interval occurrence{ToInstant(start, zone), ToInstant(start + LengthMinutes(w), zone)};
  if (occurrence.start >= occurrence.end) {
    return std::nullopt;
  }
  return occurrence;
}

Interval Clip(const Interval& i, absl::Time lo, absl::Time hi) {
  return {std::max(i.start, lo), std::min(i.end, hi)};
}

std::optional<Interval> NextOccurrenceIn(const RecurringWindow& w, const absl::TimeZone& zone,
                                         absl::Time after) {
  const absl::Time lo = std::max(after, w.from);
  if (!IsFinite(lo) || lo >= w.until) {
    return std::nullopt;
  }
  const absl::CivilDay first = absl::ToCivilDay(lo, zone) - 2;
  for (absl::CivilDay day = first; day < first + kSearchDays; ++day) {
    const std::optional<Interval> occurrence = OccurrenceOn(w, zone, day);
    if (!occurrence.has_value() || occurrence->end <= lo) {
      continue;
    }
    if (occurrence->start >= w.until) {
      return std::nullopt;
    }
    return Clip(*occurrence, w.from, w.until);
  }
  return std::nullopt;
}

// Appends `i` to `out`, extending the last interval instead when they touch.
void AppendMerged(const Interval& i, std::vector<Interval>& out) {
  if (!out.empty() && out.back().end >= i.start) {
    out.back().end = std::max(out.back().end, i.end);
    return;
  }
  out.push_back(i);
}

}  // namespace

absl::StatusOr<RecurringWindow> ParseRecurringWindow(absl::string_view text,
                                                     absl::string_view field) {
  const std::vector<absl::string_view> tokens =
      absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
  if (tokens.size() < 3) {
    return Invalid(field, absl::StrCat(kExpectedForm, ", got ", Quote(text)));
  }
  RecurringWindow w;
  ARBITER_ASSIGN_OR_RETURN(w.weekdays, ParseDays(tokens[0], field));
  ARBITER_RETURN_IF_ERROR(ParseClockRange(tokens[1], w, field));
  w.time_zone = std::string(tokens[2]);
  ARBITER_RETURN_IF_ERROR(ParseBounds(tokens, 3, w, field));
  ARBITER_RETURN_IF_ERROR(ValidateRecurringWindow(w, field));
  return w;
}

std::string FormatRecurringWindow(const RecurringWindow& w) {
  std::string out = absl::StrCat(FormatDays(w.weekdays), " ", FormatClock(w.start_minute), "-",
                                 FormatClock(w.end_minute), " ", w.time_zone);
  if (w.from != absl::InfinitePast()) {
    absl::StrAppend(&out, " from ", FormatTimeUtc(w.from));
  }
  if (w.until != absl::InfiniteFuture()) {
    absl::StrAppend(&out, " until ", FormatTimeUtc(w.until));
  }
  return out;
}

absl::Status ValidateRecurringWindow(const RecurringWindow& w, absl::string_view field) {
  if (w.weekdays == WeekdaySet{}) {
    return Invalid(field, "no weekdays: the window never occurs");
  }
  if (w.start_minute < 0 || w.start_minute >= kMinutesPerDay) {
    return Invalid(field, absl::StrCat("start_minute must be in [0, 1439], got ", w.start_minute));
  }
  if (w.end_minute < 0 || w.end_minute > kMinutesPerDay) {
    return Invalid(field, absl::StrCat("end_minute must be in [0, 1440], got ", w.end_minute));
  }
  if (w.end_minute == w.start_minute) {
    return Invalid(field, absl::StrCat("a window of zero length (", FormatClock(w.start_minute),
                                       "-", FormatClock(w.end_minute), ")"));
  }
  ARBITER_ASSIGN_OR_RETURN(const absl::TimeZone zone, LoadZone(w.time_zone, field));
  if (w.until <= w.from) {
    return Invalid(field, absl::StrCat("until (", FormatTimeUtc(w.until), ") must be after from (",
                                       FormatTimeUtc(w.from), ")"));
  }
  // With no `from`, infinitely many occurrences precede any `until`.
  if (w.from != absl::InfinitePast() && !NextOccurrenceIn(w, zone, w.from).has_value()) {
    return Invalid(
        field, absl::StrCat("no occurrence between from (", FormatTimeUtc(w.from), ") and until (",
                            FormatTimeUtc(w.until), "): the window never occurs"));
  }
  return absl::OkStatus();
}

bool Contains(const RecurringWindow& w, absl::Time t) {
  if (!IsFinite(t) || t < w.from || t >= w.until) {
    return false;
  }
  const absl::TimeZone zone = ZoneOf(w);
  const absl::CivilDay today = absl::ToCivilDay(t, zone);
  for (absl::CivilDay day = today - 2; day <= today + 1; ++day) {
    const std::optional<Interval> occurrence = OccurrenceOn(w, zone, day);
    if (occurrence.has_value() && occurrence->start <= t && t < occurrence->end) {
      return true;
    }
  }
  return false;
}

std::optional<Interval> NextOccurrence(const RecurringWindow& w, absl::Time after) {
  return NextOccurrenceIn(w, ZoneOf(w), after);
}

std::vector<Interval> Occurrences(const RecurringWindow& w, absl::Time begin, absl::Time end) {
  const absl::Time lo = std::max(begin, w.from);
  const absl::Time hi = std::min(end, w.until);
  std::vector<Interval> out;
  if (lo >= hi) {
    return out;
  }
  ARBITER_CHECK(IsFinite(lo) && IsFinite(hi));
  const absl::TimeZone zone = ZoneOf(w);
  // Margins: an occurrence that starts on a local day before `lo`'s can reach
  // past `lo`, and one that starts on the day after `hi`'s can begin before
  // `hi` when the clock is set back across midnight.
  const absl::CivilDay last = absl::ToCivilDay(hi, zone) + 1;
  for (absl::CivilDay day = absl::ToCivilDay(lo, zone) - 2; day <= last; ++day) {
    const std::optional<Interval> occurrence = OccurrenceOn(w, zone, day);
    if (!occurrence.has_value()) {
      continue;
    }
    const Interval clipped = Clip(*occurrence, lo, hi);
    if (clipped.start < clipped.end) {
      AppendMerged(clipped, out);
    }
  }
  return out;
}

}  // namespace arbiter::core
