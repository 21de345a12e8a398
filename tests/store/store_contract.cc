#include "tests/store/store_contract.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"

#include "core/arbitration.h"
#include "core/budget.h"
#include "core/mig.h"
#include "ledger/chain.h"
#include "tests/core/test_state.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::store::contract {

using ::arbiter::testing::FractionSpec;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::IsOkAndHolds;
using ::arbiter::testing::kT0;
using ::arbiter::testing::MakeNode;
using ::arbiter::testing::StatusIs;
using ::arbiter::testing::WholeSpec;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::SizeIs;

void StoreContractTest::Open(const ContractOptions& options) {
  under_test_.reset();
  auto made = GetParam().make(options);
  ASSERT_THAT(made, IsOk());
  under_test_ = std::move(*made);
}

namespace {

// A throwaway Ed25519 key pair for checkpoint signatures.
constexpr char kPrivateKey[] =
    "-----BEGIN PRIVATE KEY-----\n"
    "MC4CAQAwBQYDK2VwBCIEIGiZ24VlpNEtImNIDS0BEGoMN6mt11yjNpYMgbCHv8+s\n"
    "-----END PRIVATE KEY-----\n";
constexpr char kPublicKey[] =
    "-----BEGIN PUBLIC KEY-----\n"
    "MCowBQYDK2VwAyEALfueog/uSvtmy0A8Upp/yJ6r95JKHUMFHnjaIq2ia8A=\n"
    "-----END PUBLIC KEY-----\n";

// A time with sub-microsecond digits: stores keep microseconds.
const absl::Time kFine = kT0 + absl::Nanoseconds(1'234'567);

// Loads the state and builds a small organisation on it through core,
// committing it: cluster "east", pools "serving" and "batch", teams "org"
// and "t" (under "org"; "serving" lends to training and analytics), a quota of 3 GPUs for "t" in
// "serving" and node "n1" with four H100s.
// Team "t"'s SLO for its "chat" service in "serving": p99 250 ms over
// 5-minute windows.
core::Slo ChatSlo() {
  core::Slo slo;
  slo.team = "t";
  slo.service = "chat";
  slo.pool = "serving";
  slo.p99_target_us = 250'000;
  slo.window = absl::Minutes(5);
  slo.penalty_micros_per_minute = 1000;
  return slo;
}

core::State Organisation(Store& store) {
  absl::StatusOr<core::State> loaded = store.LoadState();
  EXPECT_THAT(loaded, IsOk());
  core::State s = std::move(*loaded);
  core::ChangeSet ch;
  EXPECT_THAT(core::CreateCluster(s, {"east", "H100 cluster"}, ch), IsOk());
  core::Pool serving{"serving", core::LatencyClass::kServing, ""};
  serving.lends_to = {core::WorkloadClass::kTraining, core::WorkloadClass::kBatchAnalytics};
  EXPECT_THAT(core::CreatePool(s, serving, ch), IsOk());
  core::Pool batch{"batch", core::LatencyClass::kBatch, "spare"};
  batch.reclaim_grace_seconds = 45;
  batch.queueing = core::QueueingPolicy::kStrict;
  batch.starvation_limit_seconds = 600;
  EXPECT_THAT(core::CreatePool(s, batch, ch), IsOk());
  EXPECT_THAT(core::CreateTeam(s, {"org", "", 1000}, ch), IsOk());
  EXPECT_THAT(core::CreateTeam(s, {"t", "org", 2000}, ch), IsOk());
  EXPECT_THAT(core::SetQuota(s, {"t", "serving", 3000}, kT0, ch), IsOk());
  core::Node node = MakeNode("n1", 4, "H100-80GB");
  node.cluster = "east";
  node.topology_domain = "rack-1";
  EXPECT_THAT(core::RegisterNode(s, node, kT0, ch), IsOk());
  EXPECT_THAT(store.Commit(ch), IsOk());
  return s;
}

// Decides `spec` in `s` and commits it.
absl::StatusOr<core::CapacityRequest> Request(Store& store, core::State& s,
                                              const core::CapacityRequestSpec& spec,
                                              absl::Time now = kT0) {
  core::ChangeSet ch;
  auto out = core::RequestCapacity(s, spec, now, ch);
  if (!out.ok()) return out.status();
  absl::Status committed = store.Commit(ch);
  if (!committed.ok()) return committed;
  return out->request;
}

int64_t HeadSeq(Store& store) {
  auto entries = store.ListLedger(LedgerFilter{0, 100000});
  EXPECT_THAT(entries, IsOk());
  return entries->empty() ? 0 : entries->back().seq;
}

TEST_P(StoreContractTest, AnEmptyStoreHoldsTheCatalogOnly) {
  auto state = store().LoadState();
  ASSERT_THAT(state, IsOk());
  EXPECT_EQ(state->gpu_models().size(), 11u);
  EXPECT_TRUE(state->teams().empty());
  EXPECT_TRUE(state->nodes().empty());
  EXPECT_EQ(state->next_request_id(), 1);
  auto models = store().ListGpuModels();
  ASSERT_THAT(models, IsOk());
  ASSERT_EQ(models->size(), 11u);
  EXPECT_EQ(models->front().name, "A10");
  EXPECT_EQ(models->back().name, "V100M32");
  const auto h100 = std::find_if(models->begin(), models->end(),
                                 [](const core::GpuModel& m) { return m.name == "H100-80GB"; });
  ASSERT_NE(h100, models->end());
  EXPECT_EQ(h100->memory_mib, 81920);
  EXPECT_TRUE(h100->mig_capable);
  EXPECT_FALSE(h100->mig_profiles.empty());
  EXPECT_THAT(store().ListLedger(LedgerFilter{}), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListClusters(), IsOkAndHolds(IsEmpty()));
  auto metrics = store().LoadMetricsSnapshot();
  ASSERT_THAT(metrics, IsOk());
  EXPECT_EQ(metrics->ledger_entries, 0);
  EXPECT_EQ(metrics->queued, 0);
  EXPECT_TRUE(metrics->allocated.empty());
  // An empty change set writes nothing, not even a ledger entry.
  EXPECT_THAT(store().Commit(core::ChangeSet()), IsOk());
  EXPECT_EQ(HeadSeq(store()), 0);
}

TEST_P(StoreContractTest, TheOrganisationLoadsBack) {
  core::State s = Organisation(store());
  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_TRUE(loaded->HasCluster("east"));
  ASSERT_NE(loaded->FindPool("batch"), nullptr);
  EXPECT_EQ(loaded->FindPool("serving")->lends_to, s.FindPool("serving")->lends_to);
  EXPECT_EQ(loaded->FindPool("serving")->lends_to.size(), 2u);
  EXPECT_EQ(loaded->FindPool("batch")->reclaim_grace_seconds, 45);
  EXPECT_EQ(loaded->FindPool("batch")->queueing, core::QueueingPolicy::kStrict);
  EXPECT_EQ(loaded->FindPool("batch")->starvation_limit_seconds, 600);
  EXPECT_EQ(loaded->FindPool("serving")->queueing, core::QueueingPolicy::kBackfill);
  EXPECT_EQ(loaded->FindPool("batch")->description, "spare");
  ASSERT_NE(loaded->FindTeam("t"), nullptr);
  EXPECT_EQ(loaded->FindTeam("t")->parent, "org");
  EXPECT_EQ(loaded->FindTeam("t")->weight_milli, 2000);
  EXPECT_EQ(loaded->CohortOf("t"), "org");
  ASSERT_NE(loaded->FindQuota("t", "serving"), nullptr);
  EXPECT_EQ(loaded->FindQuota("t", "serving")->nominal_milli, 3000);
  const core::Node* n = loaded->FindNode("east", "n1");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->id, s.FindNode("east", "n1")->id);
  EXPECT_EQ(n->topology_domain, "rack-1");
  EXPECT_EQ(n->gpus.size(), 4u);
  EXPECT_EQ(n->gpus[3].model, "H100-80GB");
  EXPECT_EQ(n->gpus[3].memory_mib, 81920);
  EXPECT_EQ(loaded->next_node_id(), s.next_node_id());

  EXPECT_THAT(store().ListClusters(), IsOkAndHolds(SizeIs(1)));
  auto pools = store().ListPools();
  ASSERT_THAT(pools, IsOk());
  ASSERT_EQ(pools->size(), 2u);
  EXPECT_EQ((*pools)[0].name, "batch");  // By name.
  EXPECT_EQ((*pools)[1].name, "serving");
  auto teams = store().ListTeams();
  ASSERT_THAT(teams, IsOk());
  ASSERT_EQ(teams->size(), 2u);
  EXPECT_EQ((*teams)[0].name, "org");
  EXPECT_EQ((*teams)[1].parent, "org");
  EXPECT_THAT(store().ListNodes("", "batch"), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListNodes("west", ""), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListNodes("east", "serving"), IsOkAndHolds(SizeIs(1)));
}

