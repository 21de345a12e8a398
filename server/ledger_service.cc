// LedgerService: reads of the ledger and its checkpoints.
#include "absl/strings/str_cat.h"

#include "core/status_macros.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

constexpr int32_t kDefaultLedgerPage = 1000;
constexpr int32_t kMaxLedgerPage = 5000;

}  // namespace

grpc::ServerUnaryReactor* LedgerService::ListLedgerEntries(grpc::CallbackServerContext* ctx,
                                                           const v1::ListLedgerEntriesRequest* req,
                                                           v1::ListLedgerEntriesResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "LedgerService.ListLedgerEntries", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListLedgerEntries");
  }
  if (req->after_seq() < 0) {
    return FinishWith(ctx, absl::InvalidArgumentError("after_seq: must be >= 0"),
                      "ListLedgerEntries");
  }
  if (req->page_size() < 0 || req->page_size() > kMaxLedgerPage) {
    return FinishWith(
        ctx,
        absl::InvalidArgumentError(absl::StrCat("page_size: must be in [0, ", kMaxLedgerPage, "]")),
        "ListLedgerEntries");
  }
  store::LedgerFilter filter;
  filter.after_seq = req->after_seq();
  filter.limit = req->page_size() == 0 ? kDefaultLedgerPage : req->page_size();
  filter.subject = req->subject();
  filter.actor = req->actor();
  filter.action = req->action();
  return RunRead(ctx, *ctx_.reads, "ListLedgerEntries", [this, filter, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto entries, ctx_.store->ListLedger(filter));
    for (const ledger::Entry& e : entries) {
      v1::LedgerEntry* out = resp->add_entries();
      out->set_seq(e.seq);
      *out->mutable_at() = TimestampOf(e.at);
      out->set_actor(e.actor);
      out->set_action(e.action);
      out->set_subject(e.subject);
      out->set_payload(e.payload);
      out->set_prev_hash(e.prev_hash);
      out->set_hash(e.hash);
    }
    if (static_cast<int32_t>(entries.size()) == filter.limit) {
      resp->set_next_after_seq(entries.back().seq);
    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* LedgerService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                                         const v1::ListCheckpointsRequest*,
                                                         v1::ListCheckpointsResponse* resp) {
  if (absl::Status access = CheckAccess(*ctx, ctx_, "LedgerService.ListCheckpoints", {});
      !access.ok()) {
    return FinishWith(ctx, access, "ListCheckpoints");
  }
  return RunRead(ctx, *ctx_.reads, "ListCheckpoints", [this, resp]() -> absl::Status {
    ARBITER_ASSIGN_OR_RETURN(auto checkpoints, ctx_.store->ListCheckpoints());
    for (const store::LedgerCheckpoint& c : checkpoints) {
      v1::LedgerCheckpoint* out = resp->add_checkpoints();
      out->set_seq(c.seq);
      out->set_hash(c.hash);
      out->set_signature(c.signature);
      *out->mutable_at() = TimestampOf(c.at);
    }
    return absl::OkStatus();
  });
}

}  // namespace arbiter::server
