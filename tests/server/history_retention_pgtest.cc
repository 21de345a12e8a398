// History retention on a real PostgreSQL: requests, placements and usage in
// monthly partitions (migration 0033), closed months exported to files and
// taken out of the database, what a live request still holds kept, and the
// refusals that keep the record whole.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include <stdlib.h>

#include "core/arbitration.h"
#include "ledger/chain.h"
#include "server/history_retention.h"
#include "store/postgres/history_archive.h"
#include "store/postgres/pg_store.h"
#include "tests/core/test_state.h"
#include "tests/testing/arbiterd_process.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/run_shell.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::CommandResult;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::RunShell;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::TestDatabase;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;

absl::Time Day(int year, int month, int day) {
  return absl::FromCivil(absl::CivilDay(year, month, day), absl::UTCTimeZone());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class HistoryRetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
    // As if migration 0033 had run in December 2025: its legacy partitions
    // end with that month, and 2026 is in monthly partitions.
    ASSERT_THAT(db_->QueryValue(
                    "DROP TABLE requests_legacy, placements_legacy, usage_hourly_legacy;"
                    " CREATE TABLE requests_legacy PARTITION OF requests"
                    " FOR VALUES FROM (MINVALUE) TO ('2026-01-01 UTC');"
                    " CREATE TABLE placements_legacy PARTITION OF placements"
                    " FOR VALUES FROM (MINVALUE) TO ('2026-01-01 UTC');"
                    " CREATE TABLE usage_hourly_legacy PARTITION OF usage_hourly"
                    " FOR VALUES FROM (MINVALUE) TO ('2026-01-01 UTC');"
                    " UPDATE history_partitions SET legacy_upper = '2026-01-01 UTC' RETURNING 1"),
                IsOk());
    auto store = store::PgStore::Create({db_->dsn(), 2});
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    auto archive = store::HistoryArchiveStore::Connect(db_->dsn());
    ASSERT_THAT(archive, IsOk());
    archive_ = std::move(*archive);
    char tmpl[] = "/tmp/arbiter-history-XXXXXX";
    const char* dir = mkdtemp(tmpl);
    ASSERT_NE(dir, nullptr);
    dir_ = dir;

    auto loaded = store_->LoadState();
    ASSERT_THAT(loaded, IsOk());
    state_ = std::move(*loaded);
    const absl::Time t0 = Day(2026, 3, 2);
    core::ChangeSet ch;
    ASSERT_THAT(core::CreateCluster(state_, {"east", ""}, ch), IsOk());
    ASSERT_THAT(core::CreatePool(state_, {"serving", core::LatencyClass::kServing, ""}, ch),
                IsOk());
    ASSERT_THAT(core::CreateTeam(state_, {"t", "", 1000}, ch), IsOk());
    ASSERT_THAT(core::SetQuota(state_, {"t", "serving", 8000}, t0, ch), IsOk());
    core::Node node = MakeNode("n1", 8, "H100-80GB");
    node.cluster = "east";
    ASSERT_THAT(core::RegisterNode(state_, node, t0, ch), IsOk());
    ASSERT_THAT(store_->Commit(ch, {t0}), IsOk());
    // `a`: admitted in March, released in April. `b`: admitted in March,
    // still live. `c`: admitted in May, released in June.
    a_ = Admit("a", t0);
    b_ = Admit("b", t0);
    Release(a_, Day(2026, 4, 10));
    c_ = Admit("c", Day(2026, 5, 3));
    Release(c_, Day(2026, 6, 7));
    // Two hours of `b`'s usage in March, and its team's rollups.
    ASSERT_THAT(db_->QueryValue(absl::StrCat(
                    "INSERT INTO usage_hourly SELECT timestamptz '2026-03-02 UTC' + g * interval"
                    " '1 hour', ",
                    b_,
                    ", 0, 't', 'serving', 'training', 'H100-80GB', 3600000, 3600000, 1800000,"
                    " 500, 1024, 700, now() FROM generate_series(0, 1) g;"
                    " INSERT INTO usage_team_hourly SELECT hour, team, pool, workload_class,"
                    " gpu_model, allocated_milli_seconds, sampled_milli_seconds,"
                    " used_milli_seconds, peak_busy_milli, peak_memory_mib, energy_mwh"
                    " FROM usage_hourly RETURNING 1")),
                IsOk());
  }

  void TearDown() override {
    if (!dir_.empty()) system(absl::StrCat("rm -rf ", dir_).c_str());
  }

  int64_t Admit(const std::string& key, absl::Time at) {
    core::ChangeSet ch;
    auto out = core::RequestCapacity(state_, WholeSpec(key, 1, 1), at, ch);
    EXPECT_THAT(out, IsOk());
    EXPECT_EQ(out->request.state, core::RequestState::kAdmitted);
    EXPECT_THAT(store_->Commit(ch, {at}), IsOk());
    return out->request.id;
  }

  void Release(int64_t id, absl::Time at) {
    core::ChangeSet ch;
    ASSERT_THAT(core::ReleaseRequest(state_, id, at, ch), IsOk());
    ASSERT_THAT(store_->Commit(ch, {at}), IsOk());
  }

  std::string Query(const std::string& sql) {
    auto value = db_->QueryValue(sql);
    EXPECT_THAT(value, IsOk()) << sql;
    return value.ok() ? *value : "";
  }

  HistoryRetentionOptions Options(int keep_months) {
    HistoryRetentionOptions options;
    options.out_dir = dir_;
    options.keep_months = keep_months;
    options.now = absl::Now();
    return options;
  }

  // "name:rows" of each archived partition, in order.
  static std::string Summary(const std::vector<ArchivedHistory>& archived) {
    return absl::StrJoin(archived, ",", [](std::string* out, const ArchivedHistory& a) {
      absl::StrAppend(out, a.name, ":", a.exported.rows);
    });
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<store::PgStore> store_;
  std::unique_ptr<store::HistoryArchiveStore> archive_;
  std::string dir_;
  core::State state_;
  int64_t a_ = 0, b_ = 0, c_ = 0;
};

