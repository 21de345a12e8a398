// Finance: a month's statements per team (GetChargeback), with charts of net
// cost and of allocated vs used GPU-hours; externality charges and credits
// with their incidents; exports byte for byte arbctl's (CSV, CSV lines,
// JSON); closing a month (finance). A team member sees their own team's.
import { api, errorText } from "../api";
import { h, num, status, table } from "../dom";
import { chargebackCsv, chargebackJson, download, gpuHours, kwh, money, rfc3339 } from "../format";
import type { GetChargebackResponse } from "../gen/arbiter/v1/chargeback_pb";
import type { Session } from "../main";
import { chart, hourSeries } from "./charts";
import { monthPeriod, thisMonth } from "./common";

export async function financePage(page: HTMLElement, s: Session): Promise<void> {
  page.append(h("h1", {}, "Finance"));
  const params = new URLSearchParams(location.hash.split("?")[1] ?? "");
  const month = h("input", { type: "month", id: "month", value: params.get("month") ?? thisMonth() }) as HTMLInputElement;
  const teams = s.orgReader ? ["", ...(await api.governance.listTeams({})).teams.map((t) => t.name)] : s.teams;
  const team = h("select", { id: "team" },
    ...teams.map((t) => h("option", { value: t }, t || "all teams"))) as HTMLSelectElement;
  const asked = params.get("team");
  if (asked !== null) {
    // A team the user reads no statement of is still asked for: the API's
    // refusal is what the page shows.
    if (!teams.includes(asked)) team.append(h("option", { value: asked }, asked || "all teams"));
    team.value = asked;
  }
  const note = h("p", { role: "status", id: "finance-status" });
  const report = h("div", { id: "report" });
  const load = async () => {
    report.replaceChildren();
    status(note, "loading…");
    try {
      const cb = await api.chargeback.getChargeback({ period: monthPeriod(month.value), team: team.value });
      status(note, cb.closed ? `Closed ${rfc3339(cb.closedAt)}; SHA-256 ${cb.sha256}` : "Open period: figures may still change with late telemetry.");
      show(report, cb, month.value, s);
    } catch (err) {
      status(note, errorText(err), true);
    }
  };
  page.append(
    h("form", { onsubmit: (e: Event) => { e.preventDefault(); void load(); } },
      h("label", { for: "month" }, "Month "), month, " ",
      h("label", { for: "team" }, "Team "), team, " ",
      h("button", { type: "submit" }, "Show")),
    note, report);
  await load();
}

function show(report: HTMLElement, cb: GetChargebackResponse, month: string, s: Session): void {
  const name = `chargeback-${month}${cb.team ? `-${cb.team}` : ""}`;
  report.append(
    h("p", {},
      h("button", { type: "button", id: "export-csv", onclick: () => download(`${name}.csv`, "text/csv", chargebackCsv(cb, false)) }, "Download CSV"), " ",
      h("button", { type: "button", id: "export-csv-lines", onclick: () => download(`${name}-lines.csv`, "text/csv", chargebackCsv(cb, true)) }, "Download CSV lines"), " ",
      h("button", { type: "button", id: "export-json", onclick: () => download(`${name}.json`, "application/json", chargebackJson(cb)) }, "Download JSON")),
    h("h2", {}, "Statements"),
    table(`Statements for ${month}`,
      ["Team", "Allocated GPU-h", "Used GPU-h", "Borrowed GPU-h", "Allocated cost", "Idle cost", "Energy kWh",
        "Externalities paid", "Externalities received", "Net cost", "Budget", "Remaining"],
      cb.statements.map((st) => [st.team,
        num(gpuHours(st.reservedMilliSeconds), { "data-total": `${st.team}.reserved` }),
        num(gpuHours(st.usedMilliSeconds), { "data-total": `${st.team}.used` }),
        num(gpuHours(st.borrowedMilliSeconds)),
        num(money(st.reservedCostMicros)), num(money(st.idleCostMicros)), num(kwh(st.energyMwh)),
        num(money(st.externalityChargedMicros), { "data-total": `${st.team}.charged` }),
        num(money(st.externalityCreditedMicros), { "data-total": `${st.team}.credited` }),
        num(money(st.netCostMicros), { "data-total": `${st.team}.net` }),
        num(st.budgetMicros === undefined ? "" : money(st.budgetMicros)),
        num(st.budgetMicros === undefined ? "" : money(st.remainderMicros))]),
      { id: "statements" }),
  );
  if (cb.statements.length) {
    report.append(h("h2", {}, "Net cost by team"),
      chart("bar", "Net cost by team", cb.statements.map((st) => st.team),
        [{ label: "net cost", color: "#2f6db5", values: cb.statements.map((st) => Number(st.netCostMicros) / 1e6),
          texts: cb.statements.map((st) => money(st.netCostMicros)) }], "chart-cost"));
  }
  if (cb.hours.length) {
    report.append(h("h2", {}, "Allocated vs used, per hour"),
      chart("line", "Allocated vs used GPU-hours per hour",
        cb.hours.map((p) => rfc3339(p.hour)), hourSeries(cb.hours), "chart-hours"));
  }
  report.append(h("h2", {}, "Incidents"),
    cb.incidents.length
      ? table("Latency incidents and the charges they carried", ["Incident", "Team", "Service", "Pool", "Cost", "Charged to"],
        cb.incidents.map((i) => [num(i.id.toString()), i.team, i.service, i.pool, num(money(i.costMicros)),
          i.charges.map((c) => `${c.team}: ${money(c.micros)}`).join("; ")]), { id: "incidents" })
      : h("p", { class: "muted" }, "No incidents in this period."));
  if (s.finance && !cb.closed && !cb.team) {
    const note = h("span", { role: "status" });
    report.append(h("p", {},
      h("button", { type: "button", id: "close-period", onclick: async () => {
        try {
          await api.chargeback.closePeriod({ period: cb.period });
          status(note, "closed: reload to see the frozen statements");
        } catch (err) { status(note, errorText(err), true); }
      } }, "Close this month"), " ", note));
  }
}
