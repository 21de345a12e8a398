// Chargeback exports: CSV (one row per team, or per statement line), and a
// self-contained HTML report (inline CSS and SVG, no script, no network)
// with the charts finance asks for: allocated vs used over time, cost by
// team, externalities paid and received. docs/chargeback.md explains every
// number.
//
// Every total the HTML shows carries its exact value in a data-total
// attribute ("<team>:<field>", or "cluster:<field>"), so that a test can
// compare what a browser renders with what the API answered.
//
// Thread-safe (pure functions).
#pragma once

#include <string>

#include "arbiter/v1/chargeback.pb.h"

namespace arbiter::arbctl {

// Micros as units with two decimals ("2.50"), milli-GPU seconds as GPU-hours
// with two decimals, milliwatt-hours as kWh with three.
std::string MoneyText(int64_t micros);
std::string GpuHoursText(int64_t milli_seconds);
std::string KwhText(int64_t mwh);
// "batch_analytics" for WORKLOAD_CLASS_BATCH_ANALYTICS; milli as "12.5%".
std::string ClassText(v1::WorkloadClass c);
std::string PercentText(int64_t milli);

// One row per team with the statement's totals; `lines` adds one row per
// statement line instead (pool, model, class).
std::string ChargebackCsv(const v1::GetChargebackResponse& cb, bool lines);

std::string ChargebackHtml(const v1::GetChargebackResponse& cb);

}  // namespace arbiter::arbctl
