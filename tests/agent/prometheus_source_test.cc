// The Prometheus source (clients/agent/prometheus_source.h) on replies that a
// real Prometheus (Debian's 2.42) gave while scraping the recorded
// dcgm-exporter outputs (tests/agent/fixtures/prometheus/SOURCES.md): each
// maps to exactly the readings the exporter's own text gives; then the
// query, the URL, the label overrides, and every status of `Read` against a
// local HTTP server (cpp-httplib) standing in for Prometheus.
#include "clients/agent/prometheus_source.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include "clients/agent/dcgm_text.h"
#include "tests/testing/loopback_socket.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::agent {
namespace {

using ::arbiter::testing::BoundSocket;
using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

constexpr char kQueryOfDocs[] =
    "{__name__=~\"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_FB_USED|"
    "DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_POWER_USAGE\",job=\"docs\"}";

std::string Read(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string Json(const std::string& name) {
  return Read(absl::StrCat(ARBITER_PROMETHEUS_FIXTURES, "/", name));
}

std::string Prom(const std::string& name) {
  return Read(absl::StrCat(ARBITER_DCGM_FIXTURES, "/", name));
}

// Every field of a reading, to compare the two paths whole.
auto FieldsOf(const DeviceReading& d) {
  return std::make_tuple(d.uuid, d.gpu_index, d.mig_instance, d.mig_profile, d.hostname,
                         d.model_name, d.pod, d.pod_namespace, d.util_milli, d.engine_active_milli,
                         d.fb_used_mib, d.fb_free_mib, d.power_mw);
}

using Fields = decltype(FieldsOf(DeviceReading()));

std::vector<Fields> Sorted(const std::vector<DeviceReading>& devices) {
  std::vector<Fields> out;
  for (const DeviceReading& d : devices) out.push_back(FieldsOf(d));
  std::sort(out.begin(), out.end());
  return out;
}

PrometheusReading Parse(const std::string& body, const PrometheusLabels& labels = {},
                        bool require_uuid = true) {
  absl::StatusOr<PrometheusReading> r = ParseQueryReply(body, labels, require_uuid);
  EXPECT_THAT(r.status(), IsOk());
  return r.ok() ? *std::move(r) : PrometheusReading();
}

// Each recorded reply against the exporter text Prometheus scraped.
struct Pair {
  const char* json;
  const char* prom;
  size_t devices;
  int64_t series;
};

class PrometheusParityTest : public ::testing::TestWithParam<Pair> {};

TEST_P(PrometheusParityTest, GivesTheReadingsOfTheExporterText) {
  const Pair& p = GetParam();
  const PrometheusReading r = Parse(Json(p.json));
  const Scrape s = ParseDcgmScrape(Prom(p.prom));
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_EQ(r.series, p.series);
  EXPECT_EQ(r.devices.size(), p.devices);
  EXPECT_EQ(Sorted(r.devices), Sorted(s.devices));
  // Ordered by (UUID, gpu, GPU_I_ID), whatever Prometheus' order.
  EXPECT_TRUE(std::is_sorted(r.devices.begin(), r.devices.end(), [](const auto& a, const auto& b) {
    return std::tie(a.uuid, a.gpu_index, a.mig_instance) <
           std::tie(b.uuid, b.gpu_index, b.mig_instance);
  }));
}

INSTANTIATE_TEST_SUITE_P(
    RecordedReplies, PrometheusParityTest,
    ::testing::Values(
        // A whole A100 and one of its MIG instances (NVIDIA's docs).
        Pair{"query-docs.json", "mig-a100-whole-gpu-plus-1g.5gb.nvidia-cloud-native-docs.prom", 2,
             5},
        // Two A30s in 1g.6gb instances.
        Pair{"query-a30.json", "mig-2x-a30-4x1g.6gb.dcgm-exporter-issue317.prom", 6, 17},
        // A whole RTX 2000 Ada beside an A30 instance with pod labels.
        Pair{"query-mixed.json", "mixed-a30mig-rtx2000ada-pods.dcgm-exporter-pr736.prom", 2, 2},
        // Three whole L40S, two with pods.
        Pair{"query-l40s.json", "pods-3x-l40s.dcgm-issue226.prom", 3, 3}));

TEST(PrometheusSourceTest, ConvertsUnitsAsTheExporterPathDoes) {
  const PrometheusReading r = Parse(Json("query-docs.json"));
  ASSERT_EQ(r.devices.size(), 2u);
  const DeviceReading& gpu = r.devices[0];
  EXPECT_EQ(gpu.mig_instance, -1);
  EXPECT_EQ(gpu.uuid, "GPU-34319582-d595-d1c7-d1d2-179bcfa61660");
  EXPECT_EQ(gpu.engine_active_milli, 996);  // "0.99563"
  EXPECT_EQ(gpu.power_mw, 409'692);         // "409.692" W
  EXPECT_EQ(gpu.fb_used_mib, 4845);
  EXPECT_EQ(gpu.hostname, "ub20-a100-k8s");
  const DeviceReading& mig = r.devices[1];
  EXPECT_EQ(mig.mig_instance, 13);
  EXPECT_EQ(mig.mig_profile, "1g.5gb");
  EXPECT_EQ(mig.uuid, gpu.uuid);
}

TEST(PrometheusSourceTest, ReadsPodLabelsAndLowerCaseHostname) {
  const PrometheusReading r = Parse(Json("query-mixed.json"));
  ASSERT_EQ(r.devices.size(), 2u);
  const auto a30 = std::find_if(r.devices.begin(), r.devices.end(),
                                [](const DeviceReading& d) { return d.mig_instance == 3; });
  ASSERT_NE(a30, r.devices.end());
  EXPECT_EQ(a30->pod, "triton-server-f7cb5d77-95xcf");
  EXPECT_EQ(a30->pod_namespace, "default");
  EXPECT_EQ(a30->hostname, "dcgm-exporter-wwwjh");
}

TEST(PrometheusSourceTest, RelabelledSeriesNeedTheirLabelNames) {
  // The docs sample with UUID renamed gpu_uuid and GPU_I_ID mig_id by
  // Prometheus' metric_relabel_configs.
  const std::string body = Json("query-relabelled.json");
  const PrometheusReading plain = Parse(body);
  EXPECT_THAT(plain.devices, IsEmpty());
  EXPECT_EQ(plain.skipped_series, 5);
  EXPECT_THAT(plain.problems[0], HasSubstr("no UUID label 'UUID'"));

  PrometheusLabels labels;
  ASSERT_THAT(SetLabelOverride("uuid=gpu_uuid", labels), IsOk());
  ASSERT_THAT(SetLabelOverride("GPU_I_ID=mig_id", labels), IsOk());
  const PrometheusReading relabelled = Parse(body, labels);
  EXPECT_THAT(relabelled.problems, IsEmpty());
  EXPECT_EQ(
      Sorted(relabelled.devices),
      Sorted(ParseDcgmScrape(Prom("mig-a100-whole-gpu-plus-1g.5gb.nvidia-cloud-native-docs.prom"))
                 .devices));
}

TEST(PrometheusSourceTest, SeriesWithoutUuidAreKeptForOneNode) {
  // Without GPU_I_ID the instance's engine activity reads as the GPU's own:
  // a duplicate, the first (by label set) kept.
  const PrometheusReading r = Parse(Json("query-relabelled.json"), {}, /*require_uuid=*/false);
  ASSERT_EQ(r.devices.size(), 1u);
  EXPECT_EQ(r.devices[0].uuid, "");
  EXPECT_EQ(r.devices[0].gpu_index, 0);
  EXPECT_EQ(r.duplicate_series, 1);
  EXPECT_EQ(r.devices[0].fb_used_mib, 4845);
}

TEST(PrometheusSourceTest, KeepsTheFirstOfTwoJobsScrapingOneExporter) {
  const PrometheusReading r = Parse(Json("query-two-jobs.json"));
  EXPECT_EQ(r.series, 10);
  EXPECT_EQ(r.duplicate_series, 5);
  EXPECT_THAT(r.problems[0], AllOf(HasSubstr("job=\"docs2\""), HasSubstr("again (first kept)")));
  EXPECT_EQ(Sorted(r.devices), Sorted(Parse(Json("query-docs.json")).devices));
}

TEST(PrometheusSourceTest, NoMatchIsZeroDevices) {
  const PrometheusReading r = Parse(Json("query-no-match.json"));
  EXPECT_EQ(r.series, 0);
  EXPECT_THAT(r.devices, IsEmpty());
  EXPECT_THAT(r.problems, IsEmpty());
}

TEST(PrometheusSourceTest, SkipsAndCountsNanBlankAndOutOfRangeValues) {
  nlohmann::json doc = nlohmann::json::parse(Json("query-docs.json"));
  for (nlohmann::json& s : doc["data"]["result"]) {
    const std::string name = s["metric"]["__name__"];
    const bool mig = s["metric"].contains("GPU_I_ID");
    if (name == "DCGM_FI_DEV_POWER_USAGE") s["value"][1] = "NaN";
    if (name == "DCGM_FI_DEV_FB_USED") s["value"][1] = "+Inf";
    if (name == "DCGM_FI_DEV_FB_FREE") s["value"][1] = "9223372036854775808";  // DCGM blank.
    if (name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE") s["value"][1] = mig ? "-0.5" : "1.5";
  }
  const PrometheusReading r = Parse(doc.dump());
  EXPECT_EQ(r.skipped_values, 5);
  EXPECT_EQ(r.skipped_series, 0);
  ASSERT_EQ(r.devices.size(), 2u);
  for (const DeviceReading& d : r.devices) {
    EXPECT_EQ(d.engine_active_milli, -1);
    EXPECT_EQ(d.fb_used_mib, -1);
    EXPECT_EQ(d.fb_free_mib, -1);
    EXPECT_EQ(d.power_mw, -1);
  }
  EXPECT_THAT(r.problems, Contains(AllOf(HasSubstr("DCGM_FI_DEV_POWER_USAGE{"),
                                         HasSubstr("DCGM_FI_DEV_POWER_USAGE: no value (NaN)"))));
  EXPECT_THAT(r.problems, Contains(HasSubstr("DCGM_FI_DEV_FB_USED: no value (DCGM blank)")));
  EXPECT_THAT(r.problems,
              Contains(HasSubstr("DCGM_FI_PROF_GR_ENGINE_ACTIVE: 1.5 is out of [0, 1]")));
  EXPECT_THAT(r.problems,
              Contains(HasSubstr("DCGM_FI_PROF_GR_ENGINE_ACTIVE: -0.5 is out of [0, 1]")));
}

TEST(PrometheusSourceTest, SkipsSeriesThatNameNoDevice) {
  nlohmann::json doc = nlohmann::json::parse(Json("query-docs.json"));
  auto& result = doc["data"]["result"];
  result[0]["metric"].erase("gpu");
  result[1]["metric"]["gpu"] = "one";
  result[2]["metric"]["GPU_I_ID"] = "-3";
  result[3]["value"][1] = "many";
  const PrometheusReading r = Parse(doc.dump());
  EXPECT_EQ(r.skipped_series, 3);
  EXPECT_EQ(r.skipped_values, 1);
  EXPECT_THAT(r.problems, Contains(HasSubstr("no GPU index label 'gpu'")));
  EXPECT_THAT(r.problems, Contains(HasSubstr("bad gpu label 'one'")));
  EXPECT_THAT(r.problems, Contains(HasSubstr("bad GPU_I_ID label '-3'")));
  EXPECT_THAT(r.problems, Contains(HasSubstr("bad value 'many'")));
}

TEST(PrometheusSourceTest, RefusesWhatIsNotAnInstantVector) {
  EXPECT_THAT(ParseQueryReply(Json("query-bad-selector.json"), {}, true),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("bad_data: invalid parameter \"query\"")));
  EXPECT_THAT(ParseQueryReply("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 1\n", {}, true),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not JSON")));
  EXPECT_THAT(ParseQueryReply(R"({"data":{}})", {}, true),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("status")));
  EXPECT_THAT(ParseQueryReply(R"({"status":"success","data":{"resultType":"matrix","result":[]}})",
                              {}, true),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("'matrix'")));
  EXPECT_THAT(
      ParseQueryReply(R"({"status":"success","data":{"resultType":"vector","result":[{"x":1}]}})",
                      {}, true),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not a sample")));
}

TEST(PrometheusSourceTest, KeepsPrometheusWarnings) {
  nlohmann::json doc = nlohmann::json::parse(Json("query-no-match.json"));
  doc["warnings"] = {"PromQL info: something"};
  EXPECT_THAT(Parse(doc.dump()).warnings, ElementsAre("PromQL info: something"));
}

TEST(PrometheusQueryTest, AsksForTheFiveSeriesWithTheSelector) {
  constexpr char kAll[] =
      "{__name__=~\"DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_FB_USED|"
      "DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_POWER_USAGE\"}";
  EXPECT_EQ(*BuildDcgmQuery(""), kAll);
  EXPECT_EQ(*BuildDcgmQuery("job=\"docs\""), kQueryOfDocs);
  EXPECT_EQ(*BuildDcgmQuery(" { job=\"docs\" } "), kQueryOfDocs);
  // Braces and commas inside quoted values are the value's.
  EXPECT_THAT(BuildDcgmQuery(R"(pod=~"a{2},b}", ns!='x\'}')").status(), IsOk());
  EXPECT_THAT(BuildDcgmQuery("job=\"docs"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("quote not closed")));
  EXPECT_THAT(BuildDcgmQuery("{job=\"docs\""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BuildDcgmQuery("up{job=\"docs\"}"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BuildDcgmQuery("__name__=\"up\""), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PrometheusQueryTest, UrlEncodesTheQueryAndTheTime) {
  const absl::Time at = absl::FromUnixMillis(1'700'000'000'042);
  EXPECT_EQ(InstantQueryUrl("http://prom:9090/", "{a=\"b c\"}", at),
            "http://prom:9090/api/v1/query?query=%7Ba%3D%22b%20c%22%7D&time=1700000000.042");
  EXPECT_EQ(InstantQueryUrl("https://h/prometheus", "x", at),
            "https://h/prometheus/api/v1/query?query=x&time=1700000000.042");
}

TEST(PrometheusLabelsTest, OverridesNamedFields) {
  PrometheusLabels labels;
  EXPECT_THAT(SetLabelOverride("UUID=gpu_uuid", labels), IsOk());
  EXPECT_THAT(SetLabelOverride("gpu_i_profile=mig_profile", labels), IsOk());
  EXPECT_THAT(SetLabelOverride("Hostname=node", labels), IsOk());
  EXPECT_THAT(SetLabelOverride("pod=exported_pod", labels), IsOk());
  EXPECT_THAT(SetLabelOverride("namespace=exported_namespace", labels), IsOk());
  EXPECT_EQ(labels.uuid, "gpu_uuid");
  EXPECT_EQ(labels.gpu_i_profile, "mig_profile");
  EXPECT_EQ(labels.hostname, "node");
  EXPECT_EQ(labels.pod, "exported_pod");
  EXPECT_EQ(labels.pod_namespace, "exported_namespace");
  EXPECT_THAT(SetLabelOverride("uuid", labels),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("FIELD=LABEL")));
  EXPECT_THAT(SetLabelOverride("serial=x", labels),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown field 'serial'")));
  EXPECT_THAT(SetLabelOverride("gpu=1x", labels),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a label name")));
}

TEST(PrometheusSourceCreateTest, RefusesBadConfigurations) {
  auto create = [](PrometheusOptions o) { return PrometheusSource::Create(std::move(o)).status(); };
  PrometheusOptions ok;
  ok.url = "https://prometheus.example:9090/";
  absl::StatusOr<PrometheusSource> made = PrometheusSource::Create(ok);
  ASSERT_THAT(made.status(), IsOk());
  EXPECT_EQ(made->endpoint(), "https://prometheus.example:9090/api/v1/query");

  PrometheusOptions o = ok;
  o.url = "prometheus:9090";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("http://")));
  o.url = "http://user:secret@prometheus:9090";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                  AllOf(HasSubstr("not in the URL"), Not(HasSubstr("secret")))));
  o.url = "http://prometheus:9090/api/v1/query?query=up";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("base URL")));
  o = ok;
  o.cert_file = "/etc/hostname";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("key together")));
  o = ok;
  o.bearer_token_file = "/etc/hostname";
  o.basic_user = "agent";
  o.basic_password_file = "/etc/hostname";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not both")));
  o = ok;
  o.basic_user = "agent";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("together")));
  o = ok;
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                  HasSubstr("cannot read /nonexistent/ca.pem")));
  o = ok;
  o.selector = "job=\"x";
  EXPECT_THAT(create(o), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("selector")));
}