// A model set through the catalog API loads back with its MIG table,
// vendor and NVLink domain; changing a seeded model keeps its place.
TEST_P(StoreContractTest, CatalogModelsLoadBack) {
  core::State s = Organisation(store());
  core::GpuModel b200;
  b200.name = "B200";
  b200.memory_mib = 183'359;
  b200.sm_count = 148;
  b200.tdp_watts = 1000;
  b200.mig_capable = true;
  b200.nvlink_domain_size = 8;
  b200.mig_profiles = {
      core::MigProfile{"1g.23gb", 19, 1, 1, 18, 22'528, 7, false, {0, 1, 2, 3, 4, 5, 6}},
      core::MigProfile{"1g.23gb+me", 20, 1, 1, 18, 22'528, 1, true, {0, 1, 2, 3, 4, 5, 6}},
      core::MigProfile{"7g.180gb", 0, 8, 7, 148, 181'248, 1, false, {0}}};
  core::GpuModel mi300x;
  mi300x.name = "MI300X";
  mi300x.vendor = "amd";
  mi300x.memory_mib = 196'608;
  mi300x.sm_count = 304;
  mi300x.tdp_watts = 750;
  core::GpuModel h100 = *s.FindGpuModel("H100-80GB");
  h100.nvlink_domain_size = 8;
  core::ChangeSet ch;
  for (const core::GpuModel& m : {b200, mi300x, h100}) {
    ASSERT_THAT(core::SetGpuModel(s, m, ch), IsOk());
  }
  ASSERT_THAT(store().Commit(ch), IsOk());
  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  for (const core::GpuModel& m : {b200, mi300x, h100}) {
    SCOPED_TRACE(m.name);
    ASSERT_NE(loaded->FindGpuModel(m.name), nullptr);
    EXPECT_EQ(*loaded->FindGpuModel(m.name), m);
  }
  auto listed = store().ListGpuModels();
  ASSERT_THAT(listed, IsOk());
  EXPECT_EQ(listed->size(), 13u);
}

// Node lifecycle changes load back: cordon and drain (with its deadline),
// failure (with its time), heartbeats (as "has heartbeats"), updated facts
// and UUIDs; a removed node is gone from the state and the listings, and its
// name and UUIDs may be registered again.
TEST_P(StoreContractTest, NodeLifecycleLoadsBack) {
  core::State s = Organisation(store());
  core::Node n2 = MakeNode("n2", 2, "H100-80GB");
  n2.cluster = "east";
  n2.gpus[0].uuid = "GPU-n2-0";
  core::ChangeSet ch;
  ASSERT_THAT(core::RegisterNode(s, n2, kT0, ch), IsOk());
  ASSERT_THAT(core::DrainNode(s, {"east", "n1"}, 60, kT0, ch), IsOk());
  core::Node facts = *s.FindNode("east", "n1");
  facts.topology_domain = "rack-2";
  facts.cpu_milli = 32'000;
  facts.gpus[1].uuid = "GPU-n1-1";
  ASSERT_THAT(core::UpdateNode(s, facts, kT0, ch), IsOk());
  ASSERT_THAT(core::NodeHeartbeat(s, {"east", "n1"}, kT0, ch), IsOk());
  ASSERT_THAT(core::FailNode(s, {"east", "n2"}, kT0 - absl::Seconds(30), kT0, ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());

  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  const core::Node& n1 = *loaded->FindNode("east", "n1");
  EXPECT_TRUE(n1.cordoned);
  EXPECT_EQ(n1.drain_deadline, kT0 + absl::Seconds(60));
  EXPECT_EQ(n1.last_heartbeat, kT0);
  EXPECT_EQ(n1.topology_domain, "rack-2");
  EXPECT_EQ(n1.cpu_milli, 32'000);
  EXPECT_EQ(n1.gpus[1].uuid, "GPU-n1-1");
  EXPECT_FALSE(n1.schedulable());
  const core::Node& failed = *loaded->FindNode("east", "n2");
  EXPECT_EQ(failed.health, core::NodeHealth::kFailed);
  EXPECT_EQ(failed.failed_at, kT0 - absl::Seconds(30));
  EXPECT_EQ(failed.last_heartbeat, absl::InfinitePast());
  const int64_t failed_id = failed.id;

  core::ChangeSet removal;
  ASSERT_THAT(core::RemoveNode(s, {"east", "n2"}, removal), IsOk());
  ASSERT_THAT(store().Commit(removal), IsOk());
  loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->FindNode("east", "n2"), nullptr);
  EXPECT_EQ(loaded->FindGpuByUuid("GPU-n2-0"), nullptr);
  EXPECT_EQ(loaded->next_node_id(), failed_id + 1);  // A removed node's id is not reused.
  EXPECT_THAT(store().ListNodes("east", ""), IsOkAndHolds(SizeIs(1)));
  core::ChangeSet again;
  ASSERT_THAT(core::RegisterNode(s, n2, kT0, again), IsOk());
  ASSERT_THAT(store().Commit(again), IsOk());
  loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  ASSERT_NE(loaded->FindNode("east", "n2"), nullptr);
  EXPECT_NE(loaded->FindNode("east", "n2")->id, failed_id);
  EXPECT_EQ(loaded->FindNode("east", "n2")->health, core::NodeHealth::kHealthy);
}

// Every governance change core makes, committed and read back through the
// state and through the list reads.
TEST_P(StoreContractTest, GovernanceChangesLoadBack) {
  core::State s = Organisation(store());
  core::ChangeSet ch;
  core::Quota q{"t", "batch", 2000, "H100-80GB", core::kUnlimited, 1000};
  ASSERT_THAT(core::SetQuota(s, q, kT0, ch), IsOk());
  const core::RoleBinding admin{"alice", core::Role::kTeamAdmin, core::ScopeKind::kTeam, "t"};
  const core::RoleBinding auditor{"bob", core::Role::kAuditor, core::ScopeKind::kOrg, ""};
  ASSERT_THAT(core::GrantRole(s, admin, ch), IsOk());
  ASSERT_THAT(core::GrantRole(s, auditor, ch), IsOk());
  core::AuthorityRule rule;
  rule.pool = "serving";
  rule.action = core::ApprovalAction::kLarge;
  rule.approver = "carol";
  rule.limit_milli = 8000;
  rule.threshold_milli = 2000;
  ASSERT_THAT(core::SetAuthorityRule(s, rule, ch), IsOk());
  const core::Price price{"H100-80GB", core::LatencyClass::kServing, 2'500'000, kFine};
  ASSERT_THAT(core::SetPrice(s, price, ch), IsOk());
  const core::Budget budget{"t", 1'000'000, 2'000'000, core::OverBudget::kApproval};
  ASSERT_THAT(core::SetBudget(s, budget, ch), IsOk());
  const core::Slo slo = ChatSlo();
  ASSERT_THAT(core::SetSlo(s, slo, ch), IsOk());
  core::IdlePolicy idle;
  idle.workload_class = core::WorkloadClass::kTraining;
  idle.threshold_milli = 50;
  idle.window = absl::Minutes(30);
  idle.action = core::IdleAction::kNotify;
  idle.notice = absl::Minutes(10);
  ASSERT_THAT(core::SetIdlePolicy(s, idle, ch), IsOk());
  core::ClassRule class_rule{core::WorkloadClass::kTraining, core::WorkloadClass::kInference,
                             core::CoexistenceRule{core::Isolation::kForbidden, false}};
  ch.changes.emplace_back(class_rule);
  ch.changes.emplace_back(core::DelegationWrite{{"alice", "dave", kFine + absl::Hours(24)}});
  ch.changes.emplace_back(core::DelegationWrite{{"alice", "erin", kT0}});
  ASSERT_THAT(store().Commit(ch), IsOk());
  // Revocations and removals.
  core::ChangeSet undo;
  undo.changes.emplace_back(core::RoleBindingWrite{auditor, true});
  undo.changes.emplace_back(core::DelegationWrite{{"alice", "erin", kT0}, true});
  ASSERT_THAT(store().Commit(undo), IsOk());

  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  const core::Quota* lq = loaded->FindQuota("t", "batch", "H100-80GB");
  ASSERT_NE(lq, nullptr);
  EXPECT_EQ(lq->borrowing_limit_milli, core::kUnlimited);
  EXPECT_EQ(lq->lending_limit_milli, 1000);
  EXPECT_EQ(loaded->role_bindings(), (std::set<core::RoleBinding>{admin}));
  EXPECT_EQ(loaded->authority_rules(), (std::set<core::AuthorityRule>{rule}));
  const auto* history = loaded->PriceHistory("H100-80GB", core::LatencyClass::kServing);
  ASSERT_NE(history, nullptr);
  ASSERT_EQ(history->size(), 1u);
  // Microsecond precision.
  EXPECT_EQ(history->begin()->first, absl::FromUnixMicros(absl::ToUnixMicros(kFine)));
  EXPECT_EQ(history->begin()->second, 2'500'000);
  ASSERT_NE(loaded->FindBudget("t"), nullptr);
  EXPECT_EQ(*loaded->FindBudget("t"), budget);
  ASSERT_NE(loaded->FindSlo("t", "chat"), nullptr);
  EXPECT_EQ(loaded->FindSlo("t", "chat")->window, absl::Minutes(5));
  ASSERT_EQ(loaded->delegations().size(), 1u);
  EXPECT_EQ(loaded->delegations().begin()->to, "dave");
  const core::CoexistenceRule& cr =
      loaded->coexistence().Rule(core::WorkloadClass::kInference, core::WorkloadClass::kTraining);
  EXPECT_EQ(cr.gpu, core::Isolation::kForbidden);
  EXPECT_FALSE(cr.same_node);

  EXPECT_THAT(store().ListRoleBindings(), IsOkAndHolds(ElementsAre(admin)));
  EXPECT_THAT(store().ListAuthorityRules(), IsOkAndHolds(ElementsAre(rule)));
  EXPECT_THAT(store().ListBudgets(), IsOkAndHolds(ElementsAre(budget)));
  auto prices = store().ListPrices();
  ASSERT_THAT(prices, IsOk());
  ASSERT_EQ(prices->size(), 1u);
  EXPECT_EQ((*prices)[0].micros_per_gpu_hour, 2'500'000);
  auto delegations = store().ListDelegations();
  ASSERT_THAT(delegations, IsOk());
  ASSERT_EQ(delegations->size(), 1u);
  EXPECT_EQ((*delegations)[0].expires_at,
            absl::FromUnixMicros(absl::ToUnixMicros(kFine + absl::Hours(24))));
  auto coexistence = store().GetCoexistence();
  ASSERT_THAT(coexistence, IsOk());
  EXPECT_EQ(coexistence->Rule(core::WorkloadClass::kTraining, core::WorkloadClass::kInference).gpu,
            core::Isolation::kForbidden);
  auto slos = store().ListSlos("t");
  ASSERT_THAT(slos, IsOk());
  ASSERT_EQ(slos->size(), 1u);
  EXPECT_EQ((*slos)[0].p99_target_us, 250'000);
  EXPECT_EQ((*slos)[0].penalty_micros_per_minute, 1000);
  EXPECT_THAT(store().ListSlos("org"), IsOkAndHolds(IsEmpty()));
  auto policies = store().ListIdlePolicies();
  ASSERT_THAT(policies, IsOk());
  ASSERT_EQ(policies->size(), 1u);
  EXPECT_EQ((*policies)[0].workload_class, core::WorkloadClass::kTraining);
  EXPECT_EQ((*policies)[0].action, core::IdleAction::kNotify);
  EXPECT_EQ((*policies)[0].notice, absl::Minutes(10));
  auto quotas = store().ListQuotas("");
  ASSERT_THAT(quotas, IsOk());
  ASSERT_EQ(quotas->size(), 2u);
  EXPECT_EQ((*quotas)[0].quota.pool, "batch");  // By team, pool, model.
  EXPECT_EQ((*quotas)[1].quota.pool, "serving");
}

// Requests of every kind of write: admitted, queued, then released with the
// queued one admitted in the same change set; a MIG request; a
// reservation.
TEST_P(StoreContractTest, RequestsAndPlacementsLoadBack) {
  core::State s = Organisation(store());
  auto a = Request(store(), s, WholeSpec("a", 1, 2));
  ASSERT_THAT(a, IsOk());
  ASSERT_EQ(a->state, core::RequestState::kAdmitted);
  core::CapacityRequestSpec together = WholeSpec("b", 1, 2);
  together.topology = core::Topology::kSameNode;
  together.description = "a \"quoted\", {braced} \\ text";
  auto b = Request(store(), s, together);
  ASSERT_THAT(b, IsOk());
  ASSERT_EQ(b->state, core::RequestState::kQueued);
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, a->id, kFine + absl::Seconds(1), ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  core::CapacityRequestSpec mig = WholeSpec("m", 1, 1);
  mig.shape.gpu = core::MigShape{"3g.40gb", 0};
  auto m = Request(store(), s, mig);
  ASSERT_THAT(m, IsOk());
  ASSERT_EQ(m->state, core::RequestState::kAdmitted);
  core::CapacityRequestSpec later = WholeSpec("later", 1, 1);
  later.start_at = kT0 + absl::Hours(2);
  later.duration = absl::Hours(1);
  auto reserved = Request(store(), s, later);
  ASSERT_THAT(reserved, IsOk());
  ASSERT_EQ(reserved->state, core::RequestState::kReserved);

  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->next_request_id(), s.next_request_id());
  ASSERT_EQ(loaded->live_requests().size(), 3u);
  const core::CapacityRequest& lb = loaded->live_requests().at(b->id);
  EXPECT_EQ(lb.state, core::RequestState::kAdmitted);
  EXPECT_EQ(lb.placements, s.FindLiveRequest(b->id)->placements);
  EXPECT_EQ(lb.body_hash, b->body_hash);
  EXPECT_EQ(lb.spec.topology, core::Topology::kSameNode);
  EXPECT_EQ(lb.spec.description, together.description);
  EXPECT_EQ(loaded->live_requests().at(m->id).placements, s.FindLiveRequest(m->id)->placements);
  EXPECT_EQ(loaded->live_requests().at(m->id).spec.shape.mig().profile, "3g.40gb");
  EXPECT_EQ(loaded->FindLiveRequest(reserved->id)->holds, reserved->holds);
  EXPECT_EQ(loaded->FindLiveRequest(reserved->id)->spec.start_at, later.start_at);
  EXPECT_EQ(loaded->UsedMilli("t", "serving"), s.UsedMilli("t", "serving"));
  EXPECT_EQ(loaded->timers(), s.timers());
  const core::Node& node = *loaded->FindNode("east", "n1");
  const core::Node& expected = *s.FindNode("east", "n1");
  for (size_t g = 0; g < node.gpus.size(); ++g) {
    EXPECT_EQ(node.gpus[g].allocated_milli, expected.gpus[g].allocated_milli) << g;
    EXPECT_EQ(node.gpus[g].exclusive, expected.gpus[g].exclusive) << g;
    EXPECT_EQ(core::FormatMigLayout(node.gpus[g].mig_layout),
              core::FormatMigLayout(expected.gpus[g].mig_layout))
        << g;
  }
  // The idempotency index: live and finished requests, with their hashes.
  ASSERT_NE(loaded->FindIdempotencyKey("a"), nullptr);
  EXPECT_EQ(loaded->FindIdempotencyKey("a")->request_id, a->id);
  EXPECT_EQ(loaded->FindIdempotencyKey("a")->body_hash, a->body_hash);
  ASSERT_NE(loaded->FindIdempotencyKey("b"), nullptr);
  EXPECT_EQ(loaded->FindIdempotencyKey("b")->request_id, b->id);
  EXPECT_EQ(loaded->FindIdempotencyKey("nope"), nullptr);

  // The released request keeps the placements it was admitted with.
  auto released = store().GetRequest(a->id);
  ASSERT_THAT(released, IsOk());
  EXPECT_EQ(released->state, core::RequestState::kReleased);
  EXPECT_EQ(released->updated_at,
            absl::FromUnixMicros(absl::ToUnixMicros(kFine)) + absl::Seconds(1));
  ASSERT_EQ(released->placements.size(), 1u);
  EXPECT_EQ(released->placements[0].node_id, a->placements[0].node_id);
  EXPECT_EQ(released->placements[0].gpu_indices, a->placements[0].gpu_indices);
  EXPECT_EQ(released->placements[0].gpu_milli, 1000);
  EXPECT_TRUE(released->placements[0].exclusive);
  EXPECT_EQ(released->admitted_at, kT0);
  EXPECT_THAT(store().GetRequest(99), StatusIs(absl::StatusCode::kNotFound));

  auto nodes = store().ListNodes("east", "");
  ASSERT_THAT(nodes, IsOk());
  ASSERT_EQ(nodes->size(), 1u);
  EXPECT_EQ((*nodes)[0].gpus[0].allocated_milli, expected.gpus[0].allocated_milli);
  auto quotas = store().ListQuotas("t");
  ASSERT_THAT(quotas, IsOk());
  ASSERT_EQ(quotas->size(), 1u);
  EXPECT_EQ((*quotas)[0].used_milli, s.UsedMilli("t", "serving"));
}

// Start-up reads of the ended requests only what the scope asks for: the
// keys of those that ended in the idempotency window, and what those
// admitted in the budget's month cost, as sums.
TEST_P(StoreContractTest, TheLoadScopeBoundsWhatIsReadOfHistory) {
  core::State s = Organisation(store());
  {
    core::ChangeSet ch;
    ASSERT_THAT(core::SetPrice(s, {"H100-80GB", core::LatencyClass::kServing, 3'600'000, kT0}, ch),
                IsOk());
    ASSERT_THAT(store().Commit(ch), IsOk());
  }
  const absl::Time month = core::MonthStart(kT0);
  // "old" runs from kT0 - 2 h for an hour; "recent" from kT0 for an hour
  // and "live" from kT0 on.
  auto release = [&](int64_t id, absl::Time at) {
    core::ChangeSet ch;
    ASSERT_THAT(core::ReleaseRequest(s, id, at, ch), IsOk());
    ASSERT_THAT(store().Commit(ch), IsOk());
  };
  auto old = Request(store(), s, WholeSpec("old", 1, 1), kT0 - absl::Hours(2));
  ASSERT_THAT(old, IsOk());
  release(old->id, kT0 - absl::Hours(1));
  auto recent = Request(store(), s, WholeSpec("recent", 1, 1), kT0);
  ASSERT_THAT(recent, IsOk());
  auto live = Request(store(), s, WholeSpec("live", 1, 1), kT0);
  ASSERT_THAT(live, IsOk());
  release(recent->id, kT0 + absl::Hours(1));
  const int64_t spent = s.Spend("t", month);
  ASSERT_GT(spent, 0);
  // What budget reports read: the month's sum, as SpendBetween has it.
  auto month_spend = store().MonthSpend(month);
  ASSERT_THAT(month_spend, IsOk());
  int64_t stored_costs = 0;
  for (int64_t id : {old->id, recent->id, live->id}) {
    auto stored = store().GetRequest(id);
    ASSERT_THAT(stored, IsOk());
    stored_costs += stored->cost_micros;
  }
  EXPECT_EQ(*month_spend, (std::map<std::string, int64_t>{{"t", stored_costs}}));
  EXPECT_THAT(store().SpendBetween(month, core::NextMonthStart(month)), IsOkAndHolds(*month_spend));
  EXPECT_THAT(store().MonthSpend(core::NextMonthStart(month)), IsOkAndHolds(IsEmpty()));

  // Everything, as tools read it.
  auto all = store().LoadState();
  ASSERT_THAT(all, IsOk());
  EXPECT_NE(all->FindIdempotencyKey("old"), nullptr);
  EXPECT_EQ(all->Spend("t", month), spent);

  // The window from kT0: "old" ended before it and is forgotten.
  auto scoped = store().LoadState(LoadScope{kT0, month});
  ASSERT_THAT(scoped, IsOk());
  EXPECT_EQ(scoped->FindIdempotencyKey("old"), nullptr);
  ASSERT_NE(scoped->FindIdempotencyKey("recent"), nullptr);
  EXPECT_EQ(scoped->FindIdempotencyKey("recent")->request_id, recent->id);
  EXPECT_TRUE(scoped->FindIdempotencyKey("recent")->ended);
  EXPECT_EQ(scoped->FindIdempotencyKey("recent")->body_hash, recent->body_hash);
  ASSERT_NE(scoped->FindIdempotencyKey("live"), nullptr);
  EXPECT_FALSE(scoped->FindIdempotencyKey("live")->ended);
  EXPECT_EQ(scoped->live_requests().size(), 1u);
  // The month's spend does not depend on the keys' window.
  EXPECT_EQ(scoped->Spend("t", month), spent);
  auto next_month = store().LoadState(LoadScope{kT0, core::NextMonthStart(kT0)});
  ASSERT_THAT(next_month, IsOk());
  EXPECT_EQ(next_month->Spend("t", month), live->cost_micros);

  // Once forgotten, a key may be used again: the store keeps both rows, and
  // a load remembers the key for its latest request.
  core::State later = std::move(*scoped);
  later.set_idempotency_window(absl::Hours(1));
  auto reused = Request(store(), later, WholeSpec("recent", 1, 1), kT0 + absl::Hours(3));
  ASSERT_THAT(reused, IsOk());
  EXPECT_NE(reused->id, recent->id);
  EXPECT_THAT(store().GetRequest(recent->id), IsOk());
  auto reloaded = store().LoadState();
  ASSERT_THAT(reloaded, IsOk());
  ASSERT_NE(reloaded->FindIdempotencyKey("recent"), nullptr);
  EXPECT_EQ(reloaded->FindIdempotencyKey("recent")->request_id, reused->id);
}

// A load that reads no request (the last one ended before the keys'
// window) still goes on from the highest id ever given.
TEST_P(StoreContractTest, IdsGoOnAfterRequestsTheLoadDoesNotRead) {
  core::State s = Organisation(store());
  auto ended = Request(store(), s, WholeSpec("ended", 1, 1), kT0);
  ASSERT_THAT(ended, IsOk());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, ended->id, kT0 + absl::Minutes(1), ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  auto loaded = store().LoadState(LoadScope{kT0 + absl::Hours(1), core::MonthStart(kT0)});
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->FindIdempotencyKey("ended"), nullptr);
  EXPECT_EQ(loaded->next_request_id(), ended->id + 1);
}

// FindEndedKeys: of the keys asked, those of requests that ended at or
// after `since`, each with its latest request; live and older ones, and
// keys never used, are absent.
TEST_P(StoreContractTest, FindEndedKeysFindsTheLatestEndedRequestOfEachKeySince) {
  core::State s = Organisation(store());
  s.set_idempotency_window(absl::Hours(1));
  auto release = [&](int64_t id, absl::Time at) {
    core::ChangeSet ch;
    ASSERT_THAT(core::ReleaseRequest(s, id, at, ch), IsOk());
    ASSERT_THAT(store().Commit(ch), IsOk());
  };
  auto old = Request(store(), s, WholeSpec("old", 1, 1), kT0);
  auto reused = Request(store(), s, WholeSpec("reused", 1, 1), kT0);
  auto live = Request(store(), s, WholeSpec("live", 1, 1), kT0);
  ASSERT_THAT(old, IsOk());
  ASSERT_THAT(reused, IsOk());
  ASSERT_THAT(live, IsOk());
  release(old->id, kT0 + absl::Minutes(1));
  release(reused->id, kT0 + absl::Minutes(1));
  // "reused" is used again once its window passed, and that request ends too.
  auto again = Request(store(), s, WholeSpec("reused", 1, 1), kT0 + absl::Hours(2));
  ASSERT_THAT(again, IsOk());
  ASSERT_NE(again->id, reused->id);
  release(again->id, kT0 + absl::Hours(2) + absl::Minutes(1));

  auto found =
      store().FindEndedKeys({"old", "reused", "live", "never", "reused"}, kT0 + absl::Minutes(1));
  ASSERT_THAT(found, IsOk());
  std::map<std::string, EndedKey> by_key;
  for (const EndedKey& k : *found) by_key[k.key] = k;
  EXPECT_EQ(found->size(), by_key.size()) << "one row per key";
  ASSERT_EQ(by_key.size(), 2u);
  EXPECT_EQ(by_key["old"].request_id, old->id);
  EXPECT_EQ(by_key["old"].body_hash, old->body_hash);
  EXPECT_EQ(by_key["reused"].request_id, again->id);
  EXPECT_EQ(by_key["reused"].body_hash, again->body_hash);
  // `since` excludes what ended before it.
  found = store().FindEndedKeys({"old", "reused"}, kT0 + absl::Minutes(2));
  ASSERT_THAT(found, IsOk());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].key, "reused");
  found = store().FindEndedKeys({}, kT0);
  ASSERT_THAT(found, IsOk());
  EXPECT_TRUE(found->empty());
}

TEST_P(StoreContractTest, RequestsListNewestFirstWithFiltersAndPages) {
  core::State s = Organisation(store());
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    auto r = Request(store(), s, FractionSpec(absl::StrCat("f", i), 1, 100, 1024));
    ASSERT_THAT(r, IsOk());
    ids.push_back(r->id);
  }
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, ids[1], kT0, ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());

  RequestFilter filter;
  filter.limit = 2;
  auto page1 = store().ListRequests(filter);
  ASSERT_THAT(page1, IsOk());
  ASSERT_EQ(page1->size(), 2u);
  EXPECT_EQ((*page1)[0].id, ids[4]);
  EXPECT_EQ((*page1)[1].id, ids[3]);
  filter.before_id = (*page1)[1].id;
  auto page2 = store().ListRequests(filter);
  ASSERT_THAT(page2, IsOk());
  ASSERT_EQ(page2->size(), 2u);
  EXPECT_EQ((*page2)[0].id, ids[2]);
  EXPECT_EQ((*page2)[1].id, ids[1]);
  EXPECT_EQ((*page2)[0].placements.size(), 1u);
  filter.before_id = ids[1];
  EXPECT_THAT(store().ListRequests(filter), IsOkAndHolds(SizeIs(1)));

  auto released = store().ListRequests(RequestFilter{"t", core::RequestState::kReleased, 0, 10});
  ASSERT_THAT(released, IsOk());
  ASSERT_EQ(released->size(), 1u);
  EXPECT_EQ((*released)[0].id, ids[1]);
  EXPECT_THAT(store().ListRequests(RequestFilter{"org", core::RequestState::kUnspecified, 0, 10}),
              IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListRequests(RequestFilter{"", core::RequestState::kAdmitted, 0, 10}),
              IsOkAndHolds(SizeIs(4)));
  EXPECT_THAT(store().ListRequests(RequestFilter{"", core::RequestState::kUnspecified, 0, 0}),
              IsOkAndHolds(IsEmpty()));

  auto nodes = store().ListNodes("east", "");
  ASSERT_THAT(nodes, IsOk());
  EXPECT_EQ((*nodes)[0].gpus[0].allocated_milli, 400);  // Four of five still share one GPU.
  auto quotas = store().ListQuotas("t");
  ASSERT_THAT(quotas, IsOk());
  EXPECT_EQ((*quotas)[0].used_milli, 400);
}

