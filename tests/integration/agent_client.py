"""A small client for nodeagent.v1.NodeAgent (Debian's python3-grpcio), for the tests."""
import os
import sys

import grpc


def code_of(fn, *args, **kw):
    """The gRPC status code fn(*args, **kw) ends with (OK when it returns)."""
    try:
        fn(*args, **kw)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def collect_exec(stream):
    """Reads an ExecEvent stream to its end: (stdout bytes, stderr bytes, ExecCompleted,
    every event). Both services stream compute.v1.ExecEvent."""
    out, err, done, events = bytearray(), bytearray(), None, []
    for ev in stream:
        events.append(ev)
        kind = ev.WhichOneof("event")
        if kind == "stdout":
            out += ev.stdout.data
        elif kind == "stderr":
            err += ev.stderr.data
        else:
            done = ev.completed
    return bytes(out), bytes(err), done, events


class Agent:
    def __init__(self, build_dir, address):
        sys.path.insert(0, os.path.join(build_dir, "python"))
        from nodeagent.v1 import nodeagent_pb2  # noqa: E402 (generated at build time)
        from compute.v1 import compute_pb2
        self.pb, self.cpb = nodeagent_pb2, compute_pb2
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", 17 * 1024 * 1024),
            ("grpc.max_send_message_length", 17 * 1024 * 1024)])
        methods = {
            "GetAgentInfo": (self.pb.GetAgentInfoRequest, self.pb.GetAgentInfoResponse),
            "CreateSandbox": (self.pb.CreateSandboxRequest, self.pb.CreateSandboxResponse),
            "DestroySandbox": (self.pb.DestroySandboxRequest, self.pb.DestroySandboxResponse),
            "GetSandbox": (self.pb.GetSandboxRequest, self.pb.GetSandboxResponse),
            "ListSandboxes": (self.pb.ListSandboxesRequest, self.pb.ListSandboxesResponse),
            "ReadFile": (self.pb.ReadFileRequest, self.cpb.ReadFileResponse),
            "WriteFile": (self.pb.WriteFileRequest, self.cpb.WriteFileResponse),
            "ListFiles": (self.pb.ListFilesRequest, self.cpb.ListFilesResponse),
            "GetUsage": (self.pb.GetUsageRequest, self.pb.GetUsageResponse),
        }
        for name, (req, resp) in methods.items():
            setattr(self, name, self.channel.unary_unary(
                f"/nodeagent.v1.NodeAgent/{name}", request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString))
        self.ExecStream = self.channel.unary_stream(
            "/nodeagent.v1.NodeAgent/Exec",
            request_serializer=self.pb.ExecRequest.SerializeToString,
            response_deserializer=self.cpb.ExecEvent.FromString)

    def ref(self, sandbox_id):
        return self.pb.SandboxRef(sandbox_id=sandbox_id)

    def exec(self, sandbox_id, command, *args, env=None, working_dir="", timeout_s=0,
             rpc_timeout=120):
        """Runs a command; returns (stdout bytes, stderr bytes, ExecCompleted, events)."""
        req = self.pb.ExecRequest(ref=self.ref(sandbox_id), command=command, args=list(args),
                                  env=env or {}, working_dir=working_dir)
        if timeout_s:
            req.timeout.seconds = timeout_s
        return collect_exec(self.ExecStream(req, timeout=rpc_timeout))

    def close(self):
        self.channel.close()
