// Scheduling and governance through the API on a real server and database:
// preemption notices and their deadlines, reservations with backfill,
// coexistence rules, node-reported MIG placements, prices and budgets,
// queue positions on reads, and an organisation imported at once.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

#include "tests/server/server_fixture.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

// A node registered with its own MIG placements gets instances where it
// says, and its report is listed back; a report the model cannot have is
// INVALID_ARGUMENT naming the field, and registers nothing.
TEST_F(ServerTest, NodeReportedMigPlacementsWinOverTheTable) {
  testing::SeedSpec spec;
  spec.nodes = 0;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, spec), IsOk());
  auto register_node = [&](const std::string& name, const std::string& report_profile,
                           int32_t slot) {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_pool("serving");
    r.mutable_node()->set_cpu_milli(64'000);
    r.mutable_node()->set_memory_mib(512'000);
    v1::Gpu* gpu = r.mutable_node()->add_gpus();
    gpu->set_model("H100-80GB");
    v1::MigPlacementReport* report = gpu->add_reported_mig_placements();
    report->set_profile(report_profile);
    report->add_start_slots(slot);
    v1::RegisterNodeResponse resp;
    return inventory_->RegisterNode(&ctx, r, &resp);
  };
  grpc::Status bad = register_node("bad", "3g.40gb", 7);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message().rfind("node.gpus[0].reported_mig_placements[0].start_slots:", 0),
            0u)
      << bad.error_message();
  ASSERT_TRUE(register_node("n1", "3g.40gb", 4).ok());

  v1::RequestCapacityRequest req = ValidRequest("mig");
  req.mutable_shape()->set_mig_profile("3g.40gb");
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(req, &resp).ok());
  ASSERT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(resp.request().placements(0).mig_start_slot(), 4);

  grpc::ClientContext ctx;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(inventory_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  ASSERT_EQ(nodes.nodes_size(), 1);
  ASSERT_EQ(nodes.nodes(0).gpus(0).reported_mig_placements_size(), 1);
  EXPECT_EQ(nodes.nodes(0).gpus(0).reported_mig_placements(0).start_slots(0), 4);
}

