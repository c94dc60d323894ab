"""Workspace sizes and volumes (issue 12) through a real compute-frontend and compute-nodeagent
(local mode, runsc, workspace volumes on):

- a size that is not a quantity, or outside 16Mi..1Ti, is INVALID_ARGUMENT with a message that
  names it; a valid quantity is accepted;
- a 32Mi workspace is an ext4 volume on a loop device mounted at the workspace directory:
  `dd` of 100 MiB inside the sandbox stops with ENOSPC near 32 MiB, and the host's disk holds
  at most the size for it (the image's allocated blocks);
- DescribeSandbox's disk_write_bytes (the volume's block counters) is at least what dd wrote,
  once synced;
- a WriteFile bigger than the free space is RESOURCE_EXHAUSTED "the workspace is full" and the
  old file stays whole;
- after kill -9 of the agent and a restart the usage counters do not drop and the workspace is
  still mounted with its files;
- destroy and the removal after the grace take the mount, the loop device and the image away;
- a volume unmounted while the agent is down is mounted again from its image (not formatted);
- --workspace-volumes=off gives a plain directory; with volumes on and no loop device (an
  agent in its own mount namespace where /dev/loop-control is a plain file) CreateSandbox is
  FAILED_PRECONDITION and no sandbox is left.

Every failing test prints the end of both daemons' logs."""
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

import grpc
from google.protobuf.duration_pb2 import Duration

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from agent_fixture import AgentProcess, remove_cgroup  # noqa: E402
from mounts import mounts_under  # noqa: E402
from compute_client import Compute  # noqa: E402
import test_computectl as ctl  # noqa: E402 (its FrontendProcess and cleanup list)

BUILD_DIR = ctl.BUILD_DIR
MIB = 1 << 20


def with_logs(test):
    """On failure, prints the end of the agent's and the frontend's logs."""
    @functools.wraps(test)
    def wrapper(self):
        try:
            test(self)
        except BaseException:
            cls = type(self)
            print("--- agent log (end) ---\n" + cls.agent.log()[-4000:], file=sys.stderr)
            print("--- frontend log (end) ---\n" + cls.frontend.log()[-3000:], file=sys.stderr)
            raise
    return wrapper


def loop_devices_of(image):
    """The loop devices backed by image (losetup -j)."""
    out = subprocess.run(["losetup", "-j", image], capture_output=True, text=True).stdout
    return [line.split(":")[0] for line in out.splitlines() if line.strip()]


class WorkspaceSizeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="cs-vol-", dir="/tmp")
        ctl._cleanups.append(lambda: shutil.rmtree(cls.tmp, ignore_errors=True))
        cls.agent = AgentProcess(BUILD_DIR)
        ctl._cleanups.append(lambda: remove_cgroup(cls.agent.cgroup_parent))
        ctl._cleanups.append(cls.agent.cleanup)
        cls.frontend = ctl.FrontendProcess(cls.agent.address, cls.tmp)
        ctl._cleanups.append(cls.frontend.stop)
        cls.c = Compute(BUILD_DIR, cls.frontend.address)
        ctl._cleanups.append(cls.c.channel.close)
        grpc.channel_ready_future(cls.c.channel).result(timeout=30)

    @classmethod
    def tearDownClass(cls):
        ctl.run_cleanups()

    def create(self, size):
        return self.c.create(str(uuid.uuid4()), str(uuid.uuid4()),
                             workspace=self.c.pb.WorkspaceSpec(size=size))

    def assert_refused(self, size, message):
        with self.assertRaises(grpc.RpcError) as cm:
            self.create(size)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT, size)
        self.assertIn(message, cm.exception.details())

    def test_not_a_quantity(self):
        self.assert_refused("garbage", "workspace size 'garbage' is not a quantity like 10Gi")
        for size in ("10GB", "-1Gi", "1e3", "10 Gi", "1.", "99999999999999999999Ei"):
            self.assert_refused(size, "is not a quantity like 10Gi")

    def test_out_of_range(self):
        self.assert_refused("2Ti", "workspace size '2Ti' must be 16Mi..1Ti")
        self.assert_refused("1Mi", "workspace size '1Mi' must be 16Mi..1Ti")
        self.assert_refused("0", "must be 16Mi..1Ti")

    def test_valid_size_accepted(self):
        sid = self.create("100Mi").sandbox_id
        self.assertTrue(sid)
        self.c.destroy(sid)

    # --- the volume ---------------------------------------------------------------------

    def paths(self, sid):
        state = os.path.join(self.agent.state, "state")
        return (os.path.join(state, "workspaces", sid),
                os.path.join(state, "volumes", sid + ".img"))

    def wait_ready(self, sid, limit=60):
        deadline = time.monotonic() + limit
        while True:
            sb = self.describe(sid)
            if sb.status == self.c.pb.SANDBOX_STATUS_READY:
                return sb
            self.assertLess(time.monotonic(), deadline, f"not READY: {sb}")
            time.sleep(0.1)

    def describe(self, sid, limit=30):
        """DescribeSandbox, retried while the frontend relearns a restarted agent."""
        deadline = time.monotonic() + limit
        while True:
            try:
                return self.c.describe(sid)
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.NOT_FOUND) \
                        or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def sh(self, sid, script):
        out, err, done, _ = self.c.exec(sid, "sh", "-c", script)
        return out.decode(), err.decode(), done.exit_code

    @with_logs
    def test_volume_of_the_requested_size(self):
        c = self.c
        sid = self.create("32Mi").sandbox_id
        ws, image = self.paths(sid)
        self.wait_ready(sid)
        self.assertIn(ws, mounts_under(ws), "the workspace is not a mount")
        self.assertEqual(os.stat(image).st_size, 32 * MIB)
        self.assertEqual(len(loop_devices_of(image)), 1)
        self.assertEqual(os.listdir(ws), [], "a new workspace is empty (no lost+found)")
        before = self.describe(sid).current_usage.disk_write_bytes

        c.write(sid, "old.txt", b"old content\n" * 100)
        out, err, code = self.sh(
            sid, "dd if=/dev/zero of=/workspace/fill bs=1M count=100; echo dd=$?; sync")
        print("dd:", err.strip().replace("\n", " | "), out.strip())
        self.assertIn("dd=1", out)
        self.assertIn("No space left on device", err)
        written = int(re.search(r"(\d+) bytes", err).group(1))
        # ext4's own blocks (journal, inode tables: ~6 MiB of 32) are not the tenant's.
        self.assertGreaterEqual(written, 20 * MIB, "dd stopped far below the size")
        self.assertLessEqual(written, 32 * MIB)
        allocated = os.stat(image).st_blocks * 512
        print(f"dd wrote {written} bytes; the image holds {allocated} bytes of the host's disk")
        self.assertLessEqual(allocated, 32 * MIB)

        usage = self.describe(sid).current_usage
        print(f"disk_write_bytes {before} -> {usage.disk_write_bytes}, "
              f"disk_read_bytes {usage.disk_read_bytes}")
        self.assertGreaterEqual(usage.disk_write_bytes - before, written)

        # Full: a WriteFile that does not fit is refused and the old file stays whole.
        with self.assertRaises(grpc.RpcError) as cm:
            c.write(sid, "old.txt", b"x" * (8 * MIB))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                         cm.exception.details())
        self.assertIn("the workspace is full", cm.exception.details())
        self.assertEqual(c.read(sid, "old.txt").data, b"old content\n" * 100)

        # kill -9 of the agent: the volume stays mounted, the counters go on from there.
        self.agent.stop(signal.SIGKILL)
        self.agent.restart()
        after = self.wait_ready(sid).current_usage
        print(f"after kill -9 and restart: disk_write_bytes {after.disk_write_bytes}")
        self.assertGreaterEqual(after.disk_write_bytes, usage.disk_write_bytes)
        self.assertGreaterEqual(after.disk_read_bytes, usage.disk_read_bytes)
        self.assertIn(ws, mounts_under(ws))
        self.assertEqual(len(loop_devices_of(image)), 1, "mounted twice after the restart")
        out, _, code = self.sh(sid, "cat /workspace/old.txt | wc -l; ls -l /workspace/fill")
        self.assertEqual(code, 0)
        self.assertTrue(out.startswith("100\n"), out)

        # Destroy with a short grace (the agent's own call: the API has no grace), then the
        # removal takes the mount, the loop device and the image.
        a = self.agent.client
        a.DestroySandbox(a.pb.DestroySandboxRequest(ref=a.ref(sid), grace=Duration(seconds=1)),
                         timeout=60)
        deadline = time.monotonic() + 30
        while os.path.exists(image) or mounts_under(ws):
            self.assertLess(time.monotonic(), deadline, "the volume is still there")
            time.sleep(0.2)
        self.assertEqual(loop_devices_of(image), [])
        self.assertFalse(os.path.exists(ws))
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(sid, f.read())

    @with_logs
    def test_remount_after_unmount(self):
        """A volume the kernel lost (a reboot; here an unmount by hand while the agent is
        down and the sandbox stopped) is attached again from its image at the next start,
        never formatted, and its counters start from the recorded totals."""
        c = self.c
        sid = self.create("16Mi").sandbox_id
        ws, image = self.paths(sid)
        self.wait_ready(sid)
        c.write(sid, "kept.txt", b"kept\n")
        self.sh(sid, "dd if=/dev/zero of=/workspace/f bs=1M count=4 2>/dev/null; sync")
        usage = self.describe(sid).current_usage
        time.sleep(2.5)  # the housekeeping saves live records every ~2 s here
        self.agent.stop(signal.SIGKILL)
        # The container holds the mount too; stop it as a reboot would.
        subprocess.run(["runsc", "--root", self.agent.runsc_root, "delete", "-force",
                        "cs-" + sid], capture_output=True)
        subprocess.run(["umount", "-l", ws], check=True)
        self.assertEqual(mounts_under(ws), [])
        self.agent.restart()
        self.assertIn(ws, mounts_under(ws), "not mounted again")
        with open(os.path.join(ws, "kept.txt"), "rb") as f:
            self.assertEqual(f.read(), b"kept\n")
        after = self.describe(sid).current_usage
        print(f"disk_write_bytes before {usage.disk_write_bytes}, after the re-attach "
              f"{after.disk_write_bytes}")
        self.assertGreaterEqual(after.disk_write_bytes, usage.disk_write_bytes)
        a = self.agent.client
        a.DestroySandbox(a.pb.DestroySandboxRequest(ref=a.ref(sid), grace=Duration(seconds=1)),
                         timeout=60)
        deadline = time.monotonic() + 30
        while os.path.exists(image) or mounts_under(ws):
            self.assertLess(time.monotonic(), deadline, "the volume is still there")
            time.sleep(0.2)


