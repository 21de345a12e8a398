#!/usr/bin/python3
"""A test double of the Kubernetes API server's documented HTTP protocol.

No Kubernetes API server can be installed on the test machines, so arbiter-kube (the C++/libcurl
controller) is tested against this in-process server. For what it serves it follows the API
conventions and JSON shapes of the real server; anything else gets the Status a real server sends.

Serves (Python 3 standard library only, HTTP/1.1 on 127.0.0.1, port chosen by the OS):
  * v1 pods and nodes; coordination.k8s.io/v1 leases; kueue.x-k8s.io/v1beta2 clusterqueues,
    cohorts, resourceflavors, localqueues; resource.k8s.io/v1 resourceslices and resourceclaims
    (verbs per resource in RESOURCES; another verb answers 405, another path 404).
  * list: labelSelector (k=v, k==v, k!=v), fieldSelector (metadata.name, metadata.namespace,
    spec.nodeName on pods), limit/continue paging.
  * watch: resourceVersion (absent or "0": synthetic ADDED events first), allowWatchBookmarks,
    timeoutSeconds, one chunk per JSON event; an object leaving a selector is DELETED for the
    watcher, one entering it ADDED; a resourceVersion older than the kept history gets a 200
    stream with one ERROR event (410 Expired), as from the real watch cache.
  * get, create (POST), replace (PUT; metadata.resourceVersion is a precondition; /status
    replaces only .status, the main resource keeps it), DELETE of pods (graceful or immediate,
    preconditions.uid), the policy/v1 Eviction subresource, server-side apply
    (application/apply-patch+yaml, JSON body), bearer-token authentication (401).

Does not serve: JSON, merge and strategic-merge patches (415); managedFields and conflicts between
apply field managers; set-based selectors; list resourceVersion/resourceVersionMatch (a list, any
continued page included, shows the latest state); sendInitialEvents; "too large resource version";
discovery and OpenAPI; protobuf; schema validation, defaulting, admission, finalizers;
PodDisruptionBudget objects (tests block evictions with `eviction_blocked`).
"""
import base64
import collections
import copy
import datetime
import http.client
import http.server
import itertools
import json
import select
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid

APPLY_TYPE = "application/apply-patch+yaml"
_TRUE = {"1", "t", "T", "true", "True", "TRUE"}  # what Go's strconv.ParseBool accepts


class Resource(collections.namedtuple("Resource", "group version plural kind namespaced verbs")):
    """A served resource. verbs: get list watch create update delete evict apply status
    ("status": the resource has a status subresource)."""

    @property
    def api_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self):
        """The name Status messages use: "pods", "leases.coordination.k8s.io"."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


def _resource(group_version, plural, kind, namespaced, verbs=""):
    group, _, version = group_version.rpartition("/")
    return Resource(group, version, plural, kind, namespaced,
                    frozenset(("get list watch " + verbs).split()))


# One line per resource: group/version, plural, kind, namespaced, verbs beyond get/list/watch.
RESOURCES = [
    _resource("v1", "pods", "Pod", True, "create update delete evict status"),
    _resource("v1", "nodes", "Node", False, "create update status"),
    _resource("coordination.k8s.io/v1", "leases", "Lease", True, "create update"),
    _resource("kueue.x-k8s.io/v1beta2", "clusterqueues", "ClusterQueue", False, "apply status"),
    _resource("kueue.x-k8s.io/v1beta2", "cohorts", "Cohort", False, "apply status"),
    _resource("kueue.x-k8s.io/v1beta2", "resourceflavors", "ResourceFlavor", False, "apply"),
    _resource("kueue.x-k8s.io/v1beta2", "localqueues", "LocalQueue", True, "apply status"),
    _resource("resource.k8s.io/v1", "resourceslices", "ResourceSlice", False),
    _resource("resource.k8s.io/v1", "resourceclaims", "ResourceClaim", True,
              "apply update status delete"),
]
_BY_PATH = {(r.group, r.version, r.plural): r for r in RESOURCES}


def _now(offset=0):
    t = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=offset)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code, reason, message, details=None):
    """A v1 Status failure body, as the API server sends with an error code."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


class ApiError(Exception):
    """An error answer: HTTP `code` with a v1 Status body."""

    def __init__(self, code, reason, message, details=None):
        super().__init__(message)
        self.code, self.body = code, status(code, reason, message, details)


def _details(res, name):
    return dict({"name": name}, **({"group": res.group} if res.group else {}), kind=res.plural)


def _not_found(res, name):
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def _conflict(res, name, why="the object has been modified; please apply your changes to the "
              "latest version and try again"):
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                    f'{why}', _details(res, name))


def _bad(message):
    return ApiError(400, "BadRequest", message)


