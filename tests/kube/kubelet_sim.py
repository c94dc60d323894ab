#!/usr/bin/python3
"""A simulated Kubernetes node for the kube mode tests: scheduler, PVC binder and kubelet.

For one node name it talks to an API server only through its HTTP API (list + watch with
resourceVersion, bookmarks, relist on 410 Expired, backoff on errors, Retry-After on 429), like
the real components do, and it acts as:

- the scheduler: binds each unscheduled pod whose runtimeClassName it serves (and whose
  schedulerName is default-scheduler) to its node with POST pods/<name>/binding;
- the PV controller / provisioner (Immediate binding): a Pending PVC gets spec.volumeName
  "pvc-<uid>" and the bind annotations (PUT), then status Bound with capacity and access modes
  (PUT status). The volume is a host directory, state_dir/volumes/<pvc uid>, deleted when its
  PVC is gone (reclaim policy Delete). As the pvc-protection controller it removes the
  kubernetes.io/pvc-protection finalizer of a terminating PVC no running pod uses;
- the kubelet, for the pods bound to its node with a served runtimeClassName: once every PVC
  of the pod is Bound, it starts the pod with real runsc containers through cri.py (pause +
  app container "sandbox" with containerd's CRI annotations, the container's image as its
  root: the directory <images dir>/<image> (--images-dir, default $COMPUTE_TEST_IMAGES_DIR or
  /var/lib/compute/images; never the host's root), the PVC directories as the container's
  volume mounts, CPU and memory limits as the pod cgroup's), then reports status
  through the status subresource (strategic merge patch, like the kubelet's status manager):
  phase Running, podIP, hostIP, startTime, the PodScheduled/Initialized/ContainersReady/Ready
  conditions and containerStatuses. An image with no directory is a failed pull: the pod
  stays Pending, its container Waiting with reason ErrImagePull after each attempt and
  ImagePullBackOff between them (backing off up to 10 s), with the error as the message,
  as a kubelet reports it. It enforces activeDeadlineSeconds (Failed,
  DeadlineExceeded), reports Succeeded/Failed when the container exits (restartPolicy Never),
  and handles graceful deletion (SIGTERM to the container, SIGKILL at the end of the grace
  period, terminal phase reported, then DELETE with gracePeriodSeconds 0 and a uid
  precondition). At start it adopts the containers of its pods found under the runsc root and
  stops the ones whose pod is gone (as after a kubelet restart).

Pods bound to the node with another runtimeClassName (e.g. node agent pods a test created
with their status) are left alone.

Module:  sim = KubeletSim(kubeconfig=path, node_name="node-1", state_dir=d, runsc_root=r,
                          cgroup_prefix="compute-test-x"); sim.start(); ...; sim.stop(cleanup=True)
CLI:     /usr/bin/python3 tests/kube/kubelet_sim.py --kubeconfig K --node-name N --state-dir D
             --runsc-root R --cgroup-prefix P [--images-dir I]   (runs until SIGTERM)
"""

import argparse
import base64
import concurrent.futures
import copy
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apiserver import now_rfc3339, parse_rfc3339  # noqa: E402 (Kubernetes' time format)
from cri import ImagePullError  # noqa: E402

CLAIM_PROTECTION = "kubernetes.io/pvc-protection"
PROVISIONER = "compute-test.local/hostpath"


def parse_cpu_millis(q):
    if q is None:
        return 0
    q = str(q)
    if q.endswith("m"):
        return int(float(q[:-1]))
    return int(float(q) * 1000)


