// CheckAccess: the authorization step every handler takes first.
#include "absl/status/statusor.h"
#include <spdlog/spdlog.h>

#include "server/services.h"

namespace arbiter::server {

absl::Status CheckAccess(const grpc::ServerContextBase& call, const ServiceContext& ctx,
                         absl::string_view method, const Resource& resource) {
  const Caller caller = CallerOf(call, ctx.insecure);
  absl::Status status = ctx.authz->Check(caller, method, resource);
  if (!status.ok()) RecordRefusal(ctx, caller.principal, method, status);
  return status;
}

void RecordRefusal(const ServiceContext& ctx, const std::string& principal,
                   absl::string_view method, const absl::Status& status) {
  // Recorded without holding up the answer.
  const bool queued = ctx.reads->Submit([store = ctx.store, principal, method = std::string(method),
                                         code = absl::StatusCodeToString(status.code()),
                                         reason = std::string(status.message())] {
    absl::Status recorded = store->RecordAccessDenial(principal, method, code, reason);
    if (!recorded.ok()) spdlog::warn("access denial not recorded: {}", recorded.ToString());
  });
  if (!queued) {
    spdlog::warn("access denial of {} to {} not recorded: busy", std::string(method), principal);
  }
}

}  // namespace arbiter::server
