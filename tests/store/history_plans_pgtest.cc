// The store's frequent reads on a database holding a year of history: each
// is run as arbiterd's read connections run it (sql::PrepareAll's session
// settings: custom plans), under EXPLAIN ANALYZE,
// and must read the history tables (requests, placements) through an index
// and touch rows in proportion to what it returns and to the live state,
// not to the history. A read that scans grows with every decision ever made
// and slows the service over months (docs/performance.md, "Reads that do not
// grow with history").
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/civil_time.h"
#include "gtest/gtest.h"
#include <pqxx/pqxx>

#include "store/postgres/statements.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/plan_reads.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::store {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::PartitionParents;
using ::arbiter::testing::PlanReads;
using ::arbiter::testing::ReadsOfPlan;
using ::arbiter::testing::TestDatabase;

// Requests numbered by g, 20 teams in 4 pools, one whole GPU each; the
// caller's SELECT list goes on from the state: state, created_at,
// updated_at, admitted_at, gpu_milli_per_member, cost_micros, ended_at.
constexpr char kInsertRequestRows[] =
    "INSERT INTO requests (id, idempotency_key, body_hash, team, pool, workload_class,"
    " members, whole_gpus, fraction_milli, fraction_memory_mib, cpu_milli, memory_mib,"
    " gpu_models, description, state, created_at, updated_at, admitted_at,"
    " gpu_milli_per_member, cost_micros, ended_at)"
    " SELECT g, 'key-' || g, g, 'team' || (g % 20), 'pool' || (g % 4), 'training', 1, 1, 0,"
    " 0, 0, 0, '{}', '', ";
// A placement for every request, admitted when it was.
constexpr char kInsertPlacementPerRequest[] =
    "INSERT INTO placements (request_id, member, node_id, gpu_indices, gpu_milli,"
    " gpu_memory_mib, cpu_milli, memory_mib, exclusive, admitted_at)"
    " SELECT r.id, 0, 1 + r.id % 100, ARRAY[r.id % 8], 1000, 81920, 0, 0, true,"
    " r.admitted_at FROM requests r";

constexpr int kEnded = 300000;  // Over the twelve months of 2027.
constexpr int kLive = 500;      // Admitted, at the end of the year.

int64_t Micros(int year, int month, int day) {
  return absl::ToUnixMicros(absl::FromCivil(absl::CivilDay(year, month, day), absl::UTCTimeZone()));
}

class HistoryPlansTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { Open(&Fill); }

  // A database from the template, filled by `fill`, and the connection that
  // reads it with the statements prepared as arbiterd prepares them.
  static void Open(void (*fill)()) {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = db->release();
    conn_ = new pqxx::connection(db_->dsn());
    fill();
    sql::PrepareAll(*conn_);
  }

  static void Fill() {
    pqxx::nontransaction tx(*conn_);
    EnsureRequestPartitions(tx);
    // A year of ended requests, 20 teams in 4 pools, each with its
    // placement, then the live ones; what the month's ended requests cost.
    tx.exec(absl::StrCat(
        kInsertRequestRows, "CASE WHEN g > ", kEnded,
        " THEN 'admitted' ELSE 'released' END, t, t + interval '2 hours',",
        " t + interval '1 minute', 1000, 5000, CASE WHEN g > ", kEnded,
        " THEN 'infinity' ELSE t + interval '2 hours' END FROM generate_series(1, ", kEnded + kLive,
        ") g, LATERAL (SELECT timestamptz '2027-01-01 UTC' + g * (interval '365 days' / ",
        kEnded + kLive, ") AS t) x"));
    tx.exec(kInsertPlacementPerRequest);
    tx.exec(
        "INSERT INTO ended_spend SELECT team, date_trunc('month', admitted_at, 'UTC'),"
        " sum(cost_micros) FROM requests WHERE state = 'released' GROUP BY 1, 2");
    tx.exec("ANALYZE");
  }

  // The partitions of the months of 2027 and of January 2028, as the
  // leader makes them (migration 0033).
  static void EnsureRequestPartitions(pqxx::transaction_base& tx) {
    tx.exec(
        "SELECT arbiter_ensure_month_partitions(m::date) FROM generate_series("
        "date '2027-01-01', date '2028-01-01', interval '1 month') m");
  }

  // Each partition of a partitioned table, by name, and its table.
  static PartitionParents Parents() {
    pqxx::nontransaction tx(*conn_);
    PartitionParents parents;
    for (const pqxx::row& row :
         tx.exec("SELECT c.relname, p.relname FROM pg_inherits i"
                 " JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent")) {
      parents[row[0].as<std::string>()] = row[1].as<std::string>();
    }
    return parents;
  }

  static void TearDownTestSuite() {
    delete conn_;
    conn_ = nullptr;
    delete db_;
    db_ = nullptr;
  }

  // EXPLAIN ANALYZE of the prepared statement `name` with `args` (SQL
  // literals).
  static PlanReads Explain(const std::string& name, const std::vector<std::string>& args) {
    const PartitionParents parents = Parents();
    return ReadsOfPlan(ExplainJson(name, args), parents);
  }

  // The same plan as EXPLAIN (FORMAT JSON) gives it.
  static std::string ExplainJson(const std::string& name, const std::vector<std::string>& args) {
    const std::string text = sql::StatementText(name);
    EXPECT_FALSE(text.empty()) << name;
    pqxx::nontransaction tx(*conn_);
    tx.exec(absl::StrCat("PREPARE explained_", name, " AS ", text));
    const pqxx::result r = tx.exec(
        absl::StrCat("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE explained_", name,
                     args.empty() ? "" : absl::StrCat("(", absl::StrJoin(args, ", "), ")")));
    tx.exec(absl::StrCat("DEALLOCATE explained_", name));
    return r[0][0].as<std::string>();
  }

  static TestDatabase* db_;
  static pqxx::connection* conn_;
};