def parse_bytes(q):
    if q is None:
        return 0
    m = re.match(r"^([0-9.]+)([A-Za-z]*)$", str(q))
    if not m:
        return 0
    mult = {"": 1, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12, "Ki": 1 << 10,
            "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "m": 0.001}.get(m.group(2), 1)
    return int(float(m.group(1)) * mult)


def log(msg):
    sys.stderr.write("kubelet-sim: %s %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


# --------------------------------------------------------------------------------------------
# A small Kubernetes client
# --------------------------------------------------------------------------------------------

class ApiStatusError(Exception):
    def __init__(self, code, body, retry_after=None):
        msg = body.get("message") if isinstance(body, dict) else str(body)
        super().__init__("HTTP %d: %s" % (code, msg))
        self.code = code
        self.body = body
        self.reason = body.get("reason") if isinstance(body, dict) else None
        self.retry_after = retry_after


def read_kubeconfig(path):
    """(server, ca_pem or None, token, namespace) from a kubeconfig with one cluster/user, as
    the test API server writes it (a YAML subset: one `key: value` per line)."""
    with open(path) as f:
        text = f.read()

    def field(name):
        m = re.search(r"^\s*-?\s*%s:\s*(\S.*?)\s*$" % re.escape(name), text, re.M)
        return m.group(1).strip("'\"") if m else None
    ca = field("certificate-authority-data")
    ca_pem = base64.b64decode(ca).decode() if ca else None
    if ca_pem is None and field("certificate-authority"):
        with open(field("certificate-authority")) as f:
            ca_pem = f.read()
    return field("server"), ca_pem, field("token"), field("namespace") or "default"


class KubeClient:
    def __init__(self, server, token, ca_pem=None, user_agent="kubelet-sim", timeout=30):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port or 443
        self.token = token
        self.ctx = ssl.create_default_context()
        if ca_pem:
            self.ctx = ssl.create_default_context(cadata=ca_pem)
        self.user_agent = user_agent
        self.timeout = timeout
        self.local = threading.local()
        self.conns = []
        self.conns_lock = threading.Lock()

    def close(self):
        with self.conns_lock:
            conns, self.conns = self.conns, []
        for c in conns:
            c.close()

    @classmethod
    def from_kubeconfig(cls, path, user_agent="kubelet-sim"):
        server, ca, token, _ = read_kubeconfig(path)
        return cls(server, token, ca, user_agent)

    def _headers(self, ctype=None):
        h = {"Accept": "application/json", "User-Agent": self.user_agent,
             "Authorization": "Bearer " + self.token}
        if ctype:
            h["Content-Type"] = ctype
        return h

    def request(self, method, path, body=None, ctype="application/json"):
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(2):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx,
                                                   timeout=self.timeout)
                self.local.conn = conn
                with self.conns_lock:
                    self.conns.append(conn)
            try:
                conn.request(method, path, body=data, headers=self._headers(ctype if data else None))
                resp = conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, OSError):
                conn.close()
                self.local.conn = None
                if attempt == 1:
                    raise
        try:
            obj = json.loads(raw) if raw else None
        except ValueError:
            obj = {"message": raw[:200].decode(errors="replace")}
        if resp.status >= 300:
            ra = resp.getheader("Retry-After")
            raise ApiStatusError(resp.status, obj or {}, float(ra) if ra else None)
        return obj

    def watch(self, path, read_timeout):
        """Yields the events of a watch until the stream ends; raises on a cut stream."""
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=read_timeout)
        with self.conns_lock:
            self.conns.append(conn)
        try:
            conn.request("GET", path, headers=self._headers())
            resp = conn.getresponse()
            if resp.status != 200:
                raw = resp.read()
                try:
                    obj = json.loads(raw)
                except ValueError:
                    obj = {"message": raw[:200].decode(errors="replace")}
                ra = resp.getheader("Retry-After")
                raise ApiStatusError(resp.status, obj, float(ra) if ra else None)
            buf = b""
            fp = resp.fp
            while True:
                line = fp.readline(1 << 20)
                if not line:
                    raise ConnectionError("watch stream cut")
                size = int(line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = fp.read(size)
                fp.read(2)
                if len(data) < size:
                    raise ConnectionError("watch stream cut")
                buf += data
                while b"\n" in buf:
                    ln, buf = buf.split(b"\n", 1)
                    if ln.strip():
                        yield json.loads(ln)
        finally:
            conn.close()
            with self.conns_lock:
                if conn in self.conns:
                    self.conns.remove(conn)


# --------------------------------------------------------------------------------------------
# Informer: list + watch with resourceVersion, bookmarks, relist on 410, backoff
# --------------------------------------------------------------------------------------------

class Informer:
    def __init__(self, client, path, query, on_change, stop, name):
        self.client = client
        self.path = path
        self.query = dict(query)
        self.on_change = on_change
        self.stop = stop
        self.name = name
        self.lock = threading.Lock()
        self.cache = {}
        self.rv = None
        self.synced = False
        self.thread = threading.Thread(target=self._run, daemon=True, name="informer-" + name)

    def start(self):
        self.thread.start()

    def items(self):
        with self.lock:
            return [copy.deepcopy(o) for o in self.cache.values()]

    def _url(self, extra):
        q = dict(self.query)
        q.update(extra)
        return self.path + "?" + urllib.parse.urlencode(q)

    def _list(self):
        items, cont = {}, None
        while True:
            extra = {"limit": "250"}
            if cont:
                extra["continue"] = cont
            lst = self.client.request("GET", self._url(extra))
            for o in lst.get("items") or []:
                items[(o["metadata"]["namespace"], o["metadata"]["name"])] = o
            cont = lst["metadata"].get("continue")
            if not cont:
                break
        with self.lock:
            self.cache = items
            self.rv = lst["metadata"]["resourceVersion"]
            self.synced = True
        self.on_change()

    def _run(self):
        backoff = 0.2
        need_list = True
        while not self.stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                timeout = random.randint(20, 40)
                for ev in self.client.watch(self._url({"watch": "1", "resourceVersion": self.rv,
                                                       "allowWatchBookmarks": "true",
                                                       "timeoutSeconds": str(timeout)}), timeout + 30):
                    if self.stop.is_set():
                        return
                    t, obj = ev.get("type"), ev.get("object") or {}
                    if t == "ERROR":
                        if obj.get("code") == 410:
                            need_list = True
                            break
                        raise ApiStatusError(obj.get("code") or 500, obj)
                    rv = obj.get("metadata", {}).get("resourceVersion")
                    with self.lock:
                        if t in ("ADDED", "MODIFIED"):
                            self.cache[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
                        elif t == "DELETED":
                            self.cache.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
                        if rv:
                            self.rv = rv
                    if t != "BOOKMARK":
                        self.on_change()
                backoff = 0.2
            except ApiStatusError as e:
                if e.code == 410:
                    need_list = True
                    continue
                wait = e.retry_after if e.retry_after else backoff
                self.stop.wait(wait * (0.8 + 0.4 * random.random()))
                backoff = min(backoff * 2, 5.0)
            except (OSError, http.client.HTTPException, ValueError, ConnectionError, AttributeError):
                self.stop.wait(backoff * (0.8 + 0.4 * random.random()))
                backoff = min(backoff * 2, 5.0)


# --------------------------------------------------------------------------------------------
# The node
# --------------------------------------------------------------------------------------------

class PodRecord:
    def __init__(self, ns, name, uid):
        self.ns, self.name, self.uid = ns, name, uid
        self.pause_id = None
        self.app_id = None
        self.started_at = None       # RFC 3339
        self.start_time = None       # the pod's status.startTime
        self.phase = "Pending"
        self.reason = None
        self.message = None
        self.waiting = ("ContainerCreating", None)
        self.terminated = None       # {"exitCode", "reason", "startedAt", "finishedAt"}
        self.transitions = {}
        self.next_check = 0.0
        self.next_start = 0.0
        self.start_failures = 0
        self.stopped = False


class KubeletSim:
    def __init__(self, kubeconfig=None, node_name="node-1", state_dir=None, runsc_root=None,
                 cgroup_prefix="compute-test-kubelet", runtime_classes=("gvisor",), client=None,
                 cri=None, node_ip="127.0.0.1", schedule=True, bind_pvcs=True, verbose=False,
                 pod_workers=None, images_dir=None, host_uds="open"):
        self.node = node_name
        self.state_dir = os.path.abspath(state_dir or tempfile.mkdtemp(prefix="kubelet-sim-"))
        os.makedirs(os.path.join(self.state_dir, "volumes"), exist_ok=True)
        self.client = client or KubeClient.from_kubeconfig(kubeconfig, "kubelet/v1.30.0 (%s)" % node_name)
        if cri is None:
            import cri as cri_mod
            cri = cri_mod.CriRuntime(runsc_root, os.path.join(self.state_dir, "cri"), cgroup_prefix,
                                     images_dir=images_dir, host_uds=host_uds)
        self.cri = cri
        self.runtime_classes = set(runtime_classes)
        self.node_ip = node_ip
        self.schedule = schedule
        self.bind_pvcs = bind_pvcs
        self.verbose = verbose
        self.stop_ev = threading.Event()
        self.wake = threading.Event()
        self.records = {}  # pod uid -> PodRecord
        self.lock = threading.Lock()
        self.not_before = 0.0  # after a 429: no writes before this time
        self.node_pods = Informer(self.client, "/api/v1/pods",
                                  {"fieldSelector": "spec.nodeName=" + node_name},
                                  self.wake.set, self.stop_ev, "node-pods")
        self.pending_pods = Informer(self.client, "/api/v1/pods",
                                     {"fieldSelector": "spec.nodeName=,status.phase!=Succeeded,"
                                                       "status.phase!=Failed"},
                                     self.wake.set, self.stop_ev, "unscheduled-pods")
        self.pvcs = Informer(self.client, "/api/v1/persistentvolumeclaims", {}, self.wake.set,
                             self.stop_ev, "pvcs")
        self.thread = threading.Thread(target=self._loop, daemon=True, name="kubelet-" + node_name)
        # Two pod syncs per CPU (at most 8): each start is three runsc create+start (pause,
        # init, app), and 8 side by side on a 2-CPU machine thrashed it (50 pods at once:
        # some still starting after a minute, the agent too slow to answer a connection).
        if pod_workers is None:
            pod_workers = min(8, 2 * (len(os.sched_getaffinity(0)) or 1))
        self.workers = concurrent.futures.ThreadPoolExecutor(max_workers=pod_workers,
                                                             thread_name_prefix="pod-" + node_name)
        self.inflight = set()  # uids of pods a worker is syncing

    # ---- lifecycle ----
    def start(self):
        self._adopt()
        self.node_pods.start()
        if self.schedule:
            self.pending_pods.start()
        self.pvcs.start()
        self.thread.start()
        return self

    def stop(self, cleanup=False):
        """Stops the loops. cleanup=True also stops every container it runs (and removes its
        cgroups); without it the containers stay, as when a kubelet stops."""
        self.stop_ev.set()
        self.wake.set()
        if self.thread.is_alive():
            self.thread.join(60)
        self.workers.shutdown(wait=True)
        if cleanup:
            with self.lock:
                recs = list(self.records.values())
                self.records.clear()
            for r in recs:
                if r.pause_id and not r.stopped:
                    try:
                        self.cri.stop_pod(r.pause_id)
                    except Exception as e:
                        log("stop %s/%s: %s" % (r.ns, r.name, e))
            try:
                self.cri.cleanup()
            except Exception as e:
                log("cleanup: %s" % e)
        self.client.close()  # also ends the open watches
        for inf in (self.node_pods, self.pending_pods, self.pvcs):
            if inf.thread.is_alive():
                inf.thread.join(10)

    def volume_dir(self, pvc):
        """The host directory of a PVC's volume (a PVC object or its uid)."""
        uid = pvc["metadata"]["uid"] if isinstance(pvc, dict) else pvc
        return os.path.join(self.state_dir, "volumes", uid)

    def running_pods(self):
        with self.lock:
            return sorted((r.ns, r.name) for r in self.records.values()
                          if r.pause_id and not r.stopped)

    def record(self, uid):
        with self.lock:
            return self.records.get(uid)

    def _log(self, msg):
        if self.verbose:
            log("%s: %s" % (self.node, msg))

    # ---- the loop ----
    def _loop(self):
        while not self.stop_ev.is_set():
            self.wake.wait(0.5)
            self.wake.clear()
            if self.stop_ev.is_set():
                return
            if time.time() < self.not_before:
                continue
            for step in (self._bind_pvcs, self._schedule, self._kubelet, self._reclaim):
                try:
                    step()
                except ApiStatusError as e:
                    if e.retry_after:
                        self.not_before = time.time() + e.retry_after
                    self._log("%s: %s" % (step.__name__, e))
                except (OSError, http.client.HTTPException) as e:
                    self._log("%s: %s" % (step.__name__, e))
                except Exception as e:
                    log("%s: unexpected %r" % (step.__name__, e))
                    import traceback
                    traceback.print_exc()

    # ---- PV controller ----
    def _bind_pvcs(self):
        if not self.bind_pvcs or not self.pvcs.synced:
            return
        for pvc in self.pvcs.items():
            md, spec, st = pvc["metadata"], pvc["spec"], pvc.get("status") or {}
            base = "/api/v1/namespaces/%s/persistentvolumeclaims/%s" % (md["namespace"], md["name"])
            if md.get("deletionTimestamp"):
                if CLAIM_PROTECTION in (md.get("finalizers") or []):
                    self._unprotect(pvc, base)
                continue
            if st.get("phase") == "Bound":
                continue
            if not spec.get("volumeName"):
                os.makedirs(self.volume_dir(pvc), exist_ok=True)
                upd = copy.deepcopy(pvc)
                upd["spec"]["volumeName"] = "pvc-" + md["uid"]
                ann = upd["metadata"].setdefault("annotations", {})
                ann.update({"pv.kubernetes.io/bind-completed": "yes",
                            "pv.kubernetes.io/bound-by-controller": "yes",
                            "volume.beta.kubernetes.io/storage-provisioner": PROVISIONER,
                            "volume.kubernetes.io/storage-provisioner": PROVISIONER})
                try:
                    pvc = self.client.request("PUT", base, upd)
                except ApiStatusError as e:
                    if e.code in (404, 409):
                        continue
                    raise
            if pvc["spec"].get("volumeName") != "pvc-" + pvc["metadata"]["uid"]:
                continue  # bound to a volume of another provisioner
            os.makedirs(self.volume_dir(pvc), exist_ok=True)
            upd = copy.deepcopy(pvc)
            upd["status"] = {"phase": "Bound", "accessModes": pvc["spec"].get("accessModes"),
                             "capacity": {"storage": pvc["spec"]["resources"]["requests"]["storage"]}}
            try:
                self.client.request("PUT", base + "/status", upd)
                self._log("bound pvc %s/%s" % (md["namespace"], md["name"]))
            except ApiStatusError as e:
                if e.code not in (404, 409):
                    raise

    def _unprotect(self, pvc, base):
        md = pvc["metadata"]
        lst = self.client.request("GET", "/api/v1/namespaces/%s/pods" % md["namespace"])
        for p in lst.get("items") or []:
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            for v in (p.get("spec") or {}).get("volumes") or []:
                if (v.get("persistentVolumeClaim") or {}).get("claimName") == md["name"]:
                    return  # still in use
        fins = [f for f in md.get("finalizers") or [] if f != CLAIM_PROTECTION]
        try:
            self.client.request("PATCH", base, {"metadata": {"resourceVersion": md["resourceVersion"],
                                                             "finalizers": fins or None}},
                                "application/merge-patch+json")
        except ApiStatusError as e:
            if e.code not in (404, 409):
                raise

    def _reclaim(self):
        """Reclaim policy Delete: the volume of a PVC that is gone goes too."""
        if not self.pvcs.synced:
            return
        live = {p["metadata"]["uid"] for p in self.pvcs.items()}
        with self.lock:
            used = {d for r in self.records.values() if not r.stopped for d in getattr(r, "volumes", [])}
            pods = set(self.records)  # <pod uid>/: the pod's emptyDirs, while it is known
        vdir = os.path.join(self.state_dir, "volumes")
        for uid in os.listdir(vdir):
            path = os.path.join(vdir, uid)
            if uid not in live and uid not in pods and path not in used:
                shutil.rmtree(path, ignore_errors=True)
                self._log("reclaimed volume %s" % uid)

    # ---- scheduler ----
    def _schedule(self):
        if not self.schedule:
            return
        for pod in self.pending_pods.items():
            md, spec = pod["metadata"], pod["spec"]
            if spec.get("nodeName") or md.get("deletionTimestamp"):
                continue
            if spec.get("runtimeClassName") not in self.runtime_classes:
                continue
            if spec.get("schedulerName", "default-scheduler") != "default-scheduler":
                continue
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": md["name"], "namespace": md["namespace"], "uid": md["uid"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}}
            try:
                self.client.request("POST", "/api/v1/namespaces/%s/pods/%s/binding"
                                    % (md["namespace"], md["name"]), body)
                self._log("bound pod %s/%s" % (md["namespace"], md["name"]))
            except ApiStatusError as e:
                if e.code not in (404, 409):
                    raise

    # ---- kubelet ----
    def _adopt(self):
        """After a restart: the containers of this node's pods are found again under the runsc
        root from their annotations."""
        try:
            containers = self.cri.list()
        except Exception as e:
            log("list containers: %s" % e)
            return
        pods = {}
        for c in containers:
            ann = c.get("annotations") or {}
            if not ann:
                try:
                    with open(os.path.join(c.get("bundle", ""), "config.json")) as f:
                        ann = json.load(f).get("annotations") or {}
                except (OSError, ValueError):
                    continue
            uid = ann.get("io.kubernetes.cri.sandbox-uid")
            if not uid:
                continue
            r = pods.get(uid)
            if r is None:
                r = pods[uid] = PodRecord(ann.get("io.kubernetes.cri.sandbox-namespace"),
                                          ann.get("io.kubernetes.cri.sandbox-name"), uid)
                r.adopted = True
            if ann.get("io.kubernetes.cri.container-type") == "sandbox":
                r.pause_id = c["id"]
            else:
                r.app_id = c["id"]
                r.started_at = c.get("created", "")[:19] + "Z" if c.get("created") else now_rfc3339()
        for uid, r in pods.items():
            if r.pause_id:
                # the pod cgroup is cri.py's "<prefix>/pod<uid>": let stop_pod remove it
                self.cri.pods[r.pause_id] = {"app": r.app_id, "cgroup": "%s/pod%s" % (self.cri.prefix, uid)}
            r.phase = "Running"
            r.waiting = None
            with self.lock:
                self.records[uid] = r
        if pods:
            log("%s: adopted %d pod(s) from %s" % (self.node, len(pods), self.cri.root))

    def _kubelet(self):
        if not self.node_pods.synced:
            return
        pods = {p["metadata"]["uid"]: p for p in self.node_pods.items()
                if p["spec"].get("runtimeClassName") in self.runtime_classes}
        with self.lock:
            recs = dict(self.records)
        # containers whose pod is gone (deleted with grace 0 by someone else, or while we were away)
        for uid, r in recs.items():
            if uid not in pods:
                self._stop_containers(r, force=True)
                with self.lock:
                    self.records.pop(uid, None)
        # One worker per pod at a time, pods in parallel (the kubelet's pod workers): a pod
        # being started or stopped does not hold up the others.
        for uid, pod in pods.items():
            with self.lock:
                if uid in self.inflight:
                    continue
                self.inflight.add(uid)
            self.workers.submit(self._pod_worker, uid, pod)

    def _pod_worker(self, uid, pod):
        try:
            self._sync_pod(pod)
        except ApiStatusError as e:
            if e.retry_after:
                self.not_before = time.time() + e.retry_after
            self._log("sync %s: %s" % (pod["metadata"]["name"], e))
        except (OSError, http.client.HTTPException) as e:
            self._log("sync %s: %s" % (pod["metadata"]["name"], e))
        except Exception as e:
            log("sync %s: unexpected %r" % (pod["metadata"]["name"], e))
            import traceback
            traceback.print_exc()
        finally:
            with self.lock:
                self.inflight.discard(uid)

    def _sync_pod(self, pod):
        md, spec = pod["metadata"], pod["spec"]
        uid = md["uid"]
        with self.lock:
            r = self.records.get(uid)
        status = pod.get("status") or {}
        if r is None:
            if status.get("phase") in ("Succeeded", "Failed"):
                if md.get("deletionTimestamp"):
                    self._final_delete(pod)
                return
            r = PodRecord(md["namespace"], md["name"], uid)
            r.start_time = status.get("startTime") or now_rfc3339()
            r.transitions["PodScheduled"] = self._cond_time(status, "PodScheduled")
            with self.lock:
                self.records[uid] = r
        if r.start_time is None:
            r.start_time = status.get("startTime") or now_rfc3339()
        now = time.time()

        if md.get("deletionTimestamp"):
            self._terminate(r, pod)
            self._report(r, pod)
            self._final_delete(pod)
            return

        if r.phase == "Pending" and r.pause_id is None and now >= r.next_start:
            self._start(r, pod)
        elif r.phase == "Running" and now >= r.next_check:
            r.next_check = now + 1.0
            ads = spec.get("activeDeadlineSeconds")
            if ads is not None and now - parse_rfc3339(r.start_time) >= ads:
                self._stop_containers(r, force=True)
                r.phase, r.reason = "Failed", "DeadlineExceeded"
                r.message = "Pod was active on the node longer than the specified deadline"
                r.terminated = {"exitCode": 137, "reason": "Error", "startedAt": r.started_at,
                                "finishedAt": now_rfc3339()}
            else:
                st = self._app_state(r)
                if st is None or st.get("status") == "stopped":
                    code = self._exit_code(r)
                    self._stop_containers(r, force=True)
                    r.phase = "Succeeded" if code == 0 else "Failed"
                    r.terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                    "startedAt": r.started_at, "finishedAt": now_rfc3339()}
        elif r.phase == "Pending" and r.pause_id is None:
            # waiting to (re)try the start: the deadline still counts
            if r.waiting and r.waiting[0] == "ErrImagePull":
                r.waiting = ("ImagePullBackOff", 'Back-off pulling image "%s"' % (
                    spec["containers"][0].get("image", "")))
            ads = spec.get("activeDeadlineSeconds")
            if ads is not None and now - parse_rfc3339(r.start_time) >= ads:
                r.phase, r.reason = "Failed", "DeadlineExceeded"
                r.message = "Pod was active on the node longer than the specified deadline"
        self._report(r, pod)

    @staticmethod
    def _cond_time(status, ctype):
        for c in status.get("conditions") or []:
            if c.get("type") == ctype:
                return c.get("lastTransitionTime")
        return None

    def _mounts(self, r, container, vols, missing):
        """{mountPath: host path, or (host path, True) when readOnly} of a container's
        volumeMounts; the claims not bound yet are added to missing."""
        mounts = {}
        for vm in container.get("volumeMounts") or []:
            v = vols.get(vm["name"]) or {}
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                pvc = next((p for p in self.pvcs.items() if p["metadata"]["namespace"] == r.ns
                            and p["metadata"]["name"] == claim), None)
                if pvc is None or (pvc.get("status") or {}).get("phase") != "Bound":
                    missing.append(claim)
                    continue
                path = self.volume_dir(pvc)
                os.makedirs(path, exist_ok=True)
            elif "emptyDir" in v:
                # Where a kubelet keeps it (<pods dir>/<pod uid>/volumes/kubernetes.io~empty-
                # dir/<name>), under the volume root the node agent is given.
                path = os.path.join(self.state_dir, "volumes", r.uid, "volumes",
                                    "kubernetes.io~empty-dir", vm["name"])
                os.makedirs(path, exist_ok=True)
            else:
                continue
            mounts[vm["mountPath"]] = (path, True) if vm.get("readOnly") else path
            if path not in r.volumes:
                r.volumes.append(path)
        return mounts

    @staticmethod
    def _command(container):
        """The container's command and args as the process's argv; None: the image's (the
        simulation's keep-alive shell)."""
        argv = list(container.get("command") or []) + list(container.get("args") or [])
        return argv or None

    def _start(self, r, pod):
        spec = pod["spec"]
        missing = []
        vols = {v["name"]: v for v in spec.get("volumes") or []}
        container = spec["containers"][0]
        r.volumes = []
        mounts = self._mounts(r, container, vols, missing)
        inits = [{"name": ic["name"], "image": ic.get("image", ""),
                  "command": self._command(ic) or ["/bin/true"],
                  "mounts": self._mounts(r, ic, vols, missing)}
                 for ic in spec.get("initContainers") or []]
        if missing:
            r.waiting = ("ContainerCreating", None)
            r.next_start = time.time() + 0.5
            return
        limits = (container.get("resources") or {}).get("limits") or {}
        try:
            r.pause_id, r.app_id = self.cri.run_pod(
                r.ns, r.name, r.uid, mounts=mounts, cpu_millis=parse_cpu_millis(limits.get("cpu")),
                memory_bytes=parse_bytes(limits.get("memory")), image=container.get("image", ""),
                container_name=container["name"], command=self._command(container),
                init_containers=inits)
        except ImagePullError as e:
            r.start_failures += 1
            r.waiting = ("ErrImagePull", str(e)[:500])
            r.next_start = time.time() + min(10.0, 0.5 * 2 ** r.start_failures)
            self._log("%s/%s: %s" % (r.ns, r.name, e))
            return
        except Exception as e:
            r.start_failures += 1
            r.waiting = ("CreateContainerError", str(e)[:500])
            r.next_start = time.time() + min(10.0, 0.5 * 2 ** r.start_failures)
            log("%s: start %s/%s failed: %s" % (self.node, r.ns, r.name, e))
            return
        r.started_at = now_rfc3339()
        r.phase = "Running"
        r.waiting = None
        r.next_check = time.time() + 1.0
        self._log("started %s/%s (%s)" % (r.ns, r.name, r.app_id[:12]))

    def _app_state(self, r):
        try:
            return self.cri.state(r.app_id) if r.app_id else None
        except Exception:
            return {"status": "unknown"}

    def _exit_code(self, r):
        """The app container's exit status (runsc wait on a stopped container returns it)."""
        try:
            p = subprocess.run([self.cri.runsc, "--root", self.cri.root, "wait", r.app_id],
                               capture_output=True, text=True, timeout=10)
            if p.returncode == 0:
                st = json.loads(p.stdout).get("exitStatus")
                if st is not None:
                    # a wait status: exit code in the high byte, a signal in the low bits
                    return (st >> 8) & 0xff if st & 0x7f == 0 else 128 + (st & 0x7f)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        return 255

    def _stop_containers(self, r, force=False, grace=0):
        if r.stopped or not r.pause_id:
            r.stopped = True
            return
        if not force and r.app_id:
            try:
                self.cri.stop_container(r.app_id, signal.SIGTERM, wait_s=max(1, grace))
            except Exception:
                pass
        try:
            self.cri.stop_pod(r.pause_id)
        except Exception as e:
            log("%s: stop %s/%s: %s" % (self.node, r.ns, r.name, e))
            return
        r.stopped = True
        self._log("stopped %s/%s" % (r.ns, r.name))

    def _terminate(self, r, pod):
        if r.stopped or not r.pause_id:
            if r.phase in ("Pending",):
                r.phase = "Failed"
            r.stopped = True
            return
        md = pod["metadata"]
        grace = md.get("deletionGracePeriodSeconds") or 0
        left = parse_rfc3339(md["deletionTimestamp"]) - time.time()
        grace = max(0, min(grace, left))
        code = None
        if r.phase == "Running" and r.app_id:
            try:
                self.cri.stop_container(r.app_id, signal.SIGTERM, wait_s=max(1, grace))
                code = self._exit_code(r)
            except Exception:
                code = 137  # killed at the end of the grace period
        self._stop_containers(r, force=True)
        if r.phase == "Running":
            code = 137 if code is None else code
            r.phase = "Succeeded" if code == 0 else "Failed"
            r.terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                            "startedAt": r.started_at, "finishedAt": now_rfc3339()}
        elif r.phase == "Pending":
            r.phase = "Failed"

    def _final_delete(self, pod):
        md = pod["metadata"]
        try:
            self.client.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"]),
                                {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                 "preconditions": {"uid": md["uid"]}})
            self._log("deleted %s/%s" % (md["namespace"], md["name"]))
        except ApiStatusError as e:
            if e.code not in (404, 409):
                raise
        with self.lock:
            self.records.pop(md["uid"], None)

    # ---- status ----
    def _pod_ip(self, uid):
        h = hashlib.sha256(uid.encode()).digest()
        return "10.244.%d.%d" % (h[0], 2 + h[1] % 250)

    def _desired_status(self, r, pod):
        spec = pod["spec"]
        c0 = spec["containers"][0]
        running = r.phase == "Running"
        terminal = r.phase in ("Succeeded", "Failed")

        def cond(ctype, ok, reason=None):
            if r.transitions.get(ctype + "/" + str(ok)) is None:
                r.transitions[ctype + "/" + str(ok)] = now_rfc3339()
            c = {"type": ctype, "status": "True" if ok else "False", "lastProbeTime": None,
                 "lastTransitionTime": r.transitions[ctype + "/" + str(ok)]}
            if reason:
                c["reason"] = reason
            return c
        not_ready = "PodCompleted" if terminal else "ContainersNotReady"
        conds = [cond("Initialized", True),
                 cond("Ready", running, None if running else not_ready),
                 cond("ContainersReady", running, None if running else not_ready),
                 {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                  "lastTransitionTime": r.transitions.get("PodScheduled") or r.start_time}]
        cs = {"name": c0["name"], "image": c0.get("image", ""), "imageID": "", "restartCount": 0,
              "ready": running, "started": running, "lastState": {}}
        if r.app_id:
            cs["containerID"] = "containerd://" + r.app_id
            cs["imageID"] = "docker.io/library/%s@sha256:%s" % (
                c0.get("image", "").split("/")[-1].split(":")[0],
                hashlib.sha256(c0.get("image", "").encode()).hexdigest())
        if running:
            cs["state"] = {"running": {"startedAt": r.started_at}}
        elif r.terminated:
            t = dict(r.terminated)
            if r.app_id:
                t["containerID"] = "containerd://" + r.app_id
            cs["state"] = {"terminated": t}
        elif terminal:
            cs["state"] = {"terminated": {"exitCode": 137, "reason": "ContainerStatusUnknown",
                                          "startedAt": None, "finishedAt": now_rfc3339()}}
        else:
            w = {"reason": r.waiting[0] if r.waiting else "ContainerCreating"}
            if r.waiting and r.waiting[1]:
                w["message"] = r.waiting[1]
            cs["state"] = {"waiting": w}
        st = {"phase": r.phase, "conditions": conds, "hostIP": self.node_ip,
              "hostIPs": [{"ip": self.node_ip}], "startTime": r.start_time,
              "containerStatuses": [cs], "qosClass": (pod.get("status") or {}).get("qosClass")}
        if r.app_id:
            ip = self._pod_ip(r.uid)
            st["podIP"], st["podIPs"] = ip, [{"ip": ip}]
        if r.reason:
            st["reason"] = r.reason
        if r.message:
            st["message"] = r.message
        return st

    @staticmethod
    def _summary(st):
        cs = (st.get("containerStatuses") or [{}])[0]
        return (st.get("phase"), st.get("podIP"), st.get("reason"), st.get("startTime"),
                tuple(sorted((c["type"], c["status"]) for c in st.get("conditions") or [])),
                cs.get("containerID"), cs.get("ready"), tuple(sorted((cs.get("state") or {}).keys())),
                json.dumps((cs.get("state") or {}).get("waiting")))

    def _report(self, r, pod):
        want = self._desired_status(r, pod)
        have = pod.get("status") or {}
        if self._summary(want) == self._summary(have):
            return
        md = pod["metadata"]
        body = {"metadata": {"uid": md["uid"]},
                "status": dict(want, **{"$setElementOrder/conditions":
                                        [{"type": c["type"]} for c in want["conditions"]]})}
        try:
            self.client.request("PATCH", "/api/v1/namespaces/%s/pods/%s/status" % (md["namespace"], md["name"]),
                                body, "application/strategic-merge-patch+json")
            self._log("status %s/%s: %s" % (md["namespace"], md["name"], want["phase"]))
        except ApiStatusError as e:
            if e.code not in (404, 409):
                raise


