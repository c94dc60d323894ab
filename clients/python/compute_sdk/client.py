"""The connection to a compute service: one gRPC channel, set up for this API.

What it sets up that a default grpcio channel lacks:

- A receive (and send) limit of 16 MiB + 64 KiB per message. The API moves up to 16 MiB of
  file data per call; grpcio's default receive limit is 4 MiB, with which a ReadFile of
  16 MiB fails with RESOURCE_EXHAUSTED "Received message larger than max (16777226 vs.
  4194304)".
- A deadline on every call: the defaults in Timeouts, which every method lets the caller
  override with its own `timeout`.
- Errors as ComputeError subclasses that keep the gRPC status code (errors.py).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Tuple

import grpc

from ._proto import compute_pb2
from .errors import error_from_rpc

__all__ = ["Client", "Timeouts", "DEFAULT_ADDRESS", "MAX_DATA_PER_CALL", "MAX_MESSAGE_BYTES"]

#: Where computectl and the SDK connect when told nothing else (COMPUTE_ADDR overrides).
DEFAULT_ADDRESS = "127.0.0.1:50051"
#: The API's cap on file data per ReadFile / WriteFile call (docs/api.md).
MAX_DATA_PER_CALL = 16 * 1024 * 1024
#: The service's cap per message: the data plus room for the rest of the message.
MAX_MESSAGE_BYTES = MAX_DATA_PER_CALL + 64 * 1024

_SERVICE = "/compute.v1.ComputeService/"


@dataclass(frozen=True)
class Timeouts:
    """Default deadlines in seconds; every call takes a `timeout` of its own too.

    exec_margin is added to a command's own timeout (at most 600 s on the server) for the
    ExecCommand call's deadline, so that the server's timeout, not the client's, ends a slow
    command and its ExecCompletion (timed_out) still arrives."""
    create: float = 60.0
    describe: float = 30.0
    destroy: float = 60.0
    file_call: float = 120.0  # each ReadFile / WriteFile call (one chunk)
    list: float = 60.0
    exec_margin: float = 30.0
    exec_command: float = 600.0  # the command's timeout when the caller gives none


class Client:
    """A channel to compute.v1.ComputeService.

    Args:
        address: "host:port"; default: $COMPUTE_ADDR, else 127.0.0.1:50051.
        credentials: grpc.ssl_channel_credentials(...) for a TLS port; None: plaintext.
        timeouts: default deadlines (Timeouts()).
        options: further grpc channel options, appended to the SDK's own.

    Use it as a context manager, or close() it; Sandbox.create() makes one of its own when
    given none, and closes it with the sandbox.
    """

    def __init__(self, address: Optional[str] = None, *,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 timeouts: Optional[Timeouts] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.address = address or os.environ.get("COMPUTE_ADDR") or DEFAULT_ADDRESS
        self.timeouts = timeouts or Timeouts()
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)] + list(options)
        if credentials is not None:
            self._channel = grpc.secure_channel(self.address, credentials, options=opts)
        else:
            self._channel = grpc.insecure_channel(self.address, options=opts)
        pb = compute_pb2
        self._unary = {
            name: self._channel.unary_unary(
                _SERVICE + name, request_serializer=req.SerializeToString,
                response_deserializer=resp.FromString)
            for name, req, resp in (
                ("CreateSandbox", pb.CreateSandboxRequest, pb.CreateSandboxResponse),
                ("DestroySandbox", pb.DestroySandboxRequest, pb.DestroySandboxResponse),
                ("DescribeSandbox", pb.DescribeSandboxRequest, pb.DescribeSandboxResponse),
                ("ReadFile", pb.ReadFileRequest, pb.ReadFileResponse),
                ("WriteFile", pb.WriteFileRequest, pb.WriteFileResponse),
                ("ListFiles", pb.ListFilesRequest, pb.ListFilesResponse))
        }
        self._exec = self._channel.unary_stream(
            _SERVICE + "ExecCommand", request_serializer=pb.ExecCommandRequest.SerializeToString,
            response_deserializer=pb.ExecEvent.FromString)

    @property
    def channel(self) -> grpc.Channel:
        """The underlying grpc channel (for calls the SDK does not wrap)."""
        return self._channel

    def call(self, method: str, request: Any, timeout: float) -> Any:
        """Makes the unary call `method` ("CreateSandbox", ...) with a deadline of timeout
        seconds; returns the response message or raises a ComputeError."""
        try:
            return self._unary[method](request, timeout=timeout,
                                       metadata=(("x-request-id", str(uuid.uuid4())),))
        except grpc.RpcError as e:
            raise error_from_rpc(e) from None

    def exec_events(self, request: Any, timeout: float) -> Iterator[Any]:
        """Starts ExecCommand; returns grpcio's response iterator (also a grpc.Call, whose
        cancel() cancels the command). Errors surface while iterating, as grpc.RpcError."""
        return self._exec(request, timeout=timeout,
                          metadata=(("x-request-id", str(uuid.uuid4())),))

    def close(self) -> None:
        """Closes the channel; calls still running are cancelled."""
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
