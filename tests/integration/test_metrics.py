"""The /metrics endpoints of a real compute-frontend and compute-nodeagent (local mode, runsc),
scraped by a real Prometheus server (Debian's `prometheus`) on loopback: the per-sandbox series
Prometheus stored lie between two DescribeSandbox readings taken before and after the scrape
(one code path), the exec, file and gRPC counters move, `promtool check metrics` is clean on
both pages, and bad requests to the metrics port get their HTTP answer without costing a
scrape."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request
import uuid

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from agent_fixture import AgentProcess, free_port, remove_cgroup  # noqa: E402
from compute_client import Compute  # noqa: E402
import test_computectl as ctl  # noqa: E402 (its FrontendProcess and cleanup list)

BUILD_DIR = ctl.BUILD_DIR
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


TOKEN = "metrics-test-token-" + uuid.uuid4().hex


def http_get(port, path="/metrics", token=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if token:
        req.add_header("Authorization", "Bearer " + token)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.status, r.read().decode()


def raw(port, request, timeout=10):
    """Sends request bytes on a new connection, returns all the server answers."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(request)
        except OSError:
            pass  # the server may close before it read everything: that is an answer too
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except OSError:
            pass
        return out


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-met-", dir="/tmp")
        ctl._cleanups.append(lambda: shutil.rmtree(cls.tmp, ignore_errors=True))
        cls.agent_port, cls.frontend_port, cls.prom_port = free_port(), free_port(), free_port()
        # The agent's page names every sandbox: it asks for a bearer token (the frontend's
        # does not, it names none).
        cls.token_file = os.path.join(cls.tmp, "agent-metrics-token")
        with open(cls.token_file, "w") as f:
            f.write(TOKEN + "\n")
        cls.agent = AgentProcess(BUILD_DIR, "--metrics-listen", f"127.0.0.1:{cls.agent_port}",
                                 "--metrics-token-file", cls.token_file)
        ctl._cleanups.append(lambda: remove_cgroup(cls.agent.cgroup_parent))
        ctl._cleanups.append(cls.agent.cleanup)
        cls.frontend = ctl.FrontendProcess(cls.agent.address, cls.tmp, "--metrics-listen",
                                           f"127.0.0.1:{cls.frontend_port}")
        ctl._cleanups.append(cls.frontend.stop)
        cls.c = Compute(BUILD_DIR, cls.frontend.address)
        ctl._cleanups.append(cls.c.channel.close)
        grpc.channel_ready_future(cls.c.channel).result(timeout=30)
        cls.start_prometheus()

    @classmethod
    def start_prometheus(cls):
        config = os.path.join(cls.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: agent
    authorization: {{credentials_file: "{cls.token_file}"}}
    static_configs: [{{targets: ["127.0.0.1:{cls.agent_port}"]}}]
  - job_name: frontend
    static_configs: [{{targets: ["127.0.0.1:{cls.frontend_port}"]}}]
""")
        cls.prom_log = os.path.join(cls.tmp, "prometheus.log")
        with open(cls.prom_log, "ab") as log:
            cls.prom = subprocess.Popen(
                [PROMETHEUS, f"--config.file={config}",
                 f"--storage.tsdb.path={os.path.join(cls.tmp, 'tsdb')}",
                 f"--web.listen-address=127.0.0.1:{cls.prom_port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)

        def stop():
            cls.prom.terminate()
            try:
                cls.prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                cls.prom.kill()
                cls.prom.wait()
        ctl._cleanups.append(stop)
        deadline = time.monotonic() + 60
        while True:
            try:
                http_get(cls.prom_port, "/-/ready")
                return
            except OSError:
                if cls.prom.poll() is not None or time.monotonic() > deadline:
                    with open(cls.prom_log) as f:
                        raise RuntimeError("prometheus did not start:\n" + f.read()[-3000:])
                time.sleep(0.2)

    @classmethod
    def tearDownClass(cls):
        ctl.run_cleanups()

    def tails(self):
        out = []
        for name, path in (("agent", self.agent.log_path), ("frontend", self.frontend.log_path),
                           ("prometheus", self.prom_log)):
            with open(path, "rb") as f:
                out.append(f"--- {name} log (end) ---\n" + f.read()[-3000:].decode(errors="replace"))
        return "\n".join(out)

    def query(self, expr):
        """Prometheus' instant query: [(labels, value)]."""
        q = urllib.parse.urlencode({"query": expr})
        _, body = http_get(self.prom_port, f"/api/v1/query?{q}")
        data = json.loads(body)
        self.assertEqual(data["status"], "success", body)
        return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]

    def scraped_after(self, job, t):
        """Waits until Prometheus scraped job (successfully) after wall time t."""
        deadline = time.monotonic() + 30
        while True:
            res = self.query(f'timestamp(up{{job="{job}"}})')
            up = self.query(f'up{{job="{job}"}}')
            if res and res[0][1] > t and up and up[0][1] == 1:
                return
            self.assertLess(time.monotonic(), deadline, f"{job} not scraped\n{self.tails()}")
            time.sleep(0.3)

    def test_promtool_clean_on_both_pages(self):
        for port, token in ((self.agent_port, TOKEN), (self.frontend_port, None)):
            status, page = http_get(port, token=token)
            self.assertEqual(status, 200)
            r = subprocess.run([PROMTOOL, "check", "metrics"], input=page.encode(),
                               capture_output=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # Read under each daemon's seccomp filter (listing /proc/self/fd was refused in
            # the frontend, and the page said 0).
            fds = [line for line in page.splitlines() if line.startswith("process_open_fds ")]
            self.assertEqual(len(fds), 1, page)
            self.assertGreater(float(fds[0].split()[1]), 3, (port, fds))
            for name in ("process_cpu_seconds_total", "process_resident_memory_bytes",
                         "process_open_fds", "process_max_fds", "process_start_time_seconds",
                         "compute_build_info", "grpc_server_started_total",
                         "grpc_server_handled_total", "grpc_server_handling_seconds_bucket"):
                self.assertIn("\n" + name, page, (port, name))

    def test_sandbox_series_match_describe(self):
        c = self.c
        sid = c.create(str(uuid.uuid4()), str(uuid.uuid4())).sandbox_id
        try:
            out, err, done, _ = c.exec(sid, "sh", "-c",
                                       "head -c 50000000 /dev/zero | sha256sum >/dev/null; "
                                       "dd if=/dev/zero of=/workspace/f bs=1M count=8 "
                                       "conv=fsync 2>/dev/null; echo ok")
            self.assertEqual(out, b"ok\n", err)
            c.write(sid, "w.bin", b"x" * (1 << 20))
            self.assertEqual(c.read(sid, "w.bin").data, b"x" * (1 << 20))
            before = c.describe(sid)
            t = time.time()
            self.scraped_after("agent", t)
            after = c.describe(sid)
            sel = f'{{sandbox_id="{sid}"}}'

            def one(metric):
                res = self.query(metric + sel)
                self.assertEqual(len(res), 1, (metric, res, self.tails()))
                labels, value = res[0]
                self.assertEqual(labels["tenant_id"] and labels["session_id"] and True, True)
                return value

            cpu = one("compute_sandbox_cpu_seconds_total")
            print(f"\nscraped cpu {cpu} s between DescribeSandbox's "
                  f"{before.current_usage.cpu_ms} and {after.current_usage.cpu_ms} ms; "
                  f"disk written {one('compute_sandbox_disk_write_bytes_total'):.0f} B, "
                  f"memory now {one('compute_sandbox_memory_bytes'):.0f} B")
            self.assertGreater(cpu, 0)
            self.assertLessEqual(before.current_usage.cpu_ms / 1000 - 0.001, cpu)
            self.assertLessEqual(cpu, after.current_usage.cpu_ms / 1000 + 0.001)
            for metric, field in (("compute_sandbox_memory_peak_bytes", "memory_peak_bytes"),
                                  ("compute_sandbox_disk_read_bytes_total", "disk_read_bytes"),
                                  ("compute_sandbox_disk_write_bytes_total", "disk_write_bytes"),
                                  ("compute_sandbox_network_receive_bytes_total",
                                   "network_ingress_bytes"),
                                  ("compute_sandbox_network_transmit_bytes_total",
                                   "network_egress_bytes")):
                v = one(metric)
                self.assertLessEqual(getattr(before.current_usage, field), v, metric)
                self.assertLessEqual(v, getattr(after.current_usage, field), metric)
            self.assertGreater(one("compute_sandbox_memory_bytes"), 0)
            self.assertGreater(one("compute_sandbox_uptime_seconds"), 0)
            status = {l["status"]: v for l, v in self.query("compute_sandbox_status" + sel)}
            self.assertEqual(status, {"STARTING": 0, "READY": 1, "FAILED": 0, "DESTROYED": 0})

            exited = self.query('compute_exec_total{outcome="exited"}')
            self.assertGreaterEqual(exited[0][1], 1)
            files = {l["op"]: v for l, v in self.query("compute_file_bytes_total")}
            self.assertGreaterEqual(files["write"], 1 << 20)
            self.assertGreaterEqual(files["read"], 1 << 20)
            self.scraped_after("frontend", t)
            execs = self.query('grpc_server_handled_total{job="frontend",'
                               'grpc_method="ExecCommand",grpc_code="OK"}')
            self.assertGreaterEqual(execs[0][1], 1, self.tails())
        finally:
            c.destroy(sid)
        # A destroyed sandbox keeps its series, with its final values, for a while.
        t = time.time()
        self.scraped_after("agent", t)
        status = {l["status"]: v for l, v in self.query(
            f'compute_sandbox_status{{sandbox_id="{sid}"}}')}
        self.assertEqual(status["DESTROYED"], 1)

    def test_agent_page_needs_its_token(self):
        for token in (None, "wrong", TOKEN[:-1]):
            with self.assertRaises(urllib.error.HTTPError) as cm:
                http_get(self.agent_port, token=token)
            self.assertEqual(cm.exception.code, 401)
            self.assertEqual(cm.exception.headers["WWW-Authenticate"], 'Bearer realm="metrics"')
        self.assertIn(b"HTTP/1.1 401", raw(self.agent_port, b"GET /nothing HTTP/1.1\r\n"
                                                            b"Host: x\r\nConnection: close\r\n\r\n"))

    def test_bad_requests_answered_and_cheap(self):
        port = self.frontend_port  # no token: the answers below are the HTTP layer's
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET /metr")  # and nothing more: holds only its own connection
        try:
            self.assertIn(b"HTTP/1.1 404", raw(port, b"GET / HTTP/1.1\r\nHost: x\r\n"
                                                     b"Connection: close\r\n\r\n"))
            self.assertIn(b"HTTP/1.1 404", raw(port, b"GET /metrics/x HTTP/1.1\r\nHost: x\r\n"
                                                     b"Connection: close\r\n\r\n"))
            r = raw(port, b"DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            self.assertIn(b"HTTP/1.1 405", r)
            self.assertIn(b"Allow: GET, HEAD", r)
            r = raw(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1 << 20)
                    + b"\r\n\r\n")
            self.assertTrue(r == b"" or r.startswith(b"HTTP/1.1 431"), r[:200])
            self.assertEqual(raw(port, b"\x16\x03\x01 not http at all\r\n\r\n")[:12]
                             in (b"", b"HTTP/1.1 400"), True)
            status, page = http_get(port)  # still served, slow client and all
            self.assertEqual(status, 200)
            self.assertIn("compute_build_info", page)
        finally:
            slow.close()


if __name__ == "__main__":
    ctl.main()  # this file's tests, then test_computectl's cleanups
