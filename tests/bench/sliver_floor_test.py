#!/usr/bin/python3
"""Tests of bench/openb/sliver_floor.py's LP floor: the GPUs any packing of a
multiset of fractions needs, from the LP relaxation of bin packing.

  sliver_floor_test.py SLIVER_FLOOR_PY

Checks hand-made optima, the LP against one solved over every maximal
pattern on small random multisets, that it never exceeds an exact bin
packing found by search, and the script's report on a tiny replay.
"""
import importlib.util
import os
import random
import subprocess
import sys
import tempfile

from scipy.optimize import linprog


def load(path):
    spec = importlib.util.spec_from_file_location("sliver_floor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def patterns(sizes):
    """Every multiset of `sizes` that fits one GPU and takes no more of them."""
    out = []
    def grow(i, room, counts):
        if i == len(sizes):
            if any(counts):
                out.append(list(counts))
            return
        for k in range(room // sizes[i] + 1):
            counts.append(k)
            grow(i + 1, room - k * sizes[i], counts)
            counts.pop()
    grow(0, 1000, [])
    return out


def brute_lp(fractions):
    """The bin-packing LP over every pattern: min sum x_p, A x >= n."""
    sizes = sorted(set(fractions))
    demand = [fractions.count(s) for s in sizes]
    pats = patterns(sizes)
    a_ub = [[-p[i] for p in pats] for i in range(len(sizes))]
    res = linprog([1.0] * len(pats), A_ub=a_ub, b_ub=[-n for n in demand],
                  bounds=[(0, None)] * len(pats), method="highs")
    return res.fun


def exact_bins(fractions):
    """The fewest GPUs that hold `fractions`, by search (small inputs only)."""
    best = len(fractions)
    items = sorted(fractions, reverse=True)
    def place(i, bins):
        nonlocal best
        if len(bins) >= best:
            return
        if i == len(items):
            best = len(bins)
            return
        seen = set()
        for b in range(len(bins)):
            if bins[b] + items[i] <= 1000 and bins[b] not in seen:
                seen.add(bins[b])
                bins[b] += items[i]
                place(i + 1, bins)
                bins[b] -= items[i]
        bins.append(items[i])
        place(i + 1, bins)
        bins.pop()
    place(0, [])
    return best


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


def main():
    module = load(sys.argv[1])
    near = lambda a, b: abs(a - b) < 1e-6
    # Hand-made optima.
    check(near(module.lp_floor([600, 600, 400, 400]), 2.0), "600+400 pairs: 2 GPUs")
    check(near(module.lp_floor([340, 340, 340]), 1.5), "three 340s: two per GPU, 1.5")
    check(near(module.lp_floor([810] * 4 + [190] * 4), 4.0), "810+190 pairs: 4 GPUs")
    check(near(module.lp_floor([810] * 4), 4.0), "one 810 per GPU")
    check(near(module.lp_floor([500] * 3), 1.5), "500s: two per GPU")
    # Against the LP over every pattern, and below exact bin packing.
    rng = random.Random(7)
    for trial in range(40):
        sizes = rng.sample(range(150, 900, 10), rng.randint(2, 4))
        fractions = [rng.choice(sizes) for _ in range(rng.randint(3, 9))]
        got = module.lp_floor(fractions)
        want = brute_lp(fractions)
        check(abs(got - want) < 1e-6 * max(1.0, want),
              f"trial {trial}: {fractions}: LP floor {got}, LP over every pattern {want}")
        check(got <= exact_bins(fractions) + 1e-9, f"trial {trial}: above exact packing")
        check(got >= sum(fractions) / 1000 - 1e-9, f"trial {trial}: below the volume")
    # The report on a tiny replay: two 2-GPU nodes, arrivals up to 100%.
    with tempfile.TemporaryDirectory() as tmp:
        nodes = os.path.join(tmp, "nodes.csv")
        placements = os.path.join(tmp, "placements.csv")
        with open(nodes, "w") as f:
            f.write("sn,cpu_milli,memory_mib,gpu,model\r\nn0,8000,8000,2,T4\r\nn1,8000,8000,2,T4\r\n")
        rows = [("600", "n0", "0"), ("400", "n0", "1"), ("600", "n1", "0"), ("400", "n1", "1"),
                ("1000", "", "")]
        with open(placements, "w") as f:
            f.write("seq,name,cpu_milli,memory_mib,num_gpu,gpu_milli,node,gpu_ids\n")
            for i, (milli, node, gpu) in enumerate(rows):
                f.write(f"{i},p{i},1000,1000,1,{milli},{node},{gpu}\n")
        out = subprocess.run([sys.argv[1], nodes, placements], check=True,
                             capture_output=True, text=True).stdout
        # 2,000 milli arrived of 4,000: 600 and 400 each alone on a GPU leave
        # 2 GPUs of slivers, where pairing them needs 2 GPUs and leaves none.
        check("slivers 2.0 GPUs" in out, f"report: {out}")
        check("LP floor of the same fractions 0.0" in out, f"report: {out}")
    print("sliver_floor: LP floor matches every check")


if __name__ == "__main__":
    main()
