"""compute-init's spawner role on the host (docs/nodeagent.md, "compute-init (resident exec
path)"): `compute-init --spawner --socket PATH` connects to a socket this test listens on, and
the test speaks compute.spawner.v1 to it as the agent would (Python classes generated from
proto/spawner/v1/spawner.proto). Output, exit codes and signals, start errors, env and cwd,
per-exec flow control, signals to a whole tree (setsid and double-forked children), per-exec
CPU with two burners at once, connection drops, protocol errors, many execs, the exec cap, and
the init role restarting a killed spawner.

Usage: test_spawner.py BUILD_DIR"""
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import testmain

BUILD_DIR = sys.argv[1]
sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
from spawner.v1 import spawner_pb2 as pb  # noqa: E402

BIN = os.path.join(BUILD_DIR, "bin", "compute-init")
MAX_SPAWNER_FRAME = 64 * 1024 + 1024
SH = "/bin/sh"
BASE_ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]


def alive(pid):
    """Whether pid is a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_gone(pids, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


class Conn:
    """One accepted connection from the spawner: frames out, frames in (per exec)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.frames = {}  # exec_id -> [SpawnerFrame]
        self.pongs = []
        self.hello = None
        self.credit_sent = {}  # exec_id -> bytes granted so far
        self.output_seen = {}  # exec_id -> output bytes received

    def send(self, frame):
        data = frame.SerializeToString()
        self.sock.sendall(struct.pack(">I", len(data)) + data)

    def send_raw(self, data):
        self.sock.sendall(data)

    def read_frame(self, timeout):
        """The next SpawnerFrame, None at EOF; raises socket.timeout."""
        self.sock.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if n > MAX_SPAWNER_FRAME:
                    raise AssertionError(f"spawner frame of {n} bytes")
                if len(self.buf) >= 4 + n:
                    frame = pb.SpawnerFrame.FromString(self.buf[4:4 + n])
                    self.buf = self.buf[4 + n:]
                    return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return None
            self.buf += chunk

    def pump(self, timeout):
        """Reads one frame and files it; False at EOF or when nothing came within timeout."""
        try:
            f = self.read_frame(timeout)
        except socket.timeout:
            return False
        if f is None:
            return False
        kind = f.WhichOneof("kind")
        if kind == "hello":
            self.hello = f.hello
        elif kind == "pong":
            self.pongs.append(f.pong.nonce)
        else:
            assert f.exec_id != 0, f
            if kind == "output":
                got = self.output_seen.get(f.exec_id, 0) + len(f.output.data)
                self.output_seen[f.exec_id] = got
                assert 1 <= len(f.output.data) <= 64 * 1024
                assert got <= self.credit_sent[f.exec_id], \
                    f"exec {f.exec_id}: {got} bytes beyond a credit of {self.credit_sent[f.exec_id]}"
            self.frames.setdefault(f.exec_id, []).append(f)
        return True

    def start(self, exec_id, argv, env=None, cwd="/", credit=1 << 20):
        self.credit_sent[exec_id] = credit
        self.send(pb.AgentFrame(exec_id=exec_id, start=pb.Start(
            argv=argv, env=BASE_ENV if env is None else env, cwd=cwd, credit=credit)))

    def credit(self, exec_id, n):
        self.credit_sent[exec_id] += n
        self.send(pb.AgentFrame(exec_id=exec_id, credit=pb.Credit(bytes=n)))

    def signal(self, exec_id, signo):
        self.send(pb.AgentFrame(exec_id=exec_id, signal=pb.Signal(signo=signo)))

    def exited(self, exec_id):
        for f in self.frames.get(exec_id, []):
            if f.WhichOneof("kind") == "exited":
                return f.exited
        return None

    def started(self, exec_id):
        for f in self.frames.get(exec_id, []):
            if f.WhichOneof("kind") == "started":
                return f.started.pid
        return None

    def output(self, exec_id, stream):
        return b"".join(f.output.data for f in self.frames.get(exec_id, [])
                        if f.WhichOneof("kind") == "output" and f.output.stream == stream)

    def wait(self, cond, timeout=10.0):
        deadline = time.monotonic() + timeout
        while not cond():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("timed out waiting")
            if not self.pump(left) and not cond():
                if time.monotonic() < deadline:
                    raise AssertionError("connection closed while waiting")

    def wait_exited(self, exec_id, timeout=10.0):
        self.wait(lambda: self.exited(exec_id) is not None, timeout)
        e = self.exited(exec_id)
        kinds = [f.WhichOneof("kind") for f in self.frames[exec_id]]
        assert kinds[-1] == "exited" and kinds.count("exited") == 1, kinds
        return e

    def run(self, exec_id, argv, **kw):
        self.start(exec_id, argv, **kw)
        e = self.wait_exited(exec_id)
        return e, self.output(exec_id, 1), self.output(exec_id, 2)

    def closed(self, timeout=5.0):
        """True when the spawner closes the connection within timeout (frames are skipped)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.read_frame(deadline - time.monotonic()) is None:
                    return True
            except socket.timeout:
                return False
            except ConnectionResetError:
                return True
        return False


class SpawnerCase(unittest.TestCase):
    """Starts compute-init with `role` on a fresh socket and accepts its first connection."""
    role = ["--spawner"]

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cs-spawner-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.path = os.path.join(self.dir, "s.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(8)
        self.addCleanup(self.listener.close)
        self.log_path = os.path.join(self.dir, "init.log")
        self.log = open(self.log_path, "wb")
        self.addCleanup(self.log.close)
        self.proc = subprocess.Popen([BIN, *self.role, "--socket", self.path],
                                     stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, start_new_session=True)
        self.addCleanup(self.stop)
        self.conn = self.accept()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def spawner_log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def accept(self, timeout=10.0):
        self.listener.settimeout(timeout)
        s, _ = self.listener.accept()
        self.addCleanup(s.close)
        conn = Conn(s)
        conn.wait(lambda: conn.hello is not None, timeout)
        self.assertEqual(conn.hello.protocol, 1)
        self.assertTrue(conn.hello.version.startswith("compute-init"))
        self.assertGreater(conn.hello.pid, 0)
        return conn


class SpawnerTest(SpawnerCase):
    # --- output, exit, errors --------------------------------------------------------------

    def test_echo_stdout_stderr_exit_code(self):
        c = self.conn
        e, out, err = c.run(1, [SH, "-c", "echo hi; echo oops >&2; exit 3"])
        self.assertEqual((out, err), (b"hi\n", b"oops\n"))
        self.assertEqual((e.exit_code, e.signal, e.start_error), (3, 0, ""))
        self.assertGreater(c.started(1), 0)
        kinds = [f.WhichOneof("kind") for f in c.frames[1]]
        self.assertEqual(kinds[0], "started")
        self.assertGreater(e.max_rss_kib, 0)

    def test_exit_by_signal(self):
        e, _, _ = self.conn.run(1, [SH, "-c", "kill -TERM $$"])
        self.assertEqual((e.exit_code, e.signal), (-1, signal.SIGTERM))
        e, _, _ = self.conn.run(2, [SH, "-c", "ulimit -c 0; kill -SEGV $$"])
        self.assertEqual((e.exit_code, e.signal, e.core_dumped), (-1, signal.SIGSEGV, False))

    def test_start_errors(self):
        c = self.conn
        plain = os.path.join(self.dir, "plain")
        with open(plain, "w") as f:
            f.write("#!/bin/sh\necho no\n")
        os.chmod(plain, 0o644)
        cases = [
            (1, ["no-such-command-x"], "/", 127, "no-such-command-x: command not found"),
            (2, ["/no/such/file"], "/", 127, "/no/such/file: No such file or directory"),
            (3, [plain], "/", 126, f"{plain}: Permission denied"),
            (4, ["true"], "/no/such/dir", 127,
             "cannot enter working directory /no/such/dir: No such file or directory"),
        ]
        for exec_id, argv, cwd, code, msg in cases:
            c.start(exec_id, argv, cwd=cwd)
        for exec_id, argv, cwd, code, msg in cases:
            e = c.wait_exited(exec_id)
            self.assertEqual((e.exit_code, e.signal, e.start_error), (code, 0, msg), argv)
            # Never started: no Started, no Output.
            self.assertEqual(len(c.frames[exec_id]), 1)
        # A long name is cut at 256 bytes on a character boundary.
        c.start(9, ["é" * 120])
        e = c.wait_exited(9)
        self.assertEqual(e.exit_code, 127)
        self.assertLessEqual(len(e.start_error.encode()), 256)
        self.assertTrue(e.start_error.startswith("éé"))

    def test_env_and_cwd(self):
        c = self.conn
        e, out, _ = c.run(1, ["env"], env=["FOO=bar baz", "PATH=/usr/bin:/bin"], cwd=self.dir)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(sorted(out.decode().splitlines()), ["FOO=bar baz", "PATH=/usr/bin:/bin"])
        e, out, _ = c.run(2, ["pwd"], cwd=self.dir)
        self.assertEqual(out.decode().strip(), self.dir)
        # argv[0] is looked up in the command's own PATH.
        bindir = os.path.join(self.dir, "bin")
        os.mkdir(bindir)
        tool = os.path.join(bindir, "mytool")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\necho mytool $1\n")
        os.chmod(tool, 0o755)
        e, out, _ = c.run(3, ["mytool", "x"], env=[f"PATH={bindir}:/usr/bin:/bin"])
        self.assertEqual((e.exit_code, out), (0, b"mytool x\n"))

    def test_big_start(self):
        # A Start near the protocol's 1 MiB of argv and env (it travels to the shepherd in a
        # memfd): every byte arrives.
        c = self.conn
        args = ["a" * 100000] * 9
        env = BASE_ENV + [f"V{i}={'e' * 10000}" for i in range(10)]
        e, out, _ = c.run(1, [SH, "-c", 'n=0; for a; do n=$((n + ${#a})); done; '
                              'echo $# $n ${#V9}', "sh", *args], env=env)
        self.assertEqual((e.exit_code, out), (0, b"9 900000 10000\n"))

    def test_no_fd_leaks_stdin_empty_signals_default(self):
        c = self.conn
        # Another exec running meanwhile: its pipes and control socket must not leak either.
        c.start(1, ["sleep", "30"])
        c.wait(lambda: c.started(1) is not None)
        e, out, _ = c.run(2, [SH, "-c", "ls /proc/self/fd; echo --; cat; "
                              "grep -E '^Sig(Blk|Ign)' /proc/self/status"])
        self.assertEqual(e.exit_code, 0)
        fds = sorted(int(x) for x in out.decode().split("--")[0].split())
        # 0, 1, 2 and ls's own directory fd.
        self.assertEqual(fds[:3], [0, 1, 2])
        self.assertLessEqual(len(fds), 4, out)
        self.assertIn("SigBlk:\t0000000000000000", out.decode())
        self.assertIn("SigIgn:\t0000000000000000", out.decode())
        c.signal(1, signal.SIGKILL)
        self.assertEqual(c.wait_exited(1).signal, signal.SIGKILL)

    def test_exec_is_its_own_session(self):
        # `kill 0` in one exec reaches its own process group only: not the spawner, its
        # shepherds or another exec. The spawner also survives signals sent to it directly.
        c = self.conn
        c.start(1, ["sleep", "1000"])
        c.wait(lambda: c.started(1) is not None)
        e, out, _ = c.run(2, [SH, "-c", "ps -o sid= -o pgid= -p $$; kill -TERM 0; sleep 5"])
        self.assertEqual(e.signal, signal.SIGTERM)
        sid, pgid = out.split()
        self.assertEqual(sid, pgid)
        self.assertEqual(int(sid), c.started(2))
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
            os.kill(self.proc.pid, sig)
        time.sleep(0.2)
        self.assertIsNone(self.proc.poll())
        self.assertTrue(alive(c.started(1)))
        self.assertEqual(c.run(3, ["true"])[0].exit_code, 0)
        c.signal(1, signal.SIGKILL)
        self.assertEqual(c.wait_exited(1).signal, signal.SIGKILL)

    def test_background_process_does_not_hold_the_exec(self):
        t0 = time.monotonic()
        e, out, _ = self.conn.run(1, [SH, "-c", "sleep 3 & echo hi"])
        self.assertEqual((e.exit_code, out), (0, b"hi\n"))
        self.assertLess(time.monotonic() - t0, 2.5)

    # --- flow control ----------------------------------------------------------------------

    def test_flow_control(self):
        c = self.conn
        total = 3 * 1024 * 1024
        c.start(1, [SH, "-c", f"head -c {total} /dev/zero; echo done >&2"], credit=1000)
        c.wait(lambda: c.output_seen.get(1, 0) == 1000)
        # Nothing beyond the credit (pump asserts it), and the command is blocked: no exit.
        time.sleep(0.5)
        while c.pump(0.1):
            pass
        self.assertEqual(c.output_seen[1], 1000)
        self.assertIsNone(c.exited(1))
        # Only a pipe's worth was written: the command blocks in write(2).
        pid = c.started(1)
        self.assertTrue(alive(pid))
        c.credit(1, 100000)
        c.wait(lambda: c.output_seen.get(1, 0) == 101000)
        self.assertIsNone(c.exited(1))
        for _ in range(total // (8 << 20) + 1):
            c.credit(1, 8 << 20)
        e = c.wait_exited(1, 30)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(len(c.output(1, 1)), total)
        self.assertEqual(c.output(1, 2), b"done\n")

    def test_agent_not_reading_bounds_the_spawner(self):
        # The agent grants a big credit and stops reading: the spawner's queue stops at its
        # bound (its RSS stays small, the command blocks), Pings are still taken up to the
        # hard bound, and everything arrives in order once the agent reads again.
        c = self.conn
        total = 32 << 20  # an unbounded queue would hold all of it: twice the RSS bound below
        c.start(1, [SH, "-c", f"head -c {total} /dev/zero"], credit=16 << 20)
        c.credit(1, 16 << 20)
        for i in range(100):
            c.send(pb.AgentFrame(ping=pb.Ping(nonce=i + 1)))
        time.sleep(1.5)
        with open(f"/proc/{self.proc.pid}/status") as f:
            rss_kib = int(next(line for line in f if line.startswith("VmRSS")).split()[1])
        self.assertLess(rss_kib, 16 << 10)
        self.assertTrue(alive(c.started(1)) or c.started(1) is None)
        e = c.wait_exited(1, 60)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(len(c.output(1, 1)), total)
        self.assertEqual(c.pongs, list(range(1, 101)))

    def test_exited_command_output_waits_for_credit(self):
        # The command exits at once, with more output in its pipe than the credit: the rest
        # is delivered when credit comes, even after the 200 ms grace.
        c = self.conn
        c.start(1, [SH, "-c", "head -c 50000 /dev/zero"], credit=100)
        c.wait(lambda: c.output_seen.get(1, 0) == 100)
        cpu0 = cpu_seconds(self.proc.pid)
        time.sleep(1.0)
        while c.pump(0.1):
            pass
        self.assertIsNone(c.exited(1))
        # Waiting for credit past the grace costs nothing (no busy loop).
        self.assertLess(cpu_seconds(self.proc.pid) - cpu0, 0.1)
        c.credit(1, 100000)
        e = c.wait_exited(1)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(len(c.output(1, 1)), 50000)

    # --- signals and the tree --------------------------------------------------------------

    TREE = ("setsid sleep 1001 & echo $!; (sleep 1002 & echo $!); "
            "sh -c 'sleep 1003 & echo $!'; echo $$; sleep 1004")

    def start_tree(self, exec_id, prefix=""):
        c = self.conn
        c.start(exec_id, [SH, "-c", prefix + self.TREE])
        c.wait(lambda: len(c.output(exec_id, 1).split()) == 4)
        pids = [int(x) for x in c.output(exec_id, 1).split()]
        for p in pids:
            self.assertTrue(alive(p), p)
        return pids

    def test_sigterm_reaches_the_whole_tree(self):
        pids = self.start_tree(1)
        self.conn.signal(1, signal.SIGTERM)
        e = self.conn.wait_exited(1)
        self.assertEqual(e.signal, signal.SIGTERM)
        self.assertEqual(wait_gone(pids), [])

    def test_sigkill_leaves_no_survivor(self):
        pids = self.start_tree(1, "trap '' TERM; ")
        self.conn.signal(1, signal.SIGTERM)
        time.sleep(0.3)
        for p in pids:
            self.assertTrue(alive(p), p)  # they ignore SIGTERM
        self.conn.signal(1, signal.SIGKILL)
        e = self.conn.wait_exited(1)
        self.assertEqual(e.signal, signal.SIGKILL)
        self.assertEqual(wait_gone(pids), [])

    def test_child_forked_after_the_sigterm_does_not_survive(self):
        # A shell whose TERM trap forks a child and exits: the child is born after the
        # SIGTERM's walk of the tree, so only the stop's end can take it (CI saw such a
        # `sleep` outlive a cancel). Without a stop, a background child is left running.
        c = self.conn
        c.start(1, [SH, "-c", "trap 'sleep 777 & echo $! > late; exit 3' TERM; echo ready; "
                              "while :; do sleep 0.05; done"], cwd=self.dir)
        c.wait(lambda: c.output(1, 1) == b"ready\n")
        c.signal(1, signal.SIGTERM)
        e = c.wait_exited(1)
        self.assertEqual(e.exit_code, 3)
        with open(os.path.join(self.dir, "late")) as f:
            late = int(f.read())
        self.assertEqual(wait_gone([late], 0.5), [])
        c.start(2, [SH, "-c", "sleep 778 & echo $!"])
        e = c.wait_exited(2)
        bg = int(c.output(2, 1))
        self.assertTrue(alive(bg), "a background child of an exec that was not stopped")
        os.kill(bg, signal.SIGKILL)

    def test_signal_right_after_start(self):
        # A cancel that follows the Start at once (before Started) still reaches the command.
        c = self.conn
        c.start(1, ["sleep", "1000"])
        c.signal(1, signal.SIGKILL)
        e = c.wait_exited(1)
        self.assertEqual(e.signal, signal.SIGKILL)
        self.assertEqual(wait_gone([c.started(1)]), [])
        # The id of an exec that ended may start another one.
        c.frames.pop(1)
        c.output_seen.pop(1, None)
        e, out, _ = c.run(1, ["echo", "again"])
        self.assertEqual((e.exit_code, out), (0, b"again\n"))

    def test_signal_unknown_exec_is_ignored(self):
        c = self.conn
        c.signal(77, signal.SIGKILL)
        c.send(pb.AgentFrame(exec_id=78, credit=pb.Credit(bytes=10)))
        c.send(pb.AgentFrame(ping=pb.Ping(nonce=5)))
        c.wait(lambda: 5 in c.pongs)
        self.assertEqual(c.run(1, ["true"])[0].exit_code, 0)

    # --- usage -----------------------------------------------------------------------------

    BURN = ("import os, time\n"
            "def burn(s):\n"
            "    t = time.process_time()\n"
            "    while time.process_time() - t < s: pass\n"
            "if os.fork() == 0:\n"
            "    burn({child}); os._exit(0)\n"
            "if os.fork() == 0:\n"
            "    os.setsid()\n"
            "    if os.fork() == 0: burn({orphan}); os._exit(0)\n"
            "    os._exit(0)\n"
            "burn({own})\n"
            "os.wait(); os.wait()\n"
            "time.sleep({orphan} * 3)\n"
            "t = os.times()\n"
            "print(t.user + t.children_user + t.system + t.children_system)\n")

    def test_cpu_of_two_concurrent_execs(self):
        """Each exec's user+system is its own tree's CPU, including an orphan the shepherd
        reaped (truth: the command's own os.times(), which counts what it waited for, plus
        the orphan's known burn)."""
        c = self.conn
        specs = {1: (0.6, 0.3, 0.3), 2: (1.2, 0.2, 0.4)}
        for exec_id, (own, child, orphan) in specs.items():
            code = self.BURN.format(own=own, child=child, orphan=orphan)
            c.start(exec_id, ["/usr/bin/python3", "-c", code])
        for exec_id, (own, child, orphan) in specs.items():
            e = c.wait_exited(exec_id, 60)
            self.assertEqual(e.exit_code, 0)
            reported = (e.user_us + e.system_us) / 1e6
            truth = float(c.output(exec_id, 1)) + orphan
            print(f"exec {exec_id}: reported {reported:.3f} s, truth {truth:.3f} s "
                  f"({100 * (reported - truth) / truth:+.1f} %)", file=sys.stderr)
            self.assertLess(abs(reported - truth), 0.05 * truth)

    def test_reused_shepherd_reports_each_exec_alone(self):
        # Shepherds serve one exec after another: the second exec's usage must not carry the
        # first one's CPU, nor its max RSS.
        c = self.conn
        code = ("import time\nb = bytearray(200 << 20)\nt = time.process_time()\n"
                "while time.process_time() - t < 0.5: pass\n")
        e1, _, _ = c.run(1, ["/usr/bin/python3", "-c", code])
        self.assertEqual(e1.exit_code, 0)
        self.assertGreater(e1.user_us + e1.system_us, 450000)
        self.assertGreater(e1.max_rss_kib, 200 << 10)
        for i in range(2, 6):
            e, _, _ = c.run(i, ["true"])
            self.assertLess(e.user_us + e.system_us, 100000, i)
            self.assertLess(e.max_rss_kib, 100 << 10, i)

    # --- connection ------------------------------------------------------------------------

    def test_connection_drop_kills_execs_and_reconnects(self):
        pids = self.start_tree(1)
        self.conn.sock.close()
        self.assertEqual(wait_gone(pids), [])
        c = self.accept()
        self.assertLessEqual(c.hello.running, 1)
        e, out, _ = c.run(1, ["echo", "again"])
        self.assertEqual((e.exit_code, out), (0, b"again\n"))

    def test_spawner_killed_mid_exec_kills_the_tree(self):
        pids = self.start_tree(1)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        self.assertEqual(wait_gone(pids), [])

    def assert_protocol_error(self, raw):
        c = self.conn
        c.start(1, ["sleep", "1000"])
        c.wait(lambda: c.started(1) is not None)
        pid = c.started(1)
        c.send_raw(raw)
        self.assertTrue(c.closed(), "the spawner kept the connection")
        self.assertEqual(wait_gone([pid]), [])
        self.conn = self.accept()
        self.assertEqual(self.conn.run(2, ["true"])[0].exit_code, 0)

    def test_garbage_frame_closes_the_connection(self):
        self.assert_protocol_error(struct.pack(">I", 5) + b"\xff\xff\xff\xff\xff")

    def test_4gb_prefix_closes_the_connection(self):
        self.assert_protocol_error(b"\xff\xff\xff\xff" + b"x" * 100)

    def test_duplicate_exec_id_closes_the_connection(self):
        f = pb.AgentFrame(exec_id=1, start=pb.Start(argv=["true"], cwd="/", credit=10))
        data = f.SerializeToString()
        self.assert_protocol_error(struct.pack(">I", len(data)) + data)

    def test_bad_field_closes_the_connection(self):
        f = pb.AgentFrame(exec_id=5, start=pb.Start(argv=["true"], cwd="relative", credit=10))
        data = f.SerializeToString()
        self.assert_protocol_error(struct.pack(">I", len(data)) + data)

    def test_many_concurrent_execs(self):
        c = self.conn
        n = 300
        for i in range(1, n + 1):
            c.start(i, ["echo", str(i)], credit=64)
        for i in range(1, n + 1):
            e = c.wait_exited(i, 60)
            self.assertEqual(e.exit_code, 0)
            self.assertEqual(c.output(i, 1), f"{i}\n".encode())

    def test_exec_cap(self):
        c = self.conn
        for i in range(1, 1025):
            c.start(i, ["sleep", "1000"], credit=64)
        c.wait(lambda: all(c.started(i) for i in range(1, 1025)), 120)
        c.start(2000, ["true"])
        e = c.wait_exited(2000)
        self.assertEqual((e.exit_code, e.start_error), (126, "too many commands running"))
        pids = [c.started(i) for i in range(1, 1025)]
        c.sock.close()
        self.assertEqual(wait_gone(pids, 60), [])


class InitRoleTest(SpawnerCase):
    """compute-init without --spawner (here not pid 1 but a subreaper): a killed spawner is
    restarted and connects again."""
    role = []

    def test_killed_spawner_restarts(self):
        first = self.conn.hello.pid
        self.assertNotEqual(first, self.proc.pid)
        self.assertEqual(self.conn.run(1, ["true"])[0].exit_code, 0)
        os.kill(first, signal.SIGKILL)
        c = self.accept()
        self.assertNotEqual(c.hello.pid, first)
        self.assertEqual(c.run(1, ["echo", "x"])[1], b"x\n")
        # The init survives other signals; SIGTERM (the runtime stopping the sandbox) ends it,
        # its spawner with it (PDEATHSIG), and so the running execs.
        for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGUSR1, signal.SIGPIPE):
            os.kill(self.proc.pid, sig)
        time.sleep(0.2)
        self.assertIsNone(self.proc.poll())
        c.start(2, ["sleep", "1000"])
        c.wait(lambda: c.started(2) is not None)
        os.kill(self.proc.pid, signal.SIGTERM)
        self.assertEqual(self.proc.wait(5), 0)
        self.assertTrue(c.closed())
        self.assertEqual(wait_gone([c.hello.pid, c.started(2)]), [])



class InstallTest(unittest.TestCase):
    """--install DEST: how a kube pod's init container puts compute-init into its emptyDir."""

    def test_install(self):
        with tempfile.TemporaryDirectory() as d:
            dest = os.path.join(d, "compute-init")
            p = subprocess.run([BIN, "--install", dest], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(os.stat(dest).st_mode & 0o7777, 0o555)
            with open(dest, "rb") as a, open(BIN, "rb") as b:
                self.assertEqual(a.read(), b.read())
            self.assertEqual(os.listdir(d), ["compute-init"])  # no temporary name left
            out = subprocess.run([dest, "--version"], capture_output=True, timeout=30)
            self.assertTrue(out.stdout.startswith(b"compute-init"))
            # A directory that is not there: status 1, a message, nothing made.
            bad = os.path.join(d, "missing", "compute-init")
            p = subprocess.run([BIN, "--install", bad], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"--install", p.stderr)
            self.assertEqual(os.listdir(d), ["compute-init"])


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
