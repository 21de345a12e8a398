#!/usr/bin/python3
"""deploy/helm/arbiter and deploy/docker/Dockerfile, checked without helm or docker.

Neither helm nor a Docker daemon is at hand, so:
- Chart.yaml's fields; in values.yaml, each key on the way to a value the
  templates use has a comment line above it, every `.Values` reference exists
  and every value is used; braces balance; every include is defined.
- The templates rendered by a small Go-template interpreter: only what the
  chart uses (pipelines, parentheses, include, if/else, range, define, the
  functions in FUNCS; numbers are float64 as in Helm), for the default values
  and two overlays. The YAML must parse without duplicate keys; then
  selectors, PDBs, probe ports, mounts, security contexts, arbiterd's replica
  flags and TOML (only options server/main.cc defines), both webhooks,
  cert-manager's Certificate, arbiter-kube's flags (those of
  clients/kube/main.cc) and RBAC.
- The Dockerfile: Debian 12 bases only, nothing fetched but apt packages,
  install-deps' build packages, the four targets (defined in the tree), a
  numeric non-root USER, a runtime stage without build packages.

Usage: helm_chart_test.py SOURCE_DIR
"""
import glob
import hashlib
import json
import os
import re
import sys
import tomllib

import yaml

errors = []
NS = "arbiter-system"  # the release's namespace in the renders


class TemplateError(Exception):
    pass


def lex(src):
    """Text and actions, {{- -}} trimming applied, comments dropped."""
    parts, pos = [], 0
    for m in re.finditer(r"\{\{(-?)(.*?)(-?)\}\}", src, re.S):
        parts += [["text", src[pos:m.start()]], ["act", m.group(2).strip(), m[1], m[3]]]
        pos = m.end()
    parts.append(["text", src[pos:]])
    for i, p in enumerate(parts):
        if p[0] == "act" and p[2]:
            parts[i - 1][1] = parts[i - 1][1].rstrip()
        if p[0] == "act" and p[3]:
            parts[i + 1][1] = parts[i + 1][1].lstrip()
    return [p for p in parts if not (p[0] == "act" and p[1].startswith("/*"))]


def parse(parts, i=0, stop=()):
    """[(kind, argument, body, else body)], the index of the stop word, the word."""
    nodes = []
    while i < len(parts):
        kind, body = parts[i][:2]
        kw, _, rest = body.partition(" ") if kind == "act" else ("", "", "")
        if kw in ("end", "else"):
            if kw not in stop:
                raise TemplateError(f"unexpected {{{{ {kw} }}}}")
            return nodes, i, kw
        if kw in ("if", "range", "define"):
            then, i, how = parse(parts, i + 1, ("end", "else") if kw == "if" else ("end",))
            other, i = parse(parts, i + 1, ("end",))[:2] if how == "else" else ([], i)
            nodes.append((kw, rest, then, other))
        else:
            nodes.append(("text" if kind == "text" else "expr", body, [], []))
        i += 1
    if stop:
        raise TemplateError("a block has no {{ end }}")
    return nodes, i, None


def gostr(v):
    if isinstance(v, (dict, list)):
        raise TemplateError(f"prints a map or list: {v}")
    if isinstance(v, bool):
        return str(v).lower()
    return "" if v is None else "%g" % v if isinstance(v, float) else str(v)  # 1e+06, as Go


def numbers(v, helm):
    """helm: integers to float64, as Helm reads values; else integral floats to
    integers, as Go's JSON and YAML encoders print them."""
    if isinstance(v, dict):
        return {k: numbers(x, helm) for k, x in v.items()}
    if isinstance(v, list):
        return [numbers(x, helm) for x in v]
    if helm:
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v
    return int(v) if isinstance(v, float) and v.is_integer() else v


def required(msg, v=None):
    if not v:
        raise TemplateError(msg)
    return v


