#!/usr/bin/python3
"""arbiter-slurm against real Slurm daemons (tests/slurm/slurm_cluster.py:
munged, MariaDB, slurmdbd, slurmctld, two slurmd) and a live arbiterd, with
deploy/slurm/job_submit.lua installed. Checked, with exact outcomes:
  - a job without GPUs runs untouched;
  - the teams become Slurm accounts that may use the preemptible QOS, and
    their quotas the accounts' GrpTRES, following a quota change;
  - refused at submission, with a message: an account that is no Arbiter
    team, a GPU type Arbiter does not know, GPUs asked per job;
  - quota: of two teams' jobs beyond their quotas, those within run, pinned
    to Arbiter's placement and claimed for slurm:<cluster>/<job>; the rest
    stay held with Arbiter's reason in squeue's comment, and their users
    cannot release them;
  - job end releases the allocation, and a waiting job then runs;
  - borrowing and reclaim: a preemptible job borrowing beyond its team's
    quota gets the checkpoint signal when the lender reclaims, is requeued
    held at the deadline, and its allocation is released (the preemption
    confirmed); the lender's job runs;
  - kill -9 of the bridge mid-run, and a restart of slurmctld: no allocation
    is lost, no job runs unadmitted, and the bridge carries on from the
    requests recorded on the jobs;
  - arbiterd unreachable: a new GPU job stays held, its comment saying so,
    and runs once arbiterd is back;
  - accounting: each job's allocation is charged for the run sacct reports
    (its start and end), and a team's chargeback statement holds exactly
    the GPU-seconds sacct reports for the team's jobs.

Usage: slurm_bridge_test.py ARBITERD ARBITER_SLURM SOURCE_DIR
       (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import os
import signal
import subprocess
import sys
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "tests", "slurm"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "integration"))
from live_arbiterd import LiveArbiterd  # noqa: E402
from slurm_cluster import BRIDGE_USER, JOB_USER, ROOT, SlurmCluster, as_user  # noqa: E402

CLUSTER = "arbtest"


def wait_for(what, check, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


class Arbiter:
    def __init__(self, live):
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import types_pb2 as t
        self.al, self.gov, self.inv, self.t = al, gov, inv, t
        self.allocation = alg.AllocationServiceStub(live.channel)
        self.governance = govg.GovernanceServiceStub(live.channel)
        self.inventory = invg.InventoryServiceStub(live.channel)
        self.channel = live.channel

    def seed(self):
        t, inv, gov = self.t, self.inv, self.gov
        self.inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name=CLUSTER)),
                                     timeout=10)
        self.inventory.CreatePool(inv.CreatePoolRequest(pool=t.Pool(
            name="gpu", latency_class=t.LATENCY_CLASS_BATCH, claim_deadline_seconds=120,
            lease_seconds=20, reclaim_grace_seconds=4)), timeout=10)
        for name, model in (("n1", "H100-80GB"), ("n2", "A100-80GB")):
            self.inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
                cluster=CLUSTER, name=name, pool="gpu", cpu_milli=16000, memory_mib=64000,
                gpus=[t.Gpu(index=i, model=model) for i in range(8)])), timeout=10)
        # One cohort: research lends what it does not use; vision may borrow.
        self.governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name="lab")), timeout=10)
        for team in ("research", "vision"):
            self.governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name=team,
                                                                         parent="lab")),
                                       timeout=10)
        self.quota("research", 4000)
        self.quota("vision", 2000, borrowing=6000)

    def quota(self, team, nominal, borrowing=0):
        self.governance.SetQuota(self.gov.SetQuotaRequest(quota=self.t.Quota(
            team=team, pool="gpu", nominal_milli=nominal, borrowing_limit_milli=borrowing)),
            timeout=10)

    def get(self, rid):
        return self.allocation.GetRequest(self.al.GetRequestRequest(id=rid), timeout=10).request

    def state(self, rid):
        return self.t.RequestState.Name(self.get(rid).state)


class Bridge:
    """arbiter-slurm as a Slurm operator, restartable."""

    def __init__(self, binary, cluster, endpoint, poll_every="300ms"):
        self.argv = as_user(BRIDGE_USER, [
            binary, "--endpoint", endpoint, "--cluster", CLUSTER,
            "--gpu-type", "h100=H100-80GB", "--gpu-type", "a100=A100-80GB",
            "--policy-file", cluster.path("etc", "arbiter-policy.lua"),
            "--poll-every", poll_every, "--renew-every", "1s", "--retry-every", "500ms",
            # Admissions of waiting jobs come through the watch.
            "--lookup-every", "60s",
            "--sync-every", "2s"])
        self.env = cluster.env
        self.log = open(cluster.path("log", "arbiter-slurm.log"), "a")
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log, stderr=self.log,
                                     start_new_session=True)

    def kill9(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)


def request_of(job):
    comment = job.get("admin_comment", "")
    if not comment.startswith("arbiter:request="):
        return 0
    return int(comment.split("=")[1].split(";")[0])


def check_refusals(c):
    for args, message in (
            (["--account=nobody-team", "--gres=gpu:h100:1"], "'nobody-team' is not an Arbiter team"),
            (["--account=research", "--gres=gpu:v100:1"], "'v100' is not in Arbiter's catalog"),
            (["--account=research", "--gpus=2"], "ask for GPUs per node")):
        out = c.submit(args + ["--wrap", "true"], check=False)
        assert out.returncode != 0 and message in out.stderr, (args, out.stderr)
    # A job without GPUs is not touched.
    job = c.submit(["--account=research", "--wrap", "true"])
    done = wait_for("the CPU job", lambda: c.jobs()[job]["job_state"] == "COMPLETED" and c.jobs()[job])
    assert done["comment"] == "" and done["admin_comment"] == "", done


def association(c, account, field):
    """A field of the account's own association (no user), or None."""
    out = c.operator(["sacctmgr", "-nP", "show", "association", f"account={account}",
                      f"format=user,{field}"]).stdout
    return next((line.split("|")[1] for line in out.splitlines() if line.startswith("|")), None)


