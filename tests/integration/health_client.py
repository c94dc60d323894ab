"""A tiny independent health client (Debian's python3-grpcio), shared by the tests.

The generated health_pb2 is loaded by file path: Debian's grpc package is a regular package,
so `grpc.health.v1` cannot be imported from another directory."""
import importlib.util
import os

import grpc


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Health:
    def __init__(self, build_dir):
        self.pb = load_module(
            os.path.join(build_dir, "python", "grpc", "health", "v1", "health_pb2.py"), "health_pb2")

    def check(self, address, service="", timeout=2.0):
        """Returns the ServingStatus name, or raises grpc.RpcError."""
        with grpc.insecure_channel(address) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=self.pb.HealthCheckRequest.SerializeToString,
                response_deserializer=self.pb.HealthCheckResponse.FromString)
            resp = check(self.pb.HealthCheckRequest(service=service), timeout=timeout)
            return self.pb.HealthCheckResponse.ServingStatus.Name(resp.status)