FUNCS = {
    "quote": lambda *a: " ".join(json.dumps(gostr(x)) for x in a),
    "toJson": lambda v: json.dumps(numbers(v, False), sort_keys=True, separators=(",", ":")),
    "toYaml": lambda v: yaml.safe_dump(numbers(v, False), default_flow_style=False).rstrip("\n"),
    "indent": lambda n, s: "\n".join(" " * n + line for line in s.split("\n")),
    "nindent": lambda n, s: "\n" + FUNCS["indent"](n, s),
    "default": lambda d, v=None: v if v else d,
    "trunc": lambda n, s: s[:n],
    "trimSuffix": lambda suf, s: s[:-len(suf)] if suf and s.endswith(suf) else s,
    "int": lambda v: int(float(v)),
    "sha256sum": lambda s: hashlib.sha256(s.encode()).hexdigest(),
    "not": lambda v: not v,
    "and": lambda *a: next((x for x in a if not x), a[-1]),
    "or": lambda *a: next((x for x in a if x), a[-1]),
    "required": required,
}


class Renderer:
    def __init__(self, root, sources):
        self.root = root
        self.trees = {name: parse(lex(src))[0] for name, src in sources.items()}
        self.defines = {json.loads(n[1]): n[2]
                        for tree in self.trees.values() for n in tree if n[0] == "define"}

    def term(self, t, dot):
        if isinstance(t, list):
            return self.pipe(t, dot)
        if t[0] == '"' or t in ("true", "false") or re.fullmatch(r"-?\d+", t):
            return json.loads(t)
        if t in (".", "$"):
            return dot if t == "." else self.root
        if not t.startswith((".", "$.")):
            raise TemplateError(f"unknown term {t}")
        base = self.root if t[0] == "$" else dot
        for k in t.lstrip("$.").split("."):
            if not isinstance(base, dict):
                raise TemplateError(f"nil pointer evaluating {t}")
            base = base.get(k)
        return base

    def pipe(self, items, dot):
        cmds = [[]]
        for t in items:
            cmds.append([]) if t == "|" else cmds[-1].append(t)
        val = none = object()
        for head, *args in cmds:
            if not isinstance(head, str) or not re.fullmatch(r"[A-Za-z]\w*", head) \
                    or head in ("true", "false"):
                if args or val is not none:
                    raise TemplateError(f"cannot evaluate {[head] + args}")
                val = self.term(head, dot)
                continue
            args = [self.term(a, dot) for a in args] + ([] if val is none else [val])
            if head == "include" and args[0] in self.defines:
                val = self.render(self.defines[args[0]], args[1])
            elif head in FUNCS:
                val = FUNCS[head](*args)
            else:
                raise TemplateError(f"{head} {args[:1]}: not defined, or not supported here")
        return val

    def ev(self, text, dot):
        stack = [[]]
        for t in re.findall(r'"(?:[^"\\]|\\.)*"|[()|]|[^\s()|]+', text):
            if t == "(":
                stack.append([])
            elif t == ")":
                inner = stack.pop()
                stack[-1].append(inner)
            else:
                stack[-1].append(t)
        return self.pipe(stack[0], dot)

    def render(self, nodes, dot):
        out = []
        for kind, arg, body, other in nodes:
            if kind == "text":
                out.append(arg)
            elif kind == "expr":
                out.append(gostr(self.ev(arg, dot)))
            elif kind == "if":
                out.append(self.render(body if self.ev(arg, dot) else other, dot))
            elif kind == "range":
                seq = self.ev(arg, dot) or []
                seq = [seq[k] for k in sorted(seq)] if isinstance(seq, dict) else seq
                out += [self.render(body, x) for x in seq]
        return "".join(out)


class StrictLoader(yaml.SafeLoader):
    """The API server refuses a key given twice; PyYAML would keep the last."""

    def construct_mapping(self, node, deep=False):
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        if len(keys) != len(set(keys)):
            raise yaml.constructor.ConstructorError(None, None, f"duplicate keys in {keys}",
                                                    node.start_mark)
        return super().construct_mapping(node, deep)


def merge(base, over):
    deeper = lambda k, v: isinstance(v, dict) and v and isinstance(base.get(k), dict)
    return {**base, **{k: merge(base[k], v) if deeper(k, v) else v for k, v in over.items()}}


