"""Workspace sizes through a real compute-frontend and compute-nodeagent (local mode, runsc):
a size that is not a quantity, or outside 16Mi..1Ti, is INVALID_ARGUMENT with a message that
names it; a valid quantity is accepted. (The volume itself, ENOSPC and the block-device usage
counters are issue 12's later steps and are not tested here yet.)"""
import os
import shutil
import signal
import sys
import tempfile
import unittest
import uuid

import grpc

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from agent_fixture import AgentProcess, remove_cgroup  # noqa: E402
from compute_client import Compute  # noqa: E402
import testmain  # noqa: E402
import test_computectl as ctl  # noqa: E402 (its FrontendProcess and cleanup list)

BUILD_DIR = ctl.BUILD_DIR


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


def main():
    def on_term(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
    try:
        testmain.main([sys.argv[0]] + sys.argv[2:])
    finally:
        ctl.run_cleanups()


if __name__ == "__main__":
    main()
