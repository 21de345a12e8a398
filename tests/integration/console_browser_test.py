#!/usr/bin/python3
"""The web console in a real browser: Debian's Chromium, driven through
chromedriver by python3-selenium (no browser download), against a live
arbiterd (TLS, the console on its HTTPS port) and PostgreSQL with the demo
organisation. Browser users sign in with ID tokens of the project's dev OIDC
issuer.

The scenario:
  - alice (training) submits a borrowing request on the serving pool; the
    console shows it waiting in pending approval with the API's reason;
  - carol (the serving pool's authority) approves it in her inbox;
  - alice's team page shows it admitted without a reload (the watch stream);
  - erin (finance) downloads the month's CSV, CSV lines and JSON: each is
    byte for byte arbctl's export of the same month;
  - alice asking for another team's statement gets the permission error in
    the page, and the same call at the API gets 403 permission_denied;
  - every figure the pages show for requests and statements equals the gRPC
    answer to the same query.
Screenshots of every page go to OUT_DIR (docs/console.md shows them).

Usage: console_browser_test.py ARBITERD ARBCTL SOURCE_DIR CONSOLE_DIST OUT_DIR
(DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import datetime
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

from live_arbiterd import LiveArbiterd

ISSUER = "https://issuer.arbiter.test"
AUDIENCE = "arbiter-console"
PREFIX = "spiffe://arbiter.local/"


def month_bounds():
    now = datetime.datetime.now(datetime.timezone.utc)
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = (start + datetime.timedelta(days=32)).replace(day=1)
    return start, end


class Console:
    """One browser (its own profile and session storage) signed in as one user."""

    def __init__(self, base, token, downloads):
        options = webdriver.ChromeOptions()
        options.binary_location = shutil.which("chromium")
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--ignore-certificate-errors", "--window-size=1400,1000",
                    "--no-first-run", "--disable-extensions"):
            options.add_argument(arg)
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.driver.execute_cdp_cmd("Page.setDownloadBehavior",
                                    {"behavior": "allow", "downloadPath": downloads})
        self.downloads = downloads
        self.base = base
        self.driver.get(f"{base}/#id_token={token}")
        self.wait(lambda d: d.find_element(By.ID, "principal").text)

    def wait(self, condition, timeout=30):
        # Live pages replace what they show: an element read while it is
        # replaced is read again.
        return WebDriverWait(self.driver, timeout, poll_frequency=0.2,
                             ignored_exceptions=(StaleElementReferenceException,)).until(condition)

    def go(self, route):
        self.driver.get(f"{self.base}/#{route}")
        self.driver.refresh()  # A fragment change alone does not reload; the token is in session storage.
        self.wait(lambda d: d.find_element(By.ID, "principal").text)

    def shot(self, out_dir, name):
        # The whole page, not only the window.
        height = self.driver.execute_script(
            "window.scrollTo(0, 0); return document.documentElement.scrollHeight")
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1400, "height": max(600, min(height, 4000)), "deviceScaleFactor": 1,
            "mobile": False})
        self.driver.save_screenshot(os.path.join(out_dir, f"{name}.png"))
        self.driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})

    def row(self, table_id, request_id):
        rows = self.driver.find_elements(
            By.CSS_SELECTOR, f"#{table_id} tr[data-request-id='{request_id}']")
        return rows[0] if rows else None

    def quit(self):
        self.driver.quit()


def connect_call(port, token, method, body):
    """A Connect unary call: (HTTP status, decoded JSON)."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(f"https://127.0.0.1:{port}/arbiter.v1.{method}",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def fixed(value, unit, decimals):
    """As arbctl and the console write figures: `decimals` decimals of
    value/unit, rounded half up on the magnitude."""
    scale = 10 ** decimals
    scaled = (abs(value) * scale + unit // 2) // unit
    return f"{'-' if value < 0 else ''}{scaled // scale}.{scaled % scale:0{decimals}d}"


def money(micros):
    return fixed(micros, 1_000_000, 2)


def gpu_hours(milli_seconds):
    return fixed(milli_seconds, 3_600_000, 2)


def gpus(milli):
    """Whole GPUs as integers, fractions with up to 3 decimals (the console's)."""
    if milli % 1000 == 0:
        return str(milli // 1000)
    return fixed(milli, 1000, 3).rstrip("0")


def wait_for_file(path, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if os.path.exists(path) and not os.path.exists(path + ".crdownload"):
            return open(path, "rb").read()
        time.sleep(0.2)
    raise AssertionError(f"no download at {path}")


def main():
    arbiterd, arbctl, source, dist, out_dir = sys.argv[1:6]
    assert os.path.exists(os.path.join(dist, "index.html")), f"build the console first: {dist}"
    os.makedirs(out_dir, exist_ok=True)
    oidc = tempfile.mkdtemp(prefix="arbiter-oidc-")
    issuer = os.path.join(source, "tools/dev-oidc-issuer")
    subprocess.run([issuer, "keygen", oidc], check=True)

    def token(who):
        return subprocess.run([issuer, "token", oidc, "--iss", ISSUER, "--aud", AUDIENCE,
                               "--sub", who], check=True, capture_output=True,
                              text=True).stdout.strip()

    extra = ["--console-listen", "127.0.0.1:0", "--console-assets", dist,
             "--oidc-issuer", ISSUER, "--oidc-audience", AUDIENCE,
             "--oidc-jwks", os.path.join(oidc, "jwks.json"), "--oidc-principal-prefix", PREFIX]
    browsers = []
    with LiveArbiterd(arbiterd, source, "console", extra_args=extra, tls=True) as live:
        port = int(open(os.path.join(live.work, "port.console")).read())
        base = f"https://127.0.0.1:{port}"
        certs = live.certs

        def arbctl_as(who, *args):
            return subprocess.run(
                [arbctl, "--endpoint", live.endpoint, "--tls-ca", f"{certs}/ca.pem",
                 "--tls-cert", f"{certs}/{who}.pem", "--tls-key", f"{certs}/{who}.key", *args],
                check=True, capture_output=True).stdout

        arbctl_as("admin", "models", "apply", os.path.join(source, "catalog/gpu-models.json"))
        arbctl_as("admin", "demo", "load")
        downloads = tempfile.mkdtemp(prefix="arbiter-downloads-")
        try:
            # alice submits training work that borrows the serving pool.
            alice = Console(base, token("alice"), downloads)
            browsers.append(alice)
            assert alice.driver.find_element(By.ID, "principal").text == PREFIX + "alice"
            assert "team member of training" in alice.driver.find_element(By.ID, "roles").text
            alice.go("/request")
            d = alice.driver
            alice.wait(lambda d: d.find_element(By.ID, "f-pool").find_elements(By.TAG_NAME, "option"))
            Select(d.find_element(By.ID, "f-team")).select_by_value("training")
            Select(d.find_element(By.ID, "f-pool")).select_by_value("serving")
            Select(d.find_element(By.ID, "f-class")).select_by_value("TRAINING")
            count = d.find_element(By.ID, "f-count")
            count.clear()
            count.send_keys("8")
            d.find_element(By.ID, "f-preemptible").click()
            checkpoint = d.find_element(By.ID, "f-checkpoint")
            checkpoint.clear()
            checkpoint.send_keys("60")
            alice.shot(out_dir, "new-request")
            # The dry run first: what would happen, and nothing submitted.
            from arbiter.v1 import allocation_pb2, allocation_pb2_grpc
            alloc = allocation_pb2_grpc.AllocationServiceStub(live.channel)
            d.find_element(By.ID, "preview").click()
            heading = alice.wait(lambda d: d.find_element(By.CSS_SELECTOR, "#answer h2"))
            assert heading.text == "Preview: it would be pending approval", heading.text
            assert "It would preempt nothing." in d.find_element(By.ID, "would-preempt").text
            assert not alloc.ListRequests(allocation_pb2.ListRequestsRequest()).requests, \
                "the preview submitted a request"
            alice.shot(out_dir, "new-request-preview")
            d.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
            alice.wait(lambda d: not d.find_element(
                By.CSS_SELECTOR, "#answer h2").text.startswith("Preview"))
            heading = alice.wait(lambda d: d.find_element(By.CSS_SELECTOR, "#answer h2"))
            assert "pending approval" in heading.text, heading.text
            request_id = heading.text.split()[1].rstrip(":")
            shown_reason = d.find_element(By.ID, "answer-reason").text
            alice.shot(out_dir, "new-request-answer")

            # The API says the same: state and reason.
            from arbiter.v1 import chargeback_pb2, chargeback_pb2_grpc, types_pb2
            got = alloc.GetRequest(allocation_pb2.GetRequestRequest(id=int(request_id))).request
            assert got.state == types_pb2.REQUEST_STATE_PENDING_APPROVAL, got
            assert shown_reason == f"{got.reason_code}: {got.reason}", (shown_reason, got.reason)
            assert PREFIX + "carol" in got.approvers, got.approvers

            # alice's team page: the request waits, with its reason.
            alice.go("/team/training")
            row = alice.wait(lambda d: alice.row("requests", request_id))
            assert row.get_attribute("data-state") == "PENDING_APPROVAL"
            assert row.find_element(By.CSS_SELECTOR, "[data-field=reason]").text == shown_reason
            alice.wait(lambda d: d.find_element(By.ID, "live").text == "live")
            listed = alloc.ListRequests(allocation_pb2.ListRequestsRequest(team="training"))
            shown_ids = {r.get_attribute("data-request-id") for r in
                         d.find_elements(By.CSS_SELECTOR, "#requests tr[data-request-id]")}
            assert shown_ids == {str(r.id) for r in listed.requests}, (shown_ids, listed)
            # Quotas: what ListQuotas answers, in use included.
            from arbiter.v1 import governance_pb2, governance_pb2_grpc
            quotas = governance_pb2_grpc.GovernanceServiceStub(live.channel).ListQuotas(
                governance_pb2.ListQuotasRequest(team="training")).quotas
            shown = [[c.text for c in r.find_elements(By.TAG_NAME, "td")]
                     for r in d.find_elements(By.CSS_SELECTOR, "#quotas tbody tr")]
            want = [[q.quota.pool, q.quota.gpu_model or "any", gpus(q.quota.nominal_milli),
                     gpus(q.used_milli)] for q in quotas]
            assert [row[:4] for row in shown] == want, (shown, want)
            alice.shot(out_dir, "team-waiting")

            # carol approves in her inbox.
            carol = Console(base, token("carol"), downloads)
            browsers.append(carol)
            carol.go("/inbox")
            carol_row = carol.wait(lambda d: carol.row("inbox", request_id))
            pending = alloc.GetRequest(allocation_pb2.GetRequestRequest(id=int(request_id))).request
            cells = [c.text for c in carol_row.find_elements(By.TAG_NAME, "td")]
            assert cells[1:3] == [pending.team, pending.pool], cells
            assert cells[5] == gpus(pending.total_gpu_milli), (cells, pending.total_gpu_milli)
            assert cells[6] == money(pending.cost_micros), (cells, pending.cost_micros)
            assert cells[7] == f"{pending.reason_code}: {pending.reason}", cells
            # What approving would do, before deciding.
            carol_row.find_element(By.XPATH,
                                   f".//button[text()='Preview approving {request_id}']").click()
            carol.wait(lambda d: carol.row("inbox", request_id).find_element(
                By.CSS_SELECTOR, "[data-field=preview]").text == "admitted; preempts nothing")
            carol.shot(out_dir, "inbox")
            carol_row.find_element(By.XPATH, f".//button[text()='Approve {request_id}']").click()
            carol.wait(lambda d: "approved" in d.find_element(By.ID, "inbox-status").text)

            # alice's page follows, without a reload.
            alice.wait(lambda d: alice.row("requests", request_id).get_attribute("data-state")
                       == "ADMITTED")
            got = alloc.GetRequest(allocation_pb2.GetRequestRequest(id=int(request_id))).request
            assert got.state == types_pb2.REQUEST_STATE_ADMITTED, got
            assert any(a.endswith(PREFIX + "carol") for a in got.approvals), got.approvals
            # The quotas follow too: the 8 borrowed GPUs are in use on serving.
            alice.wait(lambda d: [c.text for c in d.find_elements(
                By.XPATH, "//table[@id='quotas']//tr[td[1]='serving']/td")][3:4] == ["8"])
            alice.shot(out_dir, "team-admitted")
            # The request is released first: an open month's figures grow
            # while an allocation runs, and two reads of them would differ by
            # the time between them.
            arbctl_as("admin", "release", request_id)
            start, end = month_bounds()

            # The month's statement on alice's team page is GetChargeback's for
            # the team (the forecast aside, which the page derives).
            team_req = chargeback_pb2.GetChargebackRequest(team="training")
            team_req.period.__getattribute__("from").FromDatetime(start)
            team_req.period.to.FromDatetime(end)
            alice.go("/team/training")
            shown = alice.wait(lambda d: [c.text for c in d.find_elements(
                By.CSS_SELECTOR, "#statement tbody td")])
            stmt = [x for x in chargeback_pb2_grpc.ChargebackServiceStub(live.channel)
                    .GetChargeback(team_req).statements if x.team == "training"][0]
            want = [gpu_hours(stmt.reserved_milli_seconds), gpu_hours(stmt.used_milli_seconds),
                    money(stmt.net_cost_micros),
                    money(stmt.budget_micros) if stmt.HasField("budget_micros") else "none",
                    money(stmt.remainder_micros) if stmt.HasField("budget_micros") else ""]
            assert shown[:5] == want, (shown, want)

            # erin: the month's exports are arbctl's, byte for byte.
            erin = Console(base, token("erin"), downloads)
            browsers.append(erin)
            erin.go("/finance")
            erin.wait(lambda d: d.find_elements(By.ID, "export-csv"))
            erin.shot(out_dir, "finance")
            month = start.strftime("%Y-%m")
            frm, to = start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ")
            for button, name, fmt in (("export-csv", f"chargeback-{month}.csv", "csv"),
                                      ("export-csv-lines", f"chargeback-{month}-lines.csv",
                                       "csv-lines"),
                                      ("export-json", f"chargeback-{month}.json", "json")):
                erin.driver.find_element(By.ID, button).click()
                got_bytes = wait_for_file(os.path.join(downloads, name))
                want = arbctl_as("erin", "chargeback", "show", "--from", frm, "--to", to,
                                 "--format", fmt)
                if got_bytes != want:
                    for label, text in (("console", got_bytes), ("arbctl", want)):
                        with open(os.path.join(out_dir, f"export-{fmt}.{label}"), "wb") as f:
                            f.write(text)
                    raise AssertionError(f"the console's {fmt} export is not arbctl's: "
                                         f"see {out_dir}/export-{fmt}.*")

            # The statement figures the page shows are the gRPC answer's.
            cb = chargeback_pb2_grpc.ChargebackServiceStub(live.secure_channel("erin"))
            req = chargeback_pb2.GetChargebackRequest()
            req.period.__getattribute__("from").FromDatetime(start)
            req.period.to.FromDatetime(end)
            answer = cb.GetChargeback(req)
            statements = answer.statements
            assert statements, "no statements this month"
            # The per-hour chart's figures (its table) are the answer's hours.
            shown_hours = erin.driver.execute_script(
                "return [...document.querySelectorAll('#chart-hours-figures tbody tr')]"
                ".map(r => [...r.children].map(c => c.textContent))")
            want_hours = [[p.hour.ToJsonString(), gpu_hours(p.reserved_milli_seconds),
                           gpu_hours(p.used_milli_seconds)] for p in answer.hours]
            assert shown_hours and shown_hours == want_hours, (shown_hours[:3], want_hours[:3])
            for s in statements:
                for key, text in (("net", money(s.net_cost_micros)),
                                  ("charged", money(s.externality_charged_micros)),
                                  ("credited", money(s.externality_credited_micros)),
                                  ("reserved", gpu_hours(s.reserved_milli_seconds)),
                                  ("used", gpu_hours(s.used_milli_seconds))):
                    cell = erin.driver.find_element(By.CSS_SELECTOR,
                                                    f"[data-total='{s.team}.{key}']")
                    assert cell.text == text, (s.team, key, cell.text, text)

            # alice and another team's money: refused in the page and at the API.
            alice.go("/finance?team=inference")
            alice.wait(lambda d: "permission_denied" in
                       d.find_element(By.ID, "finance-status").text)
            alice.shot(out_dir, "finance-refused")
            code, body = connect_call(port, token("alice"), "ChargebackService/GetChargeback",
                                      {"period": {"from": frm, "to": to}, "team": "inference"})
            assert code == 403 and body["code"] == "permission_denied", (code, body)
            code, body = connect_call(port, token("alice"), "ChargebackService/GetChargeback",
                                      {"period": {"from": frm, "to": to}, "team": "training"})
            assert code == 200, (code, body)

            # The operator's view, as the platform admin, with a quarter of a
            # GPU and a MIG slice held: every tile shows what ListNodes answers.
            arbctl_as("admin", "request", "--team", "research", "--pool", "dev", "--class",
                      "experimentation", "--milli", "250", "--gpu-memory-mib", "8192")
            arbctl_as("admin", "request", "--team", "inference", "--pool", "serving", "--class",
                      "inference", "--mig", "3g.40gb")
            admin = Console(base, token("admin"), downloads)
            browsers.append(admin)
            admin.go("/operator")
            admin.wait(lambda d: d.find_elements(By.CSS_SELECTOR, "#nodes .gpu"))
            tiles = admin.driver.find_elements(By.CSS_SELECTOR, "#nodes .gpu")
            from arbiter.v1 import inventory_pb2, inventory_pb2_grpc
            nodes = inventory_pb2_grpc.InventoryServiceStub(live.channel).ListNodes(
                inventory_pb2.ListNodesRequest()).nodes
            want = [str(g.allocated_milli) for n in nodes for g in n.gpus]
            got_tiles = [t.get_attribute("data-allocated-milli") for t in tiles]
            assert got_tiles == want, (got_tiles, want)
            assert "250" in got_tiles, got_tiles
            admin.shot(out_dir, "operator")
        finally:
            for b in browsers:
                b.quit()
    print(f"console: scenario passed; screenshots in {out_dir}")


if __name__ == "__main__":
    main()
