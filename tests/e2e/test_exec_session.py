"""End to end, ExecSession (docs/api.md "ExecSession"): interactive commands with stdin, a
terminal, resize and signals, through the real frontend and node agent (runsc, the sandbox's
spawner). A REPL over stdin, EOF, a terminal shell (its tty, its size after a resize), SIGINT
by message and by ^C typed, a cancelled session leaving no process, every bad sequence, and
100 MiB through stdin into a slow reader with the agent's and frontend's memory bounded.

The idle limit (an agent with --session-idle-s 3) and the refusal without the spawner
(--spawner=off) run against agents of their own.

Usage: test_exec_session.py BUILD_DIR [unittest args]"""
import os
import queue
import re
import sys
import threading
import time
import unittest
import uuid

import grpc

from agent_fixture import AgentProcess
import testmain
from compute_client import Compute
from frontend_fixture import FrontendProcess

BUILD_DIR = sys.argv[1]
WAIT = 120  # seconds: a guard against a hang, never a measure
SANITIZED = os.environ.get("CS_SANITIZED", "") in ("1", "ON", "TRUE", "true")


class Frontend(FrontendProcess):
    def __init__(self, agent):
        self.agent = agent
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", self.agent.address, "--agent-poll-ms", "200"]


class Session:
    """One ExecSession: messages go through a queue (the request iterator), events are read on
    a thread of their own."""

    def __init__(self, c, sid, command, *args, tty=False, rows=0, cols=0, env=None,
                 timeout_s=0, first=None, requests=None):
        pb = self.pb = c.pb
        self.q = queue.Queue()
        self.out, self.err = bytearray(), bytearray()
        self.done, self.error, self.finished = None, None, False
        self.cv = threading.Condition()
        if first is None:
            cmd = pb.ExecCommandRequest(sandbox_id=sid, command=command, args=list(args),
                                        env=env or {})
            if timeout_s:
                cmd.timeout.seconds = timeout_s
            first = pb.ExecSessionRequest(start=pb.ExecSessionStart(command=cmd, tty=tty))
            if rows or cols:
                first.start.size.rows, first.start.size.cols = rows, cols
        self.q.put(first)
        self.call = c.Session(requests if requests is not None else self._requests(),
                              timeout=600)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _requests(self):
        while True:
            m = self.q.get()
            if m is None:
                return
            yield m

    def _read(self):
        try:
            for ev in self.call:
                with self.cv:
                    kind = ev.WhichOneof("event")
                    if kind == "stdout":
                        self.out += ev.stdout.data
                    elif kind == "stderr":
                        self.err += ev.stderr.data
                    else:
                        self.done = ev.completed
                    self.cv.notify_all()
        except grpc.RpcError as e:
            self.error = e
        finally:
            with self.cv:
                self.finished = True
                self.cv.notify_all()

    def stdin(self, data):
        self.q.put(self.pb.ExecSessionRequest(stdin=data))

    def close_stdin(self):
        self.q.put(self.pb.ExecSessionRequest(close_stdin=True))

    def resize(self, rows, cols):
        self.q.put(self.pb.ExecSessionRequest(resize=self.pb.TerminalSize(rows=rows, cols=cols)))

    def signal(self, signo):
        self.q.put(self.pb.ExecSessionRequest(signal=signo))

    def send(self, msg):
        self.q.put(msg)

    def half_close(self):
        self.q.put(None)

    def wait_out(self, pattern, since=0):
        """Waits until stdout (from byte `since`) matches the regex; returns the match."""
        rx = re.compile(pattern)
        with self.cv:
            self.cv.wait_for(lambda: rx.search(bytes(self.out[since:])) or self.finished,
                             WAIT)
            m = rx.search(bytes(self.out[since:]))
        if not m:
            raise AssertionError(f"no {pattern!r} in the output: {bytes(self.out)!r} "
                                 f"(error {self.error})")
        return m

    def finish(self):
        """Waits for the end: (stdout, stderr, ExecCompleted or None, RpcError or None)."""
        self.reader.join(WAIT)
        if self.reader.is_alive():
            self.call.cancel()
            raise AssertionError(f"the session did not end: {bytes(self.out)!r}")
        self.half_close()
        return bytes(self.out), bytes(self.err), self.done, self.error


