"""The servers of the test "internet" (test_internet.py), run inside its network namespace:

  - an authoritative DNS server for the zone "test." on DNS_ADDR:53, UDP and TCP;
  - an HTTP/1.1 server on 0.0.0.0:80 and [::]:80 (every address of the namespace);

with a control API on the HTTP server (paths under /stats, /reset and /dns/, not counted in
the statistics). Standard library only. Stops at SIGTERM, or when its standard input ends
(the test that started it is gone).

Imported by test_internet.py for the DNS wire format (encode/parse) and the zone's contents;
importing it starts nothing.

Usage (as root, in the namespace): internet_servers.py --dns-addr ADDR [--ttl N]

HTTP:
  GET  /hello          "hello from ADDR\\n", ADDR the local address the request came to
  GET  /bytes/N        N bytes (N <= 200 MiB), byte i being i % 256, streamed
  POST /upload         reads the body (Content-Length or chunked); answers its size, "N\\n"
                       (PUT too, as curl -T sends)
  GET  /stats          JSON: {"clients": {ADDR: {"requests", "received", "sent"}},
                              "servers": {ADDR: {...}}, "total": {...}}; "received" is request
                       body bytes, "sent" response body bytes; ADDR the client's (the local)
                       address
  POST /reset          zeroes the HTTP statistics
  GET  /dns/stats      JSON: {"names": {NAME: n}, "types": {"NAME/TYPE": n},
                              "transports": {"udp": n, "tcp": n}, "total": n}
  POST /dns/reset      zeroes the DNS counts
  POST /dns/ttl        body: the TTL of every answer from now on (default --ttl)
  POST /dns/set        body JSON {"name", "type", "values": [...]}: replaces a record set
                       ("values": [] removes it; a new name is created)
  POST /dns/zone-reset the zone as it started (and the TTL)
"""
import argparse
import http.server
import ipaddress
import json
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
import time

MAX_BYTES = 200 * 1024 * 1024

TYPES = {"A": 1, "NS": 2, "CNAME": 5, "SOA": 6, "PTR": 12, "MX": 15, "TXT": 16, "AAAA": 28,
         "SRV": 33, "OPT": 41, "ANY": 255}
TYPE_NAMES = {v: k for k, v in TYPES.items()}
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}
CLASS_IN = 1

ZONE = "test"
# The zone as the fixture starts it. Names lower case, without the trailing dot; "*.cdn.test"
# is a wildcard (any name below cdn.test, at any depth; cdn.test itself exists, empty).
DEFAULT_RECORDS = {
    "test": {"SOA": ["ns.test. hostmaster.test. 1 3600 600 86400 {ttl}"], "NS": ["ns.test"]},
    "ns.test": {"A": ["{dns_addr}"]},
    "allowed.test": {"A": ["203.0.113.10"], "AAAA": ["2001:db8::10"]},
    "denied.test": {"A": ["203.0.113.20"]},
    "*.cdn.test": {"A": ["203.0.113.30"]},
    "other.test": {"A": ["203.0.113.40"]},
    "alias.test": {"CNAME": ["allowed.test"]},
    # An answer too big for UDP (4 KiB of TXT): truncated there (TC), whole over TCP.
    "big.test": {"TXT": ["%03d-" % i + "x" * 95 for i in range(40)]},
}


# --- the DNS wire format (RFC 1035) ---

def encode_name(name):
    out = b""
    for label in name.rstrip(".").split(".") if name.strip(".") else []:
        raw = label.encode("ascii")
        if not 0 < len(raw) < 64:
            raise ValueError(f"bad label in {name!r}")
        out += bytes([len(raw)]) + raw
    return out + b"\0"


def decode_name(msg, off):
    """(name, offset after it) for the name at off, following compression pointers."""
    labels, end, jumps = [], None, 0
    while True:
        if off >= len(msg):
            raise ValueError("name past the end")
        n = msg[off]
        if n & 0xC0 == 0xC0:
            if off + 1 >= len(msg) or jumps > 32:
                raise ValueError("bad pointer")
            if end is None:
                end = off + 2
            off = ((n & 0x3F) << 8) | msg[off + 1]
            jumps += 1
            continue
        if n & 0xC0:
            raise ValueError("bad label type")
        off += 1
        if n == 0:
            break
        labels.append(msg[off:off + n].decode("ascii", errors="replace"))
        off += n
    return ".".join(labels), (end if end is not None else off)


