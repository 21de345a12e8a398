#!/usr/bin/python3
"""A real Slurm cluster on one machine, for tests and for trying arbiter-slurm
(docs/slurm.md): munged, a private MariaDB, slurmdbd, slurmctld and one
slurmd per node (several node names on this host, each on its own port),
all under one temporary directory and none as root. The GPUs are typed GRES
(gpu:h100:8, ...) backed by empty files: Slurm needs a File= per GPU to
count it, and nothing opens them.

As root, the daemons and the jobs run as Debian's `slurm` user (a slurmd
not run as root starts jobs only as its own user), and BRIDGE_USER
(`nobody`) is the one left for a bridge: made a Slurm operator
(AdminLevel=Admin: Slurm lets only administrators write admin comments) by operator_user(); otherwise all of it runs as the
calling user.

    with SlurmCluster(nodes=[("n1", "h100", 8), ("n2", "a100", 8)],
                      job_submit=".../deploy/slurm/job_submit.lua") as c:
        c.submit(["--account=research", "--gres=gpu:h100:2", "--wrap", "sleep 5"])
        c.slurm(["squeue"])

Usage: slurm_cluster.py start DIR | stop DIR   (keeps running between them)
"""
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.geteuid() == 0
DAEMON_USER = "slurm" if ROOT else pwd.getpwuid(os.geteuid()).pw_name
JOB_USER = DAEMON_USER
BRIDGE_USER = "nobody" if ROOT else DAEMON_USER


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def as_user(user, argv):
    if ROOT and user != "root":
        return ["runuser", "-u", user, "--"] + argv
    return argv


