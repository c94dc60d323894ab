"""The node agent in kube mode against real runsc: pods started the way containerd's runsc
shim starts them (tests/kube/cri.py: a pause container and the app container "sandbox" in one
gVisor sandbox, CRI annotations in the bundles, the default image's directory as the root),
found and served by the agent through its gRPC service (Debian's python3-grpcio).

Usage: test_agent_kube.py BUILD_DIR [unittest args]"""
import os
import shutil
import signal
import sys
import tempfile
import time
import unittest
import uuid

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube"))
from agent_client import code_of, collect_exec  # noqa: E402
from agent_fixture import DEFAULT_IMAGE, IMAGES_DIR, AgentProcess  # noqa: E402
import testmain  # noqa: E402
from cri import CriRuntime  # noqa: E402

BUILD_DIR = sys.argv[1]
NS = "compute-sandboxes"
MIB = 1024 * 1024


class KubeAgentTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Short: runsc keeps sockets under its root.
        cls.tmp = tempfile.mkdtemp(prefix="csa-", dir="/tmp")
        cls.cri = CriRuntime(os.path.join(cls.tmp, "r"), os.path.join(cls.tmp, "s"),
                             f"/compute-test-kube-agent-{os.getpid()}/kubepods",
                             images_dir=IMAGES_DIR)
        cls.pods = {}  # name -> (uid, pause id, app id, workspace dir)
        cls.run_pod("pod-a", cpu_millis=500, memory_bytes=256 * MIB)
        # Workspaces are directories under tmp/volumes (the kubelet's pods directory here).
        cls.agent = AgentProcess(BUILD_DIR, "--mode", "kube", "--runsc-root", cls.cri.root,
                                 "--volume-root", os.path.join(cls.tmp, "volumes"),
                                 "--node-name", "node-k1")
        cls.c = cls.agent.client
        cls.pb = cls.c.pb

    @classmethod
    def tearDownClass(cls):
        try:
            rc, tail = cls.agent.cleanup()
        finally:
            cls.cri.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    @classmethod
    def run_pod(cls, name, namespace=NS, volumes="volumes", **kw):
        uid = str(uuid.uuid4())
        ws = os.path.join(cls.tmp, volumes, f"ws-{name}-{uid[:8]}")
        os.makedirs(ws)
        kw.setdefault("image", DEFAULT_IMAGE)
        pause, app = cls.cri.run_pod(namespace, name, uid, mounts={"/workspace": ws}, **kw)
        cls.pods[name] = (uid, pause, app, ws)
        return uid, pause, app, ws

    # --- helpers ---

    def ref(self, name="pod-a", uid=None, sandbox_id="", **pod):
        if uid is None:
            uid = self.pods[name][0] if name in self.pods else ""
        return self.pb.SandboxRef(sandbox_id=sandbox_id, pod=self.pb.PodRef(
            pod_namespace=pod.pop("namespace", NS), pod_name=name, pod_uid=uid, **pod))

    # The helpers call the suite's agent, or the client c of another.

    def exec(self, *cmd, ref=None, env=None, working_dir="", timeout=120, c=None, **kw):
        req = self.pb.ExecRequest(ref=ref or self.ref(), command=cmd[0], args=list(cmd[1:]),
                                  env=env or {}, working_dir=working_dir, **kw)
        return collect_exec((c or self.c).ExecStream(req, timeout=timeout))

    def get(self, ref=None, c=None):
        return (c or self.c).GetSandbox(self.pb.GetSandboxRequest(ref=ref or self.ref()),
                                        timeout=30).sandbox

    def read(self, path, ref=None, c=None, **kw):
        return (c or self.c).ReadFile(self.pb.ReadFileRequest(ref=ref or self.ref(), path=path,
                                                              **kw), timeout=30)

    def write(self, path, data, ref=None, c=None, **kw):
        return (c or self.c).WriteFile(self.pb.WriteFileRequest(ref=ref or self.ref(), path=path,
                                                                data=data, **kw), timeout=30)

    def usage(self, ref=None):
        return self.c.GetUsage(self.pb.GetUsageRequest(ref=ref or self.ref()), timeout=30)

    # --- tests ---

    def test_agent_info(self):
        info = self.c.GetAgentInfo(self.pb.GetAgentInfoRequest(), timeout=30)
        self.assertEqual(info.mode, self.pb.AGENT_MODE_KUBE)
        self.assertEqual(info.node_name, "node-k1")
        self.assertEqual(info.runtime, "runsc")
        self.assertIn(info.cgroup_version, ("v1", "v2"))
        self.assertGreaterEqual(info.sandboxes_live, 1)
        self.assertGreaterEqual(info.sandboxes_ready, 1)
        self.assertGreaterEqual(info.cpu_millis_allocated, 500)
        self.assertGreaterEqual(info.memory_bytes_allocated, 256 * MIB)

    def test_get_sandbox_ready_with_pod_details(self):
        sid = str(uuid.uuid4())
        sb = self.get(self.ref(sandbox_id=sid))
        uid, pause, app, ws = self.pods["pod-a"]
        self.assertEqual(sb.status, self.c.cpb.SANDBOX_STATUS_READY)
        self.assertEqual(sb.sandbox_id, sid)
        self.assertEqual((sb.tenant_id, sb.session_id), ("", ""))
        self.assertEqual((sb.pod.pod_namespace, sb.pod.pod_name, sb.pod.pod_uid,
                          sb.pod.container_name, sb.pod.mount_path),
                         (NS, "pod-a", uid, "sandbox", "/workspace"))
        self.assertEqual((sb.cpu_millis, sb.memory_bytes), (500, 256 * MIB))
        self.assertEqual(sb.mount_path, "/workspace")
        self.assertEqual(sb.image, "docker.io/library/" + DEFAULT_IMAGE)  # containerd's name
        self.assertLess(abs(sb.created_at.seconds - time.time()), 3600)
        # Without the uid (any pod of that name), and with the container named.
        self.assertEqual(self.get(self.ref(uid="", container_name="sandbox")).status,
                         self.c.cpb.SANDBOX_STATUS_READY)

    def test_exec_streams_exit_codes_and_signals(self):
        for code in (0, 1, 42):
            out, err, done, events = self.exec("sh", "-c", f"echo out; echo err >&2; exit {code}")
            self.assertEqual((out, err, done.exit_code, done.signal),
                             (b"out\n", b"err\n", code, 0))
            self.assertEqual(events[-1].WhichOneof("event"), "completed")
        out, _, done, _ = self.exec("sh", "-c", "kill -KILL $$")
        self.assertEqual((done.signal, done.exit_code), (signal.SIGKILL, 128 + signal.SIGKILL))
        out, _, _, _ = self.exec("pwd")
        self.assertEqual(out, b"/workspace\n")
        out, _, _, _ = self.exec("sh", "-c", 'echo "$FOO"; pwd', env={"FOO": "bar"},
                                 working_dir="/tmp")
        self.assertEqual(out, b"bar\n/tmp\n")
        # It runs in the app container (whose init is the keep-alive shell), not the pause.
        out, _, _, _ = self.exec("cat", "/proc/1/cmdline")
        self.assertIn(b"trap", out)
        # Streamed: the first line arrives while the process still runs.
        req = self.pb.ExecRequest(ref=self.ref(), command="sh",
                                  args=["-c", "echo first; sleep 3; echo second"])
        stream = self.c.ExecStream(req, timeout=60)
        t0 = time.monotonic()
        first = next(iter(stream))
        self.assertEqual(first.stdout.data, b"first\n")
        self.assertLess(time.monotonic() - t0, 2.5)
        rest = list(stream)
        self.assertEqual(rest[-1].completed.exit_code, 0)
        self.assertEqual(code_of(self.exec, ""), grpc.StatusCode.INVALID_ARGUMENT)

    def test_root_is_the_image(self):
        # The image's directory under a memory overlay: writable, never written, and no
        # file of the node (its runsc root, the kubelet's volumes) in sight.
        marker = "m-" + uuid.uuid4().hex[:8]
        out, err, done, _ = self.exec(
            "sh", "-c", f"grep ^VERSION_CODENAME= /etc/os-release; echo e > /etc/{marker}; "
            f"echo t > /tmp/{marker}; cat /etc/{marker} /tmp/{marker}; ls -la / > /dev/null && "
            f"echo ls-ok; test -e {self.tmp} || echo no-node-dir")
        self.assertEqual((out, done.exit_code),
                         (b"VERSION_CODENAME=bookworm\ne\nt\nls-ok\nno-node-dir\n", 0), err)
        image = os.path.join(IMAGES_DIR, DEFAULT_IMAGE)
        for d in ("etc", "tmp"):
            self.assertFalse(os.path.exists(os.path.join(image, d, marker)), d)

    def test_files_both_ways(self):
        ws = self.pods["pod-a"][3]
        _, err, done, _ = self.exec("sh", "-c", "mkdir -p d && echo from-exec > d/e.txt")
        self.assertEqual(done.exit_code, 0, err)
        self.assertEqual(self.read("d/e.txt").data, b"from-exec\n")
        with open(os.path.join(ws, "d", "e.txt"), "rb") as f:
            self.assertEqual(f.read(), b"from-exec\n")
        self.assertEqual(self.write("w.txt", b"from-api").bytes_written, 8)
        out, _, _, _ = self.exec("cat", "/workspace/w.txt")
        self.assertEqual(out, b"from-api")
        self.write("w.txt", b"+more", append=True)
        self.assertEqual(self.read("w.txt").data, b"from-api+more")
        entries = self.c.ListFiles(self.pb.ListFilesRequest(ref=self.ref(), path=".",
                                                            recursive=True), timeout=30).entries
        paths = {e.path: e for e in entries}
        self.assertIn("w.txt", paths)
        self.assertIn("d/e.txt", paths)
        self.assertTrue(paths["d"].is_dir)
        self.assertEqual(code_of(self.read, "nope.txt"), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(code_of(self.read, "../../etc/passwd"),
                         grpc.StatusCode.INVALID_ARGUMENT)
        os.symlink("/etc", os.path.join(ws, "escape"))
        self.assertEqual(code_of(self.read, "escape/passwd"), grpc.StatusCode.PERMISSION_DENIED)
        # A mount path the container does not have: no workspace to reach.
        self.assertEqual(code_of(self.read, "w.txt", ref=self.ref(mount_path="/data")),
                         grpc.StatusCode.FAILED_PRECONDITION)

    def test_usage_grows_after_busy_exec(self):
        before = self.usage()
        self.assertEqual(before.status, self.c.cpb.SANDBOX_STATUS_READY)
        _, _, done, _ = self.exec("sh", "-c", "end=$(($(date +%s)+2)); "
                                  "while [ $(date +%s) -lt $end ]; do :; done")
        self.assertEqual(done.exit_code, 0)
        self.assertGreater(done.usage.cpu_ms, 200)
        after = self.usage()
        self.assertGreater(after.usage.cpu_ms, before.usage.cpu_ms + 200)
        self.assertGreater(after.usage.memory_peak_bytes, 0)
        self.write("usage.bin", b"x" * 4096)
        self.assertGreaterEqual(self.usage().usage.disk_write_bytes,
                                after.usage.disk_write_bytes + 4096)

    def test_not_found_and_invalid_refs(self):
        nf = grpc.StatusCode.NOT_FOUND
        self.assertEqual(code_of(self.get, self.ref(uid=str(uuid.uuid4()))), nf)
        self.assertEqual(code_of(self.get, self.ref("no-such-pod")), nf)
        self.assertEqual(code_of(self.get, self.ref(namespace="other")), nf)
        self.assertEqual(code_of(self.get, self.ref(container_name="other")), nf)
        self.assertEqual(code_of(self.exec, "true", ref=self.ref(uid=str(uuid.uuid4()))), nf)
        self.assertEqual(code_of(self.read, "x", ref=self.ref("no-such-pod")), nf)
        inv = grpc.StatusCode.INVALID_ARGUMENT
        pb = self.pb
        self.assertEqual(code_of(self.c.GetSandbox, pb.GetSandboxRequest(), timeout=10), inv)
        self.assertEqual(code_of(self.get, pb.SandboxRef(sandbox_id=str(uuid.uuid4()))), inv)
        self.assertEqual(code_of(self.get, pb.SandboxRef(pod=pb.PodRef(pod_name="pod-a"))), inv)
        self.assertEqual(code_of(self.get, self.ref(sandbox_id="not-a-uuid")), inv)
        self.assertEqual(code_of(self.get, self.ref(mount_path="relative")), inv)
        self.assertEqual(code_of(self.get, self.ref("../pod-a")), inv)
        self.assertEqual(code_of(self.c.GetUsage, pb.GetUsageRequest(), timeout=10), inv)
        self.assertEqual(code_of(self.exec, "true", ref=pb.SandboxRef()), inv)

    def test_only_served_namespaces_and_pod_volumes(self):
        # A pod of a namespace the agent does not serve is not there for it, and is not
        # listed; a "workspace" that is not a pod volume (here: outside the volume root,
        # as a hostPath would be) is never opened, though exec works.
        self.run_pod("pod-other-ns", namespace="monitoring")
        self.run_pod("pod-hostpath", volumes="host")
        nf, fp = grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION
        try:
            ref = self.pb.SandboxRef(pod=self.pb.PodRef(
                pod_namespace="monitoring", pod_name="pod-other-ns",
                pod_uid=self.pods["pod-other-ns"][0]))
            self.assertEqual(code_of(self.get, ref), nf)
            self.assertEqual(code_of(self.exec, "true", ref=ref), nf)
            listed = self.c.ListSandboxes(self.pb.ListSandboxesRequest(), timeout=30).sandboxes
            self.assertNotIn("monitoring", [s.pod.pod_namespace for s in listed])
            hp = self.ref("pod-hostpath")
            open(os.path.join(self.pods["pod-hostpath"][3], "f"), "w").write("host\n")
            self.assertEqual(code_of(self.read, "f", ref=hp), fp)
            self.assertEqual(code_of(self.write, "g", b"x", ref=hp), fp)
            self.assertEqual(self.exec("cat", "/workspace/f", ref=hp)[0], b"host\n")
        finally:
            for name in ("pod-other-ns", "pod-hostpath"):
                self.cri.stop_pod(self.pods.pop(name)[1])

    def test_create_and_destroy_unimplemented(self):
        pb = self.pb
        self.assertEqual(code_of(self.c.CreateSandbox, pb.CreateSandboxRequest(
            sandbox_id=str(uuid.uuid4()), tenant_id="t", session_id="s"), timeout=10),
            grpc.StatusCode.UNIMPLEMENTED)
        try:
            self.c.DestroySandbox(pb.DestroySandboxRequest(ref=self.ref()), timeout=10)
            self.fail("DestroySandbox succeeded in kube mode")
        except grpc.RpcError as e:
            self.assertEqual(e.code(), grpc.StatusCode.UNIMPLEMENTED)
            self.assertIn("GetUsage", e.details())
        self.assertEqual(self.get().status, self.c.cpb.SANDBOX_STATUS_READY)

    def test_list_sandboxes_paged(self):
        self.run_pod("pod-list-1")
        self.run_pod("pod-list-2")
        seen, token = [], ""
        while True:
            resp = self.c.ListSandboxes(self.pb.ListSandboxesRequest(page_size=1,
                                                                    page_token=token),
                                        timeout=30)
            self.assertLessEqual(len(resp.sandboxes), 1)
            seen += [(s.pod.pod_namespace, s.pod.pod_name) for s in resp.sandboxes]
            token = resp.next_page_token
            if not token:
                break
        for name in ("pod-a", "pod-list-1", "pod-list-2"):
            self.assertIn((NS, name), seen)
        self.assertEqual(seen, sorted(seen))
        self.assertEqual(len(seen), len(set(seen)))
        self.assertEqual(code_of(self.c.ListSandboxes, self.pb.ListSandboxesRequest(
            page_token="garbage"), timeout=10), grpc.StatusCode.INVALID_ARGUMENT)
        for name in ("pod-list-1", "pod-list-2"):
            self.cri.stop_pod(self.pods.pop(name)[1])

    def test_stopped_then_deleted_pod(self):
        uid, pause, app, ws = self.run_pod("pod-stop")
        ref = self.ref("pod-stop")
        out, _, _, _ = self.exec("sh", "-c", "echo kept > k.txt; echo ok", ref=ref)
        self.assertEqual(out, b"ok\n")
        self.cri.stop_container(app)
        self.assertEqual(self.get(ref).status, self.c.cpb.SANDBOX_STATUS_FAILED)
        self.assertEqual(code_of(self.exec, "true", ref=ref), grpc.StatusCode.FAILED_PRECONDITION)
        # The workspace is still there (FAILED sandboxes keep it).
        self.assertEqual(self.read("k.txt", ref=ref).data, b"kept\n")
        self.assertEqual(self.usage(ref).status, self.c.cpb.SANDBOX_STATUS_FAILED)
        self.cri.stop_pod(pause)
        self.pods.pop("pod-stop")
        self.assertEqual(code_of(self.get, ref), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(code_of(self.read, "k.txt", ref=ref), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(code_of(self.exec, "true", ref=ref), grpc.StatusCode.NOT_FOUND)

    def test_pod_recreated_under_the_same_name(self):
        uid1, pause1, _, _ = self.run_pod("pod-again")
        self.assertEqual(self.exec("true", ref=self.ref("pod-again"))[2].exit_code, 0)
        self.cri.stop_pod(pause1)
        uid2, _, _, ws2 = self.run_pod("pod-again")
        self.assertNotEqual(uid1, uid2)
        out, _, _, _ = self.exec("sh", "-c", "echo new > n.txt; echo ok",
                                 ref=self.ref("pod-again", uid=""))
        self.assertEqual(out, b"ok\n")
        with open(os.path.join(ws2, "n.txt"), "rb") as f:
            self.assertEqual(f.read(), b"new\n")
        self.assertEqual(code_of(self.get, self.ref("pod-again", uid=uid1)),
                         grpc.StatusCode.NOT_FOUND)
        self.cri.stop_pod(self.pods.pop("pod-again")[1])

    def test_agent_killed_and_restarted_kills_the_orphaned_exec(self):
        # Its own agent (own state dir and port) on its own pod: the kill and the restart touch
        # nothing another test uses, so the tests run in any order.
        self.run_pod("pod-restart")
        self.addCleanup(lambda: self.cri.stop_pod(self.pods.pop("pod-restart")[1]))
        agent = AgentProcess(BUILD_DIR, "--mode", "kube", "--runsc-root", self.cri.root,
                             "--volume-root", os.path.join(self.tmp, "volumes"),
                             "--node-name", "node-k1")
        self.addCleanup(self.cleanup_agent, agent)
        c, ref = agent.client, self.ref("pod-restart")
        self.assertEqual(self.get(ref, c=c).status, self.c.cpb.SANDBOX_STATUS_READY)
        # An exec in flight when the agent is killed: the restarted agent kills it.
        req = self.pb.ExecRequest(ref=ref, command="sleep", args=["4567"])
        stream = c.ExecStream(req, timeout=120)
        deadline = time.monotonic() + 20
        while not [p for p in self.processes(ref) if "sleep 4567" in p]:
            self.assertLess(time.monotonic(), deadline, "the exec did not start")
            time.sleep(0.2)
        agent.stop(signal.SIGKILL)
        try:
            list(stream)
        except grpc.RpcError:
            pass
        agent.restart()
        self.assertEqual(self.get(ref, c=c).status, self.c.cpb.SANDBOX_STATUS_READY)
        deadline = time.monotonic() + 20
        while [p for p in self.processes(ref) if "sleep 4567" in p]:
            self.assertLess(time.monotonic(), deadline, "the orphaned exec survived")
            time.sleep(0.2)
        out, _, _, _ = self.exec("echo", "still usable", ref=ref, c=c)
        self.assertEqual(out, b"still usable\n")
        self.write("after-restart.txt", b"r", ref=ref, c=c)
        self.assertEqual(self.read("after-restart.txt", ref=ref, c=c).data, b"r")
        self.assertIn("left by the agent's previous run", agent.log())
        # The suite's agent was not disturbed: its exec did not go with the other's.
        self.assertEqual(self.get().status, self.c.cpb.SANDBOX_STATUS_READY)

    @staticmethod
    def cleanup_agent(agent):
        rc, tail = agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    def processes(self, ref=None):
        """Command lines of every process in the pod (but the listing shell's own), through the
        suite's agent."""
        out, _, _, _ = self.exec(
            "sh", "-c",
            'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; '
            'tr "\\0" " " < $p/cmdline 2>/dev/null; echo; done', ref=ref)
        return [line for line in out.decode().splitlines() if line.strip()]


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
