#include "server/watch_server.h"

#include <algorithm>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include <grpcpp/alarm.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include "app/real_clock.h"
#include "app/thread_name.h"
#include "server/caller.h"
#include "server/convert.h"
#include "server/grpc_status.h"

namespace arbiter::server {
namespace {

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

// Bytes [begin, end) of a shared batch's encoding as a slice that holds a
// reference to the batch instead of a copy of the bytes.
grpc::Slice SliceOf(const app::WatchBatchPtr& batch, size_t begin, size_t end) {
  auto* hold = new app::WatchBatchPtr(batch);
  return grpc::Slice(
      const_cast<char*>(batch->encoded.data()) + begin, end - begin,
      [](void* p) { delete static_cast<app::WatchBatchPtr*>(p); }, hold);
}

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

// One WatchAllocations call, from the request for it to its end. Events
// arrive on the call's queue (through its tags) and from the hub's threads
// (as a subscriber); both take mu_. Deletes itself once gRPC says the call
// is done and no operation of its own is in flight.
class WatchCall final : public app::WatchSubscriber {
 public:
  WatchCall(WatchServer* server, AllocationService* service, ServiceContext ctx,
            grpc::ServerCompletionQueue* cq)
      : server_(server),
        ctx_(ctx),
        cq_(cq),
        hub_(&ctx.app->hub()),
        batch_every_(hub_->options().batch_every) {
    call_ctx_.AsyncNotifyWhenDone(&done_tag_);
    service->RequestWatchAllocations(&call_ctx_, &request_, &writer_, cq, cq, &new_tag_);
  }

  // What completed on the queue.
  enum class Event { kNew, kWrite, kFinish, kAlarm, kDone };
  struct Tag {
    WatchCall* call;
    Event event;
  };

  // A completion of this call's `event` on its queue (the queue's thread).
  void Proceed(Event event, bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    switch (event) {
      case Event::kNew:
        if (!ok) {  // The server is shutting down: the call never started.
          Destroy(this);
          return;
        }
        server_->Request(cq_);
        Begin();
        break;
      case Event::kWrite:
        OnWriteDone(ok);
        break;
      case Event::kFinish: {
        absl::MutexLock lock(&mu_);
        finish_in_flight_ = false;
        break;
      }
      case Event::kAlarm:
        OnAlarm();
        break;
      case Event::kDone: {
        int64_t id = 0;
        {
          absl::MutexLock lock(&mu_);
          id = id_;
        }
        // Without mu_: the hub calls Deliver with its own lock held.
        if (id != 0) hub_->Unsubscribe(id);  // No callback runs after this.
        absl::MutexLock lock(&mu_);
        done_ = true;
        hub_->AddQueuedBytes(-queued_bytes_);
        queued_bytes_ = 0;
        // Cancelled (or gone) before a status: finish CANCELLED, so that the
        // call is counted and logged like any other.
        FinishLocked(grpc::Status::CANCELLED);
        break;
      }
    }
    MaybeDelete();
  }

