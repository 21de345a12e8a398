#include "server/tls.h"

#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include <grpcpp/security/server_credentials.h>
#include <stdlib.h>

namespace arbiter::server {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, ": must be set"));
  std::ifstream in(path);
  if (!in.good()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": cannot read ", path));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (!absl::StrContains(text.str(), "-----BEGIN ")) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", path, " is not PEM"));
  }
  return text.str();
}

// The first value of `property`, or "".
std::string First(const grpc::AuthContext& auth, const char* property) {
  for (const grpc::string_ref& v : auth.FindPropertyValues(property)) {
    return std::string(v.data(), v.size());
  }
  return std::string();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files) {
  absl::StatusOr<std::string> cert = ReadPem(files.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, "--tls-key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(files.client_ca, "--tls-client-ca");
  if (!ca.ok()) return ca.status();
  grpc::SslServerCredentialsOptions options(GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = *ca;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::Status RestrictProcessToTls13() {
  // gRPC 1.51 pins OpenSSL's minimum protocol to TLS 1.2 and offers no way
  // to raise it, but it takes its TLS 1.2 cipher list from this variable
  // (TLS 1.3 suites are configured apart and stay as they are). The one
  // TLS 1.2 suite left needs a pre-shared key, which arbiterd never has, so
  // every TLS 1.2 handshake ends with "no shared cipher".
  if (setenv("GRPC_SSL_CIPHER_SUITES", "PSK-AES128-GCM-SHA256", 1) != 0) {
    return absl::InternalError("cannot set GRPC_SSL_CIPHER_SUITES");
  }
  return absl::OkStatus();
}

std::string PrincipalOf(const grpc::AuthContext& auth) {
  if (!auth.IsPeerAuthenticated()) return std::string();
  std::string principal = First(auth, GRPC_PEER_SPIFFE_ID_PROPERTY_NAME);
  if (principal.empty()) principal = First(auth, GRPC_PEER_URI_PROPERTY_NAME);
  if (principal.empty()) principal = First(auth, GRPC_X509_CN_PROPERTY_NAME);
  return principal;
}

}  // namespace arbiter::server
