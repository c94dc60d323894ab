"""A client for compute.v1.ComputeService (Debian's python3-grpcio), for the e2e tests."""
import os
import sys

import grpc

from agent_client import collect_exec


class Compute:
    def __init__(self, build_dir, address, credentials=None, options=()):
        """Plaintext, or TLS with grpc channel credentials (and options such as
        grpc.ssl_target_name_override)."""
        sys.path.insert(0, os.path.join(build_dir, "python"))
        from compute.v1 import compute_pb2  # noqa: E402 (generated at build time)
        self.pb = compute_pb2
        self.address = address
        opts = [("grpc.max_receive_message_length", 17 * 1024 * 1024),
                ("grpc.max_send_message_length", 17 * 1024 * 1024)] + list(options)
        self.channel = (grpc.secure_channel(address, credentials, options=opts) if credentials
                        else grpc.insecure_channel(address, options=opts))
        pb = compute_pb2
        for name, req, resp in (
                ("CreateSandbox", pb.CreateSandboxRequest, pb.CreateSandboxResponse),
                ("DestroySandbox", pb.DestroySandboxRequest, pb.DestroySandboxResponse),
                ("DescribeSandbox", pb.DescribeSandboxRequest, pb.DescribeSandboxResponse),
                ("ReadFile", pb.ReadFileRequest, pb.ReadFileResponse),
                ("WriteFile", pb.WriteFileRequest, pb.WriteFileResponse),
                ("ListFiles", pb.ListFilesRequest, pb.ListFilesResponse),
                ("ListSandboxes", pb.ListSandboxesRequest, pb.ListSandboxesResponse)):
            setattr(self, name, self.channel.unary_unary(
                f"/compute.v1.ComputeService/{name}", request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString))
        self.ExecStream = self.channel.unary_stream(
            "/compute.v1.ComputeService/ExecCommand",
            request_serializer=pb.ExecCommandRequest.SerializeToString,
            response_deserializer=pb.ExecEvent.FromString)

    def create(self, tenant, session, **kw):
        return self.CreateSandbox(self.pb.CreateSandboxRequest(
            tenant_id=tenant, session_id=session, **kw), timeout=60)

    def describe(self, sid):
        return self.DescribeSandbox(self.pb.DescribeSandboxRequest(sandbox_id=sid), timeout=30)

    def destroy(self, sid):
        return self.DestroySandbox(self.pb.DestroySandboxRequest(sandbox_id=sid), timeout=60)

    def exec(self, sid, command, *args, env=None, working_dir="", timeout_s=0, rpc_timeout=300):
        """Runs a command; returns (stdout, stderr, ExecCompleted, events)."""
        req = self.pb.ExecCommandRequest(sandbox_id=sid, command=command, args=list(args),
                                         env=env or {}, working_dir=working_dir)
        if timeout_s:
            req.timeout.seconds = timeout_s
        return collect_exec(self.ExecStream(req, timeout=rpc_timeout))

    def read(self, sid, path, **kw):
        return self.ReadFile(self.pb.ReadFileRequest(sandbox_id=sid, path=path, **kw),
                             timeout=60)

    def write(self, sid, path, data, **kw):
        return self.WriteFile(self.pb.WriteFileRequest(sandbox_id=sid, path=path, data=data,
                                                       **kw), timeout=60)

    def ls(self, sid, path, **kw):
        return self.ListFiles(self.pb.ListFilesRequest(sandbox_id=sid, path=path, **kw),
                              timeout=60)

    def list(self, tenant, **kw):
        return self.ListSandboxes(self.pb.ListSandboxesRequest(tenant_id=tenant, **kw),
                                  timeout=60)

    def list_all(self, tenant, **kw):
        """Every page of a listing: (sandboxes, pages)."""
        out, pages, token = [], 0, ""
        while True:
            r = self.list(tenant, page_token=token, **kw)
            pages += 1
            out.extend(r.sandboxes)
            token = r.next_page_token
            if not token:
                return out, pages

    def close(self):
        self.channel.close()