def main(argv=None):
    ap = argparse.ArgumentParser(description="Simulated node: scheduler, PVC binder and kubelet "
                                 "running pods as runsc containers (via tests/kube/cri.py).")
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--node-name", required=True)
    ap.add_argument("--state-dir", required=True)
    ap.add_argument("--runsc-root", required=True)
    ap.add_argument("--cgroup-prefix", required=True)
    ap.add_argument("--images-dir", default=None,
                    help="where each image is a root filesystem directory <images-dir>/<image> "
                    "(default $COMPUTE_TEST_IMAGES_DIR or /var/lib/compute/images)")
    ap.add_argument("--runtime-class", action="append", default=None,
                    help="runtimeClassName served (repeatable; default gvisor)")
    ap.add_argument("--node-ip", default="127.0.0.1")
    ap.add_argument("--no-schedule", action="store_true", help="do not act as the scheduler")
    ap.add_argument("--no-pvc-binder", action="store_true", help="do not bind PVCs")
    ap.add_argument("--cleanup-on-exit", action="store_true",
                    help="stop every container at exit (default: leave them, as a kubelet does)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    sim = KubeletSim(kubeconfig=args.kubeconfig, node_name=args.node_name, state_dir=args.state_dir,
                     runsc_root=args.runsc_root, cgroup_prefix=args.cgroup_prefix,
                     runtime_classes=args.runtime_class or ["gvisor"], node_ip=args.node_ip,
                     schedule=not args.no_schedule, bind_pvcs=not args.no_pvc_binder,
                     verbose=args.verbose, images_dir=args.images_dir)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: done.set())
    signal.signal(signal.SIGINT, lambda *a: done.set())
    sim.start()
    print("kubelet-sim %s running" % args.node_name, flush=True)
    while not done.wait(1):
        pass
    sim.stop(cleanup=args.cleanup_on_exit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
