#include "clients/common/channel.h"

#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

namespace arbiter::clients {
namespace {

bool ReadFile(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& endpoint,
                                                           const ChannelFiles& files) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!files.ca_file.empty() || !files.cert_file.empty() || !files.key_file.empty()) {
    grpc::SslCredentialsOptions ssl;
    if (!ReadFile(files.ca_file, ssl.pem_root_certs) ||
        !ReadFile(files.cert_file, ssl.pem_cert_chain) ||
        !ReadFile(files.key_file, ssl.pem_private_key)) {
      return absl::InvalidArgumentError("--tls-ca, --tls-cert and --tls-key must all be readable");
    }
    creds = grpc::SslCredentials(ssl);
  }
  return grpc::CreateChannel(endpoint, creds);
}

}  // namespace arbiter::clients
