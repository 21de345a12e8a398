#include "core/recurrence.h"

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/civil_time.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/status_matchers.h"

namespace arbiter::core {

// Lets gtest print intervals in failure messages (found by ADL).
void PrintTo(const Interval& i, std::ostream* os) {
  *os << "[" << absl::FormatTime(absl::RFC3339_full, i.start, absl::UTCTimeZone()) << ", "
      << absl::FormatTime(absl::RFC3339_full, i.end, absl::UTCTimeZone()) << ")";
}

namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::StartsWith;

constexpr absl::string_view kField = "pool.lending_windows[0]";

// An instant written in UTC. Every expected instant below was worked out by
// hand from the zone's offset on that date: Europe/Berlin is UTC+1 (CET) and
// UTC+2 (CEST) from 2026-03-29 01:00Z to 2026-10-25 01:00Z; America/New_York
// is UTC-5 (EST) and UTC-4 (EDT) from 2026-03-08 07:00Z to 2026-11-01 06:00Z;
// Asia/Tokyo is UTC+9. 2026-01-01 is a Thursday.
absl::Time Utc(int64_t y, int m, int d, int hh, int mm) {
  return absl::FromCivil(absl::CivilMinute(y, m, d, hh, mm), absl::UTCTimeZone());
}

Interval Span(absl::Time start, absl::Time end) { return Interval{start, end}; }

RecurringWindow Parse(absl::string_view text) {
  absl::StatusOr<RecurringWindow> w = ParseRecurringWindow(text, kField);
  if (!w.ok()) {
    ADD_FAILURE() << text << ": " << w.status();
    return RecurringWindow{};
  }
  return *w;
}

constexpr bool T = true;
constexpr bool F = false;

// ---- Parsing ---------------------------------------------------------------

TEST(ParseRecurringWindowTest, ParsesWeekdays) {
  const RecurringWindow w = Parse("weekdays 01:00-06:00 Europe/Berlin");
  EXPECT_EQ(w.weekdays, (std::array<bool, 7>{T, T, T, T, T, F, F}));
  EXPECT_EQ(w.start_minute, 60);
  EXPECT_EQ(w.end_minute, 360);
  EXPECT_EQ(w.time_zone, "Europe/Berlin");
  EXPECT_EQ(w.from, absl::InfinitePast());
  EXPECT_EQ(w.until, absl::InfiniteFuture());
}

TEST(ParseRecurringWindowTest, ParsesDailyAcrossMidnight) {
  const RecurringWindow w = Parse("daily 22:00-02:00 UTC");
  EXPECT_EQ(w.weekdays, (std::array<bool, 7>{T, T, T, T, T, T, T}));
  EXPECT_EQ(w.start_minute, 22 * 60);
  EXPECT_EQ(w.end_minute, 2 * 60);
  EXPECT_EQ(w.time_zone, "UTC");
}

TEST(ParseRecurringWindowTest, ParsesDayList) {
  const RecurringWindow w = Parse("mon,wed,fri 09:00-17:30 America/New_York");
  EXPECT_EQ(w.weekdays, (std::array<bool, 7>{T, F, T, F, T, F, F}));
  EXPECT_EQ(w.start_minute, 9 * 60);
  EXPECT_EQ(w.end_minute, 17 * 60 + 30);
  EXPECT_EQ(w.time_zone, "America/New_York");
}

TEST(ParseRecurringWindowTest, ParsesWeekendsUntil2400) {
  const RecurringWindow w = Parse("weekends 00:00-24:00 Asia/Tokyo");
  EXPECT_EQ(w.weekdays, (std::array<bool, 7>{F, F, F, F, F, T, T}));
  EXPECT_EQ(w.start_minute, 0);
  EXPECT_EQ(w.end_minute, 1440);
}

TEST(ParseRecurringWindowTest, ParsesRangesFullNamesAndAnyCase) {
  EXPECT_EQ(Parse("sat-sun 08:00-09:00 UTC").weekdays, (std::array<bool, 7>{F, F, F, F, F, T, T}));
  EXPECT_EQ(Parse("tue-thu 08:00-09:00 UTC").weekdays, (std::array<bool, 7>{F, T, T, T, F, F, F}));
  // A range wraps through the weekend.
  EXPECT_EQ(Parse("FRI-Mon 08:00-09:00 UTC").weekdays, (std::array<bool, 7>{T, F, F, F, T, T, T}));
  EXPECT_EQ(Parse("Tuesday,sunday 08:00-09:00 UTC").weekdays,
            (std::array<bool, 7>{F, T, F, F, F, F, T}));
  EXPECT_EQ(Parse("weekends,mon 08:00-09:00 UTC").weekdays,
            (std::array<bool, 7>{T, F, F, F, F, T, T}));
}

TEST(ParseRecurringWindowTest, ParsesBoundsAndExtraBlanks) {
  const RecurringWindow w = Parse(
      "  daily\t09:00-17:00   UTC from 2026-01-05T12:00:00Z until 2026-01-07T10:00:00+01:00 ");
  EXPECT_EQ(w.from, Utc(2026, 1, 5, 12, 0));
  EXPECT_EQ(w.until, Utc(2026, 1, 7, 9, 0));
  const RecurringWindow only_until = Parse("daily 09:00-17:00 UTC until 2026-01-07T10:00:00Z");
  EXPECT_EQ(only_until.from, absl::InfinitePast());
  EXPECT_EQ(only_until.until, Utc(2026, 1, 7, 10, 0));
}

struct BadTextCase {
  const char* text;
  const char* message;  // Expected after "pool.lending_windows[0]: ".
};

void PrintTo(const BadTextCase& c, std::ostream* os) { *os << '"' << c.text << '"'; }

class ParseRecurringWindowErrorTest : public ::testing::TestWithParam<BadTextCase> {};

TEST_P(ParseRecurringWindowErrorTest, NamesTheFieldAndTheProblem) {
  EXPECT_THAT(ParseRecurringWindow(GetParam().text, kField),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith(absl::StrCat(kField, ": ", GetParam().message))));
}