class SlurmCluster:
    def __init__(self, nodes, job_submit=None, work=None, cluster="arbtest", extra_conf=""):
        """`nodes`: (name, gpu type, count) per node. `job_submit`: the Lua
        plugin to install beside slurm.conf (None: none)."""
        self.nodes = nodes
        self.job_submit = job_submit
        self.cluster = cluster
        self.extra_conf = extra_conf
        self.work = work or tempfile.mkdtemp(prefix="arbiter-slurm-")
        self.conf = os.path.join(self.work, "etc", "slurm.conf")
        # Times as Unix seconds in the client tools' output (sacct's Start).
        self.env = dict(os.environ, SLURM_CONF=self.conf, SLURM_TIME_FORMAT="%s")
        self.procs = {}

    # Paths and commands.
    def path(self, *parts):
        return os.path.join(self.work, *parts)

    def slurm(self, argv, user=None, check=True, timeout=30):
        """Runs a Slurm client command (as the job user by default);
        returns its CompletedProcess (text)."""
        return subprocess.run(as_user(user or JOB_USER, argv), env=self.env, text=True,
                              capture_output=True, check=check, timeout=timeout)

    def operator_user(self, user):
        """Makes `user` a Slurm administrator (AdminLevel=Admin), as a bridge
        that is not the SlurmUser must be."""
        if user != DAEMON_USER:
            self.operator(["sacctmgr", "-i", "add", "user", user, "account=root",
                           "adminlevel=admin"])

    def operator(self, argv, check=True):
        return self.slurm(argv, user=DAEMON_USER, check=check)

    def submit(self, args, check=True):
        """sbatch as the job user in the work directory: the job id, or the
        CompletedProcess when the submission was refused and check is False."""
        out = self.slurm(["sbatch", "--parsable", "--chdir", self.path("jobs"),
                          "--output", self.path("jobs", "%j.out")] + args, check=False)
        if out.returncode != 0:
            if check:
                raise AssertionError(f"sbatch {args}: {out.stderr}")
            return out
        return int(out.stdout.strip().split(";")[0])

    def jobs(self):
        """squeue --json's jobs, by id."""
        doc = json.loads(self.operator(["squeue", "--json"]).stdout)
        return {j["job_id"]: j for j in doc["jobs"]}

    def sacct(self, job_ids, fields="JobID,State,ElapsedRaw,AllocTRES,Start,End"):
        out = self.operator(["sacct", "--noheader", "--parsable2", "--allocations",
                             "--jobs", ",".join(str(j) for j in job_ids),
                             "--format", fields]).stdout
        names = fields.split(",")
        return [dict(zip(names, line.split("|"))) for line in out.splitlines() if line]

    # Start and stop.
    def _write(self, name, text, mode=0o644):
        p = self.path("etc", name)
        with open(p, "w") as f:
            f.write(text)
        os.chmod(p, mode)
        if ROOT:
            shutil.chown(p, DAEMON_USER, DAEMON_USER)

    def _configure(self):
        for d in ("etc", "munge", "db", "log", "run", "spool/ctld", "dev", "jobs"):
            os.makedirs(self.path(d), exist_ok=True)
        for name, _, _ in self.nodes:
            os.makedirs(self.path("spool", "d", name), exist_ok=True)
        self.ports = {k: free_port() for k in ("ctld", "d", "dbd")}
        self.node_ports = {name: free_port() for name, _, _ in self.nodes}
        gpu_types = sorted({t for _, t, _ in self.nodes})
        node_lines, gres_lines = [], []
        for name, gpu_type, count in self.nodes:
            for i in range(count):
                open(self.path("dev", f"{name}-gpu{i}"), "w").close()
            node_lines.append(f"NodeName={name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                              f"Port={self.node_ports[name]} CPUs=16 RealMemory=64000 "
                              f"Gres=gpu:{gpu_type}:{count} State=UNKNOWN")
            gres_lines.append(f"NodeName={name} Name=gpu Type={gpu_type} "
                              f"File={self.path('dev', name)}-gpu[0-{count - 1}]")
        munge = self.path("munge", "munge.socket")
        node_names = ",".join(n for n, _, _ in self.nodes)
        self._write("slurm.conf", f"""# Written by tests/slurm/slurm_cluster.py.
ClusterName={self.cluster}
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort={self.ports['ctld']}
SlurmdPort={self.ports['d']}
SlurmUser={DAEMON_USER}
SlurmdUser={JOB_USER}
AuthType=auth/munge
AuthInfo=socket={munge}
CredType=cred/munge
StateSaveLocation={self.path('spool', 'ctld')}
SlurmdSpoolDir={self.path('spool', 'd')}/%n
SlurmctldPidFile={self.path('run', 'slurmctld.pid')}
SlurmdPidFile={self.path('run', 'slurmd-%n.pid')}
SlurmctldLogFile={self.path('log', 'slurmctld.log')}
SlurmdLogFile={self.path('log', 'slurmd-%n.log')}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort={self.ports['dbd']}
AccountingStoragePass={munge}
AccountingStorageTRES=gres/gpu,{','.join('gres/gpu:' + t for t in gpu_types)}
AccountingStorageEnforce=associations
JobCompType=jobcomp/none
MinJobAge=600
KillWait=5
{"JobSubmitPlugins=lua" if self.job_submit else ""}
{self.extra_conf}
{chr(10).join(node_lines)}
PartitionName=gpu Nodes={node_names} Default=YES MaxTime=INFINITE State=UP
""")
        self._write("gres.conf", "\n".join(gres_lines) + "\n")
        self._write("slurmdbd.conf", f"""AuthType=auth/munge
AuthInfo=socket={munge}
DbdHost=localhost
DbdPort={self.ports['dbd']}
SlurmUser={DAEMON_USER}
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={self.path('run', 'slurmdbd.pid')}
LogFile={self.path('log', 'slurmdbd.log')}
""", mode=0o600)
        if self.job_submit:
            shutil.copy(self.job_submit, self.path("etc", "job_submit.lua"))
        with open(self.path("munge", "munge.key"), "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(self.path("munge", "munge.key"), 0o400)
        if ROOT:
            subprocess.run(["chown", "-R", f"{DAEMON_USER}:", self.work], check=True)
            os.chmod(self.path("jobs"), 0o1777)
            os.chmod(self.path("etc"), 0o1777)  # The bridge writes its policy here.
            os.chmod(self.path("log"), 0o1777)
            os.chmod(self.path("run"), 0o1777)
        os.chmod(self.work, 0o755)
        os.chmod(self.path("munge"), 0o755)

    def _daemon(self, key, argv, user=None, env=None):
        log = open(self.path("log", f"{key}.stderr"), "w")
        self.procs[key] = subprocess.Popen(as_user(user or DAEMON_USER, argv),
                                           env=env or self.env, stdout=log, stderr=log)

    def _wait(self, what, check, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if check():
                return
            time.sleep(0.2)
        raise AssertionError(f"slurm cluster: timed out waiting for {what}; logs in "
                             f"{self.path('log')}")

    def start_slurmctld(self):
        self._daemon("slurmctld", ["slurmctld", "-D", "-f", self.conf])
        self._wait("slurmctld", lambda: self.operator(["scontrol", "ping"], check=False)
                   .stdout.find("UP") >= 0)

    def stop_slurmctld(self):
        self._stop("slurmctld")

    def start(self):
        self._configure()
        self._daemon("munged", ["munged", "-F", "--force", f"--key-file={self.path('munge', 'munge.key')}",
                                f"--socket={self.path('munge', 'munge.socket')}",
                                f"--pid-file={self.path('run', 'munged.pid')}",
                                f"--log-file={self.path('log', 'munged.log')}",
                                f"--seed-file={self.path('munge', 'seed')}"])
        self._wait("munged", lambda: os.path.exists(self.path("munge", "munge.socket")))
        subprocess.run(as_user(DAEMON_USER, [
            "mariadb-install-db", "--no-defaults", f"--datadir={self.path('db', 'data')}",
            "--auth-root-authentication-method=normal", "--skip-test-db"]),
            check=True, capture_output=True)
        db_socket = self.path("db", "mysqld.sock")
        self._daemon("mariadbd", [
            "mariadbd", "--no-defaults", f"--datadir={self.path('db', 'data')}",
            f"--socket={db_socket}", "--skip-networking",
            f"--pid-file={self.path('run', 'mariadb.pid')}", "--innodb-buffer-pool-size=64M",
            "--innodb-flush-log-at-trx-commit=2", "--skip-log-bin",
            f"--log-error={self.path('log', 'mariadb.log')}"])
        self._wait("mariadb", lambda: os.path.exists(db_socket))
        self._daemon("slurmdbd", ["slurmdbd", "-D"],
                     env=dict(self.env, MYSQL_UNIX_PORT=db_socket))
        self._wait("slurmdbd", lambda: self._port_open(self.ports["dbd"]))
        self.start_slurmctld()
        for name, _, _ in self.nodes:
            self._daemon(f"slurmd-{name}", ["slurmd", "-D", "-f", self.conf, "-N", name],
                         user=JOB_USER)
        self._wait("the nodes idle", self._nodes_idle)
        return self

    def _port_open(self, port):
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    def _nodes_idle(self):
        out = self.operator(["sinfo", "--noheader", "-N", "-o", "%N %t"], check=False).stdout
        states = dict(line.split() for line in out.splitlines() if line.strip())
        return len(states) == len(self.nodes) and all(s == "idle" for s in states.values())

    def _stop(self, key, timeout=15):
        proc = self.procs.pop(key, None)
        if proc is None:
            return
        if proc.poll() is None:
            # runuser passes the signal on to the daemon.
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self):
        for key in [k for k in self.procs if k.startswith("slurmd-")]:
            self._stop(key)
        for key in ("slurmctld", "slurmdbd", "mariadbd", "munged"):
            self._stop(key)
        # Whatever a daemon left behind (slurmstepd, a job's processes).
        subprocess.run(["pkill", "-TERM", "-f", self.work], capture_output=True)

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        if exc[0] is None and not os.environ.get("ARBITER_KEEP_SLURM"):
            shutil.rmtree(self.work, ignore_errors=True)


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("start", "stop"):
        sys.exit(__doc__.split("Usage:")[1])
    print("not yet: run it from Python", file=sys.stderr)


if __name__ == "__main__":
    main()
