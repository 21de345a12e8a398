#!/usr/bin/python3
"""The Kubernetes admission webhook (HTTPS, AdmissionReview v1) and Prometheus
/metrics of a live arbiterd.

The webhook gets AdmissionReview requests in the shape the API server sends
(tests/fixtures/kubernetes-admission/), edited to name real allocations: it
must allow and mutate pods of admitted allocations (node affinity, MIG
resource names, share annotations), deny pods without an allocation or with
a wrong one, and answer HTTP 400 to what is not an AdmissionReview. Then
/metrics is scraped and its key series checked against what was done.

Usage: webhook_metrics_test.py ARBITERD SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import base64
import copy
import json
import os
import re
import ssl
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request

import grpc

from live_arbiterd import LiveArbiterd

TEAM, NAMESPACE = "ml_serving", "ml-serving"


def apply_patch(doc, patch):
    """RFC 6902 add/remove, enough to check the webhook's patches apply."""
    doc = copy.deepcopy(doc)
    for op in patch:
        tokens = [t.replace("~1", "/").replace("~0", "~") for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last = tokens[-1]
        if op["op"] == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if last == "-" else int(last), op["value"])
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            assert last in parent, f"remove of a missing {op['path']}"
            del parent[last]
        else:
            raise AssertionError(f"unexpected op {op}")
    return doc


