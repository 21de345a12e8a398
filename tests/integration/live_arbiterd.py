"""A live arbiterd for the Python integration tests: a fresh database made
from the fixture's arbiter_template, arbiterd serving it in plaintext on a
loopback port, and the arbiter.v1 Python stubs generated from proto/ and
importable (Debian's protoc and grpc_python_plugin).

    with LiveArbiterd(arbiterd, source_dir, "py") as live:
        from arbiter.v1 import inventory_pb2_grpc
        stub = inventory_pb2_grpc.InventoryServiceStub(live.channel)

The DSN of the test PostgreSQL comes from ARBITER_TEST_PG_DSN_FILE.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import grpc

PROTOS = ("types.proto", "inventory.proto", "governance.proto", "allocation.proto",
          "telemetry.proto", "chargeback.proto", "ledger.proto")


class LiveArbiterd:
    def __init__(self, arbiterd, source_dir, prefix, extra_args=(), tls=False, log_args=None):
        """With tls, serves TLS with client certificates made by
        deploy/local/make-certs in `self.certs` (admin, alice, bob, carol,
        dave, erin; admin is the configured platform admin) and the channel
        acts as admin; otherwise plaintext on loopback. With log_args (e.g.
        ["--log-format", "json", "--log-level", "debug"]), arbiterd's
        stderr goes to the file `self.log`."""
        self.arbiterd = arbiterd
        self.tls = tls
        self.log_args = log_args
        self.source_dir = source_dir
        self.extra_args = list(extra_args)
        self.cluster_dsn = open(os.environ["ARBITER_TEST_PG_DSN_FILE"]).read().strip()
        self.db = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.work = tempfile.mkdtemp(prefix=f"arbiter-{prefix}-")
        self.certs = os.path.join(self.work, "certs")
        self.proc = None
        self.endpoint = None
        self.channel = None

    def _psql(self, sql, check=True):
        subprocess.run(["psql", "-Xq", self.cluster_dsn + " dbname=postgres", "-c", sql],
                       check=check)

    def _generate_stubs(self):
        protos = [os.path.join(self.source_dir, "proto/arbiter/v1", f) for f in PROTOS]
        subprocess.run(["protoc", "-I" + os.path.join(self.source_dir, "proto"),
                        "--python_out=" + self.work, "--grpc_out=" + self.work,
                        "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin"] + protos,
                       check=True)
        sys.path.insert(0, self.work)

    def __enter__(self):
        self._psql(f"CREATE DATABASE {self.db} TEMPLATE arbiter_template")
        try:
            self._generate_stubs()
            port_file = os.path.join(self.work, "port")
            security = ["--insecure-loopback"]
            if self.tls:
                subprocess.run([os.path.join(self.source_dir, "deploy/local/make-certs"),
                                self.certs, "admin", "alice", "bob", "carol", "dave", "erin"],
                               check=True, stdout=subprocess.DEVNULL)
                security = ["--tls-cert", f"{self.certs}/server.pem",
                            "--tls-key", f"{self.certs}/server.key",
                            "--tls-client-ca", f"{self.certs}/ca.pem",
                            "--admin", "spiffe://arbiter.local/admin"]
            self.log = os.path.join(self.work, "arbiterd.log")
            self.proc = subprocess.Popen(
                [self.arbiterd] + (self.log_args or ["--log-level", "warn"]) +
                ["serve", "--dsn", f"{self.cluster_dsn} dbname={self.db}",
                 "--listen", "127.0.0.1:0", "--port-file", port_file] + security + self.extra_args,
                stderr=open(self.log, "w") if self.log_args else None)
            for _ in range(600):
                if os.path.exists(port_file) and open(port_file).read().strip():
                    break
                if self.proc.poll() is not None:
                    raise SystemExit("arbiterd exited early")
                time.sleep(0.1)
            self.endpoint = "127.0.0.1:" + open(port_file).read().strip()
            self.channel = (self.secure_channel("admin") if self.tls
                            else grpc.insecure_channel(self.endpoint))
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def unreached_rpcs(self):
        """The RPCs declared in proto/arbiter/v1 that arbiterd's /metrics
        (started with --metrics-listen) shows no call of, whatever its code."""
        declared = set()
        proto_dir = os.path.join(self.source_dir, "proto/arbiter/v1")
        for name in PROTOS:
            text = open(os.path.join(proto_dir, name)).read()
            declared |= set(re.findall(r"^\s*rpc\s+(\w+)\s*\(", text, re.M))
        port = int(open(os.path.join(self.work, "port.metrics")).read())
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read()
        handled = set(re.findall(r'grpc_server_handled_total\{[^}]*grpc_method="(\w+)"'
                                 r'[^}]*grpc_service="arbiter\.v1\.', text.decode()))
        return declared - handled

    def secure_channel(self, principal):
        """A channel to the TLS server acting as `principal`."""
        def read(name):
            return open(os.path.join(self.certs, name), "rb").read()
        creds = grpc.ssl_channel_credentials(read("ca.pem"), read(f"{principal}.key"),
                                             read(f"{principal}.pem"))
        return grpc.secure_channel(self.endpoint, creds)

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
            self.proc = None
        self._psql(f"DROP DATABASE IF EXISTS {self.db} WITH (FORCE)", check=False)
        return False
