#include "server/grpc_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include <spdlog/spdlog.h>

#include "app/arbiter.h"

namespace arbiter::server {
namespace {

std::string Bounded(absl::string_view message) {
  if (message.size() <= kMaxStatusMessageBytes) return std::string(message);
  size_t cut = kMaxStatusMessageBytes;
  // Back off continuation bytes (10xxxxxx) to the start of a character.
  while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(message.substr(0, cut), "... (", message.size() - cut, " more bytes)");
}

}  // namespace

grpc::Status UnparsedBodyStatus(absl::string_view method) {
  return grpc::Status(
      grpc::StatusCode::INTERNAL,
      absl::StrCat("request: the body does not parse as the request message of ", method));
}

grpc::Status ToGrpcStatus(const absl::Status& status, absl::string_view method) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  const std::string method_name(method);
  switch (status.code()) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kDataLoss:
      spdlog::error("{}: {}", method_name, status.ToString());
      return grpc::Status(code, "internal error; the server log has the details");
    case absl::StatusCode::kUnavailable:
      // A follower's refusal names the leader for the client to resend to.
      if (status.GetPayload(app::kLeaderPayload).has_value()) {
        return grpc::Status(code, Bounded(status.message()));
      }
      spdlog::warn("{}: {}", method_name, status.ToString());
      return grpc::Status(code,
                          "the arbiter is temporarily unavailable; retry with the same "
                          "idempotency key");
    default:
      spdlog::debug("{}: {}", method_name, status.ToString());
      return grpc::Status(code, Bounded(status.message()));
  }
}

}  // namespace arbiter::server
