#include "clients/arbctl/report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include <google/protobuf/util/time_util.h>

namespace arbiter::arbctl {
namespace {

using google::protobuf::util::TimeUtil;

std::string Fixed(int64_t value, int64_t unit, int decimals) {
  const char* sign = value < 0 ? "-" : "";
  const uint64_t v = value < 0 ? -static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  int64_t scale = 1;
  for (int i = 0; i < decimals; ++i) scale *= 10;
  const uint64_t scaled = (v * scale + static_cast<uint64_t>(unit) / 2) / unit;
  return absl::StrFormat("%s%d.%0*d", sign, scaled / scale, decimals, scaled % scale);
}

std::string Html(absl::string_view s) {
  return absl::StrReplaceAll(
      s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}, {"'", "&#39;"}});
}

std::string Csv(absl::string_view s) {
  if (s.find_first_of(",\"\n") == absl::string_view::npos) return std::string(s);
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\"", "\"\""}}), "\"");
}

std::string Time(const google::protobuf::Timestamp& t) { return TimeUtil::ToString(t); }

// A cell showing `text`, carrying the exact `value` for `key`.
std::string TotalCell(const std::string& key, int64_t value, const std::string& text) {
  return absl::StrCat("<td class=\"num\" data-total=\"", Html(key), "\" data-value=\"", value,
                      "\">", Html(text), "</td>");
}

const char kStyle[] = R"(
body { font-family: "DejaVu Sans", sans-serif; margin: 24px; color: #1d2733; }
h1 { font-size: 22px; margin-bottom: 4px; }
h2 { font-size: 17px; margin-top: 28px; }
.meta { color: #566; font-size: 13px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border-bottom: 1px solid #dde; padding: 4px 10px; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.ok { color: #17703a; } .bad { color: #b3261e; }
.legend span { display: inline-block; margin-right: 16px; font-size: 12px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
)";

// Allocated vs used GPU-hours per hour, as two polylines.
std::string UsageChart(const v1::GetChargebackResponse& cb) {
  constexpr int kW = 900, kH = 260, kPad = 40;
  int64_t top = 1;
  for (const v1::HourPoint& h : cb.hours()) {
    top = std::max({top, h.reserved_milli_seconds(), h.used_milli_seconds()});
  }
  const int n = std::max(1, cb.hours_size() - 1);
  auto point = [&](int i, int64_t v) {
    return absl::StrFormat("%d,%d", kPad + (kW - 2 * kPad) * i / n,
                           kH - kPad - static_cast<int>((kH - 2 * kPad) * v / top));
  };
  std::vector<std::string> reserved, used;
  for (int i = 0; i < cb.hours_size(); ++i) {
    reserved.push_back(point(i, cb.hours(i).reserved_milli_seconds()));
    used.push_back(point(i, cb.hours(i).used_milli_seconds()));
  }
  std::string svg = absl::StrFormat(
      "<svg id=\"chart-usage\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"Allocated vs used GPU-hours per hour\">",
      kW, kH);
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#889\"/>"
                        "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#889\"/>",
                        kPad, kH - kPad, kW - kPad, kH - kPad, kPad, kPad, kPad, kH - kPad);
  absl::StrAppendFormat(&svg, "<text x=\"4\" y=\"%d\" font-size=\"11\">%s GPU-h</text>", kPad - 8,
                        GpuHoursText(top));
  if (cb.hours_size() > 0) {
    absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" font-size=\"11\">%s</text>", kPad, kH - 12,
                          Html(Time(cb.hours(0).hour())));
    absl::StrAppendFormat(&svg,
                          "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%s</text>",
                          kW - kPad, kH - 12, Html(Time(cb.hours(cb.hours_size() - 1).hour())));
  }
  absl::StrAppendFormat(&svg,
                        "<polyline class=\"series-reserved\" fill=\"none\" stroke=\"#2f6db5\" "
                        "stroke-width=\"2.5\" points=\"%s\"/>",
                        absl::StrJoin(reserved, " "));
  absl::StrAppendFormat(&svg,
                        "<polyline class=\"series-used\" fill=\"none\" stroke=\"#e08a1e\" "
                        "stroke-width=\"2.5\" points=\"%s\"/>",
                        absl::StrJoin(used, " "));
  return svg + "</svg>";
}

struct Bar {
  std::string label;
  int64_t value = 0;
  std::string color;
};

