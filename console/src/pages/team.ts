// A team's page: its requests, each with the reason it waits, kept live by
// WatchAllocations from the list's revision; its quotas; this month's
// statement with allocated vs used GPU-hours, budget burn and forecast.
import { api, errorText, streamEndText } from "../api";
import { h, num, status, table } from "../dom";
import { gpuHours, gpus, money, rfc3339 } from "../format";
import type { CapacityRequest } from "../gen/arbiter/v1/types_pb";
import type { Session } from "../main";
import { chart, hourSeries } from "./charts";
import { monthPeriod, REQUEST_HEADERS, requestRow, thisMonth } from "./common";

export async function teamPage(page: HTMLElement, team: string, _s: Session, signal: AbortSignal): Promise<void> {
  page.append(h("h1", {}, `Team ${team}`));
  const live = h("p", { id: "live", class: "muted", "aria-live": "polite" }, "connecting…");
  const listed = await api.allocation.listRequests({ team, pageSize: 200 });
  const body = h("tbody", {});
  const rows = new Map<bigint, HTMLElement>();
  const show = (r: CapacityRequest) => {
    const row = requestRow(r);
    const old = rows.get(r.id);
    if (old) old.replaceWith(row);
    else body.prepend(row);
    rows.set(r.id, row);
  };
  for (const r of [...listed.requests].reverse()) show(r);
  page.append(
    h("h2", {}, "Requests"), live,
    h("table", { id: "requests" },
      h("caption", { class: "muted" }, `Requests of ${team}, newest first`),
      h("thead", {}, h("tr", {}, ...REQUEST_HEADERS.map((x) => h("th", { scope: "col" }, x)))),
      body),
  );

  // Quotas, read again (at most every 2 s) while the team's requests change.
  const quotasBox = h("div", {});
  const loadQuotas = async () => {
    const quotas = await api.governance.listQuotas({ team });
    quotasBox.replaceChildren(
      table(`Quotas of ${team}`, ["Pool", "GPU model", "Nominal GPUs", "In use", "May borrow", "May lend"],
        quotas.quotas.map(({ quota: q, usedMilli }) => [q?.pool ?? "", q?.gpuModel || "any",
          num(gpus(q?.nominalMilli ?? 0n)), num(gpus(usedMilli)),
          num(q?.borrowingLimitMilli === undefined ? "no limit" : gpus(q.borrowingLimitMilli)),
          num(q?.lendingLimitMilli === undefined ? "no limit" : gpus(q.lendingLimitMilli))]),
        { id: "quotas" }));
  };
  let quotasDue: ReturnType<typeof setTimeout> | undefined;
  const quotasChanged = () => {
    if (quotasDue !== undefined || signal.aborted) return;
    quotasDue = setTimeout(() => {
      quotasDue = undefined;
      loadQuotas().catch(() => undefined);  // The next change tries again.
    }, 2000);
  };
  await loadQuotas();
  page.append(h("h2", {}, "Quotas"), quotasBox);

  await monthSummary(page, team);

  // Live: every committed change to the team's requests after the list.
  void (async () => {
    try {
      status(live, "live");
      live.className = "live";
      for await (const ev of api.allocation.watchAllocations(
        { team, startRevision: listed.revision }, { signal })) {
        if (ev.request) show(ev.request);
        for (const e of ev.events) if (e.request) show(e.request);
        if (ev.request || ev.events.length) quotasChanged();
      }
    } catch (err) {
      if (!signal.aborted) status(live, streamEndText(err), true);
    }
  })();
}

async function monthSummary(page: HTMLElement, team: string): Promise<void> {
  const month = thisMonth();
  page.append(h("h2", {}, `This month (${month})`));
  let cb;
  try {
    cb = await api.chargeback.getChargeback({ period: monthPeriod(month), team });
  } catch (err) {
    page.append(h("p", { class: "error" }, errorText(err)));
    return;
  }
  const s = cb.statements.find((x) => x.team === team);
  const period = monthPeriod(month);
  const start = Number(period.from.seconds) * 1000;
  const end = Number(period.to.seconds) * 1000;
  const elapsed = Math.min(1, Math.max(1e-6, (Date.now() - start) / (end - start)));
  if (s) {
    // A straight-line forecast: this month's net cost so far, at its pace.
    const forecast = BigInt(Math.round(Number(s.netCostMicros) / elapsed));
    page.append(table(`Statement of ${team} for ${month}`,
      ["Allocated GPU-h", "Used GPU-h", "Net cost", "Budget", "Remaining", "Forecast at month end"],
      [[num(gpuHours(s.reservedMilliSeconds)), num(gpuHours(s.usedMilliSeconds)), num(money(s.netCostMicros)),
        num(s.budgetMicros === undefined ? "none" : money(s.budgetMicros)),
        num(s.budgetMicros === undefined ? "" : money(s.remainderMicros)), num(money(forecast))]],
      { id: "statement" }));
  } else {
    page.append(h("p", { class: "muted" }, "No usage this month yet."));
  }
  if (cb.hours.length) {
    page.append(chart("line", `Allocated vs used GPU-hours per hour, ${team}`,
      cb.hours.map((p) => rfc3339(p.hour)), hourSeries(cb.hours), "chart-hours"));
  }
}
