"""A self-contained test "internet" for the sandbox networking tests: a network
namespace of its own, reached from the host through a veth pair, holding test addresses, an
authoritative DNS server and an HTTP server (internet_servers.py); and a guard on the host's
real uplink that counts, and drops, every packet of ours that would go there. Nothing of it
sends a packet off this machine.

    from test_internet import TestInternet

    with TestInternet("csnet", sandbox_subnet="10.77.0.0/16") as net:
        agent = AgentProcess(BUILD_DIR, *net.agent_args())  # --egress-uplink, --upstream-dns
        ...                                  # a sandbox curls http://allowed.test/hello
        assert net.dns_queries("denied.test") == 0
        net.assert_no_uplink_packets()       # __exit__ checks it again (fail_on_leak)

Layout (the addresses are module constants too):

  host namespace                         namespace NS (TestInternet.ns)
    UPLINK (csi<pid>)  198.51.100.1/24  <-veth->  veth0 198.51.100.2/24, 198.51.100.53 (DNS)
                       2001:db8:ff::1/64                2001:db8:ff::2/64
    routes, via 198.51.100.2:                     lo: 203.0.113.10 allowed.test
      203.0.113.0/24, 192.168.213.0/24,               203.0.113.20 denied.test
      10.213.0.0/24; 2001:db8::/64 via                203.0.113.30 *.cdn.test
      2001:db8:ff::2. None for                        203.0.113.40 other.test
      169.254.169.254 (it stays unrouted:             192.168.213.1 (a "private range")
      a test that reaches it is a leak the            10.213.0.1 (an "other internal")
      guard catches).                                 169.254.169.254 (metadata-like)
    net.ipv4.conf.UPLINK.forwarding=1                 2001:db8::10 (allowed.test AAAA)
    (ip_forward as it was)                        default routes back via the host

The HTTP server listens on port 80 of every address of the namespace; the DNS server on
198.51.100.53:53 (UDP and TCP), authoritative for "test." (internet_servers.py says what it
answers and its control API). Needs root, ip (iproute2) and nft.

Refuses to start if a route or an address of the host overlaps its ranges, or if the sandbox
subnet overlaps them or the real uplink's networks. What a killed run left (its namespace,
veth, guard table; recorded in /run/cs-test-internet) is removed by the next run."""
import atexit
import http.client
import ipaddress
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time

from internet_servers import build_query, parse_message

HERE = os.path.dirname(os.path.abspath(__file__))
SERVERS = os.path.join(HERE, "internet_servers.py")
PYTHON = "/usr/bin/python3"
REGISTRY = "/run/cs-test-internet"

HOST_ADDR = "198.51.100.1"
NS_ADDR = "198.51.100.2"
LINK_NET = "198.51.100.0/24"
DNS_ADDR = "198.51.100.53"
HOST_ADDR6 = "2001:db8:ff::1"
NS_ADDR6 = "2001:db8:ff::2"
LINK_NET6 = "2001:db8:ff::/64"
ALLOWED_ADDR = "203.0.113.10"   # allowed.test
DENIED_ADDR = "203.0.113.20"    # denied.test
CDN_ADDR = "203.0.113.30"       # *.cdn.test
OTHER_ADDR = "203.0.113.40"     # other.test
PRIVATE_ADDR = "192.168.213.1"  # in a private range: blocked by policy, not by routing
INTERNAL_ADDR = "10.213.0.1"    # "other internal" (10/8): the same
METADATA_ADDR = "169.254.169.254"  # in the namespace, but not routed from the host
ALLOWED_ADDR6 = "2001:db8::10"  # allowed.test AAAA

# The host routes the fixture adds (via NS_ADDR / NS_ADDR6).
ROUTES4 = ["203.0.113.0/24", "192.168.213.0/24", "10.213.0.0/24"]
ROUTES6 = ["2001:db8::/64"]
# Ranges of ours: nothing of the host may overlap them, and no packet with an address in them
# (or in the sandbox subnet) may cross the real uplink.
TEST_RANGES4 = [LINK_NET] + ROUTES4
TEST_RANGES6 = ["2001:db8::/32"]

_instances = 0