// Horizontal bars, one row per label.
std::string BarChart(const std::string& id, const std::string& label, const std::vector<Bar>& bars,
                     std::string (*text)(int64_t)) {
  constexpr int kW = 900, kRow = 26, kLabel = 180, kValue = 120;
  int64_t top = 1;
  for (const Bar& b : bars) top = std::max(top, std::abs(b.value));
  const int height = std::max<int>(kRow, kRow * static_cast<int>(bars.size())) + 8;
  std::string svg = absl::StrFormat(
      "<svg id=\"%s\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
      "role=\"img\" aria-label=\"%s\">",
      Html(id), kW, height, Html(label));
  for (size_t i = 0; i < bars.size(); ++i) {
    const Bar& b = bars[i];
    const int y = static_cast<int>(i) * kRow + 4;
    const int width =
        static_cast<int>((kW - kLabel - kValue) * std::abs(b.value) / top) + (b.value != 0 ? 1 : 0);
    absl::StrAppendFormat(&svg, "<text x=\"0\" y=\"%d\" font-size=\"12\">%s</text>", y + 15,
                          Html(b.label));
    absl::StrAppendFormat(&svg,
                          "<rect class=\"bar\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
                          "fill=\"%s\"/>",
                          kLabel, y, width, kRow - 8, b.color);
    absl::StrAppendFormat(&svg, "<text x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>",
                          kLabel + width + 6, y + 15, Html(text(b.value)));
  }
  return svg + "</svg>";
}

std::string Legend(const std::vector<std::pair<std::string, std::string>>& items) {
  std::string out = "<div class=\"legend\">";
  for (const auto& [color, label] : items) {
    absl::StrAppend(&out, "<span><i class=\"swatch\" style=\"background:", color, "\"></i>",
                    Html(label), "</span>");
  }
  return out + "</div>";
}

std::string StatementTable(const v1::GetChargebackResponse& cb) {
  std::string out =
      "<table id=\"statements\"><tr><th>Team</th><th class=\"num\">Reserved GPU-h</th>"
      "<th class=\"num\">Used GPU-h</th><th class=\"num\">Borrowed GPU-h</th>"
      "<th class=\"num\">Reserved cost</th><th class=\"num\">Idle cost</th>"
      "<th class=\"num\">Energy kWh</th><th class=\"num\">Externalities paid</th>"
      "<th class=\"num\">Credits received</th><th class=\"num\">Net cost</th>"
      "<th class=\"num\">Budget</th><th class=\"num\">Remainder</th></tr>";
  int64_t reserved = 0, cost = 0, charged = 0, credited = 0, net = 0;
  for (const v1::Statement& s : cb.statements()) {
    const std::string t = s.team();
    absl::StrAppend(
        &out, "<tr><td>", Html(t), "</td>",
        TotalCell(t + ":reserved_milli_seconds", s.reserved_milli_seconds(),
                  GpuHoursText(s.reserved_milli_seconds())),
        TotalCell(t + ":used_milli_seconds", s.used_milli_seconds(),
                  GpuHoursText(s.used_milli_seconds())),
        TotalCell(t + ":borrowed_milli_seconds", s.borrowed_milli_seconds(),
                  GpuHoursText(s.borrowed_milli_seconds())),
        TotalCell(t + ":reserved_cost_micros", s.reserved_cost_micros(),
                  MoneyText(s.reserved_cost_micros())),
        TotalCell(t + ":idle_cost_micros", s.idle_cost_micros(), MoneyText(s.idle_cost_micros())),
        TotalCell(t + ":energy_mwh", s.energy_mwh(), KwhText(s.energy_mwh())));
    absl::StrAppend(
        &out,
        TotalCell(t + ":externality_charged_micros", s.externality_charged_micros(),
                  MoneyText(s.externality_charged_micros())),
        TotalCell(t + ":externality_credited_micros", s.externality_credited_micros(),
                  MoneyText(s.externality_credited_micros())),
        TotalCell(t + ":net_cost_micros", s.net_cost_micros(), MoneyText(s.net_cost_micros())));
    if (s.has_budget_micros()) {
      absl::StrAppend(
          &out, TotalCell(t + ":budget_micros", s.budget_micros(), MoneyText(s.budget_micros())),
          TotalCell(t + ":remainder_micros", s.remainder_micros(), MoneyText(s.remainder_micros())),
          "</tr>");
    } else {
      absl::StrAppend(&out, "<td class=\"num\">-</td><td class=\"num\">-</td></tr>");
    }
    reserved += s.reserved_milli_seconds();
    cost += s.reserved_cost_micros();
    charged += s.externality_charged_micros();
    credited += s.externality_credited_micros();
    net += s.net_cost_micros();
  }
  absl::StrAppend(&out, "<tr><th>All teams</th>",
                  TotalCell("all:reserved_milli_seconds", reserved, GpuHoursText(reserved)),
                  "<td></td><td></td>",
                  TotalCell("all:reserved_cost_micros", cost, MoneyText(cost)),
                  "<td></td><td></td>",
                  TotalCell("all:externality_charged_micros", charged, MoneyText(charged)),
                  TotalCell("all:externality_credited_micros", credited, MoneyText(credited)),
                  TotalCell("all:net_cost_micros", net, MoneyText(net)), "<td></td><td></td></tr>");
  return out + "</table>";
}

