#include "server/connect_gateway.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "nlohmann/json.hpp"
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/util/json_util.h>
#include <grpc/support/time.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <sys/stat.h>

#include "server/caller.h"

namespace arbiter::server {
namespace {

namespace pb = ::google::protobuf;

constexpr absl::string_view kPackagePrefix = "arbiter.v1.";
constexpr uint8_t kFlagCompressed = 0x01;
constexpr uint8_t kFlagEndStream = 0x02;

std::string ErrorJson(const grpc::Status& status) {
  nlohmann::json error = {{"code", ConnectCodeName(status.error_code())},
                          {"message", status.error_message()}};
  // A message may quote the request's bytes: invalid UTF-8 is replaced,
  // never thrown on.
  return error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

HttpResponse UnaryError(const grpc::Status& status) {
  return {ConnectHttpStatus(status.error_code()), "application/json", ErrorJson(status)};
}

std::string Envelope(uint8_t flags, absl::string_view payload) {
  std::string out;
  out.reserve(5 + payload.size());
  out.push_back(static_cast<char>(flags));
  const auto n = static_cast<uint32_t>(payload.size());
  for (int shift = 24; shift >= 0; shift -= 8)
    out.push_back(static_cast<char>((n >> shift) & 0xff));
  out.append(payload.data(), payload.size());
  return out;
}

std::string EndOfStream(const grpc::Status& status) {
  if (status.ok()) return Envelope(kFlagEndStream, "{}");
  return Envelope(kFlagEndStream, absl::StrCat("{\"error\":", ErrorJson(status), "}"));
}

// The method a Connect path names, "/arbiter.v1.Service/Method"; null when
// it names none of arbiter.v1's.
const pb::MethodDescriptor* MethodOf(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/") || !absl::StartsWith(path, kPackagePrefix)) return nullptr;
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return nullptr;
  const pb::ServiceDescriptor* service =
      pb::DescriptorPool::generated_pool()->FindServiceByName(std::string(path.substr(0, slash)));
  if (service == nullptr) return nullptr;
  return service->FindMethodByName(std::string(path.substr(slash + 1)));
}

// A new, empty message of `type`'s generated class.
std::unique_ptr<pb::Message> NewMessage(const pb::Descriptor* type) {
  return std::unique_ptr<pb::Message>(
      pb::MessageFactory::generated_factory()->GetPrototype(type)->New());
}

// `body` (JSON or binary protobuf) as `type`'s wire bytes. INVALID_ARGUMENT
// naming what does not parse.
grpc::Status ToWire(const pb::Descriptor* type, absl::string_view body, bool json,
                    std::string* wire) {
  std::unique_ptr<pb::Message> message = NewMessage(type);
  if (json) {
    pb::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    const absl::string_view text = absl::StripAsciiWhitespace(body);
    const pb::util::Status parsed = pb::util::JsonStringToMessage(
        text.empty() ? pb::StringPiece("{}") : pb::StringPiece(text.data(), text.size()),
        message.get(), options);
    if (!parsed.ok()) {
      return {grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("request body (", type->full_name(),
                                                               "): ", parsed.message().ToString())};
    }
  } else if (!message->ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            absl::StrCat("request body: not a serialized ", type->full_name())};
  }
  *wire = message->SerializeAsString();
  return grpc::Status::OK;
}

// The reply's wire bytes in `buffer` as JSON or binary protobuf.
grpc::Status FromWire(const pb::Descriptor* type, grpc::ByteBuffer& buffer, bool json,
                      std::string* out) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return {grpc::StatusCode::INTERNAL, "unreadable reply"};
  std::string wire;
  for (const grpc::Slice& slice : slices) {
    wire.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  if (!json) {
    *out = std::move(wire);
    return grpc::Status::OK;
  }
  std::unique_ptr<pb::Message> message = NewMessage(type);
  if (!message->ParseFromString(wire)) return {grpc::StatusCode::INTERNAL, "unparsable reply"};
  out->clear();
  if (!pb::util::MessageToJsonString(*message, out).ok()) {
    return {grpc::StatusCode::INTERNAL, "reply not expressible as JSON"};
  }
  return grpc::Status::OK;
}

grpc::ByteBuffer BufferOf(const std::string& wire) {
  grpc::Slice slice(wire);
  return grpc::ByteBuffer(&slice, 1);
}

// The media type of a Content-Type value, lower case, without parameters.
std::string MediaType(const std::string& content_type) {
  return absl::AsciiStrToLower(absl::StripAsciiWhitespace(
      absl::string_view(content_type).substr(0, content_type.find(';'))));
}

// Sets `ctx`'s deadline, from now on gRPC's monotonic clock, to what the
// request asks for (Connect-Timeout-Ms) or `fallback`, and at most `limit`:
// a call, a stream above all, ends when the token it was made with expires.
// INVALID_ARGUMENT when the header is not a positive integer of at most 10
// digits.
grpc::Status SetDeadline(const HttpRequest& request, std::optional<absl::Duration> fallback,
                         absl::Duration limit, grpc::ClientContext& ctx) {
  const std::string header = request.Header("connect-timeout-ms");
  int64_t ms = absl::ToInt64Milliseconds(std::max(limit, absl::Milliseconds(1)));
  if (header.empty()) {
    if (fallback.has_value()) ms = std::min(ms, absl::ToInt64Milliseconds(*fallback));
  } else if (int64_t asked = 0;
             header.size() > 10 || !absl::SimpleAtoi(header, &asked) || asked <= 0) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "Connect-Timeout-Ms: want a positive integer of at most 10 digits"};
  } else {
    ms = std::min(ms, asked);
  }
  ctx.set_deadline(
      gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN)));
  return grpc::Status::OK;
}