// A stand-in for Prometheus' /api/v1/query on a loopback port: replies with
// `body_` and `status_`, and records the request.
class PrometheusReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/api/v1/query", [this](const httplib::Request& req, httplib::Response& res) {
      query_ = req.get_param_value("query");
      time_ = req.get_param_value("time");
      accept_ = req.get_header_value("Accept");
      authorization_ = req.get_header_value("Authorization");
      res.status = status_;
      res.set_content(body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::yield();
    }
    dir_ = ::testing::TempDir();
  }

  void TearDown() override {
    server_.stop();
    listener_.join();
  }

  std::string WriteFile(const std::string& name, const std::string& text) {
    const std::string path = absl::StrCat(dir_, "/", name);
    std::ofstream(path) << text;
    return path;
  }

  PrometheusSource Source(PrometheusOptions o = {}) {
    o.url = absl::StrCat("http://127.0.0.1:", port_);
    o.selector = "job=\"docs\"";
    o.timeout = absl::Seconds(5);
    absl::StatusOr<PrometheusSource> s = PrometheusSource::Create(std::move(o));
    EXPECT_THAT(s.status(), IsOk());
    return *std::move(s);
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread listener_;
  std::string dir_;
  int status_ = 200;
  std::string body_ = Json("query-docs.json");
  std::string query_, time_, accept_, authorization_;
};

