"""PostgreSQL HA for the `patroni` fault scenario, built from Debian's own
packages: one etcd member (the DCS) and two Patroni nodes, a primary and a
synchronous standby, everything on 127.0.0.1 under one temporary directory.

arbiterd reaches the cluster through a multi-host connection string with
target_session_attrs=read-write, so after a failover libpq finds the new
primary by itself. docs/operations.md ("PostgreSQL failover") describes the
same setup for production.

As root, Patroni (and so PostgreSQL) runs as the `postgres` user: initdb
refuses root."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from cluster import PG_BIN, as_postgres, create_database, free_port

# Patroni's timing. The leader key lives `TTL` seconds in etcd; a standby
# promotes itself once it expired. loop_wait + 2 * retry_timeout <= ttl.
TTL_S, LOOP_WAIT_S, RETRY_TIMEOUT_S = 10, 1, 3

PATRONI_CONFIG = """\
scope: arbiter-faults
name: {name}
log:
  level: INFO
restapi:
  listen: 127.0.0.1:{rest_port}
  connect_address: 127.0.0.1:{rest_port}
etcd3:
  hosts: 127.0.0.1:{etcd_port}
bootstrap:
  dcs:
    ttl: {ttl}
    loop_wait: {loop_wait}
    retry_timeout: {retry_timeout}
    maximum_lag_on_failover: 1048576
    synchronous_mode: true
    postgresql:
      use_pg_rewind: true
      remove_data_directory_on_rewind_failure: true
      remove_data_directory_on_diverged_timelines: true
      parameters:
        max_connections: 200
        shared_buffers: 128MB
        wal_log_hints: 'on'
        synchronous_commit: 'on'
        max_wal_senders: 10
        max_replication_slots: 10
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication all 127.0.0.1/32 trust
    - host all all 127.0.0.1/32 trust
postgresql:
  listen: 127.0.0.1:{pg_port}
  connect_address: 127.0.0.1:{pg_port}
  data_dir: {dir}/data
  bin_dir: {bin_dir}
  pgpass: {dir}/pgpass
  authentication:
    superuser:
      username: postgres
      password: unused-trust-auth
    replication:
      username: postgres
      password: unused-trust-auth
    rewind:
      username: postgres
      password: unused-trust-auth
  parameters:
    unix_socket_directories: '{dir}'
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
"""


class Node:
    """One Patroni node: its PostgreSQL port, REST port and process."""

    def __init__(self, name, root, etcd_port):
        self.name = name
        self.dir = os.path.join(root, name)
        self.pg_port, self.rest_port = free_port(), free_port()
        self.log = os.path.join(root, f"{name}.log")
        self.proc = None
        os.makedirs(self.dir, mode=0o700)
        self.config = os.path.join(root, f"{name}.yml")
        with open(self.config, "w") as f:
            f.write(PATRONI_CONFIG.format(name=name, rest_port=self.rest_port,
                                          etcd_port=etcd_port, pg_port=self.pg_port,
                                          dir=self.dir, bin_dir=PG_BIN, ttl=TTL_S,
                                          loop_wait=LOOP_WAIT_S, retry_timeout=RETRY_TIMEOUT_S))
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres", "postgres")
            shutil.chown(self.config, "postgres", "postgres")

    def start(self):
        # Without the harness's PYTHONPATH: Patroni imports only its own.
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.proc = subprocess.Popen(as_postgres(["patroni", self.config]), env=env,
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.dir, "data", "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError):
            return None

    def lose(self):
        """The machine is gone: Patroni, the postmaster and every backend
        killed with SIGKILL, nothing flushed, nobody told."""
        pid = self.postmaster_pid()
        if self.alive():
            # Patroni runs in a session of its own (under runuser as root).
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if pid is not None:
            # Backends first (they would notice the postmaster's death only
            # at their next wait), then the postmaster.
            subprocess.run(["pkill", "-KILL", "-P", str(pid)], stderr=subprocess.DEVNULL)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop(self):
        if self.alive():
            # Patroni stops PostgreSQL (fast) and exits.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.lose()
        pid = self.postmaster_pid()
        if pid is not None:
            subprocess.run(as_postgres([f"{PG_BIN}/pg_ctl", "-D",
                                        os.path.join(self.dir, "data"), "-m", "immediate",
                                        "stop"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def status(self):
        """This node's view of the cluster (GET /cluster), or None."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.rest_port}/cluster",
                                        timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None


