"""The access log and JSON logs end to end: the real frontend (--log-format json) on a real node
agent (runsc). Every call ends with one "access" line whose fields are JSON members (method,
code, duration_ms, peer, request_id, tenant, sandbox_id; an exec's exit and usage; a destroy's
final usage), a failed call carries its code, client-controlled values come back exactly as
sent, and gRPC core's own lines (the chttp2_server.cc "No address added" error of a port in
use) are JSON lines of the same logger: every line of both daemons' stderr parses.

Usage: test_access_log.py BUILD_DIR [unittest args]"""
import json
import os
import socket
import subprocess
import sys
import time
import unittest
import uuid

import grpc

from agent_client import code_of, collect_exec
from agent_fixture import AgentProcess
from frontend_fixture import FrontendProcess
from health_client import Health
from compute_client import Compute
import testmain

BUILD_DIR = sys.argv[1]
CS = "/compute.v1.ComputeService/"
USAGE = ("cpu_ms", "memory_peak_bytes", "memory_avg_bytes", "disk_read_bytes",
         "disk_write_bytes", "network_egress_bytes", "network_ingress_bytes")


class Frontend(FrontendProcess):
    def __init__(self, agent):
        self.agent = agent
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", self.agent.address, "--agent-poll-ms", "200", "--log-format", "json"]


