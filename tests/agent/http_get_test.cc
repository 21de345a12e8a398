// HttpGet and HttpFetch against a local plain-HTTP server (cpp-httplib) and
// a socket that never answers: each status code of their contracts.
#include "clients/agent/http_get.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/testing/loopback_socket.h"
#include "tests/testing/status_matchers.h"

namespace arbiter::agent {
namespace {

using ::arbiter::testing::BoundSocket;
using ::arbiter::testing::IsOkAndHolds;
using ::arbiter::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(5);

class HttpGetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_.Get("/metrics", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(absl::StrCat("accept=", req.get_header_value("Accept"),
                                   " agent=", req.get_header_value("User-Agent"), "\n"),
                      "text/plain");
    });
    server_.Get("/headers", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(absl::StrCat("accept=", req.get_header_value("Accept"),
                                   " authorization=", req.get_header_value("Authorization")),
                      "text/plain");
    });
    server_.Get("/missing", [](const httplib::Request&, httplib::Response& res) {
      res.status = 404;
      res.set_content("no\n", "text/plain");
    });
    server_.Get("/moved", [](const httplib::Request&, httplib::Response& res) {
      res.set_redirect("/metrics");
    });
    server_.Get("/huge", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string((64 << 20) + 1, 'x'), "text/plain");
    });
    server_.Get("/huge-chunked", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t offset, httplib::DataSink& sink) {
        if (offset > (64 << 20)) {
          sink.done();
          return true;
        }
        const std::string chunk(1 << 20, 'x');
        return sink.write(chunk.data(), chunk.size());
      });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    listener_ = std::thread([this] { server_.listen_after_bind(); });
    // `stop()` does nothing before the accept loop runs.
    while (!server_.is_running()) {
      std::this_thread::yield();
    }
  }

  void TearDown() override {
    server_.stop();
    listener_.join();
  }

  std::string Url(const std::string& path) const {
    return absl::StrCat("http://127.0.0.1:", port_, path);
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread listener_;
};

TEST_F(HttpGetTest, ReturnsTheBodyOfA200) {
  EXPECT_THAT(HttpGet(Url("/metrics"), kTimeout),
              IsOkAndHolds(std::string("accept=text/plain agent=arbiter-agent\n")));
}

TEST_F(HttpGetTest, IgnoresAProxyInTheEnvironment) {
  setenv("http_proxy", "http://127.0.0.1:1", 1);
  const absl::StatusOr<std::string> body = HttpGet(Url("/metrics"), kTimeout);
  unsetenv("http_proxy");
  EXPECT_THAT(body, IsOkAndHolds(HasSubstr("agent=arbiter-agent")));
}

TEST_F(HttpGetTest, IsFailedPreconditionWithTheStatusLineForAnotherStatus) {
  EXPECT_THAT(HttpGet(Url("/missing"), kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("HTTP/1.1 404 Not Found")));
}

TEST_F(HttpGetTest, DoesNotFollowRedirects) {
  EXPECT_THAT(HttpGet(Url("/moved"), kTimeout),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("302")));
}

TEST_F(HttpGetTest, IsResourceExhaustedForABodyOver64MiB) {
  EXPECT_THAT(HttpGet(Url("/huge"), kTimeout), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(HttpGet(Url("/huge-chunked"), kTimeout),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(HttpGetTest, IsInvalidArgumentForAnotherKindOfUrl) {
  EXPECT_THAT(HttpGet(absl::StrCat("https://127.0.0.1:", port_, "/metrics"), kTimeout),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HttpGet("http://", kTimeout), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(HttpGet("127.0.0.1:9400/metrics", kTimeout),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(HttpGetTest, FetchReturnsAReplyOfAnyStatus) {
  const absl::StatusOr<HttpReply> reply = HttpFetch(Url("/missing"), kTimeout, HttpOptions());
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->code, 404);
  EXPECT_EQ(reply->status_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(reply->body, "no\n");
}

TEST_F(HttpGetTest, FetchSendsAcceptAndCredentials) {
  HttpOptions options;
  options.accept = "application/json";
  options.bearer_token = "t0ken";
  EXPECT_THAT(HttpFetch(Url("/headers"), kTimeout, options)->body,
              "accept=application/json authorization=Bearer t0ken");
  options.bearer_token.clear();
  options.basic_user = "agent";
  options.basic_password = "s3cret";
  EXPECT_THAT(HttpFetch(Url("/headers"), kTimeout, options)->body,
              "accept=application/json authorization=Basic YWdlbnQ6czNjcmV0");
}

TEST_F(HttpGetTest, FetchTakesHttpsOnlyWhenAllowed) {
  const std::string https = absl::StrCat("https://127.0.0.1:", port_, "/metrics");
  EXPECT_THAT(HttpFetch(https, kTimeout, HttpOptions()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an http:// URL")));
  HttpOptions options;
  options.allow_https = true;
  // Allowed, but this server speaks plain HTTP: the handshake fails.
  EXPECT_THAT(HttpFetch(https, kTimeout, options), StatusIs(absl::StatusCode::kUnavailable));
  options.ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(HttpFetch(https, kTimeout, options), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HttpGetUnreachableTest, IsUnavailableWhenNothingListens) {
  int port = 0;
  const int fd = BoundSocket(/*listen_too=*/false, port);
  const absl::StatusOr<std::string> body =
      HttpGet(absl::StrCat("http://127.0.0.1:", port, "/metrics"), kTimeout);
  close(fd);
  EXPECT_THAT(body, StatusIs(absl::StatusCode::kUnavailable));
}

TEST(HttpGetUnreachableTest, IsUnavailableWhenThePeerDoesNotAnswerInTime) {
  // A listening socket that never accepts: the connection completes in the
  // backlog, and the request is never answered.
  int port = 0;
  const int fd = BoundSocket(/*listen_too=*/true, port);
  const absl::StatusOr<std::string> body =
      HttpGet(absl::StrCat("http://127.0.0.1:", port, "/metrics"), absl::Milliseconds(200));
  close(fd);
  EXPECT_THAT(body, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("imed out")));
}

TEST(HttpGetUnreachableTest, FetchIsDeadlineExceededWhenThePeerDoesNotAnswerInTime) {
  int port = 0;
  const int fd = BoundSocket(/*listen_too=*/true, port);
  const absl::StatusOr<HttpReply> reply = HttpFetch(absl::StrCat("http://127.0.0.1:", port, "/"),
                                                    absl::Milliseconds(200), HttpOptions());
  close(fd);
  EXPECT_THAT(reply, StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("imed out")));
}

}  // namespace
}  // namespace arbiter::agent
