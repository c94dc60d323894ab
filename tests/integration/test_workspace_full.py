"""A full workspace (issue 12): the agent's workspace directory of a real sandbox is a 1 MiB
tmpfs here (a workspace volume of 1 MiB, without the mkfs), and every WriteFile that does not
fit is RESOURCE_EXHAUSTED "the workspace is full", leaving the old file whole and nothing
else: a replacing write (its O_TMPFILE data never gets a name), a new file, an append (cut back
to the old size). A write that fits still works afterwards.

On the old behaviour this fails: the append left the part that fitted appended to the old file
(the replace cases were already RESOURCE_EXHAUSTED, with "cannot write: No space left on
device")."""
import os
import subprocess
import sys
import unittest

import grpc

from agent_client import code_of
from agent_fixture import AgentProcess
import testmain

BUILD_DIR = sys.argv[1]
KIB = 1024


class WorkspaceFullTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        cls.c = cls.agent.client
        cls.sid = cls.agent.new_sandbox()
        cls.ws = os.path.join(cls.agent.state, "state", "workspaces", cls.sid)
        # The agent opens the workspace directory by its path on every call: a mount over it
        # is what the agent writes into from now on (the sandbox keeps its own view).
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "cs-full", cls.ws],
                       check=True)

    @classmethod
    def tearDownClass(cls):
        subprocess.run(["umount", "-l", cls.ws], check=False)
        rc, tail = cls.agent.cleanup()
        if rc != 0:
            raise AssertionError(f"agent exited {rc}:\n{tail}")

    def write(self, path, data, **kw):
        c = self.c
        return c.WriteFile(c.pb.WriteFileRequest(ref=c.ref(self.sid), path=path, data=data,
                                                 **kw), timeout=30)

    def assert_full(self, path, data, **kw):
        with self.assertRaises(grpc.RpcError) as cm:
            self.write(path, data, **kw)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED,
                         cm.exception.details())
        self.assertIn("the workspace is full", cm.exception.details())
        self.assertNotIn(self.agent.state, cm.exception.details())  # no host path
        print(f"{path} ({len(data)} bytes, {kw}): {cm.exception.details()}")

    def content(self, path):
        with open(os.path.join(self.ws, path), "rb") as f:
            return f.read()

    def listed(self):
        c = self.c
        r = c.ListFiles(c.pb.ListFilesRequest(ref=c.ref(self.sid), path="", recursive=True),
                        timeout=30)
        return sorted(e.path for e in r.entries)

    def test_writes_that_do_not_fit(self):
        old = b"o" * (600 * KIB)
        self.write("d/f", old)
        # Replacing: the new data and the old file do not fit together.
        self.assert_full("d/f", b"n" * (900 * KIB))
        self.assertEqual(self.content("d/f"), old)
        # Appending: cut back to what it was.
        self.assert_full("d/f", b"a" * (600 * KIB), append=True)
        self.assertEqual(self.content("d/f"), old)
        # A new file, by replace and by append: nothing made.
        self.assert_full("d/g", b"g" * (600 * KIB))
        self.assert_full("d/h", b"h" * (600 * KIB), append=True)
        self.assertEqual(sorted(os.listdir(os.path.join(self.ws, "d"))), ["f"])
        self.assertEqual(self.listed(), ["d", "d/f"])
        # What fits still works.
        self.write("d/f", b"s" * (300 * KIB))
        self.assertEqual(self.content("d/f"), b"s" * (300 * KIB))
        self.write("d/f", b"t" * (100 * KIB), append=True)
        self.assertEqual(len(self.content("d/f")), 400 * KIB)
        self.assertEqual(code_of(self.c.ReadFile, self.c.pb.ReadFileRequest(
            ref=self.c.ref(self.sid), path="d/f")), grpc.StatusCode.OK)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
