"""The test internet (test_internet.py) on its own, from the host namespace: HTTP on every
test address (hello, bytes, upload, the statistics), the DNS server over UDP and TCP (every
name it serves, NXDOMAIN, CNAME, AAAA, truncation, the counts, the TTL, a rebinding), IPv6,
a sandbox-like namespace masqueraded out of the uplink with only per-interface forwarding on,
the uplink guard (counts and drops, on a dummy interface: never the real uplink), and that
nothing is left behind: after __exit__, after a failure inside the block, after a run that
was killed (the next one sweeps it). No packet leaves the machine: the guard's count on the
real uplink is 0 at the end.

Needs root, ip and nft. Usage: test_internet_selftest.py [unittest args]"""
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

import testmain
import test_internet as ti
from test_internet import TestInternet, UplinkGuard, dns_query, addresses_of

# Never a proxy: a proxy from the environment would send our requests off the machine.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url, data=None, timeout=30):
    with OPENER.open(urllib.request.Request(url, data=data), timeout=timeout) as r:
        return r.status, r.read()


def run(*args, check=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if check and p.returncode:
        raise RuntimeError(f"{args}: {p.stderr}")
    return p


def host_state():
    """What a leak check compares: namespaces, links, routes (v4 and v6, all tables), nft
    tables."""
    return {"netns": run("ip", "netns", "list").stdout,
            "links": run("ip", "-o", "link").stdout,
            "routes": run("ip", "route", "show", "table", "all").stdout
            + run("ip", "-6", "route", "show", "table", "all").stdout,
            "tables": run("nft", "list", "tables").stdout}


def assert_gone(tc, net):
    tc.assertEqual(net.leftovers(), [])
    st = host_state()
    tc.assertNotIn(net.ns, st["netns"])
    tc.assertNotIn(net.uplink + ":", st["links"])
    tc.assertNotIn(net.uplink + "@", st["links"])
    for r in ti.ROUTES4 + ti.ROUTES6:
        tc.assertNotIn(r, st["routes"])
    tc.assertNotIn(net.uplink, st["routes"])
    tc.assertNotIn(net.guard_table, st["tables"])
    tc.assertFalse(os.path.exists(net.log_dir or "/nonexistent"))


def setUpModule():
    if os.geteuid() != 0:
        raise unittest.SkipTest("needs root")
    for tool in ("ip", "nft"):
        if not shutil.which(tool):
            raise unittest.SkipTest(f"needs {tool}")


class InternetTest(unittest.TestCase):
    """One test internet for every test of the class."""

    @classmethod
    def setUpClass(cls):
        cls.before = host_state()
        cls.net = TestInternet("csnet-self")
        cls.net.__enter__()

    @classmethod
    def tearDownClass(cls):
        net = cls.net
        leaked = net.uplink_packets()
        report = net.uplink_report()
        net.__exit__(None, None, None)
        if leaked:
            raise AssertionError(f"{leaked} packet(s) on the real uplink:\n{report}")
        left = net.leftovers()
        if left:
            raise AssertionError(f"left behind: {left}")
        after = host_state()
        if after != cls.before:
            raise AssertionError(f"the host changed:\nbefore {cls.before}\nafter {after}")

    def setUp(self):
        self.net.reset_stats()
        self.net.reset_dns_stats()

    def tearDown(self):
        result = self._outcome.result
        if any(t is self for t, _ in result.errors + result.failures):
            self.net.dump_logs()

    def test_attributes(self):
        n = self.net
        self.assertLessEqual(len(n.uplink), 15)
        self.assertTrue(n.uplink.startswith("csi"))
        self.assertIn(str(os.getpid()), n.ns)
        self.assertIn(n.ns, ti.netns_list())
        self.assertEqual(n.dns_addr, "198.51.100.53")
        self.assertEqual((n.allowed_addr, n.denied_addr, n.cdn_addr, n.other_addr),
                         ("203.0.113.10", "203.0.113.20", "203.0.113.30", "203.0.113.40"))
        self.assertEqual(n.agent_args(), ["--egress-uplink", n.uplink,
                                          "--upstream-dns", "198.51.100.53"])
        self.assertEqual(n.real_uplinks, ti.default_route_devs())
        self.assertEqual(n.sandbox_subnets, ["10.77.0.0/16"])
        self.assertIn("10.77.0.0/16", n.guarded4)
        # Per-interface forwarding on our veth; the global switch as it was.
        with open(f"/proc/sys/net/ipv4/conf/{n.uplink}/forwarding") as f:
            self.assertEqual(f.read().strip(), "1")
        with open("/proc/sys/net/ipv4/ip_forward") as f:
            self.assertEqual(f.read().strip(), self.before_ip_forward)

    before_ip_forward = open("/proc/sys/net/ipv4/ip_forward").read().strip()

    def test_routes(self):
        n = self.net
        for a in (n.allowed_addr, n.denied_addr, n.cdn_addr, n.other_addr, n.private_addr,
                  n.internal_addr, n.dns_addr):
            r = run("ip", "route", "get", a).stdout
            self.assertIn(f"dev {n.uplink}", r, a)
        # The metadata address is not routed to the test internet (the guard is what stops
        # a sandbox that reaches it); nothing is sent to it here.
        self.assertNotIn(n.uplink, run("ip", "route", "get", n.metadata_addr).stdout)
        self.assertIn(f"dev {n.uplink}", run("ip", "route", "get", n.allowed_addr6).stdout)
        for dev in n.real_uplinks:
            self.assertNotIn(f"dev {dev}", run("ip", "route", "get", n.allowed_addr).stdout)

    def test_hello_on_every_address(self):
        n = self.net
        for a in (n.allowed_addr, n.denied_addr, n.cdn_addr, n.other_addr, n.private_addr,
                  n.internal_addr, n.dns_addr, n.ns_addr):
            st, body = fetch(f"http://{a}/hello")
            self.assertEqual((st, body), (200, f"hello from {a}\n".encode()))
        stats = n.http_stats()
        self.assertEqual(stats["clients"][n.host_addr]["requests"], 8)
        self.assertEqual(stats["servers"][n.private_addr]["sent"], len(b"hello from ") + 14)

    def test_ipv6(self):
        if not self.net.ipv6:
            self.skipTest("no IPv6 on this host")
        st, body = fetch(f"http://[{ti.ALLOWED_ADDR6}]/hello")
        self.assertEqual((st, body), (200, f"hello from {ti.ALLOWED_ADDR6}\n".encode()))

    def test_bytes_upload_and_stats(self):
        n = self.net
        st, body = fetch(f"http://{n.allowed_addr}/bytes/1048576", timeout=60)
        self.assertEqual(st, 200)
        self.assertEqual(len(body), 1048576)
        self.assertEqual(body[:512], bytes(range(256)) * 2)
        self.assertEqual(body[-1], (1048576 - 1) % 256)
        st, body = fetch(f"http://{n.other_addr}/upload", data=b"u" * 300000)
        self.assertEqual((st, body), (200, b"300000\n"))
        stats = n.http_stats()
        me = stats["clients"][n.host_addr]
        self.assertEqual(me, {"requests": 2, "received": 300000, "sent": 1048576 + 7})
        self.assertEqual(stats["servers"][n.allowed_addr]["sent"], 1048576)
        self.assertEqual(stats["servers"][n.other_addr]["received"], 300000)
        self.assertEqual(stats["total"]["sent"], 1048576 + 7)
        n.reset_stats()
        self.assertEqual(n.http_stats(), {"clients": {}, "servers": {},
                                          "total": {"requests": 0, "received": 0, "sent": 0}})
        # A big body, chunked (as curl -T - sends one).
        req = (b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"".join(b"%x\r\n" % 65536 + b"c" * 65536 + b"\r\n" for _ in range(80))
               + b"0\r\n\r\n")
        with socket.create_connection((n.allowed_addr, 80), timeout=30) as s:
            s.sendall(req)
            reply = b""
            while not reply.endswith(b"\r\n\r\n" + b"%d\n" % (80 * 65536)):
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200"), reply)
        self.assertEqual(n.http_stats()["clients"][n.host_addr]["received"], 80 * 65536)

    def test_bytes_limits(self):
        with self.assertRaises(urllib.error.HTTPError) as cm:
            fetch(f"http://{ti.ALLOWED_ADDR}/bytes/{200 * 1024 * 1024 + 1}")
        self.assertEqual(cm.exception.code, 400)
        self.assertEqual(fetch(f"http://{ti.ALLOWED_ADDR}/bytes/0"), (200, b""))
        with self.assertRaises(urllib.error.HTTPError) as cm:
            fetch(f"http://{ti.ALLOWED_ADDR}/nothing")
        self.assertEqual(cm.exception.code, 404)

    def test_dns(self):
        n = self.net
        for tcp in (False, True):
            r = dns_query("allowed.test", tcp=tcp)
            self.assertEqual(r["rcode"], "NOERROR")
            self.assertTrue(r["aa"])
            self.assertFalse(r["ra"])
            self.assertEqual(r["answers"], [("allowed.test", "A", 60, "203.0.113.10")])
            self.assertEqual(addresses_of(dns_query("denied.test", tcp=tcp)), ["203.0.113.20"])
            self.assertEqual(addresses_of(dns_query("other.test", tcp=tcp)), ["203.0.113.40"])
            for name in ("x.y.cdn.test", "a.cdn.test", "Mixed.CDN.test"):
                r = dns_query(name, tcp=tcp)
                self.assertEqual(r["answers"], [(name, "A", 60, "203.0.113.30")], name)
            r = dns_query("alias.test", tcp=tcp)
            self.assertEqual(r["answers"], [("alias.test", "CNAME", 60, "allowed.test"),
                                            ("allowed.test", "A", 60, "203.0.113.10")])
            r = dns_query("alias.test", "CNAME", tcp=tcp)
            self.assertEqual(r["answers"], [("alias.test", "CNAME", 60, "allowed.test")])
            r = dns_query("allowed.test", "AAAA", tcp=tcp)
            self.assertEqual(r["answers"], [("allowed.test", "AAAA", 60, "2001:db8::10")])
            r = dns_query("alias.test", "AAAA", tcp=tcp)
            self.assertEqual(addresses_of(r, "AAAA"), ["2001:db8::10"])
            for name in ("nope.test", "example.com", "allowed.test.evil"):
                r = dns_query(name, tcp=tcp)
                self.assertEqual((r["rcode"], r["answers"]), ("NXDOMAIN", []), name)
            r = dns_query("nope.test", tcp=tcp)
            self.assertEqual([a[1] for a in r["authority"]], ["SOA"])
            # A name without the type asked: NOERROR, no answer (and cdn.test exists, empty).
            for name, qt in (("denied.test", "AAAA"), ("cdn.test", "A")):
                r = dns_query(name, qt, tcp=tcp)
                self.assertEqual((r["rcode"], r["answers"]), ("NOERROR", []), name)
            r = dns_query("allowed.test", edns=1232, tcp=tcp)
            self.assertEqual(addresses_of(r), ["203.0.113.10"])
            self.assertEqual([a[1] for a in r["additional"]], ["OPT"])
        # Too big for UDP: truncated there, whole over TCP.
        r = dns_query("big.test", "TXT")
        self.assertTrue(r["tc"])
        self.assertEqual(r["answers"], [])
        r = dns_query("big.test", "TXT", tcp=True)
        self.assertFalse(r["tc"])
        self.assertEqual(len(r["answers"]), 40)
        # The counts, per name, any type and case.
        st = n.dns_stats()
        self.assertEqual(n.dns_queries("allowed.test"), 6)  # A, AAAA, A with EDNS; twice
        self.assertEqual(n.dns_queries("denied.test"), 4)
        self.assertEqual(n.dns_queries("mixed.cdn.test"), 2)
        self.assertEqual(st["types"]["allowed.test/AAAA"], 2)
        self.assertEqual(st["transports"], {"udp": st["total"] - st["transports"]["tcp"],
                                            "tcp": st["transports"]["tcp"]})
        self.assertEqual(n.dns_queries("never.test"), 0)
        n.reset_dns_stats()
        self.assertEqual(n.dns_stats()["total"], 0)

    def test_dns_ttl_and_rebinding(self):
        n = self.net
        try:
            n.set_dns_ttl(5)
            self.assertEqual(n.resolve("allowed.test")["answers"][0][2], 5)
            n.set_dns_record("allowed.test", "A", [ti.OTHER_ADDR])
            self.assertEqual(addresses_of(n.resolve("alias.test", tcp=True)), [ti.OTHER_ADDR])
            n.set_dns_record("new.test", "A", ["203.0.113.41", "203.0.113.42"])
            self.assertEqual(addresses_of(n.resolve("new.test")),
                             ["203.0.113.41", "203.0.113.42"])
            n.set_dns_record("denied.test", "A", [])
            self.assertEqual(n.resolve("denied.test")["answers"], [])
            with self.assertRaises(RuntimeError):
                n.set_dns_record("bad.test", "A", ["not-an-address"])
        finally:
            n.reset_dns_zone()
        r = n.resolve("allowed.test")
        self.assertEqual(r["answers"], [("allowed.test", "A", 60, ti.ALLOWED_ADDR)])
        self.assertEqual(n.resolve("new.test")["rcode"], "NXDOMAIN")

    def test_sandbox_like_namespace(self):
        """What the agent does for a sandbox, by hand: a namespace on a veth from the host
        (an address of the sandbox subnet), forwarding on for that veth only, masquerade out
        of the uplink. Its requests reach the test internet as the uplink's address; the
        private targets answer (what blocks them is policy, not routing)."""
        n = self.net
        pid = os.getpid()
        sns, sdev, table = f"cssbx-{pid}", f"css{pid % 100000}", f"cs_test_sbx_{pid}"
        try:
            run("ip", "netns", "add", sns)
            run("ip", "link", "add", sdev, "type", "veth", "peer", "name", "eth0",
                "netns", sns)
            run("ip", "addr", "add", "10.77.255.1/30", "dev", sdev)
            run("ip", "link", "set", sdev, "up")
            with open(f"/proc/sys/net/ipv4/conf/{sdev}/forwarding", "w") as f:
                f.write("1")
            for cmd in (["ip", "link", "set", "lo", "up"],
                        ["ip", "addr", "add", "10.77.255.2/30", "dev", "eth0"],
                        ["ip", "link", "set", "eth0", "up"],
                        ["ip", "route", "add", "default", "via", "10.77.255.1"]):
                run("ip", "netns", "exec", sns, *cmd)
            p = subprocess.run(["nft", "-f", "-"], text=True, capture_output=True, input=(
                f"table ip {table} {{\n chain post {{\n type nat hook postrouting priority 100;\n"
                f' oifname "{n.uplink}" ip saddr 10.77.0.0/16 masquerade\n }}\n}}\n'))
            self.assertEqual(p.returncode, 0, p.stderr)
            code = (
                "import sys, urllib.request, test_internet as t\n"
                "o = urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
                "for a in sys.argv[1:]:\n"
                "    print(o.open('http://%s/hello' % a, timeout=10).read().decode(), end='')\n"
                "print(t.addresses_of(t.dns_query('allowed.test')))\n"
                "print(t.addresses_of(t.dns_query('x.cdn.test', tcp=True)))\n")
            out = subprocess.run(
                ["ip", "netns", "exec", sns, ti.PYTHON, "-c", code, n.allowed_addr,
                 n.private_addr, n.internal_addr],
                capture_output=True, text=True, timeout=60,
                env=dict(os.environ, PYTHONPATH=os.path.dirname(ti.__file__)))
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertEqual(out.stdout, "hello from 203.0.113.10\nhello from 192.168.213.1\n"
                             "hello from 10.213.0.1\n['203.0.113.10']\n['203.0.113.30']\n")
            stats = n.http_stats()
            self.assertEqual(list(stats["clients"]), [n.host_addr])  # masqueraded
            self.assertEqual(stats["clients"][n.host_addr]["requests"], 3)
            self.assertEqual(n.dns_queries("allowed.test"), 1)
            with open("/proc/sys/net/ipv4/ip_forward") as f:
                self.assertEqual(f.read().strip(), self.before_ip_forward)
        finally:
            run("ip", "link", "del", sdev, check=False)
            run("ip", "netns", "del", sns, check=False)
            run("nft", "delete", "table", "ip", table, check=False)
        self.assertNotIn(sns, ti.netns_list())
        self.assertFalse(ti.link_exists(sdev))

    def test_the_guard_is_installed(self):
        n = self.net
        if not n.real_uplinks:
            self.skipTest("no default route: nothing to guard")
        text = run("nft", "list", "table", "inet", n.guard_table).stdout
        for dev in n.real_uplinks:
            self.assertIn(f'"{dev}"', text)
        for hook in ("prerouting", "input", "forward", "output", "postrouting"):
            self.assertIn(f"hook {hook}", text)
        for r in n.guarded4:
            self.assertIn(r, text)
        self.assertNotIn(" accept", text.replace("policy accept", ""))

    def test_zz_no_packet_on_the_real_uplink(self):
        # Last of the class (by name): everything above sent nothing out of the machine.
        self.assertEqual(self.net.uplink_packets(), 0, self.net.uplink_report())


class GuardTest(unittest.TestCase):
    """UplinkGuard counts AND drops, on a veth standing in for the uplink, its peer in a
    namespace of its own with no address (what reaches it goes no further)."""

    def test_counts_and_drops(self):
        pid = os.getpid()
        dev, table, sink = f"csg{pid % 100000}", f"cs_test_guardtest_{pid}", f"cssink-{pid}"
        guarded, other = "198.18.213.7", "198.18.214.7"
        for a in (guarded, other):
            r = run("ip", "-j", "route", "get", a, check=False).stdout
            self.assertNotIn('"dev":"csg', r)
        self.assertFalse(ti.link_exists(dev))
        guard = UplinkGuard(table, [dev], ["198.18.213.0/24"], ["2001:db8::/32"])
        try:
            run("ip", "netns", "add", sink)
            run("ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", sink)
            run("ip", "netns", "exec", sink, "ip", "link", "set", "eth0", "up")
            # Nothing of the kernel's own on the device either: no IPv6 (router solicitations,
            # MLD reports, sent at some point after the link comes up) and no multicast.
            with open(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6", "w") as f:
                f.write("1")
            run("ip", "link", "set", dev, "multicast", "off", "up")
            # Static neighbours: nothing but our UDP packets counts in tx_packets.
            for a in (guarded, other):
                run("ip", "neigh", "replace", a, "lladdr", "02:00:00:00:00:01", "dev", dev,
                    "nud", "permanent")
            run("ip", "route", "add", "198.18.213.0/24", "dev", dev)
            run("ip", "route", "add", "198.18.214.0/24", "dev", dev)
            guard.install()
            self.assertEqual(guard.packets(), 0)

            def tx():
                with open(f"/sys/class/net/{dev}/statistics/tx_packets") as f:
                    return int(f.read())

            def send(addr):
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                    try:
                        s.sendto(b"x", (addr, 9))
                    except PermissionError:
                        pass  # dropped in output: the sender is told EPERM

            base = tx()
            for _ in range(3):
                send(guarded)
            self.assertEqual(guard.packets(), 3)  # counted once each: the first rule drops
            self.assertEqual(tx(), base)  # and nothing reached the device
            self.assertIn("g_output:", guard.report())
            send(other)
            self.assertEqual(guard.packets(), 3)
            deadline = time.monotonic() + 5
            while tx() < base + 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(tx() - base, 1)
        finally:
            guard.remove()
            run("ip", "link", "del", dev, check=False)
            run("ip", "netns", "del", sink, check=False)
        self.assertEqual(guard.packets(), 3)  # still known once removed
        self.assertFalse(ti.nft_table_exists("inet", table))
        self.assertFalse(ti.link_exists(dev))
        self.assertNotIn(sink, ti.netns_list())

    def test_no_uplink_guards_nothing(self):
        g = UplinkGuard("cs_test_unused", [], ["198.18.213.0/24"], [])
        g.install()
        self.assertFalse(ti.nft_table_exists("inet", "cs_test_unused"))
        self.assertEqual(g.packets(), 0)
        self.assertEqual(g.report(), "")


class CleanupTest(unittest.TestCase):
    """Nothing left behind: after a normal exit, after a failure in the block, after a killed
    run (the next start sweeps it), after a refused start."""

    def test_exit_after_a_failure(self):
        before = host_state()
        with self.assertRaises(ZeroDivisionError):
            with TestInternet("csnet-fail", dump_logs_on_error=False) as net:
                self.assertIn(net.ns, ti.netns_list())
                self.assertEqual(net.resolve("allowed.test")["rcode"], "NOERROR")
                1 / 0
        assert_gone(self, net)
        self.assertEqual(host_state(), before)
        self.assertIn("dns udp", net.dump_logs(file=None))  # the logs outlive the exit

    def test_a_leak_fails_the_exit(self):
        """With a stand-in uplink guarded too (a veth into an empty namespace), a packet of
        the sandbox subnet sent there makes __exit__ fail (fail_on_leak), and is dropped."""
        pid = os.getpid()
        dev, sink = f"csl{pid % 100000}", f"cssink-{pid}"
        before = host_state()
        try:
            run("ip", "netns", "add", sink)
            run("ip", "link", "add", dev, "type", "veth", "peer", "name", "eth0", "netns", sink)
            run("ip", "link", "set", dev, "up")
            run("ip", "route", "add", "198.18.213.0/24", "dev", dev)
            with self.assertRaisesRegex(AssertionError, "1 packet.* on the real uplink"):
                with TestInternet("csnet-leak", sandbox_subnet="198.18.213.0/24",
                                  real_uplinks=ti.default_route_devs() + [dev]) as net:
                    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                        try:
                            s.sendto(b"x", ("198.18.213.7", 9))
                        except PermissionError:
                            pass
                    self.assertEqual(net.uplink_packets(), 1)
                    self.assertIn("g_output: ", net.uplink_report())
            self.assertEqual(net.uplink_packets(), 1)
            assert_gone(self, net)
        finally:
            run("ip", "link", "del", dev, check=False)
            run("ip", "netns", "del", sink, check=False)
        self.assertEqual(host_state(), before)

    def test_refuses_an_overlapping_route(self):
        before = host_state()
        for route in ("203.0.113.128/25", "10.0.0.0/8", "2001:db8:1::/48"):
            fam = "-6" if ":" in route else "-4"
            try:
                run("ip", fam, "route", "add", "blackhole", route)
                with self.assertRaisesRegex(RuntimeError, "overlaps the test range"):
                    with TestInternet("csnet-refused"):
                        pass
            finally:
                run("ip", fam, "route", "del", "blackhole", route, check=False)
            self.assertEqual(host_state(), before)

    def test_refuses_an_overlapping_sandbox_subnet(self):
        for bad in ("10.213.0.0/16", "203.0.113.0/28", "2001:db8::/48"):
            with self.assertRaisesRegex(RuntimeError, "sandbox subnet"):
                with TestInternet("csnet-refused", sandbox_subnet=bad):
                    pass
        for dev in ti.default_route_devs():
            for line in run("ip", "-o", "-4", "addr", "show", "dev", dev).stdout.splitlines():
                net = str(ipaddress.ip_interface(line.split()[3]).network)
                with self.assertRaisesRegex(RuntimeError, "sandbox subnet"):
                    with TestInternet("csnet-refused", sandbox_subnet=net):
                        pass

    def test_a_killed_run_is_swept(self):
        before = host_state()
        code = ("import sys, time, test_internet as t\n"
                "n = t.TestInternet('csnet-killed')\n"
                "n.__enter__()\n"
                "print(n.ns, n.uplink, n.guard_table, n.proc.pid, flush=True)\n"
                "time.sleep(120)\n")
        p = subprocess.Popen([ti.PYTHON, "-c", code], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=os.path.dirname(ti.__file__)))
        try:
            ns, link, table, spid = p.stdout.readline().split()
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
            p.stdout.close()
        self.assertIn(ns, ti.netns_list())
        self.assertTrue(ti.link_exists(link))
        self.assertTrue(ti.nft_table_exists("inet", table))
        # The servers end with their parent (their stdin closes).
        deadline = time.monotonic() + 10
        while ti._pid_alive(int(spid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(ti._pid_alive(int(spid)) and
                         b"internet_servers" in open(f"/proc/{spid}/cmdline", "rb").read())
        removed = ti.sweep_leftovers()
        self.assertIn(f"netns {ns}", removed)
        self.assertIn(f"link {link}", removed)
        self.assertIn(f"nft table inet {table}", removed)
        self.assertEqual(host_state(), before)
        self.assertEqual(ti.sweep_leftovers(), [])


if __name__ == "__main__":
    testmain.main(sys.argv)
