"""End to end in kube mode: compute.v1.ComputeService through the real frontend
(--scheduler kube) → the test API server → simulated nodes running real runsc pods → the real
node agents in kube mode, driven by Debian's python3-grpcio.

KubeFrontendTest runs every test of the local mode's e2e suite (test_frontend.FrontendTest)
against this stack; KubeObjectsTest checks what lands in the API server, and an image the node
does not have; KubeIsolationTest checks that a sandbox sees its image and its own workspace,
and nothing of the node or of another tenant (canary files); KubeFaultTest breaks things: API
faults (500, 429, latency, dropped watches, 410 Gone), a restarted API server, frontend and
agent restarts, two frontends creating for the same session, the GC run twice at once.

Usage: test_kube_e2e.py BUILD_DIR [unittest args]"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc

import test_frontend as tf
from agent_client import code_of
from agent_fixture import free_port
from compute_client import Compute
from frontend_fixture import checked_metrics
from kube_stack import SANDBOX_IMAGE, SANDBOX_NS, KubeStack
import testmain

BUILD_DIR = sys.argv[1]
ANN = "compute.paper-board.io/"


def pod_name(tenant, session):
    return "sbx-" + hashlib.sha256(f"{tenant}\0{session}".encode()).hexdigest()[:32]


def new_session():
    return "tenant-" + uuid.uuid4().hex[:8], "session-" + uuid.uuid4().hex[:8]


def exec_paths(stack, command):
    """Which path served each exec of `command`, from the node agents' debug lines."""
    lines = [ln for n in stack.nodes for ln in n.agent.log().splitlines()
             if f"exec {command}:" in ln]
    return ["via spawner" if "via spawner" in ln else
            "via runsc exec" if "via runsc exec" in ln else ln for ln in lines]


def stack_for(cls, setup, **kw):
    """Builds cls.stack and runs setup(cls); a failure closes the stack (tearDownClass does
    not run after a failed setUpClass)."""
    cls.stack = KubeStack(BUILD_DIR, **kw)
    try:
        setup(cls)
    except BaseException:
        cls.stack.close()
        raise


class KubeFrontendTest(tf.FrontendTest):
    """The local mode's e2e tests, unchanged, in kube mode."""
    IMAGES_CHECKED = False
    SANDBOX_NETWORK = False
    # The kube client keeps up to 8 idle API connections (KUBE_POOL_MAX in kube_client.c),
    # each with its curl handle's wakeup socketpair: 3 fds apiece once a burst has used them.
    FD_SLACK = 2 + 3 * 8

    @classmethod
    def setUpClass(cls):
        def setup(cls):
            # One simulated node starts every pod of a burst on this machine's CPUs (the 50
            # sessions' 150 runsc containers on 2 CPUs in CI): their execs wait for READY
            # longer than the default minute a cluster's nodes would need.
            cls.fe = cls.stack.frontend("--wait-ready-ms", "300000")
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            cls.sid = cls.c.create("tenant-" + uuid.uuid4().hex[:8], "shared").sandbox_id
        stack_for(cls, setup)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    def leftover_containers(self, sids):
        # The pods of destroyed sandboxes leave the API server once their node has stopped
        # them (graceful deletion), and no node runs a container for a pod that is gone.
        deadline = time.monotonic() + 60
        while True:
            left = [p["metadata"]["name"] for p in self.stack.api.list("pods", SANDBOX_NS)
                    if p["metadata"]["labels"].get(ANN + "sandbox-id") in sids]
            names = {p["metadata"]["name"] for p in self.stack.api.list("pods", SANDBOX_NS)}
            stray = [p for n in self.stack.nodes for p in n.kubelet.running_pods()
                     if p[1] not in names]
            if not (left or stray) or time.monotonic() > deadline:
                return left + stray
            time.sleep(0.5)


