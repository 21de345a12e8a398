#!/usr/bin/python3
"""bench/openb/make-variant on the committed sample: each family at the ends
of its range has the share it names (of the GPU demand for gpushareN and
multigpuN, of the GPU pods for gpuspecN), keeps what the paper's variants
keep (the number of pods and of host-only pods; every default pod for
multigpuN; the pods' shapes), draws every pod and spec from its sources, gives
the same file for the same seed, and refuses a variant outside the families
and levels, naming --variant.

  make_variant_test.py MAKE_VARIANT PODS.csv
"""
import collections
import csv
import os
import subprocess
import sys
import tempfile


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write(path, rows, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, lineterminator="\r\n")
        w.writeheader()
        w.writerows(rows)


def demand(p):
    return int(p["num_gpu"]) * int(p["gpu_milli"])


def sharing(p):
    return int(p["num_gpu"]) == 1 and int(p["gpu_milli"]) < 1000


def shape(p):
    return (p["cpu_milli"], p["memory_mib"], p["num_gpu"], p["gpu_milli"])


def check(cond, what):
    if not cond:
        print("FAIL:", what)
        sys.exit(1)


class Tool:
    def __init__(self, path, pods, specs, tmp):
        self.path, self.pods, self.specs, self.tmp = path, pods, specs, tmp

    def run(self, variant, seed=7, out_name=None):
        out = os.path.join(self.tmp, out_name or f"{variant}-{seed}.csv")
        r = subprocess.run([self.path, "--pods", self.pods, "--variant", variant,
                            "--seed", str(seed), "--out", out, "--specs-from", self.specs],
                           capture_output=True, text=True)
        return r, out


def check_gpushare(tool, listed, level):
    r, out = tool.run(f"gpushare{level}")
    check(r.returncode == 0, f"gpushare{level} runs: {r.stderr}")
    rows = read(out)
    host = lambda ps: sum(1 for p in ps if int(p["num_gpu"]) == 0)
    check(len(rows) == len(listed) and host(rows) == host(listed),
          f"gpushare{level} keeps the number of pods and of host-only pods")
    check(len({p["name"] for p in rows}) == len(rows), f"gpushare{level}: names are unique")
    shapes = {shape(p) for p in listed}
    check(all(shape(p) in shapes for p in rows), f"gpushare{level}: every pod is a default pod's")
    total = sum(demand(p) for p in rows)
    shared = sum(demand(p) for p in rows if sharing(p))
    biggest = max(demand(p) for p in listed)
    # The greedy draw stays within one pod of the target share.
    check(abs(100 * shared - level * total) <= 100 * biggest,
          f"gpushare{level}: sharing pods ask for {100 * shared / total:.2f}% of the GPU demand")


def check_multigpu(tool, listed, level):
    r, out = tool.run(f"multigpu{level}")
    check(r.returncode == 0, f"multigpu{level} runs: {r.stderr}")
    rows = read(out)
    kept = {p["name"]: p for p in rows[:len(listed)]}
    check(all(shape(kept.get(p["name"], {"cpu_milli": None, "memory_mib": None, "num_gpu": None,
                                         "gpu_milli": None})) == shape(p) for p in listed),
          f"multigpu{level} keeps every default pod")
    extra = rows[len(listed):]
    multi_shapes = {shape(p) for p in listed if int(p["num_gpu"]) > 1}
    check(extra and all(shape(p) in multi_shapes for p in extra),
          f"multigpu{level} appends copies of multi-GPU pods")
    check(len({p["name"] for p in rows}) == len(rows), f"multigpu{level}: names are unique")
    total = sum(demand(p) for p in rows)
    multi = sum(demand(p) for p in rows if int(p["num_gpu"]) > 1)
    last = demand(extra[-1])
    check(100 * multi >= level * total and 100 * (multi - last) < level * (total - last),
          f"multigpu{level}: copies stop once multi-GPU pods ask for {level}% "
          f"({100 * multi / total:.2f}%)")