def check_values(chart_dir, sources):
    refs = set()
    for name, src in sources.items():
        refs |= set(re.findall(r"\.Values\.([\w.]*\w)", src))
        if src.count("{{") != src.count("}}"):
            errors.append(f"{name}: {src.count('{{')} '{{{{' but {src.count('}}')} '}}}}'")
        for inc in re.findall(r'include "([^"]+)"', src):
            if f'define "{inc}"' not in sources["_helpers.tpl"]:
                errors.append(f"{name}: include {inc!r} is not defined in _helpers.tpl")
    text = open(os.path.join(chart_dir, "values.yaml")).read()
    values, lines, stack, paths = yaml.safe_load(text), text.split("\n"), [], {}
    for n, line in enumerate(lines):
        m = re.match(r"( *)(\w+):", line)
        if m:
            while stack and stack[-1][0] >= len(m[1]):
                stack.pop()
            stack.append((len(m[1]), m[2]))
            paths[".".join(k for _, k in stack)] = n
    for path, n in paths.items():
        value = values
        for k in path.split("."):
            value = value[k]
        leaf = not (isinstance(value, dict) and value)
        if leaf and not any(path == r or path.startswith(r + ".") for r in refs):
            errors.append(f"values.yaml: {path} is used by no template")
        # Keys below a value used whole (resources: requests: ...) need no comment.
        used = any(r == path or r.startswith(path + ".") for r in refs)
        if used and not (n and lines[n - 1].lstrip().startswith("#")):
            errors.append(f"values.yaml:{n + 1}: {path} has no comment line above it")
    errors.extend(f"templates use .Values.{r}, which values.yaml lacks"
                  for r in sorted(refs) if r not in paths)
    return values


def render_all(sources, values, chart, where):
    root = {"Values": numbers(values, True),
            "Release": {"Name": "arbiter", "Namespace": NS, "Service": "Helm"},
            "Chart": {"Name": chart["name"], "Version": chart["version"],
                      "AppVersion": chart["appVersion"]}}
    objs = {}
    try:
        r = Renderer(root, sources)
        for name, tree in r.trees.items():
            text = r.render(tree, root)
            for doc in yaml.load_all(text, Loader=StrictLoader) if name.endswith(".yaml") else []:
                if doc and not (doc.get("apiVersion") and doc.get("kind")
                                and doc.get("metadata", {}).get("name")):
                    errors.append(f"{where}: {name}: an object lacks apiVersion, kind or name")
                elif doc:
                    objs[(doc["kind"], doc["metadata"]["name"])] = doc
    except (TemplateError, yaml.YAMLError, KeyError, TypeError) as e:
        errors.append(f"{where}: rendering failed: {type(e).__name__}: {e}")
        return {}
    return objs


def flags(args):
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}


def known_flags(src, path, pattern=r'add_(?:option|flag)\(\s*"--([a-z-]+)"'):
    return set(re.findall(pattern, open(os.path.join(src, path)).read()))


def check_pod(where, workload, objs):
    pod = workload["spec"]["template"]
    labels, spec = pod["metadata"]["labels"], pod["spec"]
    if any(labels.get(k) != v for k, v in workload["spec"]["selector"]["matchLabels"].items()):
        errors.append(f"{where}: selector does not match the pod's labels")
    ps = spec.get("securityContext", {})
    if (ps.get("runAsNonRoot"), ps.get("runAsUser"), ps.get("seccompProfile")) != \
            (True, 65532, {"type": "RuntimeDefault"}):
        errors.append(f"{where}: pod security context is not non-root 65532 with RuntimeDefault")
    volumes = {v["name"] for v in spec.get("volumes", [])}
    for c in spec.get("initContainers", []) + spec["containers"]:
        sc, res = c.get("securityContext", {}), c.get("resources", {})
        if (sc.get("allowPrivilegeEscalation"), sc.get("readOnlyRootFilesystem"),
                sc.get("capabilities", {}).get("drop"), sc.get("runAsUser")) != \
                (False, True, ["ALL"], 65532):
            errors.append(f"{where}: container {c['name']}: security context is not locked down")
        if not res.get("requests") or "memory" not in res.get("limits", {}):
            errors.append(f"{where}: container {c['name']}: needs requests and a memory limit")
        ports = {p["name"] for p in c.get("ports", [])}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            port = c.get(probe, {}).get("httpGet", {}).get("port")
            if port and port not in ports:
                errors.append(f"{where}: {probe} names port {port}, which {c['name']} lacks")
        errors.extend(f"{where}: mount {m['name']} has no volume"
                      for m in c.get("volumeMounts", []) if m["name"] not in volumes)
    pdbs = [o for (k, _), o in objs.items() if k == "PodDisruptionBudget"
            and all(labels.get(a) == b for a, b in o["spec"]["selector"]["matchLabels"].items())]
    if len(pdbs) != 1 or pdbs[0]["spec"].get("maxUnavailable") != 1:
        errors.append(f"{where}: needs one PodDisruptionBudget with maxUnavailable 1")
    return spec


