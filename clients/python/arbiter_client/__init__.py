"""Arbiter's Python client: a small idiomatic layer over the arbiter.v1 stubs.

    from arbiter_client import Client

    with Client("127.0.0.1:50051") as arbiter:              # plaintext, loopback
        alloc = arbiter.request_capacity("inference", "serving",
                                         workload_class="inference", gpus=2)
        print(alloc.id, alloc.state, alloc.placements[0].node)
        for r in arbiter.requests(team="inference"):        # every page
            print(r.id, r.state)
        arbiter.release(alloc.id)

With TLS: Client(endpoint, ca="ca.pem", cert="me.pem", key="me.key").

The stubs are generated from proto/ by the build (build/python) or by hand:
    protoc -Iproto --python_out=OUT --grpc_out=OUT \\
        --plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin proto/arbiter/v1/*.proto
and must be importable as `arbiter.v1`. Every RPC is reachable through
`Client.call(name, **fields)` and the raw stubs (`client.allocation`, ...);
the methods below cover the daily ones with dataclasses, iterators and
retries.
"""
from arbiter_client.client import (Allocation, ArbiterError, Client, Event, LedgerEntry,
                                   Placement, leader_named_in)

__all__ = ["Allocation", "ArbiterError", "Client", "Event", "LedgerEntry", "Placement",
           "leader_named_in"]
