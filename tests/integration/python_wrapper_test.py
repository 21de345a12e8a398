#!/usr/bin/python3
"""The Python client (clients/python/arbiter_client) against a live arbiterd
over TLS: the idiomatic methods (dataclasses, paging and watch iterators,
retries with the idempotency key, errors naming the field) and every other
RPC through Client.call. arbiterd's /metrics must then show every RPC of
proto/ handled, so an RPC the client cannot reach fails this test.

Usage: python_wrapper_test.py ARBITERD SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import datetime
import os
import sys
import threading

from live_arbiterd import LiveArbiterd

SPIFFE = "spiffe://arbiter.local/"


def iso(delta_hours):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=delta_hours)
    return t.replace(minute=0, second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def main():
    arbiterd, src = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.join(src, "clients/python"))
    with LiveArbiterd(arbiterd, src, "pywrap", ["--metrics-listen", "127.0.0.1:0"],
                      tls=True) as live:
        from arbiter_client import ArbiterError, Client
        c = live.certs

        def client(principal):
            return Client(live.endpoint, ca=f"{c}/ca.pem", cert=f"{c}/{principal}.pem",
                          key=f"{c}/{principal}.key")

        with client("admin") as arb, client("carol") as carol:
            call = arb.call
            call("CreateCluster", cluster={"name": "east"})
            call("CreatePool", pool={"name": "serving", "latency_class": "LATENCY_CLASS_SERVING"})
            call("CreatePool", pool={"name": "batch", "latency_class": "LATENCY_CLASS_BATCH"})
            call("CreatePool", pool={"name": "front", "latency_class": "LATENCY_CLASS_SERVING",
                                     "proactive_reclaim": True, "cold_start_seconds": 120})
            call("RegisterNode", node={
                "cluster": "east", "name": "h100-0", "pool": "serving", "cpu_milli": 96000,
                "memory_mib": 1024000,
                "gpus": [{"index": i, "model": "H100-80GB", "uuid": f"GPU-py-{i}"}
                         for i in range(8)]})
            call("RegisterNode", node={
                "cluster": "east", "name": "a100-0", "pool": "batch", "cpu_milli": 96000,
                "memory_mib": 1024000, "gpus": [{"index": i, "model": "A100-80GB"}
                                                for i in range(8)]})
            call("CreateTeam", team={"name": "org"})
            call("CreateTeam", team={"name": "inference", "parent": "org"})
            call("CreateTeam", team={"name": "training", "parent": "org"})
            call("SetQuota", quota={"team": "inference", "pool": "serving", "nominal_milli": 8000})
            call("SetQuota", quota={"team": "training", "pool": "batch", "nominal_milli": 8000})
            call("SetCoexistenceRule", rule={"class_a": "WORKLOAD_CLASS_TRAINING",
                                             "class_b": "WORKLOAD_CLASS_INFERENCE",
                                             "gpu_isolation": "GPU_ISOLATION_FORBIDDEN"})
            binding = {"subject": SPIFFE + "carol", "role": "ROLE_POOL_AUTHORITY",
                       "scope_kind": "SCOPE_KIND_POOL", "scope": "batch"}
            call("GrantRole", binding={**binding, "subject": SPIFFE + "dave"})
            call("RevokeRole", binding={**binding, "subject": SPIFFE + "dave"})
            call("GrantRole", binding=binding)
            rule = {"pool": "batch", "action": "APPROVAL_ACTION_LARGE",
                    "approver": SPIFFE + "carol", "threshold_milli": 4000}
            call("SetAuthorityRule", rule=rule)
            call("SetAuthorityRule", rule={**rule, "approver": SPIFFE + "dave"})
            call("RemoveAuthorityRule", rule={**rule, "approver": SPIFFE + "dave"})
            call("SetPrice", price={"gpu_model": "H100-80GB",
                                    "latency_class": "LATENCY_CLASS_SERVING",
                                    "micros_per_gpu_hour": 4_000_000, "effective_from": iso(-1)})
            call("SetBudget", budget={"team": "training", "soft_limit_micros": 10**11,
                                      "hard_limit_micros": 10**12, "over": "OVER_BUDGET_DENY"})
            call("SetPowerBudget", power_budget={"scope": "POWER_SCOPE_POOL", "name": "batch",
                                                 "watts": 1_000_000})
            budgets = call("ListPowerBudgets").power_budgets
            assert [(b.name, b.watts) for b in budgets] == [("batch", 1_000_000)], budgets
            delegation = {"from": SPIFFE + "carol", "to": SPIFFE + "erin",
                          "expires_at": iso(2)}
            carol.call("Delegate", delegation=delegation)
            carol.call("RevokeDelegation", delegation=delegation)
            call("SetSlo", slo={"team": "inference", "service": "chat", "pool": "serving",
                                "p99_target_us": 200_000, "window_seconds": 300})
            call("SetIdlePolicy", policy={"workload_class": "WORKLOAD_CLASS_TRAINING",
                                          "threshold_milli": 50, "window_seconds": 3600,
                                          "action": "report"})

            # The idiomatic layer.
            events, ready = [], threading.Event()

            def watch():
                for e in arb.watch(team="inference"):
                    events.append(e)
                    if len(events) == 2:
                        return
            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            first = None
            for i in range(50):  # Until the watch has subscribed.
                a = arb.request_capacity("inference", "serving", workload_class="inference",
                                         gpus=1, key=f"py-watch-{i}")
                first = first or a
                watcher.join(timeout=0.2)
                if not watcher.is_alive():
                    break
            assert [e.type for e in events] == ["admitted", "admitted"], events
            assert events[0].allocation.team == "inference" and events[0].committed_at > 0

            alloc = arb.request_capacity("inference", "serving", workload_class="inference",
                                         gpus=2, key="py-two")
            assert alloc.admitted and alloc.placements[0].node == "h100-0", alloc
            assert len(alloc.placements[0].gpu_indices) == 2, alloc
            again = arb.request_capacity("inference", "serving", workload_class="inference",
                                         gpus=2, key="py-two")
            assert again.id == alloc.id, (again, alloc)  # A replay, not a second grant.
            share = arb.request_capacity("inference", "serving", workload_class="inference",
                                         milli=250, gpu_memory_mib=8192)
            mig = arb.request_capacity("inference", "serving", workload_class="inference",
                                       mig="3g.40gb")
            assert share.admitted and mig.placements[0].mig_profile == "3g.40gb", (share, mig)
            try:
                arb.request_capacity("inference", "serving", workload_class="inference",
                                     gpus=1, members=0)
                raise AssertionError("members=0 accepted")
            except ArbiterError as e:
                assert e.code.name == "INVALID_ARGUMENT" and e.details.startswith("members"), e

            big = arb.request_capacity("training", "batch", gpus=6)
            assert big.state == "pending_approval", big
            assert carol.approve(big.id).admitted
            other = arb.request_capacity("training", "batch", gpus=5)
            assert carol.deny(other.id, "not this week").state == "denied"
            assert arb.get(big.id).admitted
            call("ClaimAllocation", id=big.id, holder="pod:py-1")
            call("RenewLease", id=big.id, holder="pod:py-1")
            assert arb.release(big.id).state == "released"
            call("ImportOrganisation", teams=[{"name": "py-imported", "parent": "org"}])
            call("SetGpuModel", gpu_model={"name": "py-gpu", "vendor": "amd",
                                            "memory_mib": 65536, "sm_count": 120,
                                            "tdp_watts": 300})
            spare = {"cluster": "east", "name": "py-spare"}
            call("RegisterNode", node=dict(spare, pool="batch", cpu_milli=1000, memory_mib=1024,
                                            gpus=[{"index": 0, "model": "L4"}]))
            call("NodeHeartbeat", **spare)
            call("UpdateNode", node=dict(spare, pool="batch", cpu_milli=2000, memory_mib=1024,
                                          gpus=[{"index": 0, "model": "L4"}]))
            call("CordonNode", **spare)
            call("UncordonNode", **spare)
            call("DrainNode", grace_seconds=5, **spare)
            call("MarkNodeFailed", **spare)
            call("RemoveNode", **spare)

            listed = list(arb.requests(team="inference", page_size=2))
            assert len(listed) == 5 and len({r.id for r in listed}) == len(listed), listed
            assert [r.id for r in listed] == sorted((r.id for r in listed), reverse=True)
            entries = list(arb.ledger(page_size=7))
            assert [e.seq for e in entries] == list(range(1, len(entries) + 1)), entries[:3]

            from arbiter.v1 import telemetry_pb2 as tel
            from google.protobuf import timestamp_pb2
            now = timestamp_pb2.Timestamp()
            now.GetCurrentTime()
            batch = tel.SampleBatch(cluster="east", node="h100-0", sent_at=now,
                                    interval_seconds=10, samples=[tel.DeviceSample(
                                        at=now, uuid="GPU-py-0", util_milli=700)])
            stored = arb.telemetry.StreamSamples(iter([batch]), timeout=10)
            assert stored.stored == 1, stored
            call("ReportLatency", window={"team": "inference", "service": "chat",
                                          "start": iso(-1), "end": iso(-1)[:14] + "05:00Z",
                                          "p50_us": 80_000, "p99_us": 350_000})
            period = {"from": iso(-3), "to": iso(1)}
            for name, fields in [("ListClusters", {}), ("ListPools", {}), ("ListNodes", {}),
                                 ("GetServingForecast", {"pool": "front", "hours": 2}),
                                 ("ListGpuModels", {}), ("ListTeams", {}), ("ListQuotas", {}),
                                 ("ListCoexistenceRules", {}), ("ListRoleBindings", {}), ("WhoAmI", {}),
                                 ("ListAuthorityRules", {}), ("ListPrices", {}),
                                 ("ListBudgets", {}), ("ListDelegations", {}), ("ListSlos", {}),
                                 ("ListIncidents", {"period": period}),
                                 ("GetChargeback", {"period": period}),
                                 ("ListCheckpoints", {}), ("ListIdlePolicies", {}),
                                 ("ListIdleAllocations", {}),
                                 ("GetUtilization", {"from": iso(-3), "to": iso(1)}),
                                 ("GetRightSizing", {"from": iso(-3), "to": iso(1)})]:
                call(name, **fields)
            call("ClosePeriod", period={"from": iso(-48), "to": iso(-24)})

        missing = live.unreached_rpcs()
        assert not missing, f"RPCs the Python client did not reach: {sorted(missing)}"
        print("python client: every RPC reached; watch, paging, replays and errors as documented")


if __name__ == "__main__":
    main()