INSTANTIATE_TEST_SUITE_P(
    AllErrors, ParseRecurringWindowErrorTest,
    ::testing::Values(
        BadTextCase{"", "expected \"<days> <HH:MM>-<HH:MM> <time zone>"},
        BadTextCase{"weekdays 01:00-06:00", "expected \"<days> <HH:MM>-<HH:MM> <time zone>"},
        BadTextCase{"mon,funday 09:00-10:00 UTC", "unknown day \"funday\""},
        BadTextCase{"mon,,tue 09:00-10:00 UTC", "unknown day \"\""},
        BadTextCase{"mon-xyz 09:00-10:00 UTC", "unknown day \"xyz\""},
        BadTextCase{"weekdays,wed 09:00-10:00 UTC", "day wed is listed twice"},
        BadTextCase{"mon-mon 09:00-10:00 UTC", "day range \"mon-mon\" starts and ends on one day"},
        BadTextCase{"mon 9:00-10:00 UTC", "bad time \"9:00\" (expected HH:MM)"},
        BadTextCase{"mon 09:00 UTC", "bad time range \"09:00\" (expected HH:MM-HH:MM)"},
        BadTextCase{"mon 25:00-10:00 UTC", "bad time \"25:00\" (expected 00:00 to 23:59"},
        BadTextCase{"mon 09:60-10:00 UTC", "bad time \"09:60\" (expected 00:00 to 23:59"},
        BadTextCase{"mon 09:00-24:01 UTC", "bad time \"24:01\" (expected 00:00 to 23:59"},
        BadTextCase{"mon 24:00-02:00 UTC", "bad time \"24:00\": only an end time may be 24:00"},
        BadTextCase{"mon 09:00-09:00 UTC", "a window of zero length (09:00-09:00)"},
        BadTextCase{"mon 00:00-00:00 UTC", "a window of zero length (00:00-00:00)"},
        BadTextCase{"mon 09:00-10:00 Mars/Olympus", "unknown time zone \"Mars/Olympus\""},
        BadTextCase{"mon 09:00-10:00 localtime", "unknown time zone \"localtime\""},
        BadTextCase{"mon 09:00-10:00 ../zoneinfo/UTC", "unknown time zone \"../zoneinfo/UTC\""},
        BadTextCase{"mon 09:00-10:00 UTC from yesterday", "bad from time \"yesterday\""},
        BadTextCase{"mon 09:00-10:00 UTC until 2026-13-01T00:00:00Z",
                    "bad until time \"2026-13-01T00:00:00Z\""},
        BadTextCase{"mon 09:00-10:00 UTC from infinite-past",
                    "bad from time \"infinite-past\": must be a finite time"},
        BadTextCase{"mon 09:00-10:00 UTC since 2026-01-01T00:00:00Z", "unexpected \"since\""},
        BadTextCase{"mon 09:00-10:00 UTC until 2026-02-01T00:00:00Z from 2026-01-01T00:00:00Z",
                    "unexpected \"from\""},
        BadTextCase{"mon 09:00-10:00 UTC from", "from needs a time"},
        BadTextCase{"daily 09:00-17:00 UTC from 2026-01-02T00:00:00Z until 2026-01-01T00:00:00Z",
                    "until (2026-01-01T00:00:00+00:00) must be after from "
                    "(2026-01-02T00:00:00+00:00)"},
        BadTextCase{"daily 09:00-17:00 UTC from 2026-01-02T00:00:00Z until 2026-01-02T00:00:00Z",
                    "until (2026-01-02T00:00:00+00:00) must be after from"},
        // Between Monday's 17:00 and Tuesday's 09:00.
        BadTextCase{"daily 09:00-17:00 UTC from 2026-01-05T17:00:00Z until 2026-01-06T09:00:00Z",
                    "no occurrence between from (2026-01-05T17:00:00+00:00) and until "
                    "(2026-01-06T09:00:00+00:00): the window never occurs"},
        // Tuesday to the next Monday's start: no Monday in between.
        BadTextCase{"mon 09:00-17:00 UTC from 2026-01-06T00:00:00Z until 2026-01-12T09:00:00Z",
                    "no occurrence between from"},
        // The only Sunday in the bounds is 2026-03-29, when 02:10-02:50 lies in
        // the gap of the spring-forward night.
        BadTextCase{"sun 02:10-02:50 Europe/Berlin from 2026-03-28T00:00:00Z until "
                    "2026-04-04T00:00:00Z",
                    "no occurrence between from"}));

