// What a PostgreSQL plan reads, from EXPLAIN (FORMAT JSON) output: the
// tables it scans whole, and the rows each table's scans touch. For tests
// that check a query keeps to its indexes. A partition counts as its
// parent table when the caller names the partitions' parents.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace arbiter::testing {

struct PlanReads {
  // Tables and partitions scanned whole, by their own names, in plan order,
  // and the rows those scans touched.
  std::vector<std::string> seq_scanned;
  std::map<std::string, int64_t> seq_rows_touched;
  // Rows each table's scans touched (returned plus filtered out), by table
  // (a partition's under its parent's name); 0 without ANALYZE.
  std::map<std::string, int64_t> rows_touched;
};

// Partition name -> its parent table's name.
using PartitionParents = std::map<std::string, std::string>;

inline void AddPlanNode(const nlohmann::json& node, const PartitionParents& parents,
                        PlanReads& reads) {
  const std::string scanned = node.value("Relation Name", "");
  const int64_t touched =
      node.value("Actual Loops", int64_t{1}) *
      (node.value("Actual Rows", int64_t{0}) + node.value("Rows Removed by Filter", int64_t{0}) +
       node.value("Rows Removed by Index Recheck", int64_t{0}));
  if (node.value("Node Type", "") == "Seq Scan") {
    reads.seq_scanned.push_back(scanned);
    reads.seq_rows_touched[scanned] += touched;
  }
  const auto parent = parents.find(scanned);
  const std::string& relation = parent != parents.end() ? parent->second : scanned;
  if (!relation.empty()) reads.rows_touched[relation] += touched;
  if (node.contains("Plans")) {
    for (const nlohmann::json& child : node["Plans"]) AddPlanNode(child, parents, reads);
  }
}

// Reads of the plan in `explain_json`, the one value EXPLAIN (FORMAT JSON)
// returns, with the partitions in `parents` counted as their parents.
// Throws nlohmann::json::exception if it is not such a plan.
inline PlanReads ReadsOfPlan(const std::string& explain_json,
                             const PartitionParents& parents = {}) {
  PlanReads reads;
  AddPlanNode(nlohmann::json::parse(explain_json).at(0).at("Plan"), parents, reads);
  return reads;
}

}  // namespace arbiter::testing
