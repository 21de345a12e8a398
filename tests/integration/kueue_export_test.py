#!/usr/bin/python3
"""`arbctl export kueue` against Kueue's published CRD schemas.

Builds an organisation (a team tree, pool-wide and per-model quotas with
borrowing and lending limits, MIG-capable and other GPUs), exports it, and
validates every object against the openAPIV3Schema of Kueue v0.19.2's CRDs
(tests/fixtures/kueue/, python3-jsonschema). Then checks that the objects say
what Arbiter says: quotas, limits, cohorts, namespaces.

Usage: kueue_export_test.py ARBITERD ARBCTL SOURCE_DIR  (DSN from ARBITER_TEST_PG_DSN_FILE)
"""
import json
import os
import subprocess
import sys

import jsonschema
import yaml

from live_arbiterd import LiveArbiterd


def validators(source_dir):
    out = {}
    for kind in ("ClusterQueue", "LocalQueue", "ResourceFlavor", "Cohort"):
        path = os.path.join(source_dir, "tests/fixtures/kueue", f"{kind.lower()}.v1beta2.schema.json")
        schema = json.load(open(path))
        jsonschema.Draft7Validator.check_schema(schema)
        out[kind] = jsonschema.Draft7Validator(schema)
    return out


def main():
    arbiterd, arbctl, src = sys.argv[1], sys.argv[2], sys.argv[3]
    check = validators(src)
    with LiveArbiterd(arbiterd, src, "kueue") as live:
        def a(*args):
            r = subprocess.run([arbctl, "--endpoint", live.endpoint, *map(str, args)],
                               capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            return r.stdout

        a("clusters", "create", "east")
        a("pools", "create", "serving", "--class", "serving")
        a("pools", "create", "batch", "--class", "batch")
        a("inventory", "register", "h100-0", "--cluster", "east", "--pool", "serving",
          "--model", "H100-80GB")
        a("inventory", "register", "l40s-0", "--cluster", "east", "--pool", "serving",
          "--model", "L40S")
        a("inventory", "register", "a100-0", "--cluster", "east", "--pool", "batch",
          "--model", "A100-80GB")
        a("teams", "create", "org")
        a("teams", "create", "ml_platform", "--parent", "org")
        a("teams", "create", "inference", "--parent", "ml_platform", "--weight-milli", 1500)
        a("teams", "create", "training", "--parent", "ml_platform")
        a("teams", "create", "solo")
        a("quotas", "set", "inference", "serving", 4000, "--gpu-model", "H100-80GB",
          "--borrow-milli", 2000, "--lend-milli", 1000)
        a("quotas", "set", "inference", "serving", 2500)
        a("quotas", "set", "training", "batch", 8000, "--borrow-milli", -1)
        a("quotas", "set", "ml_platform", "batch", 4000, "--cohort-borrow-milli", 2000,
          "--cohort-lend-milli", 3000)
        a("quotas", "set", "solo", "batch", 1000)

        docs = list(yaml.safe_load_all(a("export", "kueue")))
        errors = []
        for d in docs:
            errors += [f"{d['kind']}/{d['metadata']['name']}: {e.message} at "
                       f"{list(e.absolute_path)}" for e in check[d["kind"]].iter_errors(d)]
            assert d["apiVersion"] == "kueue.x-k8s.io/v1beta2", d
        assert not errors, "\n".join(errors)

        # The validator is not a rubber stamp: a misspelt field type fails.
        bad = next(d for d in docs if d["kind"] == "ClusterQueue")
        bad = json.loads(json.dumps(bad))
        bad["spec"]["resourceGroups"][0]["coveredResources"] = "nvidia.com/gpu"
        assert list(check["ClusterQueue"].iter_errors(bad)), "a string accepted as a list"

        by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        flavors = {n for k, n in by if k == "ResourceFlavor"}
        assert flavors == {"serving", "serving-h100-80gb", "batch"}, flavors
        assert by[("ResourceFlavor", "serving-h100-80gb")]["spec"]["nodeLabels"] == {
            "arbiter.dev/pool": "serving", "arbiter.dev/gpu-model": "H100-80GB"}
        cohorts = {n: by[(k, n)]["spec"].get("parentName") for k, n in by if k == "Cohort"}
        assert cohorts == {"org": None, "ml-platform": "org"}, cohorts
        # ml_platform's cohort limits: its subtree's, toward org.
        limits = by[("Cohort", "ml-platform")]["spec"]["resourceGroups"]
        assert [f["name"] for f in limits[0]["flavors"]] == ["batch"], limits
        assert {k: str(v) for k, v in limits[0]["flavors"][0]["resources"][0].items()} == {
            "name": "nvidia.com/gpu", "nominalQuota": "0", "borrowingLimit": "2",
            "lendingLimit": "3"}, limits
        assert "resourceGroups" not in by[("Cohort", "org")]["spec"]

        inference = by[("ClusterQueue", "inference")]["spec"]
        assert inference["cohortName"] == "ml-platform", inference
        assert inference["fairSharing"]["weight"] == "1500m", inference
        assert inference["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "inference"}
        group = inference["resourceGroups"][0]
        assert group["coveredResources"][0] == "nvidia.com/gpu", group
        assert any(r.startswith("nvidia.com/mig-") for r in group["coveredResources"]), group
        names = [f["name"] for f in group["flavors"]]
        assert names == ["serving-h100-80gb", "serving"], names  # per-model first
        def text(r):  # Quantities may be YAML integers or strings.
            return {k: str(v) for k, v in r.items()}
        gpu = {f["name"]: text(f["resources"][0]) for f in group["flavors"]}
        assert gpu["serving-h100-80gb"] == {"name": "nvidia.com/gpu", "nominalQuota": "4",
                                            "borrowingLimit": "2", "lendingLimit": "1"}, gpu
        assert gpu["serving"] == {"name": "nvidia.com/gpu", "nominalQuota": "2500m",
                                  "borrowingLimit": "0", "lendingLimit": "2500m"}, gpu
        # The H100's 1g.10gb instances: 4 GPUs' worth at its SM share.
        mig = {r["name"]: r for r in group["flavors"][0]["resources"]}
        assert int(mig["nvidia.com/mig-1g.10gb"]["nominalQuota"]) >= 28, mig
        # L40S (no MIG) is what the pool-wide flavor stands for: no instances.
        pool_wide = {r["name"]: r for r in group["flavors"][1]["resources"]}
        assert str(pool_wide["nvidia.com/mig-1g.10gb"]["nominalQuota"]) == "0", pool_wide

        training = by[("ClusterQueue", "training")]["spec"]
        res = text(training["resourceGroups"][0]["flavors"][0]["resources"][0])
        assert "borrowingLimit" not in res and res["nominalQuota"] == "8", res  # no limit
        # A team with sub-teams lends into its own cohort; a lone root has none.
        assert by[("ClusterQueue", "ml-platform")]["spec"]["cohortName"] == "ml-platform"
        solo = by[("ClusterQueue", "solo")]["spec"]
        assert "cohortName" not in solo, solo
        assert "borrowingLimit" not in solo["resourceGroups"][0]["flavors"][0]["resources"][0]

        queues = {(d["metadata"]["namespace"], d["spec"]["clusterQueue"])
                  for d in docs if d["kind"] == "LocalQueue"}
        assert queues == {("inference", "inference"), ("training", "training"),
                          ("ml-platform", "ml-platform"), ("solo", "solo")}, queues
        print(f"kueue export: {len(docs)} objects valid against Kueue v0.19.2's v1beta2 CRDs")


if __name__ == "__main__":
    main()
