"""Starts a real compute-nodeagent (local mode, real runsc) for the integration tests."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import grpc

from agent_client import Agent
from mounts import unmount_under

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kube"))
from cri import remove_cgroup  # noqa: E402


# The images directory of the tests' agents (ctest's fixture.default_image builds the default
# image, debian:bookworm-compute, there once; tests/CMakeLists.txt).
IMAGES_DIR = os.environ.get("COMPUTE_TEST_IMAGES_DIR", "/var/lib/compute/images")
DEFAULT_IMAGE = "debian:bookworm-compute"


_ports_given = set()


def free_port():
    """A loopback port free now, never one this process was given before: the kernel may
    hand the same ephemeral port out again once its probe socket is closed, and two daemons
    of one test (an agent's gRPC and metrics ports) then collided (CI: "Address already in
    use")."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _ports_given:
            _ports_given.add(port)
            return port


class AgentProcess:
    """One agent: its own state dir, runsc root, cgroup parent and port."""

    wrapper = []  # a command the agent runs under (e.g. unshare), or none

    def __init__(self, build_dir, *extra_args):
        self.build_dir = build_dir
        # Short: runsc puts sockets under its root, and socket paths are limited.
        self.state = tempfile.mkdtemp(prefix="cs-", dir="/tmp")
        self.cgroup_parent = f"/compute-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra = list(extra_args)
        self.proc = None
        self.log_path = os.path.join(self.state, "agent.log")
        self.start()
        self.client = Agent(build_dir, self.address)

    @property
    def runsc_root(self):
        return os.path.join(self.state, "state", "runsc")

    def start(self):
        """Starts the agent and returns once its "serving on" line is logged: the port accepts
        connections a little before that (the seccomp filter and its log line come last)."""
        log = open(self.log_path, "ab")
        since = log.tell()
        self.proc = subprocess.Popen(
            self.wrapper + [os.path.join(self.build_dir, "bin", "compute-nodeagent"),
             "--listen", self.address, "--state-dir", os.path.join(self.state, "state"),
             "--cgroup-parent", self.cgroup_parent, "--sample-interval-ms", "200",
             "--shutdown-grace-ms", "3000", "--log-level", "debug"]
            + ([] if "--images-dir" in self.extra else ["--images-dir", IMAGES_DIR])
            + self.extra,
            stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                with open(self.log_path, "rb") as f:
                    f.seek(since)
                    if b" serving on " in f.read():
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                if self.proc.poll() is None:
                    self.proc.kill()
                    self.proc.wait()
                raise RuntimeError("agent did not start:\n" + self.log())
            time.sleep(0.02)

    def stop(self, sig=signal.SIGTERM):
        """Signals the agent and waits for it: one that has not ended 60 s later is killed
        (its exit status is then -9: the caller reports it) so that what cleans up after it
        still runs."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with open(self.log_path, "ab") as f:
                    f.write(b"agent_fixture: no exit 60 s after the signal: killed\n")
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def restart(self):
        """Starts the agent again and waits until it answers a call: the client's channel
        may still hold the connection of the agent that died, whose first use fails with
        UNAVAILABLE "Socket closed". (An agent serving mutual TLS only is not called.)"""
        self.start()
        if "--tls-cert" in self.extra:
            return
        deadline = time.monotonic() + 30
        while True:
            try:
                self.client.ListSandboxes(self.client.pb.ListSandboxesRequest(), timeout=5,
                                          wait_for_ready=True)
                return
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def rss_peak_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return 0

    def cleanup(self):
        """Destroys every sandbox this agent made, stops it, removes its state. Returns the
        agent's exit status (non-zero: it did not shut down cleanly, e.g. a sanitizer report),
        with the end of its log."""
        rc = None
        try:
            if self.proc.poll() is None:
                c = self.client
                try:
                    listed = c.ListSandboxes(c.pb.ListSandboxesRequest(), timeout=30).sandboxes
                except grpc.RpcError:
                    listed = []  # e.g. an agent serving mTLS only: the runsc sweep below
                for sb in listed:
                    try:
                        c.DestroySandbox(c.pb.DestroySandboxRequest(ref=c.ref(sb.sandbox_id)),
                                         timeout=60)
                    except grpc.RpcError:
                        pass
        finally:
            self.client.close()
            rc = self.stop()
            # Anything left in runsc's root (a test's stray container) goes too.
            if os.path.isdir(self.runsc_root):
                out = subprocess.run(["runsc", "--root", self.runsc_root, "list", "-quiet"],
                                     capture_output=True, text=True).stdout.split()
                for cid in out:
                    subprocess.run(["runsc", "--root", self.runsc_root, "delete", "-force", cid],
                                   capture_output=True)
            # Every hierarchy: runsc makes the sandbox's cgroup in all of them (name=systemd
            # too), and the agent's parent directory stays behind.
            remove_cgroup(self.cgroup_parent)
            tail = self.log()[-3000:]
            # Live sandboxes' workspace volumes stay mounted past a stop (the next agent
            # adopts them): unmounting them frees their loop devices before the state goes.
            unmount_under(self.state)
            shutil.rmtree(self.state, ignore_errors=True)
        return rc, tail

    # --- helpers for tests ---

    def new_sandbox(self, wait_ready=True, **fields):
        c = self.client
        sid = fields.pop("sandbox_id", str(uuid.uuid4()))
        fields.setdefault("tenant_id", "tenant-" + uuid.uuid4().hex[:8])
        fields.setdefault("session_id", "session-" + uuid.uuid4().hex[:8])
        resp = c.CreateSandbox(c.pb.CreateSandboxRequest(sandbox_id=sid, **fields), timeout=30)
        if wait_ready:
            self.wait_status(resp.sandbox.sandbox_id, c.cpb.SANDBOX_STATUS_READY)
        return resp.sandbox.sandbox_id

    def status(self, sid):
        c = self.client
        return c.GetSandbox(c.pb.GetSandboxRequest(ref=c.ref(sid)), timeout=10).sandbox

    def wait_status(self, sid, status, limit=60):
        deadline = time.monotonic() + limit
        while True:
            sb = self.status(sid)
            if sb.status == status:
                return sb
            if time.monotonic() > deadline:
                raise AssertionError(f"sandbox {sid} stuck in {sb.status}: {sb.status_message}")
            time.sleep(0.1)

    def processes(self, sid):
        """Command lines of every process in the sandbox (but the listing shell's own)."""
        out, _, _, _ = self.client.exec(
            sid, "sh", "-c",
            'for p in /proc/[0-9]*; do [ "${p#/proc/}" = "$$" ] && continue; '
            'tr "\\0" " " < $p/cmdline 2>/dev/null; echo; done')
        return [line for line in out.decode().splitlines() if line.strip()]

    def cgroup_file(self, sid, controller, name):
        with open(f"/sys/fs/cgroup/{controller}{self.cgroup_parent}/{sid}/{name}") as f:
            return f.read()
