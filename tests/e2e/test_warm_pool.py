"""End to end: the node agent's warm pool (--warm-pool, docs/nodeagent.md "Warm pool") through
the real frontend and a real agent (runsc): claims under concurrency, a claimed sandbox is
fresh, refills, restarts of the frontend and of the agent in the middle of claims, shutdown,
bad configuration.

Usage: test_warm_pool.py BUILD_DIR [unittest args]"""
import glob
import os
import re
import signal
import subprocess
import sys
import time
import unittest
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc

from agent_client import code_of
from agent_fixture import AgentProcess, IMAGES_DIR, free_port
from compute_client import Compute
from frontend_fixture import FrontendProcess
import testmain

BUILD_DIR = sys.argv[1]
POOL = 4


class Frontend(FrontendProcess):
    def __init__(self, agents):
        self.agents = agents
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", ",".join(a.address for a in self.agents), "--agent-poll-ms", "200"]


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(compute_warm_pool_\w+)(\{[^}]*\})? (\S+)$', line)
        if m:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class PoolAgent(AgentProcess):
    """An agent with a warm pool and its metrics page (no token: loopback, a test)."""

    def __init__(self, size=POOL, *extra):
        self.metrics_port = free_port()
        super().__init__(BUILD_DIR, "--warm-pool", str(size), "--metrics-listen",
                         f"127.0.0.1:{self.metrics_port}", *extra)

    def pool(self):
        m = metrics(self.metrics_port)
        return (int(m.get('compute_warm_pool_sandboxes{status="ready"}', 0)),
                int(m.get('compute_warm_pool_sandboxes{status="starting"}', 0)),
                int(m.get('compute_warm_pool_claims_total{result="hit"}', 0)),
                int(m.get('compute_warm_pool_claims_total{result="miss"}', 0)))

    def wait_pool_ready(self, n=POOL, limit=180):
        deadline = time.monotonic() + limit
        while self.pool()[0] < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"warm pool never reached {n} READY: {self.pool()}\n" +
                                     self.log()[-3000:])
            time.sleep(0.2)

    def containers(self):
        return set(subprocess.run(["runsc", "--root", self.runsc_root, "list", "-quiet"],
                                  capture_output=True, text=True).stdout.split())

    def cgroups(self):
        """Sandbox cgroups under this agent's parent, in every hierarchy."""
        found = set()
        for d in glob.glob(f"/sys/fs/cgroup/*{self.cgroup_parent}/*/"):
            found.add(os.path.basename(os.path.dirname(d)))
        return found

    def workspaces(self):
        d = os.path.join(self.state, "state", "workspaces")
        return set(os.listdir(d)) if os.path.isdir(d) else set()

    def records(self):
        d = os.path.join(self.state, "state", "sandboxes")
        return set(os.listdir(d)) if os.path.isdir(d) else set()

    def listed(self):
        c = self.client
        return list(c.ListSandboxes(c.pb.ListSandboxesRequest(include_destroyed=True),
                                    timeout=30).sandboxes)


