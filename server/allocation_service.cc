// AllocationService: request, inspect, release and watch capacity.
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include <grpcpp/alarm.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "app/real_clock.h"
#include "server/caller.h"
#include "server/convert.h"
#include "server/grpc_status.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

constexpr int32_t kDefaultPageSize = 100;
constexpr int32_t kMaxPageSize = 1000;
// Events a slow watcher may have waiting before its stream is ended.
constexpr size_t kMaxPendingEvents = 10000;
// Most bytes of events in one batched message.
constexpr size_t kMaxMessageBytes = 1 << 20;
// Longest team, pool, cluster or node name a filter may give.
constexpr size_t kMaxFilterName = 128;

// The bytes of an encoded event (EncodeWatchEvent) as a message of its own:
// past the field tag and the length.
absl::string_view BodyOf(const std::string& framed) {
  size_t i = 1;
  while (i < framed.size() && (static_cast<uint8_t>(framed[i]) & 0x80) != 0) ++i;
  return absl::string_view(framed).substr(std::min(i + 1, framed.size()));
}

grpc::ByteBuffer BufferOf(absl::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

// One WatchAllocations stream on the raw (bytes) path: events arrive from
// the hub encoded once and are written as they are, one per message or
// concatenated into one batched message (their encoding is that of an
// `events` entry). A batched stream starts a write at most once per
// WatchOptions::batch_every, waiting on an alarm. Deletes itself when gRPC
// is done with it and no alarm is pending.
class WatchStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer>,
                          public app::WatchSubscriber {
 public:
  WatchStream(app::WatchHub* hub, bool batched)
      : hub_(hub), batched_(batched), batch_every_(hub->options().batch_every) {}

  // Ends the stream before it was subscribed.
  void Refuse(const grpc::Status& status) { Finish(status); }
  void Subscribed(int64_t id) { id_ = id; }

  void Deliver(const std::vector<app::WatchEventPtr>& events) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    if (pending_.size() + events.size() > kMaxPendingEvents) {
      hub_->CountCutoff();
      FinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("watcher fell too far behind; resume from the last revision received (",
                       written_revision_, ")")));
      return;
    }
    int64_t bytes = 0;
    for (const app::WatchEventPtr& e : events) {
      pending_.push_back(Pending{e, 0});
      bytes += static_cast<int64_t>(e->encoded.size());
    }
    queued_bytes_ += bytes;
    hub_->AddQueuedBytes(bytes);
    if (!writing_) WriteNextLocked();
  }

  void Bookmark(int64_t revision) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    pending_.push_back(Pending{nullptr, revision});
    if (!writing_) WriteNextLocked();
  }

  void End(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(status, "WatchAllocations"));
  }

  size_t Backlog() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return pending_.size();
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    queued_bytes_ -= in_flight_bytes_;
    hub_->AddQueuedBytes(-in_flight_bytes_);
    in_flight_bytes_ = 0;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
    } else if (final_status_.has_value()) {
      Finish(*final_status_);
    } else if (!pending_.empty()) {
      WriteNextLocked();
    }
  }

  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    if (id_ != 0) hub_->Unsubscribe(id_);
    bool waiting;
    {
      absl::MutexLock lock(&mu_);
      hub_->AddQueuedBytes(-queued_bytes_);
      queued_bytes_ = 0;
      done_ = true;
      waiting = alarm_set_;
    }
    if (!waiting) delete this;  // Otherwise OnAlarm does, within batch_every.
  }

 private:
  // An event, or a bookmark (no event) at `revision`.
  struct Pending {
    app::WatchEventPtr event;
    int64_t revision = 0;
  };

  // The pacing alarm of a batched stream rang (or was cancelled).
  void OnAlarm() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      alarm_set_ = false;
      if (!done_) {
        if (!writing_ && !finishing_ && !pending_.empty()) WriteNextLocked();
        return;
      }
    }
    delete this;
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Pending& front = pending_.front();
    if (front.event == nullptr) {
      v1::WatchAllocationsResponse bookmark;
      bookmark.set_bookmark(true);
      bookmark.set_revision(front.revision);
      written_revision_ = std::max(written_revision_, front.revision);
      pending_.pop_front();
      StartBytes(bookmark.SerializeAsString());
      return;
    }
    if (!batched_) {
      const app::WatchEvent& e = *front.event;
      in_flight_bytes_ = static_cast<int64_t>(e.encoded.size());
      written_revision_ = e.event.revision;
      write_ = BufferOf(BodyOf(e.encoded));
      pending_.pop_front();
      writing_ = true;
      StartWrite(&write_);
      return;
    }
    if (last_batch_.has_value() && last_batch_->Elapsed() < batch_every_) {
      if (!alarm_set_) {
        alarm_set_ = true;
        // A fresh alarm each time: this may run in the last one's callback,
        // which holds its own reference to what it runs. A span is a
        // deadline relative to now.
        alarm_ = std::make_unique<grpc::Alarm>();
        alarm_->Set(
            gpr_time_from_micros(absl::ToInt64Microseconds(batch_every_ - last_batch_->Elapsed()),
                                 GPR_TIMESPAN),
            [this](bool) { OnAlarm(); });
      }
      return;
    }
    last_batch_.emplace();
    std::string batch;
    while (!pending_.empty() && pending_.front().event != nullptr &&
           (batch.empty() ||
            batch.size() + pending_.front().event->encoded.size() <= kMaxMessageBytes)) {
      const app::WatchEvent& e = *pending_.front().event;
      batch.append(e.encoded);
      in_flight_bytes_ += static_cast<int64_t>(e.encoded.size());
      written_revision_ = e.event.revision;
      pending_.pop_front();
    }
    StartBytes(batch);
  }

  void StartBytes(absl::string_view bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    write_ = BufferOf(bytes);
    writing_ = true;
    StartWrite(&write_);
  }

  // Finishes now, or after the write in flight completes.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    if (writing_) {
      final_status_ = std::move(status);
    } else {
      Finish(std::move(status));
    }
  }

  app::WatchHub* const hub_;
  const bool batched_;
  const absl::Duration batch_every_;
  int64_t id_ = 0;
  mutable absl::Mutex mu_;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  grpc::ByteBuffer write_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_revision_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;       // gRPC called OnDone.
  bool alarm_set_ ABSL_GUARDED_BY(mu_) = false;  // OnAlarm is still to run.
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  std::optional<app::Stopwatch> last_batch_ ABSL_GUARDED_BY(mu_);  // Since the last batch.
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

