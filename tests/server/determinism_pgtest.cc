// Determinism: one seeded trace of requests and releases, run twice, each
// time on a fresh database and a fresh in-process arbiterd with a simulated
// clock, gives the same decisions (ids, states, placements) and the same
// ledger, hash for hash. A different seed gives a different ledger, so the
// comparison is not vacuous. (Part of the fault scenarios: docs/operations.md,
// "Fault tests".)
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "arbiter/v1/allocation.grpc.pb.h"
#include "arbiter/v1/governance.grpc.pb.h"
#include "arbiter/v1/inventory.grpc.pb.h"
#include "server/server.h"
#include "tests/testing/api_seed.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;

struct TraceOutcome {
  std::vector<std::string> decisions;  // One line per operation.
  std::string ledger_head;             // "seq hash" of the last entry.
};

v1::RequestCapacityRequest RandomRequest(std::mt19937_64& rng, int i) {
  v1::RequestCapacityRequest req;
  req.set_idempotency_key(absl::StrCat("trace-", i));
  req.set_team("inference");
  req.set_pool("batch");
  req.set_workload_class(v1::WORKLOAD_CLASS_TRAINING);
  req.set_members(1 + static_cast<int>(rng() % 2));
  switch (rng() % 3) {
    case 0:
      req.mutable_shape()->set_whole_gpus(1 + static_cast<int>(rng() % 2));
      break;
    case 1:
      req.mutable_shape()->set_mig_profile(rng() % 2 ? "1g.10gb" : "3g.40gb");
      break;
    default:
      req.mutable_shape()->mutable_fraction()->set_gpu_milli(rng() % 2 ? 250 : 500);
      req.mutable_shape()->mutable_fraction()->set_memory_mib(8192);
  }
  const bool high = rng() % 4 == 0;
  req.set_priority(high ? 100 : 0);
  req.set_preemptible(!high);
  req.set_checkpoint_seconds(30);
  return req;
}

std::string Decision(const v1::CapacityRequest& r) {
  std::vector<std::string> where;
  for (const v1::Placement& p : r.placements()) {
    where.push_back(
        absl::StrCat(p.node(), ":", absl::StrJoin(p.gpu_indices(), "+"), "@", p.mig_profile()));
  }
  return absl::StrCat(r.id(), " ", v1::RequestState_Name(r.state()), " ",
                      absl::StrJoin(where, ","));
}

TraceOutcome RunTrace(uint64_t seed, int operations) {
  TraceOutcome out;
  auto db = ::arbiter::testing::TestDatabase::Create();
  EXPECT_THAT(db, IsOk());
  if (!db.ok()) return out;
  testing::SimulatedClock clock;
  ServerOptions options;
  options.listen_address = "127.0.0.1:0";
  options.insecure_loopback = true;
  options.dsn = (*db)->dsn();
  options.telemetry.rollup_every = absl::ZeroDuration();
  auto server = ArbiterServer::Start(options, &clock);
  EXPECT_THAT(server, IsOk());
  if (!server.ok()) return out;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string((*server)->port()),
                                     grpc::InsecureChannelCredentials());
  auto inventory = v1::InventoryService::NewStub(channel);
  auto governance = v1::GovernanceService::NewStub(channel);
  auto allocation = v1::AllocationService::NewStub(channel);
  testing::SeedSpec spec;
  spec.pool = "batch";
  spec.latency_class = v1::LATENCY_CLASS_BATCH;
  spec.nodes = 2;
  spec.model = "H100-80GB";
  spec.nominal_milli = 6000;
  EXPECT_THAT(testing::SeedOrganisation(*inventory, *governance, spec), IsOk());

  std::mt19937_64 rng(seed);
  std::vector<int64_t> held;
  for (int i = 0; i < operations; ++i) {
    // Time passes, sometimes past the preemption notices' deadlines.
    clock.Advance(rng() % 10 == 0 ? absl::Seconds(40) : absl::Seconds(1));
    grpc::ClientContext ctx;
    if (!held.empty() && rng() % 100 < 40) {
      const size_t at = rng() % held.size();
      v1::ReleaseAllocationRequest release;
      release.set_id(held[at]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(at));
      v1::ReleaseAllocationResponse resp;
      const grpc::Status s = allocation->ReleaseAllocation(&ctx, release, &resp);
      out.decisions.push_back(absl::StrCat("release ", release.id(), ": ", s.error_code(), " ",
                                           s.ok() ? Decision(resp.request()) : ""));
      continue;
    }
    v1::RequestCapacityResponse resp;
    const grpc::Status s = allocation->RequestCapacity(&ctx, RandomRequest(rng, i), &resp);
    out.decisions.push_back(absl::StrCat("request ", i, ": ", s.error_code(), " ",
                                         s.ok() ? Decision(resp.request()) : s.error_message()));
    if (s.ok()) held.push_back(resp.request().id());
  }
  server->reset();
  auto head = (*db)->QueryValue("SELECT seq || ' ' || hash FROM ledger ORDER BY seq DESC LIMIT 1");
  EXPECT_THAT(head, IsOk());
  out.ledger_head = head.value_or("");
  return out;
}

TEST(DeterminismTest, TheSameSeededTraceGivesTheSameDecisionsAndLedger) {
  constexpr int kOperations = 300;
  const TraceOutcome first = RunTrace(42, kOperations);
  const TraceOutcome second = RunTrace(42, kOperations);
  ASSERT_EQ(first.decisions.size(), static_cast<size_t>(kOperations));
  EXPECT_EQ(first.decisions, second.decisions);
  EXPECT_EQ(first.ledger_head, second.ledger_head);
  EXPECT_FALSE(first.ledger_head.empty());
  // Sanity: the trace decides more than one way (admits, queues, preempts).
  const std::string all = absl::StrJoin(first.decisions, "\n");
  EXPECT_NE(all.find("REQUEST_STATE_ADMITTED"), std::string::npos);
  EXPECT_NE(all.find("REQUEST_STATE_QUEUED"), std::string::npos);

  const TraceOutcome other = RunTrace(43, kOperations);
  EXPECT_NE(other.ledger_head, first.ledger_head);
}

}  // namespace
}  // namespace arbiter::server
