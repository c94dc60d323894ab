#!/usr/bin/python3
"""The simulated cluster of the scale harness, in one process of its own (so that the
harness's client load does not share its interpreter): the test API server
(tests/kube/apiserver.py) and N simulated nodes.

The nodes are a simulator, not kubelets: no runsc, no containers. A thread plays the
scheduler and every kubelet on the API server's store directly (not over HTTP, so the API
server's request counts are the frontends' own): a new sandbox pod is bound to the
least-loaded node, and marked Running and Ready with a podIP after a startup latency drawn
from STARTUP_S; a pod being deleted (graceful deletion of a bound pod) is removed after
STOP_S. The node agents' pods (one per node, in the agent namespace, pointing at the fake
agents' ports) are registered as the DaemonSet and kubelet would leave them.

Usage: cluster.py STATE_DIR NODES AGENT_PORTS_JSON. Prints one JSON line {"kubeconfig":
...} when serving, then answers JSON commands on stdin, one per line, with one JSON line:
  {"cmd": "stats"}                      requests per method/resource, POST pod times, pods
  {"cmd": "mark", "name": M}            remembers the request log's position as M
  {"cmd": "since", "name": M}           the requests since mark M (method, resource, code,
                                        get/list/watch/write, code, seconds, time,
                                        paged: a LIST page of an informer or the GC)
  {"cmd": "written", "ids": [...]}      when each sandbox's pod was marked Running
  {"cmd": "restart", "down": S}         API server down S seconds, objects kept
  {"cmd": "expire"}                     compact the history and drop every watch: each
                                        watch's resume gets 410 Gone, so the frontends relist
  {"cmd": "gc_pvcs", "n": N}            makes N destroyed workspace PVCs past delete-after
                                        (copies of a live one)
  {"cmd": "sample"}                     one sandbox pod and one PVC, as stored
  {"cmd": "count_pvcs"}                 PVCs in the sandbox namespace
  {"cmd": "agent", "node": I, "up": B}  node I's agent pod Running (B) or not (rollout)
"""
import copy
import gc
import json
import os
import random
import sys
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "kube"))

from apiserver import ApiServer  # noqa: E402

SANDBOX_NS = "compute-sandboxes"
AGENT_NS = "compute-system"
AGENT_LABEL = ("app.kubernetes.io/name", "compute-node-agent")
SANDBOX_ID = "compute.paper-board.io/sandbox-id"
STARTUP_S = (0.2, 1.0)  # sandbox pod start: runsc's own start on a warm node
STOP_S = (0.05, 0.3)
MERGE = "application/merge-patch+json"


