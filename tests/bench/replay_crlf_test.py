#!/usr/bin/python3
"""openb-replay reads a trace as written or refuses it.

From the sample, an LF trace in which every fifth GPU pod may run only on
V100s or T4s (gpu_spec); its CRLF copy (RFC 4180's line end, with a byte
order mark on the nodes) must give byte-for-byte the same placements, and
every constrained pod placed must sit on a node of its models. Arrivals
without their gpu_spec column must be refused with an error naming it,
writing no placements.

Usage: replay_crlf_test.py OPENB_REPLAY NODES.csv ARRIVALS.csv
"""
import os
import subprocess
import sys
import tempfile


def replay(binary, nodes, arrivals, out):
    return subprocess.run([binary, "--nodes", nodes, "--arrivals", arrivals, "--out", out],
                          capture_output=True, text=True)


def main():
    binary, nodes, arrivals = sys.argv[1:4]
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, text, line_end="\n", bom=""):
            path = os.path.join(tmp, name)
            with open(path, "w", newline="") as f:
                f.write(bom + "".join(line + line_end for line in text))
            return path

        node_lines = open(nodes, newline="").read().splitlines()
        model_of = {line.split(",")[0]: line.split(",")[4] for line in node_lines[1:]}
        pod_lines = open(arrivals, newline="").read().splitlines()
        constrained = {}
        for i, line in enumerate(pod_lines[1:], start=1):
            cells = line.split(",")
            if cells[3] != "0" and i % 5 == 0:
                cells[5] = "V100M16|V100M32" if i % 10 == 0 else "T4"
                constrained[cells[0]] = set(cells[5].split("|"))
                pod_lines[i] = ",".join(cells)

        lf_out, crlf_out = os.path.join(tmp, "lf.csv"), os.path.join(tmp, "crlf.csv")
        lf_nodes, lf_pods = write("nodes.csv", node_lines), write("pods.csv", pod_lines)
        r = replay(binary, lf_nodes, lf_pods, lf_out)
        assert r.returncode == 0, r.stderr
        r = replay(binary, write("nodes-crlf.csv", node_lines, "\r\n", "\ufeff"),
                   write("pods-crlf.csv", pod_lines, "\r\n"), crlf_out)
        assert r.returncode == 0, r.stderr
        lf, cr = open(lf_out, "rb").read(), open(crlf_out, "rb").read()
        assert lf == cr, "the CRLF copy placed pods differently"
        placed = on_models = 0
        for line in lf.decode().splitlines()[1:]:
            cells = line.split(",")
            if not cells[6]:
                continue
            placed += 1
            if cells[1] in constrained:
                assert model_of[cells[6]] in constrained[cells[1]], line
                on_models += 1
        assert placed > 100 and on_models > 20, (placed, on_models)

        # Without gpu_spec (the last column), the trace is refused.
        cut = os.path.join(tmp, "cut.csv")
        write("cut.csv", [",".join(line.split(",")[:5]) for line in pod_lines])
        refused_out = os.path.join(tmp, "refused.csv")
        r = replay(binary, lf_nodes, cut, refused_out)
        assert r.returncode != 0, "a trace without gpu_spec was replayed"
        assert "'gpu_spec'" in r.stderr, r.stderr
        assert not os.path.exists(refused_out), "placements were written for a refused trace"
    print(f"openb_replay_crlf: LF and CRLF placements equal ({placed} placed, {on_models} "
          "constrained pods on their models); a trace without gpu_spec refused naming it")


if __name__ == "__main__":
    main()
