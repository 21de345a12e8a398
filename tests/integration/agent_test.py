#!/usr/bin/python3
"""arbiter-agent against a live arbiterd: every published dcgm-exporter
fixture is streamed by the agent binary, which heartbeats for its node; the GPU the node registered (with
its UUID) is stored with its MIG instance, every other device is reported as
unknown with its count; a capture of our own is rolled up into the
allocation's usage.

Usage: agent_test.py ARBITERD AGENT SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import os
import re
import subprocess
import sys
import time

from live_arbiterd import LiveArbiterd

FIXTURES = "tests/agent/fixtures/dcgm-exporter"
DOCS_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
# Devices per published fixture (see tests/agent/dcgm_text_test.cc); the
# NVIDIA docs sample is the registered GPU and one of its MIG instances.
DEVICES = {
    "mig-2x-a30-4x1g.6gb.dcgm-exporter-issue317.prom": 6,
    "mig-a100-80gb-7g.dcgm-exporter-issue713.prom": 1,
    "mig-h100-1g.10gb-pods.dcgm-exporter-issue512-comment.prom": 3,
    "mixed-a30mig-rtx2000ada-pods.dcgm-exporter-pr736.prom": 2,
    "mixed-mig-nonmig-h100-pods.dcgm-exporter-issue512.prom": 5,
    "nonmig-4x-v100.dcgm-exporter-issue250.prom": 4,
    "nonmig-8x-titanv.dcgm-exporter-issue58.prom": 5,
    "pods-3x-l40s.dcgm-issue226.prom": 3,
    "pods-dcgmproftester.gpu-monitoring-tools-issue138.prom": 1,
}


# The GPUs of tests/agent/fake_nvml.cc.
NVML_UUIDS = ["GPU-3f1c9a52-7d4e-4b8a-9c21-5e6f70a18b01", "GPU-a84e2d17-0b93-4c6f-8e5a-12d3c4b5f602"]


def run_agent(agent, endpoint, path):
    out = subprocess.run([agent, "--endpoint", endpoint, "--cluster", "east",
                          "--node", "ub20-a100-k8s", "--file", path, "--once"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, (path, out.stdout, out.stderr)
    assert "heartbeat: node east/ub20-a100-k8s is ready" in out.stdout, out.stdout
    m = re.search(r"stored (\d+), duplicates (\d+), unknown GPUs (\d+)", out.stdout)
    assert m, out.stdout
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def main():
    arbiterd, agent, source_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    fake_nvml = sys.argv[4] if len(sys.argv) > 4 else ""
    with LiveArbiterd(arbiterd, source_dir, "agent", ["--rollup-every", "1s", "--rollup-settle", "0s"]) as live:
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import telemetry_pb2 as tel, telemetry_pb2_grpc as telg
        from arbiter.v1 import types_pb2 as t
        endpoint, channel = live.endpoint, live.channel
        inventory = invg.InventoryServiceStub(channel)
        governance = govg.GovernanceServiceStub(channel)
        allocation = alg.AllocationServiceStub(channel)
        telemetry = telg.TelemetryServiceStub(channel)

        inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name="east")), timeout=10)
        inventory.CreatePool(inv.CreatePoolRequest(
            pool=t.Pool(name="batch", latency_class=t.LATENCY_CLASS_BATCH)), timeout=10)
        inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
            cluster="east", name="ub20-a100-k8s", pool="batch", cpu_milli=32000,
            memory_mib=256000, gpus=[t.Gpu(index=0, model="A100-40GB", uuid=DOCS_UUID)])),
            timeout=10)
        governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name="research")), timeout=10)
        governance.SetQuota(gov.SetQuotaRequest(quota=t.Quota(
            team="research", pool="batch", nominal_milli=1000)), timeout=10)
        granted = allocation.RequestCapacity(al.RequestCapacityRequest(
            idempotency_key="agent-1", team="research", pool="batch",
            workload_class=t.WORKLOAD_CLASS_BATCH_ANALYTICS, members=1, preemptible=True,
            shape=t.MemberShape(whole_gpus=1)), timeout=10).request
        assert granted.state == t.REQUEST_STATE_ADMITTED, granted

        fixtures = os.path.join(source_dir, FIXTURES)
        stored, _, unknown = run_agent(
            agent, endpoint,
            os.path.join(fixtures, "mig-a100-whole-gpu-plus-1g.5gb.nvidia-cloud-native-docs.prom"))
        assert (stored, unknown) == (2, 0), (stored, unknown)
        # The agent heartbeats for its node: from now on it is timed.
        node = inventory.ListNodes(inv.ListNodesRequest(cluster="east"), timeout=10).nodes[0]
        assert node.heartbeats and node.state == t.NODE_STATE_READY, node
        for name, devices in sorted(DEVICES.items()):
            stored, _, unknown = run_agent(agent, endpoint, os.path.join(fixtures, name))
            assert (stored, unknown) == (0, devices), (name, stored, unknown)

        # Self-registration from recorded `nvidia-smi -q -x` output: each
        # fixture becomes a node with its catalog models and UUIDs; a GPU
        # with retired pages pending cordons its node.
        smi = os.path.join(source_dir, "tests/agent/fixtures/nvidia-smi")
        for name, fixture, models, state in [
                ("smi-a100", "telegraf-a100-sxm4-v12.xml", ["A100-80GB"], t.NODE_STATE_READY),
                ("smi-v100s", "datakit-8x-v100s-pcie-460.xml", ["V100M32"] * 8,
                 t.NODE_STATE_READY),
                ("smi-l4", "datarhei-2x-l4-555.xml", ["L4"] * 2, t.NODE_STATE_READY),
                ("smi-t4", "telegraf-tesla-t4.xml", ["T4"], t.NODE_STATE_READY),
                ("smi-h200", "nvidia-h200-580.xml", ["H200-141GB"], t.NODE_STATE_READY),
                ("smi-dgx2", "pai-v100-sxm3-retired-pages.xml", ["V100M32"],
                 t.NODE_STATE_CORDONED)]:
            for _ in range(2):  # The second run updates, and records nothing new.
                # The MIG GPU's placements from `nvidia-smi mig -lgipp` (the MIG
                # User Guide's A100 output; A100-40GB and -80GB share profile IDs
                # and geometry).
                lgipp = (["--nvidia-smi-lgipp",
                          os.path.join(smi, "nvidia-smi-mig-lgipp.a100-40gb.mig-user-guide.txt")]
                         if fixture.startswith("telegraf-a100") else [])
                out = subprocess.run(
                    [agent, "--endpoint", endpoint, "--cluster", "east", "--node", name,
                     "--register", "--pool", "batch", "--nvidia-smi-xml",
                     os.path.join(smi, fixture), "--once"] + lgipp,
                    capture_output=True, text=True, timeout=60)
                assert out.returncode == 0, (fixture, out.stdout, out.stderr)
            assert "updated node east/" + name in out.stdout, out.stdout
            if fixture.startswith("telegraf-a100"):
                assert "4 x 1g.20gb" in out.stdout, out.stdout
                a100 = next(n for n in inventory.ListNodes(
                    inv.ListNodesRequest(cluster="east"), timeout=10).nodes if n.name == name)
                reported = {r.profile: list(r.start_slots)
                            for r in a100.gpus[0].reported_mig_placements}
                assert reported["3g.40gb"] == [0, 4] and reported["7g.80gb"] == [0], reported
                assert reported["1g.10gb"] == [0, 1, 2, 3, 4, 5, 6], reported
            node = next(n for n in inventory.ListNodes(
                inv.ListNodesRequest(cluster="east"), timeout=10).nodes if n.name == name)
            assert [g.model for g in node.gpus] == models, (name, node)
            assert all(g.uuid.startswith("GPU-") for g in node.gpus), node
            assert node.state == state and node.heartbeats, (name, node)

        # NVML through dlopen (--nvml), here the stand-in library with NVML's
        # symbols (tests/agent/fake_nvml.cc): both of its GPUs' readings stored.
        if fake_nvml:
            inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
                cluster="east", name="nvml-node", pool="batch", cpu_milli=32000,
                memory_mib=256000, gpus=[t.Gpu(index=i, model="H100-80GB", uuid=u)
                                         for i, u in enumerate(NVML_UUIDS)])), timeout=10)
            out = subprocess.run([agent, "--endpoint", endpoint, "--cluster", "east", "--node",
                                  "nvml-node", "--nvml", fake_nvml, "--once"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, (out.stdout, out.stderr)
            assert "stored 2, duplicates 0, unknown GPUs 0" in out.stdout, out.stdout
            out = subprocess.run([agent, "--endpoint", endpoint, "--cluster", "east", "--node",
                                  "nvml-node", "--nvml", "libnvidia-ml-not-here.so.1", "--once"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "cannot load libnvidia-ml-not-here.so.1" in out.stderr, \
                (out.stdout, out.stderr)

        # --dry-run prints the registration and a read's samples, and
        # sends nothing: the node stays unknown to arbiterd.
        if fake_nvml:
            out = subprocess.run([agent, "--endpoint", endpoint, "--cluster", "east", "--node",
                                  "dry-node", "--register", "--pool", "batch",
                                  "--nvidia-smi-xml", os.path.join(smi, "nvidia-h200-580.xml"),
                                  "--nvml", fake_nvml, "--dry-run"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, (out.stdout, out.stderr)
            for text in ['model: "H200-141GB"', 'uuid: "GPU-75e959cd-1b8f-066a-0676-fae5afe54822"',
                         f'uuid: "{NVML_UUIDS[0]}"', "fb_used_mib: 12288", "power_mw: 312000"]:
                assert text in out.stdout, (text, out.stdout)
            assert "dry-node" not in [n.name for n in inventory.ListNodes(
                inv.ListNodesRequest(cluster="east"), timeout=10).nodes]
            # Each part alone; a read that fails exits 1, and the other part
            # still prints.
            base = [agent, "--cluster", "east", "--node", "dry-node", "--dry-run"]
            register = ["--register", "--pool", "batch", "--nvidia-smi-xml"]
            out = subprocess.run(base + register + [os.path.join(smi, "nvidia-h200-580.xml")],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0 and 'model: "H200-141GB"' in out.stdout and \
                "samples" not in out.stdout, (out.stdout, out.stderr)
            out = subprocess.run(base + ["--nvml", fake_nvml], capture_output=True, text=True,
                                 timeout=60)
            assert out.returncode == 0 and "fb_used_mib: 12288" in out.stdout and \
                "gpus {" not in out.stdout and "sent_at" in out.stdout, (out.stdout, out.stderr)
            out = subprocess.run(base + register + ["/nonexistent.xml", "--nvml", fake_nvml],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 1 and "cannot read /nonexistent.xml" in out.stderr and \
                "fb_used_mib: 12288" in out.stdout, (out.stdout, out.stderr)

        # A capture of our own, in the exporter's format: 37% busy, 9 GiB used.
        capture = os.path.join(live.work, "capture.prom")
        labels = f'gpu="0",UUID="{DOCS_UUID}",device="nvidia0",modelName="NVIDIA A100-SXM4-40GB"'
        with open(capture, "w") as f:
            f.write("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
                    f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} 37\n"
                    f"DCGM_FI_DEV_FB_USED{{{labels}}} 9216\n"
                    f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 212.5\n")
        assert run_agent(agent, endpoint, capture)[0] == 1
        now = int(time.time())
        req = tel.GetUtilizationRequest()
        getattr(req, "from").seconds = now - 3600
        req.to.seconds = now + 3600
        rows = []
        for _ in range(100):
            rows = telemetry.GetUtilization(req, timeout=10).rows
            if rows and rows[0].peak_memory_mib == 9216:
                break
            time.sleep(0.1)
        assert len(rows) == 1, rows
        row = rows[0]
        assert (row.team, row.pool, row.gpu_model) == ("research", "batch", "A100-40GB"), row
        # Peaks: the docs sample's engine activity (0.995630), our capture's memory.
        assert row.peak_busy_milli == 996 and row.peak_memory_mib == 9216, row
        assert row.sampled_milli_gpu_seconds > 0 and row.used_milli_gpu_seconds > 0, row
        print(f"agent: {len(DEVICES) + 2} scrapes streamed; rolled up: {row}".replace("\n", " "))


if __name__ == "__main__":
    main()