class WarmPoolTest(unittest.TestCase):
    def setUp(self):
        self.agent = PoolAgent()
        self.fe = Frontend([self.agent])
        self.c = Compute(BUILD_DIR, self.fe.address)

    def tearDown(self):
        self.c.close()
        self.fe.stop()
        log = self.fe.log()
        os.unlink(self.fe.log_path)
        rc, tail = self.agent.cleanup()
        self.assertEqual(rc, 0, log[-2000:] + tail)

    def sessions_of(self, listed):
        by = {}
        for sb in listed:
            if sb.status != 4:  # compute.v1.SandboxStatus DESTROYED
                by.setdefault((sb.tenant_id, sb.session_id), []).append(sb.sandbox_id)
        return by

    def test_claims_under_concurrency(self):
        """24 creates at once against a pool of 4: every session gets exactly one sandbox,
        all distinct, each works; some are warm claims (READY at once); none is lost."""
        c = self.c
        self.agent.wait_pool_ready()
        n = 24
        sessions = [("t-" + uuid.uuid4().hex[:6], f"s{i}") for i in range(n)]
        with ThreadPoolExecutor(n) as ex:
            resps = list(ex.map(lambda s: c.create(*s), sessions))
        ids = [r.sandbox_id for r in resps]
        self.assertEqual(len(set(ids)), n, "a sandbox was handed to two sessions")
        # Every create answers STARTING, as the reference says ("Always STARTING on success");
        # a warm claim is READY at once for DescribeSandbox (a cold create is not, this soon).
        self.assertEqual({r.status for r in resps}, {c.pb.SANDBOX_STATUS_STARTING})
        _, _, hits, misses = self.agent.pool()
        self.assertEqual(hits + misses, n)
        self.assertGreaterEqual(hits, 1, "no warm claim")
        ready_at_once = sum(c.describe(sid).status == c.pb.SANDBOX_STATUS_READY for sid in ids)
        self.assertGreaterEqual(ready_at_once, hits)
        with ThreadPoolExecutor(8) as ex:
            outs = list(ex.map(lambda sid: c.exec(sid, "echo", sid)[0], ids))
        self.assertEqual(outs, [(sid + "\n").encode() for sid in ids])
        # Retries: the same sandbox per session; each tenant sees exactly its own.
        for (tenant, session), sid in zip(sessions, ids):
            self.assertEqual(c.create(tenant, session).sandbox_id, sid)
            self.assertEqual([(s.sandbox_id, s.session_id) for s in c.list(tenant).sandboxes],
                             [(sid, session)])
        by = self.sessions_of(self.agent.listed())
        self.assertEqual(len(by), n)
        self.assertTrue(all(len(v) == 1 for v in by.values()), by)

    def test_create_contract_with_a_pool(self):
        """The reference's CreateSandbox, as an independent client checks it, with the pool on:
        STARTING on success (a warm claim and a retry included), READY for Describe at once,
        the same created_at, exec with no polling."""
        c = self.c
        self.agent.wait_pool_ready()
        r = c.create("tenant-ref", "ref")
        self.assertEqual(r.status, c.pb.SANDBOX_STATUS_STARTING)
        self.assertGreater(r.created_at.seconds, 0)
        self.assertEqual(self.agent.pool()[2], 1, "not a warm claim")
        d = c.describe(r.sandbox_id)
        self.assertEqual((d.sandbox_id, d.status, d.created_at),
                         (r.sandbox_id, c.pb.SANDBOX_STATUS_READY, r.created_at))
        out, _, done, events = c.exec(r.sandbox_id, "python3", "-c", "print(6*7)")
        self.assertEqual((out, done.exit_code), (b"42\n", 0))
        self.assertEqual(events[-1].WhichOneof("event"), "completed")
        again = c.create("tenant-ref", "ref")
        self.assertEqual((again.sandbox_id, again.status, again.created_at),
                         (r.sandbox_id, c.pb.SANDBOX_STATUS_STARTING, r.created_at))
        c.destroy(r.sandbox_id)

    def test_claimed_sandbox_is_fresh(self):
        c = self.c
        self.agent.wait_pool_ready()
        time.sleep(2)  # warm idle time: must not show in the claimed sandbox's usage
        t0 = time.time()
        r = c.create("tenant-f", "fresh")
        self.assertEqual(r.status, c.pb.SANDBOX_STATUS_STARTING)
        self.assertEqual(c.describe(r.sandbox_id).status, c.pb.SANDBOX_STATUS_READY,
                         "not a warm claim")
        self.assertGreaterEqual(r.created_at.seconds + r.created_at.nanos / 1e9, t0 - 0.002)
        # A cold sandbox (not the default profile) for comparison.
        cold = c.create("tenant-f", "cold", limits=c.pb.ResourceLimits(cpu_millis=1500))
        self.assertEqual(cold.status, c.pb.SANDBOX_STATUS_STARTING)
        self.assertEqual(self.agent.pool()[2], 1)
        d = c.describe(r.sandbox_id)
        self.assertEqual(d.created_at, r.created_at)
        self.assertLess(d.current_uptime.seconds, 2, d)  # not the warm idle time
        u = d.current_usage
        self.assertLess(u.cpu_ms, 1000, u)
        self.assertEqual(u.disk_write_bytes, 0, u)
        self.assertEqual(u.network_ingress_bytes + u.network_egress_bytes, 0, u)
        # Its workspace: what a cold one's holds, nothing more.
        self.assertEqual(sorted(e.path for e in c.ls(r.sandbox_id, "").entries),
                         sorted(e.path for e in c.ls(cold.sandbox_id, "").entries))
        self.assertEqual(c.exec(r.sandbox_id, "echo", "hi")[0], b"hi\n")
        # Describe, List and the agent see it exactly as a cold one.
        self.assertEqual(sorted(s.sandbox_id for s in c.list("tenant-f").sandboxes),
                         sorted([r.sandbox_id, cold.sandbox_id]))

    def test_refill_and_pool_invisible(self):
        c = self.c
        self.agent.wait_pool_ready()
        warm = self.agent.containers()
        self.assertEqual(len(warm), POOL)
        # Warm sandboxes are nobody's: not listed, not found by id, not counted.
        self.assertEqual(self.agent.listed(), [])
        for cid in warm:
            self.assertEqual(code_of(c.describe, cid[3:]), grpc.StatusCode.NOT_FOUND)
            self.assertEqual(code_of(c.exec, cid[3:], "true"), grpc.StatusCode.NOT_FOUND)
        info = self.agent.client.GetAgentInfo(self.agent.client.pb.GetAgentInfoRequest(),
                                              timeout=10)
        self.assertEqual(info.sandboxes_live, 0)
        self.assertEqual(info.warm_ready, POOL)  # the frontend's placement reads it
        # Each warm sandbox ran its warm-up through its spawner before it could be claimed.
        self.assertGreaterEqual(len(re.findall(r"warm-up `true` \(spawner\): exit code 0",
                                               self.agent.log())), POOL, self.agent.log()[-3000:])
        ids = [c.create("t", f"s{i}").sandbox_id for i in range(3)]
        self.assertTrue({"cs-" + i for i in ids} <= warm, "not claimed from the pool")
        self.agent.wait_pool_ready()  # back to N
        self.assertEqual(len(self.agent.containers()), POOL + 3)
        # A destroyed claimed sandbox is an ordinary one; the pool stays N.
        c.destroy(ids[0])
        self.assertEqual(self.agent.pool()[0], POOL)

    def test_dead_warm_sandbox_is_replaced_and_removed(self):
        self.agent.wait_pool_ready()
        victim = sorted(self.agent.containers())[0]
        subprocess.run(["runsc", "--root", self.agent.runsc_root, "kill", victim, "KILL"],
                       check=True, capture_output=True)
        # Removed with everything it had (not kept for a grace: it was nobody's), replaced.
        deadline = time.monotonic() + 120
        while victim[3:] in self.agent.records() | self.agent.workspaces():
            self.assertLess(time.monotonic(), deadline, self.agent.log()[-3000:])
            time.sleep(0.2)
        self.agent.wait_pool_ready()
        self.assertNotIn(victim, self.agent.containers())
        self.assertNotIn(victim[3:], self.agent.cgroups())
        self.assertEqual(len(self.agent.records()), POOL)

    def test_frontend_restart_mid_claim(self):
        c = self.c
        self.agent.wait_pool_ready()
        n = 8
        sessions = [("t-r", f"s{i}") for i in range(n)]
        with ThreadPoolExecutor(n) as ex:
            futs = [ex.submit(code_of, c.create, *s) for s in sessions]
            time.sleep(0.05)
            self.fe.stop(signal.SIGKILL)
            [f.result() for f in futs]
        self.fe.start()
        ids = [c.create(*s).sandbox_id for s in sessions]
        self.assertEqual(len(set(ids)), n)
        by = self.sessions_of(self.agent.listed())
        self.assertEqual(sorted(by), sorted(sessions))
        self.assertTrue(all(len(v) == 1 for v in by.values()), by)
        # No claim was lost or doubled: the sessions' sandboxes plus a full pool, nothing else.
        self.agent.wait_pool_ready()
        running = self.agent.containers()
        self.assertTrue({"cs-" + i for i in ids} <= running)
        self.assertEqual(len(running), n + POOL, running)

    def test_agent_restart_mid_claim(self):
        c = self.c
        self.agent.wait_pool_ready()
        n = 8
        sessions = [("t-a", f"s{i}") for i in range(n)]
        with ThreadPoolExecutor(n) as ex:
            futs = [ex.submit(code_of, c.create, *s) for s in sessions]
            time.sleep(0.05)
            self.agent.stop(signal.SIGKILL)
            [f.result() for f in futs]
        self.agent.restart()
        deadline = time.monotonic() + 60
        while code_of(c.create, *sessions[0]) != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "never served again")
            time.sleep(0.2)
        ids = [c.create(*s).sandbox_id for s in sessions]
        self.assertEqual(len(set(ids)), n)
        by = self.sessions_of(self.agent.listed())
        self.assertEqual(sorted(by), sorted(sessions))
        self.assertTrue(all(len(v) == 1 for v in by.values()), by)
        # Each session's sandbox runs, or (a cold create the kill cut short after its record)
        # is FAILED as any sandbox lost while its agent was down. The previous life's warm
        # sandboxes are gone; a new pool; nothing else runs.
        self.agent.wait_pool_ready()
        # A session whose create after the restart missed the new pool has a cold sandbox
        # that may still be STARTING (its container listed already): wait for it to settle.
        deadline = time.monotonic() + 60
        while any(sb.status == 1 for sb in self.agent.listed() if sb.sandbox_id in ids):
            self.assertLess(time.monotonic(), deadline, "a session's sandbox stays STARTING")
            time.sleep(0.2)
        listed = self.agent.listed()
        ready = {sb.sandbox_id for sb in listed if sb.status == 2}
        for sb in listed:
            if sb.status != 2:
                self.assertIn("lost while the agent was down", sb.status_message)
        # A FAILED one's container may show up after the restart (a `runsc create` of the
        # killed agent finishing late): the agent destroys it when its housekeeping sees it.
        not_ready = {"cs-" + i for i in ids} - {"cs-" + i for i in ready}
        deadline = time.monotonic() + 30
        while self.agent.containers() & not_ready and time.monotonic() < deadline:
            time.sleep(0.2)
        running = self.agent.containers()
        states = [(sb.sandbox_id, sb.status, sb.status_message) for sb in listed]
        odd = running & not_ready
        odd_log = "\n".join(line for line in self.agent.log().splitlines()
                            if any(o[3:] in line for o in odd))
        self.assertEqual(running - {"cs-" + i for i in ready}, running - {"cs-" + i for i in ids},
                         f"listed: {states}\nagent log of those:\n{odd_log[-6000:]}")
        self.assertEqual({"cs-" + i for i in ready} & running, {"cs-" + i for i in ready})
        self.assertEqual(len(running), len(ready) + POOL, (running, ready))
        extra = self.agent.records() - {sb.sandbox_id for sb in self.agent.listed()}
        extra_log = "\n".join(line for line in self.agent.log().splitlines()
                               if any(e in line for e in extra))
        self.assertEqual(len(extra), POOL + self.agent.pool()[1], extra_log)