class Webhook:
    def __init__(self, port, ca):
        self.url = f"https://localhost:{port}/admit"
        self.ctx = ssl.create_default_context(cafile=ca)

    def post(self, body):
        req = urllib.request.Request(self.url, data=body,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def review(self, review):
        status, body = self.post(json.dumps(review).encode())
        assert status == 200, (status, body)
        answer = json.loads(body)
        assert answer["apiVersion"] == "admission.k8s.io/v1", answer
        assert answer["kind"] == "AdmissionReview", answer
        assert answer["response"]["uid"] == review["request"]["uid"], answer
        return answer["response"]


def fixture(source_dir, name, allocation=None, namespace=NAMESPACE, member=None):
    path = os.path.join(source_dir, "tests/fixtures/kubernetes-admission", name)
    review = json.load(open(path))
    review["request"]["namespace"] = namespace
    pod = review["request"]["object"]
    pod["metadata"]["namespace"] = namespace
    annotations = pod["metadata"].setdefault("annotations", {})
    if allocation is not None:
        annotations["arbiter.dev/allocation"] = str(allocation)
    if member is not None:
        annotations["arbiter.dev/member"] = str(member)
    return review


def set_gpus(review, count):
    """Makes every container of the review's pod ask for `count` nvidia.com/gpu."""
    for c in review["request"]["object"]["spec"]["containers"]:
        c["resources"]["limits"]["nvidia.com/gpu"] = count
        c["resources"]["requests"]["nvidia.com/gpu"] = count


def patched_pod(review, response):
    assert response["allowed"] is True, response
    assert response["patchType"] == "JSONPatch", response
    patch = json.loads(base64.b64decode(response["patch"]))
    return patch, apply_patch(review["request"]["object"], patch)


def node_of(pod):
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return [e["values"] for t in terms for e in t["matchExpressions"]
            if e["key"] == "kubernetes.io/hostname"]


def check_webhook(hook, src, whole, mig, share, released):
    # A pod without an annotation: denied, saying how to get one.
    r = hook.review(fixture(src, "pod-create-nvidia-gpu.request.json"))
    assert r["allowed"] is False and r["status"]["code"] == 403, r
    assert "arbiter.dev/allocation" in r["status"]["message"], r
    assert "arbctl request" in r["status"]["message"], r

    # Two whole GPUs, admitted: allowed and pinned to the node.
    review = fixture(src, "pod-create-nvidia-gpu.request.json", whole.id)
    patch, pod = patched_pod(review, hook.review(review))
    assert node_of(pod) == [["h100-0"]], pod["spec"]
    ann = pod["metadata"]["annotations"]
    assert ann["arbiter.dev/node"] == "h100-0", ann
    assert ann["arbiter.dev/gpu-indices"] == ",".join(
        str(i) for i in whole.placements[0].gpu_indices), ann

    # The pod's own node affinity is kept and the node ANDed into each term.
    review = fixture(src, "pod-create-nvidia-gpu.request.json", whole.id)
    review["request"]["object"]["spec"]["affinity"] = {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-0"]}]}]}}}
    _, pod = patched_pod(review, hook.review(review))
    terms = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [len(t["matchExpressions"]) for t in terms] == [2, 1], terms
    assert terms[1]["matchFields"], terms

    # More GPUs than held: denied, naming both.
    review = fixture(src, "pod-create-nvidia-gpu.request.json", whole.id)
    set_gpus(review, "4")
    r = hook.review(review)
    assert r["allowed"] is False and "holds 2 whole GPUs" in r["status"]["message"], r

    # A MIG allocation, the pod asking nvidia.com/gpu: 1 -> renamed to the profile.
    review = fixture(src, "pod-create-nvidia-gpu.request.json", mig.id)
    set_gpus(review, "1")
    _, pod = patched_pod(review, hook.review(review))
    res = pod["spec"]["containers"][0]["resources"]
    assert res["limits"].get("nvidia.com/mig-3g.40gb") == "1", res
    assert "nvidia.com/gpu" not in res["limits"] and "nvidia.com/gpu" not in res["requests"], res
    assert pod["metadata"]["annotations"]["arbiter.dev/mig-profile"] == "3g.40gb"

    # The MIG fixture asks for a 1g.10gb and a 3g.40gb: not what the allocation holds.
    r = hook.review(fixture(src, "pod-create-mig.request.json", mig.id))
    assert r["allowed"] is False and "MIG instance 3g.40gb" in r["status"]["message"], r

    # A share of a GPU: annotated with its milli-GPU and memory.
    review = fixture(src, "pod-create-nvidia-gpu.request.json", share.id)
    set_gpus(review, "1")
    _, pod = patched_pod(review, hook.review(review))
    ann = pod["metadata"]["annotations"]
    assert ann["arbiter.dev/gpu-milli"] == "250" and ann["arbiter.dev/gpu-memory-mib"] == "8192", ann

    # Wrong namespace, released allocation, unknown id, bad member: denied.
    for review, words in [
            (fixture(src, "pod-create-nvidia-gpu.request.json", whole.id, namespace="team-a"),
             "belongs to team ml_serving"),
            (fixture(src, "pod-create-nvidia-gpu.request.json", released.id), "is released"),
            (fixture(src, "pod-create-nvidia-gpu.request.json", 999999), "does not exist"),
            (fixture(src, "pod-create-nvidia-gpu.request.json", "abc"), "not a request id"),
            (fixture(src, "pod-create-nvidia-gpu.request.json", whole.id, member=3), "not one")]:
        r = hook.review(review)
        assert r["allowed"] is False and words in r["status"]["message"], (words, r)

    # A pod without GPUs, and a DELETE: allowed untouched.
    review = fixture(src, "pod-create-nvidia-gpu.request.json")
    for c in review["request"]["object"]["spec"]["containers"]:
        del c["resources"]["limits"]["nvidia.com/gpu"], c["resources"]["requests"]["nvidia.com/gpu"]
    r = hook.review(review)
    assert r["allowed"] is True and "patch" not in r, r
    review = fixture(src, "pod-create-nvidia-gpu.request.json")
    review["request"]["operation"] = "DELETE"
    assert hook.review(review)["allowed"] is True

    # Not an AdmissionReview: HTTP 400 naming what is wrong.
    status, body = hook.post(b'{"kind": "Pod"}')
    assert status == 400 and b"AdmissionReview" in body, (status, body)
    status, body = hook.post(b"{not json")
    assert status == 400, (status, body)


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(" ", 1)
        series[name] = float(value)
    return series


def value(series, name, **labels):
    for key, v in series.items():
        m = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?", key)
        if m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(3) or ""))
        if all(got.get(k) == v2 for k, v2 in labels.items()):
            return v
    raise AssertionError(f"no series {name} {labels}")


def check_metrics(port, whole, mig, share):
    s = scrape(port)
    assert value(s, "grpc_server_handled_total", grpc_method="RequestCapacity",
                 grpc_code="OK") == 4, "RequestCapacity OK"
    assert value(s, "grpc_server_handled_total", grpc_method="RequestCapacity",
                 grpc_code="InvalidArgument") == 1
    assert value(s, "grpc_server_handling_seconds_count", grpc_method="ReleaseAllocation") == 1
    assert value(s, "arbiter_commit_batch_commands_count") >= 1
    assert value(s, "arbiter_commit_seconds_count") >= 1
    assert value(s, "arbiter_commit_failures_total") == 0
    assert value(s, "arbiter_queue_depth") == 0
    # The three live requests' keys, and the released one's for the 20 s a
    # key lookup may be old.
    assert 3 <= value(s, "arbiter_idempotency_keys_in_memory") <= 4
    # Each new request's key was looked up in the store (the invalid one is
    # refused before), in one statement or more.
    assert value(s, "arbiter_key_lookups_total") == 4
    assert 1 <= value(s, "arbiter_key_lookup_queries_total") <= 4
    assert value(s, "arbiter_leader") == 1 and value(s, "arbiter_leader_epoch") >= 1
    assert value(s, "arbiter_state_scrape_ok") == 1
    labels = dict(pool="serving", team=TEAM, model="H100-80GB")
    held = value(s, "arbiter_gpu_allocated_milli", **labels, **{"class": "inference"})
    mig_milli = mig.placements[0].gpu_milli
    assert held == 2000 + mig_milli + 250, (held, mig_milli)
    assert value(s, "arbiter_ledger_entries") > 0
    assert value(s, "arbiter_pending_approvals") == 0
    assert value(s, "arbiter_budget_hard_limit_micros", team=TEAM) == 500_000_000
    return s


