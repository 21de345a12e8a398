// LedgerService: reads of the ledger and its checkpoints (app/ledger_queries.h).
#include "absl/strings/str_cat.h"

#include "server/caller.h"
#include "server/convert.h"
#include "server/rpc_util.h"
#include "server/services.h"

namespace arbiter::server {
namespace {

constexpr int32_t kDefaultLedgerPage = 1000;

}  // namespace

grpc::ServerUnaryReactor* LedgerService::ListLedgerEntries(grpc::CallbackServerContext* ctx,
                                                           const v1::ListLedgerEntriesRequest* req,
                                                           v1::ListLedgerEntriesResponse* resp) {
  store::LedgerFilter filter;
  filter.after_seq = req->after_seq();
  filter.limit = req->page_size() == 0 ? kDefaultLedgerPage : req->page_size();
  filter.subject = req->subject();
  filter.actor = req->actor();
  filter.action = req->action();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  ctx_.app->ledger().ListEntries(
      CallerOf(*ctx, ctx_.insecure), filter,
      Answer<std::vector<ledger::Entry>>(
          reactor, "ListLedgerEntries",
          [limit = filter.limit, resp](const std::vector<ledger::Entry>& entries) {
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
            if (static_cast<int32_t>(entries.size()) == limit) {
              resp->set_next_after_seq(entries.back().seq);
            }
          }));
  return reactor;
}

grpc::ServerUnaryReactor* LedgerService::ListCheckpoints(grpc::CallbackServerContext* ctx,
                                                         const v1::ListCheckpointsRequest* req,
                                                         v1::ListCheckpointsResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const int32_t limit = req->page_size() == 0 ? kDefaultLedgerPage : req->page_size();
  ctx_.app->ledger().ListCheckpoints(
      CallerOf(*ctx, ctx_.insecure), req->after_seq(), limit,
      Answer<std::vector<store::LedgerCheckpoint>>(
          reactor, "ListCheckpoints",
          [limit, resp](const std::vector<store::LedgerCheckpoint>& checkpoints) {
            for (const store::LedgerCheckpoint& c : checkpoints) {
              v1::LedgerCheckpoint* out = resp->add_checkpoints();
              out->set_seq(c.seq);
              out->set_hash(c.hash);
              out->set_signature(c.signature);
              *out->mutable_at() = TimestampOf(c.at);
            }
            if (static_cast<int32_t>(checkpoints.size()) == limit) {
              resp->set_next_after_seq(checkpoints.back().seq);
            }
          }));
  return reactor;
}

}  // namespace arbiter::server
