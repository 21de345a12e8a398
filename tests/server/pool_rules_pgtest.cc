// Class-to-pool rules and spot work through the API, on a real server and
// database (docs/pools.md): rules stored, listed and applied with refusals
// naming the rule; spot work preempted first at the pool's spot grace,
// never preempting, charged at the SPOT price; and their bad inputs, each
// refused with the field named and nothing written.
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

#include "arbiter/v1/chargeback.grpc.pb.h"
#include "tests/server/server_fixture.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

class PoolRulesTest : public ServerTest {
 protected:
  // Cluster east, team "inference" with 4 GPUs of quota in pool "serving"
  // (SERVING, 4 L4s), plus `pool` created as given with one 4-L4 node and
  // `nominal_milli` of quota for the team.
  void SeedWith(const v1::Pool& pool, int64_t nominal_milli = 4000) {
    testing::SeedSpec seed;
    seed.nominal_milli = 4000;
    ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
    ASSERT_TRUE(CreatePool(pool).ok());
    ASSERT_TRUE(RegisterNode(pool.name() + "-1", pool.name(), 4).ok());
    v1::SetQuotaRequest quota;
    quota.mutable_quota()->set_team("inference");
    quota.mutable_quota()->set_pool(pool.name());
    quota.mutable_quota()->set_nominal_milli(nominal_milli);
    grpc::ClientContext quota_ctx;
    v1::SetQuotaResponse set;
    ASSERT_TRUE(governance_->SetQuota(&quota_ctx, quota, &set).ok());
  }

  // Team `team` (created) with a quota of `nominal_milli` in `pool`.
  void AddTeam(const std::string& team, const std::string& pool, int64_t nominal_milli) {
    v1::CreateTeamRequest create;
    create.mutable_team()->set_name(team);
    grpc::ClientContext ctx;
    v1::CreateTeamResponse created;
    ASSERT_TRUE(governance_->CreateTeam(&ctx, create, &created).ok());
    v1::SetQuotaRequest quota;
    quota.mutable_quota()->set_team(team);
    quota.mutable_quota()->set_pool(pool);
    quota.mutable_quota()->set_nominal_milli(nominal_milli);
    grpc::ClientContext quota_ctx;
    v1::SetQuotaResponse set;
    ASSERT_TRUE(governance_->SetQuota(&quota_ctx, quota, &set).ok());
  }

  grpc::Status CreatePool(const v1::Pool& pool) {
    v1::CreatePoolRequest req;
    *req.mutable_pool() = pool;
    grpc::ClientContext ctx;
    v1::CreatePoolResponse resp;
    return inventory_->CreatePool(&ctx, req, &resp);
  }

  grpc::Status SetPrice(v1::LatencyClass latency_class, int64_t micros, int64_t burst = 0) {
    v1::SetPriceRequest req;
    req.mutable_price()->set_gpu_model("L4");
    req.mutable_price()->set_latency_class(latency_class);
    req.mutable_price()->set_micros_per_gpu_hour(micros);
    req.mutable_price()->set_burst_micros_per_gpu_hour(burst);
    req.mutable_price()->mutable_effective_from()->set_seconds(
        absl::ToUnixSeconds(clock_.TimeNow()) - 3600);
    grpc::ClientContext ctx;
    v1::SetPriceResponse resp;
    return governance_->SetPrice(&ctx, req, &resp);
  }

  v1::CapacityRequest Ask(const std::string& key, const std::string& pool,
                          v1::WorkloadClass workload_class, int32_t gpus,
                          void (*adjust)(v1::RequestCapacityRequest&) = nullptr) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.set_pool(pool);
    req.set_workload_class(workload_class);
    req.mutable_shape()->set_whole_gpus(gpus);
    if (adjust != nullptr) adjust(req);
    v1::RequestCapacityResponse resp;
    const grpc::Status s = Request(req, &resp);
    EXPECT_TRUE(s.ok()) << key << ": " << s.error_message();
    return resp.request();
  }

  v1::CapacityRequest Get(int64_t id) {
    v1::GetRequestRequest req;
    req.set_id(id);
    grpc::ClientContext ctx;
    v1::GetRequestResponse resp;
    EXPECT_TRUE(allocation_->GetRequest(&ctx, req, &resp).ok());
    return resp.request();
  }

  // Request `id` once it is in `state` (the arbiter's timer acts within a
  // second of the test clock's advance), or as it stands after 5 s.
  v1::CapacityRequest WaitFor(int64_t id, v1::RequestState state) {
    v1::CapacityRequest r;
    for (int i = 0; i < 100; ++i) {
      r = Get(id);
      if (r.state() == state) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return r;
  }

  std::string Ledger() {
    auto n = db_->QueryValue("SELECT count(*) FROM ledger");
    EXPECT_THAT(n, IsOk());
    return n.value_or("");
  }
};

v1::Pool BatchPool(const std::string& name) {
  v1::Pool p;
  p.set_name(name);
  p.set_latency_class(v1::LATENCY_CLASS_BATCH);
  return p;
}

v1::PoolClassRule Rule(v1::WorkloadClass c, v1::ClassAdmission a) {
  v1::PoolClassRule r;
  r.set_workload_class(c);
  r.set_admission(a);
  return r;
}

