"""TLS on the frontend's public port (--public-tls-cert/-key, and --public-tls-client-ca for
mutual TLS), end to end: the real frontend and node agent, certificates made at test time with
the openssl CLI (the commands of docs/api.md). Good clients (grpcio, computectl, the Python SDK)
create, exec in and destroy a sandbox; plaintext clients, clients that trust another CA, and
(with mutual TLS) clients without a certificate or with one from another CA are refused. Bad
start-up configurations make the frontend exit 2 with a message naming the flag.

Usage: test_public_tls.py BUILD_DIR [unittest args]"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import uuid

import grpc

from agent_client import code_of
from agent_fixture import AgentProcess
from compute_client import Compute
from frontend_fixture import FrontendProcess
from health_client import Health
import testmain

BUILD_DIR = sys.argv[1]
COMPUTECTL = os.path.join(BUILD_DIR, "bin", "computectl")

# A CA, a server certificate for 127.0.0.1 and localhost, a client certificate, and the
# same from an unrelated CA.
CERT_SCRIPT = r"""
set -e
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
    -subj "/CN=$2" -keyout $1.key -out $1.crt
}
mk() {
  printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature' \
    "$4" > $1.ext
  [ -z "$5" ] || printf '%s\n' "$5" >> $1.ext
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=$3" -keyout $1.key -out $1.csr
  openssl x509 -req -in $1.csr -CA $2.crt -CAkey $2.key -CAcreateserial -days 365 \
    -extfile $1.ext -out $1.crt
}
ca ca 'compute public CA'
ca other-ca 'some other CA'
mk server ca compute-frontend extendedKeyUsage=serverAuth \
  'subjectAltName=DNS:localhost,DNS:compute.example,IP:127.0.0.1'
mk client ca agents-service extendedKeyUsage=clientAuth
mk rogue-client other-ca agents-service extendedKeyUsage=clientAuth
mk rogue-server other-ca compute-frontend extendedKeyUsage=serverAuth \
  'subjectAltName=DNS:localhost,IP:127.0.0.1'
