// The adversarial suite (tests/server/api_suite.h) on PostgreSQL: every
// generated case of every RPC through a real arbiterd on a fresh database,
// where "nothing changed" also means every table holds the same rows.
#include "gtest/gtest.h"

#include "server/server.h"
#include "tests/server/api_suite.h"
#include "tests/testing/pg_harness.h"
#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

// A digest of every row of every table, but the leader lease, which the
// election renews on its own, and access_denials, where a refusal of the
// caller's authority (PERMISSION_DENIED) is recorded for the auditors by
// design.
constexpr char kTablesDigest[] = R"sql(
SELECT string_agg(table_name || ':' || md5(query_to_xml(
         format('SELECT * FROM %I t ORDER BY t::text', table_name), false, false, '')::text),
       ',' ORDER BY table_name)
  FROM information_schema.tables
 WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
   AND table_name NOT IN ('leader_lease', 'access_denials')
)sql";

TEST(ApiSuitePgTest, EveryFieldOfEveryRpcIsRefusedPreciselyOrValid) {
  auto db = ::arbiter::testing::TestDatabase::Create();
  ASSERT_THAT(db, ::arbiter::testing::IsOk());
  testing::SimulatedClock clock;
  const std::string certs = MakeSuiteCertificates();
  ServerOptions options = SuiteServerOptions(certs);
  options.dsn = (*db)->dsn();
  auto server = ArbiterServer::Start(options, &clock);
  ASSERT_THAT(server, ::arbiter::testing::IsOk());
  ::arbiter::testing::TestDatabase* database = db->get();
  RunApiSuite({(*server)->port(), certs, &(*server)->app(), &clock, [database] {
                 absl::StatusOr<std::string> d = database->QueryValue(kTablesDigest);
                 return d.ok() ? *d : d.status().ToString();
               }});
}

}  // namespace
}  // namespace arbiter::server