class StackCase(unittest.TestCase):
    """A node agent (with agent_args) and a frontend, a sandbox ready."""
    agent_args = ()

    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR, *cls.agent_args)
        try:
            cls.fe = Frontend(cls.agent)
        except BaseException:
            cls.agent.cleanup()
            raise
        try:
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            pb = cls.c.pb
            cls.c.Session = cls.c.channel.stream_stream(
                "/compute.v1.ComputeService/ExecSession",
                request_serializer=pb.ExecSessionRequest.SerializeToString,
                response_deserializer=pb.ExecEvent.FromString)
            cls.sid = cls.c.create("tenant-" + uuid.uuid4().hex[:6], "s").sandbox_id
            out, err, done, _ = cls.c.exec(cls.sid, "true")
            assert done.exit_code == 0, err
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        if hasattr(cls, "c"):
            cls.c.close()
        rc = cls.fe.stop()
        log = cls.fe.log()
        arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")

    def session(self, command, *args, **kw):
        return Session(self.c, self.sid, command, *args, **kw)


class ExecSessionTest(StackCase):
    def sh(self, script):
        out, err, done, _ = self.c.exec(self.sid, "sh", "-c", script)
        self.assertEqual(done.exit_code, 0, err)
        return out.decode()

    def no_process(self, needle):
        """No process whose command line holds needle is left in the sandbox (ps there)."""
        ps = self.sh("ps -e -o pid=,args=")
        left = [line for line in ps.splitlines() if needle in line and "ps -e" not in line]
        self.assertEqual(left, [], ps)

    def assert_invalid(self, s, text):
        out, err, done, error = s.finish()
        self.assertIsNotNone(error, f"no error; completed {done}")
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT, error.details())
        self.assertIn(text, error.details())
        self.assertIsNone(done)

    # --- stdin ---------------------------------------------------------------------------

    def test_repl_over_stdin(self):
        s = self.session("python3", "-i", "-q", "-u")
        s.stdin(b"x = 6 * 7\n")
        s.stdin(b"print('answer', x)\n")
        s.wait_out(rb"answer 42")
        s.stdin(b"print('again', x + 1)\n")
        s.wait_out(rb"again 43")
        s.close_stdin()
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0, err)
        self.assertFalse(done.cancelled)

    def test_line_round_trip_through_cat(self):
        # Each line sent comes back before the next goes: its round trip (stdin to stdout
        # through the frontend, the agent and the sandbox's spawner) is printed, not asserted
        # (docs/performance.md, "ExecSession").
        s = self.session("cat")
        times = []
        for i in range(100):
            line = f"line {i}\n".encode()
            mark = len(s.out)
            t0 = time.monotonic()
            s.stdin(line)
            s.wait_out(re.escape(line), since=mark)
            times.append(time.monotonic() - t0)
        s.close_stdin()
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(out, b"".join(f"line {i}\n".encode() for i in range(100)))
        times.sort()
        print(f"\none line through cat in a session: p50 {times[50] * 1000:.2f} ms, "
              f"p90 {times[90] * 1000:.2f} ms (100 round trips)", file=sys.stderr)

    def test_eof_ends_cat(self):
        s = self.session("cat")
        s.stdin(b"hello ")
        s.stdin(b"world\n")
        s.wait_out(rb"hello world\n")
        s.close_stdin()
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(out, b"hello world\n")
        self.assertEqual(done.exit_code, 0, err)
        self.assertGreater(done.wall_time.ToNanoseconds(), 0)

    def test_half_close_is_eof(self):
        s = self.session("wc", "-c")
        s.stdin(b"12345")
        s.half_close()
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(out.split(), [b"5"])
        self.assertEqual(done.exit_code, 0)

    def test_command_that_does_not_read(self):
        # Stdin sent to a command that never reads it and exits: the session still ends.
        s = self.session("sh", "-c", "exec 0<&-; echo bye")
        s.stdin(b"x" * 65536)
        s.wait_out(rb"bye")
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0)

    def test_non_tty_signal_reaches_the_command(self):
        s = self.session("sleep", "300")
        time.sleep(0.5)  # not a measure: the start may come after the signal otherwise
        s.signal(15)
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.signal, 15)
        self.assertEqual(done.exit_code, 128 + 15)

    # --- terminal ------------------------------------------------------------------------

    def test_terminal_shell_tty_size_resize(self):
        s = self.session("bash", "--norc", "--noprofile", "-i", tty=True, rows=30, cols=100)
        s.stdin(b"tty; stty size; echo TERM=$TERM\n")
        s.wait_out(rb"/dev/pts/\d+")
        s.wait_out(rb"30 100")
        # The prompt first: readline reads the size and writes it back as it starts a line
        # (rltty.c, set_winsize), and a resize between the two would be undone, as on Linux.
        s.wait_out(rb"TERM=xterm-256color\r\n.*# ")
        s.resize(50, 132)
        mark = len(s.out)
        s.stdin(b"stty size\n")
        s.wait_out(rb"50 132", since=mark)
        s.stdin(b"exit 3\n")
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 3)
        self.assertEqual(err, b"")  # a terminal's stderr is its output

    def test_resize_signals_the_program(self):
        # Linux's tty layer sends SIGWINCH on a resize, gVisor's does not: the spawner does,
        # or a full-screen program would never redraw.
        s = self.session("sh", "-c", "trap 'stty size' WINCH; echo ready; "
                         "while :; do sleep 0.05; done", tty=True, rows=30, cols=100)
        s.wait_out(rb"ready")
        s.resize(50, 132)
        s.wait_out(rb"50 132")
        mark = len(s.out)
        s.resize(50, 132)  # the same size: no signal, as on Linux
        s.resize(40, 90)
        s.wait_out(rb"40 90", since=mark)
        self.assertNotIn(b"50 132", bytes(s.out[mark:]))
        s.signal(9)
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.signal, 9)

    def test_terminal_default_size(self):
        s = self.session("stty", "size", tty=True)
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertIn(b"24 80", out)

    def test_signal_message_ends_foreground_sleep_not_shell(self):
        s = self.session("bash", "--norc", "--noprofile", "-i", tty=True)
        s.stdin(b"sleep 300\n")
        time.sleep(1)  # not a measure: the sleep must be in the foreground first
        s.signal(2)  # SIGINT to the terminal's foreground process group
        # (bash drops the rest of a command list whose job a SIGINT ended: asked apart)
        s.stdin(b"echo slept=$?\n")
        s.wait_out(rb"slept=130")
        s.stdin(b"echo alive\n")
        s.wait_out(rb"[\r\n]alive\r\n")
        s.stdin(b"exit\n")
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0)
        self.assertFalse(done.cancelled)

    def test_ctrl_c_typed_ends_foreground_sleep_not_shell(self):
        s = self.session("bash", "--norc", "--noprofile", "-i", tty=True)
        s.stdin(b"sleep 300\n")
        time.sleep(1)  # not a measure: the sleep must be in the foreground first
        s.stdin(b"\x03")
        s.stdin(b"echo slept=$?\n")
        s.wait_out(rb"slept=130")
        s.stdin(b"echo alive\n")
        s.wait_out(rb"[\r\n]alive\r\n")
        s.stdin(b"exit 0\n")
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0)

    # --- cancel --------------------------------------------------------------------------

    def test_cancel_leaves_no_process(self):
        n = str(uuid.uuid4().int % 900000 + 100000)  # a sleep this session alone runs
        s = self.session("sh", "-c", f"sleep 7{n} & sleep 8{n} & cat")
        s.stdin(b"ping\n")
        s.wait_out(rb"ping")
        ps = self.sh("ps -e -o args=")
        self.assertIn(f"sleep 7{n}", ps)
        self.assertIn(f"sleep 8{n}", ps)
        s.call.cancel()
        out, err, done, error = s.finish()
        self.assertEqual(error.code(), grpc.StatusCode.CANCELLED)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            ps = self.sh("ps -e -o args=")
            if f"sleep 7{n}" not in ps and f"sleep 8{n}" not in ps and "cat" not in ps:
                break
            time.sleep(0.2)
        self.no_process(f"sleep 7{n}")
        self.no_process(f"sleep 8{n}")
        self.no_process("cat")

    # --- bad sequences -------------------------------------------------------------------

    def test_first_message_not_start(self):
        s = Session(self.c, self.sid, "", first=self.c.pb.ExecSessionRequest(stdin=b"x"))
        self.assert_invalid(s, "first message of an ExecSession must be start")

    def test_stream_ends_before_start(self):
        s = Session(self.c, self.sid, "", requests=iter(()), first=self.c.pb.ExecSessionRequest())
        self.assert_invalid(s, "ended before its start")

    def test_bad_start_is_execs_error(self):
        s = self.session("")
        out, err, done, error = s.finish()
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)
        s = Session(self.c, "not-a-uuid", "true")
        out, err, done, error = s.finish()
        self.assertEqual(error.code(), grpc.StatusCode.INVALID_ARGUMENT)

    def started_sleep(self, tag, **kw):
        s = self.session("sh", "-c", f"echo started; exec sleep 3{tag}", **kw)
        s.wait_out(rb"started")
        return s

    def assert_ended(self, tag):
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and f"sleep 3{tag}" in self.sh("ps -e -o args="):
            time.sleep(0.2)
        self.no_process(f"sleep 3{tag}")

    def test_second_start(self):
        s = self.started_sleep("01")
        s.send(self.c.pb.ExecSessionRequest(start=self.c.pb.ExecSessionStart()))
        self.assert_invalid(s, "a second start")
        self.assert_ended("01")

    def test_resize_without_tty(self):
        s = self.started_sleep("02")
        s.resize(10, 10)
        self.assert_invalid(s, "resize in a session without a terminal")
        self.assert_ended("02")

    def test_bad_signal_numbers(self):
        for n, tag in ((0, "03"), (65, "04"), (-9, "05")):
            s = self.started_sleep(tag)
            s.signal(n)
            self.assert_invalid(s, "not a signal number")
            self.assert_ended(tag)

    def test_stdin_after_close_stdin(self):
        s = self.started_sleep("06")
        s.close_stdin()
        s.stdin(b"late")
        self.assert_invalid(s, "stdin after close_stdin")
        self.assert_ended("06")

    def test_oversized_stdin_chunk_and_terminal(self):
        s = self.started_sleep("07")
        s.stdin(b"x" * 65537)
        self.assert_invalid(s, "at most 65536 bytes")
        self.assert_ended("07")
        s = self.started_sleep("08", tty=True)
        s.resize(0, 80)
        self.assert_invalid(s, "rows and cols must be 1..4096")
        self.assert_ended("08")
        s = self.session("true", tty=True, rows=5000, cols=80)
        self.assert_invalid(s, "at most 4096")

    def test_size_without_tty(self):
        s = self.session("true", rows=10, cols=10)
        self.assert_invalid(s, "for terminal sessions")

    # --- flow control --------------------------------------------------------------------

    def test_100_mib_through_stdin_slow_reader(self):
        total = 100 << 20
        chunk = b"z" * 65536
        reader = ("import sys, time\n"
                  "n = 0\n"
                  "while True:\n"
                  "    b = sys.stdin.buffer.read1(65536)\n"
                  "    if not b:\n"
                  "        break\n"
                  "    n += len(b)\n"
                  "    time.sleep(0.0005)\n"
                  "print(n)\n")
        pb = self.c.pb

        def requests():
            cmd = pb.ExecCommandRequest(sandbox_id=self.sid, command="python3",
                                        args=["-c", reader])
            yield pb.ExecSessionRequest(start=pb.ExecSessionStart(command=cmd))
            for _ in range(total // len(chunk)):
                yield pb.ExecSessionRequest(stdin=chunk)
            yield pb.ExecSessionRequest(close_stdin=True)

        agent0, fe0 = self.agent.rss_peak_kib(), self.fe_rss_peak_kib()
        s = Session(self.c, self.sid, "", requests=requests(),
                    first=pb.ExecSessionRequest())
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0, err)
        self.assertEqual(int(out), total)
        agent1, fe1 = self.agent.rss_peak_kib(), self.fe_rss_peak_kib()
        print(f"\n100 MiB through stdin: agent VmHWM {agent0} -> {agent1} KiB, "
              f"frontend VmHWM {fe0} -> {fe1} KiB", file=sys.stderr)
        # Bounded: far below the 100 MiB that went through (each holds a window of a few
        # hundred KiB per session, plus gRPC's per-stream buffers). ASan's quarantine alone
        # is larger.
        if SANITIZED:
            return
        self.assertLess(agent1 - agent0, 32 << 10)
        self.assertLess(fe1 - fe0, 32 << 10)

    def fe_rss_peak_kib(self):
        with open(f"/proc/{self.fe.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0


class IdleLimitTest(StackCase):
    agent_args = ("--session-idle-s", "3")

    def test_idle_session_ends_as_a_timeout(self):
        s = self.session("cat")
        s.stdin(b"hi\n")
        s.wait_out(rb"hi")
        out, err, done, error = s.finish()  # nothing more: the idle limit ends it
        self.assertIsNone(error)
        self.assertTrue(done.timed_out, done)
        self.assertEqual(done.exit_code, -1)
        self.assertFalse(done.cancelled)

    def test_activity_keeps_it(self):
        s = self.session("cat")
        for i in range(10):  # 2 s of input, a line every 0.2 s: never idle for 3 s
            s.stdin(f"{i}\n".encode())
            s.wait_out(f"{i}\n".encode())
            time.sleep(0.2)
        s.close_stdin()
        out, err, done, error = s.finish()
        self.assertIsNone(error)
        self.assertEqual(done.exit_code, 0)
        self.assertFalse(done.timed_out)


class SpawnerOffTest(StackCase):
    """Without the sandbox's spawner, sessions are refused (docs/api.md: runsc exec has no
    stdin to feed and no terminal here); ExecCommand still works."""
    agent_args = ("--spawner=off",)

    def test_session_refused_exec_command_works(self):
        s = self.session("cat")
        out, err, done, error = s.finish()
        self.assertIsNotNone(error)
        self.assertEqual(error.code(), grpc.StatusCode.FAILED_PRECONDITION, error.details())
        self.assertIn("interactive sessions need the sandbox's spawner", error.details())
        out, err, done, _ = self.c.exec(self.sid, "echo", "ok")
        self.assertEqual((out, done.exit_code), (b"ok\n", 0))


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