class KubeObjectsTest(unittest.TestCase):
    """What the frontend writes to the API server, and the GC."""

    @classmethod
    def setUpClass(cls):
        def setup(cls):
            cls.metrics_port = free_port()
            cls.fe = cls.stack.frontend("--delete-grace-s", "2", "--sandbox-image",
                                        "registry.example/img:1", "--metrics-listen",
                                        f"127.0.0.1:{cls.metrics_port}")
            cls.c = Compute(BUILD_DIR, cls.fe.address)
        stack_for(cls, setup)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    def metrics(self):
        """The frontend's /metrics page, checked by promtool."""
        return checked_metrics(self, self.metrics_port)

    def wait_metric(self, series, ok, what):
        deadline = time.monotonic() + 30
        while not ok(self.metrics().get(series, -1)):
            self.assertLess(time.monotonic(), deadline, f"{series} never {what}")
            time.sleep(0.2)

    def test_pod_and_pvc(self):
        c, api = self.c, self.stack.api
        tenant, session = new_session()
        # The request's image (the node has it) over --sandbox-image.
        r = c.create(tenant, session, image=SANDBOX_IMAGE, limits=c.pb.ResourceLimits(
            cpu_millis=500, memory_bytes=256 << 20, max_runtime={"seconds": 600}),
            workspace=c.pb.WorkspaceSpec(size="2Gi", mount_path="/work"))
        pod = api.get("pods", SANDBOX_NS, pod_name(tenant, session))
        self.assertIsNotNone(pod)
        md, spec = pod["metadata"], pod["spec"]
        self.assertEqual(md["annotations"][ANN + "tenant-id"], tenant)
        self.assertEqual(md["annotations"][ANN + "session-id"], session)
        self.assertEqual(md["labels"][ANN + "sandbox-id"], r.sandbox_id)
        self.assertEqual(spec["runtimeClassName"], "gvisor")
        self.assertEqual(spec["restartPolicy"], "Never")
        self.assertIs(spec["automountServiceAccountToken"], False)
        self.assertEqual(spec["activeDeadlineSeconds"], 600)
        (ctr,) = spec["containers"]
        self.assertEqual(ctr["image"], SANDBOX_IMAGE)
        # The resident exec path (--spawner-image agent): compute-init from the agent pods'
        # image, installed by an init container, is the sandbox container's init.
        (init,) = spec["initContainers"]
        self.assertEqual(init["image"], self.stack.spawner_image)
        self.assertEqual(init["command"][1:], ["--install", "/.compute/bin/compute-init"])
        self.assertEqual(ctr["command"][0], "/.compute/bin/compute-init")
        self.assertEqual(ctr["resources"]["limits"]["cpu"], "500m")
        self.assertEqual(ctr["volumeMounts"][0]["mountPath"], "/work")
        claim = spec["volumes"][0]["persistentVolumeClaim"]["claimName"]
        pvc = api.get("persistentvolumeclaims", SANDBOX_NS, claim)
        self.assertEqual(pvc["spec"]["resources"]["requests"]["storage"], "2Gi")
        # The workspace is the PVC's volume, at /work.
        out, _, done, _ = c.exec(r.sandbox_id, "sh", "-c", "echo hi > /work/f && cat /work/f")
        self.assertEqual((out, done.exit_code), (b"hi\n", 0))
        self.assertEqual(exec_paths(self.stack, "sh"), ["via spawner"])
        self.assertEqual(c.read(r.sandbox_id, "f").data, b"hi\n")
        gone = c.destroy(r.sandbox_id)
        pvc = api.get("persistentvolumeclaims", SANDBOX_NS, claim)
        ann = pvc["metadata"]["annotations"]
        self.assertIn(ANN + "delete-after", ann)
        self.assertEqual(json.loads(ann[ANN + "final-usage"])["cpu_ms"], gone.total_usage.cpu_ms)
        deadline = time.monotonic() + 30
        while api.get("pods", SANDBOX_NS, pod_name(tenant, session)) is not None:
            self.assertLess(time.monotonic(), deadline, "pod never deleted")
            time.sleep(0.2)
        self.assertEqual(c.describe(r.sandbox_id).status, c.pb.SANDBOX_STATUS_DESTROYED)
        # The GC, twice at once, after the grace of 2 s: one deletion, both succeed. Until
        # then the frontend's metrics count the PVC as expired (the alert of deploy/).
        time.sleep(2.5)
        self.wait_metric("compute_workspace_pvcs_expired", lambda v: v >= 1, ">= 1")
        m = self.metrics()
        self.assertGreaterEqual(m['compute_kube_requests_total{verb="POST",code="201"}'], 2)
        self.assertGreaterEqual(m['grpc_server_handled_total{grpc_service="compute.v1.'
                                  'ComputeService",grpc_method="CreateSandbox",'
                                  'grpc_type="unary",grpc_code="OK"}'], 1)
        self.assertIn(1.0, [v for k, v in m.items() if k.startswith("compute_agent_up{")])
        runs = [subprocess.Popen(self.fe.argv()[:1] + ["--mode", "gc"] + self.fe.argv()[1:],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                for _ in range(2)]
        outs = [p.communicate(timeout=60)[0].decode() for p in runs]
        self.assertEqual([p.returncode for p in runs], [0, 0], outs)
        self.assertIsNone(api.get("persistentvolumeclaims", SANDBOX_NS, claim))
        self.assertIn(claim, "".join(outs))
        self.wait_metric("compute_workspace_pvcs_expired", lambda v: v == 0, "0")
        self.assertEqual(code_of(c.describe, r.sandbox_id), grpc.StatusCode.NOT_FOUND)

    def test_image_not_on_the_node(self):
        # --sandbox-image (the last one wins) names an image no node has: the pod stays
        # Pending, its container Waiting with ErrImagePull / ImagePullBackOff as a kubelet
        # reports a failed pull; the sandbox stays STARTING, a call on it ends at its
        # deadline, and a destroy still works.
        c, api = self.c, self.stack.api
        tenant, session = new_session()
        sid = c.create(tenant, session).sandbox_id
        name = pod_name(tenant, session)
        self.assertEqual(api.get("pods", SANDBOX_NS, name)["spec"]["containers"][0]["image"],
                         "registry.example/img:1")
        deadline = time.monotonic() + 30
        while True:
            st = api.get("pods", SANDBOX_NS, name).get("status") or {}
            waiting = ((st.get("containerStatuses") or [{}])[0].get("state") or {}).get(
                "waiting") or {}
            if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff"):
                break
            self.assertLess(time.monotonic(), deadline, f"no pull failure reported: {st}")
            time.sleep(0.2)
        self.assertEqual(st["phase"], "Pending")
        self.assertIn("registry.example/img:1", waiting.get("message", ""))
        self.assertEqual(c.describe(sid).status, c.pb.SANDBOX_STATUS_STARTING)
        # It says why, with the kubelet's message but not the node's image directory.
        deadline = time.monotonic() + 30
        while not c.describe(sid).status_reason:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.2)
        reason = c.describe(sid).status_reason
        self.assertRegex(reason, r"^the image cannot be pulled: (ErrImagePull|ImagePullBackOff)")
        self.assertIn('"registry.example/img:1"', reason)
        # ErrImagePull's message names the node's image directory, cleaned; the back-off
        # that follows it names none.
        if "ErrImagePull" in reason:
            self.assertIn("<path>", reason)
        self.assertNotIn(self.stack.images_dir, reason)
        listed = c.list(tenant).sandboxes
        self.assertEqual([(s.sandbox_id, s.status) for s in listed],
                         [(sid, c.pb.SANDBOX_STATUS_STARTING)])
        self.assertTrue(listed[0].status_reason.startswith("the image cannot be pulled: "))
        self.assertEqual(code_of(c.exec, sid, "true", rpc_timeout=3),
                         grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual([n.name for n in self.stack.nodes if n.kubelet.running_pods()], [])
        c.destroy(sid)
        deadline = time.monotonic() + 30
        while api.get("pods", SANDBOX_NS, name) is not None:
            self.assertLess(time.monotonic(), deadline, "pod never deleted")
            time.sleep(0.2)

    def test_max_runtime_is_the_pod_deadline(self):
        c = self.c
        tenant, session = new_session()
        # 10 s: room for the pod's start and the first exec on a loaded machine (with 3 s,
        # the deadline once passed before that exec under load).
        sid = c.create(tenant, session, image=SANDBOX_IMAGE,
                       limits=c.pb.ResourceLimits(max_runtime={"seconds": 10})).sandbox_id
        self.assertEqual(c.exec(sid, "echo", "up")[0], b"up\n")
        deadline = time.monotonic() + 60
        while c.describe(sid).status != c.pb.SANDBOX_STATUS_FAILED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.3)
        pod = self.stack.api.get("pods", SANDBOX_NS, pod_name(tenant, session))
        self.assertEqual(pod["status"].get("reason"), "DeadlineExceeded")
        self.assertEqual(c.describe(sid).status_reason, "max_runtime of 10 s exceeded")
        self.assertEqual(code_of(c.exec, sid, "true"), grpc.StatusCode.FAILED_PRECONDITION)
        c.destroy(sid)


