"""Fair shares (issue 12). Per peer, at the RPC layer (shared/rpc_server.c): one client holding
many exec streams is refused beyond its share, and a neighbour's calls still succeed. Per
tenant, in the frontend (frontend/service_core.c): one tenant holding its share of exec
streams, over several connections, is refused further calls, while another tenant's
DescribeSandbox calls all succeed.

On the old behaviour (one global cap) this fails: the agent did not know
--max-calls-per-peer (exit 2), and with only --max-calls 8 the greedy client's 10 streams
took all 8 slots, so the neighbour's GetAgentInfo got "too many calls in flight". Before the
tenant share the frontend did not know --max-calls-per-tenant (exit 2); without it the greedy
tenant's 10 streams, 5 per connection, were all served (each connection below its peer
share)."""
import os
import subprocess
import sys
import time
import unittest

import grpc

from agent_client import Agent
from agent_fixture import AgentProcess, free_port
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


class TenantShareTest(unittest.TestCase):
    def test_greedy_tenant_refused_neighbour_served(self):
        sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
        from compute.v1 import compute_pb2 as pb  # noqa: E402 (generated at build time)
        agent = AgentProcess(BUILD_DIR)
        front = channels = None
        try:
            greedy_sid = agent.new_sandbox(tenant_id="greedy", session_id="g1")
            calm_sid = agent.new_sandbox(tenant_id="calm", session_id="c1")
            address = f"127.0.0.1:{free_port()}"
            log = open(os.path.join(agent.state, "frontend.log"), "ab")
            # A per-peer share (16) above the tenant's (4): refusals below come from the
            # tenant share alone.
            front = subprocess.Popen(
                [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--listen", address,
                 "--agents", agent.address, "--max-calls", "32",
                 "--max-calls-per-tenant", "4", "--shutdown-grace-ms", "3000"],
                stdout=log, stderr=subprocess.STDOUT)
            log.close()

            def channel():
                # Its own connection: its own peer (see the per-peer test above).
                return grpc.insecure_channel(
                    address, options=[("grpc.use_local_subchannel_pool", 1)])

            channels = [channel() for _ in range(3)]
            rpcs = []
            for ch in channels:
                rpcs.append((
                    ch.unary_stream("/compute.v1.ComputeService/ExecCommand",
                                    request_serializer=pb.ExecCommandRequest.SerializeToString,
                                    response_deserializer=pb.ExecEvent.FromString),
                    ch.unary_unary("/compute.v1.ComputeService/DescribeSandbox",
                                   request_serializer=pb.DescribeSandboxRequest.SerializeToString,
                                   response_deserializer=pb.DescribeSandboxResponse.FromString),
                    ch.unary_unary("/compute.v1.ComputeService/CreateSandbox",
                                   request_serializer=pb.CreateSandboxRequest.SerializeToString,
                                   response_deserializer=pb.CreateSandboxResponse.FromString)))
            exec0, describe0, create0 = rpcs[0]
            deadline = time.monotonic() + 30
            while True:  # the frontend is up once it answers
                try:
                    describe0(pb.DescribeSandboxRequest(sandbox_id=calm_sid), timeout=5)
                    break
                except grpc.RpcError:
                    if front.poll() is not None or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)

            # The greedy tenant: 10 streams over two connections, 5 each.
            req = pb.ExecCommandRequest(sandbox_id=greedy_sid, command="sleep", args=["20"])
            streams = []
            for i in range(10):
                streams.append(rpcs[i % 2][0](req, timeout=30))
                time.sleep(0.05)
            time.sleep(2)  # let every stream reach the frontend
            refused = [s.details() for s in streams
                       if s.done() and s.code() == grpc.StatusCode.RESOURCE_EXHAUSTED]
            self.assertEqual(len(refused), 6, refused)
            self.assertEqual(sum(1 for s in streams if not s.done()), 4)
            self.assertIn("tenant share used up", refused[0])
            self.assertIn("4 calls in flight", refused[0])
            # Its other calls are refused too, whatever they are.
            for call in (lambda: rpcs[1][1](pb.DescribeSandboxRequest(sandbox_id=greedy_sid),
                                            timeout=10),
                         lambda: rpcs[1][2](pb.CreateSandboxRequest(tenant_id="greedy",
                                                                    session_id="g2"),
                                            timeout=10)):
                with self.assertRaises(grpc.RpcError) as cm:
                    call()
                self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
                self.assertIn("tenant share used up", cm.exception.details())
            # The calm tenant, on a connection of its own: all 20 served meanwhile.
            calm_describe = rpcs[2][1]
            for _ in range(20):
                got = calm_describe(pb.DescribeSandboxRequest(sandbox_id=calm_sid), timeout=10)
                self.assertEqual(got.sandbox_id, calm_sid)
            # A greedy stream ends: the tenant has room for one call again.
            for s in streams:
                if not s.done():
                    s.cancel()
                    break
            deadline = time.monotonic() + 10
            while True:
                try:
                    describe0(pb.DescribeSandboxRequest(sandbox_id=greedy_sid), timeout=10)
                    break
                except grpc.RpcError as e:
                    if (e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED
                            or time.monotonic() > deadline):
                        raise
                    time.sleep(0.1)
            for s in streams:
                s.cancel()
        finally:
            for ch in channels or []:
                ch.close()
            if front:
                front.terminate()
                self.assertEqual(front.wait(timeout=30), 0)
            rc, tail = agent.cleanup()
            self.assertEqual(rc, 0, tail)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
