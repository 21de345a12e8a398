#!/usr/bin/python3
"""Every flag of every arbctl command, with bad values (issue 28).

The commands, their flags and positionals, and each one's type are read from
arbctl itself: `arbctl --help`, then `--help` of every subcommand, down to
the leaves. Nothing here lists flags, so a flag added later is covered without
a new case. The global flags (--endpoint, --tls-*, --output, --timeout, ...)
are covered once, at the root.

Each value a flag takes gets bad values by its type, as CLI11 shows it:
  INT            0 where the range excludes it, one past each end of the
                 range, -1, 2^63, "x", "" and "010" (octal to strtoll)
  TEXT           "", "a\\x01b" (a control character), 5000 characters
  TEXT:{a,b}     an unknown choice as well
  a time         (RFC 3339 or a duration in its help) garbage; --to before
                 --from; and the windows in WINDOWS, ended or in the future
  a switch       --flag=maybe
Each case runs one otherwise valid invocation of its command (BASES, the one
hand-written table: a command without an entry fails the test, named) with
one value replaced, and asserts: a non-zero exit, a message naming the flag
(or the field of the request it fills, where arbiterd refuses it: FIELDS),
and nothing written: the row count of every table and the ledger's head are
the same after the case as before. At the end each base invocation runs as
written and must succeed, so the cases differ from a valid call in the one
value only.

Usage: arbctl_flags_test.py ARBITERD ARBCTL SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE;
ARBCTL_FLAGS_TRACE=1 prints each case as it runs)
"""
import collections
import json
import os
import re
import subprocess
import sys
import time

import psycopg2

from live_arbiterd import LiveArbiterd

SPIFFE = "spiffe://arbiter.local/"

