// The console's Connect gateway over real HTTPS, on a real arbiterd (TLS,
// client certificates) and PostgreSQL, with bearer tokens signed by the
// project's dev issuer (tools/dev-oidc-issuer, PyJWT) and verified by cjose:
//   - unary calls answer what gRPC answers, as protobuf JSON;
//   - malformed JSON, an unknown field or a wrong type: invalid_argument
//     naming it, HTTP 400, nothing written;
//   - no token, an expired one, another issuer's, "alg": "none": 401
//     unauthenticated, nothing written;
//   - a caller without the role: 403 permission_denied, nothing written;
//   - a watch stream over application/connect+json delivers the events of
//     calls made meanwhile, and an end-of-stream envelope for errors;
//   - the gateway's metadata cannot be forged by a gRPC client;
//   - the console's files, and no path outside them.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include <google/protobuf/util/json_util.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <httplib.h>
#include <unistd.h>

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
using ::arbiter::testing::TestDatabase;
using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kIssuer[] = "https://issuer.test";
constexpr char kAudience[] = "arbiter-console";
constexpr char kPrefix[] = "spiffe://arbiter.local/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The standard output of `command`, trailing whitespace removed.
std::string Output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n = 0;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return std::string(absl::StripTrailingAsciiWhitespace(out));
}

std::string Envelope(uint8_t flags, const std::string& payload) {
  std::string out(1, static_cast<char>(flags));
  const auto n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  return out + payload;
}

struct Reply {
  int status = 0;
  Json body;
};

class ConnectGatewayTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/connect-", getpid()));
    const std::string certs = absl::StrCat(ARBITER_SOURCE_DIR, "/tests/testing/make_test_certs ",
                                           ARBITER_SOURCE_DIR, " ", *dir_, " admin nobody");
    ASSERT_EQ(std::system(certs.c_str()), 0) << certs;
    for (const char* issuer : {"issuer", "other-issuer"}) {
      const std::string keygen =
          absl::StrCat(ARBITER_SOURCE_DIR, "/tools/dev-oidc-issuer keygen ", *dir_, "/", issuer);
      ASSERT_EQ(std::system(keygen.c_str()), 0) << keygen;
    }
    // The console's files, in a folder beside (not above) the keys.
    ASSERT_EQ(std::system(absl::StrCat("mkdir -p ", *dir_, "/console/assets.d").c_str()), 0);
    std::ofstream(*dir_ + "/console/index.html") << "<!doctype html><title>Arbiter</title>\n";
    std::ofstream(*dir_ + "/console/app.js") << "console.log('arbiter');\n";
  }

  void SetUp() override {
    auto db = TestDatabase::Create();
    ASSERT_THAT(db, IsOk());
    db_ = std::move(*db);
    ServerOptions options;
    options.listen_address = "127.0.0.1:0";
    options.dsn = db_->dsn();
    options.tls = TlsFiles{*dir_ + "/server.pem", *dir_ + "/server.key", *dir_ + "/ca.pem"};
    options.admins = {absl::StrCat(kPrefix, "admin")};
    options.console_listen = "127.0.0.1:0";
    options.console_assets = *dir_ + "/console";
    options.oidc.issuer = kIssuer;
    options.oidc.audience = kAudience;
    options.oidc.jwks_file = *dir_ + "/issuer/jwks.json";
    options.oidc.principal_prefix = kPrefix;
    auto server = ArbiterServer::Start(options, &clock_);
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    ASSERT_NE(server_->console_port(), 0);

    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(*dir_ + "/ca.pem");
    ssl.pem_cert_chain = ReadFile(*dir_ + "/admin.pem");
    ssl.pem_private_key = ReadFile(*dir_ + "/admin.key");
    channel_ =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()), grpc::SslCredentials(ssl));
    inventory_ = v1::InventoryService::NewStub(channel_);
    governance_ = v1::GovernanceService::NewStub(channel_);
    allocation_ = v1::AllocationService::NewStub(channel_);
  }

  void TearDown() override { server_.reset(); }

  static std::string Token(const std::string& subject, const std::string& extra = "",
                           const std::string& issuer_dir = "issuer") {
    return Output(absl::StrCat(ARBITER_SOURCE_DIR, "/tools/dev-oidc-issuer token ", *dir_, "/",
                               issuer_dir, " --iss ", kIssuer, " --aud ", kAudience, " --sub ",
                               subject, " ", extra));
  }

  std::unique_ptr<httplib::SSLClient> Client() {
    auto client = std::make_unique<httplib::SSLClient>("127.0.0.1", server_->console_port());
    client->set_ca_cert_path((*dir_ + "/ca.pem").c_str());
    client->enable_server_certificate_verification(true);
    client->set_read_timeout(30, 0);
    return client;
  }

  // A unary Connect call with `token` ("" for none) and a JSON body.
  Reply Call(const std::string& method, const std::string& body, const std::string& token) {
    std::unique_ptr<httplib::SSLClient> client = Client();
    httplib::Headers headers = {{"Connect-Protocol-Version", "1"}};
    if (!token.empty()) headers.emplace("Authorization", "Bearer " + token);
    auto res = client->Post(("/arbiter.v1." + method).c_str(), headers, body, "application/json");
    Reply reply;
    if (!res) {
      ADD_FAILURE() << method << ": " << httplib::to_string(res.error());
      return reply;
    }
    reply.status = res->status;
    reply.body = Json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    return reply;
  }

  // The JSON of `message` as the gateway writes it.
  static Json AsJson(const google::protobuf::Message& message) {
    std::string text;
    EXPECT_TRUE(google::protobuf::util::MessageToJsonString(message, &text).ok());
    return Json::parse(text);
  }

  std::string RowCounts() {
    auto counts = db_->QueryValue(
        "SELECT concat_ws(',', (SELECT count(*) FROM clusters), (SELECT count(*) FROM pools),"
        " (SELECT count(*) FROM teams), (SELECT count(*) FROM requests),"
        " (SELECT count(*) FROM role_bindings), (SELECT count(*) FROM ledger))");
    EXPECT_THAT(counts, IsOk());
    return counts.value_or("");
  }

  void Seed() {
    ASSERT_THAT(testing::SeedOrganisation(*inventory_, *governance_, testing::SeedSpec()), IsOk());
  }

  static std::string* dir_;
  // Tokens are signed for the wall clock's now.
  testing::SimulatedClock clock_{absl::Now()};
  std::unique_ptr<TestDatabase> db_;
  std::unique_ptr<ArbiterServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::InventoryService::Stub> inventory_;
  std::unique_ptr<v1::GovernanceService::Stub> governance_;
  std::unique_ptr<v1::AllocationService::Stub> allocation_;
};

std::string* ConnectGatewayTest::dir_ = nullptr;

TEST_F(ConnectGatewayTest, AUnaryCallAnswersWhatGrpcAnswers) {
  Seed();
  const std::string admin = Token("admin");
  for (const char* method : {"InventoryService/ListPools", "GovernanceService/ListTeams",
                             "GovernanceService/ListQuotas", "InventoryService/ListNodes"}) {
    SCOPED_TRACE(method);
    Reply reply = Call(method, "{}", admin);
    ASSERT_EQ(reply.status, 200) << reply.body.dump();
    EXPECT_FALSE(reply.body.empty());
  }
  grpc::ClientContext ctx;
  v1::ListPoolsResponse pools;
  ASSERT_TRUE(inventory_->ListPools(&ctx, v1::ListPoolsRequest(), &pools).ok());
  EXPECT_EQ(Call("InventoryService/ListPools", "{}", admin).body, AsJson(pools));

  grpc::ClientContext nodes_ctx;
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(inventory_->ListNodes(&nodes_ctx, v1::ListNodesRequest(), &nodes).ok());
  EXPECT_EQ(Call("InventoryService/ListNodes", "", admin).body, AsJson(nodes));
}