// Closed months go to files, oldest first, and leave the database; the
// placements month a live request still holds stays until it ends.
TEST_F(HistoryRetentionTest, ClosedMonthsGoToFilesAndWhatIsLiveStays) {
  HistoryRetentionOptions dry = Options(3);
  dry.dry_run = true;
  auto would = ArchiveClosedHistory(*archive_, dry);
  ASSERT_THAT(would, IsOk());
  EXPECT_EQ(Query("SELECT count(*) FROM history_archives"), "0");

  auto archived = ArchiveClosedHistory(*archive_, Options(3));
  ASSERT_THAT(archived, IsOk());
  EXPECT_EQ(Summary(*archived),
            "placements_legacy:0,requests_legacy:0,usage_hourly_legacy:0,"
            "requests_y2026m03:0,usage_hourly_y2026m03:2,usage_team_hourly_y2026m03:2,"
            "placements_y2026m04:0,requests_y2026m04:1,usage_hourly_y2026m04:0,"
            "usage_team_hourly_y2026m04:0,"
            "placements_y2026m05:1,requests_y2026m05:0,usage_hourly_y2026m05:0,"
            "usage_team_hourly_y2026m05:0,"
            "placements_y2026m06:0,requests_y2026m06:1,usage_hourly_y2026m06:0,"
            "usage_team_hourly_y2026m06:0");
  ASSERT_EQ(would->size(), archived->size());
  EXPECT_EQ((*would)[7].exported.file, (*archived)[7].exported.file);

  // The file: the header naming the columns, then `a`'s row, whole.
  const ArchivedHistory& april = (*archived)[7];
  const std::string text = ReadFile(april.exported.file);
  EXPECT_EQ(ledger::Sha256Hex(text), april.exported.sha256);
  const std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].rfind(absl::StrCat(kHistoryArchiveHeader,
                                        " requests_y2026m04 of requests: id,idempotency_key,"),
                           0),
            0u)
      << lines[0];
  EXPECT_THAT(lines[0], HasSubstr(",ended_at"));
  const std::vector<std::string> fields = absl::StrSplit(lines[1], '\t');
  EXPECT_EQ(fields[0], absl::StrCat(a_));
  EXPECT_EQ(fields[1], "a");
  // Columns added by later migrations follow the partition key.
  const std::vector<std::string> columns =
      absl::StrSplit(lines[0].substr(lines[0].find(": ") + 2), ',');
  const size_t ended_at =
      static_cast<size_t>(std::find(columns.begin(), columns.end(), "ended_at") - columns.begin());
  ASSERT_LT(ended_at, fields.size());
  EXPECT_EQ(fields[ended_at], "2026-04-10 00:00:00+00");

  // Out of the database, recorded; the live request and its month stay.
  EXPECT_EQ(Query("SELECT to_regclass('requests_y2026m04') IS NULL"), "t");
  EXPECT_EQ(Query("SELECT count(*) FROM history_archives"), "18");
  EXPECT_EQ(Query("SELECT count(*) FROM placements_y2026m03"), "2");
  EXPECT_THAT(store_->GetRequest(a_), StatusIs(absl::StatusCode::kNotFound));
  auto b = store_->GetRequest(b_);
  ASSERT_THAT(b, IsOk());
  EXPECT_EQ(b->placements.size(), 1u);
  auto reloaded = store_->LoadState();
  ASSERT_THAT(reloaded, IsOk());
  EXPECT_EQ(reloaded->live_requests().size(), 1u);
  // `c`, the newest request, is archived: ids still go on after it.
  EXPECT_EQ(reloaded->next_request_id(), c_ + 1);
  // An archived month is not made again: a row dated in it has nowhere to go.
  EXPECT_EQ(Query("SELECT arbiter_ensure_month_partitions('2026-04-20');"
                  " SELECT to_regclass('requests_y2026m04') IS NULL"),
            "t");

  // Once `b` ends (now), its admission month goes too.
  auto again = ArchiveClosedHistory(*archive_, Options(3));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(Summary(*again), "");
  Release(b_, absl::Now());
  again = ArchiveClosedHistory(*archive_, Options(3));
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(Summary(*again), "placements_y2026m03:2");
}

