// A stable 64-bit fingerprint of a capacity request's body, used to tell an
// idempotent replay (same key, same body) from a key reused with a different
// body. Stable across processes and versions: FNV-1a over a canonical
// encoding, so it can be stored in the database.
#pragma once

#include <cstdint>

#include "core/model.h"

namespace arbiter::core {

// Fingerprints every field of `spec` except `idempotency_key`.
uint64_t FingerprintRequestSpec(const CapacityRequestSpec& spec);

}  // namespace arbiter::core