def encode_rdata(rtype, value):
    if rtype == "A":
        return socket.inet_pton(socket.AF_INET, value)
    if rtype == "AAAA":
        return socket.inet_pton(socket.AF_INET6, value)
    if rtype in ("CNAME", "NS", "PTR"):
        return encode_name(value)
    if rtype == "TXT":
        raw = value.encode()
        return b"".join(bytes([len(raw[i:i + 255])]) + raw[i:i + 255]
                        for i in range(0, max(len(raw), 1), 255))
    if rtype == "MX":
        pref, host = value.split()
        return struct.pack("!H", int(pref)) + encode_name(host)
    if rtype == "SOA":
        mname, rname, *nums = value.split()
        return encode_name(mname) + encode_name(rname) + struct.pack("!5I", *map(int, nums))
    raise ValueError(f"cannot encode {rtype}")


def decode_rdata(msg, off, rtype, rdlen):
    data = msg[off:off + rdlen]
    if rtype == TYPES["A"] and rdlen == 4:
        return socket.inet_ntop(socket.AF_INET, data)
    if rtype == TYPES["AAAA"] and rdlen == 16:
        return socket.inet_ntop(socket.AF_INET6, data)
    if rtype in (TYPES["CNAME"], TYPES["NS"], TYPES["PTR"]):
        return decode_name(msg, off)[0]
    if rtype == TYPES["TXT"]:
        out, i = b"", 0
        while i < len(data):
            out += data[i + 1:i + 1 + data[i]]
            i += 1 + data[i]
        return out.decode(errors="replace")
    if rtype == TYPES["SOA"]:
        mname, o = decode_name(msg, off)
        rname, o = decode_name(msg, o)
        return f"{mname} {rname} " + " ".join(map(str, struct.unpack("!5I", msg[o:o + 20])))
    return data.hex()


def encode_rr(name, rtype, ttl, value, rclass=CLASS_IN):
    rdata = encode_rdata(rtype, value)
    return encode_name(name) + struct.pack("!HHIH", TYPES[rtype], rclass, ttl, len(rdata)) + rdata


def build_query(name, qtype="A", qid=0x1234, rd=True, edns=None):
    """A query for name/qtype; edns: the UDP size of an OPT record to add, or None."""
    flags = 0x0100 if rd else 0
    msg = struct.pack("!6H", qid, flags, 1, 0, 0, 1 if edns else 0)
    msg += encode_name(name) + struct.pack("!HH", TYPES[qtype] if isinstance(qtype, str)
                                           else qtype, CLASS_IN)
    if edns:
        msg += b"\0" + struct.pack("!HHIH", TYPES["OPT"], edns, 0, 0)
    return msg


def parse_message(msg):
    """A DNS message as a dict: id, flags (qr, aa, tc, rd, ra), opcode, rcode (its name),
    questions [(name, type)], answers/authority/additional [(name, type, ttl, value)], type
    names where known (else the number); raw_questions [(name, type, class)] as numbers;
    edns the UDP size of an OPT record, or None."""
    if len(msg) < 12:
        raise ValueError("short message")
    qid, flags, qd, an, ns, ar = struct.unpack("!6H", msg[:12])
    off = 12
    questions, raw_questions, edns = [], [], None
    for _ in range(qd):
        name, off = decode_name(msg, off)
        if off + 4 > len(msg):
            raise ValueError("short question")
        qtype, qclass = struct.unpack("!HH", msg[off:off + 4])
        off += 4
        questions.append((name, TYPE_NAMES.get(qtype, qtype)))
        raw_questions.append((name, qtype, qclass))
    sections = []
    for count in (an, ns, ar):
        rrs = []
        for _ in range(count):
            name, off = decode_name(msg, off)
            if off + 10 > len(msg):
                raise ValueError("short record")
            rtype, rclass, ttl, rdlen = struct.unpack("!HHIH", msg[off:off + 10])
            off += 10
            if off + rdlen > len(msg):
                raise ValueError("short rdata")
            if rtype == TYPES["OPT"]:
                edns = rclass  # the requester's UDP payload size
            rrs.append((name, TYPE_NAMES.get(rtype, rtype), ttl,
                        decode_rdata(msg, off, rtype, rdlen)))
            off += rdlen
        sections.append(rrs)
    return {"id": qid, "qr": bool(flags & 0x8000), "opcode": (flags >> 11) & 0xF,
            "aa": bool(flags & 0x0400), "tc": bool(flags & 0x0200), "rd": bool(flags & 0x0100),
            "ra": bool(flags & 0x0080), "rcode": RCODES.get(flags & 0xF, flags & 0xF),
            "questions": questions, "raw_questions": raw_questions, "answers": sections[0],
            "authority": sections[1], "additional": sections[2], "edns": edns}


