// The fixture of the server tests: a real arbiterd (in process, plaintext on
// a loopback port, simulated clock) on a fresh database of the test
// PostgreSQL, with stubs for its services.
#pragma once

#include <memory>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "arbiter/v1/ledger.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {

class ServerTest : public ::testing::Test {
 public:
  void SetUp() override {
    auto db = ::arbiter::testing::TestDatabase::Create();
    ASSERT_THAT(db, ::arbiter::testing::IsOk());
    db_ = std::move(*db);
    Start();
  }

  void TearDown() override { server_.reset(); }

  // Stops the server and starts a fresh one on the same database, as after
  // a restart or failover; the stubs talk to the new one.
  void Restart() {
    server_.reset();
    Start();
  }

  void Start() {
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.insecure_loopback = true;
    options.dsn = db_->dsn();
    options.telemetry.rollup_every = absl::ZeroDuration();  // Tests roll up by hand,
    options.telemetry.settle = absl::ZeroDuration();        // to the time they name.
    auto server = ArbiterServer::Start(options, &clock_);
    ASSERT_THAT(server, ::arbiter::testing::IsOk());
    server_ = std::move(*server);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                       grpc::InsecureChannelCredentials());
    inventory_ = v1::InventoryService::NewStub(channel);
    governance_ = v1::GovernanceService::NewStub(channel);
    allocation_ = v1::AllocationService::NewStub(channel);
    ledger_ = v1::LedgerService::NewStub(channel);
  }

  void SeedOrganisation() {
    ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, testing::SeedSpec()),
                ::arbiter::testing::IsOk());
  }

  static v1::RequestCapacityRequest ValidRequest(const std::string& key) {
    v1::RequestCapacityRequest req;
    req.set_idempotency_key(key);
    req.set_team("inference");
    req.set_pool("serving");
    req.set_workload_class(v1::WORKLOAD_CLASS_INFERENCE);
    req.set_members(1);
    req.mutable_shape()->mutable_fraction()->set_gpu_milli(250);
    req.mutable_shape()->mutable_fraction()->set_memory_mib(4096);
    return req;
  }

  grpc::Status Request(const v1::RequestCapacityRequest& req, v1::RequestCapacityResponse* resp) {
    grpc::ClientContext ctx;
    return allocation_->RequestCapacity(&ctx, req, resp);
  }

  // Opens a watch that sees every event committed after this call, even if
  // the server subscribes the stream later: it lists first and watches from
  // the list's revision (a watch from revision 0 sees only what commits
  // after it is subscribed, which a test cannot observe). The stream ends
  // with DEADLINE_EXCEEDED after `deadline`, so a missed event fails the
  // test rather than blocking it. REQUIRES: something is committed (the
  // seed), as revision 0 means "from now".
  std::unique_ptr<grpc::ClientReader<v1::WatchAllocationsResponse>> WatchFromNow(
      grpc::ClientContext* ctx, v1::WatchAllocationsRequest watch,
      absl::Duration deadline = absl::Seconds(60)) {
    grpc::ClientContext list_ctx;
    v1::ListRequestsResponse page;
    grpc::Status listed = allocation_->ListRequests(&list_ctx, v1::ListRequestsRequest(), &page);
    EXPECT_TRUE(listed.ok()) << listed.error_message();
    EXPECT_GT(page.revision(), 0) << "nothing committed yet: seed first";
    watch.set_start_revision(page.revision());
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    return allocation_->WatchAllocations(ctx, watch);
  }

  // Registers node `name` in cluster east and `pool` with `gpus` GPUs of
  // `model`, 64 CPUs and 500 GiB.
  grpc::Status RegisterNode(const std::string& name, const std::string& pool, int gpus,
                            const std::string& model = "L4") {
    v1::RegisterNodeRequest node;
    node.mutable_node()->set_cluster("east");
    node.mutable_node()->set_name(name);
    node.mutable_node()->set_pool(pool);
    node.mutable_node()->set_cpu_milli(64'000);
    node.mutable_node()->set_memory_mib(512'000);
    for (int i = 0; i < gpus; ++i) {
      v1::Gpu* gpu = node.mutable_node()->add_gpus();
      gpu->set_index(i);
      gpu->set_model(model);
    }
    grpc::ClientContext ctx;
    v1::RegisterNodeResponse registered;
    return inventory_->RegisterNode(&ctx, node, &registered);
  }

  // Row counts of every table a call could write.
  std::string RowCounts() {
    auto counts = db_->QueryValue(
        "SELECT concat_ws(',', (SELECT count(*) FROM clusters), (SELECT count(*) FROM pools),"
        " (SELECT count(*) FROM nodes), (SELECT count(*) FROM gpus), (SELECT count(*) FROM teams),"
        " (SELECT count(*) FROM quotas), (SELECT sum(nominal_milli) FROM quotas),"
        " (SELECT count(*) FROM requests), (SELECT count(*) FROM placements),"
        " (SELECT count(*) FROM coexistence_rules),"
        " (SELECT string_agg(state, '') FROM requests))");
    EXPECT_THAT(counts, ::arbiter::testing::IsOk());
    return counts.value_or("");
  }

  testing::SimulatedClock clock_;
  std::unique_ptr<::arbiter::testing::TestDatabase> db_;
  std::unique_ptr<ArbiterServer> server_;
  std::unique_ptr<v1::InventoryService::Stub> inventory_;
  std::unique_ptr<v1::GovernanceService::Stub> governance_;
  std::unique_ptr<v1::AllocationService::Stub> allocation_;
  std::unique_ptr<v1::LedgerService::Stub> ledger_;
};

}  // namespace arbiter::server
