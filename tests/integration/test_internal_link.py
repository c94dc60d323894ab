"""The internal link over a Unix socket (docs/security.md, "The internal link"): the agent
listens on unix:PATH with the socket 0600 in a 0700 directory, only root connects, a stale
socket left by a killed agent does not stop a restart, the frontend reaches the agent through
it, and DestroySandbox refuses a grace below the minimum (1 s). The frontend's --user: it
drops to an unprivileged user with no capabilities once listening.

Usage: test_internal_link.py BUILD_DIR"""
import os
import signal
import stat
import subprocess
import sys
import time
import unittest

import grpc

from agent_client import Agent
from agent_fixture import IMAGES_DIR, free_port
from daemons import Daemons
from health_client import Health
from proc_checks import frontend_reaches_agent, status, thread_statuses
import testmain

BUILD_DIR = sys.argv[1]


class InternalLinkTest(Daemons, unittest.TestCase):
    def setUp(self):
        self.daemons_setup(BUILD_DIR, "cs-link-")
        self.state = os.path.join(self.dir, "state")
        self.sock = os.path.join(self.state, "run", "agent.sock")
        self.address = "unix:" + self.sock
        self.health = Health(BUILD_DIR)

    def tearDown(self):
        self.daemons_teardown()


    def start_agent(self):
        return self.start("compute-nodeagent", "--listen", self.address, "--state-dir",
                          self.state, "--images-dir", IMAGES_DIR, "--shutdown-grace-ms", "3000")

    def wait_serving(self, address, proc, log):
        deadline = time.monotonic() + 30
        while True:
            try:
                return self.health.check(address, "")
            except grpc.RpcError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    self.fail(f"{address} never served:\n{self.log(log)}")
                time.sleep(0.05)

    def test_socket_modes_and_only_root_connects(self):
        agent = self.start_agent()
        self.assertEqual(self.wait_serving(self.address, agent, "agent.log"), "SERVING")
        st = os.lstat(self.sock)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(stat.S_IMODE(os.lstat(os.path.dirname(self.sock)).st_mode), 0o700)
        # Another user cannot connect even were the directory open to it.
        os.chmod(os.path.dirname(self.sock), 0o755)
        try:
            r = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                 "/usr/bin/python3", "-c",
                 "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
                 f"s.connect({self.sock!r})"],
                capture_output=True, text=True, timeout=20)
        finally:
            os.chmod(os.path.dirname(self.sock), 0o700)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("PermissionError", r.stderr)
        # Stopped cleanly: the socket file is gone.
        agent.terminate()
        self.assertEqual(agent.wait(timeout=30), 0, self.log("agent.log"))
        self.assertFalse(os.path.exists(self.sock))

    def connect_as(self, uid, gid):
        """Connects to the socket as uid:gid with no other group: the child's status, stderr."""
        r = subprocess.run(
            ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
             "/usr/bin/python3", "-c",
             "import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
             f"s.connect({self.sock!r})"],
            capture_output=True, text=True, timeout=20)
        return r.returncode, r.stderr

    def test_listen_group_connects_and_no_one_else(self):
        os.chmod(self.dir, 0o711)  # others may search down to the state directory
        os.makedirs(self.state, mode=0o711)
        # A run/ directory left 0700 by an earlier start without a group is taken over.
        os.makedirs(os.path.dirname(self.sock), mode=0o700)
        agent = self.start("compute-nodeagent", "--listen", self.address, "--listen-group",
                           "nogroup", "--state-dir", self.state, "--images-dir", IMAGES_DIR,
                           "--shutdown-grace-ms", "3000")
        self.assertEqual(self.wait_serving(self.address, agent, "agent.log"), "SERVING")
        for path, mode in ((self.sock, 0o660), (os.path.dirname(self.sock), 0o710)):
            st = os.lstat(path)
            self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid), (mode, 0, 65534))
        self.assertIn("(mode 0660, group nogroup)", self.log("agent.log"))
        self.assertEqual(self.connect_as(65534, 65534), (0, ""))  # the group's
        rc, stderr = self.connect_as(65534, 1)  # the same uid in another group
        self.assertNotEqual(rc, 0)
        self.assertIn("PermissionError", stderr)
        agent.terminate()
        self.assertEqual(agent.wait(timeout=30), 0, self.log("agent.log"))
        # Without the group again, the directory goes back to 0700.
        agent = self.start_agent()
        self.wait_serving(self.address, agent, "agent.log")
        self.assertEqual(stat.S_IMODE(os.lstat(os.path.dirname(self.sock)).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.lstat(self.sock).st_mode), 0o600)

    def test_listen_group_refused(self):
        for group, why in (("root", "the root group is not"), ("no-such-group-x", "no such group")):
            p = self.start("compute-nodeagent", "--listen", self.address, "--listen-group", group,
                           "--state-dir", self.state, "--images-dir", IMAGES_DIR)
            self.assertNotEqual(p.wait(timeout=30), 0)
            self.assertIn(why, self.log("agent.log"))

    def test_stale_socket_does_not_stop_a_restart(self):
        agent = self.start_agent()
        self.wait_serving(self.address, agent, "agent.log")
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        self.assertTrue(os.path.exists(self.sock), "a killed agent leaves its socket")
        agent = self.start_agent()
        self.assertEqual(self.wait_serving(self.address, agent, "agent.log"), "SERVING")
        self.assertIn("removed a stale socket", self.log("agent.log"))

    def test_refuses_an_open_directory(self):
        os.makedirs(os.path.dirname(self.sock), mode=0o755)
        os.chmod(os.path.dirname(self.sock), 0o755)
        agent = self.start_agent()
        self.assertNotEqual(agent.wait(timeout=30), 0)
        self.assertIn("must be ours and mode 0700", self.log("agent.log"))

    def test_refuses_a_file_that_is_not_a_socket(self):
        os.makedirs(os.path.dirname(self.sock), mode=0o700)
        open(self.sock, "w").close()
        agent = self.start_agent()
        self.assertNotEqual(agent.wait(timeout=30), 0)
        self.assertIn("is not a socket", self.log("agent.log"))

    def test_frontend_reaches_the_agent_over_the_socket(self):
        agent = self.start_agent()
        self.wait_serving(self.address, agent, "agent.log")
        front = f"127.0.0.1:{free_port()}"
        fe = self.start("compute-frontend", "--listen", front, "--agents", self.address,
                        "--shutdown-grace-ms", "3000", log="frontend.log")
        self.assertEqual(self.wait_serving(front, fe, "frontend.log"), "SERVING")
        # NOT_FOUND: the frontend asked its agent, over the socket.
        err = frontend_reaches_agent(BUILD_DIR, front)
        self.assertIsNone(err, f"{err}\n{self.log('frontend.log')}")
        self.assertIn(f"node agent {self.address} is up", self.log("frontend.log"))

    def test_destroy_grace_below_the_minimum_is_refused(self):
        agent = self.start_agent()
        self.wait_serving(self.address, agent, "agent.log")
        c = Agent(BUILD_DIR, self.address)
        try:
            for grace in ({"nanos": 1}, {"nanos": 999000000}, {"seconds": -1}):
                with self.assertRaises(grpc.RpcError) as cm:
                    c.DestroySandbox(c.pb.DestroySandboxRequest(
                        ref=c.ref("3f0c1a4e-0d6b-4c59-9a51-2b7a8f0e6d11"), grace=grace),
                        timeout=10)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, grace)
                self.assertIn("grace must be at least 1 s", cm.exception.details())
            # At the minimum the grace passes the check (NOT_FOUND: no such sandbox).
            with self.assertRaises(grpc.RpcError) as cm:
                c.DestroySandbox(c.pb.DestroySandboxRequest(
                    ref=c.ref("3f0c1a4e-0d6b-4c59-9a51-2b7a8f0e6d11"), grace={"seconds": 1}),
                    timeout=10)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)
        finally:
            c.close()

    def test_frontend_drops_to_an_unprivileged_user(self):
        # TCP for the agent here: the unprivileged frontend must be able to reconnect.
        agent_tcp = f"127.0.0.1:{free_port()}"
        agent = self.start("compute-nodeagent", "--listen", agent_tcp, "--state-dir", self.state,
                           "--images-dir", IMAGES_DIR, "--shutdown-grace-ms", "3000")
        self.wait_serving(agent_tcp, agent, "agent.log")
        front = f"127.0.0.1:{free_port()}"
        fe = self.start("compute-frontend", "--listen", front, "--agents", agent_tcp,
                        "--user", "nobody", "--shutdown-grace-ms", "3000", log="frontend.log")
        self.assertEqual(self.wait_serving(front, fe, "frontend.log"), "SERVING")
        st = status(f"/proc/{fe.pid}/status")
        self.assertEqual(st["Uid"].split(), ["65534"] * 4)
        self.assertEqual(st["Gid"].split(), ["65534"] * 4)
        self.assertEqual(st["Groups"].strip(), "")
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            self.assertEqual(int(st[cap], 16), 0, cap)
        self.assertEqual(st["NoNewPrivs"].strip(), "1")
        # Every thread, gRPC's too, runs as nobody with no capabilities.
        for tid, t in thread_statuses(fe.pid):
            self.assertEqual(t["Uid"].split(), ["65534"] * 4, tid)
            self.assertEqual(int(t["CapEff"], 16), 0, tid)
            self.assertEqual(int(t["CapPrm"], 16), 0, tid)
            self.assertEqual(int(t["CapBnd"], 16), 0, tid)
            self.assertEqual(t["NoNewPrivs"].strip(), "1", tid)
            # The syscall allowlist (docs/security.md, "Seccomp") is on every thread.
            self.assertEqual(t["Seccomp"].strip(), "2", tid)
        self.assertIn("running as nobody", self.log("frontend.log"))
        self.assertIn("seccomp filter on", self.log("frontend.log"))
        # It still reaches the agent, also after the agent restarted.
        agent.send_signal(signal.SIGKILL)
        agent.wait()
        agent = self.start("compute-nodeagent", "--listen", agent_tcp, "--state-dir", self.state,
                           "--images-dir", IMAGES_DIR, "--shutdown-grace-ms", "3000")
        self.wait_serving(agent_tcp, agent, "agent.log")
        deadline = time.monotonic() + 20
        while self.health.check(front, "") != "SERVING":
            self.assertLess(time.monotonic(), deadline, self.log("frontend.log"))
            time.sleep(0.1)
        fe.terminate()
        self.assertEqual(fe.wait(timeout=20), 0, self.log("frontend.log"))

    def test_frontend_user_refused(self):
        for user, why in (("root", "not an unprivileged user"),
                          ("no-such-user-x", "no such user")):
            p = self.start("compute-frontend", "--listen", f"127.0.0.1:{free_port()}",
                           "--agents", "127.0.0.1:1", "--user", user, log="frontend.log")
            self.assertNotEqual(p.wait(timeout=30), 0)
            self.assertIn(why, self.log("frontend.log"))


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