// The event type a watch filter names: INVALID_ARGUMENT naming `field` for
// UNSPECIFIED or an unknown number.
absl::StatusOr<app::EventType> EventTypeFromProto(int type, const std::string& field) {
  switch (type) {
    case v1::ALLOCATION_EVENT_TYPE_ADMITTED:
      return app::EventType::kAdmitted;
    case v1::ALLOCATION_EVENT_TYPE_QUEUED:
      return app::EventType::kQueued;
    case v1::ALLOCATION_EVENT_TYPE_DENIED:
      return app::EventType::kDenied;
    case v1::ALLOCATION_EVENT_TYPE_RELEASED:
      return app::EventType::kReleased;
    case v1::ALLOCATION_EVENT_TYPE_CANCELLED:
      return app::EventType::kCancelled;
    case v1::ALLOCATION_EVENT_TYPE_PREEMPTING:
      return app::EventType::kPreempting;
    case v1::ALLOCATION_EVENT_TYPE_PREEMPTED:
      return app::EventType::kPreempted;
    case v1::ALLOCATION_EVENT_TYPE_RESERVED:
      return app::EventType::kReserved;
    case v1::ALLOCATION_EVENT_TYPE_PENDING_APPROVAL:
      return app::EventType::kPendingApproval;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": must be a known event type other than UNSPECIFIED, got ", type));
  }
}