class PatroniCluster:
    """etcd plus two Patroni nodes. `dsn` names both nodes and asks libpq for
    the read-write one; `create_database` makes a migrated database."""

    def __init__(self, arbiterd, nodes=2):
        self.arbiterd = arbiterd
        self.root = tempfile.mkdtemp(prefix="arbiter-faults-patroni-")
        os.chmod(self.root, 0o755)
        self.etcd_port, self.etcd_peer_port = free_port(), free_port()
        self.etcd = None
        self.nodes = [Node(f"pg{i}", self.root, self.etcd_port) for i in range(nodes)]
        hosts = ",".join("127.0.0.1" for _ in self.nodes)
        ports = ",".join(str(n.pg_port) for n in self.nodes)
        self.dsn = (f"host={hosts} port={ports} user=postgres connect_timeout=2 "
                    "target_session_attrs=read-write")

    def __enter__(self):
        try:
            self._start_etcd()
            for node in self.nodes:
                node.start()
                # The first node bootstraps; the next ones clone from it.
                self.wait_healthy(members=self.nodes.index(node) + 1, timeout_s=120)
        except BaseException as e:
            self.__exit__(type(e), e, None)
            raise
        return self

    def __exit__(self, *exc):
        for node in self.nodes:
            node.stop()
        if self.etcd is not None and self.etcd.poll() is None:
            self.etcd.terminate()
            self.etcd.wait()
        if exc and exc[0] is not None:
            print(f"  the Patroni cluster's files and logs are kept in {self.root}")
        else:
            shutil.rmtree(self.root, ignore_errors=True)
        return False

    def _start_etcd(self):
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        self.etcd = subprocess.Popen(
            ["etcd", "--name", "dcs", "--data-dir", os.path.join(self.root, "etcd"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"dcs={peer}", "--initial-cluster-state", "new"],
            stdout=open(os.path.join(self.root, "etcd.log"), "a"), stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as r:
                    if json.load(r).get("health") == "true":
                        return
            except (OSError, ValueError):
                pass
            if self.etcd.poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"etcd did not start; see {self.root}/etcd.log")

    def members(self):
        """Patroni's member list from any node that answers, or []."""
        for node in self.nodes:
            if node.alive():
                status = node.status()
                if status is not None:
                    return status.get("members", [])
        return []

    def primary(self):
        """The node Patroni runs as the leader, or None."""
        for m in self.members():
            if m.get("role") == "leader" and m.get("state") == "running":
                return next(n for n in self.nodes if n.name == m["name"])
        return None

    def healthy(self, members):
        """A running leader and `members - 1` streaming standbys, one of them
        the synchronous standby (when there are any standbys)."""
        listed = self.members()
        leaders = [m for m in listed if m.get("role") == "leader" and m.get("state") == "running"]
        standbys = [m for m in listed if m.get("role") in ("replica", "sync_standby")
                    and m.get("state") in ("running", "streaming")]
        sync = [m for m in standbys if m.get("role") == "sync_standby"]
        return len(leaders) == 1 and len(standbys) == members - 1 and \
            (members == 1 or len(sync) == 1)

    def wait_healthy(self, members=None, timeout_s=120):
        members = len(self.nodes) if members is None else members
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.healthy(members):
                return
            time.sleep(0.5)
        raise RuntimeError(f"the Patroni cluster did not become healthy with {members} "
                           f"members; logs in {self.root}")

    def create_database(self, name):
        dsn = create_database(self.dsn, name)
        subprocess.run([self.arbiterd, "--log-level", "warn", "migrate", "--dsn", dsn],
                       check=True)
        return dsn

    def lose_primary(self):
        """Kills the primary's node (Patroni and PostgreSQL, SIGKILL); returns it."""
        primary = self.primary()
        if primary is None:
            raise RuntimeError("no primary to lose")
        primary.lose()
        return primary