  void Deliver(const app::WatchBatchPtr& batch) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finishing_ || batch->events.empty()) return;
    if (pending_events_ + batch->events.size() > kMaxPendingEvents) {
      hub_->CountCutoff();
      FinishLocked(grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat("watcher fell too far behind; resume from the last revision received (",
                       written_revision_, ")")));
      return;
    }
    pending_.push_back(Pending{batch, 0, 0});
    pending_events_ += batch->events.size();
    const auto bytes = static_cast<int64_t>(batch->encoded.size());
    queued_bytes_ += bytes;
    hub_->AddQueuedBytes(bytes);
    if (!writing_) WriteNextLocked();
  }

  void Bookmark(int64_t revision) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    pending_.push_back(Pending{nullptr, 0, revision});
    if (!writing_) WriteNextLocked();
  }

  void End(const absl::Status& status) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(status, "WatchAllocations"));
  }

  size_t Backlog() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return pending_events_;
  }

 private:
  // A batch whose events from `next` on are still to be written, or a
  // bookmark (no batch) at `revision`.
  struct Pending {
    app::WatchBatchPtr batch;
    size_t next = 0;
    int64_t revision = 0;
  };

  // The call started: check it and subscribe, or finish it.
  void Begin() ABSL_LOCKS_EXCLUDED(mu_) {
    const app::Caller caller = CallerOf(call_ctx_, ctx_.insecure);
    v1::WatchAllocationsRequest req;
    std::vector<grpc::Slice> slices;
    std::string bytes;
    const bool parsed = request_.Dump(&slices).ok() && [&] {
      for (const grpc::Slice& slice : slices) {
        bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
      }
      return req.ParseFromString(bytes);
    }();
    batched_ = req.batched();
    absl::Status refused = ctx_.app->allocations().CheckWatch(caller);
    if (refused.ok() && !parsed) {
      absl::MutexLock lock(&mu_);
      return FinishLocked(UnparsedBodyStatus("/arbiter.v1.AllocationService/WatchAllocations"));
    }
    absl::StatusOr<app::WatchFilter> filter = WatchFilterFromProto(req);
    if (refused.ok()) refused = filter.status();
    if (refused.ok()) {
      absl::StatusOr<int64_t> id =
          ctx_.app->allocations().Watch(caller, *filter, req.start_revision(), this);
      if (id.ok()) {
        absl::MutexLock lock(&mu_);
        id_ = *id;
        return;
      }
      refused = id.status();
    }
    absl::MutexLock lock(&mu_);
    FinishLocked(ToGrpcStatus(refused, "WatchAllocations"));
  }

  void OnWriteDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    write_.Clear();
    queued_bytes_ -= in_flight_bytes_;
    hub_->AddQueuedBytes(-in_flight_bytes_);
    in_flight_bytes_ = 0;
    if (final_status_.has_value()) {
      StartFinishLocked(*final_status_);
    } else if (!ok) {
      FinishLocked(grpc::Status::CANCELLED);  // The client is gone.
    } else if (!finishing_ && !pending_.empty()) {
      WriteNextLocked();
    }
  }

  // The pacing alarm of a batched stream rang.
  void OnAlarm() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    alarm_set_ = false;
    if (!writing_ && !finishing_ && !pending_.empty()) WriteNextLocked();
  }

  // Deletes `call`, then tells the server (which waits for every call to
  // be gone before it shuts the queues down).
  static void Destroy(WatchCall* call) {
    WatchServer* server = call->server_;
    delete call;
    server->CallEnded();
  }

  void MaybeDelete() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!done_ || writing_ || finish_in_flight_ || alarm_set_) return;
    }
    Destroy(this);
  }

  // REQUIRES: no write in flight, not finishing, something pending.
  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Pending& front = pending_.front();
    if (front.batch == nullptr) {
      v1::WatchAllocationsResponse bookmark;
      bookmark.set_bookmark(true);
      bookmark.set_revision(front.revision);
      written_revision_ = std::max(written_revision_, front.revision);
      pending_.pop_front();
      write_ = BufferOf(bookmark.SerializeAsString());
      StartWriteLocked();
      return;
    }
    if (!batched_) {
      const app::WatchEvent& e = *front.batch->events[front.next];
      in_flight_bytes_ = static_cast<int64_t>(e.encoded.size());
      written_revision_ = e.event.revision;
      write_ = BufferOf(BodyOf(e.encoded));
      if (++front.next == front.batch->events.size()) pending_.pop_front();
      --pending_events_;
      StartWriteLocked();
      return;
    }
    if (last_batch_.has_value() && last_batch_->Elapsed() < batch_every_) {
      if (!alarm_set_) {
        // A fresh alarm each time (one that has rung is done with).
        alarm_ = std::make_unique<grpc::Alarm>();
        const gpr_timespec when = gpr_time_add(
            gpr_now(GPR_CLOCK_MONOTONIC),
            gpr_time_from_micros(absl::ToInt64Microseconds(batch_every_ - last_batch_->Elapsed()),
                                 GPR_TIMESPAN));
        alarm_set_ = server_->StartOp([&] { alarm_->Set(cq_, when, &alarm_tag_); });
      }
      return;
    }
    last_batch_.emplace();
    // Whole batches while they fit, then as many events of the next as fit
    // (at least one event per message).
    std::vector<grpc::Slice> slices;
    size_t bytes = 0;
    while (!pending_.empty() && pending_.front().batch != nullptr) {
      Pending& p = pending_.front();
      const std::vector<app::WatchEventPtr>& events = p.batch->events;
      size_t begin = 0;
      for (size_t i = 0; i < p.next; ++i) begin += events[i]->encoded.size();
      size_t end = begin;
      size_t next = p.next;
      while (next < events.size() &&
             (bytes + (end - begin) == 0 ||
              bytes + (end - begin) + events[next]->encoded.size() <= kMaxMessageBytes)) {
        end += events[next]->encoded.size();
        ++next;
      }
      if (next == p.next) break;  // The message is full.
      slices.push_back(SliceOf(p.batch, begin, end));
      bytes += end - begin;
      written_revision_ = events[next - 1]->event.revision;
      pending_events_ -= next - p.next;
      p.next = next;
      if (next < events.size()) break;
      pending_.pop_front();
    }
    in_flight_bytes_ = static_cast<int64_t>(bytes);
    write_ = grpc::ByteBuffer(slices.data(), slices.size());
    StartWriteLocked();
  }

  // The queues shutting down, an operation is not started: the call has been
  // cancelled with the server, and its done tag is on its way.
  void StartWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = server_->StartOp([&] { writer_.Write(write_, &write_tag_); });
    if (!writing_) finishing_ = true;
  }

  void StartFinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finish_in_flight_ = server_->StartOp([&] { writer_.Finish(status, &finish_tag_); });
  }

  // Finishes now, or after the write in flight completes.
  void FinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finishing_) return;
    finishing_ = true;
    if (writing_) {
      final_status_ = std::move(status);
    } else {
      StartFinishLocked(status);
    }
  }

  WatchServer* const server_;
  const ServiceContext ctx_;
  grpc::ServerCompletionQueue* const cq_;
  app::WatchHub* const hub_;
  const absl::Duration batch_every_;
  Tag new_tag_{this, Event::kNew};
  Tag write_tag_{this, Event::kWrite};
  Tag finish_tag_{this, Event::kFinish};
  Tag alarm_tag_{this, Event::kAlarm};
  Tag done_tag_{this, Event::kDone};
  grpc::ServerContext call_ctx_;
  grpc::ByteBuffer request_;
  grpc::ServerAsyncWriter<grpc::ByteBuffer> writer_{&call_ctx_};
  bool batched_ = false;  // Set before subscribing; read under mu_ after.

  mutable absl::Mutex mu_;
  int64_t id_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_events_ ABSL_GUARDED_BY(mu_) = 0;  // In pending_, not yet written.
  grpc::ByteBuffer write_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t written_revision_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;         // Finish started or due.
  bool finish_in_flight_ ABSL_GUARDED_BY(mu_) = false;  // Finish's tag is to come.
  bool done_ ABSL_GUARDED_BY(mu_) = false;              // The done tag came.
  bool alarm_set_ ABSL_GUARDED_BY(mu_) = false;         // The alarm's tag is to come.
  std::unique_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  std::optional<app::Stopwatch> last_batch_ ABSL_GUARDED_BY(mu_);  // Since the last batch.
  std::optional<grpc::Status> final_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

