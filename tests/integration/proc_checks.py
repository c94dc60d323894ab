"""Helpers the link and privilege tests share: /proc status files as dicts, and whether a
frontend reaches its agent (a DescribeSandbox of an unknown id answered NOT_FOUND)."""
import os
import sys
import time

import grpc

UNKNOWN_SANDBOX = "3f0c1a4e-0d6b-4c59-9a51-2b7a8f0e6d11"


def status(path):
    """A /proc/.../status file as {field: value}."""
    with open(path) as f:
        return dict(ln.rstrip("\n").split(":\t", 1) for ln in f if ":\t" in ln)


def thread_statuses(pid):
    """(tid, status) of every thread of pid; a thread that ends meanwhile is left out."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            yield tid, status(f"/proc/{pid}/task/{tid}/status")
        except FileNotFoundError:
            continue


def frontend_reaches_agent(build_dir, front, limit_s=20):
    """Asks the frontend at `front` to describe an unknown sandbox until it answers NOT_FOUND
    (it asked its agent), for at most limit_s. Returns None then, else the last error."""
    sys.path.insert(0, os.path.join(build_dir, "python"))
    from compute.v1 import compute_pb2  # noqa: E402 (generated at build time)
    with grpc.insecure_channel(front) as ch:
        describe = ch.unary_unary(
            "/compute.v1.ComputeService/DescribeSandbox",
            request_serializer=compute_pb2.DescribeSandboxRequest.SerializeToString,
            response_deserializer=compute_pb2.DescribeSandboxResponse.FromString)
        deadline = time.monotonic() + limit_s
        while True:
            try:
                describe(compute_pb2.DescribeSandboxRequest(sandbox_id=UNKNOWN_SANDBOX),
                         timeout=5)
                return "DescribeSandbox of an unknown id answered OK"
            except grpc.RpcError as e:
                if e.code() == grpc.StatusCode.NOT_FOUND:
                    return None
                if time.monotonic() > deadline:
                    return e
            time.sleep(0.1)
