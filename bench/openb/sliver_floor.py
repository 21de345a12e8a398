#!/usr/bin/python3
"""How much of the GPU capacity left unallocated at 100% arrived demand is
sliver waste no packer could avoid, for one replayed seed.

A fraction and a whole-GPU task never share a GPU, so the free milli-GPU left
on GPUs that hold fractions (slivers) is lost to whole-GPU work. This script
takes openb-replay's placements, stops at the 100% arrived point, and prints:
  - the slivers and empty GPUs the replay left there;
  - the slivers of an offline first-fit-decreasing packing of the very same
    fractions (a packer that knows the future and may reorder);
  - a hard lower bound: every fraction f > 500 needs a GPU of its own, whose
    hole 1000 - f only fractions no larger than the hole can fill;
  - the LP floor: the slivers that any packing of the very same fractions
    must leave, offline or not, from the LP relaxation of bin packing
    (Gilmore-Gomory, solved by row generation on its dual with SciPy's HiGHS
    and reported as the Farley bound, which holds however early generation
    stops). A policy can only go below it by placing other fractions.

Usage: sliver_floor.py NODES.csv PLACEMENTS.csv
"""
import collections
import csv
import sys

GPU_MILLI = 1000


def best_pattern(sizes, prices):
    """The multiset of sizes that fits one GPU with the most price: (value, counts)."""
    best = [0.0] * (GPU_MILLI + 1)
    pick = [-1] * (GPU_MILLI + 1)
    for room in range(1, GPU_MILLI + 1):
        best[room] = best[room - 1]
        for i, size in enumerate(sizes):
            if size <= room and best[room - size] + prices[i] > best[room] + 1e-12:
                best[room] = best[room - size] + prices[i]
                pick[room] = i
    counts = [0] * len(sizes)
    room = GPU_MILLI
    while room > 0:
        if pick[room] < 0:
            room -= 1
            continue
        counts[pick[room]] += 1
        room -= sizes[pick[room]]
    return best[GPU_MILLI], counts


def lp_floor(fractions):
    """GPUs that any packing of `fractions` (milli each) needs, as an LP bound."""
    from scipy.optimize import linprog
    by_size = collections.Counter(fractions)
    sizes = sorted(by_size)
    demand = [by_size[s] for s in sizes]
    rows = [[GPU_MILLI // s if j == i else 0 for j in range(len(sizes))]
            for i, s in enumerate(sizes)]
    bound = 0.0
    for _ in range(500):
        # Dual: maximize sum n_s y_s subject to a . y <= 1 for every pattern a.
        res = linprog([-n for n in demand], A_ub=rows, b_ub=[1.0] * len(rows),
                      bounds=[(0, None)] * len(sizes), method="highs")
        prices = list(res.x)
        value = -res.fun
        most, counts = best_pattern(sizes, prices)
        bound = max(bound, value / max(most, 1.0))  # Farley: valid at every round.
        if most <= 1.0 + 1e-9:
            break
        rows.append(counts)
    return bound


def main():
    nodes_path, placements_path = sys.argv[1], sys.argv[2]
    gpus = {}
    for r in csv.DictReader(open(nodes_path)):
        gpus[r["sn"]] = [1000] * int(r["gpu"])
    capacity = sum(len(g) for g in gpus.values()) * 1000
    arrived = 0
    fractions = []
    for r in csv.DictReader(open(placements_path)):
        num, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        arrived += num * milli
        if arrived > capacity:
            break
        if not r["node"]:
            continue
        fraction = num == 1 and milli < 1000
        if fraction:
            fractions.append(milli)
        for g in (r["gpu_ids"].split("-") if r["gpu_ids"] else []):
            gpus[r["node"]][int(g)] -= milli if fraction else 1000
    slivers = sum(f for g in gpus.values() for f in g if 0 < f < 1000)
    empty = sum(1 for g in gpus.values() for f in g if f == 1000)

    bins = []
    for f in sorted(fractions, reverse=True):
        for i, b in enumerate(bins):
            if b + f <= 1000:
                bins[i] += f
                break
        else:
            bins.append(f)
    ffd = len(bins) * 1000 - sum(fractions)

    # Lower bound: holes of big fractions, minus the most the small fractions
    # that fit the largest such hole could fill.
    big = [f for f in fractions if f > 500]
    largest_hole = max((1000 - f for f in big), default=0)
    fillers = sum(f for f in fractions if f <= largest_hole)
    bound = max(0, sum(1000 - f for f in big) - fillers)
    floor = lp_floor(fractions) * GPU_MILLI - sum(fractions) if fractions else 0
    print(f"slivers {slivers / 1000:.1f} GPUs, empty GPUs {empty}; offline FFD slivers "
          f"{ffd / 1000:.1f}; hard lower bound {bound / 1000:.1f}; LP floor of the same "
          f"fractions {floor / 1000:.1f}")


if __name__ == "__main__":
    main()
