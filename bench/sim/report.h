// daysim's outputs: the comparison table, CSV files and SVG figures of the
// policies' results. Pure functions of the results; the caller writes files.
#pragma once

#include <string>
#include <vector>

#include "bench/sim/scenario.h"
#include "bench/sim/simulator.h"

namespace arbiter::daysim {

// The comparison table for a person, one column per policy.
std::string ComparisonTable(const Scenario& scenario, const std::vector<Result>& results);

// summary.csv: one row per policy and metric (policy,metric,value).
std::string SummaryCsv(const std::vector<Result>& results);
// hourly.csv: policy,hour,allocated_permille,used_permille,max_draw_watts, then per service
// <name>_p99_ms, then per service <name>_formula_p99_ms (per hour; p99: the
// hour's worst minute, by the queueing model and by the formula).
std::string HourlyCsv(const Scenario& scenario, const std::vector<Result>& results);
// teams.csv: policy,team,allocated_gpu_hours,used_gpu_hours,reserved_cost,
// externality_charged,externality_credited (money in micros),energy_wh.
std::string TeamsCsv(const std::vector<Result>& results);
// power.csv: minute, then per policy the highest allocated draw of the
// minute by the core's accounting (watts), then the site's budget; empty
// when no result has a budget.
std::string PowerCsv(const std::vector<Result>& results);

// utilization.svg: the share of capacity used (solid) and allocated
// (dashed) per hour, one colour per policy.
std::string UtilizationSvg(const Scenario& scenario, const std::vector<Result>& results);
// p99.svg: per policy, the worst service's hourly p99 over its baseline, on
// a log scale, with each SLO's level.
std::string P99Svg(const Scenario& scenario, const std::vector<Result>& results);

}  // namespace arbiter::daysim
