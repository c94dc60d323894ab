"""End to end: compute.v1.ComputeService through the real frontend and a real node agent
(runsc), driven by Debian's python3-grpcio.

Usage: test_frontend.py BUILD_DIR [unittest args]"""
import hashlib
import os
import signal
import subprocess
import sys
import time
import unittest
import uuid
from concurrent.futures import ThreadPoolExecutor

import grpc

from agent_client import code_of
from agent_fixture import AgentProcess
from compute_client import Compute
from frontend_fixture import FrontendProcess
import testmain

BUILD_DIR = sys.argv[1]
MIB = 1024 * 1024
CHUNK = 16 * MIB


class Frontend(FrontendProcess):
    """compute-frontend in local mode on the given agents."""

    def __init__(self, agents):
        self.agents = agents
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", ",".join(a.address for a in self.agents), "--agent-poll-ms", "200"]


class FrontendTest(unittest.TestCase):
    # Local mode knows its images (directories on the agent); in kube mode any image
    # reference is accepted and a bad one shows as a pod that never starts.
    IMAGES_CHECKED = True
    # Local mode's agents give sandboxes a network; kube mode's pods have none yet, so there
    # a create asking for egress allowlist or open is refused (docs/api.md, "Network").
    SANDBOX_NETWORK = True
    # fds the frontend may hold after a burst that are not leaks (pools with a fixed cap).
    FD_SLACK = 2

    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        cls.fe = Frontend([cls.agent])
        cls.c = Compute(BUILD_DIR, cls.fe.address)
        cls.sid = cls.c.create("tenant-" + uuid.uuid4().hex[:8], "shared").sandbox_id

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.fe.stop()
        log = cls.fe.log()
        os.unlink(cls.fe.log_path)
        # The agent's whole log goes with its state: its warnings (a sandbox that failed in
        # the middle of the run, and the runtime's words hidden from the client) are kept.
        try:
            alog = cls.agent.log()
        except OSError:
            alog = ""
        arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")
        # ctest shows this only when the test failed (--output-on-failure): what tells why.
        warnings = [line for line in log.splitlines() if "warn" in line or "error" in line]
        awarnings = [line for line in alog.splitlines()
                     if " WARN " in line or " ERROR " in line or "hidden from the client" in line]
        print("--- frontend warnings ---\n" + "\n".join(warnings[-60:]) +
              "\n--- agent warnings ---\n" + "\n".join(awarnings[-60:]) +
              f"\n--- frontend log (end) ---\n{log[-3000:]}\n--- agent log (end) ---\n{tail}",
              file=sys.stderr)

    def new_session(self):
        return "tenant-" + uuid.uuid4().hex[:8], "session-" + uuid.uuid4().hex[:8]

    def leftover_containers(self, sids):
        """The containers of these (destroyed) sandboxes still there."""
        live = subprocess.run(["runsc", "--root", self.agent.runsc_root, "list", "-quiet"],
                              capture_output=True, text=True).stdout.split()
        return [cid for cid in live if cid[3:] in sids]

    # --- lifecycle ---

    def test_create_exec_at_once_describe_destroy(self):
        c = self.c
        tenant, session = self.new_session()
        r = c.create(tenant, session)
        self.assertEqual(r.status, c.pb.SANDBOX_STATUS_STARTING)
        self.assertGreater(r.created_at.seconds, 0)
        # No polling: ExecCommand waits for READY.
        out, _, done, events = c.exec(r.sandbox_id, "python3", "-c", "print(6*7)")
        self.assertEqual((out, done.exit_code), (b"42\n", 0))
        self.assertEqual(events[-1].WhichOneof("event"), "completed")
        self.assertTrue(all(e.HasField("emitted_at") for e in events))
        again = c.create(tenant, session)
        self.assertEqual(again.sandbox_id, r.sandbox_id)
        d = c.describe(r.sandbox_id)
        self.assertEqual((d.sandbox_id, d.status), (r.sandbox_id, c.pb.SANDBOX_STATUS_READY))
        self.assertEqual(d.created_at, r.created_at)
        self.assertGreater(d.current_uptime.seconds * 10**9 + d.current_uptime.nanos, 0)
        self.assertGreater(d.current_usage.cpu_ms, 0)
        gone = c.destroy(r.sandbox_id)
        self.assertEqual(gone.sandbox_id, r.sandbox_id)
        self.assertGreaterEqual(gone.total_usage.cpu_ms, d.current_usage.cpu_ms)
        d = c.describe(r.sandbox_id)
        self.assertEqual(d.status, c.pb.SANDBOX_STATUS_DESTROYED)
        self.assertEqual(d.current_usage, gone.total_usage)
        self.assertEqual(code_of(c.exec, r.sandbox_id, "true"),
                         grpc.StatusCode.FAILED_PRECONDITION)
        # After a destroy, the session gets a new sandbox.
        fresh = c.create(tenant, session)
        self.assertNotEqual(fresh.sandbox_id, r.sandbox_id)
        c.destroy(fresh.sandbox_id)

    def test_error_rows(self):
        c, pb = self.c, self.c.pb
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        unknown = str(uuid.uuid4())
        self.assertEqual(code_of(c.create, "", "s"), INVALID)
        self.assertEqual(code_of(c.create, "t", ""), INVALID)
        if self.IMAGES_CHECKED:
            self.assertEqual(code_of(c.create, "t", "s", image="no-such-image"), INVALID)
        for bad in ("", "nope", "123", unknown + "0"):
            with self.subTest(id=bad):
                self.assertEqual(code_of(c.describe, bad), INVALID)
                self.assertEqual(code_of(c.destroy, bad), INVALID)
                self.assertEqual(code_of(c.exec, bad, "true"), INVALID)
                self.assertEqual(code_of(c.read, bad, "f"), INVALID)
                self.assertEqual(code_of(c.write, bad, "f", b""), INVALID)
                self.assertEqual(code_of(c.ls, bad, ""), INVALID)
        self.assertEqual(code_of(c.exec, self.sid, ""), INVALID)
        self.assertEqual(code_of(c.read, self.sid, ""), INVALID)
        self.assertEqual(code_of(c.read, self.sid, "f", offset=-1), INVALID)
        NOT_FOUND = grpc.StatusCode.NOT_FOUND
        self.assertEqual(code_of(c.describe, unknown), NOT_FOUND)
        self.assertEqual(code_of(c.destroy, unknown), NOT_FOUND)
        self.assertEqual(code_of(c.exec, unknown, "true"), NOT_FOUND)
        self.assertEqual(code_of(c.read, unknown, "f"), NOT_FOUND)
        self.assertEqual(code_of(c.write, self.sid, "big", b"x" * (CHUNK + 1)),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        # FAILED sandbox: FAILED_PRECONDITION (max_runtime of 2 s).
        tenant, session = self.new_session()
        sid = c.create(tenant, session, limits=pb.ResourceLimits(
            max_runtime={"seconds": 2})).sandbox_id
        # A bound, not a timing: kube mode's pod deadline took over 30 s on a loaded CI machine.
        deadline = time.monotonic() + 120
        while c.describe(sid).status != pb.SANDBOX_STATUS_FAILED:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.2)
        self.assertEqual(code_of(c.exec, sid, "true"), grpc.StatusCode.FAILED_PRECONDITION)
        # It says why (the agent's words in local mode, the pod's DeadlineExceeded in kube
        # mode: the same sentence).
        self.assertEqual(c.describe(sid).status_reason, "max_runtime of 2 s exceeded")
        listed = c.list(tenant, status=pb.SANDBOX_STATUS_FAILED).sandboxes
        self.assertEqual([(s.sandbox_id, s.status_reason) for s in listed],
                         [(sid, "max_runtime of 2 s exceeded")])
        c.destroy(sid)

    # --- ListSandboxes ---

    def test_list_sandboxes_pages_and_filters(self):
        c, pb = self.c, self.c.pb
        INVALID = grpc.StatusCode.INVALID_ARGUMENT
        tenant = "tenant-" + uuid.uuid4().hex[:8]
        sessions = [f"list-{i}" for i in range(3)]
        ids = {s: c.create(tenant, s).sandbox_id for s in sessions}
        other = c.create("tenant-" + uuid.uuid4().hex[:8], "list-0").sandbox_id
        for s in sessions:
            # READY (exec waits for it), and some usage to report.
            self.assertEqual(c.exec(ids[s], "true")[2].exit_code, 0)
        gone = c.destroy(ids["list-1"])
        self.assertEqual(c.list(tenant, page_size=1).sandboxes[0].tenant_id, tenant)

        # Page by page (one a page: three pages, the last without a token), each sandbox
        # once, oldest first (created_at, then id), the other tenant's never.
        got, pages = c.list_all(tenant, page_size=1)
        self.assertEqual(pages, 3)
        self.assertEqual(sorted(s.sandbox_id for s in got), sorted(ids.values()))
        key = [(s.created_at.ToMilliseconds(), s.sandbox_id) for s in got]
        self.assertEqual(key, sorted(key))
        by_id = {s.sandbox_id: s for s in got}
        for session, sid in ids.items():
            s = by_id[sid]
            self.assertEqual((s.tenant_id, s.session_id), (tenant, session))
            self.assertEqual(s.status_reason, "")
            if session == "list-1":
                self.assertEqual(s.status, pb.SANDBOX_STATUS_DESTROYED)
                self.assertEqual(s.current_usage, gone.total_usage)
                self.assertTrue(s.HasField("destroyed_at"))
            else:
                self.assertEqual(s.status, pb.SANDBOX_STATUS_READY)
                self.assertEqual(s.limits.cpu_millis, 1000)
                self.assertEqual(s.limits.memory_bytes, 1 << 30)
                self.assertEqual(s.limits.max_runtime.seconds, 900)
                self.assertFalse(s.HasField("destroyed_at"))
                self.assertGreater(s.current_uptime.ToMilliseconds(), 0)
        self.assertNotIn(other, by_id)
        # One page when it fits: the default size, and a size over the cap (capped, no error).
        for size in (0, 5000):
            r = c.list(tenant, page_size=size)
            self.assertEqual(len(r.sandboxes), 3)
            self.assertEqual(r.next_page_token, "")

        # By status.
        self.assertEqual([s.sandbox_id for s in
                          c.list(tenant, status=pb.SANDBOX_STATUS_DESTROYED).sandboxes],
                         [ids["list-1"]])
        ready, _ = c.list_all(tenant, status=pb.SANDBOX_STATUS_READY, page_size=1)
        self.assertEqual(sorted(s.sandbox_id for s in ready),
                         sorted([ids["list-0"], ids["list-2"]]))
        self.assertEqual(len(c.list(tenant, status=pb.SANDBOX_STATUS_FAILED).sandboxes), 0)
        self.assertEqual(len(c.list("tenant-nobody-" + uuid.uuid4().hex).sandboxes), 0)

        # The tenant is required; a token is good for its own tenant and status only.
        token = c.list(tenant, page_size=1).next_page_token
        self.assertTrue(token)
        self.assertEqual(code_of(c.list, ""), INVALID)
        self.assertEqual(code_of(c.list, "has space"), INVALID)
        self.assertEqual(code_of(c.list, "other-tenant", page_token=token), INVALID)
        self.assertEqual(code_of(c.list, tenant, page_token=token,
                                 status=pb.SANDBOX_STATUS_READY), INVALID)
        for bad in ("garbage", "x" * 5000, token[:-4]):
            self.assertEqual(code_of(c.list, tenant, page_token=bad), INVALID)
        self.assertEqual(code_of(c.list, tenant, status=42), INVALID)
        for sid in (ids["list-0"], ids["list-2"], other):
            c.destroy(sid)

    # --- the network policy (docs/api.md, "Network") ---

    def test_network_spec_checks_and_echo(self):
        """A malformed NetworkSpec is refused before anything is made, the message naming the
        entry; egress NONE, asked for or the node's default, is what describe and list say."""
        c, pb = self.c, self.c.pb
        tenant = "tenant-" + uuid.uuid4().hex[:8]
        allowlist = pb.EGRESS_MODE_ALLOWLIST
        for net, says in (
                (dict(egress=allowlist, allow_domains=["pypi.org", "bad_name.test"]),
                 "network.allow_domains[1] 'bad_name.test': letters, digits"),
                (dict(egress=allowlist, allow_domains=["*.*.x"]),
                 "network.allow_domains[0] '*.*.x': '*' only as a whole leading label"),
                (dict(egress=allowlist, allow_domains=["a" * 64 + ".test"]),
                 "label longer than 63 bytes"),
                (dict(egress=allowlist, allow_domains=[f"h{i}.test" for i in range(257)]),
                 "network.allow_domains has 257 entries, more than 256"),
                (dict(egress=allowlist, allow_cidrs=["192.0.2.0/24", "not-a-cidr"]),
                 "network.allow_cidrs[1] 'not-a-cidr': not an IPv4 or IPv6 address"),
                (dict(egress=allowlist, allow_cidrs=["10.0.0.0/33"]),
                 "network.allow_cidrs[0] '10.0.0.0/33': prefix length over 32"),
                (dict(egress=allowlist, allow_cidrs=["2001:db8::1/64"]),
                 "'2001:db8::1/64': host bits set (the network is 2001:db8::/64)"),
                (dict(egress=pb.EGRESS_MODE_OPEN, allow_domains=["pypi.org"]),
                 "network.allow_domains[0] 'pypi.org': lists apply only to egress allowlist "
                 "(egress is open)"),
                (dict(allow_cidrs=["192.0.2.0/24"]), "(egress is unspecified)"),
                (dict(egress=9), "network.egress 9 is not an EgressMode")):
            with self.assertRaises(grpc.RpcError, msg=says) as cm:
                c.create(tenant, "net-bad", network=pb.NetworkSpec(**net))
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, says)
            self.assertIn(says, cm.exception.details())
        self.assertEqual(len(c.list(tenant).sandboxes), 0)  # nothing was made
        if not self.SANDBOX_NETWORK:
            for mode, name in ((allowlist, "allowlist"), (pb.EGRESS_MODE_OPEN, "open")):
                with self.assertRaises(grpc.RpcError) as cm:
                    c.create(tenant, "net-" + name, network=pb.NetworkSpec(egress=mode))
                self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
                self.assertIn(f"egress {name} is not available in kube mode yet",
                              cm.exception.details())

        none = pb.NetworkSpec(egress=pb.EGRESS_MODE_NONE)
        asked = c.create(tenant, "net-none", network=none).sandbox_id
        default = c.create(tenant, "net-default").sandbox_id
        for sid in (asked, default):
            self.assertEqual(c.describe(sid).network, none)
        self.assertEqual({s.sandbox_id: s.network for s in c.list(tenant).sandboxes},
                         {asked: none, default: none})
        c.destroy(asked)
        self.assertEqual(c.describe(asked).network, none)  # DESTROYED: still the policy it had
        c.destroy(default)

    def test_exec_semantics(self):
        c = self.c
        for code in (0, 1, 42):
            out, err, done, _ = c.exec(self.sid, "sh", "-c", f"echo o; echo e >&2; exit {code}")
            self.assertEqual((out, err, done.exit_code), (b"o\n", b"e\n", code))
        out, _, done, _ = c.exec(self.sid, "sh", "-c", 'echo "$X"; pwd', env={"X": "y z"},
                                 working_dir="/tmp")
        self.assertEqual(out, b"y z\n/tmp\n")
        _, _, done, _ = c.exec(self.sid, "sh", "-c", "kill -KILL $$")
        self.assertEqual(done.signal, signal.SIGKILL)
        # Timeout: SIGTERM seen inside, reported as a timeout. 3 s: the shell must have set
        # its trap by then (a loaded CI machine took more than 1 s to start it in kube mode).
        out, _, done, events = c.exec(self.sid, "sh", "-c",
                                      "trap 'echo term; exit 5' TERM; sleep 999 & wait",
                                      timeout_s=3)
        self.assertEqual(out, b"term\n")
        self.assertTrue(done.timed_out and not done.cancelled)
        self.assertEqual(done.exit_code, -1)
        self.assertEqual(events[-1].WhichOneof("event"), "completed")

    def test_exec_session(self):
        """ExecSession in this mode (the full suite is e2e.exec_session): stdin and its EOF,
        and a terminal's name and size."""
        c, pb = self.c, self.c.pb
        session = c.channel.stream_stream("/compute.v1.ComputeService/ExecSession",
                                          request_serializer=pb.ExecSessionRequest.SerializeToString,
                                          response_deserializer=pb.ExecEvent.FromString)

        def run(start, *more):
            events = list(session(iter([pb.ExecSessionRequest(start=start), *more]), timeout=120))
            out = b"".join(e.stdout.data for e in events if e.WhichOneof("event") == "stdout")
            self.assertEqual(events[-1].WhichOneof("event"), "completed")
            return out, events[-1].completed

        out, done = run(pb.ExecSessionStart(command=pb.ExecCommandRequest(
            sandbox_id=self.sid, command="sh", args=["-c", "cat; echo end"])),
            pb.ExecSessionRequest(stdin=b"one\n"), pb.ExecSessionRequest(stdin=b"two\n"),
            pb.ExecSessionRequest(close_stdin=True))
        self.assertEqual((out, done.exit_code), (b"one\ntwo\nend\n", 0))
        out, done = run(pb.ExecSessionStart(
            command=pb.ExecCommandRequest(sandbox_id=self.sid, command="sh",
                                          args=["-c", "tty; stty size"]),
            tty=True, size=pb.TerminalSize(rows=33, cols=101)))
        self.assertEqual(done.exit_code, 0, out)
        self.assertRegex(out, rb"^/dev/pts/\d+\r\n33 101\r\n$")

    def test_cancel_reaches_the_sandbox(self):
        c = self.c
        call = c.ExecStream(c.pb.ExecCommandRequest(sandbox_id=self.sid, command="sh", args=[
            "-c", "trap 'echo cancelled > /workspace/cancel-mark; exit 1' TERM; echo ready; "
                  "sleep 998 & wait"]), timeout=60)
        self.assertEqual(next(call).stdout.data, b"ready\n")
        call.cancel()
        deadline = time.monotonic() + 15
        while code_of(c.read, self.sid, "cancel-mark") != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "SIGTERM never reached the process")
            time.sleep(0.1)
        self.assertEqual(c.read(self.sid, "cancel-mark").data, b"cancelled\n")
        deadline = time.monotonic() + 20
        while True:
            out, _, _, _ = c.exec(self.sid, "sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
            if b"sleep 998" not in out:
                break
            self.assertLess(time.monotonic(), deadline, "a process survived the cancel")
            time.sleep(0.5)

    def test_100mib_stream(self):
        out, _, done, _ = self.c.exec(
            self.sid, "sh", "-c", f"head -c {100 * MIB} /dev/urandom | tee /workspace/s.bin")
        self.assertEqual((len(out), done.exit_code), (100 * MIB, 0))
        sha, _, _, _ = self.c.exec(self.sid, "sha256sum", "/workspace/s.bin")
        self.assertEqual(sha.split()[0].decode(), hashlib.sha256(out).hexdigest())

    # --- files ---

    def test_16mib_calls_and_100mib_chunked(self):
        c = self.c
        data = os.urandom(CHUNK)
        self.assertEqual(c.write(self.sid, "one.bin", data).bytes_written, CHUNK)
        r = c.read(self.sid, "one.bin")
        self.assertEqual((r.data, r.total_size, r.eof), (data, CHUNK, True))
        big = os.urandom(100 * MIB)
        for off in range(0, len(big), CHUNK):
            c.write(self.sid, "big/file.bin", big[off:off + CHUNK], append=off > 0)
        got, off = bytearray(), 0
        while True:
            r = c.read(self.sid, "big/file.bin", offset=off, max_bytes=CHUNK)
            got += r.data
            off += len(r.data)
            if r.eof:
                break
        self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(big).digest())
        sha, _, _, _ = c.exec(self.sid, "sha256sum", "/workspace/big/file.bin")
        self.assertEqual(sha.split()[0].decode(), hashlib.sha256(big).hexdigest())
        entries = {e.path: e for e in c.ls(self.sid, "big").entries}
        self.assertEqual(entries["file.bin"].size, 100 * MIB)
        listed = c.ls(self.sid, "", recursive=True, max_entries=1)
        self.assertTrue(listed.truncated)

    def test_strings_must_be_utf8(self):
        """A request string that is not UTF-8 is INVALID_ARGUMENT and changes nothing (a
        WriteFile path of b"bad\\xff\\xfe" used to make a file that broke every strict
        client's ListFiles); a name made inside the sandbox that is not UTF-8 is left out of
        ListFiles."""
        c = self.c
        raw = lambda b: b  # noqa: E731 (requests serialized here, then corrupted)
        raw_write = c.channel.unary_unary("/compute.v1.ComputeService/WriteFile",
                                          request_serializer=raw,
                                          response_deserializer=c.pb.WriteFileResponse.FromString)
        raw_exec = c.channel.unary_stream("/compute.v1.ComputeService/ExecCommand",
                                          request_serializer=raw,
                                          response_deserializer=c.pb.ExecEvent.FromString)
        bad = b"\xff\xfeZZ"
        req = c.pb.WriteFileRequest(sandbox_id=self.sid, path="u8/ZZZZ.txt", data=b"x")
        with self.assertRaises(grpc.RpcError) as cm:
            raw_write(req.SerializeToString().replace(b"ZZZZ", bad), timeout=30)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("path is not valid UTF-8", cm.exception.details())
        for kw in ({"command": "ZZZZ"}, {"command": "true", "args": ["ZZZZ"]},
                   {"command": "true", "env": {"K": "ZZZZ"}},
                   {"command": "true", "working_dir": "/ZZZZ"}):
            with self.subTest(field=list(kw)[-1]):
                req = c.pb.ExecCommandRequest(sandbox_id=self.sid, **kw)
                with self.assertRaises(grpc.RpcError) as cm:
                    list(raw_exec(req.SerializeToString().replace(b"ZZZZ", bad), timeout=30))
                self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn("not valid UTF-8", cm.exception.details())
        c.exec(self.sid, "sh", "-c", "mkdir -p /workspace/u8 && cd /workspace/u8 && "
               "touch ok \"$(printf 'bad\\377\\376')\" \"$(printf 'caf\\303\\251')\"")
        out, _, _, _ = c.exec(self.sid, "ls", "/workspace/u8")
        self.assertEqual(len(out.split()), 3, out)  # all three exist inside
        self.assertEqual(sorted(e.path for e in c.ls(self.sid, "u8").entries), ["café", "ok"])

    def test_path_attacks(self):
        c = self.c
        c.exec(self.sid, "sh", "-c", "mkdir -p /workspace/pa/in && echo in > /workspace/pa/in/f && "
               "ln -sfn /etc/passwd /workspace/pa/evil && ln -sfn /etc /workspace/pa/etc && "
               "ln -sfn loop2 /workspace/pa/loop1 && ln -sfn loop1 /workspace/pa/loop2 && "
               "ln -sfn /workspace/pa/in /workspace/pa/abs")
        INVALID, DENIED = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.PERMISSION_DENIED
        for path, code in (("../x", INVALID), ("pa/../../x", INVALID), ("/etc/passwd", INVALID),
                           ("pa/evil", DENIED), ("pa/etc/passwd", DENIED), ("pa/loop1", INVALID),
                           ("a\x00b", INVALID), ("x" * 5000, INVALID)):
            with self.subTest(path=path[:30]):
                self.assertEqual(code_of(c.read, self.sid, path), code)
                self.assertEqual(code_of(c.write, self.sid, path, b"x"), code)
        self.assertEqual(code_of(c.ls, self.sid, "pa/etc"), DENIED)
        self.assertEqual(c.read(self.sid, "pa/abs/f").data, b"in\n")
        self.assertEqual(c.read(self.sid, "/workspace/pa/in/f").data, b"in\n")

    # --- scale ---

    def test_50_concurrent_sessions(self):
        fds, threads = self.fe.fd_count(), self.fe.thread_count()

        def session(i):
            c = Compute(BUILD_DIR, self.fe.address)
            sid = None
            try:
                sid = c.create("tenant-conc", f"session-{i}-{uuid.uuid4().hex[:6]}").sandbox_id
                out, _, done, _ = c.exec(sid, "sh", "-c", f"echo {i}")
                assert (out, done.exit_code) == (f"{i}\n".encode(), 0), (out, done)
                payload = os.urandom(64 * 1024)
                c.write(sid, f"f{i}", payload)
                assert c.read(sid, f"f{i}").data == payload
                assert len(c.ls(sid, "").entries) == 1
                out, _, done, _ = c.exec(sid, "cat", f"/workspace/f{i}")
                assert out == payload
                c.destroy(sid)
                return sid
            except BaseException:
                # A failed session's sandbox would load the machine for the later tests.
                if sid:
                    try:
                        c.destroy(sid)
                    except grpc.RpcError:
                        pass
                raise
            finally:
                c.close()

        with ThreadPoolExecutor(max_workers=50) as pool:
            sids = list(pool.map(session, range(50)))
        self.assertEqual(len(set(sids)), 50)
        for sid in sids:
            self.assertEqual(self.c.describe(sid).status, self.c.pb.SANDBOX_STATUS_DESTROYED)
        # Nothing left behind: containers, sandbox processes, frontend fds and threads.
        self.assertEqual(self.leftover_containers(sids), [])
        # gRPC's own pools shrink lazily after a burst: a leak never settles, a pool does.
        deadline = time.monotonic() + 20
        while (self.fe.fd_count() > fds + self.FD_SLACK or self.fe.thread_count() > threads + 2) and \
                time.monotonic() < deadline:
            time.sleep(0.5)
        self.assertLessEqual(self.fe.fd_count(), fds + self.FD_SLACK)
        self.assertLessEqual(self.fe.thread_count(), threads + 2, self.fe.thread_names())


