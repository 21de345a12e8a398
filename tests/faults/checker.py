"""Invariants checked after a fault scenario, on the final database, on the
ledger and against the client history (workload.History). Each check
returns a list of violations (strings); the scenario passes when all are
empty.

The ledger is replayed entry by entry: capacity and quotas are checked at
every prefix, not only at the end, so that a grant made twice and released
later is still caught."""
import os
import re
import subprocess
from collections import defaultdict

import psycopg2

HOLDING = {"admitted", "preempting"}
# Memory slices a MIG instance spans on an H100-80GB (reference/mig-profiles.md).
MIG_SPAN = {"1g.10gb": 1, "1g.20gb": 2, "2g.20gb": 2, "3g.40gb": 4, "4g.40gb": 4,
            "7g.80gb": 8}


def _rows(cur, sql, *params):
    cur.execute(sql, params)
    return cur.fetchall()


class Checker:
    def __init__(self, dsn, history, arbctl, endpoint, certs=None, ended_by_enforcement=()):
        """`ended_by_enforcement`: request ids that ended without their
        client's release, by a lease, a claim deadline or an enforcer's
        confirmation of a preemption (enforcement.py)."""
        self.conn = psycopg2.connect(dsn)
        self.ended_by_enforcement = set(ended_by_enforcement)
        self.tls = []
        if certs:
            self.tls = ["--tls-ca", f"{certs}/ca.pem", "--tls-cert", f"{certs}/admin.pem",
                        "--tls-key", f"{certs}/admin.key"]
        self.history, self.arbctl, self.endpoint = history, arbctl, endpoint
        cur = self.conn.cursor()
        self.gpu_memory = {(n, g): m for n, g, m in _rows(
            cur, "SELECT g.node_id, g.gpu_index, m.memory_mib FROM gpus g"
                 " JOIN gpu_models m ON m.name = g.model")}
        self.requests = {r[0]: r for r in _rows(
            cur, "SELECT id, idempotency_key, team, pool, quota_model, state,"
                 " members::bigint * gpu_milli_per_member FROM requests")}
        self.placements = defaultdict(list)
        for rid, node, gpus, milli, mem, exclusive, mig, start in _rows(
                cur, "SELECT request_id, node_id, gpu_indices, gpu_milli, gpu_memory_mib,"
                     " exclusive, mig_profile, mig_start FROM placements"):
            self.placements[rid].append((node, gpus, milli, mem, exclusive, mig, start))
        self.quotas = {(team, pool, model): (nominal, borrow) for team, pool, model, nominal,
                       borrow in _rows(cur, "SELECT team, pool, gpu_model, nominal_milli,"
                                            " borrowing_limit_milli FROM quotas")}
        self.ledger = _rows(cur, "SELECT seq, action, subject, prev_hash, hash FROM ledger"
                                 " ORDER BY seq")

    def close(self):
        self.conn.close()

    def decisions(self):
        """Ledger entries per request state, e.g. {"admitted": 812, ...}, and
        how many requests were released or cancelled while preempting."""
        counts = defaultdict(int)
        last = {}
        mid_preemption = 0
        for _, action, subject, _, _ in self.ledger:
            if subject.startswith("request/"):
                state = action.split(".", 1)[1]
                counts[state] += 1
                if last.get(subject) == "preempting" and state in ("released", "cancelled"):
                    mid_preemption += 1
                last[subject] = state
        return dict(counts), mid_preemption

    # --- Capacity and quotas at every ledger prefix.
    def capacity_and_quotas(self):
        problems = []
        live = set()
        per_gpu = defaultdict(set)  # (node, gpu) -> live request ids on it.
        used = defaultdict(int)     # (team, pool, quota model) -> milli.
        for seq, action, subject, _, _ in self.ledger:
            if not subject.startswith("request/"):
                continue
            rid = int(subject.split("/", 1)[1])
            state = action.split(".", 1)[1]
            req = self.requests.get(rid)
            if req is None:
                problems.append(f"seq {seq}: ledger names request {rid}, which is not stored")
                continue
            key = (req[2], req[3], req[4])
            if state in HOLDING and rid not in live:
                live.add(rid)
                used[key] += req[6]
                for node, gpus, *_ in self.placements[rid]:
                    for g in gpus:
                        per_gpu[(node, g)].add(rid)
                for node, gpus, *_ in self.placements[rid]:
                    for g in gpus:
                        problems += [f"seq {seq}: {p}" for p in self._gpu(node, g, per_gpu)]
                problems += [f"seq {seq}: {p}" for p in self._quota(key, used[key])]
            elif state not in HOLDING and rid in live:
                live.discard(rid)
                used[key] -= req[6]
                for node, gpus, *_ in self.placements[rid]:
                    for g in gpus:
                        per_gpu[(node, g)].discard(rid)
        # The final state agrees with the replay.
        stored_live = {rid for rid, r in self.requests.items() if r[5] in HOLDING}
        if stored_live != live:
            problems.append(f"live requests stored {len(stored_live)} != replayed {len(live)}")
        return problems

    def _gpu(self, node, gpu, per_gpu):
        holders = []
        for rid in per_gpu[(node, gpu)]:
            for p_node, gpus, milli, mem, exclusive, mig, start in self.placements[rid]:
                if p_node == node and gpu in gpus:
                    holders.append((rid, milli, mem, exclusive, mig, start))
        out = []
        whole = [h for h in holders if h[3] and not h[4]]
        if whole and len(holders) > 1:
            out.append(f"GPU {node}/{gpu} held whole by {whole[0][0]} and shared with "
                       f"{sorted(h[0] for h in holders if h is not whole[0])}")
        share = [h for h in holders if not h[3] and not h[4]]
        if sum(h[1] for h in share) > 1000:
            out.append(f"GPU {node}/{gpu} shares {sum(h[1] for h in share)} milli > 1000")
        if sum(h[2] for h in holders) > self.gpu_memory[(node, gpu)]:
            out.append(f"GPU {node}/{gpu} holds {sum(h[2] for h in holders)} MiB > "
                       f"{self.gpu_memory[(node, gpu)]}")
        migs = [h for h in holders if h[4]]
        if migs and share:
            out.append(f"GPU {node}/{gpu} mixes MIG instances and shares")
        slices = set()
        for rid, _, _, _, mig, start in migs:
            span = set(range(start, start + MIG_SPAN.get(mig, 8)))
            if slices & span:
                out.append(f"GPU {node}/{gpu}: MIG {mig}@{start} of request {rid} overlaps")
            slices |= span
        return out

    def _quota(self, key, used):
        team, pool, model = key
        nominal, borrow = self.quotas.get(key, (None, None))
        if nominal is None or borrow is None or borrow < 0:
            return []
        if used > nominal + borrow:
            return [f"team {team} holds {used} milli of {pool}/{model or '*'} > nominal "
                    f"{nominal} + borrowing limit {borrow}"]
        return []

    # --- Against the history.
    def acknowledged_grants(self):
        """Every request acknowledged admitted is stored, under its key, and
        was admitted in the ledger; nothing the client did not release is
        released."""
        problems = []
        admitted = {int(s.split("/")[1]) for _, a, s, _, _ in self.ledger
                    if a == "request.admitted"}
        released_by_client = {op["request_id"] for op in self.history.ops
                              if op["op"] == "release"}
        for op in self.history.ops:
            if op["op"] != "request" or op["outcome"] != "ok":
                continue
            rid = op["request_id"]
            stored = self.requests.get(rid)
            if stored is None:
                problems.append(f"{op['key']}: acknowledged request {rid} is lost")
                continue
            if stored[1] != op["key"]:
                problems.append(f"{op['key']}: request {rid} is stored under {stored[1]}")
            if op["state"] == "REQUEST_STATE_ADMITTED":
                if rid not in admitted:
                    problems.append(f"{op['key']}: admitted {rid} has no ledger entry")
                if stored[5] == "released" and rid not in released_by_client and \
                        rid not in self.ended_by_enforcement:
                    problems.append(f"{op['key']}: {rid} released, not by its client")
        return problems

    def idempotency(self):
        """At most one request per key, and every answer for one key named
        the same request with the same placements."""
        problems = []
        keys = defaultdict(set)
        for rid, r in self.requests.items():
            keys[r[1]].add(rid)
        problems += [f"key {k}: {len(ids)} requests" for k, ids in keys.items() if len(ids) > 1]
        answers = defaultdict(set)
        for op in self.history.ops:
            if op["op"] == "request" and op["outcome"] == "ok":
                answers[op["key"]].add(op["request_id"])
            if op.get("resolved_id"):
                answers[op["key"]].add(op["resolved_id"])
        problems += [f"key {k}: answered with requests {sorted(ids)}"
                     for k, ids in answers.items() if len(ids) > 1]
        return problems

    def ledger_chain(self):
        """Sequence numbers without a gap, each entry chained to the one
        before; then the product's own verifier (arbctl ledger verify)."""
        problems = []
        prev_hash = None
        for i, (seq, _, _, prev, hash_) in enumerate(self.ledger):
            if seq != i + 1:
                problems.append(f"ledger: seq {seq} at position {i + 1}")
                break
            if prev_hash is not None and prev != prev_hash:
                problems.append(f"ledger: seq {seq} does not chain to {seq - 1}")
                break
            prev_hash = hash_
        # Only the flags given here: not the .arbiter/arbctl.conf of a
        # checkout where deploy/local/up ran (its TLS settings).
        out = subprocess.run([self.arbctl, "--endpoint", self.endpoint] + self.tls +
                             ["ledger", "verify"],
                             capture_output=True, text=True,
                             env=dict(os.environ, ARBITER_CONFIG=os.devnull))
        if out.returncode != 0 or not re.match(r"OK: \d+ entries", out.stdout):
            problems.append(f"arbctl ledger verify: {out.stdout.strip()} {out.stderr.strip()}")
        return problems

    def orphans(self):
        cur = self.conn.cursor()
        n = _rows(cur, "SELECT count(*) FROM placements p LEFT JOIN requests r"
                       " ON r.id = p.request_id WHERE r.id IS NULL")[0][0]
        m = _rows(cur, "SELECT count(*) FROM requests r LEFT JOIN teams t ON t.name = r.team"
                       " WHERE t.name IS NULL")[0][0]
        return ([f"{n} placements of unknown requests"] if n else []) + \
               ([f"{m} requests of unknown teams"] if m else [])

    def all(self):
        return {
            "capacity and quotas at every ledger prefix": self.capacity_and_quotas(),
            "acknowledged grants present": self.acknowledged_grants(),
            "one request per idempotency key": self.idempotency(),
            "ledger chain continuous": self.ledger_chain(),
            "no orphaned rows": self.orphans(),
        }


