// arbiterd is SIGKILLed during a burst of requests and releases from several
// clients, then restarted on the same database. Every acknowledged decision
// must still be there, nothing may be allocated twice, and retrying the calls
// whose outcome was unknown (same idempotency key, same body) must converge
// to exactly one request per key.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/arbiterd_process.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/status_matchers.h"

namespace arbiter {
namespace {

using ::arbiter::testing::ArbiterdProcess;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::TestDatabase;
namespace v1 = ::arbiter::v1;

constexpr int kClients = 8;
constexpr int kNodes = 4;
constexpr int kGpusPerNode = 8;

struct Stubs {
  explicit Stubs(const std::string& address) {
    grpc::ChannelArguments args;
    args.SetInt("grpc.initial_reconnect_backoff_ms", 100);
    auto channel = grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    inventory = v1::InventoryService::NewStub(channel);
    governance = v1::GovernanceService::NewStub(channel);
    allocation = v1::AllocationService::NewStub(channel);
  }
  std::unique_ptr<v1::InventoryService::Stub> inventory;
  std::unique_ptr<v1::GovernanceService::Stub> governance;
  std::unique_ptr<v1::AllocationService::Stub> allocation;
};

void Deadline(grpc::ClientContext& ctx) {
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
}

void Seed(Stubs& s) {
  ::arbiter::testing::SeedSpec spec;
  spec.pool = "batch";
  spec.latency_class = v1::LATENCY_CLASS_BATCH;
  spec.nodes = kNodes;
  spec.gpus_per_node = kGpusPerNode;
  spec.model = "A100-80GB";
  spec.node_cpu_milli = 1'000'000;
  spec.node_memory_mib = 4'000'000;
  spec.team = "training";
  spec.nominal_milli = kNodes * kGpusPerNode * 1000;
  ASSERT_THAT(::arbiter::testing::SeedOrganisation(*s.inventory, *s.governance, spec), IsOk());
}

v1::RequestCapacityRequest Body(int client, int i) {
  v1::RequestCapacityRequest req;
  req.set_idempotency_key(absl::StrCat("c", client, "-", i));
  req.set_team("training");
  req.set_pool("batch");
  req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  req.set_members(1 + (i % 2));
  if ((client + i) % 3 == 0) {
    req.mutable_shape()->set_whole_gpus(1 + i % 2);
  } else {
    req.mutable_shape()->mutable_fraction()->set_gpu_milli(100 + 50 * (i % 7));
    req.mutable_shape()->mutable_fraction()->set_memory_mib(2048 + 1024 * (i % 5));
  }
  return req;
}

// What the clients learnt before and after the kill.
struct History {
  std::mutex mu;
  std::map<std::string, v1::CapacityRequest> acked;           // key -> decision as answered
  std::map<int64_t, bool> acked_release;                      // request id -> release acknowledged
  std::map<std::string, v1::RequestCapacityRequest> unknown;  // key -> body, outcome unknown
};

void Client(const std::string& address, int client, std::atomic<bool>& stop, History& h) {
  Stubs s(address);
  for (int i = 0; !stop.load(); ++i) {
    v1::RequestCapacityRequest body = Body(client, i);
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::RequestCapacityResponse resp;
    grpc::Status status = s.allocation->RequestCapacity(&ctx, body, &resp);
    std::lock_guard<std::mutex> lock(h.mu);
    if (!status.ok()) {
      h.unknown[body.idempotency_key()] = body;
      return;  // The server is gone; stop this client.
    }
    h.acked[body.idempotency_key()] = resp.request();
    // Release every third admitted request.
    if (resp.request().state() == v1::REQUEST_STATE_ADMITTED && i % 3 == 0) {
      grpc::ClientContext rctx;
      Deadline(rctx);
      v1::ReleaseAllocationRequest release;
      release.set_id(resp.request().id());
      v1::ReleaseAllocationResponse out;
      if (s.allocation->ReleaseAllocation(&rctx, release, &out).ok()) {
        h.acked_release[resp.request().id()] = true;
      }
    }
  }
}

TEST(SigkillTest, AcknowledgedDecisionsSurviveAndNothingIsAllocatedTwice) {
  auto db = TestDatabase::Create();
  ASSERT_THAT(db, IsOk());
  auto proc = ArbiterdProcess::Start((*db)->dsn());
  ASSERT_THAT(proc, IsOk());
  {
    Stubs seed((*proc)->address());
    Seed(seed);
  }

  History history;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back(Client, (*proc)->address(), c, std::ref(stop), std::ref(history));
  }
  // Kill once enough decisions were acknowledged, mid-burst.
  for (int i = 0; i < 600; ++i) {
    {
      std::lock_guard<std::mutex> lock(history.mu);
      if (history.acked.size() >= 300) break;
    }
    absl::SleepFor(absl::Milliseconds(50));
  }
  (*proc)->Kill();
  stop = true;
  for (auto& t : clients) t.join();
  std::cout << "acknowledged " << history.acked.size() << " decisions and "
            << history.acked_release.size() << " releases; " << history.unknown.size()
            << " calls had an unknown outcome at the kill\n";
  ASSERT_GE(history.acked.size(), 300u);