def check_gpuspec(tool, listed, specs, level):
    r, out = tool.run(f"gpuspec{level:02d}")
    check(r.returncode == 0, f"gpuspec{level:02d} runs: {r.stderr}")
    rows = read(out)
    check([shape(p) for p in rows] == [shape(p) for p in sorted(listed, key=lambda p: p["name"])],
          f"gpuspec{level}: the pods are the default's")
    check(all(not p["gpu_spec"] for p in rows if int(p["num_gpu"]) == 0),
          f"gpuspec{level}: host-only pods stay unconstrained")
    gpu = [p for p in rows if int(p["num_gpu"]) > 0]
    limited = [p for p in gpu if p["gpu_spec"]]
    # Rounded per class (sharing, one GPU, multi-GPU): within 2 pods of the level.
    check(abs(100 * len(limited) - level * len(gpu)) <= 200,
          f"gpuspec{level}: {len(limited)} of {len(gpu)} GPU pods constrained")
    spec_of_kind = collections.defaultdict(set)
    for p in specs:
        if p["gpu_spec"]:
            spec_of_kind["sharing" if sharing(p) else p["num_gpu"]].add(p["gpu_spec"])
    every_spec = set.union(*spec_of_kind.values())
    allowed = lambda p: spec_of_kind.get("sharing" if sharing(p) else p["num_gpu"]) or every_spec
    check(all(p["gpu_spec"] in allowed(p) for p in limited),
          f"gpuspec{level}: each spec is a source pod's of the same kind (any, if none is)")
    rate = lambda ps, pick: (sum(1 for p in ps if pick(p) and p["gpu_spec"]) /
                             max(1, sum(1 for p in ps if pick(p))))
    whole = lambda p: int(p["num_gpu"]) == 1 and not sharing(p)
    if level >= 20:
        check(rate(rows, whole) > rate(rows, sharing),
              f"gpuspec{level}: whole GPUs constrained more often than shares, as in the source")


def main():
    tool_path, pods = sys.argv[1:3]
    listed = read(pods)
    with tempfile.TemporaryDirectory() as tmp:
        # A spec source in which whole GPUs are constrained twice as often as
        # shares, each kind with its own models.
        fields = list(listed[0].keys())
        specs = []
        for i, p in enumerate(sorted(listed, key=lambda p: p["name"])):
            q = dict(p)
            if sharing(p) and i % 6 == 0:
                q["gpu_spec"] = "T4"
            elif int(p["num_gpu"]) == 1 and not sharing(p) and i % 3 == 0:
                q["gpu_spec"] = "V100M16|V100M32"
            elif int(p["num_gpu"]) > 1 and i % 2 == 0:
                q["gpu_spec"] = "G2"
            specs.append(q)
        specs_path = os.path.join(tmp, "specs.csv")
        write(specs_path, specs, fields)
        tool = Tool(tool_path, pods, specs_path, tmp)

        for level in (20, 60, 100):
            check_gpushare(tool, listed, level)
        for level in (20, 50):
            check_multigpu(tool, listed, level)
        for level in (5, 33):
            check_gpuspec(tool, listed, specs, level)

        a = open(tool.run("gpushare40", 3, "a.csv")[1], "rb").read()
        b = open(tool.run("gpushare40", 3, "b.csv")[1], "rb").read()
        c = open(tool.run("gpushare40", 4, "c.csv")[1], "rb").read()
        check(a == b, "the same seed gives the same file")
        check(a != c, "another seed gives another draw")

        for bad in ("gpushare10", "gpushare101", "multigpu60", "gpuspec4", "gpuspec34",
                    "cpu50", "gpushare", ""):
            r, out = tool.run(bad, out_name="bad.csv")
            check(r.returncode == 2 and "--variant" in r.stderr and not os.path.exists(out),
                  f"--variant {bad!r} is refused, naming it, with nothing written: {r.stderr}")
    print("make-variant: ok")


if __name__ == "__main__":
    main()
