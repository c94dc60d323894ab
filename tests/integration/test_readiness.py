"""The frontend's readiness (local scheduler): health is NOT_SERVING until a node agent has
answered and again while none is reachable; a call arriving before the agents have answered
waits for them (within its deadline) instead of failing UNAVAILABLE; once health says
SERVING, every call reaches the agent. Health/Watch streams each change and ends on cancel
with nothing left behind.

Usage: test_readiness.py BUILD_DIR"""
import os
import signal
import sys
import threading
import time
import unittest

import grpc

from agent_fixture import IMAGES_DIR, free_port
from daemons import Daemons
from health_client import Health
import testmain

BUILD_DIR = sys.argv[1]
SOME_ID = "3f0c1a4e-0d6b-4c59-9a51-2b7a8f0e6d11"

# The frontend's --shutdown-grace-ms, in seconds: long, so that a watcher holding the
# shutdown is told apart from a slow exit.
FRONTEND_GRACE_S = 10


class ReadinessTest(Daemons, unittest.TestCase):
    def setUp(self):
        self.daemons_setup(BUILD_DIR, "cs-ready-")
        self.state = os.path.join(self.dir, "state")
        self.agent_address = "unix:" + os.path.join(self.state, "run", "agent.sock")
        self.front = f"127.0.0.1:{free_port()}"
        self.health = Health(BUILD_DIR)
        sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
        from compute.v1 import compute_pb2  # noqa: E402 (generated at build time)
        self.pb = compute_pb2
        self.channel = grpc.insecure_channel(self.front)
        self.describe_rpc = self.channel.unary_unary(
            "/compute.v1.ComputeService/DescribeSandbox",
            request_serializer=compute_pb2.DescribeSandboxRequest.SerializeToString,
            response_deserializer=compute_pb2.DescribeSandboxResponse.FromString)

    def tearDown(self):
        self.channel.close()
        self.daemons_teardown()


    def start_agent(self):
        return self.start("compute-nodeagent", "--listen", self.agent_address,
                          "--state-dir", self.state, "--images-dir", IMAGES_DIR,
                          "--shutdown-grace-ms", "3000", log="agent.log")

    def start_frontend(self):
        return self.start("compute-frontend", "--listen", self.front,
                          "--agents", self.agent_address, "--agent-poll-ms", "200",
                          "--shutdown-grace-ms", str(FRONTEND_GRACE_S * 1000),
                          log="frontend.log")

    def status(self, service=""):
        try:
            return self.health.check(self.front, service)
        except grpc.RpcError as e:
            return e.code().name

    def wait_status(self, want, limit=20):
        deadline = time.monotonic() + limit
        while True:
            got = self.status()
            if got == want:
                return time.monotonic()
            if time.monotonic() > deadline:
                self.fail(f"health {got}, not {want}:\n{self.log('frontend.log')}")
            time.sleep(0.05)

    def describe(self, timeout):
        try:
            self.describe_rpc(self.pb.DescribeSandboxRequest(sandbox_id=SOME_ID),
                              timeout=timeout)
            return "OK"
        except grpc.RpcError as e:
            return e.code().name

    def test_not_serving_until_an_agent_answers_and_calls_wait(self):
        self.start_frontend()
        self.wait_status("NOT_SERVING")
        self.assertEqual(self.status("compute.v1.ComputeService"), "NOT_SERVING")
        # A call arriving now waits for the agent instead of failing at once.
        result = {}
        t = threading.Thread(target=lambda: result.update(code=self.describe(20)))
        t.start()
        time.sleep(1.0)
        self.assertTrue(t.is_alive(), f"the call did not wait: {result}")
        agent = self.start_agent()
        t.join(30)
        self.assertEqual(result.get("code"), "NOT_FOUND", self.log("frontend.log"))
        self.wait_status("SERVING", limit=5)
        # Once SERVING, every call reaches the agent (the attack pass saw 15 of 18 fail).
        codes = [self.describe(5) for _ in range(18)]
        self.assertEqual(codes, ["NOT_FOUND"] * 18)

        # No agent reachable: NOT_SERVING again (two failed 200 ms checks), back when it is.
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        self.wait_status("NOT_SERVING", limit=10)
        self.start_agent()
        self.wait_status("SERVING", limit=10)
        self.assertEqual(self.describe(5), "NOT_FOUND")

    def test_a_call_waits_no_longer_than_its_deadline(self):
        self.start_frontend()
        self.wait_status("NOT_SERVING")
        start = time.monotonic()
        code = self.describe(1.0)
        took = time.monotonic() - start
        self.assertIn(code, ("DEADLINE_EXCEEDED", "UNAVAILABLE"))
        self.assertGreater(took, 0.8)
        self.assertLess(took, 3.0)

    def test_serving_right_after_start_with_the_agent_up(self):
        agent = self.start_agent()
        deadline = time.monotonic() + 30
        while True:
            try:
                if self.health.check(self.agent_address, "") == "SERVING":
                    break
            except grpc.RpcError:
                pass
            if agent.poll() is not None or time.monotonic() > deadline:
                self.fail(self.log("agent.log"))
            time.sleep(0.05)
        self.start_frontend()
        # As soon as the frontend answers at all, calls reach the agent.
        deadline = time.monotonic() + 20
        while self.status() not in ("SERVING", "NOT_SERVING"):
            self.assertLess(time.monotonic(), deadline, self.log("frontend.log"))
            time.sleep(0.02)
        codes = [self.describe(5) for _ in range(18)]
        self.assertEqual(codes, ["NOT_FOUND"] * 18, self.log("frontend.log"))

    def watch(self, address, service=""):
        ch = grpc.insecure_channel(address)
        pb = self.health.pb
        call = ch.unary_stream(
            "/grpc.health.v1.Health/Watch",
            request_serializer=pb.HealthCheckRequest.SerializeToString,
            response_deserializer=pb.HealthCheckResponse.FromString)(
                pb.HealthCheckRequest(service=service), timeout=60)
        names = (pb.HealthCheckResponse.ServingStatus.Name(r.status) for r in call)
        return ch, call, names

    def test_watch_streams_each_change_and_ends_on_cancel(self):
        fe = self.start_frontend()
        self.wait_status("NOT_SERVING")
        ch, call, names = self.watch(self.front)
        self.assertEqual(next(names), "NOT_SERVING")
        agent = self.start_agent()
        self.assertEqual(next(names), "SERVING")
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        self.assertEqual(next(names), "NOT_SERVING")
        self.start_agent()
        self.assertEqual(next(names), "SERVING")
        call.cancel()
        ch.close()
        with self.assertRaises(grpc.RpcError):
            next(names)
        # Unknown service: SERVICE_UNKNOWN, not an error.
        ch, call, names = self.watch(self.front, "no.such.Service")
        self.assertEqual(next(names), "SERVICE_UNKNOWN")
        call.cancel()
        ch.close()

        # Cancelled watches leave nothing behind: threads and fds back where they were.
        def counts():
            with open(f"/proc/{fe.pid}/status") as f:
                threads = int([ln for ln in f if ln.startswith("Threads:")][0].split()[1])
            return threads, len(os.listdir(f"/proc/{fe.pid}/fd"))

        time.sleep(0.5)
        before = counts()
        for _ in range(3):
            opened = [self.watch(self.front) for _ in range(20)]
            for ch, call, names in opened:
                self.assertEqual(next(names), "SERVING")
            for ch, call, names in opened:
                call.cancel()
                ch.close()
        deadline = time.monotonic() + 10
        while counts() > before and time.monotonic() < deadline:
            time.sleep(0.1)
        after = counts()
        self.assertLessEqual(after[0], before[0], (before, after))
        self.assertLessEqual(after[1], before[1], (before, after))
        # Still answering, and it stops promptly with no watcher holding it.
        self.assertEqual(self.status(), "SERVING")
        ch, call, names = self.watch(self.front)
        self.assertEqual(next(names), "SERVING")
        t0 = time.monotonic()
        fe.terminate()
        self.assertEqual(fe.wait(timeout=20), 0, self.log("frontend.log"))
        # A watcher that held the shutdown would hold it for the whole grace; an ASan build
        # on a loaded machine took 3.4 s to exit without one (the grace was 3 s then).
        self.assertLess(time.monotonic() - t0, FRONTEND_GRACE_S / 2,
                        "a watcher held the shutdown")
        ch.close()


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
