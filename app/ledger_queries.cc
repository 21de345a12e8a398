#include "app/ledger_queries.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace arbiter::app {

void LedgerQueries::ListEntries(const Caller& caller, const store::LedgerFilter& filter,
                                Reply<std::vector<ledger::Entry>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "LedgerService.ListLedgerEntries", {});
      !access.ok()) {
    return reply(access);
  }
  if (filter.after_seq < 0) return reply(absl::InvalidArgumentError("after_seq: must be >= 0"));
  if (filter.limit < 1 || filter.limit > kMaxLedgerPage) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxLedgerPage, "]")));
  }
  RunRead<std::vector<ledger::Entry>>(
      ctx_, [store = ctx_.store, filter] { return store->ListLedger(filter); }, std::move(reply));
}

void LedgerQueries::ListCheckpoints(const Caller& caller, int64_t after_seq, int32_t limit,
                                    Reply<std::vector<store::LedgerCheckpoint>> reply) const {
  if (absl::Status access = ctx_.access->Check(caller, "LedgerService.ListCheckpoints", {});
      !access.ok()) {
    return reply(access);
  }
  if (after_seq < 0) return reply(absl::InvalidArgumentError("after_seq: must be >= 0"));
  if (limit < 1 || limit > kMaxCheckpointPage) {
    return reply(absl::InvalidArgumentError(
        absl::StrCat("page_size: must be in [0, ", kMaxCheckpointPage, "]")));
  }
  RunRead<std::vector<store::LedgerCheckpoint>>(
      ctx_,
      [store = ctx_.store, after_seq, limit] { return store->ListCheckpoints(after_seq, limit); },
      std::move(reply));
}

}  // namespace arbiter::app
