"""computectl end to end: the README session, run with the real computectl binary against a
real compute-frontend backed by a real compute-nodeagent (local mode, runsc), both on free
loopback ports with temporary state.

Usage: test_computectl.py BUILD_DIR [unittest args]    (as root; /usr/bin/python3)"""
import base64
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent_fixture import AgentProcess, free_port, remove_cgroup  # noqa: E402
import testmain  # noqa: E402

BUILD_DIR = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build"
CTL = os.path.join(BUILD_DIR, "bin", "computectl")
FRONTEND = os.path.join(BUILD_DIR, "bin", "compute-frontend")
MIB = 1024 * 1024
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
COMMANDS = ["create", "describe", "destroy", "list", "exec", "cp", "ls", "version",
            "completion"]

# Everything started is stopped by these, in reverse order, whatever happens: after the tests,
# when setUpClass fails half-way, and on SIGTERM (ctest's timeout).
_cleanups = []


def run_cleanups():
    while _cleanups:
        fn = _cleanups.pop()
        try:
            fn()
        except Exception as e:  # keep cleaning up
            print(f"cleanup: {e!r}", file=sys.stderr)


class FrontendProcess:
    def __init__(self, agents, log_dir, *extra):
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, "frontend.log")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [FRONTEND, "--listen", self.address, "--agents", agents,
                 "--log-level", "debug", "--shutdown-grace-ms", "3000"] + list(extra),
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("frontend did not start:\n" + self.log())
                time.sleep(0.05)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""


def read_until(fd, needle, timeout):
    """Reads fd until needle shows up; returns all bytes read."""
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        buf += chunk
    return buf


