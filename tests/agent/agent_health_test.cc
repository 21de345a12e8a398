// The agent's health (clients/agent/agent_health.h): each series of
// /metrics, a source going down and up again, every reason /healthz gives
// (starting, a failed read, a stale source), on injected times; then the
// HTTP server on a loopback port, through cpp-httplib's client.
#include "clients/agent/agent_health.h"

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <httplib.h>

#include "tests/testing/simulated_clock.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::agent {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::SimulatedClock;
using ::arbiter::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr absl::Duration kInterval = absl::Seconds(10);
const absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);

const absl::Status kRefused = absl::UnavailableError(
    "query https://prom:9090/api/v1/query: Failed to connect to prom port 9090: Connection "
    "refused");

// The value of the series line that starts with `series` ("name{labels}"),
// or "absent".
std::string Value(const std::string& metrics, const std::string& series) {
  const std::string prefix = series + " ";
  size_t at = 0;
  while (at < metrics.size()) {
    const size_t end = metrics.find('\n', at);
    const std::string line = metrics.substr(at, end - at);
    if (line.rfind(prefix, 0) == 0) {
      return line.substr(prefix.size());
    }
    if (end == std::string::npos) {
      break;
    }
    at = end + 1;
  }
  return "absent";
}

TEST(AgentHealthTest, NamesEverySource) {
  EXPECT_EQ(AgentSourceName(AgentSource::kPrometheus), "prometheus");
  EXPECT_EQ(AgentSourceName(AgentSource::kDcgm), "dcgm");
  EXPECT_EQ(AgentSourceName(AgentSource::kNvml), "nvml");
  EXPECT_EQ(AgentSourceName(AgentSource::kNvidiaSmi), "nvidia-smi");
  EXPECT_EQ(AgentSourceName(AgentSource::kFile), "file");
}

TEST(AgentHealthTest, RendersEverySeriesWithHelpAndType) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  const std::string m = health.RenderMetrics();
  for (const char* family :
       {"arbiter_agent_source_up", "arbiter_agent_source_reads_total",
        "arbiter_agent_source_read_failures_total",
        "arbiter_agent_source_last_success_timestamp_seconds", "arbiter_agent_source_read_seconds",
        "arbiter_agent_source_read_seconds_max", "arbiter_agent_samples_sent_total",
        "arbiter_agent_send_failures_total"}) {
    EXPECT_THAT("\n" + m, HasSubstr(absl::StrCat("\n# HELP ", family, " "))) << family;
  }
  EXPECT_THAT(m, StartsWith("# HELP arbiter_agent_source_up "));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_up gauge\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_reads_total counter\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_read_failures_total counter\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_last_success_timestamp_seconds gauge\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_read_seconds gauge\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_source_read_seconds_max gauge\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_samples_sent_total counter\n"));
  EXPECT_THAT(m, HasSubstr("# TYPE arbiter_agent_send_failures_total counter\n"));
  EXPECT_EQ(m.back(), '\n');

  // Before the first read: down, nothing counted, never succeeded.
  EXPECT_EQ(Value(m, "arbiter_agent_source_up{source=\"prometheus\"}"), "0");
  EXPECT_EQ(Value(m, "arbiter_agent_source_reads_total{source=\"prometheus\"}"), "0");
  EXPECT_EQ(Value(m, "arbiter_agent_source_last_success_timestamp_seconds{source=\"prometheus\"}"),
            "0");
  EXPECT_EQ(Value(m, "arbiter_agent_source_read_seconds{source=\"prometheus\"}"), "0.000000");
  EXPECT_EQ(Value(m, "arbiter_agent_source_read_seconds_max{source=\"prometheus\"}"), "0.000000");
  EXPECT_THAT(m, Not(HasSubstr("arbiter_agent_source_read_failures_total{")));
  EXPECT_EQ(Value(m, "arbiter_agent_samples_sent_total"), "0");
  EXPECT_EQ(Value(m, "arbiter_agent_send_failures_total"), "0");
  // Sources not watched have no series.
  EXPECT_THAT(m, Not(HasSubstr("source=\"dcgm\"")));
  EXPECT_THAT(m, Not(HasSubstr("source=\"nvml\"")));
}

