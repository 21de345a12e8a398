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
    hole 1000 - f only fractions no larger than the hole can fill.

Usage: sliver_floor.py NODES.csv PLACEMENTS.csv
"""
import csv
import sys


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
    print(f"slivers {slivers / 1000:.1f} GPUs, empty GPUs {empty}; offline FFD slivers "
          f"{ffd / 1000:.1f}; hard lower bound {bound / 1000:.1f}")


if __name__ == "__main__":
    main()
