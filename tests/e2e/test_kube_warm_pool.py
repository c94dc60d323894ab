"""The kube mode's warm pool (compute-frontend --kube-warm-pool) end to end: the real
frontends against the test API server (tests/kube/apiserver.py), a simulated node running real
runsc pods (tests/kube/kubelet_sim.py) and the real node agent (tests/e2e/kube_stack.py).

The pool fills to its size; a create of the default profile claims a warm pod (a hit) whose
first exec works and whose created_at is the claim's; a retried create answers the same
sandbox; claims refill the pool; two frontends claiming at once never hand one pod to two
sessions nor two sandboxes to one session; a request of another profile takes the cold path;
a destroy frees the session for a new sandbox; a restart with a smaller size deletes the
surplus pods and their PVCs; bad sizes are refused at start (exit 2).

Usage: test_kube_warm_pool.py BUILD_DIR [unittest args]"""
import hashlib
import os
import subprocess
import sys
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

from agent_fixture import free_port
from compute_client import Compute
from frontend_fixture import checked_metrics
from kube_stack import SANDBOX_IMAGE, SANDBOX_NS, KubeStack
import testmain

BUILD_DIR = sys.argv[1]
ANN = "compute.paper-board.io/"
POOL = ANN + "pool=default"


def pod_name(tenant, session):
    return "sbx-" + hashlib.sha256(f"{tenant}\0{session}".encode()).hexdigest()[:32]


def new_session():
    return "tenant-" + uuid.uuid4().hex[:8], "session-" + uuid.uuid4().hex[:8]


def ready(pod):
    return (pod["status"].get("phase") == "Running" and
            any(c.get("type") == "Ready" and c.get("status") == "True"
                for c in pod["status"].get("conditions") or []))