// What the store refuses, with the codes it refuses it with; a refused
// commit writes nothing of its changes.
TEST_P(StoreContractTest, RefusedCommitsWriteNothing) {
  core::State s = Organisation(store());
  const int64_t head = HeadSeq(store());
  ASSERT_GT(head, 0);
  auto refused = [&](core::Change change, absl::StatusCode code) {
    core::ChangeSet ch;
    ch.changes.emplace_back(core::Cluster{"west", ""});  // Would be fine alone.
    ch.changes.push_back(std::move(change));
    EXPECT_THAT(store().Commit(ch), StatusIs(code));
  };
  refused(core::Cluster{"east", ""}, absl::StatusCode::kAlreadyExists);
  refused(core::Pool{"serving", core::LatencyClass::kServing, ""},
          absl::StatusCode::kAlreadyExists);
  refused(core::Team{"t", "", 1000}, absl::StatusCode::kAlreadyExists);
  refused(core::Team{"u", "nobody", 1000}, absl::StatusCode::kFailedPrecondition);
  refused(core::Quota{"nobody", "serving", 1000}, absl::StatusCode::kFailedPrecondition);
  refused(core::Quota{"t", "nowhere", 1000}, absl::StatusCode::kFailedPrecondition);
  core::Node twin = MakeNode("n1", 1, "H100-80GB");
  twin.cluster = "east";
  twin.id = 77;
  refused(twin, absl::StatusCode::kAlreadyExists);
  core::Node lost = MakeNode("n9", 1, "H100-80GB", "nowhere");
  lost.cluster = "east";
  lost.id = 78;
  refused(lost, absl::StatusCode::kFailedPrecondition);
  refused(core::Price{"NoSuchGPU", core::LatencyClass::kServing, 1, kT0},
          absl::StatusCode::kFailedPrecondition);
  refused(core::Budget{"nobody", 1, 2, core::OverBudget::kDeny},
          absl::StatusCode::kFailedPrecondition);
  const core::RoleBinding binding{"alice", core::Role::kFinance, core::ScopeKind::kOrg, ""};
  {
    core::ChangeSet ch;
    ch.changes.emplace_back(core::RoleBindingWrite{binding, false});
    ASSERT_THAT(store().Commit(ch), IsOk());
  }
  refused(core::RoleBindingWrite{binding, false}, absl::StatusCode::kAlreadyExists);
  // A new request with an id or idempotency key already stored.
  auto a = Request(store(), s, WholeSpec("a", 1, 1));
  ASSERT_THAT(a, IsOk());
  core::CapacityRequest again = *a;
  again.spec.idempotency_key = "other";
  refused(core::RequestWrite{again, true}, absl::StatusCode::kAlreadyExists);

  // Nothing of the refused commits was written: no "west", no ledger entry.
  auto clusters = store().ListClusters();
  ASSERT_THAT(clusters, IsOk());
  ASSERT_EQ(clusters->size(), 1u);
  EXPECT_EQ((*clusters)[0].name, "east");
  EXPECT_EQ(HeadSeq(store()), head + 2);  // The binding and request "a" only.
  EXPECT_THAT(store().GetRequest(500), StatusIs(absl::StatusCode::kNotFound));
  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_FALSE(loaded->HasCluster("west"));
  EXPECT_EQ(loaded->FindIdempotencyKey("other"), nullptr);
  // The chain goes on from where it was.
  core::ChangeSet ok;
  ok.changes.emplace_back(core::Cluster{"west", ""});
  ASSERT_THAT(store().Commit(ok), IsOk());
  auto entries = store().ListLedger(LedgerFilter{});
  ASSERT_THAT(entries, IsOk());
  EXPECT_TRUE(ledger::VerifyChain(*entries, 0, ledger::kGenesisHash).ok);
  EXPECT_EQ(entries->back().seq, head + 3);
}

