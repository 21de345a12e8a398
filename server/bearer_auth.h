// BearerVerifier: verifies the OIDC ID tokens (JWS compact serialisation) that
// browsers present to the console as `Authorization: Bearer <token>`, and
// maps them to the principal and groups that authorization (app/authz.h)
// knows from client certificates.
//
// Signatures are checked with cjose (Debian's libcjose, the JOSE library of
// mod_auth_openidc) against the issuer's JSON Web Key Set, read from a file
// that is re-read when it changes (key rotation: write the new set beside
// the old key, then drop the old key once its tokens have expired). Only
// asymmetric algorithms are accepted (RS256/384/512, PS256/384/512,
// ES256/384/512): "none" and the HMAC algorithms are refused, whatever keys
// the set holds.
//
// A token is accepted when, beside its signature:
//   - `iss` equals the configured issuer;
//   - `aud` (a string or an array) contains the configured audience;
//   - `exp` is present and not past, and `nbf`, when present, is not ahead,
//     each with `leeway` for clock skew;
//   - the principal claim is a non-empty string.
// The principal is `principal_prefix` + the principal claim; the groups are
// the groups claim's strings (absent: none).
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <ctime>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace arbiter::server {

struct BearerOptions {
  // The `iss` every token must carry, e.g. "https://login.example.com".
  std::string issuer;
  // The audience every token must name in `aud`: the console's client id.
  std::string audience;
  // The issuer's JSON Web Key Set ({"keys": [...]}), as a file.
  std::string jwks_file;
  // The claim naming the caller, and what goes before it to make the
  // principal: with "spiffe://arbiter.local/" and a `sub` of "alice", the
  // caller is the principal of alice's client certificate.
  std::string principal_claim = "sub";
  std::string principal_prefix;
  // The claim listing the caller's groups (an array of strings).
  std::string groups_claim = "groups";
  absl::Duration leeway = absl::Seconds(60);
};

// Who a verified token speaks for.
struct BearerIdentity {
  std::string principal;
  std::vector<std::string> groups;
  absl::Time expires;
};

class BearerVerifier {
 public:
  // Reads the key set. INVALID_ARGUMENT naming the flag (`oidc-issuer`,
  // `oidc-audience`, `oidc-jwks`) when one is missing, the file cannot be
  // read, or it holds no usable signing key.
  static absl::StatusOr<std::unique_ptr<BearerVerifier>> Create(BearerOptions options);
  ~BearerVerifier();

  // The identity `token` speaks for at `now`. UNAUTHENTICATED saying why
  // (malformed, unknown key, bad signature, wrong issuer or audience,
  // expired, not yet valid, no principal). Re-reads the key set first when
  // its file changed; a set that no longer parses keeps the last good one.
  absl::StatusOr<BearerIdentity> Verify(absl::string_view token, absl::Time now);

  // The parsed key set (defined in the .cc).
  struct KeySet;

 private:
  explicit BearerVerifier(BearerOptions options);
  // Re-reads the key set when the file's modification time or size changed.
  void MaybeReload() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The identity in verified `claims` (JSON text).
  absl::StatusOr<BearerIdentity> IdentityOf(absl::string_view claims, absl::Time now) const;

  const BearerOptions options_;
  absl::Mutex mu_;
  std::shared_ptr<const KeySet> keys_ ABSL_GUARDED_BY(mu_);
  timespec keys_mtime_ ABSL_GUARDED_BY(mu_) = {};
  int64_t keys_size_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace arbiter::server
