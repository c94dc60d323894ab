"""compute_sdk: a typed Python client for compute.v1.ComputeService.

    from compute_sdk import Sandbox

    with Sandbox.create(tenant_id="acme") as sb:          # destroyed when the block ends
        r = sb.exec("python3", ["-c", "print(6 * 7)"])
        print(r.exit_code, r.stdout_text(), r.usage.cpu_ms)
        for ev in sb.exec_stream("sh", ["-c", "for i in 1 2 3; do echo $i; sleep 1; done"]):
            print(ev)
        sb.files.write("big.bin", b"x" * (40 << 20))     # 16 MiB calls, done for you
        assert len(sb.files.read("big.bin")) == 40 << 20
        print(sb.files.list(recursive=True).paths())

Every call has a deadline (Timeouts, overridable per call) and raises a ComputeError subclass
that keeps the gRPC status code. The channel accepts the API's 16 MiB messages (grpcio's
default receive limit is 4 MiB)."""
from .client import (DEFAULT_ADDRESS, MAX_DATA_PER_CALL, MAX_MESSAGE_BYTES, TLS, Client,
                     Timeouts)
from .errors import (AbortedError, AlreadyExistsError, CancelledError, ComputeError,
                     DataLossError, DeadlineExceededError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, NotFoundError, OutOfRangeError,
                     OutputLimitError, PermissionDeniedError, ResourceExhaustedError,
                     UnauthenticatedError, UnavailableError, UnimplementedError)
from .sandbox import ExecStream, Files, Sandbox
from .types import (Egress, ExecCompletion, ExecOutput, ExecResult, FileEntry, FileListing,
                    Network, SandboxInfo, SandboxStatus, Usage)

__version__ = "0.1.0"

__all__ = [
    "Client", "TLS", "Timeouts", "DEFAULT_ADDRESS", "MAX_DATA_PER_CALL", "MAX_MESSAGE_BYTES",
    "Sandbox", "ExecStream", "Files",
    "Egress", "ExecCompletion", "ExecOutput", "ExecResult", "FileEntry", "FileListing",
    "Network", "SandboxInfo", "SandboxStatus", "Usage",
    "ComputeError", "AbortedError", "AlreadyExistsError", "CancelledError", "DataLossError",
    "DeadlineExceededError", "FailedPreconditionError", "InternalError", "InvalidArgumentError",
    "NotFoundError", "OutOfRangeError", "OutputLimitError", "PermissionDeniedError",
    "ResourceExhaustedError", "UnauthenticatedError", "UnavailableError", "UnimplementedError",
]
