// TLS for arbiterd: server credentials from PEM files, a process-wide TLS 1.3
// floor, and the principal an authenticated client certificate names.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/server_credentials.h>

namespace arbiter::server {

struct TlsFiles {
  std::string cert;       // Server certificate chain, PEM.
  std::string key;        // Its private key, PEM.
  std::string client_ca;  // CA bundle that client certificates must chain to, PEM.
};

// Server credentials that present `files.cert` and verify any client
// certificate against `files.client_ca`. A client certificate is requested
// but not required at the handshake, so that the health service answers
// load balancers without one; every other RPC requires one (see
// server/authz.h). INVALID_ARGUMENT naming the flag (--tls-cert, --tls-key,
// --tls-client-ca) for a file that is missing, unreadable or not PEM.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerTlsCredentials(
    const TlsFiles& files);

// Makes every gRPC TLS handshake of this process refuse anything older than
// TLS 1.3 (gRPC 1.51 has no per-server setting; see tls.cc). Call at the
// start of main(), before gRPC is used. INTERNAL if it cannot be set.
absl::Status RestrictProcessToTls13();

// The principal an authenticated peer's certificate names: its SPIFFE ID,
// else its first URI SAN, else its subject CN. Empty when the peer presented
// no verified certificate (plaintext, or TLS without a client certificate).
std::string PrincipalOf(const grpc::AuthContext& auth);

}  // namespace arbiter::server