TEST_F(PrometheusReadTest, QueriesAtTheGivenTime) {
  const absl::StatusOr<PrometheusReading> r =
      Source().Read(absl::FromUnixMillis(1'795'747'028'000));
  ASSERT_THAT(r.status(), IsOk());
  EXPECT_EQ(r->devices.size(), 2u);
  EXPECT_EQ(query_, kQueryOfDocs);
  EXPECT_EQ(time_, "1795747028.000");
  EXPECT_EQ(accept_, "application/json");
  EXPECT_EQ(authorization_, "");
}

TEST_F(PrometheusReadTest, SendsABearerTokenReadAtEachQuery) {
  PrometheusOptions o;
  o.bearer_token_file = WriteFile("token", "t0ken-1\n");
  const PrometheusSource source = Source(o);
  ASSERT_THAT(source.Read(absl::Now()).status(), IsOk());
  EXPECT_EQ(authorization_, "Bearer t0ken-1");
  WriteFile("token", "t0ken-2\n");  // Rotated.
  ASSERT_THAT(source.Read(absl::Now()).status(), IsOk());
  EXPECT_EQ(authorization_, "Bearer t0ken-2");
  WriteFile("token", "");
  EXPECT_THAT(source.Read(absl::Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is empty")));
}

TEST_F(PrometheusReadTest, SendsBasicAuth) {
  PrometheusOptions o;
  o.basic_user = "agent";
  o.basic_password_file = WriteFile("password", "s3cret\n");
  ASSERT_THAT(Source(o).Read(absl::Now()).status(), IsOk());
  EXPECT_EQ(authorization_, "Basic YWdlbnQ6czNjcmV0");  // agent:s3cret
}

TEST_F(PrometheusReadTest, ARefusedQueryIsInvalidArgumentWithPrometheusError) {
  status_ = 400;
  body_ = Json("query-bad-selector.json");
  const std::string endpoint = absl::StrCat("http://127.0.0.1:", port_, "/api/v1/query");
  EXPECT_THAT(Source().Read(absl::Now()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(absl::StrCat("query ", endpoint, ": HTTP/1.1 400")),
                             HasSubstr("bad_data: invalid parameter"), HasSubstr("(PromQL: {"))));
}

TEST_F(PrometheusReadTest, MapsEachStatus) {
  body_ = "Unauthorized\n";
  status_ = 401;
  EXPECT_THAT(Source().Read(absl::Now()),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("HTTP/1.1 401 Unauthorized: Unauthorized")));
  status_ = 403;
  EXPECT_THAT(Source().Read(absl::Now()), StatusIs(absl::StatusCode::kPermissionDenied));
  status_ = 503;
  body_ = R"({"status":"error","errorType":"unavailable","error":"too many queries"})";
  EXPECT_THAT(Source().Read(absl::Now()),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("unavailable: too many queries")));
  status_ = 404;
  EXPECT_THAT(Source().Read(absl::Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("HTTP/1.1 404 Not Found")));
  status_ = 200;
  body_ = "# HELP DCGM_FI_DEV_GPU_UTIL\n";
  EXPECT_THAT(Source().Read(absl::Now()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not JSON")));
}

TEST(PrometheusDownTest, IsUnavailableNamingTheEndpoint) {
  int port = 0;
  const int fd = BoundSocket(/*listen_too=*/false, port);
  PrometheusOptions o;
  o.url = absl::StrCat("http://127.0.0.1:", port);
  absl::StatusOr<PrometheusSource> source = PrometheusSource::Create(o);
  ASSERT_THAT(source.status(), IsOk());
  const absl::StatusOr<PrometheusReading> r = source->Read(absl::Now());
  close(fd);
  EXPECT_THAT(
      r, StatusIs(absl::StatusCode::kUnavailable,
                  HasSubstr(absl::StrCat("query http://127.0.0.1:", port, "/api/v1/query: "))));
}

TEST(PrometheusDownTest, IsDeadlineExceededWhenSlow) {
  int port = 0;
  const int fd = BoundSocket(/*listen_too=*/true, port);
  PrometheusOptions o;
  o.url = absl::StrCat("http://127.0.0.1:", port);
  o.timeout = absl::Milliseconds(200);
  absl::StatusOr<PrometheusSource> source = PrometheusSource::Create(o);
  ASSERT_THAT(source.status(), IsOk());
  const absl::StatusOr<PrometheusReading> r = source->Read(absl::Now());
  close(fd);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("no reply within 200ms")));
}

}  // namespace
}  // namespace arbiter::agent
