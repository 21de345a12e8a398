// Ledger retention on a real PostgreSQL: the ledger in monthly partitions
// (migration 0030), closed months exported to archive files and taken out
// of the database, the chain verified from genesis across the files and the
// database, the refusals that keep it whole, and the plans of the ledger's
// queries on a year of history.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "core/arbitration.h"
#include "ledger/archive.h"
#include "ledger/chain.h"
#include "server/ledger_retention.h"
#include "store/postgres/ledger_archive.h"
#include "store/postgres/pg_store.h"
#include "tests/core/test_state.h"
#include "tests/testing/arbiterd_process.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/plan_reads.h"
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
using ::testing::HasSubstr;

absl::Time Day(int year, int month, int day) {
  return absl::FromCivil(absl::CivilDay(year, month, day), absl::UTCTimeZone());
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/arbiter-archive-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir == nullptr ? std::string() : std::string(dir);
}

// The entries of an archive file, parsed; fails the test on a bad line.
std::vector<ledger::Entry> ReadArchive(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<ledger::Entry> out;
  EXPECT_TRUE(std::getline(in, line)) << path;
  EXPECT_EQ(line, ledger::kArchiveHeader);
  while (std::getline(in, line)) {
    auto entry = ledger::ParseArchiveLine(line);
    EXPECT_THAT(entry, IsOk()) << path << ": " << line;
    if (entry.ok()) out.push_back(*entry);
  }
  return out;
}

class LedgerRetentionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
    auto store = store::PgStore::Create({db_->dsn(), 2});
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
    auto archive = store::LedgerArchiveStore::Connect(db_->dsn());
    ASSERT_THAT(archive, IsOk());
    archive_ = std::move(*archive);
    auto loaded = store_->LoadState();
    ASSERT_THAT(loaded, IsOk());
    state_ = std::move(*loaded);
    core::ChangeSet ch;
    ASSERT_THAT(core::CreateCluster(state_, {"east", "H100 cluster"}, ch), IsOk());
    ASSERT_THAT(core::CreatePool(state_, {"serving", core::LatencyClass::kServing, ""}, ch),
                IsOk());
    ASSERT_THAT(core::CreateTeam(state_, {"t", "", 2000}, ch), IsOk());
    core::Node node = MakeNode("n1", 4, "H100-80GB");
    node.cluster = "east";
    ASSERT_THAT(core::RegisterNode(state_, node, Day(2026, 1, 5), ch), IsOk());
    ASSERT_THAT(store_->Commit(ch, {Day(2026, 1, 5), {}}), IsOk());
    dir_ = MakeTempDir();
    ASSERT_FALSE(dir_.empty());
  }

  // Commits `n` quota changes (one ledger entry each) at `at`.
  absl::Status WriteEntries(absl::Time at, int n) {
    for (int i = 0; i < n; ++i) {
      core::ChangeSet ch;
      absl::Status set = core::SetQuota(state_, {"t", "serving", 1000 + 10 * (n_++ % 100)}, at, ch);
      if (!set.ok()) return set;
      absl::Status committed = store_->Commit(ch, {at, {}});
      if (!committed.ok()) return committed;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<ArchivedPartition>> Archive(int keep_months) {
    RetentionOptions options;
    options.out_dir = dir_;
    options.keep_months = keep_months;
    return ArchiveClosedMonths(*archive_, options);
  }

  // Every entry from genesis: the archive files in order, then the database.
  std::vector<ledger::Entry> WholeChain(const std::vector<std::string>& files) {
    std::vector<ledger::Entry> all;
    for (const std::string& f : files) {
      for (ledger::Entry& e : ReadArchive(absl::StrCat(dir_, "/", f))) all.push_back(e);
    }
    auto stored = store_->ListLedger(store::LedgerFilter{0, 100000, "", "", ""});
    EXPECT_THAT(stored, IsOk());
    if (stored.ok()) all.insert(all.end(), stored->begin(), stored->end());
    return all;
  }

  std::string Query(const std::string& sql) {
    auto value = db_->QueryValue(sql);
    EXPECT_THAT(value, IsOk()) << sql;
    return value.value_or("");
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<store::PgStore> store_;
  std::unique_ptr<store::LedgerArchiveStore> archive_;
  core::State state_;
  std::string dir_;
  int n_ = 0;
};

TEST_F(LedgerRetentionTest, ClosedMonthsGoToFilesAndTheChainStillVerifiesFromGenesis) {
  // January (before this migration ran: the legacy partition), then four
  // months of 2027, each in its own partition.
  ASSERT_THAT(WriteEntries(Day(2027, 1, 20), 30), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 2, 10), 20), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 3, 31) + absl::Hours(23), 10), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 4, 1), 5), IsOk());
  EXPECT_EQ(Query("SELECT string_agg(name, ',' ORDER BY to_at) FROM ledger_partitions"),
            "ledger_legacy,ledger_y2027m01,ledger_y2027m02,ledger_y2027m03,ledger_y2027m04");
  const std::string total = Query("SELECT count(*) FROM ledger");

  // Keep one closed month (March) beside April's.
  auto archived = Archive(1);
  ASSERT_THAT(archived, IsOk());
  ASSERT_EQ(archived->size(), 3u);
  EXPECT_EQ((*archived)[0].name, "ledger_legacy");
  EXPECT_EQ((*archived)[1].name, "ledger_y2027m01");
  EXPECT_EQ((*archived)[1].exported.entries, 30);
  EXPECT_EQ((*archived)[2].name, "ledger_y2027m02");
  EXPECT_EQ((*archived)[2].exported.entries, 20);
  EXPECT_EQ(Query("SELECT string_agg(tableoid::regclass::text, ',' ORDER BY seq)"
                  " FROM (SELECT DISTINCT ON (tableoid) tableoid, seq FROM ledger) t"),
            "ledger_y2027m03,ledger_y2027m04");
  EXPECT_EQ(Query("SELECT count(*) FROM ledger"), "15");
  EXPECT_EQ(Query("SELECT count(*) FROM pg_tables WHERE tablename = 'ledger_y2027m01'"), "0");
  EXPECT_EQ(Query("SELECT min(seq) FROM ledger"),
            absl::StrCat((*archived)[2].exported.last_seq + 1));

  // The files and the database together are the whole chain.
  std::vector<ledger::Entry> chain =
      WholeChain({"ledger_legacy.ledger", "ledger_y2027m01.ledger", "ledger_y2027m02.ledger"});
  EXPECT_EQ(absl::StrCat(chain.size()), total);
  const ledger::Verdict verdict = ledger::VerifyChain(chain, 0, ledger::kGenesisHash);
  EXPECT_TRUE(verdict.ok) << verdict.first_bad_seq << ": " << verdict.problem;
  EXPECT_EQ(verdict.count, static_cast<int64_t>(chain.size()));

  // Again: nothing more is closed long enough.
  auto again = Archive(1);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->empty());

  // An entry of an archived month has no partition to go to: refused.
  EXPECT_FALSE(WriteEntries(Day(2027, 2, 11), 1).ok());
  // The leader goes on in April and into May; March then goes too.
  ASSERT_THAT(WriteEntries(Day(2027, 5, 2), 3), IsOk());
  auto march = Archive(1);
  ASSERT_THAT(march, IsOk());
  ASSERT_EQ(march->size(), 1u);
  EXPECT_EQ((*march)[0].name, "ledger_y2027m03");
  chain = WholeChain({"ledger_legacy.ledger", "ledger_y2027m01.ledger", "ledger_y2027m02.ledger",
                      "ledger_y2027m03.ledger"});
  EXPECT_TRUE(ledger::VerifyChain(chain, 0, ledger::kGenesisHash).ok);
  EXPECT_EQ(Query("SELECT count(*) FROM ledger_partitions WHERE archived_at IS NOT NULL"), "4");
}