# One valid invocation of every command: (positionals in --help's order,
# options). The placeholders are filled in by setup(). The root's entry is
# the command the global flags are tried on: one that writes, so a global
# value accepted by mistake shows as a row. Run in this order at the end,
# each must succeed.
BASES = {
    (): (["clusters", "create", "root-probe"], []),
    ("models", "list"): ([], []),
    ("models", "apply"): (["{catalog}"], []),
    ("clusters", "list"): ([], []),
    ("clusters", "create"): (["west"], ["--description", "the west region"]),
    ("pools", "list"): ([], []),
    ("pools", "create"): (["serving-2"], ["--class", "serving", "--lends-to", "batch_analytics",
                                          "--description", "more serving",
                                          "--queueing", "strict", "--starvation-limit", "600",
                                          "--claim-deadline", "600", "--lease", "600",
                                          "--class-rule", "training=borrow", "--spot-grace", "0",
                                          "--headroom", "H100-80GB=1000", "--max-burst", "600",
                                          "--reclaim-grace", "60", "--proactive-reclaim",
                                          "--cold-start", "120"]),
    ("pools", "forecast"): (["serving-2"], ["--hours", "6"]),
    ("roles", "list"): ([], []),
    ("whoami",): ([], []),
    ("roles", "grant"): ([SPIFFE + "dave"], ["--role", "auditor", "--scope", "org"]),
    ("roles", "revoke"): ([SPIFFE + "dave"], ["--role", "auditor", "--scope", "org"]),
    ("inventory", "list"): ([], ["--cluster", "east", "--pool", "batch"]),
    ("inventory", "register"): (["l4-0"], ["--cluster", "east", "--pool", "batch", "--model", "L4",
                                           "--gpus", "2", "--cpu-milli", "64000",
                                           "--memory-mib", "512000", "--topology-domain",
                                           "rack-1", "--uuid", "GPU-l4-0"]),
    ("inventory", "update"): (["spare-0"], ["--cluster", "east", "--pool", "batch",
                                            "--model", "L4", "--gpus", "2", "--cpu-milli", "64000",
                                            "--memory-mib", "512000", "--topology-domain",
                                            "rack-2", "--uuid", "GPU-spare-0"]),
    ("inventory", "cordon"): (["spare-0"], ["--cluster", "east"]),
    ("inventory", "uncordon"): (["spare-0"], ["--cluster", "east"]),
    ("inventory", "drain"): (["spare-0"], ["--cluster", "east", "--grace", "60"]),
    ("inventory", "fail"): (["spare-0"], ["--cluster", "east", "--at", "-1m"]),
    ("inventory", "remove"): (["spare-0"], ["--cluster", "east"]),
    ("inventory", "heartbeat"): (["a100-0"], ["--cluster", "east"]),
    ("teams", "list"): ([], []),
    ("teams", "create"): (["research"], ["--parent", "org", "--weight-milli", "1500"]),
    ("quotas", "list"): ([], ["--team", "inference"]),
    ("quotas", "set"): (["research", "batch", "2000"], ["--gpu-model", "A100-80GB",
                                                        "--borrow-milli", "1000",
                                                        "--lend-milli", "1000"]),
    ("org", "import"): (["{org}"], []),
    ("coexistence", "list"): ([], []),
    ("coexistence", "set"): (["training", "inference"], ["--gpu", "forbidden",
                                                         "--separate-nodes"]),
    ("request",): ([], ["--team", "inference", "--pool", "serving", "--class", "inference",
                        "--members", "1", "--gpus", "1", "--cpu-milli", "1000",
                        "--memory-mib", "1024", "--model", "H100-80GB", "--description",
                        "a job", "--priority", "10", "--checkpoint-seconds", "60",
                        "--checkpoint-every", "600", "--start", "+1h", "--duration", "1h"]),
    ("requests", "list"): ([], ["--team", "inference", "--state", "admitted", "--limit", "10"]),
    ("requests", "get"): (["{admitted}"], []),
    ("claim",): (["{admitted}"], ["--holder", "pod:flags/one", "--member", "0"]),
    ("renew",): (["{admitted}"], ["--holder", "pod:flags/one"]),
    ("release",): (["{admitted}"], []),
    ("watch",): ([], ["--team", "inference", "--pool", "serving", "--cluster", "east",
                      "--node", "h100-0", "--request", "{admitted}", "--type", "admitted",
                      "--from-revision", "0"]),
    ("approve",): (["{pending}"], []),
    ("deny",): (["{pending2}"], ["--reason", "not this week"]),
    ("delegate",): ([SPIFFE + "erin"], ["--from", SPIFFE + "admin", "--until", "+2h"]),
    ("delegations", "list"): ([], []),
    ("delegations", "revoke"): ([SPIFFE + "erin"], ["--from", SPIFFE + "admin"]),
    ("authority", "list"): ([], []),
    ("authority", "set"): ([], ["--pool", "batch", "--action", "long", "--approver",
                                SPIFFE + "dave", "--threshold-seconds", "3600"]),
    ("authority", "remove"): ([], ["--pool", "batch", "--action", "long", "--approver",
                                   SPIFFE + "dave", "--threshold-seconds", "3600"]),
    ("prices", "list"): ([], ["--at", "+1h"]),
    ("prices", "set"): (["A100-80GB", "batch", "2000000"], ["--from", "+1h"]),
    ("budgets", "list"): ([], []),
    ("power", "list"): ([], []),
    ("power", "set"): (["pool", "batch", "500000"], ["--reclaim"]),
    ("budgets", "set"): (["training"], ["--soft-micros", "90000000000",
                                        "--hard-micros", "100000000000", "--over", "approval"]),
    ("ledger", "list"): ([], ["--after", "0", "--limit", "10", "--subject", "team/org"]),
    ("ledger", "verify"): ([], []),
    ("ledger", "checkpoints"): ([], []),
    ("slo", "set"): (["inference", "chat-api"], ["--pool", "serving", "--p99-ms", "200",
                                                 "--window-seconds", "300",
                                                 "--penalty-micros-per-minute", "1000"]),
    ("slo", "list"): ([], ["--team", "inference"]),
    ("latency", "report"): (["inference", "chat-api"], ["--start", "-10m",
                                                        "--window-seconds", "300", "--p50-ms", "80",
                                                        "--p99-ms", "150", "--rps", "100"]),
    ("incidents", "list"): ([], ["--from", "-24h", "--to", "+0s", "--team", "inference"]),
    ("chargeback", "show"): ([], ["--from", "-2h", "--to", "+0s", "--team", "inference",
                                  "--format", "csv", "--output", "{work}/statement.csv"]),
    ("chargeback", "close"): ([], ["--from", "-48h", "--to", "-24h"]),
    ("usage",): ([], ["--from", "-2h", "--to", "+0s", "--team", "inference"]),
    ("rightsize",): ([], ["--from", "-2h", "--to", "+0s", "--team", "inference"]),
    ("idle", "list"): ([], []),
    ("idle", "policies"): ([], []),
    ("idle", "set-policy"): (["training"], ["--action", "notify", "--under-milli", "50",
                                            "--for-seconds", "3600", "--notice-seconds", "900"]),
    ("export", "kueue"): ([], ["--queue-name", "gpu"]),
    ("telemetry", "send"): ([], ["--cluster", "east", "--node", "h100-0", "--gpu", "0",
                                 "--util-milli", "500", "--memory-used-mib", "1000",
                                 "--power-mw", "300000", "--interval-seconds", "10",
                                 "--pod", "chat-0", "--namespace", "inference"]),
    ("demo", "load"): ([], []),
    ("completion",): (["bash"], []),
}

