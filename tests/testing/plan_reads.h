// What a PostgreSQL plan reads, from EXPLAIN (FORMAT JSON) output: the
// tables it scans whole, and the rows each table's scans touch. For tests
// that check a query keeps to its indexes.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace arbiter::testing {

struct PlanReads {
  std::vector<std::string> seq_scanned;  // In plan order.
  // Rows each table's scans touched (returned plus filtered out), by table;
  // 0 without ANALYZE.
  std::map<std::string, int64_t> rows_touched;
};

inline void AddPlanNode(const nlohmann::json& node, PlanReads& reads) {
  const std::string relation = node.value("Relation Name", "");
  if (node.value("Node Type", "") == "Seq Scan") reads.seq_scanned.push_back(relation);
  if (!relation.empty()) {
    const int64_t loops = node.value("Actual Loops", int64_t{1});
    reads.rows_touched[relation] +=
        loops *
        (node.value("Actual Rows", int64_t{0}) + node.value("Rows Removed by Filter", int64_t{0}) +
         node.value("Rows Removed by Index Recheck", int64_t{0}));
  }
  if (node.contains("Plans")) {
    for (const nlohmann::json& child : node["Plans"]) AddPlanNode(child, reads);
  }
}

// Reads of the plan in `explain_json`, the one value EXPLAIN (FORMAT JSON)
// returns. Throws nlohmann::json::exception if it is not such a plan.
inline PlanReads ReadsOfPlan(const std::string& explain_json) {
  PlanReads reads;
  AddPlanNode(nlohmann::json::parse(explain_json).at(0).at("Plan"), reads);
  return reads;
}

}  // namespace arbiter::testing
