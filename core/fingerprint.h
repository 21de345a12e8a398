// A stable 64-bit fingerprint of a capacity request's body, used to tell an
// idempotent replay (same key, same body) from a key reused with a different
// body. Stable across processes and versions: FNV-1a over a canonical
// encoding, so it can be stored in the database.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

#include "core/model.h"

namespace arbiter::core {

// Appends one field to a canonical encoding, length-prefixed so that no two
// different field sequences encode alike.
void AppendField(std::string& out, absl::string_view value);
void AppendField(std::string& out, int64_t value);

// Fingerprints every field of `spec` except `idempotency_key`.
uint64_t FingerprintRequestSpec(const CapacityRequestSpec& spec);

}  // namespace arbiter::core
