#!/usr/bin/python3
"""The rendered deploy/ manifests, checked offline (no cluster).

Usage: test_manifests.py BUILD_DIR

The kustomization is rendered with `kubectl kustomize deploy/` when kubectl is installed, and
always with the small renderer below (resources + images, the only kustomize features deploy/
uses); when both run, they must agree. Then: the kinds present, no public Service or Ingress,
the frontend's probes and shutdown, the DaemonSet's node selection, host mounts, privileges and
env, the CronJob, the RBAC (exactly the least-privilege set), what the NetworkPolicies let
through (evaluated on the pods the manifests and the frontend make), every environment variable
documented by the binary's --help, and the Dockerfile's packages against scripts/lib.sh.
Metrics (deploy/monitoring/): the listen addresses, container ports and prometheus.io/*
annotations agree; only the monitoring namespace reaches the metrics ports; the optional
component renders on an overlay (kubectl kustomize) and its PodMonitors find the ports; the
PrometheusRule carries exactly rules.yaml; `promtool check rules` and `promtool test rules`
accept rules.yaml and its unit tests; every alert's runbook_url is a section of docs/deploy.md.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("test_manifests: PyYAML is missing: apt-get install python3-yaml")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import testmain  # noqa: E402

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(SRC, "deploy")
MONITORING = os.path.join(DEPLOY, "monitoring")
BUILD = None

SYSTEM_NS = "compute-system"
SANDBOX_NS = "compute-sandboxes"
GVISOR_LABEL = "compute.paper-board.io/gvisor"
AGENT_LABELS = {"app.kubernetes.io/name": "compute-node-agent"}
FRONTEND_LABELS = {"app.kubernetes.io/name": "compute-frontend"}
MONITORING_NS = "monitoring"
FRONTEND_METRICS_PORT = 9461
AGENT_METRICS_PORT = 9462
# Every metric the daemons export (docs/deploy.md); the alert rules may use no other.
METRIC_NAMES = {
    "up",  # Prometheus' own, per target
    "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
    "process_max_fds", "process_start_time_seconds", "compute_build_info",
    "grpc_server_started_total", "grpc_server_handled_total", "grpc_server_handling_seconds",
    "compute_sandbox_cpu_seconds_total", "compute_sandbox_memory_bytes",
    "compute_sandbox_memory_peak_bytes", "compute_sandbox_disk_read_bytes_total",
    "compute_sandbox_disk_write_bytes_total", "compute_sandbox_network_receive_bytes_total",
    "compute_sandbox_network_transmit_bytes_total", "compute_sandbox_uptime_seconds",
    "compute_sandbox_egress_denied_packets_total", "compute_dns_queries_total",
    "compute_dns_replies_by_agent_total", "compute_dns_upstream_queries_total",
    "compute_dns_upstream_errors_total", "compute_dns_tcp_refused_total",
    "compute_sandbox_status", "compute_exec_total", "compute_exec_duration_seconds",
    "compute_execs_running", "compute_file_bytes_total",
    "compute_agent_up", "compute_scheduler_sandboxes", "compute_kube_requests_total",
    "compute_kube_request_duration_seconds", "compute_kube_watch_restarts_total",
    "compute_kube_relists_total", "compute_workspace_pvcs_expired",
}
# What the frontend puts on every sandbox pod (docs/kube.md: "What the frontend makes").
SANDBOX_LABELS = {
    "app.kubernetes.io/managed-by": "compute-frontend",
    "app.kubernetes.io/name": "compute-sandbox",
    "compute.paper-board.io/sandbox-id": "0b5d3d1e-4c52-4a8e-9a43-3d1c7a3c2f11",
    "compute.paper-board.io/tenant-id": "6f1c2b7e-8d0a-4a49-b0a4-2c1e5e7b9d20",
    "compute.paper-board.io/session-id": "9e8d7c6b-5a4f-4e3d-8c2b-1a0f9e8d7c6b",
}


# ---- rendering ---------------------------------------------------------------------------


def load_docs(text):
    return [d for d in yaml.safe_load_all(text) if d]


def render_plain():
    """deploy/ rendered without kustomize: the resource files, with the images transformer."""
    with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    known = {"apiVersion", "kind", "resources", "images"}
    unknown = set(kust) - known
    if unknown:
        raise AssertionError(
            "kustomization.yaml uses %s: teach render_plain() about it" % sorted(unknown))
    docs = []
    for res in kust["resources"]:
        with open(os.path.join(DEPLOY, res)) as f:
            docs.extend(load_docs(f.read()))
    images = {i["name"]: i for i in kust.get("images", [])}
    for doc in docs:
        for c in containers_of(doc):
            name, sep, tag = c["image"].partition(":")
            if name in images:
                im = images[name]
                c["image"] = "%s:%s" % (im.get("newName", name), im.get("newTag", tag or "latest"))
    return docs


def render_kubectl():
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    out = subprocess.run([kubectl, "kustomize", DEPLOY], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise AssertionError("kubectl kustomize deploy/ failed:\n" + out.stderr)
    return load_docs(out.stdout)


def pod_spec(doc):
    kind = doc.get("kind")
    if kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
        return doc["spec"]["template"]["spec"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if kind == "Pod":
        return doc["spec"]
    return None


def pod_labels(doc):
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"]
    return doc["spec"]["template"]["metadata"]["labels"]


def containers_of(doc):
    spec = pod_spec(doc)
    if not spec:
        return []
    return spec.get("initContainers", []) + spec.get("containers", [])


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


def key(doc):
    return (doc["kind"], doc["metadata"].get("namespace"), doc["metadata"]["name"])


# ---- NetworkPolicy semantics (networking.k8s.io/v1), for the pods of this deployment ---------


def selector_matches(sel, labels):
    if sel is None:
        return True
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(k) not in vals:
            return False
        if op == "NotIn" and k in labels and labels[k] in vals:
            return False
        if op == "Exists" and k not in labels:
            return False
        if op == "DoesNotExist" and k in labels:
            return False
    return True


class Pod:
    def __init__(self, name, ns, labels, ns_labels=None):
        self.name, self.ns, self.labels = name, ns, labels
        self.ns_labels = dict(ns_labels or {})
        self.ns_labels["kubernetes.io/metadata.name"] = ns

    def __repr__(self):
        return self.name


def peer_matches(peer, policy_ns, pod):
    if "ipBlock" in peer:
        return False  # pods are not matched by ipBlock in this model (pod IPs are unknown)
    if "namespaceSelector" in peer:
        if not selector_matches(peer["namespaceSelector"], pod.ns_labels):
            return False
    elif pod.ns != policy_ns:
        return False
    return selector_matches(peer.get("podSelector"), pod.labels)


def port_matches(ports, port, target):
    if not ports:
        return True
    for p in ports:
        if p.get("protocol", "TCP") != "TCP":
            continue
        pp = p.get("port")
        if pp is None or pp == port or (isinstance(pp, str) and pp == target.get(port)):
            return True
    return False


def direction_allows(policies, pod, other, port, named_ports, direction):
    """Whether pod's policies of this direction (Ingress/Egress) let traffic to or from other."""
    field, peer_field = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    selecting = [p for p in policies
                 if p["metadata"]["namespace"] == pod.ns
                 and selector_matches(p["spec"]["podSelector"], pod.labels)
                 and direction in p["spec"].get("policyTypes", ["Ingress"])]
    if not selecting:
        return True
    for p in selecting:
        for rule in p["spec"].get(field) or []:
            peers = rule.get(peer_field)
            if peers and not any(peer_matches(x, p["metadata"]["namespace"], other)
                                 for x in peers):
                continue
            if port_matches(rule.get("ports"), port, named_ports):
                return True
    return False