// ---- Validation ------------------------------------------------------------

RecurringWindow MondayNineToFiveUtc() {
  RecurringWindow w;
  w.weekdays = {T, F, F, F, F, F, F};
  w.start_minute = 9 * 60;
  w.end_minute = 17 * 60;
  w.time_zone = "UTC";
  return w;
}

TEST(ValidateRecurringWindowTest, AcceptsAWellFormedWindow) {
  EXPECT_THAT(ValidateRecurringWindow(MondayNineToFiveUtc(), kField), IsOk());
}

TEST(ValidateRecurringWindowTest, RejectsNoWeekdays) {
  RecurringWindow w = MondayNineToFiveUtc();
  w.weekdays = {};
  EXPECT_THAT(ValidateRecurringWindow(w, kField),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       "pool.lending_windows[0]: no weekdays: the window never occurs"));
}

TEST(ValidateRecurringWindowTest, RejectsMinutesOutOfRange) {
  RecurringWindow w = MondayNineToFiveUtc();
  w.start_minute = 1440;
  EXPECT_THAT(ValidateRecurringWindow(w, kField),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("pool.lending_windows[0]: start_minute must be in [0, 1439]")));
  w = MondayNineToFiveUtc();
  w.end_minute = -1;
  EXPECT_THAT(ValidateRecurringWindow(w, kField),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("pool.lending_windows[0]: end_minute must be in [0, 1440]")));
}

TEST(ValidateRecurringWindowTest, RejectsAnEmptyTimeZone) {
  RecurringWindow w = MondayNineToFiveUtc();
  w.time_zone = "";
  EXPECT_THAT(ValidateRecurringWindow(w, kField),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       StartsWith("pool.lending_windows[0]: unknown time zone \"\"")));
}