def _run(*args, check=True, ns=None, capture=True):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + [str(a) for a in args]
    p = subprocess.run(cmd, capture_output=capture, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def _ip_json(*args):
    out = _run("ip", "-j", *args, check=False).stdout.strip()
    try:
        return json.loads(out) if out else []
    except ValueError:
        return []


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def _rmdir_if_empty(path):
    try:
        os.rmdir(path)
    except OSError:
        pass  # not empty (another run's entry), or gone


def netns_list():
    return [line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines()
            if line.strip()]


def link_exists(name):
    return _run("ip", "link", "show", "dev", name, check=False).returncode == 0


def nft_table_exists(family, name):
    return _run("nft", "list", "table", family, name, check=False).returncode == 0


def default_route_devs():
    """The interfaces of the host's default routes (IPv4 and IPv6): its real uplinks."""
    devs = []
    for fam in ("-4", "-6"):
        for r in _ip_json(fam, "route", "show", "default"):
            for hop in [r] + r.get("nexthops", []):
                if hop.get("dev") and hop["dev"] not in devs:
                    devs.append(hop["dev"])
    return devs


def dns_query(name, qtype="A", server=DNS_ADDR, port=53, tcp=False, timeout=5, edns=None,
              qid=None):
    """One DNS query (recursion not desired: RD clear) to server over UDP or TCP; the reply as
    internet_servers.parse_message gives it: rcode ("NOERROR", "NXDOMAIN"...), aa, tc,
    answers [(name, type, ttl, value)], authority, additional."""
    qid = qid if qid is not None else int.from_bytes(os.urandom(2), "big")
    msg = build_query(name, qtype, qid=qid, rd=False, edns=edns)
    family = socket.AF_INET6 if ":" in server else socket.AF_INET
    if tcp:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect((server, port))
            s.sendall(struct.pack("!H", len(msg)) + msg)
            f = s.makefile("rb")
            head = f.read(2)
            if len(head) < 2:
                raise ConnectionError("DNS over TCP: no reply")
            data = f.read(struct.unpack("!H", head)[0])
    else:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.connect((server, port))
            s.send(msg)
            deadline = time.monotonic() + timeout
            while True:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                data = s.recv(65535)
                if len(data) >= 2 and struct.unpack("!H", data[:2])[0] == qid:
                    break
    reply = parse_message(data)
    if reply["id"] != qid:
        raise ValueError("DNS reply with another id")
    return reply


def addresses_of(reply, rtype="A"):
    """The values of the answers of type rtype in a dns_query reply."""
    return [a[3] for a in reply["answers"] if a[1] == rtype]


def http_request(addr, method, path, body=None, timeout=30, headers=None):
    """(status, body) of one request to http://addr:80/path, straight (never a proxy)."""
    c = http.client.HTTPConnection(addr, 80, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class UplinkGuard:
    """An nftables table of its own (inet TABLE) on the interfaces uplinks: every packet
    through them (in or out; prerouting, input, forward, output, postrouting before and after
    NAT) whose source or destination - or its connection's original source or destination -
    is in ranges4/ranges6 is counted and dropped. Also dropped: anything forwarded between
    an uplink and the interface block_dev (the test internet's veth), and anything forwarded
    out of an uplink to METADATA_ADDR. No uplink: it guards nothing (packets() is 0)."""

    def __init__(self, table, uplinks, ranges4, ranges6, block_dev=None):
        self.table = table
        self.uplinks = list(uplinks)
        self.ranges4 = [str(n) for n in ipaddress.collapse_addresses(
            ipaddress.ip_network(r) for r in ranges4)]
        self.ranges6 = [str(n) for n in ipaddress.collapse_addresses(
            ipaddress.ip_network(r) for r in ranges6)]
        self.block_dev = block_dev
        self.installed = False
        self.final = None  # (packets, report) when it was removed

    def ruleset(self):
        u = "{ " + ", ".join(f'"{d}"' for d in self.uplinks) + " }"
        verdict = 'counter counter name "leaks" drop'
        addr = []
        for fam, s in (("ip", "g4"), ("ip6", "g6")):
            if (self.ranges4 if s == "g4" else self.ranges6):
                addr += [f"{fam} saddr @{s}", f"{fam} daddr @{s}"]
        ct = [f"ct original {a}" for a in addr]
        rules = {
            # Before conntrack and NAT: the addresses as they came.
            ("g_prerouting_raw", "prerouting", -300): [f"iifname {u} {m}" for m in addr],
            # After them: a reply de-masqueraded to a sandbox's address; connections of ours.
            ("g_prerouting", "prerouting", 0): [f"iifname {u} {m}" for m in addr + ct],
            ("g_input", "input", 0): [f"iifname {u} {m}" for m in addr + ct],
            ("g_forward", "forward", 0): [f"iifname {u} {m}" for m in addr + ct]
            + [f"oifname {u} {m}" for m in addr + ct]
            + ([f'iifname "{self.block_dev}" oifname {u}',
                f'iifname {u} oifname "{self.block_dev}"'] if self.block_dev else [])
            + [f"oifname {u} ip daddr {METADATA_ADDR}"],
            ("g_output", "output", 0): [f"oifname {u} {m}" for m in addr + ct],
            # Before SNAT (a sandbox's own source) and after it.
            ("g_postrouting", "postrouting", -300): [f"oifname {u} {m}" for m in addr + ct],
            ("g_postrouting_nat", "postrouting", 300): [f"oifname {u} {m}" for m in addr + ct],
        }
        lines = [f"table inet {self.table} {{", "  counter leaks { }"]
        if self.ranges4:
            lines.append(f"  set g4 {{ type ipv4_addr; flags interval; "
                         f"elements = {{ {', '.join(self.ranges4)} }} }}")
        if self.ranges6:
            lines.append(f"  set g6 {{ type ipv6_addr; flags interval; "
                         f"elements = {{ {', '.join(self.ranges6)} }} }}")
        for (chain, hook, prio), matches in rules.items():
            lines.append(f"  chain {chain} {{ type filter hook {hook} priority {prio}; "
                         "policy accept;")
            lines += [f"    {m} {verdict}" for m in matches]
            lines.append("  }")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def install(self):
        if not self.uplinks:
            return
        p = subprocess.run(["nft", "-f", "-"], input=self.ruleset(), capture_output=True,
                           text=True)
        if p.returncode != 0:
            raise RuntimeError(f"nft: the uplink guard: {p.stderr.strip()}\n{self.ruleset()}")
        self.installed = True

    def remove(self):
        """Removes the table; packets() and report() go on answering what it counted."""
        if self.installed:
            try:
                self.final = (self.packets(), self.report())
            except (RuntimeError, ValueError, KeyError):
                pass
        if nft_table_exists("inet", self.table):
            _run("nft", "delete", "table", "inet", self.table)
        self.installed = False

    def packets(self):
        """Packets counted (and dropped) so far (after remove(): in all)."""
        if not self.installed:
            return self.final[0] if self.final else 0
        out = json.loads(_run("nft", "-j", "list", "counter", "inet", self.table,
                              "leaks").stdout)
        return sum(o["counter"]["packets"] for o in out["nftables"] if "counter" in o)

    def report(self):
        """The guard's rules that counted anything, with their counts ("" if none)."""
        if not self.installed:
            return self.final[1] if self.final else ""
        text = _run("nft", "list", "table", "inet", self.table, check=False).stdout
        hits, chain = [], ""
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("chain "):
                chain = s.split()[1]
            elif "counter packets" in s and "counter packets 0 " not in s:
                hits.append(f"{chain}: {s}")
        return "\n".join(hits)


class TestInternet:
    """The test internet as a context manager (module docstring). __enter__ builds it and
    returns once both servers answer (statistics zeroed); __exit__ removes everything it
    made, also after a failure (then, with dump_logs_on_error, printing the logs' ends), and,
    with fail_on_leak, raises AssertionError if the guard counted any packet (when the block
    itself did not raise)."""

    __test__ = False  # not a test class (for pytest)

    def __init__(self, name_prefix="csnet", sandbox_subnet="10.77.0.0/16", dns_ttl=60,
                 ipv6=True, real_uplinks=None, dump_logs_on_error=True, fail_on_leak=True):
        global _instances
        pid = os.getpid()
        n = _instances
        _instances += 1
        sfx = f"-{n}" if n else ""
        self.ns = f"{name_prefix}-{pid}{sfx}"
        self.uplink = f"csi{pid % 100000}" + (f"n{n}" if n else "")
        self.ns_dev = "veth0"
        self.guard_table = f"cs_test_guard_{pid}" + (f"_{n}" if n else "")
        self.key = f"{pid}-{n}"
        subnets = [sandbox_subnet] if isinstance(sandbox_subnet, str) else list(sandbox_subnet)
        self.sandbox_subnets = [str(ipaddress.ip_network(s)) for s in subnets]
        self.dns_ttl = dns_ttl
        self.want_ipv6 = ipv6
        self.ipv6 = False
        self.dump_logs_on_error = dump_logs_on_error
        self.fail_on_leak = fail_on_leak
        self.real_uplinks = None if real_uplinks is None else list(real_uplinks)

        self.host_addr, self.ns_addr, self.dns_addr = HOST_ADDR, NS_ADDR, DNS_ADDR
        self.host_addr6, self.ns_addr6 = HOST_ADDR6, NS_ADDR6
        self.allowed_addr, self.denied_addr = ALLOWED_ADDR, DENIED_ADDR
        self.cdn_addr, self.other_addr = CDN_ADDR, OTHER_ADDR
        self.private_addr, self.internal_addr = PRIVATE_ADDR, INTERNAL_ADDR
        self.metadata_addr, self.allowed_addr6 = METADATA_ADDR, ALLOWED_ADDR6
        self.routes = []  # the host routes added: (family flag, prefix)
        self.guarded4 = self.guarded6 = []
        self.guard = None
        self.proc = None
        self.log_dir = None
        self.log_path = None
        self._undo = []
        self._logs_at_exit = None
        self._sysctl_saved = {}
        self._atexit = False

    # --- set-up ---

    def __enter__(self):
        if os.geteuid() != 0:
            raise RuntimeError("TestInternet needs root")
        for tool in ("ip", "nft"):
            if not shutil.which(tool):
                raise RuntimeError(f"TestInternet needs {tool}")
        sweep_leftovers()
        self._preflight()
        atexit.register(self._cleanup)
        self._atexit = True
        try:
            self._build()
        except BaseException:
            self._logs_at_exit = self._read_logs()
            errors = self._cleanup()
            if errors:
                print("TestInternet: cleaning up after a failed start: " + "; ".join(errors),
                      file=sys.stderr)
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and self.dump_logs_on_error:
            self.dump_logs()
        errors = self._cleanup()
        if exc_type is None:
            if errors:
                raise RuntimeError("TestInternet: cleanup failed: " + "; ".join(errors))
            if self.fail_on_leak:
                self.assert_no_uplink_packets()
        return False

    def _preflight(self):
        """Refuses to run where the host routes or holds anything of our ranges, or where the
        sandbox subnet overlaps them or the real uplinks' networks."""
        ours = [ipaddress.ip_network(r) for r in TEST_RANGES4 + TEST_RANGES6]
        if self.ns in netns_list():
            raise RuntimeError(f"network namespace {self.ns} exists already")
        if link_exists(self.uplink):
            raise RuntimeError(f"interface {self.uplink} exists already")
        if nft_table_exists("inet", self.guard_table):
            raise RuntimeError(f"nft table inet {self.guard_table} exists already")
        # Every route of every table (local ones: the host's addresses), default routes aside.
        for fam in ("-4", "-6"):
            for r in _ip_json(fam, "route", "show", "table", "all"):
                dst = r.get("dst", "")
                if dst in ("default", "") or r.get("type") in ("multicast",):
                    continue
                try:
                    net = ipaddress.ip_network(dst, strict=False)
                except ValueError:
                    continue
                for o in ours:
                    if net.version == o.version and net.overlaps(o):
                        raise RuntimeError(
                            f"the host has a route for {dst} (dev {r.get('dev')}, table "
                            f"{r.get('table', 'main')}), which overlaps the test range {o}: "
                            "refusing to run")
        defaults = {(r.get("dev"), r.get("gateway")) for fam in ("-4", "-6")
                    for r in _ip_json(fam, "route", "show", "default")}
        for a in [HOST_ADDR, NS_ADDR, DNS_ADDR, ALLOWED_ADDR, DENIED_ADDR, CDN_ADDR, OTHER_ADDR,
                  PRIVATE_ADDR, INTERNAL_ADDR, ALLOWED_ADDR6, HOST_ADDR6]:
            got = _ip_json("route", "get", a)
            if not got:
                continue  # unreachable: not routed at all
            r = got[0]
            if r.get("type") == "local" or (r.get("dev"), r.get("gateway")) not in defaults:
                raise RuntimeError(f"{a} is routed already ({r}): refusing to run")
        # The sandbox subnet: not ours, not the real uplinks' networks.
        real = self.real_uplinks if self.real_uplinks is not None else default_route_devs()
        uplink_nets = []
        for dev in real:
            for link in _ip_json("addr", "show", "dev", dev):
                for ai in link.get("addr_info", []):
                    if ai.get("scope") == "global":
                        uplink_nets.append(ipaddress.ip_interface(
                            f"{ai['local']}/{ai['prefixlen']}").network)
        for s in self.sandbox_subnets:
            sn = ipaddress.ip_network(s)
            for o in ours + uplink_nets:
                if sn.version == o.version and sn.overlaps(o):
                    raise RuntimeError(f"the sandbox subnet {s} overlaps {o}")

    def _record(self, **kw):
        """The registry entry (REGISTRY/KEY.json) a later run cleans up from, if this one is
        killed before its __exit__."""
        os.makedirs(REGISTRY, exist_ok=True)
        path = os.path.join(REGISTRY, self.key + ".json")
        entry = {}
        if os.path.exists(path):
            with open(path) as f:
                entry = json.load(f)
        entry.update(kw)
        with open(path + ".tmp", "w") as f:
            json.dump(entry, f)
        os.replace(path + ".tmp", path)

    def _build(self):
        ns, up = self.ns, self.uplink
        self._record(pid=os.getpid(), ns=ns, link=up, table=self.guard_table)
        self._undo.append(("registry", None))
        self.log_dir = tempfile.mkdtemp(prefix="cs-inet-", dir="/tmp")
        self.log_path = os.path.join(self.log_dir, "servers.log")
        self._record(log_dir=self.log_dir)
        self._undo.append(("logdir", self.log_dir))

        # The guard first: nothing of what follows can leak.
        self.real_uplinks = (self.real_uplinks if self.real_uplinks is not None
                             else default_route_devs())
        self.guarded4 = TEST_RANGES4 + [s for s in self.sandbox_subnets if ":" not in s]
        self.guarded6 = TEST_RANGES6 + [s for s in self.sandbox_subnets if ":" in s]
        self.guard = UplinkGuard(self.guard_table, self.real_uplinks, self.guarded4,
                                 self.guarded6, block_dev=up)
        if not self.real_uplinks:
            print("TestInternet: the host has no default route: the uplink guard guards "
                  "nothing", file=sys.stderr)
        self._undo.append(("guard", None))
        self.guard.install()

        self._undo.append(("netns", ns))
        _run("ip", "netns", "add", ns)
        self._undo.append(("link", up))
        _run("ip", "link", "add", up, "type", "veth", "peer", "name", self.ns_dev, "netns", ns)
        _run("ip", "link", "set", "dev", up, "alias", f"cs-test-internet pid={os.getpid()}")

        self.ipv6 = self.want_ipv6 and os.path.exists(f"/proc/sys/net/ipv6/conf/{up}") and \
            self._sysctl_get(f"net/ipv6/conf/{up}/disable_ipv6") == "0"
        if self.ipv6:
            # No router advertisements taken on our veth (nothing sends one; but never a
            # default route through it).
            self._sysctl_set(f"net/ipv6/conf/{up}/accept_ra", "0")
        self._sysctl_set(f"net/ipv4/conf/{up}/forwarding", "1")

        # The namespace's side.
        _run("ip", "link", "set", "lo", "up", ns=ns)
        _run("ip", "addr", "add", f"{NS_ADDR}/24", "dev", self.ns_dev, ns=ns)
        _run("ip", "addr", "add", f"{DNS_ADDR}/32", "dev", self.ns_dev, ns=ns)
        for a in (ALLOWED_ADDR, DENIED_ADDR, CDN_ADDR, OTHER_ADDR, PRIVATE_ADDR, INTERNAL_ADDR,
                  METADATA_ADDR):
            _run("ip", "addr", "add", f"{a}/32", "dev", "lo", ns=ns)
        if self.ipv6:
            _run("ip", "addr", "add", f"{NS_ADDR6}/64", "dev", self.ns_dev, "nodad", ns=ns)
            _run("ip", "addr", "add", f"{ALLOWED_ADDR6}/128", "dev", "lo", ns=ns)
        _run("ip", "link", "set", self.ns_dev, "up", ns=ns)
        _run("ip", "route", "add", "default", "via", HOST_ADDR, "dev", self.ns_dev, ns=ns)
        if self.ipv6:
            _run("ip", "-6", "route", "add", "default", "via", HOST_ADDR6, "dev", self.ns_dev,
                 ns=ns)

        # The host's side.
        _run("ip", "addr", "add", f"{HOST_ADDR}/24", "dev", up)
        if self.ipv6:
            _run("ip", "addr", "add", f"{HOST_ADDR6}/64", "dev", up, "nodad")
        _run("ip", "link", "set", up, "up")
        for r in ROUTES4:
            self._undo.append(("route", ("-4", r)))
            _run("ip", "-4", "route", "add", r, "via", NS_ADDR, "dev", up)
            self.routes.append(("-4", r))
        if self.ipv6:
            for r in ROUTES6:
                self._undo.append(("route", ("-6", r)))
                _run("ip", "-6", "route", "add", r, "via", NS_ADDR6, "dev", up)
                self.routes.append(("-6", r))

        # The servers.
        self._undo.append(("servers", None))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", ns, PYTHON, SERVERS, "--dns-addr", DNS_ADDR,
                 "--ttl", str(self.dns_ttl)] + ([] if self.ipv6 else ["--no-ipv6"]),
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
        self._record(server_pid=self.proc.pid)
        self._wait_ready()
        self.reset_stats()
        self.reset_dns_stats()

    def _wait_ready(self, limit=30):
        deadline = time.monotonic() + limit
        last = None
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the servers exited ({self.proc.returncode}):\n"
                                   + self.dump_logs(file=None))
            try:
                st, _ = http_request(NS_ADDR, "GET", "/dns/stats", timeout=2)
                if st == 200:
                    for tcp in (False, True):
                        r = dns_query("allowed.test", tcp=tcp, timeout=2)
                        if addresses_of(r) != [ALLOWED_ADDR]:
                            raise RuntimeError(f"DNS answered {r}")
                    if self.ipv6:
                        st6, _ = http_request(ALLOWED_ADDR6, "GET", "/dns/stats", timeout=2)
                        if st6 != 200:
                            raise RuntimeError(f"HTTP over IPv6: {st6}")
                    return
                last = f"HTTP {st}"
            except (OSError, RuntimeError, ValueError, http.client.HTTPException) as e:
                last = repr(e)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test internet's servers did not answer in {limit} s "
                                   f"({last}):\n" + self.dump_logs(file=None))
            time.sleep(0.05)

    def _sysctl_get(self, key):
        with open(f"/proc/sys/{key}") as f:
            return f.read().strip()

    def _sysctl_set(self, key, value):
        if key not in self._sysctl_saved:
            self._sysctl_saved[key] = self._sysctl_get(key)
            self._undo.append(("sysctl", key))
        with open(f"/proc/sys/{key}", "w") as f:
            f.write(value)

    # --- tear-down ---

    def _cleanup(self):
        """Undoes what was made, last first; returns what could not be undone (idempotent)."""
        if self._atexit:
            atexit.unregister(self._cleanup)
            self._atexit = False
        if self._logs_at_exit is None and self.log_path:
            self._logs_at_exit = self._read_logs()
        errors = []
        while self._undo:
            what, arg = self._undo.pop()
            try:
                if what == "servers":
                    self._stop_servers()
                elif what == "route":
                    fam, r = arg
                    if link_exists(self.uplink):
                        _run("ip", fam, "route", "del", r, "via",
                             NS_ADDR if fam == "-4" else NS_ADDR6, "dev", self.uplink,
                             check=False)
                    if _run("ip", fam, "route", "show", r, check=False).stdout.strip():
                        errors.append(f"route {r} still there")
                elif what == "sysctl":
                    path = f"/proc/sys/{arg}"
                    if os.path.exists(path):  # gone with its interface: nothing to restore
                        with open(path, "w") as f:
                            f.write(self._sysctl_saved[arg])
                elif what == "link":
                    if link_exists(arg):
                        _run("ip", "link", "del", "dev", arg)
                elif what == "netns":
                    if arg in netns_list():
                        _run("ip", "netns", "del", arg)
                elif what == "guard":
                    self.guard.remove()
                elif what == "logdir":
                    shutil.rmtree(arg, ignore_errors=True)
                elif what == "registry":
                    try:
                        os.unlink(os.path.join(REGISTRY, self.key + ".json"))
                    except FileNotFoundError:
                        pass
                    _rmdir_if_empty(REGISTRY)
            except Exception as e:  # go on: remove all the rest
                errors.append(f"{what} {arg}: {e}")
        self.routes = []
        return errors

    def _stop_servers(self):
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            p.stdin.close()
        except OSError:
            pass
        p.terminate()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def leftovers(self):
        """What of this instance is still on the host ([] once it is all gone)."""
        left = []
        if self.ns in netns_list():
            left.append(f"netns {self.ns}")
        if link_exists(self.uplink):
            left.append(f"link {self.uplink}")
        for fam, rs in (("-4", ROUTES4), ("-6", ROUTES6)):
            for r in rs:
                out = _run("ip", fam, "route", "show", "table", "all", r, check=False).stdout
                if out.strip():
                    left.append(f"route {out.strip()}")
        if nft_table_exists("inet", self.guard_table):
            left.append(f"nft table inet {self.guard_table}")
        if self.proc is not None and self.proc.poll() is None:
            left.append(f"servers pid {self.proc.pid}")
        if os.path.exists(os.path.join(REGISTRY, self.key + ".json")):
            left.append("registry entry")
        return left

    # --- for tests ---

    def agent_args(self):
        """The node agent's flags for this internet: its uplink and its upstream DNS."""
        return ["--egress-uplink", self.uplink, "--upstream-dns", self.dns_addr]

    def run_in_ns(self, *args, check=True):
        """Runs a command inside the namespace (CompletedProcess, text output)."""
        return _run(*args, check=check, ns=self.ns)

    def http(self, method, path, addr=NS_ADDR, body=None, timeout=30):
        """(status, body) of a request from the host to http://addr/path."""
        return http_request(addr, method, path, body=body, timeout=timeout)

    def _control(self, method, path, body=None):
        st, out = http_request(NS_ADDR, method, path, body=body, timeout=10)
        if st != 200:
            raise RuntimeError(f"{method} {path}: HTTP {st}: {out!r}")
        return out

    def http_stats(self):
        """The HTTP server's counts: {"clients": {ADDR: {"requests", "received", "sent"}},
        "servers": {ADDR: {...}}, "total": {...}} (body bytes; control paths not counted).
        A sandbox's traffic, masqueraded out of the uplink, comes from HOST_ADDR."""
        return json.loads(self._control("GET", "/stats"))

    def reset_stats(self):
        self._control("POST", "/reset")

    def dns_stats(self):
        """{"names": {NAME: n}, "types": {"NAME/TYPE": n}, "transports": {"udp", "tcp"},
        "total": n}: the queries the DNS server got (names lower case, no trailing dot)."""
        return json.loads(self._control("GET", "/dns/stats"))

    def dns_queries(self, name):
        """How many queries (any type) the DNS server got for name."""
        return self.dns_stats()["names"].get(name.lower().rstrip("."), 0)

    def reset_dns_stats(self):
        self._control("POST", "/dns/reset")

    def set_dns_ttl(self, ttl):
        """The TTL of every answer from now on."""
        self._control("POST", "/dns/ttl", str(int(ttl)).encode())

    def set_dns_record(self, name, rtype, values):
        """Replaces name's record set of rtype ("A", "AAAA", "CNAME", "TXT"...) with values
        ([] removes it); e.g. set_dns_record("allowed.test", "A", [OTHER_ADDR]) to rebind."""
        self._control("POST", "/dns/set", json.dumps(
            {"name": name, "type": rtype, "values": list(values)}).encode())

    def reset_dns_zone(self):
        """The zone and the TTL as they started."""
        self._control("POST", "/dns/zone-reset")

    def resolve(self, name, qtype="A", tcp=False, timeout=5):
        """A query to the test DNS server straight from the host (dns_query)."""
        return dns_query(name, qtype, server=self.dns_addr, tcp=tcp, timeout=timeout)

    def uplink_packets(self):
        """Packets of ours the guard counted (and dropped) on the real uplinks; 0 without
        any uplink to guard. After __exit__: the count when the guard was removed."""
        return self.guard.packets() if self.guard else 0

    def uplink_report(self):
        """The guard's rules that counted anything ("" if none)."""
        return self.guard.report() if self.guard else ""

    def assert_no_uplink_packets(self):
        n = self.uplink_packets()
        if n:
            raise AssertionError(f"{n} packet(s) of the test on the real uplink "
                                 f"{self.real_uplinks} (dropped):\n{self.uplink_report()}")

    def _read_logs(self, limit=200000):
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - limit))
                return f.read().decode(errors="replace")
        except (OSError, TypeError):
            return ""

    def dump_logs(self, lines=60, file=sys.stderr):
        """The last lines of the servers' log (every query and request), printed to file
        (None: not printed); returned. Works after __exit__ too."""
        text = self._read_logs() if self._undo else (self._logs_at_exit or "")
        tail = "\n".join(text.splitlines()[-lines:])
        out = f"--- test internet {self.ns}: servers' log (last {lines} lines) ---\n{tail}\n"
        if self.guard:
            rep = self.uplink_report()
            if rep:
                out += f"--- uplink guard {self.guard_table}: hits ---\n{rep}\n"
        if file is not None:
            print(out, file=file, end="")
            file.flush()
        return out