std::string Conservation(const v1::GetChargebackResponse& cb) {
  int64_t reserved = 0, charged = 0, credited = 0;
  for (const v1::Statement& s : cb.statements()) {
    reserved += s.reserved_milli_seconds();
    charged += s.externality_charged_micros();
    credited += s.externality_credited_micros();
  }
  auto check = [](bool ok, const std::string& what) {
    return absl::StrCat("<li class=\"", ok ? "ok" : "bad", "\">",
                        ok ? "OK: " : "MISMATCH: ", Html(what), "</li>");
  };
  return absl::StrCat(
      "<ul id=\"conservation\">",
      check(reserved == cb.cluster_reserved_milli_seconds(),
            absl::StrCat("teams' reserved GPU-hours ", GpuHoursText(reserved),
                         " = the cluster's allocated GPU-hours ",
                         GpuHoursText(cb.cluster_reserved_milli_seconds()))),
      check(charged == cb.incidents_attributed_micros(),
            absl::StrCat("externality charges ", MoneyText(charged), " = incidents' cost ",
                         MoneyText(cb.incidents_attributed_micros()))),
      check(credited == charged,
            absl::StrCat("credits ", MoneyText(credited), " = charges ", MoneyText(charged))),
      "</ul>",
      "<p class=\"meta\">Cluster: <span data-total=\"cluster:reserved_milli_seconds\" "
      "data-value=\"",
      cb.cluster_reserved_milli_seconds(), "\">", GpuHoursText(cb.cluster_reserved_milli_seconds()),
      " GPU-h</span> allocated; <span data-total=\"cluster:incidents_attributed_micros\" "
      "data-value=\"",
      cb.incidents_attributed_micros(), "\">", MoneyText(cb.incidents_attributed_micros()),
      "</span> in incident costs attributed.</p>");
}

std::string IncidentTable(const v1::GetChargebackResponse& cb) {
  if (cb.incidents_size() == 0) return "<p id=\"incidents\">No incidents in this period.</p>";
  std::string out =
      "<table id=\"incidents\"><tr><th>#</th><th>Victim</th><th>Service</th><th>Window</th>"
      "<th class=\"num\">p99 / target ms</th><th class=\"num\">Cost</th><th>Basis</th>"
      "<th>Charged to (borrowed / co-tenancy / admission delay, GPU-h)</th></tr>";
  for (const v1::Incident& i : cb.incidents()) {
    std::vector<std::string> charges;
    for (const v1::ExternalityCharge& c : i.charges()) {
      charges.push_back(absl::StrCat(Html(c.team()), " ", MoneyText(c.micros()), " (",
                                     GpuHoursText(c.borrowed_milli_seconds()), " / ",
                                     GpuHoursText(c.co_tenancy_milli_seconds()), " / ",
                                     GpuHoursText(c.admission_delay_milli_seconds()), ")"));
    }
    absl::StrAppend(&out, "<tr><td>", i.id(), "</td><td>", Html(i.team()), "</td><td>",
                    Html(i.service()), "</td><td>", Html(Time(i.window().start())), " to ",
                    Html(Time(i.window().end())), "</td><td class=\"num\">",
                    Fixed(i.window().p99_us(), 1000, 1), " / ", Fixed(i.p99_target_us(), 1000, 1),
                    "</td><td class=\"num\">", MoneyText(i.cost_micros()), "</td><td>",
                    Html(i.cost_basis()), "</td><td>",
                    charges.empty() ? "nobody pressed (not charged)" : absl::StrJoin(charges, "; "),
                    "</td></tr>");
  }
  return out + "</table>";
}

}  // namespace

std::string MoneyText(int64_t micros) { return Fixed(micros, 1'000'000, 2); }
std::string GpuHoursText(int64_t milli_seconds) { return Fixed(milli_seconds, 3'600'000, 2); }
std::string KwhText(int64_t mwh) { return Fixed(mwh, 1'000'000, 3); }
std::string ClassText(v1::WorkloadClass c) {
  return absl::AsciiStrToLower(
      v1::WorkloadClass_Name(c).substr(std::string("WORKLOAD_CLASS_").size()));
}
std::string PercentText(int64_t milli) { return absl::StrCat(milli / 10.0, "%"); }