class KubeWarmPoolTest(unittest.TestCase):
    SIZE = 3

    @classmethod
    def setUpClass(cls):
        cls.stack = KubeStack(BUILD_DIR)
        try:
            cls.metrics_port = free_port()
            cls.fe = cls.stack.frontend("--kube-warm-pool", str(cls.SIZE), "--metrics-listen",
                                        f"127.0.0.1:{cls.metrics_port}")
            cls.fe2 = cls.stack.frontend("--kube-warm-pool", str(cls.SIZE))
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            cls.c2 = Compute(BUILD_DIR, cls.fe2.address)
        except BaseException:
            cls.stack.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.c2.close()
        ok, report = cls.stack.close()
        if not ok:
            raise AssertionError(report)

    def pool_pods(self):
        return [p for p in self.stack.api.list("pods", SANDBOX_NS, label_selector=POOL)
                if not p["metadata"].get("deletionTimestamp")]

    def pool_pvcs(self):
        """The pool's PVCs (not a destroyed sandbox's: test_2b's claim left one its label)."""
        return [p for p in self.stack.api.list("persistentvolumeclaims", SANDBOX_NS,
                                               label_selector=POOL)
                if ANN + "delete-after" not in (p["metadata"].get("annotations") or {})]

    def wait_pool(self, n, timeout=90, need_ready=True):
        """Until exactly n pool pods (READY ones, when need_ready) exist; returns them."""
        end = time.monotonic() + timeout
        while True:
            pods = self.pool_pods()
            if len(pods) == n and (not need_ready or all(ready(p) for p in pods)):
                return pods
            if time.monotonic() > end:
                self.fail(f"pool never reached {n} pods: {[(p['metadata']['name'], p['status'].get('phase')) for p in pods]}")
            time.sleep(0.2)

    def metrics(self):
        """The first frontend's /metrics page, checked by promtool."""
        return checked_metrics(self, self.metrics_port)

    def pool_ids(self, pods):
        return {p["metadata"]["labels"][ANN + "sandbox-id"] for p in pods}

    def test_1_fill_claim_exec_retry_refill(self):
        pods = self.wait_pool(self.SIZE)
        self.assertEqual(len(self.pool_pvcs()), self.SIZE)
        warm_ids = self.pool_ids(pods)
        born = max(p["metadata"]["creationTimestamp"] for p in pods)
        for p in pods:  # no tenant's: not in any listing
            self.assertEqual(p["metadata"]["annotations"][ANN + "tenant-id"], "")
        time.sleep(1.5)  # created_at must be the claim's, not the warm start's
        tenant, session = new_session()
        before = time.time()
        sb = self.c.create(tenant, session)
        self.assertIn(sb.sandbox_id, warm_ids, "a create of the default profile is a hit")
        # The reference: "Always STARTING on success", a claim of a READY pod included.
        self.assertEqual(sb.status, self.c.pb.SANDBOX_STATUS_STARTING)
        self.assertEqual(self.c.describe(sb.sandbox_id).status, self.c.pb.SANDBOX_STATUS_READY)
        self.assertGreaterEqual(sb.created_at.seconds, int(before) - 1)
        self.assertGreater(sb.created_at.ToDatetime().isoformat() + "Z", born)
        out, err, done, _ = self.c.exec(sb.sandbox_id, "echo", "hi")
        self.assertEqual((out, done.exit_code), (b"hi\n", 0), err)
        pod = self.stack.pod_of(sb.sandbox_id)
        self.assertNotIn(ANN + "pool", pod["metadata"]["labels"])
        self.assertEqual(pod["metadata"]["annotations"][ANN + "tenant-id"], tenant)
        self.assertEqual(pod["metadata"]["annotations"][ANN + "session-id"], session)
        self.assertIn(ANN + "claimed-at", pod["metadata"]["annotations"])
        self.assertGreater(pod["spec"]["activeDeadlineSeconds"], 0)
        d = self.c.describe(sb.sandbox_id)
        self.assertLessEqual(d.current_uptime.seconds, time.time() - before + 1,
                             "uptime counts from the claim")
        # a retried create, on either frontend, answers the same sandbox, STARTING
        for c in (self.c, self.c2):
            again = c.create(tenant, session)
            self.assertEqual((again.sandbox_id, again.status),
                             (sb.sandbox_id, c.pb.SANDBOX_STATUS_STARTING))
        listed = self.c.list_all(tenant)[0]
        self.assertEqual([s.sandbox_id for s in listed], [sb.sandbox_id])
        self.assertEqual(listed[0].limits.max_runtime.seconds, 900,  # the default
                         "max_runtime counts from the claim")
        self.assertEqual(self.c.list_all("tenant-nobody")[0], [])
        m = self.metrics()
        lbl = '{profile="default"}'
        self.assertEqual(m["compute_kube_warm_pool_target" + lbl], self.SIZE)
        self.assertEqual(m["compute_kube_warm_pool_hits_total" + lbl], 1)
        self.assertIn("compute_kube_warm_pool_claim_seconds_total" + lbl, m)
        # refilled
        self.assertNotIn(sb.sandbox_id, self.pool_ids(self.wait_pool(self.SIZE)))
        # a destroy frees the session: the next create is a new sandbox
        self.c.destroy(sb.sandbox_id)
        again = self.c2.create(tenant, session)
        self.assertNotEqual(again.sandbox_id, sb.sandbox_id)
        guard = self.stack.api.get("configmaps", SANDBOX_NS, pod_name(tenant, session))
        self.assertEqual(guard["data"]["sandbox-id"], again.sandbox_id,
                         "the session's guard names its new sandbox")
        out, _, done, _ = self.c2.exec(again.sandbox_id, "echo", "again")
        self.assertEqual(out, b"again\n")
        self.c2.destroy(again.sandbox_id)
        self.assertIsNone(self.stack.api.get("configmaps", SANDBOX_NS, pod_name(tenant, session)),
                          "a destroy deletes the session's guard")

    def test_2_claim_race_two_frontends(self):
        self.wait_pool(self.SIZE)
        sessions = [new_session() for _ in range(2 * self.SIZE)]

        def create(i):
            c = self.c if i % 2 else self.c2
            return c.create(*sessions[i]).sandbox_id

        with ThreadPoolExecutor(max_workers=len(sessions)) as pool:
            ids = list(pool.map(create, range(len(sessions))))
        self.assertEqual(len(set(ids)), len(sessions), "one sandbox per session")
        for (tenant, session), sid in zip(sessions, ids):
            ann = self.stack.pod_of(sid)["metadata"]["annotations"]
            self.assertEqual((ann[ANN + "tenant-id"], ann[ANN + "session-id"]),
                             (tenant, session), "no pod claimed twice")
        # the same session on both frontends at once: one sandbox
        self.wait_pool(self.SIZE)
        tenant, session = new_session()

        def same(i):
            return (self.c if i % 2 else self.c2).create(tenant, session).sandbox_id

        with ThreadPoolExecutor(max_workers=8) as pool:
            one = set(pool.map(same, range(8)))
        self.assertEqual(len(one), 1, one)
        sid = one.pop()
        owned = [p for p in self.stack.api.list("pods", SANDBOX_NS)
                 if (p["metadata"].get("annotations") or {}).get(ANN + "session-id") == session
                 and not p["metadata"].get("deletionTimestamp")]
        self.assertEqual([p["metadata"]["labels"][ANN + "sandbox-id"] for p in owned], [sid])
        out, _, done, _ = self.c.exec(sid, "echo", "one")
        self.assertEqual(out, b"one\n")
        for s in ids + [sid]:
            self.c.destroy(s)

    def test_2b_retry_after_a_claim_without_guard(self):
        """A frontend that died between its claim and the session's guard: the retried create
        takes that pod again (no second pod for the session, nothing left claimed unused)."""
        pods = self.wait_pool(self.SIZE)
        tenant, session = new_session()
        victim = pods[0]
        self.stack.api.patch("pods", SANDBOX_NS, victim["metadata"]["name"], {"metadata": {
            "labels": {ANN + "pool": None},
            "annotations": {ANN + "tenant-id": tenant, ANN + "session-id": session,
                            ANN + "claimed-at": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                              time.gmtime())}}})
        vid = victim["metadata"]["labels"][ANN + "sandbox-id"]
        time.sleep(0.5)  # the frontends' pod caches see the claim
        self.assertEqual(self.c2.create(tenant, session).sandbox_id, vid)
        # Taken over by a patch that changed its resourceVersion (what keeps the GC's removal
        # of abandoned claims from ever removing it now: test_7).
        self.assertIn(ANN + "adopted-at", self.stack.pod_of(vid)["metadata"]["annotations"])
        self.assertEqual(self.c.create(tenant, session).sandbox_id, vid)
        self.c.destroy(vid)

    def test_3_other_profile_is_cold(self):
        self.wait_pool(self.SIZE)
        tenant, session = new_session()
        sb = self.c.create(tenant, session, limits=self.c.pb.ResourceLimits(cpu_millis=250))
        self.assertNotIn(sb.sandbox_id, self.pool_ids(self.pool_pods()))
        self.assertEqual(self.stack.pod_of(sb.sandbox_id)["metadata"]["name"],
                         pod_name(tenant, session))
        self.assertEqual(self.c2.create(tenant, session).sandbox_id, sb.sandbox_id)
        self.c.destroy(sb.sandbox_id)

    def test_4_shrink_on_restart(self):
        self.wait_pool(self.SIZE)
        for fe in (self.fe, self.fe2):
            fe.stop()
            fe.extra[fe.extra.index("--kube-warm-pool") + 1] = "1"
        self.fe.start()
        self.fe2.start()
        self.wait_pool(1)
        end = time.monotonic() + 30
        while len(self.pool_pvcs()) != 1 and time.monotonic() < end:
            time.sleep(0.2)
        self.assertEqual(len(self.pool_pvcs()), 1, "the surplus pods' PVCs are deleted")

    def test_5_pool_off_keeps_warm_sessions(self):
        # After test_4: a pool of 1. A session served warm, then the pool turned off (size 0,
        # as docs/deploy.md says): the pool drains, and a retried create of that session
        # still gets its sandbox (its guard is read), not a second, cold one.
        self.wait_pool(1)
        tenant, session = new_session()
        warm = self.pool_ids(self.pool_pods())
        sid = self.c.create(tenant, session).sandbox_id
        self.assertIn(sid, warm)
        for fe in (self.fe, self.fe2):
            fe.stop()
            fe.extra[fe.extra.index("--kube-warm-pool") + 1] = "0"
        self.fe.start()
        self.fe2.start()
        self.wait_pool(0, need_ready=False)
        self.assertEqual(self.c.create(tenant, session).sandbox_id, sid)
        self.assertEqual(self.c2.create(tenant, session).sandbox_id, sid)
        self.c.destroy(sid)
        # Destroyed: the session gets a new, cold sandbox.
        self.assertNotEqual(self.c.create(tenant, session).sandbox_id, sid)

    def test_6_gc_deletes_guards_of_gone_sandboxes(self):
        # Session guards: one of a sandbox that is gone (its session never destroyed it),
        # one of a live sandbox, one of a gone sandbox but young (a create in progress).
        live = self.c.create(*new_session(),
                             limits=self.c.pb.ResourceLimits(cpu_millis=250)).sandbox_id
        names = {}
        for what, sid in (("gone", str(uuid.uuid4())), ("live", live),
                          ("young", str(uuid.uuid4()))):
            names[what] = "sbx-" + uuid.uuid4().hex
            self.stack.api.create("configmaps", SANDBOX_NS, {
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": names[what], "labels": {
                    "app.kubernetes.io/managed-by": "compute-frontend"}},
                "data": {"sandbox-id": sid}})
            if what != "young":
                with self.stack.api.store.lock:
                    self.stack.api.store.objects["configmaps"][(SANDBOX_NS, names[what])][
                        "metadata"]["creationTimestamp"] = "2020-01-01T00:00:00Z"
        log = self.run_gc()
        left = {c["metadata"]["name"] for c in self.stack.api.list("configmaps", SANDBOX_NS)}
        self.assertNotIn(names["gone"], left, log)
        self.assertIn(names["live"], left)
        self.assertIn(names["young"], left)
        self.assertIn("deleted its session guard", log)
        self.c.destroy(live)

    def run_gc(self):
        """One `compute-frontend --mode gc` pass; must exit 0. Returns its log."""
        out = subprocess.run(
            [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--scheduler", "kube",
             "--mode", "gc", "--kubeconfig", self.stack.api.kubeconfig_path,
             "--sandbox-namespace", SANDBOX_NS],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        self.assertEqual(out.returncode, 0, out.stdout.decode())
        return out.stdout.decode()

    def test_7_gc_deletes_abandoned_claims(self):
        """A pod claimed for a session whose create ended before writing the guard, and that
        no retry took over, was never given to a client: the GC deletes it and its PVC once
        the claim is older than 10 minutes. Claims with their guard, taken over lately, or
        young are kept. (The pods are cold ones made to look claimed: what the GC reads is
        the same.)"""
        old = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1200))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        cases = {}
        for what in ("abandoned", "guarded", "adopted", "young", "lost"):
            tenant, session = new_session()
            sid = self.c.create(tenant, session,
                                limits=self.c.pb.ResourceLimits(cpu_millis=250)).sandbox_id
            pod = self.stack.pod_of(sid)
            ann = {ANN + "claimed-at": now if what == "young" else old}
            if what == "adopted":
                ann[ANN + "adopted-at"] = now
            self.stack.api.patch("pods", SANDBOX_NS, pod["metadata"]["name"],
                                 {"metadata": {"annotations": ann}})
            guard = pod_name(tenant, session)
            if self.stack.api.get("configmaps", SANDBOX_NS, guard) is not None:
                self.stack.api.delete("configmaps", SANDBOX_NS, guard)
            if what in ("guarded", "lost"):
                self.stack.api.create("configmaps", SANDBOX_NS, {
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": guard, "labels": {
                        "app.kubernetes.io/managed-by": "compute-frontend"},
                        "annotations": {ANN + "tenant-id": tenant, ANN + "session-id": session}},
                    # "lost": the session's guard names the sandbox that won the session.
                    "data": {"sandbox-id": sid if what == "guarded" else str(uuid.uuid4())}})
            cases[what] = sid
        log = self.run_gc()
        for what, sid in cases.items():
            pod = self.stack.pod_of(sid)
            gone = pod is None or bool(pod["metadata"].get("deletionTimestamp"))
            pvc = self.stack.api.get("persistentvolumeclaims", SANDBOX_NS, "ws-" + sid)
            pvc_gone = pvc is None or bool(pvc["metadata"].get("deletionTimestamp"))
            with self.subTest(case=what):
                if what in ("abandoned", "lost"):
                    self.assertTrue(gone, log)
                    self.assertTrue(pvc_gone, log)
                    self.assertIn(f"gc: sandbox {sid}: deleted pod", log)
                else:
                    self.assertFalse(gone, log)
                    self.assertFalse(pvc_gone, log)
                    self.c.destroy(sid)

    def test_bad_config_exits_2(self):
        fe = os.path.join(BUILD_DIR, "bin", "compute-frontend")
        for args, word in ((["--kube-warm-pool", "10000", "--sandbox-image", SANDBOX_IMAGE],
                            "--kube-warm-pool"),
                           (["--kube-warm-pool", "2"], "--sandbox-image"),
                           (["--kube-warm-pool", "2", "--sandbox-image", "no such"],
                            "--sandbox-image")):
            p = subprocess.run([fe, "--scheduler", "kube"] + args, capture_output=True,
                               text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn(word, p.stderr)


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