class FrontendRestartTest(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(BUILD_DIR)
        self.fe = Frontend([self.agent])
        self.c = Compute(BUILD_DIR, self.fe.address)

    def tearDown(self):
        self.c.close()
        self.fe.stop()
        os.unlink(self.fe.log_path)
        rc, tail = self.agent.cleanup()
        self.assertEqual(rc, 0, tail)

    def test_frontend_restart_loses_nothing(self):
        c = self.c
        sids = [c.create("t", f"s{i}").sandbox_id for i in range(3)]
        c.exec(sids[0], "sh", "-c", "echo kept > /workspace/k")
        c.destroy(sids[2])
        self.assertEqual(self.fe.stop(), 0)
        self.fe.start()
        self.assertEqual(c.describe(sids[0]).status, c.pb.SANDBOX_STATUS_READY)
        self.assertEqual(c.read(sids[0], "k").data, b"kept\n")
        self.assertEqual(c.exec(sids[1], "echo", "hi")[0], b"hi\n")
        self.assertEqual(c.describe(sids[2]).status, c.pb.SANDBOX_STATUS_DESTROYED)
        # The restarted frontend still knows the sessions: no second sandbox.
        self.assertEqual(c.create("t", "s0").sandbox_id, sids[0])

    def test_stopped_and_continued_daemons_serve_on(self):
        # SIGSTOP/SIGCONT (a debugger, a frozen cgroup): the kernel resumes interrupted
        # sleeps with restart_syscall, which the seccomp allowlists must let through (the
        # frontend's aborted without it).
        c = self.c
        sid = c.create("t", "s").sandbox_id
        for proc in (self.fe.proc, self.agent.proc):
            for _ in range(3):
                proc.send_signal(signal.SIGSTOP)
                time.sleep(0.3)
                proc.send_signal(signal.SIGCONT)
                time.sleep(0.3)
            self.assertIsNone(proc.poll())
        self.assertEqual(c.exec(sid, "echo", "on")[0], b"on\n")
        self.assertNotIn("seccomp refused", self.fe.log())

    def test_agent_down_is_unavailable_then_back(self):
        c = self.c
        sid = c.create("t", "s").sandbox_id
        c.exec(sid, "true")
        self.agent.stop()
        t0 = time.monotonic()
        for call in (lambda: c.describe(sid), lambda: c.exec(sid, "true"),
                     lambda: c.read(sid, "x"), lambda: c.create("t", "s"),
                     lambda: c.create("t", "other")):
            self.assertEqual(code_of(call), grpc.StatusCode.UNAVAILABLE)
        self.assertLess(time.monotonic() - t0, 30)  # fails fast, no hang
        self.agent.restart()
        deadline = time.monotonic() + 30
        while code_of(c.describe, sid) != grpc.StatusCode.OK:
            self.assertLess(time.monotonic(), deadline, "sandbox never served again")
            time.sleep(0.2)
        self.assertEqual(c.exec(sid, "echo", "back")[0], b"back\n")


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