// A pool's rules are stored and listed with the matrix in force; inference
// is refused on a batch pool by the default rule, and taken where a rule
// lends to it, as preemptible work that the pool's own class takes back.
TEST_F(PoolRulesTest, RulesAreListedAndAppliedWithTheRuleNamed) {
  v1::Pool mixed = BatchPool("mixed");
  *mixed.add_class_rules() = Rule(v1::WORKLOAD_CLASS_INFERENCE, v1::CLASS_ADMISSION_BORROW);
  *mixed.add_class_rules() = Rule(v1::WORKLOAD_CLASS_EXPERIMENTATION, v1::CLASS_ADMISSION_DENY);
  SeedWith(mixed);
  ASSERT_TRUE(CreatePool(BatchPool("plain")).ok());

  grpc::ClientContext ctx;
  v1::ListPoolsResponse pools;
  ASSERT_TRUE(inventory_->ListPools(&ctx, v1::ListPoolsRequest(), &pools).ok());
  std::map<std::string, std::string> matrix;
  for (const v1::Pool& p : pools.pools()) {
    std::string row;
    for (const v1::PoolClassRule& r : p.effective_class_rules()) {
      absl::StrAppend(&row, v1::WorkloadClass_Name(r.workload_class()), "=",
                      v1::ClassAdmission_Name(r.admission()), " ");
    }
    matrix[p.name()] = row;
    if (p.name() == "mixed") {
      EXPECT_EQ(p.class_rules_size(), 2);
    }
  }
  EXPECT_EQ(matrix["mixed"],
            "WORKLOAD_CLASS_TRAINING=CLASS_ADMISSION_ADMIT "
            "WORKLOAD_CLASS_INFERENCE=CLASS_ADMISSION_BORROW "
            "WORKLOAD_CLASS_BATCH_ANALYTICS=CLASS_ADMISSION_ADMIT "
            "WORKLOAD_CLASS_EXPERIMENTATION=CLASS_ADMISSION_DENY ");
  EXPECT_EQ(matrix["serving"],
            "WORKLOAD_CLASS_TRAINING=CLASS_ADMISSION_DENY "
            "WORKLOAD_CLASS_INFERENCE=CLASS_ADMISSION_ADMIT "
            "WORKLOAD_CLASS_BATCH_ANALYTICS=CLASS_ADMISSION_DENY "
            "WORKLOAD_CLASS_EXPERIMENTATION=CLASS_ADMISSION_DENY ");

  const v1::CapacityRequest plain = Ask("plain", "plain", v1::WORKLOAD_CLASS_INFERENCE, 1);
  EXPECT_EQ(plain.state(), v1::REQUEST_STATE_DENIED);
  EXPECT_EQ(plain.reason_code(), "POOL_DOES_NOT_LEND");
  EXPECT_EQ(plain.reason(),
            "pool plain does not admit inference work (rule inference=deny, the default of batch "
            "pools; pool.class_rules may change it)");
  const v1::CapacityRequest exp = Ask("exp", "mixed", v1::WORKLOAD_CLASS_EXPERIMENTATION, 1);
  EXPECT_EQ(exp.state(), v1::REQUEST_STATE_DENIED);
  EXPECT_EQ(exp.reason(),
            "pool mixed does not admit experimentation work (rule "
            "experimentation=deny)");
  const v1::CapacityRequest firm = Ask("firm", "mixed", v1::WORKLOAD_CLASS_INFERENCE, 1);
  EXPECT_EQ(firm.state(), v1::REQUEST_STATE_DENIED);
  EXPECT_EQ(firm.reason_code(), "NOT_PREEMPTIBLE");
  EXPECT_TRUE(absl::StrContains(firm.reason(), "(rule inference=borrow)")) << firm.reason();

  const v1::CapacityRequest lent =
      Ask("lent", "mixed", v1::WORKLOAD_CLASS_INFERENCE, 4,
          [](v1::RequestCapacityRequest& r) { r.set_preemptible(true); });
  ASSERT_EQ(lent.state(), v1::REQUEST_STATE_ADMITTED);
  const v1::CapacityRequest own = Ask("own", "mixed", v1::WORKLOAD_CLASS_TRAINING, 2);
  EXPECT_EQ(own.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(own.reason_code(), "WAITING_FOR_PREEMPTION");
  const v1::CapacityRequest victim = Get(lent.id());
  EXPECT_EQ(victim.state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(victim.reason_code(), "RECLAIMED");
  EXPECT_EQ(victim.preempted_by(), own.id());
}

// Bad class rules: each refused with INVALID_ARGUMENT naming the field, and
// nothing written (no pool, no ledger entry).
TEST_F(PoolRulesTest, BadRulesAreRefusedNamingTheFieldWritingNothing) {
  SeedOrganisation();
  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  struct Case {
    const char* field;
    v1::Pool pool;
  };
  v1::Pool twice = BatchPool("twice");
  *twice.add_class_rules() = Rule(v1::WORKLOAD_CLASS_TRAINING, v1::CLASS_ADMISSION_ADMIT);
  *twice.add_class_rules() = Rule(v1::WORKLOAD_CLASS_TRAINING, v1::CLASS_ADMISSION_DENY);
  v1::Pool unset = BatchPool("unset");
  *unset.add_class_rules() = Rule(v1::WORKLOAD_CLASS_TRAINING, v1::CLASS_ADMISSION_UNSPECIFIED);
  v1::Pool unknown = BatchPool("unknown");
  *unknown.add_class_rules() =
      Rule(v1::WORKLOAD_CLASS_TRAINING, static_cast<v1::ClassAdmission>(9));
  v1::Pool no_class = BatchPool("no-class");
  *no_class.add_class_rules() = Rule(v1::WORKLOAD_CLASS_UNSPECIFIED, v1::CLASS_ADMISSION_ADMIT);
  v1::Pool contradicts;
  contradicts.set_name("contradicts");
  contradicts.set_latency_class(v1::LATENCY_CLASS_SERVING);
  contradicts.add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
  *contradicts.add_class_rules() = Rule(v1::WORKLOAD_CLASS_TRAINING, v1::CLASS_ADMISSION_DENY);
  v1::Pool negative_grace = BatchPool("negative-grace");
  negative_grace.set_spot_grace_seconds(-1);
  const Case cases[] = {
      {"pool.class_rules[1]", twice},
      {"pool.class_rules[0].admission", unset},
      {"pool.class_rules[0].admission", unknown},
      {"pool.class_rules[0].workload_class", no_class},
      {"pool.class_rules[0]", contradicts},
      {"pool.spot_grace_seconds", negative_grace},
  };
  for (const Case& c : cases) {
    const grpc::Status s = CreatePool(c.pool);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.pool.name();
    EXPECT_TRUE(absl::StartsWith(s.error_message(), std::string(c.field) + ":"))
        << c.pool.name() << ": " << s.error_message();
  }
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
}

// Spot work on a serving pool that lends to training: preempted before any
// other borrower (though it would lose more work), at the pool's spot grace
// of 0 s; a spot request waits instead of preempting, whatever its priority;
// every request on a SPOT pool is spot; spot is charged at the SPOT price.
TEST_F(PoolRulesTest, SpotGoesFirstNeverPreemptsAndPaysTheSpotPrice) {
  v1::Pool serving2;
  serving2.set_name("serving2");
  serving2.set_latency_class(v1::LATENCY_CLASS_SERVING);
  serving2.add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
  serving2.set_reclaim_grace_seconds(120);
  serving2.set_spot_grace_seconds(0);
  SeedWith(serving2, 8000);
  ASSERT_TRUE(SetPrice(v1::LATENCY_CLASS_SERVING, 2'000'000).ok());
  ASSERT_TRUE(SetPrice(v1::LATENCY_CLASS_SPOT, 500'000).ok());

  const v1::CapacityRequest spot =
      Ask("spot", "serving2", v1::WORKLOAD_CLASS_TRAINING, 2, [](v1::RequestCapacityRequest& r) {
        r.set_spot(true);
        r.set_checkpoint_seconds(900);
        r.set_duration_seconds(3600);
      });
  ASSERT_EQ(spot.state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_TRUE(spot.spot());
  EXPECT_TRUE(spot.preemptible());
  EXPECT_EQ(spot.cost_micros(), 1'000'000);  // Two L4-hours at the spot price of 0.50.
  const v1::CapacityRequest cheap =
      Ask("cheap", "serving2", v1::WORKLOAD_CLASS_TRAINING, 2, [](v1::RequestCapacityRequest& r) {
        r.set_preemptible(true);
        r.set_priority(-10);
      });
  ASSERT_EQ(cheap.state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_FALSE(cheap.spot());

  clock_.Advance(absl::Seconds(60));
  const absl::Time decided = clock_.TimeNow();
  const v1::CapacityRequest serve = Ask("serve", "serving2", v1::WORKLOAD_CLASS_INFERENCE, 2);
  EXPECT_EQ(serve.state(), v1::REQUEST_STATE_QUEUED);
  // With a grace of 0 s the arbiter may already have ended it.
  const v1::CapacityRequest gone = Get(spot.id());
  EXPECT_TRUE(gone.state() == v1::REQUEST_STATE_PREEMPTING ||
              gone.state() == v1::REQUEST_STATE_PREEMPTED)
      << gone.state();
  EXPECT_EQ(gone.reason_code(), "SPOT_RECLAIMED");
  EXPECT_EQ(gone.preempt_deadline().seconds(), absl::ToUnixSeconds(decided));
  EXPECT_EQ(Get(cheap.id()).state(), v1::REQUEST_STATE_ADMITTED);

  const v1::CapacityRequest eager =
      Ask("eager", "serving2", v1::WORKLOAD_CLASS_TRAINING, 2, [](v1::RequestCapacityRequest& r) {
        r.set_spot(true);
        r.set_priority(1000);
      });
  EXPECT_EQ(eager.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(eager.reason_code(), "INSUFFICIENT_CAPACITY");
  EXPECT_EQ(Get(cheap.id()).state(), v1::REQUEST_STATE_ADMITTED);

  auto stored = db_->QueryValue(
      "SELECT string_agg(idempotency_key || ':' || spot || preemptible, ',' ORDER BY id) "
      "FROM requests WHERE pool = 'serving2'");
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(*stored, "spot:truetrue,cheap:falsetrue,serve:falsefalse,eager:truetrue");
}

// Every request on a SPOT pool is spot; guaranteed work there, and spot
// work asked to be guaranteed, are INVALID_ARGUMENT naming the field with
// nothing written; a spot price above another price of the model is
// FAILED_PRECONDITION naming the price, with nothing written.
TEST_F(PoolRulesTest, SpotPoolsAndSpotPricesRefuseWhatBreaksThem) {
  v1::Pool cheap;
  cheap.set_name("cheap");
  cheap.set_latency_class(v1::LATENCY_CLASS_SPOT);
  SeedWith(cheap);
  const v1::CapacityRequest any = Ask("any", "cheap", v1::WORKLOAD_CLASS_TRAINING, 1);
  ASSERT_EQ(any.state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_TRUE(any.spot());
  EXPECT_TRUE(any.preemptible());

  const std::string rows = RowCounts();
  v1::RequestCapacityRequest guaranteed = ValidRequest("guaranteed");
  guaranteed.set_pool("cheap");
  guaranteed.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  guaranteed.set_guaranteed(true);
  v1::RequestCapacityResponse resp;
  grpc::Status s = Request(guaranteed, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "guaranteed:")) << s.error_message();
  v1::RequestCapacityRequest both = ValidRequest("both");
  both.set_spot(true);
  both.set_guaranteed(true);
  s = Request(both, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "spot:")) << s.error_message();

  ASSERT_TRUE(SetPrice(v1::LATENCY_CLASS_BATCH, 1'000'000).ok());
  const std::string priced = Ledger();
  s = SetPrice(v1::LATENCY_CLASS_SPOT, 1'200'000);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "price.micros_per_gpu_hour:"))
      << s.error_message();
  EXPECT_EQ(Ledger(), priced);
  auto prices = db_->QueryValue("SELECT count(*) FROM prices");
  ASSERT_THAT(prices, IsOk());
  EXPECT_EQ(*prices, "1");
  EXPECT_EQ(RowCounts(), rows);
}

// A serving pool's headroom: lent training stops short of it, inference
// within quota takes it, and a burst above quota goes into it, charged at
// the burst price, until the arbiter releases it BURST_ENDED by itself; the
// bursts together stay within the headroom.
TEST_F(PoolRulesTest, HeadroomIsKeptAndBurstsEndOnTheirOwn) {
  v1::Pool pool;
  pool.set_name("front");
  pool.set_latency_class(v1::LATENCY_CLASS_SERVING);
  pool.add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
  v1::Headroom* headroom = pool.add_headroom();
  headroom->set_gpu_model("L4");
  headroom->set_milli_gpus(2000);
  pool.set_max_burst_seconds(600);
  SeedWith(pool, 1000);
  AddTeam("trainer", "front", 4000);
  ASSERT_TRUE(SetPrice(v1::LATENCY_CLASS_SERVING, 1'000'000, 3'000'000).ok());

  grpc::ClientContext ctx;
  v1::ListPoolsResponse pools;
  ASSERT_TRUE(inventory_->ListPools(&ctx, v1::ListPoolsRequest(), &pools).ok());
  for (const v1::Pool& p : pools.pools()) {
    if (p.name() != "front") continue;
    ASSERT_EQ(p.headroom_size(), 1);
    EXPECT_EQ(p.headroom(0).milli_gpus(), 2000);
    EXPECT_EQ(p.max_burst_seconds(), 600);
  }

  auto preemptible = [](v1::RequestCapacityRequest& r) {
    r.set_team("trainer");
    r.set_preemptible(true);
  };
  const v1::CapacityRequest lent =
      Ask("lent", "front", v1::WORKLOAD_CLASS_TRAINING, 3, preemptible);
  EXPECT_EQ(lent.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(lent.reason_code(), "SERVING_HEADROOM");
  EXPECT_TRUE(absl::StrContains(lent.reason(), "keeps 2000 milli-GPU of L4 free")) << lent.reason();
  const v1::CapacityRequest two = Ask("two", "front", v1::WORKLOAD_CLASS_TRAINING, 2, preemptible);
  EXPECT_EQ(two.state(), v1::REQUEST_STATE_ADMITTED);

  const v1::CapacityRequest own = Ask("own", "front", v1::WORKLOAD_CLASS_INFERENCE, 1);
  EXPECT_EQ(own.state(), v1::REQUEST_STATE_ADMITTED);
  const absl::Time burst_at = clock_.TimeNow();
  const v1::CapacityRequest burst =
      Ask("burst", "front", v1::WORKLOAD_CLASS_INFERENCE, 1,
          [](v1::RequestCapacityRequest& r) { r.set_burst_seconds(600); });
  ASSERT_EQ(burst.state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(burst.burst_until().seconds(), absl::ToUnixSeconds(burst_at + absl::Seconds(600)));
  EXPECT_EQ(burst.cost_micros(), 500'000);  // 600 s of one L4 at the burst price of 3.00.
  const v1::CapacityRequest more =
      Ask("more", "front", v1::WORKLOAD_CLASS_INFERENCE, 1,
          [](v1::RequestCapacityRequest& r) { r.set_burst_seconds(60); });
  EXPECT_EQ(more.state(), v1::REQUEST_STATE_QUEUED);  // No free L4 left.

  clock_.Advance(absl::Seconds(601));
  const v1::CapacityRequest ended = WaitFor(burst.id(), v1::REQUEST_STATE_RELEASED);
  EXPECT_EQ(ended.state(), v1::REQUEST_STATE_RELEASED);
  EXPECT_EQ(ended.reason_code(), "BURST_ENDED");
  EXPECT_EQ(ended.cost_micros(), 500'000);
  auto stored = db_->QueryValue(
      "SELECT burst_seconds || ':' || (burst_until IS NOT NULL) FROM requests "
      "WHERE idempotency_key = 'burst'");
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(*stored, "600:true");
}

// A spot request that asks for headroom, a burst the pool does not allow,
// and headroom on a pool that is not SERVING: INVALID_ARGUMENT naming the
// field, nothing written.
TEST_F(PoolRulesTest, BadHeadroomAndBurstsAreRefusedWritingNothing) {
  SeedOrganisation();
  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  v1::RequestCapacityRequest spot = ValidRequest("spot-burst");
  spot.set_spot(true);
  spot.set_burst_seconds(60);
  v1::RequestCapacityResponse resp;
  grpc::Status s = Request(spot, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "burst_seconds:")) << s.error_message();
  v1::RequestCapacityRequest no_headroom = ValidRequest("no-headroom");
  no_headroom.set_burst_seconds(60);
  s = Request(no_headroom, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "burst_seconds:")) << s.error_message();

  v1::Pool batch = BatchPool("batch-headroom");
  v1::Headroom* h = batch.add_headroom();
  h->set_gpu_model("L4");
  h->set_milli_gpus(1000);
  s = CreatePool(batch);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "pool.headroom[0]:")) << s.error_message();
  v1::Pool burst_only;
  burst_only.set_name("burst-only");
  burst_only.set_latency_class(v1::LATENCY_CLASS_SERVING);
  burst_only.set_max_burst_seconds(60);
  s = CreatePool(burst_only);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "pool.max_burst_seconds:")) << s.error_message();
  v1::Pool unknown;
  unknown.set_name("unknown-model");
  unknown.set_latency_class(v1::LATENCY_CLASS_SERVING);
  h = unknown.add_headroom();
  h->set_gpu_model("T9");
  h->set_milli_gpus(1000);
  s = CreatePool(unknown);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "pool.headroom[0].gpu_model:"))
      << s.error_message();
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
}

