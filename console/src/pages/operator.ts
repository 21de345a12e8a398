// The operator's view: pools, and every node's GPUs with what holds them
// (whole, fractional shares, MIG slices), so that fragmentation is visible at
// a glance; cordon, uncordon and drain; the ledger's latest signed
// checkpoint.
import { api, errorText } from "../api";
import { h, num, status, table } from "../dom";
import { enumText, gpus, money, rfc3339 } from "../format";
import { LatencyClass, NodeState, type Gpu, type Node } from "../gen/arbiter/v1/types_pb";
import type { Session } from "../main";
import { monthPeriod, thisMonth } from "./common";

function gpuTile(g: Gpu): HTMLElement {
  const used = Number(g.allocatedMilli) / 10;
  const label = g.migInstances.length
    ? `GPU ${g.index} ${g.model}: MIG ${g.migInstances.map((m) => `${m.profile}${m.allocated ? " (held)" : " (free)"}`).join(", ")}`
    : `GPU ${g.index} ${g.model}: ${gpus(g.allocatedMilli)} of 1 allocated${g.exclusive ? ", exclusive" : ""}`;
  return h("div", { class: "gpu", role: "img", "aria-label": label, "data-gpu": g.index, "data-allocated-milli": g.allocatedMilli.toString() },
    h("div", {}, `GPU ${g.index} · ${g.model}`),
    h("div", { class: "bar" }, h("span", { style: `width:${Math.min(100, used)}%` })),
    h("div", { class: "muted" }, g.migInstances.length ? "MIG" : `${gpus(g.allocatedMilli)} allocated`),
    g.migInstances.length
      ? h("div", { class: "slices" }, ...g.migInstances.map((m) => h("span", {
        class: m.allocated ? "used" : "free", title: `${m.profile} @ slot ${m.startSlot}`,
      })))
      : null);
}

function nodeActions(n: Node, note: HTMLElement, refresh: () => void): HTMLElement {
  const act = async (what: string, call: () => Promise<unknown>) => {
    try {
      await call();
      status(note, `${n.name}: ${what}`);
      refresh();
    } catch (err) {
      status(note, errorText(err), true);
    }
  };
  const id = { cluster: n.cluster, name: n.name };
  return h("td", {},
    n.state === NodeState.READY
      ? h("button", { type: "button", onclick: () => void act("cordoned", () => api.inventory.cordonNode(id)) }, `Cordon ${n.name}`)
      : h("button", { type: "button", onclick: () => void act("uncordoned", () => api.inventory.uncordonNode(id)) }, `Uncordon ${n.name}`),
    " ",
    h("button", { type: "button", onclick: () => void act("draining", () => api.inventory.drainNode({ ...id, graceSeconds: 300n })) }, `Drain ${n.name}`));
}

export async function operatorPage(page: HTMLElement, _s: Session): Promise<void> {
  page.append(h("h1", {}, "Operator"));
  const note = h("p", { role: "status" });
  const pools = await api.inventory.listPools({});
  page.append(note, h("h2", {}, "Pools"),
    table("Pools", ["Pool", "Latency class", "Reclaim grace", "Description"],
      pools.pools.map((p) => [p.name, enumText(LatencyClass, p.latencyClass),
        p.reclaimGraceSeconds === undefined ? "" : `${p.reclaimGraceSeconds} s`, p.description]), { id: "pools" }));

  const nodesBox = h("div", { id: "nodes" });
  const refresh = async () => {
    const nodes = await api.inventory.listNodes({});
    nodesBox.replaceChildren(table("Nodes and their GPUs", ["Cluster", "Node", "Pool", "State", "GPUs", "Actions"],
      nodes.nodes.map((n) => [n.cluster, n.name, n.pool, enumText(NodeState, n.state),
        h("td", {}, h("div", { class: "gpus" }, ...n.gpus.map(gpuTile))), nodeActions(n, note, () => void refresh())])));
  };
  page.append(h("h2", {}, "Nodes"), nodesBox);
  await refresh();

  page.append(h("h2", {}, "Incidents this month"));
  try {
    const month = thisMonth();
    const incidents = await api.chargeback.listIncidents({ period: monthPeriod(month) });
    page.append(incidents.incidents.length
      ? table(`Latency incidents in ${month}`, ["Incident", "Team", "Service", "Pool", "Window", "p99 target", "Cost", "Charged to"],
        incidents.incidents.map((i) => [num(i.id.toString()), i.team, i.service, i.pool,
          `${rfc3339(i.window?.start)} to ${rfc3339(i.window?.end)}`, `${Number(i.p99TargetUs) / 1000} ms`,
          num(money(i.costMicros)), i.charges.map((c) => `${c.team}: ${money(c.micros)}`).join("; ")]),
        { id: "incidents" })
      : h("p", { class: "muted", id: "incidents" }, "No latency incidents this month."));
  } catch (err) {
    page.append(h("p", { class: "muted" }, `Incidents: ${errorText(err)}`));
  }

  page.append(h("h2", {}, "Ledger"));
  try {
    let after = 0n;
    let last;
    for (;;) {
      const resp = await api.ledger.listCheckpoints({ afterSeq: after, pageSize: 10000 });
      if (resp.checkpoints.length) last = resp.checkpoints[resp.checkpoints.length - 1];
      if (resp.nextAfterSeq === 0n) break;
      after = resp.nextAfterSeq;
    }
    page.append(last
      ? h("p", { id: "ledger" }, `Latest signed checkpoint: entry ${last.seq} at ${rfc3339(last.at)}, head ${last.hash.slice(0, 16)}…. Verify the whole chain with `, h("code", {}, "arbctl ledger verify"), ".")
      : h("p", { id: "ledger", class: "muted" }, "No signed checkpoint yet."));
  } catch (err) {
    page.append(h("p", { class: "muted" }, `Ledger: ${errorText(err)}`));
  }
}
