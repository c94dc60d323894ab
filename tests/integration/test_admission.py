"""Admission control in the node agent (nodeagent/admission.c, issue 12): limits above the
node are refused, and so are limits above what the live sandboxes leave, naming the limit.

On the old behaviour this fails: the agent accepted 64 GiB and 64000m on any node."""
import os
import sys
import unittest
import uuid

import grpc

from agent_fixture import AgentProcess
import testmain

BUILD_DIR = sys.argv[1]
GIB = 1024 ** 3


def node_cpu_millis():
    return len(os.sched_getaffinity(0)) * 1000


class AdmissionTest(unittest.TestCase):
    def create(self, agent, **limits):
        c = agent.client
        return c.CreateSandbox(c.pb.CreateSandboxRequest(
            sandbox_id=str(uuid.uuid4()), tenant_id="t-adm",
            session_id="s-" + uuid.uuid4().hex[:8], **limits),
            timeout=30)

    def refused(self, agent, text, **limits):
        with self.assertRaises(grpc.RpcError) as cm:
            self.create(agent, **limits)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn(text, cm.exception.details())
        return cm.exception.details()

    def test_above_node_and_committed_refused(self):
        agent = AgentProcess(BUILD_DIR, "--cpu-overcommit-percent", "100")
        try:
            print(self.refused(agent, "on this node", memory_bytes=64 * GIB))
            print(self.refused(agent, "on this node", cpu_millis=64000))
            cpus = node_cpu_millis()
            # (--cpu-overcommit-percent 100 here: the default, 3200, lets CPU caps add up to 32x)
            self.create(agent, cpu_millis=cpus - 100)  # commits nearly all the CPU
            print(self.refused(agent, "cpu committed", cpu_millis=500))
            self.create(agent, cpu_millis=100)  # what is left still fits
        finally:
            rc, tail = agent.cleanup()
            self.assertEqual(rc, 0, tail)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
