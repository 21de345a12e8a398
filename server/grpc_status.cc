#include "server/grpc_status.h"

#include <string>

#include <spdlog/spdlog.h>

#include "app/arbiter.h"

namespace arbiter::server {

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
        return grpc::Status(code, std::string(status.message()));
      }
      spdlog::warn("{}: {}", method_name, status.ToString());
      return grpc::Status(code,
                          "the arbiter is temporarily unavailable; retry with the same "
                          "idempotency key");
    default:
      spdlog::debug("{}: {}", method_name, status.ToString());
      return grpc::Status(code, std::string(status.message()));
  }
}

}  // namespace arbiter::server