TEST(ValidateRecurringWindowTest, BoundsMustOverlapAnOccurrenceExactly) {
  RecurringWindow w = MondayNineToFiveUtc();
  // Monday 2026-01-05 17:00 to the next Monday 09:00: just misses both.
  w.from = Utc(2026, 1, 5, 17, 0);
  w.until = Utc(2026, 1, 12, 9, 0);
  EXPECT_THAT(ValidateRecurringWindow(w, kField),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("never occurs")));
  w.until = Utc(2026, 1, 12, 9, 1);
  EXPECT_THAT(ValidateRecurringWindow(w, kField), IsOk());
  w.from = Utc(2026, 1, 5, 16, 59);
  w.until = Utc(2026, 1, 5, 17, 0);
  EXPECT_THAT(ValidateRecurringWindow(w, kField), IsOk());
  // Without `from`, occurrences before any `until` abound.
  w.from = absl::InfinitePast();
  EXPECT_THAT(ValidateRecurringWindow(w, kField), IsOk());
}

// ---- Text round trip -------------------------------------------------------

TEST(FormatRecurringWindowTest, WritesTheCanonicalFormThatParsesBack) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"weekdays 01:00-06:00 Europe/Berlin", "weekdays 01:00-06:00 Europe/Berlin"},
      {"mon-fri 01:00-06:00 Europe/Berlin", "weekdays 01:00-06:00 Europe/Berlin"},
      {"sat,sun 00:00-24:00 Asia/Tokyo", "weekends 00:00-24:00 Asia/Tokyo"},
      {"sun-sat 22:00-02:00 UTC", "daily 22:00-02:00 UTC"},
      {"daily 22:00-00:00 UTC", "daily 22:00-00:00 UTC"},
      {"FRI-Mon 09:05-17:30 America/New_York", "mon,fri,sat,sun 09:05-17:30 America/New_York"},
      {"wed 00:00-23:59 UTC from 2026-01-05T12:00:00+01:00 until 2026-02-01T00:00:00.25Z",
       "wed 00:00-23:59 UTC from 2026-01-05T11:00:00+00:00 until 2026-02-01T00:00:00.25+00:00"},
  };
  for (const auto& [text, canonical] : cases) {
    const RecurringWindow w = Parse(text);
    EXPECT_EQ(FormatRecurringWindow(w), canonical) << text;
    EXPECT_EQ(Parse(FormatRecurringWindow(w)), w) << text;
  }
}

TEST(FormatRecurringWindowTest, FormatsAHandBuiltWindow) {
  RecurringWindow w = MondayNineToFiveUtc();
  w.weekdays = {F, T, F, T, F, F, F};
  w.end_minute = 1440;
  w.until = Utc(2026, 7, 1, 0, 0);
  EXPECT_EQ(FormatRecurringWindow(w), "tue,thu 09:00-24:00 UTC until 2026-07-01T00:00:00+00:00");
  EXPECT_EQ(Parse(FormatRecurringWindow(w)), w);
}

// ---- Midnight and weekdays -------------------------------------------------

TEST(RecurrenceQueryTest, FridayNightWindowEndsOnSaturday) {
  const RecurringWindow w = Parse("fri 22:00-02:00 UTC");
  // Friday 2026-01-02 22:00 to Saturday 02:00.
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 2, 21, 59)));
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 2, 22, 0)));
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 3, 1, 59)));
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 3, 2, 0)));
  // Thursday's window is not listed, so Friday's small hours are outside.
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 2, 1, 0)));
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 3, 23, 0)));
}

TEST(RecurrenceQueryTest, NextOccurrenceReturnsOneInProgressWhole) {
  const RecurringWindow w = Parse("fri 22:00-02:00 UTC");
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 1, 3, 1, 0)),
              Optional(Span(Utc(2026, 1, 2, 22, 0), Utc(2026, 1, 3, 2, 0))));
  // At its end it is over: the next is a week later.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 1, 3, 2, 0)),
              Optional(Span(Utc(2026, 1, 9, 22, 0), Utc(2026, 1, 10, 2, 0))));
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 1, 1, 0, 0)),
              Optional(Span(Utc(2026, 1, 2, 22, 0), Utc(2026, 1, 3, 2, 0))));
}

TEST(RecurrenceQueryTest, SundayNightWindowReachesIntoMonday) {
  const RecurringWindow w = Parse("sun 23:00-01:00 UTC");
  // Sunday 2026-01-04 23:00 to Monday 01:00, seen from Monday.
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 5, 0, 0), Utc(2026, 1, 6, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 5, 0, 0), Utc(2026, 1, 5, 1, 0))));
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 5, 0, 30)));
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 6, 0, 30)));
}

