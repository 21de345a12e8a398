#!/usr/bin/python3
"""arbiter-kube and the stateful webhook against a live arbiterd and a test
double of the Kubernetes API server (tests/integration/kube_api.py: no API
server can be installed on these machines; the double speaks the documented
protocol: list, watch with resourceVersion and 410 Gone, Eviction, DELETE,
server-side apply, Leases).

Pods go through admission as the API server sends them: the mutating
webhook (/admit) with the fixture's AdmissionReview, then, once named, the
validating webhook (/validate), which claims the pod's member; then the pod
is stored in the double, where the controller sees it. Checked, with exact
outcomes:
  - bind: the pod's claim is held by pod:<namespace>/<name>, and renewed;
  - a second pod for the same allocation is denied, naming the first;
  - release when the pod ends;
  - a preemption notice evicts the pod before the deadline, and its end
    confirms the preemption (RELEASED, not PREEMPTED);
  - an eviction a disruption budget refuses: the pod is deleted at the
    deadline (grace 0);
  - 410 Gone: a pod deleted while the controller's watch version expired is
    found by the relist, and its allocation released;
  - a Kubernetes cordon drains the node in Arbiter, uncordon undoes it; a
    node NotReady is marked failed, and Ready again uncordons it;
  - Kueue's objects are applied, and applied again after a quota change;
  - a pod admitted unclaimed (a webhook replica that does not lead) is
    claimed by the controller; a pod for a member another holds is deleted;
  - the controller, pointed at a follower arbiterd, follows the leader;
  - the controller holds its leader election Lease; a second replica
    follows, and takes over (and acts) when the leader stops;
  - with --dra, an admitted member is a ResourceClaim allocated to the
    devices Arbiter chose (whole GPUs, a MIG instance), read from
    ResourceSlices in the NVIDIA driver's v1 shape (tests/kube/fixtures/dra),
    and the claim is deleted when the allocation ends.

Usage: kube_controller_test.py ARBITERD ARBITER_KUBE SOURCE_DIR
       (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import base64
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

from kube_api import KubeApi
from live_arbiterd import LiveArbiterd
from webhook_metrics_test import Webhook, apply_patch, fixture, set_gpus

TEAM, NS = "research", "research"


def wait_for(what, check, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class Cluster:
    """The Arbiter side (stubs) and the Kubernetes side (the double and the
    webhooks) of one test."""

    def __init__(self, live, kube, mutate, validate, src):
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import types_pb2 as t
        self.al, self.gov, self.inv, self.t = al, gov, inv, t
        self.allocation = alg.AllocationServiceStub(live.channel)
        self.governance = govg.GovernanceServiceStub(live.channel)
        self.inventory = invg.InventoryServiceStub(live.channel)
        self.kube, self.mutate, self.validate, self.src = kube, mutate, validate, src

    def seed(self):
        t, inv, gov = self.t, self.inv, self.gov
        self.inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name="east")),
                                     timeout=10)
        self.inventory.CreatePool(inv.CreatePoolRequest(pool=t.Pool(
            name="train", latency_class=t.LATENCY_CLASS_BATCH, claim_deadline_seconds=600,
            lease_seconds=30)), timeout=10)
        for name in ("gpu-0", "gpu-1", "gpu-2"):
            self.inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
                cluster="east", name=name, pool="train", cpu_milli=96000, memory_mib=1024000,
                gpus=[t.Gpu(index=i, model="H100-80GB") for i in range(8)])), timeout=10)
            self.kube.add(self.kube.node(name))
        self.governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name=TEAM)), timeout=10)
        self.set_quota(24000)

    def set_quota(self, milli):
        self.governance.SetQuota(self.gov.SetQuotaRequest(quota=self.t.Quota(
            team=TEAM, pool="train", nominal_milli=milli)), timeout=10)

    def ask(self, key, gpus, members=1):
        r = self.allocation.RequestCapacity(self.al.RequestCapacityRequest(
            idempotency_key=key, team=TEAM, pool="train",
            workload_class=self.t.WORKLOAD_CLASS_TRAINING, members=members,
            shape=self.t.MemberShape(whole_gpus=gpus)), timeout=10).request
        assert r.state == self.t.REQUEST_STATE_ADMITTED, r
        return r

    def get(self, rid):
        return self.allocation.GetRequest(self.al.GetRequestRequest(id=rid), timeout=10).request

    def node(self, name):
        for n in self.inventory.ListNodes(self.inv.ListNodesRequest(), timeout=10).nodes:
            if n.name == name:
                return n
        raise AssertionError(f"no node {name}")

    def node_state(self, name):
        return self.node(name).state

    def review(self, name, request, gpus):
        review = fixture(self.src, "pod-create-nvidia-gpu.request.json", allocation=request.id,
                         namespace=NS)
        set_gpus(review, str(gpus))
        review["request"]["uid"] = str(uuid.uuid4())
        review["request"]["name"] = name
        review["request"]["object"]["metadata"]["name"] = name
        return review

    def create_pod(self, name, request, gpus):
        """Admission as the API server runs it, then the pod stored. Returns
        the stored pod, or the denying admission response."""
        review = self.review(name, request, gpus)
        # Mutating admission sees no name yet (generateName).
        pod = review["request"]["object"]
        del pod["metadata"]["name"]
        pod["metadata"]["generateName"] = name + "-"
        review["request"]["name"] = ""
        answer = self.mutate.review(review)
        if not answer["allowed"]:
            return answer
        pod = apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
        # Then the API server names it, and validating admission claims.
        pod["metadata"]["name"] = name
        pod["metadata"]["uid"] = str(uuid.uuid4())
        review["request"]["name"] = name
        review["request"]["object"] = pod
        review["request"]["uid"] = str(uuid.uuid4())
        answer = self.validate.review(review)
        if not answer["allowed"]:
            return answer
        pod["spec"]["nodeName"] = pod["metadata"]["annotations"]["arbiter.dev/node"]
        pod["status"] = {"phase": "Running"}
        return self.kube.add(pod)

    def set_phase(self, name, phase):
        def edit(pod):
            pod["status"]["phase"] = phase
        self.kube.update("Pod", name, edit, namespace=NS)


def check_bind_and_second_pod(c):
    a = c.ask("a", 2)
    pod = c.create_pod("train-a", a, 2)
    assert pod["metadata"]["name"] == "train-a", pod
    claims = c.get(a.id).claims
    assert [(x.member, x.holder) for x in claims] == [(0, "pod:research/train-a")], claims
    # A second pod for the same allocation: denied by the mutating webhook
    # (before it is named) and by the validating one, naming the first.
    second = c.create_pod("train-a2", a, 2)
    assert second["allowed"] is False, second
    assert "pod:research/train-a" in second["status"]["message"], second
    review = c.review("train-a3", a, 2)
    review["request"]["object"]["metadata"]["uid"] = str(uuid.uuid4())
    denied = c.validate.review(review)
    assert denied["allowed"] is False and "claimed by pod:research/train-a" in \
        denied["status"]["message"], denied
    assert [x.holder for x in c.get(a.id).claims] == ["pod:research/train-a"]
    # The controller renews the lease (every second here).
    first = claims[0].renewed_at.ToDatetime()
    wait_for("a renewal", lambda: c.get(a.id).claims[0].renewed_at.ToDatetime() > first)
    # The pod ends: the allocation is released.
    c.set_phase("train-a", "Succeeded")
    wait_for("the release", lambda: c.get(a.id).state == c.t.REQUEST_STATE_RELEASED)


def check_adoption(c):
    """A pod admitted unclaimed (through a webhook replica that did not lead)
    is claimed for; a pod for a member another holds is deleted."""
    f = c.ask("f", 1)
    review = c.review("train-f", f, 1)
    answer = c.mutate.review(review)
    assert answer["allowed"], answer
    pod = apply_patch(review["request"]["object"], json.loads(base64.b64decode(answer["patch"])))
    pod["metadata"]["uid"] = str(uuid.uuid4())
    pod["spec"]["nodeName"] = pod["metadata"]["annotations"]["arbiter.dev/node"]
    pod["status"] = {"phase": "Running"}
    c.kube.add(pod)
    wait_for("the controller's claim",
             lambda: [x.holder for x in c.get(f.id).claims] == ["pod:research/train-f"])
    # Another pod for the same member, created around the webhooks.
    intruder = json.loads(json.dumps(pod))
    intruder["metadata"]["name"] = "train-f-copy"
    intruder["metadata"]["uid"] = str(uuid.uuid4())
    c.kube.add(intruder)
    deleted = wait_for("the intruder deleted", lambda: [x for x in c.kube.deletions
                                                        if x["name"] == "train-f-copy"])
    assert deleted[0]["grace"] == 0, deleted
    wait_for("the intruder gone", lambda: c.kube.get("Pod", "train-f-copy", NS) is None)
    time.sleep(1.5)
    r = c.get(f.id)
    assert r.state == c.t.REQUEST_STATE_ADMITTED and \
        [x.holder for x in r.claims] == ["pod:research/train-f"], r
    c.set_phase("train-f", "Succeeded")
    wait_for("the release", lambda: c.get(f.id).state == c.t.REQUEST_STATE_RELEASED)


def check_preemption(c):
    b = c.ask("b", 8)
    c.create_pod("train-b", b, 8)
    node = c.kube.get("Pod", "train-b", NS)["spec"]["nodeName"]
    before = time.time()
    c.inventory.DrainNode(c.inv.DrainNodeRequest(cluster="east", name=node, grace_seconds=60),
                          timeout=10)
    eviction = wait_for("the eviction", lambda: [e for e in c.kube.evictions
                                                if e["name"] == "train-b"])
    assert eviction[0]["time"] - before < 10, eviction
    pod = c.kube.get("Pod", "train-b", NS)
    assert pod["metadata"].get("deletionTimestamp"), pod
    assert c.get(b.id).state == c.t.REQUEST_STATE_PREEMPTING
    # The kubelet stops the pod within its grace: the controller confirms.
    c.kube.finish_deletion(NS, "train-b")
    wait_for("the confirmation", lambda: c.get(b.id).state == c.t.REQUEST_STATE_RELEASED)
    assert time.time() - before < 60, "confirmed before the deadline"
    c.inventory.UncordonNode(c.inv.UncordonNodeRequest(cluster="east", name=node), timeout=10)

    # A disruption budget refuses the eviction: deleted at the deadline.
    d = c.ask("d", 8)
    c.create_pod("train-d", d, 8)
    node = c.kube.get("Pod", "train-d", NS)["spec"]["nodeName"]
    c.kube.eviction_blocked.add((NS, "train-d"))
    before = time.time()
    c.inventory.DrainNode(c.inv.DrainNodeRequest(cluster="east", name=node, grace_seconds=3),
                          timeout=10)
    deadline = c.get(d.id).preempt_deadline.ToDatetime().replace(
        tzinfo=datetime.timezone.utc).timestamp()
    wait_for("a refused eviction", lambda: [e for e in c.kube.evictions if e["name"] == "train-d"])
    deletion = wait_for("the deletion", lambda: [x for x in c.kube.deletions
                                                 if x["name"] == "train-d"])
    assert deletion[0]["grace"] == 0, deletion
    assert time.time() >= deadline - 0.5, (time.time(), deadline)
    wait_for("the pod gone", lambda: c.kube.get("Pod", "train-d", NS) is None)
    # Released by the controller once the pod is gone (or by the deadline).
    wait_for("the end", lambda: c.get(d.id).state in (c.t.REQUEST_STATE_RELEASED,
                                                       c.t.REQUEST_STATE_PREEMPTED))
    c.inventory.UncordonNode(c.inv.UncordonNodeRequest(cluster="east", name=node), timeout=10)


def check_relist(c):
    e = c.ask("e", 1)
    c.create_pod("train-e", e, 1)
    # Once the controller knows the pod (it renews its lease).
    claimed = c.get(e.id).claims[0].claimed_at.ToDatetime()
    wait_for("a renewal", lambda: c.get(e.id).claims[0].renewed_at.ToDatetime() > claimed)
    lists = lambda: len([r for r in c.kube.requests
                         if r[0] == "GET" and r[1].startswith("/api/v1/pods?limit=")])
    listed = lists()
    # The watch breaks and history is compacted: the DELETED event is never
    # replayed; the watch from the old version gets 410 and the controller
    # lists again.
    c.kube.compact_and_drop_watches()
    c.kube.remove("Pod", "train-e", namespace=NS)
    wait_for("a relist", lambda: lists() > listed)
    wait_for("the release after the relist",
             lambda: c.get(e.id).state == c.t.REQUEST_STATE_RELEASED)


def check_nodes(c):
    t = c.t
    def edit(unschedulable):
        def f(node):
            node["spec"]["unschedulable"] = unschedulable
        return f
    c.kube.update("Node", "gpu-2", edit(True))
    # Drained (an empty node: cordoned, with a drain deadline).
    wait_for("the drain", lambda: c.node("gpu-2").HasField("drain_deadline"))
    assert c.node_state("gpu-2") == t.NODE_STATE_CORDONED, c.node("gpu-2")
    c.kube.update("Node", "gpu-2", edit(False))
    wait_for("the uncordon", lambda: c.node_state("gpu-2") == t.NODE_STATE_READY)

    def ready(status):
        def f(node):
            for cond in node["status"]["conditions"]:
                if cond["type"] == "Ready":
                    cond["status"] = status
                    cond["lastTransitionTime"] = datetime.datetime.now(
                        datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f
    c.kube.update("Node", "gpu-2", ready("False"))
    time.sleep(1)
    assert c.node_state("gpu-2") == t.NODE_STATE_READY, "not failed before --not-ready-after"
    wait_for("the failure", lambda: c.node_state("gpu-2") == t.NODE_STATE_FAILED)
    c.kube.update("Node", "gpu-2", ready("True"))
    wait_for("ready again", lambda: c.node_state("gpu-2") == t.NODE_STATE_READY)


def check_kueue(c):
    path = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/research"
    def nominal():
        q = c.kube.get("ClusterQueue", "research")
        if q is None:
            return None
        return q["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"]
    wait_for("the ClusterQueue", lambda: nominal() == "24")
    applies = len([a for a in c.kube.applies if a["path"].startswith(path)])
    assert all(a["fieldManager"] == "arbiter" for a in c.kube.applies), c.kube.applies[:2]
    time.sleep(2.5)
    assert len([a for a in c.kube.applies if a["path"].startswith(path)]) == applies, \
        "nothing applied while nothing changed"
    c.set_quota(16000)
    wait_for("the ClusterQueue after the quota change", lambda: nominal() == "16")


def load_slice(src, name, node):
    """A ResourceSlice fixture (the NVIDIA driver's v1 shape) moved to `node`."""
    path = os.path.join(src, "tests/kube/fixtures/dra", name)
    obj = json.load(open(path))
    obj["metadata"] = {"name": f"{node}-gpu.nvidia.com-x1", "ownerReferences":
                       obj["metadata"].get("ownerReferences", [])}
    for owner in obj["metadata"]["ownerReferences"]:
        owner["name"] = node
    obj["spec"]["nodeName"] = node
    obj["spec"]["pool"]["name"] = node
    return obj


def check_dra(c):
    """Admitted members become ResourceClaims allocated to Arbiter's devices."""
    t, inv = c.t, c.inv
    gpus = load_slice(c.src, "resourceslice-gpus.json", "dra-0")
    mig = load_slice(c.src, "resourceslice-mig.json", "dra-1")
    uuid_of = {d["name"]: d["attributes"]["uuid"]["string"] for d in gpus["spec"]["devices"]}
    parent = next(d["attributes"]["parentUUID"]["string"] for d in mig["spec"]["devices"]
                  if d["attributes"]["type"]["string"] == "mig")
    c.inventory.CreatePool(inv.CreatePoolRequest(pool=t.Pool(
        name="dra", latency_class=t.LATENCY_CLASS_BATCH)), timeout=10)
    c.inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
        cluster="east", name="dra-0", pool="dra", cpu_milli=96000, memory_mib=1024000,
        gpus=[t.Gpu(index=i, model="H100-80GB", uuid=uuid_of[f"gpu-{i}"])
              for i in range(4)])), timeout=10)
    c.inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
        cluster="east", name="dra-1", pool="dra", cpu_milli=96000, memory_mib=1024000,
        gpus=[t.Gpu(index=0, model="A100-80GB", uuid=parent, reported_mig_placements=[
            t.MigPlacementReport(profile="1g.10gb", start_slots=[4, 5]),
            t.MigPlacementReport(profile="3g.40gb", start_slots=[0])])])), timeout=10)
    for node in ("dra-0", "dra-1"):
        c.kube.add(c.kube.node(node))
    c.governance.SetQuota(c.gov.SetQuotaRequest(quota=t.Quota(
        team=TEAM, pool="dra", nominal_milli=8000)), timeout=10)
    c.kube.add(gpus)
    c.kube.add(mig)

    def claim(rid):
        found = c.kube.get("ResourceClaim", f"arbiter-{rid}-0", NS)
        return found if found and found.get("status", {}).get("allocation") else None

    whole = c.allocation.RequestCapacity(c.al.RequestCapacityRequest(
        idempotency_key="dra-w", team=TEAM, pool="dra", workload_class=t.WORKLOAD_CLASS_TRAINING,
        members=1, gpu_models=["H100-80GB"], shape=t.MemberShape(whole_gpus=2)),
        timeout=10).request
    assert whole.state == t.REQUEST_STATE_ADMITTED, whole
    got = wait_for("the whole-GPU claim", lambda: claim(whole.id))
    indices = list(whole.placements[0].gpu_indices)
    allocation = got["status"]["allocation"]
    assert [r["device"] for r in allocation["devices"]["results"]] == \
        [f"gpu-{i}" for i in indices], (indices, allocation)
    assert all(r["driver"] == "gpu.nvidia.com" and r["pool"] == "dra-0"
               for r in allocation["devices"]["results"]), allocation
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == \
        ["dra-0"], allocation
    requests = got["spec"]["devices"]["requests"]
    assert [r["exactly"]["selectors"][0]["cel"]["expression"] for r in requests] == \
        [f'device.attributes["gpu.nvidia.com"].uuid == "{uuid_of[f"gpu-{i}"]}"'
         for i in indices], requests

    part = c.allocation.RequestCapacity(c.al.RequestCapacityRequest(
        idempotency_key="dra-m", team=TEAM, pool="dra", workload_class=t.WORKLOAD_CLASS_TRAINING,
        members=1, gpu_models=["A100-80GB"], shape=t.MemberShape(mig_profile="1g.10gb")),
        timeout=10).request
    assert part.state == t.REQUEST_STATE_ADMITTED, part
    start = part.placements[0].mig_start_slot
    assert start in (4, 5), part.placements[0]
    got = wait_for("the MIG claim", lambda: claim(part.id))
    result = got["status"]["allocation"]["devices"]["results"][0]
    assert result["device"] == f"gpu-0-mig-1g10gb-19-{start}", result
    assert got["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == \
        "mig.nvidia.com", got["spec"]

    # The allocation ends: its claim goes.
    c.allocation.ReleaseAllocation(c.al.ReleaseAllocationRequest(id=whole.id), timeout=10)
    wait_for("the claim deleted",
             lambda: c.kube.get("ResourceClaim", f"arbiter-{whole.id}-0", NS) is None)


def main():
    arbiterd, controller, src = sys.argv[1], sys.argv[2], sys.argv[3]
    certs = tempfile.mkdtemp(prefix="arbiter-kube-certs-")
    subprocess.run([os.path.join(src, "deploy/local/make-certs"), certs], check=True,
                   stdout=subprocess.DEVNULL)
    extra = ["--webhook-listen", "127.0.0.1:0", "--webhook-cert", f"{certs}/server.pem",
             "--webhook-key", f"{certs}/server.key"]
    with KubeApi(token="test-token") as kube, \
            LiveArbiterd(arbiterd, src, "kube", extra) as live:
        port = int(open(os.path.join(live.work, "port.webhook")).read())
        mutate = Webhook(port, f"{certs}/ca.pem")
        validate = Webhook(port, f"{certs}/ca.pem")
        validate.url = validate.url.replace("/admit", "/validate")
        c = Cluster(live, kube, mutate, validate, src)
        c.seed()
        token = os.path.join(live.work, "kube-token")
        open(token, "w").write("test-token\n")
        log = open(os.path.join(live.work, "arbiter-kube.log"), "w")
        # A second arbiterd replica on the same database, which follows: the
        # controller is pointed at it and must find the leader.
        follower_port = os.path.join(live.work, "port.follower")
        follower = subprocess.Popen(
            [arbiterd, "--log-level", "warn", "serve", "--dsn",
             f"{live.cluster_dsn} dbname={live.db}", "--listen", "127.0.0.1:0",
             "--port-file", follower_port, "--insecure-loopback", "--replica-name",
             "kube-follower"])
        wait_for("the follower", lambda: os.path.exists(follower_port) and
                 open(follower_port).read().strip())
        follower_endpoint = "127.0.0.1:" + open(follower_port).read().strip()

        def start(identity, log):
            return subprocess.Popen(
                [controller, "--endpoint", follower_endpoint, "--cluster", "east",
                 "--kube-api", kube.url, "--kube-token-file", token, "--renew-every", "1s",
                 "--drain-grace", "30s", "--not-ready-after", "3s", "--kueue-every", "1s",
                 "--lease-namespace", "arbiter-system", "--lease-name", "arbiter-kube",
                 "--lease-duration", "3s", "--identity", identity, "--dra"], stderr=log)
        proc = start("kube-test-0", log)
        holder = lambda: (kube.get("Lease", "arbiter-kube", "arbiter-system") or
                          {"spec": {}})["spec"].get("holderIdentity")
        standby_log = open(os.path.join(live.work, "arbiter-kube-1.log"), "w")
        standby = None
        try:
            wait_for("the Lease", lambda: holder() == "kube-test-0")
            # A second replica follows; only the leader acts.
            standby = start("kube-test-1", standby_log)
            check_bind_and_second_pod(c)
            assert f"following arbiterd's leader at {live.endpoint}" in open(log.name).read() \
                or f"following the leader at {live.endpoint}" in open(log.name).read()
            check_preemption(c)
            check_relist(c)
            check_nodes(c)
            check_kueue(c)
            check_dra(c)
            check_adoption(c)
            assert holder() == "kube-test-0"
            assert "following kube-test-0" in open(standby_log.name).read()
            # The leader stops: the standby takes the Lease over and acts.
            proc.terminate()
            proc.wait(timeout=10)
            assert proc.returncode == 0, proc.returncode
            wait_for("the takeover", lambda: holder() == "kube-test-1")
            g = c.ask("g", 1)
            c.create_pod("train-g", g, 1)
            c.set_phase("train-g", "Failed")
            # Patient: on a loaded machine arbiterd's own lease may lapse for
            # a moment, and the release then waits for a retry.
            wait_for("the new leader's release",
                     lambda: c.get(g.id).state == c.t.REQUEST_STATE_RELEASED, timeout=60.0)
        except BaseException:
            for f in (log, standby_log):
                f.flush()
                sys.stderr.write(open(f.name).read()[-5000:])
            raise
        finally:
            for p in (proc, standby, follower):
                if p is not None and p.poll() is None:
                    p.terminate()
                    p.wait(timeout=10)
    print("arbiter-kube: bind, deny, renew, release, evict, delete at the deadline, relist, "
          "drain, fail and Kueue reconcile as expected")


if __name__ == "__main__":
    main()
