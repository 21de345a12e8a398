#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

#include "core/arbitration.h"
#include "store/migrations.h"
#include "store/postgres/migrator.h"
#include "store/postgres/pg_store.h"
#include "tests/core/test_state.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::store {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::TestDatabase;
using ::arbiter::testing::WholeSpec;
using ::testing::HasSubstr;

class PgStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
    auto store = PgStore::Create({db_->dsn(), 2});
    ASSERT_THAT(store, IsOk());
    store_ = std::move(*store);
  }

  // Loads the (migrated, empty) state and builds a small organisation on it,
  // committing each step.
  core::State BuildAndCommitOrganisation() {
    absl::StatusOr<core::State> loaded = store_->LoadState();
    EXPECT_THAT(loaded, IsOk());
    core::State s = std::move(*loaded);
    core::ChangeSet ch;
    EXPECT_THAT(core::CreateCluster(s, {"east", "H100 cluster"}, ch), IsOk());
    EXPECT_THAT(core::CreatePool(s, {"serving", core::LatencyClass::kServing, ""}, ch), IsOk());
    EXPECT_THAT(core::CreateTeam(s, {"org", "", 1000}, ch), IsOk());
    EXPECT_THAT(core::CreateTeam(s, {"t", "org", 2000}, ch), IsOk());
    EXPECT_THAT(core::SetQuota(s, {"t", "serving", 3000}, kT0, ch), IsOk());
    core::Node node = MakeNode("n1", 4, "H100-80GB");
    node.cluster = "east";
    EXPECT_THAT(core::RegisterNode(s, node, kT0, ch), IsOk());
    EXPECT_THAT(store_->Commit(ch), IsOk());
    return s;
  }

  absl::StatusOr<core::CapacityRequest> Request(core::State& s,
                                                const core::CapacityRequestSpec& spec) {
    core::ChangeSet ch;
    auto out = core::RequestCapacity(s, spec, kT0, ch);
    if (!out.ok()) return out.status();
    absl::Status committed = store_->Commit(ch);
    if (!committed.ok()) return committed;
    return out->request;
  }

  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<PgStore> store_;
};

TEST_F(PgStoreTest, TemplateHasEveryMigrationApplied) {
  EXPECT_THAT(VerifyMigrations(db_->dsn(), EmbeddedMigrations()), IsOk());
  auto report = ApplyMigrations(db_->dsn(), EmbeddedMigrations());
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->applied_before, static_cast<int>(EmbeddedMigrations().size()));
  EXPECT_TRUE(report->applied_now.empty());
}

