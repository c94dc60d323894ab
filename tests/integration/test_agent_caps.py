"""The node agent keeps only the capabilities docs/security.md lists ("Privileges"): its
bounding, permitted and effective sets are exactly those (inheritable and ambient empty) in
every thread (and so in whatever it starts in the host's user namespace), and a sandbox's
whole life (create, exec, file I/O, files of another uid in a 0700 directory of it, usage,
agent restart, destroy, workspace removal) works with them.
--capabilities all keeps what the agent was given; an unknown name stops the start. Every
thread runs under the seccomp allowlist (Seccomp: 2). --runsc-network sandbox|host,
which give a local sandbox no network (docs/security.md, "Network"), stops the start too.

Usage: test_agent_caps.py BUILD_DIR"""
import os
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

import grpc

from agent_fixture import AgentProcess
from proc_checks import status, thread_statuses
import testmain

BUILD_DIR = sys.argv[1]

# docs/security.md, "Privileges" (capability numbers of linux/capability.h).
# With --sandbox-network on (the default) also net_bind_service, net_admin and net_raw (the
# sandboxes' resolver, their links and nftables table, runsc's netstack).
KEPT = {"chown": 0, "dac_override": 1, "fowner": 3, "fsetid": 4, "setgid": 6, "setuid": 7,
        "net_bind_service": 10, "net_admin": 12, "net_raw": 13,
        "sys_admin": 21,
        "setfcap": 31}
KEPT_MASK = sum(1 << n for n in KEPT.values())