def _not_served():
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def _not_allowed():
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def _json(raw):
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        raise _bad(f"json parse error: {e}") from None
    if not isinstance(body, dict):
        raise _bad("the request body must be a JSON object")
    return body


def _selector(text, fields=None):
    """Parses "k=v,k2!=v2" into [(key, negated, value)]; `fields` is the set of supported field
    selector keys (None for a label selector). Anything else is a 400."""
    terms = []
    for term in filter(None, (t.strip() for t in (text or "").split(","))):
        for op in ("!=", "==", "="):
            key, sep, value = term.partition(op)
            if sep:
                break
        key, value = key.strip(), value.strip()
        if not sep or not key or " " in key or any(c in value for c in "=!"):
            raise _bad(f"unable to parse requirement: {term!r} (only equality is supported)")
        if fields is not None and key not in fields:
            raise _bad(f"field label not supported: {key}")
        terms.append((key, op == "!=", value))
    return terms


def _field(obj, key):
    if key == "spec.nodeName":
        return (obj.get("spec") or {}).get("nodeName", "")
    return obj["metadata"].get(key.split(".", 1)[1], "")


def _matches(obj, labels, fields):
    have = obj["metadata"].get("labels") or {}
    return (all((have.get(k) == v) != neg for k, neg, v in labels)
            and all((_field(obj, k) == v) != neg for k, neg, v in fields))


def _peer_gone(sock):
    """True when the client has closed its end (readable, but nothing to read)."""
    try:
        return bool(select.select([sock], [], [], 0)[0]) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def make_pod(ns, name, annotations=None, node=None, phase="Running", gpus=1, labels=None):
    """A v1 Pod as a real cluster stores it (the server adds uid, timestamps, resourceVersion)."""
    ts = _now()
    container = {"name": "main", "image": "registry.k8s.io/pause:3.9",
                 "imagePullPolicy": "IfNotPresent"}
    if gpus:
        gpu = {"nvidia.com/gpu": str(gpus)}
        container["resources"] = {"limits": gpu, "requests": dict(gpu)}
    spec = {"containers": [container], "restartPolicy": "Never",
            "schedulerName": "default-scheduler", "terminationGracePeriodSeconds": 30}
    conditions, pod_status = [], {"phase": phase}
    if node:
        spec["nodeName"], pod_status["startTime"] = node, ts
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": ts})
    conditions.append({"type": "Ready", "status": "True" if phase == "Running" else "False",
                       "lastProbeTime": None, "lastTransitionTime": ts})
    pod_status["conditions"] = conditions
    meta = {"name": name, "namespace": ns, "labels": dict(labels or {})}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": pod_status}


def make_node(name, ready=True, unschedulable=False, labels=None, gpus=8):
    """A v1 Node as a real cluster stores it, with the taints the node controller adds."""
    ts = _now()
    meta_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                   "kubernetes.io/arch": "amd64", **(labels or {})}
    spec, taints = {}, []
    if unschedulable:
        spec["unschedulable"] = True
        taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule",
                       "timeAdded": ts})
    if not ready:
        taints.append({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule",
                       "timeAdded": ts})
    if taints:
        spec["taints"] = taints
    capacity = {"cpu": "64", "memory": "527957340Ki", "pods": "110", "nvidia.com/gpu": str(gpus)}
    condition = {"type": "Ready", "status": "True" if ready else "False",
                 "lastHeartbeatTime": ts, "lastTransitionTime": ts,
                 "reason": "KubeletReady" if ready else "KubeletNotReady",
                 "message": "kubelet is posting ready status" if ready else
                 "container runtime network not ready: NetworkReady=false"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": meta_labels},
            "spec": spec, "status": {"capacity": capacity, "allocatable": dict(capacity),
                                     "conditions": [condition]}}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-api-test-double"

    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except OSError:  # the client went away between requests
            self.close_connection = True

    def setup(self):
        super().setup()
        self.server.api._track(self.connection, True)

    def finish(self):
        try:
            super().finish()
        finally:
            self.server.api._track(self.connection, False)

    def do_GET(self):
        self.server.api._serve(self)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def read_body(self):
        if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""
        parts = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while self.rfile.readline().strip():  # trailers
                    pass
                return b"".join(parts)
            parts.append(self.rfile.read(size))
            self.rfile.readline()

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_event(self, event):
        data = json.dumps(event).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