TEST(AgentHealthTest, CountsReadsFailuresByCodeAndDurations) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Milliseconds(250),
                    kStart + absl::Milliseconds(1500));
  health.RecordRead(AgentSource::kPrometheus, kRefused, absl::Milliseconds(3),
                    kStart + absl::Seconds(11));
  health.RecordRead(AgentSource::kPrometheus,
                    absl::DeadlineExceededError("query ...: no reply within 10s"),
                    absl::Seconds(10), kStart + absl::Seconds(31));
  health.RecordRead(AgentSource::kPrometheus, kRefused, absl::Milliseconds(2),
                    kStart + absl::Seconds(41));
  health.RecordSent(12);
  health.RecordSent(30);
  health.RecordSendFailure();
  const std::string m = health.RenderMetrics();
  EXPECT_EQ(Value(m, "arbiter_agent_source_up{source=\"prometheus\"}"), "0");
  EXPECT_EQ(Value(m, "arbiter_agent_source_reads_total{source=\"prometheus\"}"), "4");
  EXPECT_EQ(Value(m,
                  "arbiter_agent_source_read_failures_total{source=\"prometheus\","
                  "code=\"UNAVAILABLE\"}"),
            "2");
  EXPECT_EQ(Value(m,
                  "arbiter_agent_source_read_failures_total{source=\"prometheus\","
                  "code=\"DEADLINE_EXCEEDED\"}"),
            "1");
  EXPECT_EQ(Value(m, "arbiter_agent_source_last_success_timestamp_seconds{source=\"prometheus\"}"),
            "1800000001.500");
  // The last read's duration, and the longest: the slow one.
  EXPECT_EQ(Value(m, "arbiter_agent_source_read_seconds{source=\"prometheus\"}"), "0.002000");
  EXPECT_EQ(Value(m, "arbiter_agent_source_read_seconds_max{source=\"prometheus\"}"), "10.000000");
  EXPECT_EQ(Value(m, "arbiter_agent_samples_sent_total"), "42");
  EXPECT_EQ(Value(m, "arbiter_agent_send_failures_total"), "1");
}

TEST(AgentHealthTest, UpFollowsTheLastRead) {
  AgentHealth health;
  health.Watch(AgentSource::kDcgm, kInterval, kStart);
  const auto up = [&health] {
    return Value(health.RenderMetrics(), "arbiter_agent_source_up{source=\"dcgm\"}");
  };
  EXPECT_EQ(up(), "0");
  health.RecordRead(AgentSource::kDcgm, absl::OkStatus(), absl::Milliseconds(5), kStart);
  EXPECT_EQ(up(), "1");
  health.RecordRead(AgentSource::kDcgm, kRefused, absl::Milliseconds(5),
                    kStart + absl::Seconds(10));
  EXPECT_EQ(up(), "0");
  health.RecordRead(AgentSource::kDcgm, absl::OkStatus(), absl::Milliseconds(5),
                    kStart + absl::Seconds(20));
  EXPECT_EQ(up(), "1");
  EXPECT_EQ(Value(health.RenderMetrics(),
                  "arbiter_agent_source_read_failures_total{source="
                  "\"dcgm\",code=\"UNAVAILABLE\"}"),
            "1");
}

TEST(AgentHealthTest, HealthzIsStartingBeforeTheFirstRead) {
  AgentHealth health;
  EXPECT_EQ(health.Healthz(kStart).status, 503);  // Nothing watched yet.
  EXPECT_EQ(health.Healthz(kStart).body, "starting\n");
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  const HealthzReply reply = health.Healthz(kStart + absl::Seconds(29));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "starting\n");
}

