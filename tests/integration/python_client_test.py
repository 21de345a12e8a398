#!/usr/bin/python3
"""A client generated from proto/ in another language (Python, Debian's
python3-grpcio) talks to a live arbiterd: it builds a small organisation,
lists teams, requests capacity and releases it, and checks health.

Usage: python_client_test.py ARBITERD SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import sys

import grpc

from live_arbiterd import LiveArbiterd


def main():
    arbiterd, source_dir = sys.argv[1], sys.argv[2]
    with LiveArbiterd(arbiterd, source_dir, "py") as live:
        from arbiter.v1 import allocation_pb2 as al, allocation_pb2_grpc as alg
        from arbiter.v1 import governance_pb2 as gov, governance_pb2_grpc as govg
        from arbiter.v1 import inventory_pb2 as inv, inventory_pb2_grpc as invg
        from arbiter.v1 import types_pb2 as t
        channel = live.channel
        inventory = invg.InventoryServiceStub(channel)
        governance = govg.GovernanceServiceStub(channel)
        allocation = alg.AllocationServiceStub(channel)

        inventory.CreateCluster(inv.CreateClusterRequest(cluster=t.Cluster(name="east")), timeout=10)
        inventory.CreatePool(inv.CreatePoolRequest(
            pool=t.Pool(name="serving", latency_class=t.LATENCY_CLASS_SERVING)), timeout=10)
        inventory.RegisterNode(inv.RegisterNodeRequest(node=t.Node(
            cluster="east", name="h100-0", pool="serving", cpu_milli=96000, memory_mib=1024000,
            gpus=[t.Gpu(index=i, model="H100-80GB") for i in range(8)])), timeout=10)
        governance.CreateTeam(gov.CreateTeamRequest(team=t.Team(name="inference")), timeout=10)
        governance.SetQuota(gov.SetQuotaRequest(quota=t.Quota(
            team="inference", pool="serving", nominal_milli=4000)), timeout=10)

        teams = governance.ListTeams(gov.ListTeamsRequest(), timeout=10).teams
        assert [x.name for x in teams] == ["inference"], teams

        granted = allocation.RequestCapacity(al.RequestCapacityRequest(
            idempotency_key="py-1", team="inference", pool="serving",
            workload_class=t.WORKLOAD_CLASS_INFERENCE, members=1,
            shape=t.MemberShape(whole_gpus=2)), timeout=10).request
        assert granted.state == t.REQUEST_STATE_ADMITTED, granted
        assert list(granted.placements[0].gpu_indices) == [0, 1], granted

        try:
            allocation.RequestCapacity(al.RequestCapacityRequest(
                idempotency_key="py-2", team="inference", pool="serving",
                workload_class=t.WORKLOAD_CLASS_INFERENCE, members=0,
                shape=t.MemberShape(whole_gpus=1)), timeout=10)
            raise AssertionError("members=0 was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT, e
            assert e.details().startswith("members:"), e.details()

        released = allocation.ReleaseAllocation(
            al.ReleaseAllocationRequest(id=granted.id), timeout=10).request
        assert released.state == t.REQUEST_STATE_RELEASED, released
        page = allocation.ListRequests(al.ListRequestsRequest(team="inference"), timeout=10)
        assert [r.state for r in page.requests] == [t.REQUEST_STATE_RELEASED], page

        # grpc.health.v1.Health/Check with an empty request; the reply's field 1
        # (status) must be SERVING (1). Debian ships no Python health stubs.
        check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        assert check(b"", timeout=10) == b"\x08\x01", "health is not SERVING"
        print("python client: teams listed, capacity requested, admitted and released")


if __name__ == "__main__":
    main()