grpc::Status SetPowerBudget(v1::GovernanceService::Stub& governance, v1::PowerScope scope,
                            const std::string& name, int64_t watts) {
  v1::SetPowerBudgetRequest req;
  req.mutable_power_budget()->set_scope(scope);
  req.mutable_power_budget()->set_name(name);
  req.mutable_power_budget()->set_watts(watts);
  grpc::ClientContext ctx;
  v1::SetPowerBudgetResponse resp;
  return governance.SetPowerBudget(&ctx, req, &resp);
}

// A pool's watt budget: what fits it is admitted, what would exceed it waits
// with reason POWER naming the budget and the shortfall, and a raised budget
// lets it in; the budget is listed and ledgered. Bad budgets are refused
// naming the field, writing nothing.
TEST_F(PoolRulesTest, PowerBudgetsHoldAdmissionsAndNameTheShortfall) {
  SeedWith(BatchPool("hot"));  // Four L4s of 72 W.
  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  grpc::Status s = SetPowerBudget(*governance_, v1::POWER_SCOPE_POOL, "hot", -1);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "power_budget.watts:")) << s.error_message();
  s = SetPowerBudget(*governance_, v1::POWER_SCOPE_UNSPECIFIED, "hot", 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "power_budget.scope:")) << s.error_message();
  s = SetPowerBudget(*governance_, v1::POWER_SCOPE_POOL, "nowhere", 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "power_budget.name:")) << s.error_message();
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
  auto none = db_->QueryValue("SELECT count(*) FROM power_budgets");
  ASSERT_THAT(none, IsOk());
  EXPECT_EQ(*none, "0");

  ASSERT_TRUE(SetPowerBudget(*governance_, v1::POWER_SCOPE_POOL, "hot", 150).ok());
  const v1::CapacityRequest two = Ask("two", "hot", v1::WORKLOAD_CLASS_TRAINING, 2);
  EXPECT_EQ(two.state(), v1::REQUEST_STATE_ADMITTED);
  const v1::CapacityRequest third = Ask("third", "hot", v1::WORKLOAD_CLASS_TRAINING, 1);
  EXPECT_EQ(third.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(third.reason_code(), "POWER");
  EXPECT_EQ(third.reason(),
            "power budget of pool hot: 144 W drawn + 72 W would exceed its 150 W by 66 W");

  grpc::ClientContext ctx;
  v1::ListPowerBudgetsResponse listed;
  ASSERT_TRUE(governance_->ListPowerBudgets(&ctx, v1::ListPowerBudgetsRequest(), &listed).ok());
  ASSERT_EQ(listed.power_budgets_size(), 1);
  EXPECT_EQ(listed.power_budgets(0).watts(), 150);

  ASSERT_TRUE(SetPowerBudget(*governance_, v1::POWER_SCOPE_POOL, "hot", 300).ok());
  EXPECT_EQ(Get(third.id()).state(), v1::REQUEST_STATE_ADMITTED);
  auto entries = db_->QueryValue(
      "SELECT count(*) FROM ledger WHERE action = 'power_budget.set' "
      "AND subject = 'power_budget/pool/hot'");
  ASSERT_THAT(entries, IsOk());
  EXPECT_EQ(*entries, "2");
}

}  // namespace
}  // namespace arbiter::server