  auto restarted = ArbiterdProcess::Start((*db)->dsn());
  ASSERT_THAT(restarted, IsOk());
  Stubs s((*restarted)->address());

  // 1. Every acknowledged decision is there, as answered.
  for (const auto& [key, answered] : history.acked) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::GetRequestRequest get;
    get.set_id(answered.id());
    v1::GetRequestResponse got;
    ASSERT_TRUE(s.allocation->GetRequest(&ctx, get, &got).ok()) << key;
    EXPECT_EQ(got.request().idempotency_key(), key);
    v1::RequestState expected = answered.state();
    if (history.acked_release.count(answered.id())) expected = v1::REQUEST_STATE_RELEASED;
    if (answered.state() == v1::REQUEST_STATE_QUEUED) {
      // A queued request may have been admitted since; it may not vanish.
      EXPECT_NE(got.request().state(), v1::REQUEST_STATE_UNSPECIFIED);
    } else if (expected == v1::REQUEST_STATE_ADMITTED) {
      // Admitted and not released by an acknowledged call: released only if
      // its release was the unknown one.
      EXPECT_TRUE(got.request().state() == v1::REQUEST_STATE_ADMITTED ||
                  got.request().state() == v1::REQUEST_STATE_RELEASED)
          << key;
    } else {
      EXPECT_EQ(got.request().state(), expected) << key;
    }
    if (answered.state() == v1::REQUEST_STATE_ADMITTED) {
      ASSERT_EQ(got.request().placements_size(), answered.placements_size());
      for (int m = 0; m < answered.placements_size(); ++m) {
        EXPECT_EQ(got.request().placements(m).SerializeAsString(),
                  answered.placements(m).SerializeAsString());
      }
    }
  }

  // 2. Retrying each unknown call with its key and body converges.
  for (const auto& [key, body] : history.unknown) {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::RequestCapacityResponse resp;
    ASSERT_TRUE(s.allocation->RequestCapacity(&ctx, body, &resp).ok()) << key;
    grpc::ClientContext again_ctx;
    Deadline(again_ctx);
    v1::RequestCapacityResponse again;
    ASSERT_TRUE(s.allocation->RequestCapacity(&again_ctx, body, &again).ok()) << key;
    EXPECT_TRUE(again.replayed());
    EXPECT_EQ(again.request().id(), resp.request().id());
  }
  auto requests = db.value()->QueryValue(
      "SELECT count(*) = count(DISTINCT idempotency_key) "
      "FROM requests");
  EXPECT_THAT(requests, ::arbiter::testing::IsOkAndHolds(std::string("t")));

  // 3. No GPU is allocated twice: recompute from the admitted requests.
  std::map<std::pair<std::string, int>, int64_t> milli;
  std::map<std::pair<std::string, int>, int> whole;
  std::string token;
  do {
    grpc::ClientContext ctx;
    Deadline(ctx);
    v1::ListRequestsRequest list;
    list.set_state(v1::REQUEST_STATE_ADMITTED);
    list.set_page_size(500);
    list.set_page_token(token);
    v1::ListRequestsResponse page;
    ASSERT_TRUE(s.allocation->ListRequests(&ctx, list, &page).ok());
    for (const auto& r : page.requests()) {
      for (const auto& p : r.placements()) {
        for (int g : p.gpu_indices()) {
          milli[{p.node(), g}] += p.gpu_milli();
          if (r.shape().has_whole_gpus()) whole[{p.node(), g}]++;
        }
      }
    }
    token = page.next_page_token();
  } while (!token.empty());
  for (const auto& [gpu, m] : milli) {
    EXPECT_LE(m, 1000) << gpu.first << "/" << gpu.second;
    if (whole[gpu] > 0) {
      EXPECT_EQ(m, 1000) << "whole GPU shared: " << gpu.first;
    }
  }
  grpc::ClientContext nodes_ctx;
  Deadline(nodes_ctx);
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(s.inventory->ListNodes(&nodes_ctx, v1::ListNodesRequest(), &nodes).ok());
  for (const auto& n : nodes.nodes()) {
    for (const auto& g : n.gpus()) {
      EXPECT_EQ(g.allocated_milli(), (milli[{n.name(), g.index()}])) << n.name();
    }
  }
  EXPECT_EQ((*restarted)->Stop(), 0);
}

}  // namespace
}  // namespace arbiter