def plant_violations(dsn, history):
    """Breaks the final database on purpose, so that the checker is seen to
    fail: a second request placed on a GPU held whole (with its ledger entry
    out of sequence) and an acknowledged request deleted. Returns the
    invariants that must now be violated."""
    conn = psycopg2.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SELECT p.request_id FROM placements p JOIN requests r ON r.id = p.request_id"
                    " WHERE r.state = 'admitted' AND p.exclusive AND p.mig_profile = ''"
                    " ORDER BY p.request_id LIMIT 1")
        (held,) = cur.fetchone()
        planted = held + 10_000_000
        cur.execute("CREATE TEMP TABLE r AS SELECT * FROM requests WHERE id = %s", (held,))
        cur.execute("UPDATE r SET id = %s, idempotency_key = 'planted-' || idempotency_key",
                    (planted,))
        cur.execute("INSERT INTO requests SELECT * FROM r")
        cur.execute("CREATE TEMP TABLE p AS SELECT * FROM placements WHERE request_id = %s",
                    (held,))
        cur.execute("UPDATE p SET request_id = %s", (planted,))
        cur.execute("INSERT INTO placements SELECT * FROM p")
        cur.execute("INSERT INTO ledger (seq, at, actor, action, subject, payload, prev_hash, hash)"
                    " SELECT max(seq) + 2, now(), 'planted', 'request.admitted', %s, '',"
                    " repeat('0', 64), repeat('f', 64)"
                    " FROM ledger", (f"request/{planted}",))
        acknowledged = next(op["request_id"] for op in history.ops
                            if op["op"] == "request" and op["outcome"] == "ok"
                            and op["request_id"] != held)
        cur.execute("DELETE FROM placements WHERE request_id = %s", (acknowledged,))
        cur.execute("DELETE FROM requests WHERE id = %s", (acknowledged,))
        conn.commit()
    finally:
        conn.close()
    return ["capacity and quotas at every ledger prefix", "acknowledged grants present",
            "ledger chain continuous"]
