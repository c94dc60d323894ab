"""The node agent's resident exec path with real runsc and the real compute-init: execs are
served by the sandbox's spawner, keep the exec contract (timeout and cancel leave no
survivor, per-exec CPU time of two commands at once), and survive a killed spawner and a
restarted agent. The spawner's own behaviour is tests/integration/test_spawner.py's.

Usage: test_spawner_agent.py BUILD_DIR [unittest args]"""
import concurrent.futures
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading
import time
import unittest

import grpc

from agent_fixture import AgentProcess
import testmain

BUILD_DIR = sys.argv[1]
SURVIVORS = ("sleep 1001", "sleep 1002", "sleep 1003")


class SpawnerAgentTest(unittest.TestCase):
    """One agent (spawner on, the default), sandboxes made as each test needs."""

    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        cls.c = cls.agent.client
        cls.sid = cls.agent.new_sandbox()

    @classmethod
    def tearDownClass(cls):
        rc, tail = cls.agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    # --- helpers ---

    def runsc(self, *args):
        return subprocess.run(["runsc", "--root", self.agent.runsc_root, *args],
                              capture_output=True, text=True, timeout=30)

    def processes(self, sid):
        """(pid, ppid, command line) of every process of the sandbox, from `runsc ps` (its
        CMD column is the command's name only, so the arguments come from ps -o in the
        sandbox when asked for)."""
        out = self.runsc("ps", "cs-" + sid).stdout
        procs = []
        for line in out.splitlines()[1:]:
            f = line.split()
            if len(f) >= 8:
                procs.append((int(f[1]), int(f[2]), f[7]))
        return procs

    def sleepers(self, sid):
        """The sleep commands still running in the sandbox, with their arguments (read from
        the sandbox's /proc through the runtime: no exec of the path under test)."""
        found = []
        for pid, _, cmd in self.processes(sid):
            if cmd != "sleep":
                continue
            r = self.runsc("exec", "cs-" + sid, "cat", f"/proc/{pid}/cmdline")
            # Unreadable (it ended meanwhile, or the read failed): counted until it is gone.
            found.append(r.stdout.replace("\0", " ").strip() or f"sleep 100? (pid {pid})")
        return found

    def wait_no_survivors(self, sid, within_s=15):
        deadline = time.monotonic() + within_s
        while True:
            left = [s for s in self.sleepers(sid) if s in SURVIVORS or s.startswith("sleep 100")]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.2)

    def wait_sleeping(self, sid, within_s=20):
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if any(cmd == "sleep" for _, _, cmd in self.processes(sid)):
                return
            time.sleep(0.1)
        self.fail("the command never started")

    def last_exec_line(self, command, after=0):
        """The agent's debug line for the last exec of `command` in its log (from offset
        `after`): it says which path served it."""
        log = self.agent.log()[after:]
        lines = [ln for ln in log.splitlines() if f"exec {command}:" in ln]
        return lines[-1] if lines else ""

    def spawner_pid(self, sid):
        """The spawner's pid in the sandbox, from the agent's log of its last Hello."""
        pids = re.findall(r"sandbox=cs-" + sid + r"\] spawner connected \(compute-init .*?, "
                          r"pid (\d+),", self.agent.log())
        self.assertTrue(pids, "the spawner never connected")
        return int(pids[-1])

    def hellos(self, sid):
        return len(re.findall(r"sandbox=cs-" + sid + r"\] spawner connected", self.agent.log()))

    def start_exec(self, sid, *cmd, timeout_s=0):
        """Runs an exec in a thread; returns (future of (stdout, stderr, completed) or the
        exception, the call object for cancel)."""
        c = self.c
        req = c.pb.ExecRequest(ref=c.ref(sid), command=cmd[0], args=list(cmd[1:]))
        if timeout_s:
            req.timeout.seconds = timeout_s
        call = c.ExecStream(req, timeout=300)

        def run():
            out, err, done = bytearray(), bytearray(), None
            try:
                for ev in call:
                    kind = ev.WhichOneof("event")
                    if kind == "stdout":
                        out += ev.stdout.data
                    elif kind == "stderr":
                        err += ev.stderr.data
                    else:
                        done = ev.completed
            except grpc.RpcError as e:
                return e
            return bytes(out), bytes(err), done

        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        fut = pool.submit(run)
        pool.shutdown(wait=False)
        return fut, call

    # --- tests ---

    def test_exec_is_served_by_the_spawner(self):
        info = self.c.GetAgentInfo(self.c.pb.GetAgentInfoRequest(), timeout=10)
        self.assertTrue(info.spawner_enabled)
        self.assertIn("spawner: on", self.agent.log())
        out, err, done, _ = self.c.exec(self.sid, "sh", "-c", "echo hi; echo oops >&2; exit 3")
        self.assertEqual((out, err, done.exit_code), (b"hi\n", b"oops\n", 3))
        self.assertIn("via spawner", self.last_exec_line("sh"))
        # A command that does not exist: what a shell says, 127.
        out, err, done, _ = self.c.exec(self.sid, "/no/such/command")
        self.assertEqual(done.exit_code, 127)
        self.assertIn(b"/no/such/command", err)
        # A signal death reads as through runsc exec: 128+n and the signal.
        out, err, done, _ = self.c.exec(self.sid, "sh", "-c", "kill -9 $$")
        self.assertEqual((done.exit_code, done.signal), (128 + 9, 9))

    def test_bundle_and_socket_directory(self):
        """compute-init is the init; the socket's directory is the agent's (0700, outside
        the workspace) and read-only in the sandbox: the tenant can neither unlink nor
        replace the socket, nor the binary."""
        sdir = os.path.join(self.agent.state, "state", "sandboxes", self.sid)
        with open(os.path.join(sdir, "bundle", "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["process"]["args"][0], "/.compute/bin/compute-init")
        mounts = {m["destination"]: m for m in cfg["mounts"]}
        self.assertIn("ro", mounts["/.compute/run"]["options"])
        self.assertIn("ro", mounts["/.compute/bin/compute-init"]["options"])
        st = os.lstat(os.path.join(sdir, "spawner"))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o700)
        self.assertTrue(stat.S_ISSOCK(os.lstat(os.path.join(sdir, "spawner",
                                                            "spawner.sock")).st_mode))
        out, err, done, _ = self.c.exec(
            self.sid, "sh", "-c",
            "rm -f /.compute/run/spawner.sock || echo no-rm; "
            "touch /.compute/run/x || echo no-touch; "
            "cp /bin/true /.compute/bin/compute-init || echo no-cp")
        self.assertEqual(out, b"no-rm\nno-touch\nno-cp\n")
        self.assertIn(b"Read-only file system", err)
        # A socket the tenant binds in its workspace stays inside gVisor: nothing on the host.
        out, err, done, _ = self.c.exec(
            self.sid, "python3", "-c",
            "import socket; s = socket.socket(socket.AF_UNIX); s.bind('/workspace/t.sock'); "
            "s.listen(1); print('bound')")
        self.assertEqual(out, b"bound\n", err)
        ws = os.path.join(self.agent.state, "state", "workspaces", self.sid)
        self.assertFalse(os.path.lexists(os.path.join(ws, "t.sock")))

    def test_timeout_leaves_no_survivors(self):
        sid = self.agent.new_sandbox()
        out, err, done, _ = self.c.exec(
            sid, "sh", "-c",
            "setsid sleep 1001 & (sleep 1002 &); echo started; sleep 1003", timeout_s=2)
        self.assertTrue(done.timed_out)
        self.assertEqual(done.exit_code, -1)
        self.assertIn("via spawner", self.last_exec_line("sh"))
        self.assertEqual(self.wait_no_survivors(sid), [])

    def test_cancel_leaves_no_survivors(self):
        sid = self.agent.new_sandbox()
        fut, call = self.start_exec(
            sid, "sh", "-c", "setsid sleep 1001 & (sleep 1002 &); echo started; sleep 1003")
        self.wait_sleeping(sid)
        time.sleep(0.3)
        call.cancel()
        res = fut.result(timeout=60)
        self.assertIsInstance(res, grpc.RpcError)
        self.assertEqual(res.code(), grpc.StatusCode.CANCELLED)
        self.assertEqual(self.wait_no_survivors(sid), [])
        line = ""
        deadline = time.monotonic() + 20
        while "cancelled" not in line and time.monotonic() < deadline:
            time.sleep(0.2)
            line = self.last_exec_line("sh")
        self.assertIn("cancelled", line)
        self.assertIn("via spawner", line)

    def test_concurrent_execs_get_their_own_cpu(self):
        """Execs at once in one sandbox: each exec's cpu_ms is its own tree's (rusage), not
        the sandbox's over its window, which holds the others' too. A sleeper beside a CPU
        burner tells them apart: through the window it would read about the burner's CPU."""
        c = self.c
        sid = self.agent.new_sandbox(cpu_millis=2000)

        def burn(n):
            return ("sh", "-c", f"i=0; while [ $i -lt {n} ]; do i=$((i+1)); done")

        small, big = 400000, 800000
        alone_small = c.exec(sid, *burn(small))[2].usage.cpu_ms
        alone_big = c.exec(sid, *burn(big))[2].usage.cpu_ms
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            f1 = pool.submit(c.exec, sid, "sleep", "2")
            time.sleep(0.2)
            f2 = pool.submit(c.exec, sid, *burn(big))
            sleeper = f1.result()[2].usage.cpu_ms
            beside_sleeper = f2.result()[2].usage.cpu_ms
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            f1 = pool.submit(c.exec, sid, *burn(small))
            f2 = pool.submit(c.exec, sid, *burn(big))
            both_small = f1.result()[2].usage.cpu_ms
            both_big = f2.result()[2].usage.cpu_ms
        print(f"\ncpu_ms alone: {alone_small} (small), {alone_big} (big); a sleeper beside "
              f"the big one: {sleeper} (and {beside_sleeper}); small and big at once: "
              f"{both_small}, {both_big}", file=sys.stderr)
        self.assertGreater(alone_small, 100)
        # Its own: the sleeper used next to nothing, while the big burner ran through most
        # of its window (through the window, with --spawner=off: 922 ms beside a burner of
        # 897 alone).
        self.assertLess(sleeper, 0.15 * alone_big)
        # And each is counted, descendants included: alone an exec gets the sandbox's CPU
        # over its window (gVisor's work for it included), at once its own tree's, a little
        # less. No upper bound on a burner: gVisor's clock of a task's CPU time keeps running
        # while the host preempts it (docs/nodeagent.md, "Exec"), which a loaded CI host does.
        self.assertGreater(beside_sleeper, 0.6 * alone_big)
        self.assertGreater(both_small, 0.6 * alone_small)
        self.assertGreater(both_big, 0.6 * alone_big)

    def test_spawner_killed_mid_exec(self):
        """The spawner dies under a running exec: the client gets a clear error, the command
        goes (no survivor), the next exec is served (by runsc exec or the restarted
        spawner: the log says which), and the restarted spawner serves again."""
        sid = self.agent.new_sandbox()
        self.c.exec(sid, "true")  # its spawner has connected
        pid = self.spawner_pid(sid)
        hellos = self.hellos(sid)
        fut, _ = self.start_exec(
            sid, "sh", "-c", "setsid sleep 1001 & (sleep 1002 &); echo started; sleep 1003")
        self.wait_sleeping(sid)
        r = self.runsc("kill", "--pid", str(pid), "cs-" + sid, "KILL")
        self.assertEqual(r.returncode, 0, r.stderr)
        res = fut.result(timeout=60)
        self.assertIsInstance(res, grpc.RpcError)
        self.assertEqual(res.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertIn("spawner went away", res.details())
        self.assertNotIn(self.agent.state, res.details())
        print(f"\nthe client saw: {res.code()}: {res.details()}", file=sys.stderr)
        self.assertEqual(self.wait_no_survivors(sid), [])
        out, _, done, _ = self.c.exec(sid, "echo", "next")
        self.assertEqual((out, done.exit_code), (b"next\n", 0))
        print("the next exec: " + self.last_exec_line("echo").split("] ", 1)[-1],
              file=sys.stderr)
        deadline = time.monotonic() + 20
        while self.hellos(sid) <= hellos and time.monotonic() < deadline:
            time.sleep(0.1)
        self.assertGreater(self.hellos(sid), hellos, "the spawner never came back")
        self.c.exec(sid, "echo", "again")
        self.assertIn("via spawner", self.last_exec_line("echo"))

    def test_agent_restart_mid_exec(self):
        """The agent dies under a running exec: the spawner kills the command when its
        connection drops, and serves the sandbox again once the new agent listens."""
        sid = self.agent.new_sandbox()
        self.c.exec(sid, "true")
        fut, _ = self.start_exec(
            sid, "sh", "-c", "setsid sleep 1001 & (sleep 1002 &); echo started; sleep 1003")
        self.wait_sleeping(sid)
        self.agent.stop(signal.SIGKILL)
        res = fut.result(timeout=60)
        self.assertIsInstance(res, grpc.RpcError)
        self.assertEqual(self.wait_no_survivors(sid), [])
        mark = len(self.agent.log())
        self.agent.restart()
        out, _, done, _ = self.c.exec(sid, "echo", "back")
        self.assertEqual((out, done.exit_code), (b"back\n", 0))
        self.assertIn("via spawner", self.last_exec_line("echo", after=mark))


class SpawnerOffTest(unittest.TestCase):
    """--spawner=off: the plain init, every exec through runsc exec."""

    def test_off(self):
        agent = AgentProcess(BUILD_DIR, "--spawner=off")
        try:
            c = agent.client
            self.assertFalse(c.GetAgentInfo(c.pb.GetAgentInfoRequest(),
                                            timeout=10).spawner_enabled)
            sid = agent.new_sandbox()
            out, _, done, _ = c.exec(sid, "echo", "hi")
            self.assertEqual(out, b"hi\n")
            lines = [ln for ln in agent.log().splitlines() if "exec echo:" in ln]
            self.assertIn("via runsc exec", lines[-1])
            with open(os.path.join(agent.state, "state", "sandboxes", sid, "bundle",
                                   "config.json")) as f:
                cfg = json.load(f)
            self.assertEqual(cfg["process"]["args"][0], "/bin/sh")
            self.assertNotIn("/.compute/run", [m["destination"] for m in cfg["mounts"]])
            # runsc run and exec fchown their stdio to the sandbox's user: handed the host's
            # /dev/null, they would change the node's device. runsc exec's stdin is an empty
            # pipe instead.
            t = threading.Thread(target=c.exec, args=(sid, "sleep", "2"))
            t.start()
            try:
                deadline = time.monotonic() + 10
                stdin = None
                while stdin is None and time.monotonic() < deadline:
                    for pid in filter(str.isdigit, os.listdir("/proc")):
                        try:
                            with open(f"/proc/{pid}/cmdline", "rb") as f:
                                argv = f.read().split(b"\0")
                            if b"exec" in argv and f"cs-{sid}".encode() in argv and \
                                    argv[0].endswith(b"runsc"):
                                stdin = os.readlink(f"/proc/{pid}/fd/0")
                        except OSError:
                            continue
                    time.sleep(0.05)
                self.assertIsNotNone(stdin, "no runsc exec process seen")
                self.assertTrue(stdin.startswith("pipe:"), stdin)
            finally:
                t.join(30)
        finally:
            rc, tail = agent.cleanup()
            self.assertEqual(rc, 0, tail)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
