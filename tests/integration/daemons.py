"""Daemons a test case starts itself, in a directory of its own, with their logs there; every
one still running is stopped (SIGTERM, then SIGKILL after 20 s) and the directory removed when
the test ends. Mixed into a unittest.TestCase: call daemons_setup(prefix) in setUp and
daemons_teardown() in tearDown."""
import os
import shutil
import subprocess
import tempfile

from mounts import unmount_under


class Daemons:
    def daemons_setup(self, build_dir, prefix):
        self.build_dir = build_dir
        self.dir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
        self.procs = []

    def daemons_teardown(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        unmount_under(self.dir)  # an agent's workspace volumes (and their loop devices)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log(self, name):
        """A daemon's log so far (name: its log file in the test's directory)."""
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read().decode(errors="replace")

    def start(self, binary, *args, log="agent.log"):
        """Starts build/bin/BINARY with args, its output appended to the log file log."""
        with open(os.path.join(self.dir, log), "ab") as out:
            p = subprocess.Popen([os.path.join(self.build_dir, "bin", binary)] + list(args),
                                 stdout=out, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p
