"""compute-init's spawner role on the host, interactive execs (ExecSession's path;
proto/spawner/v1/spawner.proto "Stdin"): the test speaks compute.spawner.v1 as the agent
would (test_spawner.py's Conn). Stdin through a pipe with its window and the StdinCredit
granted back as the command reads, EOF, a command that closed its stdin, a terminal (its
name, size, TERM, resize, ^C typed and SIGINT to its foreground process group, close_stdin as
^D), and the protocol errors of the new frames.

Usage: test_spawner_input.py BUILD_DIR"""
import socket
import sys

import testmain
from test_spawner import SH, SpawnerCase, pb

WINDOW = 256 * 1024


class InputConn:
    """Stdin on a test_spawner.Conn within the window: what was sent, what came back."""

    def __init__(self, conn, exec_id):
        self.c, self.id = conn, exec_id
        self.sent = 0

    def granted(self):
        return sum(f.stdin_credit.bytes for f in self.c.frames.get(self.id, [])
                   if f.WhichOneof("kind") == "stdin_credit")

    def room(self):
        return WINDOW + self.granted() - self.sent

    def write(self, data, timeout=20.0):
        """Sends data in frames of at most 64 KiB, waiting for credit as the agent does."""
        while data:
            if self.room() == 0:
                self.c.wait(lambda: self.room() > 0, timeout)
            n = min(len(data), 64 * 1024, self.room())
            self.c.send(pb.AgentFrame(exec_id=self.id, stdin=pb.Stdin(data=data[:n])))
            self.sent += n
            data = data[n:]

    def close(self):
        self.c.send(pb.AgentFrame(exec_id=self.id, close_stdin=pb.CloseStdin()))

    def resize(self, rows, cols):
        self.c.send(pb.AgentFrame(exec_id=self.id, resize=pb.Resize(rows=rows, cols=cols)))


