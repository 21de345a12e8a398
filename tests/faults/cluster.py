"""The system under test for the fault scenarios: a private PostgreSQL 15
cluster (tests/testing/pg_fixture) and K arbiterd replicas sharing one
database, each on a fixed loopback port so that a replica killed and started
again is found where it was.

Nothing here talks beyond 127.0.0.1 (and the network namespaces that
partition.py makes)."""
import os
import signal
import socket
import subprocess
import tempfile
import time

import psycopg2

PG_BIN = "/usr/lib/postgresql/15/bin"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_database(cluster_dsn, name, template=None):
    """CREATE DATABASE `name` (a plain identifier) on the cluster of
    `cluster_dsn` (a DSN without dbname); returns the new database's DSN."""
    conn = psycopg2.connect(cluster_dsn + " dbname=postgres")
    try:
        conn.autocommit = True
        conn.cursor().execute(f"CREATE DATABASE {name}" +
                              (f" TEMPLATE {template}" if template else ""))
    finally:
        conn.close()
    return f"{cluster_dsn} dbname={name}"


def as_postgres(argv):
    """argv run as the postgres user when we are root (initdb refuses root)."""
    return (["runuser", "-u", "postgres", "--"] + argv) if os.geteuid() == 0 else argv


class PgCluster:
    """A throwaway PostgreSQL with the migrated template `arbiter_template`."""

    def __init__(self, source_dir, arbiterd):
        self.source_dir, self.arbiterd = source_dir, arbiterd
        self.fixture = tempfile.mkdtemp(prefix="arbiter-faults-pg-")

    def __enter__(self):
        subprocess.run([os.path.join(self.source_dir, "tests/testing/pg_fixture"), "start",
                        self.fixture, self.arbiterd], check=True, stdout=subprocess.DEVNULL)
        self.dsn = open(os.path.join(self.fixture, "dsn")).read().strip()
        self.data = os.path.join(open(os.path.join(self.fixture, "cluster")).read().strip(),
                                 "data")
        return self

    def __exit__(self, *exc):
        subprocess.run([os.path.join(self.source_dir, "tests/testing/pg_fixture"), "stop",
                        self.fixture], stdout=subprocess.DEVNULL)
        return False

    def create_database(self, name):
        return create_database(self.dsn, name, template="arbiter_template")

    def listen_also(self, addresses, network):
        """Listens on `addresses` too, and trusts `network` (CIDR)."""
        with open(os.path.join(self.data, "postgresql.conf"), "a") as conf:
            conf.write(f"listen_addresses = '{','.join(['127.0.0.1'] + addresses)}'\n")
        with open(os.path.join(self.data, "pg_hba.conf"), "a") as hba:
            hba.write(f"host all all {network} trust\n")
        subprocess.run(as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "fast", "-w",
                                    "-t", "60", "restart"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def restart_immediate(self):
        """pg_ctl restart -m immediate: every connection drops, no checkpoint."""
        subprocess.run(as_postgres([f"{PG_BIN}/pg_ctl", "-D", self.data, "-m", "immediate",
                                    "-w", "-t", "60", "restart"]),
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class Replica:
    def __init__(self, arbiterd, dsn, name, work, lease_ttl, host="127.0.0.1", netns=None,
                 certs=None, extra_args=()):
        self.arbiterd, self.dsn, self.name = arbiterd, dsn, name
        self.extra_args = list(extra_args)
        self.certs = certs
        self.host = host
        self.port = free_port()
        self.endpoint = f"{host}:{self.port}"
        self.work, self.lease_ttl, self.netns = work, lease_ttl, netns
        self.log = os.path.join(work, f"{name}.log")
        self.proc = None
        self.stopped = False  # SIGSTOPped.

    def start(self):
        port_file = os.path.join(self.work, f"{self.name}.port")
        if os.path.exists(port_file):
            os.remove(port_file)
        security = ["--insecure-loopback"]
        if self.certs:
            security = ["--tls-cert", f"{self.certs}/server.pem",
                        "--tls-key", f"{self.certs}/server.key",
                        "--tls-client-ca", f"{self.certs}/ca.pem",
                        "--admin", "spiffe://arbiter.local/admin"]
        argv = [self.arbiterd, "--log-level", "info", "serve", "--dsn", self.dsn] + security + [
                "--listen", self.endpoint, "--port-file", port_file,
                "--replica-name", self.name, "--lease-ttl", self.lease_ttl,
                "--rollup-every", "0"] + self.extra_args
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "a"))
        for _ in range(300):
            if os.path.exists(port_file) and open(port_file).read().strip():
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited early; see {self.log}")
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start; see {self.log}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.stopped = False

    def stop(self):
        if not self.alive():
            return
        if self.stopped:
            self.resume()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill9()


class Replicas:
    """K replicas of one database."""

    def __init__(self, arbiterd, dsn, k, lease_ttl="2s", namespaces=None, certs=None):
        """With `namespaces` (network.Namespaces), replica I runs in its
        namespace, reaches PostgreSQL at the namespace's host address and
        serves TLS (certificates in `certs`) on its own address."""
        self.dsn = dsn
        self.work = tempfile.mkdtemp(prefix="arbiter-faults-")
        self.members = []
        for i in range(k):
            if namespaces is None:
                self.members.append(Replica(arbiterd, dsn, f"r{i}", self.work, lease_ttl))
                continue
            replica_dsn = dsn.replace("host=127.0.0.1", f"host={namespaces.host_ip(i)}")
            self.members.append(Replica(arbiterd, replica_dsn, f"r{i}", self.work, lease_ttl,
                                        host=namespaces.replica_ip(i),
                                        netns=namespaces.names[i], certs=certs))

    def __enter__(self):
        for r in self.members:
            r.start()
        return self

    def __exit__(self, *exc):
        for r in self.members:
            r.stop()
        return False

    def endpoints(self):
        return [r.endpoint for r in self.members]

    def lease(self):
        """(epoch, holder, lease expired?) as stored; None when unreadable."""
        try:
            conn = psycopg2.connect(self.dsn, connect_timeout=2)
        except psycopg2.Error:
            return None
        try:
            cur = conn.cursor()
            cur.execute("SELECT epoch, holder, lease_until < now() FROM leader_lease")
            return cur.fetchone()
        except psycopg2.Error:
            return None
        finally:
            conn.close()

    def leader(self):
        """The replica named by the lease, or None."""
        lease = self.lease()
        if lease is None:
            return None
        for r in self.members:
            if r.name == lease[1]:
                return r
        return None
