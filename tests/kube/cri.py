"""A CRI-like runtime for tests: starts gVisor pods with runsc the way containerd's runsc
shim (containerd-shim-runsc-v1) does on a Kubernetes node, so that what it leaves under the
runsc root is what the node agent finds there on a real node.

What containerd (CRI plugin) + the runsc shim do for a pod, and what this module does:

- Images: a real node pulls the image and containerd unpacks it into a snapshot that
  becomes the container's rootfs. Here an image is a root filesystem directory
  `<images_dir>/<image reference>` (images_dir: the constructor's argument, else
  $COMPUTE_TEST_IMAGES_DIR, else /var/lib/compute/images; the reference normalized as
  containerd does, less "docker.io/library/": "debian" is debian:latest), the same
  directories the agent's local mode uses (the default image, debian:bookworm-compute, is
  built by mmdebstrap: scripts/lib.sh cs_default_image). An image without its directory
  cannot be "pulled": run_pod raises ImagePullError before anything is made, and the simulated
  kubelet reports the container Waiting with reason ErrImagePull / ImagePullBackOff, as a
  kubelet does. Never the host's root: a sandbox must not see the node's files.
- RunPodSandbox: the kubelet makes the pod cgroup (cgroupfs driver:
  <kubepods>/<qos>/pod<uid>, with the pod's CPU quota and memory limit); containerd writes an
  OCI bundle for the pause container (id = the pod sandbox id, 64 hex) with the annotations
      io.kubernetes.cri.container-type      = "sandbox"
      io.kubernetes.cri.sandbox-id          = <its own id>
      io.kubernetes.cri.sandbox-name / sandbox-namespace / sandbox-uid / sandbox-log-directory
  and linux.cgroupsPath = "<pod cgroup>/<pause id>", and the shim runs
  `runsc --root /run/containerd/runsc/k8s.io create --bundle B <id>` then `runsc start <id>`.
  This makes the runsc sandbox (one gVisor kernel for the whole pod; its host processes live
  in the pause container's cgroup, so the pod cgroup accounts for all of the pod).
  Here: the pod cgroup is made under every cgroup hierarchy with the limits (what the kubelet
  does), the pause bundle's process is `sleep infinity` from the pause image (containerd's
  registry.k8s.io/pause is not on these machines; the default image has `sleep`), and the
  pause container is started with create + start like the shim.
- CreateContainer/StartContainer: containerd writes the app container's bundle with
      io.kubernetes.cri.container-type = "container"
      io.kubernetes.cri.sandbox-id     = <pause id>
      io.kubernetes.cri.sandbox-name / sandbox-namespace / sandbox-uid
      io.kubernetes.cri.container-name = <name>, io.kubernetes.cri.image-name = <image>
  the pod's volume mounts (bind mounts, source = the host path under
  /var/lib/kubelet/pods/<uid>/volumes/...), the container's resources and
  linux.cgroupsPath = "<pod cgroup>/<container id>"; the shim runs `runsc create` + `runsc
  start` with the same root, and runsc, seeing container-type "container" and the sandbox-id
  annotation, starts the container inside the pause container's sandbox instead of making a
  new one. Here: the same, with the image's directory as the root and the workspace
  directories the caller gives as the volume mounts.
- The root: `"readonly": false` in the bundle with runsc's `--overlay2=root:memory` (what
  the agent's local mode does, nodeagent/runtime_runsc.c): the container may write anywhere
  in its root (/tmp, /etc, installs), the writes go to a memory overlay of its own and
  vanish with it, and the image directory, shared by every pod, is never written.
- Network: `--network=none` (a real node uses the CNI network namespace of the pod).

First verified with the Debian 12 runsc (0.0~20221219.0, ptrace, cgroup v1), still so with
Debian 13's (0.0~20240729.0, systrap, directfs): the multi-container join through these
annotations works: `runsc list` shows both containers running with the same pid (the
sandbox's), `runsc exec <app id>` runs in the app container (its init is pid 1 there, its
bind mounts are there and shared both ways with the host; the pause container does not see
them), and every host process of the pod (sandbox, gofers) is in the pause container's
cgroup <pod cgroup>/<pause id>; the app container's cgroup is made but stays empty. So usage
must be read from the pod cgroup, as the agent does. Nothing had to be done differently from
containerd. Quirks found:
- runsc's `list --format=json` prints each container's annotations (besides id, pid,
  status, bundle, created, owner); the agent still reads the bundle's config.json, which
  every version has.
- A container whose init exited stays in `runsc list` as "stopped" (pid -1) until deleted;
  `runsc exec` into it fails.

Usage (as a library):
    cri = CriRuntime(runsc_root, state_dir, "/compute-test-x/kubepods")  # images_dir=...
    pause_id, app_id = cri.run_pod("ns", "pod", uid, mounts={"/workspace": host_dir},
                                   cpu_millis=500, memory_bytes=256 << 20,
                                   image="debian:bookworm-compute")
    cri.image_rootfs("no-such:image")   # raises ImagePullError (run_pod too)
    cri.state(app_id)       # {"id":..., "status": "running", "pid":..., "bundle":...} or None
    cri.stop_container(app_id)   # the app container's process exits (status "stopped")
    cri.stop_pod(pause_id)  # kill + delete both containers, remove the pod cgroup
    cri.cleanup()           # every container under the root, every cgroup under the prefix
"""
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time

