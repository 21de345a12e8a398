// Nested cohorts through the API, on a real server and database
// (docs/quotas-and-preemption.md): cohort limits stored and listed, applied
// at every level of the team tree with the refusal naming the subtree, an
// organisation imported in any order, and the bad inputs (a cohort cycle, a
// negative cohort limit) refused naming the field with nothing written.
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "tests/server/server_fixture.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

class NestedCohortsTest : public ServerTest {
 protected:
  // The seed (cluster east, team "inference"), a BATCH pool "train" with one
  // 8-L4 node, and the tree org -> research -> {vision, nlp}, org ->
  // product -> {ads, growth}, imported children first.
  void SeedTree() {
    SeedOrganisation();
    v1::CreatePoolRequest pool;
    pool.mutable_pool()->set_name("train");
    pool.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    grpc::ClientContext pool_ctx;
    v1::CreatePoolResponse created;
    ASSERT_TRUE(inventory_->CreatePool(&pool_ctx, pool, &created).ok());
    ASSERT_TRUE(RegisterNode("train-1", "train", 8).ok());
    v1::ImportOrganisationRequest org;
    for (const auto& [name, parent] :
         std::vector<std::pair<std::string, std::string>>{{"vision", "research"},
                                                          {"nlp", "research"},
                                                          {"ads", "product"},
                                                          {"growth", "product"},
                                                          {"research", "org"},
                                                          {"product", "org"},
                                                          {"org", ""}}) {
      v1::Team* t = org.add_teams();
      t->set_name(name);
      t->set_parent(parent);
    }
    // vision and nlp lend 2000 each; research may borrow 1000 beyond that.
    // product lends 1000 of ads' 3000 outside.
    AddQuota(org, "vision", 2000, [](v1::Quota&) {});
    AddQuota(org, "nlp", 2000, [](v1::Quota&) {});
    AddQuota(org, "research", 0, [](v1::Quota& q) { q.set_cohort_borrowing_limit_milli(1000); });
    AddQuota(org, "ads", 3000, [](v1::Quota&) {});
    AddQuota(org, "growth", 0, [](v1::Quota&) {});
    AddQuota(org, "product", 0, [](v1::Quota& q) { q.set_cohort_lending_limit_milli(1000); });
    grpc::ClientContext ctx;
    v1::ImportOrganisationResponse imported;
    const grpc::Status s = governance_->ImportOrganisation(&ctx, org, &imported);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(imported.teams_created(), 7);
    EXPECT_EQ(imported.quotas_set(), 6);
  }

  static void AddQuota(v1::ImportOrganisationRequest& org, const std::string& team, int64_t nominal,
                       void (*adjust)(v1::Quota&)) {
    v1::Quota* q = org.add_quotas();
    q->set_team(team);
    q->set_pool("train");
    q->set_nominal_milli(nominal);
    q->set_borrowing_limit_milli(-1);
    adjust(*q);
  }

  v1::CapacityRequest Ask(const std::string& key, const std::string& team, int32_t gpus) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.set_team(team);
    req.set_pool("train");
    req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
    req.set_preemptible(true);
    req.mutable_shape()->set_whole_gpus(gpus);
    v1::RequestCapacityResponse resp;
    const grpc::Status s = Request(req, &resp);
    EXPECT_TRUE(s.ok()) << key << ": " << s.error_message();
    return resp.request();
  }

  std::string Count(const std::string& table) {
    auto n = db_->QueryValue("SELECT count(*) FROM " + table);
    EXPECT_THAT(n, IsOk());
    return n.value_or("");
  }
};

TEST_F(NestedCohortsTest, LimitsHoldAtEveryLevelAndAreListed) {
  SeedTree();
  // research: 4000 lent by its teams + 1000 borrowed from outside.
  EXPECT_EQ(Ask("v1", "vision", 4).state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(Ask("v2", "vision", 1).state(), v1::REQUEST_STATE_ADMITTED);
  const v1::CapacityRequest v3 = Ask("v3", "vision", 1);
  EXPECT_EQ(v3.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(v3.reason_code(), "COHORT_BORROWING_LIMIT");
  EXPECT_EQ(v3.reason(),
            "cohort research (research and the teams under it) lends 4000 milli-GPU in pool "
            "train and may borrow 1000 more; 5000 is in use; request needs 1000 (over by 1000)");
  // org pools 4000 from research and 1000 from product: research's 5000
  // leaves nothing of it. growth (no quota of its own) borrows the 2000 of
  // ads' 3000 that product keeps within, and no more.
  EXPECT_EQ(Ask("g1", "growth", 2).state(), v1::REQUEST_STATE_ADMITTED);
  const v1::CapacityRequest a2 = Ask("g2", "growth", 1);
  EXPECT_EQ(a2.state(), v1::REQUEST_STATE_QUEUED);
  EXPECT_EQ(a2.reason_code(), "COHORT_EXHAUSTED");
  EXPECT_EQ(a2.reason(),
            "cohort org lends 5000 milli-GPU in pool train and 5000 of it is in use; request "
            "needs 1000 (over by 1000)");

  v1::ListQuotasRequest list;
  list.set_team("product");
  grpc::ClientContext ctx;
  v1::ListQuotasResponse quotas;
  ASSERT_TRUE(governance_->ListQuotas(&ctx, list, &quotas).ok());
  ASSERT_EQ(quotas.quotas_size(), 1);
  EXPECT_TRUE(quotas.quotas(0).quota().has_cohort_lending_limit_milli());
  EXPECT_EQ(quotas.quotas(0).quota().cohort_lending_limit_milli(), 1000);
  EXPECT_FALSE(quotas.quotas(0).quota().has_cohort_borrowing_limit_milli());
}

TEST_F(NestedCohortsTest, ACycleOrANegativeLimitIsRefusedNamingTheFieldWritingNothing) {
  SeedTree();
  const std::string teams = Count("teams");
  const std::string quotas = Count("quotas");
  const std::string ledger = Count("ledger");

  v1::ImportOrganisationRequest cycle;
  for (const auto& [name, parent] : std::vector<std::pair<std::string, std::string>>{
           {"a", "c"}, {"b", "a"}, {"c", "b"}, {"d", "org"}}) {
    v1::Team* t = cycle.add_teams();
    t->set_name(name);
    t->set_parent(parent);
  }
  grpc::ClientContext cycle_ctx;
  v1::ImportOrganisationResponse imported;
  const grpc::Status refused = governance_->ImportOrganisation(&cycle_ctx, cycle, &imported);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(refused.error_message(), "teams[0].parent: 'c' makes a cohort cycle: a -> c -> b -> a");

  for (const char* field : {"cohort_lending_limit_milli", "cohort_borrowing_limit_milli"}) {
    SCOPED_TRACE(field);
    v1::SetQuotaRequest set;
    set.mutable_quota()->set_team("research");
    set.mutable_quota()->set_pool("train");
    if (std::string(field) == "cohort_lending_limit_milli") {
      set.mutable_quota()->set_cohort_lending_limit_milli(-5);
    } else {
      set.mutable_quota()->set_cohort_borrowing_limit_milli(-5);
    }
    grpc::ClientContext ctx;
    v1::SetQuotaResponse resp;
    const grpc::Status s = governance_->SetQuota(&ctx, set, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(s.error_message(),
              absl::StrCat("quota.", field, ": must be in [-1, 1125899906842624], got -5"));
  }
  EXPECT_EQ(Count("teams"), teams);
  EXPECT_EQ(Count("quotas"), quotas);
  EXPECT_EQ(Count("ledger"), ledger);
}

}  // namespace
}  // namespace arbiter::server
