// The rows that decisions write (requests, their placements, MIG layout
// changes, ledger entries), gathered over one commit and sent as one
// multi-row statement per table: five round trips for a batch of any size
// instead of several per decision. Each statement takes one array per
// column (statements.cc: BatchStatements).
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
#include "ledger/chain.h"
#include <pqxx/pqxx>

#include "core/state.h"

namespace arbiter::store {

class BatchWriter {
 public:
  void Add(const core::RequestWrite& write);
  void Add(const ledger::Entry& entry);
  // Sends what was added, in foreign-key order, and clears it.
  void Flush(pqxx::work& tx);

 private:
  struct Request {
    const core::CapacityRequest* last = nullptr;
    bool is_new = false;
  };
  void WriteRequests(pqxx::work& tx);
  void WritePlacements(pqxx::work& tx);
  void WriteLedger(pqxx::work& tx);

  std::vector<int64_t> order_;  // Request ids, first write first.
  absl::flat_hash_map<int64_t, Request> requests_;
  // (request, member) -> placement, from the first write that admitted.
  std::map<std::pair<int64_t, int32_t>, const core::Placement*> placements_;
  // (node, GPU) -> the layout its last placement left.
  std::map<std::pair<int64_t, int32_t>, std::string> layouts_;
  std::vector<ledger::Entry> ledger_;
};

}  // namespace arbiter::store
