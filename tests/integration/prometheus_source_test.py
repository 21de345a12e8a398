#!/usr/bin/python3
"""arbiter-agent --prometheus against a real Prometheus and a live arbiterd.

Debian's `prometheus` runs on a free loopback port over HTTPS with client
certificates and basic auth (its --web.config.file), scraping a small HTTP
server of this test that serves the recorded dcgm-exporter outputs
(tests/agent/fixtures/dcgm-exporter, provenance in SOURCES.md there), one
scrape job per file, and one job whose labels are relabelled. Once every
target is up and every series is in, for a whole-GPU, a MIG and a mixed
fixture the agent streams the same fixture twice: from the exporter text
(--file, the dcgm path) and from Prometheus (--prometheus, fleet-wide: no
--node, every sample carries its UUID). arbiterd's stored rows must be
identical (whole GPUs, MIG instances, GPUs with and without an allocation),
and the allocated GPU's usage rolls up from the Prometheus samples. Then the
failures: wrong password, wrong CA, a refused selector, a selector that
matches nothing, a Prometheus too slow to answer, and one that is stopped
(reported with the URL, nothing written, and a running agent retries until
it is back). That running agent serves --metrics-listen on a free port: its
/healthz answers 503 naming prometheus and UNAVAILABLE and its /metrics show
the source down with its failures counted while Prometheus is stopped, and
200 and up once it is back.

Usage: prometheus_source_test.py ARBITERD AGENT SOURCE_DIR
(DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import http.client
import http.server
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import warnings
from base64 import b64encode
from functools import partial

from live_arbiterd import LiveArbiterd

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import crypt  # bcrypt through libxcrypt, for Prometheus' basic_auth_users.

FIXTURES = "tests/agent/fixtures/dcgm-exporter"
DOCS = "mig-a100-whole-gpu-plus-1g.5gb.nvidia-cloud-native-docs.prom"
# job -> (fixture, series of the five fields Prometheus holds, devices).
JOBS = {
    "docs": (DOCS, 5, 2),  # A whole A100 and its MIG instance 13.
    "a30": ("mig-2x-a30-4x1g.6gb.dcgm-exporter-issue317.prom", 17, 6),  # MIG only.
    "mixed": ("mixed-a30mig-rtx2000ada-pods.dcgm-exporter-pr736.prom", 2, 2),  # Whole + MIG.
    "l40s": ("pods-3x-l40s.dcgm-issue226.prom", 3, 3),  # Whole GPUs with pods.
}
DOCS_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"
L40S_UUIDS = ["GPU-585834da-79ca-0599-5140-4ffdb131ae93", "GPU-8f8001ff-73ba-2e83-3cdc-4156ae4f3912",
              "GPU-5bd39b62-f1d2-21f3-d9d5-24cf8d513c73"]
A30_UUIDS = ["GPU-265c9814-6156-355b-e589-ff2064894f16", "GPU-2d20791a-b4a6-ba59-97f1-e95b99fe5b49"]
RTX_UUID = "GPU-fc60126e-514d-3522-2828-c5daa8e99d85"
MIXED_A30_UUID = "GPU-63bc0b91-2265-1b94-831c-15c41fe92675"
FIELDS = ("DCGM_FI_DEV_GPU_UTIL|DCGM_FI_PROF_GR_ENGINE_ACTIVE|DCGM_FI_DEV_FB_USED|"
          "DCGM_FI_DEV_FB_FREE|DCGM_FI_DEV_POWER_USAGE")
ROWS = ("SELECT s.at, n.name, s.gpu_index, s.mig_instance, s.mig_profile, s.interval_ms, "
        "s.util_milli, s.engine_active_milli, s.fb_used_mib, s.fb_free_mib, s.power_mw, s.pod, "
        "s.pod_namespace FROM gpu_samples s JOIN nodes n ON n.id = s.node_id")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Prometheus:
    """Debian's prometheus on `port`, HTTPS with client certificates and
    basic auth, scraping `exporter_port`'s fixtures every second."""

    def __init__(self, work, certs, exporter_port):
        self.work, self.certs = work, certs
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.password = "s3cret-pw"
        self.proc = None
        jobs = "".join(f"""
  - job_name: {job}
    metrics_path: /{fixture}
    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]
""" for job, (fixture, _, _) in JOBS.items())
        # A fleet that relabelled: UUID and GPU_I_ID under other names.
        jobs += f"""
  - job_name: relabelled
    metrics_path: /{DOCS}
    static_configs: [{{targets: ['127.0.0.1:{exporter_port}']}}]
    metric_relabel_configs:
      - {{source_labels: [UUID], target_label: gpu_uuid}}
      - {{source_labels: [GPU_I_ID], target_label: mig_id}}
      - {{regex: 'UUID|GPU_I_ID', action: labeldrop}}
"""
        with open(os.path.join(work, "prometheus.yml"), "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:" + jobs)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            hashed = crypt.crypt(self.password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))
        with open(os.path.join(work, "web.yml"), "w") as f:
            f.write(f"""tls_server_config:
  cert_file: {certs}/server.pem
  key_file: {certs}/server.key
  client_auth_type: RequireAndVerifyClientCert
  client_ca_file: {certs}/ca.pem
basic_auth_users:
  agent: '{hashed}'
""")
        self.context = ssl.create_default_context(cafile=f"{certs}/ca.pem")
        self.context.load_cert_chain(f"{certs}/agent.pem", f"{certs}/agent.key")

    def start(self):
        self.log = open(os.path.join(self.work, "prometheus.log"), "a")
        self.proc = subprocess.Popen(
            ["prometheus", "--config.file", os.path.join(self.work, "prometheus.yml"),
             "--web.config.file", os.path.join(self.work, "web.yml"),
             "--storage.tsdb.path", os.path.join(self.work, "tsdb"),
             "--web.listen-address", f"127.0.0.1:{self.port}"],
            stdout=self.log, stderr=self.log)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=60)
            self.proc = None

    def get(self, path, **params):
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        auth = b64encode(f"agent:{self.password}".encode()).decode()
        req = urllib.request.Request(url, headers={"Authorization": f"Basic {auth}"})
        with urllib.request.urlopen(req, timeout=10, context=self.context) as r:
            return json.load(r)

    def wait_ready(self):
        """Until every target is up and every job's series are in."""
        want = {job: series for job, (_, series, _) in JOBS.items()}
        want["relabelled"] = 5
        deadline = time.time() + 120
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit("prometheus exited: see " + self.log.name)
            try:
                targets = self.get("/api/v1/targets")["data"]["activeTargets"]
                up = {t["labels"]["job"] for t in targets if t["health"] == "up"}
                got = {}
                for job in want:
                    q = f'{{__name__=~"{FIELDS}",job="{job}"}}'
                    got[job] = len(self.get("/api/v1/query", query=q)["data"]["result"])
                last = (up, got)
                if up == set(want) and got == want:
                    return
            except (OSError, ValueError) as e:  # Not listening yet.
                last = e
            time.sleep(0.5)
        raise SystemExit(f"prometheus not ready: {last}")