TEST_P(StoreContractTest, TheLedgerIsAChainOfEveryChange) {
  core::State s = Organisation(store());
  const int64_t head = HeadSeq(store());
  EXPECT_EQ(head, 7);  // Cluster, two pools, two teams, quota, node.
  core::ChangeSet ch;
  auto out = core::RequestCapacity(s, WholeSpec("a", 1, 1), kT0, ch);
  ASSERT_THAT(out, IsOk());
  ASSERT_THAT(core::ReleaseRequest(s, out->request.id, kT0, ch), IsOk());
  ch.changes.emplace_back(core::Cluster{"west", "second"});
  ASSERT_EQ(ch.changes.size(), 3u);
  CommitContext context;
  context.at = kFine;
  context.actors = {"alice", "bob"};
  ASSERT_THAT(store().Commit(ch, context), IsOk());

  auto entries = store().ListLedger(LedgerFilter{});
  ASSERT_THAT(entries, IsOk());
  ASSERT_EQ(entries->size(), 10u);
  std::string prev = ledger::kGenesisHash;
  for (size_t i = 0; i < entries->size(); ++i) {
    const ledger::Entry& e = (*entries)[i];
    EXPECT_EQ(e.seq, static_cast<int64_t>(i) + 1);
    EXPECT_EQ(e.prev_hash, prev);
    EXPECT_EQ(e.hash, ledger::HashOf(e.prev_hash, e));
    prev = e.hash;
  }
  const ledger::Verdict verdict = ledger::VerifyChain(*entries, 0, ledger::kGenesisHash);
  EXPECT_TRUE(verdict.ok) << verdict.problem;
  EXPECT_EQ(verdict.head_seq, 10);
  EXPECT_EQ((*entries)[0].action, "cluster.create");
  EXPECT_EQ((*entries)[0].subject, "cluster/east");
  EXPECT_EQ((*entries)[0].actor, "system");
  EXPECT_EQ((*entries)[0].at, absl::UnixEpoch());
  const ledger::Entry& admitted = (*entries)[7];
  EXPECT_EQ(admitted.action, "request.admitted");
  EXPECT_EQ(admitted.subject, absl::StrCat("request/", out->request.id));
  EXPECT_EQ(admitted.actor, "alice");
  EXPECT_EQ(admitted.at, absl::FromUnixMicros(absl::ToUnixMicros(kFine)));
  EXPECT_EQ((*entries)[8].action, "request.released");
  EXPECT_EQ((*entries)[8].actor, "bob");
  EXPECT_EQ((*entries)[9].actor, "system");
  EXPECT_EQ((*entries)[9].payload, "description=second");

  // Filters and paging.
  EXPECT_THAT(store().ListLedger(LedgerFilter{0, 1000, absl::StrCat("request/", out->request.id)}),
              IsOkAndHolds(SizeIs(2)));
  EXPECT_THAT(store().ListLedger(LedgerFilter{0, 1000, "", "alice"}), IsOkAndHolds(SizeIs(1)));
  EXPECT_THAT(store().ListLedger(LedgerFilter{0, 1000, "", "", "pool.create"}),
              IsOkAndHolds(SizeIs(2)));
  auto page = store().ListLedger(LedgerFilter{3, 2});
  ASSERT_THAT(page, IsOk());
  ASSERT_EQ(page->size(), 2u);
  EXPECT_EQ((*page)[0].seq, 4);
  EXPECT_EQ((*page)[1].seq, 5);
  ledger::Verdict paged = ledger::VerifyChain(*page, 3, (*entries)[2].hash);
  EXPECT_TRUE(paged.ok) << paged.problem;
  EXPECT_THAT(store().ListCheckpoints(0, 1000), IsOkAndHolds(IsEmpty()));  // No key.
  auto metrics = store().LoadMetricsSnapshot();
  ASSERT_THAT(metrics, IsOk());
  EXPECT_EQ(metrics->ledger_entries, 10);
}