TEST(AgentHealthTest, HealthzIsOkAfterASuccessfulRead) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Seconds(1), kStart);
  HealthzReply reply = health.Healthz(kStart + absl::Seconds(1));
  EXPECT_EQ(reply.status, 200);
  EXPECT_EQ(reply.body, "ok\n");
  // Three intervals old is still fresh.
  reply = health.Healthz(kStart + 3 * kInterval);
  EXPECT_EQ(reply.status, 200);
}

TEST(AgentHealthTest, HealthzNamesTheSourceCodeMessageAndAge) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Seconds(1), kStart);
  health.RecordRead(AgentSource::kPrometheus,
                    absl::UnavailableError("query https://prom:9090/api/v1/query: Failed\n"
                                           "to connect"),
                    absl::Milliseconds(3), kStart + absl::Seconds(30));
  const HealthzReply reply = health.Healthz(kStart + absl::Seconds(35));
  EXPECT_EQ(reply.status, 503);
  // One line, whatever the message held.
  EXPECT_EQ(reply.body,
            "prometheus: UNAVAILABLE: query https://prom:9090/api/v1/query: Failed to connect "
            "(no reading for 35s)\n");
}

TEST(AgentHealthTest, HealthzFailsWhenNoReadEverSucceeded) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus,
                    absl::DeadlineExceededError("query ...: no reply within 10s"),
                    absl::Seconds(10), kStart + absl::Seconds(10));
  const HealthzReply reply = health.Healthz(kStart + absl::Seconds(12));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body,
            "prometheus: DEADLINE_EXCEEDED: query ...: no reply within 10s "
            "(no reading since start, 12s ago)\n");
}

TEST(AgentHealthTest, HealthzFailsWhenTheLastSuccessIsStale) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Seconds(1), kStart);
  const HealthzReply reply = health.Healthz(kStart + 3 * kInterval + absl::Seconds(5));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "prometheus: no reading for 35s (more than 3 intervals of 10s)\n");
}

TEST(AgentHealthTest, HealthzFailsWhenTheFirstReadNeverEnds) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  const HealthzReply reply = health.Healthz(kStart + absl::Seconds(31));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "prometheus: no read since start, 31s ago\n");
}

TEST(AgentHealthTest, HealthzRecoversWhenTheSourceIsBack) {
  AgentHealth health;
  health.Watch(AgentSource::kPrometheus, kInterval, kStart);
  health.RecordRead(AgentSource::kPrometheus, kRefused, absl::Milliseconds(1), kStart);
  EXPECT_EQ(health.Healthz(kStart + absl::Seconds(1)).status, 503);
  health.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Seconds(1),
                    kStart + absl::Seconds(10));
  EXPECT_EQ(health.Healthz(kStart + absl::Seconds(11)).status, 200);
}

TEST(AgentHealthTest, HealthzWeighsEverySourceOnItsOwnInterval) {
  AgentHealth health;
  // Registration reads nvidia-smi every 5 minutes; telemetry every 10 s.
  health.Watch(AgentSource::kNvidiaSmi, absl::Minutes(5), kStart);
  health.Watch(AgentSource::kDcgm, kInterval, kStart);
  health.RecordRead(AgentSource::kNvidiaSmi, absl::OkStatus(), absl::Seconds(1), kStart);
  // One source read, the other not yet: still starting.
  EXPECT_EQ(health.Healthz(kStart + absl::Seconds(1)).body, "starting\n");
  health.RecordRead(AgentSource::kDcgm, absl::OkStatus(), absl::Seconds(1),
                    kStart + absl::Seconds(1));
  EXPECT_EQ(health.Healthz(kStart + absl::Seconds(2)).status, 200);
  // Two minutes on, nvidia-smi is fresh and dcgm stale.
  health.RecordRead(AgentSource::kNvidiaSmi, absl::OkStatus(), absl::Seconds(1),
                    kStart + absl::Minutes(1));
  const HealthzReply reply = health.Healthz(kStart + absl::Minutes(2));
  EXPECT_EQ(reply.status, 503);
  EXPECT_EQ(reply.body, "dcgm: no reading for 1m59s (more than 3 intervals of 10s)\n");
  // Both at fault: both named, on one line.
  health.RecordRead(AgentSource::kNvidiaSmi, absl::UnavailableError("`nvidia-smi -q -x` failed"),
                    absl::Seconds(1), kStart + absl::Minutes(2));
  EXPECT_EQ(health.Healthz(kStart + absl::Minutes(2)).body,
            "dcgm: no reading for 1m59s (more than 3 intervals of 10s); nvidia-smi: UNAVAILABLE: "
            "`nvidia-smi -q -x` failed (no reading for 1m)\n");
}

