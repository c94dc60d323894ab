"""Sandbox: one session's gVisor sandbox, its commands and its workspace files."""
from __future__ import annotations

import time
import uuid
import warnings
from types import TracebackType
from typing import BinaryIO, Callable, Iterator, Mapping, Optional, Sequence, Type, Union

import grpc

from ._proto import compute_pb2
from .client import MAX_DATA_PER_CALL, TLS, Client
from .errors import (AbortedError, ComputeError, DeadlineExceededError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, NotFoundError, OutputLimitError,
                     error_from_rpc)
from .types import (Egress, ExecCompletion, ExecOutput, ExecResult, FileEntry, FileListing,
                    SandboxInfo, SandboxStatus, Usage)

__all__ = ["Sandbox", "ExecStream", "Files"]

#: Sandbox.exec() collects at most this much output (stdout and stderr together) by default.
DEFAULT_MAX_OUTPUT = 64 * 1024 * 1024

ExecEvent = Union[ExecOutput, ExecCompletion]


class ExecStream:
    """A running command's events, as they come: ExecOutput chunks, then one ExecCompletion.

    Iterate over it; `completion` holds the ExecCompletion once it has arrived. cancel() (or
    leaving a `with` block early) cancels the command: the server sends it SIGTERM, then
    SIGKILL 10 s later. A failed call raises a ComputeError while iterating."""

    def __init__(self, call: Iterator[object]) -> None:
        self._call = call
        self.completion: Optional[ExecCompletion] = None

    def __iter__(self) -> Iterator[ExecEvent]:
        try:
            for ev in self._call:
                kind = ev.WhichOneof("event")  # type: ignore[attr-defined]
                if kind == "stdout":
                    yield ExecOutput("stdout", ev.stdout.data)  # type: ignore[attr-defined]
                elif kind == "stderr":
                    yield ExecOutput("stderr", ev.stderr.data)  # type: ignore[attr-defined]
                elif kind == "completed":
                    self.completion = ExecCompletion.from_proto(
                        ev.completed)  # type: ignore[attr-defined]
                    yield self.completion
        except grpc.RpcError as e:
            raise error_from_rpc(e) from None
        if self.completion is None:
            raise InternalError("the exec stream ended without its ExecCompleted event")

    def cancel(self) -> None:
        """Cancels the command (and the call). Safe to call at any time, more than once."""
        self._call.cancel()  # type: ignore[attr-defined]

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.completion is None:
            self.cancel()