class Simulator(threading.Thread):
    def __init__(self, api, nodes):
        super().__init__(daemon=True, name="simulator")
        self.api, self.store = api, api.store
        self.nodes = ["node-%d" % i for i in range(nodes)]
        self.load = {n: 0 for n in self.nodes}
        self.placed = {}      # pod key -> node
        self.due = {}         # pod key -> time it starts
        self.stopping = {}    # pod key -> time it goes
        self.written = {}     # sandbox id -> time.time() its Running status was committed
        self.lock = threading.Lock()

    def run(self):
        while True:
            try:
                self.step()
            except Exception as e:  # keep simulating; say why
                sys.stderr.write("simulator: %r\n" % e)
            time.sleep(0.02)

    def step(self):
        now = time.time()
        st = self.store
        with st.lock:
            pods = st.objects["pods"]
            for key, pod in pods.items():
                if key[0] != SANDBOX_NS:
                    continue
                md = pod["metadata"]
                if md.get("deletionTimestamp"):
                    if key not in self.stopping:
                        self.stopping[key] = now + random.uniform(*STOP_S)
                elif key not in self.placed:
                    node = min(self.nodes, key=self.load.get)
                    self.load[node] += 1
                    self.placed[key] = node
                    st.bind(key[0], key[1], {"target": {"kind": "Node", "name": node}}, "sim")
                    self.due[key] = now + random.uniform(*STARTUP_S)
            for key in [k for k, t in self.due.items() if t <= now]:
                del self.due[key]
                pod = pods.get(key)
                if pod is None or pod["metadata"].get("deletionTimestamp"):
                    continue
                st.patch("pods", key[0], key[1], {"status": {
                    "phase": "Running", "podIP": "10.%d.%d.%d" % (
                        random.randint(0, 255), random.randint(0, 255), random.randint(1, 254)),
                    "hostIP": "127.0.0.1",
                    "conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "ContainersReady", "status": "True"}]}},
                    MERGE, "status", "sim")
                sid = pod["metadata"].get("labels", {}).get(SANDBOX_ID)
                if sid:
                    with self.lock:
                        self.written[sid] = time.time()
            for key in [k for k, t in self.stopping.items() if t <= now]:
                del self.stopping[key]
                node = self.placed.pop(key, None)
                if node:
                    self.load[node] -= 1
                self.due.pop(key, None)
                if key in pods:
                    st.delete("pods", key[0], key[1], {"gracePeriodSeconds": 0}, "sim")


def resource_of(path):
    """(resource, kind of request) of an API path: kind is get, list, watch or write."""
    p, _, q = path.partition("?")
    parts = p.strip("/").split("/")
    # api/v1/namespaces/NS/RES[/NAME[/SUB]]
    if len(parts) >= 5 and parts[2] == "namespaces":
        res = parts[4]
        if len(parts) >= 7:
            res += "/" + parts[6]
        named = len(parts) >= 6
    elif len(parts) >= 3:
        res, named = parts[2], len(parts) >= 4
    else:
        return p, "other"
    if "watch=" in q and "watch=0" not in q and "watch=false" not in q:
        return res, "watch"
    return res, ("get" if named else "list")


def main():
    state_dir, nodes, ports = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    # Python's cycle collector walks every live object in its oldest generation: with
    # 10,000 pods (millions of dicts and strings) a pass stopped the whole API server for
    # seconds (POST p99 1.7 s, watch lag p99 5 s). The store's objects make no cycles; a
    # Go API server has no such pause. Off, for this process only.
    gc.disable()
    api = ApiServer(state_dir, history_limit=2000)
    api.request_log = __import__("collections").deque(maxlen=2_000_000)
    api.start()
    for i, port in enumerate(ports):
        name = "compute-node-agent-node-%d" % i
        api.create("pods", AGENT_NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict([AGENT_LABEL])},
            "spec": {"nodeName": "node-%d" % i, "containers": [{
                "name": "agent", "image": "compute-spawner:sim",
                "ports": [{"name": "grpc", "containerPort": port}]}]}})
        api.patch_status("pods", AGENT_NS, name, {
            "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]})
    sim = Simulator(api, nodes)
    sim.start()
    marks = {}
    print(json.dumps({"kubeconfig": api.kubeconfig_path, "url": api.url}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        c = json.loads(line)
        cmd, out = c["cmd"], {"ok": True}
        if cmd == "quit":
            break
        elif cmd == "mark":
            marks[c["name"]] = len(api.request_log)
        elif cmd == "since":
            log = list(api.request_log)[marks[c["name"]]:]
            out["requests"] = [[r["method"], resource_of(r["path"])[0],
                                resource_of(r["path"])[1] if r["method"] == "GET" else "write",
                                r["code"],
                                round(r["seconds"], 6), r["time"], "limit=" in r["path"]]
                               for r in log]
        elif cmd == "stats":
            with api.store.lock:
                out["pods"] = len(api.store.objects["pods"])
                out["pvcs"] = len(api.store.objects["persistentvolumeclaims"])
            out["requests"] = len(api.request_log)
        elif cmd == "sample":
            with api.store.lock:
                out["pod"] = next((o for k, o in api.store.objects["pods"].items()
                                   if k[0] == SANDBOX_NS), None)
                out["pvc"] = next((o for k, o in api.store.objects["persistentvolumeclaims"].items()
                                   if k[0] == SANDBOX_NS), None)
        elif cmd == "written":
            with sim.lock:
                out["written"] = {i: sim.written.get(i) for i in c["ids"]}
        elif cmd == "restart":
            api.restart(float(c.get("down", 0)))
        elif cmd == "expire":
            # A write no watch has seen yet, then the history forgotten up to it: every
            # resumed watch is older than the history (410), whatever it had seen.
            with api.store.lock:
                api.store.create("pods", "scale-expire", {
                    "metadata": {"name": "expire-%d" % api.store.rv},
                    "spec": {"containers": [{"name": "c", "image": "x"}]}}, "sim")
                api.compact()
                api.drop_watches()
                out["rv"] = api.store.rv
        elif cmd == "count_pvcs":
            with api.store.lock:
                out["pvcs"] = sum(1 for k in api.store.objects["persistentvolumeclaims"]
                                  if k[0] == SANDBOX_NS)
        elif cmd == "gc_pvcs":
            st = api.store
            with st.lock:
                tmpl = next(o for k, o in st.objects["persistentvolumeclaims"].items()
                            if k[0] == SANDBOX_NS)
            for _ in range(int(c["n"])):
                sid = str(uuid.uuid4())
                o = copy.deepcopy(tmpl)
                md = o["metadata"]
                for k in ("uid", "resourceVersion", "creationTimestamp", "managedFields"):
                    md.pop(k, None)
                md["name"] = "ws-" + sid
                md["labels"][SANDBOX_ID] = sid
                ann = md.setdefault("annotations", {})
                if "compute.paper-board.io/sandbox-id" in ann:
                    ann["compute.paper-board.io/sandbox-id"] = sid
                ann["compute.paper-board.io/destroyed-at"] = "2020-01-01T00:00:00Z"
                ann["compute.paper-board.io/delete-after"] = "2020-01-02T00:00:00Z"
                o.pop("status", None)
                st.create("persistentvolumeclaims", SANDBOX_NS, o, "sim")
        elif cmd == "agent":
            name = "compute-node-agent-node-%d" % c["node"]
            status = ({"phase": "Running", "podIP": "127.0.0.1",
                       "conditions": [{"type": "Ready", "status": "True"}]} if c["up"] else
                      {"phase": "Pending", "podIP": None,
                       "conditions": [{"type": "Ready", "status": "False"}]})
            api.patch_status("pods", AGENT_NS, name, status)
        else:
            out = {"ok": False, "error": "unknown command %r" % cmd}
        print(json.dumps(out), flush=True)
    api.stop()


if __name__ == "__main__":
    main()