TEST_F(ConnectGatewayTest, AWriteThroughTheGatewayIsTheCallersAndLedgered) {
  Seed();
  const std::string before = RowCounts();
  Reply reply =
      Call("GovernanceService/CreateTeam", R"({"team": {"name": "research"}})", Token("admin"));
  ASSERT_EQ(reply.status, 200) << reply.body.dump();
  EXPECT_EQ(reply.body["team"]["name"], "research");
  EXPECT_NE(RowCounts(), before);
  auto actor = db_->QueryValue("SELECT actor FROM ledger ORDER BY seq DESC LIMIT 1");
  ASSERT_THAT(actor, IsOk());
  EXPECT_EQ(*actor, absl::StrCat(kPrefix, "admin"));
}

TEST_F(ConnectGatewayTest, MalformedJsonIsInvalidArgumentNamingTheFieldAndWritesNothing) {
  Seed();
  const std::string admin = Token("admin");
  const std::string before = RowCounts();
  struct Case {
    std::string body;
    std::string named;
  };
  const std::vector<Case> cases = {
      {R"({"team": {"name": "x", "bogus": 1}})", "bogus"},
      {R"({"team": {"name": 5}})", "name"},
      {R"({"team": {"name": "x")", "CreateTeamRequest"},
      {R"([1, 2])", "CreateTeamRequest"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    Reply reply = Call("GovernanceService/CreateTeam", c.body, admin);
    EXPECT_EQ(reply.status, 400);
    EXPECT_EQ(reply.body["code"], "invalid_argument");
    EXPECT_THAT(reply.body["message"].get<std::string>(), HasSubstr(c.named));
  }
  // The application's own validation, through the same mapping.
  Reply empty = Call("GovernanceService/CreateTeam", R"({"team": {"name": ""}})", admin);
  EXPECT_EQ(empty.status, 400);
  EXPECT_EQ(empty.body["code"], "invalid_argument");
  EXPECT_THAT(empty.body["message"].get<std::string>(), HasSubstr("name"));
  EXPECT_EQ(RowCounts(), before);
}

TEST_F(ConnectGatewayTest, AnUnauthenticatedCallIsRefusedAndWritesNothing) {
  Seed();
  const std::string before = RowCounts();
  const std::string body = R"({"team": {"name": "research"}})";
  // "alg": "none", claiming to be the admin.
  const std::string unsigned_token = absl::StrCat(
      absl::WebSafeBase64Escape(R"({"alg":"none","typ":"JWT"})"), ".",
      absl::WebSafeBase64Escape(absl::StrCat(R"({"iss":")", kIssuer, R"(","aud":")", kAudience,
                                             R"(","sub":"admin","exp":4102444800})")),
      ".");
  std::string tampered = Token("nobody");
  tampered[tampered.find('.') + 5] ^= 1;
  struct Case {
    std::string name, token, says;
  };
  const std::vector<Case> cases = {
      {"no token", "", "Authorization"},
      {"expired", Token("admin", "--ttl -3600"), "expired"},
      {"no expiry", Token("admin", "--no-exp"), "exp"},
      {"not yet valid", Token("admin", "--not-before 3600"), "not valid before"},
      {"another issuer's key", Token("admin", "", "other-issuer"), "key"},
      {"alg none", unsigned_token, "algorithm"},
      {"tampered", tampered, ""},
      {"garbage", "not.a.token", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Reply reply = Call("GovernanceService/CreateTeam", body, c.token);
    EXPECT_EQ(reply.status, 401);
    EXPECT_EQ(reply.body["code"], "unauthenticated");
    EXPECT_THAT(reply.body["message"].get<std::string>(), HasSubstr(c.says));
  }
  // Another audience, another issuer name.
  const std::string wrong_aud =
      Output(absl::StrCat(ARBITER_SOURCE_DIR, "/tools/dev-oidc-issuer token ", *dir_,
                          "/issuer --iss ", kIssuer, " --aud someone-else --sub admin"));
  EXPECT_EQ(Call("GovernanceService/CreateTeam", body, wrong_aud).status, 401);
  const std::string wrong_iss =
      Output(absl::StrCat(ARBITER_SOURCE_DIR, "/tools/dev-oidc-issuer token ", *dir_,
                          "/issuer --iss https://evil.test --aud ", kAudience, " --sub admin"));
  EXPECT_EQ(Call("GovernanceService/CreateTeam", body, wrong_iss).status, 401);
  EXPECT_EQ(RowCounts(), before);
}

TEST_F(ConnectGatewayTest, ACallerWithoutTheRoleIsForbiddenAndWritesNothing) {
  Seed();
  const std::string before = RowCounts();
  Reply reply =
      Call("GovernanceService/CreateTeam", R"({"team": {"name": "research"}})", Token("nobody"));
  EXPECT_EQ(reply.status, 403);
  EXPECT_EQ(reply.body["code"], "permission_denied");
  EXPECT_EQ(RowCounts(), before);

  // A group from the token counts as the certificate's OU does.
  v1::GrantRoleRequest grant;
  grant.mutable_binding()->set_subject("group:platform");
  grant.mutable_binding()->set_role(v1::ROLE_PLATFORM_ADMIN);
  grant.mutable_binding()->set_scope_kind(v1::SCOPE_KIND_ORG);
  grpc::ClientContext ctx;
  v1::GrantRoleResponse granted;
  ASSERT_TRUE(governance_->GrantRole(&ctx, grant, &granted).ok());
  reply = Call("GovernanceService/CreateTeam", R"({"team": {"name": "research"}})",
               Token("nobody", "--group platform"));
  EXPECT_EQ(reply.status, 200) << reply.body.dump();
}

TEST_F(ConnectGatewayTest, WhoAmINamesTheTokensPrincipalGroupsAndBindings) {
  Seed();
  v1::GrantRoleRequest grant;
  grant.mutable_binding()->set_subject("group:ml");
  grant.mutable_binding()->set_role(v1::ROLE_TEAM_MEMBER);
  grant.mutable_binding()->set_scope_kind(v1::SCOPE_KIND_TEAM);
  grant.mutable_binding()->set_scope("inference");
  grpc::ClientContext ctx;
  v1::GrantRoleResponse granted;
  ASSERT_TRUE(governance_->GrantRole(&ctx, grant, &granted).ok());

  Reply me = Call("GovernanceService/WhoAmI", "{}", Token("alice", "--group ml --group ops"));
  ASSERT_EQ(me.status, 200) << me.body.dump();
  EXPECT_EQ(me.body["principal"], absl::StrCat(kPrefix, "alice"));
  EXPECT_EQ(me.body["groups"], Json::array({"ml", "ops"}));
  ASSERT_EQ(me.body["bindings"].size(), 1u) << me.body.dump();
  EXPECT_EQ(me.body["bindings"][0]["subject"], "group:ml");
  EXPECT_FALSE(me.body.contains("platformAdmin"));

  Reply admin = Call("GovernanceService/WhoAmI", "{}", Token("admin"));
  ASSERT_EQ(admin.status, 200);
  EXPECT_EQ(admin.body["platformAdmin"], true);
}

TEST_F(ConnectGatewayTest, RoutingAndProtocolErrors) {
  const std::string admin = Token("admin");
  Reply unknown = Call("InventoryService/NoSuchMethod", "{}", admin);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.body["code"], "unimplemented");
  Reply upload = Call("TelemetryService/StreamSamples", "{}", admin);
  EXPECT_EQ(upload.status, 501);
  EXPECT_EQ(upload.body["code"], "unimplemented");

  std::unique_ptr<httplib::SSLClient> client = Client();
  auto wrong_type = client->Post("/arbiter.v1.InventoryService/ListPools",
                                 {{"Authorization", "Bearer " + admin}}, "{}", "text/plain");
  ASSERT_TRUE(wrong_type);
  EXPECT_EQ(wrong_type->status, 415);
  auto get = client->Get("/arbiter.v1.InventoryService/ListPools");
  ASSERT_TRUE(get);
  EXPECT_EQ(get->status, 405);
  auto bad_timeout =
      client->Post("/arbiter.v1.InventoryService/ListPools",
                   {{"Authorization", "Bearer " + admin}, {"Connect-Timeout-Ms", "soon"}}, "{}",
                   "application/json");
  ASSERT_TRUE(bad_timeout);
  EXPECT_EQ(bad_timeout->status, 400);
  EXPECT_THAT(bad_timeout->body, HasSubstr("Connect-Timeout-Ms"));
}

