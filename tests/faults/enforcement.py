"""The enforcer-kill fault scenario's parts (docs/enforcement.md): a fleet of
enforcer processes (enforcer.py) racing to claim the pool's allocations and
renewing their leases, a nemesis that kills one with SIGKILL at random and
starts it again after a random time (shorter or longer than a lease), and
the invariants checked afterwards against the enforcers' logs and the
ledger:

  - one workload per allocation: no allocation was claimed or renewed by
    two holders (so no GPU was promised to two live claims);
  - no GPU-seconds held by no one beyond a lease: an allocation claimed last
    renewed at R ended by R + lease, one never claimed by its admission +
    the claim deadline (each up to `slack`, the arbiter's timer granularity
    and a commit).
The scenario's other invariants (capacity at every ledger prefix,
acknowledged grants present) are checker.py's."""
import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import psycopg2

SLACK_S = 1.5


class Fleet:
    """N enforcer processes against `endpoint`, logging under `work`."""

    def __init__(self, n, endpoint, pool, lease_s, work):
        self.endpoint, self.pool, self.lease_s, self.work = endpoint, pool, lease_s, work
        self.names = [f"enforcer-{i}" for i in range(n)]
        self.procs = {}

    def log(self, name):
        return os.path.join(self.work, f"{name}.log")

    def start(self, name):
        self.procs[name] = subprocess.Popen(
            [sys.executable, "-u", os.path.join(os.path.dirname(__file__), "enforcer.py"),
             "--endpoint", self.endpoint, "--name", name, "--pool", self.pool,
             "--lease", str(self.lease_s), "--log", self.log(name)],
            stdout=subprocess.DEVNULL, stderr=open(self.log(name) + ".err", "a"))

    def kill9(self, name):
        proc = self.procs.pop(name, None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def __enter__(self):
        for name in self.names:
            self.start(name)
        return self

    def __exit__(self, *exc):
        for name in list(self.procs):
            self.kill9(name)
        return False

    def alive(self):
        return [n for n, p in self.procs.items() if p.poll() is None]


class Nemesis(threading.Thread):
    """Kills a random live enforcer with SIGKILL every `interval` seconds and
    starts it again after 0.2..2.5 leases (its allocations either survive,
    adopted by the new process, or end LEASE_EXPIRED)."""

    def __init__(self, fleet, interval, rng):
        super().__init__(daemon=True)
        self.fleet, self.interval, self.rng = fleet, interval, rng
        self.stop = threading.Event()
        self.faults = 0
        self.kind = "enforcer-kill"
        self.recovery = []
        self.promotion = []

    def run(self):
        while not self.stop.wait(self.interval * (0.7 + 0.6 * self.rng.random())):
            alive = self.fleet.alive()
            if not alive:
                continue
            victim = self.rng.choice(alive)
            self.fleet.kill9(victim)
            self.faults += 1
            if self.stop.wait(self.fleet.lease_s * (0.2 + 2.3 * self.rng.random())):
                self.fleet.start(victim)
                return
            self.fleet.start(victim)


def read_logs(paths):
    """{request id: [(time, what, holder)]}, in time order. A line cut by a
    SIGKILL is skipped."""
    calls = defaultdict(list)
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 4 or not line.endswith("\n"):
                    continue
                calls[int(parts[2])].append((float(parts[0]), parts[1], parts[3]))
    for rid in calls:
        calls[rid].sort()
    return calls


def check(dsn, calls, lease_s, claim_deadline_s, slack_s=SLACK_S):
    """The two invariants above; returns ({name: [problems]}, counts)."""
    conn = psycopg2.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SELECT extract(epoch FROM at)::float8, action, subject FROM ledger"
                    " WHERE subject LIKE 'request/%' ORDER BY seq")
        ledger = cur.fetchall()
        cur.execute("SELECT id, members::bigint * gpu_milli_per_member, reason_code FROM requests")
        requests = {rid: (milli, reason) for rid, milli, reason in cur.fetchall()}
    finally:
        conn.close()
    admitted_at, ended_at = {}, {}
    for at, action, subject in ledger:
        rid = int(subject.split("/", 1)[1])
        state = action.split(".", 1)[1]
        if state == "admitted" and rid not in admitted_at:
            admitted_at[rid] = at
        elif rid in admitted_at and state not in ("admitted", "preempting") \
                and rid not in ended_at:
            ended_at[rid] = at
    one_holder, beyond = [], []
    excess_milli_s = 0.0
    for rid, lines in calls.items():
        holders = {h for _, what, h in lines if what in ("claim", "renew")}
        if len(holders) > 1:
            one_holder.append(f"request {rid} held by {sorted(holders)}")
    for rid, start in admitted_at.items():
        end = ended_at.get(rid)
        if end is None:
            beyond.append(f"request {rid} still holds capacity after every enforcer stopped")
            continue
        kept = [t for t, what, _ in calls.get(rid, []) if what in ("claim", "renew")]
        bound = (max(kept) + lease_s) if kept else (start + claim_deadline_s)
        if end > bound + slack_s:
            milli = requests.get(rid, (0, ""))[0]
            excess_milli_s += (end - bound) * milli
            beyond.append(f"request {rid} ({requests.get(rid, (0, ''))[1] or 'released'}) "
                          f"ended {end - bound:.2f} s after its lease ({'renewed' if kept else 'unclaimed'})")
    counts = defaultdict(int)
    for lines in calls.values():
        for _, what, _ in lines:
            counts[what] += 1
    for milli, reason in requests.values():
        if reason in ("LEASE_EXPIRED", "UNCLAIMED"):
            counts[reason.lower()] += 1
    counts["gpu_seconds_beyond_lease"] = round(excess_milli_s / 1000, 2)
    return {"one workload per allocation": one_holder,
            "no capacity held by no one beyond a lease": beyond}, dict(counts)


def ended_by_enforcement(dsn, calls):
    """Requests that ended without their client's release: by a lease or a
    claim deadline, or confirmed (released) by an enforcer."""
    conn = psycopg2.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SELECT id FROM requests WHERE reason_code IN ('LEASE_EXPIRED', 'UNCLAIMED')")
        out = {rid for (rid,) in cur.fetchall()}
    finally:
        conn.close()
    out |= {rid for rid, lines in calls.items() if any(w == "confirm" for _, w, _ in lines)}
    return out


def plant(calls, lease_s):
    """Violations for the checker's self-test: a second holder's claim on
    one allocation, and another's log replaced by one claim made long before
    its first (so that it ended long after its last renewal). Returns the
    invariants now violated."""
    claimed = [rid for rid, lines in sorted(calls.items())
               if any(what in ("claim", "renew") for _, what, _ in lines)]
    first, second = claimed[0], claimed[1]
    at, _, holder = next(ln for ln in calls[first] if ln[1] in ("claim", "renew"))
    calls[first] = calls[first] + [(at, "claim", "planted/other")]
    at, _, holder = next(ln for ln in calls[second] if ln[1] in ("claim", "renew"))
    calls[second] = [(at - lease_s - 10 * SLACK_S, "claim", holder)]
    return ["one workload per allocation", "no capacity held by no one beyond a lease"]