def connection_allowed(policies, src, dst, port, named_ports=None):
    named_ports = named_ports or {}
    return (direction_allows(policies, src, dst, port, named_ports, "Egress")
            and direction_allows(policies, dst, src, port, named_ports, "Ingress"))


# ---- the tests ---------------------------------------------------------------------------


class Manifests(unittest.TestCase):
    docs = None

    @classmethod
    def setUpClass(cls):
        plain = render_plain()
        rendered = render_kubectl()
        cls.renderer = "kubectl kustomize" if rendered is not None else "plain renderer"
        cls.plain = plain
        cls.rendered = rendered
        cls.docs = rendered if rendered is not None else plain
        cls.by_key = {key(d): d for d in cls.docs}
        with open(os.path.join(DEPLOY, "nodeagent.yaml")) as f:
            cls.nodeagent_text = f.read()

    def get(self, kind, name, ns=SYSTEM_NS):
        k = (kind, ns, name)
        self.assertIn(k, self.by_key, "%s %s/%s missing" % (kind, ns, name))
        return self.by_key[k]

    def of_kind(self, kind):
        return [d for d in self.docs if d["kind"] == kind]

    def container(self, doc, name=None):
        cs = pod_spec(doc)["containers"]
        if name is None:
            self.assertEqual(len(cs), 1, "%s: one container expected" % (key(doc),))
            return cs[0]
        return next(c for c in cs if c["name"] == name)

    # -- rendering and kinds --

    def test_renderers_agree(self):
        if self.rendered is None:
            self.skipTest("kubectl is not installed: rendered with the plain renderer only")
        self.assertEqual(sorted(map(key, self.rendered)), sorted(map(key, self.plain)))
        plain = {key(d): d for d in self.plain}
        for d in self.rendered:
            self.assertEqual(d, plain[key(d)], "kustomize renders %s differently" % (key(d),))

    def test_kinds_present(self):
        want = {
            ("Namespace", None, SYSTEM_NS), ("Namespace", None, SANDBOX_NS),
            ("RuntimeClass", None, "gvisor"),
            ("ServiceAccount", SYSTEM_NS, "compute-frontend"),
            ("ServiceAccount", SYSTEM_NS, "compute-gc"),
            ("ServiceAccount", SYSTEM_NS, "compute-node-agent"),
            ("Deployment", SYSTEM_NS, "compute-frontend"),
            ("Service", SYSTEM_NS, "compute-frontend"),
            ("PodDisruptionBudget", SYSTEM_NS, "compute-frontend"),
            ("DaemonSet", SYSTEM_NS, "compute-node-agent"),
            ("CronJob", SYSTEM_NS, "compute-gc"),
            ("ConfigMap", SYSTEM_NS, "compute-warm-pool"),
        }
        self.assertEqual(want - set(self.by_key), set())
        for kind in ("Role", "RoleBinding", "NetworkPolicy"):
            self.assertTrue(self.of_kind(kind), kind + " missing")
        for kind in ("ClusterRole", "ClusterRoleBinding"):
            self.assertEqual(self.of_kind(kind), [], "no cluster-wide RBAC expected")

    def test_namespaced_objects_have_our_namespaces(self):
        cluster_scoped = {"Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding"}
        for d in self.docs:
            if d["kind"] in cluster_scoped:
                continue
            self.assertIn(d["metadata"].get("namespace"), (SYSTEM_NS, SANDBOX_NS), key(d))

    def test_images_settable(self):
        with open(os.path.join(DEPLOY, "kustomization.yaml")) as f:
            names = {i["name"] for i in yaml.safe_load(f)["images"]}
        self.assertEqual(names, {"compute-frontend", "compute-nodeagent"})
        for d in self.docs:
            for c in containers_of(d):
                self.assertRegex(c["image"], r"^compute-(frontend|nodeagent):[\w.-]+$", key(d))

    # -- no public exposure --

    def test_no_public_service_or_ingress(self):
        for kind in ("Ingress", "Gateway", "HTTPRoute", "GRPCRoute", "IngressClass"):
            self.assertEqual(self.of_kind(kind), [], kind)
        for svc in self.of_kind("Service"):
            self.assertEqual(svc["spec"].get("type", "ClusterIP"), "ClusterIP", key(svc))
            self.assertNotIn("externalIPs", svc["spec"])
            for p in svc["spec"]["ports"]:
                self.assertNotIn("nodePort", p)
        svc = self.get("Service", "compute-frontend")
        self.assertEqual([p["port"] for p in svc["spec"]["ports"]], [50051])
        dep = self.get("Deployment", "compute-frontend")
        self.assertTrue(selector_matches({"matchLabels": svc["spec"]["selector"]},
                                         pod_labels(dep)))
        for d in self.docs:
            for c in containers_of(d):
                for p in c.get("ports", []):
                    self.assertNotIn("hostPort", p, "%s: hostPort" % (key(d),))

    # -- frontend --

    def test_frontend(self):
        dep = self.get("Deployment", "compute-frontend")
        spec = pod_spec(dep)
        c = self.container(dep)
        self.assertEqual(dep["spec"]["replicas"], 2)
        self.assertEqual(spec["serviceAccountName"], "compute-frontend")
        self.assertTrue(selector_matches(dep["spec"]["selector"], pod_labels(dep)))
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(probe, c)
            self.assertEqual(c[probe].get("grpc", {}).get("port"), 50051, probe)
        self.assertEqual([(p["name"], p["containerPort"]) for p in c["ports"]],
                         [("grpc", 50051), ("metrics", FRONTEND_METRICS_PORT)])
        env = env_map(c)
        want = {"COMPUTE_SCHEDULER": "kube", "COMPUTE_LISTEN": "0.0.0.0:50051",
                "COMPUTE_SANDBOX_NAMESPACE": SANDBOX_NS, "COMPUTE_AGENT_NAMESPACE": SYSTEM_NS,
                "COMPUTE_RUNTIME_CLASS": "gvisor"}
        for k, v in want.items():
            self.assertEqual(env.get(k, {}).get("value"), v, k)
        for k in ("SANDBOX_IMAGE", "PVC_STORAGE_CLASS", "PVC_WORKSPACE_SIZE"):
            self.assertIn(k, env)
        self.assertTrue(selector_matches(
            {"matchLabels": dict([env["COMPUTE_AGENT_SELECTOR"]["value"].split("=", 1)])},
            pod_labels(self.get("DaemonSet", "compute-node-agent"))),
            "COMPUTE_AGENT_SELECTOR does not select the agent pods")
        # Shutdown: preStop + COMPUTE_SHUTDOWN_GRACE_MS fit in the termination grace period.
        grace_ms = int(env["COMPUTE_SHUTDOWN_GRACE_MS"]["value"])
        pre_stop_s = 0
        cmd = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        if cmd[:1] == ["/bin/sleep"]:
            pre_stop_s = int(cmd[1])
        self.assertGreater(spec["terminationGracePeriodSeconds"] * 1000,
                           grace_ms + pre_stop_s * 1000)
        # ... and the grace covers the longest stream: the API's 600 s cap on a command or a
        # session, then the 10 s from a timeout's SIGTERM to its SIGKILL (docs/api.md).
        self.assertGreaterEqual(grace_ms, (600 + 10) * 1000)
        self.assertIn("limits", c["resources"])
        self.assertIn("requests", c["resources"])
        self.assert_tls_env(c, spec, "COMPUTE_AGENT_TLS_", "compute-frontend-tls")
        self.assertTrue(spec.get("topologySpreadConstraints") or
                        spec.get("affinity", {}).get("podAntiAffinity"))
        pdb = self.get("PodDisruptionBudget", "compute-frontend")
        self.assertTrue(selector_matches(pdb["spec"]["selector"], pod_labels(dep)))
        self.assertLess(pdb["spec"].get("minAvailable", 0), dep["spec"]["replicas"])

    def assert_tls_env(self, c, spec, prefix, secret):
        env = env_map(c)
        vols = {v["name"]: v for v in spec["volumes"]}
        for suffix in ("CA", "CERT", "KEY"):
            path = env[prefix + suffix]["value"]
            mount = next((m for m in c["volumeMounts"]
                          if path.startswith(m["mountPath"].rstrip("/") + "/")), None)
            self.assertIsNotNone(mount, "%s: %s is on no volume" % (prefix + suffix, path))
            self.assertTrue(mount.get("readOnly"), mount)
            self.assertEqual(vols[mount["name"]].get("secret", {}).get("secretName"), secret)

    def test_security_contexts(self):
        for d in self.docs:
            spec = pod_spec(d)
            if not spec:
                continue
            psc = spec.get("securityContext", {})
            for c in containers_of(d):
                sc = c.get("securityContext", {})
                what = "%s/%s" % (d["metadata"]["name"], c["name"])
                self.assertIs(sc.get("allowPrivilegeEscalation"), False, what)
                self.assertIs(sc.get("readOnlyRootFilesystem"), True, what)
                self.assertFalse(sc.get("privileged", False), what)
                self.assertIn("ALL", sc.get("capabilities", {}).get("drop", []), what)
                seccomp = sc.get("seccompProfile") or psc.get("seccompProfile") or {}
                self.assertEqual(seccomp.get("type"), "RuntimeDefault", what)
                for m in c.get("volumeMounts", []):
                    self.assertNotEqual(m.get("mountPropagation"), "Bidirectional", what)
            if d["metadata"]["name"] != "compute-node-agent":
                self.assertIs(psc.get("runAsNonRoot"), True, key(d))
                for k in ("hostNetwork", "hostPID", "hostIPC"):
                    self.assertFalse(spec.get(k, False), "%s: %s" % (key(d), k))
                self.assertFalse([v for v in spec.get("volumes", []) if "hostPath" in v])

    # -- node agent --

    def test_daemonset(self):
        ds = self.get("DaemonSet", "compute-node-agent")
        spec = pod_spec(ds)
        c = self.container(ds)
        self.assertTrue(selector_matches({"matchLabels": AGENT_LABELS}, pod_labels(ds)))
        self.assertTrue(selector_matches(ds["spec"]["selector"], pod_labels(ds)))
        # Node selection: exactly the RuntimeClass's gVisor nodes, tolerating their taint.
        rc = self.get("RuntimeClass", "gvisor", None)
        self.assertEqual(rc["handler"], "runsc")
        rc_sel = rc["scheduling"]["nodeSelector"]
        self.assertEqual(rc_sel.get(GVISOR_LABEL), "true")
        for k, v in rc_sel.items():
            self.assertEqual(spec["nodeSelector"].get(k), v)
        for t in rc["scheduling"].get("tolerations", []):
            self.assertIn(t, spec.get("tolerations", []))
        us = ds["spec"]["updateStrategy"]
        self.assertEqual(us["type"], "RollingUpdate")
        self.assertEqual(us["rollingUpdate"]["maxUnavailable"], 1)
        # No API access.
        self.assertIs(spec.get("automountServiceAccountToken"), False)
        sa = self.get("ServiceAccount", spec["serviceAccountName"])
        self.assertIs(sa.get("automountServiceAccountToken"), False)
        # Env.
        env = env_map(c)
        self.assertEqual(env["COMPUTE_AGENT_MODE"]["value"], "kube")
        self.assertEqual(env["COMPUTE_NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"],
                         "spec.nodeName")
        self.assertEqual(env["COMPUTE_AGENT_LISTEN"]["value"], "0.0.0.0:50052")
        self.assertEqual(env["COMPUTE_RUNSC_ROOT"]["value"], "/run/containerd/runsc/k8s.io")
        self.assert_tls_env(c, spec, "COMPUTE_TLS_", "compute-agent-tls")
        self.assertEqual([(p["name"], p["containerPort"]) for p in c["ports"]],
                         [("grpc", 50052), ("metrics", AGENT_METRICS_PORT)])
        # Host paths: where each lands, read-only or not, and the propagation of the kubelet's.
        vols = {v["name"]: v for v in spec["volumes"]}
        mounts = {}
        for m in c["volumeMounts"]:
            v = vols[m["name"]]
            if "hostPath" in v:
                mounts[v["hostPath"]["path"]] = m
        self.assertIn("/run/containerd/runsc", mounts)
        self.assertFalse(mounts["/run/containerd/runsc"].get("readOnly", False))
        self.assertTrue(env["COMPUTE_RUNSC_ROOT"]["value"].startswith(
            mounts["/run/containerd/runsc"]["mountPath"] + "/"))
        self.assertEqual(mounts["/var/lib/kubelet/pods"]["mountPath"], "/var/lib/kubelet/pods")
        self.assertEqual(mounts["/var/lib/kubelet/pods"].get("mountPropagation"),
                         "HostToContainer")
        # Not the kubelet's whole directory: its pki/ would let the agent act as the node.
        self.assertNotIn("/var/lib/kubelet", mounts)
        cg = mounts["/sys/fs/cgroup"]
        self.assertTrue(cg.get("readOnly"))
        self.assertEqual(env.get("COMPUTE_CGROUP_ROOT", {}).get("value", "/sys/fs/cgroup"),
                         cg["mountPath"])
        state = env["COMPUTE_STATE_DIR"]["value"]
        self.assertIn(state, [m["mountPath"] for m in mounts.values()],
                      "the state dir must survive agent restarts")
        self.assertLessEqual(set(mounts), {
            "/run/containerd/runsc", "/run/containerd/io.containerd.runtime.v2.task",
            "/var/lib/kubelet/pods", "/sys/fs/cgroup", "/var/lib/compute-nodeagent"},
            "a host path nobody justified")
        for forbidden in ("/", "/run/containerd", "/run/containerd/containerd.sock",
                          "/var/run", "/run"):
            self.assertNotIn(forbidden, mounts)
        # Probes: Kubernetes' grpc probes cannot do TLS, and the agent is mTLS-only.
        for probe in ("readinessProbe", "livenessProbe"):
            self.assertIn(probe, c)
            self.assertNotIn("grpc", c[probe])
            self.assertTrue("tcpSocket" in c[probe] or "exec" in c[probe])

    def test_daemonset_privileges_justified(self):
        ds = self.get("DaemonSet", "compute-node-agent")
        spec = pod_spec(ds)
        sc = self.container(ds)["securityContext"]
        self.assertFalse(sc.get("privileged", False))
        caps = set(sc["capabilities"].get("add", []))
        self.assertFalse(caps & {"SYS_ADMIN", "ALL", "NET_ADMIN", "SYS_MODULE", "SYS_RAWIO"},
                         caps)
        # Each privilege the pod gets is named in the comment block of nodeagent.yaml.
        granted = ["CAP_" + c for c in caps]
        for k in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(k):
                granted.append(k)
        if spec.get("securityContext", {}).get("appArmorProfile", {}).get("type") == \
                "Unconfined":
            granted.append("AppArmor Unconfined")
        self.assertFalse(spec.get("hostIPC", False))
        for g in granted:
            self.assertRegex(self.nodeagent_text, r"(?m)^#\s+%s\s+\S" % re.escape(g),
                             "%s is granted but not justified in nodeagent.yaml" % g)

    # -- GC --

    def test_cronjob(self):
        cj = self.get("CronJob", "compute-gc")
        self.assertEqual(cj["spec"]["schedule"], "17 * * * *")
        self.assertEqual(cj["spec"]["concurrencyPolicy"], "Forbid")
        self.assertIn("successfulJobsHistoryLimit", cj["spec"])
        job = cj["spec"]["jobTemplate"]["spec"]
        self.assertIn("backoffLimit", job)
        self.assertIn("activeDeadlineSeconds", job)
        spec = pod_spec(cj)
        self.assertEqual(spec["serviceAccountName"], "compute-gc")
        c = self.container(cj)
        argv = c.get("command", []) + c.get("args", [])
        self.assertTrue(argv and os.path.basename(argv[0]) == "compute-frontend", argv)
        self.assertIn("--mode=gc", argv)
        self.assertTrue(c["image"].startswith("compute-frontend:"))
        env = env_map(c)
        self.assertEqual(env["COMPUTE_SCHEDULER"]["value"], "kube")
        self.assertEqual(env["COMPUTE_SANDBOX_NAMESPACE"]["value"], SANDBOX_NS)

    # -- RBAC --

    def test_rbac_exactly_least_privilege(self):
        roles = {(r["metadata"]["namespace"], r["metadata"]["name"]): r
                 for r in self.of_kind("Role")}
        got = {}
        for rb in self.of_kind("RoleBinding"):
            ns = rb["metadata"]["namespace"]
            self.assertEqual(rb["roleRef"]["kind"], "Role", "no ClusterRole bindings")
            role = roles[(ns, rb["roleRef"]["name"])]
            for s in rb["subjects"]:
                self.assertEqual(s["kind"], "ServiceAccount")
                self.assertEqual(s["namespace"], SYSTEM_NS)
                perms = got.setdefault(s["name"], {})
                for rule in role["rules"]:
                    self.assertEqual(rule["apiGroups"], [""], rule)
                    self.assertNotIn("resourceNames", rule)
                    self.assertNotIn("nonResourceURLs", rule)
                    for res in rule["resources"]:
                        perms.setdefault((ns, res), set()).update(rule["verbs"])
        want = {
            "compute-frontend": {
                (SANDBOX_NS, "pods"): {"get", "list", "watch", "create", "patch", "delete"},
                (SANDBOX_NS, "configmaps"): {"get", "create", "delete"},
                (SANDBOX_NS, "persistentvolumeclaims"):
                    {"get", "list", "watch", "create", "patch", "delete"},
                (SYSTEM_NS, "pods"): {"get", "list", "watch"},
            },
            # What kube_gc.c calls (its pods and orphan passes, the guards).
            "compute-gc": {(SANDBOX_NS, "persistentvolumeclaims"): {"list", "patch", "delete"},
                           (SANDBOX_NS, "pods"): {"list", "delete"},
                           (SANDBOX_NS, "configmaps"): {"list", "delete"}},
        }
        self.assertEqual(got, want)
        # And the pods run as those accounts.
        self.assertEqual(pod_spec(self.get("Deployment", "compute-frontend"))
                         ["serviceAccountName"], "compute-frontend")
        self.assertEqual(pod_spec(self.get("DaemonSet", "compute-node-agent"))
                         ["serviceAccountName"], "compute-node-agent")

    # -- NetworkPolicies --

    def test_network_policies(self):
        pols = self.of_kind("NetworkPolicy")
        ns_labels = {d["metadata"]["name"]: d["metadata"].get("labels", {})
                     for d in self.of_kind("Namespace")}
        frontend = Pod("frontend", SYSTEM_NS,
                       pod_labels(self.get("Deployment", "compute-frontend")),
                       ns_labels[SYSTEM_NS])
        agent = Pod("agent", SYSTEM_NS, pod_labels(self.get("DaemonSet", "compute-node-agent")),
                    ns_labels[SYSTEM_NS])
        gc = Pod("gc", SYSTEM_NS, pod_labels(self.get("CronJob", "compute-gc")),
                 ns_labels[SYSTEM_NS])
        sandbox = Pod("sandbox", SANDBOX_NS, SANDBOX_LABELS, ns_labels[SANDBOX_NS])
        other_sandbox_ns_pod = Pod("stray-pod-in-sandboxes", SANDBOX_NS, {"app": "x"},
                                   ns_labels[SANDBOX_NS])
        client = Pod("client", "agents", {"app": "agents-service"},
                     {"compute.paper-board.io/client": "true"})
        unlabelled = Pod("other", "other-team", {"app": "agents-service"})
        labelled_sandbox = Pod("sandbox", SANDBOX_NS, SANDBOX_LABELS,
                               dict(ns_labels[SANDBOX_NS], **{"compute.paper-board.io/client":
                                                              "true"}))
        allow = lambda s, d, p: connection_allowed(pols, s, d, p)  # noqa: E731

        # Only the frontend reaches the agents, and only on 50052.
        self.assertTrue(allow(frontend, agent, 50052))
        for src in (sandbox, other_sandbox_ns_pod, client, gc):
            self.assertFalse(allow(src, agent, 50052), src)
        self.assertFalse(allow(frontend, agent, 22))
        # The frontend: from the labelled client namespaces on 50051 only, never from
        # sandboxes (even if their namespace is labelled), nor from other namespaces.
        self.assertTrue(allow(client, frontend, 50051))
        self.assertFalse(allow(unlabelled, frontend, 50051))
        self.assertFalse(allow(gc, frontend, 50051))
        self.assertFalse(allow(client, frontend, 50052))
        for src in (sandbox, other_sandbox_ns_pod):
            self.assertFalse(allow(src, frontend, 50051), src)
        self.assertFalse(direction_allows(pols, frontend, labelled_sandbox, 50051, {},
                                          "Ingress"))
        # Both ends hold on their own: the frontend's and the agents' ingress refuse sandboxes
        # even if an operator opens the sandboxes' egress too widely.
        for dst, port in ((frontend, 50051), (agent, 50052)):
            self.assertFalse(direction_allows(pols, dst, sandbox, port, {}, "Ingress"), dst)
        # Sandboxes: nothing in, nothing out (egress is the operator's choice, default none).
        for port in (53, 80, 443, 50051, 50052):
            self.assertFalse(allow(sandbox, client, port))
            self.assertFalse(allow(sandbox, sandbox, port))
            self.assertFalse(direction_allows(pols, sandbox, client, port, {}, "Egress"))
        for src in (client, frontend, agent, sandbox):
            self.assertFalse(allow(src, sandbox, 8080), src)
        # Nothing else in compute-system takes connections.
        self.assertFalse(allow(client, gc, 8080))
        # Metrics: the monitoring namespace reaches exactly the metrics ports (not the public
        # API: it is no client namespace); nobody else reaches a metrics port.
        monitoring = Pod("prometheus", MONITORING_NS, {"app.kubernetes.io/name": "prometheus"})
        ports = (22, 8080, 9090, FRONTEND_METRICS_PORT, AGENT_METRICS_PORT, 50051, 50052)
        self.assertEqual({p for p in ports if allow(monitoring, frontend, p)},
                         {FRONTEND_METRICS_PORT})
        self.assertEqual({p for p in ports if allow(monitoring, agent, p)},
                         {AGENT_METRICS_PORT})
        for p in ports:
            self.assertFalse(allow(monitoring, gc, p))
            self.assertFalse(allow(monitoring, sandbox, p))
        for src in (client, sandbox, other_sandbox_ns_pod, gc, frontend, agent):
            self.assertFalse(allow(src, frontend, FRONTEND_METRICS_PORT), src)
            self.assertFalse(allow(src, agent, AGENT_METRICS_PORT), src)

    # -- every variable the manifests set is one the binaries know --

    def test_env_documented_by_binaries(self):
        helps = {}
        for binary in ("compute-frontend", "compute-nodeagent"):
            path = os.path.join(BUILD, "bin", binary)
            out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            helps[binary] = out.stdout + out.stderr
        image_binary = {"compute-frontend": "compute-frontend",
                        "compute-nodeagent": "compute-nodeagent"}
        missing = {}
        for d in self.docs:
            for c in containers_of(d):
                binary = image_binary[c["image"].split(":")[0]]
                env = env_map(c)
                for name in env:
                    # A downward-API helper (POD_IP) that only feeds $(NAME) in a later
                    # variable is not for the binary; it must feed one, and come first.
                    users = [i for i, e in enumerate(c["env"])
                             if "$(%s)" % name in e.get("value", "")]
                    if users and "valueFrom" in env[name]:
                        own = [e["name"] for e in c["env"]].index(name)
                        self.assertLess(own, min(users), "%s must precede its users" % name)
                        continue
                    if not re.search(r"\b%s\b" % re.escape(name), helps[binary]):
                        missing.setdefault(binary, set()).add(name)
        self.assertEqual(missing, {}, "set by deploy/ but not in --help: " + "; ".join(
            "%s --help lacks %s" % (b, ", ".join(sorted(n))) for b, n in sorted(missing.items())))

    # -- metrics: listen addresses, ports, annotations --

    def test_metrics_endpoints(self):
        cases = (("Deployment", "compute-frontend", "COMPUTE_METRICS_LISTEN",
                  FRONTEND_METRICS_PORT),
                 ("DaemonSet", "compute-node-agent", "COMPUTE_AGENT_METRICS_LISTEN",
                  AGENT_METRICS_PORT))
        for kind, name, var, port in cases:
            d = self.get(kind, name)
            c = self.container(d)
            env = env_map(c)
            host, sep, listen_port = env[var]["value"].rpartition(":")
            self.assertEqual(sep, ":", var)
            self.assertEqual(int(listen_port), port, var)
            if kind == "DaemonSet":
                # hostNetwork: the node's IP only (the pod IP), not every node address.
                self.assertTrue(pod_spec(d).get("hostNetwork"))
                self.assertEqual(host, "$(POD_IP)")
                self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"],
                                 "status.podIP")
                # Its page names every sandbox, and NetworkPolicies seldom reach hostNetwork
                # pods: a bearer token from the Secret compute-metrics-token, read-only.
                token = env["COMPUTE_AGENT_METRICS_TOKEN_FILE"]["value"]
                mounts = {m["name"]: m for m in c["volumeMounts"]}
                vols = {v["name"]: v for v in pod_spec(d)["volumes"]}
                (mount,) = [m for m in mounts.values()
                            if token.startswith(m["mountPath"].rstrip("/") + "/")]
                self.assertTrue(mount.get("readOnly"))
                self.assertEqual(vols[mount["name"]]["secret"]["secretName"],
                                 "compute-metrics-token")
                self.assertEqual(token.rsplit("/", 1)[1], "token")
            else:
                self.assertIn(host, ("", "0.0.0.0"), var)
            named = {p["name"]: p["containerPort"] for p in c["ports"]}
            self.assertEqual(named.get("metrics"), port, name)
            ann = d["spec"]["template"]["metadata"].get("annotations", {})
            self.assertEqual(ann.get("prometheus.io/scrape"), "true", name)
            self.assertEqual(ann.get("prometheus.io/port"), str(port), name)
            self.assertEqual(ann.get("prometheus.io/path"), "/metrics", name)
        # Metrics are not published through the Service (scraped per pod).
        svc = self.get("Service", "compute-frontend")
        self.assertNotIn(FRONTEND_METRICS_PORT, [p["port"] for p in svc["spec"]["ports"]])
        self.assertNotIn("metrics", [p.get("targetPort") for p in svc["spec"]["ports"]])

    # -- the optional Prometheus Operator component, and the alert rules --

    def load_monitoring(self, name):
        with open(os.path.join(MONITORING, name)) as f:
            return load_docs(f.read())

    def test_monitoring_component(self):
        kust = self.load_monitoring("kustomization.yaml")[0]
        self.assertEqual(kust["kind"], "Component")
        self.assertEqual(kust["apiVersion"], "kustomize.config.k8s.io/v1alpha1")
        self.assertEqual(set(kust), {"apiVersion", "kind", "resources"})
        docs = []
        for res in kust["resources"]:
            docs.extend(self.load_monitoring(res))
        mons = {d["metadata"]["name"]: d for d in docs if d["kind"] == "PodMonitor"}
        self.assertEqual(set(mons), {"compute-frontend", "compute-node-agent"})
        for name, kind in (("compute-frontend", "Deployment"),
                           ("compute-node-agent", "DaemonSet")):
            m, w = mons[name], self.get(kind, name)
            self.assertEqual(m["apiVersion"], "monitoring.coreos.com/v1")
            self.assertEqual(m["metadata"]["namespace"], SYSTEM_NS)
            self.assertEqual(m["spec"]["namespaceSelector"], {"matchNames": [SYSTEM_NS]})
            self.assertTrue(selector_matches(m["spec"]["selector"], pod_labels(w)), name)
            ports = {p["name"] for p in self.container(w)["ports"]}
            for ep in m["spec"]["podMetricsEndpoints"]:
                self.assertIn(ep["port"], ports, name)
                self.assertEqual(ep.get("path", "/metrics"), "/metrics")
                self.assertEqual(ep.get("scheme", "http"), "http")
                if kind == "DaemonSet":  # the agents' page asks for its token
                    self.assertEqual(ep["authorization"], {
                        "type": "Bearer",
                        "credentials": {"name": "compute-metrics-token", "key": "token"}})
            # rules.yaml finds the agents by the job name or this label.
            self.assertIn("app.kubernetes.io/name", m["spec"].get("podTargetLabels", []))
        self.assertIn("node-agent", "%s/%s" % (SYSTEM_NS, "compute-node-agent"))
        rule = [d for d in docs if d["kind"] == "PrometheusRule"]
        self.assertEqual(len(rule), 1)
        self.assertEqual(rule[0]["metadata"]["namespace"], SYSTEM_NS)
        self.assertEqual(rule[0]["spec"], self.load_monitoring("rules.yaml")[0],
                         "prometheusrule.yaml differs from rules.yaml: run "
                         "python3 deploy/monitoring/gen-prometheusrule.py")
        # Rendered by kustomize on an overlay of the base.
        kubectl = shutil.which("kubectl")
        if not kubectl:
            self.skipTest("kubectl is not installed: the component is not rendered")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "kustomization.yaml"), "w") as f:
                yaml.safe_dump({"apiVersion": "kustomize.config.k8s.io/v1beta1",
                                "kind": "Kustomization",
                                "resources": [os.path.relpath(DEPLOY, tmp)],
                                "components": [os.path.relpath(MONITORING, tmp)]}, f)
            out = subprocess.run([kubectl, "kustomize", tmp], capture_output=True, text=True,
                                 timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        rendered = {key(d): d for d in load_docs(out.stdout)}
        base = {key(d): d for d in self.docs}
        self.assertEqual(set(rendered) - set(base), {key(d) for d in docs})
        self.assertEqual(set(base) - set(rendered), set())
        for k, d in base.items():
            self.assertEqual(rendered[k], d, k)
        for d in docs:
            self.assertEqual(rendered[key(d)], d)

    def test_alert_rules(self):
        rules = self.load_monitoring("rules.yaml")[0]
        alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
        self.assertEqual(set(alerts), {"ComputeNodeAgentDown", "ComputeExecErrorRate",
                                       "ComputeSandboxStuckStarting",
                                       "ComputeWorkspacePVCsExpired"})
        with open(os.path.join(SRC, "docs", "deploy.md")) as f:
            doc = f.read()
        anchors = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                   for h in re.findall(r"(?m)^#+ (.*)$", doc)}
        for name, r in alerts.items():
            ann = r.get("annotations", {})
            for k in ("summary", "description", "runbook_url"):
                self.assertTrue(ann.get(k), "%s: %s" % (name, k))
            path, _, anchor = ann["runbook_url"].partition("#")
            self.assertEqual(path, "docs/deploy.md", name)
            self.assertIn(anchor, anchors, "%s: no section #%s in docs/deploy.md" % (
                name, anchor))
            self.assertIn(r["labels"].get("severity"), ("warning", "critical"), name)
            # Only metrics the daemons export (and Prometheus' up).
            words = set(re.findall(r"\b[a-z_][a-z0-9_]*\b(?=\s*[{\[)]|\s*$|\s*[=<>!])",
                                   re.sub(r'"[^"]*"|\{[^}]*\}', "{}", r["expr"])))
            metrics = {w for w in words if w.startswith(("compute_", "process_", "grpc_"))
                       or w == "up"}
            self.assertTrue(metrics, name)
            self.assertLessEqual(metrics, METRIC_NAMES, name)

    def test_promtool(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool (Debian package prometheus) is not installed")
        for args in (["check", "rules", "rules.yaml"],
                     ["test", "rules", "rules_test.yaml"]):
            out = subprocess.run([promtool] + args, cwd=MONITORING, capture_output=True,
                                 text=True, timeout=120)
            self.assertEqual(out.returncode, 0, "promtool %s:\n%s%s" % (
                " ".join(args), out.stdout, out.stderr))
        # Every alert has a unit test.
        with open(os.path.join(MONITORING, "rules_test.yaml")) as f:
            tests = yaml.safe_load(f)
        tested = {t["alertname"] for case in tests["tests"]
                  for t in case.get("alert_rule_test", [])}
        rules = self.load_monitoring("rules.yaml")[0]
        self.assertEqual(tested, {r["alert"] for g in rules["groups"] for r in g["rules"]})

    # -- the Dockerfile --

    def test_dockerfile(self):
        with open(os.path.join(DEPLOY, "Dockerfile")) as f:
            text = f.read()
        stages = re.findall(r"(?im)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text)
        names = {s[1] for s in stages}
        self.assertLessEqual({"build", "frontend", "nodeagent"}, names)
        self.assertRegex(text, r"(?m)^ARG DEBIAN=debian:bookworm$")
        # Every build library of scripts/lib.sh is installed in the build stage.
        with open(os.path.join(SRC, "scripts", "lib.sh")) as f:
            lib = f.read()
        pkgs = re.search(r"CS_PACKAGES=\(([^)]*)\)", lib).group(1).split()
        build_stage = text.split(" AS runtime")[0]
        for p in pkgs:
            if p.endswith("-dev") or p in ("cmake", "pkg-config", "protobuf-compiler",
                                           "protobuf-c-compiler", "build-essential"):
                self.assertRegex(build_stage, r"\b%s\b" % re.escape(p),
                                 "%s (scripts/lib.sh) not installed in the build stage" % p)
        # The frontend image runs as non-root; the agent image has runsc.
        frontend_stage = text.split("AS frontend")[1].split("\nFROM ")[0]
        self.assertRegex(frontend_stage, r"(?m)^USER\s+[1-9]\d*")
        nodeagent_stage = text.split("AS nodeagent")[1].split("\nFROM ")[0]
        self.assertRegex(nodeagent_stage, r"\brunsc\b")
        for stage, binary in ((frontend_stage, "compute-frontend"),
                              (nodeagent_stage, "compute-nodeagent")):
            self.assertIn('ENTRYPOINT ["/usr/local/bin/%s"]' % binary, stage)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_manifests.py BUILD_DIR [unittest args]")
    BUILD = os.path.abspath(sys.argv[1])
    # kubectl is not a Debian 12 package (scripts/lib.sh cannot install it): the cross-check
    # against its renderer runs where it is installed, and its absence is reported, not failed.
    testmain.main([sys.argv[0]] + sys.argv[2:], allowed_skips={
        "Manifests.test_renderers_agree": "kubectl is not a Debian 12 package",
        "Manifests.test_monitoring_component": "kubectl is not a Debian 12 package"})