def grp_tres(c, account):
    return association(c, account, "grptres")


def check_limits(c, a):
    # Pool-wide quotas: nominal plus borrowing limit, in whole GPUs.
    wait_for("research's limit", lambda: grp_tres(c, "research") == "gres/gpu=4")
    wait_for("vision's limit", lambda: grp_tres(c, "vision") == "gres/gpu=8")
    a.quota("research", 6000)
    wait_for("research's new limit", lambda: grp_tres(c, "research") == "gres/gpu=6")
    a.quota("research", 4000)
    wait_for("research's limit again", lambda: grp_tres(c, "research") == "gres/gpu=4")


def check_quota_and_end(c, a, holder):
    # research may hold 4 GPUs: two 2-GPU jobs run, the third waits.
    running = [c.submit(["--account=research", "--gres=gpu:h100:2", "--wrap", "sleep 6"])
               for _ in range(2)]
    waiting = c.submit(["--account=research", "--gres=gpu:h100:2", "--wrap", "sleep 1"])
    for job in running:
        j = wait_for(f"job {job} running", lambda: c.jobs()[job]["job_state"] == "RUNNING"
                     and c.jobs()[job])
        rid = request_of(j)
        r = a.get(rid)
        assert a.t.RequestState.Name(r.state) == "REQUEST_STATE_ADMITTED", r
        assert j["nodes"] == r.placements[0].node == "n1", (j["nodes"], r.placements)
        assert [x.holder for x in r.claims] == [holder(job)], r.claims
        assert j["comment"].startswith(f"arbiter: admitted as request {rid} on n1"), j["comment"]
    w = wait_for("the reason", lambda: "QUOTA" in c.jobs()[waiting]["comment"] and c.jobs()[waiting])
    assert w["job_state"] == "PENDING" and w["priority"] == 0, w
    assert a.state(request_of(w)) == "REQUEST_STATE_QUEUED"
    if ROOT:  # The job's user is not the bridge: the hold is not theirs to lift.
        out = c.slurm(["scontrol", "release", str(waiting)], check=False)
        assert out.returncode != 0, out
        assert c.jobs()[waiting]["priority"] == 0
    # The running jobs end: their allocations are released, the third runs.
    for job in running:
        wait_for(f"job {job} released", lambda: a.state(request_of(c.jobs()[job])) ==
                 "REQUEST_STATE_RELEASED", timeout=40)
    wait_for("the waiting job's end", lambda: c.jobs()[waiting]["job_state"] == "COMPLETED",
             timeout=40)
    wait_for("its release", lambda: a.state(request_of(c.jobs()[waiting])) ==
             "REQUEST_STATE_RELEASED")
    return running + [waiting]


