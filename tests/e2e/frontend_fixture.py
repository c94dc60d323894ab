"""A real compute-frontend process for the end-to-end tests: started on a free loopback port
with the arguments a subclass gives (argv_tail), ready once it answers a validation error,
stopped with SIGTERM; its log, fds and threads for the leak checks. And checked_metrics, a
daemon's /metrics page as the tests read it."""
import os
import signal
import subprocess
import time
import urllib.request

import grpc

from agent_client import code_of
from agent_fixture import free_port
from compute_client import Compute


def checked_metrics(case, port):
    """A daemon's /metrics page on port as {'name{labels}': value}; the test case fails
    unless promtool accepts the page."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        page = r.read().decode()
    check = subprocess.run(["promtool", "check", "metrics"], input=page.encode(),
                           capture_output=True)
    case.assertEqual(check.returncode, 0, check.stdout + check.stderr)
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in page.splitlines() if line and not line.startswith("#")}


class FrontendProcess:
    def __init__(self, build_dir, log_dir, start=True):
        self.build_dir = build_dir
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"cs-frontend-{self.port}.log")
        self.proc = None
        if start:
            self.start()

    def argv_tail(self):
        """The flags after --listen; a subclass says how it schedules."""
        raise NotImplementedError

    def argv(self):
        return [os.path.join(self.build_dir, "bin", "compute-frontend"), "--listen",
                self.address, "--shutdown-grace-ms", "3000"] + self.argv_tail()

    def client(self):
        """A client of the public port (a subclass serving TLS gives one with credentials)."""
        return Compute(self.build_dir, self.address)

    def start(self, timeout=60):
        log = open(self.log_path, "ab")
        since = log.tell()
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + timeout
        client = self.client()
        try:
            # Serving once a validation error comes back (nothing needs an agent for it) and
            # the "serving on" line is logged (the seccomp filter and its line come after the
            # port opens).
            while (code_of(client.describe, "x") != grpc.StatusCode.INVALID_ARGUMENT or
                   b" serving on " not in self.log_bytes(since)):
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    if self.proc.poll() is None:
                        self.proc.kill()
                        self.proc.wait()
                    raise RuntimeError("frontend did not start:\n" + self.log())
                time.sleep(0.05)
        finally:
            client.close()

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=60)
        return self.proc.returncode

    def log(self):
        return self.log_bytes().decode(errors="replace")

    def log_bytes(self, since=0):
        with open(self.log_path, "rb") as f:
            f.seek(since)
            return f.read()

    def sanitizer_report(self):
        """The end of the log if a sanitizer reported anything, else ''."""
        log = self.log()
        if any(m in log for m in ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                                  "runtime error:")):
            return log[-4000:]
        return ""

    def fd_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def thread_count(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def thread_names(self):
        return sorted(open(f"/proc/{self.proc.pid}/task/{t}/comm").read().strip()
                      for t in os.listdir(f"/proc/{self.proc.pid}/task"))