class VolumesOffTest(unittest.TestCase):
    """--workspace-volumes=off: a plain directory (no mount, no image), its disk usage the
    cgroup's plus the agent's own file I/O, as before volumes."""

    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR, "--workspace-volumes=off")

    @classmethod
    def tearDownClass(cls):
        rc, tail = cls.agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    def test_plain_directory(self):
        a = self.agent
        c = a.client
        sid = a.new_sandbox(workspace_bytes=32 * MIB)
        ws = os.path.join(a.state, "state", "workspaces", sid)
        try:
            self.assertTrue(os.path.isdir(ws))
            self.assertEqual(mounts_under(ws), [])
            self.assertFalse(os.path.exists(os.path.join(a.state, "state", "volumes",
                                                         sid + ".img")))
            c.WriteFile(c.pb.WriteFileRequest(ref=c.ref(sid), path="f", data=b"x" * 4096),
                        timeout=30)
            usage = a.status(sid).usage
            self.assertGreaterEqual(usage.disk_write_bytes, 4096)
        except BaseException:
            print("--- agent log (end) ---\n" + a.log()[-4000:], file=sys.stderr)
            raise


class NoLoopDevicesAgent(AgentProcess):
    """An agent in a mount namespace of its own where /dev/loop-control is a plain empty
    file: a host without loop devices, as far as the agent can tell."""

    def __init__(self, build_dir, *extra):
        fd, self.fake = tempfile.mkstemp(prefix="cs-noloop-")
        os.close(fd)
        self.wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c",
                        'mount --bind "$0" /dev/loop-control && exec "$@"', self.fake]
        super().__init__(build_dir, *extra)

    def cleanup(self):
        try:
            return super().cleanup()
        finally:
            os.unlink(self.fake)


class NoLoopDevicesTest(unittest.TestCase):
    """Volumes on and no loop device: CreateSandbox is FAILED_PRECONDITION with a message
    that says what to do, and no sandbox is left behind (no silent fallback)."""

    @classmethod
    def setUpClass(cls):
        if shutil.which("unshare") is None:
            raise unittest.SkipTest("no unshare(1)")
        cls.agent = NoLoopDevicesAgent(BUILD_DIR)

    @classmethod
    def tearDownClass(cls):
        rc, tail = cls.agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    def test_failed_precondition(self):
        a = self.agent
        c = a.client
        try:
            with self.assertRaises(grpc.RpcError) as cm:
                a.new_sandbox(wait_ready=False)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("no loop devices", cm.exception.details())
            self.assertIn("--workspace-volumes=off", cm.exception.details())
            print(cm.exception.details())
            listed = c.ListSandboxes(c.pb.ListSandboxesRequest(), timeout=10).sandboxes
            self.assertEqual(list(listed), [])
        except BaseException:
            print("--- agent log (end) ---\n" + a.log()[-4000:], file=sys.stderr)
            raise


if __name__ == "__main__":
    ctl.main()  # this file's tests, then test_computectl's cleanups
