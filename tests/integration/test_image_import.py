"""`compute-nodeagent image` against a real agent and runsc: a two-layer image made here from
Debian's static busybox (package busybox-static), as a docker save tarball and as an OCI image
layout, is imported both ways; sandboxes of each run commands and see the second layer's
whiteouts. A hostile tarball is refused and leaves nothing; list and rm work. A third image,
with the host's coreutils ls, shows `ls -l` clean on symlinks (compute-init's xattr filter).

The tarballs are made with python's tarfile, hashlib and json: no docker needed.

Usage: test_image_import.py BUILD_DIR [unittest args]"""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

from agent_fixture import AgentProcess
import testmain

BUILD_DIR = sys.argv[1]
AGENT = os.path.join(BUILD_DIR, "bin", "compute-nodeagent")
BUSYBOX = "/bin/busybox"
APPLETS = ["cat", "echo", "ls", "test", "sleep", "sh", "tr", "pwd", "id", "rm", "mkdir"]
MTIME = 1700000000


def tar_bytes(entries):
    """An uncompressed tar of (TarInfo, data or None) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in entries:
            info.mtime = MTIME
            if data is not None:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                tar.addfile(info)
    return buf.getvalue()


def entry(name, kind=tarfile.REGTYPE, mode=0o644, data=None, link=None, uid=0):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.uid, info.gid = kind, mode, uid, uid
    if link is not None:
        info.linkname = link
    return info, data


def busybox_layers():
    """Layer 1: busybox, its applets, /etc; layer 2: whiteouts and a new file."""
    with open(BUSYBOX, "rb") as f:
        busybox = f.read()
    layer1 = [entry("bin/", tarfile.DIRTYPE, 0o755), entry("etc/", tarfile.DIRTYPE, 0o755),
              entry("tmp/", tarfile.DIRTYPE, 0o1777), entry("root/", tarfile.DIRTYPE, 0o700),
              entry("opt/", tarfile.DIRTYPE, 0o755), entry("opt/data/", tarfile.DIRTYPE, 0o755),
              entry("bin/busybox", mode=0o755, data=busybox)]
    layer1 += [entry("bin/" + a, tarfile.SYMTYPE, 0o777, link="busybox")
               for a in APPLETS if a != "busybox"]
    layer1 += [entry("etc/passwd", data=b"root:x:0:0:root:/root:/bin/sh\n"),
               entry("etc/group", data=b"root:x:0:\n"),
               entry("etc/old", data=b"deleted by layer 2\n"),
               entry("opt/data/lower", data=b"hidden by layer 2\n"),
               entry("usr/bin/ids", tarfile.LNKTYPE, link="bin/busybox")]
    layer2 = [entry("etc/", tarfile.DIRTYPE, 0o755), entry("etc/.wh.old"),
              entry("etc/hello", data=b"hello from layer 2\n"),
              entry("opt/data/", tarfile.DIRTYPE, 0o755),
              entry("opt/data/upper", data=b"layer 2\n"),
              entry("opt/data/.wh..wh..opq")]
    return [tar_bytes(layer1), tar_bytes(layer2)]


def coreutils_ls_layer():
    """A layer over busybox_layers(): the host's coreutils ls (Debian 12, as the nodes are)
    with the libraries ldd names, and a root symlink, sbin -> bin. Busybox's ls asks for no
    extended attribute; coreutils' asks lgetxattr of every entry (SELinux's label)."""
    files = {"/bin/ls": "usr/bin/ls"}
    for line in subprocess.run(["ldd", "/bin/ls"], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        path = line.split("=>")[-1].split("(")[0].strip()
        if path.startswith("/"):
            files[path] = path.lstrip("/")
    entries, dirs = [entry("sbin", tarfile.SYMTYPE, 0o777, link="bin")], set()
    for src, name in sorted(files.items()):
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i]) + "/"
            if d not in dirs:
                dirs.add(d)
                entries.append(entry(d, tarfile.DIRTYPE, 0o755))
        with open(src, "rb") as f:
            entries.append(entry(name, mode=0o755, data=f.read()))
    return tar_bytes(entries)


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def config_json(layers):
    return json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + sha256(l) for l in layers]},
    }).encode()


def docker_save_tarball(path, layers, tag="busybox:test"):
    """The layout `docker save` wrote before docker 25: <id>/layer.tar and manifest.json."""
    config = config_json(layers)
    files = [(sha256(config) + ".json", config)]
    names = []
    for layer in layers:
        names.append(sha256(layer) + "/layer.tar")
        files.append((names[-1], layer))
    files.append(("manifest.json", json.dumps(
        [{"Config": files[0][0], "RepoTags": [tag], "Layers": names}]).encode()))
    with tarfile.open(path, "w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), MTIME
            tar.addfile(info, io.BytesIO(data))


def oci_layout(path, layers):
    """An OCI image layout directory, layers as tar+gzip, every blob named by its digest."""
    blobs = os.path.join(path, "blobs", "sha256")
    os.makedirs(blobs)

    def blob(data, media_type):
        digest = sha256(data)
        with open(os.path.join(blobs, digest), "wb") as f:
            f.write(data)
        return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}

    config = blob(config_json(layers), "application/vnd.oci.image.config.v1+json")
    gz = [blob(gzip.compress(l, mtime=0), "application/vnd.oci.image.layer.v1.tar+gzip")
          for l in layers]
    manifest = blob(json.dumps({"schemaVersion": 2,
                                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                                "config": config, "layers": gz}).encode(),
                    "application/vnd.oci.image.manifest.v1+json")
    manifest["platform"] = {"architecture": "amd64", "os": "linux"}
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [manifest]}, f)
    with open(os.path.join(path, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)


def image_cmd(*args):
    return subprocess.run([AGENT, "image"] + list(args), capture_output=True, text=True,
                          timeout=300)


class ImageImportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp(prefix="cs-img-", dir="/tmp")
        cls.images = os.path.join(cls.work, "images")
        layers = busybox_layers()
        cls.tarball = os.path.join(cls.work, "busybox.tar")
        docker_save_tarball(cls.tarball, layers)
        cls.layout = os.path.join(cls.work, "oci")
        oci_layout(cls.layout, layers)
        cls.times = {}
        for name, src in (("busybox:docker", cls.tarball), ("busybox:oci", cls.layout)):
            t0 = time.monotonic()
            r = image_cmd("import", "--images-dir", cls.images, src, name)
            cls.times[name] = time.monotonic() - t0
            if r.returncode != 0:
                raise AssertionError(f"import {src} failed ({r.returncode}): {r.stderr}")
            print(r.stdout.strip(), file=sys.stderr)
        cls.agent = AgentProcess(BUILD_DIR, "--images-dir", cls.images)
        cls.c = cls.agent.client

    @classmethod
    def tearDownClass(cls):
        try:
            rc, tail = cls.agent.cleanup()
            if rc != 0:
                raise AssertionError(f"agent exited {rc}:\n{tail}")
        finally:
            shutil.rmtree(cls.work, ignore_errors=True)

    def run_in(self, sid, script):
        out, err, done, _ = self.c.exec(sid, "sh", "-c", script)
        self.assertEqual(done.exit_code, 0, f"{script!r}: {err!r}\nagent log:\n"
                         + self.agent.log()[-3000:])
        return out.decode()

    def check_sandbox(self, image):
        try:
            sid = self.agent.new_sandbox(image=image)
        except Exception as e:
            raise AssertionError(f"{image}: {e}\nagent log:\n{self.agent.log()[-3000:]}")
        out = self.run_in(sid, "cat /etc/hello; test -e /etc/old && echo old-present; "
                          "test -e /opt/data/lower && echo lower-present; cat /opt/data/upper; "
                          "test -x /usr/bin/ids && echo hardlink; echo $((6*7)); pwd")
        self.assertEqual(out, "hello from layer 2\nlayer 2\nhardlink\n42\n/workspace\n")
        top = self.run_in(sid, "echo /*").split()
        for d in ("/bin", "/etc", "/opt", "/tmp", "/usr", "/workspace"):
            self.assertIn(d, top)
        # The workspace is mounted: what the sandbox writes there the agent reads back.
        self.run_in(sid, "echo from-the-sandbox > /workspace/out.txt")
        got = self.c.ReadFile(self.c.pb.ReadFileRequest(ref=self.c.ref(sid), path="out.txt"),
                              timeout=30)
        self.assertEqual(got.data, b"from-the-sandbox\n")
        # The image is read-only underneath: writes go to the sandbox's memory overlay.
        self.run_in(sid, "echo scratch > /etc/hello")
        with open(os.path.join(self.images, image, "etc", "hello")) as f:
            self.assertEqual(f.read(), "hello from layer 2\n")

    def test_docker_save_tarball(self):
        self.check_sandbox("busybox:docker")

    def test_oci_layout(self):
        self.check_sandbox("busybox:oci")

    def test_ls_l_on_symlinks_is_clean(self):
        # compute-init's lgetxattr filter (docs/security.md) holds in an imported image too:
        # gVisor 20240729 answers EBADF on a symlink, and ls -l printed it for each.
        layout = os.path.join(self.work, "oci-ls")
        oci_layout(layout, busybox_layers() + [coreutils_ls_layer()])
        r = image_cmd("import", "--images-dir", self.images, layout, "coreutils-ls:oci")
        self.assertEqual(r.returncode, 0, r.stderr)
        try:
            sid = self.agent.new_sandbox(image="coreutils-ls:oci")
            out, err, done, _ = self.c.exec(sid, "sh", "-c",
                                            "ln -s /etc/hello link && ln -s nowhere dangling && "
                                            "/usr/bin/ls -la / && /usr/bin/ls -l link dangling /bin")
            self.assertEqual((done.exit_code, err), (0, b""),
                             out.decode() + "\nagent log:\n" + self.agent.log()[-3000:])
            for want in (b"sbin -> bin", b"link -> /etc/hello", b"dangling -> nowhere",
                         b"sh -> busybox"):
                self.assertIn(want, out)
            self.c.DestroySandbox(self.c.pb.DestroySandboxRequest(ref=self.c.ref(sid)), timeout=30)
        finally:
            image_cmd("rm", "--images-dir", self.images, "coreutils-ls:oci")

    def test_rootfs_on_disk(self):
        root = os.path.join(self.images, "busybox:oci")
        st = os.lstat(os.path.join(root, "bin", "busybox"))
        self.assertEqual((st.st_mode & 0o7777, int(st.st_mtime)), (0o755, MTIME))
        self.assertEqual(os.readlink(os.path.join(root, "bin", "sh")), "busybox")
        self.assertEqual(os.lstat(os.path.join(root, "tmp")).st_mode & 0o7777, 0o1777)
        self.assertEqual(os.lstat(os.path.join(root, "usr", "bin", "ids")).st_ino, st.st_ino)
        self.assertFalse(os.path.lexists(os.path.join(root, "etc", ".wh.old")))
        print("import times: " + ", ".join(f"{k} {v:.2f} s" for k, v in self.times.items()),
              file=sys.stderr)

    def test_hostile_tarball_is_refused(self):
        before = sorted(os.listdir(self.images))
        bad = os.path.join(self.work, "hostile.tar")
        docker_save_tarball(bad, [tar_bytes([entry("etc/", tarfile.DIRTYPE, 0o755),
                                             entry("../escape", data=b"owned\n")])])
        r = image_cmd("import", "--images-dir", self.images, bad, "hostile:1")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stderr, r"^compute-nodeagent image: layer 1/1 \(.*\): "
                                   r"entry '\.\./escape': its path has a '\.\.' component\n$")
        self.assertEqual(sorted(os.listdir(self.images)), before)
        self.assertFalse(os.path.lexists(os.path.join(self.work, "escape")))
        # A name that exists is never replaced; a bad name is a usage error.
        r = image_cmd("import", "--images-dir", self.images, self.tarball, "busybox:oci")
        self.assertEqual(r.returncode, 1)
        self.assertIn("already exists", r.stderr)
        self.assertEqual(image_cmd("import", "--images-dir", self.images, self.tarball,
                                   "../x").returncode, 2)
        self.assertEqual(image_cmd("frobnicate").returncode, 2)
        self.assertEqual(image_cmd("--help").returncode, 0)

    def test_list_and_rm(self):
        r = image_cmd("import", "--images-dir", self.images, self.tarball, "busybox:rm-me")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertRegex(r.stdout, r"^imported busybox:rm-me: 2 layers, \d+ files, "
                                   r"[0-9.]+ MiB in [0-9.]+ m?s\n$")
        listed = [line.split()[0] for line in image_cmd(
            "list", "--images-dir", self.images).stdout.splitlines()]
        self.assertEqual(listed, ["busybox:docker", "busybox:oci", "busybox:rm-me"])
        r = image_cmd("rm", "--images-dir", self.images, "busybox:rm-me")
        self.assertEqual((r.returncode, r.stdout), (0, "removed busybox:rm-me\n"), r.stderr)
        self.assertFalse(os.path.lexists(os.path.join(self.images, "busybox:rm-me")))
        self.assertEqual([n for n in os.listdir(self.images) if n.startswith(".")], [])
        r = image_cmd("rm", "--images-dir", self.images, "busybox:rm-me")
        self.assertEqual(r.returncode, 1)
        self.assertIn("no image 'busybox:rm-me' in ", r.stderr)
        # The environment gives the default directory, as it does to the agent.
        env = dict(os.environ, COMPUTE_IMAGES_DIR=self.images)
        out = subprocess.run([AGENT, "image", "list"], capture_output=True, text=True, env=env)
        self.assertIn("busybox:oci", out.stdout)


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[2:])
