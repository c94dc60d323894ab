"""The Python SDK (clients/python/compute_sdk) against the real embedded default: a real
compute-frontend and a real compute-nodeagent (runsc) on loopback, started by the e2e suite's
own fixtures.

Usage: test_sdk.py BUILD_DIR SOURCE_DIR [unittest args]
PYTHONPATH: clients/python, build/python, tests/e2e and tests/integration (tests/CMakeLists.txt)."""
import hashlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import unittest
import uuid

import grpc

from agent_fixture import AgentProcess
from frontend_fixture import FrontendProcess
import testmain

import compute_sdk
from compute_sdk import (Client, ComputeError, DeadlineExceededError, Egress, ExecCompletion,
                         ExecOutput, FailedPreconditionError, InvalidArgumentError, Network,
                         NotFoundError, OutputLimitError, Sandbox, SandboxStatus, Timeouts)

BUILD_DIR = sys.argv[1]
SOURCE_DIR = sys.argv[2]
MIB = 1024 * 1024


class Frontend(FrontendProcess):
    def __init__(self, agent):
        self.agent = agent
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", self.agent.address, "--agent-poll-ms", "200"]


def tenant():
    return "sdk-" + uuid.uuid4().hex[:8]


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        cls.fe = Frontend(cls.agent)
        cls.client = Client(cls.fe.address)
        # One sandbox for the tests that need no fresh one (a start costs about a second).
        cls.sb = Sandbox.create(tenant(), client=cls.client)
        cls.sb.wait_ready(timeout=120)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.sb.destroy()
        finally:
            cls.client.close()
            rc = cls.fe.stop()
            log = cls.fe.log()
            report = cls.fe.sanitizer_report()
            os.unlink(cls.fe.log_path)
            arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")
        if report:
            raise AssertionError("frontend sanitizer report:\n" + report)

    # --- lifecycle and the context manager ---

    def test_context_manager_creates_and_destroys(self):
        with Sandbox.create(tenant(), client=self.client, cpu_millis=500,
                            memory_bytes=256 * MIB, max_runtime_s=300,
                            mount_path="/work") as sb:
            self.assertEqual(sb.status, SandboxStatus.STARTING)
            r = sb.exec("python3", ["-c", "print(6 * 7)"])  # waits for READY on the server
            self.assertEqual((r.exit_code, r.stdout, r.stderr), (0, b"42\n", b""))
            self.assertEqual(sb.exec("pwd").stdout, b"/work\n")  # the mount_path given
            self.assertTrue(r.ok)
            info = sb.describe()
            self.assertEqual((info.sandbox_id, info.status), (sb.id, SandboxStatus.READY))
            self.assertIsNotNone(info.created_at)
            self.assertGreater(info.uptime_s, 0)
            self.assertGreater(info.usage.cpu_ms, 0)
        # Destroyed by the with block; its client (not the sandbox's own) still open.
        after = Sandbox(self.client, sb.id).describe()
        self.assertEqual(after.status, SandboxStatus.DESTROYED)
        self.assertEqual(sb.status, SandboxStatus.DESTROYED)

    def test_context_manager_destroys_when_the_block_raises(self):
        with self.assertRaises(KeyError):
            with Sandbox.create(tenant(), client=self.client) as sb:
                raise KeyError("the caller's own error")
        self.assertEqual(Sandbox(self.client, sb.id).describe().status, SandboxStatus.DESTROYED)

    def test_own_client_from_address(self):
        """Without a client, create() makes one for the address and closes it at the end."""
        with Sandbox.create(tenant(), address=self.fe.address) as sb:
            self.assertEqual(sb.exec("true").exit_code, 0)
            own = sb.client
        self.assertIsNot(own, self.client)
        pb = compute_sdk._proto.compute_pb2
        with self.assertRaises(ValueError):  # grpcio refuses calls on a closed channel
            own.call("DescribeSandbox", pb.DescribeSandboxRequest(sandbox_id=sb.id), 1)

    def test_connect_and_idempotent_create(self):
        t, s = tenant(), "session-" + uuid.uuid4().hex[:8]
        with Sandbox.create(t, s, client=self.client) as sb:
            again = Sandbox.create(t, s, client=self.client)
            self.assertEqual(again.id, sb.id)
            attached = Sandbox.connect(sb.id, client=self.client)
            self.assertEqual(attached.wait_ready(timeout=120).status, SandboxStatus.READY)
            usage = attached.destroy()
            self.assertGreaterEqual(usage.cpu_ms, 0)
            self.assertEqual(attached.destroy(), usage)  # idempotent, same totals
            with self.assertRaises(FailedPreconditionError):
                sb.exec("true")
            with self.assertRaises(FailedPreconditionError):
                sb.wait_ready(timeout=5)

    # --- exec ---

    def test_exec_result(self):
        r = self.sb.exec("sh", ["-c", "echo out; echo err >&2; printf '%s' \"$GREETING\"; "
                                      "pwd >&2; exit 3"],
                         env={"GREETING": "hi"}, cwd="/tmp")
        self.assertEqual(r.exit_code, 3)
        self.assertFalse(r.ok)
        self.assertEqual(r.stdout, b"out\nhi")
        self.assertEqual(r.stderr_text(), "err\n/tmp\n")
        self.assertFalse(r.cancelled or r.timed_out or r.oom_killed)
        self.assertGreater(r.wall_time_s, 0)
        self.assertIsInstance(r.usage, compute_sdk.Usage)

    def test_exec_callbacks_and_signal(self):
        seen = []
        r = self.sb.exec("sh", ["-c", "echo a; kill -9 $$"], on_stdout=seen.append)
        self.assertEqual(b"".join(seen), b"a\n")
        self.assertEqual((r.exit_code, r.signal), (137, 9))

    def test_exec_timeout(self):
        r = self.sb.exec("sleep", ["30"], timeout_s=1)
        self.assertTrue(r.timed_out)
        self.assertEqual(r.exit_code, -1)

    def test_exec_stream_streams(self):
        """The second line is written only once the client has seen the first: only a
        stream that delivers output as it comes can finish."""
        go = f"go-{uuid.uuid4().hex[:8]}"
        events = []
        with self.sb.exec_stream(
                "sh", ["-c", f"echo one; while [ ! -e {go} ]; do sleep 0.05; done; echo two"],
                rpc_timeout=120) as stream:
            for ev in stream:
                events.append(ev)
                if ev == ExecOutput("stdout", b"one\n"):
                    self.sb.files.write(go, b"")
        self.assertEqual(events[0], ExecOutput("stdout", b"one\n"))
        self.assertEqual(events[-2:-1], [ExecOutput("stdout", b"two\n")])
        self.assertIsInstance(events[-1], ExecCompletion)
        self.assertEqual(stream.completion.exit_code, 0)

    def test_exec_stream_cancel(self):
        stream = self.sb.exec_stream("sh", ["-c", "echo started; sleep 60"])
        it = iter(stream)
        self.assertEqual(next(it), ExecOutput("stdout", b"started\n"))
        stream.cancel()
        with self.assertRaises(compute_sdk.CancelledError) as cm:
            next(it)
        self.assertEqual(cm.exception.code, grpc.StatusCode.CANCELLED)

    def test_exec_output_limit(self):
        with self.assertRaises(OutputLimitError) as cm:
            self.sb.exec("head", ["-c", "1000000", "/dev/zero"], max_output=1000)
        self.assertEqual(cm.exception.code, grpc.StatusCode.RESOURCE_EXHAUSTED)

    # --- files ---

    def test_files_40_mib_round_trip(self):
        """40 MiB is three calls each way (16 + 16 + 8 MiB): the SDK chunks, the caller not."""
        data = os.urandom(40 * MIB)
        path = f"big/{uuid.uuid4().hex[:8]}.bin"
        self.assertEqual(self.sb.files.write(path, data), len(data))
        r = self.sb.exec("sha256sum", [path])
        self.assertEqual(r.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())
        back = self.sb.files.read(path)
        self.assertEqual(len(back), len(data))
        self.assertTrue(back == data)  # not assertEqual: no 40 MiB diff on failure
        # A range across a chunk boundary, and one to the end.
        self.assertEqual(self.sb.files.read(path, offset=16 * MIB - 10, length=20),
                         data[16 * MIB - 10:16 * MIB + 10])
        self.assertTrue(self.sb.files.read(path, offset=20 * MIB) == data[20 * MIB:])
        # Append past the cap too.
        self.assertEqual(self.sb.files.write(path, data[:17 * MIB], append=True), 17 * MIB)
        listing = self.sb.files.list("big")
        self.assertEqual([(e.path, e.size) for e in listing if e.path == path[4:]],
                         [(path[4:], 57 * MIB)])

    def test_upload_and_download_file_objects(self):
        data = os.urandom(33 * MIB + 5)
        path = f"up/{uuid.uuid4().hex[:8]}.bin"
        self.assertEqual(self.sb.files.upload(path, io.BytesIO(data)), len(data))
        out = io.BytesIO()
        self.assertEqual(self.sb.files.download(path, out), len(data))
        self.assertTrue(out.getvalue() == data)
        self.assertEqual(self.sb.files.upload(path, io.BytesIO(b"")), 0)  # emptied
        self.assertEqual(self.sb.files.read(path), b"")
        self.assertEqual(self.sb.files.upload(path, io.BytesIO(b"tail"), append=True), 4)
        self.assertEqual(self.sb.files.read(path), b"tail")
        with self.assertRaises(NotFoundError):
            self.sb.files.download("no/such/file", io.BytesIO())

    def test_read_of_16_mib_needs_the_raised_receive_limit(self):
        """docs/api.md: a default grpcio channel cannot take a 16 MiB ReadFile; the SDK's can."""
        path = f"sixteen-{uuid.uuid4().hex[:8]}"
        self.sb.files.write(path, b"\x01" * (16 * MIB))
        self.assertEqual(len(self.sb.files.read(path)), 16 * MIB)
        pb = compute_sdk._proto.compute_pb2
        with grpc.insecure_channel(self.fe.address) as ch:
            read = ch.unary_unary("/compute.v1.ComputeService/ReadFile",
                                  request_serializer=pb.ReadFileRequest.SerializeToString,
                                  response_deserializer=pb.ReadFileResponse.FromString)
            with self.assertRaises(grpc.RpcError) as cm:
                read(pb.ReadFileRequest(sandbox_id=self.sb.id, path=path), timeout=60)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("larger than max", cm.exception.details())
        print(f"default grpcio channel, ReadFile of 16 MiB: {cm.exception.details()}",
              file=sys.stderr)

    def test_files_text_list_exists(self):
        d = f"tree-{uuid.uuid4().hex[:8]}"
        self.sb.files.write(f"{d}/a.txt", "héllo")
        self.sb.files.write(f"{d}/sub/b.txt", b"b", mode=0o600)
        self.sb.files.write(f"{d}/sub/b.txt", b"bb", append=True)
        self.assertEqual(self.sb.files.read_text(f"{d}/a.txt"), "héllo")
        self.assertEqual(self.sb.files.read(f"{d}/sub/b.txt"), b"bbb")
        listing = self.sb.files.list(d, recursive=True)
        self.assertEqual(listing.paths(), ["a.txt", "sub", "sub/b.txt"])
        self.assertFalse(listing.truncated)
        self.assertTrue(listing[1].is_dir)
        self.assertEqual(listing[2].mode & 0o777, 0o600)
        self.assertIsNotNone(listing[0].modified_at)
        short = self.sb.files.list(d, recursive=True, max_entries=1)
        self.assertEqual((len(short), short.truncated), (1, True))
        self.assertTrue(self.sb.files.exists(f"{d}/a.txt"))
        self.assertTrue(self.sb.files.exists(f"{d}/sub"))
        self.assertFalse(self.sb.files.exists(f"{d}/nope"))
        self.assertEqual(self.sb.files.write(f"{d}/empty", b""), 0)
        self.assertEqual(self.sb.files.read(f"{d}/empty"), b"")

    # --- the network policy (docs/api.md, "Network") ---

    def test_network_policy_echo_and_checks(self):
        """The policy in force is echoed (the node's default, none, for a sandbox that asked
        for nothing); a malformed entry is refused by the server, naming it; the SDK's own
        checks refuse what it cannot send."""
        self.assertEqual(self.sb.describe().network, Network(Egress.NONE))
        with Sandbox.create(tenant(), client=self.client, egress="none") as sb:
            self.assertEqual(sb.describe().network, Network(Egress.NONE))
        for kw, says in ((dict(allow_domains=["pypi.org", "*.*.x"]),
                          "network.allow_domains[1] '*.*.x'"),
                         (dict(egress=Egress.ALLOWLIST, allow_cidrs=["10.0.0.1/8"]),
                          "network.allow_cidrs[0] '10.0.0.1/8': host bits set"),
                         (dict(egress="open", allow_cidrs=["192.0.2.0/24"]), "egress is open")):
            with self.assertRaises(InvalidArgumentError, msg=str(kw)) as cm:
                Sandbox.create(tenant(), client=self.client, **kw)
            self.assertIn(says, cm.exception.details)
            self.assertEqual(cm.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create(tenant(), client=self.client, egress="closed")
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create(tenant(), client=self.client, allow_domains="pypi.org")
        self.assertEqual(Egress.parse("AllowList"), Egress.ALLOWLIST)
        self.assertEqual(Egress.of(99), Egress.UNSPECIFIED)

    # --- errors and deadlines ---

    def test_errors_keep_the_grpc_code(self):
        with self.assertRaises(NotFoundError) as cm:
            self.sb.files.read("no/such/file")
        e = cm.exception
        self.assertEqual(e.code, grpc.StatusCode.NOT_FOUND)
        self.assertIsInstance(e, (ComputeError, LookupError))
        self.assertTrue(e.details)
        self.assertTrue(e.request_id)  # the server's x-request-id, for its logs
        with self.assertRaises(InvalidArgumentError) as cm:
            self.sb.files.read("../escape")
        self.assertIsInstance(cm.exception, ValueError)
        d = f"dir-{uuid.uuid4().hex[:8]}"
        self.sb.files.write(f"{d}/x", b"x")
        with self.assertRaises(FailedPreconditionError):
            self.sb.files.read(d)  # a directory
        with self.assertRaises(NotFoundError):
            Sandbox.connect(str(uuid.uuid4()), client=self.client)
        with self.assertRaises(InvalidArgumentError):
            Sandbox.connect("not-a-uuid", client=self.client)
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create("", client=self.client)
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create(tenant(), client=self.client, cpu_millis=10)  # below 50 m
        with self.assertRaises(InvalidArgumentError):
            Sandbox.create(tenant(), client=self.client, image="no-such-image:1")
        with self.assertRaises(InvalidArgumentError):
            self.sb.exec("echo", "one string")  # args must be a list

    def test_deadline_on_a_call_that_gets_no_answer(self):
        """A server that accepts the connection and never answers: the default deadline
        (Timeouts) ends the call, and a per-call timeout overrides it."""
        with socket.socket() as mute:
            mute.bind(("127.0.0.1", 0))
            mute.listen(8)
            address = "127.0.0.1:%d" % mute.getsockname()[1]
            with Client(address, timeouts=Timeouts(describe=0.5)) as c:
                sb = Sandbox(c, str(uuid.uuid4()))
                with self.assertRaises(DeadlineExceededError) as cm:
                    sb.describe()
                self.assertIsInstance(cm.exception, TimeoutError)
                self.assertEqual(cm.exception.code, grpc.StatusCode.DEADLINE_EXCEEDED)
                with self.assertRaises(DeadlineExceededError):
                    sb.files.read("x", timeout=0.3)

    def test_exec_rpc_deadline(self):
        with self.assertRaises(DeadlineExceededError):
            self.sb.exec("sleep", ["30"], rpc_timeout=1)

    # --- the README's example ---

    def test_readme_example(self):
        with open(os.path.join(SOURCE_DIR, "README.md")) as f:
            readme = f.read()
        block = readme.split("<!-- readme-sdk:begin -->")[1].split("<!-- readme-sdk:end -->")[0]
        code = block.split("```python\n")[1].split("```")[0]
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, timeout=300,
                             env=dict(os.environ, COMPUTE_ADDR=self.fe.address)).stdout
        lines = out.splitlines()
        self.assertEqual(lines[0], "0 45")
        self.assertIn("ExecOutput(stream='stdout', data=b'one\\n')", lines[1])
        self.assertTrue(lines[3].startswith("ExecCompletion(exit_code=0"), lines[3])
        self.assertTrue(lines[4].startswith(f"{40 << 20} ['in', 'in/big.bin']"), lines[4])
        self.assertTrue(lines[5].startswith("NOT_FOUND "), lines[5])
        self.assertTrue(lines[6].endswith("ms of CPU so far"), lines[6])

    def test_sdk_readme_example(self):
        """clients/python/README.md's first example, with the address from COMPUTE_ADDR."""
        with open(os.path.join(SOURCE_DIR, "clients", "python", "README.md")) as f:
            code = f.read().split("```python\n")[1].split("```")[0]
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True, timeout=300,
                             env=dict(os.environ, COMPUTE_ADDR=self.fe.address)).stdout
        lines = out.splitlines()
        self.assertEqual(lines[:2], ["0 45", "42"], out)
        self.assertEqual(lines[2], "ExecOutput(stream='stdout', data=b'one\\n')", out)
        self.assertEqual(lines[3], "ExecOutput(stream='stdout', data=b'two\\n')", out)
        self.assertTrue(lines[4].startswith("ExecCompletion(exit_code=0"), out)
        self.assertEqual(lines[5], f"{40 << 20} ['data', 'data/big.bin', 'out.txt']", out)
        self.assertEqual(lines[6], "NOT_FOUND 'missing.txt': no such file", out)

    def test_exec_is_a_program_not_a_command_line(self):
        """What the SDK README says of exec("echo hello")."""
        r = self.sb.exec("echo hello")
        self.assertEqual((r.exit_code, r.stderr), (127, b"echo hello: command not found\n"))
        r = self.sb.exec("sh", ["-c", "echo hello | wc -c"])
        self.assertEqual((r.exit_code, r.stdout), (0, b"6\n"))

    # --- installing ---

    def test_pip_install(self):
        """pip builds the package offline with Debian's setuptools, generating its protobuf
        modules inside it; the installed copy works on its own (no build/python)."""
        with tempfile.TemporaryDirectory(prefix="cs-sdk-") as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(os.path.join(SOURCE_DIR, "clients", "python"), src,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            env = dict(os.environ, COMPUTE_PROTO_DIR=os.path.join(SOURCE_DIR, "proto"),
                       PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            target = os.path.join(tmp, "site")
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                            "--no-build-isolation", "--target", target, src],
                           env=env, check=True, capture_output=True)
            self.assertTrue(os.path.exists(os.path.join(
                target, "compute_sdk", "_pb", "compute", "v1", "compute_pb2.py")))
            script = ("import sys, compute_sdk\n"
                      "assert compute_sdk.__file__.startswith(sys.argv[2]), compute_sdk.__file__\n"
                      "assert compute_sdk._proto.compute_pb2.__name__.startswith('compute_sdk._pb')\n"
                      "with compute_sdk.Sandbox.create('pip-test', address=sys.argv[1]) as sb:\n"
                      "    print(sb.exec('echo', ['installed']).stdout.decode(), end='')\n")
            out = subprocess.run([sys.executable, "-c", script, self.fe.address, target],
                                 env={"PATH": os.environ["PATH"], "PYTHONPATH": target},
                                 check=True, capture_output=True, text=True, cwd=tmp)
            self.assertEqual(out.stdout, "installed\n")


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[3:])
