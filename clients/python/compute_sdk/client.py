"""The connection to a compute service: one gRPC channel, set up for this API.

What it sets up that a default grpcio channel lacks:

- A receive (and send) limit of 16 MiB + 64 KiB per message. The API moves up to 16 MiB of
  file data per call; grpcio's default receive limit is 4 MiB, with which a ReadFile of
  16 MiB fails with RESOURCE_EXHAUSTED "Received message larger than max (16777226 vs.
  4194304)".
- A deadline on every call: the defaults in Timeouts, which every method lets the caller
  override with its own `timeout`.
- Errors as ComputeError subclasses that keep the gRPC status code (errors.py).
- TLS when asked for (TLS, or the COMPUTE_TLS* environment variables computectl reads too).
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence, Tuple, Union

import grpc

from ._proto import compute_pb2
from .errors import error_from_rpc

__all__ = ["Client", "TLS", "Timeouts", "DEFAULT_ADDRESS", "MAX_DATA_PER_CALL",
           "MAX_MESSAGE_BYTES"]

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


def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


@dataclass(frozen=True)
class TLS:
    """TLS to the service's port (docs/api.md, "Connecting over TLS"); paths of PEM files.

    ca_file: the CA(s) the server's certificate must chain to; None: grpcio's default roots
        (the system's).
    cert_file, key_file: a client certificate and its unencrypted key, both or neither, for
        a port that requires one (mutual TLS).
    server_name: the DNS name the server's certificate must carry; None: the host of the
        address.

    from_env() reads the variables computectl reads: COMPUTE_TLS=1, COMPUTE_TLS_CA_FILE,
    COMPUTE_TLS_CERT_FILE, COMPUTE_TLS_KEY_FILE, COMPUTE_TLS_SERVER_NAME."""
    ca_file: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    server_name: Optional[str] = None

    ENV = {"ca_file": "COMPUTE_TLS_CA_FILE", "cert_file": "COMPUTE_TLS_CERT_FILE",
           "key_file": "COMPUTE_TLS_KEY_FILE", "server_name": "COMPUTE_TLS_SERVER_NAME"}

    @classmethod
    def from_env(cls) -> Optional["TLS"]:
        """The TLS the environment asks for, or None (plaintext): COMPUTE_TLS=1 or any of
        the file variables turns it on."""
        values = {k: os.environ.get(v) or None for k, v in cls.ENV.items()}
        if os.environ.get("COMPUTE_TLS") in ("1", "true") or any(values.values()):
            return cls(**values)
        return None

    def credentials(self) -> grpc.ChannelCredentials:
        """The channel credentials, from the files read now. ValueError for a certificate
        without its key (or the reverse); OSError for a file that cannot be read."""
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("TLS: cert_file and key_file go together (a client certificate "
                             "and its key)")
        return grpc.ssl_channel_credentials(root_certificates=_read(self.ca_file),
                                            private_key=_read(self.key_file),
                                            certificate_chain=_read(self.cert_file))


class Client:
    """A channel to compute.v1.ComputeService.

    Args:
        address: "host:port"; default: $COMPUTE_ADDR, else 127.0.0.1:50051.
        tls: TLS(...) for a TLS port, True for TLS() (the system's CAs), False for
            plaintext; None (default): TLS.from_env(), plaintext when it asks for nothing.
        credentials: grpc.ChannelCredentials of your own making, instead of tls.
        timeouts: default deadlines (Timeouts()).
        options: further grpc channel options, appended to the SDK's own.

    Use it as a context manager, or close() it; Sandbox.create() makes one of its own when
    given none, and closes it with the sandbox.
    """

    def __init__(self, address: Optional[str] = None, *,
                 tls: Union[TLS, bool, None] = None,
                 credentials: Optional[grpc.ChannelCredentials] = None,
                 timeouts: Optional[Timeouts] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.address = address or os.environ.get("COMPUTE_ADDR") or DEFAULT_ADDRESS
        self.timeouts = timeouts or Timeouts()
        opts = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES)]
        if credentials is not None and tls:
            raise ValueError("Client: give tls or credentials, not both")
        if credentials is None:
            t = TLS() if tls is True else TLS.from_env() if tls is None else tls or None
            if t is not None:
                credentials = t.credentials()
                if t.server_name:
                    opts.append(("grpc.ssl_target_name_override", t.server_name))
        opts += list(options)
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