namespace arbiter::server {
namespace {

// A BORROW rule with a recurring window: training is refused before the
// window (the refusal names it and when it opens), admitted in it, and
// reclaimed at the pool's grace when it closes; the window is stored and
// listed; a window that never occurs, or one on a rule that is not BORROW,
// is refused naming the field, with nothing written. The test clock starts
// on Friday 2027-01-15 08:00 UTC.
TEST_F(PoolRulesTest, LendingWindowsHoldOnlyWhileOpen) {
  v1::Pool front;
  front.set_name("front2");
  front.set_latency_class(v1::LATENCY_CLASS_SERVING);
  front.set_reclaim_grace_seconds(30);
  v1::PoolClassRule* rule = front.add_class_rules();
  rule->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  rule->set_admission(v1::CLASS_ADMISSION_BORROW);
  rule->set_window("daily 09:00-10:00 UTC");
  SeedWith(front, 4000);
  auto training = [](v1::RequestCapacityRequest& r) { r.set_preemptible(true); };

  const v1::CapacityRequest early =
      Ask("early", "front2", v1::WORKLOAD_CLASS_TRAINING, 2, training);
  EXPECT_EQ(early.state(), v1::REQUEST_STATE_DENIED);
  EXPECT_EQ(early.reason_code(), "POOL_DOES_NOT_LEND");
  EXPECT_EQ(early.reason(),
            "pool front2 does not admit training work (rule training=deny, the default of "
            "serving pools outside the window 'daily 09:00-10:00 UTC' of training=borrow, which "
            "opens next at 2027-01-15T09:00:00Z)");

  clock_.Advance(absl::Hours(1));
  const v1::CapacityRequest lent = Ask("lent", "front2", v1::WORKLOAD_CLASS_TRAINING, 2, training);
  ASSERT_EQ(lent.state(), v1::REQUEST_STATE_ADMITTED);

  clock_.Advance(absl::Hours(1));
  const absl::Time closed = clock_.TimeNow();
  const v1::CapacityRequest reclaimed = WaitFor(lent.id(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(reclaimed.state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(reclaimed.reason_code(), "LENDING_WINDOW_CLOSED");
  EXPECT_EQ(reclaimed.preempt_deadline().seconds(), absl::ToUnixSeconds(closed) + 30);

  v1::ListPoolsRequest list;
  grpc::ClientContext ctx;
  v1::ListPoolsResponse pools;
  ASSERT_TRUE(inventory_->ListPools(&ctx, list, &pools).ok());
  bool listed = false;
  for (const v1::Pool& p : pools.pools()) {
    if (p.name() != "front2") continue;
    ASSERT_EQ(p.class_rules_size(), 1);
    EXPECT_EQ(p.class_rules(0).window(), "daily 09:00-10:00 UTC");
    listed = true;
  }
  EXPECT_TRUE(listed);

  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  struct Case {
    const char* window;
    v1::ClassAdmission admission;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {"mon 09:00-10:00 UTC from 2027-01-05T00:00:00Z until 2027-01-06T00:00:00Z",
            v1::CLASS_ADMISSION_BORROW, "pool.class_rules[0].window: "},
           {"daily 09:00-10:00 Mars/Olympus", v1::CLASS_ADMISSION_BORROW,
            "pool.class_rules[0].window: "},
           {"daily 09:00-10:00 UTC", v1::CLASS_ADMISSION_ADMIT,
            "pool.class_rules[0].window: only a BORROW rule may have a window"}}) {
    v1::Pool bad;
    bad.set_name("never");
    bad.set_latency_class(v1::LATENCY_CLASS_SERVING);
    v1::PoolClassRule* r = bad.add_class_rules();
    r->set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
    r->set_admission(c.admission);
    r->set_window(c.window);
    const grpc::Status s = CreatePool(bad);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.window;
    EXPECT_TRUE(absl::StartsWith(s.error_message(), c.message)) << s.error_message();
  }
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
}

}  // namespace
}  // namespace arbiter::server

namespace arbiter::server {
namespace {

// The simulated clock's start (tests/testing/simulated_clock.h).
constexpr int64_t kClockStart = 1'800'000'000;

// An advance reservation holds its member's CPU and memory beside its GPU
// for its window, shown on the hold; open-ended work that needs more than
// is left beside the hold waits, though GPUs are free.
TEST_F(PoolRulesTest, AReservationHoldsCpuAndMemoryBesideItsGpus) {
  v1::Pool batch;
  batch.set_name("train2");
  batch.set_latency_class(v1::LATENCY_CLASS_BATCH);
  SeedWith(batch, 4000);  // One node: 4 L4s, 64 CPUs, 500 GiB.
  const v1::CapacityRequest nightly =
      Ask("nightly", "train2", v1::WORKLOAD_CLASS_TRAINING, 1, [](v1::RequestCapacityRequest& r) {
        r.mutable_shape()->set_cpu_milli(48'000);
        r.mutable_shape()->set_memory_mib(400'000);
        r.set_duration_seconds(3600);
      });
  EXPECT_EQ(nightly.state(), v1::REQUEST_STATE_ADMITTED);  // Declared to end in an hour.

  const v1::CapacityRequest booked =
      Ask("booked", "train2", v1::WORKLOAD_CLASS_TRAINING, 1, [](v1::RequestCapacityRequest& r) {
        r.mutable_shape()->set_cpu_milli(8'000);
        r.mutable_shape()->set_memory_mib(64'000);
        r.mutable_start_time()->set_seconds(kClockStart + 7200);  // In two hours.
        r.set_duration_seconds(3600);
      });
  ASSERT_EQ(booked.state(), v1::REQUEST_STATE_RESERVED) << booked.reason();
  ASSERT_EQ(booked.holds_size(), 1);
  EXPECT_EQ(booked.holds(0).cpu_milli(), 8'000);
  EXPECT_EQ(booked.holds(0).memory_mib(), 64'000);

  // 16 CPUs are free now; the reservation holds 8 of them from 02:00, and
  // the first request (ending at 01:00 by its declared end) frees its 48.
  const v1::CapacityRequest open =
      Ask("open", "train2", v1::WORKLOAD_CLASS_TRAINING, 1,
          [](v1::RequestCapacityRequest& r) { r.mutable_shape()->set_cpu_milli(12'000); });
  EXPECT_EQ(open.state(), v1::REQUEST_STATE_QUEUED);
  const v1::CapacityRequest fits =
      Ask("fits", "train2", v1::WORKLOAD_CLASS_TRAINING, 1,
          [](v1::RequestCapacityRequest& r) { r.mutable_shape()->set_cpu_milli(8'000); });
  EXPECT_EQ(fits.state(), v1::REQUEST_STATE_ADMITTED);
  auto stored = db_->QueryValue("SELECT holds FROM requests WHERE idempotency_key = 'booked'");
  ASSERT_THAT(stored, IsOk());
  EXPECT_TRUE(absl::EndsWith(*stored, ":8000:64000")) << *stored;
}

}  // namespace
}  // namespace arbiter::server

namespace arbiter::server {
namespace {

// Proactive reclaim through the API (docs/pools.md, "Proactive reclaim"):
// a serving pool learns its own demand at 08:00 on a Friday; a week later,
// at 07:56 (a lead of 60 s grace + 240 s cold start before it), it tells the
// borrowers that lose least to vacate, with reason PROACTIVE_RECLAIM,
// ledgered; the forecast and its notices are listed; the profile outlives a
// restart; and the bad inputs are refused naming the field, with nothing
// written. The test clock starts on Friday 2027-01-15 08:00 UTC.
TEST_F(PoolRulesTest, ProactiveReclaimActsAheadOfTheLearntRise) {
  v1::Pool front;
  front.set_name("front3");
  front.set_latency_class(v1::LATENCY_CLASS_SERVING);
  front.set_reclaim_grace_seconds(60);
  front.set_proactive_reclaim(true);
  front.set_cold_start_seconds(240);
  front.add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
  SeedWith(front, 8000);

  auto forecast = [this](const std::string& pool, int32_t hours,
                         v1::GetServingForecastResponse* resp) {
    v1::GetServingForecastRequest req;
    req.set_pool(pool);
    req.set_hours(hours);
    grpc::ClientContext ctx;
    return inventory_->GetServingForecast(&ctx, req, resp);
  };
  // Waits for the arbiter's next observation to show `milli` now.
  auto observed_now = [&](int64_t milli) {
    v1::GetServingForecastResponse resp;
    for (int i = 0; i < 100; ++i) {
      resp.Clear();
      if (forecast("front3", 1, &resp).ok() && resp.slots(0).observed() &&
          resp.slots(0).forecast_milli() == milli) {
        return true;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << resp.DebugString();
    return false;
  };

  const v1::CapacityRequest serving =
      Ask("serve-1", "front3", v1::WORKLOAD_CLASS_INFERENCE, 2, nullptr);
  ASSERT_EQ(serving.state(), v1::REQUEST_STATE_ADMITTED);
  clock_.Advance(absl::Seconds(61));  // The next observation is due.
  ASSERT_TRUE(observed_now(2000));
  v1::ReleaseAllocationRequest release;
  release.set_id(serving.id());
  grpc::ClientContext release_ctx;
  v1::ReleaseAllocationResponse released;
  ASSERT_TRUE(allocation_->ReleaseAllocation(&release_ctx, release, &released).ok());

  clock_.Advance(absl::Hours(1));
  auto no_checkpoints = [](v1::RequestCapacityRequest& r) { r.set_preemptible(true); };
  auto checkpoints = [](v1::RequestCapacityRequest& r) {
    r.set_preemptible(true);
    r.set_checkpoint_interval_seconds(600);
    r.set_checkpoint_seconds(30);
  };
  const v1::CapacityRequest a = Ask("a", "front3", v1::WORKLOAD_CLASS_TRAINING, 2, no_checkpoints);
  const v1::CapacityRequest b = Ask("b", "front3", v1::WORKLOAD_CLASS_TRAINING, 1, checkpoints);
  const v1::CapacityRequest c = Ask("c", "front3", v1::WORKLOAD_CLASS_TRAINING, 1, checkpoints);
  ASSERT_EQ(a.state(), v1::REQUEST_STATE_ADMITTED);
  ASSERT_EQ(b.state(), v1::REQUEST_STATE_ADMITTED);
  ASSERT_EQ(c.state(), v1::REQUEST_STATE_ADMITTED);

  ASSERT_NO_FATAL_FAILURE(Restart());  // What was learnt outlives it.

  // A week on, four minutes before 08:00.
  clock_.Advance(absl::Hours(7 * 24) - absl::Hours(1) - absl::Seconds(61) - absl::Minutes(4));
  const absl::Time notice_from = clock_.TimeNow();
  const v1::CapacityRequest vb = WaitFor(b.id(), v1::REQUEST_STATE_PREEMPTING);
  ASSERT_EQ(vb.state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(vb.reason_code(), "PROACTIVE_RECLAIM");
  EXPECT_EQ(vb.preempt_deadline().seconds(), absl::ToUnixSeconds(notice_from) + 60);
  EXPECT_TRUE(absl::StrContains(vb.reason(),
                                "forecasts 2000 milli-GPU of serving demand from "
                                "2027-01-22T08:00:00Z"))
      << vb.reason();
  EXPECT_EQ(Get(c.id()).state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(Get(a.id()).state(), v1::REQUEST_STATE_ADMITTED);  // Loses most: kept.

  v1::GetServingForecastResponse shown;
  ASSERT_TRUE(forecast("front3", 2, &shown).ok());
  EXPECT_EQ(shown.lead_seconds(), 300);
  EXPECT_EQ(shown.capacity_milli(), 4000);
  EXPECT_EQ(shown.peak_milli(), 2000);
  EXPECT_EQ(shown.peak_at().seconds(), kClockStart + 7 * 24 * 3600);
  EXPECT_EQ(shown.leaving_milli(), 2000);
  EXPECT_EQ(shown.slots_size(), 8);
  ASSERT_EQ(shown.notices_size(), 2);
  EXPECT_EQ(shown.notices(0).reason_code(), "PROACTIVE_RECLAIM");
  auto ledgered = db_->QueryValue(
      "SELECT count(*) FROM ledger WHERE action = 'request.preempting' "
      "AND payload LIKE '%PROACTIVE_RECLAIM%'");
  ASSERT_THAT(ledgered, IsOk());
  EXPECT_EQ(*ledgered, "2");
  auto stored = db_->QueryValue("SELECT count(*) FROM serving_demand WHERE pool = 'front3'");
  ASSERT_THAT(stored, IsOk());
  EXPECT_NE(*stored, "0");

  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  v1::Pool batch = BatchPool("never2");
  batch.set_proactive_reclaim(true);
  grpc::Status s = CreatePool(batch);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "pool.proactive_reclaim: ")) << s.error_message();
  v1::Pool cold = front;
  cold.set_name("never3");
  cold.set_cold_start_seconds(-5);
  s = CreatePool(cold);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "pool.cold_start_seconds: "))
      << s.error_message();
  v1::GetServingForecastResponse none;
  s = forecast("front3", 500, &none);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(s.error_message(), "hours: ")) << s.error_message();
  EXPECT_EQ(forecast("nowhere", 1, &none).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(forecast("serving", 1, &none).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
}

}  // namespace
}  // namespace arbiter::server

namespace arbiter::server {
namespace {

// A recurring reservation through the API (docs/quotas-and-preemption.md,
// "Recurring reservations"): the request is the next occurrence, RESERVED
// for its window, its recurrence shown in canonical form; when it starts,
// the next occurrence is booked by the arbiter under "<key>@<start>"; and
// the bad inputs are refused naming the field, with nothing written. The
// test clock starts on Friday 2027-01-15 08:00 UTC.
TEST_F(PoolRulesTest, RecurringReservationBooksEachOccurrence) {
  SeedWith(BatchPool("nightly"), 4000);
  auto nightly = [](v1::RequestCapacityRequest& r) {
    r.set_preemptible(true);
    r.set_recurrence("daily 09:00-10:00 UTC");
  };
  const v1::CapacityRequest first =
      Ask("fine-tune", "nightly", v1::WORKLOAD_CLASS_TRAINING, 2, nightly);
  ASSERT_EQ(first.state(), v1::REQUEST_STATE_RESERVED) << first.reason();
  EXPECT_EQ(first.start_time().seconds(), kClockStart + 3600);
  EXPECT_EQ(first.duration_seconds(), 3600);
  EXPECT_EQ(first.recurrence(), "daily 09:00-10:00 UTC");

  clock_.Advance(absl::Hours(1));
  v1::CapacityRequest next;
  for (int i = 0; i < 100; ++i) {  // Booked by the arbiter's timer.
    v1::GetRequestRequest req;
    req.set_id(first.id() + 1);
    grpc::ClientContext ctx;
    v1::GetRequestResponse resp;
    if (allocation_->GetRequest(&ctx, req, &resp).ok()) {
      next = resp.request();
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(next.id(), first.id() + 1);
  EXPECT_EQ(Get(first.id()).state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(next.state(), v1::REQUEST_STATE_RESERVED);
  EXPECT_EQ(next.idempotency_key(), absl::StrCat("fine-tune@", kClockStart + 3600 + 86400));
  EXPECT_EQ(next.start_time().seconds(), kClockStart + 3600 + 86400);
  EXPECT_EQ(next.recurrence(), "daily 09:00-10:00 UTC");

  const std::string rows = RowCounts();
  const std::string ledger = Ledger();
  struct Case {
    void (*adjust)(v1::RequestCapacityRequest&);
    const char* message;
  };
  for (const Case& c :
       std::vector<Case>{{[](v1::RequestCapacityRequest& r) {
                            r.set_recurrence(
                                "mon 09:00-10:00 UTC from 2027-01-05T00:00:00Z until "
                                "2027-01-06T00:00:00Z");  // Never occurs.
                          },
                          "recurrence: "},
                         {[](v1::RequestCapacityRequest& r) {
                            r.set_recurrence(
                                "mon 09:00-10:00 UTC from 2027-01-04T00:00:00Z until "
                                "2027-01-05T00:00:00Z");  // Occurred once, before now.
                          },
                          "recurrence: "},
                         {[](v1::RequestCapacityRequest& r) {
                            r.set_recurrence("daily 09:00-10:00 Mars/Olympus");
                          },
                          "recurrence: "},
                         {[](v1::RequestCapacityRequest& r) {
                            r.set_recurrence("daily 09:00-10:00 UTC");
                            r.mutable_start_time()->set_seconds(kClockStart + 7 * 3600);
                          },
                          "start_time: "},
                         {[](v1::RequestCapacityRequest& r) {
                            r.set_recurrence("daily 09:00-10:00 UTC");
                            r.set_duration_seconds(600);
                          },
                          "duration_seconds: "}}) {
    v1::RequestCapacityRequest req = ValidRequest("bad-series");
    req.set_pool("nightly");
    req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
    req.mutable_shape()->set_whole_gpus(1);
    req.set_preemptible(true);
    c.adjust(req);
    v1::RequestCapacityResponse resp;
    const grpc::Status s = Request(req, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << req.recurrence();
    EXPECT_TRUE(absl::StartsWith(s.error_message(), c.message)) << s.error_message();
  }
  EXPECT_EQ(RowCounts(), rows);
  EXPECT_EQ(Ledger(), ledger);
}

}  // namespace
}  // namespace arbiter::server