TestDatabase* HistoryPlansTest::db_ = nullptr;
pqxx::connection* HistoryPlansTest::conn_ = nullptr;

struct Read {
  const char* statement;
  std::vector<std::string> args;
  // Rows of requests and placements touched; -1: placements may be
  // scanned, and the rows are not bounded.
  int64_t max_history_rows;
};

TEST_F(HistoryPlansTest, FrequentReadsTouchTheLiveStateAndTheirPageNotTheHistory) {
  const std::string december = absl::StrCat(Micros(2027, 12, 1));
  const std::string january_next = absl::StrCat(Micros(2028, 1, 1));
  // The idempotency window's start: the last 10 minutes of the year.
  const std::string window = absl::StrCat(Micros(2028, 1, 1) - 600'000'000);
  const std::string year_end = absl::StrCat(Micros(2028, 1, 1));
  const std::string last_minute = absl::StrCat(Micros(2028, 1, 1) - 60'000'000);
  const std::vector<Read> reads = {
      // GetRequest; the requests page of a team, and the next page. A team
      // with a twentieth of the rows is read newest first through the
      // primary key, filtered: about twenty rows per row returned.
      {sql::kSelectRequest, {"4242"}, 1},
      {sql::kSelectRequests, {"'team7'", "''", "0", "100"}, 25 * 100},
      {sql::kSelectRequests, {"'team7'", "''", "150000", "100"}, 25 * 100},
      // Start-up: the live requests and placements, the window's keys.
      {sql::kSelectLiveRequests, {}, kLive},
      {sql::kSelectLivePlacements, {}, 3 * kLive},
      {sql::kSelectEndedKeys, {window}, 2 * kLive},
      // By id: each month's partition is probed; a scan of a partition of
      // a few rows is allowed within the bound.
      {sql::kSelectPlacementsOf, {"'{4242,4243,4244}'"}, 10},
      // Budget reports and /metrics: the month's spend.
      {sql::kSelectMonthSpend, {december, january_next}, kLive},
      // Each latency report's attribution (a window of a minute) and the
      // telemetry rollups: who held and who waited in the window. The
      // live requests and those ended since the window's start are read,
      // whatever the team.
      {sql::kSelectHeldMembers, {last_minute, year_end}, 3 * kLive},
      {sql::kSelectWaitingRequests, {"'team7'", "'pool3'", last_minute, year_end}, 3 * kLive},
      // Finance's statement of December: what the cluster held in it. The
      // month's ended requests are in December's partition and the live
      // ones in the live partition; their placements are partitioned by
      // admission, which may be any month before, so the planner may scan
      // those months' placements: not bounded here.
      {sql::kSelectClusterReserved, {december, january_next}, -1},
      // /metrics: what waits and what is allocated.
      {sql::kSelectStateCounts, {}, 2 * kLive},
      {sql::kSelectAllocatedGauges, {}, 3 * kLive},
  };
  const PartitionParents parents = Parents();
  for (const Read& read : reads) {
    SCOPED_TRACE(read.statement);
    PlanReads plan = Explain(read.statement, read.args);
    for (const std::string& table : plan.seq_scanned) {
      // The live partition holds the live requests only; the others, and
      // placements, hold history. Scanning a partition of a few rows (the
      // month to come) is within the read's bound; a read of a period may
      // scan its months.
      const auto parent = parents.find(table);
      const std::string of = parent != parents.end() ? parent->second : table;
      const bool history =
          of == "placements" || (of == "requests" && table != "requests_live_partition");
      const bool allowed =
          read.max_history_rows < 0 || plan.seq_rows_touched[table] <= read.max_history_rows;
      EXPECT_TRUE(allowed || !history)
          << "scans " << table << ": " << plan.seq_rows_touched[table] << " rows";
    }
    if (read.max_history_rows >= 0) {
      EXPECT_LE(plan.rows_touched["requests"] + plan.rows_touched["placements"],
                read.max_history_rows);
    }
  }
}

