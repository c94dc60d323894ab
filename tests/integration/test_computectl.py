"""computectl end to end: the README session, run with the real computectl binary against a
real compute-frontend backed by a real compute-nodeagent (local mode, runsc), both on free
loopback ports with temporary state.

Usage: test_computectl.py BUILD_DIR [unittest args]    (as root; /usr/bin/python3)"""
import base64
import hashlib
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


class ServiceTestCase(unittest.TestCase):
    """A frontend and an agent (started with AGENT_ARGS) for the class's tests, and helpers."""
    AGENT_ARGS = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-ctl-", dir="/tmp")
        _cleanups.append(lambda: shutil.rmtree(cls.tmp, ignore_errors=True))
        cls.agent = AgentProcess(BUILD_DIR, *cls.AGENT_ARGS)
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

    def assert_start_errors(self, sid):
        """A command that cannot be started: 127/126 and a shell's message, no runtime text."""
        for cmd, code, msg in (
                (["nonexistent-cmd"], 127, b"nonexistent-cmd: command not found\n"),
                (["/no/such/file"], 127, b"/no/such/file: No such file or directory\n"),
                (["/etc/passwd"], 126, b"/etc/passwd: Permission denied\n"),
                (["/tmp"], 126, b"/tmp: Permission denied\n")):
            p = self.ctl("exec", sid, "--", *cmd)
            self.assertEqual((p.returncode, p.stdout, p.stderr), (code, b"", msg),
                             self.explain(p))
            p = self.ctl("--json", "exec", sid, "--", *cmd)
            events = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
            self.assertEqual(p.returncode, code, self.explain(p))
            self.assertEqual(events[-1]["exit_code"], code, events)
            self.assertEqual([base64.b64decode(e["data"]) for e in events
                              if e["event"] == "stderr"], [msg], events)
        p = self.ctl("exec", "--cwd", "/no/such/dir", sid, "--", "true")
        self.assertEqual((p.returncode, p.stderr),
                         (127, b"cannot enter working directory /no/such/dir: "
                               b"No such file or directory\n"), self.explain(p))
        # The command's own statuses pass through, 125, 126 and 127 too.
        for code in (1, 125, 126, 127, 128):
            p = self.ctl("exec", sid, "--", "sh", "-c", f"exit {code}")
            self.assertEqual(p.returncode, code, self.explain(p))


