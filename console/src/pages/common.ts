// What several pages show: a request's row, its shape, a month's period.
import { timestampFromDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import { h, num } from "../dom";
import { enumText, gpus, money } from "../format";
import { RequestState, WorkloadClass, type CapacityRequest, type MemberShape } from "../gen/arbiter/v1/types_pb";

export function shapeText(shape: MemberShape | undefined): string {
  const g = shape?.gpu;
  switch (g?.case) {
    case "wholeGpus": return `${g.value} GPU${g.value === 1 ? "" : "s"}`;
    case "fraction": return `${gpus(g.value.gpuMilli)} GPU, ${g.value.memoryMib} MiB`;
    case "migProfile": return `MIG ${g.value}`;
    case "modelProfile": return "model profile";
    default: return "";
  }
}

export const stateText = (s: RequestState): string => enumText(RequestState, s);
export const classText = (c: WorkloadClass): string => enumText(WorkloadClass, c);

// Why it waits, as the API states it: the machine-readable code, then the text.
export function reasonText(r: CapacityRequest): string {
  if (!r.reason && !r.reasonCode) return "";
  return r.reasonCode ? `${r.reasonCode}: ${r.reason}` : r.reason;
}

export function requestRow(r: CapacityRequest): HTMLElement {
  return h(
    "tr",
    { "data-request-id": r.id.toString(), "data-state": RequestState[r.state] },
    num(r.id.toString()),
    h("td", { "data-field": "state" }, stateText(r.state)),
    h("td", {}, r.team),
    h("td", {}, r.pool),
    h("td", {}, classText(r.workloadClass)),
    h("td", {}, `${r.members} × ${shapeText(r.shape)}`),
    num(gpus(r.totalGpuMilli)),
    h("td", { "data-field": "reason" }, reasonText(r)),
    num(r.queuePosition > 0n ? r.queuePosition.toString() : ""),
    num(money(r.costMicros)),
  );
}

export const REQUEST_HEADERS = ["ID", "State", "Team", "Pool", "Class", "Shape", "GPUs", "Why", "Queue", "Cost (projected while it runs)"];

// [first of the month, first of the next) in UTC, for "YYYY-MM".
export function monthPeriod(month: string): { from: Timestamp; to: Timestamp } {
  const [y, m] = month.split("-").map(Number);
  return {
    from: timestampFromDate(new Date(Date.UTC(y, m - 1, 1))),
    to: timestampFromDate(new Date(Date.UTC(y, m, 1))),
  };
}

export function thisMonth(): string {
  return new Date().toISOString().slice(0, 7);
}
