"""The kube mode's whole stack on one machine, for the end-to-end tests: the test API server
(tests/kube/apiserver.py), one simulated node per node name (tests/kube/kubelet_sim.py: the
scheduler, the PVC binder and a kubelet starting real runsc pods the way containerd's shim
does, each container's root the directory of its image in the images directory, as the local
mode's: $COMPUTE_TEST_IMAGES_DIR/debian:bookworm-compute by default), a real compute-nodeagent
in kube mode per node (reading that node's runsc root), and real compute-frontends with
--scheduler kube.

The node agents are what the DaemonSet would run; their pods are registered in the API server
the way the DaemonSet controller and the kubelet would leave them (labelled, bound to their
node, Running, with a podIP and a container port named "grpc"), so the frontend finds them
exactly as in a cluster.

Sandbox pods take the resident exec path as deployed (deploy/frontend.yaml's
COMPUTE_SPAWNER_IMAGE=agent): the agent pods name an image whose only file is the build's
compute-init at /usr/local/bin/compute-init (made in the images directory for the stack's
life), the frontends run with --spawner-image agent, and the simulated nodes' runsc has
host-uds=open (a node can be made without it: Node(..., host_uds=None)).

The internal link is mutual TLS, as deployed: the certificates are made by running the
openssl commands of docs/rpc.md ("Making certificates with openssl") as written."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "kube"))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

from agent_fixture import DEFAULT_IMAGE, IMAGES_DIR, AgentProcess  # noqa: E402
from apiserver import ApiServer  # noqa: E402
from cri import remove_cgroup  # noqa: E402
from frontend_fixture import FrontendProcess  # noqa: E402
from kubelet_sim import KubeletSim  # noqa: E402

SANDBOX_NS = "compute-sandboxes"
AGENT_NS = "compute-system"
AGENT_LABEL = ("app.kubernetes.io/name", "compute-node-agent")
SANDBOX_IMAGE = DEFAULT_IMAGE  # the frontends' --sandbox-image


REPO = os.path.abspath(os.path.join(HERE, "..", ".."))


def make_certificates(directory):
    """Runs docs/rpc.md's certificate commands in directory; returns it."""
    with open(os.path.join(REPO, "docs", "rpc.md")) as f:
        doc = f.read()
    section = doc[doc.index("### Making certificates with openssl"):]
    script = re.search(r"```sh\n(.*?)```", section, re.S).group(1)
    os.makedirs(directory, exist_ok=True)
    subprocess.run(["sh", "-ec", script], cwd=directory, check=True, capture_output=True)
    return directory


def make_spawner_image(build_dir, images_dir, reference):
    """The agent image as far as sandbox pods use it: a root holding only the static
    compute-init at /usr/local/bin (deploy/Dockerfile puts it there), which their init
    container runs with --install. Returns its directory."""
    root = os.path.join(images_dir, reference)
    os.makedirs(os.path.join(root, "usr", "local", "bin"))
    shutil.copy2(os.path.join(build_dir, "bin", "compute-init"),
                 os.path.join(root, "usr", "local", "bin", "compute-init"))
    return root