TEST_F(PgStoreTest, RefusesANewerDatabase) {
  ASSERT_THAT(db_->QueryValue("INSERT INTO schema_migrations VALUES (9999, 'future', 'x')"),
              IsOk());
  EXPECT_THAT(VerifyMigrations(db_->dsn(), EmbeddedMigrations()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("newer")));
  EXPECT_THAT(ApplyMigrations(db_->dsn(), EmbeddedMigrations()),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_F(PgStoreTest, RefusesAnEditedMigration) {
  ASSERT_THAT(db_->QueryValue("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1"),
              IsOk());
  EXPECT_THAT(VerifyMigrations(db_->dsn(), EmbeddedMigrations()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("checksum")));
}

TEST_F(PgStoreTest, RefusesAPendingMigrationUntilApplied) {
  std::vector<Migration> migrations = EmbeddedMigrations();
  migrations.push_back({9000, "add_test_table", "CREATE TABLE migration_probe (x int)"});
  EXPECT_THAT(VerifyMigrations(db_->dsn(), migrations),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not applied")));
  auto report = ApplyMigrations(db_->dsn(), migrations);
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->applied_now, std::vector<int>{9000});
  EXPECT_THAT(VerifyMigrations(db_->dsn(), migrations), IsOk());
}

TEST_F(PgStoreTest, AFailingMigrationAppliesNothing) {
  std::vector<Migration> migrations = EmbeddedMigrations();
  migrations.push_back({9000, "good", "CREATE TABLE probe_a (x int)"});
  migrations.push_back({9001, "bad", "CREATE TABLE probe_b (x nosuchtype)"});
  EXPECT_THAT(ApplyMigrations(db_->dsn(), migrations), StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM schema_migrations WHERE version >= 9000"),
              ::arbiter::testing::IsOkAndHolds(std::string("0")));
  EXPECT_THAT(db_->QueryValue("SELECT to_regclass('probe_a') IS NULL"),
              ::arbiter::testing::IsOkAndHolds(std::string("t")));
}

TEST_F(PgStoreTest, CommittedStateLoadsBackIdentically) {
  core::State s = BuildAndCommitOrganisation();
  auto admitted = Request(s, WholeSpec("a", 1, 2));
  ASSERT_THAT(admitted, IsOk());
  ASSERT_EQ(admitted->state, core::RequestState::kAdmitted);
  core::CapacityRequestSpec together = WholeSpec("b", 1, 2);
  together.topology = core::Topology::kSameNode;
  auto queued = Request(s, together);
  ASSERT_THAT(queued, IsOk());
  ASSERT_EQ(queued->state, core::RequestState::kQueued);
  // Release `a`: `b` is admitted in the same change set.
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, admitted->id, kT0 + absl::Seconds(1), ch), IsOk());
  ASSERT_THAT(store_->Commit(ch), IsOk());

  auto loaded = store_->LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->next_request_id(), s.next_request_id());
  EXPECT_EQ(loaded->next_node_id(), s.next_node_id());
  EXPECT_EQ(loaded->UsedMilli("t", "serving"), 2000);
  ASSERT_EQ(loaded->live_requests().size(), 1u);
  const core::CapacityRequest& b = loaded->live_requests().at(queued->id);
  EXPECT_EQ(b.state, core::RequestState::kAdmitted);
  EXPECT_EQ(b.placements, s.FindLiveRequest(queued->id)->placements);
  EXPECT_EQ(b.body_hash, queued->body_hash);
  EXPECT_EQ(b.spec.topology, core::Topology::kSameNode);
  ASSERT_NE(loaded->FindIdempotencyKey("a"), nullptr);
  EXPECT_EQ(loaded->FindIdempotencyKey("a")->request_id, admitted->id);
  const core::Node& n = *loaded->FindNode("east", "n1");
  EXPECT_EQ(n.gpus.size(), 4u);
  int exclusive = 0;
  for (const core::Gpu& g : n.gpus) exclusive += g.exclusive ? 1 : 0;
  EXPECT_EQ(exclusive, 2);
  EXPECT_EQ(loaded->FindTeam("t")->parent, "org");
  EXPECT_EQ(loaded->FindTeam("t")->weight_milli, 2000);
}

TEST_F(PgStoreTest, ACommitIsAllOrNothing) {
  BuildAndCommitOrganisation();
  core::ChangeSet ch;
  ch.changes.emplace_back(core::Cluster{"west", ""});
  ch.changes.emplace_back(core::Cluster{"east", ""});  // Duplicate: unique violation.
  EXPECT_THAT(store_->Commit(ch), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM clusters"),
              ::arbiter::testing::IsOkAndHolds(std::string("1")));
}

