#include "clients/common/channel.h"

#include <fstream>
#include <sstream>
#include <utility>

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
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 30000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return grpc::CreateCustomChannel(endpoint, creds, args);
}

std::string LeaderNamedIn(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  const std::string& message = status.error_message();
  const size_t at = message.find("leader=");
  if (at == std::string::npos) return "";
  const size_t from = at + std::string("leader=").size();
  const size_t to = message.find_first_of(" ;,)", from);
  return message.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

LeaderChannel::LeaderChannel(std::string endpoint, ChannelFiles files,
                             std::shared_ptr<grpc::Channel> first)
    : files_(std::move(files)), address_(std::move(endpoint)), channel_(std::move(first)) {}

std::shared_ptr<grpc::Channel> LeaderChannel::Get() const {
  std::lock_guard<std::mutex> lock(mu_);
  return channel_;
}

std::string LeaderChannel::address() const {
  std::lock_guard<std::mutex> lock(mu_);
  return address_;
}

bool LeaderChannel::Follow(const grpc::Status& status) {
  const std::string leader = LeaderNamedIn(status);
  if (leader.empty()) return false;
  std::lock_guard<std::mutex> lock(mu_);
  if (leader == address_) return false;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> opened = OpenChannel(leader, files_);
  if (!opened.ok()) return false;
  address_ = leader;
  channel_ = *std::move(opened);
  return true;
}

absl::Status StatusOf(const grpc::Status& status) {
  return status.ok() ? absl::OkStatus()
                     : absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                    status.error_message());
}

std::unique_ptr<grpc::ClientContext> Context() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

}  // namespace arbiter::clients
