#!/usr/bin/python3
"""The chargeback report, end to end: a live arbiterd with a serving team
whose capacity a batch team borrowed; a breached latency window becomes an
incident charged to the batch team. arbctl exports the statements as JSON,
CSV and HTML; Debian's headless Chromium renders the HTML (no network) and
takes a screenshot; the test checks that the three charts are drawn and that
every total the browser shows equals the API's.

Usage: chargeback_report_test.py ARBITERD ARBCTL SOURCE_DIR
(DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import csv
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from html.parser import HTMLParser

from live_arbiterd import LiveArbiterd

PENALTY = 2_000_000  # Micros per minute of breach.


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("chromium is not installed: run deploy/local/install-deps")


def seed(live, ids):
    from arbiter.v1 import (allocation_pb2, allocation_pb2_grpc, chargeback_pb2,
                            chargeback_pb2_grpc, governance_pb2, governance_pb2_grpc,
                            inventory_pb2, inventory_pb2_grpc, types_pb2)
    inv = inventory_pb2_grpc.InventoryServiceStub(live.channel)
    gov = governance_pb2_grpc.GovernanceServiceStub(live.channel)
    alloc = allocation_pb2_grpc.AllocationServiceStub(live.channel)
    cb = chargeback_pb2_grpc.ChargebackServiceStub(live.channel)
    inv.CreateCluster(inventory_pb2.CreateClusterRequest(cluster=types_pb2.Cluster(name="east")))
    inv.CreatePool(inventory_pb2.CreatePoolRequest(pool=types_pb2.Pool(
        name="serving", latency_class=types_pb2.LATENCY_CLASS_SERVING,
        lends_to=[types_pb2.WORKLOAD_CLASS_BATCH_ANALYTICS], reclaim_grace_seconds=300)))
    node = types_pb2.Node(cluster="east", name="s1", pool="serving", cpu_milli=64000,
                          memory_mib=512000)
    for i in range(4):
        node.gpus.add(index=i, model="L4", uuid=f"GPU-report-{i}")
    inv.RegisterNode(inventory_pb2.RegisterNodeRequest(node=node))
    for team, parent in (("org", ""), ("serving-team", "org"), ("batch-team", "org")):
        gov.CreateTeam(governance_pb2.CreateTeamRequest(team=types_pb2.Team(name=team,
                                                                           parent=parent)))
    gov.SetQuota(governance_pb2.SetQuotaRequest(quota=types_pb2.Quota(
        team="serving-team", pool="serving", nominal_milli=4000)))
    gov.SetQuota(governance_pb2.SetQuotaRequest(quota=types_pb2.Quota(
        team="batch-team", pool="serving", nominal_milli=0, borrowing_limit_milli=4000)))
    price = types_pb2.Price(gpu_model="L4", latency_class=types_pb2.LATENCY_CLASS_SERVING,
                            micros_per_gpu_hour=2_000_000)
    price.effective_from.seconds = int(time.time()) - 86400
    gov.SetPrice(governance_pb2.SetPriceRequest(price=price))
    cb.SetSlo(chargeback_pb2.SetSloRequest(slo=chargeback_pb2.Slo(
        team="serving-team", service="chat-api", pool="serving", p99_target_us=200_000,
        window_seconds=60, penalty_micros_per_minute=PENALTY)))
    for key, team, cls, preemptible in (
            ("chat", "serving-team", types_pb2.WORKLOAD_CLASS_INFERENCE, False),
            ("finetune", "batch-team", types_pb2.WORKLOAD_CLASS_BATCH_ANALYTICS, True)):
        req = allocation_pb2.RequestCapacityRequest(
            idempotency_key=key, team=team, pool="serving", workload_class=cls, members=2,
            preemptible=preemptible, shape=types_pb2.MemberShape(whole_gpus=1))
        resp = alloc.RequestCapacity(req)
        assert resp.request.state == types_pb2.REQUEST_STATE_ADMITTED, resp
        ids.append(resp.request.id)
    return cb, alloc


def report_breach(cb):
    from arbiter.v1 import chargeback_pb2
    time.sleep(2)  # The borrowed GPUs press on the serving team for a while.
    end = int(time.time())
    window = chargeback_pb2.LatencyWindow(team="serving-team", service="chat-api",
                                          p50_us=120_000, p99_us=450_000,
                                          requests_milli_per_second=900_000)
    window.start.seconds = end - 60
    window.end.seconds = end
    resp = cb.ReportLatency(chargeback_pb2.ReportLatencyRequest(window=window))
    assert resp.breached, resp
    assert resp.incident.attributed_micros == PENALTY, resp
    assert [c.team for c in resp.incident.charges] == ["batch-team"], resp


def arbctl(binary, endpoint, *args):
    out = subprocess.run([binary, "--endpoint", endpoint] + list(args), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout


class Dom(HTMLParser):
    """Collects the data-total cells and the SVG charts of the report."""

    def __init__(self):
        super().__init__()
        self.totals = {}  # key -> (value, shown text)
        self.svgs = {}    # id -> {"polyline": n, "rect": n, "points": [...]}
        self._svg = None
        self._total = None
        self._text = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "svg":
            self._svg = a.get("id")
            self.svgs[self._svg] = {"polyline": 0, "rect": 0, "points": []}
        elif self._svg and tag in ("polyline", "rect"):
            self.svgs[self._svg][tag] += 1
            if tag == "polyline":
                self.svgs[self._svg]["points"].append(a.get("points", ""))
        if "data-total" in a:
            self._total = (a["data-total"], int(a["data-value"]))
            self._text = ""

    def handle_data(self, data):
        if self._total:
            self._text += data

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        if self._total and tag in ("td", "span"):
            self.totals[self._total[0]] = (self._total[1], self._text.strip())
            self._total = None


def fixed(value, unit, decimals):
    scale = 10 ** decimals
    scaled = (abs(value) * scale + unit // 2) // unit
    sign = "-" if value < 0 else ""
    return f"{sign}{scaled // scale}.{scaled % scale:0{decimals}d}"


def png_size(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", head[16:24])


def main():
    arbiterd, arbctl_bin, source_dir = sys.argv[1:4]
    work = tempfile.mkdtemp(prefix="arbiter-report-")
    with LiveArbiterd(arbiterd, source_dir, "report") as live:
        ids = []
        cb, alloc = seed(live, ids)
        report_breach(cb)
        # Released, the allocations stop accruing: every export below sees
        # the same figures.
        from arbiter.v1 import allocation_pb2
        for request_id in ids:
            alloc.ReleaseAllocation(allocation_pb2.ReleaseAllocationRequest(id=request_id))
        period = ["--from", "-2h", "--to", "+1h"]
        api = json.loads(arbctl(arbctl_bin, live.endpoint, "chargeback", "show", *period,
                                "--format", "json"))
        html_path = os.path.join(work, "report.html")
        arbctl(arbctl_bin, live.endpoint, "chargeback", "show", *period, "--format", "html",
               "-o", html_path)
        rows = list(csv.DictReader(io.StringIO(arbctl(
            arbctl_bin, live.endpoint, "chargeback", "show", *period, "--format", "csv"))))

    html = open(html_path).read()
    for banned in ("http://", "https://", "<script"):
        # The SVG namespace is an identifier, not a fetch.
        assert banned not in html.replace('xmlns="http://www.w3.org/2000/svg"', ""), banned

    browser = chromium()
    profile = os.path.join(work, "profile")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--user-data-dir=" + profile, "--window-size=1280,2200"]
    url = "file://" + html_path
    shot = os.path.join(work, "report.png")
    subprocess.run([browser] + flags + ["--screenshot=" + shot, url], check=True,
                   capture_output=True, timeout=120)
    width, height = png_size(shot)
    assert (width, height) == (1280, 2200), (width, height)
    assert os.path.getsize(shot) > 20_000, "the screenshot looks blank"
    dom_text = subprocess.run([browser] + flags + ["--dump-dom", url], check=True,
                              capture_output=True, text=True, timeout=120).stdout
    dom = Dom()
    dom.feed(dom_text)

    # The charts are there and drawn.
    for chart in ("chart-usage", "chart-cost", "chart-externalities"):
        assert chart in dom.svgs, (chart, list(dom.svgs))
    assert dom.svgs["chart-usage"]["polyline"] == 2
    assert all(p.strip() for p in dom.svgs["chart-usage"]["points"])
    assert dom.svgs["chart-cost"]["rect"] == len(api["statements"])
    assert dom.svgs["chart-externalities"]["rect"] == 2  # Paid and received.

    # Every total shown equals the API's, as value and as text.
    money = ("reserved_cost_micros", "idle_cost_micros", "externality_charged_micros",
             "externality_credited_micros", "net_cost_micros", "budget_micros",
             "remainder_micros")
    checked = 0
    for s in api["statements"]:
        for field in ("reserved_milli_seconds", "used_milli_seconds", "borrowed_milli_seconds",
                      "energy_mwh") + money:
            if field not in s and field in ("budget_micros", "remainder_micros"):
                continue
            want = int(s.get(field, 0))
            value, text = dom.totals[f"{s['team']}:{field}"]
            assert value == want, (s["team"], field, value, want)
            if field in money:
                shown = fixed(want, 1_000_000, 2)
            elif field == "energy_mwh":
                shown = fixed(want, 1_000_000, 3)
            else:
                shown = fixed(want, 3_600_000, 2)
            assert text == shown, (s["team"], field, text, shown)
            checked += 1
    cluster = int(api.get("cluster_reserved_milli_seconds", 0))
    assert cluster > 0
    assert dom.totals["cluster:reserved_milli_seconds"][0] == cluster
    assert dom.totals["all:reserved_milli_seconds"][0] == cluster, "conservation"
    attributed = int(api.get("incidents_attributed_micros", 0))
    assert attributed == PENALTY
    assert dom.totals["all:externality_charged_micros"][0] == attributed
    assert dom.totals["all:externality_credited_micros"][0] == attributed
    by_team = {s["team"]: s for s in api["statements"]}
    assert int(by_team["batch-team"]["externality_charged_micros"]) == PENALTY
    assert int(by_team["serving-team"]["externality_credited_micros"]) == PENALTY
    assert "MISMATCH" not in dom_text

    # The CSV says the same.
    csv_by_team = {r["team"]: r for r in rows}
    assert csv_by_team["batch-team"]["externality_charged"] == fixed(PENALTY, 1_000_000, 2)
    assert csv_by_team["serving-team"]["net_cost"] == fixed(
        int(by_team["serving-team"]["net_cost_micros"]), 1_000_000, 2)
    print(f"report ok: {checked} totals match the API; screenshot {width}x{height}, "
          f"{os.path.getsize(shot)} bytes at {shot}")


if __name__ == "__main__":
    main()