// `requests` and `placements` keep no foreign keys (migration 0020): a
// dangling reference written behind arbiterd's back is refused at load.
TEST_F(PgStoreTest, LoadingRefusesLiveRequestsWithDanglingReferences) {
  core::State s = BuildAndCommitOrganisation();
  ASSERT_THAT(Request(s, ::arbiter::testing::FractionSpec("f", 1, 100, 1024)), IsOk());
  ASSERT_THAT(store_->LoadState(), IsOk());

  ASSERT_THAT(db_->QueryValue("UPDATE requests SET team = 'gone' RETURNING 1"), IsOk());
  EXPECT_THAT(store_->LoadState(), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(db_->QueryValue("UPDATE requests SET team = 't', pool = 'gone' RETURNING 1"), IsOk());
  EXPECT_THAT(store_->LoadState(), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(db_->QueryValue("UPDATE requests SET pool = 'serving' RETURNING 1"), IsOk());
  ASSERT_THAT(db_->QueryValue("UPDATE placements SET node_id = 999 RETURNING 1"), IsOk());
  EXPECT_THAT(store_->LoadState(), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_THAT(db_->QueryValue("UPDATE placements SET node_id = (SELECT min(id) FROM nodes) "
                              "RETURNING 1"),
              IsOk());
  EXPECT_THAT(store_->LoadState(), IsOk());
}

TEST_F(PgStoreTest, ReadsListAndPage) {
  core::State s = BuildAndCommitOrganisation();
  for (int i = 0; i < 5; ++i) {
    core::CapacityRequestSpec spec =
        ::arbiter::testing::FractionSpec("f" + std::to_string(i), 1, 100, 1024);
    ASSERT_THAT(Request(s, spec), IsOk());
  }
  RequestFilter filter;
  filter.limit = 2;
  auto page1 = store_->ListRequests(filter);
  ASSERT_THAT(page1, IsOk());
  ASSERT_EQ(page1->size(), 2u);
  EXPECT_EQ((*page1)[0].id, 5);
  filter.before_id = (*page1)[1].id;
  auto page2 = store_->ListRequests(filter);
  ASSERT_THAT(page2, IsOk());
  EXPECT_EQ((*page2)[0].id, 3);
  EXPECT_EQ((*page2)[0].placements.size(), 1u);
  filter = RequestFilter{"t", core::RequestState::kReleased, 0, 10};
  EXPECT_THAT(store_->ListRequests(filter), ::arbiter::testing::IsOkAndHolds(::testing::IsEmpty()));

  EXPECT_THAT(store_->GetRequest(99), StatusIs(absl::StatusCode::kNotFound));
  auto quotas = store_->ListQuotas("t");
  ASSERT_THAT(quotas, IsOk());
  ASSERT_EQ(quotas->size(), 1u);
  EXPECT_EQ((*quotas)[0].used_milli, 500);
  auto nodes = store_->ListNodes("east", "");
  ASSERT_THAT(nodes, IsOk());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpus[0].allocated_milli, 500);  // All five share one GPU.
  auto models = store_->ListGpuModels();
  ASSERT_THAT(models, IsOk());
  EXPECT_GE(models->size(), 10u);
}

TEST_F(PgStoreTest, MigLayoutsAndInstancesLoadBack) {
  core::State s = BuildAndCommitOrganisation();
  core::CapacityRequestSpec spec = WholeSpec("m1", 1, 1);
  spec.shape.gpu = core::MigShape{"3g.40gb", 0};
  auto first = Request(s, spec);
  ASSERT_THAT(first, IsOk());
  ASSERT_EQ(first->state, core::RequestState::kAdmitted);
  spec.idempotency_key = "m2";
  auto second = Request(s, spec);
  ASSERT_THAT(second, IsOk());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, first->id, kT0, ch), IsOk());
  ASSERT_THAT(store_->Commit(ch), IsOk());

  auto loaded = store_->LoadState();
  ASSERT_THAT(loaded, IsOk());
  const core::Gpu& gpu = loaded->FindNode("east", "n1")->gpus[first->placements[0].gpu_indices[0]];
  EXPECT_EQ(core::FormatMigLayout(gpu.mig_layout), "3g.40gb@0,3g.40gb@4");
  ASSERT_EQ(gpu.mig_layout.size(), 2u);
  EXPECT_FALSE(gpu.mig_layout[0].allocated);
  EXPECT_TRUE(gpu.mig_layout[1].allocated);
  EXPECT_EQ(gpu.allocated_milli, 454);
  EXPECT_EQ(loaded->UsedMilli("t", "serving"), 454);
  const core::CapacityRequest& live = loaded->live_requests().at(second->id);
  EXPECT_EQ(live.spec.shape.mig().profile, "3g.40gb");
  EXPECT_EQ(live.placements, s.FindLiveRequest(second->id)->placements);
  auto got = store_->GetRequest(first->id);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(core::FormatMigLayout(got->placements[0].mig_new_layout), "3g.40gb@0,3g.40gb@4");
}