class SpawnerInputTest(SpawnerCase):
    def start_input(self, exec_id, argv, **kw):
        c = self.conn
        c.credit_sent[exec_id] = 1 << 20
        c.send(pb.AgentFrame(exec_id=exec_id, start=pb.Start(
            argv=argv, env=["PATH=/usr/local/bin:/usr/bin:/bin"], cwd="/", credit=1 << 20,
            **kw)))
        c.wait(lambda: c.started(exec_id) is not None)
        return InputConn(c, exec_id)

    # --- a pipe ------------------------------------------------------------------------

    def test_cat_echoes_stdin_and_exits_at_eof(self):
        i = self.start_input(1, ["cat"], stdin=True)
        i.write(b"hello ")
        i.write(b"world\n")
        i.close()
        e = self.conn.wait_exited(1)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(self.conn.output(1, 1), b"hello world\n")
        self.assertEqual(i.granted(), i.sent)  # all of it taken by the command

    def test_megabytes_within_the_window(self):
        i = self.start_input(2, ["wc", "-c"], stdin=True)
        i.write(b"y" * (4 << 20))
        i.close()
        e = self.conn.wait_exited(2, timeout=60)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(int(self.conn.output(2, 1)), 4 << 20)

    def test_window_held_while_the_command_does_not_read(self):
        c = self.conn
        i = self.start_input(3, [SH, "-c", "sleep 30"], stdin=True)
        i.write(b"a" * 65536)  # fills the pipe (64 KiB)
        c.wait(lambda: i.granted() == 65536)
        i.write(b"b" * WINDOW)  # the window, held by the spawner
        self.assertFalse(c.pump(0.5) and i.granted() > 65536)
        self.assertEqual(i.room(), 0)
        # One byte beyond it is a protocol error: the connection ends.
        c.send(pb.AgentFrame(exec_id=3, stdin=pb.Stdin(data=b"c")))
        self.assertTrue(c.closed())

    def test_command_that_closed_its_stdin_gets_it_dropped(self):
        i = self.start_input(4, [SH, "-c", "exec 0<&-; sleep 0.5; echo done"], stdin=True)
        i.write(b"z" * (1 << 20))  # credit keeps coming back: nothing waits on it
        e = self.conn.wait_exited(4)
        self.assertEqual(e.exit_code, 0)
        self.assertEqual(self.conn.output(4, 1), b"done\n")

    def test_stdin_after_close_is_a_protocol_error(self):
        i = self.start_input(5, [SH, "-c", "sleep 30"], stdin=True)
        i.close()
        i.write(b"late")
        self.assertTrue(self.conn.closed())

    def test_stdin_for_an_exec_without_stdin_is_a_protocol_error(self):
        c = self.conn
        c.start(6, [SH, "-c", "sleep 30"])
        c.wait(lambda: c.started(6) is not None)
        c.send(pb.AgentFrame(exec_id=6, stdin=pb.Stdin(data=b"x")))
        self.assertTrue(c.closed())

    def test_resize_without_a_terminal_is_a_protocol_error(self):
        i = self.start_input(7, [SH, "-c", "sleep 30"], stdin=True)
        i.resize(10, 10)
        self.assertTrue(self.conn.closed())

    def test_bad_frames_end_the_connection(self):
        c = self.conn
        for frame in (pb.AgentFrame(exec_id=8, start=pb.Start(argv=["true"], cwd="/", credit=1,
                                                             rows=10, cols=10)),
                      pb.AgentFrame(exec_id=8, stdin=pb.Stdin(data=b"")),
                      pb.AgentFrame(exec_id=8, resize=pb.Resize(rows=0, cols=10))):
            c.send(frame)
            self.assertTrue(c.closed(), frame)
            c = self.conn = self.accept()

    # --- a terminal --------------------------------------------------------------------

    def test_terminal_name_size_term_no_stderr(self):
        self.start_input(10, [SH, "-c", "tty; stty size; echo TERM=$TERM; echo err >&2"],
                         tty=True, rows=33, cols=77)
        e = self.conn.wait_exited(10)
        out = self.conn.output(10, 1)
        self.assertEqual(e.exit_code, 0, out)
        self.assertRegex(out, rb"/dev/pts/\d+\r\n33 77\r\nTERM=xterm-256color\r\nerr\r\n")
        self.assertEqual(self.conn.output(10, 2), b"")

    def test_term_from_env_is_kept(self):
        c = self.conn
        c.credit_sent[11] = 1 << 20
        c.send(pb.AgentFrame(exec_id=11, start=pb.Start(
            argv=[SH, "-c", "echo TERM=$TERM"], env=["TERM=dumb"], cwd="/", credit=1 << 20,
            tty=True)))
        c.wait_exited(11)
        self.assertIn(b"TERM=dumb\r\n", c.output(11, 1))

    def test_resize(self):
        c = self.conn
        i = self.start_input(12, [SH, "-c", "read x; stty size"], tty=True, rows=24, cols=80)
        i.resize(40, 100)
        i.write(b"\n")
        c.wait_exited(12)
        self.assertIn(b"40 100\r\n", c.output(12, 1))

    def test_ctrl_c_typed_and_sigint_to_the_foreground(self):
        c = self.conn
        i = self.start_input(13, [SH, "-c", "echo ready; exec sleep 30"], tty=True)
        c.wait(lambda: b"ready" in c.output(13, 1))
        i.write(b"\x03")
        e = c.wait_exited(13)
        self.assertEqual(e.signal, 2)
        i = self.start_input(14, [SH, "-c", "echo ready; exec sleep 30"], tty=True)
        c.wait(lambda: b"ready" in c.output(14, 1))
        c.send(pb.AgentFrame(exec_id=14, signal=pb.Signal(signo=2, foreground=True)))
        e = c.wait_exited(14)
        self.assertEqual(e.signal, 2)

    def test_close_stdin_is_the_terminals_eof(self):
        c = self.conn
        i = self.start_input(15, ["cat"], tty=True)
        i.write(b"abc\n")
        c.wait(lambda: c.output(15, 1).count(b"abc") == 2)  # the echo, then cat's
        i.close()
        e = c.wait_exited(15)
        self.assertEqual(e.exit_code, 0)


if __name__ == "__main__":
    try:
        socket.AF_UNIX
    except AttributeError:
        sys.exit(77)
    testmain.main(sys.argv[:1] + sys.argv[2:])
