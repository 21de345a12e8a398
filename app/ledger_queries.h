// LedgerQueries: reads of the decision ledger and its signed checkpoints,
// served from the store by any replica. See proto/arbiter/v1/ledger.proto.
//
// Thread-safe.
#pragma once

#include <vector>

#include "app/authz.h"
#include "app/context.h"
#include "ledger/chain.h"
#include "store/store.h"

namespace arbiter::app {

class LedgerQueries {
 public:
  explicit LedgerQueries(const Context& ctx) : ctx_(ctx) {}

  // Entries matching `filter`, in sequence order. INVALID_ARGUMENT naming
  // the field for a negative after_seq or a limit outside [1, kMaxLedgerPage].
  void ListEntries(const Caller& caller, const store::LedgerFilter& filter,
                   Reply<std::vector<ledger::Entry>> reply) const;
  // Checkpoints after `after_seq`, in sequence order, at most `limit`.
  // INVALID_ARGUMENT naming the field for a negative after_seq or a limit
  // outside [1, kMaxCheckpointPage].
  void ListCheckpoints(const Caller& caller, int64_t after_seq, int32_t limit,
                       Reply<std::vector<store::LedgerCheckpoint>> reply) const;

  static constexpr int32_t kMaxLedgerPage = 5000;
  static constexpr int32_t kMaxCheckpointPage = 10000;

 private:
  const Context ctx_;
};

}  // namespace arbiter::app
