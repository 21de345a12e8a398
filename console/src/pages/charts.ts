// Charts (Chart.js), each a labelled image followed by the same figures in
// a table (for screen readers, and for the tests that compare them with the
// API's answers).
import {
  BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, LineController,
  LineElement, PointElement, Tooltip,
} from "chart.js";
import { h, num } from "../dom";
import { gpuHours } from "../format";
import type { HourPoint } from "../gen/arbiter/v1/chargeback_pb";

Chart.register(BarController, BarElement, CategoryScale, Legend, LinearScale, LineController,
  LineElement, PointElement, Tooltip);

export interface Series {
  label: string;
  color: string;
  values: number[];  // Drawn.
  texts: string[];   // Shown in the table: the figures as the API states them.
}

export function chart(kind: "bar" | "line", label: string, labels: string[], series: Series[],
  id: string): HTMLElement {
  const canvas = h("canvas", { role: "img", "aria-label": label }) as HTMLCanvasElement;
  const figures = h("table", { id: `${id}-figures` },
    h("caption", { class: "muted" }, `${label}: the figures`),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, ""), ...series.map((s) => h("th", { scope: "col" }, s.label)))),
    h("tbody", {}, ...labels.map((l, i) => h("tr", {}, h("th", { scope: "row" }, l), ...series.map((s) => num(s.texts[i]))))));
  const box = h("div", { class: "chart", id, "data-chart": label }, canvas,
    h("details", {}, h("summary", {}, "The figures"), figures));
  new Chart(canvas, {
    type: kind,
    data: {
      labels,
      datasets: series.map((s) => ({ label: s.label, data: s.values, backgroundColor: s.color, borderColor: s.color })),
    },
    options: {
      animation: false,
      responsive: true,
      plugins: { legend: { display: series.length > 1 } },
      // An RFC 3339 hour is drawn short ("11-27 16h"); the table keeps it whole.
      scales: {
        // Time is never negative (money may be: a credit); bars start at 0.
        y: { min: kind === "line" ? 0 : undefined, beginAtZero: true },
        x: {
          ticks: {
            callback(value) {
              const text = this.getLabelForValue(Number(value));
              return /^\d{4}-\d\d-\d\dT\d\d/.test(text) ? `${text.slice(5, 10)} ${text.slice(11, 13)}h` : text;
            },
          },
        },
      },
    },
  });
  return box;
}

// Allocated and used GPU-hours per hour, as a chart's two series.
export function hourSeries(hours: HourPoint[]): Series[] {
  return [
    { label: "allocated GPU-h", color: "#2f6db5", values: hours.map((p) => Number(p.reservedMilliSeconds) / 3.6e6),
      texts: hours.map((p) => gpuHours(p.reservedMilliSeconds)) },
    { label: "used GPU-h", color: "#e08a1e", values: hours.map((p) => Number(p.usedMilliSeconds) / 3.6e6),
      texts: hours.map((p) => gpuHours(p.usedMilliSeconds)) },
  ];
}