std::string ChargebackCsv(const v1::GetChargebackResponse& cb, bool lines) {
  const std::string from = Time(cb.period().from()), to = Time(cb.period().to());
  std::string out;
  if (lines) {
    out =
        "period_from,period_to,team,pool,gpu_model,workload_class,reserved_gpu_hours,"
        "used_gpu_hours,sampled_gpu_hours,reserved_cost,idle_cost,energy_kwh,"
        "energy_measured_kwh,energy_tdp_estimate_kwh\n";
    for (const v1::Statement& s : cb.statements()) {
      for (const v1::StatementLine& l : s.lines()) {
        absl::StrAppend(
            &out, from, ",", to, ",", Csv(s.team()), ",", Csv(l.pool()), ",", Csv(l.gpu_model()),
            ",", ClassText(l.workload_class()), ",", GpuHoursText(l.reserved_milli_seconds()), ",",
            GpuHoursText(l.used_milli_seconds()), ",", GpuHoursText(l.sampled_milli_seconds()), ",",
            MoneyText(l.reserved_cost_micros()), ",", MoneyText(l.idle_cost_micros()), ",",
            KwhText(l.energy_mwh()), ",", KwhText(l.energy_measured_mwh()), ",",
            KwhText(l.energy_estimated_mwh()), "\n");
      }
    }
    return out;
  }
  out =
      "period_from,period_to,team,reserved_gpu_hours,used_gpu_hours,borrowed_gpu_hours,"
      "reserved_cost,idle_cost,energy_kwh,externality_charged,externality_credited,"
      "incidents_caused,incidents_suffered,net_cost,budget,remainder\n";
  for (const v1::Statement& s : cb.statements()) {
    absl::StrAppend(
        &out, from, ",", to, ",", Csv(s.team()), ",", GpuHoursText(s.reserved_milli_seconds()), ",",
        GpuHoursText(s.used_milli_seconds()), ",", GpuHoursText(s.borrowed_milli_seconds()), ",",
        MoneyText(s.reserved_cost_micros()), ",", MoneyText(s.idle_cost_micros()), ",",
        KwhText(s.energy_mwh()), ",", MoneyText(s.externality_charged_micros()), ",",
        MoneyText(s.externality_credited_micros()), ",", s.incidents_caused(), ",",
        s.incidents_suffered(), ",", MoneyText(s.net_cost_micros()), ",",
        s.has_budget_micros() ? MoneyText(s.budget_micros()) : "", ",",
        s.has_budget_micros() ? MoneyText(s.remainder_micros()) : "", "\n");
  }
  return out;
}

std::string ChargebackHtml(const v1::GetChargebackResponse& cb) {
  const std::string period = absl::StrCat(Time(cb.period().from()), " to ", Time(cb.period().to()));
  std::vector<Bar> cost, externalities;
  for (const v1::Statement& s : cb.statements()) {
    cost.push_back({s.team(), s.net_cost_micros(), "#2f6db5"});
    if (s.externality_charged_micros() != 0) {
      externalities.push_back({s.team() + " paid", s.externality_charged_micros(), "#b3261e"});
    }
    if (s.externality_credited_micros() != 0) {
      externalities.push_back({s.team() + " received", s.externality_credited_micros(), "#17703a"});
    }
  }
  std::string status = cb.closed()
                           ? absl::StrCat("Closed ", Html(Time(cb.closed_at())),
                                          "; SHA-256 of the frozen statements, recorded in the "
                                          "ledger: <code id=\"sha256\">",
                                          Html(cb.sha256()), "</code>")
                           : "Open period: figures may still change with late telemetry.";
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>Arbiter chargeback ",
      Html(period), "</title><style>", kStyle, "</style></head><body>", "<h1>GPU chargeback",
      cb.team().empty() ? "" : absl::StrCat(": ", Html(cb.team())), "</h1>", "<p class=\"meta\">",
      Html(period), " (UTC). ", status, "</p>", "<h2>Statements</h2>", StatementTable(cb),
      Conservation(cb), "<h2>Allocated vs used, per hour</h2>",
      Legend({{"#2f6db5", "allocated GPU-h"}, {"#e08a1e", "used GPU-h (telemetry)"}}),
      UsageChart(cb), "<h2>Net cost by team</h2>",
      BarChart("chart-cost", "Net cost by team", cost, &MoneyText),
      "<h2>Externalities paid and received</h2>",
      Legend({{"#b3261e", "paid (charges)"}, {"#17703a", "received (credits)"}}),
      BarChart("chart-externalities", "Externalities paid and received", externalities, &MoneyText),
      "<h2>Incidents</h2>", IncidentTable(cb),
      "<p class=\"meta\">Method: interference-gpu-seconds/v1. Money in the price book's units; "
      "GPU-hours from milli-GPU seconds. See docs/chargeback.md.</p>",
      "</body></html>\n");
}

}  // namespace arbiter::arbctl