def check_arbiterd(where, objs, src):
    sts = objs.get(("StatefulSet", "arbiter-arbiterd"))
    if not sts:
        return errors.append(f"{where}: no StatefulSet arbiter-arbiterd")
    pod, peers = check_pod(where + ": arbiterd", sts, objs), sts["spec"]["serviceName"]
    headless = objs.get(("Service", peers), {}).get("spec", {}).get("clusterIP") == "None"
    if not headless or sts["spec"]["replicas"] < 2:
        errors.append(f"{where}: arbiterd needs 2+ replicas and a headless serviceName")
    c = pod["containers"][0]
    ports, f = {p["name"]: p["containerPort"] for p in c["ports"]}, flags(c["args"])
    want = f"$(POD_NAME).{peers}.{NS}.svc:{ports['grpc']}"
    if f.get("--replica-name") != "$(POD_NAME)" or f.get("--advertise-address") != want:
        errors.append(f"{where}: arbiterd needs --replica-name $(POD_NAME) "
                      f"--advertise-address {want}")
    pod_name = {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
    if pod_name not in c["env"] or pod["initContainers"][0]["args"][-1] != "migrate":
        errors.append(f"{where}: arbiterd needs POD_NAME from the pod and a migrate init container")
    toml = tomllib.loads(objs[("ConfigMap", "arbiter-arbiterd")]["data"]["arbiterd.toml"])
    top = known_flags(src, "server/main.cc", r'app\.add_option\("--([a-z-]+)"')
    bad = (set(toml) - top - {"serve"}) | (set(toml["serve"]) - known_flags(src, "server/main.cc"))
    if bad:
        errors.append(f"{where}: arbiterd.toml has options arbiterd does not know: {sorted(bad)}")
    mounts = tuple(m["mountPath"] + "/" for m in c["volumeMounts"])
    for key in ("tls-cert", "tls-key", "tls-client-ca", "ledger-key", "webhook-cert",
                "webhook-key"):
        if key in toml["serve"] and not toml["serve"][key].startswith(mounts):
            errors.append(f"{where}: {key} {toml['serve'][key]} is in no mounted volume")
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    for (kind, name), o in objs.items():
        if kind == "Certificate" and not (o["spec"]["secretName"] in secrets
                                          and "webhook-cert" in toml["serve"]):
            errors.append(f"{where}: arbiterd does not serve the webhooks with {name}'s Secret")
    for key, port in (("listen", "grpc"), ("metrics-listen", "metrics"),
                      ("webhook-listen", "webhook")):
        if not toml["serve"].get(key, "").endswith(f":{ports[port]}"):
            errors.append(f"{where}: {key} is not the {port} port {ports[port]}")


def check_webhooks(where, objs):
    hooks = sorted((k, o) for (k, _), o in objs.items() if k.endswith("WebhookConfiguration"))
    if [k for k, _ in hooks] != ["MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]:
        return errors.append(f"{where}: needs a mutating and a validating webhook configuration")
    for kind, o in hooks:
        w = o["webhooks"][0]
        svc, rule = w["clientConfig"]["service"], w["rules"][0]
        path, side = ("/admit", "None") if kind[0] == "M" else ("/validate", "NoneOnDryRun")
        if (svc["path"], w["sideEffects"], w["failurePolicy"], rule["operations"],
                rule["resources"]) != (path, side, "Fail", ["CREATE"], ["pods"]):
            errors.append(f"{where}: {kind} must be pods CREATE, {path}, {side}, Fail")
        ports = objs.get(("Service", svc["name"]), {}).get("spec", {}).get("ports", [])
        served = any((p["port"], p["targetPort"]) == (svc["port"], "webhook") for p in ports)
        if svc["namespace"] != NS or not served:
            errors.append(f"{where}: {kind} calls {svc}, which no Service port serves")
        inject = o["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from", "/")
        cert = objs.get(("Certificate", inject.split("/")[1]), {}).get("spec", {})
        if inject != "/" and f"{svc['name']}.{NS}.svc" not in cert.get("dnsNames", []):
            errors.append(f"{where}: {kind} injects the CA of {inject}, "
                          f"which is no Certificate for {svc['name']}.{NS}.svc")
    selectors = [o["webhooks"][0]["namespaceSelector"] for _, o in hooks]
    if selectors[0] != selectors[1] or NS not in str(selectors[0]):
        errors.append(f"{where}: the webhooks must skip the same namespaces, the release's too")


RBAC = {("", "pods"): "get list watch delete", ("", "pods/eviction"): "create",
        ("", "nodes"): "get list watch", ("resource.k8s.io", "resourceslices"): "get list watch",
        ("resource.k8s.io", "resourceclaims"): "get list watch create patch update delete",
        ("resource.k8s.io", "resourceclaims/status"): "update patch"}
KUEUE = {("kueue.x-k8s.io", r): "get list create patch"
         for r in ("clusterqueues", "cohorts", "resourceflavors", "localqueues")}
KUBE_FLAGS = {"--endpoint", "--tls-ca", "--tls-cert", "--tls-key", "--cluster", "--lease-name",
              "--lease-namespace", "--identity", "--renew-every", "--drain-grace",
              "--not-ready-after", "--kueue-every"}


def check_controller(where, objs, kueue, src):
    dep = objs.get(("Deployment", "arbiter-kube"))
    if not dep:
        return errors.append(f"{where}: no Deployment arbiter-kube")
    pod = check_pod(where + ": arbiter-kube", dep, objs)
    c = pod["containers"][0]
    f = flags(c["args"])
    if (c.get("command"), set(f), dep["spec"]["replicas"], f["--identity"],
            f["--lease-namespace"]) != (["/usr/local/bin/arbiter-kube"], KUBE_FLAGS, 2,
                                        "$(POD_NAME)", NS):
        errors.append(f"{where}: arbiter-kube's command, replicas or flags are wrong: {c['args']}")
    main_cc = "clients/kube/main.cc"
    unknown = {a[2:] for a in f} - known_flags(src, main_cc) \
        if os.path.exists(os.path.join(src, main_cc)) else set()
    if unknown:
        errors.append(f"{where}: flags arbiter-kube does not know: {sorted(unknown)}")
    if (f["--kueue-every"] == "0s") == kueue:
        errors.append(f"{where}: --kueue-every {f['--kueue-every']} with kueue.enabled={kueue}")
    account = {"kind": "ServiceAccount", "name": pod["serviceAccountName"], "namespace": NS}
    bound = {(b["roleRef"]["kind"], b["roleRef"]["name"]) for (k, _), b in objs.items()
             if k.endswith("RoleBinding") and account in b["subjects"]}
    rules = {k[0]: {(g, r): set(x["verbs"])
                    for x in o["rules"] for g in x["apiGroups"] for r in x["resources"]}
             for k, o in objs.items() if k in bound}
    for (group, res), verbs in list(RBAC.items()) + list(KUEUE.items() if kueue else []):
        if not set(verbs.split()) <= rules.get("ClusterRole", {}).get((group, res), set()):
            errors.append(f"{where}: no bound ClusterRole grants {verbs} on {group}/{res}")
    leases = rules.get("Role", {}).get(("coordination.k8s.io", "leases"), set())
    if not {"get", "create", "update"} <= leases:
        errors.append(f"{where}: no bound Role lets the controller hold its Lease")


def check_dockerfile(src):
    text = re.sub(r"\\\n", " ", open(os.path.join(src, "deploy/docker/Dockerfile")).read())
    stages = []
    for line in (x.strip() for x in text.split("\n")):
        if not line or line.startswith("#"):
            continue
        if re.match(r"FROM\s", line, re.I):
            stages.append([])
            if not re.fullmatch(r"FROM\s+debian:bookworm(-slim)?(\s+AS\s+\w+)?", line, re.I):
                errors.append(f"Dockerfile: a base other than Debian 12: {line}")
        elif stages:
            stages[-1].append(line)
        if re.match(r"ADD\s", line, re.I) or re.search(r"\b(curl|wget|git clone)\b|\w+://", line):
            errors.append(f"Dockerfile: fetches something other than Debian packages: {line}")
    if len(stages) < 2:
        return errors.append("Dockerfile: needs a build stage and a runtime stage")
    build, run = " ".join(stages[0]) + " ", " ".join(stages[-1])
    users = [line.split()[1] for line in stages[-1] if line.upper().startswith("USER ")]
    if not users or not re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]):
        errors.append(f"Dockerfile: the runtime stage must end as a numeric non-root USER: {users}")
    targets = {"arbiterd", "arbctl", "arbiter-agent", "arbiter-kube"}
    built = re.search(r"--target((?:\s+[\w-]+)+)", build)
    if not built or set(built[1].split()) != targets or "-G Ninja" not in build \
            or "CMAKE_BUILD_TYPE=Release" not in build:
        errors.append(f"Dockerfile: must build {sorted(targets)} with CMake, Ninja, Release")
    cmake = " ".join(open(p).read() for p in glob.glob(src + "/**/CMakeLists.txt", recursive=True))
    errors.extend(f"Dockerfile: target {t} is defined by no CMakeLists.txt"
                  for t in sorted(targets) if not re.search(r"NAME %s\s" % t, cmake))
    deps = open(os.path.join(src, "deploy/local/install-deps")).read()
    wanted = set(re.findall(r"[\w.+-]+-dev\b", deps.split("packages=(")[1].split("\n)")[0]))
    wanted -= {"libgtest-dev", "libgmock-dev", "libbenchmark-dev",  # tests, benchmarks
               "libclang-rt-14-dev"}  # fuzzing
    wanted |= {"cmake", "ninja-build", "protobuf-compiler", "protobuf-compiler-grpc"}
    for p in sorted(wanted):
        if f" {p} " not in build:
            errors.append(f"Dockerfile: the build stage does not install {p}")
    if re.search(r"-dev\b|build-essential|cmake", run) or "COPY --from=build" not in run \
            or 'ENTRYPOINT ["/usr/local/bin/arbiterd"]' not in run:
        errors.append("Dockerfile: the runtime stage must copy the binaries, run arbiterd, "
                      "and install no build packages")


