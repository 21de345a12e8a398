// The approvals inbox: requests waiting in PENDING_APPROVAL that the
// authority rules name the user (or one of their groups) to approve, with
// what they would cost and borrow; approve, or deny with a reason. Every
// decision is the API's, and ledgered there. Kept live by WatchAllocations.
import { api, errorText, streamEndText } from "../api";
import { h, num, status } from "../dom";
import { gpus, money, rfc3339 } from "../format";
import { RequestState, type CapacityRequest } from "../gen/arbiter/v1/types_pb";
import type { Session } from "../main";
import { classText, reasonText, shapeText, stateText } from "./common";

function mine(r: CapacityRequest, s: Session): boolean {
  if (r.state !== RequestState.PENDING_APPROVAL) return false;
  const subjects = new Set([s.me.principal, ...s.me.groups.map((g) => `group:${g}`)]);
  return s.admin || r.approvers.some((a) => subjects.has(a));
}

export async function inboxPage(page: HTMLElement, s: Session, signal: AbortSignal): Promise<void> {
  page.append(h("h1", {}, "Approvals"));
  const note = h("p", { role: "status", id: "inbox-status" });
  const body = h("tbody", {});
  const rows = new Map<bigint, HTMLElement>();
  const empty = h("p", { class: "muted", id: "inbox-empty" }, "Nothing waits for your approval.");

  const render = (r: CapacityRequest) => {
    const old = rows.get(r.id);
    if (!mine(r, s)) {
      old?.remove();
      rows.delete(r.id);
    } else {
      const reason = h("input", { "aria-label": `Reason to deny request ${r.id}`, placeholder: "reason to deny" }) as HTMLInputElement;
      const act = async (approve: boolean) => {
        status(note, approve ? `approving ${r.id}…` : `denying ${r.id}…`);
        try {
          const resp = approve
            ? await api.allocation.approveRequest({ id: r.id })
            : await api.allocation.denyRequest({ id: r.id, reason: reason.value || "denied in the console" });
          if (resp.request) render(resp.request);
          status(note, `request ${r.id}: ${approve ? "approved" : "denied"}`);
        } catch (err) {
          status(note, errorText(err), true);
        }
      };
      // What approving would do now: the same call as a preview.
      const outcome = h("td", { "data-field": "preview" });
      const preview = async () => {
        status(outcome, "…");
        try {
          const resp = await api.allocation.approveRequest({ id: r.id, validateOnly: true });
          const victims = resp.wouldPreempt.map((v) => `request ${v.id} (${v.team}, ${gpus(v.totalGpuMilli)} GPUs)`);
          status(outcome, `${stateText(resp.request!.state)}; ${victims.length ? `would preempt ${victims.join(", ")}` : "preempts nothing"}`);
        } catch (err) {
          status(outcome, errorText(err), true);
        }
      };
      outcome.append(h("button", { type: "button", onclick: () => void preview() }, `Preview approving ${r.id}`));
      const row = h("tr", { "data-request-id": r.id.toString() },
        num(r.id.toString()), h("td", {}, r.team), h("td", {}, r.pool), h("td", {}, classText(r.workloadClass)),
        h("td", {}, `${r.members} × ${shapeText(r.shape)}`), num(gpus(r.totalGpuMilli)), num(money(r.costMicros)),
        h("td", {}, reasonText(r)),
        h("td", {}, r.approvals.length ? `approved by ${r.approvals.join(", ")}` : "none yet"),
        h("td", {}, r.approvalDeadline ? rfc3339(r.approvalDeadline) : ""),
        outcome,
        h("td", {},
          h("button", { type: "button", onclick: () => void act(true) }, `Approve ${r.id}`), " ",
          reason, " ",
          h("button", { type: "button", onclick: () => void act(false) }, `Deny ${r.id}`)));
      if (old) old.replaceWith(row);
      else body.append(row);
      rows.set(r.id, row);
    }
    empty.hidden = rows.size > 0;
  };

  const listed = await api.allocation.listRequests({ state: RequestState.PENDING_APPROVAL, pageSize: 200 });
  page.append(note, empty, h("table", { id: "inbox" },
    h("caption", { class: "muted" }, "Requests waiting for your approval"),
    h("thead", {}, h("tr", {}, ...["ID", "Team", "Pool", "Class", "Shape", "GPUs", "Projected cost", "Why it waits",
      "Approvals", "Decide by", "If approved now", "Decision"].map((x) => h("th", { scope: "col" }, x)))),
    body));
  for (const r of listed.requests) render(r);
  empty.hidden = rows.size > 0;

  void (async () => {
    try {
      for await (const ev of api.allocation.watchAllocations({ startRevision: listed.revision }, { signal })) {
        if (ev.request) render(ev.request);
        for (const e of ev.events) if (e.request) render(e.request);
      }
    } catch (err) {
      if (!signal.aborted) status(note, streamEndText(err), true);
    }
  })();
}