class Node:
    """A simulated node: its kubelet and its node agent."""

    def __init__(self, stack, name, host_uds="open"):
        self.stack = stack
        self.name = name
        # Short paths: runsc keeps sockets under its root.
        self.dir = tempfile.mkdtemp(prefix="csk-", dir="/tmp")
        self.runsc_root = os.path.join(self.dir, "r")
        self.cgroup_prefix = f"/compute-test-kube-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.kubelet = KubeletSim(kubeconfig=stack.api.kubeconfig_path, node_name=name,
                                  state_dir=os.path.join(self.dir, "k"),
                                  runsc_root=self.runsc_root, cgroup_prefix=self.cgroup_prefix,
                                  images_dir=stack.images_dir, host_uds=host_uds)
        self.kubelet.start()
        self.agent = None
        tls = stack.tls_dir
        try:
            self.agent = AgentProcess(
                stack.build_dir, "--mode", "kube", "--runsc-root", self.runsc_root,
                "--node-name", name,
                # the simulated kubelet's volumes (kubelet_sim.volume_dir)
                "--volume-root", os.path.join(self.dir, "k", "volumes"),
                "--tls-ca", f"{tls}/ca.crt", "--tls-cert", f"{tls}/agent.crt",
                "--tls-key", f"{tls}/agent.key")
            self.register_agent_pod()
        except BaseException:
            self.close()
            raise

    @property
    def agent_pod(self):
        return "compute-node-agent-" + self.name

    def register_agent_pod(self):
        """The DaemonSet's pod on this node, as the API server would hold it."""
        api = self.stack.api
        if api.get("pods", AGENT_NS, self.agent_pod) is None:
            api.create("pods", AGENT_NS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.agent_pod, "labels": dict([AGENT_LABEL])},
                "spec": {"nodeName": self.name, "containers": [{
                    "name": "agent", "image": self.stack.spawner_image,
                    "ports": [{"name": "grpc", "containerPort": self.agent.port}]}]}})
        api.patch_status("pods", AGENT_NS, self.agent_pod, {
            "phase": "Running", "podIP": "127.0.0.1", "hostIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}]})

    def close(self):
        try:
            rc, tail = self.agent.cleanup() if self.agent else (None, "")
        finally:
            # The node's pods go whatever happened to its agent: left running, they load
            # the machine for every later test.
            self.kubelet.stop(cleanup=True)
        # runsc leaves the pod cgroups' parents behind in every hierarchy.
        remove_cgroup(self.cgroup_prefix)
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc, tail


class KubeFrontend(FrontendProcess):
    """compute-frontend --scheduler kube against the stack's API server."""

    def __init__(self, stack, *extra, start=True):
        self.stack = stack
        self.extra = list(extra)
        super().__init__(stack.build_dir, stack.dir, start=start)

    def argv_tail(self):
        tls = self.stack.tls_dir
        return ["--scheduler", "kube", "--kubeconfig", self.stack.api.kubeconfig_path,
                "--spawner-image", "agent",
                "--sandbox-namespace", SANDBOX_NS, "--agent-namespace", AGENT_NS,
                "--sandbox-image", SANDBOX_IMAGE, "--log-level", "debug",
                "--agent-tls-ca", f"{tls}/ca.crt", "--agent-tls-cert", f"{tls}/frontend.crt",
                "--agent-tls-key", f"{tls}/frontend.key"] + self.extra


class KubeStack:
    def __init__(self, build_dir, nodes=("node-1",), images_dir=IMAGES_DIR, host_uds="open"):
        self.build_dir = build_dir
        self.images_dir = images_dir  # the nodes' images: <images_dir>/<image> is its root
        self.dir = tempfile.mkdtemp(prefix="csk-stack-", dir="/tmp")
        self.api = ApiServer(os.path.join(self.dir, "api")).start()
        self.nodes, self.frontends = [], []
        self.spawner_image = f"compute-spawner-{os.getpid()}-{uuid.uuid4().hex[:6]}:test"
        self.spawner_image_dir = None
        try:
            self.spawner_image_dir = make_spawner_image(build_dir, images_dir,
                                                        self.spawner_image)
            self.tls_dir = make_certificates(os.path.join(self.dir, "tls"))
            for n in nodes:
                self.nodes.append(Node(self, n, host_uds=host_uds))
        except BaseException:
            self.close()  # nothing half-started stays behind
            raise

    def frontend(self, *extra):
        fe = KubeFrontend(self, *extra, start=False)
        self.frontends.append(fe)  # stopped by close() even if it does not start
        fe.start()
        return fe

    def node_of(self, sandbox_id):
        """The Node running a sandbox's pod (None while unscheduled)."""
        pods = self.api.list("pods", SANDBOX_NS,
                             label_selector="compute.paper-board.io/sandbox-id=" + sandbox_id)
        for n in self.nodes:
            if pods and pods[0]["spec"].get("nodeName") == n.name:
                return n
        return None

    def pod_of(self, sandbox_id):
        """The sandbox's pod object (None when there is none)."""
        pods = self.api.list("pods", SANDBOX_NS,
                             label_selector="compute.paper-board.io/sandbox-id=" + sandbox_id)
        return pods[0] if pods else None

    def workspace_dir(self, sandbox_id):
        """The host directory of a sandbox's workspace: its PVC's volume on its node."""
        pod = self.pod_of(sandbox_id)
        claim = next(v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
                     if "persistentVolumeClaim" in v)
        pvc = self.api.get("persistentvolumeclaims", SANDBOX_NS, claim)
        return self.node_of(sandbox_id).kubelet.volume_dir(pvc)

    def close(self):
        """Stops everything; returns (ok, report) where report holds the logs of anything that
        did not exit cleanly (a sanitizer report makes a non-zero exit)."""
        report = []
        for fe in self.frontends:
            if fe.proc is None:
                continue
            rc = fe.stop()
            if rc != 0:
                report.append(f"frontend exited {rc}:\n{fe.log()[-3000:]}")
        for n in self.nodes:
            rc, tail = n.close()
            if rc != 0:
                report.append(f"agent on {n.name} exited {rc}:\n{tail}")
        self.api.stop()
        if self.spawner_image_dir:
            shutil.rmtree(self.spawner_image_dir, ignore_errors=True)
        if not report:
            shutil.rmtree(self.dir, ignore_errors=True)
        return not report, "\n".join(report)
