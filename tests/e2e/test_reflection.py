"""Server reflection (grpc.reflection.v1 and v1alpha) on the frontend's public port, spoken by
a client of the protocol's own (Debian 12 has no grpc_reflection module): list the services,
fetch the descriptors of compute.v1.ComputeService, and call it through messages built from
those descriptors alone, which proves the served files whole. Then the protocol's error
answers and the stream's bounds.

Usage: test_reflection.py BUILD_DIR [unittest args]"""
import os
import sys
import threading
import time
import unittest
import uuid

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from agent_fixture import AgentProcess
from frontend_fixture import FrontendProcess
from health_client import load_module
import testmain

BUILD_DIR = sys.argv[1]
GEN = os.path.join(BUILD_DIR, "python", "grpc", "reflection")
V1 = load_module(os.path.join(GEN, "v1", "reflection_pb2.py"), "reflection_v1_pb2")
V1ALPHA = load_module(os.path.join(GEN, "v1alpha", "reflection_pb2.py"), "reflection_v1alpha_pb2")

SERVICES = ["compute.v1.ComputeService", "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection"]
NOT_FOUND = grpc.StatusCode.NOT_FOUND.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]


class Frontend(FrontendProcess):
    def __init__(self, agent):
        self.agent = agent
        super().__init__(BUILD_DIR, "/tmp")

    def argv_tail(self):
        return ["--agents", self.agent.address, "--agent-poll-ms", "200"]


class ReflectionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        cls.fe = Frontend(cls.agent)
        cls.channel = grpc.insecure_channel(cls.fe.address)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        rc = cls.fe.stop()
        log = cls.fe.log()
        report = cls.fe.sanitizer_report()
        os.unlink(cls.fe.log_path)
        arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")
        if report:
            raise AssertionError("frontend sanitizer report:\n" + report)

    def info(self, pb=V1):
        """The ServerReflectionInfo method of the v1 (or v1alpha) protocol."""
        package = pb.DESCRIPTOR.package
        return self.channel.stream_stream(
            f"/{package}.ServerReflection/ServerReflectionInfo",
            request_serializer=pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=pb.ServerReflectionResponse.FromString)

    def ask(self, *requests, pb=V1):
        """Sends the requests on one stream; returns the responses."""
        return list(self.info(pb)(iter(requests), timeout=30))

    def files_of(self, resp):
        self.assertEqual(resp.WhichOneof("message_response"), "file_descriptor_response",
                         resp)
        return [descriptor_pb2.FileDescriptorProto.FromString(b)
                for b in resp.file_descriptor_response.file_descriptor_proto]

    def error_of(self, resp):
        self.assertEqual(resp.WhichOneof("message_response"), "error_response", resp)
        return resp.error_response.error_code

    # --- the round trip ---

    def test_list_services_v1_and_v1alpha(self):
        for pb in (V1, V1ALPHA):
            [resp] = self.ask(pb.ServerReflectionRequest(host="h", list_services="*"), pb=pb)
            self.assertEqual(sorted(s.name for s in resp.list_services_response.service),
                             SERVICES)
            self.assertEqual(resp.valid_host, "h")
            self.assertEqual(resp.original_request.list_services, "*")

    def test_dynamic_call_through_reflected_descriptors(self):
        """Only what reflection gave: a pool of the reflected files, messages made from it,
        CreateSandbox, DescribeSandbox and DestroySandbox called with them."""
        [resp] = self.ask(V1.ServerReflectionRequest(
            file_containing_symbol="compute.v1.ComputeService"))
        files = self.files_of(resp)
        self.assertEqual(files[0].name, "compute/v1/compute.proto")
        self.assertEqual({f.name for f in files},
                         {"compute/v1/compute.proto", "common/v1/usage.proto",
                          "google/protobuf/duration.proto", "google/protobuf/timestamp.proto"})
        pool = descriptor_pool.DescriptorPool()
        pending = list(files)
        while pending:  # imports first, whatever the order they came in
            ready = [f for f in pending
                     if all(d in {g.name for g in files if g not in pending}
                            for d in f.dependency)]
            self.assertTrue(ready, "an import is missing from the reflected files")
            for f in ready:
                pool.Add(f)
                pending.remove(f)
        service = pool.FindServiceByName("compute.v1.ComputeService")
        self.assertEqual(sorted(m.name for m in service.methods)[:3],
                         ["CreateSandbox", "DescribeSandbox", "DestroySandbox"])
        factory = message_factory.MessageFactory(pool)

        def call(name, **fields):
            method = service.FindMethodByName(name)
            req_cls = factory.GetPrototype(method.input_type)
            resp_cls = factory.GetPrototype(method.output_type)
            rpc = self.channel.unary_unary(
                f"/{service.full_name}/{name}", request_serializer=req_cls.SerializeToString,
                response_deserializer=resp_cls.FromString)
            return rpc(req_cls(**fields), timeout=60)

        created = call("CreateSandbox", tenant_id="refl-" + uuid.uuid4().hex[:8],
                       session_id="s")
        described = call("DescribeSandbox", sandbox_id=created.sandbox_id)
        self.assertEqual(described.sandbox_id, created.sandbox_id)
        status = described.DESCRIPTOR.fields_by_name["status"].enum_type
        self.assertIn(status.values_by_number[described.status].name,
                      ("SANDBOX_STATUS_STARTING", "SANDBOX_STATUS_READY"))
        self.assertEqual(described.created_at, created.created_at)
        self.assertEqual(type(described.current_usage).DESCRIPTOR.full_name,
                         "common.v1.UsageMetrics")
        gone = call("DestroySandbox", sandbox_id=created.sandbox_id)
        self.assertEqual(gone.sandbox_id, created.sandbox_id)

    def test_reflected_files_match_the_build(self):
        """The embedded files are the protos the build compiled (comments kept for describe)."""
        sys.path.insert(0, os.path.join(BUILD_DIR, "python"))
        from compute.v1 import compute_pb2  # noqa: E402 (generated at build time)
        [resp] = self.ask(V1.ServerReflectionRequest(file_by_filename="compute/v1/compute.proto"))
        reflected = self.files_of(resp)[0]
        self.assertTrue(reflected.source_code_info.location)  # comments for grpcurl describe
        reflected.ClearField("source_code_info")
        # protoc's descriptor sets carry each field's json_name; the Python module's copy not.
        messages = list(reflected.message_type)
        while messages:
            m = messages.pop()
            messages.extend(m.nested_type)
            for f in m.field:
                f.ClearField("json_name")
        built = descriptor_pb2.FileDescriptorProto()
        compute_pb2.DESCRIPTOR.CopyToProto(built)
        self.assertEqual(reflected, built)
        self.assertEqual(reflected.options.go_package, "compute/api/go/compute/v1;computev1")

    # --- the protocol's other requests ---

    def test_file_by_filename_and_not_found(self):
        responses = self.ask(
            V1.ServerReflectionRequest(file_by_filename="common/v1/usage.proto"),
            V1.ServerReflectionRequest(file_by_filename="no/such.proto"),
            V1.ServerReflectionRequest(file_by_filename="grpc/health/v1/health.proto"))
        self.assertEqual([f.name for f in self.files_of(responses[0])], ["common/v1/usage.proto"])
        self.assertEqual(self.error_of(responses[1]), NOT_FOUND)
        self.assertIn("no/such.proto", responses[1].error_response.error_message)
        # The stream goes on after an error answer.
        self.assertEqual([f.name for f in self.files_of(responses[2])],
                         ["grpc/health/v1/health.proto"])
        self.assertEqual(responses[1].original_request.file_by_filename, "no/such.proto")

    def test_file_containing_symbol_kinds(self):
        cases = {
            "compute.v1.ComputeService.ExecCommand": "compute/v1/compute.proto",  # method
            "compute.v1.ExecEvent": "compute/v1/compute.proto",  # message
            "compute.v1.ExecEvent.stdout": "compute/v1/compute.proto",  # field
            "compute.v1.ExecEvent.event": "compute/v1/compute.proto",  # oneof
            "compute.v1.SandboxStatus": "compute/v1/compute.proto",  # enum
            "compute.v1.SANDBOX_STATUS_READY": "compute/v1/compute.proto",  # enum value
            "common.v1.UsageMetrics": "common/v1/usage.proto",
            "grpc.health.v1.HealthCheckResponse.ServingStatus": "grpc/health/v1/health.proto",
            "grpc.health.v1.HealthCheckResponse.SERVING": "grpc/health/v1/health.proto",
            "google.protobuf.Duration": "google/protobuf/duration.proto",
            "grpc.reflection.v1alpha.ServerReflection": "grpc/reflection/v1alpha/reflection.proto",
        }
        responses = self.ask(*(V1.ServerReflectionRequest(file_containing_symbol=s)
                               for s in cases))
        for (symbol, name), resp in zip(cases.items(), responses):
            self.assertEqual(self.files_of(resp)[0].name, name, symbol)
        for missing in ("compute.v1.Nope", ".compute.v1.ExecEvent", "compute", ""):
            [resp] = self.ask(V1.ServerReflectionRequest(file_containing_symbol=missing))
            self.assertEqual(self.error_of(resp), NOT_FOUND, missing)

    def test_extensions(self):
        """No served file declares extensions: every extension request is answered as the
        protocol says for that (NOT_FOUND, or a known type with no numbers)."""
        ext = V1.ExtensionRequest(containing_type="compute.v1.ExecEvent", extension_number=100)
        known, unknown, missing = self.ask(
            V1.ServerReflectionRequest(all_extension_numbers_of_type="compute.v1.ExecEvent"),
            V1.ServerReflectionRequest(all_extension_numbers_of_type="compute.v1.Nope"),
            V1.ServerReflectionRequest(file_containing_extension=ext))
        self.assertEqual(known.all_extension_numbers_response.base_type_name,
                         "compute.v1.ExecEvent")
        self.assertEqual(list(known.all_extension_numbers_response.extension_number), [])
        self.assertEqual(self.error_of(unknown), NOT_FOUND)
        self.assertEqual(self.error_of(missing), NOT_FOUND)
        self.assertEqual(missing.original_request.file_containing_extension, ext)

    def test_client_cancel_mid_stream_frees_the_handler(self):
        """A client that goes away without closing its side: the handler waiting for its next
        request sees the cancel and ends (its thread gone, the server serving)."""
        before = self.fe.thread_count()
        release = threading.Event()

        def requests():
            yield V1.ServerReflectionRequest(list_services="")
            release.wait(30)  # the stream stays open, no half-close

        calls = [self.info()(requests(), timeout=60) for _ in range(8)]
        for call in calls:
            self.assertEqual(len(next(call).list_services_response.service), len(SERVICES))
        during = self.fe.thread_count()  # the 8 handlers, give or take gRPC's pool threads
        for call in calls:
            call.cancel()
        release.set()
        # gRPC's own pools may keep a thread or two for a while (as in test_frontend.py); 8
        # handler threads left behind would not fit that slack.
        deadline = time.monotonic() + 20
        while self.fe.thread_count() > before + 2:
            if time.monotonic() > deadline:
                self.fail(f"threads left: {self.fe.thread_count()} > {before} + 2 ({during} "
                          f"with the streams open)")
            time.sleep(0.1)
        self.assertEqual(len(self.ask(V1.ServerReflectionRequest(list_services=""))), 1)

    # --- bounds ---

    def test_empty_request_is_invalid_argument(self):
        [resp] = self.ask(V1.ServerReflectionRequest(host="only-a-host"))
        self.assertEqual(self.error_of(resp), INVALID_ARGUMENT)

    def test_oversized_request_ends_the_stream(self):
        big = V1.ServerReflectionRequest(file_containing_symbol="x" * (17 * 1024))
        with self.assertRaises(grpc.RpcError) as cm:
            self.ask(V1.ServerReflectionRequest(list_services=""), big)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)

    def test_requests_per_stream_are_capped(self):
        answered = []
        requests = (V1.ServerReflectionRequest(list_services="") for _ in range(1100))
        with self.assertRaises(grpc.RpcError) as cm:
            for resp in self.info()(requests, timeout=60):
                answered.append(resp)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(len(answered), 1024)
        # The server is fine afterwards.
        self.assertEqual(len(self.ask(V1.ServerReflectionRequest(list_services=""))), 1)


if __name__ == "__main__":
    testmain.main([sys.argv[0]] + sys.argv[2:])