SCENARIOS = [
    ("default values", {}),
    ("cert-manager, DSN in values, ServiceMonitor, no Kueue",
     {"webhook": {"certManager": {"enabled": True}},
      "arbiterd": {"database": {"dsn": "host=db"}},
      "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}},
      "controller": {"kueue": {"enabled": False}}}),
    ("no controller, no webhooks",
     {"controller": {"enabled": False}, "webhook": {"enabled": False}}),
]


def main():
    src = sys.argv[1]
    chart_dir = os.path.join(src, "deploy/helm/arbiter")
    chart = yaml.safe_load(open(os.path.join(chart_dir, "Chart.yaml")))
    expect = {"apiVersion": "v2", "name": "arbiter", "version": "0.1.0", "appVersion": "0.1.0"}
    errors.extend(f"Chart.yaml: {k} is {chart.get(k)!r}, not {v!r}"
                  for k, v in expect.items() if chart.get(k) != v)
    sources = {os.path.basename(p): open(p).read()
               for p in sorted(glob.glob(chart_dir + "/templates/*"))}
    values = check_values(chart_dir, sources)
    for where, over in SCENARIOS:
        v = merge(values, over)
        objs = render_all(sources, v, chart, where)
        if not objs:
            continue
        try:
            check_arbiterd(where, objs, src)
            if v["webhook"]["enabled"]:
                check_webhooks(where, objs)
            if v["controller"]["enabled"]:
                check_controller(where, objs, v["controller"]["kueue"]["enabled"], src)
        except (KeyError, TypeError, AttributeError, IndexError, tomllib.TOMLDecodeError) as e:
            errors.append(f"{where}: objects not shaped as expected: {type(e).__name__}: {e}")
        kinds = {k for k, _ in objs}
        for kind, on in (("MutatingWebhookConfiguration", v["webhook"]["enabled"]),
                         ("Deployment", v["controller"]["enabled"]),
                         ("ServiceMonitor", v["metrics"]["serviceMonitor"]["enabled"]),
                         ("Certificate", v["webhook"]["certManager"]["enabled"]),
                         ("Secret", bool(v["arbiterd"]["database"]["dsn"]))):
            if (kind in kinds) != on:
                errors.append(f"{where}: a {kind} is {'missing' if on else 'rendered'}")
    check_dockerfile(src)
    for e in errors:
        print("FAIL:", e)
    print(f"helm_chart: {len(errors)} problem(s)" if errors else "helm_chart: ok")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