def unique_keys(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError(f"a key twice: {keys}")
    return dict(pairs)


def json_lines(text, who):
    """Every line of a log as a JSON object (each key once); fails on the first that is
    not one."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            obj = json.loads(line, object_pairs_hook=unique_keys)
        except ValueError as e:
            raise AssertionError(f"{who} log line {n} is not JSON ({e}): {line!r}")
        if not isinstance(obj, dict):
            raise AssertionError(f"{who} log line {n} is not a JSON object: {line!r}")
        out.append(obj)
    return out


class AccessLogTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR, "--log-format", "json")
        cls.fe = Frontend(cls.agent)
        cls.c = Compute(BUILD_DIR, cls.fe.address)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        rc = cls.fe.stop()
        log = cls.fe.log()
        report = cls.fe.sanitizer_report()
        os.unlink(cls.fe.log_path)
        alog = cls.agent.log()
        arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0 or report:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")
        # The whole run, start-up and shutdown included: nothing but JSON lines.
        json_lines(log, "frontend")
        json_lines(alog, "agent")

    def rid(self):
        return "al-" + uuid.uuid4().hex

    def md(self, rid):
        return [("x-request-id", rid)]

    def access(self, rid, method, timeout=10):
        """The frontend's one access line for request id rid (waits for it: the line is
        written once the status is sent, just after the client has it)."""
        deadline = time.monotonic() + timeout
        while True:
            lines = [o for o in json_lines(self.fe.log(), "frontend")
                     if o.get("request_id") == rid and o.get("msg") == "access"]
            if lines or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        self.assertEqual(len(lines), 1, f"access lines for {rid}: {lines}")
        line = lines[0]
        self.assertEqual(line["method"], CS + method)
        self.assertIsInstance(line["duration_ms"], int)
        self.assertGreaterEqual(line["duration_ms"], 0)
        self.assertTrue(line["peer"].startswith("ipv4:127.0.0.1:"), line)
        self.assertIn(line["level"], ("info", "warn", "error"))
        return line

    def create(self, tenant, session):
        rid = self.rid()
        r = self.c.CreateSandbox(self.c.pb.CreateSandboxRequest(tenant_id=tenant,
                                                                session_id=session),
                                 timeout=60, metadata=self.md(rid))
        return r.sandbox_id, rid

    def test_lifecycle_lines(self):
        """Create, exec, describe, a file call, list, destroy: one line each, every field."""
        c = self.c
        # Printable ASCII, as the API allows: a quote and a backslash must come back whole.
        tenant = 'ten"ant\\' + uuid.uuid4().hex[:6]
        sid, rid = self.create(tenant, "s1")
        line = self.access(rid, "CreateSandbox")
        self.assertEqual((line["code"], line["level"]), ("OK", "info"))
        self.assertEqual((line["tenant"], line["sandbox_id"], line["session"]),
                         (tenant, sid, "s1"))
        self.assertNotIn("error", line)

        rid = self.rid()
        req = c.pb.ExecCommandRequest(sandbox_id=sid, command="sh",
                                      args=["-c", "echo hi; head -c 3000000 /dev/zero | wc -c;"
                                            " exit 3"])
        out, _, done, _ = collect_exec(c.ExecStream(req, timeout=300, metadata=self.md(rid)))
        self.assertEqual(done.exit_code, 3)
        line = self.access(rid, "ExecCommand")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]), ("OK", tenant, sid))
        self.assertEqual((line["exit_code"], line["signal"], line["outcome"]), (3, 0, "exited"))
        self.assertIsInstance(line["wall_ms"], int)
        for k in USAGE:
            self.assertIsInstance(line[k], int, k)
        self.assertEqual(line["cpu_ms"], done.usage.cpu_ms)
        self.assertEqual(line["memory_peak_bytes"], done.usage.memory_peak_bytes)

        # A command killed by a signal, and one that times out.
        rid = self.rid()
        req = c.pb.ExecCommandRequest(sandbox_id=sid, command="sh", args=["-c", "kill -9 $$"])
        _, _, done, _ = collect_exec(c.ExecStream(req, timeout=300, metadata=self.md(rid)))
        line = self.access(rid, "ExecCommand")
        self.assertEqual((line["outcome"], line["signal"], line["exit_code"]),
                         ("signaled", 9, 137))
        rid = self.rid()
        req = c.pb.ExecCommandRequest(sandbox_id=sid, command="sleep", args=["30"])
        req.timeout.seconds = 1
        _, _, done, _ = collect_exec(c.ExecStream(req, timeout=300, metadata=self.md(rid)))
        self.assertTrue(done.timed_out)
        line = self.access(rid, "ExecCommand")
        self.assertEqual((line["outcome"], line["exit_code"]), ("timed_out", -1))
        # An ExecSession's line has its exit and usage as ExecCommand's has.
        rid = self.rid()
        pb = c.pb
        session = c.channel.stream_stream(CS + "ExecSession",
                                          request_serializer=pb.ExecSessionRequest.SerializeToString,
                                          response_deserializer=pb.ExecEvent.FromString)
        start = pb.ExecSessionRequest(start=pb.ExecSessionStart(command=pb.ExecCommandRequest(
            sandbox_id=sid, command="sh", args=["-c", "cat; exit 4"])))
        events = list(session(iter([start, pb.ExecSessionRequest(stdin=b"x"),
                                    pb.ExecSessionRequest(close_stdin=True)]),
                              timeout=300, metadata=self.md(rid)))
        self.assertEqual(events[-1].completed.exit_code, 4)
        line = self.access(rid, "ExecSession")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]), ("OK", tenant, sid))
        self.assertEqual((line["exit_code"], line["outcome"]), (4, "exited"))
        self.assertEqual(line["cpu_ms"], events[-1].completed.usage.cpu_ms)
        # The call's own deadline: DEADLINE_EXCEEDED, the tenant still named.
        rid = self.rid()
        req = c.pb.ExecCommandRequest(sandbox_id=sid, command="sleep", args=["30"])
        with self.assertRaises(grpc.RpcError) as e:
            collect_exec(c.ExecStream(req, timeout=1, metadata=self.md(rid)))
        self.assertEqual(e.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        line = self.access(rid, "ExecCommand")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]),
                         ("DEADLINE_EXCEEDED", tenant, sid))

        rid = self.rid()
        c.DescribeSandbox(c.pb.DescribeSandboxRequest(sandbox_id=sid), timeout=30,
                          metadata=self.md(rid))
        line = self.access(rid, "DescribeSandbox")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]), ("OK", tenant, sid))

        rid = self.rid()
        c.WriteFile(c.pb.WriteFileRequest(sandbox_id=sid, path="f.txt", data=b"x"), timeout=60,
                    metadata=self.md(rid))
        line = self.access(rid, "WriteFile")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]), ("OK", tenant, sid))

        rid = self.rid()
        c.ListSandboxes(c.pb.ListSandboxesRequest(tenant_id=tenant), timeout=60,
                        metadata=self.md(rid))
        line = self.access(rid, "ListSandboxes")
        self.assertEqual((line["code"], line["tenant"], line["sandboxes"]), ("OK", tenant, 1))
        self.assertNotIn("sandbox_id", line)

        rid = self.rid()
        gone = c.DestroySandbox(c.pb.DestroySandboxRequest(sandbox_id=sid), timeout=60,
                                metadata=self.md(rid))
        line = self.access(rid, "DestroySandbox")
        self.assertEqual((line["code"], line["tenant"], line["sandbox_id"]), ("OK", tenant, sid))
        for k in USAGE:
            self.assertEqual(line[k], getattr(gone.total_usage, k), k)
        self.assertGreater(line["cpu_ms"], 0)

        # The agent logs its internal calls at debug (the fixture runs it at debug), under the
        # frontend's request id, which the relay passes on.
        alog = json_lines(self.agent.log(), "agent")
        self.assertTrue(any(o.get("request_id") == rid and o.get("msg") == "access" and
                            o.get("method") == "/nodeagent.v1.NodeAgent/DestroySandbox" and
                            o.get("level") == "debug" for o in alog))

    def test_failed_calls(self):
        """A failed call's line carries its code and message, at info."""
        c = self.c
        rid = self.rid()
        unknown = str(uuid.uuid4())
        with self.assertRaises(grpc.RpcError) as e:
            c.DescribeSandbox(c.pb.DescribeSandboxRequest(sandbox_id=unknown), timeout=30,
                              metadata=self.md(rid))
        self.assertEqual(e.exception.code(), grpc.StatusCode.NOT_FOUND)
        line = self.access(rid, "DescribeSandbox")
        self.assertEqual((line["code"], line["level"], line["sandbox_id"]),
                         ("NOT_FOUND", "info", unknown))
        self.assertTrue(line["error"])

        # A tenant the API refuses (a newline, a quote) is still logged as claimed, escaped.
        rid = self.rid()
        bad = 'evil"\n{"level":"error"}'
        self.assertEqual(code_of(c.CreateSandbox, c.pb.CreateSandboxRequest(
            tenant_id=bad, session_id="s"), timeout=30, metadata=self.md(rid)),
            grpc.StatusCode.INVALID_ARGUMENT)
        line = self.access(rid, "CreateSandbox")
        self.assertEqual((line["code"], line["tenant"]), ("INVALID_ARGUMENT", bad))
        self.assertNotIn("sandbox_id", line)

        # A long one is bounded.
        rid = self.rid()
        self.assertEqual(code_of(c.CreateSandbox, c.pb.CreateSandboxRequest(
            tenant_id="t" * 5000, session_id="s"), timeout=30, metadata=self.md(rid)),
            grpc.StatusCode.INVALID_ARGUMENT)
        line = self.access(rid, "CreateSandbox")
        self.assertEqual(line["tenant"], "t" * 512 + "...")

    def test_health_checks_are_debug(self):
        """Probes' calls do not fill the info log: no health line at info."""
        health_pb2 = Health(BUILD_DIR).pb
        ch = grpc.insecure_channel(self.fe.address)
        check = ch.unary_unary("/grpc.health.v1.Health/Check",
                               request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                               response_deserializer=health_pb2.HealthCheckResponse.FromString)
        rid = self.rid()
        check(health_pb2.HealthCheckRequest(service=""), timeout=10, metadata=self.md(rid))
        ch.close()
        # A later call's line is there: the health call's would be before it.
        rid2 = self.rid()
        code_of(self.c.DescribeSandbox, self.c.pb.DescribeSandboxRequest(sandbox_id="x"),
                timeout=10, metadata=self.md(rid2))
        self.access(rid2, "DescribeSandbox")
        self.assertFalse([o for o in json_lines(self.fe.log(), "frontend")
                          if o.get("request_id") == rid])

    def test_grpc_core_lines_are_json(self):
        """gRPC core's own error line (a port in use: chttp2_server.cc's "No address added")
        comes out as a JSON line with its file and line; garbage bytes on the port break
        nothing."""
        with socket.create_connection(("127.0.0.1", self.fe.port)) as s:
            s.sendall(b"GARBAGE\r\n\r\n" + bytes(range(256)) * 4)
            time.sleep(0.3)
        p = subprocess.run([os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--listen",
                            self.fe.address, "--agents", self.agent.address,
                            "--log-format", "json"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stdout, "")
        lines = json_lines(p.stderr, "second frontend")
        core = [o for o in lines if o.get("source") == "grpc"]
        self.assertTrue(core, p.stderr)
        self.assertEqual(core[0]["level"], "error")
        self.assertTrue(core[0]["grpc_file"].endswith("chttp2_server.cc"), core[0])
        self.assertIsInstance(core[0]["grpc_line"], int)
        self.assertIn("No address added", core[0]["msg"])
        self.assertTrue(any("cannot listen" in o["msg"] for o in lines))

    def test_version(self):
        """--version on every binary, and the version in the start-up line."""
        for name in ("compute-frontend", "compute-nodeagent", "compute-init", "compute-bench"):
            p = subprocess.run([os.path.join(BUILD_DIR, "bin", name), "--version"],
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertRegex(p.stdout, rf"^{name} \d+\.\d+\.\d+\n$")
        version = p.stdout.split()[1]
        start = [o for o in json_lines(self.fe.log(), "frontend") if "serving on" in o["msg"]]
        self.assertEqual(start[0]["version"], version)
        self.assertIn(f"compute-frontend {version} serving on port {self.fe.port}",
                      start[0]["msg"])


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
