"""The Client class; see the package docstring."""
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator, List, Optional

import grpc
from google.protobuf import json_format

from arbiter.v1 import allocation_pb2 as _al
from arbiter.v1 import allocation_pb2_grpc as _alg
from arbiter.v1 import chargeback_pb2_grpc as _cbg
from arbiter.v1 import governance_pb2_grpc as _govg
from arbiter.v1 import inventory_pb2_grpc as _invg
from arbiter.v1 import ledger_pb2 as _lg
from arbiter.v1 import ledger_pb2_grpc as _lgg
from arbiter.v1 import telemetry_pb2_grpc as _telg
from arbiter.v1 import types_pb2 as _t

# Codes a call may be retried on with the same idempotency key: the decision
# was not made, or its answer was lost (a replay returns the same decision).
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED,
              grpc.StatusCode.RESOURCE_EXHAUSTED)

_CLASSES = {"training": _t.WORKLOAD_CLASS_TRAINING, "inference": _t.WORKLOAD_CLASS_INFERENCE,
            "batch_analytics": _t.WORKLOAD_CLASS_BATCH_ANALYTICS,
            "experimentation": _t.WORKLOAD_CLASS_EXPERIMENTATION}


class ArbiterError(Exception):
    """An error answered by arbiterd: `code` (grpc.StatusCode) and `details`,
    which names the field for INVALID_ARGUMENT (e.g. "members: ...")."""

    def __init__(self, code, details):
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details


@dataclass(frozen=True)
class Placement:
    member: int
    cluster: str
    node: str
    gpu_indices: List[int]
    gpu_milli: int          # Per GPU: 1000 for whole GPUs.
    mig_profile: str        # "" unless a MIG instance.


@dataclass(frozen=True)
class Allocation:
    id: int
    state: str              # "admitted", "queued", "pending_approval", "released", ...
    team: str
    pool: str
    workload_class: str
    members: int
    reason_code: str
    reason: str
    placements: List[Placement] = field(default_factory=list)
    raw: object = field(default=None, repr=False, compare=False)  # The CapacityRequest.

    @property
    def admitted(self):
        return self.state == "admitted"


@dataclass(frozen=True)
class Event:
    type: str               # "admitted", "released", "preempting", ...
    allocation: Allocation
    committed_at: float     # Unix seconds.
    revision: int = 0       # Resume a watch from here (watch(start_revision=...)).


@dataclass(frozen=True)
class LedgerEntry:
    seq: int
    actor: str
    action: str
    subject: str
    payload: str
    hash: str


def _short(enum_type, value, prefix):
    return enum_type.Name(value)[len(prefix):].lower()


def _allocation(r):
    return Allocation(
        id=r.id, state=_short(_t.RequestState, r.state, "REQUEST_STATE_"), team=r.team,
        pool=r.pool, workload_class=_short(_t.WorkloadClass, r.workload_class, "WORKLOAD_CLASS_"),
        members=r.members, reason_code=r.reason_code, reason=r.reason,
        placements=[Placement(p.member, p.cluster, p.node, list(p.gpu_indices), p.gpu_milli,
                              p.mig_profile) for p in r.placements],
        raw=r)


