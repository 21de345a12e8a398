// Node lifecycle, enforced preemption and the GPU catalog through the API,
// on a real server and database (docs/nodes.md, docs/enforcement.md,
// docs/catalog.md): cordon, drain with a claimed victim that confirms by
// releasing or lets its lease run out, failure, removal (empty and not),
// heartbeats, the shipped catalog applied and a MIG profile placed on a
// model it adds, and bad input that names its field and writes nothing.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include <google/protobuf/util/json_util.h>

#include "tests/server/server_fixture.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

class NodeLifecycleTest : public ServerTest {
 protected:
  // Pool "enforced" (claim deadline 60 s, lease 30 s) with nodes e1 and e2
  // of 2 L4s each; team inference may use all 4 GPUs.
  void SetUpPool() {
    testing::SeedSpec spec;
    spec.nodes = 0;
    ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, spec), IsOk());
    grpc::ClientContext ctx;
    v1::CreatePoolRequest pool;
    pool.mutable_pool()->set_name("enforced");
    pool.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    v1::PoolClassRule* rule = pool.mutable_pool()->add_class_rules();  // Its work is inference.
    rule->set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    rule->set_admission(v1::CLASS_ADMISSION_ADMIT);
    pool.mutable_pool()->set_claim_deadline_seconds(60);
    pool.mutable_pool()->set_lease_seconds(30);
    v1::CreatePoolResponse created;
    ASSERT_TRUE(inventory_->CreatePool(&ctx, pool, &created).ok());
    ASSERT_TRUE(Register("e1").ok());
    ASSERT_TRUE(Register("e2").ok());
    grpc::ClientContext quota_ctx;
    v1::SetQuotaRequest quota;
    quota.mutable_quota()->set_team("inference");
    quota.mutable_quota()->set_pool("enforced");
    quota.mutable_quota()->set_nominal_milli(4000);
    v1::SetQuotaResponse set;
    ASSERT_TRUE(governance_->SetQuota(&quota_ctx, quota, &set).ok());
  }

  grpc::Status Register(const std::string& name) {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name(name);
    r.mutable_node()->set_pool("enforced");
    r.mutable_node()->set_cpu_milli(64'000);
    r.mutable_node()->set_memory_mib(512'000);
    for (int i = 0; i < 2; ++i) {
      v1::Gpu* gpu = r.mutable_node()->add_gpus();
      gpu->set_index(i);
      gpu->set_model("L4");
    }
    v1::RegisterNodeResponse resp;
    return inventory_->RegisterNode(&ctx, r, &resp);
  }

  // Asks for 2 whole GPUs on one member.
  v1::CapacityRequest Ask(const std::string& key) {
    v1::RequestCapacityRequest req = ValidRequest(key);
    req.set_pool("enforced");
    req.mutable_shape()->set_whole_gpus(2);
    v1::RequestCapacityResponse resp;
    EXPECT_TRUE(Request(req, &resp).ok());
    return resp.request();
  }

  v1::CapacityRequest Get(int64_t id) {
    grpc::ClientContext ctx;
    v1::GetRequestRequest r;
    r.set_id(id);
    v1::GetRequestResponse resp;
    EXPECT_TRUE(allocation_->GetRequest(&ctx, r, &resp).ok());
    return resp.request();
  }

  // The node's state as listed; UNSPECIFIED when it is not listed.
  v1::NodeState StateOf(const std::string& name) {
    grpc::ClientContext ctx;
    v1::ListNodesRequest r;
    r.set_pool("enforced");
    v1::ListNodesResponse resp;
    EXPECT_TRUE(inventory_->ListNodes(&ctx, r, &resp).ok());
    for (const v1::Node& n : resp.nodes()) {
      if (n.name() == name) return n.state();
    }
    return v1::NODE_STATE_UNSPECIFIED;
  }

  grpc::Status Cordon(const std::string& name, bool cordon) {
    grpc::ClientContext ctx;
    if (cordon) {
      v1::CordonNodeRequest r;
      r.set_cluster("east");
      r.set_name(name);
      v1::CordonNodeResponse resp;
      return inventory_->CordonNode(&ctx, r, &resp);
    }
    v1::UncordonNodeRequest r;
    r.set_cluster("east");
    r.set_name(name);
    v1::UncordonNodeResponse resp;
    return inventory_->UncordonNode(&ctx, r, &resp);
  }

  grpc::Status Drain(const std::string& name, int64_t grace, v1::DrainNodeResponse* resp) {
    grpc::ClientContext ctx;
    v1::DrainNodeRequest r;
    r.set_cluster("east");
    r.set_name(name);
    r.set_grace_seconds(grace);
    return inventory_->DrainNode(&ctx, r, resp);
  }

  grpc::Status Claim(int64_t id, const std::string& holder) {
    grpc::ClientContext ctx;
    v1::ClaimAllocationRequest r;
    r.set_id(id);
    r.set_holder(holder);
    v1::ClaimAllocationResponse resp;
    return allocation_->ClaimAllocation(&ctx, r, &resp);
  }

  grpc::Status Renew(int64_t id, const std::string& holder) {
    grpc::ClientContext ctx;
    v1::RenewLeaseRequest r;
    r.set_id(id);
    r.set_holder(holder);
    v1::RenewLeaseResponse resp;
    return allocation_->RenewLease(&ctx, r, &resp);
  }

  grpc::Status Remove(const std::string& name) {
    grpc::ClientContext ctx;
    v1::RemoveNodeRequest r;
    r.set_cluster("east");
    r.set_name(name);
    v1::RemoveNodeResponse resp;
    return inventory_->RemoveNode(&ctx, r, &resp);
  }

  int64_t UpdatedAt(int64_t id) {
    auto at = db_->QueryValue(absl::StrCat(
        "SELECT extract(epoch FROM updated_at)::bigint FROM requests WHERE id = ", id));
    EXPECT_THAT(at, IsOk());
    return at.ok() ? std::stoll(*at) : 0;
  }

  // Waits (in real time) until the arbiter has run what the simulated
  // clock made due and GetRequest shows `id` in `state`.
  bool AwaitState(int64_t id, v1::RequestState state) {
    for (int i = 0; i < 200; ++i) {
      if (Get(id).state() == state) return true;
      absl::SleepFor(absl::Milliseconds(25));
    }
    return false;
  }
};

TEST_F(NodeLifecycleTest, CordonDrainConfirmFailAndRemove) {
  SetUpPool();
  ASSERT_TRUE(Cordon("e2", true).ok());
  ASSERT_TRUE(Cordon("e2", true).ok());  // Idempotent.
  EXPECT_EQ(StateOf("e2"), v1::NODE_STATE_CORDONED);
  const v1::CapacityRequest a = Ask("a");
  ASSERT_EQ(a.state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(a.placements(0).node(), "e1");
  const v1::CapacityRequest b = Ask("b");
  EXPECT_EQ(b.state(), v1::REQUEST_STATE_QUEUED);  // e2 is free but cordoned.
  ASSERT_TRUE(Claim(a.id(), "pod:a").ok());

  // Drain e1: a has 20 s of notice. Uncordoning e2 admits b there.
  v1::DrainNodeResponse drained;
  ASSERT_TRUE(Drain("e1", 20, &drained).ok());
  ASSERT_EQ(drained.notified_request_ids_size(), 1);
  EXPECT_EQ(drained.notified_request_ids(0), a.id());
  EXPECT_EQ(drained.node().state(), v1::NODE_STATE_DRAINING);
  EXPECT_EQ(Get(a.id()).state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(Get(a.id()).reason_code(), "NODE_DRAIN");
  ASSERT_TRUE(Cordon("e2", false).ok());
  EXPECT_EQ(Get(b.id()).state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(Get(b.id()).placements(0).node(), "e2");

  // The enforcer renews while it stops the workload; past the deadline the
  // capacity is still a's until it confirms by releasing.
  clock_.Advance(absl::Seconds(15));
  ASSERT_TRUE(Renew(a.id(), "pod:a").ok());
  clock_.Advance(absl::Seconds(10));
  grpc::Status late = Renew(a.id(), "pod:a");
  EXPECT_EQ(late.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << late.error_message();
  EXPECT_EQ(Get(a.id()).state(), v1::REQUEST_STATE_PREEMPTING);
  {
    grpc::ClientContext ctx;
    v1::ReleaseAllocationRequest r;
    r.set_id(a.id());
    v1::ReleaseAllocationResponse resp;
    ASSERT_TRUE(allocation_->ReleaseAllocation(&ctx, r, &resp).ok());
    EXPECT_EQ(resp.request().state(), v1::REQUEST_STATE_RELEASED);
  }
  EXPECT_EQ(StateOf("e1"), v1::NODE_STATE_CORDONED);  // Drained.

  // Removing e2 with b on it is refused, naming b; failing it ends b,
  // charged up to the failure.
  const std::string before = RowCounts();
  grpc::Status busy = Remove("e2");
  EXPECT_EQ(busy.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(busy.error_message().find(absl::StrCat(b.id())), std::string::npos)
      << busy.error_message();
  EXPECT_EQ(RowCounts(), before);
  const absl::Time failed_at = clock_.TimeNow() - absl::Seconds(5);
  {
    grpc::ClientContext ctx;
    v1::MarkNodeFailedRequest r;
    r.set_cluster("east");
    r.set_name("e2");
    r.mutable_failed_at()->set_seconds(absl::ToUnixSeconds(failed_at));
    v1::MarkNodeFailedResponse resp;
    ASSERT_TRUE(inventory_->MarkNodeFailed(&ctx, r, &resp).ok());
    ASSERT_EQ(resp.ended_request_ids_size(), 1);
    EXPECT_EQ(resp.ended_request_ids(0), b.id());
    EXPECT_EQ(resp.node().state(), v1::NODE_STATE_FAILED);
  }
  EXPECT_EQ(Get(b.id()).state(), v1::REQUEST_STATE_RELEASED);
  EXPECT_EQ(Get(b.id()).reason_code(), "NODE_FAILED");
  EXPECT_EQ(UpdatedAt(b.id()), absl::ToUnixSeconds(failed_at));

  // Empty nodes are removed; the name may be registered again.
  ASSERT_TRUE(Remove("e1").ok());
  EXPECT_EQ(StateOf("e1"), v1::NODE_STATE_UNSPECIFIED);
  EXPECT_EQ(Remove("e1").error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(Register("e1").ok());
  EXPECT_EQ(StateOf("e1"), v1::NODE_STATE_READY);
  auto ledgered = db_->QueryValue(
      "SELECT string_agg(action, ',' ORDER BY seq) FROM ledger WHERE action LIKE 'node.%'");
  ASSERT_THAT(ledgered, IsOk());
  EXPECT_EQ(*ledgered,
            "node.register,node.register,node.cordon,node.drain,node.uncordon,node.fail,"
            "node.remove,node.register");
}

TEST_F(NodeLifecycleTest, AVictimWhoseLeaseRunsOutHandsItsCapacityOverChargedToItsLastRenewal) {
  SetUpPool();
  ASSERT_TRUE(Cordon("e2", true).ok());
  const v1::CapacityRequest a = Ask("a");
  ASSERT_TRUE(Claim(a.id(), "pod:a").ok());
  const absl::Time start = clock_.TimeNow();
  clock_.Advance(absl::Seconds(5));
  ASSERT_TRUE(Renew(a.id(), "pod:a").ok());  // The last renewal: +5 s.
  v1::DrainNodeResponse drained;
  ASSERT_TRUE(Drain("e1", 10, &drained).ok());
  const v1::CapacityRequest b = Ask("b");  // Waits for e1 to be given back.
  ASSERT_EQ(b.state(), v1::REQUEST_STATE_QUEUED);
  ASSERT_TRUE(Cordon("e1", false).ok());  // e1 may take b once a is gone.
  EXPECT_EQ(Get(a.id()).state(), v1::REQUEST_STATE_PREEMPTING);
  // Deadline +15 s, lease to +35 s: a holds e1 until then.
  clock_.Advance(absl::Seconds(20));         // +25 s.
  absl::SleepFor(absl::Milliseconds(1500));  // The arbiter wakes at least every second.
  EXPECT_EQ(Get(a.id()).state(), v1::REQUEST_STATE_PREEMPTING);
  EXPECT_EQ(Get(b.id()).state(), v1::REQUEST_STATE_QUEUED);
  clock_.Advance(absl::Seconds(11));  // +36 s.
  ASSERT_TRUE(AwaitState(a.id(), v1::REQUEST_STATE_PREEMPTED));
  EXPECT_EQ(UpdatedAt(a.id()), absl::ToUnixSeconds(start + absl::Seconds(5)));
  EXPECT_NE(Get(a.id()).reason().find("not confirmed by pod:a"), std::string::npos);
  EXPECT_TRUE(AwaitState(b.id(), v1::REQUEST_STATE_ADMITTED));
}

TEST_F(NodeLifecycleTest, HeartbeatsThatStopMakeTheNodeUnreachable) {
  SetUpPool();
  auto heartbeat = [&](const std::string& name) {
    grpc::ClientContext ctx;
    v1::NodeHeartbeatRequest r;
    r.set_cluster("east");
    r.set_name(name);
    v1::NodeHeartbeatResponse resp;
    grpc::Status st = inventory_->NodeHeartbeat(&ctx, r, &resp);
    EXPECT_TRUE(resp.node().heartbeats() || !st.ok());
    return st;
  };
  ASSERT_TRUE(heartbeat("e1").ok());
  clock_.Advance(absl::Seconds(40));
  ASSERT_TRUE(heartbeat("e1").ok());
  clock_.Advance(absl::Seconds(61));  // The default timeout is 60 s.
  bool unreachable = false;
  for (int i = 0; i < 200 && !unreachable; ++i) {
    unreachable = StateOf("e1") == v1::NODE_STATE_UNREACHABLE;
    if (!unreachable) absl::SleepFor(absl::Milliseconds(25));
  }
  ASSERT_TRUE(unreachable);
  EXPECT_EQ(StateOf("e2"), v1::NODE_STATE_READY);  // No agent: never timed.
  // Nothing new is placed on e1.
  EXPECT_EQ(Ask("a").placements(0).node(), "e2");
  const v1::CapacityRequest b = Ask("b");
  EXPECT_EQ(b.state(), v1::REQUEST_STATE_QUEUED);
  ASSERT_TRUE(heartbeat("e1").ok());
  EXPECT_EQ(StateOf("e1"), v1::NODE_STATE_READY);
  EXPECT_EQ(Get(b.id()).state(), v1::REQUEST_STATE_ADMITTED);
}

TEST_F(NodeLifecycleTest, BadNodeReferencesNameTheFieldAndWriteNothing) {
  SetUpPool();
  const std::string before = RowCounts();
  auto ledger_size = [&] { return db_->QueryValue("SELECT count(*) FROM ledger"); };
  const auto ledger_before = ledger_size();
  struct Case {
    const char* what;
    grpc::Status status;
    grpc::StatusCode code;
    const char* field;
  };
  v1::DrainNodeResponse drained;
  grpc::ClientContext fail_ctx;
  v1::MarkNodeFailedRequest fail;
  fail.set_cluster("east");
  fail.set_name("e1");
  fail.mutable_failed_at()->set_seconds(absl::ToUnixSeconds(clock_.TimeNow() + absl::Hours(1)));
  v1::MarkNodeFailedResponse failed;
  grpc::ClientContext update_ctx;
  v1::UpdateNodeRequest update;
  update.mutable_node()->set_cluster("east");
  update.mutable_node()->set_name("e1");
  update.mutable_node()->set_pool("enforced");
  update.mutable_node()->set_cpu_milli(64'000);
  update.mutable_node()->set_memory_mib(512'000);
  update.mutable_node()->add_gpus()->set_model("H200");
  update.mutable_node()->add_gpus()->set_model("L4");
  update.mutable_node()->mutable_gpus(1)->set_index(1);
  v1::UpdateNodeResponse updated;
  for (const Case& c :
       std::vector<Case>{{"unknown node", Cordon("e9", true), grpc::StatusCode::NOT_FOUND, "name:"},
                         {"no name", Remove(""), grpc::StatusCode::INVALID_ARGUMENT, "name:"},
                         {"negative grace", Drain("e1", -1, &drained),
                          grpc::StatusCode::INVALID_ARGUMENT, "grace_seconds:"},
                         {"future failure", inventory_->MarkNodeFailed(&fail_ctx, fail, &failed),
                          grpc::StatusCode::INVALID_ARGUMENT, "failed_at:"},
                         {"other GPUs", inventory_->UpdateNode(&update_ctx, update, &updated),
                          grpc::StatusCode::FAILED_PRECONDITION, "node.gpus[0].model:"}}) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(c.status.error_code(), c.code) << c.status.error_message();
    EXPECT_EQ(c.status.error_message().rfind(c.field, 0), 0u) << c.status.error_message();
  }
  EXPECT_EQ(RowCounts(), before);
  EXPECT_EQ(ledger_size().value_or("?"), ledger_before.value_or("!"));
  EXPECT_EQ(StateOf("e1"), v1::NODE_STATE_READY);
}

// The shipped catalog file applies through SetGpuModel (again: nothing
// changes); a model it adds (B200) takes a node and MIG placements of its
// own profiles; a bad model or an unknown one names its field.
TEST_F(NodeLifecycleTest, TheShippedCatalogAddsModelsThatTakeMigPlacements) {
  SetUpPool();
  std::ifstream in(std::string(ARBITER_SOURCE_DIR) + "/catalog/gpu-models.json");
  std::stringstream text;
  text << in.rdbuf();
  v1::ListGpuModelsResponse catalog;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text.str(), &catalog).ok());
  auto apply = [&] {
    int changed = 0;
    for (const v1::GpuModel& m : catalog.gpu_models()) {
      grpc::ClientContext ctx;
      v1::SetGpuModelRequest r;
      *r.mutable_gpu_model() = m;
      v1::SetGpuModelResponse resp;
      grpc::Status st = inventory_->SetGpuModel(&ctx, r, &resp);
      EXPECT_TRUE(st.ok()) << m.name() << ": " << st.error_message();
      changed += resp.changed() ? 1 : 0;
    }
    return changed;
  };
  EXPECT_GT(apply(), 0);
  EXPECT_EQ(apply(), 0);  // Idempotent.
  {
    grpc::ClientContext ctx;
    v1::ListGpuModelsResponse listed;
    ASSERT_TRUE(inventory_->ListGpuModels(&ctx, v1::ListGpuModelsRequest(), &listed).ok());
    EXPECT_EQ(listed.gpu_models_size(), catalog.gpu_models_size());
    for (const v1::GpuModel& m : listed.gpu_models()) {
      if (m.name() == "B200") {
        EXPECT_EQ(m.mig_profiles_size(), 7);
      }
      if (m.name() == "MI300X") {
        EXPECT_EQ(m.vendor(), "amd");
      }
    }
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name("b200-0");
    r.mutable_node()->set_pool("enforced");
    r.mutable_node()->set_cpu_milli(64'000);
    r.mutable_node()->set_memory_mib(512'000);
    r.mutable_node()->add_gpus()->set_model("B200");
    v1::RegisterNodeResponse resp;
    ASSERT_TRUE(inventory_->RegisterNode(&ctx, r, &resp).ok());
  }
  ASSERT_TRUE(Cordon("e1", true).ok());
  ASSERT_TRUE(Cordon("e2", true).ok());
  v1::RequestCapacityRequest req = ValidRequest("mig");
  req.set_pool("enforced");
  req.set_members(2);
  req.mutable_shape()->set_mig_profile("3g.90gb");
  v1::RequestCapacityResponse placed;
  ASSERT_TRUE(Request(req, &placed).ok());
  ASSERT_EQ(placed.request().state(), v1::REQUEST_STATE_ADMITTED);
  ASSERT_EQ(placed.request().placements_size(), 2);
  EXPECT_EQ(placed.request().placements(0).node(), "b200-0");
  EXPECT_EQ(placed.request().placements(0).mig_profile(), "3g.90gb");
  EXPECT_EQ(placed.request().placements(1).mig_start_slot(), 4);

  const std::string before = RowCounts();
  auto models = [&] { return db_->QueryValue("SELECT count(*) FROM gpu_models"); };
  const auto models_before = models();
  v1::GpuModel bad = catalog.gpu_models(0);
  bad.set_name("B300");
  bad.set_mig_capable(true);
  v1::MigProfile* profile = bad.add_mig_profiles();
  profile->set_name("4g.100gb");
  profile->set_memory_slices(4);
  profile->set_compute_slices(4);
  profile->set_sm_count(80);
  profile->set_memory_mib(1000);
  profile->set_max_instances(1);
  profile->add_start_slots(6);
  {
    grpc::ClientContext ctx;
    v1::SetGpuModelRequest r;
    *r.mutable_gpu_model() = bad;
    v1::SetGpuModelResponse resp;
    grpc::Status st = inventory_->SetGpuModel(&ctx, r, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(st.error_message().rfind("gpu_model.mig_profiles[0].start_slots:", 0), 0u)
        << st.error_message();
  }
  {
    grpc::ClientContext ctx;
    v1::RegisterNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name("b300-0");
    r.mutable_node()->set_pool("enforced");
    r.mutable_node()->set_cpu_milli(64'000);
    r.mutable_node()->set_memory_mib(512'000);
    r.mutable_node()->add_gpus()->set_model("B300");
    v1::RegisterNodeResponse resp;
    grpc::Status st = inventory_->RegisterNode(&ctx, r, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_EQ(st.error_message().rfind("node.gpus[0].model:", 0), 0u) << st.error_message();
  }
  EXPECT_EQ(RowCounts(), before);
  EXPECT_EQ(models().value_or("?"), models_before.value_or("!"));
}

}  // namespace
}  // namespace arbiter::server