TEST(RecurrenceQueryTest, DayListOccursOnItsDaysOnly) {
  const RecurringWindow w = Parse("mon,wed,fri 09:00-17:30 America/New_York");
  // EST: 09:00 is 14:00Z and 17:30 is 22:30Z. 2026-01-05 is a Monday.
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 5, 0, 0), Utc(2026, 1, 12, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 5, 14, 0), Utc(2026, 1, 5, 22, 30)),
                          Span(Utc(2026, 1, 7, 14, 0), Utc(2026, 1, 7, 22, 30)),
                          Span(Utc(2026, 1, 9, 14, 0), Utc(2026, 1, 9, 22, 30))));
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 6, 15, 0)));  // Tuesday.
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 7, 15, 0)));   // Wednesday.
}

TEST(RecurrenceQueryTest, WeekdaysSkipTheWeekend) {
  const RecurringWindow w = Parse("weekdays 01:00-06:00 Europe/Berlin");
  // CET: 01:00 is 00:00Z. Saturday 2026-01-03 to Saturday 2026-01-10.
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 3, 0, 0), Utc(2026, 1, 10, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 5, 0, 0), Utc(2026, 1, 5, 5, 0)),
                          Span(Utc(2026, 1, 6, 0, 0), Utc(2026, 1, 6, 5, 0)),
                          Span(Utc(2026, 1, 7, 0, 0), Utc(2026, 1, 7, 5, 0)),
                          Span(Utc(2026, 1, 8, 0, 0), Utc(2026, 1, 8, 5, 0)),
                          Span(Utc(2026, 1, 9, 0, 0), Utc(2026, 1, 9, 5, 0))));
}

// ---- Daylight saving -------------------------------------------------------

TEST(RecurrenceDstTest, BerlinNightLastsFourHoursWhenClocksGoForward) {
  const RecurringWindow w = Parse("daily 01:00-06:00 Europe/Berlin");
  // 01:00 CET = 00:00Z; 06:00 CEST = 04:00Z.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 3, 28, 12, 0)),
              Optional(Span(Utc(2026, 3, 29, 0, 0), Utc(2026, 3, 29, 4, 0))));
  EXPECT_THAT(Occurrences(w, Utc(2026, 3, 28, 0, 0), Utc(2026, 3, 30, 12, 0)),
              ElementsAre(Span(Utc(2026, 3, 28, 0, 0), Utc(2026, 3, 28, 5, 0)),
                          Span(Utc(2026, 3, 29, 0, 0), Utc(2026, 3, 29, 4, 0)),
                          Span(Utc(2026, 3, 29, 23, 0), Utc(2026, 3, 30, 4, 0))));
}

TEST(RecurrenceDstTest, BerlinNightLastsSixHoursWhenClocksFallBack) {
  const RecurringWindow w = Parse("daily 01:00-06:00 Europe/Berlin");
  // 01:00 CEST = 23:00Z the day before; 06:00 CET = 05:00Z.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 10, 24, 12, 0)),
              Optional(Span(Utc(2026, 10, 24, 23, 0), Utc(2026, 10, 25, 5, 0))));
  EXPECT_TRUE(Contains(w, Utc(2026, 10, 25, 4, 59)));
  EXPECT_FALSE(Contains(w, Utc(2026, 10, 25, 5, 0)));
}

TEST(RecurrenceDstTest, BerlinTimesInTheGapMapToTheGapsEnd) {
  // 02:30 does not exist on 2026-03-29: it maps to 03:00 CEST = 01:00Z.
  const RecurringWindow starts_in_gap = Parse("daily 02:30-04:00 Europe/Berlin");
  EXPECT_THAT(NextOccurrence(starts_in_gap, Utc(2026, 3, 28, 12, 0)),
              Optional(Span(Utc(2026, 3, 29, 1, 0), Utc(2026, 3, 29, 2, 0))));
  EXPECT_FALSE(Contains(starts_in_gap, Utc(2026, 3, 29, 0, 59)));
  EXPECT_TRUE(Contains(starts_in_gap, Utc(2026, 3, 29, 1, 0)));
  const RecurringWindow ends_in_gap = Parse("daily 01:00-02:30 Europe/Berlin");
  EXPECT_THAT(NextOccurrence(ends_in_gap, Utc(2026, 3, 28, 12, 0)),
              Optional(Span(Utc(2026, 3, 29, 0, 0), Utc(2026, 3, 29, 1, 0))));
}