class KubeIsolationTest(unittest.TestCase):
    """A sandbox sees its image (under a memory overlay), its own workspace and what gVisor
    synthesises; nothing of the node nor of another tenant. Canary files with random secrets
    are planted on the node: the simulated kubelet's state directory (where the pods'
    volumes and bundles are), the other tenant's workspace (from inside it, and from the
    host), /root, /etc, /var/tmp and the images directory; sandbox A must not read them by
    their paths nor find any secret anywhere in its filesystem."""

    @classmethod
    def setUpClass(cls):
        def setup(cls):
            cls.fe = cls.stack.frontend()
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            cls.a = cls.c.create("tenant-a-" + uuid.uuid4().hex[:6], "sa").sandbox_id
            cls.b = cls.c.create("tenant-b-" + uuid.uuid4().hex[:6], "sb").sandbox_id
            cls.plant_canaries()
        cls.canaries = {}  # host path -> secret
        try:
            stack_for(cls, setup)
        except BaseException:
            cls.remove_canaries()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.remove_canaries()
        cls.c.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    @classmethod
    def remove_canaries(cls):
        for path in cls.canaries:
            try:
                os.unlink(path)
            except OSError:
                pass

    @classmethod
    def plant_canaries(cls):
        c = cls.c
        # B writes a secret from inside its workspace, as a tenant would.
        b_secret = "canary-" + uuid.uuid4().hex
        _, err, done, _ = c.exec(cls.b, "sh", "-c", f"echo {b_secret} > /workspace/secret.txt")
        assert done.exit_code == 0, err
        c.exec(cls.a, "true")  # both READY
        cls.node = cls.stack.node_of(cls.b)
        b_ws = cls.stack.workspace_dir(cls.b)
        cls.canaries[os.path.join(b_ws, "secret.txt")] = b_secret
        b_app = cls.stack.pod_of(cls.b)["status"]["containerStatuses"][0]["containerID"]
        b_bundle = os.path.join(cls.node.kubelet.cri.state_dir, "bundles",
                                b_app[len("containerd://"):])
        for d in (cls.node.kubelet.state_dir, b_ws, b_bundle, "/root", "/etc", "/var/tmp",
                  cls.stack.images_dir):
            secret = "canary-" + uuid.uuid4().hex
            path = os.path.join(d, f"cs-canary-{uuid.uuid4().hex[:8]}")
            cls.canaries[path] = secret
            with open(path, "w") as f:
                f.write(secret + "\n")
        # The node agent's TLS key: one line of it as a secret (it must not be in reach).
        key = os.path.join(cls.stack.tls_dir, "agent.key")
        with open(key) as f:
            cls.key_line = f.read().splitlines()[1]
        cls.key_path = key

    def sh(self, sid, script, timeout_s=0):
        out, err, done, _ = self.c.exec(sid, "sh", "-c", script, timeout_s=timeout_s)
        return done.exit_code, out.decode(errors="replace"), err.decode(errors="replace")

    def test_canaries_unreadable_by_their_paths(self):
        for path, secret in list(self.canaries.items()) + [(self.key_path, self.key_line)]:
            code, out, _ = self.sh(self.a, f"cat '{path}'")
            self.assertNotEqual(code, 0, f"{path} is readable in sandbox A")
            self.assertNotIn(secret, out)

    def test_secrets_nowhere_in_its_filesystem(self):
        # Every file of A's view but the synthetic trees (its /proc holds grep's own
        # command line). grep exits 1 when nothing matches.
        pats = " ".join(f"-e '{s}'" for s in list(self.canaries.values()) + [self.key_line])
        t0 = time.monotonic()
        code, out, err = self.sh(
            self.a, f"grep -rlF {pats} / --exclude-dir=proc --exclude-dir=sys "
            "--exclude-dir=dev 2>/dev/null; echo rc=$?", timeout_s=120)
        self.assertEqual(code, 0, err)
        self.assertIn("rc=1", out, f"a secret was found in sandbox A: {out}")
        print(f"grep -r / in the sandbox: {time.monotonic() - t0:.1f} s", file=sys.stderr)

    def test_node_paths_absent(self):
        n = self.node
        for path in (n.dir, n.kubelet.state_dir, n.runsc_root, self.stack.dir,
                     self.stack.images_dir, self.stack.workspace_dir(self.b), BUILD_DIR,
                     "/usr/bin/runsc"):
            code, _, _ = self.sh(self.a, f"test -e '{path}'")
            self.assertEqual(code, 1, f"{path} exists in sandbox A")
        code, out, _ = self.sh(self.a, "cat /proc/self/mountinfo")
        self.assertEqual(code, 0)
        self.assertNotIn(self.stack.images_dir, out)

    def test_root_is_the_image(self):
        code, out, err = self.sh(self.a, "cat /etc/os-release")
        self.assertEqual(code, 0, err)
        image = os.path.join(self.stack.images_dir, SANDBOX_IMAGE)
        with open(os.path.join(image, "etc", "os-release")) as f:
            self.assertEqual(out, f.read())
        self.assertIn('VERSION_ID="12"', out)
        self.assertIn("VERSION_CODENAME=bookworm", out)
        code, out, err = self.sh(self.a, "ls -la / && ls -la /etc/os-release /usr/bin")
        self.assertEqual(code, 0, err)
        self.assertRegex(out, r"(?m)^d\S+\s+\d+\s+root\s+root\s.*\susr$")

    def test_root_writable_in_memory_image_untouched(self):
        marker = "w-" + uuid.uuid4().hex[:8]
        code, out, err = self.sh(
            self.a, f"echo t > /tmp/{marker} && echo e > /etc/{marker} && "
            f"echo h > ~/{marker} && cat /tmp/{marker} /etc/{marker} ~/{marker}")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, "t\ne\nh\n")
        image = os.path.join(self.stack.images_dir, SANDBOX_IMAGE)
        for d in ("tmp", "etc", "root"):
            self.assertFalse(os.path.exists(os.path.join(image, d, marker)), d)
        # Not on the node at all, nor in the other sandbox of the same image.
        for d in (self.node.dir, "/tmp", "/etc"):
            found = subprocess.run(["find", d, "-xdev", "-name", marker], capture_output=True,
                                   text=True).stdout
            self.assertEqual(found, "", f"sandbox A's write is on the node: {found}")
        code, _, _ = self.sh(self.b, f"test -e /etc/{marker} || test -e /tmp/{marker}")
        self.assertEqual(code, 1)

    def test_workspaces_are_their_own(self):
        code, out, err = self.sh(self.a, "ls -A /workspace; test -e /workspace/secret.txt")
        self.assertEqual(code, 1, out + err)
        self.assertEqual(self.c.read(self.b, "secret.txt").data,
                         (self.canaries[os.path.join(self.stack.workspace_dir(self.b),
                                                     "secret.txt")] + "\n").encode())


