"""Sandbox networking, measured side by side in one run (docs/performance.md, "Sandbox
network"): a node agent of its own (local mode, runsc) against the test "internet" of the
networking tests (tests/e2e/test_internet.py: a namespace behind a veth, an HTTP server; no
packet leaves the machine), and the same operations from the host's namespace as the baseline.

  - throughput of a 100 MiB download (10 MiB with --quick): a sandbox with egress open
    against curl in the host's namespace, same server, same route; goal >= 0.5x;
  - create-to-READY latency with a network (egress open) against without (egress none),
    alternated; goal <= +20 ms at p50;
  - TCP connect latency to an allowed IP (allowlist by CIDR), in the sandbox against the host.

Usage (root): bench/network.py BUILD_DIR [--quick] [--json FILE]
Prints one table; exit status 0 when every figure was measured (whatever the verdicts)."""
import json
import os
import statistics
import subprocess
import sys
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(ROOT, "tests", "e2e"), os.path.join(ROOT, "tests", "integration")]

import test_internet as ti  # noqa: E402
from agent_fixture import AgentProcess  # noqa: E402

SUBNET = "10.78.0.0/16"

CONNECT = r"""
import socket, sys, time
n, addr = int(sys.argv[1]), sys.argv[2]
out = []
for _ in range(n):
    t = time.perf_counter()
    s = socket.create_connection((addr, 80), timeout=5)
    out.append((time.perf_counter() - t) * 1000)
    s.close()
print(" ".join("%.3f" % x for x in out))
"""


def p50(xs):
    return statistics.median(xs)


class Bench:
    def __init__(self, build, quick):
        self.build, self.quick = build, quick
        self.rows = []
        # The sandboxes' CPU limit (0: the default, 1000 m): the sentry's netstack runs in it.
        self.cpu_millis = int(os.environ.get("BENCH_CPU_MILLIS", "0"))

    def row(self, fid, what, service, baseline, unit, goal, ok):
        ratio = service / baseline if baseline else float("nan")
        self.rows.append({"id": fid, "figure": what, "service": service, "baseline": baseline,
                          "unit": unit, "ratio": ratio, "goal": goal,
                          "verdict": "met" if ok else "missed"})

    def create(self, egress, cidrs=()):
        c, pbc = self.agent.client, self.pbc
        sid = str(uuid.uuid4())
        t0 = time.perf_counter()
        c.CreateSandbox(c.pb.CreateSandboxRequest(
            sandbox_id=sid, tenant_id="bench", session_id=sid,
            network=pbc.NetworkSpec(egress=egress, allow_cidrs=list(cidrs)),
            cpu_millis=self.cpu_millis), timeout=60)
        while True:
            st = c.GetSandbox(c.pb.GetSandboxRequest(ref=c.ref(sid)), timeout=30).sandbox.status
            if st == 2:  # READY
                break
            if st in (3, 4):
                raise RuntimeError(f"sandbox {sid} did not start")
            time.sleep(0.005)
        return sid, (time.perf_counter() - t0) * 1000

    def destroy(self, sid):
        c = self.agent.client
        c.DestroySandbox(c.pb.DestroySandboxRequest(ref=c.ref(sid)), timeout=60)

    def sh(self, sid, script):
        out, err, done, _ = self.agent.client.exec(sid, "sh", "-c", script)
        if done.exit_code != 0:
            raise RuntimeError(f"{script!r}: exit {done.exit_code}: {err.decode()[-300:]}")
        return out.decode()

    def run(self):
        with ti.TestInternet("csbench", sandbox_subnet=SUBNET) as net:
            self.agent = AgentProcess(self.build, *net.agent_args(), "--sandbox-subnet", SUBNET,
                                      "--nft-table", f"csbench{os.getpid()}",
                                      "--max-parallel-starts", "1",
                                      *os.environ.get("BENCH_AGENT_ARGS", "").split())
            try:
                sys.path.insert(0, os.path.join(self.build, "python"))
                from compute.v1 import compute_pb2
                self.pbc = compute_pb2
                self.measure(net)
            finally:
                self.agent.cleanup()
            net.assert_no_uplink_packets()

    def measure(self, net):
        pb = self.pbc
        size = (10 if self.quick else 100) << 20
        runs = 1 if self.quick else 3
        url = f"http://{ti.ALLOWED_ADDR}/bytes/{size}"

        # Throughput: the best of the runs each side, alternated.
        sid, _ = self.create(pb.EGRESS_MODE_OPEN)
        sb, host = [], []
        for _ in range(runs):
            t = float(self.sh(sid, f"curl -sS -m 120 -o /dev/null -w '%{{time_total}}' {url}"))
            sb.append(size / t / 1e6)
            t0 = time.perf_counter()
            st, body = ti.http_request(ti.ALLOWED_ADDR, "GET", f"/bytes/{size}", timeout=120)
            host.append(size / (time.perf_counter() - t0) / 1e6)
            if st != 200 or len(body) != size:
                raise RuntimeError(f"host download: HTTP {st}, {len(body)} bytes")
        self.row("net_download_mbps", f"download {size >> 20} MiB (MB/s, best of {runs})",
                 max(sb), max(host), "MB/s", ">= 0.5x", max(sb) >= 0.5 * max(host))
        self.destroy(sid)

        # Create to READY, with and without a network, alternated.
        n = 3 if self.quick else 10
        on, off = [], []
        for _ in range(n):
            for egress, out in ((pb.EGRESS_MODE_NONE, off), (pb.EGRESS_MODE_OPEN, on)):
                sid, ms = self.create(egress)
                out.append(ms)
                self.destroy(sid)
        self.row("net_create_added_ms", f"create to READY, p50 of {n} (ms): open vs none",
                 p50(on), p50(off), "ms", "<= +20 ms", p50(on) - p50(off) <= 20)

        # TCP connect to an allowed address.
        k = 20 if self.quick else 100
        sid, _ = self.create(pb.EGRESS_MODE_ALLOWLIST, [f"{ti.ALLOWED_ADDR}/32"])
        self.agent.client.WriteFile(self.agent.client.pb.WriteFileRequest(
            ref=self.agent.client.ref(sid), path="connect.py", data=CONNECT.encode()),
            timeout=30)
        sb = [float(x) for x in self.sh(
            sid, f"python3 /workspace/connect.py {k} {ti.ALLOWED_ADDR}").split()]
        # The same script on the host, in its own namespace.
        host = [float(x) for x in subprocess.run(
            ["/usr/bin/python3", "-c", CONNECT, str(k), ti.ALLOWED_ADDR], check=True,
            capture_output=True, text=True).stdout.split()]
        self.row("net_connect_ms", f"TCP connect to an allowed IP, p50 of {k} (ms)",
                 p50(sb), p50(host), "ms", "report", True)
        self.destroy(sid)

    def print(self):
        print(f"{'figure':58} {'sandbox':>10} {'host':>10} {'ratio':>7}  goal       verdict")
        for r in self.rows:
            print(f"{r['figure']:58} {r['service']:10.2f} {r['baseline']:10.2f} "
                  f"{r['ratio']:7.2f}  {r['goal']:10} {r['verdict']}")


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    b = Bench(os.path.abspath(argv[1]), "--quick" in argv)
    b.run()
    b.print()
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            json.dump({"rows": b.rows}, f, indent=1)
    return 0 if len(b.rows) == 3 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
