// A new capacity request, submitted as RequestCapacity with a fresh
// idempotency key (a resubmitted form does not ask twice). The answer shows
// where it landed, what it costs, or why it waits.
import { api, errorText } from "../api";
import { h, num, status, table } from "../dom";
import { gpus, money, rfc3339 } from "../format";
import { create } from "@bufbuild/protobuf";
import { GpuFractionSchema, WorkloadClass, type MemberShape } from "../gen/arbiter/v1/types_pb";
import type { Session } from "../main";
import { classText, reasonText, stateText } from "./common";

function field(label: string, id: string, control: HTMLElement): HTMLElement[] {
  control.id = id;
  return [h("label", { for: id }, label), control];
}

function select(name: string, options: [string, string][]): HTMLSelectElement {
  return h("select", { name }, ...options.map(([value, text]) => h("option", { value }, text))) as HTMLSelectElement;
}

export async function requestPage(page: HTMLElement, s: Session): Promise<void> {
  page.append(h("h1", {}, "New request"));
  const pools = await api.inventory.listPools({});
  const team = s.teams.length
    ? select("team", s.teams.map((t) => [t, t]))
    : (h("input", { name: "team", required: true }) as HTMLInputElement);
  const pool = select("pool", pools.pools.map((p) => [p.name, p.name]));
  const cls = select("class", [
    ["TRAINING", "training"], ["INFERENCE", "inference"], ["BATCH_ANALYTICS", "batch analytics"],
    ["EXPERIMENTATION", "experimentation"]]);
  const members = h("input", { name: "members", type: "number", min: 1, value: 1, required: true }) as HTMLInputElement;
  const kind = select("kind", [["whole", "whole GPUs"], ["fraction", "a fraction of a GPU"], ["mig", "a MIG slice"]]);
  const count = h("input", { name: "count", type: "number", min: 1, value: 1 }) as HTMLInputElement;
  const milli = h("input", { name: "milli", type: "number", min: 1, max: 999, value: 250 }) as HTMLInputElement;
  const memory = h("input", { name: "memory", type: "number", min: 1, value: 8192 }) as HTMLInputElement;
  const profile = h("input", { name: "profile", value: "3g.40gb" }) as HTMLInputElement;
  const preemptible = h("input", { name: "preemptible", type: "checkbox" }) as HTMLInputElement;
  const checkpoint = h("input", { name: "checkpoint", type: "number", min: 0, value: 0 }) as HTMLInputElement;
  const description = h("input", { name: "description", size: 50 }) as HTMLInputElement;
  const answer = h("div", { id: "answer", "aria-live": "polite" });
  const note = h("p", { role: "alert" });

  const shape = (): MemberShape["gpu"] => {
    switch (kind.value) {
      case "fraction":
        return { case: "fraction", value: create(GpuFractionSchema, { gpuMilli: BigInt(milli.value), memoryMib: BigInt(memory.value) }) };
      case "mig": return { case: "migProfile", value: profile.value };
      default: return { case: "wholeGpus", value: Number(count.value) };
    }
  };
  // A dry run first: the same call with validateOnly, decided on a copy of
  // the arbiter's state; the form keeps one idempotency key per request so
  // that the preview and the submission describe the same call.
  let key = `console-${crypto.randomUUID()}`;
  const call = async (preview: boolean) => {
    status(note, preview ? "previewing…" : "submitting…");
    answer.replaceChildren();
    try {
      const resp = await api.allocation.requestCapacity({
        validateOnly: preview,
        idempotencyKey: key,
        team: team.value, pool: pool.value,
        workloadClass: WorkloadClass[cls.value as keyof typeof WorkloadClass],
        members: Number(members.value),
        shape: { gpu: shape() },
        preemptible: preemptible.checked,
        checkpointSeconds: BigInt(checkpoint.value || "0"),
        description: description.value,
      });
      const r = resp.request!;
      status(note, "");
      if (!preview) key = `console-${crypto.randomUUID()}`;  // The next request is another.
      const where = r.placements.map((p) => `${p.cluster}/${p.node} GPU ${p.gpuIndices.join(",")}${p.migProfile ? ` (${p.migProfile})` : ""}`);
      answer.append(
        h("h2", {}, resp.validatedOnly ? `Preview: it would be ${stateText(r.state)}` : `Request ${r.id}: ${stateText(r.state)}`),
        h("p", { id: "answer-reason" }, reasonText(r) || "admitted"),
        where.length ? h("p", {}, `Placed on ${where.join("; ")}`) : "",
        h("p", {}, `${gpus(r.totalGpuMilli)} GPUs; cost to the team's budget: ${money(r.costMicros)} (projected while it runs)`),
        resp.validatedOnly
          ? h("div", { id: "would-preempt" },
            resp.wouldPreempt.length
              ? table("It would preempt", ["Request", "Team", "Class", "GPUs", "Must vacate by"],
                resp.wouldPreempt.map((v) => [num(v.id.toString()), v.team, classText(v.workloadClass),
                  num(gpus(v.totalGpuMilli)), v.preemptDeadline ? rfc3339(v.preemptDeadline) : ""]))
              : h("p", {}, "It would preempt nothing."),
            h("p", { class: "muted" }, "Nothing was submitted."))
          : h("p", {}, h("a", { href: `#/team/${encodeURIComponent(r.team)}` }, `Follow it on team ${r.team}'s page`)),
      );
    } catch (err) {
      status(note, errorText(err), true);
    }
  };
  const submit = (e: Event) => {
    e.preventDefault();
    void call(false);
  };
  page.append(h("form", { class: "stack", onsubmit: submit as EventListener },
    ...field("Team", "f-team", team), ...field("Pool", "f-pool", pool), ...field("Workload class", "f-class", cls),
    ...field("Members (gang size)", "f-members", members), ...field("Each member gets", "f-kind", kind),
    ...field("Whole GPUs per member", "f-count", count), ...field("Fraction, milli-GPU", "f-milli", milli),
    ...field("Fraction's GPU memory, MiB", "f-memory", memory), ...field("MIG profile", "f-profile", profile),
    ...field("Preemptible (may borrow idle capacity, may be preempted)", "f-preemptible", preemptible),
    ...field("Seconds a checkpoint takes (the notice it needs before preemption)", "f-checkpoint", checkpoint),
    ...field("Description", "f-description", description),
    h("p", {},
      h("button", { type: "button", id: "preview", onclick: () => void call(true) }, "Preview (dry run)"), " ",
      h("button", { type: "submit" }, "Submit request"))), note, answer);
}
