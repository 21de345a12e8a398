#!/usr/bin/python3
"""deploy/kubernetes and deploy/grafana hold together.

yamllint passes; every object has a known apiVersion and kind; selectors
match the labels they select; ports named by probes, Services, the webhook
and the ServiceMonitor exist; containers have probes, resources and a
locked-down security context; the ConfigMap's arbiterd.toml uses only
options arbiterd knows (its `serve --help`) and listens where the ports
say; the kustomization lists every file. The Grafana dashboard charts only
series arbiterd exports (server/metrics.cc).

Usage: kubernetes_manifests_test.py ARBITERD SOURCE_DIR
"""
import glob
import json
import os
import re
import subprocess
import sys
import tomllib

import yaml

KNOWN = {
    ("v1", "Namespace"), ("v1", "ServiceAccount"), ("v1", "ConfigMap"), ("v1", "Secret"),
    ("v1", "Service"), ("apps/v1", "Deployment"), ("policy/v1", "PodDisruptionBudget"),
    ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration"),
    ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("kustomize.config.k8s.io/v1beta1", "Kustomization"),
}
NAMESPACED = {"ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment",
              "PodDisruptionBudget", "ServiceMonitor"}


def selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_container(c, ports, errors):
    where = f"container {c['name']}"
    for probe in ("readinessProbe", "livenessProbe"):
        if c["name"] == "arbiterd" and probe not in c:
            errors.append(f"{where}: no {probe}")
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = c.get(probe, {}).get("httpGet")
        if p and p["port"] not in ports:
            errors.append(f"{where}: {probe} names port {p['port']}, not one of {sorted(ports)}")
    r = c.get("resources", {})
    if not r.get("requests") or "memory" not in r.get("limits", {}):
        errors.append(f"{where}: needs resource requests and a memory limit")
    sc = c.get("securityContext", {})
    if sc.get("allowPrivilegeEscalation") is not False or not sc.get("readOnlyRootFilesystem") \
            or sc.get("capabilities", {}).get("drop") != ["ALL"]:
        errors.append(f"{where}: security context is not locked down: {sc}")