def kv_lines(text):
    """describe's 'key: value' lines as a dict."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


class ComputectlTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-ctl-", dir="/tmp")
        _cleanups.append(lambda: shutil.rmtree(cls.tmp, ignore_errors=True))
        cls.agent = AgentProcess(BUILD_DIR)
        # runsc also makes cgroups in named hierarchies (e.g. /sys/fs/cgroup/systemd).
        _cleanups.append(lambda: remove_cgroup(cls.agent.cgroup_parent))
        _cleanups.append(cls.agent.cleanup)
        cls.frontend = FrontendProcess(cls.agent.address, cls.tmp)
        _cleanups.append(cls.frontend.stop)
        cls.wait_service()

    @classmethod
    def tearDownClass(cls):
        run_cleanups()

    @classmethod
    def wait_service(cls):
        """Until the frontend answers a real status for an unknown sandbox."""
        deadline = time.monotonic() + 60
        probe = str(uuid.uuid4())
        while True:
            p = subprocess.run([CTL, "--addr", cls.frontend.address, "--timeout", "5",
                                "describe", probe], capture_output=True, timeout=30)
            err = p.stderr.decode(errors="replace")
            if "NOT_FOUND" in err:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the frontend is not serving ComputeService: {err}\n"
                                   + cls.frontend.log()[-4000:])
            time.sleep(0.5)

    # --- helpers ---

    def ctl(self, *args, timeout=180, **kw):
        return subprocess.run([CTL, "--addr", self.frontend.address, *args],
                              capture_output=True, timeout=timeout, **kw)

    def explain(self, p):
        return (f"\n$ computectl {' '.join(p.args[3:])}\nexit {p.returncode}\n"
                f"stdout: {p.stdout[:2000]!r}\nstderr: {p.stderr[:2000]!r}\n"
                f"--- frontend log (tail) ---\n{self.frontend.log()[-3000:]}")

    def ok(self, *args, **kw):
        p = self.ctl(*args, **kw)
        self.assertEqual(p.returncode, 0, self.explain(p))
        return p

    def create(self):
        p = self.ok("create", "--tenant", str(uuid.uuid4()), "--session", str(uuid.uuid4()))
        sid = p.stdout.decode().strip()
        self.assertRegex(sid, UUID_RE)
        return sid

    # --- tests ---

    def test_help_and_usage_errors(self):
        for args in (["--help"], ["-h"]) + tuple([c, "--help"] for c in COMMANDS):
            p = subprocess.run([CTL, *args], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 0, args)
            self.assertIn(b"Usage: computectl", p.stdout, args)
            self.assertEqual(p.stderr, b"", args)
        for args in (["no-such-command"], [], ["--no-such-flag", "ls", "x"],
                     ["exec", "--bogus", "x", "true"], ["describe"], ["exec", "x"],
                     ["cp", "a", "b"], ["create", "--tenant", "t"],
                     ["create", "--tenant", "t", "--session", "s", "--memory", "12Q"],
                     ["list"], ["list", "--tenant", "t", "extra"],
                     ["list", "--tenant", "t", "--status", "sleeping"],
                     ["list", "--tenant", "t", "--page-size", "0"],
                     ["list", "--tenant", "t", "--page-size", "1001"]):
            p = subprocess.run([CTL, "--addr", self.frontend.address, *args],
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 125, (args, p.stderr))
            self.assertTrue(p.stderr.startswith(b"computectl: "), (args, p.stderr))
            self.assertEqual(p.stdout, b"", args)

    def test_errors_name_the_status(self):
        p = self.ctl("describe", "not-a-uuid")
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertTrue(p.stderr.startswith(b"computectl: INVALID_ARGUMENT: "), self.explain(p))
        p = self.ctl("describe", str(uuid.uuid4()))
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertTrue(p.stderr.startswith(b"computectl: NOT_FOUND: "), self.explain(p))
        p = subprocess.run([CTL, "--addr", f"127.0.0.1:{free_port()}", "--timeout", "5",
                            "describe", str(uuid.uuid4())], capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 125, p.stderr)
        self.assertTrue(p.stderr.startswith(b"computectl: UNAVAILABLE: "), p.stderr)

    def test_readme_session(self):
        sid = self.create()

        # A Python one-liner right after create (exec waits for the sandbox to be READY).
        p = self.ok("exec", sid, "--", "python3", "-c", "print(6*7)")
        self.assertEqual(p.stdout, b"42\n", self.explain(p))
        self.assertEqual(p.stderr, b"", self.explain(p))

        # The remote exit status is ours; '--' may be left out.
        p = self.ctl("exec", sid, "--", "sh", "-c", "exit 3")
        self.assertEqual(p.returncode, 3, self.explain(p))
        p = self.ok("exec", sid, "echo", "no", "dashes")
        self.assertEqual(p.stdout, b"no dashes\n")

        # stdout and stderr stay apart.
        p = self.ok("exec", "--env", "WHO=world", sid, "--", "sh", "-c",
                    'echo "to-out $WHO"; echo to-err >&2; echo more-out')
        self.assertEqual(p.stdout, b"to-out world\nmore-out\n", self.explain(p))
        self.assertEqual(p.stderr, b"to-err\n", self.explain(p))

        # A 40 MiB file in and back out, byte-exact (three 16 MiB calls each way).
        data = os.urandom(40 * MIB)
        src = os.path.join(self.tmp, "blob.bin")
        back = os.path.join(self.tmp, "blob.back")
        with open(src, "wb") as f:
            f.write(data)
        os.chmod(src, 0o640)
        p = self.ok("cp", src, f"{sid}:blob.bin")
        self.assertEqual(p.stderr, b"", "no progress bar when stderr is not a terminal")
        self.ok("cp", f"{sid}:blob.bin", back)
        with open(back, "rb") as f:
            self.assertTrue(f.read() == data, "the file came back different")
        self.assertEqual([n for n in os.listdir(self.tmp) if "computectl" in n], [],
                         "a temporary file was left behind")

        # A DST that is a FIFO (as /dev/null is a device) is written in place, not replaced.
        fifo = os.path.join(self.tmp, "fifo")
        os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        self.ok("cp", f"{sid}:blob.bin", fifo)
        reader.join(30)
        self.assertTrue(got and got[0] == data, "the FIFO's reader got other bytes")
        self.assertTrue(stat.S_ISFIFO(os.stat(fifo).st_mode), "the FIFO was replaced")

        # ls shows it with its size and mode.
        p = self.ok("ls", sid)
        lines = [ln for ln in p.stdout.decode().splitlines() if ln.endswith(" blob.bin")]
        self.assertEqual(len(lines), 1, self.explain(p))
        fields = lines[0].split()
        self.assertEqual(fields[0], "-rw-r-----", lines[0])
        self.assertEqual(int(fields[1]), 40 * MIB, lines[0])
        p = self.ok("--json", "ls", sid)
        entries = {e["path"]: e for e in json.loads(p.stdout)["entries"]}
        self.assertEqual(entries["blob.bin"]["size"], 40 * MIB)
        self.assertFalse(entries["blob.bin"]["is_dir"])

        # exec --json: one event per line, the completion last.
        p = self.ok("--json", "exec", sid, "--", "sh", "-c", "echo hi")
        events = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
        self.assertEqual(events[-1]["event"], "completed", events)
        self.assertEqual(events[-1]["exit_code"], 0, events)
        self.assertIn({"event": "stdout", "data": "aGkK"},
                      [{k: e[k] for k in ("event", "data")} for e in events[:-1]])
        # The events' base64 is strict RFC 4648 and joins to the output byte for byte (output
        # longer than the writer's 192-byte pieces, of a length that needs padding).
        p = self.ok("--json", "exec", sid, "--", "seq", "1", "400")
        events = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
        out = b"".join(base64.b64decode(e["data"], validate=True) for e in events
                       if e["event"] == "stdout")
        self.assertEqual(out, "".join(f"{i}\n" for i in range(1, 401)).encode())

        # describe: READY, and the Python run used some CPU.
        p = self.ok("describe", sid)
        info = kv_lines(p.stdout.decode())
        self.assertEqual(info["sandbox_id"], sid, self.explain(p))
        self.assertEqual(info["status"], "READY", self.explain(p))
        self.assertGreater(int(info["cpu_ms"]), 0, self.explain(p))
        p = self.ok("--json", "describe", sid)
        doc = json.loads(p.stdout)
        self.assertEqual(doc["sandbox_id"], sid)
        self.assertEqual(doc["status"], "READY")
        self.assertGreater(doc["usage"]["cpu_ms"], 0)
        self.assertRegex(doc["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

        # destroy prints the total usage; describe then says DESTROYED.
        p = self.ok("destroy", sid)
        self.assertGreater(int(kv_lines(p.stdout.decode())["cpu_ms"]), 0, self.explain(p))
        p = self.ok("describe", sid)
        self.assertEqual(kv_lines(p.stdout.decode())["status"], "DESTROYED", self.explain(p))

    def test_list_and_status_reason(self):
        tenant = str(uuid.uuid4())
        ids = {}
        for session in ("s0", "s1", "s2"):
            extra = ["--max-runtime", "2"] if session == "s2" else []
            p = self.ok("create", "--tenant", tenant, "--session", session, *extra)
            ids[session] = p.stdout.decode().strip()
        self.ok("exec", ids["s0"], "true")
        self.ok("destroy", ids["s1"])
        # s2 fails when its max_runtime passes; describe says why, in text and JSON.
        deadline = time.monotonic() + 60
        while True:
            info = kv_lines(self.ok("describe", ids["s2"]).stdout.decode())
            if info["status"] == "FAILED":
                break
            self.assertLess(time.monotonic(), deadline, info)
            time.sleep(0.3)
        self.assertEqual(info["status_reason"], "max_runtime of 2 s exceeded")
        doc = json.loads(self.ok("--json", "describe", ids["s2"]).stdout)
        self.assertEqual(doc["status_reason"], "max_runtime of 2 s exceeded")
        # A READY sandbox has no status_reason line (the README's session is unchanged), and
        # "" in JSON.
        p = self.ok("describe", ids["s0"])
        self.assertNotIn("status_reason", kv_lines(p.stdout.decode()))
        self.assertEqual(json.loads(self.ok("--json", "describe", ids["s0"]).stdout)
                         ["status_reason"], "")

        # The table: a header, then one row per sandbox, oldest first; pages fetched in turn.
        p = self.ok("list", "--tenant", tenant, "--page-size", "1")
        lines = p.stdout.decode().splitlines()
        self.assertEqual(lines[0].split()[:4], ["SANDBOX", "ID", "STATUS", "CREATED"],
                         self.explain(p))
        rows = [ln.split(None, 7) for ln in lines[1:]]
        self.assertEqual([r[0] for r in rows], [ids["s0"], ids["s1"], ids["s2"]],
                         self.explain(p))
        self.assertEqual([r[1] for r in rows], ["READY", "DESTROYED", "FAILED"])
        self.assertEqual([r[6] for r in rows], ["s0", "s1", "s2"])
        self.assertEqual(rows[0][7], "-")
        self.assertEqual(rows[2][7], "max_runtime of 2 s exceeded")
        self.assertRegex(rows[0][2], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

        # --json: the same, with limits and usage; the same field names as describe.
        doc = json.loads(self.ok("--json", "list", "--tenant", tenant, "--page-size", "2").stdout)
        self.assertFalse(doc["truncated"])
        got = {d["sandbox_id"]: d for d in doc["sandboxes"]}
        self.assertEqual(list(got), [ids["s0"], ids["s1"], ids["s2"]])
        s0, s1, s2 = (got[ids[s]] for s in ("s0", "s1", "s2"))
        self.assertEqual((s0["tenant_id"], s0["session_id"], s0["status"], s0["status_reason"]),
                         (tenant, "s0", "READY", ""))
        self.assertEqual(s0["limits"], {"cpu_millis": 1000, "memory_bytes": 1 << 30,
                                        "max_runtime_ms": 900000})
        self.assertGreater(s0["usage"]["cpu_ms"], 0)
        self.assertIsNone(s0["destroyed_at"])
        self.assertEqual(s1["status"], "DESTROYED")
        self.assertIsNotNone(s1["destroyed_at"])
        self.assertEqual((s2["status"], s2["status_reason"], s2["limits"]["max_runtime_ms"]),
                         ("FAILED", "max_runtime of 2 s exceeded", 2000))

        # --status and --limit.
        p = self.ok("list", "--tenant", tenant, "--status", "destroyed")
        self.assertEqual([ln.split()[0] for ln in p.stdout.decode().splitlines()[1:]],
                         [ids["s1"]])
        p = self.ok("--json", "list", "--tenant", tenant, "--status", "SANDBOX_STATUS_FAILED")
        self.assertEqual([d["sandbox_id"] for d in json.loads(p.stdout)["sandboxes"]],
                         [ids["s2"]])
        p = self.ok("list", "--tenant", tenant, "--limit", "2")
        lines = p.stdout.decode().splitlines()
        self.assertEqual([ln.split()[0] for ln in lines[1:3]], [ids["s0"], ids["s1"]])
        self.assertEqual(lines[3:], ["(truncated at --limit 2)"])
        doc = json.loads(self.ok("--json", "list", "--tenant", tenant, "--limit", "2").stdout)
        self.assertEqual((len(doc["sandboxes"]), doc["truncated"]), (2, True))
        doc = json.loads(self.ok("--json", "list", "--tenant", tenant, "--limit", "3").stdout)
        self.assertEqual((len(doc["sandboxes"]), doc["truncated"]), (3, False))
        # Another tenant's list is empty: the header only.
        p = self.ok("list", "--tenant", str(uuid.uuid4()))
        self.assertEqual(len(p.stdout.decode().splitlines()), 1)
        for sid in (ids["s0"], ids["s2"]):
            self.ok("destroy", sid)

    def test_progress_bar_on_a_terminal(self):
        sid = self.create()
        src = os.path.join(self.tmp, "small.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(3 * MIB))
        master, slave = pty.openpty()
        try:
            proc = subprocess.Popen([CTL, "--addr", self.frontend.address, "cp", src,
                                     f"{sid}:small.bin"], stdout=subprocess.DEVNULL, stderr=slave)
            os.close(slave)
            slave = -1
            out = read_until(master, b"\n", 120)
            self.assertEqual(proc.wait(timeout=120), 0, out)
        finally:
            if slave >= 0:
                os.close(slave)
            os.close(master)
        self.assertIn(b"100%", out)
        self.assertIn(b"3.0 MiB / 3.0 MiB", out)
        self.ok("destroy", sid)

    def test_ctrl_c_cancels_the_remote_command(self):
        sid = self.create()
        # `sleep & wait`, not a foreground `sleep`: a shell runs a trap only once its
        # foreground command has finished, so with `sleep 100` the trap would wait 100 s.
        script = 'trap "echo term > /workspace/t; exit 1" TERM; echo ready; sleep 100 & wait'
        proc = subprocess.Popen([CTL, "--addr", self.frontend.address, "exec", sid, "--",
                                 "sh", "-c", script],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out = read_until(proc.stdout.fileno(), b"ready\n", 120)
            self.assertEqual(out, b"ready\n")
            t0 = time.monotonic()
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=15)
            err = proc.stderr.read()
            self.assertEqual(rc, 130, err)
            self.assertLess(time.monotonic() - t0, 15)
            self.assertIn(b"interrupted", err)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()

        # The remote shell got SIGTERM and ran its trap.
        deadline = time.monotonic() + 15
        while True:
            p = self.ctl("exec", sid, "--", "cat", "/workspace/t")
            if p.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertEqual(p.stdout, b"term\n", self.explain(p))
        p = self.ok("cp", f"{sid}:t", "-")
        self.assertEqual(p.stdout, b"term\n")
        self.ok("destroy", sid)


def main():
    """Runs the tests of __main__ (this file's, or those of a file that borrows its fixtures
    and calls this), then the cleanups, also on SIGTERM."""
    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        testmain.main([sys.argv[0]] + sys.argv[2:])
    finally:
        run_cleanups()


if __name__ == "__main__":
    main()