def job_output(c, job):
    """What `job` wrote so far; "" before slurmd has created its file (a
    job is RUNNING in squeue a moment before its output file exists)."""
    try:
        with open(c.path("jobs", f"{job}.out")) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def check_reclaim(c, a):
    # vision borrows research's idle GPUs with a preemptible job that
    # checkpoints on SIGUSR1.
    script = c.path("jobs", "borrower.sh")
    with open(script, "w") as f:
        f.write("#!/bin/bash\ntrap 'echo checkpoint; sleep 1' USR1\n"
                "for i in $(seq 600); do sleep 0.2; done\n")
    os.chmod(script, 0o755)
    borrower = c.submit(["--account=vision", "--qos=preemptible", "--gres=gpu:h100:6", script])
    b = wait_for("the borrower running", lambda: c.jobs()[borrower]["job_state"] == "RUNNING"
                 and c.jobs()[borrower])
    borrowed = request_of(b)
    assert a.get(borrowed).preemptible
    # research reclaims its nominal 4 GPUs.
    lender = c.submit(["--account=research", "--gres=gpu:h100:4", "--wrap", "sleep 2"])
    wait_for("the checkpoint signal",
             lambda: "checkpoint" in job_output(c, borrower), timeout=20)
    requeued = wait_for("the borrower requeued held",
                        lambda: (lambda j: j["restart_cnt"] == 1 and j["job_state"] == "PENDING"
                                 and j["priority"] == 0 and j)(c.jobs()[borrower]), timeout=30)
    # The bridge releases the preempted allocation once Slurm requeued the
    # job: the enforcer's confirmation (RELEASED, not PREEMPTED: that is what
    # a deadline passed without it ends as).
    wait_for("the preempted allocation released",
             lambda: a.state(borrowed) == "REQUEST_STATE_RELEASED", timeout=10)
    wait_for("the lender running", lambda: c.jobs()[lender]["job_state"] in ("RUNNING", "COMPLETED"))
    # The requeued run is asked for anew (a new request), and runs once the
    # lender is done.
    wait_for("the borrower's second run",
             lambda: c.jobs()[borrower]["job_state"] == "RUNNING" and
             request_of(c.jobs()[borrower]) not in (0, borrowed), timeout=40)
    assert requeued
    c.operator(["scancel", str(borrower)])
    wait_for("the second run's release",
             lambda: a.state(request_of(c.jobs()[borrower])) == "REQUEST_STATE_RELEASED")


def check_bridge_kill_and_slurmctld_restart(c, a, bridge):
    jobs = [c.submit(["--account=research", "--gres=gpu:h100:2", "--wrap", "sleep 8"])
            for _ in range(3)]
    wait_for("two running", lambda: sum(c.jobs()[j]["job_state"] == "RUNNING" for j in jobs) == 2)
    # Slurm 22.05 refuses updates to a job whose accounting record slurmdbd
    # has not yet indexed when slurmctld restarts ("the DB index is being
    # set"), for as long as it stays held: the restart comes once slurmdbd
    # knows the jobs, as it would in a run (docs/slurm.md).
    wait_for("slurmdbd's records", lambda: len(c.sacct(jobs)) == 3)
    bridge.kill9()
    c.stop_slurmctld()
    c.start_slurmctld()
    time.sleep(2)
    # Without the bridge, the third job stays held.
    assert c.jobs()[jobs[2]]["job_state"] == "PENDING", c.jobs()[jobs[2]]
    bridge.start()
    for job in jobs:
        wait_for(f"job {job} done", lambda: c.jobs()[job]["job_state"] == "COMPLETED", timeout=60)
        wait_for(f"job {job} released", lambda: a.state(request_of(c.jobs()[job])) ==
                 "REQUEST_STATE_RELEASED", timeout=20)
    # Each job ran on its own request, admitted before it started (Slurm
    # records whole seconds).
    assert len({request_of(c.jobs()[j]) for j in jobs}) == 3
    starts = {int(r["JobID"]): int(r["Start"]) for r in c.sacct(jobs, "JobID,Start")}
    for job in jobs:
        admitted = a.get(request_of(c.jobs()[job])).admitted_at.seconds
        assert admitted <= starts[job] + 1, (job, admitted, starts[job])


def check_arbiter_unreachable(c, a, live, bridge):
    live.proc.send_signal(signal.SIGSTOP)
    try:
        job = c.submit(["--account=research", "--gres=gpu:h100:1", "--wrap", "true"])
        j = wait_for("the comment", lambda: "did not answer" in c.jobs()[job]["comment"] and
                     c.jobs()[job], timeout=40)
        assert j["job_state"] == "PENDING" and j["priority"] == 0, j
    finally:
        live.proc.send_signal(signal.SIGCONT)
    wait_for("the job's run", lambda: c.jobs()[job]["job_state"] == "COMPLETED", timeout=40)
    # The bridge sees the end at its next squeue: only then is the run
    # recorded on the allocation.
    wait_for("its release", lambda: a.state(request_of(c.jobs()[job])) ==
             "REQUEST_STATE_RELEASED", timeout=20)