TEST_P(StoreContractTest, CheckpointsAreSignedWhenDue) {
  Open(ContractOptions{kPrivateKey, 3});
  core::ChangeSet two;
  two.changes.emplace_back(core::Cluster{"a", ""});
  two.changes.emplace_back(core::Cluster{"b", ""});
  ASSERT_THAT(store().Commit(two, CommitContext{kFine, {}}), IsOk());
  EXPECT_THAT(store().ListCheckpoints(0, 1000), IsOkAndHolds(IsEmpty()));
  core::ChangeSet more;
  more.changes.emplace_back(core::Cluster{"c", ""});
  more.changes.emplace_back(core::Cluster{"d", ""});
  ASSERT_THAT(store().Commit(more, CommitContext{kFine, {}}), IsOk());
  auto checkpoints = store().ListCheckpoints(0, 1000);
  ASSERT_THAT(checkpoints, IsOk());
  ASSERT_EQ(checkpoints->size(), 1u);
  const LedgerCheckpoint& c = (*checkpoints)[0];
  EXPECT_EQ(c.seq, 4);
  auto entries = store().ListLedger(LedgerFilter{});
  ASSERT_THAT(entries, IsOk());
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ(c.hash, (*entries)[3].hash);
  EXPECT_EQ(c.at, absl::FromUnixMicros(absl::ToUnixMicros(kFine)));
  EXPECT_THAT(
      ledger::VerifySignature(kPublicKey, ledger::CheckpointMessage(c.seq, c.hash), c.signature),
      IsOk());
  // Two more entries: the next is due at seq 7.
  ASSERT_THAT(store().Commit(two), StatusIs(absl::StatusCode::kAlreadyExists));
  core::ChangeSet last;
  last.changes.emplace_back(core::Cluster{"e", ""});
  last.changes.emplace_back(core::Cluster{"f", ""});
  ASSERT_THAT(store().Commit(last), IsOk());
  EXPECT_THAT(store().ListCheckpoints(0, 1000), IsOkAndHolds(SizeIs(1)));
}

