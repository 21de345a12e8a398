// AccessLog: refused calls, recorded by any replica.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace arbiter::store {

class AccessLog {
 public:
  virtual ~AccessLog() = default;

  // Records a refused call (not a decision: written on its own, at once).
  [[nodiscard]] virtual absl::Status RecordAccessDenial(const std::string& principal,
                                                        const std::string& method,
                                                        const std::string& code,
                                                        const std::string& reason) = 0;
};

}  // namespace arbiter::store
