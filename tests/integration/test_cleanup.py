"""What a stopped node agent leaves on the node, and `compute-nodeagent cleanup` (issue 26), with
a real agent in local mode (runsc, workspace volumes):

- a destroyed sandbox's workspace volume is unmounted at once (its image stays for the grace);
  live sandboxes keep their mounts, containers and cgroups across an agent stop;
- cleanup is refused (exit 1, "another node agent is using") while the agent runs, and bad
  options are usage errors (exit 2);
- after kill -9 of the agent, cleanup stops every container and leaves 0 mounts, 0 loop devices,
  0 runsc processes and 0 cgroups of the service (counted here from /proc/self/mountinfo,
  /sys/block, /proc and the cgroup hierarchies), says what it did, and a second run says
  "nothing to do"; the workspaces' data stay;
- --delete-data then removes the records, workspaces and volume images, and an agent started
  on the state directory afterwards starts empty.

A failing test prints the end of the agent's log."""
import os
import signal
import subprocess
import sys
import time
import unittest

from google.protobuf.duration_pb2 import Duration

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "kube"))
from agent_fixture import AgentProcess  # noqa: E402
from cri import cgroup_hierarchies  # noqa: E402
from mounts import mounts_under  # noqa: E402
import testmain  # noqa: E402

BUILD_DIR = sys.argv[1]


def loops_under(path):
    """Loop devices whose backing file is under path."""
    root = os.path.realpath(path)
    found = []
    for dev in os.listdir("/sys/block"):
        try:
            with open(f"/sys/block/{dev}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing.startswith(root + "/"):
            found.append(dev)
    return found


def runsc_processes(root):
    """Pids of runsc processes naming root as their --root."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        r = root.encode()
        if any(a == b"--root=" + r for a in args) or \
                any(a == b"--root" and b == r for a, b in zip(args, args[1:])):
            found.append(int(pid))
    return found


def cgroups_of(parent):
    """The cgroup directories of parent and beneath it, in every hierarchy."""
    found = []
    for h in cgroup_hierarchies():
        for dirpath, _, _ in os.walk(h + parent):
            found.append(dirpath)
    return found


class CleanupTest(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(BUILD_DIR)
        self.state = os.path.join(self.agent.state, "state")

    def tearDown(self):
        if self._outcome.result.failures or self._outcome.result.errors:
            print("--- agent log (end) ---\n" + self.agent.log()[-4000:], file=sys.stderr)
        if self.agent.proc.poll() is not None:
            self.agent.start()  # the fixture's cleanup talks to it
        self.agent.cleanup()

    def cleanup(self, *args):
        p = subprocess.run([os.path.join(BUILD_DIR, "bin", "compute-nodeagent"), "cleanup",
                            "--state-dir", self.state, "--cgroup-parent",
                            self.agent.cgroup_parent] + list(args),
                           capture_output=True, text=True, timeout=300)
        print(f"cleanup {' '.join(args)} -> {p.returncode}\n{p.stdout}{p.stderr}",
              file=sys.stderr)
        return p

    def counts(self):
        return {"mounts": len(mounts_under(os.path.join(self.state, "workspaces"))),
                "loops": len(loops_under(self.state)),
                "processes": len(runsc_processes(self.agent.runsc_root)),
                "cgroups": len(cgroups_of(self.agent.cgroup_parent))}

    def test_cleanup_after_kill(self):
        a = self.agent
        live = [a.new_sandbox() for _ in range(3)]
        gone = [a.new_sandbox() for _ in range(2)]
        c = a.client
        for sid in gone:
            c.DestroySandbox(c.pb.DestroySandboxRequest(ref=c.ref(sid),
                                                        grace=Duration(seconds=3600)),
                             timeout=60)
            ws = os.path.join(self.state, "workspaces", sid)
            self.assertEqual(mounts_under(ws), [], "a destroyed workspace stays mounted")
            self.assertTrue(os.path.exists(os.path.join(self.state, "volumes", sid + ".img")),
                            "a destroyed workspace's image went before its grace")
        for sid in live:
            out, _, done, _ = c.exec(sid, "sh", "-c", "echo kept > /workspace/f; sync")
            self.assertEqual(done.exit_code, 0)

        # Refused while the agent runs; usage errors.
        p = self.cleanup()
        self.assertEqual(p.returncode, 1)
        self.assertIn("another node agent is using", p.stderr)
        self.assertEqual(self.cleanup("--cgroup-parent", "/").returncode, 2)
        self.assertEqual(self.cleanup("--state-dir", "relative").returncode, 2)
        self.assertEqual(self.cleanup("--no-such-flag").returncode, 2)

        before = self.counts()
        print("before:", before, file=sys.stderr)
        self.assertEqual(before["mounts"], 3)  # the live ones only
        self.assertGreaterEqual(before["loops"], 3)
        self.assertGreater(before["processes"], 0)
        self.assertGreater(before["cgroups"], 3)

        a.stop(signal.SIGKILL)
        p = self.cleanup()
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\n3 containers stopped, \d+ runsc process(es)? killed, "
                                   r"3 mounts unmounted, \d+ loop devices? detached, "
                                   r"\d+ cgroups removed, 0 directories deleted\n")
        after = self.counts()
        self.assertEqual(after, {"mounts": 0, "loops": 0, "processes": 0, "cgroups": 0})
        self.assertEqual(mounts_under(self.state), [])
        out = subprocess.run(["runsc", "--root", a.runsc_root, "list", "-quiet"],
                             capture_output=True, text=True).stdout.split()
        self.assertEqual(out, [])

        p = self.cleanup()
        self.assertEqual((p.returncode, p.stdout), (0, "nothing to do\n"))
        # The data stay without --delete-data.
        for sid in live + gone:
            self.assertTrue(os.path.exists(os.path.join(self.state, "volumes", sid + ".img")))

        p = self.cleanup("--delete-data")
        self.assertEqual(p.returncode, 0, p.stderr)
        for d in ("sandboxes", "workspaces", "volumes"):
            self.assertFalse(os.path.exists(os.path.join(self.state, d)), d)
        self.assertRegex(p.stdout, r"\n0 containers stopped, .* [3-5] directories deleted\n")
        a.restart()
        listed = c.ListSandboxes(c.pb.ListSandboxesRequest(include_destroyed=True),
                                 timeout=30).sandboxes
        self.assertEqual([sb.sandbox_id for sb in listed if sb.sandbox_id in live + gone], [])

    def test_stop_keeps_live_sandboxes(self):
        a = self.agent
        sid = a.new_sandbox()
        ws = os.path.join(self.state, "workspaces", sid)
        self.assertEqual(a.stop(), 0)
        # A stop is not a cleanup: the sandbox runs on, with its volume, for the next agent.
        self.assertIn(ws, mounts_under(ws))
        self.assertGreater(len(runsc_processes(a.runsc_root)), 0)
        a.restart()
        self.assertEqual(a.status(sid).status, a.client.cpb.SANDBOX_STATUS_READY)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