"""

CERTS = None  # the directory, made once by setUpModule


def setUpModule():
    global CERTS
    if not shutil.which("openssl"):
        raise unittest.SkipTest("no openssl CLI")
    CERTS = tempfile.mkdtemp(prefix="cs-tls-")
    subprocess.run(["sh", "-c", CERT_SCRIPT], cwd=CERTS, check=True, capture_output=True)


def tearDownModule():
    if CERTS:
        shutil.rmtree(CERTS, ignore_errors=True)


def cert(name):
    return os.path.join(CERTS, name)


def read(name):
    with open(cert(name), "rb") as f:
        return f.read()


def credentials(ca="ca.crt", client=None):
    """grpcio channel credentials trusting ca, with the client certificate `client`."""
    return grpc.ssl_channel_credentials(
        root_certificates=read(ca),
        private_key=read(client + ".key") if client else None,
        certificate_chain=read(client + ".crt") if client else None)


class TlsFrontend(FrontendProcess):
    def __init__(self, agent, client_ca=None, start=True):
        self.agent = agent
        self.client_ca = client_ca
        super().__init__(BUILD_DIR, "/tmp", start=start)

    def argv_tail(self):
        tail = ["--agents", self.agent.address, "--agent-poll-ms", "200",
                "--public-tls-cert", cert("server.crt"), "--public-tls-key", cert("server.key")]
        if self.client_ca:
            tail += ["--public-tls-client-ca", cert(self.client_ca)]
        return tail

    def client(self):
        return Compute(BUILD_DIR, self.address,
                       credentials("ca.crt", "client" if self.client_ca else None))


def tenant():
    return "tls-" + uuid.uuid4().hex[:8]


class TlsCase(unittest.TestCase):
    """A TLS frontend per class (client_ca: mutual TLS) on one agent."""
    client_ca = None

    @classmethod
    def setUpClass(cls):
        cls.agent = AgentProcess(BUILD_DIR)
        try:
            cls.fe = TlsFrontend(cls.agent, cls.client_ca)
        except BaseException:
            cls.agent.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        rc = cls.fe.stop()
        log = cls.fe.log()
        report = cls.fe.sanitizer_report()
        os.unlink(cls.fe.log_path)
        arc, tail = cls.agent.cleanup()
        if rc != 0 or arc != 0:
            raise AssertionError(f"frontend exited {rc}, agent {arc}:\n{log[-3000:]}\n{tail}")
        if report:
            raise AssertionError("frontend sanitizer report:\n" + report)
        if "seccomp refused" in log:  # TLS's syscalls are in the allowlist
            raise AssertionError("frontend seccomp refusal:\n" + log[-3000:])

    def round_trip(self, client):
        """Create, exec, destroy through client; closes it."""
        try:
            sid = client.create(tenant(), str(uuid.uuid4())).sandbox_id
            out, err, done, _ = client.exec(sid, "echo", "over tls")
            self.assertEqual(out, b"over tls\n", err)
            self.assertEqual(done.exit_code, 0)
            client.destroy(sid)
        finally:
            client.close()

    def refused(self, client):
        """The client's call fails with UNAVAILABLE (its handshake failed); closes it."""
        try:
            self.assertEqual(code_of(client.describe, "x"), grpc.StatusCode.UNAVAILABLE)
        finally:
            client.close()

    def computectl(self, *args, env=None):
        return subprocess.run([COMPUTECTL, "--addr", self.fe.address, *args],
                              capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, **(env or {})))

    def computectl_round_trip(self, *tls_args, env=None):
        r = self.computectl(*tls_args, "create", "--tenant", tenant(), "--session",
                            str(uuid.uuid4()), env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        sid = r.stdout.strip()
        r = self.computectl(*tls_args, "exec", sid, "--", "echo", "ctl over tls", env=env)
        self.assertEqual((r.returncode, r.stdout), (0, "ctl over tls\n"), r.stderr)
        r = self.computectl(*tls_args, "destroy", sid, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)

    def sdk_round_trip(self, tls):
        from compute_sdk import Sandbox
        with Sandbox.create(tenant(), address=self.fe.address, tls=tls) as sb:
            r = sb.exec("echo", ["sdk over tls"])
            self.assertEqual((r.exit_code, r.stdout), (0, b"sdk over tls\n"))


class ServerTlsTest(TlsCase):
    """--public-tls-cert and --public-tls-key: TLS, no client certificate asked for."""

    def test_log_says_tls(self):
        self.assertIn(f"serving on port {self.fe.port} (TLS)", self.fe.log())

    def test_client_trusting_the_ca(self):
        self.round_trip(Compute(BUILD_DIR, self.fe.address, credentials()))

    def test_client_checking_a_name_of_the_certificate(self):
        self.round_trip(Compute(BUILD_DIR, self.fe.address, credentials(),
                                options=[("grpc.ssl_target_name_override", "compute.example")]))

    def test_client_checking_a_name_the_certificate_lacks_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address, credentials(),
                             options=[("grpc.ssl_target_name_override", "other.example")]))

    def test_plaintext_client_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address))

    def test_client_trusting_another_ca_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address, credentials("other-ca.crt")))

    def test_health_over_tls(self):
        pb = Health(BUILD_DIR).pb
        with grpc.secure_channel(self.fe.address, credentials()) as channel:
            check = channel.unary_unary(
                "/grpc.health.v1.Health/Check",
                request_serializer=pb.HealthCheckRequest.SerializeToString,
                response_deserializer=pb.HealthCheckResponse.FromString)
            resp = check(pb.HealthCheckRequest(service="compute.v1.ComputeService"), timeout=30)
        self.assertEqual(pb.HealthCheckResponse.ServingStatus.Name(resp.status), "SERVING")

    def test_computectl_with_tls_flags(self):
        self.computectl_round_trip("--tls-ca", cert("ca.crt"))

    def test_computectl_with_tls_env(self):
        self.computectl_round_trip(env={"COMPUTE_TLS_CA_FILE": cert("ca.crt")})

    def test_computectl_without_tls_fails_clearly(self):
        r = self.computectl("describe", "x")
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("computectl: UNAVAILABLE: ", r.stderr)
        self.assertIn("If it serves TLS, add --tls (and --tls-ca FILE)", r.stderr)

    def test_computectl_with_system_cas_fails_clearly(self):
        # The test CA is in no system bundle: the handshake fails.
        r = self.computectl("--tls", "describe", "x")
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("no connection over TLS: check", r.stderr)

    def test_computectl_bad_tls_files(self):
        for args, needle in (
                (["--tls-ca", cert("missing.crt")], "--tls-ca " + cert("missing.crt")),
                (["--tls-ca", cert("ca.crt"), "--tls-cert", cert("client.crt")],
                 "--tls-key is missing"),
                (["--tls-ca", cert("ca.crt"), "--tls-cert", cert("client.crt"),
                  "--tls-key", cert("server.key")], "does not belong"),
                (["--tls-ca", cert("server.key")], "no PEM certificate")):
            with self.subTest(args=args):
                r = self.computectl(*args, "describe", "x")
                self.assertEqual(r.returncode, 125, r.stderr)
                self.assertIn("INVALID_ARGUMENT" if "missing.crt" not in needle else needle,
                              r.stderr)
                self.assertIn(needle, r.stderr)

    def test_sdk_with_tls(self):
        from compute_sdk import TLS
        self.sdk_round_trip(TLS(ca_file=cert("ca.crt")))

    def test_sdk_with_tls_from_env(self):
        from compute_sdk import Client
        os.environ["COMPUTE_TLS_CA_FILE"] = cert("ca.crt")
        try:
            with Client(self.fe.address) as c:
                self.sdk_round_trip_with(c)
        finally:
            del os.environ["COMPUTE_TLS_CA_FILE"]

    def sdk_round_trip_with(self, client):
        from compute_sdk import Sandbox
        with Sandbox.create(tenant(), client=client) as sb:
            self.assertEqual(sb.exec("true", []).exit_code, 0)

    def test_sdk_without_tls_refused(self):
        from compute_sdk import Sandbox, UnavailableError
        with self.assertRaises(UnavailableError):
            Sandbox.create(tenant(), address=self.fe.address, tls=False, timeout=10)