// Checks the protocol headers and the caller's token, and sets up `ctx` to
// call for that caller until the token expires; the caller's principal goes
// to `principal`.
grpc::Status Prepare(const HttpRequest& request, BearerVerifier* verifier, absl::Time now,
                     std::optional<absl::Duration> default_timeout, grpc::ClientContext& ctx,
                     std::string* principal) {
  const std::string version = request.Header("connect-protocol-version");
  if (!version.empty() && version != "1") {
    return {grpc::StatusCode::INVALID_ARGUMENT, "Connect-Protocol-Version: want 1"};
  }
  if (verifier == nullptr) {
    return {grpc::StatusCode::UNAUTHENTICATED,
            "this arbiterd has no console sign-in (--oidc-issuer, --oidc-audience, --oidc-jwks)"};
  }
  const std::string header = request.Header("authorization");
  absl::string_view authorization = header;
  if (!absl::ConsumePrefix(&authorization, "Bearer ") || authorization.empty()) {
    return {grpc::StatusCode::UNAUTHENTICATED, "Authorization: want \"Bearer <OIDC ID token>\""};
  }
  absl::StatusOr<BearerIdentity> identity = verifier->Verify(authorization, now);
  if (!identity.ok()) {
    return {grpc::StatusCode::UNAUTHENTICATED, std::string(identity.status().message())};
  }
  grpc::Status timeout = SetDeadline(request, default_timeout, identity->expires - now, ctx);
  if (!timeout.ok()) return timeout;
  ActAsCaller(ctx, identity->principal, identity->groups);
  *principal = identity->principal;
  return grpc::Status::OK;
}

const char* ContentTypeOfFile(absl::string_view path) {
  static const std::pair<absl::string_view, const char*> kTypes[] = {
      {".html", "text/html; charset=utf-8"},
      {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},
      {".json", "application/json"},
      {".svg", "image/svg+xml"},
      {".png", "image/png"},
      {".ico", "image/x-icon"},
      {".woff2", "font/woff2"},
      {".map", "application/json"},
  };
  for (const auto& [suffix, type] : kTypes) {
    if (absl::EndsWith(path, suffix)) return type;
  }
  return "application/octet-stream";
}

// True for a relative path of plain names: letters, digits, '-', '_', '.',
// no empty, "." or ".." component.
bool SafeRelativePath(absl::string_view path) {
  if (path.empty() || path.size() > 200) return false;
  for (char c : path) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.' &&
        c != '/') {
      return false;
    }
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

// A regular file's contents; nullopt for anything else (a directory too).
std::optional<std::string> ReadFile(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// What every console response says: no sniffing, no framing, scripts only
// from the console itself.
void AddSecurityHeaders(HttpResponse& response) {
  response.headers.emplace_back("X-Content-Type-Options", "nosniff");
  response.headers.emplace_back("X-Frame-Options", "DENY");
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
  response.headers.emplace_back(
      "Content-Security-Policy",
      "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
      "frame-ancestors 'none'");
}

}  // namespace

const char* ConnectCodeName(int grpc_code) {
  static const char* const kNames[] = {"ok",
                                       "canceled",
                                       "unknown",
                                       "invalid_argument",
                                       "deadline_exceeded",
                                       "not_found",
                                       "already_exists",
                                       "permission_denied",
                                       "resource_exhausted",
                                       "failed_precondition",
                                       "aborted",
                                       "out_of_range",
                                       "unimplemented",
                                       "internal",
                                       "unavailable",
                                       "data_loss",
                                       "unauthenticated"};
  if (grpc_code < 0 || grpc_code > 16) return "unknown";
  return kNames[grpc_code];
}