TEST_F(ConnectGatewayTest, AWatchStreamDeliversEventsInEnvelopes) {
  Seed();
  const std::string admin = Token("admin");
  Reply listed = Call("AllocationService/ListRequests", "{}", admin);
  ASSERT_EQ(listed.status, 200);
  const std::string revision = listed.body["revision"].get<std::string>();

  // The stream, read on its own thread; it stops after the first event.
  std::string received;
  std::atomic<bool> got_event{false};
  std::thread reader([&] {
    std::unique_ptr<httplib::SSLClient> client = Client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/arbiter.v1.AllocationService/WatchAllocations";
    req.headers = {{"Authorization", "Bearer " + admin},
                   {"Content-Type", "application/connect+json"},
                   {"Connect-Protocol-Version", "1"}};
    req.body = Envelope(0, absl::StrCat(R"({"startRevision": ")", revision, R"("})"));
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      received.append(data, n);
      // A whole first envelope that is not a bookmark ends the read.
      if (received.size() >= 5) {
        uint32_t length = 0;
        for (int i = 1; i <= 4; ++i) length = (length << 8) | static_cast<uint8_t>(received[i]);
        if (received.size() >= 5 + length) {
          Json event = Json::parse(received.substr(5, length), nullptr, false);
          if (!event.value("bookmark", false)) {
            got_event = true;
            return false;
          }
          received.erase(0, 5 + length);
        }
      }
      return true;
    };
    httplib::Response res;
    httplib::Error error = httplib::Error::Success;
    client->send(req, res, error);
  });
  Reply submitted = Call("AllocationService/RequestCapacity", R"({
      "idempotencyKey": "console-1", "team": "inference", "pool": "serving",
      "workloadClass": "WORKLOAD_CLASS_INFERENCE", "members": 1,
      "shape": {"fraction": {"gpuMilli": 250, "memoryMib": "4096"}}})",
                         admin);
  EXPECT_EQ(submitted.status, 200) << submitted.body.dump();
  reader.join();
  ASSERT_TRUE(got_event);
  ASSERT_GE(received.size(), 5u);
  EXPECT_EQ(received[0], 0) << "a message envelope, not the end of the stream";
  uint32_t length = 0;
  for (int i = 1; i <= 4; ++i) length = (length << 8) | static_cast<uint8_t>(received[i]);
  Json event = Json::parse(received.substr(5, length));
  EXPECT_EQ(event["request"]["idempotencyKey"], "console-1") << event.dump();
}