// As an operator does it: `arbiterd archive-ledger`, then `arbctl ledger
// verify --archive` against a serving arbiterd; a changed archive fails.
TEST_F(LedgerRetentionTest, ArbiterdArchivesAndArbctlVerifiesAcrossTheFiles) {
  ASSERT_THAT(WriteEntries(Day(2027, 1, 20), 12), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 2, 10), 7), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 3, 10), 3), IsOk());
  const std::string total = Query("SELECT count(*) FROM ledger");
  auto served = ::arbiter::testing::ArbiterdProcess::Start(db_->dsn());
  ASSERT_THAT(served, IsOk());
  const std::string arbctl = absl::StrCat(::arbiter::testing::BinaryPath("clients/arbctl"),
                                          " --endpoint ", (*served)->address(), " ledger verify");
  // Before anything is archived, an empty archive directory verifies too.
  CommandResult empty = RunShell(absl::StrCat(arbctl, " --archive ", dir_));
  EXPECT_EQ(empty.exit_code, 0) << empty.output;
  EXPECT_THAT(empty.output, HasSubstr("(0 from 0 archive file(s))"));

  const std::string arbiterd = ::arbiter::testing::BinaryPath("server/arbiterd");
  const std::string dsn = absl::StrCat("'", db_->dsn(), "'");
  CommandResult dry = RunShell(absl::StrCat(arbiterd, " archive-ledger --dsn ", dsn, " --out ",
                                            dir_, " --keep-months 0 --dry-run"));
  ASSERT_EQ(dry.exit_code, 0) << dry.output;
  EXPECT_THAT(dry.output, HasSubstr("would archive ledger_y2027m02"));
  EXPECT_EQ(Query("SELECT count(*) FROM ledger"), total);
  CommandResult archived = RunShell(
      absl::StrCat(arbiterd, " archive-ledger --dsn ", dsn, " --out ", dir_, " --keep-months 0"));
  ASSERT_EQ(archived.exit_code, 0) << archived.output;
  EXPECT_THAT(archived.output, HasSubstr("archived ledger_y2027m01: 12 entries"));
  EXPECT_THAT(archived.output, HasSubstr("archived ledger_y2027m02: 7 entries"));
  EXPECT_EQ(Query("SELECT count(*) FROM ledger"), "3");

  CommandResult whole = RunShell(absl::StrCat(arbctl, " --archive ", dir_));
  EXPECT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_THAT(whole.output, HasSubstr("OK:"));
  const std::string archived_count = absl::StrCat(std::stoi(total) - 3);
  EXPECT_THAT(whole.output, HasSubstr(absl::StrCat("(", archived_count, " from ")));
  // Without the files, the verifier says where they are needed.
  CommandResult bare = RunShell(arbctl);
  EXPECT_EQ(bare.exit_code, 3) << bare.output;
  EXPECT_THAT(bare.output, HasSubstr("--archive"));
  // One archived entry's actor changed: the chain breaks there.
  const std::string january = dir_ + "/ledger_y2027m01.ledger";
  ASSERT_EQ(RunShell(absl::StrCat("sed -i '3s/\\tsystem\\t/\\tmallory\\t/' ", january)).exit_code,
            0);
  ASSERT_EQ(RunShell(absl::StrCat("grep -c mallory ", january)).output, "1\n");
  CommandResult forged = RunShell(absl::StrCat(arbctl, " --archive ", dir_));
  EXPECT_EQ(forged.exit_code, 3) << forged.output;
  EXPECT_THAT(forged.output, HasSubstr("BAD at seq"));
}

