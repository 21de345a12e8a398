// The gRPC services through a real server on a loopback port, backed by a
// real PostgreSQL database: input validation with nothing written, status
// codes, MIG and model-profile requests, and the watch stream.
#include <functional>
#include <map>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "server/server.h"
#include "tests/server/server_fixture.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

struct BadInput {
  std::string name;
  std::function<grpc::Status(ServerTest*)> call;
  grpc::StatusCode code;
  std::string field;  // The message must start with "<field>:" (unless empty).
};

class ServerBadInputTest : public ServerTest {
 public:
  grpc::Status RequestWith(std::function<void(v1::RequestCapacityRequest&)> mutate) {
    v1::RequestCapacityRequest req = ValidRequest("bad");
    mutate(req);
    v1::RequestCapacityResponse resp;
    return Request(req, &resp);
  }
};

TEST_F(ServerBadInputTest, EveryBadInputGetsItsStatusAndWritesNothing) {
  SeedOrganisation();
  v1::RequestCapacityResponse first;
  ASSERT_TRUE(Request(ValidRequest("taken"), &first).ok());
  using RC = v1::RequestCapacityRequest;
  using Code = grpc::StatusCode;
  auto req = [](std::function<void(RC&)> m) {
    return [m](ServerTest* t) { return static_cast<ServerBadInputTest*>(t)->RequestWith(m); };
  };
  // SetQuota of a valid quota of team inference in pool serving, changed by `m`.
  auto quota = [](std::function<void(v1::Quota&)> m) {
    return [m](ServerTest* t) {
      grpc::ClientContext ctx;
      v1::SetQuotaRequest r;
      r.mutable_quota()->set_team("inference");
      r.mutable_quota()->set_pool("serving");
      m(*r.mutable_quota());
      v1::SetQuotaResponse resp;
      return t->governance_->SetQuota(&ctx, r, &resp);
    };
  };
  const std::vector<BadInput> cases = {
      {"empty key", req([](RC& r) { r.set_idempotency_key(""); }), Code::INVALID_ARGUMENT,
       "idempotency_key"},
      {"long key", req([](RC& r) { r.set_idempotency_key(std::string(300, 'k')); }),
       Code::INVALID_ARGUMENT, "idempotency_key"},
      {"empty team", req([](RC& r) { r.set_team(""); }), Code::INVALID_ARGUMENT, "team"},
      {"long team", req([](RC& r) { r.set_team(std::string(65, 't')); }), Code::INVALID_ARGUMENT,
       "team"},
      {"sql in team", req([](RC& r) { r.set_team("x'; DROP TABLE requests;--"); }),
       Code::INVALID_ARGUMENT, "team"},
      {"NUL in pool", req([](RC& r) { r.set_pool(std::string("ser\0ving", 8)); }),
       Code::INVALID_ARGUMENT, "pool"},
      {"unspecified class",
       req([](RC& r) { r.set_workload_class(v1::WORKLOAD_CLASS_UNSPECIFIED); }),
       Code::INVALID_ARGUMENT, "workload_class"},
      {"unknown class number",
       req([](RC& r) { r.set_workload_class(static_cast<v1::WorkloadClass>(77)); }),
       Code::INVALID_ARGUMENT, "workload_class"},
      {"zero members", req([](RC& r) { r.set_members(0); }), Code::INVALID_ARGUMENT, "members"},
      {"priority too high", req([](RC& r) { r.set_priority(5000); }), Code::INVALID_ARGUMENT,
       "priority"},
      {"negative checkpoint", req([](RC& r) { r.set_checkpoint_seconds(-1); }),
       Code::INVALID_ARGUMENT, "checkpoint_seconds"},
      {"negative duration", req([](RC& r) { r.set_duration_seconds(-60); }), Code::INVALID_ARGUMENT,
       "duration_seconds"},
      {"guaranteed and preemptible", req([](RC& r) {
         r.set_guaranteed(true);
         r.set_preemptible(true);
       }),
       Code::INVALID_ARGUMENT, "preemptible"},
      {"start before 1970", req([](RC& r) { r.mutable_start_time()->set_seconds(-100); }),
       Code::INVALID_ARGUMENT, "start_time"},
      {"start nanos out of range", req([](RC& r) { r.mutable_start_time()->set_nanos(-1); }),
       Code::INVALID_ARGUMENT, "start_time.nanos"},
      {"unknown topology number", req([](RC& r) { r.set_topology(static_cast<v1::Topology>(9)); }),
       Code::INVALID_ARGUMENT, "topology"},
      {"negative members", req([](RC& r) { r.set_members(-1); }), Code::INVALID_ARGUMENT,
       "members"},
      {"no shape", req([](RC& r) { r.clear_shape(); }), Code::INVALID_ARGUMENT, "shape"},
      {"zero whole gpus", req([](RC& r) { r.mutable_shape()->set_whole_gpus(0); }),
       Code::INVALID_ARGUMENT, "shape.whole_gpus"},
      {"overflowing whole gpus", req([](RC& r) { r.mutable_shape()->set_whole_gpus(2147483647); }),
       Code::INVALID_ARGUMENT, "shape.whole_gpus"},
      {"fraction zero", req([](RC& r) { r.mutable_shape()->mutable_fraction()->set_gpu_milli(0); }),
       Code::INVALID_ARGUMENT, "shape.fraction.gpu_milli"},
      {"fraction above one",
       req([](RC& r) { r.mutable_shape()->mutable_fraction()->set_gpu_milli(1001); }),
       Code::INVALID_ARGUMENT, "shape.fraction.gpu_milli"},
      {"fraction negative memory",
       req([](RC& r) { r.mutable_shape()->mutable_fraction()->set_memory_mib(-4); }),
       Code::INVALID_ARGUMENT, "shape.fraction.memory_mib"},
      {"fraction memory beyond the model", req([](RC& r) {
         r.add_gpu_models("L4");
         r.mutable_shape()->mutable_fraction()->set_memory_mib(30000);
       }),
       Code::INVALID_ARGUMENT, "shape.fraction.memory_mib"},
      {"overflowing cpu", req([](RC& r) { r.mutable_shape()->set_cpu_milli(INT64_MAX); }),
       Code::INVALID_ARGUMENT, "shape.cpu_milli"},
      // The protobuf runtime refuses invalid UTF-8 in a string field while
      // parsing, before any handler runs: INTERNAL, as gRPC's conventions
      // give for a request that does not parse, and no field can be named.
      // Nothing is written either way.
      {"invalid utf8 description", req([](RC& r) { r.set_description("\xc3\x28"); }),
       Code::INTERNAL, "request"},
      {"unknown team", req([](RC& r) { r.set_team("nobody"); }), Code::NOT_FOUND, "team"},
      {"unknown pool", req([](RC& r) { r.set_pool("nowhere"); }), Code::NOT_FOUND, "pool"},
      {"unknown model", req([](RC& r) { r.add_gpu_models("TPUv5"); }), Code::NOT_FOUND,
       "gpu_models[0]"},
      {"key reused with another body", req([](RC& r) {
         r.set_idempotency_key("taken");
         r.set_members(2);
       }),
       Code::FAILED_PRECONDITION, "idempotency_key"},
      {"pool with unspecified class",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.latency_class"},
      {"pool with unknown class number",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         r.mutable_pool()->set_latency_class(static_cast<v1::LatencyClass>(9));
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.latency_class"},
      {"cluster with empty name",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreateClusterRequest r;
         v1::CreateClusterResponse resp;
         return t->inventory_->CreateCluster(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "cluster.name"},
      {"node with unknown model",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::RegisterNodeRequest r;
         r.mutable_node()->set_cluster("east");
         r.mutable_node()->set_name("n9");
         r.mutable_node()->set_pool("serving");
         r.mutable_node()->set_cpu_milli(1000);
         r.mutable_node()->set_memory_mib(1000);
         r.mutable_node()->add_gpus()->set_model("Voodoo2");
         v1::RegisterNodeResponse resp;
         return t->inventory_->RegisterNode(&ctx, r, &resp);
       },
       Code::NOT_FOUND, "node.gpus[0].model"},
      {"node with zero cpu",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::RegisterNodeRequest r;
         r.mutable_node()->set_cluster("east");
         r.mutable_node()->set_name("n9");
         r.mutable_node()->set_pool("serving");
         r.mutable_node()->set_memory_mib(1000);
         r.mutable_node()->add_gpus()->set_model("L4");
         v1::RegisterNodeResponse resp;
         return t->inventory_->RegisterNode(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "node.cpu_milli"},
      {"team with unknown parent",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreateTeamRequest r;
         r.mutable_team()->set_name("x");
         r.mutable_team()->set_parent("ghost");
         v1::CreateTeamResponse resp;
         return t->governance_->CreateTeam(&ctx, r, &resp);
       },
       Code::NOT_FOUND, "team.parent"},
      {"negative quota", quota([](v1::Quota& q) { q.set_nominal_milli(-1); }),
       Code::INVALID_ARGUMENT, "quota.nominal_milli"},
      {"quota lending beyond nominal", quota([](v1::Quota& q) {
         q.set_nominal_milli(1000);
         q.set_lending_limit_milli(2000);
       }),
       Code::INVALID_ARGUMENT, "quota.lending_limit_milli"},
      {"quota borrowing below -1", quota([](v1::Quota& q) { q.set_borrowing_limit_milli(-5); }),
       Code::INVALID_ARGUMENT, "quota.borrowing_limit_milli"},
      {"quota for unknown model", quota([](v1::Quota& q) { q.set_gpu_model("Voodoo2"); }),
       Code::NOT_FOUND, "quota.gpu_model"},
      {"coexistence rule without class_a",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::SetCoexistenceRuleRequest r;
         r.mutable_rule()->set_class_b(v1::WORKLOAD_CLASS_TRAINING);
         r.mutable_rule()->set_gpu_isolation(v1::GPU_ISOLATION_SOFT_SHARING);
         v1::SetCoexistenceRuleResponse resp;
         return t->governance_->SetCoexistenceRule(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "rule.class_a"},
      {"coexistence rule without isolation",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::SetCoexistenceRuleRequest r;
         r.mutable_rule()->set_class_a(v1::WORKLOAD_CLASS_TRAINING);
         r.mutable_rule()->set_class_b(v1::WORKLOAD_CLASS_TRAINING);
         v1::SetCoexistenceRuleResponse resp;
         return t->governance_->SetCoexistenceRule(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "rule.gpu_isolation"},
      {"batch pool that lends",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
         r.mutable_pool()->add_lends_to(v1::WORKLOAD_CLASS_TRAINING);
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.lends_to[0]"},
      {"pool with negative grace",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
         r.mutable_pool()->set_reclaim_grace_seconds(-1);
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.reclaim_grace_seconds"},
      {"pool with an unknown queueing policy",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
         r.mutable_pool()->set_queueing(static_cast<v1::QueueingPolicy>(9));
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.queueing"},
      {"pool with a starvation limit over a week",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::CreatePoolRequest r;
         r.mutable_pool()->set_name("p2");
         r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
         r.mutable_pool()->set_starvation_limit_seconds(8 * 86'400);
         v1::CreatePoolResponse resp;
         return t->inventory_->CreatePool(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "pool.starvation_limit_seconds"},
      {"checkpoints after a negative seq",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ListCheckpointsRequest r;
         r.set_after_seq(-1);
         v1::ListCheckpointsResponse resp;
         return t->ledger_->ListCheckpoints(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "after_seq"},
      {"checkpoint page too large",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ListCheckpointsRequest r;
         r.set_page_size(10001);
         v1::ListCheckpointsResponse resp;
         return t->ledger_->ListCheckpoints(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "page_size"},
      {"release id zero",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ReleaseAllocationRequest r;
         v1::ReleaseAllocationResponse resp;
         return t->allocation_->ReleaseAllocation(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "id"},
      {"release unknown id",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ReleaseAllocationRequest r;
         r.set_id(424242);
         v1::ReleaseAllocationResponse resp;
         return t->allocation_->ReleaseAllocation(&ctx, r, &resp);
       },
       Code::NOT_FOUND, "id"},
      {"list with bad page token",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ListRequestsRequest r;
         r.set_page_token("'; --");
         v1::ListRequestsResponse resp;
         return t->allocation_->ListRequests(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "page_token"},
      {"list with unknown state",
       [](ServerTest* t) {
         grpc::ClientContext ctx;
         v1::ListRequestsRequest r;
         r.set_state(static_cast<v1::RequestState>(40));
         v1::ListRequestsResponse resp;
         return t->allocation_->ListRequests(&ctx, r, &resp);
       },
       Code::INVALID_ARGUMENT, "state"},
  };
  const std::string before = RowCounts();
  for (const BadInput& c : cases) {
    SCOPED_TRACE(c.name);
    grpc::Status status = c.call(this);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    if (!c.field.empty()) {
      EXPECT_EQ(status.error_message().rfind(c.field + ":", 0), 0u) << status.error_message();
    }
    EXPECT_EQ(RowCounts(), before);
  }
}

TEST_F(ServerTest, ReleaseOfAReleasedAllocationIsFailedPrecondition) {
  SeedOrganisation();
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(ValidRequest("k"), &resp).ok());
  for (grpc::StatusCode expected : {grpc::StatusCode::OK, grpc::StatusCode::FAILED_PRECONDITION}) {
    grpc::ClientContext ctx;
    v1::ReleaseAllocationRequest r;
    r.set_id(resp.request().id());
    v1::ReleaseAllocationResponse out;
    EXPECT_EQ(allocation_->ReleaseAllocation(&ctx, r, &out).error_code(), expected);
  }
}

// PostgreSQL reports a COMMIT whose wait for the synchronous standby was
// cancelled (statement_timeout, say) as a success, with a warning: the
// decision is on this server only and a failover could lose it. arbiterd
// must not acknowledge it. Here a trigger raises that warning on the ledger
// insert: the caller gets UNAVAILABLE, the arbiter reloads, and the retry
// with the same key replays the decision that did commit, exactly once.
TEST_F(ServerTest, ACommitTheSynchronousStandbyDidNotConfirmIsNotAcknowledged) {
  SeedOrganisation();
  ASSERT_THAT(db_->QueryValue(
                  "CREATE FUNCTION unconfirmed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                  " RAISE WARNING 'canceling wait for synchronous replication due to user request';"
                  " RETURN NULL; END $$;"
                  "CREATE TRIGGER unconfirmed AFTER INSERT ON ledger FOR EACH STATEMENT"
                  " EXECUTE FUNCTION unconfirmed()"),
              IsOk());
  v1::RequestCapacityResponse first;
  grpc::Status status = Request(ValidRequest("k"), &first);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(status.error_message().find("retry with the same idempotency key"), std::string::npos)
      << status.error_message();
  ASSERT_THAT(db_->QueryValue("DROP TRIGGER unconfirmed ON ledger"), IsOk());

  v1::RequestCapacityResponse retry;
  status = Request(ValidRequest("k"), &retry);
  for (int i = 0; i < 50 && status.error_code() == grpc::StatusCode::UNAVAILABLE; ++i) {
    absl::SleepFor(absl::Milliseconds(100));  // The arbiter is reloading.
    status = Request(ValidRequest("k"), &retry);
  }
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(retry.replayed());
  EXPECT_EQ(retry.request().state(), v1::REQUEST_STATE_ADMITTED);
  v1::RequestCapacityResponse next;
  ASSERT_TRUE(Request(ValidRequest("k2"), &next).ok());
  auto rows = db_->QueryValue(
      "SELECT (SELECT count(*) FROM requests) || ',' ||"
      " (SELECT count(*) = max(seq) FROM ledger)");
  ASSERT_THAT(rows, IsOk());
  EXPECT_EQ(*rows, "2,true");  // One request per key; the chain has no gap.
}

TEST_F(ServerTest, ReplayReturnsTheStoredRequest) {
  SeedOrganisation();
  v1::RequestCapacityResponse first, second;
  ASSERT_TRUE(Request(ValidRequest("k"), &first).ok());
  ASSERT_TRUE(Request(ValidRequest("k"), &second).ok());
  EXPECT_FALSE(first.replayed());
  EXPECT_TRUE(second.replayed());
  EXPECT_EQ(first.request().SerializeAsString(), second.request().SerializeAsString());
}

TEST_F(ServerTest, ConcurrentCallsWithOneKeyMakeOneRequest) {
  SeedOrganisation();
  std::vector<std::thread> threads;
  std::vector<int64_t> ids(16, 0);
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([this, i, &ids] {
      v1::RequestCapacityResponse resp;
      if (Request(ValidRequest("same"), &resp).ok()) ids[i] = resp.request().id();
    });
  }
  for (auto& t : threads) t.join();
  for (int64_t id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_THAT(db_->QueryValue("SELECT count(*) FROM requests"),
              ::arbiter::testing::IsOkAndHolds(std::string("1")));
}

TEST_F(ServerTest, MigRequestPartitionsAnEmptyGpuAndSaysSo) {
  testing::SeedSpec spec;
  spec.model = "H100-80GB";
  spec.gpus_per_node = 2;
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, spec), IsOk());
  v1::RequestCapacityRequest req = ValidRequest("mig");
  req.mutable_shape()->set_mig_profile("3g.40gb");
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(req, &resp).ok());
  ASSERT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
  const v1::Placement& p = resp.request().placements(0);
  EXPECT_EQ(p.mig_profile(), "3g.40gb");
  EXPECT_EQ(p.gpu_milli(), 454);
  ASSERT_EQ(p.mig_new_layout_size(), 2);
  EXPECT_EQ(p.mig_new_layout(1).start_slot(), 4);
  EXPECT_EQ(resp.request().total_gpu_milli(), 454);

  grpc::ClientContext ctx;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(inventory_->ListNodes(&ctx, v1::ListNodesRequest(), &nodes).ok());
  const v1::Gpu& gpu = nodes.nodes(0).gpus(p.gpu_indices(0));
  ASSERT_EQ(gpu.mig_instances_size(), 2);
  EXPECT_TRUE(gpu.mig_instances(0).allocated());
  EXPECT_FALSE(gpu.mig_instances(1).allocated());

  grpc::ClientContext models_ctx;
  v1::ListGpuModelsResponse models;
  ASSERT_TRUE(inventory_->ListGpuModels(&models_ctx, v1::ListGpuModelsRequest(), &models).ok());
  for (const auto& m : models.gpu_models()) {
    EXPECT_EQ(m.mig_profiles_size() > 0, m.mig_capable()) << m.name();
  }

  // Reads served from PostgreSQL report the charge as decided.
  grpc::ClientContext get_ctx;
  v1::GetRequestRequest get;
  get.set_id(resp.request().id());
  v1::GetRequestResponse got;
  ASSERT_TRUE(allocation_->GetRequest(&get_ctx, get, &got).ok());
  EXPECT_EQ(got.request().total_gpu_milli(), 454);
  grpc::ClientContext quotas_ctx;
  v1::ListQuotasResponse quotas;
  ASSERT_TRUE(governance_->ListQuotas(&quotas_ctx, v1::ListQuotasRequest(), &quotas).ok());
  ASSERT_EQ(quotas.quotas_size(), 1);
  EXPECT_EQ(quotas.quotas(0).used_milli(), 454);

  v1::RequestCapacityRequest bad = ValidRequest("bad-mig");
  bad.mutable_shape()->set_mig_profile("9g.99gb");
  EXPECT_EQ(Request(bad, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerTest, ModelProfileIsSizedAndPlacedInTheCheapestForm) {
  testing::SeedSpec spec;
  spec.model = "H100-80GB";
  ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, spec), IsOk());
  v1::RequestCapacityRequest req = ValidRequest("llama");
  v1::ModelProfile* m = req.mutable_shape()->mutable_model_profile();
  m->set_parameters(8'000'000'000);
  m->set_bytes_per_parameter_milli(2000);
  m->set_layers(32);
  m->set_kv_heads(8);
  m->set_head_dim(128);
  m->set_kv_bytes_per_element_milli(2000);
  m->set_token_budget(32768);
  m->set_overhead_mib(2048);
  v1::RequestCapacityResponse resp;
  ASSERT_TRUE(Request(req, &resp).ok());
  EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(resp.request().placed_shape().fraction().gpu_milli(), 262);
  EXPECT_EQ(resp.request().placed_shape().fraction().memory_mib(), 21403);
  EXPECT_EQ(resp.request().shape().model_profile().token_budget(), 32768);

  grpc::ClientContext ctx;
  v1::GetRequestRequest get;
  get.set_id(resp.request().id());
  v1::GetRequestResponse got;
  ASSERT_TRUE(allocation_->GetRequest(&ctx, get, &got).ok());
  EXPECT_EQ(got.request().SerializeAsString(), resp.request().SerializeAsString());

  m->set_bytes_per_parameter_milli(0);
  req.set_idempotency_key("bad-model");
  grpc::Status bad = Request(req, &resp);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(bad.error_message().rfind("shape.model_profile.bytes_per_parameter_milli:", 0), 0u);
}

TEST_F(ServerTest, WatchDeliversCommittedEventsInOrder) {
  SeedOrganisation();
  grpc::ClientContext watch_ctx;
  v1::WatchAllocationsRequest watch;
  watch.set_team("inference");
  auto reader = WatchFromNow(&watch_ctx, watch);
  v1::WatchAllocationsResponse event;
  v1::RequestCapacityResponse resp;
  grpc::Status requested = Request(ValidRequest("w1"), &resp);
  EXPECT_TRUE(requested.ok()) << requested.error_message();
  grpc::ClientContext release_ctx;
  v1::ReleaseAllocationRequest release;
  release.set_id(resp.request().id());
  v1::ReleaseAllocationResponse released;
  grpc::Status release_status =
      requested.ok() ? allocation_->ReleaseAllocation(&release_ctx, release, &released)
                     : grpc::Status::CANCELLED;
  EXPECT_TRUE(release_status.ok()) << release_status.error_message();
  std::vector<v1::AllocationEventType> types;
  while (release_status.ok() && types.size() < 2 && reader->Read(&event)) {
    if (event.request().id() == resp.request().id()) types.push_back(event.type());
  }
  // The stream is always ended and finished: a reader destroyed while its
  // call is open aborts the process (gRPC's debug checks).
  watch_ctx.TryCancel();
  while (reader->Read(&event)) {
  }
  (void)reader->Finish();
  EXPECT_EQ(types, (std::vector<v1::AllocationEventType>{v1::ALLOCATION_EVENT_TYPE_ADMITTED,
                                                         v1::ALLOCATION_EVENT_TYPE_RELEASED}));
}

}  // namespace
}  // namespace arbiter::server
