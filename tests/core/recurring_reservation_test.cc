// Recurring reservations (docs/quotas-and-preemption.md): one reservation
// per occurrence of a recurring window, the next booked when one starts,
// exact across a daylight-saving change; and their bad inputs.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "core/recurrence.h"
#include "tests/core/test_state.h"

namespace arbiter::core {
namespace {

using ::arbiter::testing::AddNode;
using ::arbiter::testing::kT0;  // Friday 2027-01-15 08:00 UTC.
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::MakeState;
using ::arbiter::testing::WholeSpec;

constexpr absl::Duration kDay = absl::Hours(24);

RecurringWindow Window(const std::string& text) {
  absl::StatusOr<RecurringWindow> w = ParseRecurringWindow(text, "recurrence");
  EXPECT_TRUE(w.ok()) << w.status();
  return w.value_or(RecurringWindow());
}

class RecurringReservationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s_ = MakeState();
    ChangeSet ch;
    ASSERT_TRUE(SetQuota(s_, {"t", "batch", 8000}, kT0, ch).ok());
    AddNode(s_, MakeNode("b1", 4, "H100-80GB", "batch"));
  }

  CapacityRequestSpec Nightly(const std::string& key, const std::string& window) {
    CapacityRequestSpec spec = WholeSpec(key, 1, 2);
    spec.pool = "batch";
    spec.workload_class = WorkloadClass::kTraining;
    spec.preemptible = true;
    spec.recurrence = Window(window);
    return spec;
  }

  // The requests `changes` created, in order.
  static std::vector<CapacityRequest> Created(const ChangeSet& changes) {
    std::vector<CapacityRequest> out;
    for (const Change& c : changes.changes) {
      if (const auto* w = std::get_if<RequestWrite>(&c); w != nullptr && w->is_new) {
        out.push_back(w->request);
      }
    }
    return out;
  }

  State s_;
};

TEST_F(RecurringReservationTest, BooksEachOccurrenceWhenThePreviousStarts) {
  ChangeSet ch;
  absl::StatusOr<RequestOutcome> first =
      RequestCapacity(s_, Nightly("nightly", "daily 09:00-10:00 UTC"), kT0, ch);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->request.state, RequestState::kReserved);
  EXPECT_EQ(first->request.spec.start_at, kT0 + absl::Hours(1));
  EXPECT_EQ(first->request.spec.duration, absl::Hours(1));
  EXPECT_EQ(Created(ch).size(), 1u);  // Nothing else is booked before it starts.

  // 09:00: the occurrence starts and the next is booked, keyed by its start.
  ChangeSet started;
  Tick(s_, kT0 + absl::Hours(1), started);
  EXPECT_EQ(s_.FindLiveRequest(first->request.id)->state, RequestState::kAdmitted);
  std::vector<CapacityRequest> booked = Created(started);
  ASSERT_EQ(booked.size(), 1u);
  const absl::Time second_start = kT0 + absl::Hours(1) + kDay;
  EXPECT_EQ(booked[0].spec.idempotency_key,
            absl::StrCat("nightly@", absl::ToUnixSeconds(second_start)));
  EXPECT_EQ(booked[0].state, RequestState::kReserved);
  EXPECT_EQ(booked[0].spec.start_at, second_start);
  EXPECT_EQ(booked[0].spec.duration, absl::Hours(1));
  EXPECT_EQ(booked[0].spec.recurrence, first->request.spec.recurrence);
  const int64_t second = booked[0].id;

  // A replay of the series' key answers the first occurrence.
  ChangeSet replay_ch;
  absl::StatusOr<RequestOutcome> replay = RequestCapacity(
      s_, Nightly("nightly", "daily 09:00-10:00 UTC"), kT0 + absl::Hours(2), replay_ch);
  ASSERT_TRUE(replay.ok());
  EXPECT_TRUE(replay->replayed);
  EXPECT_EQ(replay->request.id, first->request.id);

  ASSERT_TRUE(ReleaseRequest(s_, first->request.id, kT0 + absl::Hours(2), ch).ok());
  ChangeSet next_day;
  Tick(s_, second_start, next_day);
  EXPECT_EQ(s_.FindLiveRequest(second)->state, RequestState::kAdmitted);
  booked = Created(next_day);
  ASSERT_EQ(booked.size(), 1u);
  EXPECT_EQ(booked[0].spec.idempotency_key,
            absl::StrCat("nightly@", absl::ToUnixSeconds(second_start + kDay)));

  // Cancelling the booked occurrence ends the series.
  ASSERT_TRUE(ReleaseRequest(s_, booked[0].id, second_start + absl::Hours(1), ch).ok());
  ASSERT_TRUE(ReleaseRequest(s_, second, second_start + absl::Hours(1), ch).ok());
  ChangeSet after;
  Tick(s_, second_start + 2 * kDay, after);
  EXPECT_TRUE(Created(after).empty());
}

