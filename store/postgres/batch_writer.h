// The rows that decisions write (requests, their placements, MIG layout
// changes, ledger entries, checkpoints and the cost of requests that end,
// added to ended_spend), gathered over one commit and
// sent as one statement (sql::kWriteDecisions): a multi-row part per table,
// each taking one array per column. A commit of request writes alone is
// that one statement in its own transaction: one round trip and one fsync
// for a batch of any size.
//
// Several writes of one request in a batch collapse into one row with the
// last state (inserted if any of them was new); placements are kept from
// every write that admitted; the ledger keeps one entry per write.
//
// Thread-compatible: one per commit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include <pqxx/pqxx>

#include "core/state.h"
#include "ledger/chain.h"

namespace arbiter::store {

// When a request's placements were made, their partition's key (migration
// 0033): its admission, or its creation for one admitted before admissions
// were recorded (migration 0007).
absl::Time PlacementTime(const core::CapacityRequest& r);

class BatchWriter {
 public:
  void Add(const core::RequestWrite& write);
  void Add(const ledger::Entry& entry);
  void AddCheckpoint(int64_t seq, const std::string& hash, const std::string& signature,
                     absl::Time at);
  // Sends what was added as one statement and clears it. `fencing_epoch` > 0
  // makes the statement fail (SQLSTATE AR001) unless it is still the current
  // leader epoch (migration 0021). Throws what pqxx throws.
  void Flush(pqxx::transaction_base& tx, int64_t fencing_epoch);

 private:
  struct Request {
    const core::CapacityRequest* last = nullptr;
    bool is_new = false;
  };
  struct Checkpoint {
    int64_t seq;
    std::string hash;
    std::string signature;
    absl::Time at;
  };
  // kWriteDecisions' parameters: requests inserted (54 columns) and updated
  // (18), placements (14), layouts (3), ledger entries (8), checkpoints (4),
  // ended spend (3), and the fencing epoch.
  static constexpr size_t kParams = 54 + 19 + 14 + 3 + 8 + 4 + 3 + 1;
  // Each appends its tables' arrays to `params`, in statement order.
  void WriteRequests(std::vector<std::string>& params) const;
  void WritePlacements(std::vector<std::string>& params) const;
  void WriteLedger(std::vector<std::string>& params) const;
  // What the requests that end in this batch cost, per team and month of
  // admission: a final request is written once, when it ends.
  void WriteEndedSpend(std::vector<std::string>& params) const;

  std::vector<int64_t> order_;  // Request ids, first write first.
  absl::flat_hash_map<int64_t, Request> requests_;
  // A placement and its request's admission time (its partition's key,
  // migration 0033).
  struct PlacementRow {
    const core::Placement* placement;
    absl::Time admitted_at;
  };
  // (request, member) -> placement, from the first write that admitted.
  std::map<std::pair<int64_t, int32_t>, PlacementRow> placements_;
  // (node, GPU) -> the layout its last placement left.
  std::map<std::pair<int64_t, int32_t>, std::string> layouts_;
  std::vector<ledger::Entry> ledger_;
  std::vector<Checkpoint> checkpoints_;
};

}  // namespace arbiter::store