# Generated bad values that are valid for one flag, and why:
# (command, flag) -> {value: why}.
CLEARS = "clears the configured certificate (readme_tour: --tls-cert \"\" --tls-key \"\")"
ALLOWED = {
    ((), "--tls-ca"): {"": CLEARS},
    ((), "--tls-cert"): {"": CLEARS},
    ((), "--tls-key"): {"": CLEARS},
}

# Where arbiterd, not arbctl, refuses a value (a window in the past, say),
# its message names the field of the request, e.g. "period.to: ...": the
# flag's name with '_' for '-' counts, and so do these fields it fills.
FIELDS = {
    "--start": ("start_time",),
    "--at": ("failed_at",),
    "--until": ("expires_at",),
}

# Windows that parse but are wrong: (command, flag) -> [(value, other
# options that make the window)].
WINDOWS = {
    ("request",): {"--start": [("-3h", ["--duration", "1h"]),  # ended two hours ago
                               ("-2h", [])]},  # more than five minutes past
    ("inventory", "fail"): {"--at": [("+1h", [])]},  # a failure in the future
    ("delegate",): {"--until": [("-1h", [])]},  # a delegation that has expired
    ("latency", "report"): {"--start": [("+1h", [])]},  # a window not yet begun
    ("chargeback", "close"): {"--to": [("+2h", ["--from", "+1h"])]},  # a period not yet over
}

# Tables arbiterd writes on its own (the leader's lease, usage rollups): not
# compared.
BACKGROUND_TABLES = {"leader_lease", "usage_hourly", "usage_team_hourly", "usage_progress",
                     "schema_migrations"}

OPTION_LINE = re.compile(r"^  (\S.*?)(?:\s{2,}(.*))?$")
SECTIONS = ("Positionals:", "Options:", "Subcommands:")


