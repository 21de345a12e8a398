"""A minimal enforcer for the enforcer-kill fault scenario (docs/enforcement.md):
one process, killed with SIGKILL and restarted by the nemesis.

Every tick it lists the pool's ADMITTED and PREEMPTING allocations and
  - claims each admitted one nobody holds, as the workload "<name>/job-<id>"
    (the enforcers race for them: one claim wins, the others are refused);
  - adopts, after a restart, the allocations claimed under its own name, and
    renews their leases (a claim by the same holder is idempotent);
  - stops a PREEMPTING workload after a random part of its notice and
    confirms by releasing it.
It appends each call that succeeded to its log, one line each, flushed at
once so that a SIGKILL loses nothing acknowledged:
  <unix seconds> claim|renew|confirm <request id> <holder>

  enforcer.py --endpoint HOST:PORT --name NAME --pool POOL --lease S --log FILE
"""
import argparse
import random
import sys
import time

import grpc

from arbiter.v1 import allocation_pb2 as al
from arbiter.v1 import allocation_pb2_grpc as alg
from arbiter.v1 import types_pb2 as t


class Enforcer:
    def __init__(self, args):
        self.name, self.pool, self.lease = args.name, args.pool, args.lease
        self.stub = alg.AllocationServiceStub(grpc.insecure_channel(args.endpoint))
        self.log = open(args.log, "a", buffering=1)
        self.rng = random.Random()
        self.stop_at = {}  # Request id -> when its workload has stopped (preempting).

    def record(self, what, rid, holder):
        self.log.write(f"{time.time():.6f} {what} {rid} {holder}\n")
        self.log.flush()

    def holder(self, rid):
        return f"{self.name}/job-{rid}"

    def listed(self, state):
        out = []
        token = ""
        while True:
            resp = self.stub.ListRequests(
                al.ListRequestsRequest(state=state, page_size=1000, page_token=token), timeout=5)
            out += [r for r in resp.requests if r.pool == self.pool]
            token = resp.next_page_token
            if not token:
                return out

    def tick(self):
        now = time.time()
        for r in self.listed(t.REQUEST_STATE_ADMITTED):
            mine = self.holder(r.id)
            holders = {c.holder for c in r.claims}
            if holders and mine not in holders:
                continue  # Another enforcer's workload.
            self.call("claim" if not holders else "renew", r.id, mine)
        for r in self.listed(t.REQUEST_STATE_PREEMPTING):
            mine = self.holder(r.id)
            if mine not in {c.holder for c in r.claims}:
                continue
            deadline = r.preempt_deadline.seconds + r.preempt_deadline.nanos / 1e9
            stop = self.stop_at.setdefault(r.id, now + self.rng.random() * max(0.0, deadline - now))
            if now >= stop:
                self.call("confirm", r.id, mine)
            else:
                self.call("renew", r.id, mine)

    def call(self, what, rid, holder):
        try:
            if what == "claim":
                self.stub.ClaimAllocation(al.ClaimAllocationRequest(id=rid, holder=holder),
                                          timeout=5)
            elif what == "renew":
                self.stub.RenewLease(al.RenewLeaseRequest(id=rid, holder=holder), timeout=5)
            else:
                self.stub.ReleaseAllocation(al.ReleaseAllocationRequest(id=rid), timeout=5)
        except grpc.RpcError as e:
            # Lost a race, or the allocation ended (its client released it,
            # its lease ran out): nothing to enforce.
            if e.code() not in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.NOT_FOUND):
                raise
            return
        self.record(what, rid, holder)

    def run(self):
        while True:
            started = time.time()
            try:
                self.tick()
            except grpc.RpcError:
                pass  # The server is unreachable for now: try again next tick.
            time.sleep(max(0.0, self.lease / 4 - (time.time() - started)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--pool", required=True)
    parser.add_argument("--lease", type=float, required=True)
    parser.add_argument("--log", required=True)
    Enforcer(parser.parse_args()).run()


if __name__ == "__main__":
    sys.exit(main())