// One commit holding several writes of the same requests (as a batch of
// the arbiter does): the rows keep the last state, placements and layouts
// survive, and the ledger has one entry per write, chained.
TEST_F(PgStoreTest, ABatchWithSeveralWritesPerRequestLoadsBack) {
  core::State s = BuildAndCommitOrganisation();
  core::ChangeSet ch;
  ASSERT_THAT(core::SetQuota(s, {"t", "serving", 10'000}, kT0, ch), IsOk());
  core::CapacityRequestSpec mig = WholeSpec("m1", 1, 1);
  mig.shape.gpu = core::MigShape{"3g.40gb", 0};
  auto m1 = core::RequestCapacity(s, mig, kT0, ch);
  ASSERT_THAT(m1, IsOk());
  auto gone = core::RequestCapacity(s, WholeSpec("gone", 1, 1), kT0, ch);
  ASSERT_THAT(gone, IsOk());
  core::CapacityRequestSpec three = WholeSpec("big", 1, 3);
  three.description = "a \"quoted\", {braced} \\ text";  // Array-literal escaping.
  auto big = core::RequestCapacity(s, three, kT0, ch);
  ASSERT_THAT(big, IsOk());
  ASSERT_EQ(big->request.state, core::RequestState::kQueued);
  // Releasing `gone` admits `big` in the same change set.
  ASSERT_THAT(core::ReleaseRequest(s, gone->request.id, kT0 + absl::Seconds(1), ch), IsOk());
  ASSERT_EQ(s.FindLiveRequest(big->request.id)->state, core::RequestState::kAdmitted);
  const size_t writes = ch.changes.size();
  ASSERT_GE(writes, 5u);
  ASSERT_THAT(store_->Commit(ch), IsOk());

  auto loaded = store_->LoadState();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_EQ(loaded->live_requests().size(), 2u);
  EXPECT_EQ(loaded->live_requests().at(big->request.id).placements,
            s.FindLiveRequest(big->request.id)->placements);
  EXPECT_EQ(loaded->live_requests().at(m1->request.id).placements,
            s.FindLiveRequest(m1->request.id)->placements);
  EXPECT_EQ(loaded->UsedMilli("t", "serving"), s.UsedMilli("t", "serving"));
  EXPECT_EQ(loaded->live_requests().at(big->request.id).spec.description, three.description);
  auto released = store_->GetRequest(gone->request.id);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(released->state, core::RequestState::kReleased);
  EXPECT_EQ(released->placements.size(), 1u);  // Kept from the write that admitted it.
  const core::Node& node = *loaded->FindNode("east", "n1");
  const int32_t mig_gpu = m1->request.placements[0].gpu_indices[0];
  EXPECT_FALSE(node.gpus[mig_gpu].mig_layout.empty());
  auto ledger = store_->ListLedger(LedgerFilter{});
  ASSERT_THAT(ledger, IsOk());
  const ledger::Verdict verdict = ledger::VerifyChain(*ledger, 0, ledger::kGenesisHash);
  EXPECT_TRUE(verdict.ok) << verdict.problem;
  EXPECT_EQ(ledger->back().action, "request.admitted");
  EXPECT_EQ(ledger->back().subject, absl::StrCat("request/", big->request.id));
}

// Borrowing, preemption and reservations survive a reload: quotas with
// limits, a pool's lending rule, a preempting victim with its deadline and
// preemptor, the preemptor's claim, and a reservation's held GPUs.
TEST_F(PgStoreTest, PreemptionAndReservationsLoadBack) {
  core::State s = BuildAndCommitOrganisation();
  core::ChangeSet ch;
  core::Pool batch{"batch", core::LatencyClass::kBatch, ""};
  batch.reclaim_grace_seconds = 45;
  // Its requests are inference, which a batch pool admits only by rule.
  batch.class_rules = {{core::WorkloadClass::kInference, core::ClassAdmission::kAdmit}};
  core::Pool serving2{"serving2", core::LatencyClass::kServing, ""};
  serving2.lends_to = {core::WorkloadClass::kTraining};
  ASSERT_THAT(core::CreatePool(s, batch, ch), IsOk());
  ASSERT_THAT(core::CreatePool(s, serving2, ch), IsOk());
  core::Quota q{"t", "batch", 2000, "H100-80GB", core::kUnlimited, 1000};
  ASSERT_THAT(core::SetQuota(s, q, kT0, ch), IsOk());
  core::Node node = MakeNode("b1", 2, "H100-80GB", "batch");
  node.cluster = "east";
  ASSERT_THAT(core::RegisterNode(s, node, kT0, ch), IsOk());
  ASSERT_THAT(store_->Commit(ch), IsOk());

  core::CapacityRequestSpec low = WholeSpec("low", 1, 2);
  low.pool = "batch";
  low.preemptible = true;
  low.checkpoint_seconds = 90;
  low.duration = absl::Seconds(600);
  ASSERT_THAT(Request(s, low), IsOk());
  core::CapacityRequestSpec high = low;
  high.idempotency_key = "high";
  high.priority = 5;
  high.preemptible = false;
  auto preemptor = Request(s, high);
  ASSERT_THAT(preemptor, IsOk());
  EXPECT_EQ(preemptor->reason_code, core::kReasonPreempting);
  EXPECT_EQ(preemptor->holds.size(), 2u);
  core::CapacityRequestSpec later = WholeSpec("later", 1, 1);
  later.start_at = kT0 + absl::Hours(2);
  later.duration = absl::Hours(1);
  auto reserved = Request(s, later);
  ASSERT_THAT(reserved, IsOk());
  ASSERT_EQ(reserved->state, core::RequestState::kReserved);

  auto loaded = store_->LoadState();
  ASSERT_THAT(loaded, IsOk());
  const core::CapacityRequest* victim = loaded->FindLiveRequest(1);
  ASSERT_NE(victim, nullptr);
  EXPECT_EQ(victim->state, core::RequestState::kPreempting);
  EXPECT_EQ(victim->preempted_by, preemptor->id);
  EXPECT_EQ(victim->preempt_deadline, kT0 + absl::Seconds(90));
  EXPECT_EQ(victim->admitted_at, kT0);
  EXPECT_EQ(victim->quota_model, "H100-80GB");
  EXPECT_EQ(victim->spec.duration, absl::Seconds(600));
  EXPECT_EQ(victim->spec.checkpoint_seconds, 90);
  EXPECT_EQ(loaded->UsedMilli("t", "batch", "H100-80GB"), 2000);
  EXPECT_EQ(loaded->FindLiveRequest(preemptor->id)->holds, preemptor->holds);
  EXPECT_EQ(loaded->FindLiveRequest(reserved->id)->holds, reserved->holds);
  EXPECT_EQ(loaded->FindLiveRequest(reserved->id)->spec.start_at, later.start_at);
  const core::Quota* lq = loaded->FindQuota("t", "batch", "H100-80GB");
  ASSERT_NE(lq, nullptr);
  EXPECT_EQ(lq->borrowing_limit_milli, core::kUnlimited);
  EXPECT_EQ(lq->lending_limit_milli, 1000);
  EXPECT_EQ(loaded->FindPool("serving2")->lends_to, serving2.lends_to);
  EXPECT_EQ(loaded->FindPool("batch")->reclaim_grace_seconds, 45);
  EXPECT_EQ(loaded->timers(), s.timers());

  // The deadline passes in the reloaded state exactly as in the original.
  core::ChangeSet tick;
  core::Tick(*loaded, kT0 + absl::Seconds(90), tick);
  ASSERT_THAT(store_->Commit(tick), IsOk());
  auto admitted = store_->GetRequest(preemptor->id);
  ASSERT_THAT(admitted, IsOk());
  EXPECT_EQ(admitted->state, core::RequestState::kAdmitted);
  EXPECT_TRUE(admitted->holds.empty());
  auto quotas = store_->ListQuotas("t");
  ASSERT_THAT(quotas, IsOk());
  bool seen = false;
  for (const QuotaUsage& u : *quotas) {
    if (u.quota.pool == "batch") {
      seen = true;
      EXPECT_EQ(u.used_milli, 2000);
    }
  }
  EXPECT_TRUE(seen);
}

// Requests are partitioned by when they ended (migration 0033): a live one
// is in requests_live_partition, and the decision that ends it moves it to
// the partition of its month, made for it, where it is still read.
TEST_F(PgStoreTest, AnEndedRequestMovesToThePartitionOfItsMonth) {
  core::State s = BuildAndCommitOrganisation();
  auto a = Request(s, WholeSpec("a", 1, 1));
  auto b = Request(s, WholeSpec("b", 1, 1));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  auto partition_of = [&](int64_t id) {
    return db_->QueryValue(
        absl::StrCat("SELECT tableoid::regclass::text FROM requests WHERE id = ", id));
  };
  EXPECT_THAT(partition_of(a->id),
              ::arbiter::testing::IsOkAndHolds(std::string("requests_live_partition")));

  const absl::Time ended =
      absl::FromCivil(absl::CivilSecond(2027, 3, 31, 23, 59, 59), absl::UTCTimeZone());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, a->id, ended, ch), IsOk());
  ASSERT_THAT(store_->Commit(ch), IsOk());
  EXPECT_THAT(partition_of(a->id),
              ::arbiter::testing::IsOkAndHolds(std::string("requests_y2027m03")));
  EXPECT_THAT(partition_of(b->id),
              ::arbiter::testing::IsOkAndHolds(std::string("requests_live_partition")));
  EXPECT_THAT(db_->QueryValue(
                  absl::StrCat("SELECT ended_at = updated_at FROM requests WHERE id = ", a->id)),
              ::arbiter::testing::IsOkAndHolds(std::string("t")));

  auto read = store_->GetRequest(a->id);
  ASSERT_THAT(read, IsOk());
  EXPECT_EQ(read->state, core::RequestState::kReleased);
  EXPECT_EQ(read->placements.size(), 1u);
  auto loaded = store_->LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->live_requests().size(), 1u);
  ASSERT_NE(loaded->FindIdempotencyKey("a"), nullptr);
}

