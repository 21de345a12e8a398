"""The restore drill of docs/operations.md ("Backup and restore"), run for
real: an arbiterd that signs ledger checkpoints takes a workload; its
database is backed up logically (pg_dump) and physically (pg_basebackup);
each backup is restored (pg_restore into a new database; a new PostgreSQL
started on the base backup) and served by a fresh arbiterd, and
`arbctl ledger verify --public-key` must say OK for the whole history,
ending at the original head. A restored copy with one ledger entry altered
must fail the same verification, so the drill can fail.

  restore_drill.py --arbiterd B --arbctl B --source DIR
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import psycopg2

from cluster import PG_BIN, PgCluster, Replica, as_postgres, create_database, free_port
import workload


def sh(argv, **kwargs):
    return subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kwargs)


def head(dsn):
    """(entries, hash of the last entry) of the ledger in `dsn`."""
    conn = psycopg2.connect(dsn)
    try:
        cur = conn.cursor()
        cur.execute("SELECT count(*), (SELECT hash FROM ledger ORDER BY seq DESC LIMIT 1)"
                    " FROM ledger")
        return cur.fetchone()
    finally:
        conn.close()


def verify(args, dsn, work, name, public_key):
    """Serves `dsn` with a fresh arbiterd; returns arbctl ledger verify's
    exit status and output."""
    replica = Replica(args.arbiterd, dsn, name, work, "2s")
    replica.start()
    try:
        out = subprocess.run([args.arbctl, "--endpoint", replica.endpoint, "ledger", "verify",
                              "--public-key", public_key], capture_output=True, text=True,
                             env=dict(os.environ, ARBITER_CONFIG=os.devnull))
        return out.returncode, (out.stdout + out.stderr).strip()
    finally:
        replica.stop()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arbiterd", required=True)
    parser.add_argument("--arbctl", required=True)
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="arbiter-restore-drill-")
    os.chmod(work, 0o755)
    key, public_key = os.path.join(work, "ledger.key"), os.path.join(work, "ledger.pub")
    sh(["openssl", "genpkey", "-algorithm", "ED25519", "-out", key])
    sh(["openssl", "pkey", "-in", key, "-pubout", "-out", public_key])
    failures = []
    with PgCluster(args.source, args.arbiterd) as pg:
        live = pg.create_database("live")
        # The workload, with a signed checkpoint every 50 entries.
        replica = Replica(args.arbiterd, live, "live", work, "2s",
                          extra_args=["--ledger-key", key, "--checkpoint-every", "50"])
        replica.start()
        try:
            workload.seed(replica.endpoint)
            history = workload.History()
            for w in workload.run_clients([replica.endpoint], 4, 60, history, 11,
                                          threading.Event()):
                w.join()
        finally:
            replica.stop()
        entries, last_hash = head(live)
        print(f"restore drill: {entries} ledger entries in the live database")

        # Logical backup and restore.
        dump = os.path.join(work, "arbiter.dump")
        sh([f"{PG_BIN}/pg_dump", "--format=custom", f"--file={dump}", live])
        restored = create_database(pg.dsn, "restored")
        tampered = create_database(pg.dsn, "tampered")
        sh([f"{PG_BIN}/pg_restore", "--exit-on-error", f"--dbname={restored}", dump])
        sh([f"{PG_BIN}/pg_restore", "--exit-on-error", f"--dbname={tampered}", dump])

        # Physical backup: a base backup with its WAL, started as a second
        # PostgreSQL on another port.
        base = os.path.join(work, "base")
        os.mkdir(base, 0o700)
        if os.geteuid() == 0:
            shutil.chown(base, "postgres", "postgres")
        host, port = re.search(r"host=(\S+) port=(\d+)", pg.dsn).groups()
        sh(as_postgres([f"{PG_BIN}/pg_basebackup", "-h", host, "-p", port, "-U", "postgres",
                        "-D", base, "-X", "stream", "--checkpoint=fast"]))
        base_port = free_port()
        sh(as_postgres([f"{PG_BIN}/pg_ctl", "-D", base, "-o", f"-p {base_port}", "-l",
                        os.path.join(base, "server.log"), "-w", "-t", "60", "start"]),
           stderr=subprocess.DEVNULL)
        try:
            physical = f"host={host} port={base_port} user=postgres dbname=live"
            for name, dsn in (("pg_dump", restored), ("pg_basebackup", physical)):
                got = head(dsn)
                code, out = verify(args, dsn, work, name, public_key)
                ok = code == 0 and out.startswith(f"OK: {entries} entries") and \
                    got == (entries, last_hash)
                print(f"  {name}: head {got[0]} entries, same hash {got[1] == last_hash}; "
                      f"ledger verify: {out.splitlines()[0] if out else code}: "
                      f"{'PASS' if ok else 'FAIL'}")
                if not ok:
                    failures.append(name)
        finally:
            sh(as_postgres([f"{PG_BIN}/pg_ctl", "-D", base, "-m", "immediate", "stop"]),
               stderr=subprocess.DEVNULL)

        # One altered entry in the middle of history: verification fails.
        conn = psycopg2.connect(tampered)
        conn.autocommit = True
        # An attacker with superuser rights: the append-only trigger is skipped.
        conn.cursor().execute("SET session_replication_role = replica")
        conn.cursor().execute("UPDATE ledger SET actor = 'someone-else' WHERE seq = %s",
                              (entries // 2,))
        conn.close()
        code, out = verify(args, tampered, work, "tampered", public_key)
        caught = code != 0
        print(f"  an altered entry: ledger verify exit {code}: "
              f"{out.splitlines()[0] if out else ''}: {'caught' if caught else 'MISSED'}")
        if not caught:
            failures.append("tampered")
    shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"restore drill: FAILED {' '.join(failures)}")
        return 1
    print("restore drill: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
