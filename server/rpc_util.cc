#include "server/rpc_util.h"

#include "server/grpc_status.h"
#include "server/tls.h"

namespace arbiter::server {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status,
                                     const char* method) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, method));
  return reactor;
}

grpc::ServerUnaryReactor* RunRead(grpc::CallbackServerContext* ctx, WorkerPool& pool,
                                  const char* method, std::function<absl::Status()> read) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const bool queued = pool.Submit(
      [reactor, method, read = std::move(read)] { reactor->Finish(ToGrpcStatus(read(), method)); });
  if (!queued) {
    reactor->Finish(
        ToGrpcStatus(absl::ResourceExhaustedError("too many reads in flight; retry"), method));
  }
  return reactor;
}

std::string ActorOf(const grpc::ServerContextBase& ctx) {
  std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  std::string principal = auth == nullptr ? std::string() : PrincipalOf(*auth);
  return principal.empty() ? std::string(kUnidentifiedActor) : principal;
}

grpc::ServerUnaryReactor* RunCommand(grpc::CallbackServerContext* ctx, Arbiter& arbiter,
                                     const char* method, Arbiter::Decide decide,
                                     std::function<absl::Status()> respond) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  arbiter.Submit(
      std::move(decide),
      [reactor, method, respond = std::move(respond)](const absl::Status& status) {
        absl::Status result = status;
        if (result.ok() && respond) result = respond();
        reactor->Finish(ToGrpcStatus(result, method));
      },
      ActorOf(*ctx));
  return reactor;
}

}  // namespace arbiter::server