// A decision updates live requests only, and the statement looks for them in
// the live partition only: an update that finds no live row fails the whole
// commit, rather than being skipped with the rest written.
TEST_F(PgStoreTest, AnUpdateThatFindsNoLiveRowFailsTheWholeCommit) {
  core::State s = BuildAndCommitOrganisation();
  auto a = Request(s, WholeSpec("a", 1, 1));
  ASSERT_THAT(a, IsOk());
  const std::string entries = *db_->QueryValue("SELECT count(*) FROM ledger");
  // Ended behind arbiterd's back: its row leaves the live partition.
  ASSERT_THAT(
      db_->QueryValue(absl::StrCat("SELECT arbiter_ensure_month_partitions(date '2027-01-01'); "
                                   "UPDATE requests SET state = 'released', ended_at = "
                                   "updated_at WHERE id = ",
                                   a->id, " RETURNING 1")),
      IsOk());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, a->id, kT0 + absl::Seconds(5), ch), IsOk());
  auto c = core::RequestCapacity(s, WholeSpec("c", 1, 1), kT0 + absl::Seconds(5), ch);
  ASSERT_THAT(c, IsOk());
  EXPECT_THAT(store_->Commit(ch),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("found their live row")));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM ledger"),
              ::arbiter::testing::IsOkAndHolds(entries));
  EXPECT_THAT(
      db_->QueryValue(absl::StrCat("SELECT count(*) FROM requests WHERE id = ", c->request.id)),
      ::arbiter::testing::IsOkAndHolds(std::string("0")));
}