class KubeNoHostUdsTest(unittest.TestCase):
    """A node whose runsc lacks host-uds=open (containerd's runsc.toml, docs/deploy.md): the
    pod's compute-init cannot reach the agent, and execs go through runsc exec."""

    @classmethod
    def setUpClass(cls):
        def setup(cls):
            cls.fe = cls.stack.frontend()
            cls.c = Compute(BUILD_DIR, cls.fe.address)
        stack_for(cls, setup, host_uds=None)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    def test_execs_fall_back_to_runsc_exec(self):
        tenant, session = new_session()
        sid = self.c.create(tenant, session).sandbox_id
        for _ in range(2):
            out, err, done, _ = self.c.exec(sid, "echo", "fallback")
            self.assertEqual((out, done.exit_code), (b"fallback\n", 0), err)
        self.assertEqual(exec_paths(self.stack, "echo"), ["via runsc exec"] * 2)
        self.c.destroy(sid)


class KubeFaultTest(unittest.TestCase):
    """Two nodes, two frontends, and things going wrong."""

    @classmethod
    def setUpClass(cls):
        def setup(cls):
            cls.fe = cls.stack.frontend()
            cls.fe2 = cls.stack.frontend()
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            cls.c2 = Compute(BUILD_DIR, cls.fe2.address)
        stack_for(cls, setup, nodes=("node-a", "node-b"))

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.c2.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    def tearDown(self):
        self.stack.api.clear_faults()

    def pods_of(self, tenant, session):
        return self.stack.api.list("pods", SANDBOX_NS,
                                   label_selector=ANN + "session-id=" + session)

    def test_two_frontends_same_session_one_pod(self):
        tenant, session = new_session()

        def create(i):
            c = self.c if i % 2 else self.c2
            return c.create(tenant, session).sandbox_id

        with ThreadPoolExecutor(max_workers=8) as pool:
            ids = set(pool.map(create, range(16)))
        self.assertEqual(len(ids), 1)
        self.assertEqual(len(self.pods_of(tenant, session)), 1)
        (sid,) = ids
        self.assertEqual(self.c2.exec(sid, "echo", "one")[0], b"one\n")
        self.c.destroy(sid)

    def test_both_nodes_serve(self):
        sids = [self.c.create(*new_session()).sandbox_id for _ in range(6)]
        for sid in sids:
            self.assertEqual(self.c.exec(sid, "cat", "/proc/self/comm")[0], b"cat\n")
        used = {self.stack.node_of(sid).name for sid in sids}
        for sid in sids:
            self.c.destroy(sid)
        # Both simulated schedulers race to bind; either may win each pod. Routing is
        # exercised whichever node a pod is on; say which were used.
        print(f"nodes used: {sorted(used)}", file=sys.stderr)

    def test_api_faults_recover(self):
        api, c = self.stack.api, self.c
        tenant, session = new_session()
        sid = c.create(tenant, session).sandbox_id
        c.exec(sid, "true")
        # Watches dropped, history compacted (410 on resume: relist), errors for a while.
        api.drop_watches()
        api.compact()
        # Longer than the frontend's 3 attempts 1 s apart (the Status's retryAfterSeconds): the
        # create gives up with UNAVAILABLE (retryable), never another code.
        api.fail_for(6, status=500)
        with self.assertRaises(grpc.RpcError) as cm:
            c.create(tenant, session)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        self.assertIn("HTTP 500", cm.exception.details())
        time.sleep(6.2)
        api.fail_for(2, status=429, retry_after=1)
        api.add_latency(0.3, duration=5)
        self.assertEqual(c.create(tenant, session).sandbox_id, sid)  # retries through 429s
        self.assertEqual(c.exec(sid, "echo", "ok")[0], b"ok\n")
        # A new sandbox made after the faults: the caches caught up (READY seen).
        t2, s2 = new_session()
        sid2 = c.create(t2, s2).sandbox_id
        self.assertEqual(c.exec(sid2, "echo", "new")[0], b"new\n")
        self.assertEqual(c.describe(sid2).status, c.pb.SANDBOX_STATUS_READY)
        self.assertEqual(len(self.pods_of(tenant, session)), 1)
        c.destroy(sid)
        c.destroy(sid2)

    def test_api_server_restart(self):
        api, c = self.stack.api, self.c
        tenant, session = new_session()
        sid = c.create(tenant, session).sandbox_id
        c.exec(sid, "true")
        api.restart(down_seconds=2)
        deadline = time.monotonic() + 60
        while code_of(c.create, tenant, session) != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "never recovered")
            time.sleep(0.3)
        self.assertEqual(c.create(tenant, session).sandbox_id, sid)
        self.assertEqual(c.exec(sid, "echo", "back")[0], b"back\n")
        c.destroy(sid)

    def test_frontend_restart_loses_nothing(self):
        c = self.c
        tenant, session = new_session()
        sid = c.create(tenant, session).sandbox_id
        c.exec(sid, "sh", "-c", "echo kept > /workspace/k")
        gone = c.create(*new_session()).sandbox_id
        c.destroy(gone)
        self.assertEqual(self.fe.stop(), 0)
        self.fe.start()
        self.assertEqual(c.describe(sid).status, c.pb.SANDBOX_STATUS_READY)
        self.assertEqual(c.read(sid, "k").data, b"kept\n")
        self.assertEqual(c.describe(gone).status, c.pb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(c.create(tenant, session).sandbox_id, sid)
        self.assertEqual(len(self.pods_of(tenant, session)), 1)
        c.destroy(sid)

    def test_agent_restart(self):
        c = self.c
        tenant, session = new_session()
        sid = c.create(tenant, session).sandbox_id
        c.exec(sid, "sh", "-c", "echo before > /workspace/b")
        node = self.stack.node_of(sid)
        node.agent.stop(signal.SIGKILL)
        self.assertEqual(code_of(c.exec, sid, "true"), grpc.StatusCode.UNAVAILABLE)
        node.agent.restart()
        deadline = time.monotonic() + 30
        while code_of(c.exec, sid, "true") != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "sandbox never served again")
            time.sleep(0.2)
        self.assertEqual(c.read(sid, "b").data, b"before\n")
        self.assertEqual(c.exec(sid, "echo", "after")[0], b"after\n")
        c.destroy(sid)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
