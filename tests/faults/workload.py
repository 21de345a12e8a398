"""The client side of a fault scenario: N clients, each running M operations
against whichever replica it last found to work, recording a Jepsen-style
history. Every operation is logged as invoke, then ok, fail or unknown, with
its idempotency key; an unknown operation is retried with the same key (as a
real client would) until it is definite or the client gives up on it.

The organisation is small on purpose, so that capacity runs out and the
arbiter must refuse and queue: 4 nodes x 8 H100-80GB in one pool, three teams
with nominal quotas and borrowing limits, and shapes mixing whole GPUs, MIG
slices and fractions."""
import random
import threading
import time

import grpc

from arbiter.v1 import allocation_pb2 as al
from arbiter.v1 import allocation_pb2_grpc as alg
from arbiter.v1 import types_pb2 as t
from arbiter_client import Client, leader_named_in

TEAMS = ("search", "ads", "research")
POOL = "shared"
NODES = 4
GPUS_PER_NODE = 8
THINK_S = 0.1  # Mean pause between a client's operations.

# TLS for the partition scenario: (ca, key, cert) PEM bytes of the admin;
# None: plaintext on loopback.
CREDENTIALS = None


def channel(endpoint):
    if CREDENTIALS is None:
        return grpc.insecure_channel(endpoint)
    return grpc.secure_channel(endpoint, grpc.ssl_channel_credentials(*CREDENTIALS))


def use_tls(certs):
    global CREDENTIALS

    def read(name):
        with open(f"{certs}/{name}", "rb") as f:
            return f.read()
    CREDENTIALS = (read("ca.pem"), read("admin.key"), read("admin.pem"))


# Codes that settle an operation: the server decided, and said so.
DEFINITE = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.NOT_FOUND, grpc.StatusCode.ALREADY_EXISTS,
            grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.OUT_OF_RANGE}


def seed(endpoint, certs=None, enforcement=None):
    """Creates the organisation through the API (on the leader).
    `enforcement`: (claim deadline, lease) in seconds for the pool
    (docs/enforcement.md); None: not enforced."""
    tls = {}
    if certs:
        tls = dict(ca=f"{certs}/ca.pem", cert=f"{certs}/admin.pem", key=f"{certs}/admin.key")
    with Client(endpoint, retries=20, backoff=0.25, **tls) as arb:
        call = arb.call
        call("CreateCluster", cluster={"name": "faults"})
        pool = {"name": POOL, "latency_class": "LATENCY_CLASS_BATCH"}
        if enforcement is not None:
            pool.update(claim_deadline_seconds=enforcement[0], lease_seconds=enforcement[1])
        call("CreatePool", pool=pool)
        for n in range(NODES):
            call("RegisterNode", node={
                "cluster": "faults", "name": f"node-{n}", "pool": POOL, "cpu_milli": 256000,
                "memory_mib": 2048000, "topology_domain": f"rack-{n // 2}",
                "gpus": [{"index": i, "model": "H100-80GB"} for i in range(GPUS_PER_NODE)]})
        call("CreateTeam", team={"name": "org"})
        for team in TEAMS:
            call("CreateTeam", team={"name": team, "parent": "org"})
            call("SetQuota", quota={"team": team, "pool": POOL, "nominal_milli": 8000,
                                    "borrowing_limit_milli": 4000})


