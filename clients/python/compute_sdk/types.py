"""Plain, typed values the SDK returns instead of protobuf messages."""
from __future__ import annotations

import datetime
import enum
from dataclasses import dataclass, field
from typing import Iterator, List, Literal, Optional, Tuple, Union

from ._proto import compute_pb2

__all__ = ["SandboxStatus", "Egress", "Network", "Usage", "SandboxInfo", "ExecOutput",
           "ExecCompletion", "ExecResult", "FileEntry", "FileListing"]


class SandboxStatus(enum.IntEnum):
    """compute.v1.SandboxStatus."""
    UNSPECIFIED = compute_pb2.SANDBOX_STATUS_UNSPECIFIED
    STARTING = compute_pb2.SANDBOX_STATUS_STARTING
    READY = compute_pb2.SANDBOX_STATUS_READY
    FAILED = compute_pb2.SANDBOX_STATUS_FAILED
    DESTROYED = compute_pb2.SANDBOX_STATUS_DESTROYED

    @classmethod
    def of(cls, value: int) -> "SandboxStatus":
        """The member for a wire value; UNSPECIFIED for one this SDK does not know yet."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNSPECIFIED


class Egress(enum.IntEnum):
    """compute.v1.EgressMode: what a sandbox may reach outside its node (docs/api.md,
    "Network"). UNSPECIFIED in a request is the node's default; answers never give it."""
    UNSPECIFIED = compute_pb2.EGRESS_MODE_UNSPECIFIED
    NONE = compute_pb2.EGRESS_MODE_NONE  # loopback only
    ALLOWLIST = compute_pb2.EGRESS_MODE_ALLOWLIST  # allow_domains and allow_cidrs only
    OPEN = compute_pb2.EGRESS_MODE_OPEN  # anything but the always-denied ranges

    @classmethod
    def of(cls, value: int) -> "Egress":
        """The member for a wire value; UNSPECIFIED for one this SDK does not know yet."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNSPECIFIED

    @classmethod
    def parse(cls, value: Union["Egress", str]) -> "Egress":
        """An Egress, or its name ("none", "allowlist", "open", any case). ValueError for
        anything else."""
        if isinstance(value, Egress):
            return value
        if isinstance(value, str) and value.upper() in ("NONE", "ALLOWLIST", "OPEN"):
            return cls[value.upper()]
        raise ValueError(f"egress {value!r} is not one of none, allowlist, open")


def _seconds(duration) -> float:
    return duration.seconds + duration.nanos / 1e9


def _time(ts) -> Optional[datetime.datetime]:
    """A Timestamp as an aware UTC datetime; None when unset."""
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    return datetime.datetime.fromtimestamp(ts.seconds + ts.nanos / 1e9, tz=datetime.timezone.utc)


@dataclass(frozen=True)
class Usage:
    """common.v1.UsageMetrics: what a sandbox (or one exec) consumed over a window."""
    cpu_ms: int = 0
    memory_peak_bytes: int = 0
    memory_avg_bytes: int = 0
    disk_read_bytes: int = 0
    disk_write_bytes: int = 0
    network_egress_bytes: int = 0
    network_ingress_bytes: int = 0

    @classmethod
    def from_proto(cls, m) -> "Usage":
        return cls(cpu_ms=m.cpu_ms, memory_peak_bytes=m.memory_peak_bytes,
                   memory_avg_bytes=m.memory_avg_bytes, disk_read_bytes=m.disk_read_bytes,
                   disk_write_bytes=m.disk_write_bytes,
                   network_egress_bytes=m.network_egress_bytes,
                   network_ingress_bytes=m.network_ingress_bytes)


@dataclass(frozen=True)
class Network:
    """compute.v1.NetworkSpec as an answer gives it: the policy in force, the node's default
    applied (egress is never UNSPECIFIED from a server that knows policies), names lower case
    and without duplicates."""
    egress: Egress = Egress.UNSPECIFIED
    allow_domains: Tuple[str, ...] = ()
    allow_cidrs: Tuple[str, ...] = ()

    @classmethod
    def from_proto(cls, m) -> "Network":
        return cls(egress=Egress.of(m.egress), allow_domains=tuple(m.allow_domains),
                   allow_cidrs=tuple(m.allow_cidrs))


@dataclass(frozen=True)
class SandboxInfo:
    """What DescribeSandbox says of a sandbox."""
    sandbox_id: str
    status: SandboxStatus
    created_at: Optional[datetime.datetime]
    uptime_s: float
    usage: Usage
    network: Network = field(default_factory=Network)

    @classmethod
    def from_proto(cls, m) -> "SandboxInfo":
        return cls(sandbox_id=m.sandbox_id, status=SandboxStatus.of(m.status),
                   created_at=_time(m.created_at), uptime_s=_seconds(m.current_uptime),
                   usage=Usage.from_proto(m.current_usage),
                   network=Network.from_proto(m.network))


@dataclass(frozen=True)
class ExecOutput:
    """A chunk of a command's output, as it came (not necessarily a whole line)."""
    stream: Literal["stdout", "stderr"]
    data: bytes


@dataclass(frozen=True)
class ExecCompletion:
    """How a command ended (compute.v1.ExecCompleted): the last event of every exec.

    exit_code is the process's status (0..255), 128+n for a process killed by signal n, or -1
    when the exec was cancelled or timed out (see cancelled, timed_out)."""
    exit_code: int
    wall_time_s: float
    usage: Usage
    cancelled: bool = False
    timed_out: bool = False
    signal: int = 0
    oom_killed: bool = False

    @classmethod
    def from_proto(cls, m) -> "ExecCompletion":
        return cls(exit_code=m.exit_code, wall_time_s=_seconds(m.wall_time),
                   usage=Usage.from_proto(m.usage), cancelled=m.cancelled,
                   timed_out=m.timed_out, signal=m.signal, oom_killed=m.oom_killed)


@dataclass(frozen=True)
class ExecResult(ExecCompletion):
    """A finished command with all its output (Sandbox.exec)."""
    stdout: bytes = b""
    stderr: bytes = b""

    @property
    def ok(self) -> bool:
        """True when the command exited with status 0."""
        return self.exit_code == 0

    def stdout_text(self, encoding: str = "utf-8") -> str:
        """stdout decoded (undecodable bytes replaced)."""
        return self.stdout.decode(encoding, errors="replace")

    def stderr_text(self, encoding: str = "utf-8") -> str:
        """stderr decoded (undecodable bytes replaced)."""
        return self.stderr.decode(encoding, errors="replace")


@dataclass(frozen=True)
class FileEntry:
    """One entry of a listing; path is relative to the listed directory."""
    path: str
    size: int
    is_dir: bool
    mode: int
    modified_at: Optional[datetime.datetime]

    @classmethod
    def from_proto(cls, m) -> "FileEntry":
        return cls(path=m.path, size=m.size, is_dir=m.is_dir, mode=m.mode,
                   modified_at=_time(m.modified_at))


@dataclass(frozen=True)
class FileListing:
    """A directory listing: its entries (depth first, sorted by name) and whether max_entries
    cut it short. Iterable, sized and indexable like the list of entries."""
    entries: List[FileEntry] = field(default_factory=list)
    truncated: bool = False

    def __iter__(self) -> Iterator[FileEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __getitem__(self, i: int) -> FileEntry:
        return self.entries[i]

    def paths(self) -> List[str]:
        """The entries' paths, in order."""
        return [e.path for e in self.entries]
