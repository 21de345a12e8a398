#include "server/rpc_util.h"

#include "server/grpc_status.h"

namespace arbiter::server {

grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status,
                                     const char* method) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, method));
  return reactor;
}

}  // namespace arbiter::server