RUNSC = os.environ.get("RUNSC", "runsc")
APP_COMMAND = ["/bin/sh", "-c", "trap 'exit 0' TERM; while :; do sleep 3600 & wait $!; done"]
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
        "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_MKNOD",
        "CAP_AUDIT_WRITE", "CAP_SETFCAP"]
ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"]
CGROUP_ROOT = "/sys/fs/cgroup"
# The default image (a root filesystem directory built by mmdebstrap: scripts/lib.sh
# cs_default_image); also the pause image.
DEFAULT_IMAGE = "debian:bookworm-compute"
# One path component of an image reference ("registry.example/team/img:1", "img@sha256:..").
_IMAGE_COMPONENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._:@-]*$")


def default_images_dir():
    return os.environ.get("COMPUTE_TEST_IMAGES_DIR") or "/var/lib/compute/images"


def normalize_reference(image):
    """The reference as containerd names the image (and its image-name annotation):
    "debian:x" -> "docker.io/library/debian:x", ":latest" when no tag or digest."""
    first, _, rest = image.partition("/")
    if not rest or ("." not in first and ":" not in first and first != "localhost"):
        image = ("docker.io/library/" if not rest else "docker.io/") + image
    last = image.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in last:
        image += ":latest"
    return image


def cgroup_v2():
    return os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers"))


def cgroup_hierarchies():
    """Host directories of every cgroup hierarchy (v1: one per mounted controller set)."""
    if cgroup_v2():
        return [CGROUP_ROOT]
    out = []
    for name in sorted(os.listdir(CGROUP_ROOT)):
        path = os.path.join(CGROUP_ROOT, name)
        if os.path.isdir(path) and not os.path.islink(path) and \
                os.path.exists(os.path.join(path, "cgroup.procs")):
            out.append(path)
    return out


def _rmdir_tree(path):
    """Removes a cgroup directory and its children (deepest first); cgroups left busy (a
    process still in them) stay."""
    if not os.path.isdir(path):
        return
    for dirpath, dirnames, _ in os.walk(path, topdown=False):
        for d in dirnames:
            try:
                os.rmdir(os.path.join(dirpath, d))
            except OSError:
                pass
    try:
        os.rmdir(path)
    except OSError:
        pass


def remove_cgroup(path, wait_s=0.0):
    """Removes the cgroup `path` ("/a/b") and everything under it in every hierarchy, waiting
    up to wait_s (per hierarchy) for processes still exiting; busy ones stay."""
    for h in cgroup_hierarchies():
        deadline = time.monotonic() + wait_s
        while True:
            _rmdir_tree(h + path)
            if not os.path.isdir(h + path) or time.monotonic() >= deadline:
                break
            time.sleep(0.1)


class CriError(RuntimeError):
    pass


class ImagePullError(CriError):
    """The image is not on this node (a kubelet's ErrImagePull)."""