// Migration 0033 moves what was in the requests, placements and usage
// tables into partitions: live requests into requests_live_partition, ended
// ones by when they ended, placements by when their request was admitted,
// with nothing lost.
TEST_F(PgStoreTest, PartitioningKeepsEveryRequestOfBefore) {
  ASSERT_THAT(db_->QueryValue("DROP SCHEMA public CASCADE; CREATE SCHEMA public"), IsOk());
  std::vector<Migration> before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version < 33) before.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(db_->dsn(), before), IsOk());
  // 30 requests: every third live, the others ended in 2026 and, for a
  // clock that ran ahead, in 2099.
  ASSERT_THAT(
      db_->QueryValue(
          "INSERT INTO requests (id, idempotency_key, body_hash, team, pool, workload_class,"
          " members, whole_gpus, fraction_milli, fraction_memory_mib, cpu_milli, memory_mib,"
          " gpu_models, description, state, created_at, updated_at)"
          " SELECT g, 'key-' || g, g, 't', 'p', 'training', 1, 1, 0, 0, 0, 0, '{}', '',"
          " CASE WHEN g % 3 = 0 THEN 'admitted' ELSE 'released' END, t, t"
          " FROM generate_series(1, 30) g, LATERAL (SELECT CASE WHEN g = 29 THEN"
          " timestamptz '2099-05-02 UTC' ELSE timestamptz '2026-01-01 UTC' + g * interval '1 day'"
          " END AS t) x RETURNING 1"),
      IsOk());
  // Their placements (and one whose request is gone), and a week of usage.
  ASSERT_THAT(db_->QueryValue(
                  "INSERT INTO placements (request_id, member, node_id, gpu_indices, gpu_milli,"
                  " gpu_memory_mib, cpu_milli, memory_mib, exclusive)"
                  " SELECT g, 0, 1, '{0}', 1000, 81920, 0, 0, true FROM generate_series(1, 31) g;"
                  " INSERT INTO usage_hourly SELECT timestamptz '2026-06-01 UTC' + g * interval"
                  " '1 day', g, 0, 't', 'p', 'training', 'H100-80GB', 1, 1, 1, 1, 1, 1, now()"
                  " FROM generate_series(1, 7) g RETURNING 1"),
              IsOk());
  ASSERT_THAT(ApplyMigrations(db_->dsn(), EmbeddedMigrations()), IsOk());
  EXPECT_THAT(db_->QueryValue("SELECT string_agg(p || ':' || n, ',' ORDER BY p) FROM (SELECT "
                              "tableoid::regclass::text AS p, count(*) AS n FROM requests GROUP BY "
                              "1) x"),
              ::arbiter::testing::IsOkAndHolds(std::string(
                  "requests_legacy:19,requests_live_partition:10,requests_y2099m05:1")));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM requests WHERE ended_at = CASE WHEN state = "
                              "'admitted' THEN 'infinity' ELSE updated_at END"),
              ::arbiter::testing::IsOkAndHolds(std::string("30")));
  // Placements by their request's admission (here its creation, as 0007
  // had not recorded admissions), the one without a request at the start.
  EXPECT_THAT(
      db_->QueryValue("SELECT string_agg(p || ':' || n, ',' ORDER BY p) FROM (SELECT "
                      "tableoid::regclass::text AS p, count(*) AS n FROM placements GROUP "
                      "BY 1) x"),
      ::arbiter::testing::IsOkAndHolds(std::string("placements_legacy:30,placements_y2099m05:1")));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM placements p JOIN requests r ON r.id = "
                              "p.request_id WHERE p.admitted_at = r.created_at"),
              ::arbiter::testing::IsOkAndHolds(std::string("30")));
  EXPECT_THAT(db_->QueryValue("SELECT count(*) || ' ' || sum(request_id) FROM usage_hourly_legacy"),
              ::arbiter::testing::IsOkAndHolds(std::string("7 28")));
}