TEST_F(RecurringReservationTest, AnOccurrenceUnderWayIsDecidedNowAndTheNextBooked) {
  ChangeSet ch;
  const absl::Time at = kT0 + absl::Minutes(90);  // 09:30, in the 09:00-10:00 occurrence.
  absl::StatusOr<RequestOutcome> now =
      RequestCapacity(s_, Nightly("late", "daily 09:00-10:00 UTC"), at, ch);
  ASSERT_TRUE(now.ok()) << now.status();
  EXPECT_EQ(now->request.state, RequestState::kAdmitted);
  EXPECT_EQ(now->request.spec.start_at, at);
  EXPECT_EQ(now->request.spec.duration, absl::Minutes(30));
  const std::vector<CapacityRequest> created = Created(ch);
  ASSERT_EQ(created.size(), 2u);
  EXPECT_EQ(created[1].spec.idempotency_key,
            absl::StrCat("late@", absl::ToUnixSeconds(kT0 + absl::Hours(1) + kDay)));
  EXPECT_EQ(created[1].state, RequestState::kReserved);
}

// 2027-03-28: Berlin goes from CET (UTC+1) to CEST (UTC+2) at 02:00 local.
// 01:00-06:00 local is then 00:00-04:00 UTC, four hours; the next night is
// 23:00-04:00 UTC, five.
TEST_F(RecurringReservationTest, OccurrencesFollowTheWallClockAcrossDaylightSaving) {
  const absl::Time saturday_noon = absl::FromUnixSeconds(1'806'148'800);  // 2027-03-27T12:00Z.
  ChangeSet ch;
  absl::StatusOr<RequestOutcome> first =
      RequestCapacity(s_, Nightly("dst", "daily 01:00-06:00 Europe/Berlin"), saturday_noon, ch);
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time sunday = absl::FromUnixSeconds(1'806'192'000);  // 2027-03-28T00:00Z.
  EXPECT_EQ(first->request.spec.start_at, sunday);
  EXPECT_EQ(first->request.spec.duration, absl::Hours(4));
  ChangeSet started;
  Tick(s_, sunday, started);
  const std::vector<CapacityRequest> booked = Created(started);
  ASSERT_EQ(booked.size(), 1u);
  EXPECT_EQ(booked[0].spec.start_at, sunday + absl::Hours(23));  // 01:00 CEST.
  EXPECT_EQ(booked[0].spec.duration, absl::Hours(5));
}

TEST_F(RecurringReservationTest, BadInputIsRefusedNamingTheFieldWithNothingWritten) {
  struct Case {
    CapacityRequestSpec spec;
    std::string message;
  };
  std::vector<Case> cases;
  {
    CapacityRequestSpec spec = Nightly("a", "daily 09:00-10:00 UTC");
    spec.start_at = kT0 + absl::Hours(3);
    cases.push_back({spec, "start_time: a recurring reservation starts at each occurrence"});
  }
  {
    CapacityRequestSpec spec = Nightly("b", "daily 09:00-10:00 UTC");
    spec.duration = absl::Hours(1);
    cases.push_back({spec, "duration_seconds: each occurrence"});
  }
  {
    // Once, on Monday 2027-01-04: no occurrence is left on the 15th.
    CapacityRequestSpec spec =
        Nightly("c", "mon 09:00-10:00 UTC from 2027-01-04T00:00:00Z until 2027-01-05T00:00:00Z");
    cases.push_back({spec,
                     "recurrence: 'mon 09:00-10:00 UTC from 2027-01-04T00:00:00+00:00 until "
                     "2027-01-05T00:00:00+00:00' has no occurrence after 2027-01-15T08:00:00Z"});
  }
  {
    // A Monday window bounded to a Tuesday: it never occurs.
    CapacityRequestSpec spec = Nightly("d", "daily 09:00-10:00 UTC");
    spec.recurrence->weekdays = {true, false, false, false, false, false, false};
    spec.recurrence->from = absl::FromUnixSeconds(1'799'107'200);   // Tue 2027-01-05.
    spec.recurrence->until = absl::FromUnixSeconds(1'799'193'600);  // Wed 2027-01-06.
    cases.push_back({spec, "recurrence: "});
  }
  {
    CapacityRequestSpec spec = Nightly(std::string(117, 'k'), "daily 09:00-10:00 UTC");
    cases.push_back({spec, "idempotency_key: a recurring reservation's key must be at most 116"});
  }
  for (const Case& c : cases) {
    ChangeSet ch;
    absl::StatusOr<RequestOutcome> out = RequestCapacity(s_, c.spec, kT0, ch);
    ASSERT_FALSE(out.ok()) << c.message;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(out.status().message(), c.message)) << out.status();
    EXPECT_TRUE(ch.changes.empty());
  }
  EXPECT_TRUE(s_.live_requests().empty());
}

}  // namespace
}  // namespace arbiter::core