WatchServer::WatchServer(grpc::ServerBuilder& builder, AllocationService* service,
                         ServiceContext ctx, int queues)
    : service_(service), ctx_(ctx) {
  for (int i = 0; i < queues; ++i) queues_.push_back(builder.AddCompletionQueue());
}

WatchServer::~WatchServer() { Stop(); }

void WatchServer::Start() {
  for (const auto& cq : queues_) {
    Request(cq.get());
    threads_.push_back(app::StartNamedThread("arb-watch-cq", [this, cq = cq.get()] { Drain(cq); }));
  }
}

bool WatchServer::StartOp(absl::FunctionRef<void()> start) {
  absl::ReaderMutexLock lock(&mu_);
  if (stopping_) return false;
  start();
  return true;
}

void WatchServer::Request(grpc::ServerCompletionQueue* cq) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  ++calls_;
  new WatchCall(this, service_, ctx_, cq);  // Deletes itself (CallEnded).
}

void WatchServer::CallEnded() {
  absl::MutexLock lock(&mu_);
  --calls_;
}

void WatchServer::Drain(grpc::ServerCompletionQueue* cq) {
  void* tag = nullptr;
  bool ok = false;
  while (cq->Next(&tag, &ok)) {
    auto* t = static_cast<WatchCall::Tag*>(tag);
    t->call->Proceed(t->event, ok);
  }
}

void WatchServer::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    // gRPC may still start operations of its own on a call's queue (with a
    // server interceptor, each completion is queued again once intercepted):
    // the queues stay up until every call is gone. The server's Shutdown
    // has cancelled them, so their done tags are on their way.
    if (!mu_.AwaitWithTimeout(absl::Condition(
                                  +[](int64_t* calls) { return *calls == 0; }, &calls_),
                              absl::Seconds(30))) {
      spdlog::error("watch: {} calls still open 30 s after the server's shutdown", calls_);
    }
  }
  for (const auto& cq : queues_) cq->Shutdown();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
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