# --- the servers ---

class State:
    """What both servers share: the zone, the TTL, the counts. One lock for all."""

    def __init__(self, dns_addr, ttl, log):
        self.lock = threading.Lock()
        self.dns_addr = dns_addr
        self.default_ttl = ttl
        self.log_file = log
        self.zone_reset()
        self.http_reset()
        self.dns_reset()

    def log(self, line):
        with self.lock:
            self.log_file.write(time.strftime("%H:%M:%S ") + line + "\n")
            self.log_file.flush()

    def zone_reset(self):
        with self.lock:
            self.ttl = self.default_ttl
            self.records = {name: {t: [v.replace("{dns_addr}", self.dns_addr) for v in vals]
                                   for t, vals in rrs.items()}
                            for name, rrs in DEFAULT_RECORDS.items()}

    def http_reset(self):
        with self.lock:
            self.clients, self.servers = {}, {}

    def dns_reset(self):
        with self.lock:
            self.names, self.types, self.transports, self.total = {}, {}, {}, 0

    def count_http(self, client, server, requests=0, received=0, sent=0):
        with self.lock:
            for table, key in ((self.clients, client), (self.servers, server)):
                c = table.setdefault(key, {"requests": 0, "received": 0, "sent": 0})
                c["requests"] += requests
                c["received"] += received
                c["sent"] += sent

    def http_stats(self):
        with self.lock:
            total = {"requests": 0, "received": 0, "sent": 0}
            for c in self.clients.values():
                for k in total:
                    total[k] += c[k]
            return {"clients": json.loads(json.dumps(self.clients)),
                    "servers": json.loads(json.dumps(self.servers)), "total": total}

    def dns_stats(self):
        with self.lock:
            return {"names": dict(self.names), "types": dict(self.types),
                    "transports": dict(self.transports), "total": self.total}

    def lookup(self, name):
        """The record sets of name ({type: [values]}; {} for a name that exists with none),
        or None for a name that does not exist. Called with the lock held."""
        if name in self.records:
            return self.records[name]
        labels = name.split(".")
        for i in range(1, len(labels)):
            wild = "*." + ".".join(labels[i:])
            if wild in self.records:
                return self.records[wild]
        # An empty non-terminal (cdn.test, the parent of a wildcard or a name) exists.
        if any(k.endswith("." + name) for k in self.records):
            return {}
        return None

    def answer(self, query, transport, peer):
        """The reply to one query message (bytes), or None to drop it."""
        try:
            q = parse_message(query)
        except ValueError:
            if len(query) >= 12:  # a header to answer FORMERR to
                return struct.pack("!6H", struct.unpack("!H", query[:2])[0], 0x8001, 0, 0, 0, 0)
            return None
        if q["qr"]:
            return None
        qid = q["id"]
        rd = 0x0100 if q["rd"] else 0
        if q["opcode"] != 0:
            return struct.pack("!6H", qid, 0x8004 | rd | (q["opcode"] << 11), 0, 0, 0, 0)
        if len(q["questions"]) != 1:
            return struct.pack("!6H", qid, 0x8001 | rd, 0, 0, 0, 0)
        qname, qtype = q["questions"][0]
        # The question as it came (the name's case kept), for the reply.
        _, qtype_num, qclass = q["raw_questions"][0]
        question = encode_name(qname) + struct.pack("!HH", qtype_num, qclass)
        edns = q["edns"]
        udp_limit = max(512, min(edns, 4096)) if edns else 512
        name = qname.lower().rstrip(".")
        tname = qtype if isinstance(qtype, str) else str(qtype)
        answers, authority = [], []
        with self.lock:
            self.total += 1
            self.names[name] = self.names.get(name, 0) + 1
            key = f"{name}/{tname}"
            self.types[key] = self.types.get(key, 0) + 1
            self.transports[transport] = self.transports.get(transport, 0) + 1
            ttl = self.ttl
            in_zone = (name == ZONE or name.endswith("." + ZONE)) and qclass == CLASS_IN
            rcode = 0
            owner, cur, hops = qname.rstrip("."), name, 0
            while True:
                rrs = self.lookup(cur) if in_zone else None
                if rrs is None:
                    rcode = 3
                    break
                if "CNAME" in rrs and qtype not in ("CNAME", "ANY") and hops < 8:
                    target = rrs["CNAME"][0]
                    answers.append((owner, "CNAME", ttl, target))
                    owner = cur = target
                    hops += 1
                    continue
                types = list(rrs) if qtype == "ANY" else ([qtype] if qtype in rrs else [])
                for t in types:
                    for v in rrs[t]:
                        answers.append((owner, t, ttl, v))
                break
            if in_zone and not any(a[1] == qtype for a in answers) and qtype != "ANY":
                soa = self.records.get(ZONE, {}).get("SOA")
                if soa:
                    authority.append((ZONE, "SOA", ttl, soa[0]))
        flags = 0x8000 | 0x0400 | rd | rcode  # QR, AA, RD copied; no recursion available
        try:
            body = b"".join(encode_rr(n, t, tt, v.replace("{ttl}", str(ttl)))
                            for n, t, tt, v in answers)
            auth = b"".join(encode_rr(n, t, tt, v.replace("{ttl}", str(ttl)))
                            for n, t, tt, v in authority)
        except (ValueError, OSError):
            body, auth, answers, authority = b"", b"", [], []
            flags = (flags & ~0xF) | 2
        opt = (b"\0" + struct.pack("!HHIH", TYPES["OPT"], 1232, 0, 0)) if edns else b""
        msg = (struct.pack("!6H", qid, flags, 1, len(answers), len(authority), 1 if edns else 0)
               + question + body + auth + opt)
        truncated = False
        if transport == "udp" and len(msg) > udp_limit:
            truncated = True
            msg = (struct.pack("!6H", qid, flags | 0x0200, 1, 0, 0, 1 if edns else 0)
                   + question + opt)
        self.log(f"dns {transport} {peer[0]}:{peer[1]} {qname} {tname} -> "
                 f"{RCODES.get(rcode, rcode)} {len(answers)} answer(s)"
                 + (" truncated" if truncated else ""))
        return msg