def main():
    arbiterd, src = sys.argv[1], sys.argv[2]
    certs = tempfile.mkdtemp(prefix="arbiter-webhook-certs-")
    subprocess.run([os.path.join(src, "deploy/local/make-certs"), certs], check=True,
                   stdout=subprocess.DEVNULL)
    extra = ["--metrics-listen", "127.0.0.1:0", "--webhook-listen", "127.0.0.1:0",
             "--webhook-cert", f"{certs}/server.pem", "--webhook-key", f"{certs}/server.key"]
    with LiveArbiterd(arbiterd, src, "hook", extra,
                      log_args=["--log-format", "json", "--log-level", "debug"]) as live:
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import types_pb2 as t
        inventory = invg.InventoryServiceStub(live.channel)
        governance = govg.GovernanceServiceStub(live.channel)
        allocation = alg.AllocationServiceStub(live.channel)
        inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name="east")), timeout=10)
        inventory.CreatePool(inv.CreatePoolRequest(
            pool=t.Pool(name="serving", latency_class=t.LATENCY_CLASS_SERVING)), timeout=10)
        inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
            cluster="east", name="h100-0", pool="serving", cpu_milli=96000, memory_mib=1024000,
            gpus=[t.Gpu(index=i, model="H100-80GB") for i in range(8)])), timeout=10)
        governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name=TEAM)), timeout=10)
        governance.SetQuota(gov.SetQuotaRequest(quota=t.Quota(
            team=TEAM, pool="serving", nominal_milli=8000)), timeout=10)
        governance.SetBudget(gov.SetBudgetRequest(budget=t.Budget(
            team=TEAM, soft_limit_micros=400_000_000, hard_limit_micros=500_000_000,
            over=t.OVER_BUDGET_DENY)), timeout=10)

        def ask(key, shape):
            return allocation.RequestCapacity(al.RequestCapacityRequest(
                idempotency_key=key, team=TEAM, pool="serving",
                workload_class=t.WORKLOAD_CLASS_INFERENCE, members=1, shape=shape),
                timeout=10).request

        whole = ask("w", t.MemberShape(whole_gpus=2))
        mig = ask("m", t.MemberShape(mig_profile="3g.40gb"))
        share = ask("s", t.MemberShape(fraction=t.GpuFraction(gpu_milli=250, memory_mib=8192)))
        released = ask("r", t.MemberShape(whole_gpus=1))
        for r in (whole, mig, share, released):
            assert r.state == t.REQUEST_STATE_ADMITTED, r
        allocation.ReleaseAllocation(al.ReleaseAllocationRequest(id=released.id), timeout=10)
        try:
            ask("bad", t.MemberShape(whole_gpus=0))
            raise AssertionError("whole_gpus=0 was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            request_id = dict(e.initial_metadata()).get("x-request-id", "")
            assert re.fullmatch(r"[0-9a-f]{16}", request_id), e.initial_metadata()
        # The failure is in the JSON log, with the id the caller got.
        entries = [json.loads(line) for line in open(live.log) if line.strip()]
        assert all({"ts", "level", "logger", "msg"} <= e.keys() for e in entries), entries[:3]
        failed = [e for e in entries if f"request_id={request_id}" in e["msg"]]
        assert failed and "InvalidArgument" in failed[0]["msg"], entries[-5:]

        port_file = os.path.join(live.work, "port")
        hook = Webhook(int(open(port_file + ".webhook").read()), f"{certs}/ca.pem")
        check_webhook(hook, src, whole, mig, share, released)
        check_metrics(int(open(port_file + ".metrics").read()), whole, mig, share)
        print("webhook: allowed, mutated and denied as expected; /metrics: key series present")


if __name__ == "__main__":
    main()