class History:
    """Thread-safe list of operation records (dicts)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ops = []

    def add(self, record):
        with self.lock:
            self.ops.append(record)

    def counts(self):
        out = {"ok": 0, "fail": 0, "unknown": 0}
        for op in self.ops:
            out[op["outcome"]] += 1
        return out


class Endpoints:
    """Where clients send calls: the leader a follower named, else any."""

    def __init__(self, endpoints):
        self.all = list(endpoints)
        self.lock = threading.Lock()
        self.preferred = self.all[0]

    def current(self):
        with self.lock:
            return self.preferred

    def follow(self, leader):
        with self.lock:
            self.preferred = leader

    def skip(self, bad, rng):
        with self.lock:
            if self.preferred == bad:
                self.preferred = rng.choice([e for e in self.all if e != bad] or self.all)


class Worker(threading.Thread):
    def __init__(self, cid, ops, endpoints, history, seed_value, stop, give_up_s=90.0,
                 preemption=False):
        super().__init__(daemon=True)
        self.cid, self.ops, self.endpoints, self.history = cid, ops, endpoints, history
        self.rng = random.Random(seed_value)
        self.stop, self.give_up_s, self.preemption = stop, give_up_s, preemption
        self.channels = {}
        # Request ids this client was told are admitted or queued: releasing
        # one frees capacity or cancels it.
        self.held = []

    def stub(self, endpoint):
        if endpoint not in self.channels:
            self.channels[endpoint] = alg.AllocationServiceStub(channel(endpoint))
        return self.channels[endpoint]

    def request_message(self, i):
        team = self.rng.choice(TEAMS)
        shape = t.MemberShape()
        kind = self.rng.random()
        members = 1
        if kind < 0.45:
            shape.whole_gpus = self.rng.choice((1, 1, 2, 4))
            members = self.rng.choice((1, 1, 2))
        elif kind < 0.75:
            shape.mig_profile = self.rng.choice(("1g.10gb", "2g.20gb", "3g.40gb"))
        else:
            shape.fraction.gpu_milli = self.rng.choice((250, 500))
            shape.fraction.memory_mib = self.rng.choice((10240, 20480))
        extra = {}
        if self.preemption:
            high = self.rng.random() < 0.3
            extra = {"priority": 100 if high else 0, "preemptible": not high,
                     "checkpoint_seconds": 1}
        return al.RequestCapacityRequest(
            idempotency_key=f"c{self.cid}-{i}", team=team, pool=POOL,
            workload_class=t.WORKLOAD_CLASS_TRAINING, members=members, shape=shape, **extra)

    def invoke(self, kind, key, send):
        """Runs `send(stub)` until definite; records and returns the record."""
        record = {"client": self.cid, "op": kind, "key": key, "invoke": time.monotonic(),
                  "attempts": 0, "unknown_attempts": 0}
        deadline = time.monotonic() + self.give_up_s
        while True:
            endpoint = self.endpoints.current()
            record["attempts"] += 1
            try:
                resp = send(self.stub(endpoint))
                record.update(outcome="ok", response=resp)
                break
            except grpc.RpcError as e:
                leader = leader_named_in(e)
                if leader is not None:
                    self.endpoints.follow(leader)  # Not submitted: resend there.
                    continue
                if e.code() in DEFINITE:
                    record.update(outcome="fail", code=e.code().name, details=e.details())
                    break
                # UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED...: the
                # outcome is unknown; retry with the same key elsewhere.
                record["unknown_attempts"] += 1
                record["last_error"] = f"{e.code().name}: {e.details()}"
                if time.monotonic() > deadline:
                    record["outcome"] = "unknown"
                    break
                self.endpoints.skip(endpoint, self.rng)
                time.sleep(0.1 + self.rng.random() * 0.2)
        record["complete"] = time.monotonic()
        self.history.add(record)
        return record

    def run(self):
        for i in range(self.ops):
            if self.stop.is_set():
                break
            # Release or cancel now and then, and always past 6 outstanding:
            # the queue stays bounded however long the run.
            if self.held and (len(self.held) > 6 or self.rng.random() < 0.45):
                rid = self.held.pop(self.rng.randrange(len(self.held)))
                msg = al.ReleaseAllocationRequest(id=rid)
                rec = self.invoke("release", f"release-{rid}",
                                  lambda s, m=msg: s.ReleaseAllocation(m, timeout=5))
                rec["request_id"] = rid
                if rec["outcome"] == "ok":
                    rec["state"] = t.RequestState.Name(rec.pop("response").request.state)
                continue
            msg = self.request_message(i)
            rec = self.invoke("request", msg.idempotency_key,
                              lambda s, m=msg: s.RequestCapacity(m, timeout=5))
            rec["message"] = msg
            if rec["outcome"] == "ok":
                resp = rec.pop("response")
                rec["request_id"] = resp.request.id
                rec["state"] = t.RequestState.Name(resp.request.state)
                rec["replayed"] = resp.replayed
                rec["placements"] = sorted(
                    (p.node, tuple(p.gpu_indices), p.mig_profile)
                    for p in resp.request.placements)
                if rec["state"] in ("REQUEST_STATE_ADMITTED", "REQUEST_STATE_QUEUED"):
                    self.held.append(resp.request.id)
            else:
                rec.pop("response", None)
            # Think time: the run lasts long enough for its faults.
            time.sleep(self.rng.random() * 2 * THINK_S)


def run_clients(endpoints, n, m, history, seed_value, stop, preemption=False):
    eps = Endpoints(endpoints)
    workers = [Worker(c, m, eps, history, seed_value * 1000 + c, stop, preemption=preemption)
               for c in range(n)]
    for w in workers:
        w.start()
    return workers


def resolve_unknowns(endpoints, history, give_up_s=60.0):
    """After the faults: each unknown request is resent with its key until it
    is definite. Returns those still unknown (stuck)."""
    eps = Endpoints(endpoints)
    stuck = []
    for op in [o for o in history.ops if o["outcome"] == "unknown" and o["op"] == "request"]:
        w = Worker(-1, 0, eps, History(), 0, threading.Event(), give_up_s=give_up_s)
        # The same key and the same body as the first attempt.
        rec = w.invoke("request", op["key"],
                       lambda s, m=op["message"]: s.RequestCapacity(m, timeout=5))
        op["resolved"] = rec["outcome"]
        if rec["outcome"] == "ok":
            resp = rec["response"]
            op["resolved_id"] = resp.request.id
        else:
            stuck.append(op)
    return stuck
