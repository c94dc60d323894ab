#!/usr/bin/python3
"""Fake node agents for the scale harness: one nodeagent.v1.NodeAgent gRPC server per
simulated node, on loopback, plaintext (the harness runs the frontends without
--agent-tls-*), all in this one process. They run nothing: every call answers after a
bounded latency drawn uniformly from the ranges below (what a real agent's call costs on
an idle node, measured by compute-bench's phases: a unary call 1-5 ms, an exec of `true`
5-20 ms), with plausible bodies.

Usage: agents.py BUILD_DIR NODES. Prints one JSON line {"ports": [...]} when serving, then
reads commands on stdin, one per line:
  restart I DOWN_S   stop node I's server (in-flight calls cut), wait, serve again on its port
  quit
and answers each with one JSON line."""
import concurrent.futures
import json
import os
import random
import sys
import threading
import time

import grpc

UNARY_MS = (1, 5)
EXEC_MS = (5, 20)


def pause(rng):
    time.sleep(random.uniform(*rng) / 1000.0)


def main():
    build_dir, nodes = sys.argv[1], int(sys.argv[2])
    sys.path.insert(0, os.path.join(build_dir, "python"))
    from nodeagent.v1 import nodeagent_pb2 as pb  # noqa: E402 (generated at build time)
    from compute.v1 import compute_pb2 as cpb

    calls = {"n": 0}
    lock = threading.Lock()

    def count():
        with lock:
            calls["n"] += 1

    def info(req, ctx):
        count()
        pause(UNARY_MS)
        return pb.GetAgentInfoResponse(node_name="sim", agent_version="sim", mode=2,
                                       runtime="sim", max_sandboxes=1000)

    def usage(req, ctx):
        count()
        pause(UNARY_MS)
        r = pb.GetUsageResponse(sandbox_id=req.ref.sandbox_id)
        r.usage.cpu_ms = random.randint(1, 1000)
        r.usage.memory_peak_bytes = random.randint(10, 200) << 20
        return r

    def empty(resp):
        def fn(req, ctx):
            count()
            pause(UNARY_MS)
            return resp()
        return fn

    def read(req, ctx):
        count()
        pause(UNARY_MS)
        return cpb.ReadFileResponse(data=b"hello\n", total_size=6, eof=True)

    def write(req, ctx):
        count()
        pause(UNARY_MS)
        return cpb.WriteFileResponse(bytes_written=len(getattr(req, "data", b"")))

    def listf(req, ctx):
        count()
        pause(UNARY_MS)
        r = cpb.ListFilesResponse()
        e = r.entries.add()
        e.path = "hello.txt"
        e.size = 6
        return r

    def exec_(req, ctx):
        count()
        pause(EXEC_MS)
        yield cpb.ExecEvent(stdout=cpb.StdoutLine(data=b"ok\n"))
        yield cpb.ExecEvent(completed=cpb.ExecCompleted(exit_code=0))

    def uu(fn, req, resp):
        return grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=req.FromString, response_serializer=resp.SerializeToString)

    handlers = {
        "GetAgentInfo": uu(info, pb.GetAgentInfoRequest, pb.GetAgentInfoResponse),
        "GetUsage": uu(usage, pb.GetUsageRequest, pb.GetUsageResponse),
        "GetSandbox": uu(empty(pb.GetSandboxResponse), pb.GetSandboxRequest,
                         pb.GetSandboxResponse),
        "DestroySandbox": uu(empty(pb.DestroySandboxResponse), pb.DestroySandboxRequest,
                             pb.DestroySandboxResponse),
        "ListSandboxes": uu(empty(pb.ListSandboxesResponse), pb.ListSandboxesRequest,
                            pb.ListSandboxesResponse),
        "ReadFile": uu(read, pb.ReadFileRequest, cpb.ReadFileResponse),
        "WriteFile": uu(write, pb.WriteFileRequest, cpb.WriteFileResponse),
        "ListFiles": uu(listf, pb.ListFilesRequest, cpb.ListFilesResponse),
        "Exec": grpc.unary_stream_rpc_method_handler(
            exec_, request_deserializer=pb.ExecRequest.FromString,
            response_serializer=cpb.ExecEvent.SerializeToString),
    }
    generic = grpc.method_handlers_generic_handler("nodeagent.v1.NodeAgent", handlers)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=32)

    def serve(port):
        srv = grpc.server(pool, handlers=(generic,))
        bound = srv.add_insecure_port("127.0.0.1:%d" % port)
        srv.start()
        return srv, bound

    servers, ports = [], []
    for _ in range(nodes):
        srv, port = serve(0)
        servers.append(srv)
        ports.append(port)
    print(json.dumps({"ports": ports}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        if words[0] == "quit":
            break
        if words[0] == "restart":
            i, down = int(words[1]), float(words[2])
            servers[i].stop(0).wait()
            time.sleep(down)
            for _ in range(50):  # the port may linger a moment
                try:
                    servers[i], _p = serve(ports[i])
                    break
                except RuntimeError:
                    time.sleep(0.05)
            print(json.dumps({"ok": True, "calls": calls["n"]}), flush=True)
        elif words[0] == "calls":
            print(json.dumps({"calls": calls["n"]}), flush=True)
    for s in servers:
        s.stop(0)


if __name__ == "__main__":
    main()