// The idempotency key lookup runs before every new request (PgStore's key
// lookups, planned once: sql::PrepareKeyLookups). With its plan made while
// the table was empty, and on a table that grew since the last ANALYZE,
// which said it was empty, it must find the keys through
// requests_ended_key, not read the window's ended requests by time and
// filter them by key: over a window of a year, that is every row.
class KeyLookupPlanTest : public HistoryPlansTest {
 protected:
  static void SetUpTestSuite() {
    Open(+[] {
      pqxx::nontransaction tx(*conn_);
      EnsureRequestPartitions(tx);
      tx.exec("ANALYZE requests");
    });
  }
};

TEST_F(KeyLookupPlanTest, OnATableThatGrewSinceItsLastAnalyzeItReadsOnlyTheKeysAsked) {
  pqxx::connection lookups(db_->dsn());
  sql::PrepareKeyLookups(lookups);
  const std::string year = absl::StrCat(Micros(2027, 1, 1));
  pqxx::nontransaction tx(lookups);
  tx.exec_prepared(sql::kFindEndedKeys, "{key-1}", year);  // On no rows.
  {
    pqxx::nontransaction fill(*conn_);  // No ANALYZE: the statistics say empty.
    fill.exec(
        "INSERT INTO requests (id, idempotency_key, body_hash, team, pool, workload_class,"
        " members, whole_gpus, fraction_milli, fraction_memory_mib, cpu_milli, memory_mib,"
        " gpu_models, description, state, created_at, updated_at, ended_at)"
        " SELECT g, 'key-' || g, g, 't', 'p', 'training', 1, 1, 0, 0, 0, 0, '{}', '', 'released',"
        " t, t + interval '1 hour', t + interval '1 hour' FROM generate_series(1, 50000) g,"
        " LATERAL (SELECT timestamptz '2027-01-01 UTC' + g * interval '10 minutes' AS t) x");
  }
  const pqxx::result r =
      tx.exec(absl::StrCat("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ", sql::kFindEndedKeys,
                           "('{key-4242,key-4243,no-such-key}', ", year, ")"));
  PlanReads plan = ReadsOfPlan(r[0][0].as<std::string>(), Parents());
  for (const std::string& table : plan.seq_scanned) {
    EXPECT_EQ(plan.seq_rows_touched[table], 0) << "scans " << table;  // Only empty ones.
  }
  // Each key asked is looked up by its index: at most its one ended row
  // (EXPLAIN's rows per loop are rounded, so three loops that found two
  // rows read as three).
  EXPECT_LE(plan.rows_touched["requests"], 3) << r[0][0].as<std::string>();
}

// The telemetry rollups, idle tracking and SLO attribution ask who held
// capacity in a window of a minute or so, many times an hour. Under load the
// current month's partition holds hundreds of thousands of requests that
// ended before the window: the read must find the window's through
// requests_ended (by when they ended), not by reading the month's partition
// (measured in a soak: 1-3 s per read and growing through the month).
class HeldMembersPlanTest : public HistoryPlansTest {
 protected:
  // The index conditions of the plan's scans of a requests primary key.
  static std::vector<std::string> PrimaryKeyConditions(const nlohmann::json& node) {
    std::vector<std::string> out;
    const std::string index = node.value("Index Name", "");
    if (index.rfind("requests", 0) == 0 && index.find("pkey") != std::string::npos) {
      out.push_back(node.value("Index Cond", "(none)"));
    }
    if (node.contains("Plans")) {
      for (const nlohmann::json& child : node["Plans"]) {
        for (std::string& c : PrimaryKeyConditions(child)) out.push_back(std::move(c));
      }
    }
    return out;
  }

  static constexpr int kEndedBefore = 200000;  // In December, before the window.
  static constexpr int kEndedIn = 300;         // In the window, the last minute.

