// Figures as arbctl writes them (clients/arbctl/report.cc), so that the
// console's exports are byte for byte arbctl's: fixed decimals rounded half
// up from integer milli-units, RFC 3339 times, RFC 4180 CSV.
import { toJsonString } from "@bufbuild/protobuf";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import { GetChargebackResponseSchema, type GetChargebackResponse } from "./gen/arbiter/v1/chargeback_pb";
import { WorkloadClass } from "./gen/arbiter/v1/types_pb";

// `value` / `unit` with `decimals` decimals, rounded half up on the
// magnitude (as arbctl's Fixed).
export function fixed(value: bigint, unit: bigint, decimals: number): string {
  const negative = value < 0n;
  const v = negative ? -value : value;
  const scale = 10n ** BigInt(decimals);
  const scaled = (v * scale + unit / 2n) / unit;
  const whole = scaled / scale;
  const frac = (scaled % scale).toString().padStart(decimals, "0");
  return `${negative ? "-" : ""}${whole}.${frac}`;
}

export const money = (micros: bigint): string => fixed(micros, 1_000_000n, 2);
export const gpuHours = (milliSeconds: bigint): string => fixed(milliSeconds, 3_600_000n, 2);
export const kwh = (mwh: bigint): string => fixed(mwh, 1_000_000n, 3);
export const gpus = (milli: bigint | number): string => {
  const m = BigInt(milli);
  return m % 1000n === 0n ? `${m / 1000n}` : fixed(m, 1000n, 3).replace(/0+$/, "");
};

export function csvField(s: string): string {
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

// As protobuf's TimeUtil::ToString: UTC, "Z", and 0, 3, 6 or 9 decimals.
export function rfc3339(t: Timestamp | undefined): string {
  const seconds = t ? t.seconds : 0n;
  const nanos = t ? t.nanos : 0;
  const date = new Date(Number(seconds) * 1000).toISOString().replace(/\.\d{3}Z$/, "");
  if (nanos === 0) return `${date}Z`;
  let frac = nanos.toString().padStart(9, "0");
  if (nanos % 1_000_000 === 0) frac = frac.slice(0, 3);
  else if (nanos % 1000 === 0) frac = frac.slice(0, 6);
  return `${date}.${frac}Z`;
}

export function className(c: WorkloadClass): string {
  return (WorkloadClass[c] ?? "UNSPECIFIED").toLowerCase();
}

export function enumText(names: Record<number, string>, value: number): string {
  return (names[value] ?? String(value)).toLowerCase().replace(/_/g, " ");
}

// arbctl chargeback show --format csv (lines: --format csv-lines).
export function chargebackCsv(cb: GetChargebackResponse, lines: boolean): string {
  const from = rfc3339(cb.period?.from);
  const to = rfc3339(cb.period?.to);
  let out = "";
  if (lines) {
    out =
      "period_from,period_to,team,pool,gpu_model,workload_class,reserved_gpu_hours," +
      "used_gpu_hours,sampled_gpu_hours,reserved_cost,idle_cost,energy_kwh," +
      "energy_measured_kwh,energy_tdp_estimate_kwh\n";
    for (const s of cb.statements) {
      for (const l of s.lines) {
        out += [from, to, csvField(s.team), csvField(l.pool), csvField(l.gpuModel),
          className(l.workloadClass), gpuHours(l.reservedMilliSeconds), gpuHours(l.usedMilliSeconds),
          gpuHours(l.sampledMilliSeconds), money(l.reservedCostMicros), money(l.idleCostMicros),
          kwh(l.energyMwh), kwh(l.energyMeasuredMwh), kwh(l.energyEstimatedMwh)].join(",") + "\n";
      }
    }
    return out;
  }
  out =
    "period_from,period_to,team,reserved_gpu_hours,used_gpu_hours,borrowed_gpu_hours," +
    "reserved_cost,idle_cost,energy_kwh,externality_charged,externality_credited," +
    "incidents_caused,incidents_suffered,net_cost,budget,remainder\n";
  for (const s of cb.statements) {
    const budgeted = s.budgetMicros !== undefined;
    out += [from, to, csvField(s.team), gpuHours(s.reservedMilliSeconds), gpuHours(s.usedMilliSeconds),
      gpuHours(s.borrowedMilliSeconds), money(s.reservedCostMicros), money(s.idleCostMicros),
      kwh(s.energyMwh), money(s.externalityChargedMicros), money(s.externalityCreditedMicros),
      s.incidentsCaused.toString(), s.incidentsSuffered.toString(), money(s.netCostMicros),
      budgeted ? money(s.budgetMicros!) : "", budgeted ? money(s.remainderMicros) : ""].join(",") + "\n";
  }
  return out;
}

// arbctl chargeback show --format json: proto field names, one space of
// indentation per level.
export function chargebackJson(cb: GetChargebackResponse): string {
  // protobuf C++ ends a pretty-printed message with a newline.
  return `${toJsonString(GetChargebackResponseSchema, cb, { useProtoFieldName: true, prettySpaces: 1 })}\n`;
}

export function download(name: string, type: string, text: string): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = name;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}