class KubeApi:
    """The server (serving from construction until close()) and the test-side API.

    Attributes tests may set: bookmark_every (seconds between watch bookmarks, 1.0),
    graceful_delete (False: DELETE and eviction remove a pod at once), eviction_blocked (set of
    (ns, name) answered 429, except for a pod that is Pending, Succeeded, Failed or already
    terminating, which the real PDB check skips too), token (None: no authentication).
    Records: requests [(method, path_with_query)], deletions [{ns, name, grace}] (grace as
    requested, None if absent), evictions [{ns, name, time}], applies [{path, fieldManager,
    force, changed, body}]."""

    pod = staticmethod(make_pod)
    node = staticmethod(make_node)

    def __init__(self, token=None, window=1000):
        self.token, self.window = token, max(1, window)
        self.bookmark_every, self.graceful_delete, self.eviction_blocked = 1.0, True, set()
        self.requests, self.deletions, self.evictions, self.applies = [], [], [], []
        self._cond = threading.Condition(threading.RLock())  # guards everything below
        self._rv = 1      # the current resourceVersion
        self._floor = 1   # a watch from any N >= _floor has all its events in _history
        self._compacted = 1  # compact(): a new watch from N < _compacted gets 410
        self._history = collections.deque()  # (rv, res, type, obj, prev), rv = _floor + 1 + i
        self._objects = {r: {} for r in RESOURCES}  # res -> {(ns or "", name): obj}
        self._closed, self._conns, self._watchers = False, set(), 0
        self._drops = 0   # bumped by compact_and_drop_watches(): open watches end
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads, self._httpd.block_on_close = True, False
        self._httpd.api = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,),
                                        daemon=True)
        self._thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self._httpd.server_address[1]

    def close(self):
        """Stops serving; open watches end (cleanly where they can) within about 1 s."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._watchers == 0, timeout=0.5)
            conns = list(self._conns)
        self._httpd.shutdown()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._httpd.server_close()
        self._thread.join(timeout=1)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _track(self, conn, add):
        with self._cond:
            (self._conns.add if add else self._conns.discard)(conn)

    # Storage. Callers hold self._cond. A stored dict is never mutated (changes store a new one),
    # so watch streams serialise objects without the lock.

    def _commit(self, res, etype, obj, prev):
        """Stores `obj` (a fresh dict) at a new resourceVersion, or drops it for DELETED, and
        records the watch event. Returns obj."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
        if etype == "DELETED":
            self._objects[res].pop(key, None)
        else:
            self._objects[res][key] = obj
        while len(self._history) >= self.window:
            self._floor = self._history.popleft()[0]
        self._history.append((self._rv, res, etype, obj, prev))
        self._cond.notify_all()
        return obj

    def _new(self, res, body, ns):
        obj = copy.deepcopy(body)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        meta = obj.setdefault("metadata", {})
        meta.pop("resourceVersion", None)
        meta.pop("namespace", None)
        if res.namespaced:
            meta["namespace"] = ns
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("generation", 1)
        return obj

    def _modify(self, res, old, new, keep=("name", "namespace", "uid", "creationTimestamp",
                "deletionTimestamp", "deletionGracePeriodSeconds"), force=False):
        """Stores `new` over `old`, keeping the server-owned metadata in `keep`. Unless `force`,
        a write that changes nothing is a no-op (no resourceVersion, no event), as in the real
        storage layer. Returns (object, changed)."""
        meta, old_meta = new.setdefault("metadata", {}), old["metadata"]
        for k in keep:
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        meta["generation"] = old_meta.get("generation", 1) + (new.get("spec") != old.get("spec"))
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if new == old and not force:
            return old, False
        return self._commit(res, "MODIFIED", new, old), True

    @staticmethod
    def _check(res, ns, body, name=None):
        """400 unless the body's apiVersion, kind, namespace and name fit the URL."""
        if (body.get("apiVersion", res.api_version), body.get("kind", res.kind)) != \
                (res.api_version, res.kind):
            raise _bad(f"the API version/kind in the data ({body.get('apiVersion')}/"
                       f"{body.get('kind')}) does not match {res.api_version}/{res.kind}")
        meta = body.get("metadata") or {}
        if res.namespaced and meta.get("namespace", ns) not in (ns, ""):
            raise _bad("the namespace of the provided object does not match the namespace sent "
                       "on the request")
        if name is not None and meta.get("name", name) != name:
            raise _bad(f"the name of the object ({meta.get('name')}) does not match the name on "
                       f"the URL ({name})")

    # HTTP.

    def _serve(self, h):
        with self._cond:
            self.requests.append((h.command, h.path))
        try:
            raw = h.read_body()
            scheme, _, token = h.headers.get("Authorization", "").partition(" ")
            authorized = (scheme.lower(), token.strip()) == ("bearer", self.token)
            if self.token is not None and not authorized:
                raise ApiError(401, "Unauthorized", "Unauthorized")
            url = urllib.parse.urlsplit(h.path)
            query = {k: v[-1] for k, v in
                     urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
            result = self._dispatch(h, *self._route(url.path), query, raw)
            if result is not None:
                h.send_json(*result)
        except ApiError as e:
            h.send_json(e.code, e.body)
        except ValueError as e:  # a malformed number in the query or body
            h.send_json(400, status(400, "BadRequest", f"bad request: {e}"))
        except OSError:
            h.close_connection = True

    @staticmethod
    def _route(path):
        """A path -> (resource, namespace or None, name or None, subresource or None)."""
        parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/")]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _not_served()
        ns = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        res = _BY_PATH.get((group, version, rest[0] if rest else ""))
        if res is None or not 1 <= len(rest) <= 3 or (ns is not None and not res.namespaced) \
                or (res.namespaced and len(rest) > 1 and ns is None):
            raise _not_served()
        return (res, ns, *(rest[1:] + [None, None])[:2])

    def _dispatch(self, h, res, ns, name, sub, q, raw):
        """Answers (code, body), or None when the answer was streamed."""
        def need(verb):
            if verb not in res.verbs:
                raise _not_allowed()
        m, one = h.command, name is not None and sub in (None, "status")
        if name is None and m == "GET":
            if q.get("watch") in _TRUE:
                need("watch")
                return self._watch(h, res, ns, q)
            need("list")
            return 200, self._list(res, ns, q)
        if name is None and m == "POST" and (ns or not res.namespaced):
            need("create")
            return 201, self._create(res, ns, _json(raw))
        if one and m == "GET":
            need("get" if sub is None else "status")
            return 200, self._get(res, ns, name)
        if one and m == "PUT":
            need("update" if sub is None else "status")
            return 200, self._replace(res, ns, name, _json(raw), sub)
        if one and sub is None and m == "PATCH":
            need("apply")
            return self._apply(h, res, ns, name, q, raw)
        if one and sub is None and m == "DELETE":
            need("delete")
            return 200, self._delete(res, ns, name, q, raw)
        if sub == "eviction" and m == "POST":
            need("evict")
            return 201, self._evict(res, ns, name, raw)
        raise _not_served() if sub not in (None, "status", "eviction") else _not_allowed()

    @staticmethod
    def _field_keys(res):
        return {"metadata.name", "metadata.namespace"} | (
            {"spec.nodeName"} if res.plural == "pods" else set())

    def _list(self, res, ns, q):
        labels = _selector(q.get("labelSelector"))
        fields = _selector(q.get("fieldSelector"), self._field_keys(res))
        limit = int(q.get("limit") or 0)
        with self._cond:
            meta = {"resourceVersion": str(self._rv)}
            items = sorted((k, o) for k, o in self._objects[res].items()
                           if ns in (None, k[0]) and _matches(o, labels, fields))
        if q.get("continue"):
            try:  # shaped like the real token: base64 JSON {v, rv, start}
                token = json.loads(base64.urlsafe_b64decode(q["continue"]))
                start, meta["resourceVersion"] = tuple(token["start"]), str(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise _bad("continue key is not valid") from None
            items = [(k, o) for k, o in items if k > start]
        if 0 < limit < len(items):
            remaining, items = len(items) - limit, items[:limit]
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"v": "meta.k8s.io/v1", "rv": int(meta["resourceVersion"]),
                 "start": list(items[-1][0])}).encode()).decode()
            if not labels and not fields:
                meta["remainingItemCount"] = remaining
        return {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta,
                "items": [o for _, o in items]}

    def _watch(self, h, res, ns, q):
        """Streams the events after resourceVersion as a chunked 200 answer; returns None."""
        want = (res, ns, _selector(q.get("labelSelector")),
                _selector(q.get("fieldSelector"), self._field_keys(res)))
        since = int(q.get("resourceVersion") or 0)
        timeout = int(q.get("timeoutSeconds") or 0)  # 0, as absent: the server's default
        deadline = time.monotonic() + timeout if timeout > 0 else None
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        with self._cond:
            pending, cursor = [], since
            if since == 0:
                cursor = self._rv
                pending = [{"type": "ADDED", "object": o}
                           for _, o in sorted(self._objects[res].items())
                           if self._view((0, res, "ADDED", o, None), want)]
            elif since < max(self._floor, self._compacted):
                pending, deadline = [self._expired(since)], 0
            self._watchers += 1
            want += (self._drops,)
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Cache-Control", "no-cache, private")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            self._stream(h, want, cursor, pending, deadline, bookmarks)
            h.wfile.write(b"0\r\n\r\n")
        except OSError:
            h.close_connection = True
        finally:
            with self._cond:
                self._watchers -= 1
                self._cond.notify_all()
                h.close_connection = h.close_connection or self._closed

    def _expired(self, since):
        return {"type": "ERROR", "object": status(
            410, "Expired", f"too old resource version: {since} "
            f"({max(self._floor, self._compacted)})")}

    def _stream(self, h, want, cursor, pending, deadline, bookmarks):
        """Sends `pending`, then every event after `cursor` as it happens, until the deadline
        (0: right after `pending`), close() or the client leaving."""
        res, next_bookmark = want[0], time.monotonic() + self.bookmark_every
        while True:
            for event in pending:
                h.send_event(event)
            if deadline == 0 or _peer_gone(h.connection):
                return
            pending = []
            with self._cond:
                now = time.monotonic()
                if self._closed or self._drops != want[4] or (deadline and now >= deadline):
                    return
                if cursor < self._floor:  # this watcher fell behind the kept history
                    pending, deadline = [self._expired(cursor)], 0
                elif self._rv > cursor:
                    events = itertools.islice(self._history, max(0, cursor - self._floor), None)
                    pending = list(filter(None, (self._view(e, want) for e in events)))
                    cursor = self._rv
                elif bookmarks and now >= next_bookmark:
                    pending = [{"type": "BOOKMARK", "object": {
                        "kind": res.kind, "apiVersion": res.api_version,
                        "metadata": {"resourceVersion": str(cursor)}}}]
                    next_bookmark = now + self.bookmark_every
                else:
                    wake = min(filter(None, (now + 0.2, deadline, bookmarks and next_bookmark)))
                    self._cond.wait(max(0.0, wake - now))

    @staticmethod
    def _view(event, want):
        """The event as a watcher with `want` (resource, ns, selectors) sees it, or None."""
        _, res, etype, obj, prev = event
        wres, ns, labels, fields = want[:4]
        if res is not wres or ns not in (None, obj["metadata"].get("namespace", "")):
            return None
        now_in = _matches(obj, labels, fields)
        if etype == "MODIFIED":
            was_in = _matches(prev, labels, fields)
            if not (now_in or was_in):
                return None
            etype = "MODIFIED" if now_in and was_in else "ADDED" if now_in else "DELETED"
        elif not now_in:
            return None
        return {"type": etype, "object": obj}

    def _get(self, res, ns, name):
        with self._cond:
            obj = self._objects[res].get((ns or "", name))
        if obj is None:
            raise _not_found(res, name)
        return obj

    def _create(self, res, ns, body):
        self._check(res, ns, body)
        meta = body.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", "metadata.name: Required value: name or generateName "
                           "is required")
        with self._cond:
            if (ns or "", meta["name"]) in self._objects[res]:
                raise ApiError(409, "AlreadyExists", f'{res.qualified} "{meta["name"]}" already '
                               'exists', _details(res, meta["name"]))
            return self._commit(res, "ADDED", self._new(res, body, ns), None)

    def _replace(self, res, ns, name, body, sub):
        self._check(res, ns, body, name)
        with self._cond:
            old = self._get(res, ns, name)
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != old["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            # PUT on /status changes only .status; PUT on the object keeps .status if the
            # resource has a status subresource.
            source = body if sub == "status" else old
            new = copy.deepcopy(old if sub == "status" else body)
            if sub == "status" or "status" in res.verbs:
                new.pop("status", None)
                if "status" in source:
                    new["status"] = copy.deepcopy(source["status"])
            return self._modify(res, old, new)[0]

    def _apply(self, h, res, ns, name, q, raw):
        """Server-side apply by one manager: the body's top-level fields (not status where there
        is a status subresource) and its labels/annotations replace the stored ones."""
        if h.headers.get("Content-Type", "").split(";")[0].strip().lower() != APPLY_TYPE:
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an "
                           f"unknown format - accepted media types include: {APPLY_TYPE}")
        if not q.get("fieldManager"):
            raise _bad("PATCH requests with apply-patch content type require fieldManager")
        body = _json(raw)
        if not body.get("apiVersion") or not body.get("kind"):
            raise _bad("apiVersion and kind must be set in an apply request")
        self._check(res, ns, body, name)
        meta = body.get("metadata") or {}
        fields = {k: v for k, v in body.items() if k not in {"apiVersion", "kind", "metadata"}
                  and not (k == "status" and "status" in res.verbs)}
        with self._cond:
            old = self._objects[res].get((ns or "", name))
            want = meta.get("resourceVersion")
            if old is None:
                new = self._new(res, dict(fields, metadata=dict(meta, name=name)), ns)
                obj, changed, code = self._commit(res, "ADDED", new, None), True, 201
            elif want and want != old["metadata"]["resourceVersion"]:
                raise _conflict(res, name)
            else:
                new = copy.deepcopy(old)
                new.update(copy.deepcopy(fields))
                for k in ("labels", "annotations"):
                    if k in meta:
                        new["metadata"][k] = copy.deepcopy(meta[k])
                (obj, changed), code = self._modify(res, old, new), 200
            self.applies.append({"path": h.path, "fieldManager": q["fieldManager"],
                                 "force": q.get("force") in _TRUE, "changed": changed,
                                 "body": body})
            return code, obj

    def _delete(self, res, ns, name, q, raw):
        opts = _json(raw) if raw.strip() else {}
        grace = opts.get("gracePeriodSeconds")
        if q.get("gracePeriodSeconds"):
            grace = int(q["gracePeriodSeconds"])
        with self._cond:
            self.deletions.append({"ns": ns, "name": name, "grace": grace})
            return self._terminate(res, ns, name, grace, opts)

    def _terminate(self, res, ns, name, grace, opts):
        """Deletes a pod at once (grace 0 or graceful_delete off: DELETED), or starts a graceful
        deletion (deletionTimestamp = now + grace, MODIFIED). Returns the object."""
        old = self._get(res, ns, name)
        uid = (opts.get("preconditions") or {}).get("uid")
        if uid and uid != old["metadata"].get("uid"):
            raise _conflict(res, name, f"Precondition failed: UID in precondition: {uid}, UID in "
                            f"object meta: {old['metadata'].get('uid')}")
        if res.plural != "pods":  # Only pods terminate gracefully (no finalizers here).
            return self._commit(res, "DELETED", copy.deepcopy(old), old)
        if grace is None:
            grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
        if grace <= 0 or not self.graceful_delete:
            return self._commit(res, "DELETED", copy.deepcopy(old), old)
        if "deletionTimestamp" in old["metadata"]:  # already terminating: left as it is
            return old
        new = copy.deepcopy(old)
        new["metadata"].update(deletionTimestamp=_now(grace), deletionGracePeriodSeconds=grace)
        return self._commit(res, "MODIFIED", new, old)

    def _evict(self, res, ns, name, raw):
        body = _json(raw)
        meta = body.get("metadata") or {}
        if (body.get("apiVersion"), body.get("kind")) != ("policy/v1", "Eviction"):
            raise _bad("the body must be a policy/v1 Eviction")
        if meta.get("name") != name or meta.get("namespace", ns) != ns:
            raise _bad("name in URL does not match name in Eviction object")
        with self._cond:
            self.evictions.append({"ns": ns, "name": name, "time": time.time()})
            pod = self._get(res, ns, name)
            ignores_pdb = "deletionTimestamp" in pod["metadata"] or \
                (pod.get("status") or {}).get("phase") in ("Pending", "Succeeded", "Failed")
            if (ns, name) in self.eviction_blocked and not ignores_pdb:
                raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the "
                               "pod's disruption budget.", {"causes": [{
                                   "reason": "DisruptionBudget", "message": "The disruption "
                                   "budget test-pdb needs 1 healthy pods and has 1 currently"}]})
            opts = body.get("deleteOptions") or {}
            self._terminate(res, ns, name, opts.get("gracePeriodSeconds"), opts)
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "code": 201}

    # Test-side API (same process). Kinds are "Pod" or "pods"; results are deep copies.

    @staticmethod
    def _kind(kind, api_version=None):
        for r in RESOURCES:
            if kind in (r.kind, r.plural) and api_version in (None, r.api_version):
                return r
        raise KeyError(f"not served: {api_version} {kind}")

    def _find(self, res, name, namespace):
        """The stored object or None; namespace None finds a name that is unique anywhere."""
        found = [o for (ns, n), o in self._objects[res].items()
                 if n == name and namespace in (None, ns)]
        if len(found) > 1:
            raise ValueError(f"{name} exists in several namespaces")
        return found[0] if found else None

    def add(self, obj):
        """Creates obj (its kind/apiVersion pick the resource; namespace defaults to
        "default"); ADDED event. ValueError if it exists."""
        res = self._kind(obj.get("kind"), obj.get("apiVersion"))
        ns = (obj["metadata"].get("namespace") or "default") if res.namespaced else None
        with self._cond:
            if (ns or "", obj["metadata"]["name"]) in self._objects[res]:
                raise ValueError(f"{obj['metadata']['name']} exists")
            return copy.deepcopy(self._commit(res, "ADDED", self._new(res, obj, ns), None))

    def update(self, kind, name, fn, namespace=None):
        """Stores what fn returns (or the copy it mutated); always a MODIFIED event. fn runs
        under the lock. KeyError if missing."""
        res = self._kind(kind)
        with self._cond:
            old = self._find(res, name, namespace)
            if old is None:
                raise KeyError(name)
            new = copy.deepcopy(old)
            new = fn(new) or new
            return copy.deepcopy(self._modify(res, old, new, keep=(), force=True)[0])

    def remove(self, kind, name, namespace=None):
        """Deletes at once; DELETED event with the last state. KeyError if missing."""
        res = self._kind(kind)
        with self._cond:
            old = self._find(res, name, namespace)
            if old is None:
                raise KeyError(name)
            self._commit(res, "DELETED", copy.deepcopy(old), old)

    def get(self, kind, name, namespace=None):
        res = self._kind(kind)
        with self._cond:
            return copy.deepcopy(self._find(res, name, namespace))

    def list(self, kind):
        res = self._kind(kind)
        with self._cond:
            return [copy.deepcopy(o) for _, o in sorted(self._objects[res].items())]

    def finish_deletion(self, ns, name):
        """Ends a graceful pod deletion: the pod goes, DELETED event."""
        self.remove("Pod", name, ns)

    def compact(self):
        """Forgets all history up to now, as an etcd compaction does: a new watch from an older
        resourceVersion gets 410 Expired (watches already open go on)."""
        with self._cond:
            self._compacted = self._rv

    def compact_and_drop_watches(self):
        """Ends every open watch stream cleanly and makes a watch from any resourceVersion up to
        now, the current one included, get 410 Expired: a harsher compaction than a real server's
        (there a client that saw everything may resume), so that clients relist for sure."""
        with self._cond:
            self._compacted, self._drops = self._rv + 1, self._drops + 1
            self._cond.notify_all()


