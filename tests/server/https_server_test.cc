// HttpsServer over a real socket, with a TLS client written on OpenSSL: the
// handler served over TLS 1.3 and 1.2 and not below, the webhook's 404/405
// answers, the 4 MiB body contract (411/413 before any body is read),
// keep-alive, start-up errors, and a clean stop.
#include "server/https_server.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/testing/status_matchers.h"

namespace arbiter::server {
namespace {

using ::arbiter::testing::IsOk;
using ::arbiter::testing::StatusIs;
using ::testing::HasSubstr;

// A reply as read off the wire.
struct Reply {
  int status = 0;
  std::string head;  // Status line and headers.
  std::string body;
};

// One TLS connection to 127.0.0.1:`port`, verifying the server against the
// test CA. Thread-compatible.
class TlsClient {
 public:
  // Connects and completes the handshake with TLS versions in
  // [`min_version`, `max_version`]. UNAVAILABLE when either fails.
  static absl::StatusOr<std::unique_ptr<TlsClient>> Connect(int port, const std::string& ca_file,
                                                            int min_version, int max_version) {
    auto client = std::unique_ptr<TlsClient>(new TlsClient());
    client->ctx_ = SSL_CTX_new(TLS_client_method());
    // Level 0 lets the client offer TLS 1.1: a refusal must be the server's.
    SSL_CTX_set_security_level(client->ctx_, 0);
    SSL_CTX_set_min_proto_version(client->ctx_, min_version);
    SSL_CTX_set_max_proto_version(client->ctx_, max_version);
    if (SSL_CTX_load_verify_locations(client->ctx_, ca_file.c_str(), nullptr) != 1) {
      return absl::InternalError("cannot load the CA");
    }
    SSL_CTX_set_verify(client->ctx_, SSL_VERIFY_PEER, nullptr);
    client->fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(client->fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      return absl::UnavailableError("connect refused");
    }
    client->ssl_ = SSL_new(client->ctx_);
    SSL_set_fd(client->ssl_, client->fd_);
    SSL_set1_host(client->ssl_, "127.0.0.1");
    if (SSL_connect(client->ssl_) != 1) {
      return absl::UnavailableError(
          absl::StrCat("handshake failed: ", ERR_error_string(ERR_get_error(), nullptr)));
    }
    return client;
  }

  ~TlsClient() {
    if (ssl_ != nullptr) {
      SSL_free(ssl_);
    }
    if (fd_ >= 0) {
      close(fd_);
    }
    SSL_CTX_free(ctx_);
  }

  std::string version() const { return SSL_get_version(ssl_); }

  bool Send(const std::string& data) {
    return SSL_write(ssl_, data.data(), static_cast<int>(data.size())) ==
           static_cast<int>(data.size());
  }

  // Reads one reply (it must carry a Content-Length). UNAVAILABLE when the
  // connection ends first.
  absl::StatusOr<Reply> Read() {
    size_t head_end = std::string::npos;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill()) {
        return absl::UnavailableError(absl::StrCat("connection ended; got: ", buffer_));
      }
    }
    Reply reply;
    reply.head = buffer_.substr(0, head_end + 2);
    buffer_.erase(0, head_end + 4);
    if (reply.head.size() < 12 || !absl::SimpleAtoi(reply.head.substr(9, 3), &reply.status)) {
      return absl::InternalError(absl::StrCat("bad status line: ", reply.head));
    }
    size_t length = 0;
    const size_t at = reply.head.find("Content-Length: ");
    if (at == std::string::npos ||
        !absl::SimpleAtoi(reply.head.substr(at + 16, reply.head.find('\r', at) - at - 16),
                          &length)) {
      return absl::InternalError(absl::StrCat("no Content-Length: ", reply.head));
    }
    while (buffer_.size() < length) {
      if (!Fill()) {
        return absl::UnavailableError("connection ended in the body");
      }
    }
    reply.body = buffer_.substr(0, length);
    buffer_.erase(0, length);
    return reply;
  }

 private:
  TlsClient() = default;

  bool Fill() {
    char chunk[4096];
    const int n = SSL_read(ssl_, chunk, sizeof chunk);
    if (n <= 0) {
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  SSL_CTX* ctx_ = nullptr;
  SSL* ssl_ = nullptr;
  int fd_ = -1;
  std::string buffer_;
};

class HttpsServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(::testing::TempDir(), "/https-server-certs-", getpid()));
    const std::string cmd =
        absl::StrCat(ARBITER_SOURCE_DIR, "/deploy/local/make-certs ", *dir_, " >/dev/null");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  }

  void SetUp() override {
    auto server = HttpsServer::Start("127.0.0.1:0", Cert(), Key(), Handler());
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
  }

  static std::string Cert() { return *dir_ + "/server.pem"; }
  static std::string Key() { return *dir_ + "/server.key"; }
  static std::string Ca() { return *dir_ + "/ca.pem"; }

  // The routing of server.cc's webhook handler, with /admit echoing its body.
  HttpsServer::Handler Handler() {
    return [this](const HttpRequest& request) -> HttpResponse {
      ++calls_;
      if (request.path == "/healthz") {
        return {200, "text/plain", "ok\n"};
      }
      if (request.path != "/admit") {
        return {404, "text/plain", "POST AdmissionReviews to /admit\n"};
      }
      if (request.method != "POST") {
        return {405, "text/plain", "POST AdmissionReviews to /admit\n"};
      }
      return {200, "application/json", request.body};
    };
  }

  std::unique_ptr<TlsClient> Connect(int max_version = TLS1_3_VERSION) {
    auto client = TlsClient::Connect(server_->port(), Ca(), TLS1_VERSION, max_version);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? *std::move(client) : nullptr;
  }

  static std::string* dir_;
  std::atomic<int> calls_{0};
  std::unique_ptr<HttpsServer> server_;
};