def leader_named_in(error):
    """The leader's host:port a follower named ("leader=host:port" in an
    UNAVAILABLE answer, docs/operations.md), or None."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    match = re.search(r"leader=([^ ;,]+)", error.details() or "")
    return match.group(1) if match else None


class Client:
    """A connection to arbiterd. Thread-safe (gRPC channels are)."""

    def __init__(self, endpoint="127.0.0.1:50051", *, ca=None, cert=None, key=None,
                 timeout=10.0, retries=3, backoff=0.2):
        self._creds = None
        if ca:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            self._creds = grpc.ssl_channel_credentials(read(ca), read(key) if key else None,
                                                       read(cert) if cert else None)
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.channel = None
        self._connect(endpoint)

    def _connect(self, endpoint):
        """Points every stub at `endpoint` (a follower named the leader)."""
        if self.channel is not None:
            self.channel.close()
        self.endpoint = endpoint
        if self._creds is not None:
            self.channel = grpc.secure_channel(endpoint, self._creds)
        else:
            self.channel = grpc.insecure_channel(endpoint)
        self.inventory = _invg.InventoryServiceStub(self.channel)
        self.governance = _govg.GovernanceServiceStub(self.channel)
        self.allocation = _alg.AllocationServiceStub(self.channel)
        self.ledger_service = _lgg.LedgerServiceStub(self.channel)
        self.telemetry = _telg.TelemetryServiceStub(self.channel)
        self.chargeback = _cbg.ChargebackServiceStub(self.channel)
        self._stubs = [self.inventory, self.governance, self.allocation, self.ledger_service,
                       self.telemetry, self.chargeback]

    def close(self):
        self.channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # Any RPC by name.
    def call(self, method, request=None, **fields):
        """Calls the RPC `method` (e.g. "ListTeams") with `request` or a
        request built from `fields` as in the proto3 JSON mapping (nested
        messages as dicts, enums by name, timestamps as RFC 3339 strings),
        e.g. call("SetQuota", quota={"team": "ml", "pool": "serving",
        "nominal_milli": 4000}); returns the response message. Raises
        ArbiterError. Client-streaming RPCs (StreamSamples) take an iterable
        of messages as `request`; server-streaming ones return an iterator."""
        for hop in range(4):
            for stub in self._stubs:
                fn = getattr(stub, method, None)
                if fn is None:
                    continue
                if request is None:
                    request = json_format.ParseDict(fields, self._request_type(stub, method)())
                try:
                    if method in ("WatchAllocations",):
                        return fn(request)
                    return fn(request, timeout=self.timeout)
                except grpc.RpcError as e:
                    leader = leader_named_in(e)
                    if leader is None or hop == 3:
                        raise ArbiterError(e.code(), e.details()) from None
                    self._connect(leader)
                    break
            else:
                raise AttributeError(f"arbiter.v1 has no RPC {method}")

    @staticmethod
    def _request_type(stub, method):
        from arbiter.v1 import (allocation_pb2, chargeback_pb2, governance_pb2, inventory_pb2,
                                ledger_pb2, telemetry_pb2)
        for module in (allocation_pb2, chargeback_pb2, governance_pb2, inventory_pb2, ledger_pb2,
                       telemetry_pb2):
            for service in module.DESCRIPTOR.services_by_name.values():
                m = service.methods_by_name.get(method)
                if m is not None:
                    return getattr(module, m.input_type.name)
        raise AttributeError(method)

    # Allocation.
    def request_capacity(self, team, pool, *, workload_class="training", gpus=None, milli=None,
                         gpu_memory_mib=0, mig=None, members=1, key=None, **extra):
        """Asks for capacity; answered after the decision is committed.
        Exactly one of gpus (whole GPUs per member), milli (a share of one
        GPU, with gpu_memory_mib) or mig (a profile such as "3g.40gb").
        Retries UNAVAILABLE and DEADLINE_EXCEEDED with the same idempotency
        key (a fresh one unless `key`), so a retry never allocates twice.
        `extra`: other RequestCapacityRequest fields (priority, preemptible,
        description, gpu_models, ...)."""
        shape = _t.MemberShape()
        if gpus is not None:
            shape.whole_gpus = gpus
        elif milli is not None:
            shape.fraction.gpu_milli = milli
            shape.fraction.memory_mib = gpu_memory_mib
        elif mig is not None:
            shape.mig_profile = mig
        if workload_class not in _CLASSES:
            raise ValueError(f"workload_class: one of {sorted(_CLASSES)}")
        request = _al.RequestCapacityRequest(
            idempotency_key=key or f"py-{uuid.uuid4()}", team=team, pool=pool,
            workload_class=_CLASSES[workload_class], members=members, shape=shape, **extra)
        return _allocation(self._with_retries("allocation", "RequestCapacity", request).request)

    def get(self, request_id):
        return _allocation(self._unary("allocation", "GetRequest",
                                       _al.GetRequestRequest(id=request_id)).request)

    def release(self, request_id):
        """Releases an allocation (or cancels a queued request). Idempotent
        for the caller: retried like request_capacity."""
        return _allocation(self._with_retries("allocation", "ReleaseAllocation",
                                              _al.ReleaseAllocationRequest(id=request_id)).request)

    def approve(self, request_id):
        return _allocation(self._unary("allocation", "ApproveRequest",
                                       _al.ApproveRequestRequest(id=request_id)).request)

    def deny(self, request_id, reason):
        return _allocation(self._unary("allocation", "DenyRequest",
                                       _al.DenyRequestRequest(id=request_id, reason=reason)).request)

    def requests(self, team="", state=None, page_size=100) -> Iterator[Allocation]:
        """Every matching request, newest first, fetching pages as needed."""
        token = ""
        while True:
            req = _al.ListRequestsRequest(team=team, page_size=page_size, page_token=token)
            if state:
                req.state = _t.RequestState.Value("REQUEST_STATE_" + state.upper())
            page = self._unary("allocation", "ListRequests", req)
            for r in page.requests:
                yield _allocation(r)
            token = page.next_page_token
            if not token:
                return

    def watch(self, team="", pool="", start_revision=0, cluster="", node="",
              request_id=0) -> Iterator[Event]:
        """Allocation events as they commit, after `start_revision` (a list's
        or an event's revision; 0 for from now on), until the caller stops
        iterating. Bookmarks are skipped. A revision older than the server
        replays raises ArbiterError with OUT_OF_RANGE: list again."""
        call = self.allocation.WatchAllocations(_al.WatchAllocationsRequest(
            team=team, pool=pool, start_revision=start_revision, cluster=cluster, node=node,
            request_id=request_id))
        try:
            for e in call:
                if e.bookmark:
                    continue
                yield Event(_short(_al.AllocationEventType, e.type, "ALLOCATION_EVENT_TYPE_"),
                            _allocation(e.request),
                            e.committed_at.seconds + e.committed_at.nanos / 1e9, e.revision)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.CANCELLED:
                raise ArbiterError(e.code(), e.details()) from None
        finally:
            call.cancel()

    def ledger(self, after_seq=0, page_size=500, subject="") -> Iterator[LedgerEntry]:
        """Ledger entries after `after_seq`, in order, every page."""
        while True:
            page = self._unary("ledger_service", "ListLedgerEntries", _lg.ListLedgerEntriesRequest(
                after_seq=after_seq, page_size=page_size, subject=subject))
            for e in page.entries:
                yield LedgerEntry(e.seq, e.actor, e.action, e.subject, e.payload, e.hash)
                after_seq = e.seq
            if len(page.entries) < page_size:
                return

    # Plumbing.
    def _unary(self, stub, method, request):
        """One call; a follower's answer naming the leader sends it there."""
        for hop in range(4):
            try:
                return getattr(getattr(self, stub), method)(request, timeout=self.timeout)
            except grpc.RpcError as e:
                leader = leader_named_in(e)
                if leader is None or hop == 3:
                    raise ArbiterError(e.code(), e.details()) from None
                self._connect(leader)

    def _with_retries(self, stub, method, request):
        """Retries UNAVAILABLE and DEADLINE_EXCEEDED with backoff; a follower's
        answer naming the leader is resent there at once."""
        attempt = 0
        while True:
            try:
                return getattr(getattr(self, stub), method)(request, timeout=self.timeout)
            except grpc.RpcError as e:
                leader = leader_named_in(e)
                if leader is not None and attempt <= self.retries:
                    self._connect(leader)
                    attempt += 1
                    continue
                if e.code() not in _RETRYABLE or attempt >= self.retries:
                    raise ArbiterError(e.code(), e.details()) from None
                time.sleep(self.backoff * (2 ** attempt))
                attempt += 1