def serve_dns_udp(state, addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, 53))

    def loop():
        while True:
            data, peer = s.recvfrom(65535)
            try:
                reply = state.answer(data, "udp", peer)
                if reply:
                    s.sendto(reply, peer)
            except Exception as e:  # one bad query never ends the server
                state.log(f"dns udp {peer}: error {e!r}")
    threading.Thread(target=loop, daemon=True, name="dns-udp").start()
    return s


class DnsTcpHandler(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.settimeout(30)
        f = self.request.makefile("rb")
        try:
            while True:
                head = f.read(2)
                if len(head) < 2:
                    return
                n = struct.unpack("!H", head)[0]
                data = f.read(n)
                if len(data) < n:
                    return
                reply = self.server.state.answer(data, "tcp", self.client_address)
                if reply is None:
                    return
                self.request.sendall(struct.pack("!H", len(reply)) + reply)
        except OSError:
            return


class DnsTcpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    allow_reuse_address = True
    daemon_threads = True


class HttpHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "cs-test-internet/1"
    CONTROL = ("/stats", "/reset", "/dns/")

    def log_message(self, fmt, *args):
        self.server.state.log(f"http {self.client_address[0]} -> {self.local()} " + fmt % args)

    def local(self):
        return self.connection.getsockname()[0]

    def client(self):
        return self.client_address[0]

    def count(self, **kw):
        if not self.path.startswith(self.CONTROL):
            self.server.state.count_http(self.client(), self.local(), **kw)

    def reply(self, code, body, ctype="text/plain"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # Counted before it is written: once the client has it, the count has it too (a test
        # that reads /stats right after a response must never see it short).
        self.count(sent=len(body))
        self.wfile.write(body)

    def read_exactly(self, left, kept):
        """Reads left bytes of the body, counting them as they come (kept: a list to append
        them to, or None)."""
        while left:
            chunk = self.rfile.read(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError("body cut short")
            left -= len(chunk)
            self.count(received=len(chunk))
            if kept is not None:
                kept.append(chunk)

    def read_body(self, keep=False):
        """Reads the request body (Content-Length or chunked); returns (size, bytes if keep)."""
        kept, size = ([] if keep else None), 0
        te = self.headers.get("Transfer-Encoding", "").lower()
        if "chunked" in te:
            while True:
                line = self.rfile.readline(1024)
                if not line:
                    raise ConnectionError("body cut short")
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    break
                self.read_exactly(n, kept)
                size += n
                self.rfile.readline(8)  # the CRLF after the chunk
        else:
            size = int(self.headers.get("Content-Length") or 0)
            self.read_exactly(size, kept)
        return size, b"".join(kept or [])

    def do_GET(self):
        self.count(requests=1)
        path = self.path.split("?")[0]
        st = self.server.state
        if path == "/hello":
            self.reply(200, f"hello from {self.local()}\n")
        elif path.startswith("/bytes/"):
            try:
                n = int(path[len("/bytes/"):])
                if not 0 <= n <= MAX_BYTES:
                    raise ValueError
            except ValueError:
                self.reply(400, f"N must be 0..{MAX_BYTES}\n")
                return
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            block = bytes(range(256)) * 256  # 64 KiB, a multiple of 256: byte i is i % 256
            left = n
            while left:
                chunk = block[:min(left, len(block))]
                self.count(sent=len(chunk))  # before the write, as in reply()
                self.wfile.write(chunk)
                left -= len(chunk)
        elif path == "/stats":
            self.reply(200, json.dumps(st.http_stats()), "application/json")
        elif path == "/dns/stats":
            self.reply(200, json.dumps(st.dns_stats()), "application/json")
        else:
            self.reply(404, "not found\n")

    def do_POST(self):
        self.count(requests=1)
        path = self.path.split("?")[0]
        st = self.server.state
        control = path.startswith(self.CONTROL)
        try:
            size, body = self.read_body(keep=control)
        except (ConnectionError, ValueError) as e:
            self.log_message("bad body: %s", e)
            self.close_connection = True
            return
        try:
            if path == "/upload":
                self.reply(200, f"{size}\n")
            elif path == "/reset":
                st.http_reset()
                self.reply(200, "ok\n")
            elif path == "/dns/reset":
                st.dns_reset()
                self.reply(200, "ok\n")
            elif path == "/dns/ttl":
                ttl = int(body.decode().strip())
                if not 0 <= ttl < 2 ** 31:
                    raise ValueError("TTL out of range")
                with st.lock:
                    st.ttl = ttl
                self.reply(200, "ok\n")
            elif path == "/dns/set":
                req = json.loads(body)
                name = req["name"].lower().rstrip(".")
                rtype = req["type"].upper()
                values = list(req["values"])
                for v in values:
                    encode_rdata(rtype, v)  # refuses what it could not answer
                with st.lock:
                    rrs = st.records.setdefault(name, {})
                    if values:
                        rrs[rtype] = values
                    else:
                        rrs.pop(rtype, None)
                self.reply(200, "ok\n")
            elif path == "/dns/zone-reset":
                st.zone_reset()
                self.reply(200, "ok\n")
            else:
                self.reply(404, "not found\n")
        except (ValueError, KeyError, TypeError, AttributeError, OSError) as e:
            self.reply(400, f"bad request: {e}\n")

    do_PUT = do_POST  # curl -T sends PUT


class HttpServer(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 128


class HttpServer6(HttpServer):
    address_family = socket.AF_INET6

    def server_bind(self):
        self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        super().server_bind()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dns-addr", required=True)
    ap.add_argument("--ttl", type=int, default=60)
    ap.add_argument("--no-ipv6", action="store_true")
    args = ap.parse_args()
    ipaddress.ip_address(args.dns_addr)
    log = sys.stdout
    state = State(args.dns_addr, args.ttl, log)

    def stop(*_):
        state.log("servers: stopping")
        os._exit(0)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    serve_dns_udp(state, args.dns_addr)
    tcp = DnsTcpServer((args.dns_addr, 53), DnsTcpHandler)
    tcp.state = state
    threading.Thread(target=tcp.serve_forever, daemon=True, name="dns-tcp").start()
    servers = [HttpServer(("0.0.0.0", 80), HttpHandler)]
    if not args.no_ipv6:
        servers.append(HttpServer6(("::", 80), HttpHandler))
    for s in servers:
        s.state = state
        threading.Thread(target=s.serve_forever, daemon=True, name="http").start()
    state.log(f"servers: ready (dns {args.dns_addr}:53 udp+tcp, http :80, ttl {args.ttl})")

    # The parent holds our stdin open: its end (the test is gone, killed) ends us too.
    def watch_stdin():
        while os.read(0, 4096):
            pass
        state.log("servers: stdin closed: stopping")
        os._exit(0)
    threading.Thread(target=watch_stdin, daemon=True, name="stdin").start()
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
