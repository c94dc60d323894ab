"""./scripts/run serves grpc.health.v1.Health/Check = SERVING on both addresses and stops both
programs cleanly on SIGTERM and on Ctrl-C (SIGINT to the foreground process group). By default
the agent listens on a Unix socket in the state directory (0660, in a 0710 directory, both of
the frontend's group), not on TCP; COMPUTE_AGENT_LISTEN=host:port still gives TCP. The
frontend runs as the user compute-frontend with no capabilities. A daemon killed with SIGKILL
is restarted (logged with its exit status and the delay) and serves again, the unprivileged
frontend reaching the restarted agent; SIGTERM then leaves nothing. SIGHUP to scripts/run
restarts the node agent alone (the frontend keeps its process), cleanly: a command running
then finishes within the shutdown grace, one that outlasts it is ended (its client gets
UNAVAILABLE), and the sandbox, its files and its usage are there for the new agent.

Usage: test_run_health.py BUILD_DIR SOURCE_DIR"""
import grp
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import unittest

import grpc

from health_client import Health
from proc_checks import frontend_reaches_agent, thread_statuses
import testmain

BUILD_DIR, SOURCE_DIR = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from agent_client import collect_exec  # noqa: E402
from compute_client import Compute  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class RunScriptTest(unittest.TestCase):
    def setUp(self):
        self.health = Health(BUILD_DIR)
        self.state = tempfile.TemporaryDirectory()
        # The unprivileged frontend must be able to search down to the agent's socket.
        os.chmod(self.state.name, 0o711)
        self.fport, self.aport = free_port(), free_port()
        self.fmetrics, self.ametrics = free_port(), free_port()
        self.sock = os.path.join(self.state.name, "state", "run", "agent.sock")
        env = dict(os.environ,
                   COMPUTE_LISTEN=f"127.0.0.1:{self.fport}",
                   COMPUTE_AGENT_LISTEN=f"127.0.0.1:{self.aport}",
                   COMPUTE_METRICS_LISTEN=f"127.0.0.1:{self.fmetrics}",
                   COMPUTE_AGENT_METRICS_LISTEN=f"127.0.0.1:{self.ametrics}",
                   COMPUTE_STATE_DIR=os.path.join(self.state.name, "state"),
                   # The default image ctest's fixture built, not a second build of it.
                   COMPUTE_IMAGES_DIR=os.environ.get("COMPUTE_TEST_IMAGES_DIR",
                                                     "/var/lib/compute/images"),
                   COMPUTE_BUILD_DIR=BUILD_DIR)
        for name in ("COMPUTE_AGENTS",):
            env.pop(name, None)
        if self._testMethodName.startswith("test_sighup"):
            env["COMPUTE_SHUTDOWN_GRACE_MS"] = "5000"  # (the agent's; the frontend's too)
        if self._testMethodName.endswith("_default_link"):
            del env["COMPUTE_AGENT_LISTEN"]  # the default: the Unix socket
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([os.path.join(SOURCE_DIR, "scripts", "run")], env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def tearDown(self):
        # A test that did not end the service leaves it running, or its supervisors (which
        # would start the daemons again) when scripts/run itself is gone: the whole session
        # goes, then what the agent left (sandboxes, mounts, empty cgroups). The nft table
        # named is one nobody uses: these sandboxes have no network, and another test's agent
        # may hold the default one.
        left = self.proc.poll() is None or self.session()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        deadline = time.monotonic() + 10
        while left and self.session() and time.monotonic() < deadline:
            time.sleep(0.1)  # (the agent's lock goes with its process)
        if left:
            subprocess.run([os.path.join(BUILD_DIR, "bin", "compute-nodeagent"), "cleanup",
                            "--state-dir", os.path.join(self.state.name, "state"),
                            "--nft-table", f"csrunhealth{os.getpid()}", "--delete-data"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.log.close()
        self.state.cleanup()

    def output(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")

    def wait_serving(self, address, service):
        deadline = time.monotonic() + 180  # the script may have to build first
        while True:  # the frontend is NOT_SERVING until its agent answered
            try:
                status = self.health.check(address, service)
                if status == "SERVING":
                    return status
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.fail(f"{address} never served health:\n{self.output()}")
            time.sleep(0.2)

    def check_serving_then_stop(self, send_signal):
        front, agent = f"127.0.0.1:{self.fport}", f"127.0.0.1:{self.aport}"
        self.assertEqual(self.wait_serving(front, ""), "SERVING")
        self.assertEqual(self.wait_serving(agent, ""), "SERVING")
        self.assertEqual(self.health.check(front, "compute.v1.ComputeService"), "SERVING")
        self.assertEqual(self.health.check(agent, "nodeagent.v1.NodeAgent"), "SERVING")
        # Both metrics endpoints, as scripts/run prints them.
        for port, program in ((self.fmetrics, "compute-frontend"),
                              (self.ametrics, "compute-nodeagent")):
            self.assertIn(f"http://127.0.0.1:{port}/metrics", self.output())
            req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics")
            if program == "compute-nodeagent":
                # Its page names every sandbox: scripts/run made it a token only root reads.
                token_file = os.path.join(self.state.name, "state", "metrics-token")
                self.assertEqual(stat.S_IMODE(os.stat(token_file).st_mode), 0o600)
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen(req, timeout=10)
                self.assertEqual(cm.exception.code, 401)
                with open(token_file) as f:
                    req.add_header("Authorization", "Bearer " + f.read().strip())
            with urllib.request.urlopen(req, timeout=10) as r:
                self.assertIn(f'compute_build_info{{program="{program}"', r.read().decode())
        for address in (front, agent):
            with self.assertRaises(grpc.RpcError) as cm:
                self.health.check(address, "no.such.Service")
            self.assertEqual(cm.exception.code(), grpc.StatusCode.NOT_FOUND)

        send_signal()
        try:
            status = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail(f"scripts/run did not stop:\n{self.output()}")
        out = self.output()
        self.assertEqual(status, 0, out)
        self.assertIn("compute-frontend stopped", out)
        self.assertIn("compute-nodeagent stopped", out)
        self.assertFalse(port_open(self.fport), "frontend still listening")
        self.assertFalse(port_open(self.aport), "node agent still listening")

    def test_sigterm_default_link(self):
        front, agent = f"127.0.0.1:{self.fport}", "unix:" + self.sock
        self.assertEqual(self.wait_serving(agent, "nodeagent.v1.NodeAgent"), "SERVING")
        gid = grp.getgrnam("compute-frontend").gr_gid
        for path, mode in ((self.sock, 0o660), (os.path.dirname(self.sock), 0o710)):
            st = os.lstat(path)
            self.assertEqual((stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid), (mode, 0, gid))
        self.assertFalse(port_open(self.aport), "the agent listens on TCP too")
        self.assertEqual(self.wait_serving(front, "compute.v1.ComputeService"), "SERVING")
        self.check_frontend_unprivileged()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0, self.output())
        self.assertIn(f"serving on {agent} (mode 0660, group compute-frontend)", self.output())
        self.assertFalse(os.path.exists(self.sock), "socket left behind")
        self.assertFalse(port_open(self.fport), "frontend still listening")

    def session(self):
        """{pid: command name} of every process of scripts/run's session."""
        found = {}
        for d in os.listdir("/proc"):
            if not d.isdigit():
                continue
            try:
                with open(f"/proc/{d}/stat") as f:
                    st = f.read()
            except OSError:
                continue
            comm, rest = st[st.index("(") + 1:st.rindex(")")], st[st.rindex(")") + 2:].split()
            if int(rest[3]) == self.proc.pid and rest[0] != "Z":
                found[int(d)] = comm
        return found

    def daemon_pid(self, comm):
        pids = [p for p, c in self.session().items() if c == comm]
        self.assertEqual(len(pids), 1, f"{comm}: {pids}\n{self.output()}")
        return pids[0]

    def serving(self, address, service):
        try:
            return self.health.check(address, service) == "SERVING"
        except grpc.RpcError:
            return False

    def wait_replaced(self, comm, old, limit_s, ready):
        """Waits until the session's process comm is another than pid old and ready() returns
        a true value; returns that value."""
        deadline = time.monotonic() + limit_s
        while True:
            pids = [p for p, c in self.session().items() if c == comm]
            if pids and old not in pids:
                got = ready()
                if got:
                    return got
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.fail(f"{comm} not back:\n{self.output()}")
            time.sleep(0.1)

    def check_frontend_unprivileged(self):
        """Every thread of the frontend runs as compute-frontend with no capability."""
        uid = pwd.getpwnam("compute-frontend").pw_uid
        pid = self.daemon_pid("compute-fronten")
        for tid, st in thread_statuses(pid):
            self.assertEqual(st["Uid"].split(), [str(uid)] * 4, tid)
            for cap in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
                self.assertEqual(int(st[cap], 16), 0, f"{tid} {cap}")
            self.assertEqual(st["NoNewPrivs"].strip(), "1", tid)

    def test_supervises_kill_9_default_link(self):
        front, agent = f"127.0.0.1:{self.fport}", "unix:" + self.sock
        self.assertEqual(self.wait_serving(agent, "nodeagent.v1.NodeAgent"), "SERVING")
        self.assertEqual(self.wait_serving(front, "compute.v1.ComputeService"), "SERVING")
        for comm, address, service in (("compute-nodeage", agent, "nodeagent.v1.NodeAgent"),
                                        ("compute-fronten", front, "compute.v1.ComputeService")):
            old = self.daemon_pid(comm)
            os.kill(old, signal.SIGKILL)
            # Restarted after 1 s, a new process, serving again.
            self.wait_replaced(comm, old, 30, lambda: self.serving(address, service))
            name = "compute-nodeagent" if comm == "compute-nodeage" else "compute-frontend"
            self.assertIn(f"{name} exited (status 137); restarting it in 1 s", self.output())
            # The unprivileged frontend reaches the restarted agent's new socket.
            err = frontend_reaches_agent(BUILD_DIR, front)
            self.assertIsNone(err, f"{err}\n{self.output()}")
            self.check_frontend_unprivileged()
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0, self.output())
        self.assertEqual(self.session(), {}, "processes left behind")
        self.assertFalse(os.path.exists(self.sock))
        self.assertFalse(port_open(self.fport))

    def test_sighup_restarts_the_agent_alone(self):
        front, agent = f"127.0.0.1:{self.fport}", f"127.0.0.1:{self.aport}"
        self.assertEqual(self.wait_serving(agent, "nodeagent.v1.NodeAgent"), "SERVING")
        self.assertEqual(self.wait_serving(front, "compute.v1.ComputeService"), "SERVING")
        c = Compute(BUILD_DIR, front)
        sid = c.create("run-hup", "s1").sandbox_id
        _, _, done, _ = c.exec(sid, "true")  # (waits for the sandbox to be up)
        self.assertEqual(done.exit_code, 0)
        c.write(sid, "kept.txt", b"written before the restart")
        cpu_before = c.describe(sid).current_usage.cpu_ms
        old_agent, fe = self.daemon_pid("compute-nodeage"), self.daemon_pid("compute-fronten")
        # A command running when the restart comes finishes within the shutdown grace (5 s);
        # one still running then is ended, and its client told UNAVAILABLE.
        stream = c.ExecStream(c.pb.ExecCommandRequest(
            sandbox_id=sid, command="sh", args=["-c", "sleep 2; echo finished"]), timeout=60)
        long = c.ExecStream(c.pb.ExecCommandRequest(
            sandbox_id=sid, command="sh",
            args=["-c", "while :; do date +%s%N > /workspace/alive; sleep 0.2; done"]),
            timeout=120)
        time.sleep(1)
        self.proc.send_signal(signal.SIGHUP)
        out, _, done, _ = collect_exec(stream)
        self.assertEqual((out, done.exit_code), (b"finished\n", 0), self.output())
        with self.assertRaises(grpc.RpcError) as cm:
            collect_exec(long)
        print(f"the long command's client: {cm.exception.code()}: {cm.exception.details()}",
              file=sys.stderr)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE, cm.exception.details())
        def described():  # None while the frontend's link to the new agent is not back
            try:
                return c.describe(sid)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return None
        d = self.wait_replaced("compute-nodeage", old_agent, 60, described)
        out = self.output()
        self.assertIn("compute-nodeagent stopped (status 0) for a restart (SIGHUP)", out)
        self.assertNotIn("restarting it in", out)
        self.assertEqual(self.daemon_pid("compute-fronten"), fe, "the frontend was restarted")
        self.assertEqual(d.status, c.pb.SANDBOX_STATUS_READY)
        self.assertGreaterEqual(d.current_usage.cpu_ms, cpu_before)
        self.assertEqual(c.read(sid, "kept.txt").data, b"written before the restart")
        alive = c.read(sid, "alive").data
        time.sleep(1)
        self.assertEqual(c.read(sid, "alive").data, alive, "the long command still runs")
        out, _, done, _ = c.exec(sid, "cat", "/workspace/kept.txt")
        self.assertEqual((out, done.exit_code), (b"written before the restart", 0))
        c.destroy(sid)
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=30), 0, self.output())
        self.assertEqual(self.session(), {}, "processes left behind")

    def test_sigterm(self):
        self.check_serving_then_stop(lambda: self.proc.send_signal(signal.SIGTERM))

    def test_ctrl_c(self):
        # A terminal's Ctrl-C goes to the whole foreground process group.
        self.check_serving_then_stop(lambda: os.killpg(self.proc.pid, signal.SIGINT))


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
