#!/usr/bin/python3
"""Every RPC of arbiter.v1 is reachable from arbctl.

Runs arbctl commands that together call every RPC against a live arbiterd,
checks their output in each --output form (table, json, yaml, csv) where it
matters, then reads arbiterd's own /metrics: every RPC named in proto/ must
have been handled at least once, so an RPC added without an arbctl command
fails this test.

Usage: arbctl_every_rpc_test.py ARBITERD ARBCTL SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import csv
import io
import json
import os
import re
import select
import subprocess
import sys

import yaml

from live_arbiterd import LiveArbiterd

SPIFFE = "spiffe://arbiter.local/"


class Arbctl:
    def __init__(self, binary, live):
        self.binary, self.live = binary, live

    def base(self, principal="admin"):
        c = self.live.certs
        return [self.binary, "--endpoint", self.live.endpoint, "--tls-ca", f"{c}/ca.pem",
                "--tls-cert", f"{c}/{principal}.pem", "--tls-key", f"{c}/{principal}.key"]

    def __call__(self, *args, ok=True, output="table", principal="admin"):
        cmd = self.base(principal) + ["--output", output, *map(str, args)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if ok and r.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} -> {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r.stdout

    def json(self, *args):
        return json.loads(self(*args, output="json"))


def main():
    arbiterd, arbctl, src = sys.argv[1], sys.argv[2], sys.argv[3]
    with LiveArbiterd(arbiterd, src, "every", ["--metrics-listen", "127.0.0.1:0"],
                      tls=True) as live:
        a = Arbctl(arbctl, live)
        a("clusters", "create", "east", "--description", "the east region")
        a("pools", "create", "serving", "--class", "serving", "--lends-to", "batch_analytics",
          "--proactive-reclaim", "--cold-start", 120)
        a("pools", "create", "batch", "--class", "batch")
        a("inventory", "register", "h100-0", "--cluster", "east", "--pool", "serving",
          "--model", "H100-80GB", "--gpus", 8, "--uuid", "GPU-aaaa-0")
        a("inventory", "register", "a100-0", "--cluster", "east", "--pool", "batch",
          "--model", "A100-80GB", "--gpus", 8)
        # The shipped GPU catalog, twice: the second time changes nothing.
        catalog = os.path.join(src, "catalog/gpu-models.json")
        assert re.match(r"gpu models: [1-9]\d* set, \d+ unchanged", a("models", "apply", catalog))
        assert a("models", "apply", catalog).strip() == "gpu models: 0 set, 13 unchanged"
        assert "3g.90gb" in a("models", "list")
        # A spare node through its whole lifecycle, removed before any request.
        a("inventory", "register", "spare-0", "--cluster", "east", "--pool", "batch",
          "--model", "L4", "--gpus", 2)
        assert "is ready" in a("inventory", "heartbeat", "spare-0", "--cluster", "east")
        updated = a.json("inventory", "update", "spare-0", "--cluster", "east", "--pool", "batch",
                         "--model", "L4", "--gpus", 2, "--topology-domain", "rack-9")
        assert updated["node"]["topology_domain"] == "rack-9", updated
        assert "is cordoned" in a("inventory", "cordon", "spare-0", "--cluster", "east")
        assert "is ready" in a("inventory", "uncordon", "spare-0", "--cluster", "east")
        assert "nothing was allocated" in a("inventory", "drain", "spare-0", "--cluster", "east",
                                            "--grace", 60)
        assert "is failed" in a("inventory", "fail", "spare-0", "--cluster", "east", "--at", "-1m")
        listed = a("inventory", "list", "--pool", "batch")
        assert "spare-0" in listed and "failed" in listed, listed
        assert "removed node east/spare-0" in a("inventory", "remove", "spare-0", "--cluster",
                                                "east")
        a("teams", "create", "org")
        a("teams", "create", "inference", "--parent", "org", "--weight-milli", 2000)
        a("teams", "create", "training", "--parent", "org")
        a("quotas", "set", "inference", "serving", 6000, "--borrow-milli", 0)
        a("quotas", "set", "training", "batch", 8000, "--borrow-milli", -1, "--lend-milli", 4000)
        # A whole organisation from a file: what is in force is left as it is.
        org = os.path.join(live.work, "org.json")
        with open(org, "w") as f:
            json.dump({"teams": [{"name": "training", "parent": "org"},
                                 {"name": "research", "parent": "org"}],
                       "quotas": [{"team": "research", "pool": "batch", "nominalMilli": 2000}]}, f)
        out = a("org", "import", org)
        assert out.strip() == "teams: 1 created, 1 unchanged; quotas: 1 set, 0 unchanged", out
        again = a.json("org", "import", org)
        assert again.get("teams_unchanged") == "2" and again.get("quotas_unchanged") == "1", again
        assert not again.get("teams_created") and not again.get("quotas_set"), again
        a("coexistence", "set", "training", "inference", "--gpu", "forbidden", "--separate-nodes")
        a("roles", "grant", SPIFFE + "carol", "--role", "pool_authority", "--scope", "pool:batch")
        a("roles", "revoke", SPIFFE + "carol", "--role", "pool_authority", "--scope", "pool:batch")
        a("roles", "grant", SPIFFE + "carol", "--role", "pool_authority", "--scope", "pool:batch")
        a("authority", "set", "--pool", "batch", "--action", "large", "--approver",
          SPIFFE + "carol", "--threshold-milli", 4000)
        a("authority", "set", "--action", "long", "--approver", SPIFFE + "dave",
          "--threshold-seconds", 3600)
        a("authority", "remove", "--action", "long", "--approver", SPIFFE + "dave",
          "--threshold-seconds", 3600)
        a("delegate", SPIFFE + "erin", "--from", SPIFFE + "carol", "--until", "+2h",
          principal="carol")
        a("delegations", "revoke", SPIFFE + "erin", "--from", SPIFFE + "carol",
          principal="carol")
        a("prices", "set", "H100-80GB", "serving", 4_000_000)
        a("prices", "set", "A100-80GB", "batch", 2_000_000)
        a("budgets", "set", "training", "--soft-micros", 90_000_000_000, "--hard-micros",
          100_000_000_000)
        a("power", "set", "pool", "batch", 1_000_000)
        a("slo", "set", "inference", "chat-api", "--pool", "serving", "--p99-ms", 200)
        a("idle", "set-policy", "training", "--action", "report")

        granted = a.json("request", "--team", "inference", "--pool", "serving", "--class",
                         "inference", "--gpus", 2, "--key", "every-1")["request"]
        assert granted["state"] == "REQUEST_STATE_ADMITTED", granted
        big = a.json("request", "--team", "training", "--pool", "batch", "--gpus", 6,
                     "--key", "every-2")["request"]
        assert big["state"] == "REQUEST_STATE_PENDING_APPROVAL", big
        a("approve", big["id"], principal="carol")
        other = a.json("request", "--team", "training", "--pool", "batch", "--gpus", 5,
                       "--key", "every-3")["request"]
        a("deny", other["id"], "--reason", "not this week", principal="carol")
        a("requests", "get", granted["id"])
        claimed = a.json("claim", granted["id"], "--holder", "pod:every-1")["request"]
        assert [c["holder"] for c in claimed["claims"]] == ["pod:every-1"], claimed
        assert "claimed by pod:every-1" in a("renew", granted["id"], "--holder", "pod:every-1")
        r = subprocess.run(a.base() + ["claim", str(granted["id"]), "--holder", "pod:other"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode != 0 and "claimed by pod:every-1" in r.stderr, r.stderr
        a("release", big["id"])
        a("release", granted["id"])
        a("telemetry", "send", "--cluster", "east", "--node", "h100-0", "--uuid", "GPU-aaaa-0",
          "--util-milli", 730, "--memory-used-mib", 20000)
        a("latency", "report", "inference", "chat-api", "--start", "-10m", "--p50-ms", 80,
          "--p99-ms", 350, "--rps", 100)

        # Every list, in every output form that matters.
        for args in [("models", "list"), ("clusters", "list"), ("pools", "list"),
                     ("inventory", "list"), ("teams", "list"), ("quotas", "list"),
                     ("coexistence", "list"), ("roles", "list"), ("whoami",), ("authority", "list"),
                     ("delegations", "list"), ("prices", "list"), ("budgets", "list"),
                     ("power", "list"), ("pools", "forecast", "serving"),
                     ("slo", "list"), ("incidents", "list"), ("requests", "list"),
                     ("ledger", "list"), ("ledger", "checkpoints"), ("usage",),
                     ("idle", "list"), ("idle", "policies"), ("rightsize",)]:
            assert a(*args).strip(), args
            json.loads(a(*args, output="json"))
            yaml.safe_load(a(*args, output="yaml"))
        rows = list(csv.reader(io.StringIO(a("teams", "list", output="csv"))))
        names = {"org", "inference", "training", "research"}
        assert rows[0][0] == "TEAM" and {r[0] for r in rows[1:]} == names, rows
        teams = yaml.safe_load(a("teams", "list", output="yaml"))
        assert {t["name"] for t in teams["teams"]} == names, teams

        a("chargeback", "show", "--from", "-2h", "--to", "+1h")
        a("chargeback", "close", "--from", "-48h", "--to", "-24h")
        assert a("ledger", "verify").startswith("OK"), "ledger verify"
        kueue = list(yaml.safe_load_all(a("export", "kueue")))
        assert {d["kind"] for d in kueue} == {"ResourceFlavor", "Cohort", "ClusterQueue",
                                              "LocalQueue"}, kueue

        # A watch streams until interrupted: start it, make an event, stop it.
        watch = subprocess.Popen(a.base() + ["--output", "json", "watch", "--team", "inference"],
                                 stdout=subprocess.PIPE, text=True)
        try:
            line, made = "", set()
            for i in range(50):  # Until the watch has subscribed and seen one.
                made.add(a.json("request", "--team", "inference", "--pool", "serving", "--class",
                                "inference", "--gpus", 1, "--key", f"watch-{i}")["request"]["id"])
                if select.select([watch.stdout], [], [], 0.3)[0]:
                    line = watch.stdout.readline()
                    break
            event = json.loads(line)
            assert event["request"]["id"] in made, event
            assert event["type"] == "ALLOCATION_EVENT_TYPE_ADMITTED", event
        finally:
            watch.terminate()
            watch.wait(timeout=10)
        # Resumed from just before that event, filtered to its request: the
        # replay prints it first, with its revision.
        rev = int(event["revision"])
        watch = subprocess.Popen(a.base() + ["watch", "--request", str(event["request"]["id"]),
                                             "--from-revision", str(rev - 1)],
                                 stdout=subprocess.PIPE, text=True)
        try:
            assert select.select([watch.stdout], [], [], 30)[0], "no replayed event"
            line = watch.stdout.readline()
            assert line.startswith(f"rev {rev} ") and " admitted " in line, line
        finally:
            watch.terminate()
            watch.wait(timeout=10)
        ahead = subprocess.run(a.base() + ["watch", "--from-revision", str(10**12)],
                               capture_output=True, text=True, timeout=30)
        assert ahead.returncode != 0 and "OUT_OF_RANGE" in ahead.stderr, ahead.stderr
        assert "start_revision" in ahead.stderr, ahead.stderr
        bad_type = subprocess.run(a.base() + ["watch", "--type", "bogus"], capture_output=True,
                                  text=True, timeout=30)
        assert bad_type.returncode == 2 and "--type" in bad_type.stderr, bad_type.stderr

        # Bad values are refused naming the flag (or, for a window in the
        # past, the server's field), and nothing is written.
        written = (a("requests", "list", "--limit", 1000, output="csv"),
                   a("teams", "list", output="csv"), a("inventory", "list", output="csv"))
        req = ["request", "--team", "inference", "--pool", "serving", "--class", "inference"]
        for args, named in [
                (req + ["--gpus", 0], "--gpus"), (req + ["--members", 0], "--members"),
                (req + ["--milli", 0], "--milli"), (req + ["--milli", 1001], "--milli"),
                (req + ["--priority", 1001], "--priority"), (req + ["--cpu-milli", 0], "--cpu-milli"),
                (req + ["--checkpoint-seconds", -1], "--checkpoint-seconds"),
                (req + ["--start", "-2h", "--duration", "1h"], "start_time"),
                (req + ["--start", "-2h", "--duration", "3h"], "start_time"),
                (["teams", "create", "zero", "--weight-milli", 0], "--weight-milli"),
                (["quotas", "set", "inference", "serving", -1], "nominal_milli"),
                (["quotas", "set", "inference", "serving", 1000, "--borrow-milli", -2],
                 "--borrow-milli"),
                (["inventory", "register", "z", "--cluster", "east", "--pool", "serving",
                  "--model", "L4", "--gpus", 0], "--gpus"),
                (["inventory", "drain", "h100-0", "--cluster", "east", "--grace", -1],
                 "--grace"),
                (["inventory", "fail", "h100-0", "--cluster", "east", "--at", "+1h"],
                 "failed_at"),
                (["inventory", "cordon", "nowhere", "--cluster", "east"], "name"),
                (["requests", "get", 0], "id"), (["release", -1], "id"),
                (["requests", "list", "--limit", 0], "--limit"),
                (["telemetry", "send", "--cluster", "east", "--node", "h100-0", "--util-milli",
                  1001], "--util-milli"),
                (["idle", "set-policy", "training", "--action", "report", "--under-milli", 0],
                 "--under-milli")]:
            r = subprocess.run(a.base() + [str(x) for x in args], capture_output=True, text=True,
                               timeout=60)
            assert r.returncode != 0 and named in r.stderr, (args, r.returncode, r.stderr)
        assert written == (a("requests", "list", "--limit", 1000, output="csv"),
                           a("teams", "list", output="csv"),
                           a("inventory", "list", output="csv")), "a refused call wrote"

        # ~/.config/arbiter/config.toml: endpoint, certificates and a default team.
        home = os.path.join(live.work, "home")
        os.makedirs(os.path.join(home, ".config/arbiter"))
        c = live.certs
        with open(os.path.join(home, ".config/arbiter/config.toml"), "w") as f:
            f.write(f'endpoint = "{live.endpoint}"\ntls_ca = "{c}/ca.pem"\n'
                    f'tls_cert = "{c}/admin.pem"\ntls_key = "{c}/admin.key"\n'
                    f'team = "inference"\noutput = "json"\n')
        env = {"HOME": home, "PATH": os.environ["PATH"]}
        r = subprocess.run([arbctl, "request", "--pool", "serving", "--class", "inference",
                            "--gpus", "1"], capture_output=True, text=True, env=env, cwd=home,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["request"]["team"] == "inference", r.stdout

        # Shell completion: bash, and zsh through bashcompinit.
        script = a("completion", "bash")
        r = subprocess.run(["bash", "-c", script + '\nCOMP_WORDS=(arbctl export ""); '
                            'COMP_CWORD=2; _arbctl; echo "${COMPREPLY[@]}"'],
                           capture_output=True, text=True, timeout=30)
        assert r.stdout.split() == ["kueue", "--help"], r
        assert "bashcompinit" in a("completion", "zsh")

        missing = live.unreached_rpcs()
        assert not missing, f"RPCs no arbctl command reached: {sorted(missing)}"
        print("arbctl reached every RPC; table, json, yaml and csv parse")


if __name__ == "__main__":
    main()
