#!/usr/bin/python3
"""bench/openb/lp-bound gives the LP optimum, and never more unallocated GPUs
than a real policy leaves.

- Hand-made clusters with the optimum worked out by hand: fractions that
  cannot share a GPU (fragmentation), CPU that strands a GPU, gpu_spec
  constraints, whole pods beside fractions; run end to end through the
  command line on CRLF files with a byte order mark.
- Small random clusters: the column generation's optimum equals the LP
  solved directly over every configuration, enumerated by brute force
  (fractions assigned to GPUs one by one), and is at least the best integer
  packing found by the same brute force.
- The default openb trace, seed 42, at 100% arrived: the bound is at most
  the unallocated GPUs of every published policy (FGD: 302), and, when the
  path of openb-replay is given, at most what its FGD and Arbiter policies
  leave.

Usage: lp_bound_test.py small LP_BOUND
       lp_bound_test.py trace LP_BOUND TRACE_DIR [OPENB_REPLAY]
         (exits 77, skipped, when TRACE_DIR is absent)
"""
import csv
import importlib.machinery
import importlib.util
import itertools
import os
import random
import re
import subprocess
import sys
import tempfile
import time

import numpy as np
from scipy.optimize import linprog


def load(path):
    loader = importlib.machinery.SourceFileLoader("lp_bound", path)
    spec = importlib.util.spec_from_loader("lp_bound", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def write_csv(path, header, rows, crlf=False, bom=False):
    end = "\r\n" if crlf else "\n"
    with open(path, "w", newline="", encoding="utf-8") as f:
        f.write(("\ufeff" if bom else "") + ",".join(header) + end)
        for r in rows:
            f.write(",".join(str(x) for x in r) + end)


NODE_HEADER = ["sn", "cpu_milli", "memory_mib", "gpu", "model"]
POD_HEADER = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"]


def pods(*specs):
    """(cpu, mem, num_gpu, milli, spec) -> arrival rows."""
    return [{"name": f"p{i}", "cpu_milli": str(c), "memory_mib": str(m), "num_gpu": str(n),
             "gpu_milli": str(g), "gpu_spec": s} for i, (c, m, n, g, s) in enumerate(specs)]


def lp_of(lpb, nodes, arrivals):
    """Upper bound on used milli-GPU over all the arrivals."""
    node_rows = [dict(zip(NODE_HEADER, map(str, n))) for n in nodes]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "nodes.csv")
        write_csv(path, NODE_HEADER, nodes)
        node_types, gpus = lpb.read_nodes(path)
    assert len(node_rows) == sum(t.count for t in node_types)
    b = lpb.Bounder(node_types, gpus)
    ub, master, _ = b.solve(b.demand(arrivals), tolerance=1e-6)
    assert abs(ub - master) < 1e-3, (ub, master)
    return ub, gpus


def check(name, got, want):
    assert abs(got - want) < 1e-3, f"{name}: {got} != {want}"
    print(f"ok {name}: {got:.1f}")


def hand_cases(lpb):
    big = 1 << 20
    # Two 1-GPU nodes, three 600-milli fractions: no two share a GPU, so
    # 1,200 of 2,000 milli at most; a whole-GPU pod takes one node: 1,600.
    nodes = [("a", 64000, big, 1, "T4"), ("b", 64000, big, 1, "T4")]
    f600 = (1000, 1024, 1, 600, "")
    check("fractions that cannot share", lp_of(lpb, nodes, pods(f600, f600, f600))[0], 1200)
    check("whole beside fractions",
          lp_of(lpb, nodes, pods(f600, f600, f600, (1000, 1024, 1, 1000, "")))[0], 1600)
    # 810s leave 190-milli holes that only the 190 fits: on 3 GPUs, three
    # 810s, one 190 and one 470 give {810,190}, {810}, {810} = 2,620 at most
    # (the 470 shares with nothing here).
    nodes3 = [("a", 64000, big, 3, "G2")]
    check("holes of 810s",
          lp_of(lpb, nodes3, pods(*[(1000, 1024, 1, 810, "")] * 3, (1000, 1024, 1, 190, ""),
                                  (1000, 1024, 1, 470, "")))[0], 2620)
    # CPU strands a GPU: two 6-core whole-GPU pods on a 10-core 2-GPU node.
    check("CPU strands a GPU",
          lp_of(lpb, [("a", 10000, big, 2, "P100")],
                pods((6000, 1024, 1, 1000, ""), (6000, 1024, 1, 1000, "")))[0], 1000)
    # Memory likewise, with a fraction that fits the memory left: 1,300.
    check("memory strands a GPU",
          lp_of(lpb, [("a", 64000, 1000, 2, "P100")],
                pods((1000, 600, 1, 1000, ""), (1000, 600, 1, 1000, ""),
                     (1000, 300, 1, 300, "")))[0], 1300)
    # gpu_spec: two T4-only whole pods and one T4 node: one placed; a
    # "V100M16|T4" fraction goes to the V100; a P100-only pod nowhere.
    nodes_spec = [("t", 64000, big, 1, "T4"), ("v", 64000, big, 1, "V100M16")]
    check("gpu_spec binds",
          lp_of(lpb, nodes_spec, pods((1000, 1024, 1, 1000, "T4"), (1000, 1024, 1, 1000, "T4"),
                                      (1000, 1024, 1, 500, "V100M16|T4"),
                                      (1000, 1024, 1, 1000, "P100")))[0], 1500)
    # A 4-GPU pod needs a node with 4 GPUs; 2-GPU nodes cannot hold it.
    check("multi-GPU needs a wide node",
          lp_of(lpb, [("a", 64000, big, 2, "V100M32"), ("b", 64000, big, 2, "V100M32")],
                pods((1000, 1024, 4, 1000, ""), (1000, 1024, 1, 300, "")))[0], 300)
    # Host-only pods take nothing from the bound.
    check("host-only pods ignored",
          lp_of(lpb, [("a", 2000, big, 1, "T4")],
                pods((2000, 1024, 0, 0, ""), (2000, 1024, 1, 1000, "")))[0], 1000)
    # Arrivals cap a configuration: one 2-GPU node with 8 cores; two 600s
    # (4 cores each) and one whole-GPU pod (4 cores) arrived. {600, 600} is
    # 1,200, {600, whole} 1,600; {whole, whole} would be 2,000 but only one
    # arrived.
    check("demand caps a configuration",
          lp_of(lpb, [("a", 8000, big, 2, "T4")],
                pods((4000, 1024, 1, 600, ""), (4000, 1024, 1, 600, ""),
                     (4000, 1024, 1, 1000, "")))[0], 1600)