TEST_F(LedgerRetentionTest, TheDatabaseRefusesARetirementThatWouldBreakTheChain) {
  ASSERT_THAT(WriteEntries(Day(2027, 1, 20), 4), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 2, 10), 4), IsOk());
  auto partitions = archive_->ListPartitions();
  ASSERT_THAT(partitions, IsOk());
  ASSERT_EQ(partitions->size(), 3u);
  const store::LedgerPartition& legacy = (*partitions)[0];
  const store::LedgerPartition& january = (*partitions)[1];
  const store::LedgerPartition& february = (*partitions)[2];
  auto legacy_entries = archive_->ReadPartition(legacy, 0, 100);
  ASSERT_THAT(legacy_entries, IsOk());
  ASSERT_FALSE(legacy_entries->empty());
  store::ExportedPartition exported{static_cast<int64_t>(legacy_entries->size()),
                                    legacy_entries->front().seq, legacy_entries->back().seq,
                                    legacy_entries->back().hash, "legacy.ledger"};
  // Out of order: January before the legacy partition.
  EXPECT_THAT(archive_->Retire(january, exported),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("older partition")));
  // Not what it holds.
  store::ExportedPartition short_by_one = exported;
  short_by_one.entries -= 1;
  EXPECT_THAT(archive_->Retire(legacy, short_by_one),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("holds")));
  store::ExportedPartition wrong_hash = exported;
  wrong_hash.last_hash = std::string(64, 'f');
  EXPECT_THAT(archive_->Retire(legacy, wrong_hash),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("exported hash")));
  // The month being written is not closed.
  ASSERT_THAT(archive_->Retire(legacy, exported), IsOk());
  auto january_entries = archive_->ReadPartition(january, 0, 100);
  ASSERT_THAT(january_entries, IsOk());
  ASSERT_THAT(
      archive_->Retire(january, {4, january_entries->front().seq, january_entries->back().seq,
                                 january_entries->back().hash, "january.ledger"}),
      IsOk());
  auto february_entries = archive_->ReadPartition(february, 0, 100);
  ASSERT_THAT(february_entries, IsOk());
  EXPECT_THAT(
      archive_->Retire(february, {4, february_entries->front().seq, february_entries->back().seq,
                                  february_entries->back().hash, "february.ledger"}),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not closed")));
  // A retired partition is not retired twice; nothing else changed.
  EXPECT_THAT(archive_->Retire(legacy, exported),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a partition")));
  EXPECT_EQ(Query("SELECT count(*) FROM ledger"), "4");
}

TEST_F(LedgerRetentionTest, AStoredChainThatDoesNotVerifyIsNotArchived) {
  ASSERT_THAT(WriteEntries(Day(2027, 1, 20), 5), IsOk());
  ASSERT_THAT(WriteEntries(Day(2027, 2, 10), 1), IsOk());
  // Rewrite one January entry behind the triggers' back, as a superuser can.
  Query(
      "SET session_replication_role = replica;"
      " UPDATE ledger SET payload = payload || ';forged=1'"
      " WHERE seq = (SELECT min(seq) + 2 FROM ledger_y2027m01)");
  auto archived = Archive(0);
  EXPECT_THAT(archived, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ledger_y2027m01")));
  // The legacy partition (before the forgery) went; January stayed, and
  // left no file behind.
  EXPECT_EQ(Query("SELECT string_agg(name, ',') FROM ledger_partitions WHERE archived_at IS NULL"),
            "ledger_y2027m01,ledger_y2027m02");
  std::ifstream partial(dir_ + "/ledger_y2027m01.ledger.partial");
  EXPECT_FALSE(partial.good());
  std::ifstream file(dir_ + "/ledger_y2027m01.ledger");
  EXPECT_FALSE(file.good());
}

// A year of history, 20,000 entries a month: the ledger's queries read one
// page through the indexes of each partition, never a whole one (but the
// legacy partition, which holds the four entries of the set-up here).
TEST_F(LedgerRetentionTest, LedgerQueriesUseTheIndexesOnAYearOfHistory) {
  for (int month = 1; month <= 12; ++month) {
    Query(absl::StrCat("SELECT arbiter_ensure_ledger_partition('2027-",
                       absl::StrCat(month < 10 ? "0" : "", month), "-01')"));
  }
  Query(
      "INSERT INTO ledger SELECT 1000 + g, timestamptz '2027-01-01 UTC' + (g * interval '130 s'),"
      " 'arbiter', 'request.admitted', 'request/' || (g % 50000), 'k=v', repeat('0', 64),"
      " repeat('1', 64) FROM generate_series(1, 240000) g;"
      " ANALYZE ledger");
  EXPECT_EQ(Query("SELECT count(DISTINCT tableoid) FROM ledger"), "13");
  const std::vector<std::string> queries = {
      "SELECT seq, hash FROM ledger ORDER BY seq DESC LIMIT 1",
      "SELECT * FROM ledger WHERE seq > 120000 ORDER BY seq LIMIT 500",
      "SELECT * FROM ledger WHERE seq > 0 AND subject = 'request/4242' ORDER BY seq LIMIT 100",
  };
  for (const std::string& q : queries) {
    const std::string plan = Query(absl::StrCat("EXPLAIN (FORMAT JSON) ", q));
    EXPECT_THAT(plan, HasSubstr("Index Scan")) << q << "\n" << plan;
    EXPECT_THAT(absl::StrJoin(::arbiter::testing::ReadsOfPlan(plan).seq_scanned, ","),
                ::testing::AnyOf("", "ledger_legacy"))
        << q << "\n"
        << plan;
  }
}

}  // namespace
}  // namespace arbiter::server
