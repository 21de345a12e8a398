// The adversarial suite (tests/server/api_suite.h) on the in-memory store,
// which passes the same contract suite as PostgreSQL: every generated case
// of every RPC through a real gRPC server, without a database.
#include "gtest/gtest.h"

#include "server/server.h"
#include "store/memory/memory_store.h"
#include "tests/server/api_suite.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

TEST(ApiSuiteMemoryTest, EveryFieldOfEveryRpcIsRefusedPreciselyOrValid) {
  store::MemoryStore store;
  testing::SimulatedClock clock;
  const std::string certs = MakeSuiteCertificates();
  ServerOptions options = SuiteServerOptions(certs);
  options.store = &store;
  auto server = ArbiterServer::Start(options, &clock);
  ASSERT_THAT(server, ::arbiter::testing::IsOk());
  app::Application& app = (*server)->app();
  RunApiSuite({(*server)->port(), certs, &app, &clock,
               [&store, &app] { return StoreReadsDigest(store, app.nodes()); }});
}

}  // namespace
}  // namespace arbiter::server