def cli_case(lp_bound):
    """End to end, CRLF files with a BOM: 2 GPUs, three 600s arriving at
    30%, 60% and 90%; at 90% at most 1,200 milli, so 0.8 GPUs unallocated."""
    with tempfile.TemporaryDirectory() as tmp:
        nodes = os.path.join(tmp, "nodes.csv")
        arrivals = os.path.join(tmp, "arrivals.csv")
        out = os.path.join(tmp, "out.csv")
        write_csv(nodes, NODE_HEADER, [("a", 64000, 65536, 1, "T4"), ("b", 64000, 65536, 1, "T4")],
                  crlf=True, bom=True)
        write_csv(arrivals, POD_HEADER,
                  [(f"p{i}", 1000, 1024, 1, 600, "") for i in range(3)], crlf=True, bom=True)
        run = subprocess.run([lp_bound, "--nodes", nodes, "--arrivals", arrivals,
                              "--levels", "60,90", "--csv", out], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        rows = list(csv.DictReader(open(out)))
        got = {int(r["arrived_percent"]): float(r["unallocated_gpus_exact"]) for r in rows}
        assert got == {60: 0.8, 90: 0.8}, got
        # Without its gpu_spec column the arrivals are refused, naming it.
        write_csv(arrivals, POD_HEADER[:-1], [("p0", 1000, 1024, 1, 600)], crlf=True)
        run = subprocess.run([lp_bound, "--nodes", nodes, "--arrivals", arrivals],
                             capture_output=True, text=True)
        assert run.returncode == 2 and "gpu_spec" in run.stderr, run.stderr
    print("ok command line on CRLF files with a BOM")


# --- Brute force -------------------------------------------------------------

def packs(lpb, node, items):
    """Whether one node holds `items` (PodTypes), trying every GPU for every
    fraction."""
    if any(not p.fits(node) for p in items):
        return False
    if sum(p.cpu for p in items) > node.cpu or sum(p.mem for p in items) > node.mem:
        return False
    free = node.gpus - sum(p.whole for p in items if not p.fraction)
    if free < 0:
        return False
    fracs = [p.milli for p in items if p.fraction]
    if not fracs:
        return True
    if free == 0:
        return False
    for assignment in itertools.product(range(free), repeat=len(fracs)):
        load = [0] * free
        for g, m in zip(assignment, fracs):
            load[g] += m
        if max(load) <= lpb.MILLI:
            return True
    return False


def brute_force(lpb, node_types, types, demand):
    """(LP optimum over every configuration, best integer packing)."""
    configs = []  # (node type, counts per pod type)
    ranges = [range(demand[p] + 1) for p in range(len(types))]
    for t, node in enumerate(node_types):
        for counts in itertools.product(*ranges):
            if sum(counts) == 0:
                continue
            items = [types[p] for p, n in enumerate(counts) for _ in range(n)]
            if packs(lpb, node, items):
                configs.append((t, counts))
    if not configs:
        return 0.0, 0
    value = [sum(types[p].value * n for p, n in enumerate(c)) for _, c in configs]
    a = np.zeros((len(node_types) + len(types), len(configs)))
    for j, (t, c) in enumerate(configs):
        a[t, j] = 1
        for p, n in enumerate(c):
            a[len(node_types) + p, j] = n
    b = [n.count for n in node_types] + [demand[p] for p in range(len(types))]
    res = linprog(-np.array(value, float), A_ub=a, b_ub=b, bounds=(0, None), method="highs")
    # Integer: choose a configuration (or none) for every node.
    best = 0
    slots = [t for t, n in enumerate(node_types) for _ in range(n.count)]
    options = [[None] + [j for j, (t, _) in enumerate(configs) if t == s] for s in slots]
    if np.prod([len(o) for o in options]) > 200000:
        return -res.fun, None
    for choice in itertools.product(*options):
        used = [0] * len(types)
        for j in choice:
            if j is not None:
                for p, n in enumerate(configs[j][1]):
                    used[p] += n
        if all(u <= demand[p] for p, u in enumerate(used)):
            best = max(best, sum(value[j] for j in choice if j is not None))
    return -res.fun, best


def random_cases(lpb, cases=80):
    rng = random.Random(27)
    models = ["T4", "V100M16"]
    gap = 0
    for case in range(cases):
        node_types = []
        for _ in range(rng.randint(1, 2)):
            node_types.append(lpb.NodeType(rng.choice(models), rng.randint(1, 2),
                                           rng.choice([4000, 8000, 16000]),
                                           rng.choice([8192, 32768]), rng.randint(1, 3)))
        gpus = sum(t.gpus * t.count for t in node_types)
        b = lpb.Bounder(node_types, gpus)
        types, demand = [], {}
        for _ in range(rng.randint(1, 3)):
            if rng.random() < 0.6:
                num, milli = 1, rng.choice([250, 300, 450, 550, 700, 810])
            else:
                num, milli = rng.choice([1, 1, 2]), 1000
            spec = rng.choice([None, None, frozenset([rng.choice(models)])])
            key = (rng.choice([1000, 3000, 5000]), rng.choice([2048, 6144]), num, milli, spec)
            if key in b.index:
                continue
            p = b.type_of(key)
            types.append(b.pods[p])
            demand[p] = rng.randint(1, 3)
        ub, master, _ = b.solve(dict(demand), tolerance=1e-6)
        lp, integer = brute_force(lpb, node_types, types, [demand[p] for p in range(len(types))])
        assert abs(ub - lp) < 1e-3, f"case {case}: column generation {ub}, LP {lp}"
        if integer is not None:
            assert integer <= lp + 1e-6, f"case {case}: integer {integer} > LP {lp}"
            gap += lp > integer + 1e-6
    print(f"ok {cases} random clusters: column generation = brute-force LP "
          f"(LP above the integer optimum in {gap})")


def real_trace(lpb, trace, replay):
    nodes_path = os.path.join(trace, "openb_node_list_gpu_node.csv")
    arrivals = os.path.join(trace, "arrivals", "default_tune1.3_seed42.csv")
    node_types, gpus = lpb.read_nodes(nodes_path)
    rows = lpb.read_rows(arrivals, lpb.POD_COLUMNS)
    start = time.perf_counter()
    b = lpb.Bounder(node_types, gpus)
    [(k, end, ub, rounds, _)] = lpb.bound_sequence(b, rows, [100])
    exact, rounded = lpb.unallocated(gpus, ub)
    print(f"default trace, seed 42, 100% arrived: at least {rounded:.1f} GPUs unallocated "
          f"({exact:.1f} exact; {rounds} rounds, {time.perf_counter() - start:.0f} s)")
    published = {}
    expected = os.path.join(trace, "expected_results_default", "analysis_allo_discrete_default.csv")
    for r in csv.DictReader(open(expected)):
        if r["seed"] == "42":
            published[r["sc_policy"]] = gpus * (100 - float(r["100"])) / 100
    assert published, "no published seed-42 rows"
    for policy, left in published.items():
        assert rounded <= left + 1e-6, f"bound {rounded} above {policy}'s published {left}"
    assert rounded > 0, "the bound should see the 810 holes"
    print(f"ok at most every published policy's unallocated GPUs (FGD {published['06-FGD']:.0f})")
    if replay and os.access(replay, os.X_OK):
        with tempfile.TemporaryDirectory() as tmp:
            for policy in ("fgd", "arbiter"):
                run = subprocess.run([replay, "--nodes", nodes_path, "--arrivals", arrivals,
                                      "--out", os.path.join(tmp, "p.csv"), "--policy", policy],
                                     capture_output=True, text=True, check=True)
                left = float(re.search(r"\(([\d.]+) GPUs unallocated\)", run.stdout).group(1))
                assert rounded <= left + 1e-6, f"bound {rounded} above {policy}'s {left}"
                print(f"ok at most openb-replay --policy {policy}'s {left:.0f}")


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("small", "trace"):
        print(__doc__, file=sys.stderr)
        return 2
    part, lp_bound = sys.argv[1], sys.argv[2]
    lpb = load(lp_bound)
    if part == "small":
        hand_cases(lpb)
        cli_case(lp_bound)
        random_cases(lpb)
        return 0
    trace = sys.argv[3]
    if not os.path.isdir(trace):
        print(f"skipped: no trace at {trace}")
        return 77
    real_trace(lpb, trace, sys.argv[4] if len(sys.argv) > 4 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