class Files:
    """The sandbox's workspace files (sandbox.files). Paths are relative to the workspace
    (default /workspace); data of any size is moved in calls of at most 16 MiB, the API's
    cap per call, so the caller never chunks."""

    def __init__(self, sandbox: "Sandbox") -> None:
        self._sb = sandbox

    def _timeout(self, timeout: Optional[float]) -> float:
        return timeout if timeout is not None else self._sb.client.timeouts.file_call

    def _chunks(self, path: str, offset: int, length: Optional[int],
                timeout: Optional[float]) -> Iterator[bytes]:
        """The file's bytes from offset (length of them, or to its end), one call's worth at
        a time."""
        if offset < 0 or (length is not None and length < 0):
            raise InvalidArgumentError("offset and length must not be negative")
        size: Optional[int] = None
        pos, done = offset, 0
        while length is None or done < length:
            want = MAX_DATA_PER_CALL if length is None else min(MAX_DATA_PER_CALL,
                                                                 length - done)
            resp = self._sb.client.call("ReadFile", compute_pb2.ReadFileRequest(
                sandbox_id=self._sb.id, path=path, offset=pos, max_bytes=want),
                self._timeout(timeout))
            if size is not None and resp.total_size != size:
                raise AbortedError(f"{path} changed size while it was read ({size} -> "
                                   f"{resp.total_size} bytes)")
            size = resp.total_size
            pos += len(resp.data)
            done += len(resp.data)
            if resp.data:
                yield resp.data
            if resp.eof:
                return
            if not resp.data:
                raise InternalError(f"ReadFile of {path} returned no data before its end")

    def read(self, path: str, *, offset: int = 0, length: Optional[int] = None,
             timeout: Optional[float] = None) -> bytes:
        """Reads the file at path: all of it, or `length` bytes from `offset`.

        Files over 16 MiB are read in 16 MiB calls; timeout is each call's deadline. The
        reads are not one snapshot: a file whose size changes between them raises
        AbortedError. NotFoundError for a missing file, FailedPreconditionError for a
        directory. For files too big to hold in memory, see download()."""
        return b"".join(self._chunks(path, offset, length, timeout))

    def download(self, path: str, dest: BinaryIO, *, timeout: Optional[float] = None) -> int:
        """Copies the file at path into the binary file object dest, 16 MiB at a time (the
        whole file never sits in memory); returns the bytes copied. Errors as for read()."""
        n = 0
        for chunk in self._chunks(path, 0, None, timeout):
            dest.write(chunk)
            n += len(chunk)
        return n

    def read_text(self, path: str, encoding: str = "utf-8", **kw: object) -> str:
        """read() decoded (strictly: undecodable bytes raise UnicodeDecodeError)."""
        return self.read(path, **kw).decode(encoding)  # type: ignore[arg-type]

    def _put(self, path: str, chunks: Iterator[bytes], append: bool, mode: int,
             timeout: Optional[float], total: Optional[int]) -> int:
        """Writes the chunks (each at most 16 MiB; at least one, maybe empty): the first
        replaces the file unless append, the others append."""
        written = 0
        for i, chunk in enumerate(chunks):
            try:
                resp = self._sb.client.call("WriteFile", compute_pb2.WriteFileRequest(
                    sandbox_id=self._sb.id, path=path, data=chunk, append=append or i > 0,
                    mode=mode), self._timeout(timeout))
            except ComputeError as e:
                if written:
                    of = f" of {total}" if total is not None else ""
                    e.details = f"{e.details} (after {written}{of} bytes written)"
                    e.args = (f"{e.code.name}: {e.details}",)
                raise
            written += resp.bytes_written
        return written

    def write(self, path: str, data: Union[bytes, bytearray, memoryview, str], *,
              append: bool = False, mode: int = 0, timeout: Optional[float] = None) -> int:
        """Writes data (str is encoded as UTF-8) to path, creating missing directories;
        returns the bytes written.

        append=False replaces the file. Up to 16 MiB that is one atomic call: a reader sees
        the old file or the new one. Past 16 MiB the data goes in 16 MiB calls, the first
        replacing the file and the others appending: a reader may see the file grow, and a
        failure part way leaves the first chunks (the error says how far it got). mode
        applies to a new file (0: the server's default, 0644). timeout is each call's."""
        buf = memoryview(data.encode() if isinstance(data, str) else data).cast("B")
        chunks = (bytes(buf[i:i + MAX_DATA_PER_CALL])
                  for i in range(0, max(len(buf), 1), MAX_DATA_PER_CALL))
        return self._put(path, chunks, append, mode, timeout, len(buf))

    def upload(self, path: str, src: BinaryIO, *, append: bool = False, mode: int = 0,
               timeout: Optional[float] = None) -> int:
        """Writes what the binary file object src reads, to its end, to path, 16 MiB at a
        time (never all of it in memory); returns the bytes written. As write() otherwise."""
        def chunks() -> Iterator[bytes]:
            chunk = src.read(MAX_DATA_PER_CALL)
            yield chunk  # even empty: the file is made (or emptied)
            while chunk:
                chunk = src.read(MAX_DATA_PER_CALL)
                if chunk:
                    yield chunk
        return self._put(path, chunks(), append, mode, timeout, None)

    def list(self, path: str = "", *, recursive: bool = False, max_entries: int = 0,
             timeout: Optional[float] = None) -> FileListing:
        """Lists the directory at path ("" is the workspace root), recursively if asked.
        max_entries 0 means the server's default (1000; at most 10000); `truncated` on the
        result says whether entries were left out."""
        resp = self._sb.client.call("ListFiles", compute_pb2.ListFilesRequest(
            sandbox_id=self._sb.id, path=path, recursive=recursive, max_entries=max_entries),
            timeout if timeout is not None else self._sb.client.timeouts.list)
        return FileListing([FileEntry.from_proto(e) for e in resp.entries], resp.truncated)

    def exists(self, path: str, *, timeout: Optional[float] = None) -> bool:
        """True when path names a file or directory (reads at most one byte of it)."""
        try:
            self.read(path, length=1, timeout=timeout)
            return True
        except NotFoundError:
            return False
        except FailedPreconditionError:  # a directory (or a FIFO, socket, device)
            return True


