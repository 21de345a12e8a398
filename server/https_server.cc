#include "server/https_server.h"

#include <cstdint>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "core/status_macros.h"

namespace arbiter::server {
namespace {

constexpr int64_t kMaxBody = 4 << 20;
constexpr time_t kIoTimeoutSeconds = 10;
// The API server reuses its connections to a webhook; a bound on the requests
// per connection also bounds what a client that ignores `Connection: close`
// can make the server parse.
constexpr size_t kMaxRequestsPerConnection = 100;

std::string OpenSslError() {
  char buf[256];
  ERR_error_string_n(ERR_get_error(), buf, sizeof buf);
  return buf;
}

// What `HttpsServer::Start` sets up in the library's `SSL_CTX`: the options
// cpp-httplib's file-path constructor sets (no compression, no session
// resumption on renegotiation), but TLS 1.2 at least where it allows 1.1, and
// a key that is checked against the certificate.
absl::Status ConfigureTls(SSL_CTX& ctx, const std::string& cert_file, const std::string& key_file,
                          absl::string_view flag) {
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_SESSION_RESUMPTION_ON_RENEGOTIATION);
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  if (SSL_CTX_use_certificate_chain_file(&ctx, cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "-cert: cannot use ", cert_file, ": ", OpenSslError()));
  }
  if (SSL_CTX_use_PrivateKey_file(&ctx, key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(&ctx) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, "-key: cannot use ", key_file, ": ", OpenSslError()));
  }
  return absl::OkStatus();
}

// The body length a request declares: nullopt when it declares none, or
// declares it in a way this server does not accept (chunked, unparsable,
// negative or repeated).
std::optional<int64_t> DeclaredLength(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding") || req.get_header_value_count("Content-Length") != 1) {
    return std::nullopt;
  }
  int64_t length = 0;
  if (!absl::SimpleAtoi(req.get_header_value("Content-Length"), &length) || length < 0) {
    return std::nullopt;
  }
  return length;
}

// The methods whose body cpp-httplib 0.11.4 reads before routing
// (`detail::expect_content`), PRI aside.
bool LibraryReadsBody(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

HttpRequest ToHttpRequest(const httplib::Request& req) {
  // `target` is the path as sent (`path` is percent-decoded): the handler
  // routes on what the client wrote.
  HttpRequest out{req.method, req.target.substr(0, req.target.find('?')), req.body, {}};
  out.headers.reserve(req.headers.size());
  for (const auto& [name, value] : req.headers) {
    out.headers.emplace_back(absl::AsciiStrToLower(name), value);
  }
  return out;
}

void SetResponse(HttpResponse from, httplib::Response& to) {
  to.status = from.status;
  for (const auto& [name, value] : from.headers) to.set_header(name, value);
  if (!from.stream) {
    to.set_content(from.body, from.content_type);
    return;
  }
  to.set_chunked_content_provider(
      from.content_type,
      [stream = std::move(from.stream)](size_t /*offset*/, httplib::DataSink& sink) {
        stream([&sink](absl::string_view part) {
          return part.empty() || sink.write(part.data(), part.size());
        });
        sink.done();
        return true;
      });
}

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return value;
  }
  return "";
}

HttpsServer::HttpsServer() = default;

absl::StatusOr<std::unique_ptr<HttpsServer>> HttpsServer::Start(const std::string& listen_address,
                                                                const std::string& cert_file,
                                                                const std::string& key_file,
                                                                Handler handler, int threads,
                                                                absl::string_view flag) {
  const std::string listen_flag = absl::StrCat(flag, "-listen");
  ARBITER_ASSIGN_OR_RETURN(net::ListenAddress address,
                           net::ParseListenAddress(listen_address, listen_flag));
  auto server = std::unique_ptr<HttpsServer>(new HttpsServer());
  absl::Status tls = absl::OkStatus();
  server->server_ = std::make_unique<httplib::SSLServer>([&](SSL_CTX& ctx) {
    tls = ConfigureTls(ctx, cert_file, key_file, flag);
    return tls.ok();
  });
  if (!tls.ok()) {
    return tls;
  }
  httplib::SSLServer& http = *server->server_;
  if (!http.is_valid()) {
    return absl::InternalError(
        absl::StrCat(flag, ": cannot create a TLS context: ", OpenSslError()));
  }
  // Each of these bounds one socket operation (the TLS handshake included),
  // and the keep-alive timeout the wait for a connection's next request, as
  // the old server's SO_RCVTIMEO/SO_SNDTIMEO of 10 s did.
  http.set_read_timeout(kIoTimeoutSeconds);
  http.set_write_timeout(kIoTimeoutSeconds);
  http.set_keep_alive_timeout(kIoTimeoutSeconds);
  http.set_keep_alive_max_count(kMaxRequestsPerConnection);
  // A second guard: the pre-routing handler below already refuses longer bodies.
  http.set_payload_max_length(static_cast<size_t>(kMaxBody));
  // Accepted connections queue (unbounded) for a fixed pool: with the old
  // server they queued in the listen backlog instead.
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };

  // cpp-httplib 0.11.4 reads a chunked body, or one without a Content-Length,
  // with no bound (`payload_max_length` caps only a declared length), and reads
  // until the peer closes when a DELETE, PUT or PATCH has no Content-Length.
  // The pre-routing handler runs after the head and before any of the body is
  // read: it refuses what the old server refused, answers every request whose
  // body the library would not read or need not read, and leaves to the
  // library only bodies of a declared length of at most 4 MiB.
  //
  // The library cannot be told to close a connection after a reply, so a
  // refusal says `Connection: close`, as the old server's did; a client that
  // goes on sending has its unread body parsed as requests (400 each), at most
  // `kMaxRequestsPerConnection` of them.
  http.set_pre_routing_handler(
      [handler](const httplib::Request& req,
                httplib::Response& res) -> httplib::Server::HandlerResponse {
        const std::optional<int64_t> length = DeclaredLength(req);
        if (req.method == "POST" && !length.has_value()) {
          SetResponse({411, "text/plain", "a POST needs a Content-Length of at most 4 MiB\n"}, res);
          res.set_header("Connection", "close");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (length.has_value() && *length > kMaxBody) {
          SetResponse({413, "text/plain", "a body may be at most 4 MiB\n"}, res);
          res.set_header("Connection", "close");
          return httplib::Server::HandlerResponse::Handled;
        }
        if (LibraryReadsBody(req.method) && length.value_or(0) > 0) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        SetResponse(handler(ToHttpRequest(req)), res);
        if (req.has_header("Transfer-Encoding") ||
            (req.has_header("Content-Length") && length.value_or(1) > 0)) {
          // A body left unread (chunked, of a method with no body, or of a
          // length that does not parse).
          res.set_header("Connection", "close");
        }
        return httplib::Server::HandlerResponse::Handled;
      });
  const auto with_body = [handler](const httplib::Request& req, httplib::Response& res) {
    SetResponse(handler(ToHttpRequest(req)), res);
  };
  http.Post(".*", with_body);
  http.Put(".*", with_body);
  http.Patch(".*", with_body);
  http.Delete(".*", with_body);

  ARBITER_ASSIGN_OR_RETURN(server->listener_, net::HttpListener::Start(http, address, listen_flag));
  return server;
}

HttpsServer::~HttpsServer() = default;

}  // namespace arbiter::server