def check_accounting(c, a, since):
    """Every research allocation is a Slurm job that ended: the team's
    reserved GPU-seconds in its statement equal sacct's."""
    from arbiter.v1 import chargeback_pb2 as cb, chargeback_pb2_grpc as cbg
    out = c.operator(["sacct", "--noheader", "--parsable2", "--allocations",
                      "--accounts=research",
                      "--starttime=" + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)),
                      "--format=JobID,ElapsedRaw,AllocTRES,Start,End,State"]).stdout
    sacct_milli, jobs = 0, 0
    for line in out.splitlines():
        job, elapsed, tres, start, end, state = line.split("|")
        gpus = dict(x.split("=") for x in tres.split(",") if "=" in x).get("gres/gpu")
        if gpus is None:
            continue  # The CPU-only job.
        assert state == "COMPLETED", line
        sacct_milli += int(elapsed) * int(gpus) * 1000
        jobs += 1
        r = a.get(request_of(c.jobs()[int(job)]))
        assert (r.workload_started_at.seconds, r.workload_ended_at.seconds) == \
            (int(start), int(end)), (line, r.workload_started_at, r.workload_ended_at)
    assert jobs == 8, out
    hour = 3600
    period = cb.Period()
    getattr(period, "from").FromSeconds(since // hour * hour)  # "from": a Python keyword.
    period.to.FromSeconds((int(time.time()) // hour + 1) * hour)
    stub = cbg.ChargebackServiceStub(a.channel)
    report = stub.GetChargeback(cb.GetChargebackRequest(period=period, team="research"),
                                timeout=20)
    [statement] = [s for s in report.statements if s.team == "research"]
    assert statement.reserved_milli_seconds == sacct_milli, (statement.reserved_milli_seconds,
                                                             sacct_milli)
    print(f"accounting: {jobs} jobs, {sacct_milli // 1000} GPU-seconds in sacct and in "
          f"research's statement", flush=True)


def main():
    arbiterd, binary = sys.argv[1], sys.argv[2]
    if ROOT:
        # The bridge runs as BRIDGE_USER: it must reach its binary.
        os.chmod(os.path.dirname(binary), 0o755)
    started = int(time.time())
    with LiveArbiterd(arbiterd, SOURCE, "slurm") as live:
        a = Arbiter(live)
        a.seed()
        with SlurmCluster([("n1", "h100", 8), ("n2", "a100", 8)], cluster=CLUSTER,
                          job_submit=os.path.join(SOURCE, "deploy/slurm/job_submit.lua")) as c:
            c.operator_user(BRIDGE_USER)
            bridge = Bridge(binary, c, live.endpoint)
            bridge.start()
            try:
                # The bridge adds the teams as accounts; the site puts its users in them.
                wait_for("the accounts", lambda: "vision" in c.operator(
                    ["sacctmgr", "-nP", "list", "account", "format=account"]).stdout)
                # ... and lets them use the preemptible QOS, which it creates.
                for team in ("research", "vision"):
                    wait_for(f"{team}'s QOS", lambda: "preemptible" in (
                        association(c, team, "qos") or ""))
                    c.operator(["sacctmgr", "-i", "add", "user", JOB_USER, f"account={team}"])
                wait_for("the policy", lambda: os.path.exists(c.path("etc", "arbiter-policy.lua")))
                holder = lambda job: f"slurm:{CLUSTER}/{job}"  # noqa: E731
                check_refusals(c)
                print("refusals: ok", flush=True)
                check_limits(c, a)
                print("accounts' limits: ok", flush=True)
                check_quota_and_end(c, a, holder)
                print("quota and job end: ok", flush=True)
                check_reclaim(c, a)
                print("borrowing and reclaim: ok", flush=True)
                check_bridge_kill_and_slurmctld_restart(c, a, bridge)
                print("bridge kill -9 and slurmctld restart: ok", flush=True)
                check_arbiter_unreachable(c, a, live, bridge)
                print("arbiterd unreachable: ok", flush=True)
                check_accounting(c, a, started)
                print("accounting: ok", flush=True)
            except BaseException:
                subprocess.run(["tail", "-n", "60", c.path("log", "arbiter-slurm.log")])
                raise
            finally:
                bridge.stop()
    print("slurm_bridge: ok")


if __name__ == "__main__":
    main()