std::string* HttpsServerTest::dir_ = nullptr;

std::string Post(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path,
                      " HTTP/1.1\r\nHost: localhost\r\nContent-Length: ", body.size(),
                      "\r\nContent-Type: application/json\r\n\r\n", body);
}

TEST_F(HttpsServerTest, ServesTheHandlerOverTls13) {
  std::unique_ptr<TlsClient> client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->version(), "TLSv1.3");
  ASSERT_TRUE(client->Send(Post("/admit", R"({"kind":"AdmissionReview"})")));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 200);
  EXPECT_THAT(reply->head, HasSubstr("Content-Type: application/json"));
  EXPECT_EQ(reply->body, R"({"kind":"AdmissionReview"})");
}

TEST_F(HttpsServerTest, AcceptsTls12AndRefusesTls11) {
  std::unique_ptr<TlsClient> client = Connect(TLS1_2_VERSION);
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->version(), "TLSv1.2");
  ASSERT_TRUE(client->Send("GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, "ok\n");

  EXPECT_THAT(TlsClient::Connect(server_->port(), Ca(), TLS1_1_VERSION, TLS1_1_VERSION),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("handshake failed")));
}

TEST_F(HttpsServerTest, AnswersWhatTheWebhookHandlerReturnsForOtherPathsAndMethods) {
  std::unique_ptr<TlsClient> client = Connect();
  ASSERT_NE(client, nullptr);
  // One keep-alive connection for all of them.
  ASSERT_TRUE(client->Send("GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 404);
  EXPECT_EQ(reply->body, "POST AdmissionReviews to /admit\n");

  ASSERT_TRUE(client->Send("GET /admit?timeout=10s HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 405);

  // Not percent-decoded: the handler routes on the path as sent.
  ASSERT_TRUE(client->Send(Post("/adm%69t", "{}")));
  reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 404);

  ASSERT_TRUE(client->Send("DELETE /admit HTTP/1.1\r\nHost: localhost\r\n\r\n"));
  reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 405);
  EXPECT_EQ(calls_.load(), 4);
}

TEST_F(HttpsServerTest, RefusesAPostWithoutContentLength) {
  std::unique_ptr<TlsClient> client = Connect();
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(
      client->Send("POST /admit HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                   "2\r\n{}\r\n0\r\n\r\n"));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 411);
  EXPECT_THAT(reply->head, HasSubstr("Connection: close"));
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpsServerTest, RefusesABodyOver4MiBBeforeReadingIt) {
  std::unique_ptr<TlsClient> client = Connect();
  ASSERT_NE(client, nullptr);
  // Only the head is sent: the reply must not wait for the body.
  ASSERT_TRUE(client->Send(absl::StrCat("POST /admit HTTP/1.1\r\nHost: localhost\r\n",
                                        "Content-Length: ", (4 << 20) + 1, "\r\n\r\n")));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 413);
  EXPECT_THAT(reply->head, HasSubstr("Connection: close"));
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpsServerTest, ServesABodyOfExactly4MiB) {
  std::unique_ptr<TlsClient> client = Connect();
  ASSERT_NE(client, nullptr);
  const std::string body(4 << 20, 'x');
  ASSERT_TRUE(client->Send(Post("/admit", body)));
  absl::StatusOr<Reply> reply = client->Read();
  ASSERT_THAT(reply, IsOk());
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body.size(), body.size());
}

TEST_F(HttpsServerTest, StartNamesTheFlagOfAFileItCannotUse) {
  EXPECT_THAT(HttpsServer::Start("127.0.0.1:0", *dir_ + "/missing.pem", Key(), Handler()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("webhook-cert")));
  EXPECT_THAT(HttpsServer::Start("127.0.0.1:0", Cert(), Ca(), Handler()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("webhook-key")));
  EXPECT_THAT(HttpsServer::Start("127.0.0.1", Cert(), Key(), Handler()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("webhook-listen")));
}

TEST_F(HttpsServerTest, StartIsUnavailableOnAPortInUse) {
  EXPECT_THAT(
      HttpsServer::Start(absl::StrCat("127.0.0.1:", server_->port()), Cert(), Key(), Handler()),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("webhook-listen")));
}

TEST_F(HttpsServerTest, StopsCleanly) {
  const int port = server_->port();
  {
    std::unique_ptr<TlsClient> client = Connect();
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(
        client->Send("GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"));
    absl::StatusOr<Reply> reply = client->Read();
    ASSERT_THAT(reply, IsOk());
    EXPECT_EQ(reply->status, 200);
  }
  server_.reset();
  EXPECT_THAT(TlsClient::Connect(port, Ca(), TLS1_2_VERSION, TLS1_3_VERSION),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("connect refused")));
}

}  // namespace
}  // namespace arbiter::server