class Sandbox:
    """A gVisor sandbox with its workspace, for one session.

    Make one with Sandbox.create() (a context manager: leaving the `with` block destroys the
    sandbox) or attach to an existing one with Sandbox.connect()::

        with Sandbox.create(tenant_id="acme") as sb:
            r = sb.exec("python3", ["-c", "print(6 * 7)"])
            print(r.exit_code, r.stdout_text(), r.usage.cpu_ms)
            sb.files.write("data/in.txt", b"hello")
            print(sb.files.read("data/in.txt"))
    """

    def __init__(self, client: Client, sandbox_id: str, *, owns_client: bool = False,
                 status: SandboxStatus = SandboxStatus.UNSPECIFIED) -> None:
        self.client = client
        self.id = sandbox_id
        self.status = status  # as last seen (create, describe, wait_ready, destroy)
        self.files = Files(self)
        self._owns_client = owns_client
        self._destroyed: Optional[Usage] = None

    # --- lifecycle -----------------------------------------------------------------------

    @classmethod
    def create(cls, tenant_id: str, session_id: Optional[str] = None, *, image: str = "",
               cpu_millis: int = 0, memory_bytes: int = 0,
               max_runtime_s: Optional[float] = None, mount_path: str = "",
               workspace_size: str = "", storage_class: str = "",
               egress: Union[Egress, str, None] = None, allow_domains: Sequence[str] = (),
               allow_cidrs: Sequence[str] = (),
               client: Optional[Client] = None, address: Optional[str] = None,
               tls: Union[TLS, bool, None] = None,
               timeout: Optional[float] = None) -> "Sandbox":
        """Creates (or, for a session that has one, returns) the session's sandbox.

        It starts asynchronously (status STARTING): exec() waits for it on the server; call
        wait_ready() to wait here. session_id defaults to a fresh UUID (a new session);
        zero and empty arguments take the server's defaults (docs/api.md). Without a client,
        one is made for address and tls (see Client) and closed with the sandbox.

        egress is an Egress or its name ("none", "allowlist", "open"); None: the node's
        default, or "allowlist" when allow_domains or allow_cidrs are given (the only mode
        that takes them). allow_domains are names ("pypi.org") or one leading wildcard label
        ("*.pythonhosted.org"); allow_cidrs IPv4 or IPv6 CIDRs or addresses. The server
        refuses a malformed entry with InvalidArgumentError naming it (docs/api.md,
        "Network"); describe().network says the policy in force."""
        for name, v in (("allow_domains", allow_domains), ("allow_cidrs", allow_cidrs)):
            if isinstance(v, (str, bytes)):
                raise InvalidArgumentError(f"{name} must be a sequence of strings, not one "
                                           "string")
        if egress is None:
            mode = Egress.ALLOWLIST if allow_domains or allow_cidrs else Egress.UNSPECIFIED
        else:
            try:
                mode = Egress.parse(egress)
            except ValueError as e:
                raise InvalidArgumentError(str(e)) from None
        own = client is None
        c = client or Client(address, tls=tls)
        try:
            req = compute_pb2.CreateSandboxRequest(
                tenant_id=tenant_id, session_id=session_id or str(uuid.uuid4()), image=image)
            req.limits.cpu_millis = cpu_millis
            req.limits.memory_bytes = memory_bytes
            if max_runtime_s is not None:
                req.limits.max_runtime.FromNanoseconds(int(max_runtime_s * 1e9))
            req.workspace.mount_path = mount_path
            req.workspace.size = workspace_size
            req.workspace.storage_class = storage_class
            req.network.egress = mode
            req.network.allow_domains.extend(allow_domains)
            req.network.allow_cidrs.extend(allow_cidrs)
            resp = c.call("CreateSandbox", req,
                          timeout if timeout is not None else c.timeouts.create)
        except BaseException:
            if own:
                c.close()
            raise
        return cls(c, resp.sandbox_id, owns_client=own, status=SandboxStatus.of(resp.status))

    @classmethod
    def connect(cls, sandbox_id: str, *, client: Optional[Client] = None,
                address: Optional[str] = None, tls: Union[TLS, bool, None] = None,
                timeout: Optional[float] = None) -> "Sandbox":
        """Attaches to an existing sandbox (checked with DescribeSandbox: NotFoundError if
        there is none). Leaving its `with` block destroys it, as for create()."""
        own = client is None
        c = client or Client(address, tls=tls)
        sb = cls(c, sandbox_id, owns_client=own)
        try:
            sb.describe(timeout=timeout)
        except BaseException:
            sb.close()
            raise
        return sb

    def describe(self, *, timeout: Optional[float] = None) -> SandboxInfo:
        """The sandbox's status, age, cumulative usage and network policy in force."""
        resp = self.client.call("DescribeSandbox",
                                compute_pb2.DescribeSandboxRequest(sandbox_id=self.id),
                                timeout if timeout is not None else self.client.timeouts.describe)
        info = SandboxInfo.from_proto(resp)
        self.status = info.status
        return info

    def wait_ready(self, timeout: float = 60.0, poll_s: float = 0.2) -> SandboxInfo:
        """Waits until the sandbox is READY. FailedPreconditionError when it is FAILED or
        DESTROYED, DeadlineExceededError when timeout seconds pass first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            info = self.describe(timeout=max(0.1, min(left, self.client.timeouts.describe)))
            if info.status == SandboxStatus.READY:
                return info
            if info.status in (SandboxStatus.FAILED, SandboxStatus.DESTROYED):
                raise FailedPreconditionError(f"sandbox {self.id} is {info.status.name}")
            if time.monotonic() + poll_s > deadline:
                raise DeadlineExceededError(
                    f"sandbox {self.id} not READY after {timeout:g} s ({info.status.name})")
            time.sleep(poll_s)

    def destroy(self, *, timeout: Optional[float] = None) -> Usage:
        """Destroys the sandbox (its workspace is kept for the server's grace window) and
        returns its lifetime usage. Idempotent: a repeat returns the same totals."""
        resp = self.client.call("DestroySandbox",
                                compute_pb2.DestroySandboxRequest(sandbox_id=self.id),
                                timeout if timeout is not None else self.client.timeouts.destroy)
        self._destroyed = Usage.from_proto(resp.total_usage)
        self.status = SandboxStatus.DESTROYED
        return self._destroyed

    def close(self) -> None:
        """Closes the client if the sandbox made it; the sandbox itself lives on."""
        if self._owns_client:
            self.client.close()
            self._owns_client = False

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]],
                 exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        """Destroys the sandbox and closes its own client. When the block raised, a destroy
        that fails too does not replace the block's exception: it is reported as a
        RuntimeWarning (the sandbox then ends at its max_runtime)."""
        try:
            if self._destroyed is None:
                try:
                    self.destroy()
                except Exception as e:
                    if exc is None:
                        raise
                    warnings.warn(f"sandbox {self.id} not destroyed: {e}", RuntimeWarning,
                                  stacklevel=2)
        finally:
            self.close()

    # --- exec ----------------------------------------------------------------------------

    def _exec_request(self, command: str, args: Sequence[str],
                      env: Optional[Mapping[str, str]], cwd: str,
                      timeout_s: Optional[float]) -> "compute_pb2.ExecCommandRequest":
        if isinstance(args, (str, bytes)):
            raise InvalidArgumentError("args must be a sequence of strings, not one string")
        req = compute_pb2.ExecCommandRequest(sandbox_id=self.id, command=command,
                                             args=list(args), env=dict(env or {}),
                                             working_dir=cwd)
        if timeout_s is not None:
            req.timeout.FromNanoseconds(int(timeout_s * 1e9))
        return req

    def exec_stream(self, command: str, args: Sequence[str] = (), *,
                    env: Optional[Mapping[str, str]] = None, cwd: str = "",
                    timeout_s: Optional[float] = None,
                    rpc_timeout: Optional[float] = None) -> ExecStream:
        """Starts a command and returns its events as they come (see ExecStream).

        command is the executable (looked up in PATH), args its arguments (no shell: use
        "sh", ["-c", "..."] for one); env adds variables; cwd defaults to the workspace.
        timeout_s is the command's own limit (at most 600 s, the default); rpc_timeout the
        call's deadline (default: the command's limit plus Timeouts.exec_margin)."""
        req = self._exec_request(command, args, env, cwd, timeout_s)
        t = self.client.timeouts
        deadline = rpc_timeout if rpc_timeout is not None else \
            (timeout_s if timeout_s is not None else t.exec_command) + t.exec_margin
        return ExecStream(self.client.exec_events(req, deadline))

    def exec(self, command: str, args: Sequence[str] = (), *,
             env: Optional[Mapping[str, str]] = None, cwd: str = "",
             timeout_s: Optional[float] = None, rpc_timeout: Optional[float] = None,
             on_stdout: Optional[Callable[[bytes], None]] = None,
             on_stderr: Optional[Callable[[bytes], None]] = None,
             max_output: int = DEFAULT_MAX_OUTPUT) -> ExecResult:
        """Runs a command to its end and returns its exit code, output and usage.

        Arguments as for exec_stream(); on_stdout / on_stderr see each chunk as it comes. A
        non-zero exit is a result, not an exception (see ExecResult.exit_code, ok). More
        than max_output bytes of output cancel the command and raise OutputLimitError."""
        out, err = bytearray(), bytearray()
        with self.exec_stream(command, args, env=env, cwd=cwd, timeout_s=timeout_s,
                              rpc_timeout=rpc_timeout) as stream:
            for ev in stream:
                if isinstance(ev, ExecOutput):
                    (out if ev.stream == "stdout" else err).extend(ev.data)
                    cb = on_stdout if ev.stream == "stdout" else on_stderr
                    if cb:
                        cb(ev.data)
                    if len(out) + len(err) > max_output:
                        stream.cancel()
                        raise OutputLimitError(
                            f"{command}: more than {max_output} bytes of output (cancelled); "
                            "use exec_stream() for more")
            done = stream.completion
        assert done is not None  # ExecStream raises when the stream ends without it
        return ExecResult(exit_code=done.exit_code, wall_time_s=done.wall_time_s,
                          usage=done.usage, cancelled=done.cancelled, timed_out=done.timed_out,
                          signal=done.signal, oom_killed=done.oom_killed, stdout=bytes(out),
                          stderr=bytes(err))

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, status={self.status.name})"
