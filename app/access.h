// Access: the authorization step every use case takes first, and the record
// of every refusal (the access_denials table), written off the caller's
// thread so that a refusal is answered at once.
//
// Thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

#include "app/authz.h"
#include "app/worker_pool.h"
#include "store/store.h"

namespace arbiter::app {

class Access {
 public:
  // The pointers must outlive this object.
  Access(const Authorizer* authz, store::Store* store, WorkerPool* reads)
      : authz_(authz), store_(store), reads_(reads) {}

  // OK, or the refusal (UNAUTHENTICATED / PERMISSION_DENIED; see
  // Authorizer::Check), which is recorded. `method` is "Service.Method".
  [[nodiscard]] absl::Status Check(const Caller& caller, absl::string_view method,
                                   const Resource& resource) const;
  // Authorizer::CheckEnforcer, with a refusal recorded against `method`.
  [[nodiscard]] absl::Status CheckEnforcer(const Caller& caller, absl::string_view method,
                                           absl::string_view field) const;
  // Records a refusal made after the access check (e.g. by the core: an
  // approver the authority rules do not name).
  void RecordRefusal(const std::string& principal, absl::string_view method,
                     const absl::Status& status) const;

  const Authorizer& authorizer() const { return *authz_; }

 private:
  const Authorizer* const authz_;
  store::Store* const store_;
  WorkerPool* const reads_;
};

}  // namespace arbiter::app