def main():
    arbiterd, src = sys.argv[1], sys.argv[2]
    kdir = os.path.join(src, "deploy/kubernetes")
    lint = subprocess.run(["yamllint", "-c", os.path.join(kdir, ".yamllint"), kdir],
                          capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout + lint.stderr

    files = sorted(os.path.basename(f) for f in glob.glob(os.path.join(kdir, "*.yaml")))
    docs, errors = [], []
    for f in files:
        for d in yaml.safe_load_all(open(os.path.join(kdir, f))):
            if d is None:
                continue
            key = (d.get("apiVersion"), d.get("kind"))
            if key not in KNOWN:
                errors.append(f"{f}: unknown apiVersion/kind {key}")
            if d["kind"] in NAMESPACED and d["metadata"].get("namespace") != "arbiter-system":
                errors.append(f"{f}: {d['kind']} is not in arbiter-system")
            docs.append((f, d))
    by_kind = {}
    for f, d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    kustomization = by_kind["Kustomization"][0]
    if sorted(kustomization["resources"]) != sorted(x for x in files if x != "kustomization.yaml"):
        errors.append(f"kustomization lists {kustomization['resources']}, files are {files}")

    deploy = by_kind["Deployment"][0]
    pod = deploy["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    if not selects(deploy["spec"]["selector"]["matchLabels"], pod_labels):
        errors.append("Deployment selector does not match its pod labels")
    if deploy["spec"]["replicas"] != 1 or deploy["spec"]["strategy"]["type"] != "Recreate":
        errors.append("the shipped manifests run one replica, Recreate (see deployment.yaml)")
    spec = pod["spec"]
    if not spec["securityContext"].get("runAsNonRoot"):
        errors.append("pod must run as non-root")
    container = next(c for c in spec["containers"] if c["name"] == "arbiterd")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for c in spec["containers"] + spec.get("initContainers", []):
        check_container(c, ports, errors)
    volumes = {v["name"]: v for v in spec["volumes"]}
    for m in container["volumeMounts"]:
        if m["name"] not in volumes:
            errors.append(f"volumeMount {m['name']} has no volume")
    configmaps = {d["metadata"]["name"]: d for d in by_kind["ConfigMap"]}
    secrets = {d["metadata"]["name"]: d for d in by_kind["Secret"]}
    for v in volumes.values():
        if "configMap" in v and v["configMap"]["name"] not in configmaps:
            errors.append(f"volume {v['name']}: no ConfigMap {v['configMap']['name']}")
        if "secret" in v and v["secret"]["secretName"] not in secrets:
            errors.append(f"volume {v['name']}: no Secret {v['secret']['secretName']}")
    for c in spec["containers"] + spec.get("initContainers", []):
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and ref["key"] not in secrets.get(ref["name"], {}).get("stringData", {}):
                errors.append(f"env {e['name']}: no key {ref['key']} in Secret {ref['name']}")

    # The configuration: only options arbiterd knows, listening on the ports.
    config = tomllib.loads(configmaps["arbiterd-config"]["data"]["arbiterd.toml"])
    helptext = subprocess.run([arbiterd, "serve", "--help"], capture_output=True,
                              text=True).stdout
    known = set(re.findall(r"--([a-z][a-z0-9-]+)", helptext))
    for k in config["serve"]:
        if k not in known:
            errors.append(f"arbiterd.toml: serve option {k} is not one arbiterd knows")
    for option, port in (("listen", "grpc"), ("webhook-listen", "webhook"),
                         ("metrics-listen", "metrics")):
        if not config["serve"][option].endswith(f":{ports[port]}"):
            errors.append(f"arbiterd.toml: {option} is not on the {port} port {ports[port]}")

    service = by_kind["Service"][0]
    if not selects(service["spec"]["selector"], pod_labels):
        errors.append("Service selector does not match the pods")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    for p in service_ports.values():
        if p["targetPort"] not in ports:
            errors.append(f"Service port {p['name']} targets unknown {p['targetPort']}")
    pdb = by_kind["PodDisruptionBudget"][0]
    if not selects(pdb["spec"]["selector"]["matchLabels"], pod_labels):
        errors.append("PodDisruptionBudget selects no arbiterd pod")

    # The mutating webhook pins pods (/admit, no side effects); the
    # validating one claims (/validate, side effects except on dry runs).
    for kind, path, effects in (("MutatingWebhookConfiguration", "/admit", "None"),
                                ("ValidatingWebhookConfiguration", "/validate", "NoneOnDryRun")):
        hook = by_kind[kind][0]["webhooks"][0]
        svc = hook["clientConfig"]["service"]
        if (svc["name"], svc["namespace"]) != (service["metadata"]["name"], "arbiter-system") \
                or svc["path"] != path \
                or service_ports.get("webhook", {}).get("port") != svc["port"]:
            errors.append(f"{kind} clientConfig {svc} does not reach the Service's webhook port")
        if hook["admissionReviewVersions"] != ["v1"] or hook["sideEffects"] != effects:
            errors.append(f"{kind}: admissionReviewVersions [v1] and sideEffects {effects}")
        if hook["rules"][0]["resources"] != ["pods"] or \
                "CREATE" not in hook["rules"][0]["operations"]:
            errors.append(f"{kind}: must review pod CREATE")

    monitor = by_kind["ServiceMonitor"][0]
    if not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
        errors.append("ServiceMonitor selects no Service")
    if monitor["spec"]["endpoints"][0]["port"] not in service_ports:
        errors.append("ServiceMonitor scrapes a port the Service does not have")

    # The dashboard charts what arbiterd exports.
    source = open(os.path.join(src, "server/metrics.cc")).read()
    exported = set(re.findall(
        r'(?:Name|Family|AddGauge|AddCounter)\(\s*(?:out,\s*)?"([a-z_]+)"', source))
    assert "arbiter_gpu_allocated_milli" in exported, exported
    dashboard = json.load(open(os.path.join(src, "deploy/grafana/arbiter.json")))
    for panel in dashboard["panels"]:
        for t in panel["targets"]:
            for name in re.findall(r"\b((?:arbiter|grpc)_[a-z_]+)", t["expr"]):
                if name in ("grpc_service", "grpc_method", "grpc_code"):
                    continue  # Labels.
                base = re.sub(r"_(bucket|sum|count)$", "", name)
                if base not in exported:
                    errors.append(f"dashboard panel '{panel['title']}': {name} is not exported")

    assert not errors, "\n".join(errors)
    print(f"kubernetes: {len(docs)} objects in {len(files)} files consistent; dashboard "
          f"{len(dashboard['panels'])} panels over exported series")


if __name__ == "__main__":
    main()