def _self_test():
    def call(api, method, path, body=None, ctype="application/json", token=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(api.url + path, data, {"Content-Type": ctype}, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    opened = []

    def watch(api, path):
        conn = http.client.HTTPConnection("127.0.0.1", int(api.url.rsplit(":", 1)[1]), timeout=5)
        conn.request("GET", path)
        resp = conn.getresponse()
        opened.extend((resp, conn))
        assert resp.status == 200 and resp.getheader("Transfer-Encoding") == "chunked"
        return resp

    def next_event(resp):
        line = resp.readline()
        return json.loads(line) if line else None

    def names(items):
        return [o["metadata"]["name"] for o in items]

    with KubeApi() as api:
        api.bookmark_every = 0.2
        api.add(api.node("n1"))
        api.add(api.pod("ml", "a", node="n1", labels={"team": "x"}))
        api.add(api.pod("ml", "b", node="n1"))
        code, pods = call(api, "GET", "/api/v1/pods")
        rv = pods["metadata"]["resourceVersion"]
        assert code == 200 and pods["kind"] == "PodList" and rv == "4", pods
        assert names(pods["items"]) == ["a", "b"]
        _, sel = call(api, "GET", "/api/v1/namespaces/ml/pods?labelSelector=team%3Dx"
                      "&fieldSelector=spec.nodeName%3Dn1")
        assert names(sel["items"]) == ["a"], sel
        assert call(api, "GET", "/api/v1/pods?fieldSelector=x%3D1")[0] == 400
        _, page = call(api, "GET", "/api/v1/pods?limit=1")
        token = page["metadata"]["continue"]
        _, page2 = call(api, "GET", f"/api/v1/pods?limit=1&continue={token}")
        assert names(page2["items"]) == ["b"] and "continue" not in page2["metadata"], page2

        w = watch(api, f"/api/v1/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true")
        api.add(api.pod("ml", "c"))
        api.update("Pod", "a", lambda p: p["metadata"]["labels"].update(v="2"), "ml")
        api.remove("Pod", "b", "ml")
        seen = [next_event(w) for _ in range(3)]
        assert [(e["type"], e["object"]["metadata"]["name"],
                 e["object"]["metadata"]["resourceVersion"]) for e in seen] == \
            [("ADDED", "c", "5"), ("MODIFIED", "a", "6"), ("DELETED", "b", "7")], seen
        bookmark = next_event(w)
        assert bookmark == {"type": "BOOKMARK", "object": {
            "kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "7"}}}, bookmark
        w = watch(api, "/api/v1/pods?watch=true&timeoutSeconds=1")
        assert sorted(names(next_event(w)["object"] for _ in "ac")) == ["a", "c"]
        assert next_event(w) is None

        api.compact()
        w = watch(api, f"/api/v1/pods?watch=1&resourceVersion={rv}")
        assert next_event(w) == {"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "too old resource version: 4 (7)", "reason": "Expired", "code": 410}}
        assert next_event(w) is None

        evict = {"apiVersion": "policy/v1", "kind": "Eviction",
                 "metadata": {"name": "a", "namespace": "ml"}}
        code, body = call(api, "POST", "/api/v1/namespaces/ml/pods/a/eviction", evict)
        assert code == 201 and body["status"] == "Success", body
        assert "deletionTimestamp" in api.get("Pod", "a", "ml")["metadata"]
        api.eviction_blocked.add(("ml", "c"))
        evict["metadata"]["name"] = "c"
        code, body = call(api, "POST", "/api/v1/namespaces/ml/pods/c/eviction", evict)
        assert code == 429 and body["reason"] == "TooManyRequests", body
        assert len(api.evictions) == 2
        assert call(api, "POST", "/api/v1/namespaces/ml/pods/a/eviction", {})[0] == 400
        code, body = call(api, "DELETE", "/api/v1/namespaces/ml/pods/c", {"gracePeriodSeconds": 0})
        assert code == 200 and api.get("Pod", "c") is None, body
        assert api.deletions == [{"ns": "ml", "name": "c", "grace": 0}]
        api.finish_deletion("ml", "a")
        code, body = call(api, "GET", "/api/v1/namespaces/ml/pods/a")
        assert code == 404 and body == status(404, "NotFound", 'pods "a" not found',
                                              {"name": "a", "kind": "pods"}), body

        cq = "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/cq1"
        obj = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
               "metadata": {"name": "cq1"}}
        results = []
        for cohort in ("all", "all", "other"):
            obj["spec"] = {"cohortName": cohort}
            results.append(call(api, "PATCH", cq + "?fieldManager=arbiter&force=true", obj,
                                APPLY_TYPE))
        rvs = [b["metadata"]["resourceVersion"] for _, b in results]
        assert [c for c, _ in results] == [201, 200, 200] and rvs[0] == rvs[1] != rvs[2], results
        assert [a["changed"] for a in api.applies] == [True, False, True]

        leases = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
        lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "arbiter"}, "spec": {"holderIdentity": "one"}}
        code, created = call(api, "POST", leases, lease)
        assert code == 201 and call(api, "POST", leases, lease)[0] == 409
        created["spec"]["holderIdentity"] = "two"
        assert call(api, "PUT", leases + "/arbiter", created)[0] == 200
        code, body = call(api, "PUT", leases + "/arbiter", created)
        assert code == 409 and body["reason"] == "Conflict", body

        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "rc", "namespace": "ml"}, "spec": {"devices": {}}}
        api.add(claim)
        claim["spec"], claim["status"] = {"x": 1}, {"allocation": {}}
        code, body = call(api, "PUT", "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/rc"
                          "/status", claim)
        assert code == 200 and body["status"] == {"allocation": {}} and \
            body["spec"] == {"devices": {}}, body
        merge = "application/merge-patch+json"
        for method, path, body, ctype, code in [
                ("PATCH", cq, obj, APPLY_TYPE, 400),  # no fieldManager
                ("PATCH", cq + "?fieldManager=m", obj, merge, 415),
                ("PATCH", cq + "?fieldManager=m", {"kind": "Pod"}, APPLY_TYPE, 400),
                ("GET", "/api/v1/services", None, "", 404),
                ("DELETE", "/api/v1/nodes/n1", None, "", 405),
                ("GET", "/api/v1/namespaces/ml/pods/nope", None, "", 404),
                ("DELETE", "/api/v1/namespaces/ml/pods/nope", None, "", 404),
                ("GET", "/api/v1/pods?labelSelector=a+in+(b)", None, "", 400)]:
            assert call(api, method, path, body, ctype)[0] == code, (method, path, code)

        w = watch(api, "/api/v1/nodes?watch=1")
        assert next_event(w)["type"] == "ADDED"
        started = time.monotonic()
    assert next_event(w) is None and time.monotonic() - started < 1.0, "close() too slow"

    with KubeApi(token="s3cret", window=2) as api:
        code, body = call(api, "GET", "/api/v1/nodes")
        assert code == 401 and body["reason"] == "Unauthorized", body
        for n in ("n1", "n2", "n3"):
            api.add(api.node(n))
        assert len(call(api, "GET", "/api/v1/nodes", token="s3cret")[1]["items"]) == 3
        api.token = None  # window=2 keeps the events of n2 and n3 only
        assert next_event(watch(api, "/api/v1/nodes?watch=1&resourceVersion=1"))["object"][
            "code"] == 410
        w = watch(api, "/api/v1/nodes?watch=1&resourceVersion=2")
        assert next_event(w)["object"]["metadata"]["name"] == "n2"
        api.compact()  # open watches go on; new ones from before it get 410
        api.remove("Node", "n1")
        assert next_event(w)["object"]["metadata"]["name"] == "n3"
        assert next_event(w)["type"] == "DELETED"
        assert next_event(watch(api, "/api/v1/nodes?watch=1&resourceVersion=3"))["type"] == \
            "ERROR"
        api.compact_and_drop_watches()  # w ends; even a watch from the current version gets 410
        assert next_event(w) is None
        assert next_event(watch(api, "/api/v1/nodes?watch=1&resourceVersion=5"))["type"] == \
            "ERROR"
    for closable in opened:
        closable.close()
    print("ok")


if __name__ == "__main__":
    try:
        _self_test()
    except AssertionError:
        import traceback
        traceback.print_exc()
        sys.exit(1)
