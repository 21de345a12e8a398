// Callers for tests of the application layer.
#pragma once

#include "app/authz.h"

namespace arbiter::testing {

// A plaintext development caller: may do everything, recorded as
// "unidentified".
inline app::Caller Developer() {
  app::Caller c;
  c.insecure = true;
  return c;
}

}  // namespace arbiter::testing