TEST_F(ConnectGatewayTest, AStreamThatFailsEndsWithAnErrorEnvelope) {
  std::unique_ptr<httplib::SSLClient> client = Client();
  auto res = client->Post("/arbiter.v1.AllocationService/WatchAllocations",
                          {{"Connect-Protocol-Version", "1"}}, Envelope(0, "{}"),
                          "application/connect+json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  ASSERT_GE(res->body.size(), 5u);
  EXPECT_EQ(res->body[0], 2) << "end-of-stream flag";
  Json end = Json::parse(res->body.substr(5));
  EXPECT_EQ(end["error"]["code"], "unauthenticated");

  auto bad = client->Post("/arbiter.v1.AllocationService/WatchAllocations",
                          {{"Authorization", "Bearer " + Token("admin")}},
                          Envelope(0, R"({"startRevision": "x"})"), "application/connect+json");
  ASSERT_TRUE(bad);
  Json bad_end = Json::parse(bad->body.substr(5));
  EXPECT_EQ(bad_end["error"]["code"], "invalid_argument");
  EXPECT_THAT(bad_end["error"]["message"].get<std::string>(), HasSubstr("start"));
}

// Opens a watch stream for `token` and reads it to its end on a thread of its
// own; `Done()` waits for the end and returns the end-of-stream JSON.
class OpenStream {
 public:
  OpenStream(std::unique_ptr<httplib::SSLClient> client, const std::string& token)
      : client_(std::move(client)) {
    reader_ = std::thread([this, token] {
      httplib::Request req;
      req.method = "POST";
      req.path = "/arbiter.v1.AllocationService/WatchAllocations";
      req.headers = {{"Authorization", "Bearer " + token},
                     {"Content-Type", "application/connect+json"}};
      req.body = Envelope(0, "{}");
      req.content_receiver = [this](const char* data, size_t n, uint64_t, uint64_t) {
        absl::MutexLock lock(&mu_);
        received_.append(data, n);
        return !stop_;
      };
      httplib::Response res;
      httplib::Error error = httplib::Error::Success;
      client_->send(req, res, error);
    });
  }
  ~OpenStream() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    client_->stop();  // Closes the socket: the read ends now, not at the next bookmark.
    if (reader_.joinable()) reader_.join();
  }
  // The end-of-stream message once it has come (the last envelope, flag 2).
  std::optional<Json> End() {
    absl::MutexLock lock(&mu_);
    size_t at = 0;
    while (at + 5 <= received_.size()) {
      uint32_t length = 0;
      for (int i = 1; i <= 4; ++i) length = (length << 8) | static_cast<uint8_t>(received_[at + i]);
      if (at + 5 + length > received_.size()) break;
      if (received_[at] == 2) return Json::parse(received_.substr(at + 5, length));
      at += 5 + length;
    }
    return std::nullopt;
  }
  // Waits up to 60 s for the end of the stream.
  Json WaitForEnd() {
    for (int i = 0; i < 600; ++i) {
      if (std::optional<Json> end = End()) return *end;
      absl::SleepFor(absl::Milliseconds(100));
    }
    ADD_FAILURE() << "the stream did not end";
    return Json();
  }

 private:
  std::unique_ptr<httplib::SSLClient> client_;
  absl::Mutex mu_;
  std::string received_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread reader_;
};