class ComputectlTest(ServiceTestCase):
    # --- tests ---

    def test_help_and_usage_errors(self):
        for args in (["--help"], ["-h"], ["help"]) + tuple([c, "--help"] for c in COMMANDS) \
                + tuple(["help", c] for c in COMMANDS):
            p = subprocess.run([CTL, *args], capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 0, args)
            self.assertIn(b"Usage: computectl", p.stdout, args)
            self.assertEqual(p.stderr, b"", args)
            # Fits a terminal of 80 columns, no line with a trailing space.
            for line in p.stdout.decode().splitlines():
                self.assertLessEqual(len(line), 80, (args, line))
                self.assertEqual(line, line.rstrip(), (args, line))
        self.assertEqual(subprocess.run([CTL, "help", "exec"], capture_output=True).stdout,
                         subprocess.run([CTL, "exec", "--help"], capture_output=True).stdout)
        p = subprocess.run([CTL, "--help"], capture_output=True, timeout=30)
        self.assertIn(b"\nExamples:\n  SB=$(computectl create --tenant acme --session demo)\n",
                      p.stdout)
        sid = str(uuid.uuid4())
        for args in (["no-such-command"], [], ["--no-such-flag", "ls", "x"],
                     ["exec", "--bogus", "x", "true"], ["describe"], ["exec", "x"],
                     ["cp", "a", "b"], ["create", "--tenant", "t"],
                     ["create", "--tenant", "t", "--session", "s", "--memory", "12Q"],
                     ["create", "--tenant", "t", "--session", "s", "--egress", "closed"],
                     ["list"], ["list", "--tenant", "t", "extra"],
                     ["list", "--tenant", "t", "--status", "sleeping"],
                     ["list", "--tenant", "t", "--page-size", "0"],
                     ["list", "--tenant", "t", "--page-size", "1001"],
                     ["help", "nope"], ["help", "exec", "cp"],
                     ["exec", sid, "-w", "/tmp", "pwd"], ["exec", sid, "--json", "true"],
                     ["cp", "a", sid], ["cp", f"{sid}:a", f"{sid}:b"]):
            p = subprocess.run([CTL, "--addr", self.frontend.address, *args],
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 125, (args, p.stderr))
            self.assertTrue(p.stderr.startswith(b"computectl: "), (args, p.stderr))
            self.assertEqual(p.stdout, b"", args)

    def test_usage_errors_say_what_to_do(self):
        sid = str(uuid.uuid4())
        for args, msg in (
                # An exec option after the ID would run as the remote command ("-w: command
                # not found", 127): refused, before any call.
                (["exec", sid, "-w", "/tmp", "pwd"],
                 "'-w' after the sandbox ID would be the remote command: exec's options go "
                 "before the ID"),
                (["exec", sid, "--json", "true"], "'--json' after the sandbox ID"),
                # A sandbox ID without ':' is a local file name.
                (["cp", "hello.txt", sid], f"'{sid}' is a sandbox ID without ':': write '{sid}:'"),
                (["cp", sid, "out.txt"], f"'{sid}' is a sandbox ID without ':'"),
                (["cp", f"{sid}:a", f"{sid}:b"], "SRC and DST are both ID:PATH"),
                (["create", "--tenant", "t"], "create: --session is required (e.g. create "),
                (["create", "--session", "s"], "create: --tenant is required"),
                (["create", "-t", "t", "-s", "s", "--egress", "closed"],
                 "create: --egress: 'closed' is not one of none, allowlist, open"),
                (["help", "nope"], "help: unknown command 'nope'")):
            p = self.ctl(*args)
            self.assertEqual(p.returncode, 125, self.explain(p))
            self.assertIn(msg, p.stderr.decode(), self.explain(p))
            self.assertEqual(p.stdout, b"", self.explain(p))
        # With '--', a remote command that starts with '-' is passed as is (and not found).
        sid = self.create()
        p = self.ctl("exec", sid, "--", "-x")
        self.assertEqual((p.returncode, p.stderr), (127, b"-x: command not found\n"),
                         self.explain(p))
        self.ok("destroy", sid)

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
        # The hint names the address tried, and how to give another.
        self.assertIn(b"computectl: no connection to 127.0.0.1:", p.stderr)
        self.assertIn(b"(--addr or COMPUTE_ADDR to use another)", p.stderr)

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
        for key, session in (("s0", "s0"), ("s1", "s1-a-longer-session"), ("s2", "s2")):
            extra = ["--max-runtime", "2"] if session == "s2" else []
            p = self.ok("create", "--tenant", tenant, "--session", session, *extra)
            ids[key] = p.stdout.decode().strip()
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
        self.assertEqual([r[6] for r in rows], ["s0", "s1-a-longer-session", "s2"])
        # SESSION is as wide as its longest value in the page: REASON starts in one column on
        # every line (the default page holds 100).
        p = self.ok("list", "--tenant", tenant)
        lines = p.stdout.decode().splitlines()
        at = lines[0].index("REASON")
        self.assertEqual([ln[at - 2:at] for ln in lines[1:]], ["  "] * 3, self.explain(p))
        self.assertEqual([ln[at:] for ln in lines[1:]],
                         ["-", "-", "max_runtime of 2 s exceeded"], self.explain(p))
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

    def test_network_options(self):
        """create --egress/--allow-domain/--allow-cidr reach the server (which checks the
        entries and names the one at fault); describe and list show the policy in force."""
        tenant = str(uuid.uuid4())
        none = {"egress": "NONE", "allow_domains": [], "allow_cidrs": []}
        for args, says in (
                # Lists alone ask for allowlist: the server's complaint is the entry, not the mode.
                (["--allow-domain", "pypi.org", "--allow-domain", "*.*.x"],
                 "INVALID_ARGUMENT: network.allow_domains[1] '*.*.x': '*' only as a whole "
                 "leading label"),
                (["--allow-cidr", "10.0.0.1/8"],
                 "INVALID_ARGUMENT: network.allow_cidrs[0] '10.0.0.1/8': host bits set (the "
                 "network is 10.0.0.0/8)"),
                (["--egress", "OPEN", "--allow-cidr", "192.0.2.0/24"], "(egress is open)")):
            p = self.ctl("create", "--tenant", tenant, "--session", "bad", *args)
            self.assertEqual(p.returncode, 125, self.explain(p))
            self.assertIn(says, p.stderr.decode(), self.explain(p))
        sid = self.ok("create", "--tenant", tenant, "--session", "none", "--egress",
                      "none").stdout.decode().strip()
        info = kv_lines(self.ok("describe", sid).stdout.decode())
        self.assertEqual(info["egress"], "NONE")
        self.assertNotIn("allow_domains", info)
        self.assertEqual(json.loads(self.ok("--json", "describe", sid).stdout)["network"], none)
        listed = json.loads(self.ok("--json", "list", "--tenant", tenant).stdout)["sandboxes"]
        self.assertEqual([(d["sandbox_id"], d["network"]) for d in listed], [(sid, none)])
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

    def test_version(self):
        p = subprocess.run([CTL, "--version"], capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, rb"^computectl \d+\.\d+\.\d+\n$")
        version = p.stdout.split()[1].decode()
        p = subprocess.run([CTL, "version"], capture_output=True, timeout=30)
        self.assertEqual(p.stdout.decode().splitlines()[0], f"client: computectl {version}")
        self.assertIn("server: unknown", p.stdout.decode())
        p = subprocess.run([CTL, "version", "--json"], capture_output=True, timeout=30)
        self.assertEqual(json.loads(p.stdout),
                         {"client_version": version, "server_version": None})

    def complete(self, shell, words, cword):
        """The words that `shell`'s completion of `computectl completion SHELL` offers."""
        if shell == "bash":
            script = ('source <("$CTL" completion bash) || exit 9; COMP_WORDS=("$@"); '
                      'COMP_CWORD=$CWORD; _computectl; printf "%s\\n" "${COMPREPLY[@]}"')
            argv = ["bash", "-c", script, "bash", *words]
        else:
            # compadd and _files stubbed: they print what they were given (compadd filters by
            # the prefix itself in real zsh).
            script = ('compdef() { :; }; compadd() { [ "$1" = -- ] && shift; '
                      'printf "%s\\n" "$@"; }; _files() { echo FILES; }; '
                      'source <("$CTL" completion zsh) || exit 9; CURRENT=$((CWORD + 1)); '
                      'words=("$@"); _computectl; :')
            argv = ["zsh", "-f", "-c", script, "zsh", *words]
        p = subprocess.run(argv, capture_output=True, timeout=30, text=True,
                           env={**os.environ, "CTL": CTL, "CWORD": str(cword)})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        got = set(p.stdout.split())
        if shell == "zsh":  # as compadd would: only the words with the typed prefix
            got = {w for w in got if w == "FILES" or w.startswith(words[cword])}
        return got

    def test_completion(self):
        commands = set(COMMANDS)
        tls = {"--tls", "--tls-ca", "--tls-cert", "--tls-key", "--tls-server-name"}
        self.assertIsNotNone(shutil.which("zsh"), "zsh is missing (scripts/lib.sh installs it)")
        for shell in ("bash", "zsh"):
            p = subprocess.run(["bash" if shell == "bash" else "zsh", "-n", "/dev/stdin"],
                               input=subprocess.run([CTL, "completion", shell],
                                                    capture_output=True).stdout,
                               capture_output=True)
            self.assertEqual(p.returncode, 0, (shell, p.stderr))
            c = lambda *w: self.complete(shell, ["computectl", *w], len(w))  # noqa: E731
            self.assertEqual(c(""), commands, shell)
            self.assertEqual(c("de"), {"describe", "destroy"}, shell)
            self.assertEqual(c("--"), {"--help", "--version", "--addr", "--json", "--timeout"} | tls)
            self.assertEqual(c("--addr", "x", "l"), {"list", "ls"}, shell)
            self.assertEqual(c("--addr", ""), set(), shell)  # a value: not completed
            self.assertEqual(c("list", "--"), {"--help", "--tenant", "--status", "--limit",
                                               "--page-size", "--addr", "--json", "--timeout"} | tls)
            self.assertEqual(c("describe", "--json", "--t"), {"--timeout"} | tls, shell)
            self.assertEqual(c("exec", "--t"), {"--timeout", "--tty"} | tls, shell)  # exec's own, once
            self.assertEqual(c("exec", "-e", ""), set(), shell)
            # After exec's ID, the words are the remote command's.
            self.assertEqual(c("exec", "SB", "--"), set(), shell)
            self.assertEqual(c("exec", "SB", "ls", "--"), set(), shell)
            self.assertEqual(c("completion", ""), {"bash", "zsh"}, shell)
            self.assertEqual(c("cp", "-r", "--q"), {"--quiet"}, shell)
        self.assertIn(self.tmp, self.complete("bash", ["computectl", "cp", self.tmp], 2))
        self.assertEqual(self.complete("zsh", ["computectl", "cp", ""], 2), {"FILES"})

    def test_man_page(self):
        page = os.path.join(BUILD_DIR, "man", "computectl.1")
        self.assertTrue(os.path.exists(page), f"{page}: not built (help2man)")
        p = subprocess.run(["man", "-l", page], capture_output=True, timeout=60,
                           env={**os.environ, "MANPAGER": "cat", "MANWIDTH": "100",
                                "MAN_KEEP_FORMATTING": "0"})
        self.assertEqual(p.returncode, 0, p.stderr)
        text = re.sub(r".\x08", "", p.stdout.decode())
        for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "COMMANDS"):
            self.assertRegex(text, rf"(?m)^{heading}$", text[:3000])
        self.assertRegex(text, r"(?m)^\s+Exit status:$")
        self.assertRegex(text, r"(?m)^\s+125\s+computectl's own error")
        for name in COMMANDS:
            self.assertRegex(text, rf"(?m)^\s+{name}\b", name)
        self.assertIn("computectl [GLOBAL OPTION]... exec [OPTION]... ID [--] COMMAND [ARG]...",
                      text[text.index("\nCOMMANDS\n"):])
        self.assertIn("--recursive", text)
        # The examples one a line, as in --help (not filled into a paragraph).
        self.assertRegex(text, r"(?m)^EXAMPLES$")
        self.assertRegex(text, r"(?m)^\s+computectl ls -r \$SB$")
        self.assertRegex(text, r"(?m)^\s+computectl destroy \$SB$")

    def test_global_options_after_the_command(self):
        sid = self.create()
        addr = self.frontend.address
        p = subprocess.run([CTL, "describe", sid, "--json", "--addr", addr],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["sandbox_id"], sid)
        p = subprocess.run([CTL, "describe", "--addr=" + addr, "--timeout", "20s", sid, "--json"],
                           capture_output=True, timeout=60)
        self.assertEqual(json.loads(p.stdout)["sandbox_id"], sid, p.stderr)
        # exec: before its ID; everything after the ID is the remote command's, untouched.
        p = subprocess.run([CTL, "exec", "--addr", addr, "--json", sid, "--", "echo", "--json",
                            "--addr", "x", "--", "-h"], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        events = [json.loads(ln) for ln in p.stdout.decode().splitlines()]
        self.assertEqual(b"".join(base64.b64decode(e["data"]) for e in events
                                  if e["event"] == "stdout"), b"--json --addr x -- -h\n")
        p = subprocess.run([CTL, "exec", "--addr", addr, sid, "echo", "--json"],
                           capture_output=True, timeout=60)
        self.assertEqual(p.stdout, b"--json\n", p.stderr)
        # exec's own --timeout is the command's, not the call's.
        p = subprocess.run([CTL, "exec", "--addr", addr, "--timeout", "1", sid, "sleep", "5"],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 124, p.stderr)
        p = subprocess.run([CTL, "list", "--tenant", "nobody-" + sid, "--json", "--addr", addr],
                           capture_output=True, timeout=60)
        self.assertEqual(json.loads(p.stdout)["sandboxes"], [], p.stderr)
        # Unknown options are still refused, after the command too.
        p = subprocess.run([CTL, "describe", sid, "--jsn", "--addr", addr],
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 125)
        self.assertIn(b"unknown option '--jsn'", p.stderr)
        self.ok("destroy", sid)

    def test_exec_exit_codes(self):
        sid = self.create()
        self.assert_start_errors(sid)
        self.assertIn("via spawner", [ln for ln in self.agent.log().splitlines()
                                      if "exec nonexistent-cmd:" in ln][-1])
        # computectl's own failures: 125, whatever the command would have done.
        for args in (["exec", sid], ["exec", "--bogus", sid, "true"],
                     ["exec", str(uuid.uuid4()), "true"], ["exec", "not-a-uuid", "true"]):
            p = self.ctl(*args)
            self.assertEqual(p.returncode, 125, self.explain(p))
        p = subprocess.run([CTL, "--addr", f"127.0.0.1:{free_port()}", "--timeout", "5",
                            "exec", sid, "true"], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 125, p.stderr)
        self.ok("destroy", sid)

    def test_stdin_is_not_dropped_silently(self):
        sid = self.create()
        warning = b"computectl: exec: stdin is not forwarded"
        p = self.ctl("exec", sid, "--", "cat", input=b"hello\n")
        self.assertEqual(p.returncode, 0, self.explain(p))
        self.assertEqual(p.stdout, b"")
        self.assertTrue(p.stderr.startswith(warning), self.explain(p))
        self.assertEqual(p.stderr.count(b"\n"), 1, "warned once")
        src = os.path.join(self.tmp, "stdin.txt")
        with open(src, "wb") as f:
            f.write(b"data\n")
        with open(src, "rb") as f:
            p = self.ctl("exec", sid, "--", "true", stdin=f)
        self.assertTrue(p.stderr.startswith(warning), self.explain(p))
        # Nothing to say: /dev/null, an empty pipe, an empty file.
        for stdin in (subprocess.DEVNULL, None):
            p = self.ctl("exec", sid, "--", "true", stdin=stdin,
                         **({"input": b""} if stdin is None else {}))
            self.assertEqual((p.returncode, p.stderr), (0, b""), self.explain(p))
        open(src, "wb").close()
        with open(src, "rb") as f:
            p = self.ctl("exec", sid, "--", "true", stdin=f)
        self.assertEqual(p.stderr, b"", self.explain(p))
        self.ok("destroy", sid)

    def test_json_field_names(self):
        tenant = str(uuid.uuid4())
        p = self.ok("--json", "create", "--tenant", tenant, "--session", "s")
        created = json.loads(p.stdout)
        sid = created["sandbox_id"]
        self.assertEqual(set(created), {"sandbox_id", "status", "created_at"})
        self.ok("exec", sid, "true")
        usage_keys = set(json.loads(self.ok("--json", "describe", sid).stdout)["usage"])
        described = json.loads(self.ok("describe", sid, "--json").stdout)
        self.assertEqual(set(described), {"sandbox_id", "status", "status_reason", "created_at",
                                          "uptime_ms", "network", "usage"})
        self.assertEqual(set(described["network"]), {"egress", "allow_domains", "allow_cidrs"})
        listed = json.loads(self.ok("list", "--tenant", tenant, "--json").stdout)
        self.assertEqual(set(listed), {"sandboxes", "truncated"})
        entry = listed["sandboxes"][0]
        self.assertTrue({"sandbox_id", "status", "status_reason", "created_at", "uptime_ms",
                         "network", "usage"} <= set(entry), entry)
        self.assertEqual(entry["network"], described["network"])
        self.assertEqual(set(entry["usage"]), usage_keys)
        events = [json.loads(ln) for ln in
                  self.ok("exec", "--json", sid, "true").stdout.decode().splitlines()]
        self.assertEqual(set(events[-1]["usage"]), usage_keys)
        ls = json.loads(self.ok("ls", sid, "--json").stdout)
        self.assertEqual(set(ls), {"entries", "truncated"})
        destroyed = json.loads(self.ok("destroy", sid, "--json").stdout)
        self.assertEqual(set(destroyed), {"sandbox_id", "status", "usage"})
        self.assertEqual((destroyed["sandbox_id"], destroyed["status"]), (sid, "DESTROYED"))
        self.assertEqual(set(destroyed["usage"]), usage_keys)

    def tree(self, root):
        """{relative path: (kind, mode, content)} of a local tree (symlinks not followed)."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(root):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                rel = os.path.relpath(path, root)
                if stat.S_ISDIR(st.st_mode):
                    out[rel] = ("dir", stat.S_IMODE(st.st_mode), None)
                elif stat.S_ISREG(st.st_mode):
                    with open(path, "rb") as f:
                        out[rel] = ("file", stat.S_IMODE(st.st_mode), f.read())
                else:
                    out[rel] = ("other", stat.S_IMODE(st.st_mode), None)
        return out

    def test_cp_recursive(self):
        sid = self.create()
        src = os.path.join(self.tmp, "tree")
        big = os.urandom(17 * MIB + 5)  # two calls each way
        layout = {"a.txt": (0o640, b"alpha\n"), "sub/b.bin": (0o755, big),
                  "sub/deeper/c": (0o600, b""), "sub/deeper/d e": (0o644, b"spaces\n")}
        for rel, (mode, data) in layout.items():
            os.makedirs(os.path.dirname(os.path.join(src, rel)), exist_ok=True)
            with open(os.path.join(src, rel), "wb") as f:
                f.write(data)
            os.chmod(os.path.join(src, rel), mode)
        os.makedirs(os.path.join(src, "empty"))
        os.chmod(os.path.join(src, "empty"), 0o700)
        os.chmod(os.path.join(src, "sub", "deeper"), 0o750)

        # Up: DST does not exist, so it becomes the copy.
        p = self.ok("--json", "cp", "-r", src, f"{sid}:up")
        self.assertEqual(json.loads(p.stdout), {
            "source": src, "destination": f"{sid}:up", "bytes": len(big) + 13,
            "files": 4, "directories": 3, "skipped": 0})
        p = self.ok("exec", sid, "--", "sh", "-c",
                    "cd /workspace/up && find . -mindepth 1 | sort | "
                    "while read -r f; do echo \"$(stat -c '%F %a %s' \"$f\") $f\"; done")
        listing = {ln.split(" ./")[1]: ln.split(" ./")[0] for ln in p.stdout.decode().splitlines()}
        self.assertEqual(set(listing), {"a.txt", "empty", "sub", "sub/b.bin", "sub/deeper",
                                        "sub/deeper/c", "sub/deeper/d e"}, listing)
        for rel, (mode, data) in layout.items():
            self.assertEqual(listing[rel], f"regular file {mode:o} {len(data)}"
                             .replace("regular file", "regular empty file" if not data
                                      else "regular file"), rel)
        self.assertTrue(listing["empty"].startswith("directory 700 "), listing)
        self.assertTrue(listing["sub/deeper"].startswith("directory 750 "), listing)
        # Into an existing directory: under the source's name.
        self.ok("cp", "-r", src, f"{sid}:up")
        self.ok("exec", sid, "test", "-f", "/workspace/up/tree/sub/b.bin")

        # Down, with a umask of 0 so that the modes come back as they are.
        back = os.path.join(self.tmp, "back")
        p = self.ctl("--json", "cp", "-r", f"{sid}:up", back, preexec_fn=lambda: os.umask(0))
        self.assertEqual(p.returncode, 0, self.explain(p))
        self.assertEqual(json.loads(p.stdout)["files"], 8)
        want = self.tree(src)
        got = self.tree(back)
        nested = {k[len("tree/"):]: v for k, v in got.items() if k.startswith("tree/")}
        self.assertEqual({k: v for k, v in got.items() if not k.startswith("tree")}, want)
        self.assertEqual(nested, want)
        self.assertEqual([n for n in os.listdir(back) if "computectl" in n], [])
        # Into an existing local directory: under the remote directory's name; the
        # workspace's root: its entries.
        os.makedirs(os.path.join(self.tmp, "into"))
        self.ok("cp", "-r", f"{sid}:up/sub/deeper", os.path.join(self.tmp, "into"))
        self.assertEqual(sorted(os.listdir(os.path.join(self.tmp, "into", "deeper"))),
                         ["c", "d e"])
        root = os.path.join(self.tmp, "root")
        self.ok("cp", "-r", f"{sid}:", root)
        self.assertTrue(os.path.isfile(os.path.join(root, "up", "tree", "a.txt")))

        # A sandbox's symlinks lead nowhere on the host: one out of the workspace is
        # refused by the server and skipped, one to a directory is skipped, nothing is
        # written outside the destination and no symlink is made.
        self.ok("exec", sid, "--", "sh", "-c",
                "mkdir -p /workspace/evil/d && ln -s /etc/passwd /workspace/evil/passwd && "
                "ln -s /etc /workspace/evil/etc && ln -s d /workspace/evil/dlink && "
                "ln -s ../../../../../../tmp /workspace/evil/up && echo ok > /workspace/evil/f")
        dst = os.path.join(self.tmp, "evil")
        p = self.ctl("cp", "-r", f"{sid}:evil", dst)
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertIn(b"skipped", p.stderr)
        got = self.tree(dst)
        self.assertEqual({k: v[0] for k, v in got.items()}, {"d": "dir", "f": "file"}, p.stderr)
        self.assertEqual(got["f"][2], b"ok\n")
        self.assertEqual(p.stderr.count(b"skipped '"), 4, p.stderr)
        # A local symlink in an uploaded tree is not followed.
        os.symlink("/etc/passwd", os.path.join(src, "link"))
        p = self.ctl("cp", "-r", src, f"{sid}:withlink")
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertIn(b"a symlink (not followed, not copied)", p.stderr)
        p = self.ctl("exec", sid, "test", "-e", "/workspace/withlink/link")
        self.assertEqual(p.returncode, 1, self.explain(p))
        self.ok("exec", sid, "test", "-f", "/workspace/withlink/a.txt")
        # A source with no name of its own (".") copies its entries; a '..' in the remote
        # path is refused before anything is made.
        self.ok("cp", "-r", ".", f"{sid}:dot", cwd=os.path.join(src, "sub"))
        self.ok("exec", sid, "test", "-f", "/workspace/dot/b.bin")
        p = self.ctl("cp", "-r", src, f"{sid}:x/../../y")
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertIn(b"a '..' in the remote path", p.stderr)
        self.ok("destroy", sid)

    def test_cp_and_a_remote_directory(self):
        sid = self.create()
        src = os.path.join(self.tmp, "into-dir.txt")
        with open(src, "wb") as f:
            f.write(b"into the directory\n")
        self.ok("exec", sid, "mkdir", "-p", "d")
        # As cp(1): a DST that is a directory there gets the file under its own name.
        self.ok("cp", src, f"{sid}:d")
        p = self.ok("exec", sid, "cat", "d/into-dir.txt")
        self.assertEqual(p.stdout, b"into the directory\n", self.explain(p))
        # From stdin there is no name to give it.
        p = self.ctl("cp", "-", f"{sid}:d", input=b"x")
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertIn(f"'d' is a directory: name the file ({sid}:d/NAME)".encode(), p.stderr)
        # A directory down without -r: how to copy one, and no temporary file left.
        out = os.path.join(self.tmp, "dir-down")
        os.mkdir(out)
        for dst in (out, "-"):
            p = self.ctl("cp", f"{sid}:d", dst)
            self.assertEqual(p.returncode, 125, self.explain(p))
            self.assertEqual(p.stderr, b"computectl: FAILED_PRECONDITION: 'd' is a directory "
                                       b"(cp -r copies a directory)\n", self.explain(p))
        self.assertEqual(os.listdir(out), [])
        self.ok("destroy", sid)

    def test_sandbox_names_never_reach_the_terminal_as_controls(self):
        """A file name made in the sandbox with an escape sequence (ESC, and U+009B, a CSI
        to many terminals) is listed by ls and shown by cp -r's progress without them."""
        sid = self.create()
        self.ok("exec", sid, "--", "sh", "-c",
                "mkdir d && printf x > \"d/$(printf 'a\\033]0;pwned\\007b\\302\\2332J')\"")
        p = self.ok("ls", sid, "d")
        self.assertNotIn(b"\x1b", p.stdout)
        self.assertNotIn(b"\xc2\x9b", p.stdout)
        self.assertIn(b"a?]0;pwned?b??2J", p.stdout)
        master, slave = pty.openpty()
        try:
            dst = os.path.join(self.tmp, "names")
            proc = subprocess.Popen([CTL, "--addr", self.frontend.address, "cp", "-r",
                                     f"{sid}:d", dst], stdout=subprocess.DEVNULL, stderr=slave)
            os.close(slave)
            slave = -1
            out = read_until(master, b"\n", 120)
            self.assertEqual(proc.wait(timeout=120), 0, out)
        finally:
            if slave >= 0:
                os.close(slave)
            os.close(master)
        # The progress line's own "\r\033[K" is the only escape it holds.
        self.assertNotIn(b"\x1b]", out)
        self.assertNotIn(b"\xc2\x9b", out)
        self.assertIn(b"pwned", out)
        self.ok("destroy", sid)

    def test_cp_recursive_refuses_hostile_names(self):
        """A server that lists names with '/' or '..' gets nothing written for them."""
        sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
        from compute.v1 import compute_pb2 as pb  # noqa: E402 (generated at build time)
        import grpc
        from concurrent import futures

        reads = []

        def list_files(req, ctx):
            if req.path in (".", ""):
                return pb.ListFilesResponse(entries=[pb.FileEntry(path=BAD[0], mode=0o644,
                                                                  size=3)])
            return pb.ListFilesResponse()

        def read_file(req, ctx):
            reads.append(req.path)
            return pb.ReadFileResponse(data=b"bad", total_size=3, eof=True)

        handler = grpc.method_handlers_generic_handler("compute.v1.ComputeService", {
            "ListFiles": grpc.unary_unary_rpc_method_handler(
                list_files, request_deserializer=pb.ListFilesRequest.FromString,
                response_serializer=pb.ListFilesResponse.SerializeToString),
            "ReadFile": grpc.unary_unary_rpc_method_handler(
                read_file, request_deserializer=pb.ReadFileRequest.FromString,
                response_serializer=pb.ReadFileResponse.SerializeToString)})
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((handler,))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            for bad in ("../escape", "/tmp/abs", "a/b", "..", ".", ""):
                BAD = [bad]  # noqa: F841 (read by list_files)
                dst = os.path.join(self.tmp, "hostile")
                shutil.rmtree(dst, ignore_errors=True)
                before = set(os.listdir(self.tmp))
                p = subprocess.run([CTL, "--addr", f"127.0.0.1:{port}", "cp", "-r",
                                    f"{uuid.uuid4()}:", dst], capture_output=True, timeout=60)
                self.assertEqual(p.returncode, 125, (bad, p.stderr))
                self.assertIn(b"not a plain name, refused", p.stderr, bad)
                self.assertEqual(os.listdir(dst), [], bad)
                self.assertEqual(set(os.listdir(self.tmp)) - before, {"hostile"}, bad)
            self.assertEqual(reads, [])
        finally:
            server.stop(None)

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

    def test_exec_stdin(self):
        """exec -i forwards stdin (ExecSession): data, EOF, 2 MiB whole, the exit status."""
        sid = self.create()
        p = self.ctl("exec", "-i", sid, "--", "cat", input=b"hello\nworld\n")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (0, b"hello\nworld\n", b""),
                         self.explain(p))
        p = self.ctl("exec", "-i", sid, "--", "sh", "-c", "read x; exit $x", input=b"7\n")
        self.assertEqual(p.returncode, 7, self.explain(p))
        data = os.urandom(2 * MIB)
        p = self.ctl("exec", "-i", sid, "--", "sha256sum", input=data)
        self.assertEqual(p.returncode, 0, self.explain(p))
        self.assertEqual(p.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())
        # An empty stdin is an immediate EOF.
        p = self.ctl("exec", "-i", sid, "--", "wc", "-c", stdin=subprocess.DEVNULL)
        self.assertEqual((p.returncode, p.stdout.strip()), (0, b"0"), self.explain(p))
        # -it needs a terminal on stdin.
        p = self.ctl("exec", "-it", sid, "--", "true", input=b"")
        self.assertEqual(p.returncode, 125, self.explain(p))
        self.assertIn(b"needs stdin to be a terminal", p.stderr)
        self.ok("destroy", sid)

    def test_exec_it_in_tmux(self):
        """computectl exec -it as a person uses it: a shell in a tmux pane, typed into
        (send-keys) and read (capture-pane): its terminal and size, a resize, Ctrl-C ending a
        foreground sleep but not the shell, the exit status, our terminal restored."""
        self.assertIsNotNone(shutil.which("tmux"), "tmux is missing (scripts/lib.sh installs it)")
        sid = self.create()
        sock = os.path.join(self.tmp, "tmux.sock")

        def tmux(*a):
            return subprocess.run(["tmux", "-S", sock, *a], capture_output=True, text=True,
                                  timeout=30)
        _cleanups.append(lambda: tmux("kill-server"))

        def screen():
            return tmux("capture-pane", "-p", "-J", "-S", "-500").stdout

        def wait_for(needle, timeout=60):
            deadline = time.monotonic() + timeout
            while needle not in screen():
                if time.monotonic() > deadline:
                    self.fail(f"{needle!r} never shown; the pane:\n{screen()}\n"
                              f"--- frontend log ---\n{self.frontend.log()[-3000:]}")
                time.sleep(0.1)

        def keys(*k):
            tmux("send-keys", *k)

        def pane_size():
            return tmux("display", "-p", "#{pane_height} #{pane_width}").stdout.strip()

        cmd = (f"{CTL} --addr {self.frontend.address} exec -it {sid} -- bash --norc; "
               "echo EXITED=$?; stty -a; sleep 600")
        r = tmux("new-session", "-d", "-x", "100", "-y", "30", "sh", "-c", cmd)
        self.assertEqual(r.returncode, 0, r.stderr)
        keys("echo READY-$((40+2))", "Enter")
        wait_for("READY-42")
        keys("stty size; tty; echo TERM=$TERM", "Enter")
        wait_for("TERM=xterm")
        out = screen()
        self.assertIn(pane_size(), out)
        self.assertIn("/dev/pts/", out)
        tmux("resize-window", "-x", "120", "-y", "40")
        size = pane_size()
        self.assertTrue(size.endswith(" 120"), size)
        keys("clear; stty size", "Enter")
        wait_for(size)
        # Ctrl-C typed ends the foreground sleep, not the shell.
        keys("sleep 300", "Enter")
        time.sleep(1)
        keys("C-c")
        keys("echo ALIVE-$((1+1))", "Enter")
        wait_for("ALIVE-2", timeout=30)
        keys("exit 3", "Enter")
        wait_for("EXITED=3")
        after = screen().split("EXITED=3", 1)[1]
        self.assertRegex(after, r"(?<![-\w])icanon", "our terminal left in raw mode")
        self.assertRegex(after, r"(?<![-\w])echo\b", "our terminal left without echo")
        self.ok("destroy", sid)


class ExecWithoutSpawnerTest(ServiceTestCase):
    """The agent's other exec path (runsc exec) reports a command that cannot start as the
    spawner does."""
    AGENT_ARGS = ("--spawner=off",)

    def test_start_errors(self):
        sid = self.create()
        self.assert_start_errors(sid)
        self.assertIn("via runsc exec", [ln for ln in self.agent.log().splitlines()
                                         if "exec nonexistent-cmd:" in ln][-1])
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