// The server on a free loopback port, its time from a simulated clock.
class AgentHealthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    health_.Watch(AgentSource::kPrometheus, kInterval, clock_.TimeNow());
    absl::StatusOr<std::unique_ptr<AgentHealthServer>> started =
        AgentHealthServer::Start("127.0.0.1:0", health_, [this] { return clock_.TimeNow(); });
    ASSERT_THAT(started.status(), IsOk());
    server_ = *std::move(started);
    ASSERT_GT(server_->port(), 0);
  }

  httplib::Result Get(const std::string& path) {
    httplib::Client client("127.0.0.1", server_->port());
    client.set_connection_timeout(10);
    client.set_read_timeout(10);
    return client.Get(path.c_str());
  }

  SimulatedClock clock_;
  AgentHealth health_;
  std::unique_ptr<AgentHealthServer> server_;
};

TEST_F(AgentHealthServerTest, ServesMetricsAndHealthOverHttp) {
  httplib::Result r = Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "starting\n");

  health_.RecordRead(AgentSource::kPrometheus, kRefused, absl::Milliseconds(3), clock_.TimeNow());
  clock_.Advance(absl::Seconds(7));
  r = Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, AllOf(StartsWith("prometheus: UNAVAILABLE: query https://prom:9090/"),
                             HasSubstr("(no reading since start, 7s ago)\n")));
  r = Get("/metrics");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), StartsWith("text/plain; version=0.0.4"));
  EXPECT_EQ(Value(r->body, "arbiter_agent_source_up{source=\"prometheus\"}"), "0");
  EXPECT_EQ(Value(r->body,
                  "arbiter_agent_source_read_failures_total{source=\"prometheus\","
                  "code=\"UNAVAILABLE\"}"),
            "1");

  health_.RecordRead(AgentSource::kPrometheus, absl::OkStatus(), absl::Seconds(1),
                     clock_.TimeNow());
  r = Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
  r = Get("/metrics");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(Value(r->body, "arbiter_agent_source_up{source=\"prometheus\"}"), "1");

  // Stale, on the simulated clock: no sleeping.
  clock_.Advance(absl::Seconds(31));
  r = Get("/healthz");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "prometheus: no reading for 31s (more than 3 intervals of 10s)\n");
}

TEST_F(AgentHealthServerTest, AnswersNotFoundForAnythingElse) {
  httplib::Result r = Get("/");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 404);
  r = Get("/metrics/extra");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 404);
  httplib::Client client("127.0.0.1", server_->port());
  r = client.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 404);
}

TEST(AgentHealthServerStartTest, RefusesABadAddress) {
  AgentHealth health;
  const auto now = [] { return absl::UnixEpoch(); };
  EXPECT_THAT(AgentHealthServer::Start("127.0.0.1", health, now),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want host:port")));
  EXPECT_THAT(AgentHealthServer::Start("127.0.0.1:70000", health, now),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("want host:port")));
}

TEST(AgentHealthServerStartTest, RefusesAPortInUse) {
  AgentHealth health;
  const auto now = [] { return absl::UnixEpoch(); };
  absl::StatusOr<std::unique_ptr<AgentHealthServer>> first =
      AgentHealthServer::Start("127.0.0.1:0", health, now);
  ASSERT_THAT(first.status(), IsOk());
  EXPECT_THAT(AgentHealthServer::Start(absl::StrCat("127.0.0.1:", (*first)->port()), health, now),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot listen")));
}

}  // namespace
}  // namespace arbiter::agent