int ConnectHttpStatus(int grpc_code) {
  switch (static_cast<grpc::StatusCode>(grpc_code)) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::FAILED_PRECONDITION:
      return 400;
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    default:
      return 500;  // unknown, internal, data_loss.
  }
}

ConnectGateway::ConnectGateway(std::shared_ptr<grpc::Channel> channel, BearerVerifier* verifier,
                               Clock* clock, ConnectGatewayOptions options)
    : channel_(std::move(channel)),
      verifier_(verifier),
      clock_(clock),
      options_(std::move(options)) {}

HttpResponse ConnectGateway::Handle(const HttpRequest& request) {
  HttpResponse response;
  if (request.path == "/healthz") {
    response = {200, "text/plain", "ok\n"};
  } else if (absl::StartsWith(request.path, "/arbiter.")) {
    const pb::MethodDescriptor* method = MethodOf(request.path);
    const std::string media = MediaType(request.Header("content-type"));
    if (request.method != "POST") {
      response = {405, "text/plain", "Connect calls are POST\n"};
      response.headers.emplace_back("Allow", "POST");
    } else if (method == nullptr) {
      response = UnaryError(
          {grpc::StatusCode::UNIMPLEMENTED, absl::StrCat("no method ", request.path.substr(1))});
      response.status = 404;
    } else if (method->client_streaming()) {
      response = UnaryError(
          {grpc::StatusCode::UNIMPLEMENTED,
           absl::StrCat(method->full_name(), " streams from the client: call it over gRPC")});
    } else if (method->server_streaming()) {
      if (media != "application/connect+json" && media != "application/connect+proto") {
        response = {
            415, "text/plain",
            "a streaming call wants application/connect+json or application/connect+proto\n"};
      } else {
        response = ServerStream(
            request, absl::StrCat("/", method->service()->full_name(), "/", method->name()),
            media == "application/connect+json");
      }
    } else if (media != "application/json" && media != "application/proto") {
      response = {415, "text/plain", "a unary call wants application/json or application/proto\n"};
    } else {
      response =
          Unary(request, absl::StrCat("/", method->service()->full_name(), "/", method->name()),
                media == "application/json");
    }
  } else if (request.method != "GET" && request.method != "HEAD") {
    response = {405, "text/plain", "the console's files are read with GET\n"};
    response.headers.emplace_back("Allow", "GET");
  } else {
    response = Asset(request.path);
  }
  AddSecurityHeaders(response);
  return response;
}

