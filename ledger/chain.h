// The ledger's hash chain and checkpoint signatures: the canonical form of an
// entry, its SHA-256 link to the previous one, chain verification, and
// Ed25519 signing of checkpoints (OpenSSL). Shared by the store, which
// appends, and by arbctl, which verifies; no I/O.
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace arbiter::ledger {

// The previous hash of entry 1.
inline constexpr char kGenesisHash[] =
    "0000000000000000000000000000000000000000000000000000000000000000";

struct Entry {
  int64_t seq = 0;      // 1, 2, 3, ... without gaps.
  absl::Time at;        // Commit time, microsecond precision.
  std::string actor;    // The principal; "arbiter" for timed events.
  std::string action;   // e.g. "request.admitted", "role.grant".
  std::string subject;  // e.g. "request/42", "team/inference".
  std::string payload;  // Canonical "k=v;k=v" (see Payload).
  std::string prev_hash;
  std::string hash;
};

// Builds a canonical payload from key/value pairs: sorted by key, "k=v"
// joined by ";", with "\\", ";" and "=" escaped by a backslash.
std::string Payload(std::vector<std::pair<std::string, std::string>> fields);
// Payload's inverse: the fields of a canonical payload, in its order.
// INVALID_ARGUMENT for a field without "=" or a dangling backslash.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePayload(
    absl::string_view payload);

// The text an entry's hash covers (everything but the hashes themselves).
std::string Canonical(const Entry& e);
// Lower-case hex SHA-256 of `text`.
std::string Sha256Hex(absl::string_view text);
// Lower-case hex SHA-256 of prev_hash, a newline and Canonical(e).
std::string HashOf(absl::string_view prev_hash, const Entry& e);

struct Verdict {
  bool ok = true;
  int64_t count = 0;      // Entries checked.
  int64_t head_seq = 0;   // Last good entry.
  std::string head_hash;  // Its hash.
  int64_t first_bad_seq = 0;
  std::string problem;
};

// Walks `entries` (ordered by seq as stored) from the link (`prev_seq`,
// `prev_hash`): genesis is (0, kGenesisHash). Names the first entry that is
// missing, out of order, not linked to its predecessor, or whose hash does
// not match its contents.
Verdict VerifyChain(const std::vector<Entry>& entries, int64_t prev_seq,
                    absl::string_view prev_hash);
// Continues a verdict with more entries (paging).
void Continue(Verdict& verdict, const std::vector<Entry>& entries);

// What a checkpoint signs.
std::string CheckpointMessage(int64_t seq, absl::string_view hash);
// Lower-case hex Ed25519 signature of `message`. INVALID_ARGUMENT if
// `private_key_pem` is not an Ed25519 private key.
absl::StatusOr<std::string> Sign(absl::string_view private_key_pem, absl::string_view message);
// OK when `signature_hex` is `public_key_pem`'s signature of `message`;
// INVALID_ARGUMENT for a bad key, DATA_LOSS for a bad signature.
absl::Status VerifySignature(absl::string_view public_key_pem, absl::string_view message,
                             absl::string_view signature_hex);

}  // namespace arbiter::ledger