class MutualTlsTest(TlsCase):
    """--public-tls-client-ca too: every client must present a certificate signed by it."""
    client_ca = "ca.crt"

    def test_log_says_mutual_tls(self):
        self.assertIn(f"serving on port {self.fe.port} (mutual TLS)", self.fe.log())

    def test_client_with_a_certificate_of_the_ca(self):
        self.round_trip(Compute(BUILD_DIR, self.fe.address, credentials("ca.crt", "client")))

    def test_client_without_certificate_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address, credentials()))

    def test_client_with_a_certificate_of_another_ca_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address, credentials("ca.crt", "rogue-client")))

    def test_plaintext_client_refused(self):
        self.refused(Compute(BUILD_DIR, self.fe.address))

    def test_computectl_with_client_certificate(self):
        self.computectl_round_trip("--tls-ca", cert("ca.crt"), "--tls-cert", cert("client.crt"),
                                   "--tls-key", cert("client.key"))

    def test_computectl_without_client_certificate_fails(self):
        r = self.computectl("--tls-ca", cert("ca.crt"), "describe", "x")
        self.assertEqual(r.returncode, 125, r.stderr)
        self.assertIn("UNAVAILABLE", r.stderr)
        self.assertIn("--tls-cert", r.stderr)

    def test_sdk_with_client_certificate(self):
        from compute_sdk import TLS
        self.sdk_round_trip(TLS(ca_file=cert("ca.crt"), cert_file=cert("client.crt"),
                                key_file=cert("client.key")))

    def test_sdk_without_client_certificate_refused(self):
        from compute_sdk import TLS, Sandbox, UnavailableError
        with self.assertRaises(UnavailableError):
            Sandbox.create(tenant(), address=self.fe.address, tls=TLS(ca_file=cert("ca.crt")),
                           timeout=10)


class StartupTest(unittest.TestCase):
    """Bad --public-tls-* settings: exit 2 at start, with a message naming flag and file.
    No agent is needed: the files are checked before anything starts."""

    def start(self, *args):
        return subprocess.run(
            [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--listen", "127.0.0.1:0",
             "--agents", "127.0.0.1:1", *args], capture_output=True, text=True, timeout=60)

    def assert_refused(self, needle, *args):
        r = self.start(*args)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("compute-frontend: ", r.stderr)
        self.assertIn(needle, r.stderr)

    def test_key_of_another_certificate(self):
        self.assert_refused(f"--public-tls-key {cert('client.key')}: private key: it does not "
                            "belong to the certificate",
                            "--public-tls-cert", cert("server.crt"),
                            "--public-tls-key", cert("client.key"))

    def test_missing_file(self):
        self.assert_refused(f"--public-tls-cert {cert('nope.crt')}: cannot open",
                            "--public-tls-cert", cert("nope.crt"),
                            "--public-tls-key", cert("server.key"))

    def test_missing_client_ca_file(self):
        self.assert_refused(f"--public-tls-client-ca {cert('nope.crt')}: cannot open",
                            "--public-tls-cert", cert("server.crt"),
                            "--public-tls-key", cert("server.key"),
                            "--public-tls-client-ca", cert("nope.crt"))

    def test_certificate_without_key(self):
        self.assert_refused("--public-tls-key is missing", "--public-tls-cert",
                            cert("server.crt"))

    def test_client_ca_without_certificate(self):
        self.assert_refused("--public-tls-cert is missing", "--public-tls-client-ca",
                            cert("ca.crt"))

    def test_not_a_certificate(self):
        self.assert_refused(f"--public-tls-cert {cert('server.key')}: certificate: no PEM "
                            "certificate", "--public-tls-cert", cert("server.key"),
                            "--public-tls-key", cert("server.key"))

    def test_from_the_environment(self):
        r = subprocess.run(
            [os.path.join(BUILD_DIR, "bin", "compute-frontend"), "--listen", "127.0.0.1:0",
             "--agents", "127.0.0.1:1"], capture_output=True, text=True, timeout=60,
            env=dict(os.environ, COMPUTE_PUBLIC_TLS_CERT=cert("server.crt")))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("COMPUTE_PUBLIC_TLS_CERT/KEY/CLIENT_CA", r.stderr)
        self.assertIn("--public-tls-key is missing", r.stderr)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
