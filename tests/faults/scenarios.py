"""Fault scenarios (docs/operations.md, "Fault tests"). Each starts its own
PostgreSQL and K arbiterd replicas, runs N clients x M operations while a
nemesis injects faults, heals everything, resolves operations left unknown,
checks the invariants (checker.py) and prints one line:

  <scenario>: N clients x M requests over K replicas, F faults (<kind>),
  <invariants held>/<checked> invariants, lost L, duplicated D,
  overcommitted O: PASS|FAIL

plus the measured time from each fault to the first decision of a leader.

  scenarios.py --arbiterd B --arbctl B --source DIR [--quick] [NAME...]
"""
import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import grpc


def probe_leader(endpoints, timeout_s=60.0, tick=None):
    """Seconds until some replica decides a command: ReleaseAllocation of an
    id that does not exist is NOT_FOUND from a leader (and writes nothing),
    refused by followers and while the state reloads. `tick`, if given, is
    called with the seconds so far before each round."""
    from arbiter.v1 import allocation_pb2 as al
    from arbiter.v1 import allocation_pb2_grpc as alg
    import workload
    start = time.monotonic()
    stubs = [alg.AllocationServiceStub(workload.channel(e)) for e in endpoints]
    while time.monotonic() - start < timeout_s:
        if tick is not None:
            tick(time.monotonic() - start)
        for stub in stubs:
            try:
                stub.ReleaseAllocation(al.ReleaseAllocationRequest(id=2**62), timeout=1)
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return time.monotonic() - start
        time.sleep(0.05)
    return None


class Nemesis(threading.Thread):
    """Injects one kind of fault every `interval` seconds until stopped."""

    def __init__(self, kind, replicas, pg, interval, ttl_s, rng, namespaces=None):
        super().__init__(daemon=True)
        self.kind, self.replicas, self.pg = kind, replicas, pg
        self.namespaces = namespaces
        self.interval, self.ttl_s, self.rng = interval, ttl_s, rng
        self.stop = threading.Event()
        self.faults = 0
        self.recovery = []  # Seconds to a deciding leader, per fault that needed one.
        self.promotion = []  # patroni: seconds until PostgreSQL's standby was promoted.

    def run(self):
        while not self.stop.wait(self.interval * (0.7 + 0.6 * self.rng.random())):
            getattr(self, "fault_" + self.kind.replace("-", "_"))()
            self.faults += 1

    def fault_kill(self):
        alive = [r for r in self.replicas.members if r.alive()]
        leader = self.replicas.leader()
        victim = leader if leader in alive and self.rng.random() < 0.6 else self.rng.choice(alive)
        victim.kill9()
        if victim is leader:
            took = probe_leader([r.endpoint for r in alive if r is not victim])
            self.recovery.append(took)
        time.sleep(0.5)
        victim.start()

    def fault_pg_restart(self):
        self.pg.restart_immediate()
        self.recovery.append(probe_leader(self.replicas.endpoints()))

    def fault_partition(self):
        """Cuts a replica (the leader 70% of the time) off from PostgreSQL
        and its clients for two ttls and two seconds, then heals it."""
        leader = self.replicas.leader()
        members = self.replicas.members
        victim = leader if leader is not None and self.rng.random() < 0.7 else \
            self.rng.choice(members)
        i = members.index(victim)
        self.namespaces.cut(i)
        cut_for = 2 * self.ttl_s + 2
        started = time.monotonic()
        if victim is leader:
            self.recovery.append(probe_leader([r.endpoint for r in members if r is not victim]))
        time.sleep(max(0.0, cut_for - (time.monotonic() - started)))
        self.namespaces.heal(i)

    def fault_patroni(self):
        """Loses the PostgreSQL primary (Patroni and PostgreSQL killed
        with SIGKILL) while the synchronous standby is streaming; Patroni
        promotes the standby once the leader key expires, and libpq's
        target_session_attrs=read-write finds it. The lost node then comes
        back and rejoins as the synchronous standby before the next fault."""
        self.pg.wait_healthy()
        lost = self.pg.lose_primary()
        promoted = []

        def watch_promotion(seconds):
            if not promoted and self.pg.primary() not in (None, lost):
                promoted.append(seconds)
        self.recovery.append(probe_leader(self.replicas.endpoints(), tick=watch_promotion))
        self.promotion.extend(promoted)
        lost.start()
        self.pg.wait_healthy()

    def fault_sigstop(self):
        leader = self.replicas.leader()
        if leader is None or not leader.alive():
            return
        leader.pause()
        others = [r.endpoint for r in self.replicas.members if r is not leader]
        self.recovery.append(probe_leader(others))
        # Stopped past its lease and past the takeover, then woken: it must
        # find itself deposed (its writes are fenced) and follow.
        time.sleep(self.ttl_s)
        leader.resume()