// The database refuses what would lose rows: a month not over, a count that
// is not what the partition holds, a placements month still held, and
// anything that is not a history partition. Nothing is changed.
TEST_F(HistoryRetentionTest, TheDatabaseRefusesARetirementThatWouldLoseRows) {
  auto partitions = archive_->ListPartitions();
  ASSERT_THAT(partitions, IsOk());
  auto find = [&](const std::string& name) {
    for (const store::HistoryPartition& p : *partitions) {
      if (p.name == name) return p;
    }
    ADD_FAILURE() << name;
    return store::HistoryPartition{};
  };
  const std::string digest(64, 'a');
  // The month of now is not over (the commit of `b`'s release makes it).
  Release(b_, absl::Now());
  partitions = archive_->ListPartitions();
  ASSERT_THAT(partitions, IsOk());
  const std::string this_month =
      absl::FormatTime("requests_y%Ym%m", absl::Now(), absl::UTCTimeZone());
  EXPECT_THAT(archive_->Retire(find(this_month), {1, "f", digest}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is not over")));
  EXPECT_THAT(archive_->Retire(find("requests_y2026m04"), {2, "f", digest}),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("holds 1 rows, not the 2 exported")));
  ASSERT_THAT(db_->QueryValue("UPDATE requests SET state = 'admitted', ended_at = 'infinity'"
                              " WHERE idempotency_key = 'c' RETURNING 1"),
              IsOk());
  EXPECT_THAT(archive_->Retire(find("placements_y2026m05"), {1, "f", digest}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("live placements")));
  store::HistoryPartition live{"requests", "requests_live_partition", std::nullopt,
                               absl::InfiniteFuture()};
  EXPECT_THAT(archive_->Retire(live, {1, "f", digest}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a monthly")));
  EXPECT_EQ(Query("SELECT count(*) FROM history_archives"), "0");
  EXPECT_EQ(Query("SELECT count(*) FROM requests"), "3");
  // The record of archives is append-only.
  ASSERT_THAT(archive_->Retire(find("requests_y2026m04"), {1, "f", digest}), IsOk());
  EXPECT_THAT(db_->QueryValue("UPDATE history_archives SET file = 'elsewhere'"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("append-only")));
}

// As an operator runs it: `arbiterd archive-history`, dry run first.
TEST_F(HistoryRetentionTest, ArbiterdArchivesTheClosedMonths) {
  const std::string arbiterd = ::arbiter::testing::BinaryPath("server/arbiterd");
  const std::string command = absl::StrCat(arbiterd, " archive-history --dsn '", db_->dsn(),
                                           "' --out ", dir_, " --keep-months 3");
  CommandResult dry = RunShell(command + " --dry-run");
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_THAT(dry.output, HasSubstr(absl::StrCat("would archive requests_y2026m04 to ", dir_,
                                                 "/requests_y2026m04.copy")));
  EXPECT_EQ(Query("SELECT count(*) FROM history_archives"), "0");
  CommandResult done = RunShell(command);
  ASSERT_EQ(done.exit_code, 0) << done.output;
  EXPECT_THAT(done.output, HasSubstr(absl::StrCat("archived requests_y2026m04: 1 rows, to ", dir_,
                                                  "/requests_y2026m04.copy (sha256 ")));
  EXPECT_EQ(Query("SELECT count(*) FROM history_archives"), "18");
  CommandResult nothing = RunShell(command);
  ASSERT_EQ(nothing.exit_code, 0) << nothing.output;
  EXPECT_THAT(nothing.output, HasSubstr("nothing to archive"));
}

}  // namespace
}  // namespace arbiter::server
