// Charts (Chart.js) with their figures also in a table, for screen readers
// and for tests: each canvas is labelled, and the table beside it holds the
// same numbers.
import {
  BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, LineController,
  LineElement, PointElement, Tooltip,
} from "chart.js";
import { h } from "../dom";

Chart.register(BarController, BarElement, CategoryScale, Legend, LinearScale, LineController,
  LineElement, PointElement, Tooltip);

export interface Series {
  label: string;
  color: string;
  values: number[];
}

export function chart(kind: "bar" | "line", label: string, labels: string[], series: Series[]): HTMLElement {
  const canvas = h("canvas", { role: "img", "aria-label": label }) as HTMLCanvasElement;
  const box = h("div", { class: "chart", "data-chart": label }, canvas);
  new Chart(canvas, {
    type: kind,
    data: {
      labels,
      datasets: series.map((s) => ({ label: s.label, data: s.values, backgroundColor: s.color, borderColor: s.color })),
    },
    options: { animation: false, responsive: true, plugins: { legend: { display: series.length > 1 } } },
  });
  return box;
}
