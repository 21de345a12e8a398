#include "server/bearer_auth.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include <cjose/cjose.h>
#include <sys/stat.h>

namespace arbiter::server {
namespace {

using Json = nlohmann::json;

const std::set<std::string>& AsymmetricAlgorithms() {
  static const auto* algs = new std::set<std::string>{"RS256", "RS384", "RS512", "PS256", "PS384",
                                                      "PS512", "ES256", "ES384", "ES512"};
  return *algs;
}

struct JwkDeleter {
  void operator()(cjose_jwk_t* jwk) const { cjose_jwk_release(jwk); }
};
struct JwsDeleter {
  void operator()(cjose_jws_t* jws) const { cjose_jws_release(jws); }
};
using JwkPtr = std::unique_ptr<cjose_jwk_t, JwkDeleter>;
using JwsPtr = std::unique_ptr<cjose_jws_t, JwsDeleter>;

absl::Status Unauthenticated(absl::string_view why) {
  return absl::UnauthenticatedError(absl::StrCat("bearer token: ", why));
}

std::string CjoseMessage(const cjose_err& err) {
  return err.message != nullptr ? err.message : "unknown cjose error";
}

// A NumericDate claim (seconds since the epoch), when present and a number.
std::optional<absl::Time> DateClaim(const Json& claims, const char* name) {
  auto it = claims.find(name);
  if (it == claims.end() || !it->is_number()) return std::nullopt;
  return absl::FromUnixSeconds(it->get<int64_t>());
}

}  // namespace

struct BearerVerifier::KeySet {
  // By key id; a key without one is stored under "".
  std::map<std::string, JwkPtr> by_kid;
};

namespace {

absl::StatusOr<std::shared_ptr<const BearerVerifier::KeySet>> ParseKeySet(absl::string_view text) {
  Json jwks = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (jwks.is_discarded() || !jwks.is_object() || !jwks.contains("keys") ||
      !jwks["keys"].is_array()) {
    return absl::InvalidArgumentError("oidc-jwks: want a JSON Web Key Set, {\"keys\": [...]}");
  }
  auto set = std::make_shared<BearerVerifier::KeySet>();
  for (const Json& key : jwks["keys"]) {
    if (!key.is_object()) continue;
    if (key.contains("use") && key["use"] != "sig") continue;  // An encryption key.
    const std::string text_key = key.dump();
    cjose_err err{};
    JwkPtr jwk(cjose_jwk_import(text_key.data(), text_key.size(), &err));
    if (jwk == nullptr) continue;  // A key type cjose does not know.
    const cjose_jwk_kty_t kty = cjose_jwk_get_kty(jwk.get(), &err);
    if (kty != CJOSE_JWK_KTY_RSA && kty != CJOSE_JWK_KTY_EC) continue;  // Symmetric.
    const std::string kid = key.contains("kid") && key["kid"].is_string() ? key["kid"] : "";
    set->by_kid[kid] = std::move(jwk);
  }
  if (set->by_kid.empty()) {
    return absl::InvalidArgumentError("oidc-jwks: the key set holds no RSA or EC signing key");
  }
  return std::shared_ptr<const BearerVerifier::KeySet>(std::move(set));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("oidc-jwks: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

BearerVerifier::BearerVerifier(BearerOptions options) : options_(std::move(options)) {}
BearerVerifier::~BearerVerifier() = default;

absl::StatusOr<std::unique_ptr<BearerVerifier>> BearerVerifier::Create(BearerOptions options) {
  if (options.issuer.empty()) return absl::InvalidArgumentError("oidc-issuer: required");
  if (options.audience.empty()) return absl::InvalidArgumentError("oidc-audience: required");
  if (options.jwks_file.empty()) return absl::InvalidArgumentError("oidc-jwks: required");
  if (options.principal_claim.empty()) {
    return absl::InvalidArgumentError("oidc-principal-claim: must not be empty");
  }
  absl::StatusOr<std::string> text = ReadWholeFile(options.jwks_file);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::shared_ptr<const KeySet>> keys = ParseKeySet(*text);
  if (!keys.ok()) return keys.status();
  auto verifier = std::unique_ptr<BearerVerifier>(new BearerVerifier(std::move(options)));
  absl::MutexLock lock(&verifier->mu_);
  verifier->keys_ = *std::move(keys);
  struct stat st {};
  if (stat(verifier->options_.jwks_file.c_str(), &st) == 0) {
    verifier->keys_mtime_ = st.st_mtim;
    verifier->keys_size_ = st.st_size;
  }
  return verifier;
}

void BearerVerifier::MaybeReload() {
  struct stat st {};
  if (stat(options_.jwks_file.c_str(), &st) != 0) return;  // Keep the last good set.
  if (st.st_mtim.tv_sec == keys_mtime_.tv_sec && st.st_mtim.tv_nsec == keys_mtime_.tv_nsec &&
      st.st_size == keys_size_) {
    return;
  }
  keys_mtime_ = st.st_mtim;
  keys_size_ = st.st_size;
  absl::StatusOr<std::string> text = ReadWholeFile(options_.jwks_file);
  if (!text.ok()) return;
  absl::StatusOr<std::shared_ptr<const KeySet>> keys = ParseKeySet(*text);
  if (keys.ok()) keys_ = *std::move(keys);
}

absl::StatusOr<BearerIdentity> BearerVerifier::Verify(absl::string_view token, absl::Time now) {
  std::shared_ptr<const KeySet> keys;
  {
    absl::MutexLock lock(&mu_);
    MaybeReload();
    keys = keys_;
  }
  if (std::count(token.begin(), token.end(), '.') != 2) {
    return Unauthenticated("not a JWS in compact form (header.payload.signature)");
  }
  cjose_err err{};
  JwsPtr jws(cjose_jws_import(token.data(), token.size(), &err));
  if (jws == nullptr) return Unauthenticated(absl::StrCat("malformed: ", CjoseMessage(err)));
  cjose_header_t* header = cjose_jws_get_protected(jws.get());
  const char* alg = cjose_header_get(header, CJOSE_HDR_ALG, &err);
  if (alg == nullptr || AsymmetricAlgorithms().count(alg) == 0) {
    return Unauthenticated(absl::StrCat("algorithm \"", alg != nullptr ? alg : "",
                                        "\" is not accepted (want RS*, PS* or ES*)"));
  }
  const char* kid = cjose_header_get(header, CJOSE_HDR_KID, &err);
  const cjose_jwk_t* key = nullptr;
  if (kid != nullptr) {
    auto it = keys->by_kid.find(kid);
    if (it != keys->by_kid.end()) key = it->second.get();
  } else if (keys->by_kid.size() == 1) {
    key = keys->by_kid.begin()->second.get();
  }
  if (key == nullptr) {
    return Unauthenticated(
        absl::StrCat("no key \"", kid != nullptr ? kid : "", "\" in the issuer's key set"));
  }
  if (!cjose_jws_verify(jws.get(), key, &err)) {
    return Unauthenticated("the signature does not verify");
  }
  uint8_t* plaintext = nullptr;
  size_t plaintext_len = 0;
  if (!cjose_jws_get_plaintext(jws.get(), &plaintext, &plaintext_len, &err)) {
    return Unauthenticated(absl::StrCat("no payload: ", CjoseMessage(err)));
  }
  return IdentityOf(absl::string_view(reinterpret_cast<const char*>(plaintext), plaintext_len),
                    now);
}

absl::StatusOr<BearerIdentity> BearerVerifier::IdentityOf(absl::string_view text,
                                                          absl::Time now) const {
  Json claims = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (claims.is_discarded() || !claims.is_object()) {
    return Unauthenticated("the claims are not a JSON object");
  }
  if (!claims.contains("iss") || claims["iss"] != options_.issuer) {
    return Unauthenticated(absl::StrCat("issuer is not ", options_.issuer));
  }
  const Json& aud = claims.contains("aud") ? claims["aud"] : Json();
  const bool audience_ok =
      aud == options_.audience ||
      (aud.is_array() && std::find(aud.begin(), aud.end(), options_.audience) != aud.end());
  if (!audience_ok) return Unauthenticated(absl::StrCat("audience is not ", options_.audience));
  const std::optional<absl::Time> expires = DateClaim(claims, "exp");
  if (!expires.has_value()) return Unauthenticated("no expiry (exp)");
  if (*expires + options_.leeway <= now) {
    return Unauthenticated(absl::StrCat("expired at ", absl::FormatTime(*expires)));
  }
  const std::optional<absl::Time> not_before = DateClaim(claims, "nbf");
  if (not_before.has_value() && *not_before - options_.leeway > now) {
    return Unauthenticated(absl::StrCat("not valid before ", absl::FormatTime(*not_before)));
  }
  auto subject = claims.find(options_.principal_claim);
  if (subject == claims.end() || !subject->is_string() || subject->get<std::string>().empty()) {
    return Unauthenticated(
        absl::StrCat("no principal in claim \"", options_.principal_claim, "\""));
  }
  BearerIdentity identity;
  identity.principal = absl::StrCat(options_.principal_prefix, subject->get<std::string>());
  identity.expires = *expires;
  auto groups = claims.find(options_.groups_claim);
  if (groups != claims.end() && groups->is_array()) {
    for (const Json& group : *groups) {
      // A group name is one line of printable text: the gateway passes the
      // groups to the service one per line (server/caller.h).
      if (!group.is_string()) continue;
      const std::string name = group.get<std::string>();
      const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
        return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
      });
      if (!name.empty() && printable) identity.groups.push_back(name);
    }
  }
  return identity;
}

}  // namespace arbiter::server