def cancel_queued(endpoint):
    """Cancels every queued request, so that nothing is admitted after the
    enforcers have stopped."""
    from arbiter.v1 import allocation_pb2 as al
    from arbiter.v1 import allocation_pb2_grpc as alg
    from arbiter.v1 import types_pb2 as t
    import workload
    stub = alg.AllocationServiceStub(workload.channel(endpoint))
    queued = stub.ListRequests(al.ListRequestsRequest(state=t.REQUEST_STATE_QUEUED,
                                                      page_size=1000), timeout=10)
    for r in queued.requests:
        try:
            stub.ReleaseAllocation(al.ReleaseAllocationRequest(id=r.id), timeout=5)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise


def run_scenario(name, args, clients, ops, k, interval, ttl):
    from cluster import PgCluster, Replicas
    from pg_ha import PatroniCluster
    import checker
    import enforcement
    import workload
    from network import Namespaces
    rng = random.Random(args.seed)
    ttl_s = float(ttl.rstrip("s"))
    partition = name == "partition"
    enforced = name == "enforcer-kill"
    # (claim deadline, lease) in seconds of the enforced pool.
    claim_deadline_s, lease_s = (3, 2) if args.quick else (6, 4)
    fleet = None
    certs = None
    with contextlib.ExitStack() as stack:
        if name == "patroni":
            pg = stack.enter_context(PatroniCluster(args.arbiterd))
        else:
            pg = stack.enter_context(PgCluster(args.source, args.arbiterd))
        namespaces = None
        if partition:
            namespaces = stack.enter_context(Namespaces(k))
            pg.listen_also([namespaces.host_ip(i) for i in range(k)], namespaces.network)
            certs = tempfile.mkdtemp(prefix="arbiter-faults-certs-")
            subprocess.run([os.path.join(args.source, "deploy/local/make-certs"), certs, "admin"],
                           check=True, stdout=subprocess.DEVNULL,
                           env=dict(os.environ, ARBITER_SERVER_SANS=",".join(
                               f"IP:{namespaces.replica_ip(i)}" for i in range(k))))
            workload.use_tls(certs)
        dsn = pg.create_database("faults")
        with Replicas(args.arbiterd, dsn, k, lease_ttl=ttl, namespaces=namespaces,
                      certs=certs) as replicas:
            if probe_leader(replicas.endpoints()) is None:
                raise RuntimeError("no leader was elected")
            workload.seed(replicas.leader().endpoint, certs,
                          enforcement=(claim_deadline_s, lease_s) if enforced else None)
            history = workload.History()
            stop = threading.Event()
            started = time.monotonic()
            workers = workload.run_clients(replicas.endpoints(), clients, ops, history,
                                           args.seed, stop,
                                           preemption=name in ("preemption", "enforcer-kill"))
            if enforced:
                fleet = enforcement.Fleet(2, replicas.leader().endpoint, workload.POOL, lease_s,
                                          replicas.work)
                stack.enter_context(fleet)
                nemesis = enforcement.Nemesis(fleet, interval, rng)
            else:
                nemesis = Nemesis(name if name != "preemption" else "kill", replicas, pg,
                                  interval, ttl_s, rng, namespaces)
            nemesis.start()
            for w in workers:
                w.join()
            nemesis.stop.set()
            nemesis.join()
            elapsed = time.monotonic() - started
            # Heal: every replica running, awake and reachable, then settle
            # the unknowns.
            for i in range(k if partition else 0):
                namespaces.heal(i)
            if name == "patroni":
                pg.wait_healthy()
            for r in replicas.members:
                if r.stopped:
                    r.resume()
                if not r.alive():
                    r.start()
            probe_leader(replicas.endpoints())
            stuck = workload.resolve_unknowns(replicas.endpoints(), history)
            # The lease may change hands between the probe and this read on
            # a loaded machine: wait for one to be held.
            leader = replicas.leader()
            deadline = time.monotonic() + 60
            while leader is None and time.monotonic() < deadline:
                probe_leader(replicas.endpoints())
                leader = replicas.leader()
            if leader is None:
                raise RuntimeError("no replica holds the lease 60 s after healing")
            calls, ended = {}, set()
            if enforced:
                # Every enforcer stops; once nothing queued can be admitted
                # and a claim deadline and a lease have passed, no
                # allocation may hold capacity.
                fleet.__exit__(None, None, None)
                cancel_queued(leader.endpoint)
                time.sleep(claim_deadline_s + lease_s + 2 * enforcement.SLACK_S)
                calls = enforcement.read_logs([fleet.log(n) for n in fleet.names])
                ended = enforcement.ended_by_enforcement(dsn, calls)
            check = checker.Checker(dsn, history, args.arbctl, leader.endpoint, certs,
                                    ended_by_enforcement=ended)
            results = check.all()
            decisions = check.decisions()
            check.close()
            if enforced:
                enforced_results, counts = enforcement.check(dsn, calls, lease_s,
                                                             claim_deadline_s)
                results.update(enforced_results)
                print("  enforcers: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
                if args.self_test:
                    planted = enforcement.plant(calls, lease_s)
                    found = enforcement.check(dsn, calls, lease_s, claim_deadline_s)[0]
                    missed = [n for n in planted if not found[n]]
                    print(f"  checker self-test: {len(planted) - len(missed)}/{len(planted)} "
                          f"planted violations found" + (f"; MISSED {missed}" if missed else ""))
                    if missed:
                        raise SystemExit("the checker missed planted violations")
            elif args.self_test:
                self_test(dsn, history, args, leader.endpoint, certs)
    workload.CREDENTIALS = None
    results["no operation stuck after the faults"] = [
        f"{op['key']}: still unknown ({op.get('last_error')})" for op in stuck]
    return report(name, clients, ops, k, nemesis, history, results, elapsed, decisions)


def self_test(dsn, history, args, endpoint, certs):
    """The checker must find violations planted in the final database."""
    import checker
    expected = checker.plant_violations(dsn, history)
    check = checker.Checker(dsn, history, args.arbctl, endpoint, certs)
    found = [name for name, problems in check.all().items() if problems]
    check.close()
    missed = [name for name in expected if name not in found]
    print(f"  checker self-test: {len(expected) - len(missed)}/{len(expected)} planted "
          f"violations found" + (f"; MISSED {missed}" if missed else ""))
    if missed:
        raise SystemExit("the checker missed planted violations")


def report(name, clients, ops, k, nemesis, history, results, elapsed, decisions):
    held = sum(1 for v in results.values() if not v)
    lost = sum(1 for p in results["acknowledged grants present"] if "lost" in p)
    dup = len(results["one request per idempotency key"])
    over = len(results["capacity and quotas at every ledger prefix"])
    ok = held == len(results)
    counts = history.counts()
    print(f"{name}: {clients} clients x {ops} requests over {k} replicas, "
          f"{nemesis.faults} faults ({nemesis.kind}), {held}/{len(results)} invariants, "
          f"lost {lost}, duplicated {dup}, overcommitted {over}: {'PASS' if ok else 'FAIL'}")
    print(f"  {len(history.ops)} operations in {elapsed:.0f} s: {counts['ok']} ok, "
          f"{counts['fail']} fail, {counts['unknown']} unknown before healing; "
          f"{sum(op['unknown_attempts'] for op in history.ops)} attempts retried")
    by_state, mid_preemption = decisions
    print("  decisions in the ledger: " +
          ", ".join(f"{state} {n}" for state, n in sorted(by_state.items())) +
          f"; {mid_preemption} released or cancelled while preempting")
    times = [t for t in nemesis.recovery if t is not None]
    if nemesis.recovery:
        print(f"  time to a deciding leader after {nemesis.kind}: "
              f"median {statistics.median(times):.2f} s, max {max(times):.2f} s "
              f"over {len(times)} faults" if times else "  no leader recovered")
        if nemesis.promotion:
            print(f"  of which PostgreSQL's failover (Patroni promoting the standby): median "
                  f"{statistics.median(nemesis.promotion):.2f} s, max "
                  f"{max(nemesis.promotion):.2f} s")
        if len(times) != len(nemesis.recovery):
            ok = False
            print("  a fault was never recovered from within 60 s")
    for invariant, problems in results.items():
        if problems:
            print(f"  VIOLATED {invariant}: {len(problems)}")
            for p in problems[:10]:
                print(f"    {p}")
    sys.stdout.flush()
    return ok, {"scenario": name, "ok": ok, "faults": nemesis.faults,
                "recovery_s": times, "promotion_s": nemesis.promotion, "operations": counts}


SCENARIOS = {
    # name: (clients, ops, replicas, seconds between faults) at full size.
    "kill": (32, 1000, 3, 15.0),
    "pg-restart": (32, 1000, 3, 15.0),
    "sigstop": (32, 1000, 3, 15.0),
    "preemption": (32, 1000, 3, 15.0),
    "partition": (32, 1000, 3, 15.0),
    "patroni": (32, 1000, 3, 15.0),
    # Enforcers (two, racing for claims) killed with SIGKILL while the
    # replica and PostgreSQL stay up.
    "enforcer-kill": (32, 1000, 1, 6.0),
}
# Quick runs that need more operations than a quarter: a Patroni failover
# and the lost node's rejoin take about 20 s (ttl 10 s), and the quick run
# should see two of them.
QUICK_OPS = {"patroni": 600}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arbiterd", required=True)
    parser.add_argument("--arbctl", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--quick", action="store_true",
                        help="a quarter of the clients and operations, faults 4x as often")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--self-test", action="store_true",
                        help="after each scenario, plant violations and require the checker "
                             "to find them")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    names = args.names or list(SCENARIOS)
    failed = []
    out = []
    for name in names:
        clients, ops, k, interval = SCENARIOS[name]
        ttl = "5s"
        if args.quick:
            clients, ops, interval, ttl = clients // 4, ops // 4, interval / 4, "2s"
            ops = QUICK_OPS.get(name, ops)
        ok, result = run_scenario(name, args, clients, ops, k, interval, ttl)
        out.append(result)
        if not ok:
            failed.append(name)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    if failed:
        print(f"FAILED: {' '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