// Migration 0039 sums the member rows of usage_hourly already there into
// usage_team_hourly, by hour, team, pool, class and model, in the months'
// partitions: times and energy summed, peaks the highest.
TEST_F(PgStoreTest, TeamRollupsStartFromTheMemberRowsOfBefore) {
  ASSERT_THAT(db_->QueryValue("DROP SCHEMA public CASCADE; CREATE SCHEMA public"), IsOk());
  std::vector<Migration> before;
  for (const Migration& m : EmbeddedMigrations()) {
    if (m.version < 39) before.push_back(m);
  }
  ASSERT_THAT(ApplyMigrations(db_->dsn(), before), IsOk());
  // Two hours in June and one in July; in the first, three members of team
  // `a` and one of `b`.
  ASSERT_THAT(
      db_->QueryValue(
          "SELECT arbiter_ensure_month_partitions(date '2026-06-01');"
          " SELECT arbiter_ensure_month_partitions(date '2026-07-01');"
          " INSERT INTO usage_hourly VALUES"
          " ('2026-06-30 23:00 UTC', 1, 0, 'a', 'p', 'training', 'H100-80GB', 10, 5, 2, 300, 7, 1,"
          " now()),"
          " ('2026-06-30 23:00 UTC', 1, 1, 'a', 'p', 'training', 'H100-80GB', 20, 6, 3, 900, 2, 2,"
          " now()),"
          " ('2026-06-30 23:00 UTC', 2, 0, 'a', 'p', 'training', 'H100-80GB', 30, 7, 4, 100, 9, 3,"
          " now()),"
          " ('2026-06-30 23:00 UTC', 3, 0, 'b', 'p', 'training', 'H100-80GB', 40, 8, 5, 200, 1, 4,"
          " now()),"
          " ('2026-06-30 22:00 UTC', 3, 0, 'b', 'p', 'training', 'H100-80GB', 50, 9, 6, 500, 5, 5,"
          " now()),"
          " ('2026-07-01 00:00 UTC', 3, 0, 'b', 'p', 'training', 'H100-80GB', 60, 1, 7, 600, 6, 6,"
          " now()) RETURNING 1"),
      IsOk());
  ASSERT_THAT(ApplyMigrations(db_->dsn(), EmbeddedMigrations()), IsOk());
  EXPECT_THAT(
      db_->QueryValue("SELECT string_agg(concat_ws(' ', tableoid::regclass, to_char(hour AT TIME "
                      "ZONE 'UTC', 'MM-DD HH24'), team, allocated_milli_seconds, "
                      "sampled_milli_seconds, used_milli_seconds, peak_busy_milli, "
                      "peak_memory_mib, energy_mwh), ', ' ORDER BY hour, team) "
                      "FROM usage_team_hourly"),
      ::arbiter::testing::IsOkAndHolds(
          std::string("usage_team_hourly_y2026m06 06-30 22 b 50 9 6 500 5 5, "
                      "usage_team_hourly_y2026m06 06-30 23 a 60 18 9 900 9 6, "
                      "usage_team_hourly_y2026m06 06-30 23 b 40 8 5 200 1 4, "
                      "usage_team_hourly_y2026m07 07-01 00 b 60 1 7 600 6 6")));
}

TEST(PgStoreUnreachableTest, CreateIsUnavailable) {
  EXPECT_THAT(PgStore::Create({"host=127.0.0.1 port=1 dbname=none connect_timeout=2", 1}),
              StatusIs(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace arbiter::store