TEST(RecurrenceDstTest, BerlinWindowWhollyInTheGapDoesNotOccur) {
  const RecurringWindow w = Parse("sun 02:10-02:50 Europe/Berlin");
  EXPECT_THAT(Occurrences(w, Utc(2026, 3, 28, 0, 0), Utc(2026, 3, 30, 0, 0)), IsEmpty());
  // The next Sunday, in CEST: 02:10 = 00:10Z.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 3, 28, 0, 0)),
              Optional(Span(Utc(2026, 4, 5, 0, 10), Utc(2026, 4, 5, 0, 50))));
}

TEST(RecurrenceDstTest, BerlinRepeatedTimesMapToTheirFirstOccurrence) {
  // On 2026-10-25 02:00-03:00 happens twice: 00:00Z-01:00Z (CEST), then
  // 01:00Z-02:00Z (CET).
  const RecurringWindow starts_twice = Parse("daily 02:30-03:30 Europe/Berlin");
  EXPECT_THAT(NextOccurrence(starts_twice, Utc(2026, 10, 24, 12, 0)),
              Optional(Span(Utc(2026, 10, 25, 0, 30), Utc(2026, 10, 25, 2, 30))));
  EXPECT_TRUE(Contains(starts_twice, Utc(2026, 10, 25, 1, 30)));  // The second 02:30.
  const RecurringWindow ends_twice = Parse("daily 00:00-02:30 Europe/Berlin");
  EXPECT_THAT(NextOccurrence(ends_twice, Utc(2026, 10, 24, 12, 0)),
              Optional(Span(Utc(2026, 10, 24, 22, 0), Utc(2026, 10, 25, 0, 30))));
}

TEST(RecurrenceDstTest, BerlinWholeSundaysLast23And25Hours) {
  const RecurringWindow w = Parse("sun 00:00-24:00 Europe/Berlin");
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 3, 23, 0, 0)),
              Optional(Span(Utc(2026, 3, 28, 23, 0), Utc(2026, 3, 29, 22, 0))));
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 10, 20, 0, 0)),
              Optional(Span(Utc(2026, 10, 24, 22, 0), Utc(2026, 10, 25, 23, 0))));
}

TEST(RecurrenceDstTest, NewYorkNightLastsFourThenSixHours) {
  const RecurringWindow w = Parse("daily 01:00-06:00 America/New_York");
  // 2026-03-08: 01:00 EST = 06:00Z; 06:00 EDT = 10:00Z.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 3, 7, 12, 0)),
              Optional(Span(Utc(2026, 3, 8, 6, 0), Utc(2026, 3, 8, 10, 0))));
  // 2026-11-01: 01:00 EDT = 05:00Z; 06:00 EST = 11:00Z.
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 10, 31, 12, 0)),
              Optional(Span(Utc(2026, 11, 1, 5, 0), Utc(2026, 11, 1, 11, 0))));
}

TEST(RecurrenceDstTest, NewYorkGapAndRepeatedHour) {
  // 02:30 does not exist on 2026-03-08: it maps to 03:00 EDT = 07:00Z.
  const RecurringWindow gap = Parse("daily 02:30-05:00 America/New_York");
  EXPECT_THAT(NextOccurrence(gap, Utc(2026, 3, 7, 12, 0)),
              Optional(Span(Utc(2026, 3, 8, 7, 0), Utc(2026, 3, 8, 9, 0))));
  // 01:30 happens twice on 2026-11-01; the first is EDT, 05:30Z. 02:30 EST is
  // 07:30Z.
  const RecurringWindow repeated = Parse("daily 01:30-02:30 America/New_York");
  EXPECT_THAT(NextOccurrence(repeated, Utc(2026, 10, 31, 12, 0)),
              Optional(Span(Utc(2026, 11, 1, 5, 30), Utc(2026, 11, 1, 7, 30))));
}

