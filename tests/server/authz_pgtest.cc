// Every RPC, called as every kind of caller over real TLS: with no, expired,
// wrong-CA and self-signed certificates, without a role, and with each role
// that matters. Each call gets exactly the expected class of status, and a
// refused call changes nothing.
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include <google/protobuf/descriptor.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include "app/authz.h"
#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/chargeback.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "arbiter/v1/telemetry.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::TestDatabase;
using Code = grpc::StatusCode;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Stubs {
  std::unique_ptr<v1::InventoryService::Stub> inventory;
  std::unique_ptr<v1::GovernanceService::Stub> governance;
  std::unique_ptr<v1::AllocationService::Stub> allocation;
  std::unique_ptr<v1::LedgerService::Stub> ledger;
  std::unique_ptr<v1::TelemetryService::Stub> telemetry;
  std::unique_ptr<v1::ChargebackService::Stub> chargeback;
  std::shared_ptr<grpc::Channel> channel;
};

// The callers. "allowed" lists the methods the caller may call; others must
// be refused with `refusal`.
struct Identity {
  std::string name;  // Certificate file stem; "" for no certificate.
  Code refusal;
  std::set<std::string> allowed;
};

// Approving is open to every identified caller at the door; the authority
// rules decide (a caller they do not name gets PERMISSION_DENIED from the
// core, tested below with a real pending request). So is asking who one is.
const std::set<std::string> kApprovals = {"AllocationService.ApproveRequest",
                                          "AllocationService.DenyRequest",
                                          "GovernanceService.WhoAmI"};

const std::set<std::string> kReads = {
    "GovernanceService.ListAuthorityRules", "GovernanceService.ListPrices",
    "GovernanceService.ListDelegations",    "InventoryService.ListGpuModels",
    "InventoryService.ListClusters",        "InventoryService.ListPools",
    "InventoryService.ListNodes",           "GovernanceService.ListTeams",
    "GovernanceService.ListQuotas",         "GovernanceService.ListCoexistenceRules",
    "AllocationService.GetRequest",         "AllocationService.ListRequests",
    "AllocationService.WatchAllocations",   "TelemetryService.GetUtilization",
    "TelemetryService.ListIdleAllocations", "TelemetryService.GetRightSizing",
    "ChargebackService.ListSlos",           "ChargebackService.ListIncidents",
    "ChargebackService.GetChargeback",      "TelemetryService.ListIdlePolicies",
    "GovernanceService.ListPowerBudgets",   "InventoryService.GetServingForecast"};

std::set<std::string> Plus(std::set<std::string> a, const std::set<std::string>& b) {
  a.insert(b.begin(), b.end());
  return a;
}

std::set<std::string> Minus(std::set<std::string> a, const std::set<std::string>& b) {
  for (const std::string& x : b) a.erase(x);
  return a;
}

class AuthzTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/authz-certs-", getpid()));
    const std::string cmd =
        absl::StrCat(ARBITER_SOURCE_DIR, "/tests/testing/make_test_certs ", ARBITER_SOURCE_DIR, " ",
                     *dir_, " admin member auditor authority finance nobody agent");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.dsn = db_->dsn();
    options.tls = TlsFiles{*dir_ + "/server.pem", *dir_ + "/server.key", *dir_ + "/ca.pem"};
    options.admins = {"spiffe://arbiter.local/admin"};
    auto server = ArbiterServer::Start(options, &clock_);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
  }

  Stubs Connect(const std::string& name) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(*dir_ + "/ca.pem");
    if (!name.empty()) {
      ssl.pem_cert_chain = ReadFile(*dir_ + "/" + name + ".pem");
      ssl.pem_private_key = ReadFile(*dir_ + "/" + name + ".key");
    }
    Stubs s;
    // A fresh channel per identity: subchannels are not shared between them.
    grpc::ChannelArguments args;
    args.SetString("arbiter.test.identity", name);
    s.channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                          grpc::SslCredentials(ssl), args);
    s.inventory = v1::InventoryService::NewStub(s.channel);
    s.governance = v1::GovernanceService::NewStub(s.channel);
    s.allocation = v1::AllocationService::NewStub(s.channel);
    s.ledger = v1::LedgerService::NewStub(s.channel);
    s.telemetry = v1::TelemetryService::NewStub(s.channel);
    s.chargeback = v1::ChargebackService::NewStub(s.channel);
    return s;
  }

  // Row counts of every table a call could write, the ledger's length
  // included (not access_denials).
  std::string RowCounts() {
    auto counts = db_->QueryValue(
        "SELECT concat_ws(',', (SELECT count(*) FROM clusters), (SELECT count(*) FROM pools),"
        " (SELECT count(*) FROM nodes), (SELECT count(*) FROM teams),"
        " (SELECT count(*) FROM quotas), (SELECT sum(nominal_milli) FROM quotas),"
        " (SELECT count(*) FROM requests), (SELECT string_agg(state, '') FROM requests),"
        " (SELECT count(*) FROM role_bindings), (SELECT count(*) FROM coexistence_rules),"
        " (SELECT count(*) FROM delegations), (SELECT count(*) FROM ledger))");
    EXPECT_THAT(counts, IsOk());
    return counts.value_or("");
  }

  static std::string* dir_;
  testing::SimulatedClock clock_;
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<ArbiterServer> server_;
};