// The filter a WatchAllocations call asks for: INVALID_ARGUMENT naming the
// field for a negative revision or request id, a node without its cluster,
// an over-long name or an unknown event type.
absl::StatusOr<app::WatchFilter> WatchFilterFromProto(const v1::WatchAllocationsRequest& req) {
  if (req.start_revision() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("start_revision: must be >= 0, got ", req.start_revision()));
  }
  if (req.request_id() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: must be >= 0, got ", req.request_id()));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string*>{"team", &req.team()},
        {"pool", &req.pool()},
        {"cluster", &req.cluster()},
        {"node", &req.node()}}) {
    if (value->size() > kMaxFilterName) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": at most ", kMaxFilterName, " characters, got ", value->size()));
    }
  }
  if (!req.node().empty() && req.cluster().empty()) {
    return absl::InvalidArgumentError("node: requires cluster");
  }
  app::WatchFilter filter;
  filter.team = req.team();
  filter.pool = req.pool();
  filter.cluster = req.cluster();
  filter.node = req.node();
  filter.request_id = req.request_id();
  for (int i = 0; i < req.types_size(); ++i) {
    absl::StatusOr<app::EventType> type =
        EventTypeFromProto(req.types(i), absl::StrCat("types[", i, "]"));
    if (!type.ok()) return type.status();
    filter.types |= 1u << static_cast<uint32_t>(*type);
  }
  return filter;
}

// The filter a ListRequests call asks for: INVALID_ARGUMENT naming the
// field for an unknown state, a page size out of range or a foreign token.
absl::StatusOr<store::RequestFilter> RequestFilterFromProto(const v1::ListRequestsRequest& req) {
  store::RequestFilter filter;
  filter.team = req.team();
  absl::StatusOr<core::RequestState> state = RequestStateFromProto(req.state(), "state");
  if (!state.ok()) return state.status();
  filter.state = *state;
  if (req.page_size() < 0 || req.page_size() > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxPageSize, "], got ", req.page_size()));
  }
  filter.limit = req.page_size() == 0 ? kDefaultPageSize : req.page_size();
  if (!req.page_token().empty() &&
      (!absl::SimpleAtoi(req.page_token(), &filter.before_id) || filter.before_id <= 0)) {
    return absl::InvalidArgumentError("page_token: not a token from this API");
  }
  return filter;
}

// Fills a response's `request` field.
template <typename Response>
std::function<void(const core::CapacityRequest&)> RequestFiller(const app::NodeDirectory* nodes,
                                                                Response* resp) {
  return [nodes, resp](const core::CapacityRequest& request) {
    ToProto(request, *nodes, resp->mutable_request());
  };
}

}  // namespace