  static void SetUpTestSuite() {
    Open(+[] {
      pqxx::nontransaction tx(*conn_);
      EnsureRequestPartitions(tx);
      // Ids 1..kEndedBefore end through December; the next kEndedIn in the
      // last minute of the year; the last kLive are live. Each was admitted
      // an hour before it ended (the live ones in the last hour).
      tx.exec(absl::StrCat(kInsertRequestRows,
                           "CASE WHEN live THEN 'admitted' ELSE 'released' END,"
                           " e - interval '1 hour', e, e - interval '1 hour', 1000, 0,"
                           " CASE WHEN live THEN 'infinity' ELSE e END FROM generate_series(1, ",
                           kEndedBefore + kEndedIn + kLive, ") g, LATERAL (SELECT g > ",
                           kEndedBefore + kEndedIn, " AS live, CASE WHEN g <= ", kEndedBefore,
                           " THEN timestamptz '2027-12-01 UTC' + g * (interval '30 days' / ",
                           kEndedBefore, ") ELSE timestamptz '2027-12-31 23:59:30 UTC' + (g - ",
                           kEndedBefore, ") * interval '1 millisecond' END AS e) x"));
      tx.exec(kInsertPlacementPerRequest);
      tx.exec("ANALYZE");
    });
  }
};

TEST_F(HeldMembersPlanTest, AMinuteOfAFullMonthReadsTheMinuteNotTheMonth) {
  const int64_t year_end = Micros(2028, 1, 1);
  const int64_t last_minute = year_end - 60'000'000;
  const std::string json =
      ExplainJson(sql::kSelectHeldMembers, {absl::StrCat(last_minute), absl::StrCat(year_end)});
  PlanReads plan = ReadsOfPlan(json, Parents());
  {
    pqxx::nontransaction tx(*conn_);
    EXPECT_EQ(tx.exec_prepared(sql::kSelectHeldMembers, last_minute, year_end).size(),
              static_cast<size_t>(kEndedIn + kLive));
  }
  for (const std::string& table : plan.seq_scanned) {
    // The live partition holds the live state; any other scanned whole must
    // be a month of a few rows (here November's placements of the requests
    // that ended early on December 1).
    if (table == "requests_live_partition") continue;
    EXPECT_LE(plan.seq_rows_touched[table], kEndedIn + kLive) << "scans " << table << "\n" << json;
  }
  // A primary key (id, ended_at) searched without its id reads the whole
  // index of the month: EXPLAIN counts only the rows it returns.
  for (const std::string& cond :
       PrimaryKeyConditions(nlohmann::json::parse(json).at(0).at("Plan"))) {
    EXPECT_NE(cond.find("id ="), std::string::npos) << "a primary key scanned by " << cond;
  }
  // Each member held is read once from requests and once from placements,
  // and once more as an id: about three rows per row returned.
  EXPECT_LE(plan.rows_touched["requests"] + plan.rows_touched["placements"], 4 * (kEndedIn + kLive))
      << json;
}

// A day of raw samples, 100 GPUs every 30 s, laid out in time order as
// agents send them: the rollup's read of a minute must touch that minute's
// block ranges (the BRIN index on `at`), not scan the day's partition.
class SamplePlansTest : public HistoryPlansTest {
 protected:
  static constexpr int kGpus = 100;
  static constexpr int kPerDay = 2880;  // Every 30 s.

  static void SetUpTestSuite() { Open(&FillSamples); }

  static void FillSamples() {
    pqxx::nontransaction tx(*conn_);
    tx.exec("SELECT arbiter_ensure_sample_partition('2027-03-01')");
    tx.exec(absl::StrCat(
        "INSERT INTO gpu_samples SELECT t, 1 + g / 8, g % 8, -1, '', 30000, 500, -1, 1000, 1000,"
        " 50000, '', '' FROM generate_series(0, ",
        kPerDay - 1, ") i, generate_series(0, ", kGpus - 1,
        ") g, LATERAL (SELECT timestamptz '2027-03-01 UTC' + i * interval '30 s' AS t) x"
        " ORDER BY i, g"));
    // What autovacuum does as the day's block ranges fill (autosummarize).
    tx.exec("VACUUM ANALYZE gpu_samples");
  }
};

TEST_F(SamplePlansTest, ARollupSliceReadsItsMinuteNotTheDay) {
  const std::string from = absl::StrCat(Micros(2027, 3, 1) + int64_t{13} * 3600 * 1000000);
  const std::string to = absl::StrCat(Micros(2027, 3, 1) + int64_t{13} * 3600 * 1000000 + 60000000);
  PlanReads plan = Explain(sql::kSelectSamples, {from, to});
  int64_t touched = 0;
  for (const auto& [table, rows] : plan.rows_touched) {
    if (table.rfind("gpu_samples", 0) == 0) touched += rows;
  }
  for (const std::string& table : plan.seq_scanned) {
    EXPECT_NE(table.rfind("gpu_samples", 0), 0u) << "scans " << table;
  }
  // The minute holds 200 samples; a BRIN block range holds some thousands.
  std::cout << "a minute's read touched " << touched << " of " << kGpus * kPerDay
            << " samples of the day\n";
  EXPECT_GE(touched, 2 * kGpus);
  EXPECT_LE(touched, kGpus * kPerDay / 10);
}

}  // namespace
}  // namespace arbiter::store