std::string* AuthzTest::dir_ = nullptr;

template <typename Stub, typename Req, typename Resp>
Code Unary(Stub& stub, grpc::Status (Stub::*method)(grpc::ClientContext*, const Req&, Resp*),
           const Req& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  Resp resp;
  return (stub.*method)(&ctx, req, &resp).error_code();
}

v1::RoleBinding TeamMember(const std::string& subject, const std::string& team) {
  v1::RoleBinding b;
  b.set_subject(subject);
  b.set_role(v1::ROLE_TEAM_MEMBER);
  b.set_scope_kind(v1::SCOPE_KIND_TEAM);
  b.set_scope(team);
  return b;
}

// An inference request of one whole GPU in pool serving for `team`.
v1::RequestCapacityRequest OneGpu(const std::string& key, const std::string& team) {
  v1::RequestCapacityRequest r;
  r.set_idempotency_key(key);
  r.set_team(team);
  r.set_pool("serving");
  r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
  r.set_members(1);
  r.mutable_shape()->set_whole_gpus(1);
  return r;
}

// Every RPC, with arguments an allowed caller could make (they may still
// fail validation or find nothing: that is not what is tested here).
std::map<std::string, std::function<Code(Stubs&, int)>> Calls() {
  using Inv = v1::InventoryService::Stub;
  using Gov = v1::GovernanceService::Stub;
  using Alloc = v1::AllocationService::Stub;
  std::map<std::string, std::function<Code(Stubs&, int)>> calls;
  calls["InventoryService.ListGpuModels"] = [](Stubs& s, int) {
    return Unary(*s.inventory, &Inv::ListGpuModels, v1::ListGpuModelsRequest());
  };
  calls["InventoryService.ListClusters"] = [](Stubs& s, int) {
    return Unary(*s.inventory, &Inv::ListClusters, v1::ListClustersRequest());
  };
  calls["InventoryService.ListPools"] = [](Stubs& s, int) {
    return Unary(*s.inventory, &Inv::ListPools, v1::ListPoolsRequest());
  };
  calls["InventoryService.GetServingForecast"] = [](Stubs& s, int) {
    v1::GetServingForecastRequest r;
    r.set_pool("serving");  // Does not forecast: FAILED_PRECONDITION once allowed.
    return Unary(*s.inventory, &Inv::GetServingForecast, r);
  };
  calls["InventoryService.ListNodes"] = [](Stubs& s, int) {
    return Unary(*s.inventory, &Inv::ListNodes, v1::ListNodesRequest());
  };
  calls["InventoryService.SetGpuModel"] = [](Stubs& s, int n) {
    v1::SetGpuModelRequest r;
    r.mutable_gpu_model()->set_name(absl::StrCat("authz-gpu-", n));
    r.mutable_gpu_model()->set_memory_mib(16384);
    r.mutable_gpu_model()->set_sm_count(40);
    r.mutable_gpu_model()->set_tdp_watts(70);
    return Unary(*s.inventory, &Inv::SetGpuModel, r);
  };
  // Node lifecycle calls name a node that does not exist: allowed callers
  // get NOT_FOUND (or a validation error) and change nothing.
  calls["InventoryService.UpdateNode"] = [](Stubs& s, int n) {
    v1::UpdateNodeRequest r;
    r.mutable_node()->set_cluster("east");
    r.mutable_node()->set_name(absl::StrCat("absent-", n));
    r.mutable_node()->set_pool("serving");
    r.mutable_node()->set_cpu_milli(1000);
    r.mutable_node()->set_memory_mib(1024);
    r.mutable_node()->add_gpus()->set_model("L4");
    return Unary(*s.inventory, &Inv::UpdateNode, r);
  };
  calls["InventoryService.CordonNode"] = [](Stubs& s, int n) {
    v1::CordonNodeRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::CordonNode, r);
  };
  calls["InventoryService.UncordonNode"] = [](Stubs& s, int n) {
    v1::UncordonNodeRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::UncordonNode, r);
  };
  calls["InventoryService.DrainNode"] = [](Stubs& s, int n) {
    v1::DrainNodeRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::DrainNode, r);
  };
  calls["InventoryService.MarkNodeFailed"] = [](Stubs& s, int n) {
    v1::MarkNodeFailedRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::MarkNodeFailed, r);
  };
  calls["InventoryService.RemoveNode"] = [](Stubs& s, int n) {
    v1::RemoveNodeRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::RemoveNode, r);
  };
  calls["InventoryService.NodeHeartbeat"] = [](Stubs& s, int n) {
    v1::NodeHeartbeatRequest r;
    r.set_cluster("east");
    r.set_name(absl::StrCat("absent-", n));
    return Unary(*s.inventory, &Inv::NodeHeartbeat, r);
  };
  calls["InventoryService.CreateCluster"] = [](Stubs& s, int n) {
    v1::CreateClusterRequest r;
    r.mutable_cluster()->set_name(absl::StrCat("c", n));
    return Unary(*s.inventory, &Inv::CreateCluster, r);
  };
  calls["InventoryService.CreatePool"] = [](Stubs& s, int n) {
    v1::CreatePoolRequest r;
    r.mutable_pool()->set_name(absl::StrCat("p", n));
    r.mutable_pool()->set_latency_class(v1::LATENCY_CLASS_BATCH);
    return Unary(*s.inventory, &Inv::CreatePool, r);
  };
  calls["InventoryService.RegisterNode"] = [](Stubs& s, int n) {
    v1::RegisterNodeRequest r;
    v1::Node* node = r.mutable_node();
    node->set_cluster("east");
    node->set_name(absl::StrCat("extra", n));
    node->set_pool("serving");
    node->set_cpu_milli(1000);
    node->set_memory_mib(1000);
    node->add_gpus()->set_model("L4");
    return Unary(*s.inventory, &Inv::RegisterNode, r);
  };
  calls["GovernanceService.ListTeams"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListTeams, v1::ListTeamsRequest());
  };
  calls["GovernanceService.CreateTeam"] = [](Stubs& s, int n) {
    v1::CreateTeamRequest r;
    r.mutable_team()->set_name(absl::StrCat("sub", n));
    r.mutable_team()->set_parent("inference");
    return Unary(*s.governance, &Gov::CreateTeam, r);
  };
  calls["GovernanceService.ListQuotas"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListQuotas, v1::ListQuotasRequest());
  };
  calls["GovernanceService.SetQuota"] = [](Stubs& s, int n) {
    v1::SetQuotaRequest r;
    r.mutable_quota()->set_team("inference");
    r.mutable_quota()->set_pool("serving");
    r.mutable_quota()->set_nominal_milli(3000 + n);
    return Unary(*s.governance, &Gov::SetQuota, r);
  };
  calls["GovernanceService.ImportOrganisation"] = [](Stubs& s, int n) {
    v1::ImportOrganisationRequest r;
    v1::Quota* q = r.add_quotas();
    q->set_team("inference");
    q->set_pool("serving");
    q->set_nominal_milli(3000 + n);
    return Unary(*s.governance, &Gov::ImportOrganisation, r);
  };
  calls["GovernanceService.ListCoexistenceRules"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListCoexistenceRules, v1::ListCoexistenceRulesRequest());
  };
  calls["GovernanceService.SetCoexistenceRule"] = [](Stubs& s, int) {
    v1::SetCoexistenceRuleRequest r;
    r.mutable_rule()->set_class_a(v1::WORKLOAD_CLASS_TRAINING);
    r.mutable_rule()->set_class_b(v1::WORKLOAD_CLASS_TRAINING);
    r.mutable_rule()->set_gpu_isolation(v1::GPU_ISOLATION_MIG_ONLY);
    r.mutable_rule()->set_same_node(true);
    return Unary(*s.governance, &Gov::SetCoexistenceRule, r);
  };
  calls["GovernanceService.GrantRole"] = [](Stubs& s, int n) {
    v1::GrantRoleRequest r;
    *r.mutable_binding() = TeamMember(absl::StrCat("spiffe://arbiter.local/new", n), "inference");
    return Unary(*s.governance, &Gov::GrantRole, r);
  };
  calls["GovernanceService.RevokeRole"] = [](Stubs& s, int n) {
    v1::RevokeRoleRequest r;
    *r.mutable_binding() = TeamMember(absl::StrCat("spiffe://arbiter.local/gone", n), "inference");
    return Unary(*s.governance, &Gov::RevokeRole, r);
  };
  calls["GovernanceService.ListRoleBindings"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListRoleBindings, v1::ListRoleBindingsRequest());
  };
  calls["GovernanceService.WhoAmI"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::WhoAmI, v1::WhoAmIRequest());
  };
  calls["AllocationService.RequestCapacity"] = [](Stubs& s, int n) {
    v1::RequestCapacityRequest r;
    r.set_idempotency_key(absl::StrCat("k", n));
    r.set_team("inference");
    r.set_pool("serving");
    r.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    r.set_members(1);
    r.mutable_shape()->mutable_fraction()->set_gpu_milli(10);
    r.mutable_shape()->mutable_fraction()->set_memory_mib(100);
    return Unary(*s.allocation, &Alloc::RequestCapacity, r);
  };
  calls["AllocationService.ReleaseAllocation"] = [](Stubs& s, int) {
    v1::ReleaseAllocationRequest r;
    r.set_id(999'999);
    return Unary(*s.allocation, &Alloc::ReleaseAllocation, r);
  };
  calls["AllocationService.ClaimAllocation"] = [](Stubs& s, int) {
    v1::ClaimAllocationRequest r;
    r.set_id(999'999);
    r.set_holder("pod:matrix");
    return Unary(*s.allocation, &Alloc::ClaimAllocation, r);
  };
  calls["AllocationService.RenewLease"] = [](Stubs& s, int) {
    v1::RenewLeaseRequest r;
    r.set_id(999'999);
    r.set_holder("pod:matrix");
    return Unary(*s.allocation, &Alloc::RenewLease, r);
  };
  calls["AllocationService.GetRequest"] = [](Stubs& s, int) {
    v1::GetRequestRequest r;
    r.set_id(1);
    return Unary(*s.allocation, &Alloc::GetRequest, r);
  };
  calls["AllocationService.ListRequests"] = [](Stubs& s, int) {
    return Unary(*s.allocation, &Alloc::ListRequests, v1::ListRequestsRequest());
  };
  calls["AllocationService.ApproveRequest"] = [](Stubs& s, int) {
    v1::ApproveRequestRequest r;
    r.set_id(999'999);
    return Unary(*s.allocation, &Alloc::ApproveRequest, r);
  };
  calls["AllocationService.DenyRequest"] = [](Stubs& s, int) {
    v1::DenyRequestRequest r;
    r.set_id(999'999);
    r.set_reason("no");
    return Unary(*s.allocation, &Alloc::DenyRequest, r);
  };
  calls["GovernanceService.SetAuthorityRule"] = [](Stubs& s, int n) {
    v1::SetAuthorityRuleRequest r;
    r.mutable_rule()->set_pool("serving");
    r.mutable_rule()->set_action(v1::APPROVAL_ACTION_LARGE);
    r.mutable_rule()->set_approver(absl::StrCat("spiffe://arbiter.local/a", n));
    r.mutable_rule()->set_threshold_milli(1'000'000);
    return Unary(*s.governance, &Gov::SetAuthorityRule, r);
  };
  calls["GovernanceService.RemoveAuthorityRule"] = [](Stubs& s, int n) {
    v1::RemoveAuthorityRuleRequest r;
    r.mutable_rule()->set_pool("serving");
    r.mutable_rule()->set_action(v1::APPROVAL_ACTION_LARGE);
    r.mutable_rule()->set_approver(absl::StrCat("spiffe://arbiter.local/gone", n));
    return Unary(*s.governance, &Gov::RemoveAuthorityRule, r);
  };
  calls["GovernanceService.ListAuthorityRules"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListAuthorityRules, v1::ListAuthorityRulesRequest());
  };
  calls["GovernanceService.Delegate"] = [](Stubs& s, int n) {
    v1::DelegateRequest r;
    r.mutable_delegation()->set_from("spiffe://arbiter.local/admin");
    r.mutable_delegation()->set_to(absl::StrCat("spiffe://arbiter.local/d", n));
    r.mutable_delegation()->mutable_expires_at()->set_seconds(4'000'000'000);
    return Unary(*s.governance, &Gov::Delegate, r);
  };
  calls["GovernanceService.RevokeDelegation"] = [](Stubs& s, int n) {
    v1::RevokeDelegationRequest r;
    r.mutable_delegation()->set_from("spiffe://arbiter.local/admin");
    r.mutable_delegation()->set_to(absl::StrCat("spiffe://arbiter.local/none", n));
    return Unary(*s.governance, &Gov::RevokeDelegation, r);
  };
  calls["GovernanceService.ListDelegations"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListDelegations, v1::ListDelegationsRequest());
  };
  calls["GovernanceService.SetPrice"] = [](Stubs& s, int n) {
    v1::SetPriceRequest r;
    r.mutable_price()->set_gpu_model("L4");
    r.mutable_price()->set_latency_class(v1::LATENCY_CLASS_SERVING);
    r.mutable_price()->set_micros_per_gpu_hour(500'000);
    r.mutable_price()->mutable_effective_from()->set_seconds(1'000'000 + n);
    return Unary(*s.governance, &Gov::SetPrice, r);
  };
  calls["GovernanceService.ListPrices"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListPrices, v1::ListPricesRequest());
  };
  calls["GovernanceService.SetBudget"] = [](Stubs& s, int n) {
    v1::SetBudgetRequest r;
    r.mutable_budget()->set_team("inference");
    r.mutable_budget()->set_soft_limit_micros(n);
    r.mutable_budget()->set_hard_limit_micros(1'000'000'000);
    r.mutable_budget()->set_over(v1::OVER_BUDGET_DENY);
    return Unary(*s.governance, &Gov::SetBudget, r);
  };
  calls["GovernanceService.ListBudgets"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListBudgets, v1::ListBudgetsRequest());
  };
  calls["GovernanceService.SetPowerBudget"] = [](Stubs& s, int n) {
    v1::SetPowerBudgetRequest r;
    r.mutable_power_budget()->set_scope(v1::POWER_SCOPE_POOL);
    r.mutable_power_budget()->set_name("serving");
    r.mutable_power_budget()->set_watts(1'000'000 + n);
    return Unary(*s.governance, &Gov::SetPowerBudget, r);
  };
  calls["GovernanceService.ListPowerBudgets"] = [](Stubs& s, int) {
    return Unary(*s.governance, &Gov::ListPowerBudgets, v1::ListPowerBudgetsRequest());
  };
  calls["LedgerService.ListLedgerEntries"] = [](Stubs& s, int) {
    return Unary(*s.ledger, &v1::LedgerService::Stub::ListLedgerEntries,
                 v1::ListLedgerEntriesRequest());
  };
  calls["LedgerService.ListCheckpoints"] = [](Stubs& s, int) {
    return Unary(*s.ledger, &v1::LedgerService::Stub::ListCheckpoints,
                 v1::ListCheckpointsRequest());
  };
  calls["TelemetryService.StreamSamples"] = [](Stubs& s, int n) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StreamSamplesResponse resp;
    auto writer = s.telemetry->StreamSamples(&ctx, &resp);
    v1::SampleBatch batch;
    batch.set_interval_seconds(10);
    batch.mutable_sent_at()->set_seconds(1'800'000'000);
    v1::DeviceSample* sample = batch.add_samples();
    sample->mutable_at()->set_seconds(1'800'000'000);
    sample->set_uuid(absl::StrCat("GPU-unregistered-", n));
    sample->set_util_milli(500);
    writer->Write(batch);
    writer->WritesDone();
    return writer->Finish().error_code();
  };
  auto span = [](auto& r) {
    r.mutable_from()->set_seconds(1'800'000'000 - 7200);
    r.mutable_to()->set_seconds(1'800'000'000);
  };
  calls["TelemetryService.GetUtilization"] = [span](Stubs& s, int) {
    v1::GetUtilizationRequest r;
    span(r);
    return Unary(*s.telemetry, &v1::TelemetryService::Stub::GetUtilization, r);
  };
  calls["TelemetryService.ListIdleAllocations"] = [](Stubs& s, int) {
    return Unary(*s.telemetry, &v1::TelemetryService::Stub::ListIdleAllocations,
                 v1::ListIdleAllocationsRequest());
  };
  calls["TelemetryService.GetRightSizing"] = [span](Stubs& s, int) {
    v1::GetRightSizingRequest r;
    span(r);
    return Unary(*s.telemetry, &v1::TelemetryService::Stub::GetRightSizing, r);
  };
  calls["TelemetryService.SetIdlePolicy"] = [](Stubs& s, int) {
    v1::SetIdlePolicyRequest r;
    r.mutable_policy()->set_workload_class(v1::WORKLOAD_CLASS_EXPERIMENTATION);
    r.mutable_policy()->set_threshold_milli(50);
    r.mutable_policy()->set_window_seconds(3600);
    r.mutable_policy()->set_action("release");
    r.mutable_policy()->set_notice_seconds(600);
    return Unary(*s.telemetry, &v1::TelemetryService::Stub::SetIdlePolicy, r);
  };
  calls["TelemetryService.ListIdlePolicies"] = [](Stubs& s, int) {
    return Unary(*s.telemetry, &v1::TelemetryService::Stub::ListIdlePolicies,
                 v1::ListIdlePoliciesRequest());
  };
  using Cb = v1::ChargebackService::Stub;
  auto period = [](v1::Period* p) {
    p->mutable_from()->set_seconds(1'800'000'000 - 7200);
    p->mutable_to()->set_seconds(1'800'000'000);
  };
  calls["ChargebackService.SetSlo"] = [](Stubs& s, int n) {
    v1::SetSloRequest r;
    r.mutable_slo()->set_team("inference");
    r.mutable_slo()->set_service(absl::StrCat("svc", n));
    r.mutable_slo()->set_pool("serving");
    r.mutable_slo()->set_p99_target_us(100'000);
    r.mutable_slo()->set_window_seconds(300);
    return Unary(*s.chargeback, &Cb::SetSlo, r);
  };
  calls["ChargebackService.ListSlos"] = [](Stubs& s, int) {
    return Unary(*s.chargeback, &Cb::ListSlos, v1::ListSlosRequest());
  };
  calls["ChargebackService.ReportLatency"] = [](Stubs& s, int) {
    v1::ReportLatencyRequest r;
    r.mutable_window()->set_team("inference");
    r.mutable_window()->set_service("no-such-service");
    r.mutable_window()->mutable_start()->set_seconds(1'800'000'000 - 600);
    r.mutable_window()->mutable_end()->set_seconds(1'800'000'000 - 300);
    return Unary(*s.chargeback, &Cb::ReportLatency, r);
  };
  calls["ChargebackService.ListIncidents"] = [period](Stubs& s, int) {
    v1::ListIncidentsRequest r;
    period(r.mutable_period());
    return Unary(*s.chargeback, &Cb::ListIncidents, r);
  };
  calls["ChargebackService.GetChargeback"] = [period](Stubs& s, int) {
    v1::GetChargebackRequest r;
    period(r.mutable_period());
    r.set_team("inference");
    return Unary(*s.chargeback, &Cb::GetChargeback, r);
  };
  calls["ChargebackService.ClosePeriod"] = [period](Stubs& s, int) {
    v1::ClosePeriodRequest r;
    period(r.mutable_period());
    return Unary(*s.chargeback, &Cb::ClosePeriod, r);
  };
  calls["AllocationService.WatchAllocations"] = [](Stubs& s, int) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
    auto reader = s.allocation->WatchAllocations(&ctx, v1::WatchAllocationsRequest());
    v1::WatchAllocationsResponse event;
    while (reader->Read(&event)) {
    }
    return reader->Finish().error_code();
  };
  return calls;
}

TEST(AuthzTableTest, EveryRpcOfTheApiIsInTheAccessTable) {
  std::set<std::string> table;
  for (const std::string& m : app::Authorizer::Methods()) table.insert(m);
  std::set<std::string> api;
  const google::protobuf::DescriptorPool* pool = google::protobuf::DescriptorPool::generated_pool();
  for (const char* name : {"arbiter.v1.InventoryService", "arbiter.v1.GovernanceService",
                           "arbiter.v1.AllocationService", "arbiter.v1.LedgerService",
                           "arbiter.v1.TelemetryService", "arbiter.v1.ChargebackService"}) {
    const google::protobuf::ServiceDescriptor* service = pool->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      api.insert(absl::StrCat(service->name(), ".", service->method(i)->name()));
    }
  }
  EXPECT_EQ(table, api);
  std::set<std::string> called;
  for (const auto& [name, call] : Calls()) called.insert(name);
  EXPECT_EQ(called, api) << "the matrix below must call every RPC";
}

TEST_F(AuthzTest, EveryRpcAsEveryCallerGetsTheExpectedStatus) {
  Stubs admin = Connect("admin");
  testing::SeedSpec seed;
  ASSERT_THAT(testing::SeedOrganisation(*admin.inventory, *admin.governance, seed), IsOk());
  auto grant = [&](const std::string& subject, v1::Role role, v1::ScopeKind kind,
                   const std::string& scope) {
    v1::GrantRoleRequest r;
    r.mutable_binding()->set_subject(subject);
    r.mutable_binding()->set_role(role);
    r.mutable_binding()->set_scope_kind(kind);
    r.mutable_binding()->set_scope(scope);
    EXPECT_EQ(Unary(*admin.governance, &v1::GovernanceService::Stub::GrantRole, r), Code::OK);
  };
  grant("spiffe://arbiter.local/member", v1::ROLE_TEAM_MEMBER, v1::SCOPE_KIND_TEAM, "inference");
  grant("group:ml", v1::ROLE_TEAM_MEMBER, v1::SCOPE_KIND_TEAM, "inference");
  grant("spiffe://arbiter.local/auditor", v1::ROLE_AUDITOR, v1::SCOPE_KIND_ORG, "");
  grant("spiffe://arbiter.local/finance", v1::ROLE_FINANCE, v1::SCOPE_KIND_ORG, "");
  grant("spiffe://arbiter.local/authority", v1::ROLE_POOL_AUTHORITY, v1::SCOPE_KIND_POOL,
        "serving");
  grant("spiffe://arbiter.local/agent", v1::ROLE_AGENT, v1::SCOPE_KIND_ORG, "");

  const std::set<std::string> team_writes = {
      "AllocationService.RequestCapacity", "AllocationService.ReleaseAllocation",
      "AllocationService.ClaimAllocation", "AllocationService.RenewLease"};
  const std::set<std::string> enforcer = {
      "AllocationService.ClaimAllocation",   "AllocationService.RenewLease",
      "AllocationService.ReleaseAllocation", "AllocationService.GetRequest",
      "AllocationService.WatchAllocations",  "InventoryService.ListGpuModels",
      "InventoryService.RegisterNode",       "InventoryService.UpdateNode",
      "InventoryService.CordonNode",         "InventoryService.UncordonNode",
      "InventoryService.DrainNode",          "InventoryService.MarkNodeFailed",
      "InventoryService.NodeHeartbeat"};
  std::set<std::string> everything;
  for (const auto& [name, call] : Calls()) everything.insert(name);
  const std::vector<Identity> identities = {
      {"admin", Code::PERMISSION_DENIED, everything},
      {"member", Code::PERMISSION_DENIED,
       Plus(Plus(Plus(kReads, team_writes), kApprovals), {"ChargebackService.ReportLatency"})},
      {"grouped", Code::PERMISSION_DENIED,
       Plus(Plus(Plus(kReads, team_writes), kApprovals), {"ChargebackService.ReportLatency"})},
      {"auditor", Code::PERMISSION_DENIED,
       Plus(Plus(kReads, {"GovernanceService.ListRoleBindings", "LedgerService.ListLedgerEntries",
                          "LedgerService.ListCheckpoints", "GovernanceService.ListBudgets"}),
            kApprovals)},
      {"finance", Code::PERMISSION_DENIED,
       Plus(Plus(kReads, {"GovernanceService.SetPrice", "GovernanceService.SetBudget",
                          "GovernanceService.ListBudgets", "LedgerService.ListLedgerEntries",
                          "LedgerService.ListCheckpoints", "ChargebackService.ClosePeriod"}),
            kApprovals)},
      // A pool's authority reads no team's money (GetChargeback is per team).
      {"authority", Code::PERMISSION_DENIED,
       Plus(
           Plus(Minus(kReads, {"ChargebackService.GetChargeback"}), {"GovernanceService.SetQuota"}),
           kApprovals)},
      {"agent", Code::PERMISSION_DENIED,
       Plus(Plus({"TelemetryService.StreamSamples", "ChargebackService.ReportLatency"}, enforcer),
            kApprovals)},
      {"nobody", Code::PERMISSION_DENIED, kApprovals},
      {"", Code::UNAUTHENTICATED, {}},
      {"expired", Code::UNAVAILABLE, {}},
      {"selfsigned", Code::UNAVAILABLE, {}},
      {"wrongca", Code::UNAVAILABLE, {}},
  };
  int n = 0;
  for (const Identity& who : identities) {
    Stubs stubs = Connect(who.name);
    for (const auto& [method, call] : Calls()) {
      SCOPED_TRACE(absl::StrCat(who.name.empty() ? "no certificate" : who.name, " -> ", method));
      const std::string before = RowCounts();
      const Code code = call(stubs, ++n);
      if (who.allowed.contains(method)) {
        EXPECT_NE(code, Code::PERMISSION_DENIED);
        EXPECT_NE(code, Code::UNAUTHENTICATED);
        EXPECT_NE(code, Code::UNAVAILABLE);
      } else {
        EXPECT_EQ(code, who.refusal);
        EXPECT_EQ(RowCounts(), before) << "a refused call wrote something";
      }
    }
  }
  // Refusals by identity are recorded, with the principal (the ones the
  // handshake refused never reach arbiterd).
  auto recorded = db_->QueryValue(
      "SELECT count(*) FROM access_denials WHERE principal = 'spiffe://arbiter.local/nobody'");
  ASSERT_THAT(recorded, IsOk());
  EXPECT_EQ(*recorded, absl::StrCat(Calls().size() - kApprovals.size()));
}

// A team asks for more than its quota: the request waits in
// PENDING_APPROVAL naming the pool's authority; a team member's approval is
// refused (and recorded); the authority approves and the allocation is
// admitted; every step is in the ledger with its actor.
TEST_F(AuthzTest, BorrowingWaitsForThePoolAuthority) {
  Stubs admin = Connect("admin");
  ASSERT_THAT(testing::SeedOrganisation(*admin.inventory, *admin.governance, testing::SeedSpec()),
              IsOk());
  using Gov = v1::GovernanceService::Stub;
  using Alloc = v1::AllocationService::Stub;
  v1::CreateTeamRequest team;
  team.mutable_team()->set_name("sub");
  team.mutable_team()->set_parent("inference");
  ASSERT_EQ(Unary(*admin.governance, &Gov::CreateTeam, team), Code::OK);
  v1::SetQuotaRequest quota;
  quota.mutable_quota()->set_team("sub");
  quota.mutable_quota()->set_pool("serving");
  quota.mutable_quota()->set_nominal_milli(0);
  quota.mutable_quota()->set_borrowing_limit_milli(-1);
  ASSERT_EQ(Unary(*admin.governance, &Gov::SetQuota, quota), Code::OK);
  v1::SetAuthorityRuleRequest rule;
  rule.mutable_rule()->set_pool("serving");
  rule.mutable_rule()->set_action(v1::APPROVAL_ACTION_BORROW);
  rule.mutable_rule()->set_approver("spiffe://arbiter.local/authority");
  ASSERT_EQ(Unary(*admin.governance, &Gov::SetAuthorityRule, rule), Code::OK);
  v1::GrantRoleRequest grant;
  *grant.mutable_binding() = TeamMember("spiffe://arbiter.local/member", "inference");
  ASSERT_EQ(Unary(*admin.governance, &Gov::GrantRole, grant), Code::OK);

  Stubs member = Connect("member");
  v1::RequestCapacityRequest ask = OneGpu("borrow-1", "sub");
  ask.set_preemptible(true);
  v1::RequestCapacityResponse asked;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(member.allocation->RequestCapacity(&ctx, ask, &asked).ok());
  }
  const int64_t id = asked.request().id();
  EXPECT_EQ(asked.request().state(), v1::REQUEST_STATE_PENDING_APPROVAL);
  ASSERT_EQ(asked.request().approvers_size(), 1);
  EXPECT_EQ(asked.request().approvers(0), "spiffe://arbiter.local/authority");

  v1::ApproveRequestRequest approve;
  approve.set_id(id);
  EXPECT_EQ(Unary(*member.allocation, &Alloc::ApproveRequest, approve), Code::PERMISSION_DENIED);
  Stubs authority = Connect("authority");
  // A preview of the approval: what it would do, under the same rules, with
  // nothing written.
  v1::ApproveRequestRequest preview = approve;
  preview.set_validate_only(true);
  EXPECT_EQ(Unary(*member.allocation, &Alloc::ApproveRequest, preview), Code::PERMISSION_DENIED);
  const std::string before_preview = RowCounts();
  v1::ApproveRequestResponse previewed;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(authority.allocation->ApproveRequest(&ctx, preview, &previewed).ok());
  }
  EXPECT_TRUE(previewed.validated_only());
  EXPECT_EQ(previewed.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(previewed.would_preempt_size(), 0);
  EXPECT_EQ(RowCounts(), before_preview) << "a preview wrote";
  v1::ApproveRequestResponse approved;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(authority.allocation->ApproveRequest(&ctx, approve, &approved).ok());
  }
  EXPECT_FALSE(approved.validated_only());
  EXPECT_EQ(approved.request().state(), v1::REQUEST_STATE_ADMITTED);
  EXPECT_EQ(approved.request().placements_size(), previewed.request().placements_size());
  ASSERT_EQ(approved.request().approvals_size(), 1);
  EXPECT_EQ(approved.request().approvals(0), "borrow:spiffe://arbiter.local/authority");

  auto steps = db_->QueryValue(
      absl::StrCat("SELECT string_agg(action || ' by ' || actor, ', ' ORDER BY seq) FROM ledger"
                   " WHERE subject = 'request/",
                   id, "'"));
  ASSERT_THAT(steps, IsOk());
  EXPECT_EQ(*steps,
            "request.pending_approval by spiffe://arbiter.local/member, "
            "request.admitted by spiffe://arbiter.local/authority");
  auto rule_entry = db_->QueryValue(
      "SELECT actor FROM ledger WHERE action = 'authority.set' AND subject = "
      "'authority/serving/borrow'");
  ASSERT_THAT(rule_entry, IsOk());
  EXPECT_EQ(*rule_entry, "spiffe://arbiter.local/admin");
  // The refused approval is recorded too (asynchronously).
  std::string refusals;
  for (int i = 0; i < 50 && refusals != "1"; ++i) {
    refusals = db_->QueryValue(
                      "SELECT count(*) FROM access_denials WHERE method ="
                      " 'AllocationService.ApproveRequest' AND principal ="
                      " 'spiffe://arbiter.local/member'")
                   .value_or("");
    if (refusals != "1") std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(refusals, "1");
}

// A member of another team may not release an allocation: PERMISSION_DENIED,
// the allocation stays admitted and nothing is written. Its own team's
// member may, once; a second release is FAILED_PRECONDITION.
TEST_F(AuthzTest, ReleasingAnotherTeamsAllocationIsDenied) {
  using Gov = v1::GovernanceService::Stub;
  using Alloc = v1::AllocationService::Stub;
  Stubs admin = Connect("admin");
  ASSERT_THAT(testing::SeedOrganisation(*admin.inventory, *admin.governance, testing::SeedSpec()),
              IsOk());
  v1::CreateTeamRequest team;
  team.mutable_team()->set_name("research");
  EXPECT_EQ(Unary(*admin.governance, &Gov::CreateTeam, team), Code::OK);
  for (const auto& [subject, scope] : {std::pair{"spiffe://arbiter.local/member", "inference"},
                                       std::pair{"spiffe://arbiter.local/nobody", "research"}}) {
    v1::GrantRoleRequest grant;
    *grant.mutable_binding() = TeamMember(subject, scope);
    EXPECT_EQ(Unary(*admin.governance, &Gov::GrantRole, grant), Code::OK);
  }

  Stubs member = Connect("member");
  v1::RequestCapacityResponse granted;
  grpc::ClientContext ctx;
  ASSERT_TRUE(member.allocation->RequestCapacity(&ctx, OneGpu("mine", "inference"), &granted).ok());
  ASSERT_EQ(granted.request().state(), v1::REQUEST_STATE_ADMITTED);

  v1::ReleaseAllocationRequest release;
  release.set_id(granted.request().id());
  Stubs foreign = Connect("nobody");
  const std::string before = RowCounts();
  EXPECT_EQ(Unary(*foreign.allocation, &Alloc::ReleaseAllocation, release),
            Code::PERMISSION_DENIED);
  EXPECT_EQ(RowCounts(), before);
  // A run reported with the release changes what the team is charged: only
  // an enforcer (the agent role) reports one.
  v1::ReleaseAllocationRequest with_run = release;
  with_run.mutable_workload_started_at()->set_seconds(granted.request().admitted_at().seconds());
  with_run.mutable_workload_ended_at()->set_seconds(granted.request().admitted_at().seconds());
  EXPECT_EQ(Unary(*member.allocation, &Alloc::ReleaseAllocation, with_run),
            Code::PERMISSION_DENIED);
  EXPECT_EQ(RowCounts(), before);
  v1::GrantRoleRequest agent;
  agent.mutable_binding()->set_subject("spiffe://arbiter.local/agent");
  agent.mutable_binding()->set_role(v1::ROLE_AGENT);
  agent.mutable_binding()->set_scope_kind(v1::SCOPE_KIND_ORG);
  EXPECT_EQ(Unary(*admin.governance, &Gov::GrantRole, agent), Code::OK);
  Stubs enforcer = Connect("agent");
  EXPECT_EQ(Unary(*enforcer.allocation, &Alloc::ReleaseAllocation, with_run), Code::OK);
  EXPECT_EQ(Unary(*member.allocation, &Alloc::ReleaseAllocation, release),
            Code::FAILED_PRECONDITION);
}

TEST_F(AuthzTest, HealthAnswersWithoutACertificate) {
  Stubs anonymous = Connect("");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::Slice empty_message("", 0);
  grpc::ByteBuffer request(&empty_message, 1), response;
  // grpc.health.v1.Health/Check with an empty HealthCheckRequest.
  grpc::GenericStub generic(anonymous.channel);
  grpc::Status status;
  grpc::CompletionQueue cq;
  auto call = generic.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string body;
  for (const grpc::Slice& s : slices)
    body.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_EQ(body, std::string("\x08\x01", 2)) << "status SERVING";
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace arbiter::server