TEST_F(ConnectGatewayTest, OneCallerHoldsAtMostFourStreams) {
  Seed();
  const std::string admin = Token("admin");
  std::vector<std::unique_ptr<OpenStream>> open;
  for (int i = 0; i < 4; ++i) open.push_back(std::make_unique<OpenStream>(Client(), admin));
  // Give the four a moment to start (a stream registers when its body begins).
  absl::SleepFor(absl::Seconds(1));
  OpenStream fifth(Client(), admin);
  Json end = fifth.WaitForEnd();
  EXPECT_EQ(end["error"]["code"], "resource_exhausted") << end.dump();
  for (const auto& stream : open) EXPECT_FALSE(stream->End().has_value());
  // Another caller (an auditor reads the stream) is not held back by them.
  v1::GrantRoleRequest grant;
  grant.mutable_binding()->set_subject(absl::StrCat(kPrefix, "dave"));
  grant.mutable_binding()->set_role(v1::ROLE_AUDITOR);
  grant.mutable_binding()->set_scope_kind(v1::SCOPE_KIND_ORG);
  grpc::ClientContext ctx;
  v1::GrantRoleResponse granted;
  ASSERT_TRUE(governance_->GrantRole(&ctx, grant, &granted).ok());
  OpenStream other(Client(), Token("dave"));
  absl::SleepFor(absl::Seconds(1));
  EXPECT_FALSE(other.End().has_value()) << other.End()->dump();
}