class Param:
    """A flag or positional as `--help` shows it."""

    def __init__(self, path, spec, desc):
        head, _, rest = spec.partition(" ")
        # CLI11 appends the flags it needs or excludes ("--archive TEXT:DIR
        # Excludes: --from-checkpoint"): not part of the type.
        rest = re.sub(r"\s*\b(?:Needs|Excludes):.*$", "", rest)
        self.path, self.desc = path, desc or ""
        self.names = head.split(",")
        self.positional = not head.startswith("-")
        self.name = self.names[-1]
        self.switch = rest == ""
        self.type = re.match(r"[A-Z]*", rest).group(0)
        self.required = "REQUIRED" in rest
        m = re.search(r"in \[(-?\d+) - (-?\d+)\]", rest)
        self.range = (int(m.group(1)), int(m.group(2))) if m else None
        self.positive = ":POSITIVE" in rest
        self.nonnegative = ":NONNEGATIVE" in rest
        m = re.search(r"\{([^}]*)\}", rest)
        self.choices = m.group(1).split(",") if m else None
        # A text whose help starts with its choices, "a, b or c": an enum
        # arbctl or arbiterd checks, though CLI11 shows no {a,b,c}.
        word = r"[a-z_-]+(?: \(default\))?"
        m = re.match(rf"((?:{word}, )*{word},? or {word}|(?:{word}, )+{word})(?=$|: |; | \()",
                     self.desc)
        if m and not self.choices and self.type == "TEXT":
            self.choices = re.split(r"(?: \(default\))?(?:,? or |, )", m.group(1))
        self.time = bool(re.search(r"RFC 3339|duration", self.desc + " " + self.name))

    def __repr__(self):
        return f"{' '.join(self.path)} {self.name} {self.type} {self.choices}"

    def bad_values(self):
        """The values to try, each with the other options it needs."""
        if self.switch:
            return [("maybe", [])]
        values = []
        assert self.type in ("INT", "UINT", "TEXT"), f"{self}: no bad values for {self.type}"
        if self.type in ("INT", "UINT"):
            lo, hi = self.range or (None, None)
            if self.positive:
                lo = 1
            if self.nonnegative:
                lo = 0
            if lo is not None:
                values += [str(lo - 1)]
            if hi is not None:
                values += [str(hi + 1)]
            if lo is None or lo > -1:
                values += ["-1"]
            if lo is None or lo > 0:
                values += ["0"]
            values += [str(2**63), "x", "", "010"]
        else:
            values += ["", "a\x01b", "v" * 5000]
            if self.choices:
                values += ["no-such-choice"]
            if self.time:
                values += ["yesterday", "+2 parsecs", "-"]
        return [(v, []) for v in dict.fromkeys(values)]


