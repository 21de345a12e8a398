#include "bench/sim/report.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace arbiter::daysim {
namespace {

constexpr int64_t kMilliGpuHour = 1000 * 3600;

std::string Percent(int64_t part, int64_t whole) {
  if (whole == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

std::string Hours(int64_t milli_seconds) {
  return absl::StrFormat("%d", milli_seconds / kMilliGpuHour);
}

std::string Money(int64_t micros) { return absl::StrFormat("%d", micros / 1'000'000); }

std::string Duration(int64_t seconds) {
  if (seconds < 120) return absl::StrCat(seconds, " s");
  if (seconds < 7200) return absl::StrCat(seconds / 60, " min");
  return absl::StrFormat("%.1f h", static_cast<double>(seconds) / 3600.0);
}

const char* kColours[] = {"#c0392b", "#e67e22", "#7d3c98", "#2471a3"};
constexpr size_t kNumColours = sizeof(kColours) / sizeof(kColours[0]);

// The worst of `p99_ms`'s minutes in `hour`.
int32_t HourWorst(const std::vector<int32_t>& p99_ms, size_t hour) {
  int32_t worst = 0;
  for (size_t m = hour * 60; m < std::min(p99_ms.size(), hour * 60 + 60); ++m) {
    worst = std::max(worst, p99_ms[m]);
  }
  return worst;
}

int64_t HourMax(const std::vector<int64_t>& by_minute, size_t hour) {
  int64_t most = 0;
  for (size_t m = hour * 60; m < std::min(by_minute.size(), hour * 60 + 60); ++m) {
    most = std::max(most, by_minute[m]);
  }
  return most;
}

// The breach causes any result has, sorted.
std::vector<std::string> Causes(const std::vector<Result>& results) {
  std::set<std::string> causes;
  for (const Result& r : results) {
    for (const ServiceResult& s : r.services) {
      for (const auto& [cause, minutes] : s.breach_minutes_by_cause) causes.insert(cause);
    }
  }
  return {causes.begin(), causes.end()};
}

// Breach minutes of `cause`, all services.
int64_t CauseMinutes(const Result& r, const std::string& cause) {
  int64_t minutes = 0;
  for (const ServiceResult& s : r.services) {
    auto it = s.breach_minutes_by_cause.find(cause);
    if (it != s.breach_minutes_by_cause.end()) minutes += it->second;
  }
  return minutes;
}

struct Row {
  std::string label;
  std::function<std::string(const Result&)> cell;
};

}  // namespace

std::string ComparisonTable(const Scenario& scenario, const std::vector<Result>& results) {
  std::vector<Row> rows = {
      {"used GPU-hours (share of capacity)",
       [](const Result& r) {
         return absl::StrCat(Hours(r.used_milli_seconds), " (",
                             Percent(r.used_milli_seconds, r.capacity_milli_seconds), ")");
       }},
      {"allocated GPU-hours (share)",
       [](const Result& r) {
         return absl::StrCat(Hours(r.allocated_milli_seconds), " (",
                             Percent(r.allocated_milli_seconds, r.capacity_milli_seconds), ")");
       }},
      {"waste: capacity not used",
       [](const Result& r) {
         return Percent(r.capacity_milli_seconds - r.used_milli_seconds, r.capacity_milli_seconds);
       }},
      {"used vs static",
       [&](const Result& r) {
         return absl::StrFormat("%.2fx", static_cast<double>(r.used_milli_seconds) /
                                             std::max<int64_t>(1, results[0].used_milli_seconds));
       }},
  };
  for (size_t i = 0; i < scenario.services.size(); ++i) {
    const std::string name = scenario.services[i].name;
    rows.push_back({absl::StrCat(name, ": breach minutes (formula)"), [i](const Result& r) {
                      return absl::StrCat(r.services[i].breach_minutes, " (",
                                          r.services[i].formula_breach_minutes, ")");
                    }});
    rows.push_back(
        {absl::StrCat(name, ": worst morning p99 / baseline (formula)"), [i](const Result& r) {
           return absl::StrFormat("%.1fx (%.1fx)", r.services[i].morning_p99_permille / 1000.0,
                                  r.services[i].formula_morning_p99_permille / 1000.0);
         }});
  }
  for (const std::string& cause : Causes(results)) {
    rows.push_back({absl::StrCat("breach minutes, cause ", cause),
                    [cause](const Result& r) { return absl::StrCat(CauseMinutes(r, cause)); }});
  }
  for (const auto& [cls, unused] : results[0].delay_by_class) {
    rows.push_back({absl::StrCat("queueing ", cls, " p50 / p95"), [cls = cls](const Result& r) {
                      auto it = r.delay_by_class.find(cls);
                      if (it == r.delay_by_class.end()) return std::string("-");
                      return absl::StrCat(
                          Duration(it->second.p50_seconds), " / ", Duration(it->second.p95_seconds),
                          it->second.never_started > 0
                              ? absl::StrCat(" (", it->second.never_started, " never started)")
                              : "");
                    }});
  }
  rows.push_back({"preemptions (GPU-h lost: progress / all)", [](const Result& r) {
                    return absl::StrCat(r.preemptions, " (", Hours(r.lost_progress_milli_seconds),
                                        " / ", Hours(r.lost_milli_seconds), ")");
                  }});
  rows.push_back({"idle reclaims", [](const Result& r) { return absl::StrCat(r.idle_reclaims); }});
  rows.push_back({"SLO incidents (externalities charged)", [](const Result& r) {
                    return absl::StrCat(r.incidents, " (", Money(r.externality_micros), ")");
                  }});
  for (size_t t = 0; t < scenario.teams.size(); ++t) {
    rows.push_back({absl::StrCat("cost ", scenario.teams[t].name, " (ext. +paid/-credited)"),
                    [t](const Result& r) {
                      const TeamResult& tr = r.teams[t];
                      return absl::StrCat(Money(tr.reserved_cost_micros), " (+",
                                          Money(tr.externality_charged_micros), "/-",
                                          Money(tr.externality_credited_micros), ")");
                    }});
  }
  rows.push_back({"allocated draw, max kW (site budget)", [](const Result& r) {
                    return absl::StrCat(r.max_draw_watts / 1000, " (",
                                        r.power_budget_watts > 0
                                            ? absl::StrCat(r.power_budget_watts / 1000)
                                            : std::string("none"),
                                        ")");
                  }});
  rows.push_back({"energy kWh (of GPUs no one held)", [](const Result& r) {
                    return absl::StrCat(r.energy_wh / 1000, " (", r.unallocated_energy_wh / 1000,
                                        ")");
                  }});
  rows.push_back({"core calls (refused)", [](const Result& r) {
                    return absl::StrCat(r.core_calls, " (", r.core_errors, ")");
                  }});
  size_t label_width = 0;
  for (const Row& row : rows) label_width = std::max(label_width, row.label.size());
  std::string out = absl::StrFormat("%-*s", label_width, "");
  for (const Result& r : results)
    absl::StrAppend(&out, absl::StrFormat("  %26s", PolicyName(r.policy)));
  absl::StrAppend(&out, "\n");
  for (const Row& row : rows) {
    absl::StrAppend(&out, absl::StrFormat("%-*s", label_width, row.label));
    for (const Result& r : results) absl::StrAppend(&out, absl::StrFormat("  %26s", row.cell(r)));
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::string SummaryCsv(const std::vector<Result>& results) {
  std::string out = "policy,metric,value\n";
  for (const Result& r : results) {
    const std::string p(PolicyName(r.policy));
    auto add = [&](const std::string& metric, int64_t v) {
      absl::StrAppend(&out, p, ",", metric, ",", v, "\n");
    };
    add("capacity_milli_gpu_seconds", r.capacity_milli_seconds);
    add("allocated_milli_gpu_seconds", r.allocated_milli_seconds);
    add("used_milli_gpu_seconds", r.used_milli_seconds);
    add("held_by_jobs_milli_gpu_seconds", r.held_by_jobs_milli_seconds);
    add("held_by_inventory_milli_gpu_seconds", r.held_by_inventory_milli_seconds);
    for (const ServiceResult& s : r.services) {
      add(absl::StrCat(s.name, ".breach_minutes"), s.breach_minutes);
      for (const auto& [cause, minutes] : s.breach_minutes_by_cause) {
        add(absl::StrCat(s.name, ".breach_minutes.", cause), minutes);
      }
      add(absl::StrCat(s.name, ".morning_p99_permille_of_baseline"), s.morning_p99_permille);
      add(absl::StrCat(s.name, ".incidents"), s.incidents);
      add(absl::StrCat(s.name, ".formula_breach_minutes"), s.formula_breach_minutes);
      add(absl::StrCat(s.name, ".formula_morning_p99_permille_of_baseline"),
          s.formula_morning_p99_permille);
    }
    for (const auto& [cls, d] : r.delay_by_class) {
      add(absl::StrCat("queue_delay.", cls, ".p50_seconds"), d.p50_seconds);
      add(absl::StrCat("queue_delay.", cls, ".p95_seconds"), d.p95_seconds);
      add(absl::StrCat("queue_delay.", cls, ".jobs"), d.jobs);
      add(absl::StrCat("queue_delay.", cls, ".never_started"), d.never_started);
    }
    add("preemptions", r.preemptions);
    add("lost_milli_gpu_seconds", r.lost_milli_seconds);
    add("lost_progress_milli_gpu_seconds", r.lost_progress_milli_seconds);
    add("energy_wh", r.energy_wh);
    add("max_draw_watts", r.max_draw_watts);
    add("power_budget_watts", r.power_budget_watts);
    add("unallocated_energy_wh", r.unallocated_energy_wh);
    add("idle_reclaims", r.idle_reclaims);
    add("incidents", r.incidents);
    add("externality_micros", r.externality_micros);
    add("jobs_completed", r.jobs_completed);
    add("jobs_denied", r.jobs_denied);
    add("core_calls", r.core_calls);
    add("core_errors", r.core_errors);
  }
  return out;
}

std::string HourlyCsv(const Scenario& scenario, const std::vector<Result>& results) {
  std::string out = "policy,hour,allocated_permille,used_permille,max_draw_watts";
  for (const ServiceSpec& s : scenario.services) absl::StrAppend(&out, ",", s.name, "_p99_ms");
  for (const ServiceSpec& s : scenario.services) {
    absl::StrAppend(&out, ",", s.name, "_formula_p99_ms");
  }
  absl::StrAppend(&out, "\n");
  const int64_t per_hour =
      int64_t{scenario.cluster.nodes} * scenario.cluster.gpus_per_node * 1000 * 3600;
  for (const Result& r : results) {
    for (size_t h = 0; h < r.allocated_by_hour.size(); ++h) {
      absl::StrAppend(&out, PolicyName(r.policy), ",", h, ",",
                      r.allocated_by_hour[h] * 1000 / per_hour, ",",
                      r.used_by_hour[h] * 1000 / per_hour, ",", HourMax(r.draw_watts_by_minute, h));
      for (const ServiceResult& s : r.services) {
        absl::StrAppend(&out, ",", HourWorst(s.p99_ms_by_minute, h));
      }
      for (const ServiceResult& s : r.services) {
        absl::StrAppend(&out, ",", HourWorst(s.formula_p99_ms_by_minute, h));
      }
      absl::StrAppend(&out, "\n");
    }
  }
  return out;
}

std::string TeamsCsv(const std::vector<Result>& results) {
  std::string out =
      "policy,team,allocated_gpu_hours,used_gpu_hours,reserved_cost_micros,"
      "externality_charged_micros,externality_credited_micros,energy_wh\n";
  for (const Result& r : results) {
    for (const TeamResult& t : r.teams) {
      absl::StrAppend(
          &out, PolicyName(r.policy), ",", t.name, ",", t.allocated_milli_seconds / kMilliGpuHour,
          ",", t.used_milli_seconds / kMilliGpuHour, ",", t.reserved_cost_micros, ",",
          t.externality_charged_micros, ",", t.externality_credited_micros, ",", t.energy_wh, "\n");
    }
  }
  return out;
}

std::string PowerCsv(const std::vector<Result>& results) {
  int64_t budget = 0;
  size_t minutes = 0;
  for (const Result& r : results) {
    budget = std::max(budget, r.power_budget_watts);
    minutes = std::max(minutes, r.draw_watts_by_minute.size());
  }
  if (budget == 0) return "";
  std::string out = "minute";
  for (const Result& r : results) absl::StrAppend(&out, ",", PolicyName(r.policy), "_draw_watts");
  absl::StrAppend(&out, ",budget_watts\n");
  for (size_t m = 0; m < minutes; ++m) {
    absl::StrAppend(&out, m);
    for (const Result& r : results) {
      absl::StrAppend(&out, ",", m < r.draw_watts_by_minute.size() ? r.draw_watts_by_minute[m] : 0);
    }
    absl::StrAppend(&out, ",", budget, "\n");
  }
  return out;
}

namespace {

// A week-long chart: x is the hour, y from `y_of` in [0, 1] of the plot height.
struct Chart {
  int width = 960, height = 380, left = 60, right = 20, top = 60, bottom = 40;
  size_t hours = 168;
  double X(double hour) const {
    return left + (width - left - right) * hour / static_cast<double>(std::max<size_t>(1, hours));
  }
  double Y(double fraction) const { return top + (height - top - bottom) * (1.0 - fraction); }
};

std::string Header(const Chart& c, const std::string& title, const std::string& y_label) {
  std::string out = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
      "<text x=\"%d\" y=\"20\" font-size=\"15\">%s</text>\n"
      "<text x=\"14\" y=\"%d\" transform=\"rotate(-90 14 %d)\" text-anchor=\"middle\">%s</text>\n",
      c.width, c.height, c.left, title, c.height / 2, c.height / 2, y_label);
  for (size_t day = 0; day <= c.hours / 24; ++day) {
    const double x = c.X(static_cast<double>(day * 24));
    absl::StrAppend(
        &out,
        absl::StrFormat("<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#ddd\"/>\n"
                        "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">day %d</text>\n",
                        x, c.top, x, c.height - c.bottom, x + c.X(12) - c.X(0),
                        c.height - c.bottom + 16, day + 1));
  }
  return out;
}

std::string Polyline(const Chart& c, const std::vector<double>& fractions, const char* colour,
                     bool dashed) {
  std::string points;
  for (size_t h = 0; h < fractions.size(); ++h) {
    absl::StrAppend(&points, absl::StrFormat("%.1f,%.1f ", c.X(static_cast<double>(h) + 0.5),
                                             c.Y(std::clamp(fractions[h], 0.0, 1.0))));
  }
  return absl::StrFormat(
      "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"%s\"/>\n", colour,
      dashed ? "1" : "2", dashed ? " stroke-dasharray=\"4 3\"" : "", points);
}

std::string Legend(const Chart& c, const std::vector<Result>& results, const std::string& extra) {
  std::string out;
  for (size_t i = 0; i < results.size(); ++i) {
    const int x = c.left + static_cast<int>(i) * 110;
    absl::StrAppend(
        &out, absl::StrFormat("<rect x=\"%d\" y=\"34\" width=\"14\" height=\"4\" "
                              "fill=\"%s\"/><text x=\"%d\" y=\"40\">%s</text>\n",
                              x, kColours[i % kNumColours], x + 18, PolicyName(results[i].policy)));
  }
  if (!extra.empty()) {
    absl::StrAppend(&out, absl::StrFormat("<text x=\"%d\" y=\"40\" fill=\"#555\">%s</text>\n",
                                          c.left + static_cast<int>(results.size()) * 110, extra));
  }
  return out;
}

}  // namespace

std::string UtilizationSvg(const Scenario& scenario, const std::vector<Result>& results) {
  Chart c;
  c.hours = static_cast<size_t>(scenario.days) * 24;
  std::string out = Header(c, "Share of GPU capacity used (solid) and allocated (dashed), per hour",
                           "share of capacity");
  for (int pct = 0; pct <= 100; pct += 20) {
    absl::StrAppend(&out,
                    absl::StrFormat("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%d%%</text>"
                                    "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                                    "stroke=\"#eee\"/>\n",
                                    c.left - 6, c.Y(pct / 100.0) + 4, pct, c.left, c.Y(pct / 100.0),
                                    c.width - c.right, c.Y(pct / 100.0)));
  }
  const double per_hour =
      static_cast<double>(int64_t{scenario.cluster.nodes} * scenario.cluster.gpus_per_node) * 1000 *
      3600;
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<double> used, allocated;
    for (size_t h = 0; h < results[i].used_by_hour.size(); ++h) {
      used.push_back(static_cast<double>(results[i].used_by_hour[h]) / per_hour);
      allocated.push_back(static_cast<double>(results[i].allocated_by_hour[h]) / per_hour);
    }
    absl::StrAppend(&out, Polyline(c, allocated, kColours[i % kNumColours], true),
                    Polyline(c, used, kColours[i % kNumColours], false));
  }
  absl::StrAppend(&out, Legend(c, results, ""), "</svg>\n");
  return out;
}

std::string P99Svg(const Scenario& scenario, const std::vector<Result>& results) {
  Chart c;
  c.hours = static_cast<size_t>(scenario.days) * 24;
  std::string out =
      Header(c, "Serving p99 over its baseline, worst service, worst minute of each hour",
             "p99 / baseline (log)");
  const double top = std::log10(60.0);
  auto y = [&](double ratio) { return std::log10(std::max(ratio, 1.0)) / top; };
  for (double tick : {1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0}) {
    absl::StrAppend(&out, absl::StrFormat("<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%gx</text>"
                                          "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                                          "stroke=\"#eee\"/>\n",
                                          c.left - 6, c.Y(y(tick)) + 4, tick, c.left, c.Y(y(tick)),
                                          c.width - c.right, c.Y(y(tick))));
  }
  double slo = 1e9;
  for (const ServiceSpec& s : scenario.services) {
    slo = std::min(slo, static_cast<double>(s.slo_p99_ms) / static_cast<double>(s.base_p99_ms));
  }
  absl::StrAppend(&out, absl::StrFormat("<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" "
                                        "stroke=\"#555\" stroke-dasharray=\"6 4\"/>\n",
                                        c.left, c.Y(y(slo)), c.width - c.right, c.Y(y(slo))));
  for (size_t i = 0; i < results.size(); ++i) {
    std::vector<double> ratio(c.hours, 1.0);
    for (size_t h = 0; h < c.hours; ++h) {
      for (const ServiceResult& s : results[i].services) {
        ratio[h] = std::max(ratio[h],
                            HourWorst(s.p99_ms_by_minute, h) / static_cast<double>(s.base_p99_ms));
      }
      ratio[h] = y(ratio[h]);
    }
    absl::StrAppend(&out, Polyline(c, ratio, kColours[i % kNumColours], false));
  }
  absl::StrAppend(&out,
                  Legend(c, results, absl::StrFormat("dashed: the tightest SLO (%.1fx)", slo)),
                  "</svg>\n");
  return out;
}

}  // namespace arbiter::daysim