TEST_P(StoreContractTest, CheckpointsArePagedBySequence) {
  Open(ContractOptions{kPrivateKey, 1});  // A checkpoint at every commit.
  for (const char* name : {"a", "b", "c", "d", "e"}) {
    core::ChangeSet one;
    one.changes.emplace_back(core::Cluster{name, ""});
    ASSERT_THAT(store().Commit(one, CommitContext{kFine, {}}), IsOk());
  }
  std::vector<int64_t> seqs;
  for (int64_t after = 0;;) {
    auto page = store().ListCheckpoints(after, 2);
    ASSERT_THAT(page, IsOk());
    ASSERT_LE(page->size(), 2u);
    for (const LedgerCheckpoint& c : *page) seqs.push_back(c.seq);
    if (page->size() < 2) break;
    after = page->back().seq;
  }
  EXPECT_THAT(seqs, ::testing::ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(store().ListCheckpoints(5, 2), IsOkAndHolds(IsEmpty()));
}

TEST_P(StoreContractTest, AFencedStoreWritesNothing) {
  ASSERT_THAT(under_test().SetCurrentEpoch(2), IsOk());
  store().SetFencingEpoch(1);  // A stale epoch: another replica took over.
  core::ChangeSet ch;
  ch.changes.emplace_back(core::Cluster{"east", ""});
  ch.changes.emplace_back(core::Team{"t", "", 1000});
  EXPECT_THAT(store().Commit(ch), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(store().ListClusters(), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListLedger(LedgerFilter{}), IsOkAndHolds(IsEmpty()));
  auto state = store().LoadState();
  ASSERT_THAT(state, IsOk());
  EXPECT_TRUE(state->teams().empty());
  // Fenced to the current epoch, it writes.
  store().SetFencingEpoch(2);
  ASSERT_THAT(store().Commit(ch), IsOk());
  EXPECT_THAT(store().ListClusters(), IsOkAndHolds(SizeIs(1)));
  // A later takeover fences it again.
  ASSERT_THAT(under_test().SetCurrentEpoch(3), IsOk());
  core::ChangeSet more;
  more.changes.emplace_back(core::Cluster{"west", ""});
  EXPECT_THAT(store().Commit(more), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(HeadSeq(store()), 2);
  // Unfenced (tools and tests that own the store alone), it writes.
  store().SetFencingEpoch(0);
  EXPECT_THAT(store().Commit(more), IsOk());
  EXPECT_EQ(HeadSeq(store()), 3);
}

TEST_P(StoreContractTest, MetricsSnapshotCounts) {
  core::State s = Organisation(store());
  ASSERT_THAT(Request(store(), s, WholeSpec("a", 1, 2)), IsOk());
  ASSERT_THAT(Request(store(), s, FractionSpec("f", 1, 250, 1024)), IsOk());
  core::CapacityRequestSpec big = WholeSpec("big", 1, 2);  // Beyond the quota left.
  auto queued = Request(store(), s, big);
  ASSERT_THAT(queued, IsOk());
  ASSERT_EQ(queued->state, core::RequestState::kQueued);
  auto metrics = store().LoadMetricsSnapshot();
  ASSERT_THAT(metrics, IsOk());
  EXPECT_EQ(metrics->queued, 1);
  EXPECT_EQ(metrics->pending_approvals, 0);
  EXPECT_EQ(metrics->ledger_entries, HeadSeq(store()));
  ASSERT_EQ(metrics->allocated.size(), 1u);
  const GpuGauge& g = metrics->allocated[0];
  EXPECT_EQ(g.pool, "serving");
  EXPECT_EQ(g.workload_class, "inference");
  EXPECT_EQ(g.team, "t");
  EXPECT_EQ(g.gpu_model, "H100-80GB");
  EXPECT_EQ(g.allocated_milli, 2250);
  EXPECT_EQ(g.used_milli, 0);
  EXPECT_TRUE(metrics->last_hour.empty());
  EXPECT_TRUE(metrics->incidents_by_team.empty());
}

core::GpuSample Sample(int64_t node_id, int32_t gpu, absl::Time at, int32_t util) {
  core::GpuSample s;
  s.at = at;
  s.node_id = node_id;
  s.gpu_index = gpu;
  s.interval = absl::Seconds(10);
  s.util_milli = util;
  s.fb_used_mib = 1000;
  s.fb_free_mib = 80000;
  s.power_mw = 300'000;
  s.pod = "p";
  s.pod_namespace = "ns";
  return s;
}

TEST_P(StoreContractTest, SampleBatchesShareATransactionAndEachCountsItsOwnNewSamples) {
  core::State s = Organisation(store());
  const int64_t node = s.FindNode("east", "n1")->id;
  const absl::Time t = absl::FromUnixSeconds(1'800'057'600);
  ASSERT_THAT(store().InsertSamples({Sample(node, 0, t, 100)}), IsOkAndHolds(1));
  const std::vector<std::vector<core::GpuSample>> batches = {
      {Sample(node, 0, t, 200), Sample(node, 1, t, 300)},  // The first is already stored.
      {},
      {Sample(node, 1, t, 400), Sample(node, 0, t + absl::Hours(24), 500)},  // Across a day.
  };
  EXPECT_THAT(store().InsertSampleBatches(batches), IsOkAndHolds(::testing::ElementsAre(1, 0, 1)));
  EXPECT_THAT(store().InsertSampleBatches(batches), IsOkAndHolds(::testing::ElementsAre(0, 0, 0)));
  EXPECT_THAT(store().InsertSampleBatches({}), IsOkAndHolds(::testing::IsEmpty()));
  auto stored = store().ListSamples(t, t + absl::Hours(48));
  ASSERT_THAT(stored, IsOk());
  std::vector<int32_t> utils;
  for (const core::GpuSample& x : *stored) utils.push_back(x.util_milli);
  std::sort(utils.begin(), utils.end());
  EXPECT_EQ(utils, (std::vector<int32_t>{100, 300, 500}));  // The first reading won.
}

TEST_P(StoreContractTest, SamplesAreStoredOnceAndDroppedByDay) {
  core::State s = Organisation(store());
  const int64_t node = s.FindNode("east", "n1")->id;
  const absl::Time day1 = absl::FromUnixSeconds(1'800'057'600);  // A UTC midnight.
  ASSERT_EQ(absl::ToUnixSeconds(day1) % 86400, 0);
  std::vector<core::GpuSample> batch = {
      Sample(node, 0, day1 + absl::Hours(1), 500), Sample(node, 1, day1 + absl::Hours(1), 600),
      Sample(node, 0, day1 + absl::Hours(1), 999),  // The same reading again.
      Sample(node, 0, day1 + absl::Hours(25), 700)};
  EXPECT_THAT(store().InsertSamples(batch), IsOkAndHolds(3));
  EXPECT_THAT(store().InsertSamples(batch), IsOkAndHolds(0));
  EXPECT_THAT(store().InsertSamples({}), IsOkAndHolds(0));
  auto first_day = store().ListSamples(day1, day1 + absl::Hours(24));
  ASSERT_THAT(first_day, IsOk());
  ASSERT_EQ(first_day->size(), 2u);
  std::vector<int32_t> utils;
  for (const core::GpuSample& x : *first_day) utils.push_back(x.util_milli);
  std::sort(utils.begin(), utils.end());
  EXPECT_EQ(utils, (std::vector<int32_t>{500, 600}));  // The first reading won.
  EXPECT_EQ((*first_day)[0].interval, absl::Seconds(10));
  EXPECT_EQ((*first_day)[0].pod_namespace, "ns");
  EXPECT_THAT(store().ListSamples(day1, day1 + absl::Hours(48)), IsOkAndHolds(SizeIs(3)));
  EXPECT_THAT(store().DropSamplesBefore(day1 + absl::Hours(30)), IsOkAndHolds(1));
  EXPECT_THAT(store().ListSamples(day1, day1 + absl::Hours(48)), IsOkAndHolds(SizeIs(1)));
  EXPECT_THAT(store().DropSamplesBefore(day1 + absl::Hours(30)), IsOkAndHolds(0));
}

// A span comes back whole and once, whatever parts a store reads it in
// (PgStore reads 10 s, then longer parts while they are sparse): readings
// on and around the parts' edges, and none from outside [from, to).
TEST_P(StoreContractTest, ASpanOfSamplesComesBackWholeAcrossReadParts) {
  core::State s = Organisation(store());
  const int64_t node = s.FindNode("east", "n1")->id;
  const absl::Time t = absl::FromUnixSeconds(1'800'057'600);
  const absl::Duration us = absl::Microseconds(1);
  std::vector<core::GpuSample> batch;
  int32_t util = 0;
  for (absl::Duration at : {absl::ZeroDuration(), absl::Seconds(10) - us, absl::Seconds(10),
                            absl::Seconds(10) + us, absl::Seconds(30) - us, absl::Seconds(30),
                            absl::Seconds(70), absl::Minutes(20), absl::Hours(3) - us}) {
    batch.push_back(Sample(node, 0, t + at, ++util));
    batch.push_back(Sample(node, 1, t + at, 100 + util));
  }
  batch.push_back(Sample(node, 0, t - us, 900));              // Before the span.
  batch.push_back(Sample(node, 0, t + absl::Hours(3), 901));  // At its end: outside.
  ASSERT_THAT(store().InsertSamples(batch), IsOkAndHolds(20));
  auto stored = store().ListSamples(t, t + absl::Hours(3));
  ASSERT_THAT(stored, IsOk());
  std::vector<int32_t> utils;
  for (const core::GpuSample& x : *stored) utils.push_back(x.util_milli);
  std::sort(utils.begin(), utils.end());
  std::vector<int32_t> want;
  for (int32_t u = 1; u <= util; ++u) want.push_back(u);
  for (int32_t u = 1; u <= util; ++u) want.push_back(100 + u);
  EXPECT_EQ(utils, want);
  EXPECT_THAT(store().ListSamples(t + absl::Seconds(10), t + absl::Seconds(30)),
              IsOkAndHolds(SizeIs(6)));
  EXPECT_THAT(store().ListSamples(t, t), IsOkAndHolds(SizeIs(0)));
}

// Every field comes back as written: microseconds, MIG instances, and text
// holding the characters COPY's text format escapes.
TEST_P(StoreContractTest, SamplesComeBackFieldForField) {
  core::State s = Organisation(store());
  const int64_t node = s.FindNode("east", "n1")->id;
  const absl::Time t = absl::FromUnixMicros(1'800'057'600'123'456);
  core::GpuSample mig = Sample(node, 1, t, 250);
  mig.mig_instance = 7;
  mig.mig_profile = "1g.10gb";
  mig.engine_active_milli = 999;
  mig.interval = absl::Milliseconds(15'500);
  mig.fb_used_mib = 9'000'000'000;
  mig.fb_free_mib = -1;
  mig.power_mw = 0;
  mig.pod = "tab\there, back\\slash\\N, line\nend\r";
  mig.pod_namespace = "";
  core::GpuSample whole = Sample(node, 0, t - absl::Microseconds(1), -1);
  whole.pod = "\\N";
  ASSERT_THAT(store().InsertSampleBatches({{mig}, {whole}}), IsOkAndHolds(ElementsAre(1, 1)));
  auto stored = store().ListSamples(t - absl::Seconds(1), t + absl::Seconds(1));
  ASSERT_THAT(stored, IsOk());
  ASSERT_EQ(stored->size(), 2u);
  std::sort(stored->begin(), stored->end(),
            [](const core::GpuSample& a, const core::GpuSample& b) { return a.at < b.at; });
  for (const auto& [got, want] : {std::pair{(*stored)[0], whole}, std::pair{(*stored)[1], mig}}) {
    EXPECT_EQ(got.at, want.at);
    EXPECT_EQ(got.node_id, want.node_id);
    EXPECT_EQ(got.gpu_index, want.gpu_index);
    EXPECT_EQ(got.mig_instance, want.mig_instance);
    EXPECT_EQ(got.mig_profile, want.mig_profile);
    EXPECT_EQ(got.interval, want.interval);
    EXPECT_EQ(got.util_milli, want.util_milli);
    EXPECT_EQ(got.engine_active_milli, want.engine_active_milli);
    EXPECT_EQ(got.fb_used_mib, want.fb_used_mib);
    EXPECT_EQ(got.fb_free_mib, want.fb_free_mib);
    EXPECT_EQ(got.power_mw, want.power_mw);
    EXPECT_EQ(got.pod, want.pod);
    EXPECT_EQ(got.pod_namespace, want.pod_namespace);
  }
}

// A run reported at the release (docs/chargeback.md): kept with the request
// and charged: the member's held interval is the run.
TEST_P(StoreContractTest, AReportedRunIsKeptAndCharged) {
  core::State s = Organisation(store());
  auto a = Request(store(), s, WholeSpec("ran", 1, 2));
  ASSERT_THAT(a, IsOk());
  core::ChangeSet ch;
  const core::WorkloadRun run{kT0 + absl::Seconds(30), kT0 + absl::Minutes(20)};
  ASSERT_THAT(core::ReleaseRequest(s, a->id, kT0 + absl::Minutes(21), ch, run), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());

  auto stored = store().GetRequest(a->id);
  ASSERT_THAT(stored, IsOk());
  EXPECT_EQ(stored->run_started_at, run.started);
  EXPECT_EQ(stored->run_ended_at, run.ended);
  auto held = store().ListHeldMembers(kT0, kT0 + absl::Hours(1));
  ASSERT_THAT(held, IsOk());
  ASSERT_EQ(held->size(), 1u);
  EXPECT_EQ((*held)[0].from, run.started);
  EXPECT_EQ((*held)[0].until, run.ended);
  // Two GPUs for the run's 1,170 s, and nothing of a window the run missed.
  EXPECT_THAT(store().ClusterReservedMilliSeconds(kT0, kT0 + absl::Hours(1)),
              IsOkAndHolds(2 * 1000 * 1170));
  EXPECT_THAT(store().ClusterReservedMilliSeconds(kT0 + absl::Seconds(1230), kT0 + absl::Hours(1)),
              IsOkAndHolds(0));
}

// A pool's members held in a window (an SLO incident's attribution) are
// ListHeldMembers' of that pool, in its order.
TEST_P(StoreContractTest, HeldMembersOfOnePool) {
  core::State s = Organisation(store());
  core::ChangeSet ch;
  ASSERT_THAT(core::SetQuota(s, {"t", "batch", 3000}, kT0, ch), IsOk());
  core::Node node = MakeNode("b1", 4, "H100-80GB", "batch");
  node.cluster = "east";
  ASSERT_THAT(core::RegisterNode(s, node, kT0, ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  core::CapacityRequestSpec in_batch = WholeSpec("in-batch", 2, 1);
  in_batch.pool = "batch";
  in_batch.workload_class = core::WorkloadClass::kTraining;  // What a batch pool admits.
  for (const core::CapacityRequestSpec& spec : {WholeSpec("in-serving", 1, 1), in_batch}) {
    auto admitted = Request(store(), s, spec);
    ASSERT_THAT(admitted, IsOk());
    ASSERT_EQ(admitted->state, core::RequestState::kAdmitted) << spec.pool;
  }

  const absl::Time from = kT0, to = kT0 + absl::Hours(1);
  auto all = store().ListHeldMembers(from, to);
  ASSERT_THAT(all, IsOk());
  ASSERT_EQ(all->size(), 3u);
  for (const std::string pool : {"serving", "batch", "none"}) {
    auto got = store().ListHeldMembersInPool(pool, from, to);
    ASSERT_THAT(got, IsOk());
    std::vector<core::HeldMember> want;
    for (const core::HeldMember& m : *all) {
      if (m.pool == pool) want.push_back(m);
    }
    ASSERT_EQ(got->size(), want.size()) << pool;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ((*got)[i].request_id, want[i].request_id);
      EXPECT_EQ((*got)[i].member, want[i].member);
      EXPECT_EQ((*got)[i].pool, pool);
    }
  }
}

// A window's members read part by part (ScanHeldMembers) are those
// ListHeldMembers returns, in its order; and a slice rolled up part by part
// (RollUpSlice) is added as AddUsageSlice adds it, in one transaction.
TEST_P(StoreContractTest, HeldMembersComeInPartsAndRollUpAsOneSlice) {
  core::State s = Organisation(store());
  std::vector<int64_t> ids;
  for (int i = 0; i < 7; ++i) {
    auto r = Request(store(), s, FractionSpec(absl::StrCat("p", i), 1, 100, 1024),
                     kT0 + absl::Minutes(i));
    ASSERT_THAT(r, IsOk());
    ids.push_back(r->id);
  }
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, ids[2], kT0 + absl::Minutes(20), ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  const absl::Time hour = kT0;
  const absl::Time middle = hour + absl::Minutes(30);
  auto whole = store().ListHeldMembers(hour, middle);
  ASSERT_THAT(whole, IsOk());
  ASSERT_EQ(whole->size(), 7u);

  std::vector<size_t> sizes;
  std::vector<int64_t> scanned;
  ASSERT_THAT(store().ScanHeldMembers(hour, middle, 3,
                                      [&](absl::Span<const core::HeldMember> part) {
                                        sizes.push_back(part.size());
                                        for (const auto& m : part) scanned.push_back(m.request_id);
                                        return absl::OkStatus();
                                      }),
              IsOk());
  EXPECT_THAT(sizes, ElementsAre(3, 3, 1));
  std::vector<int64_t> listed;
  for (const core::HeldMember& m : *whole) listed.push_back(m.request_id);
  EXPECT_EQ(scanned, listed);
  // A part's error ends the scan and is its result.
  int parts = 0;
  EXPECT_THAT(store().ScanHeldMembers(hour, middle, 2,
                                      [&](absl::Span<const core::HeldMember>) {
                                        ++parts;
                                        return absl::CancelledError("enough");
                                      }),
              StatusIs(absl::StatusCode::kCancelled));
  EXPECT_EQ(parts, 1);

  // Usage from the request id, so that a member paired with another's usage
  // would show.
  auto roll = [&](absl::Span<const core::HeldMember> part) {
    EXPECT_LE(part.size(), 3u);
    std::vector<core::MemberUsage> usage(part.size());
    for (size_t i = 0; i < part.size(); ++i) {
      usage[i].allocated_milli_seconds = 1000 * part[i].request_id;
      usage[i].used_milli_seconds = part[i].request_id;
      usage[i].peak_busy_milli = 10;
    }
    return usage;
  };
  ASSERT_THAT(store().RollUpSlice(hour, hour, middle, middle, 3, roll), IsOk());
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(middle));
  // The same slice again (another replica's): refused, nothing added.
  EXPECT_THAT(store().RollUpSlice(hour, hour, middle, middle, 3, roll),
              StatusIs(absl::StatusCode::kAborted));
  // A roll that loses a member: refused, nothing added, the hour where it was.
  EXPECT_THAT(store().RollUpSlice(hour, middle, hour + absl::Hours(1), middle, 3,
                                  [&](absl::Span<const core::HeldMember> part) {
                                    std::vector<core::MemberUsage> usage = roll(part);
                                    usage.pop_back();
                                    return usage;
                                  }),
              StatusIs(absl::StatusCode::kInternal));
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(middle));
  auto members = store().ListMemberUsage(hour, hour + absl::Hours(1));
  ASSERT_THAT(members, IsOk());
  ASSERT_EQ(members->size(), 7u);
  int64_t id_sum = 0;
  for (size_t i = 0; i < members->size(); ++i) {
    EXPECT_EQ((*members)[i].request_id, ids[i]);
    EXPECT_EQ((*members)[i].allocated_milli_seconds, 1000 * ids[i]);
    EXPECT_EQ((*members)[i].used_milli_seconds, ids[i]);
    id_sum += ids[i];
  }
  // The team's rollup: the three parts summed.
  auto util = store().ListUtilization(hour, hour + absl::Hours(1), "t");
  ASSERT_THAT(util, IsOk());
  ASSERT_EQ(util->size(), 1u);
  EXPECT_EQ((*util)[0].usage.allocated_milli_seconds, 1000 * id_sum);
  EXPECT_EQ((*util)[0].usage.used_milli_seconds, id_sum);
  EXPECT_EQ((*util)[0].usage.peak_busy_milli, 10);
  EXPECT_THAT(
      store().ListUsedByHour(hour, hour + absl::Hours(1), ""),
      IsOkAndHolds(ElementsAre(::testing::Field(&core::HourPoint::used_milli_seconds, id_sum))));
}

TEST_P(StoreContractTest, UsageRollsUpInSlices) {
  core::State s = Organisation(store());
  auto a = Request(store(), s, WholeSpec("a", 1, 2));
  ASSERT_THAT(a, IsOk());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, a->id, kT0 + absl::Minutes(90), ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  auto b = Request(store(), s, FractionSpec("b", 1, 500, 1024), kT0 + absl::Minutes(100));
  ASSERT_THAT(b, IsOk());

  const absl::Time hour = kT0 + absl::Hours(1);
  auto held = store().ListHeldMembers(hour, hour + absl::Hours(1));
  ASSERT_THAT(held, IsOk());
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].request_id, a->id);
  EXPECT_EQ((*held)[0].until, kT0 + absl::Minutes(90));
  EXPECT_EQ((*held)[0].gpu_model, "H100-80GB");
  EXPECT_EQ((*held)[0].gpu_indices.size(), 2u);
  EXPECT_EQ((*held)[1].request_id, b->id);
  EXPECT_EQ((*held)[1].until, absl::InfiniteFuture());
  EXPECT_EQ((*held)[1].from, kT0 + absl::Minutes(100));
  // Before `b` was admitted, after `a` ended: only one of them.
  EXPECT_THAT(store().ListHeldMembers(kT0, kT0 + absl::Minutes(10)), IsOkAndHolds(SizeIs(1)));
  EXPECT_THAT(store().ListHeldMembers(kT0 + absl::Hours(3), kT0 + absl::Hours(4)),
              IsOkAndHolds(SizeIs(1)));
  // Held now: `b` alone, as ListHeldMembers has it.
  auto live = store().ListLiveMembers();
  ASSERT_THAT(live, IsOk());
  ASSERT_EQ(live->size(), 1u);
  EXPECT_EQ((*live)[0].request_id, b->id);
  EXPECT_EQ((*live)[0].gpu_milli, (*held)[1].gpu_milli);
  EXPECT_EQ((*live)[0].from, (*held)[1].from);
  EXPECT_EQ((*live)[0].until, absl::InfiniteFuture());

  std::vector<core::MemberUsage> usage(2);
  usage[0].allocated_milli_seconds = 2000 * 1800;
  usage[0].sampled_milli_seconds = 2000 * 1800;
  usage[0].used_milli_seconds = 1000 * 1800;
  usage[0].peak_busy_milli = 900;
  usage[0].peak_memory_mib = 4000;
  usage[0].energy_mwh = 10;
  usage[1].allocated_milli_seconds = 500 * 1200;
  usage[1].used_milli_seconds = 100 * 1200;
  usage[1].peak_busy_milli = 300;
  usage[1].energy_mwh = 5;
  // Two slices: the first half hour, then the rest.
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(hour));
  std::vector<core::MemberUsage> half = usage;
  for (core::MemberUsage& u : half) {
    u.allocated_milli_seconds /= 2;
    u.sampled_milli_seconds /= 2;
    u.used_milli_seconds /= 2;
    u.energy_mwh /= 5;
  }
  const absl::Time middle = hour + absl::Minutes(30);
  store::UsageSlice first{hour, hour, middle, *held, half, middle};
  ASSERT_THAT(store().AddUsageSlice(first), IsOk());
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(middle));
  // The same slice again (another replica's): refused, nothing added.
  EXPECT_THAT(store().AddUsageSlice(first), StatusIs(absl::StatusCode::kAborted));
  store::UsageSlice skips{hour,  middle + absl::Minutes(1), hour + absl::Hours(1), *held, half,
                          middle};
  EXPECT_THAT(store().AddUsageSlice(skips), StatusIs(absl::StatusCode::kAborted));
  store::UsageSlice uneven{hour, middle, hour + absl::Hours(1), *held, {usage[0]}, middle};
  EXPECT_THAT(store().AddUsageSlice(uneven), StatusIs(absl::StatusCode::kInternal));
  for (size_t i = 0; i < usage.size(); ++i) {
    half[i].allocated_milli_seconds =
        usage[i].allocated_milli_seconds - half[i].allocated_milli_seconds;
    half[i].sampled_milli_seconds = usage[i].sampled_milli_seconds - half[i].sampled_milli_seconds;
    half[i].used_milli_seconds = usage[i].used_milli_seconds - half[i].used_milli_seconds;
    half[i].energy_mwh = usage[i].energy_mwh - half[i].energy_mwh;
    half[i].peak_busy_milli /= 3;  // Lower: the first slice's peak stands.
  }
  store::UsageSlice second{hour, middle, hour + absl::Hours(1), *held, half, hour + absl::Hours(1)};
  ASSERT_THAT(store().AddUsageSlice(second), IsOk());
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(hour + absl::Hours(1)));

  auto util = store().ListUtilization(kT0, kT0 + absl::Hours(24), "");
  ASSERT_THAT(util, IsOk());
  ASSERT_EQ(util->size(), 1u);
  EXPECT_EQ((*util)[0].team, "t");
  EXPECT_EQ((*util)[0].workload_class, core::WorkloadClass::kInference);
  EXPECT_EQ((*util)[0].usage.allocated_milli_seconds, 2000 * 1800 + 500 * 1200);
  EXPECT_EQ((*util)[0].usage.used_milli_seconds, 1000 * 1800 + 100 * 1200);
  EXPECT_EQ((*util)[0].usage.peak_busy_milli, 900);
  EXPECT_EQ((*util)[0].usage.energy_mwh, 15);
  EXPECT_THAT(store().ListUtilization(kT0, kT0 + absl::Hours(24), "org"), IsOkAndHolds(IsEmpty()));
  auto members = store().ListMemberUsage(kT0, kT0 + absl::Hours(24));
  ASSERT_THAT(members, IsOk());
  ASSERT_EQ(members->size(), 2u);
  EXPECT_EQ((*members)[0].request_id, a->id);
  EXPECT_EQ((*members)[0].peak_memory_mib, 4000);
  EXPECT_EQ((*members)[1].used_milli_seconds, 100 * 1200);
  auto hours = store().ListUsedByHour(kT0, kT0 + absl::Hours(24), "t");
  ASSERT_THAT(hours, IsOk());
  ASSERT_EQ(hours->size(), 1u);
  EXPECT_EQ((*hours)[0].hour, hour);
  EXPECT_EQ((*hours)[0].used_milli_seconds, 1000 * 1800 + 100 * 1200);
  auto metrics = store().LoadMetricsSnapshot();
  ASSERT_THAT(metrics, IsOk());
  ASSERT_EQ(metrics->last_hour.size(), 1u);
  // Means over the hour, rounded to the nearest: 1166.7 and 533.3.
  EXPECT_EQ(metrics->last_hour[0].allocated_milli, 1167);
  EXPECT_EQ(metrics->last_hour[0].used_milli, 533);

  // Resetting the hour drops what it held, to be rolled up again; members
  // that held nothing are left out.
  ASSERT_THAT(store().ResetUsageHour(hour), IsOk());
  EXPECT_THAT(store().UsageRolledTo(hour), IsOkAndHolds(hour));
  usage[0].allocated_milli_seconds = 0;
  store::UsageSlice again{hour, hour, hour + absl::Hours(1), *held, usage, hour + absl::Hours(2)};
  ASSERT_THAT(store().AddUsageSlice(again), IsOk());
  auto replaced = store().ListMemberUsage(kT0, kT0 + absl::Hours(24));
  ASSERT_THAT(replaced, IsOk());
  ASSERT_EQ(replaced->size(), 1u);
  EXPECT_EQ((*replaced)[0].request_id, b->id);

  // Conservation: `a` held 2 GPUs for 90 minutes; `b` half a GPU since.
  EXPECT_THAT(store().ClusterReservedMilliSeconds(kT0, kT0 + absl::Hours(2)),
              IsOkAndHolds(2 * 1000 * 5400 + 500 * 1200));
  EXPECT_THAT(store().SpendBetween(kT0, kT0 + absl::Hours(2)),
              IsOkAndHolds((std::map<std::string, int64_t>{{"t", 0}})));
  EXPECT_THAT(store().SpendBetween(kT0 + absl::Hours(5), kT0 + absl::Hours(6)),
              IsOkAndHolds(IsEmpty()));
}

TEST_P(StoreContractTest, WaitingRequestsSpanTheirWait) {
  core::State s = Organisation(store());
  auto a = Request(store(), s, WholeSpec("a", 1, 3));  // The whole quota.
  ASSERT_THAT(a, IsOk());
  ASSERT_EQ(a->state, core::RequestState::kAdmitted);
  auto waits = Request(store(), s, WholeSpec("w", 1, 1), kT0 + absl::Minutes(1));
  ASSERT_THAT(waits, IsOk());
  ASSERT_EQ(waits->state, core::RequestState::kQueued);
  auto list = store().ListWaitingRequests("t", "serving", kT0, kT0 + absl::Hours(1));
  ASSERT_THAT(list, IsOk());
  ASSERT_EQ(list->size(), 1u);  // `a` was admitted at once, at kT0.
  EXPECT_EQ((*list)[0].request_id, waits->id);
  EXPECT_EQ((*list)[0].gpu_milli, 1000);
  EXPECT_EQ((*list)[0].from, kT0 + absl::Minutes(1));
  EXPECT_EQ((*list)[0].until, absl::InfiniteFuture());
  core::ChangeSet ch;
  ASSERT_THAT(core::ReleaseRequest(s, a->id, kT0 + absl::Minutes(5), ch), IsOk());
  ASSERT_THAT(store().Commit(ch), IsOk());
  list = store().ListWaitingRequests("t", "serving", kT0, kT0 + absl::Hours(1));
  ASSERT_THAT(list, IsOk());
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].until, kT0 + absl::Minutes(5));
  EXPECT_THAT(store().ListWaitingRequests("t", "batch", kT0, kT0 + absl::Hours(1)),
              IsOkAndHolds(IsEmpty()));
}