def caps(st):
    return {k: int(st[k], 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}


class AgentCapabilitiesTest(unittest.TestCase):
    def test_default_set_and_a_sandbox_life(self):
        a = AgentProcess(BUILD_DIR)
        try:
            pid = a.proc.pid
            self.assertIn("keeps the capabilities " + ",".join(KEPT), a.log())
            for tid, st in thread_statuses(pid):
                self.assertEqual(caps(st), {"CapInh": 0, "CapPrm": KEPT_MASK,
                                            "CapEff": KEPT_MASK, "CapBnd": KEPT_MASK,
                                            "CapAmb": 0}, f"thread {tid}")
                # The syscall allowlist (docs/security.md, "Seccomp") is on every thread.
                self.assertEqual(st["Seccomp"].strip(), "2", f"thread {tid}")
            self.assertIn("seccomp filter on", a.log())
            c = a.client
            sid = a.new_sandbox()
            out, _, done, _ = c.exec(sid, "sh", "-c", "echo hi > x && cat x")
            self.assertEqual((done.exit_code, out), (0, b"hi\n"))
            c.WriteFile(c.pb.WriteFileRequest(ref=c.ref(sid), path="y", data=b"data"), timeout=30)
            self.assertEqual(c.ReadFile(c.pb.ReadFileRequest(ref=c.ref(sid), path="x"),
                                        timeout=30).data, b"hi\n")
            c.GetUsage(c.pb.GetUsageRequest(ref=c.ref(sid)), timeout=30)
            self.foreign_owner_files(c, sid)
            # What the agent starts in the host's user namespace inherits its bounding set
            # (checked above for every thread); runsc's gofer and sandbox run in user
            # namespaces of their own (docs/security.md, "Privileges").
            # A restart (the records, runsc state) and a destroy with its workspace removal.
            a.stop()
            a.start()
            a.client.close()
            from agent_client import Agent
            a.client = c = Agent(BUILD_DIR, a.address)
            a.wait_status(sid, c.cpb.SANDBOX_STATUS_READY, limit=30)
            out, _, done, _ = c.exec(sid, "cat", "y")
            self.assertEqual((done.exit_code, out), (0, b"data"))
            c.DestroySandbox(c.pb.DestroySandboxRequest(ref=c.ref(sid), grace={"seconds": 1}),
                             timeout=60)
            a.wait_status(sid, c.cpb.SANDBOX_STATUS_DESTROYED, limit=30)
            ws = os.path.join(a.state, "state", "workspaces", sid)
            deadline = time.monotonic() + 20
            while os.path.exists(ws) and time.monotonic() < deadline:
                time.sleep(0.2)
            self.assertFalse(os.path.exists(ws), "workspace not removed after the grace")
            for line in a.log().splitlines():
                self.assertNotIn("permission denied", line.lower(), line)
                self.assertNotIn("operation not permitted", line.lower(), line)
        finally:
            rc, tail = a.cleanup()
            self.assertEqual(rc, 0, tail)

    def foreign_owner_files(self, c, sid):
        """Files another uid made in the sandbox, in a 0700 directory of that uid: the agent
        reads them, and a replacing write keeps their owner and mode, set-uid bit included
        (dac_override, chown, fowner, fsetid)."""
        out, err, done, _ = c.exec(sid, "sh", "-c",
                                   "mkdir priv && echo a > priv/f && echo b > priv/g && "
                                   "chown -R 1000:1000 priv && chmod 6750 priv/f && "
                                   "chmod 600 priv/g && chmod 700 priv")
        self.assertEqual(done.exit_code, 0, err)
        self.assertEqual(c.ReadFile(c.pb.ReadFileRequest(ref=c.ref(sid), path="priv/g"),
                                    timeout=30).data, b"b\n")
        names = [e.path for e in c.ListFiles(c.pb.ListFilesRequest(ref=c.ref(sid), path="priv"),
                                             timeout=30).entries]
        self.assertEqual(sorted(names), ["f", "g"])
        c.WriteFile(c.pb.WriteFileRequest(ref=c.ref(sid), path="priv/f", data=b"new"),
                    timeout=30)
        out, err, done, _ = c.exec(sid, "sh", "-c", "stat -c '%u %g %a' priv/f; cat priv/f")
        self.assertEqual((done.exit_code, out), (0, b"1000 1000 6750\nnew"), err)

    def test_all_keeps_what_it_was_given(self):
        a = AgentProcess(BUILD_DIR, "--capabilities", "all")
        try:
            st = status(f"/proc/{a.proc.pid}/status")
            mine = status("/proc/self/status")
            self.assertEqual(int(st["CapBnd"], 16), int(mine["CapBnd"], 16))
        finally:
            a.cleanup()

    def test_unknown_name_refused(self):
        r = subprocess.run([os.path.join(BUILD_DIR, "bin", "compute-nodeagent"),
                            "--listen", "127.0.0.1:0", "--state-dir", "/tmp/cs-caps-none",
                            "--capabilities", "chown,no_such_cap"],
                           capture_output=True, text=True, timeout=30)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("'no_such_cap' is not a capability name", r.stderr)

    def test_sandbox_network_off_keeps_no_network_capability(self):
        """--sandbox-network=off: not net_admin, net_raw nor net_bind_service (sandboxes then
        have loopback only, and a create asking for more is FAILED_PRECONDITION)."""
        a = AgentProcess(BUILD_DIR, "--sandbox-network=off")
        try:
            kept = {k: v for k, v in KEPT.items() if not k.startswith("net_")}
            self.assertIn("keeps the capabilities " + ",".join(kept), a.log())
            self.assertIn("sandbox network: off", a.log())
            mask = sum(1 << n for n in kept.values())
            for tid, st in thread_statuses(a.proc.pid):
                self.assertEqual(caps(st)["CapEff"], mask, f"thread {tid}")
            c = a.client
            from compute.v1 import compute_pb2
            with self.assertRaises(grpc.RpcError) as cm:
                c.CreateSandbox(c.pb.CreateSandboxRequest(
                    sandbox_id=str(uuid.uuid4()), tenant_id="t", session_id="s",
                    network=compute_pb2.NetworkSpec(egress=compute_pb2.EGRESS_MODE_OPEN)),
                    timeout=30)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.FAILED_PRECONDITION)
            self.assertIn("--sandbox-network=off", cm.exception.details())
        finally:
            self.assertEqual(a.cleanup()[0], 0)

    def test_runsc_network_other_than_none_refused(self):
        """Local mode: runsc's sandbox and host networks give a sandbox no network and fail
        its start (measured: docs/security.md, "Network"); the agent refuses them at once."""
        for net in ("sandbox", "host"):
            with tempfile.TemporaryDirectory(prefix="cs-net-") as state:
                r = subprocess.run([os.path.join(BUILD_DIR, "bin", "compute-nodeagent"),
                                    "--listen", "127.0.0.1:0", "--state-dir", state,
                                    "--runsc-network", net],
                                   capture_output=True, text=True, timeout=30)
            self.assertNotEqual(r.returncode, 0, r.stderr)
            self.assertIn(f"--runsc-network {net}: in local mode", r.stderr)


if __name__ == "__main__":
    testmain.main(sys.argv[:1])
