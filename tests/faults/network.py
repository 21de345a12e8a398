"""Network partitions for the fault scenarios, made on this machine only:
one network namespace per replica, joined to the host by a veth pair
(host 10.B.I.1, replica 10.B.I.2, with B and the names taken from this
process's id, so that two runs on one machine do not meet). PostgreSQL listens on the host ends;
clients reach each replica at its namespace's address. A partition drops
every packet in the replica's namespace (iptables DROP, both directions):
no reset, no link-down signal, the peers just stop hearing each other."""
import os
import subprocess


def sh(*argv, check=True):
    return subprocess.run(list(argv), check=check, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)


class Namespaces:
    def __init__(self, k):
        self.k = k
        self.prefix = f"af{os.getpid() % 100000}"
        self.octet = 100 + os.getpid() % 100
        self.names = [f"{self.prefix}-r{i}" for i in range(k)]
        self.network = f"10.{self.octet}.0.0/16"

    def host_ip(self, i):
        return f"10.{self.octet}.{i}.1"

    def replica_ip(self, i):
        return f"10.{self.octet}.{i}.2"

    def __enter__(self):
        self.teardown()
        for i, ns in enumerate(self.names):
            host, peer = f"{self.prefix}{i}h", f"{self.prefix}{i}n"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", ns)
            sh("ip", "addr", "add", f"{self.host_ip(i)}/24", "dev", host)
            sh("ip", "link", "set", host, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.replica_ip(i)}/24",
               "dev", peer)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", peer, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc):
        self.teardown()
        return False

    def teardown(self):
        for i, ns in enumerate(self.names):
            sh("ip", "link", "del", f"{self.prefix}{i}h", check=False)
            sh("ip", "netns", "del", ns, check=False)

    def cut(self, i):
        """Partitions replica i from PostgreSQL and from its clients."""
        for chain in ("INPUT", "OUTPUT"):
            sh("ip", "netns", "exec", self.names[i], "iptables", "-I", chain, "-j", "DROP")

    def heal(self, i):
        sh("ip", "netns", "exec", self.names[i], "iptables", "-F")
