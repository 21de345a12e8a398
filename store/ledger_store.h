// LedgerReads: the stored ledger and its signed checkpoints (see
// ledger/chain.h), served straight from the store by any replica.
//
// Status codes, for every method: UNAVAILABLE when the store cannot be
// reached (retry the call); ABORTED on a serialization failure or deadlock
// (retry the whole operation); INTERNAL for anything else. Further codes are
// stated per method.
//
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

#include "ledger/chain.h"

namespace arbiter::store {

struct LedgerFilter {
  int64_t after_seq = 0;  // Only entries after this (paging); 0: from genesis.
  int32_t limit = 1000;
  std::string subject;  // Exact; empty: all.
  std::string actor;    // Exact; empty: all.
  std::string action;   // Exact; empty: all.
};

struct LedgerCheckpoint {
  int64_t seq = 0;
  std::string hash;
  std::string signature;  // Hex Ed25519.
  absl::Time at;
};

class LedgerReads {
 public:
  virtual ~LedgerReads() = default;

  // Ledger entries matching `filter`, in sequence order, at most
  // filter.limit.
  [[nodiscard]] virtual absl::StatusOr<std::vector<ledger::Entry>> ListLedger(
      const LedgerFilter& filter) = 0;
  // The signed checkpoints after `after_seq`, in sequence order, at most
  // `limit`.
  [[nodiscard]] virtual absl::StatusOr<std::vector<LedgerCheckpoint>> ListCheckpoints(
      int64_t after_seq, int32_t limit) = 0;
};

}  // namespace arbiter::store