// A higher-priority request of the same team preempts: the victim's notice
// with its deadline arrives on the watch stream, and when the (simulated)
// clock passes the deadline the arbiter takes the capacity back on its own
// and admits the preemptor.
TEST_F(ServerTest, PreemptionNoticeCarriesItsDeadlineAndExpires) {
  testing::SeedSpec seed;
  seed.pool = "batch";
  seed.latency_class = v1::LATENCY_CLASS_BATCH;
  seed.gpus_per_node = 2;
  seed.nominal_milli = 2000;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
  grpc::ClientContext watch_ctx;
  v1::WatchAllocationsRequest watch;
  watch.set_pool("batch");
  auto reader = WatchFromNow(&watch_ctx, watch);

  v1::RequestCapacityRequest low = ValidRequest("low");
  low.set_pool("batch");
  low.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  low.mutable_shape()->set_whole_gpus(2);
  low.set_preemptible(true);
  low.set_checkpoint_seconds(120);
  v1::RequestCapacityResponse low_resp;
  ASSERT_TRUE(Request(low, &low_resp).ok());
  ASSERT_EQ(low_resp.request().state(), v1::REQUEST_STATE_ADMITTED);

  v1::RequestCapacityRequest high = low;
  high.set_idempotency_key("high");
  high.set_preemptible(false);
  high.set_priority(10);
  v1::RequestCapacityResponse high_resp;
  ASSERT_TRUE(Request(high, &high_resp).ok());
  EXPECT_EQ(high_resp.request().state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(high_resp.request().reason_code(), "WAITING_FOR_PREEMPTION");
  EXPECT_EQ(high_resp.request().holds_size(), 2);

  // The notice: PREEMPTING, deadline = now + max(grace 30 s, checkpoint 120 s).
  const absl::Time decided = clock_.TimeNow();
  v1::WatchAllocationsResponse event;
  bool noticed = false;
  while (!noticed && reader->Read(&event)) {
    if (event.type() != v1::ALLOCATION_EVENT_TYPE_PREEMPTING) continue;
    noticed = true;
    EXPECT_EQ(event.request().id(), low_resp.request().id());
    EXPECT_EQ(event.request().preempted_by(), high_resp.request().id());
    EXPECT_EQ(event.request().preempt_deadline().seconds(),
              absl::ToUnixSeconds(decided + absl::Seconds(120)));
  }
  ASSERT_TRUE(noticed);

  // The deadline passes with no call made: the arbiter acts by itself.
  clock_.Advance(absl::Seconds(121));
  std::map<int64_t, v1::AllocationEventType> last;
  while (last[high_resp.request().id()] != v1::ALLOCATION_EVENT_TYPE_ADMITTED &&
         reader->Read(&event)) {
    last[event.request().id()] = event.type();
  }
  watch_ctx.TryCancel();
  EXPECT_EQ(last[low_resp.request().id()], v1::ALLOCATION_EVENT_TYPE_PREEMPTED);
  EXPECT_EQ(last[high_resp.request().id()], v1::ALLOCATION_EVENT_TYPE_ADMITTED);
  auto states = db_->QueryValue("SELECT string_agg(state, ',' ORDER BY id) FROM requests");
  ASSERT_THAT(states, IsOk());
  EXPECT_EQ(*states, "preempted,admitted");
}

// A preview (validate_only) writes nothing and answers what the same call
// does right after it: the id, the state, the reason, the placements, and
// the running request it preempts.
TEST_F(ServerTest, APreviewWritesNothingAndIsWhatTheCallDoes) {
  testing::SeedSpec seed;
  seed.pool = "batch";
  seed.latency_class = v1::LATENCY_CLASS_BATCH;
  seed.gpus_per_node = 2;
  seed.nominal_milli = 2000;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
  auto ledger_length = [&] {
    auto n = db_->QueryValue("SELECT count(*) FROM ledger");
    EXPECT_THAT(n, IsOk());
    return n.value_or("");
  };
  auto preview_then_call = [&](v1::RequestCapacityRequest req) {
    const std::string rows = RowCounts();
    const std::string ledger = ledger_length();
    req.set_validate_only(true);
    v1::RequestCapacityResponse preview;
    EXPECT_TRUE(Request(req, &preview).ok());
    EXPECT_TRUE(preview.validated_only());
    EXPECT_EQ(RowCounts(), rows) << "a preview wrote";
    EXPECT_EQ(ledger_length(), ledger) << "a preview was ledgered";
    // The same key previewed again is still free.
    v1::RequestCapacityResponse again;
    EXPECT_TRUE(Request(req, &again).ok());
    EXPECT_FALSE(again.replayed());
    req.set_validate_only(false);
    v1::RequestCapacityResponse real;
    EXPECT_TRUE(Request(req, &real).ok());
    EXPECT_FALSE(real.validated_only());
    EXPECT_EQ(preview.request().id(), real.request().id());
    EXPECT_EQ(preview.request().state(), real.request().state());
    EXPECT_EQ(preview.request().reason_code(), real.request().reason_code());
    EXPECT_EQ(preview.request().placements_size(), real.request().placements_size());
    for (int i = 0; i < real.request().placements_size() && i < preview.request().placements_size();
         ++i) {
      EXPECT_EQ(preview.request().placements(i).node(), real.request().placements(i).node());
      EXPECT_EQ(preview.request().placements(i).gpu_indices(0),
                real.request().placements(i).gpu_indices(0));
    }
    return std::make_pair(preview, real);
  };

  v1::RequestCapacityRequest low = ValidRequest("low");
  low.set_pool("batch");
  low.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  low.mutable_shape()->set_whole_gpus(2);
  low.set_preemptible(true);
  low.set_checkpoint_seconds(120);
  auto [low_preview, low_real] = preview_then_call(low);
  EXPECT_EQ(low_real.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(low_preview.would_preempt_size(), 0);

  v1::RequestCapacityRequest high = low;
  high.set_idempotency_key("high");
  high.set_preemptible(false);
  high.set_priority(10);
  auto [high_preview, high_real] = preview_then_call(high);
  EXPECT_EQ(high_real.request().reason_code(), "WAITING_FOR_PREEMPTION");
  ASSERT_EQ(high_preview.would_preempt_size(), 1);
  EXPECT_EQ(high_preview.would_preempt(0).id(), low_real.request().id());
  EXPECT_EQ(high_preview.would_preempt(0).state(), v1::REQUEST_STATE_PREEMPTING);

  // A key already used previews as its replay, naming its request.
  v1::RequestCapacityRequest replay = low;
  replay.set_validate_only(true);
  v1::RequestCapacityResponse replayed;
  ASSERT_TRUE(Request(replay, &replayed).ok());
  EXPECT_TRUE(replayed.replayed());
  EXPECT_EQ(replayed.request().id(), low_real.request().id());
  // Bad input is refused as a real call's is, naming the field.
  v1::RequestCapacityRequest bad = low;
  bad.set_idempotency_key("bad");
  bad.set_members(0);
  bad.set_validate_only(true);
  v1::RequestCapacityResponse refused;
  grpc::Status status = Request(bad, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("members"), std::string::npos) << status.error_message();
}

// A request with a future start is RESERVED with its held GPUs; an
// open-ended request then waits, and one that ends before the window runs.
TEST_F(ServerTest, ReservationHoldsGpusAndShorterWorkBackfills) {
  testing::SeedSpec seed;
  seed.pool = "batch";
  seed.latency_class = v1::LATENCY_CLASS_BATCH;
  seed.gpus_per_node = 2;
  seed.nominal_milli = 8000;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
  v1::RequestCapacityRequest nightly = ValidRequest("nightly");
  nightly.set_pool("batch");
  nightly.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  nightly.mutable_shape()->set_whole_gpus(2);
  nightly.mutable_start_time()->set_seconds(absl::ToUnixSeconds(clock_.TimeNow()) + 7200);
  nightly.set_duration_seconds(3600);
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(nightly, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_RESERVED);
  EXPECT_EQ(resp.request().holds_size(), 2);
  EXPECT_EQ(resp.request().start_time().seconds(), nightly.start_time().seconds());

  v1::RequestCapacityRequest open = ValidRequest("open");
  open.set_pool("batch");
  open.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  open.mutable_shape()->set_whole_gpus(1);
  ASSERT_TRUE(Request(open, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_QUEUED);
  v1::RequestCapacityRequest shorter = open;
  shorter.set_idempotency_key("short");
  shorter.set_duration_seconds(3600);
  ASSERT_TRUE(Request(shorter, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
}

// A coexistence rule set through the API is in force at once, listed with
// the defaults, and survives a restart of the arbiter (it is in PostgreSQL).
TEST_F(ServerTest, CoexistenceRuleIsStoredListedAndApplied) {
  testing::SeedSpec seed;
  seed.pool = "dev";
  seed.latency_class = v1::LATENCY_CLASS_DEV;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, seed), IsOk());
  grpc::ClientContext set_ctx;
  v1::SetCoexistenceRuleRequest set;
  set.mutable_rule()->set_class_a(v1::WORKLOAD_CLASS_TRAINING);
  set.mutable_rule()->set_class_b(v1::WORKLOAD_CLASS_INFERENCE);
  set.mutable_rule()->set_gpu_isolation(v1::GPU_ISOLATION_SOFT_SHARING);
  set.mutable_rule()->set_same_node(true);
  v1::SetCoexistenceRuleResponse set_resp;
  ASSERT_TRUE(governance_->SetCoexistenceRule(&set_ctx, set, &set_resp).ok());

  // Inference and training fractions now share one GPU (best fit puts the
  // second next to the first).
  v1::RequestCapacityRequest inf = ValidRequest("inf");
  inf.set_pool("dev");
  v1::RequestCapacityResponse inf_resp;
  ASSERT_TRUE(Request(inf, &inf_resp).ok());
  v1::RequestCapacityRequest train = inf;
  train.set_idempotency_key("train");
  train.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  v1::RequestCapacityResponse train_resp;
  ASSERT_TRUE(Request(train, &train_resp).ok());
  ASSERT_EQ(inf_resp.request().placements_size(), 1);
  ASSERT_EQ(train_resp.request().placements_size(), 1);
  EXPECT_EQ(train_resp.request().placements(0).gpu_indices(0),
            inf_resp.request().placements(0).gpu_indices(0));

  Restart();  // On the same database.
  grpc::ClientContext list_ctx;
  v1::ListCoexistenceRulesResponse list;
  ASSERT_TRUE(
      governance_->ListCoexistenceRules(&list_ctx, v1::ListCoexistenceRulesRequest(), &list).ok());
  ASSERT_EQ(list.rules_size(), 10);
  int soft = 0;
  for (const v1::CoexistenceRule& r : list.rules()) {
    const bool pair =
        (r.class_a() == v1::WORKLOAD_CLASS_TRAINING &&
         r.class_b() == v1::WORKLOAD_CLASS_INFERENCE) ||
        (r.class_a() == v1::WORKLOAD_CLASS_INFERENCE && r.class_b() == v1::WORKLOAD_CLASS_TRAINING);
    if (pair) {
      EXPECT_EQ(r.gpu_isolation(), v1::GPU_ISOLATION_SOFT_SHARING);
    }
    if (r.gpu_isolation() == v1::GPU_ISOLATION_SOFT_SHARING) ++soft;
  }
  // Defaults: inference, batch analytics and experimentation with
  // themselves, batch analytics with experimentation; plus the rule set.
  EXPECT_EQ(soft, 5);
}

// Money through the API: prices on past dates, a projected cost on the
// request, the soft limit's warning, the hard limit's denial, and a month's
// spend.
TEST_F(ServerTest, PricesAndBudgetsGovernAdmission) {
  SeedOrganisation();  // Team inference, pool serving (L4), quota 3 GPUs.
  using Gov = v1::GovernanceService::Stub;
  auto call = [](auto& stub, auto method, const auto& req, auto* resp) {
    grpc::ClientContext ctx;
    return (stub.*method)(&ctx, req, resp);
  };
  const int64_t now = absl::ToUnixSeconds(clock_.TimeNow());
  for (const auto& [micros, from] : {std::pair<int64_t, int64_t>{1'000'000, now - 86'400},
                                     std::pair<int64_t, int64_t>{3'000'000, now}}) {
    v1::SetPriceRequest r;
    r.mutable_price()->set_gpu_model("L4");
    r.mutable_price()->set_latency_class(v1::LATENCY_CLASS_SERVING);
    r.mutable_price()->set_micros_per_gpu_hour(micros);
    r.mutable_price()->mutable_effective_from()->set_seconds(from);
    v1::SetPriceResponse resp;
    ASSERT_TRUE(call(*governance_, &Gov::SetPrice, r, &resp).ok());
  }
  // What a GPU-hour cost yesterday.
  v1::ListPricesRequest past;
  past.mutable_at()->set_seconds(now - 3600);
  v1::ListPricesResponse prices;
  ASSERT_TRUE(call(*governance_, &Gov::ListPrices, past, &prices).ok());
  ASSERT_EQ(prices.prices_size(), 1);
  EXPECT_EQ(prices.prices(0).micros_per_gpu_hour(), 1'000'000);

  v1::SetBudgetRequest budget;
  budget.mutable_budget()->set_team("inference");
  budget.mutable_budget()->set_soft_limit_micros(2'000'000);
  budget.mutable_budget()->set_hard_limit_micros(4'000'000);
  budget.mutable_budget()->set_over(v1::OVER_BUDGET_DENY);
  v1::SetBudgetResponse budget_resp;
  ASSERT_TRUE(call(*governance_, &Gov::SetBudget, budget, &budget_resp).ok());

  // One L4 for one hour at today's 3.00: admitted, over the soft limit.
  v1::RequestCapacityRequest one = ValidRequest("one");
  one.mutable_shape()->set_whole_gpus(1);
  one.set_duration_seconds(3600);
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(one, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(resp.request().cost_micros(), 3'000'000);
  EXPECT_NE(resp.request().reason().find("budget warning"), std::string::npos);
  // Another would reach 6.00, past the hard limit of 4.00: denied.
  v1::RequestCapacityRequest two = one;
  two.set_idempotency_key("two");
  ASSERT_TRUE(Request(two, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_DENIED);
  EXPECT_EQ(resp.request().reason_code(), "BUDGET_EXCEEDED");

  v1::ListBudgetsResponse budgets;
  ASSERT_TRUE(call(*governance_, &Gov::ListBudgets, v1::ListBudgetsRequest(), &budgets).ok());
  ASSERT_EQ(budgets.budgets_size(), 1);
  EXPECT_EQ(budgets.budgets(0).spent_micros(), 3'000'000);
}

// Reads give each queued request its place in the pool's decision order:
// higher priority first, then the oldest; 0 for what is not queued.
TEST_F(ServerTest, QueuedRequestsShowTheirPositionOnReads) {
  SeedOrganisation();  // One node of four L4s; inference's quota is three GPUs.
  auto whole = [&](const std::string& key, int32_t priority) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.mutable_shape()->set_whole_gpus(1);
    req.set_priority(priority);
    v1::RequestCapacityResponse resp;
    EXPECT_TRUE(Request(req, &resp).ok());
    return resp.request();
  };
  for (const char* key : {"a", "b", "c"}) {
    ASSERT_EQ(whole(key, 0).state(), v1::REQUEST_STATE_ADMITTED);
  }
  const v1::CapacityRequest old_low = whole("old-low", 0);
  const v1::CapacityRequest high = whole("high", 5);
  const v1::CapacityRequest new_low = whole("new-low", 0);
  ASSERT_EQ(new_low.state(), v1::REQUEST_STATE_QUEUED);

  grpc::ClientContext list_ctx;
  v1::ListRequestsRequest list;
  list.set_page_size(100);
  v1::ListRequestsResponse listed;
  ASSERT_TRUE(allocation_->ListRequests(&list_ctx, list, &listed).ok());
  std::map<int64_t, int64_t> position;
  for (const v1::CapacityRequest& r : listed.requests()) position[r.id()] = r.queue_position();
  ASSERT_EQ(position.size(), 6u);
  EXPECT_EQ(position[high.id()], 1);
  EXPECT_EQ(position[old_low.id()], 2);
  EXPECT_EQ(position[new_low.id()], 3);
  for (const v1::CapacityRequest& r : listed.requests()) {
    if (r.state() != v1::REQUEST_STATE_QUEUED) {
      EXPECT_EQ(r.queue_position(), 0) << r.id();
    }
  }
  grpc::ClientContext get_ctx;
  v1::GetRequestRequest get;
  get.set_id(new_low.id());
  v1::GetRequestResponse got;
  ASSERT_TRUE(allocation_->GetRequest(&get_ctx, get, &got).ok());
  EXPECT_EQ(got.request().queue_position(), 3);
}

// An organisation's import is one decision: a bad entry is named and
// nothing is written; the same import twice changes nothing.
TEST_F(ServerTest, ImportOrganisationIsAllOrNothing) {
  SeedOrganisation();
  v1::ImportOrganisationRequest org;
  v1::Team* ml = org.add_teams();
  ml->set_name("ml");
  v1::Team* nlp = org.add_teams();
  nlp->set_name("nlp");
  nlp->set_parent("ml");
  v1::Quota* quota = org.add_quotas();
  quota->set_team("nlp");
  quota->set_pool("serving");
  quota->set_nominal_milli(2000);
  v1::ImportOrganisationRequest bad = org;
  *bad.add_quotas() = *quota;
  bad.mutable_quotas(1)->set_pool("nowhere");
  auto import = [&](const v1::ImportOrganisationRequest& req, v1::ImportOrganisationResponse* r) {
    grpc::ClientContext ctx;
    return governance_->ImportOrganisation(&ctx, req, r);
  };
  const std::string before = RowCounts();
  v1::ImportOrganisationResponse counts;
  const grpc::Status refused = import(bad, &counts);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(refused.error_message().rfind("quotas[1].pool:", 0), 0u) << refused.error_message();
  EXPECT_EQ(RowCounts(), before);

  ASSERT_TRUE(import(org, &counts).ok());
  EXPECT_EQ(counts.teams_created(), 2);
  EXPECT_EQ(counts.quotas_set(), 1);
  const std::string after = RowCounts();
  EXPECT_NE(after, before);
  ASSERT_TRUE(import(org, &counts).ok());
  EXPECT_EQ(counts.teams_unchanged(), 2);
  EXPECT_EQ(counts.quotas_unchanged(), 1);
  EXPECT_EQ(counts.teams_created() + counts.quotas_set(), 0);
  EXPECT_EQ(RowCounts(), after);
}

// Claims and leases through the API (docs/enforcement.md), on a pool with a
// claim deadline of 60 s and a lease of 30 s: a claim, the same claim again,
// a stranger's claim (FAILED_PRECONDITION naming the holder), bad claims
// (each names its field and writes nothing), a renewal, and the lease
// running out with no call made: the allocation ends LEASE_EXPIRED at its
// last renewal, and another allocation never claimed ends UNCLAIMED.
TEST_F(ServerTest, ClaimsHoldUnderALeaseAndEndWithoutOne) {
  SeedOrganisation();
  {
    grpc::ClientContext ctx;
    v1::CreatePoolRequest r;
    r.mutable_pool()->set_name("enforced");
    r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    v1::PoolClassRule* rule = r.mutable_pool()->add_class_rules();  // Its work is inference.
    rule->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    rule->set_admission(v1::CLASS_ADMISSION_ADMIT);
    r.mutable_pool()->set_claim_deadline_seconds(60);
    r.mutable_pool()->set_lease_seconds(30);
    v1::CreatePoolResponse resp;
    ASSERT_TRUE(inventory_->CreatePool(&ctx, r, &resp).ok());
    EXPECT_EQ(resp.pool().lease_seconds(), 30);
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name("e1");
    r.mutable_node()->set_pool("enforced");
    r.mutable_node()->set_cpu_milli(64'000);
    r.mutable_node()->set_memory_mib(512'000);
    for (int i = 0; i < 2; ++i) {
      v1::Gpu* gpu = r.mutable_node()->add_gpus();
      gpu->set_index(i);
      gpu->set_model("L4");
    }
    v1::RegisterNodeResponse resp;
    ASSERT_TRUE(inventory_->RegisterNode(&ctx, r, &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::SetQuotaRequest r;
    r.mutable_quota()->set_team("inference");
    r.mutable_quota()->set_pool("enforced");
    r.mutable_quota()->set_nominal_milli(2000);
    v1::SetQuotaResponse resp;
    ASSERT_TRUE(governance_->SetQuota(&ctx, r, &resp).ok());
  }
  auto admit = [&](const std::string& key) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.set_pool("enforced");
    req.mutable_shape()->set_whole_gpus(1);
    v1::RequestCapacityResponse resp;
    EXPECT_TRUE(Request(req, &resp).ok());
    EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
    EXPECT_TRUE(resp.request().has_enforce_at());
    return resp.request().id();
  };
  const int64_t held = admit("held");
  const int64_t forgotten = admit("forgotten");
  auto claim = [&](int64_t id, const std::string& holder, std::vector<int32_t> members,
                   v1::ClaimAllocationResponse* resp) {
    grpc::ClientContext ctx;
    v1::ClaimAllocationRequest r;
    r.set_id(id);
    r.set_holder(holder);
    for (int32_t m : members) r.add_members(m);
    return allocation_->ClaimAllocation(&ctx, r, resp);
  };
  auto renew = [&](int64_t id, const std::string& holder, v1::RenewLeaseResponse* resp) {
    grpc::ClientContext ctx;
    v1::RenewLeaseRequest r;
    r.set_id(id);
    r.set_holder(holder);
    return allocation_->RenewLease(&ctx, r, resp);
  };
  v1::ClaimAllocationResponse claimed;
  ASSERT_TRUE(claim(held, "pod:7f3a", {}, &claimed).ok());
  ASSERT_EQ(claimed.request().claims_size(), 1);
  EXPECT_EQ(claimed.request().claims(0).holder(), "pod:7f3a");
  EXPECT_EQ(claimed.request().enforce_at().seconds(),
            absl::ToUnixSeconds(clock_.TimeNow() + absl::Seconds(30)));
  ASSERT_TRUE(claim(held, "pod:7f3a", {0}, &claimed).ok());  // Idempotent.
  const std::string before = RowCounts();
  grpc::Status stranger = claim(held, "pod:0000", {}, &claimed);
  EXPECT_EQ(stranger.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(stranger.error_message().find("claimed by pod:7f3a"), std::string::npos)
      << stranger.error_message();
  struct Bad {
    int64_t id;
    const char* holder;
    std::vector<int32_t> members;
    grpc::StatusCode code;
    const char* field;
  };
  for (const Bad& b :
       std::vector<Bad>{{0, "pod:1", {}, grpc::StatusCode::INVALID_ARGUMENT, "id:"},
                        {held + 1000, "pod:1", {}, grpc::StatusCode::NOT_FOUND, "id:"},
                        {held, "", {}, grpc::StatusCode::INVALID_ARGUMENT, "holder:"},
                        {held, "pod;1", {}, grpc::StatusCode::INVALID_ARGUMENT, "holder:"},
                        {held, "pod:1", {-1}, grpc::StatusCode::INVALID_ARGUMENT, "members[0]:"},
                        {held, "pod:1", {1}, grpc::StatusCode::INVALID_ARGUMENT, "members[0]:"}}) {
    SCOPED_TRACE(b.field);
    grpc::Status status = claim(b.id, b.holder, b.members, &claimed);
    EXPECT_EQ(status.error_code(), b.code) << status.error_message();
    EXPECT_EQ(status.error_message().rfind(b.field, 0), 0u) << status.error_message();
  }
  EXPECT_EQ(RowCounts(), before);

  // Renewed at +20 s: the lease runs to +50 s. The other allocation, never
  // claimed, ends at its claim deadline (+60 s).
  const absl::Time start = clock_.TimeNow();
  clock_.Advance(absl::Seconds(20));
  v1::RenewLeaseResponse renewed;
  ASSERT_TRUE(renew(held, "pod:7f3a", &renewed).ok());
  EXPECT_EQ(renewed.request().enforce_at().seconds(),
            absl::ToUnixSeconds(start + absl::Seconds(50)));
  grpc::Status not_holder = renew(held, "pod:0000", &renewed);
  EXPECT_EQ(not_holder.error_code(), grpc::StatusCode::FAILED_PRECONDITION);

  grpc::ClientContext watch_ctx;
  v1::WatchAllocationsRequest watch;
  watch.set_pool("enforced");
  auto reader = WatchFromNow(&watch_ctx, watch);
  clock_.Advance(absl::Seconds(45));  // +65 s: both are due.
  std::map<int64_t, v1::CapacityRequest> ended;
  v1::WatchAllocationsResponse event;
  while (ended.size() < 2 && reader->Read(&event)) {
    if (event.type() == v1::ALLOCATION_EVENT_TYPE_RELEASED)
      ended[event.request().id()] = event.request();
  }
  watch_ctx.TryCancel();
  ASSERT_EQ(ended.size(), 2u);
  EXPECT_EQ(ended[held].reason_code(), "LEASE_EXPIRED");
  EXPECT_EQ(ended[forgotten].reason_code(), "UNCLAIMED");
  auto held_end = db_->QueryValue(absl::StrCat(
      "SELECT extract(epoch FROM updated_at)::bigint FROM requests WHERE id = ", held));
  ASSERT_THAT(held_end, IsOk());
  EXPECT_EQ(*held_end, absl::StrCat(absl::ToUnixSeconds(start + absl::Seconds(20))));
  // Its capacity returned: both GPUs are admitted again.
  admit("again-1");
  admit("again-2");
  // A renewal of an ended allocation says so.
  EXPECT_EQ(renew(held, "pod:7f3a", &renewed).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

}  // namespace
}  // namespace arbiter::server