grpc::ServerUnaryReactor* AllocationService::RequestCapacity(grpc::CallbackServerContext* ctx,
                                                             const v1::RequestCapacityRequest* req,
                                                             v1::RequestCapacityResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().RequestCapacity(
      CallerOf(*ctx, ctx_.insecure), app::Resource{req->team(), req->pool()}, SpecFromProto(*req),
      Answer<app::RequestDecision>(
          reactor, "RequestCapacity",
          [nodes = &ctx_.app->nodes(), resp](const app::RequestDecision& d) {
            resp->set_replayed(d.replayed);
            ToProto(d.request, *nodes, resp->mutable_request());
          }));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::GetRequest(grpc::CallbackServerContext* ctx,
                                                        const v1::GetRequestRequest* req,
                                                        v1::GetRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().GetRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "GetRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ListRequests(grpc::CallbackServerContext* ctx,
                                                          const v1::ListRequestsRequest* req,
                                                          v1::ListRequestsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<store::RequestFilter> filter = RequestFilterFromProto(*req);
  const int32_t limit = filter.ok() ? filter->limit : 0;
  ctx_.app->allocations().ListRequests(
      CallerOf(*ctx, ctx_.insecure), std::move(filter),
      Answer<store::RequestPage>(
          reactor, "ListRequests",
          [nodes = &ctx_.app->nodes(), limit, resp](const store::RequestPage& page) {
            const std::vector<core::CapacityRequest>& requests = page.requests;
            for (const auto& r : requests) ToProto(r, *nodes, resp->add_requests());
            resp->set_revision(page.revision);
            if (static_cast<int32_t>(requests.size()) == limit && requests.back().id > 1) {
              resp->set_next_page_token(absl::StrCat(requests.back().id));
            }
          }));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ApproveRequest(grpc::CallbackServerContext* ctx,
                                                            const v1::ApproveRequestRequest* req,
                                                            v1::ApproveRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ApproveRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "ApproveRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::DenyRequest(grpc::CallbackServerContext* ctx,
                                                         const v1::DenyRequestRequest* req,
                                                         v1::DenyRequestResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().DenyRequest(
      CallerOf(*ctx, ctx_.insecure), req->id(), req->reason(),
      Answer<core::CapacityRequest>(reactor, "DenyRequest",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerUnaryReactor* AllocationService::ReleaseAllocation(
    grpc::CallbackServerContext* ctx, const v1::ReleaseAllocationRequest* req,
    v1::ReleaseAllocationResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->allocations().ReleaseAllocation(
      CallerOf(*ctx, ctx_.insecure), req->id(),
      Answer<core::CapacityRequest>(reactor, "ReleaseAllocation",
                                    RequestFiller(&ctx_.app->nodes(), resp)));
  return reactor;
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* AllocationService::WatchAllocations(
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* raw) {
  const app::Caller caller = CallerOf(*ctx, ctx_.insecure);
  v1::WatchAllocationsRequest req;
  std::vector<grpc::Slice> slices;
  std::string bytes;
  const bool parsed = raw->Dump(&slices).ok() && [&] {
    for (const grpc::Slice& slice : slices) {
      bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
    return req.ParseFromString(bytes);
  }();
  auto* stream = new WatchStream(&ctx_.app->hub(), req.batched());
  if (absl::Status access = ctx_.app->allocations().CheckWatch(caller); !access.ok()) {
    stream->Refuse(ToGrpcStatus(access, "WatchAllocations"));
    return stream;
  }
  absl::StatusOr<app::WatchFilter> filter =
      parsed ? WatchFilterFromProto(req)
             : absl::InvalidArgumentError("request: not a WatchAllocationsRequest");
  if (!filter.ok()) {
    stream->Refuse(ToGrpcStatus(filter.status(), "WatchAllocations"));
    return stream;
  }
  absl::StatusOr<int64_t> id =
      ctx_.app->allocations().Watch(caller, *filter, req.start_revision(), stream);
  if (!id.ok()) {
    stream->Refuse(ToGrpcStatus(id.status(), "WatchAllocations"));
    return stream;
  }
  stream->Subscribed(*id);
  return stream;
}

std::string EncodeWatchEvent(const app::AllocationEvent& event, const app::NodeDirectory& nodes) {
  v1::AllocationEvent out;
  out.set_type(ToProto(event.type));
  ToProto(event.request, nodes, out.mutable_request());
  out.mutable_committed_at()->set_seconds(absl::ToUnixSeconds(event.committed_at));
  out.set_revision(event.revision);
  const std::string body = out.SerializeAsString();
  // An `events` entry of WatchAllocationsResponse: field 5, length-delimited.
  std::string framed;
  framed.reserve(body.size() + 6);
  framed.push_back(static_cast<char>((5 << 3) | 2));
  for (uint64_t n = body.size();; n >>= 7) {
    if (n < 0x80) {
      framed.push_back(static_cast<char>(n));
      break;
    }
    framed.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  framed.append(body);
  return framed;
}

}  // namespace arbiter::server