def agent_run(agent, endpoint, *args, timeout=60):
    return subprocess.run([agent, "--endpoint", endpoint, "--once", *args],
                          capture_output=True, text=True, timeout=timeout)


def http_get(port, path):
    """(status, body) of GET `path` on the agent's --metrics-listen port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def metric(text, series):
    """The value of `series` (name{labels}) in /metrics' text, or None."""
    m = re.search("^" + re.escape(series) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def poll(what, check, timeout=120):
    """Until check() returns (True, _); its last answer in the failure."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        done, last = check()
        if done:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout}s; last: {last}")


def counts(out):
    m = re.search(r"sent (\d+) samples: stored (\d+), duplicates (\d+), unknown GPUs (\d+)",
                  out.stdout)
    assert m, (out.stdout, out.stderr)
    return tuple(int(g) for g in m.groups())


def main():
    arbiterd, agent, source_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    fixtures = os.path.join(source_dir, FIXTURES)
    with LiveArbiterd(arbiterd, source_dir, "prom",
                      ["--rollup-every", "1s", "--rollup-settle", "0s"]) as live:
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import telemetry_pb2 as tel, telemetry_pb2_grpc as telg
        from arbiter.v1 import types_pb2 as t
        endpoint = live.endpoint
        dsn = f"{live.cluster_dsn} dbname={live.db}"

        def rows():
            """gpu_samples, by sample time: {at: sorted rows without it}."""
            out = subprocess.run(["psql", "-XAt", "-F", "|", dsn, "-c", ROWS + " ORDER BY 1"],
                                 check=True, capture_output=True, text=True).stdout
            by_at = {}
            for line in out.splitlines():
                at, rest = line.split("|", 1)
                by_at.setdefault(at, []).append(rest)
            return {at: sorted(r) for at, r in by_at.items()}

        def new_rows(before):
            after = rows()
            fresh = [at for at in after if at not in before]
            assert len(fresh) <= 1, fresh  # One reading time per agent run.
            return after[fresh[0]] if fresh else []

        # The fixtures' GPUs, registered with their UUIDs. The catalog has no
        # A30 or RTX 2000 Ada: stand-in models, since samples are filed by
        # UUID. Only the A100 (pool "batch") gets an allocation.
        inventory = invg.InventoryServiceStub(live.channel)
        inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name="east")),
                                timeout=10)
        for pool in ("batch", "other"):
            inventory.CreatePool(inv.CreatePoolRequest(
                pool=t.Pool(name=pool, latency_class=t.LATENCY_CLASS_BATCH)), timeout=10)
        for name, pool, gpus in [
                ("ub20-a100-k8s", "batch", [("A100-40GB", DOCS_UUID)]),
                ("l40s-node", "other", [("L40S", u) for u in L40S_UUIDS]),
                ("a30-node", "other", [("A10", u) for u in A30_UUIDS]),
                ("mixed-node", "other", [("L4", ""), ("L4", RTX_UUID), ("A10", MIXED_A30_UUID)])]:
            inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
                cluster="east", name=name, pool=pool, cpu_milli=32000, memory_mib=256000,
                gpus=[t.Gpu(index=i, model=m, uuid=u) for i, (m, u) in enumerate(gpus)])),
                timeout=10)
        governance = govg.GovernanceServiceStub(live.channel)
        governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name="research")), timeout=10)
        governance.SetQuota(gov.SetQuotaRequest(quota=t.Quota(
            team="research", pool="batch", nominal_milli=1000)), timeout=10)
        granted = alg.AllocationServiceStub(live.channel).RequestCapacity(
            al.RequestCapacityRequest(
                idempotency_key="prom-1", team="research", pool="batch",
                workload_class=t.WORKLOAD_CLASS_BATCH_ANALYTICS, members=1,
                shape=t.MemberShape(whole_gpus=1)), timeout=10).request
        assert granted.state == t.REQUEST_STATE_ADMITTED, granted

        # The exporter: the fixtures over plain HTTP, as dcgm-exporter serves.
        exporter = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), partial(Quiet, directory=fixtures))
        threading.Thread(target=exporter.serve_forever, daemon=True).start()
        certs = os.path.join(live.work, "certs")
        subprocess.run([os.path.join(source_dir, "deploy/local/make-certs"), certs, "agent"],
                       check=True, stdout=subprocess.DEVNULL)
        prom = Prometheus(live.work, certs, exporter.server_address[1])
        password_file = os.path.join(live.work, "prometheus-password")
        with open(password_file, "w") as f:
            f.write(prom.password + "\n")
        tls = ["--prometheus-ca", f"{certs}/ca.pem", "--prometheus-cert", f"{certs}/agent.pem",
               "--prometheus-key", f"{certs}/agent.key", "--prometheus-user", "agent",
               "--prometheus-password-file", password_file]
        prom.start()
        try:
            prom.wait_ready()
            endpoint_url = f"{prom.url}/api/v1/query"

            def via_prometheus(selector, *extra, expect_rc=0):
                out = agent_run(agent, endpoint, "--prometheus", prom.url,
                                "--prometheus-selector", selector, *tls, *extra)
                assert out.returncode == expect_rc, (selector, out.stdout, out.stderr)
                return out

            # Parity: the dcgm path and the Prometheus path store the same rows.
            for job, (fixture, series, devices) in JOBS.items():
                before = rows()
                out = via_prometheus(f'job="{job}"')
                assert f"prometheus: {series} series, {devices} devices" in out.stdout, out.stdout
                assert counts(out) == (devices, devices, 0, 0), (job, out.stdout)
                from_prometheus = new_rows(before)
                if job == "docs":
                    # The allocated A100's usage rolls up from these samples.
                    telemetry = telg.TelemetryServiceStub(live.channel)
                    now = int(time.time())
                    req = tel.GetUtilizationRequest()
                    getattr(req, "from").seconds = now - 3600
                    req.to.seconds = now + 3600
                    for _ in range(100):
                        util = telemetry.GetUtilization(req, timeout=10).rows
                        if util and util[0].peak_memory_mib == 4845:
                            break
                        time.sleep(0.1)
                    # One row: the GPUs without an allocation roll up to none.
                    assert len(util) == 1, util
                    row = util[0]
                    assert (row.team, row.gpu_model) == ("research", "A100-40GB"), row
                    # 0.99563 engine activity, 4845 MiB used.
                    assert row.peak_busy_milli == 996 and row.peak_memory_mib == 4845, row
                    assert row.sampled_milli_gpu_seconds > 0 and row.energy_mwh >= 0, row
                before = rows()
                out = agent_run(agent, endpoint, "--file", os.path.join(fixtures, fixture))
                assert out.returncode == 0, (out.stdout, out.stderr)
                assert counts(out) == (devices, devices, 0, 0), (job, out.stdout)
                from_text = new_rows(before)
                assert len(from_text) == devices, (job, from_text)
                assert from_prometheus == from_text, (job, from_prometheus, from_text)
                print(f"{job}: {devices} devices, identical rows from both paths")
                if job == "docs":
                    docs_rows = from_text

            # A fleet that relabelled, read with its label names.
            before = rows()
            via_prometheus('job="relabelled"', "--prometheus-label", "uuid=gpu_uuid",
                           "--prometheus-label", "GPU_I_ID=mig_id")
            assert new_rows(before) == docs_rows
            # ... and without them: nothing names a GPU.
            before = rows()
            out = via_prometheus('job="relabelled"')
            assert "no UUID label 'UUID'" in out.stderr, out.stderr
            assert "5 series, 0 devices" in out.stdout and new_rows(before) == [], out.stdout

            # A selector that matches nothing: zero samples, reported.
            before = rows()
            out = via_prometheus('job="nothing"')
            assert "prometheus: 0 series, 0 devices" in out.stdout, out.stdout
            assert "no series matched" in out.stderr and endpoint_url in out.stderr, out.stderr
            assert new_rows(before) == []

            # Refused: a selector Prometheus cannot parse, a wrong password, a
            # server the CA does not vouch for. Each named, nothing written.
            before = rows()
            out = via_prometheus('job=~"("', expect_rc=1)
            assert ("INVALID_ARGUMENT" in out.stderr and "400 Bad Request: bad_data" in out.stderr
                    and endpoint_url in out.stderr), out.stderr
            wrong = os.path.join(live.work, "wrong-password")
            with open(wrong, "w") as f:
                f.write("nope\n")
            out = agent_run(agent, endpoint, "--prometheus", prom.url,
                            *[wrong if a == password_file else a for a in tls])
            assert out.returncode == 1, (out.stdout, out.stderr)
            assert ("UNAUTHENTICATED" in out.stderr and "401 Unauthorized" in out.stderr
                    and endpoint_url in out.stderr), out.stderr
            other_ca = os.path.join(live.work, "other-ca")
            subprocess.run([os.path.join(source_dir, "deploy/local/make-certs"), other_ca],
                           check=True, stdout=subprocess.DEVNULL)
            out = agent_run(agent, endpoint, "--prometheus", prom.url,
                            *[f"{other_ca}/ca.pem" if a == f"{certs}/ca.pem" else a for a in tls])
            assert out.returncode == 1 and "UNAVAILABLE" in out.stderr, (out.stdout, out.stderr)
            assert endpoint_url in out.stderr, out.stderr
            assert new_rows(before) == []

            # Too slow: a listener that never answers, past --prometheus-timeout.
            with socket.socket() as slow:
                slow.bind(("127.0.0.1", 0))
                slow.listen(4)
                slow_url = f"http://127.0.0.1:{slow.getsockname()[1]}"
                out = agent_run(agent, endpoint, "--prometheus", slow_url,
                                "--prometheus-timeout", "1s")
            assert out.returncode == 1, (out.stdout, out.stderr)
            assert ("DEADLINE_EXCEEDED" in out.stderr and "no reply within 1s" in out.stderr
                    and f"{slow_url}/api/v1/query" in out.stderr), out.stderr

            # Stopped: reported with the URL, nothing written.
            prom.stop()
            before = rows()
            out = via_prometheus('job="docs"', expect_rc=1)
            assert "UNAVAILABLE" in out.stderr and endpoint_url in out.stderr, out.stderr
            assert "1 of 1 queries failed" in out.stderr, out.stderr
            assert new_rows(before) == [], "samples written with Prometheus down"

            # A running agent keeps going, counts the failures, says so on
            # /healthz and /metrics, and streams again once Prometheus is back.
            running = subprocess.Popen(
                [agent, "--endpoint", endpoint, "--prometheus", prom.url, "--prometheus-selector",
                 'job="docs"', "--interval", "1s", "--flush-every", "1",
                 "--metrics-listen", "127.0.0.1:0", *tls],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # Its stderr, drained as it comes (a full pipe would stall it).
            err_lines = []

            def read_stderr():
                for line in running.stderr:
                    err_lines.append(line)
            drain = threading.Thread(target=read_stderr, daemon=True)
            drain.start()
            up = 'arbiter_agent_source_up{source="prometheus"}'
            unavailable = ('arbiter_agent_source_read_failures_total{source="prometheus",'
                           'code="UNAVAILABLE"}')
            try:
                def port():
                    m = re.search(r"arbiter-agent: metrics on 127\.0\.0\.1:(\d+)\n",
                                  "".join(err_lines))
                    return (m is not None or running.poll() is not None,
                            int(m.group(1)) if m else "".join(err_lines))
                metrics_port = poll("the agent's metrics port on stderr", port, timeout=30)
                assert isinstance(metrics_port, int), metrics_port

                def down():
                    status, health = http_get(metrics_port, "/healthz")
                    _, text = http_get(metrics_port, "/metrics")
                    failures = metric(text, unavailable) or 0
                    return (status == 503 and health.startswith("prometheus: UNAVAILABLE: ")
                            and endpoint_url in health and metric(text, up) == 0
                            and failures >= 2, (status, health, text))
                status, health, text = poll("/healthz 503 and the source down", down)
                assert health.count("\n") == 1, health  # One line.
                assert running.poll() is None, "the agent stopped with Prometheus down"
                print(f"prometheus down: /healthz {status} {health.strip()!r}; "
                      f"{int(metric(text, unavailable))} UNAVAILABLE reads counted")
                stored_before = sum(len(r) for r in rows().values())
                prom.start()
                prom.wait_ready()
                for _ in range(600):
                    if sum(len(r) for r in rows().values()) > stored_before:
                        break
                    time.sleep(0.1)
                else:
                    raise AssertionError("no samples after Prometheus came back")

                def back():
                    status, health = http_get(metrics_port, "/healthz")
                    _, text = http_get(metrics_port, "/metrics")
                    return (status == 200 and health == "ok\n" and metric(text, up) == 1
                            and (metric(text, "arbiter_agent_samples_sent_total") or 0) > 0,
                            (status, health, text))
                status, health, text = poll("/healthz 200 and the source up", back)
                # The failures stay counted; the last success is recent.
                assert metric(text, unavailable) >= 2, text
                assert metric(text, 'arbiter_agent_source_last_success_timestamp_seconds'
                                    '{source="prometheus"}') > time.time() - 60, text
                print("prometheus back: /healthz 200, source up")
            finally:
                running.send_signal(signal.SIGTERM)
                running.wait(timeout=60)
                drain.join(timeout=60)
            err = "".join(err_lines)
            failed = [int(n) for n in re.findall(r"(\d+) of \d+ queries failed", err)]
            assert failed and max(failed) >= 2, err
            assert endpoint_url in err, err
            print(f"prometheus down: {max(failed)} failed queries counted, agent streamed after")
        finally:
            prom.stop()
            exporter.shutdown()


if __name__ == "__main__":
    main()