// ---- Bounds ----------------------------------------------------------------

TEST(RecurrenceBoundsTest, FromAndUntilClipOccurrences) {
  const RecurringWindow w =
      Parse("daily 09:00-17:00 UTC from 2026-01-05T12:00:00Z until 2026-01-07T10:00:00Z");
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 1, 0, 0), Utc(2026, 2, 1, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 5, 12, 0), Utc(2026, 1, 5, 17, 0)),
                          Span(Utc(2026, 1, 6, 9, 0), Utc(2026, 1, 6, 17, 0)),
                          Span(Utc(2026, 1, 7, 9, 0), Utc(2026, 1, 7, 10, 0))));
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 1, 1, 0, 0)),
              Optional(Span(Utc(2026, 1, 5, 12, 0), Utc(2026, 1, 5, 17, 0))));
  EXPECT_THAT(NextOccurrence(w, Utc(2026, 1, 7, 9, 30)),
              Optional(Span(Utc(2026, 1, 7, 9, 0), Utc(2026, 1, 7, 10, 0))));
  EXPECT_EQ(NextOccurrence(w, Utc(2026, 1, 7, 10, 0)), std::nullopt);
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 5, 11, 0)));
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 5, 12, 0)));
  EXPECT_TRUE(Contains(w, Utc(2026, 1, 7, 9, 59)));
  EXPECT_FALSE(Contains(w, Utc(2026, 1, 7, 10, 0)));
}

TEST(RecurrenceBoundsTest, NextOccurrenceFromTheInfinitePast) {
  RecurringWindow w = Parse("daily 09:00-17:00 UTC");
  EXPECT_EQ(NextOccurrence(w, absl::InfinitePast()), std::nullopt);
  EXPECT_EQ(NextOccurrence(w, absl::InfiniteFuture()), std::nullopt);
  EXPECT_FALSE(Contains(w, absl::InfiniteFuture()));
  w.from = Utc(2026, 1, 5, 18, 0);
  EXPECT_THAT(NextOccurrence(w, absl::InfinitePast()),
              Optional(Span(Utc(2026, 1, 6, 9, 0), Utc(2026, 1, 6, 17, 0))));
}

// ---- Merging ---------------------------------------------------------------

TEST(RecurrenceOccurrencesTest, MergesOccurrencesThatTouch) {
  const RecurringWindow all_day = Parse("daily 00:00-24:00 UTC");
  EXPECT_THAT(Occurrences(all_day, Utc(2026, 1, 1, 6, 0), Utc(2026, 1, 4, 6, 0)),
              ElementsAre(Span(Utc(2026, 1, 1, 6, 0), Utc(2026, 1, 4, 6, 0))));
  // Saturday 00:00 JST is Friday 15:00Z; 2026-01-03 is a Saturday.
  const RecurringWindow weekends = Parse("weekends 00:00-24:00 Asia/Tokyo");
  EXPECT_THAT(Occurrences(weekends, Utc(2026, 1, 1, 0, 0), Utc(2026, 1, 15, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 2, 15, 0), Utc(2026, 1, 4, 15, 0)),
                          Span(Utc(2026, 1, 9, 15, 0), Utc(2026, 1, 11, 15, 0))));
}

TEST(RecurrenceOccurrencesTest, KeepsOccurrencesApartWhenTheyDoNotTouch) {
  const RecurringWindow w = Parse("daily 22:00-02:00 UTC");
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 1, 0, 0), Utc(2026, 1, 3, 0, 0)),
              ElementsAre(Span(Utc(2026, 1, 1, 0, 0), Utc(2026, 1, 1, 2, 0)),
                          Span(Utc(2026, 1, 1, 22, 0), Utc(2026, 1, 2, 2, 0)),
                          Span(Utc(2026, 1, 2, 22, 0), Utc(2026, 1, 3, 0, 0))));
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 3, 0, 0), Utc(2026, 1, 3, 0, 0)), IsEmpty());
  EXPECT_THAT(Occurrences(w, Utc(2026, 1, 1, 3, 0), Utc(2026, 1, 1, 21, 0)), IsEmpty());
}

}  // namespace
}  // namespace arbiter::core