def sweep_leftovers():
    """Removes what an earlier run, killed before its __exit__, left (as its registry entry
    in REGISTRY records it: servers, veth, namespace, guard table); only entries whose
    process is gone. Returns what it removed."""
    removed = []
    try:
        names = sorted(os.listdir(REGISTRY))
    except FileNotFoundError:
        return removed
    for name in names:
        if not name.endswith(".json"):
            continue
        path = os.path.join(REGISTRY, name)
        try:
            with open(path) as f:
                e = json.load(f)
        except (OSError, ValueError):
            continue
        pid = e.get("pid")
        if not isinstance(pid, int) or _pid_alive(pid):
            continue
        sp = e.get("server_pid")
        if isinstance(sp, int) and _pid_alive(sp):
            try:
                with open(f"/proc/{sp}/cmdline", "rb") as f:
                    if b"internet_servers.py" in f.read():
                        os.kill(sp, 9)
                        removed.append(f"servers pid {sp}")
            except OSError:
                pass
        if e.get("link") and link_exists(e["link"]):
            alias = _run("ip", "-j", "link", "show", "dev", e["link"], check=False).stdout
            if f"cs-test-internet pid={pid}" in alias:
                _run("ip", "link", "del", "dev", e["link"], check=False)
                removed.append(f"link {e['link']}")
        if e.get("ns") and e["ns"] in netns_list():
            _run("ip", "netns", "del", e["ns"], check=False)
            removed.append(f"netns {e['ns']}")
        if e.get("table") and nft_table_exists("inet", e["table"]):
            _run("nft", "delete", "table", "inet", e["table"], check=False)
            removed.append(f"nft table inet {e['table']}")
        if e.get("log_dir", "").startswith("/tmp/cs-inet-"):
            shutil.rmtree(e["log_dir"], ignore_errors=True)
        os.unlink(path)
    _rmdir_if_empty(REGISTRY)
    if removed:
        print("TestInternet: removed what an earlier run left: " + ", ".join(removed),
              file=sys.stderr)
    return removed