class PoolShutdownTest(unittest.TestCase):
    def test_shutdown_removes_warm_sandboxes_only(self):
        agent = PoolAgent(2)
        try:
            agent.wait_pool_ready(2)
            sid = agent.new_sandbox(wait_ready=False)  # a default create: a claim
            self.assertEqual(agent.status(sid).status, agent.client.cpb.SANDBOX_STATUS_READY)
            agent.wait_pool_ready(2)
            self.assertEqual(len(agent.containers()), 3)
            self.assertEqual(agent.stop(), 0)
            # The claimed sandbox keeps running for the next agent; no trace of the pool.
            self.assertEqual(agent.containers(), {"cs-" + sid})
            self.assertEqual(agent.cgroups(), {sid})
            self.assertEqual(agent.workspaces(), {sid})
            self.assertEqual(agent.records(), {sid})
            vols = os.path.join(agent.state, "state", "volumes")
            self.assertEqual(os.listdir(vols), [sid + ".img"])
            agent.restart()
            self.assertEqual(agent.status(sid).status, agent.client.cpb.SANDBOX_STATUS_READY)
        finally:
            rc, tail = agent.cleanup()
        self.assertEqual(rc, 0, tail)


class BadConfigTest(unittest.TestCase):
    def run_agent(self, *args, env=None):
        state = f"/tmp/cs-bad-{uuid.uuid4().hex[:6]}"
        try:
            p = subprocess.run(
                [os.path.join(BUILD_DIR, "bin", "compute-nodeagent"), "--listen",
                 f"127.0.0.1:{free_port()}", "--state-dir", state, "--images-dir", IMAGES_DIR,
                 "--cgroup-parent", f"/compute-bad-{uuid.uuid4().hex[:6]}", *args],
                capture_output=True, text=True, timeout=60,
                env=dict(os.environ, **(env or {})))
        finally:
            subprocess.run(["rm", "-rf", state])
        return p.returncode, p.stdout + p.stderr

    def test_bad_pool_sizes_fail_at_start(self):
        for args, env in ((["--warm-pool", "10000"], None), (["--warm-pool", "-1"], None),
                          (["--warm-pool", "two"], None), ([], {"COMPUTE_WARM_POOL": "65"}),
                          (["--warm-pool", "3", "--max-sandboxes", "2"], None),
                          (["--warm-pool", "1", "--mode", "kube"], None)):
            rc, out = self.run_agent(*args, env=env)
            self.assertNotEqual(rc, 0, (args, env, out))
            self.assertIn("warm-pool", out.lower().replace("_", "-"), (args, env, out))

    def test_unknown_default_image_fails_at_start(self):
        rc, out = self.run_agent("--warm-pool", "1", "--images-dir", "/nonexistent-images")
        self.assertNotEqual(rc, 0, out)
        self.assertIn("warm-pool", out)
        self.assertIn("unknown image", out)


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
