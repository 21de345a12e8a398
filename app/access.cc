#include "app/access.h"

#include <spdlog/spdlog.h>

namespace arbiter::app {

absl::Status Access::Check(const Caller& caller, absl::string_view method,
                           const Resource& resource) const {
  absl::Status status = authz_->Check(caller, method, resource);
  if (!status.ok()) RecordRefusal(caller.principal, method, status);
  return status;
}

absl::Status Access::CheckEnforcer(const Caller& caller, absl::string_view method,
                                   absl::string_view field) const {
  absl::Status status = authz_->CheckEnforcer(caller, field);
  if (!status.ok()) RecordRefusal(caller.principal, method, status);
  return status;
}

void Access::RecordRefusal(const std::string& principal, absl::string_view method,
                           const absl::Status& status) const {
  // Recorded without holding up the answer.
  const bool queued = reads_->Submit([store = store_, principal, method = std::string(method),
                                      code = absl::StatusCodeToString(status.code()),
                                      reason = std::string(status.message())] {
    absl::Status recorded = store->RecordAccessDenial(principal, method, code, reason);
    if (!recorded.ok()) spdlog::warn("access denial not recorded: {}", recorded.ToString());
  });
  if (!queued) {
    spdlog::warn("access denial of {} to {} not recorded: busy", std::string(method), principal);
  }
}

}  // namespace arbiter::app
