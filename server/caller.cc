#include "server/caller.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "server/tls.h"

namespace arbiter::server {
namespace {

// The OU values of an RFC 2253 subject such as "CN=alice,OU=ml,O=Arbiter".
std::vector<std::string> OrganizationalUnits(absl::string_view subject) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(subject, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::ConsumePrefix(&part, "OU=") && !part.empty()) out.emplace_back(part);
  }
  return out;
}

constexpr char kGatewaySecretKey[] = "arbiter-gateway-secret";
constexpr char kGatewayPrincipalKey[] = "arbiter-gateway-principal-bin";
constexpr char kGatewayGroupsKey[] = "arbiter-gateway-groups-bin";

// 32 random bytes, hex, drawn on first use. Aborts if the system has no
// randomness: a guessable secret would let anyone act as anyone.
const std::string& GatewaySecret() {
  static const std::string* secret = [] {
    unsigned char bytes[32];
    if (RAND_bytes(bytes, sizeof bytes) != 1) std::abort();
    return new std::string(
        absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(bytes), sizeof bytes)));
  }();
  return *secret;
}

std::string ValueOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                    const char* key) {
  auto it = metadata.find(key);
  return it == metadata.end() ? "" : std::string(it->second.data(), it->second.size());
}

}  // namespace

void ActAsCaller(grpc::ClientContext& ctx, const std::string& principal,
                 const std::vector<std::string>& groups) {
  ctx.AddMetadata(kGatewaySecretKey, GatewaySecret());
  ctx.AddMetadata(kGatewayPrincipalKey, principal);
  ctx.AddMetadata(kGatewayGroupsKey, absl::StrJoin(groups, "\n"));
}

app::Caller CallerOf(const grpc::ServerContextBase& ctx, bool insecure) {
  app::Caller caller;
  const auto& metadata = ctx.client_metadata();
  if (metadata.count(kGatewaySecretKey) != 0) {
    const std::string secret = ValueOf(metadata, kGatewaySecretKey);
    const std::string& expected = GatewaySecret();
    if (secret.size() != expected.size() ||
        CRYPTO_memcmp(secret.data(), expected.data(), expected.size()) != 0) {
      return caller;  // Forged: no principal.
    }
    caller.principal = ValueOf(metadata, kGatewayPrincipalKey);
    const std::string groups = ValueOf(metadata, kGatewayGroupsKey);
    if (!groups.empty()) caller.groups = absl::StrSplit(groups, '\n');
    return caller;
  }
  caller.insecure = insecure;
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return caller;
  caller.principal = PrincipalOf(*auth);
  if (caller.principal.empty()) return caller;
  for (const grpc::string_ref& s : auth->FindPropertyValues(GRPC_X509_SUBJECT_PROPERTY_NAME)) {
    for (std::string& ou : OrganizationalUnits(absl::string_view(s.data(), s.size()))) {
      caller.groups.push_back(std::move(ou));
    }
  }
  return caller;
}

}  // namespace arbiter::server
