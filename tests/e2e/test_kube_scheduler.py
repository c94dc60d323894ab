"""The frontend's kube scheduler against the test API server (tests/kube/apiserver.py), driven
by Debian's python3-grpcio: the pods and PVCs it makes, their status, destroy and the GC, the
routing to a node's agent (a fake agent here: the full stack with kubelet_sim and the real
agent is another test), and recovery from API faults (500, 429, 503, dropped watches, 410,
a restarted API server). Needs no runsc: the test plays the kubelet by binding pods and
patching their status, as a kubelet would.

Usage: test_kube_scheduler.py BUILD_DIR [unittest args]"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kube"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from agent_client import code_of  # noqa: E402
from agent_fixture import free_port  # noqa: E402
from apiserver import ApiServer  # noqa: E402
from compute_client import Compute  # noqa: E402
from frontend_fixture import FrontendProcess  # noqa: E402
import testmain  # noqa: E402

BUILD_DIR = sys.argv[1]
sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
from compute.v1 import compute_pb2 as cpb  # noqa: E402
from nodeagent.v1 import nodeagent_pb2 as napb  # noqa: E402

NS, AGENT_NS = "ns", "sys"
SANITIZED = os.environ.get("CS_SANITIZED", "") in ("1", "ON", "TRUE", "true")
LBL_ID = "compute.paper-board.io/sandbox-id"
ANN = "compute.paper-board.io/"
USAGE_CPU_MS = 1234


def error_of(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except grpc.RpcError as e:
        return e.code(), e.details()
    return grpc.StatusCode.OK, ""


def pod_name(tenant, session):
    return "sbx-" + hashlib.sha256(f"{tenant}\0{session}".encode()).hexdigest()[:32]


class FakeAgent:
    """A node agent that answers GetUsage, Exec and ReadFile and records each request (the
    SandboxRef the frontend sent). Its Exec runs a tiny command set, so a test can tell which
    agent answered and that the answer came through unchanged: `echo ARGS...` prints them
    and exits 0, `exit N` exits N, `whoami` prints the agent's name and the sandbox id it was
    asked about, `true` exits 0; anything else prints to stderr and exits 127."""

    def __init__(self, name="agent-a"):
        self.name = name
        self.calls = []
        self.lock = threading.Lock()
        self.server = grpc.server(ThreadPoolExecutor(8))
        h = {
            "GetUsage": grpc.unary_unary_rpc_method_handler(
                self.get_usage, request_deserializer=napb.GetUsageRequest.FromString,
                response_serializer=napb.GetUsageResponse.SerializeToString),
            "Exec": grpc.unary_stream_rpc_method_handler(
                self.exec, request_deserializer=napb.ExecRequest.FromString,
                response_serializer=cpb.ExecEvent.SerializeToString),
            "ReadFile": grpc.unary_unary_rpc_method_handler(
                self.read_file, request_deserializer=napb.ReadFileRequest.FromString,
                response_serializer=cpb.ReadFileResponse.SerializeToString),
        }
        self.server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("nodeagent.v1.NodeAgent", h),))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def _record(self, method, req):
        with self.lock:
            self.calls.append((method, req))

    def last(self, method):
        with self.lock:
            for m, r in reversed(self.calls):
                if m == method:
                    return r
        return None

    def get_usage(self, req, ctx):
        self._record("GetUsage", req)
        resp = napb.GetUsageResponse(sandbox_id=req.ref.sandbox_id)
        resp.usage.cpu_ms = USAGE_CPU_MS
        resp.usage.memory_peak_bytes = 5 << 20
        return resp

    def exec(self, req, ctx):
        self._record("Exec", req)
        code = 0
        if req.command == "echo":
            yield cpb.ExecEvent(stdout=cpb.StdoutLine(data=(" ".join(req.args) + "\n").encode()))
        elif req.command == "exit":
            code = int(req.args[0])
        elif req.command == "whoami":
            yield cpb.ExecEvent(stdout=cpb.StdoutLine(
                data=f"{self.name} {req.ref.sandbox_id}\n".encode()))
        elif req.command != "true":
            yield cpb.ExecEvent(stderr=cpb.StderrLine(data=b"fake agent: unknown command\n"))
            code = 127
        yield cpb.ExecEvent(completed=cpb.ExecCompleted(exit_code=code))

    def read_file(self, req, ctx):
        self._record("ReadFile", req)
        return cpb.ReadFileResponse(data=b"data", total_size=4, eof=True)

    def stop(self):
        self.server.stop(0)


class KubeFrontend(FrontendProcess):
    def __init__(self, api, *extra):
        self.api = api
        self.extra = list(extra)
        super().__init__(BUILD_DIR, api.state_dir)

    def argv_tail(self):
        return ["--scheduler", "kube", "--kubeconfig", self.api.kubeconfig_path,
                "--sandbox-namespace", NS, "--agent-namespace", AGENT_NS,
                "--sandbox-image", "busybox:stable", "--log-level", "debug"] + self.extra


def run_gc(api, *extra):
    return subprocess.run(
        [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--scheduler", "kube", "--mode",
         "gc", "--kubeconfig", api.kubeconfig_path, "--sandbox-namespace", NS] + list(extra),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)


class KubeSchedulerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-kube-sched-")
        cls.api = ApiServer(os.path.join(cls.tmp, "api"), namespace=AGENT_NS,
                            bookmark_interval=1.0).start()
        cls.agent = FakeAgent()
        cls.add_agent_pod("node-a", cls.agent.port)
        cls.fe = KubeFrontend(cls.api, "--wait-ready-ms", "20000")
        cls.c = Compute(BUILD_DIR, cls.fe.address)
        cls.extra_fes = []

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        problems = []
        for fe in [cls.fe] + cls.extra_fes:
            rc = fe.stop()
            log = fe.log()
            if rc != 0 or "ERROR: AddressSanitizer" in log or "LeakSanitizer" in log or \
                    "runtime error:" in log:
                problems.append(f"frontend exited {rc}:\n{log[-4000:]}")
        cls.agent.stop()
        cls.api.stop()
        if problems:
            raise AssertionError("\n".join(problems))
        shutil.rmtree(cls.tmp, ignore_errors=True)

    @classmethod
    def add_agent_pod(cls, node, port, name=None):
        name = name or f"agent-{node}"
        cls.api.create("pods", AGENT_NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "compute-node-agent"}},
            "spec": {"nodeName": node, "containers": [{
                "name": "agent", "image": "agent:1",
                "ports": [{"name": "grpc", "containerPort": port}]}]}})
        cls.api.patch_status("pods", AGENT_NS, name, {
            "phase": "Running", "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]})

    def new_session(self):
        return "tenant-" + uuid.uuid4().hex[:8], "session-" + uuid.uuid4().hex[:8]

    def pods_of(self, sid):
        return self.api.list("pods", NS, label_selector=f"{LBL_ID}={sid}")

    def pod_of(self, sid):
        pods = self.pods_of(sid)
        self.assertEqual(len(pods), 1, pods)
        return pods[0]

    def pvc_of(self, sid):
        return self.api.get("persistentvolumeclaims", NS, f"ws-{sid}")

    def make_ready(self, sid, node="node-a"):
        """What the scheduler and the kubelet would do: bind, then report Running and Ready."""
        name = self.pod_of(sid)["metadata"]["name"]
        self.api.store.bind(NS, name, {"target": {"name": node}})
        self.api.patch_status("pods", NS, name, {
            "phase": "Running", "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}]})

    def assert_exec_reaches(self, sid, agent=None, rpc_timeout=30):
        """An exec through the frontend reaches `agent` (default: the class's) for sandbox sid
        and its answer comes back unchanged: output and a non-zero exit code."""
        agent = agent or self.agent
        out, err, done, _ = self.c.exec(sid, "whoami", rpc_timeout=rpc_timeout)
        self.assertEqual((out, err), (f"{agent.name} {sid}\n".encode(), b""))
        out, _, done, _ = self.c.exec(sid, "exit", "7", rpc_timeout=rpc_timeout)
        self.assertEqual((out, done.exit_code), (b"", 7))
        self.assertEqual(agent.last("Exec").ref.sandbox_id, sid)

    def kubelet_finish_deletion(self, sid, timeout=30):
        """The kubelet's part of a graceful pod deletion: confirm it with grace 0."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in self.pods_of(sid):
                if p["metadata"].get("deletionTimestamp"):
                    self.api.delete("pods", NS, p["metadata"]["name"], grace_period_seconds=0)
                    return
            time.sleep(0.05)

    # --- create ---

    def test_create_objects_per_contract(self):
        tenant, session = self.new_session()
        r = self.c.create(tenant, session, workspace=cpb.WorkspaceSpec(
            size="2Gi", storage_class="fast", mount_path="/work"),
            limits=cpb.ResourceLimits(cpu_millis=500, memory_bytes=256 << 20))
        self.assertEqual(r.status, cpb.SANDBOX_STATUS_STARTING)
        self.assertGreater(r.created_at.seconds, 0)
        pod = self.pod_of(r.sandbox_id)
        md, spec = pod["metadata"], pod["spec"]
        self.assertEqual(md["name"], pod_name(tenant, session))
        labels = {"app.kubernetes.io/managed-by": "compute-frontend",
                  "app.kubernetes.io/name": "compute-sandbox", LBL_ID: r.sandbox_id,
                  ANN + "tenant-id": tenant, ANN + "session-id": session}
        self.assertEqual(md["labels"], labels)
        self.assertEqual(md["annotations"], {
            ANN + "tenant-id": tenant, ANN + "session-id": session,
            ANN + "sandbox-id": r.sandbox_id, ANN + "mount-path": "/work"})
        self.assertEqual(spec["runtimeClassName"], "gvisor")
        self.assertEqual(spec["restartPolicy"], "Never")
        self.assertFalse(spec["automountServiceAccountToken"])
        self.assertFalse(spec["enableServiceLinks"])
        self.assertEqual(spec["activeDeadlineSeconds"], 900)
        self.assertEqual(spec["terminationGracePeriodSeconds"], 5)
        (ctr,) = spec["containers"]
        self.assertEqual(ctr["name"], "sandbox")
        self.assertEqual(ctr["image"], "busybox:stable")
        self.assertEqual(ctr["command"][:2], ["/bin/sh", "-c"])
        self.assertEqual(ctr["resources"]["limits"], ctr["resources"]["requests"])
        self.assertEqual(ctr["resources"]["limits"]["memory"], str(256 << 20))
        self.assertEqual(ctr["resources"]["limits"]["cpu"], "500m")
        self.assertEqual(ctr["volumeMounts"], [{"name": "workspace", "mountPath": "/work"}])
        self.assertEqual(spec["volumes"], [{"name": "workspace", "persistentVolumeClaim": {
            "claimName": f"ws-{r.sandbox_id}"}}])
        pvc = self.pvc_of(r.sandbox_id)
        self.assertEqual(pvc["metadata"]["labels"], labels)
        self.assertEqual(pvc["spec"]["accessModes"], ["ReadWriteOnce"])
        self.assertEqual(pvc["spec"]["resources"]["requests"]["storage"], "2Gi")
        self.assertEqual(pvc["spec"]["storageClassName"], "fast")

    def test_create_twice_one_pod(self):
        tenant, session = self.new_session()
        a = self.c.create(tenant, session)
        b = self.c.create(tenant, session)
        self.assertEqual(a.sandbox_id, b.sandbox_id)
        self.assertEqual(a.created_at, b.created_at)
        pods = [p for p in self.api.list("pods", NS)
                if p["metadata"]["name"] == pod_name(tenant, session)]
        self.assertEqual(len(pods), 1)
        self.assertEqual(len(self.pods_of(a.sandbox_id)), 1)
        self.assertEqual(self.pvc_of(a.sandbox_id)["spec"]["resources"]["requests"]["storage"],
                         "10Gi")

    def test_ids_with_slashes_are_distinct_sessions(self):
        # ("t/x", "y") and ("t", "x/y") are two sessions, never one pod.
        base = "t" + uuid.uuid4().hex[:6]
        a = self.c.create(base + "/x", "y").sandbox_id
        b = self.c.create(base, "x/y").sandbox_id
        self.assertNotEqual(a, b)
        self.assertNotEqual(pod_name(base + "/x", "y"), pod_name(base, "x/y"))

    def test_pod_of_another_session_under_the_name_is_not_used(self):
        # A pod under the session's name but annotated for another tenant (a collision, or
        # an object someone else made): refused, never handed out, nothing else made.
        tenant, session = self.new_session()
        other = self.c.create(*self.new_session())
        theirs = self.pods_of(other.sandbox_id)[0]
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": pod_name(tenant, session),
                            "labels": theirs["metadata"]["labels"],
                            "annotations": theirs["metadata"]["annotations"]},
               "spec": theirs["spec"]}
        self.api.create("pods", NS, pod)
        code, details = error_of(self.c.create, tenant, session)
        self.assertEqual(code, grpc.StatusCode.INTERNAL)
        self.assertIn("collision", details)
        self.assertEqual(len(self.pods_of(other.sandbox_id)), 2)  # the original and the squatter

    def test_concurrent_creates_two_frontends_one_pod(self):
        fe2 = KubeFrontend(self.api)
        self.extra_fes.append(fe2)
        c2 = Compute(BUILD_DIR, fe2.address)
        try:
            tenant, session = self.new_session()
            with ThreadPoolExecutor(12) as ex:
                futs = [ex.submit((self.c if i % 2 else c2).create, tenant, session)
                        for i in range(12)]
                ids = {f.result().sandbox_id for f in futs}
            self.assertEqual(len(ids), 1)
            self.assertEqual(len([p for p in self.api.list("pods", NS) if p["metadata"]["name"]
                                  == pod_name(tenant, session)]), 1)
            self.assertIsNotNone(self.pvc_of(ids.pop()))
        finally:
            c2.close()

    def test_odd_ids_stay_in_annotations(self):
        tenant = "t/" + "x" * 70  # neither a label value's characters nor its length
        session = "s/1"
        r = self.c.create(tenant, session)
        md = self.pod_of(r.sandbox_id)["metadata"]
        self.assertNotIn(ANN + "tenant-id", md["labels"])
        self.assertNotIn(ANN + "session-id", md["labels"])
        self.assertEqual(md["annotations"][ANN + "tenant-id"], tenant)
        self.assertEqual(md["annotations"][ANN + "session-id"], session)

    def test_invalid_specs(self):
        tenant, session = self.new_session()
        bad = [dict(workspace=cpb.WorkspaceSpec(mount_path="relative")),
               dict(workspace=cpb.WorkspaceSpec(mount_path="/proc/x")),
               dict(workspace=cpb.WorkspaceSpec(size="10 GB")),
               dict(workspace=cpb.WorkspaceSpec(storage_class="Not_A_Name")),
               dict(limits=cpb.ResourceLimits(cpu_millis=10)),
               dict(limits=cpb.ResourceLimits(memory_bytes=1 << 20))]
        for kw in bad:
            self.assertEqual(code_of(self.c.create, tenant, session, **kw),
                             grpc.StatusCode.INVALID_ARGUMENT, kw)
        self.assertEqual(self.api.list("pods", NS, label_selector=f"{ANN}session-id={session}"),
                         [])

    def test_pvc_repaired_by_retry(self):
        """A frontend that died between the pod and the PVC: the retried create makes it."""
        tenant, session = self.new_session()
        r = self.c.create(tenant, session)
        self.api.delete("persistentvolumeclaims", NS, f"ws-{r.sandbox_id}")
        self.assertEqual(self.c.create(tenant, session).sandbox_id, r.sandbox_id)
        self.assertIsNotNone(self.pvc_of(r.sandbox_id))

    # --- describe ---

    def test_describe_starting_ready_failed(self):
        tenant, session = self.new_session()
        r = self.c.create(tenant, session)
        d = self.c.describe(r.sandbox_id)
        self.assertEqual((d.sandbox_id, d.status), (r.sandbox_id, cpb.SANDBOX_STATUS_STARTING))
        self.assertEqual(d.created_at, r.created_at)
        self.assertEqual(d.current_usage.cpu_ms, 0)
        self.make_ready(r.sandbox_id)
        deadline = time.monotonic() + 10
        while self.c.describe(r.sandbox_id).status != cpb.SANDBOX_STATUS_READY:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        d = self.c.describe(r.sandbox_id)
        self.assertEqual(d.current_usage.cpu_ms, USAGE_CPU_MS)
        ref = self.agent.last("GetUsage").ref
        pod = self.pod_of(r.sandbox_id)
        self.assertEqual((ref.sandbox_id, ref.pod.pod_namespace, ref.pod.pod_name,
                          ref.pod.pod_uid, ref.pod.mount_path),
                         (r.sandbox_id, NS, pod["metadata"]["name"], pod["metadata"]["uid"],
                          "/workspace"))
        self.api.patch_status("pods", NS, pod["metadata"]["name"], {
            "phase": "Failed", "reason": "DeadlineExceeded",
            "message": "Pod was active on the node longer than the specified deadline"})
        deadline = time.monotonic() + 10
        while self.c.describe(r.sandbox_id).status != cpb.SANDBOX_STATUS_FAILED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        code, msg = error_of(self.c.exec, r.sandbox_id, "true")
        self.assertEqual(code, grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("DeadlineExceeded", msg)
        self.assertEqual(self.c.describe(r.sandbox_id).status_reason,
                         "max_runtime of 900 s exceeded")
        # A FAILED sandbox is still the session's: a create returns it.
        self.assertEqual(self.c.create(tenant, session).sandbox_id, r.sandbox_id)

    def wait_status(self, sid, status, timeout=10):
        deadline = time.monotonic() + timeout
        while True:
            d = self.c.describe(sid)
            if d.status == status:
                return d
            self.assertLess(time.monotonic(), deadline, d)
            time.sleep(0.05)

    def test_status_reason_from_the_pod(self):
        """Why a pod is not READY, from its status, as a kubelet and a scheduler report it;
        host paths in the kubelet's message are not shown."""
        rows = [
            ({"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient memory."}]},
             cpb.SANDBOX_STATUS_STARTING,
             "the sandbox cannot be scheduled: Unschedulable: 0/3 nodes are available: "
             "3 Insufficient memory."),
            ({"phase": "Pending", "containerStatuses": [{
                "name": "sandbox", "ready": False, "restartCount": 0, "image": "nope:1",
                "imageID": "", "state": {"waiting": {
                    "reason": "ErrImagePull", "message": 'failed to pull and unpack image '
                    '"nope:1": not found: no image directory /var/lib/compute/images/nope:1 on '
                    'this node'}}}]},
             cpb.SANDBOX_STATUS_STARTING,
             'the image cannot be pulled: ErrImagePull: failed to pull and unpack image '
             '"nope:1": not found: no image directory <path> on this node'),
            ({"phase": "Failed", "containerStatuses": [{
                "name": "sandbox", "ready": False, "restartCount": 0, "image": "x",
                "imageID": "", "state": {"terminated": {"reason": "OOMKilled",
                                                        "exitCode": 137}}}]},
             cpb.SANDBOX_STATUS_FAILED, "the sandbox ran out of memory (limit 1024 MiB)"),
            ({"phase": "Running", "conditions": [{"type": "Ready", "status": "Unknown",
                                                  "reason": "NodeLost"}]},
             cpb.SANDBOX_STATUS_STARTING, "the sandbox's node is not responding (node lost)"),
        ]
        for status, want_status, want_reason in rows:
            with self.subTest(reason=want_reason):
                r = self.c.create(*self.new_session())
                self.assertEqual(self.c.describe(r.sandbox_id).status_reason, "")
                self.api.patch_status("pods", NS, self.pod_of(r.sandbox_id)["metadata"]["name"],
                                      status)
                deadline = time.monotonic() + 10
                while self.c.describe(r.sandbox_id).status_reason != want_reason:
                    self.assertLess(time.monotonic(), deadline,
                                    self.c.describe(r.sandbox_id).status_reason)
                    time.sleep(0.05)
                self.assertEqual(self.c.describe(r.sandbox_id).status, want_status)
        # READY: nothing to say.
        r = self.c.create(*self.new_session())
        self.make_ready(r.sandbox_id)
        self.assertEqual(self.wait_status(r.sandbox_id, cpb.SANDBOX_STATUS_READY).status_reason,
                         "")

    def test_list_sandboxes(self):
        """ListSandboxes from the caches: the tenant's pods and its destroyed sandboxes' PVCs,
        each as DescribeSandbox reads it, in pages."""
        tenant = "tenant-" + uuid.uuid4().hex[:8]
        ids = {s: self.c.create(tenant, s).sandbox_id for s in ("a", "b", "c", "d")}
        other = self.c.create("tenant-" + uuid.uuid4().hex[:8], "a").sandbox_id
        self.make_ready(ids["a"])
        self.wait_status(ids["a"], cpb.SANDBOX_STATUS_READY)
        self.api.patch_status("pods", NS, self.pod_of(ids["b"])["metadata"]["name"], {
            "phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available"}]})
        self.wait_status(ids["b"], cpb.SANDBOX_STATUS_STARTING)
        gone = self.c.destroy(ids["c"])
        # A pod deleted behind the frontend's back: FAILED, as describe says.
        self.api.delete("pods", NS, self.pod_of(ids["d"])["metadata"]["name"])
        self.wait_status(ids["d"], cpb.SANDBOX_STATUS_FAILED)
        # The destroyed one stays listed after its pod has gone: from its PVC.
        self.kubelet_finish_deletion(ids["c"])
        deadline = time.monotonic() + 10
        while self.pods_of(ids["c"]):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(self.pvc_of(ids["c"])["metadata"]["annotations"][ANN + "tenant-id"],
                         tenant)

        deadline = time.monotonic() + 10
        while True:
            got, pages = self.c.list_all(tenant, page_size=1)
            by_id = {s.sandbox_id: s for s in got}
            if by_id.keys() == set(ids.values()) and \
                    by_id[ids["b"]].status_reason and \
                    by_id[ids["d"]].status == cpb.SANDBOX_STATUS_FAILED:
                break
            self.assertLess(time.monotonic(), deadline, got)
            time.sleep(0.1)
        self.assertEqual(pages, 4)
        key = [(s.created_at.ToMilliseconds(), s.sandbox_id) for s in got]
        self.assertEqual(key, sorted(key))
        self.assertNotIn(other, by_id)
        a, b, c, d = (by_id[ids[s]] for s in "abcd")
        self.assertEqual((a.status, a.status_reason, a.session_id, a.tenant_id),
                         (cpb.SANDBOX_STATUS_READY, "", "a", tenant))
        self.assertEqual(a.current_usage.cpu_ms, USAGE_CPU_MS)  # from its node's agent
        self.assertEqual((a.limits.cpu_millis, a.limits.memory_bytes,
                          a.limits.max_runtime.seconds), (1000, 1 << 30, 900))
        self.assertEqual((b.status, b.status_reason),
                         (cpb.SANDBOX_STATUS_STARTING, "the sandbox cannot be scheduled: "
                          "Unschedulable: 0/1 nodes are available"))
        self.assertEqual((c.status, c.session_id, c.tenant_id),
                         (cpb.SANDBOX_STATUS_DESTROYED, "c", tenant))
        self.assertEqual(c.current_usage, gone.total_usage)
        self.assertTrue(c.HasField("destroyed_at"))
        self.assertFalse(c.HasField("limits"))  # the pod, and its spec, are gone
        self.assertEqual(c.created_at, self.c.describe(ids["c"]).created_at)
        self.assertEqual(d.status, cpb.SANDBOX_STATUS_FAILED)
        self.assertIn("deleted by something other than this service", d.status_reason)

        # By status; a token for its own tenant and status only.
        only = self.c.list(tenant, status=cpb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual([s.sandbox_id for s in only.sandboxes], [ids["c"]])
        self.assertEqual(only.next_page_token, "")
        token = self.c.list(tenant, page_size=2).next_page_token
        self.assertTrue(token)
        self.assertEqual(code_of(self.c.list, tenant, page_token=token,
                                 status=cpb.SANDBOX_STATUS_READY),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(self.c.list, "someone-else", page_token=token),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(self.c.list, ""), grpc.StatusCode.INVALID_ARGUMENT)
        rest = self.c.list(tenant, page_token=token)
        self.assertEqual([s.sandbox_id for s in rest.sandboxes],
                         [s.sandbox_id for s in got[2:]])

    def test_unknown_sandbox(self):
        unknown = str(uuid.uuid4())
        for fn, args in ((self.c.describe, ()), (self.c.destroy, ()), (self.c.exec, ("true",)),
                         (self.c.read, ("f",))):
            self.assertEqual(code_of(fn, unknown, *args), grpc.StatusCode.NOT_FOUND)

    def test_pod_deleted_behind_our_back_is_failed(self):
        r = self.c.create(*self.new_session())
        self.api.delete("pods", NS, self.pod_of(r.sandbox_id)["metadata"]["name"])
        deadline = time.monotonic() + 10
        while self.c.describe(r.sandbox_id).status != cpb.SANDBOX_STATUS_FAILED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(code_of(self.c.exec, r.sandbox_id, "true"),
                         grpc.StatusCode.FAILED_PRECONDITION)
        self.assertIn("deleted by something other than this service",
                      self.c.describe(r.sandbox_id).status_reason)
        self.c.destroy(r.sandbox_id)
        self.assertEqual(self.c.describe(r.sandbox_id).status, cpb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(self.c.describe(r.sandbox_id).status_reason, "")

    # --- routing ---

    def test_exec_waits_for_ready_and_routes(self):
        r = self.c.create(*self.new_session())
        t = threading.Timer(1.0, self.make_ready, args=(r.sandbox_id,))
        t.start()
        start = time.monotonic()
        out, _, done, _ = self.c.exec(r.sandbox_id, "echo", "hi", rpc_timeout=30)
        t.join()
        self.assertGreaterEqual(time.monotonic() - start, 0.9)
        self.assertEqual((out, done.exit_code), (b"hi\n", 0))
        req = self.agent.last("Exec")
        pod = self.pod_of(r.sandbox_id)
        self.assertEqual((req.ref.sandbox_id, req.ref.pod.pod_namespace, req.ref.pod.pod_name,
                          req.ref.pod.pod_uid, req.ref.pod.mount_path, req.command),
                         (r.sandbox_id, NS, pod["metadata"]["name"], pod["metadata"]["uid"],
                          "/workspace", "echo"))
        got = self.c.read(r.sandbox_id, "f")
        self.assertEqual(got.data, b"data")
        self.assertEqual(self.agent.last("ReadFile").ref.pod.pod_name, pod["metadata"]["name"])

    def test_exec_deadline_while_starting(self):
        r = self.c.create(*self.new_session())
        start = time.monotonic()
        code = code_of(self.c.exec, r.sandbox_id, "true", rpc_timeout=2)
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - start, 10)

    def test_wait_ready_limit(self):
        fe = KubeFrontend(self.api, "--wait-ready-ms", "800")
        self.extra_fes.append(fe)
        c = Compute(BUILD_DIR, fe.address)
        try:
            r = c.create(*self.new_session())
            code, msg = error_of(c.exec, r.sandbox_id, "true", rpc_timeout=30)
            self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED)
            self.assertIn("still STARTING", msg)
        finally:
            c.close()

    def test_no_agent_on_node(self):
        r = self.c.create(*self.new_session())
        self.make_ready(r.sandbox_id, node="node-without-agent")
        code, msg = error_of(self.c.exec, r.sandbox_id, "true", rpc_timeout=30)
        self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
        self.assertIn("no node agent on node node-without-agent (waited", msg)
        # A shorter deadline than the frontend's wait for an agent ends the call by itself.
        code, msg = error_of(self.c.exec, r.sandbox_id, "true", rpc_timeout=1)
        self.assertEqual(code, grpc.StatusCode.DEADLINE_EXCEEDED)

    def test_call_waits_for_a_replaced_agent(self):
        """A node whose agent pod is being replaced (a DaemonSet rollout): a call made in the
        gap waits for the new pod, within its deadline, instead of failing UNAVAILABLE."""
        first, second = FakeAgent("agent-w-1"), FakeAgent("agent-w-2")
        try:
            self.add_agent_pod("node-w", first.port, name="agent-w-1")
            r = self.c.create(*self.new_session())
            self.make_ready(r.sandbox_id, node="node-w")
            self.assert_exec_reaches(r.sandbox_id, first)
            self.api.delete("pods", AGENT_NS, "agent-w-1", grace_period_seconds=0)
            first.stop()
            added = threading.Event()

            def add_second():
                added.set()
                self.add_agent_pod("node-w", second.port, name="agent-w-2")

            timer = threading.Timer(3.0, add_second)
            timer.start()
            try:
                while True:
                    # A call made before the frontend's agent cache has seen the old pod go
                    # still goes to its address and is refused at once; once it has, the
                    # call waits for the new pod. The call that succeeds must have been made
                    # before the new pod existed.
                    early = not added.is_set()
                    try:
                        out, _, done, _ = self.c.exec(r.sandbox_id, "whoami", rpc_timeout=30)
                        break
                    except grpc.RpcError as e:
                        self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
                        self.assertNotIn("no node agent", e.details())
                        self.assertFalse(added.is_set(), e.details())
                        time.sleep(0.05)
            finally:
                timer.join()
            self.assertTrue(early, "no call was made in the gap between the agent pods")
            self.assertEqual(done.exit_code, 0)
            self.assertEqual(out, f"agent-w-2 {r.sandbox_id}\n".encode())
        finally:
            first.stop()
            second.stop()

    def test_agent_moves_to_new_ip(self):
        """An agent pod replaced on its node (new pod, new port here): routes follow."""
        first, second = FakeAgent("agent-m-1"), FakeAgent("agent-m-2")
        try:
            self.add_agent_pod("node-m", first.port, name="agent-m-1")
            r = self.c.create(*self.new_session())
            self.make_ready(r.sandbox_id, node="node-m")
            self.assert_exec_reaches(r.sandbox_id, first)
            self.api.delete("pods", AGENT_NS, "agent-m-1", grace_period_seconds=0)
            self.add_agent_pod("node-m", second.port, name="agent-m-2")
            # Until the frontend's agent cache has seen the change, calls still reach the old
            # pod's address (that agent is alive here) or find no agent on the node; nothing
            # else is a right answer.
            deadline = time.monotonic() + 10
            while True:
                self.assertLess(time.monotonic(), deadline, "routes never moved to agent-m-2")
                try:
                    out, _, done, _ = self.c.exec(r.sandbox_id, "whoami", rpc_timeout=30)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.UNAVAILABLE, e.details())
                    self.assertIn("no node agent on node node-m", e.details())
                    time.sleep(0.05)
                    continue
                self.assertEqual(done.exit_code, 0)
                if out == f"agent-m-2 {r.sandbox_id}\n".encode():
                    break
                self.assertEqual(out, f"agent-m-1 {r.sandbox_id}\n".encode())
                time.sleep(0.05)
            self.assert_exec_reaches(r.sandbox_id, second)
        finally:
            first.stop()
            second.stop()

    # --- destroy ---

    def test_destroy_records_on_pvc(self):
        tenant, session = self.new_session()
        r = self.c.create(tenant, session)
        self.make_ready(r.sandbox_id)
        deadline = time.monotonic() + 10
        while self.c.describe(r.sandbox_id).status != cpb.SANDBOX_STATUS_READY:
            self.assertLess(time.monotonic(), deadline)
        before = time.time()
        gone = self.c.destroy(r.sandbox_id)
        self.assertEqual(gone.sandbox_id, r.sandbox_id)
        self.assertEqual(gone.total_usage.cpu_ms, USAGE_CPU_MS)
        ann = self.pvc_of(r.sandbox_id)["metadata"]["annotations"]
        delete_after = time.mktime(time.strptime(ann[ANN + "delete-after"],
                                                 "%Y-%m-%dT%H:%M:%SZ")) - time.timezone
        self.assertAlmostEqual(delete_after, before + 86400, delta=5)
        self.assertTrue(ann[ANN + "destroyed-at"].endswith("Z"))
        usage = json.loads(ann[ANN + "final-usage"])
        self.assertEqual(usage["cpu_ms"], USAGE_CPU_MS)
        self.assertEqual(usage["memory_peak_bytes"], 5 << 20)
        # The pod is being deleted (gracefully: it is bound).
        self.assertTrue(self.pod_of(r.sandbox_id)["metadata"].get("deletionTimestamp"))
        d = self.c.describe(r.sandbox_id)
        self.assertEqual(d.status, cpb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(d.current_usage.cpu_ms, USAGE_CPU_MS)
        self.assertEqual(d.created_at, r.created_at)
        # Idempotent: the same record.
        again = self.c.destroy(r.sandbox_id)
        self.assertEqual(again.total_usage, gone.total_usage)
        self.assertEqual(self.pvc_of(r.sandbox_id)["metadata"]["annotations"], ann)
        for fn, args in ((self.c.exec, ("true",)), (self.c.read, ("f",))):
            code, msg = error_of(fn, r.sandbox_id, *args)
            self.assertEqual(code, grpc.StatusCode.FAILED_PRECONDITION)
        # A new create for the session waits for the old pod to go, then makes a new one.
        t = threading.Thread(target=self.kubelet_finish_deletion, args=(r.sandbox_id,))
        t.start()
        new = self.c.create(tenant, session)
        t.join()
        self.assertNotEqual(new.sandbox_id, r.sandbox_id)
        self.assertEqual(self.c.describe(r.sandbox_id).status, cpb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(self.c.describe(new.sandbox_id).status, cpb.SANDBOX_STATUS_STARTING)

    def test_destroy_starting_and_recreate(self):
        tenant, session = self.new_session()
        r = self.c.create(tenant, session)
        gone = self.c.destroy(r.sandbox_id)
        self.assertEqual(gone.total_usage.cpu_ms, 0)
        self.assertEqual(self.pods_of(r.sandbox_id), [])  # unbound: deleted at once
        self.assertEqual(self.c.describe(r.sandbox_id).status, cpb.SANDBOX_STATUS_DESTROYED)
        new = self.c.create(tenant, session)
        self.assertNotEqual(new.sandbox_id, r.sandbox_id)

    def test_interrupted_destroy(self):
        """A destroy that annotated the PVC and died before deleting the pod: DESTROYED, and
        the next create for the session finishes it and makes a new sandbox."""
        tenant, session = self.new_session()
        r = self.c.create(tenant, session)
        self.api.patch("persistentvolumeclaims", NS, f"ws-{r.sandbox_id}", {"metadata": {
            "annotations": {ANN + "delete-after": "2099-01-01T00:00:00Z",
                            ANN + "destroyed-at": "2026-01-01T00:00:00Z",
                            ANN + "final-usage": '{"cpu_ms":7}'}}})
        d = self.c.describe(r.sandbox_id)
        self.assertEqual((d.status, d.current_usage.cpu_ms), (cpb.SANDBOX_STATUS_DESTROYED, 7))
        new = self.c.create(tenant, session)
        self.assertNotEqual(new.sandbox_id, r.sandbox_id)
        self.assertEqual(self.pods_of(r.sandbox_id), [])

    # --- GC ---

    def make_pvc(self, sid, delete_after=None):
        ann = {ANN + "delete-after": delete_after} if delete_after else {}
        return self.api.create("persistentvolumeclaims", NS, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": f"ws-{sid}", "annotations": ann, "labels": {
                "app.kubernetes.io/managed-by": "compute-frontend", LBL_ID: sid}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}})

    def test_gc(self):
        expired, future, live = (str(uuid.uuid4()) for _ in range(3))
        self.make_pvc(expired, "2020-01-01T00:00:00Z")
        self.make_pvc(future, "2099-01-01T00:00:00Z")
        self.make_pvc(live)
        # A destroy through a frontend whose grace is 0: expired at once.
        fe = KubeFrontend(self.api, "--delete-grace-s", "0")
        self.extra_fes.append(fe)
        c = Compute(BUILD_DIR, fe.address)
        try:
            r = c.create(*self.new_session())
            c.destroy(r.sandbox_id)
        finally:
            c.close()
        time.sleep(1.1)
        # Two passes at once: both succeed, each PVC deleted once.
        with ThreadPoolExecutor(2) as ex:
            outs = list(ex.map(lambda _: run_gc(self.api), range(2)))
        for o in outs:
            self.assertEqual(o.returncode, 0, o.stdout.decode())
        logs = "".join(o.stdout.decode() for o in outs)
        self.assertIsNone(self.pvc_of(expired))
        self.assertIsNone(self.pvc_of(r.sandbox_id))
        self.assertIsNotNone(self.pvc_of(future))
        self.assertIsNotNone(self.pvc_of(live))
        self.assertEqual(logs.count(f"deleted PVC {NS}/ws-{expired}"), 1, logs)
        self.assertIn(f"sandbox {expired}", logs)
        self.assertIn("delete-after 2020-01-01T00:00:00Z", logs)
        again = run_gc(self.api)
        self.assertEqual(again.returncode, 0)
        self.assertIn("0 workspace PVCs deleted", again.stdout.decode())
        # A DESTROYED sandbox whose PVC the GC removed is gone for good.
        self.assertEqual(code_of(self.c.describe, expired), grpc.StatusCode.NOT_FOUND)
        self.api.delete("persistentvolumeclaims", NS, f"ws-{future}")
        self.api.delete("persistentvolumeclaims", NS, f"ws-{live}")

    def backdate(self, resource, name, when="2020-01-01T00:00:00Z"):
        """Makes an object look old (the API server itself never changes creationTimestamp)."""
        with self.api.store.lock:
            self.api.store.objects[resource][(NS, name)]["metadata"]["creationTimestamp"] = when

    def test_gc_orphans(self):
        # A pod deleted outside the frontend: once old enough, its PVC is marked as a
        # destroy would have marked it, and Describe says DESTROYED.
        gone = self.c.create(*self.new_session())
        pod = self.pod_of(gone.sandbox_id)
        self.api.delete("pods", NS, pod["metadata"]["name"], grace_period_seconds=0)
        # A pod whose create died before its PVC, never retried: deleted once old enough.
        stranded = str(uuid.uuid4())
        self.api.create("pods", NS, {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "sbx-stranded-" + stranded[:8], "labels": {
                "app.kubernetes.io/managed-by": "compute-frontend", LBL_ID: stranded}},
            "spec": pod["spec"]})
        # The same, young: a create in progress, left alone.
        young = self.c.create(*self.new_session())
        self.api.delete("pods", NS, self.pod_of(young.sandbox_id)["metadata"]["name"],
                        grace_period_seconds=0)
        self.backdate("persistentvolumeclaims", f"ws-{gone.sandbox_id}")
        self.backdate("pods", "sbx-stranded-" + stranded[:8])
        out = run_gc(self.api)
        self.assertEqual(out.returncode, 0, out.stdout.decode())
        log = out.stdout.decode()
        ann = self.pvc_of(gone.sandbox_id)["metadata"]["annotations"]
        self.assertIn(ANN + "delete-after", ann)
        self.assertIn(f"sandbox {gone.sandbox_id}: its pod is gone without a destroy", log)
        self.assertEqual(self.c.describe(gone.sandbox_id).status, cpb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(self.pods_of(stranded), [])
        self.assertIn(f"sandbox {stranded}: deleted pod", log)
        self.assertNotIn(ANN + "delete-after",
                         self.pvc_of(young.sandbox_id)["metadata"].get("annotations", {}))

    def test_gc_unreachable(self):
        out = subprocess.run(
            [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--scheduler", "kube", "--mode",
             "gc", "--kubeconfig", os.path.join(self.tmp, "missing")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        self.assertEqual(out.returncode, 1, out.stdout.decode())

    # --- API faults ---

    def test_transient_errors_are_retried(self):
        tenant, session = self.new_session()
        self.api.fail_next(2, 500, method="POST", path="/pods$")
        r = self.c.create(tenant, session)
        self.assertEqual(len(self.pods_of(r.sandbox_id)), 1)
        self.api.fail_next(1, 429, path="/persistentvolumeclaims/", retry_after=1)
        self.assertEqual(self.c.describe(r.sandbox_id).status, cpb.SANDBOX_STATUS_STARTING)

    def test_lasting_errors_unavailable_then_recover(self):
        tenant, session = self.new_session()
        self.api.fail_for(4, 503, path="/namespaces/ns/")
        try:
            code, msg = error_of(self.c.create, tenant, session)
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
            self.assertIn("503", msg)
        finally:
            time.sleep(4.5)
            self.api.clear_faults()
        r = self.c.create(tenant, session)
        self.make_ready(r.sandbox_id)
        self.assert_exec_reaches(r.sandbox_id)  # the watch recovered

    def test_create_errors_map_to_internal(self):
        for status, word in ((403, "forbidden by quota/admission"), (422, "invalid"),
                             (400, "HTTP 400")):
            self.api.fail_next(1, status, method="POST", path="/pods$")
            code, msg = error_of(self.c.create, *self.new_session())
            self.assertEqual(code, grpc.StatusCode.INTERNAL, (status, msg))
            self.assertIn(word, msg)

    def test_pvc_refused_takes_the_pod_back(self):
        tenant, session = self.new_session()
        self.api.fail_next(1, 403, method="POST", path="/persistentvolumeclaims$")
        code, msg = error_of(self.c.create, tenant, session)
        self.assertEqual(code, grpc.StatusCode.INTERNAL)
        self.assertIn("creating PVC", msg)
        self.assertIn("forbidden by quota/admission", msg)
        self.assertIsNone(self.api.get("pods", NS, pod_name(tenant, session)))
        r = self.c.create(tenant, session)
        self.assertIsNotNone(self.pvc_of(r.sandbox_id))

    def test_exec_with_watch_down(self):
        """Watches failing for a while: a STARTING sandbox that becomes READY meanwhile is
        seen by reading the pod directly once the cache has been quiet."""
        r = self.c.create(*self.new_session())
        self.api.fail_for(6, 500, path="watch=")
        self.api.drop_watches()
        time.sleep(0.3)
        self.make_ready(r.sandbox_id)
        start = time.monotonic()
        self.assert_exec_reaches(r.sandbox_id)
        self.assertLess(time.monotonic() - start, 4)
        time.sleep(6)

    def wait_log(self, fe, text, timeout=20):
        deadline = time.monotonic() + timeout
        while text not in fe.log():
            if time.monotonic() > deadline:
                self.fail(f"{text!r} not logged:\n{fe.log()[-3000:]}")
            time.sleep(0.1)

    def test_watch_dropped_and_410(self):
        r = self.c.create(*self.new_session())
        self.assertEqual(self.c.describe(r.sandbox_id).status, cpb.SANDBOX_STATUS_STARTING)
        # Dropped connections and clean ends: the watch resumes; the change made meanwhile
        # reaches the cache (exec waits on the cache, not on the API server).
        self.api.drop_watches()
        self.api.drop_watches(clean=True)
        self.make_ready(r.sandbox_id)
        self.assert_exec_reaches(r.sandbox_id, rpc_timeout=15)
        # History compacted while the watch is down: 410 Gone, relist.
        r2 = self.c.create(*self.new_session())
        self.api.fail_for(1.5, 500, path="watch=")
        self.api.drop_watches()
        time.sleep(0.2)
        self.make_ready(r2.sandbox_id)
        self.api.compact()
        self.wait_log(self.fe, "too old (410 Gone); listing again")
        self.assert_exec_reaches(r2.sandbox_id, rpc_timeout=15)

    def test_relist_drops_what_was_deleted_meanwhile(self):
        # The relist goes into the cache in place (kube_cache.c): a pod deleted while the
        # watch was down leaves the cache when the list is in; the others stay.
        gone, kept = (self.c.create(*self.new_session()) for _ in range(2))
        for r in (gone, kept):
            self.make_ready(r.sandbox_id)
            self.assert_exec_reaches(r.sandbox_id, rpc_timeout=15)
        relists = self.fe.log().count("too old (410 Gone); listing again")
        self.api.fail_for(1.5, 500, path="watch=")
        self.api.drop_watches()
        time.sleep(0.2)
        self.api.delete("pods", NS, self.pod_of(gone.sandbox_id)["metadata"]["name"],
                        grace_period_seconds=0)
        self.api.compact()
        deadline = time.monotonic() + 20
        while self.fe.log().count("too old (410 Gone); listing again") == relists:
            self.assertLess(time.monotonic(), deadline, self.fe.log()[-3000:])
            time.sleep(0.1)
        while self.c.describe(gone.sandbox_id).status != cpb.SANDBOX_STATUS_FAILED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.05)
        self.assertEqual(self.c.describe(kept.sandbox_id).status, cpb.SANDBOX_STATUS_READY)
        self.assert_exec_reaches(kept.sandbox_id, rpc_timeout=15)

    def test_apiserver_restart(self):
        r = self.c.create(*self.new_session())
        self.api.restart(down_seconds=2)
        self.make_ready(r.sandbox_id)
        self.assert_exec_reaches(r.sandbox_id)

    def test_startup_fails_clearly(self):
        api2 = ApiServer(os.path.join(self.tmp, "api-forbidden"), token="right").start()
        try:
            with open(api2.kubeconfig_path) as f:
                cfg = f.read().replace("token: right", "token: wrong")
            bad = os.path.join(self.tmp, "kubeconfig-wrong-token")
            with open(bad, "w") as f:
                f.write(cfg)
            start = time.monotonic()
            out = subprocess.run(
                [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--scheduler", "kube",
                 "--kubeconfig", bad, "--listen", f"127.0.0.1:{free_port()}"],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=90)
            log = out.stdout.decode()
            self.assertEqual(out.returncode, 1, log)
            self.assertIn("401", log)
            self.assertLess(time.monotonic() - start, 60)
        finally:
            api2.stop()

    def test_sigterm_with_watches_and_calls_open(self):
        fe = KubeFrontend(self.api)
        c = Compute(BUILD_DIR, fe.address)
        try:
            r = c.create(*self.new_session())
            ex = ThreadPoolExecutor(1)
            fut = ex.submit(code_of, c.exec, r.sandbox_id, "true", rpc_timeout=60)
            time.sleep(0.5)
            start = time.monotonic()
            self.assertEqual(fe.stop(), 0, fe.log()[-3000:])
            self.assertLess(time.monotonic() - start, 15)
            self.assertNotEqual(fut.result(timeout=30), grpc.StatusCode.OK)
            ex.shutdown()
        finally:
            c.close()
        log = fe.log()
        self.assertNotIn("LeakSanitizer", log)
        self.assertNotIn("runtime error:", log)


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
