"""Per-peer fair share at the RPC layer (shared/rpc_server.c, issue 12): one client holding
many exec streams is refused beyond its share, and a neighbour's calls still succeed.

On the old behaviour (one global cap) this fails: the agent did not know
--max-calls-per-peer (exit 2), and with only --max-calls 8 the greedy client's 10 streams
took all 8 slots, so the neighbour's GetAgentInfo got "too many calls in flight"."""
import sys
import time
import unittest

import grpc

from agent_client import Agent
from agent_fixture import AgentProcess
import testmain

BUILD_DIR = sys.argv[1]


class FairShareTest(unittest.TestCase):
    def test_greedy_peer_refused_neighbour_served(self):
        agent = AgentProcess(BUILD_DIR, "--max-calls", "8", "--max-calls-per-peer", "4")
        greedy = neighbour = None
        try:
            sid = agent.new_sandbox()
            greedy = Agent(BUILD_DIR, agent.address)  # its own connection: its own peer
            req = greedy.pb.ExecRequest(ref=greedy.ref(sid), command="sleep", args=["20"])
            streams = [greedy.ExecStream(req, timeout=30) for _ in range(10)]
            time.sleep(2)  # let every stream reach the server
            refused = []
            for s in streams:
                if s.done() and s.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    refused.append(s.details())
            self.assertEqual(len(refused), 6, refused)
            self.assertIn("peer share", refused[0])
            # A neighbour on another connection is served while the greedy one holds 4.
            # (Python's grpc shares one connection among channels of one process unless
            # told otherwise: a local subchannel pool makes this a connection of its own,
            # as another client process would have.)
            neighbour = grpc.insecure_channel(
                agent.address, options=[("grpc.use_local_subchannel_pool", 1)])
            info = neighbour.unary_unary(
                "/nodeagent.v1.NodeAgent/GetAgentInfo",
                request_serializer=greedy.pb.GetAgentInfoRequest.SerializeToString,
                response_deserializer=greedy.pb.GetAgentInfoResponse.FromString)
            for _ in range(5):
                info(greedy.pb.GetAgentInfoRequest(), timeout=10)
            for s in streams:
                s.cancel()
        finally:
            for c in (greedy, neighbour):
                if c:
                    c.close()
            rc, tail = agent.cleanup()
            self.assertEqual(rc, 0, tail)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