class CriRuntime:
    def __init__(self, runsc_root, state_dir, cgroup_prefix, runsc=RUNSC, images_dir=None,
                 pause_image=DEFAULT_IMAGE, host_uds="open"):
        self.root = runsc_root
        # runsc.toml's `host-uds` on this node ("open": what the resident exec path needs,
        # docs/deploy.md; None: a node without it, where the agent falls back to runsc exec).
        self.host_uds = host_uds
        self.state_dir = state_dir
        self.prefix = "/" + cgroup_prefix.strip("/")
        self.runsc = runsc
        self.images_dir = os.path.abspath(images_dir or default_images_dir())
        self.pause_image = pause_image
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        os.makedirs(os.path.join(self.state_dir, "bundles"), exist_ok=True)
        os.makedirs(os.path.join(self.state_dir, "logs"), exist_ok=True)
        self.pods = {}  # pause id -> {"app": app id, "cgroup": pod cgroup path}

    # --- runsc ---

    def _runsc(self, *args, check=True, timeout=60, detached_log=None):
        # Stdin is an empty pipe, never /dev/null: runsc run and exec chown their stdio to
        # the sandbox's user, which would change the host's device (nodeagent/proc.c).
        cmd = [self.runsc, "--root", self.root] + list(args)
        if detached_log:
            # create/run leave the sandbox and gofer running with our stdio: a file, not a
            # pipe, or we would wait for them forever.
            with open(detached_log, "ab") as log:
                p = subprocess.run(cmd, input=b"", stdout=log, stderr=log, timeout=timeout)
            if check and p.returncode != 0:
                with open(detached_log, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise CriError(f"{' '.join(cmd)} failed ({p.returncode}): {tail}")
            return ""
        p = subprocess.run(cmd, input="", capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise CriError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
        return p.stdout

    def _create_start(self, cid, bundle):
        log = os.path.join(self.state_dir, "logs", cid + ".log")
        # The flags the agent's local mode uses; the shim passes the runsc.toml options the
        # same way, as global flags of every command.
        flags = ["--network=none", "--overlay2=root:memory"]
        if self.host_uds:
            flags.append(f"--host-uds={self.host_uds}")
        self._runsc(*flags, "create", "--bundle", bundle, cid, detached_log=log)
        self._runsc(*flags, "start", cid, detached_log=log)

    # --- images ---

    def image_rootfs(self, image):
        """The root filesystem directory of an image reference: <images_dir>/<reference>,
        the reference normalized as containerd does, less "docker.io/library/" ("debian" ->
        debian:latest). ImagePullError if this node has no such image, or the reference is
        not one (it could then name something else than an image directory: never the
        host's root or anything outside images_dir)."""
        name = normalize_reference(image or "")
        if name.startswith("docker.io/library/"):
            name = name[len("docker.io/library/"):]
        parts = name.split("/")
        if not name or len(name) > 255 or \
                not all(_IMAGE_COMPONENT.match(c) for c in parts):
            raise ImagePullError(f'failed to pull image "{image}": not a valid image reference')
        base = os.path.realpath(self.images_dir)
        path = os.path.join(self.images_dir, *parts)
        real = os.path.realpath(path)
        if base == "/" or not real.startswith(base + "/") or os.path.islink(path) or \
                not os.path.isdir(path):
            raise ImagePullError(
                f'failed to pull and unpack image "{image}": not found: no image directory '
                f'{path} on this node')
        return real

    # --- bundles ---

    def _bundle(self, cid, process_args, annotations, mounts, cgroups_path, resources,
                image_rootfs, hostname):
        bundle = os.path.join(self.state_dir, "bundles", cid)
        os.makedirs(bundle, exist_ok=True)
        oci_mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
        ]
        for dest, src in sorted((mounts or {}).items()):
            # What containerd makes of a volumeMount (rprivate: the kubelet's default
            # propagation); a value (source, True) is a readOnly one.
            src, ro = src if isinstance(src, tuple) else (src, False)
            oci_mounts.append({"destination": dest, "type": "bind", "source": src,
                               "options": ["rbind", "rprivate", "ro" if ro else "rw"]})
        config = {
            "ociVersion": "1.0.2-dev",
            "process": {
                "terminal": False, "user": {"uid": 0, "gid": 0}, "args": process_args,
                "env": ENV + [f"HOSTNAME={hostname}"], "cwd": "/",
                "capabilities": {"bounding": CAPS, "effective": CAPS, "permitted": CAPS},
                "noNewPrivileges": False,
            },
            # Not read-only: runsc's --overlay2=root:memory (_create_start) then takes every
            # write to the root into memory; image_rootfs itself is never written.
            "root": {"path": image_rootfs, "readonly": False},
            "hostname": hostname,
            "mounts": oci_mounts,
            "annotations": annotations,
            "linux": {
                "resources": resources,
                "cgroupsPath": cgroups_path,
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "network")],
                "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"],
            },
        }
        tmp = os.path.join(bundle, ".config.json.tmp")
        with open(tmp, "w") as f:
            json.dump(config, f, indent=1)
        os.rename(tmp, os.path.join(bundle, "config.json"))
        return bundle

    # --- the pod cgroup (the kubelet's part) ---

    def _pod_cgroup_make(self, pod_cgroup, cpu_millis, memory_bytes):
        quota = cpu_millis * 100 if cpu_millis else -1
        for h in cgroup_hierarchies():
            path = h + pod_cgroup
            os.makedirs(path, exist_ok=True)
            if cgroup_v2():
                if cpu_millis:
                    self._write(path, "cpu.max", f"{quota} 100000")
                if memory_bytes:
                    self._write(path, "memory.max", str(memory_bytes))
            elif os.path.exists(os.path.join(path, "cpu.cfs_quota_us")):
                if cpu_millis:
                    self._write(path, "cpu.cfs_period_us", "100000")
                    self._write(path, "cpu.cfs_quota_us", str(quota))
            elif os.path.exists(os.path.join(path, "memory.limit_in_bytes")) and memory_bytes:
                self._write(path, "memory.limit_in_bytes", str(memory_bytes))

    @staticmethod
    def _write(path, name, value):
        try:
            with open(os.path.join(path, name), "w") as f:
                f.write(value)
        except OSError:
            pass  # a controller without that file on this kernel

    def _pod_cgroup_remove(self, pod_cgroup):
        remove_cgroup(pod_cgroup, wait_s=5)  # the sandbox's processes may still be exiting

    # --- the CRI-like API ---

    def run_pod(self, namespace, name, uid, mounts=None, cpu_millis=1000,
                memory_bytes=1 << 30, image=DEFAULT_IMAGE, container_name="sandbox",
                command=None, init_containers=()):
        """Starts the pod's pause container, runs its init containers one after the other to
        completion (each a container of the sandbox: {"name", "image", "command", "mounts"}),
        then starts its app container (container_name, whose root is `image`'s directory,
        running `command`, the pod's command and args, default a keep-alive shell) in one
        runsc sandbox. Returns (pause_id, app_id). ImagePullError (nothing made) when this
        node has no such image; CriError when an init container fails."""
        if mounts is None:
            mounts = {}
        # The images first, as the kubelet pulls before it creates anything.
        pause_rootfs = self.image_rootfs(self.pause_image)
        image_rootfs = self.image_rootfs(image)
        init_rootfs = [self.image_rootfs(ic["image"]) for ic in init_containers]
        pause_id = secrets.token_hex(32)
        app_id = secrets.token_hex(32)
        pod_cgroup = f"{self.prefix}/pod{uid}"
        self._pod_cgroup_make(pod_cgroup, cpu_millis, memory_bytes)
        self.pods[pause_id] = {"app": app_id, "cgroup": pod_cgroup}
        common = {
            "io.kubernetes.cri.sandbox-id": pause_id,
            "io.kubernetes.cri.sandbox-name": name,
            "io.kubernetes.cri.sandbox-namespace": namespace,
            "io.kubernetes.cri.sandbox-uid": uid,
        }
        pause_ann = dict(common)
        pause_ann.update({
            "io.kubernetes.cri.container-type": "sandbox",
            "io.kubernetes.cri.sandbox-log-directory": f"/var/log/pods/{namespace}_{name}_{uid}",
        })
        quota = cpu_millis * 100 if cpu_millis else 0
        try:
            pause_bundle = self._bundle(
                pause_id, ["/bin/sleep", "infinity"], pause_ann, {},
                f"{pod_cgroup}/{pause_id}", {"cpu": {"shares": 2}}, pause_rootfs, name)
            self._create_start(pause_id, pause_bundle)
            for ic, rootfs in zip(init_containers, init_rootfs):
                self._run_init(common, pod_cgroup, ic, rootfs, name)
            app_ann = dict(common)
            app_ann.update({
                "io.kubernetes.cri.container-type": "container",
                "io.kubernetes.cri.container-name": container_name,
                "io.kubernetes.cri.image-name": normalize_reference(image),
            })
            resources = {"cpu": {"shares": max(2, cpu_millis * 1024 // 1000)}}
            if quota:
                resources["cpu"].update({"quota": quota, "period": 100000})
            if memory_bytes:
                resources["memory"] = {"limit": memory_bytes}
            app_bundle = self._bundle(app_id, command or APP_COMMAND, app_ann, mounts,
                                      f"{pod_cgroup}/{app_id}", resources, image_rootfs, name)
            self._create_start(app_id, app_bundle)
        except Exception:
            self.stop_pod(pause_id)
            raise
        return pause_id, app_id

    def _run_init(self, common, pod_cgroup, ic, rootfs, hostname):
        """One init container: created in the pod's sandbox, waited for, deleted. CriError
        when it does not exit 0 within a minute."""
        cid = secrets.token_hex(32)
        ann = dict(common)
        ann.update({"io.kubernetes.cri.container-type": "container",
                    "io.kubernetes.cri.container-name": ic["name"],
                    "io.kubernetes.cri.image-name": normalize_reference(ic["image"])})
        bundle = self._bundle(cid, ic["command"], ann, ic.get("mounts") or {},
                              f"{pod_cgroup}/{cid}", {"cpu": {"shares": 2}}, rootfs, hostname)
        try:
            self._create_start(cid, bundle)
            p = subprocess.run([self.runsc, "--root", self.root, "wait", cid], input="",
                               capture_output=True, text=True, timeout=60)
            try:
                status = json.loads(p.stdout).get("exitStatus", -1) if p.returncode == 0 else -1
            except ValueError:
                status = -1
            # runsc wait reports a wait(2) status: 0 is a clean exit.
            if status != 0:
                raise CriError(f"init container {ic['name']} failed (status {status}): "
                               f"{p.stderr.strip()[-500:]}")
        finally:
            self._runsc("delete", "-force", cid, check=False)
            shutil.rmtree(bundle, ignore_errors=True)

    def list(self):
        """runsc's view of the root: [{"id", "pid", "status", "bundle", ...}]."""
        out = self._runsc("list", "--format=json")
        doc = json.loads(out) if out.strip() else []
        return doc or []

    def state(self, cid):
        """The container's runsc state ({"id", "status", "pid", "bundle", ...}), None if it
        does not exist."""
        cmd = [self.runsc, "--root", self.root, "state", cid]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            if "does not exist" in p.stderr or "not found" in p.stderr:
                return None
            raise CriError(f"runsc state {cid}: {p.stderr.strip()}")
        return json.loads(p.stdout)

    def stop_container(self, cid, sig=signal.SIGKILL, wait_s=20):
        """Kills the container's init (as when its process exits or is OOM-killed): the
        container stays, "stopped", until deleted (a Never-restart pod's container)."""
        self._runsc("kill", cid, str(int(sig)), check=False)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            st = self.state(cid)
            if st is None or st.get("status") == "stopped":
                return
            time.sleep(0.1)
        raise CriError(f"container {cid} did not stop")

    def stop_pod(self, pause_id):
        """StopPodSandbox + RemovePodSandbox: kills and deletes the app container and the
        pause container (the sandbox), removes their bundles and the pod cgroup."""
        pod = self.pods.pop(pause_id, None)
        ids = []
        if pod:
            ids.append(pod["app"])
        else:  # a pod from another CriRuntime object: find its containers by annotation
            for c in self.list():
                ann = self._annotations(c.get("bundle", ""))
                if ann.get("io.kubernetes.cri.sandbox-id") == pause_id and c["id"] != pause_id:
                    ids.append(c["id"])
        ids.append(pause_id)
        for cid in ids:
            self._runsc("kill", cid, "KILL", check=False)
            self._runsc("delete", "-force", cid, check=False)
            shutil.rmtree(os.path.join(self.state_dir, "bundles", cid), ignore_errors=True)
        if pod:
            self._pod_cgroup_remove(pod["cgroup"])

    @staticmethod
    def _annotations(bundle):
        try:
            with open(os.path.join(bundle, "config.json")) as f:
                return json.load(f).get("annotations", {}) or {}
        except (OSError, ValueError):
            return {}

    def cleanup(self):
        """Deletes every container under the runsc root (app containers first) and every
        cgroup under the prefix."""
        try:
            containers = self.list()
        except CriError:
            containers = []
        containers.sort(key=lambda c: self._annotations(c.get("bundle", "")).get(
            "io.kubernetes.cri.container-type") == "sandbox")
        for c in containers:
            self._runsc("kill", c["id"], "KILL", check=False)
            self._runsc("delete", "-force", c["id"], check=False)
        for pause_id in list(self.pods):
            self.pods.pop(pause_id)
        remove_cgroup(self.prefix, wait_s=5)
        # The prefix's own parents, if this runtime made them and they are empty now.
        parent = os.path.dirname(self.prefix)
        while parent not in ("", "/"):
            for h in cgroup_hierarchies():
                try:
                    os.rmdir(h + parent)
                except OSError:
                    pass
            parent = os.path.dirname(parent)
