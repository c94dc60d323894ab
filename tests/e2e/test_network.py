"""End to end, sandbox networking in local mode (docs/security.md, "Network"; docs/api.md,
"Network"): egress none reaches nothing, allowlist reaches its names (by name and by their
resolved addresses) and its CIDRs and nothing else, open reaches the test internet; none of
them the always-denied (the node's own ports, metadata, another sandbox, private ranges).
network_egress_bytes / network_ingress_bytes agree with what the test's HTTP server counted,
per exec and per sandbox, and survive a kill -9 of the agent.

Everything runs against the test's own "internet" (test_internet.py): a namespace with the
documentation ranges, a DNS and an HTTP server; a guard on the host's real uplink counts (and
drops) every packet of ours there, and the suite ends asserting it counted 0.

Usage: test_network.py BUILD_DIR [unittest args]"""
import os
import signal
import subprocess
import sys
import time
import unittest
import uuid

import grpc

from agent_client import collect_exec
from agent_fixture import AgentProcess, free_port
import testmain
from compute_client import Compute
from frontend_fixture import FrontendProcess, checked_metrics
import test_internet as ti

BUILD_DIR = sys.argv[1]
SUBNET = "10.77.0.0/16"
MIB = 1 << 20


class Frontend(FrontendProcess):
    def __init__(self, agent):
        self.agent = agent
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", self.agent.address, "--agent-poll-ms", "200"]


class NetworkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.net = ti.TestInternet("csnet", sandbox_subnet=SUBNET)
        cls.net.__enter__()
        try:
            cls.table = f"cstest{os.getpid()}"
            cls.metrics_port = free_port()
            cls.agent = AgentProcess(BUILD_DIR, *cls.net.agent_args(), "--sandbox-subnet",
                                     SUBNET, "--nft-table", cls.table, "--metrics-listen",
                                     f"127.0.0.1:{cls.metrics_port}")
            cls.fe = Frontend(cls.agent)
            cls.c = Compute(BUILD_DIR, cls.fe.address)
            cls.tenant = "net-" + uuid.uuid4().hex[:8]
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            if hasattr(cls, "fe"):
                cls.fe.stop()
            if hasattr(cls, "agent"):
                cls.agent.cleanup()
                # The last networked sandbox's destroy took the table with it.
                left = ti.nft_table_exists("inet", cls.table)
                if left:
                    subprocess.run(["nft", "delete", "table", "inet", cls.table])
                links = [l for l in os.listdir("/sys/class/net") if l.startswith("csb")]
                if left or links:
                    raise AssertionError(f"left behind: table {cls.table} {left}, links {links}")
        finally:
            cls.net.__exit__(None, None, None)

    def run(self, result=None):
        """A failing test leaves the tails of the agent's and the servers' logs."""
        failures = len(result.failures) + len(result.errors) if result else 0
        out = super().run(result)
        if result and len(result.failures) + len(result.errors) > failures:
            print("--- agent log (tail) ---\n" + self.agent.log()[-6000:], file=sys.stderr)
            self.net.dump_logs()
        return out

    # --- helpers ---

    def sandbox(self, egress, domains=(), cidrs=()):
        pb = self.c.pb
        spec = pb.NetworkSpec(egress=egress, allow_domains=list(domains),
                              allow_cidrs=list(cidrs))
        sid = self.c.create(self.tenant, "s-" + uuid.uuid4().hex[:8], network=spec).sandbox_id
        self.addCleanup(self.c.destroy, sid)
        return sid

    def sh(self, sid, script, timeout_s=60):
        out, err, done, _ = self.c.exec(sid, "sh", "-c", script, timeout_s=timeout_s)
        return done.exit_code, out.decode(errors="replace"), err.decode(errors="replace"), done

    def get(self, sid, url):
        """(curl's exit status, HTTP status and body) of a GET from the sandbox."""
        code, out, _, _ = self.sh(sid, f"curl -sS --connect-timeout 3 -m 8 {url}")
        return code, out

    def reaches(self, sid, url):
        code, out = self.get(sid, url)
        return code == 0 and out.startswith("hello from ")

    def own_address(self, sid):
        code, out, err, _ = self.sh(sid, "python3 -c 'import socket; s=socket.socket(2,2); "
                                         "s.connect((\"203.0.113.10\", 9)); "
                                         "print(s.getsockname()[0])'")
        self.assertEqual(code, 0, err)
        return out.strip()

    def metrics(self):
        """The agent's /metrics as {'name{labels}': value}, promtool-checked."""
        return checked_metrics(self, self.metrics_port)

    def nft_objects(self):
        """The agent's table as `nft list` prints it: every object's name, every map entry."""
        return subprocess.run(["nft", "list", "table", "inet", self.table], capture_output=True,
                              text=True, check=True).stdout

    def resolves(self, sid, name):
        code, out, _, _ = self.sh(sid, f"getent hosts {name}")
        return code == 0 and out.strip() != ""

    # --- the modes ---

    def test_none_reaches_nothing(self):
        sid = self.sandbox(self.c.pb.EGRESS_MODE_NONE)
        self.assertFalse(self.resolves(sid, "allowed.test"))
        self.assertFalse(self.reaches(sid, f"http://{ti.ALLOWED_ADDR}/hello"))
        d = self.c.describe(sid)
        self.assertEqual(d.network.egress, self.c.pb.EGRESS_MODE_NONE)

    def test_allowlist(self):
        pb = self.c.pb
        self.net.reset_dns_stats()
        sid = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, ["allowed.test", "*.cdn.test"])
        self.assertTrue(self.reaches(sid, "http://allowed.test/hello"))
        self.assertTrue(self.reaches(sid, "http://x.cdn.test/hello"))
        # By the address its name resolved to, too.
        self.assertTrue(self.reaches(sid, f"http://{ti.ALLOWED_ADDR}/hello"))
        # A name not on the list: REFUSED by the node's resolver, never asked upstream.
        code, _, err, _ = self.sh(sid, "python3 -c 'import socket; socket.gethostbyname("
                                       "\"denied.test\")'")
        self.assertNotEqual(code, 0)
        self.assertEqual(self.net.dns_queries("denied.test"), 0)
        self.assertFalse(self.reaches(sid, "http://denied.test/hello"))
        # Literal addresses that no allowed answer gave.
        self.assertFalse(self.reaches(sid, f"http://{ti.OTHER_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.DENIED_ADDR}/hello"))
        self.assertAlwaysDenied(sid)
        d = self.c.describe(sid)
        self.assertEqual(d.network.egress, pb.EGRESS_MODE_ALLOWLIST)
        self.assertEqual(sorted(d.network.allow_domains), ["*.cdn.test", "allowed.test"])

    def test_allowlist_cidr_names_a_private_range(self):
        pb = self.c.pb
        sid = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, cidrs=["192.168.213.0/24",
                                                           "203.0.113.40/32"])
        self.assertTrue(self.reaches(sid, f"http://{ti.PRIVATE_ADDR}/hello"))
        self.assertTrue(self.reaches(sid, f"http://{ti.OTHER_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.INTERNAL_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.ALLOWED_ADDR}/hello"))
        # 0.0.0.0/0 opens the public addresses only: a private range must be named.
        sid = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, cidrs=["0.0.0.0/0"])
        self.assertTrue(self.reaches(sid, f"http://{ti.OTHER_ADDR}/hello"))
        self.assertAlwaysDenied(sid)

    def test_open(self):
        sid = self.sandbox(self.c.pb.EGRESS_MODE_OPEN)
        self.assertTrue(self.reaches(sid, "http://other.test/hello"))
        self.assertTrue(self.reaches(sid, f"http://{ti.OTHER_ADDR}/hello"))
        self.assertTrue(self.reaches(sid, "http://denied.test/hello"))
        self.assertAlwaysDenied(sid)

    def assertAlwaysDenied(self, sid):
        """The private ranges, metadata, the node's own listeners and another sandbox."""
        self.assertFalse(self.reaches(sid, f"http://{ti.PRIVATE_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.INTERNAL_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.METADATA_ADDR}/hello"))
        me = self.own_address(sid)
        gateway = me.rsplit(".", 1)[0] + "." + str(int(me.rsplit(".", 1)[1]) - 1)
        for host in (gateway, ti.HOST_ADDR):
            for port in (self.agent.port, int(self.fe.address.rsplit(":", 1)[1])):
                code, _ = self.get(sid, f"http://{host}:{port}/")
                self.assertNotEqual(code, 0, f"{host}:{port} reached")
        other = self.sandbox(self.c.pb.EGRESS_MODE_OPEN)
        them = self.own_address(other)
        self.assertNotEqual(me, them)
        code, _, _, _ = self.sh(other, "python3 -m http.server 8080 >/dev/null 2>&1 & sleep 1")
        code, _ = self.get(sid, f"http://{them}:8080/")
        self.assertNotEqual(code, 0, "another sandbox reached")

    # --- hostile DNS ---

    FLOOD = r"""
import os, random, socket, struct, sys, time
gw = sys.argv[1]
loop = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\xc0\x0c\x00\x01\x00\x01"
def query(name, qid):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\x00"
    return struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q + b"\x00\x01\x00\x01"
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.setblocking(False)
tcps = []
sent = 0
end = time.monotonic() + 5
while time.monotonic() < end:
    for kind in range(4):
        if kind == 0:
            pkt = os.urandom(random.randint(1, 1400))
        elif kind == 1:
            pkt = loop
        elif kind == 2:
            pkt = query("x%d.allowed.test" % random.randint(0, 1 << 30), sent & 0xffff)
        else:
            pkt = query("allowed.test", sent & 0xffff)
        try:
            u.sendto(pkt, (gw, 53))
            sent += 1
        except OSError:
            pass
    if len(tcps) < 32 and sent % 400 == 0:
        try:
            t = socket.create_connection((gw, 53), timeout=1)
            t.setblocking(False)
            t.send(b"\xff\xff" + os.urandom(65535))
            tcps.append(t)
        except OSError:
            pass
    try:
        while u.recv(4096):
            pass
    except OSError:
        pass
print(sent / 5)
"""

    def test_hostile_dns_costs_that_sandbox_only(self):
        pb = self.c.pb
        bad = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, ["allowed.test", "*.allowed.test"])
        good = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, ["allowed.test"])
        self.assertTrue(self.resolves(good, "allowed.test"))
        me = self.own_address(bad)
        gw = me.rsplit(".", 1)[0] + "." + str(int(me.rsplit(".", 1)[1]) - 1)
        self.c.write(bad, "flood.py", self.FLOOD.encode())
        rss0 = self.agent_rss()
        m0 = self.metrics()
        # Two flooders at once: more than 10,000 datagrams a second between them.
        stream = self.c.ExecStream(pb.ExecCommandRequest(
            sandbox_id=bad, command="sh",
            args=["-c", f"python3 /workspace/flood.py {gw} & python3 /workspace/flood.py {gw}; "
                        "wait"]), timeout=120)
        time.sleep(1)
        ok = 0
        t0 = time.monotonic()
        for _ in range(10):
            ok += self.resolves(good, "allowed.test")
        during = time.monotonic() - t0
        out, _, done, _ = collect_exec(stream)
        rss1 = self.agent_rss()
        m1 = self.metrics()
        rates = [float(x) for x in out.decode().split()]
        print(f"flood: {sum(rates):.0f} datagrams/s for 5 s from one sandbox (garbage, "
              f"compression loops, queries; 64 KiB TCP messages); the other's "
              f"10 lookups: {ok} answered in {during:.2f} s; agent RSS {rss0 >> 10} -> "
              f"{rss1 >> 10} KiB", file=sys.stderr)
        self.assertEqual(done.exit_code, 0)
        self.assertEqual(ok, 10)
        self.assertLess(rss1 - rss0, 64 << 20)
        self.assertTrue(self.resolves(bad, "allowed.test"))  # it recovers once it stops
        # /metrics tells the flood: read, dropped by the rate at the agent, not sent upstream.
        delta = {k: m1.get(k, 0) - m0.get(k, 0) for k in (
            "compute_dns_queries_total", 'compute_dns_replies_by_agent_total{result="dropped"}',
            'compute_dns_replies_by_agent_total{result="refused"}',
            "compute_dns_upstream_queries_total")}
        print(f"resolver metrics over the flood: {delta}", file=sys.stderr)
        queries = delta["compute_dns_queries_total"]
        dropped = delta['compute_dns_replies_by_agent_total{result="dropped"}']
        self.assertGreater(queries, 5000)
        # Past its burst (400) and rate (200/s) for ~5 s, the flooder's queries are dropped;
        # what passed is a few thousand at most, the other sandbox's lookups among them.
        self.assertGreater(dropped, queries - 3000)
        self.assertLess(delta["compute_dns_upstream_queries_total"], 3000)
        self.assertGreater(delta['compute_dns_replies_by_agent_total{result="refused"}'], 0)

    def agent_rss(self):
        with open(f"/proc/{self.agent.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) << 10
        return 0

    def test_destroy_takes_only_its_own_rules(self):
        """A destroyed sandbox's chains, sets, counters, map entries and link go; another
        networked sandbox keeps the table and its own, and its policy still holds."""
        pb = self.c.pb
        keep = self.sandbox(pb.EGRESS_MODE_ALLOWLIST, ["allowed.test"])
        gone = self.sandbox(pb.EGRESS_MODE_OPEN)
        obj_keep, obj_gone = ("s" + x.replace("-", "") for x in (keep, gone))
        link_gone = "csb" + gone.replace("-", "")[:12]
        # A create returns before the sandbox is up; its first exec waits for it.
        self.assertTrue(self.reaches(keep, "http://allowed.test/hello"))
        self.assertTrue(self.reaches(gone, f"http://{ti.OTHER_ADDR}/hello"))
        before = self.nft_objects()
        self.assertIn(obj_gone + "_out", before)
        self.assertIn(link_gone, before)
        self.assertTrue(os.path.exists("/sys/class/net/" + link_gone))
        self.c.destroy(gone)
        after = self.nft_objects()
        for suffix in ("_out", "_in", "_local", "_cidr4", "_priv4", "_dns4", "_tx", "_rx",
                       "_drop"):
            self.assertNotIn(obj_gone + suffix, after)
            self.assertIn(obj_keep + suffix, after)
        self.assertNotIn(link_gone, after)
        self.assertFalse(os.path.exists("/sys/class/net/" + link_gone))
        self.assertTrue(self.reaches(keep, "http://allowed.test/hello"))
        self.assertFalse(self.reaches(keep, f"http://{ti.OTHER_ADDR}/hello"))

    # --- accounting ---

    def test_bytes_are_counted_and_survive_a_kill(self):
        sid = self.sandbox(self.c.pb.EGRESS_MODE_OPEN)
        base = self.c.describe(sid).current_usage
        self.net.reset_stats()
        code, _, err, down = self.sh(
            sid, f"curl -sS -m 60 -o /dev/null http://{ti.ALLOWED_ADDR}/bytes/{10 * MIB}")
        self.assertEqual(code, 0, err)
        code, _, err, up = self.sh(
            sid, f"head -c {10 * MIB} /dev/zero > /tmp/up && curl -sS -m 60 -o /dev/null "
                 f"--data-binary @/tmp/up http://{ti.ALLOWED_ADDR}/upload")
        self.assertEqual(code, 0, err)
        served = self.net.http_stats()["total"]
        sent, received = served["sent"], served["received"]
        print(f"server sent {sent} B, received {received} B; exec down: in "
              f"{down.usage.network_ingress_bytes} out {down.usage.network_egress_bytes}; "
              f"exec up: in {up.usage.network_ingress_bytes} out "
              f"{up.usage.network_egress_bytes}", file=sys.stderr)
        self.assertWithin(down.usage.network_ingress_bytes, sent)
        self.assertWithin(up.usage.network_egress_bytes, received)
        u = self.c.describe(sid).current_usage
        self.assertWithin(u.network_ingress_bytes - base.network_ingress_bytes, sent)
        self.assertWithin(u.network_egress_bytes - base.network_egress_bytes, received)
        # kill -9 and a new agent: the counters live in the kernel's table.
        self.agent.stop(signal.SIGKILL)
        self.agent.start()
        after = self.describe_when_back(sid).current_usage
        self.assertGreaterEqual(after.network_ingress_bytes, u.network_ingress_bytes)
        self.assertGreaterEqual(after.network_egress_bytes, u.network_egress_bytes)
        self.assertLess(after.network_ingress_bytes - u.network_ingress_bytes, 64 * 1024)
        self.assertLess(after.network_egress_bytes - u.network_egress_bytes, 64 * 1024)
        # And its policy with them.
        self.assertTrue(self.reaches(sid, f"http://{ti.OTHER_ADDR}/hello"))
        self.assertFalse(self.reaches(sid, f"http://{ti.PRIVATE_ADDR}/hello"))

    def describe_when_back(self, sid, limit=60):
        """The frontend's link to a restarted agent comes back after its reconnect backoff."""
        deadline = time.monotonic() + limit
        while True:
            try:
                return self.c.describe(sid)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def assertWithin(self, counted, served, pct=2.0):
        self.assertGreater(served, 0)
        self.assertLessEqual(abs(counted - served) * 100.0 / served, pct,
                             f"counted {counted} B against {served} B served")

    def test_zz_nothing_on_the_real_uplink(self):
        self.net.assert_no_uplink_packets()


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