def read_help(arbctl, path):
    """The flags and positionals of `arbctl PATH`, and its subcommands."""
    r = subprocess.run([arbctl, *path, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, (path, r.stderr)
    entries, subs, section = [], [], None
    for line in r.stdout.splitlines():
        if line in SECTIONS:
            section = line
            continue
        if not line.startswith("  "):
            section = None
        elif line.startswith("   "):  # a description continued, or on its own line
            if entries and section != "Subcommands:":
                entries[-1][1] = (entries[-1][1] + " " + line.strip()).strip()
        elif section == "Subcommands:":
            subs.append(OPTION_LINE.match(line).group(1))
        elif section is not None:
            spec, desc = OPTION_LINE.match(line).groups()
            entries.append([spec, desc or ""])
    params = [Param(path, spec, desc) for spec, desc in entries if spec != "-h,--help"]
    return params, subs


def discover(arbctl):
    """{command path: [Param]} for the root and every leaf command."""
    found, todo = {}, [()]
    while todo:
        path = todo.pop(0)
        params, subs = read_help(arbctl, path)
        if path == () or not subs:
            found[path] = params
        else:
            assert not params, f"arbctl {' '.join(path)}: flags on a group ({params[0].name})"
        todo += [path + (s,) for s in subs]
    return found


class Database:
    """Row counts of every table arbctl may write, and the ledger's head."""

    def __init__(self, dsn):
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True
        with self.conn.cursor() as cur:
            cur.execute("SELECT table_name FROM information_schema.tables "
                        "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY 1")
            # The usage tables' monthly partitions are theirs (migrations 0033
            # and 0039).
            self.tables = [t for (t,) in cur.fetchall()
                           if t not in BACKGROUND_TABLES
                           and not t.startswith(("usage_hourly", "usage_team_hourly"))]
        counts = ", ".join(f"(SELECT count(*) FROM {t})" for t in self.tables)
        self.sql = (f"SELECT {counts}, (SELECT coalesce(max(seq), 0) FROM ledger), "
                    f"(SELECT hash FROM ledger ORDER BY seq DESC LIMIT 1)")

    def snapshot(self):
        with self.conn.cursor() as cur:
            cur.execute(self.sql)
            row = cur.fetchone()
        return dict(zip(self.tables + ["ledger head seq", "ledger head hash"], row))


class Arbctl:
    def __init__(self, binary, live):
        self.binary, self.live = binary, live
        c = live.certs
        self.globals = ["--endpoint", live.endpoint, "--tls-ca", f"{c}/ca.pem",
                        "--tls-cert", f"{c}/admin.pem", "--tls-key", f"{c}/admin.key"]

    def run(self, args, globals_=None, timeout=30):
        cmd = [self.binary] + (self.globals if globals_ is None else globals_) + list(args)
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=self.live.work)
        except subprocess.TimeoutExpired as e:  # a watch that was accepted
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or ""
            return subprocess.CompletedProcess(cmd, 0, out, "timed out")

    def __call__(self, *args):
        r = self.run(["--output", "json", *map(str, args)])
        assert r.returncode == 0, (args, r.stdout, r.stderr)
        return json.loads(r.stdout) if r.stdout.strip().startswith("{") else r.stdout


def setup(a, live, src):
    """The objects the base invocations name; returns the placeholders."""
    a("clusters", "create", "east")
    a("pools", "create", "serving", "--class", "serving")
    a("pools", "create", "batch", "--class", "batch")
    a("inventory", "register", "h100-0", "--cluster", "east", "--pool", "serving",
      "--model", "H100-80GB", "--gpus", 8)
    a("inventory", "register", "a100-0", "--cluster", "east", "--pool", "batch",
      "--model", "A100-80GB", "--gpus", 8)
    a("inventory", "register", "spare-0", "--cluster", "east", "--pool", "batch",
      "--model", "L4", "--gpus", 2, "--uuid", "GPU-spare-0")
    a("teams", "create", "org")
    a("teams", "create", "inference", "--parent", "org")
    a("teams", "create", "training", "--parent", "org")
    a("quotas", "set", "inference", "serving", 8000)
    a("quotas", "set", "training", "batch", 8000)
    a("roles", "grant", SPIFFE + "dave", "--role", "pool_authority", "--scope", "pool:batch")
    a("authority", "set", "--pool", "batch", "--action", "large", "--approver", SPIFFE + "admin",
      "--threshold-milli", 4000)
    a("prices", "set", "H100-80GB", "serving", 4_000_000)
    a("slo", "set", "inference", "chat-api", "--pool", "serving", "--p99-ms", 200)
    admitted = a("request", "--team", "inference", "--pool", "serving", "--class", "inference",
                 "--gpus", 1, "--key", "setup-1")["request"]
    assert admitted["state"] == "REQUEST_STATE_ADMITTED", admitted
    pending = [a("request", "--team", "training", "--pool", "batch", "--gpus", 6,
                 "--key", f"setup-{i}")["request"] for i in (2, 3)]
    assert all(p["state"] == "REQUEST_STATE_PENDING_APPROVAL" for p in pending), pending
    org = os.path.join(live.work, "org.json")
    with open(org, "w") as f:
        json.dump({"teams": [{"name": "ops", "parent": "org"}]}, f)
    return {"admitted": admitted["id"], "pending": pending[0]["id"], "pending2": pending[1]["id"],
            "catalog": os.path.join(src, "catalog/gpu-models.json"), "org": org,
            "work": live.work}


def fill(values, placeholders):
    return [v.format(**placeholders) for v in values]


def invocation(path, params, base, param, value, extra):
    """The base invocation of `path` with `param` set to `value`."""
    positionals, options = list(base[0]), list(base[1])
    for i in range(0, len(extra), 2):  # the window's other end, replaced or added
        if extra[i] in options:
            options[options.index(extra[i]) + 1] = extra[i + 1]
        else:
            options += extra[i:i + 2]
    if param.positional:
        index = [p.name for p in params if p.positional].index(param.name)
        positionals[index] = value
    else:
        names = [n for n in param.names if n in options]
        if param.switch:
            options = [o for o in options if o not in names] + [f"{param.name}={value}"]
        elif names:
            options[options.index(names[0]) + 1] = value
        else:
            options += [param.name, value]
    return list(path) + options + (["--"] + positionals if positionals else [])


def names_flag(param, output):
    """Whether `output` names the flag: "--gpus", or for a positional its name
    as a word; or, in arbiterd's words, the request's field it fills."""
    if param.positional:
        return re.search(rf"(^|\W){re.escape(param.name)}\b", output) is not None
    if param.name in output:
        return True
    fields = (param.name.lstrip("-").replace("-", "_"),) + FIELDS.get(param.name, ())
    return any(re.search(rf"(^|[\s.]){f}(\[\d+\])?: ", output) for f in fields)


def main():
    arbiterd, arbctl, src = (os.path.abspath(p) for p in sys.argv[1:4])
    started = time.monotonic()
    commands = discover(arbctl)
    unbased = sorted(" ".join(p) for p in commands if p not in BASES)
    assert not unbased, f"commands with no base invocation in BASES: {unbased}"
    stale = sorted(" ".join(p) for p in BASES if p not in commands)
    assert not stale, f"BASES names commands arbctl does not have: {stale}"

    with LiveArbiterd(arbiterd, src, "flags", tls=True) as live:
        a = Arbctl(arbctl, live)
        placeholders = setup(a, live, src)
        db = Database(f"{live.cluster_dsn} dbname={live.db}")
        failures, per_command, covered, discovered = [], collections.Counter(), set(), set()
        before = db.snapshot()
        for path, params in commands.items():
            base = (fill(BASES[path][0], placeholders), fill(BASES[path][1], placeholders))
            for param in params:
                discovered.add((path, param.name))
                cases = param.bad_values()
                cases += WINDOWS.get(path, {}).get(param.name, [])
                if param.name == "--to" and param.time and any(
                        p.name == "--from" and p.time for p in params):
                    cases += [("-2h", ["--from", "-1h"])]  # a period that ends before it starts
                for value, extra in cases:
                    if value in ALLOWED.get((path, param.name), {}):  # valid there
                        continue
                    if path == ():  # a global flag: on the root's command
                        g = list(a.globals)
                        if param.switch:
                            g = [f"{param.name}={value}"] + g
                        elif param.name in g:
                            g[g.index(param.name) + 1] = value
                        else:
                            g += [param.name, value]
                        r = a.run(base[0] + base[1], globals_=g, timeout=10)
                    else:
                        r = a.run(invocation(path, params, base, param, value, extra), timeout=10)
                    per_command[" ".join(path) or "(global flags)"] += 1
                    covered.add((path, param.name))
                    if os.environ.get("ARBCTL_FLAGS_TRACE"):
                        print(f"{time.monotonic() - started:7.2f} {' '.join(path)} {param.name} "
                              f"{value[:20]!r} -> {r.returncode}", flush=True)
                    after = db.snapshot()
                    out = r.stdout + r.stderr
                    what = f"arbctl {' '.join(path)} {param.name} {value[:20]!r} {extra}"
                    if r.returncode == 0:
                        failures.append(f"{what}: accepted (exit 0): {out[:300]!r}")
                    elif not names_flag(param, out):
                        failures.append(f"{what}: exit {r.returncode} without naming "
                                        f"{param.name}: {out[:300]!r}")
                    if after != before:
                        changed = {k: (before[k], after[k]) for k in after if after[k] != before[k]}
                        failures.append(f"{what}: wrote {changed}")
                        before = after

        # The base invocations are valid as written.
        for path, (positionals, options) in BASES.items():
            if path == ("demo", "load"):  # loads a whole demo organisation; no flags to vary
                continue
            args = (fill(positionals, placeholders) if path == () else
                    list(path) + fill(options, placeholders) +
                    (["--"] + fill(positionals, placeholders) if positionals else []))
            r = a.run(args, timeout=10 if path != ("watch",) else 3)
            if r.returncode != 0:
                failures.append(f"base invocation arbctl {' '.join(args)}: exit {r.returncode}: "
                                f"{(r.stdout + r.stderr)[:300]!r}")

    for line in failures:
        print("FAIL", line)
    for command, n in sorted(per_command.items()):
        print(f"{command:24} {n:4} cases")
    params = [p for ps in commands.values() for p in ps]
    print(f"{len(commands) - 1} commands, {sum(per_command.values())} cases, "
          f"{len(covered)} of {len(discovered)} flags and positionals covered "
          f"({sum(not p.positional and not p.switch for p in params)} flags with a value, "
          f"{sum(p.switch for p in params)} switches, {sum(p.positional for p in params)} "
          f"positionals), {time.monotonic() - started:.1f} s")
    assert covered == discovered, sorted(discovered - covered)
    assert not failures, f"{len(failures)} failures"


if __name__ == "__main__":
    main()