TEST_P(StoreContractTest, IncidentsChargesAndClosedPeriods) {
  core::State s = Organisation(store());
  core::ChangeSet setup;
  ASSERT_THAT(core::CreateTeam(s, {"noisy", "org", 1000}, setup), IsOk());
  const core::Slo slo = ChatSlo();
  ASSERT_THAT(core::SetSlo(s, slo, setup), IsOk());
  ASSERT_THAT(store().Commit(setup), IsOk());

  core::Incident incident;
  incident.id = 1;
  incident.slo = slo;
  incident.window =
      core::LatencyWindow{"t", "chat", kT0, kT0 + absl::Minutes(5), 100'000, 400'000, 5000};
  incident.recorded_at = kFine;
  incident.attribution.cost_micros = 5000;
  incident.attribution.cost_basis = "penalty";
  core::ChangeSet ch;
  ch.changes.emplace_back(core::IncidentWrite{incident});
  core::ExternalityCharge charge;
  charge.incident_id = 1;
  charge.team = "noisy";
  charge.micros = 5000;
  charge.interference.team = "noisy";
  charge.interference.co_tenancy_milli_seconds = 300'000;
  charge.interference.request_ids = {4, 9};
  charge.booked_at = kFine;
  core::ExternalityCharge credit;
  credit.incident_id = 1;
  credit.team = "t";
  credit.micros = -5000;
  credit.interference.team = "t";
  credit.booked_at = kFine;
  ch.changes.emplace_back(charge);
  ch.changes.emplace_back(credit);
  core::PeriodClose close;
  close.from = kT0 - absl::Hours(24);
  close.to = kT0;
  close.closed_at = kFine;
  close.statements_json = "{\"teams\":[]}";
  close.hash = ledger::Sha256Hex(close.statements_json);
  close.teams = 2;
  close.net_cost_micros = 42;
  ch.changes.emplace_back(close);
  ASSERT_THAT(store().Commit(ch), IsOk());

  auto incidents = store().ListIncidents(kT0, kT0 + absl::Hours(1), "", 0);
  ASSERT_THAT(incidents, IsOk());
  ASSERT_EQ(incidents->size(), 1u);
  const core::Incident& got = (*incidents)[0];
  EXPECT_EQ(got.id, 1);
  EXPECT_EQ(got.slo.window, absl::Minutes(5));
  EXPECT_EQ(got.window.p99_us, 400'000);
  EXPECT_EQ(got.recorded_at, absl::FromUnixMicros(absl::ToUnixMicros(kFine)));
  ASSERT_EQ(got.attribution.causes.size(), 1u);  // The credit is left out.
  EXPECT_EQ(got.attribution.causes[0].team, "noisy");
  EXPECT_EQ(got.attribution.causes[0].request_ids, (std::vector<int64_t>{4, 9}));
  EXPECT_EQ(got.attribution.charges_micros, (std::vector<int64_t>{5000}));
  EXPECT_THAT(store().ListIncidents(kT0, kT0 + absl::Hours(1), "noisy", 0),
              IsOkAndHolds(SizeIs(1)));
  EXPECT_THAT(store().ListIncidents(kT0, kT0 + absl::Hours(1), "org", 0), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListIncidents(kT0, kT0 + absl::Hours(1), "", 2), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(store().ListIncidents(kT0 + absl::Hours(1), kT0 + absl::Hours(2), "", 0),
              IsOkAndHolds(IsEmpty()));
  auto charges = store().ListCharges(kT0, kT0 + absl::Hours(1));
  ASSERT_THAT(charges, IsOk());
  ASSERT_EQ(charges->size(), 2u);
  EXPECT_EQ((*charges)[0].team, "noisy");  // By incident and team.
  EXPECT_EQ((*charges)[1].micros, -5000);
  auto closed = store().GetClosedPeriod(close.from, close.to);
  ASSERT_THAT(closed, IsOk());
  ASSERT_TRUE(closed->has_value());
  EXPECT_EQ((*closed)->hash, close.hash);
  EXPECT_EQ((*closed)->statements_json, close.statements_json);
  EXPECT_EQ((*closed)->net_cost_micros, 42);
  auto other = store().GetClosedPeriod(close.from, close.to + absl::Hours(1));
  ASSERT_THAT(other, IsOk());
  EXPECT_FALSE(other->has_value());
  auto metrics = store().LoadMetricsSnapshot();
  ASSERT_THAT(metrics, IsOk());
  EXPECT_EQ(metrics->incidents_by_team, (std::map<std::string, int64_t>{{"t", 1}}));

  auto loaded = store().LoadState();
  ASSERT_THAT(loaded, IsOk());
  EXPECT_EQ(loaded->FindIncident("t", "chat", kT0), 1);
  EXPECT_TRUE(loaded->FindClosedOverlap(kT0 - absl::Hours(2), kT0 - absl::Hours(1)).has_value());
  // The same window, or the same charge, again.
  core::ChangeSet again;
  incident.id = 2;
  again.changes.emplace_back(core::IncidentWrite{incident});
  EXPECT_THAT(store().Commit(again), StatusIs(absl::StatusCode::kAlreadyExists));
  core::ChangeSet orphan;
  charge.incident_id = 99;
  orphan.changes.emplace_back(charge);
  EXPECT_THAT(store().Commit(orphan), StatusIs(absl::StatusCode::kFailedPrecondition));
}

TEST_P(StoreContractTest, TheFirstLatencyReportWins) {
  Organisation(store());
  core::LatencyWindow w{"t", "chat", kT0, kT0 + absl::Minutes(5), 100, 200, 3000};
  auto first = store().InsertLatencyWindow(w, kT0 + absl::Minutes(6));
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(first->first);
  EXPECT_EQ(first->window.p99_us, 200);
  core::LatencyWindow late = w;
  late.p99_us = 999;
  late.p50_us = 50;
  auto second = store().InsertLatencyWindow(late, kT0 + absl::Minutes(7));
  ASSERT_THAT(second, IsOk());
  EXPECT_FALSE(second->first);
  EXPECT_EQ(second->window.p99_us, 200);
  EXPECT_EQ(second->window.p50_us, 100);
  EXPECT_EQ(second->window.requests_milli_per_second, 3000);
}

TEST_P(StoreContractTest, AccessDenialsAreRecorded) {
  EXPECT_THAT(store().RecordAccessDenial("mallory", "/arbiter.v1.Admin/CreatePool",
                                         "PERMISSION_DENIED", "not an admin"),
              IsOk());
}

}  // namespace
}  // namespace arbiter::store::contract