HttpResponse ConnectGateway::Unary(const HttpRequest& request, const std::string& path, bool json) {
  const pb::MethodDescriptor* method = MethodOf(path);
  grpc::ClientContext ctx;
  std::string principal;
  grpc::Status status =
      Prepare(request, verifier_, clock_->TimeNow(), options_.default_timeout, ctx, &principal);
  std::string wire;
  if (status.ok()) status = ToWire(method->input_type(), request.body, json, &wire);
  if (!status.ok()) return UnaryError(status);

  grpc::GenericStub stub(channel_);
  const grpc::ByteBuffer sent = BufferOf(wire);
  grpc::ByteBuffer received;
  absl::Notification done;
  stub.UnaryCall(&ctx, path, grpc::StubOptions(), &sent, &received, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  done.WaitForNotification();
  std::string body;
  if (status.ok()) status = FromWire(method->output_type(), received, json, &body);
  if (!status.ok()) return UnaryError(status);
  return {200, json ? "application/json" : "application/proto", std::move(body)};
}

HttpResponse ConnectGateway::ServerStream(const HttpRequest& request, const std::string& path,
                                          bool json) {
  HttpResponse response;
  response.content_type = json ? "application/connect+json" : "application/connect+proto";
  const pb::MethodDescriptor* method = MethodOf(path);

  // What a stream that ends before its first reply says.
  auto fail = [&response](const grpc::Status& status) {
    response.body = EndOfStream(status);
    return response;
  };
  const absl::string_view body = request.body;
  if (body.size() < 5) return fail({grpc::StatusCode::INVALID_ARGUMENT, "request: no envelope"});
  const auto flags = static_cast<uint8_t>(body[0]);
  uint32_t length = 0;
  for (int i = 1; i <= 4; ++i) length = (length << 8) | static_cast<uint8_t>(body[i]);
  if ((flags & kFlagCompressed) != 0) {
    return fail(
        {grpc::StatusCode::INVALID_ARGUMENT, "request: compressed envelopes are not served"});
  }
  if (length != body.size() - 5) {
    return fail({grpc::StatusCode::INVALID_ARGUMENT,
                 "request: the envelope's length is not the rest of the body"});
  }
  auto ctx = std::make_shared<grpc::ClientContext>();
  std::string principal;
  grpc::Status status =
      Prepare(request, verifier_, clock_->TimeNow(), std::nullopt, *ctx, &principal);
  std::string wire;
  if (status.ok()) status = ToWire(method->input_type(), body.substr(5), json, &wire);
  if (!status.ok()) return fail(status);
  response.stream = [this, ctx, principal, path, wire = std::move(wire),
                     output = method->output_type(), json](const StreamWriter& write) {
    // Registered here, where the stream runs, so that a client gone before
    // its body began holds no place.
    grpc::Status refused = Register(ctx.get(), principal);
    if (!refused.ok()) {
      write(EndOfStream(refused));
      return;
    }
    // The library runs this outside its own exception handling: nothing may
    // escape it.
    try {
      RunStream(*ctx, path, wire, output, json, write);
    } catch (const std::exception& e) {
      ctx->TryCancel();
      write(EndOfStream({grpc::StatusCode::INTERNAL, e.what()}));
    }
    absl::MutexLock lock(&mu_);
    streams_.erase(ctx.get());
  };
  return response;
}

void ConnectGateway::RunStream(grpc::ClientContext& ctx, const std::string& path,
                               const std::string& wire, const pb::Descriptor* output, bool json,
                               const StreamWriter& write) {
  grpc::CompletionQueue cq;
  grpc::GenericStub stub(channel_);
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call = stub.PrepareCall(&ctx, path, &cq);
  void* tag = nullptr;
  bool ok = false;
  // Each step is one operation on the queue, waited for.
  auto step = [&](auto start) {
    start(&tag);
    return cq.Next(&tag, &ok) && ok;
  };
  grpc::ByteBuffer sent = BufferOf(wire);
  bool open = step([&](void* t) { call->StartCall(t); }) &&
              step([&](void* t) { call->Write(sent, t); }) &&
              step([&](void* t) { call->WritesDone(t); });
  bool client_gone = false;
  grpc::Status status;
  while (open) {
    grpc::ByteBuffer received;
    if (!step([&](void* t) { call->Read(&received, t); })) break;
    std::string message;
    status = FromWire(output, received, json, &message);
    if (!status.ok() || !write(Envelope(0, message))) {
      client_gone = status.ok();
      ctx.TryCancel();
      open = false;
    }
  }
  grpc::Status finished;
  step([&](void* t) { call->Finish(&finished, t); });
  if (status.ok()) status = finished;
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!client_gone) write(EndOfStream(status));
}

HttpResponse ConnectGateway::Asset(const std::string& path) const {
  if (options_.assets_dir.empty()) return {404, "text/plain", "this arbiterd serves no console\n"};
  std::string relative = path.size() > 1 ? path.substr(1) : "index.html";
  if (!SafeRelativePath(relative)) return {404, "text/plain", "no such file\n"};
  std::optional<std::string> file = ReadFile(absl::StrCat(options_.assets_dir, "/", relative));
  if (!file.has_value() && relative.find('.') == std::string::npos) {
    // A console route (/team/ml): the page that routes it.
    relative = "index.html";
    file = ReadFile(absl::StrCat(options_.assets_dir, "/index.html"));
  }
  if (!file.has_value()) return {404, "text/plain", "no such file\n"};
  HttpResponse response{200, ContentTypeOfFile(relative), *std::move(file)};
  response.headers.emplace_back("Cache-Control", "no-cache");
  return response;
}

grpc::Status ConnectGateway::Register(grpc::ClientContext* ctx, const std::string& principal) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return {grpc::StatusCode::UNAVAILABLE, "arbiterd is stopping"};
  if (static_cast<int>(streams_.size()) >= options_.max_streams) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("the console serves at most ", options_.max_streams, " streams at once")};
  }
  const auto mine = std::count_if(streams_.begin(), streams_.end(),
                                  [&](const auto& s) { return s.second == principal; });
  if (mine >= options_.max_streams_per_caller) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("at most ", options_.max_streams_per_caller,
                         " streams at once per caller: close another tab")};
  }
  streams_.emplace(ctx, principal);
  return grpc::Status::OK;
}

void ConnectGateway::CancelStreams() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
  for (const auto& [ctx, principal] : streams_) ctx->TryCancel();
}

int ConnectGateway::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(streams_.size());
}

}  // namespace arbiter::server
