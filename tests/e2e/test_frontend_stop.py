"""A stopping frontend (SIGTERM, as a Deployment's rolling update sends it; docs/deploy.md,
"Upgrades and rollback"): the ExecCommand stream it is relaying goes on to its end, every
byte and the real ExecCompleted, while new calls are refused UNAVAILABLE; then it exits 0
without cancelling anything. A stream still running when --shutdown-grace-ms ends is
cancelled, and its command is ended in the sandbox (nothing of it keeps running).

Usage: test_frontend_stop.py BUILD_DIR"""
import os
import signal
import sys
import time
import unittest
import uuid

import grpc

from agent_client import code_of, collect_exec
from agent_fixture import AgentProcess
from compute_client import Compute
from frontend_fixture import FrontendProcess
import testmain

BUILD_DIR = sys.argv[1]


class Frontend(FrontendProcess):
    def __init__(self, agent, grace_ms):
        self.agent = agent
        self.grace_ms = grace_ms
        super().__init__(BUILD_DIR, "/tmp")

    def argv(self):
        return [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--listen", self.address,
                "--shutdown-grace-ms", str(self.grace_ms), "--agents", self.agent.address,
                "--agent-poll-ms", "200"]


class FrontendStopTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        try:
            fe = Frontend(cls.agent, 3000)
            try:
                c = Compute(BUILD_DIR, fe.address)
                cls.sid = c.create("tenant-" + uuid.uuid4().hex[:8], "stop").sandbox_id
                # READY before the tests: their streams must not wait for the start.
                _, _, done, _ = c.exec(cls.sid, "true")
                assert done.exit_code == 0, done
                c.close()
            finally:
                fe.stop()
                os.unlink(fe.log_path)
        except BaseException:
            print(cls.agent.log()[-3000:], file=sys.stderr)
            cls.agent.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        rc, tail = cls.agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    def setUp(self):
        self.fe = None

    def tearDown(self):
        if self.fe:
            self.fe.stop(signal.SIGKILL)

    def start_frontend(self, grace_ms):
        if self.fe:
            os.unlink(self.fe.log_path)
        self.fe = Frontend(self.agent, grace_ms)
        return Compute(BUILD_DIR, self.fe.address)

    def run(self, result=None):
        """The daemons' log tails on stderr when the test fails (CI keeps nothing else)."""
        before = len(result.failures) + len(result.errors) if result else 0
        out = super().run(result)
        if result and len(result.failures) + len(result.errors) > before:
            flog = self.fe.log()[-3000:] if self.fe and os.path.exists(self.fe.log_path) else ""
            print(f"--- frontend log ---\n{flog}\n--- agent log ---\n"
                  f"{self.agent.log()[-3000:]}", file=sys.stderr)
        if self.fe and os.path.exists(self.fe.log_path):
            os.unlink(self.fe.log_path)
        return out

    def test_running_stream_finishes_new_calls_refused(self):
        c = self.start_frontend(30000)
        req = c.pb.ExecCommandRequest(
            sandbox_id=self.sid, command="sh",
            args=["-c", "echo start; i=0; while [ $i -lt 30 ]; do echo line $i; i=$((i+1)); "
                        "sleep 0.1; done; echo done; exit 7"])
        stream = c.ExecStream(req, timeout=120)
        first = next(stream).stdout.data
        self.assertTrue(first.startswith(b"start\n"), first)
        self.fe.proc.send_signal(signal.SIGTERM)
        # The listener closes at once: a new client's call is refused while the stream runs.
        other = Compute(BUILD_DIR, self.fe.address)
        try:
            deadline = time.monotonic() + 20
            while True:
                code = code_of(other.describe, self.sid)
                if code == grpc.StatusCode.UNAVAILABLE:
                    break
                if time.monotonic() > deadline:
                    self.fail(f"a new call during the stop answered {code}")
                time.sleep(0.05)
            # A new call on the stream's own connection: refused too.
            self.assertEqual(code_of(c.describe, self.sid), grpc.StatusCode.UNAVAILABLE)
        finally:
            other.close()
        self.assertIsNone(self.fe.proc.poll(), "the frontend exited with a stream running")
        out, err, done, _ = collect_exec(stream)
        want = b"start\n" + b"".join(b"line %d\n" % i for i in range(30)) + b"done\n"
        self.assertEqual((first + out, err), (want, b""))
        self.assertEqual((done.exit_code, done.cancelled, done.timed_out), (7, False, False))
        self.assertEqual(self.fe.proc.wait(timeout=30), 0)
        self.assertNotIn("cancelling", self.fe.log())

    def test_stream_past_the_grace_is_cancelled_and_its_command_ended(self):
        c = self.start_frontend(1500)
        # A duration no other process has, to find it in ps.
        marker = f"299.{uuid.uuid4().int % 10**8:08d}"
        req = c.pb.ExecCommandRequest(sandbox_id=self.sid, command="sh",
                                      args=["-c", f"echo start; exec sleep {marker}"])
        stream = c.ExecStream(req, timeout=120)
        self.assertEqual(next(stream).stdout.data, b"start\n")  # nothing follows it
        self.fe.proc.send_signal(signal.SIGTERM)
        self.assertIn(code_of(lambda: list(stream)),
                      (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED))
        self.assertEqual(self.fe.proc.wait(timeout=30), 0)
        self.assertIn("shutdown: cancelling 1 call(s) still running after 1500 ms",
                      self.fe.log())
        # The command is ended in the sandbox (SIGTERM, SIGKILL 10 s later, as on a cancel).
        c.close()
        c = self.start_frontend(3000)
        deadline = time.monotonic() + 30
        while True:
            out, _, done, _ = c.exec(self.sid, "ps", "-e", "-o", "args=")
            if marker.encode() not in out:
                break
            if time.monotonic() > deadline:
                self.fail(f"the command outlived its cancelled stream:\n{out}")
            time.sleep(0.5)
        c.close()


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