TEST_F(ConnectGatewayTest, AStreamEndsWhenItsTokenExpires) {
  Seed();
  // Valid for 2 more seconds (the verifier's leeway does not extend a stream).
  OpenStream stream(Client(), Token("admin", "--ttl 2"));
  Json end = stream.WaitForEnd();
  EXPECT_EQ(end["error"]["code"], "deadline_exceeded") << end.dump();
}

TEST_F(ConnectGatewayTest, ATeamsStatementCarriesOnlyItsOwnFigures) {
  Seed();
  const std::string body = R"({"period": {"from": "2026-01-01T00:00:00Z",
                                          "to": "2026-01-01T03:00:00Z"}, "team": "inference"})";
  Reply team = Call("ChargebackService/GetChargeback", body, Token("admin"));
  ASSERT_EQ(team.status, 200) << team.body.dump();
  EXPECT_EQ(team.body["team"], "inference");
  EXPECT_FALSE(team.body.contains("clusterReservedMilliSeconds"));
  EXPECT_EQ(team.body["hours"].size(), 3u) << team.body.dump();
  Reply any = Call("ChargebackService/GetChargeback",
                   R"({"period": {"from": "2026-01-01T00:00:00Z", "to": "2026-01-01T03:00:00Z"},
                       "team": "*"})",
                   Token("admin"));
  EXPECT_EQ(any.status, 400);
  EXPECT_THAT(any.body["message"].get<std::string>(), HasSubstr("team"));
}

TEST_F(ConnectGatewayTest, AGrpcClientCannotForgeTheGatewaysCaller) {
  Seed();
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(*dir_ + "/ca.pem");
  ssl.pem_cert_chain = ReadFile(*dir_ + "/nobody.pem");
  ssl.pem_private_key = ReadFile(*dir_ + "/nobody.key");
  grpc::ChannelArguments args;
  args.SetString("arbiter.test.identity", "nobody");
  auto channel = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                           grpc::SslCredentials(ssl), args);
  auto governance = v1::GovernanceService::NewStub(channel);
  const std::string before = RowCounts();
  grpc::ClientContext ctx;
  ctx.AddMetadata("arbiter-gateway-secret", std::string(64, '0'));
  ctx.AddMetadata("arbiter-gateway-principal-bin", absl::StrCat(kPrefix, "admin"));
  v1::CreateTeamRequest req;
  req.mutable_team()->set_name("research");
  v1::CreateTeamResponse resp;
  grpc::Status status = governance->CreateTeam(&ctx, req, &resp);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  EXPECT_EQ(RowCounts(), before);
}

TEST_F(ConnectGatewayTest, ServesTheConsolesFilesAndNothingElse) {
  std::unique_ptr<httplib::SSLClient> client = Client();
  auto index = client->Get("/");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_THAT(index->body, HasSubstr("<title>Arbiter</title>"));
  EXPECT_THAT(index->get_header_value("Content-Security-Policy"), HasSubstr("default-src 'self'"));
  auto route = client->Get("/team/inference");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 200);
  EXPECT_EQ(route->body, index->body);
  auto script = client->Get("/app.js");
  ASSERT_TRUE(script);
  EXPECT_EQ(script->status, 200);
  EXPECT_THAT(script->get_header_value("Content-Type"), HasSubstr("text/javascript"));
  for (const char* path : {"/../ca.pem", "/../issuer/issuer.key", "/./index.html",
                           "/%2e%2e/server.key", "//etc/passwd", "/missing.js", "/assets.d"}) {
    SCOPED_TRACE(path);
    auto res = client->Get(path);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404);
  }
}

}  // namespace
}  // namespace arbiter::server
