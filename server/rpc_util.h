// How a unary handler answers: at once with an error found in conversion
// (FinishWith), or when the application replies (Answer, Echo, ListFiller),
// the status mapped once by ToGrpcStatus.
#pragma once

#include <functional>
#include <string>

#include <grpcpp/server_context.h>
#include <grpcpp/support/server_callback.h>

#include "app/context.h"
#include "server/convert.h"
#include "server/grpc_status.h"

namespace arbiter::server {

// Finishes at once with `status` (an error found before any work was queued).
grpc::ServerUnaryReactor* FinishWith(grpc::CallbackServerContext* ctx, const absl::Status& status,
                                     const char* method);

// A reply of the application layer that fills the response from its result
// with `fill` and finishes `reactor`, the status mapped once by ToGrpcStatus.
template <typename T>
app::Reply<T> Answer(grpc::ServerUnaryReactor* reactor, const char* method,
                     std::function<void(const T&)> fill) {
  return [reactor, method, fill = std::move(fill)](absl::StatusOr<T> result) {
    if (result.ok()) fill(*result);
    reactor->Finish(ToGrpcStatus(result.status(), method));
  };
}

// A filler of a repeated response field: ToProto of each element into the
// message `add` returns.
template <typename T, typename Add>
std::function<void(const std::vector<T>&)> ListFiller(Add add) {
  return [add](const std::vector<T>& items) {
    for (const T& item : items) ToProto(item, add());
  };
}

// The reply of a change: echoes `value`, as converted, into `out`.
template <typename T, typename Out>
app::Reply<app::Done> Echo(grpc::ServerUnaryReactor* reactor, const char* method,
                           const absl::StatusOr<T>& value, Out* out) {
  return Answer<app::Done>(reactor, method, [value = value.value_or(T{}), out](const app::Done&) {
    ToProto(value, out);
  });
}

}  // namespace arbiter::server
