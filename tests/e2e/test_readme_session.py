"""Runs the computectl session shown in README.md, against a real frontend and node agent, and
checks that every command prints what the README says it prints.

The session is the ```console block between <!-- readme-session:begin --> and
<!-- readme-session:end -->: lines starting with "$ " are commands (run in one bash, in order,
in a scratch directory, with build/bin first on PATH and TMPDIR in the scratch directory), the
lines after each are its expected output; "…" in an expected line matches anything. The files
the session makes stay out of the directory it starts in (the checkout, for a reader).

Usage: test_readme_session.py BUILD_DIR SOURCE_DIR"""
import os
import re
import subprocess
import sys
import tempfile
import unittest
import uuid

from agent_fixture import AgentProcess
import testmain
from test_frontend import Frontend

BUILD_DIR, SOURCE_DIR = sys.argv[1], sys.argv[2]


def readme_session():
    with open(os.path.join(SOURCE_DIR, "README.md")) as f:
        text = f.read()
    block = re.search(r"<!-- readme-session:begin -->\s*```console\n(.*?)```\s*"
                      r"<!-- readme-session:end -->", text, re.S)
    if not block:
        raise AssertionError("README.md has no readme-session block")
    steps = []
    for line in block.group(1).splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def matches(pattern, line):
    regex = ".*".join(re.escape(part) for part in pattern.split("…"))
    return re.fullmatch(regex, line) is not None


class ReadmeSessionTest(unittest.TestCase):
    def setUp(self):
        self.agent = AgentProcess(BUILD_DIR)
        self.fe = Frontend([self.agent])
        self.scratch = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.fe.stop()
        os.unlink(self.fe.log_path)
        rc, tail = self.agent.cleanup()
        self.scratch.cleanup()
        self.assertEqual(rc, 0, tail)

    def test_readme_session(self):
        steps = readme_session()
        self.assertGreaterEqual(len(steps), 5)
        marker = "@@step-" + uuid.uuid4().hex
        script = ["set -e"]
        for i, (cmd, _) in enumerate(steps):
            script += [f"echo '{marker} {i}'", cmd]
        tmpdir = os.path.join(self.scratch.name, "tmp")
        start = os.path.join(self.scratch.name, "checkout")
        os.mkdir(tmpdir)
        os.mkdir(start)
        env = dict(os.environ, COMPUTE_ADDR=self.fe.address, TMPDIR=tmpdir,
                   PATH=os.path.join(BUILD_DIR, "bin") + ":" + os.environ["PATH"])
        run = subprocess.run(["bash", "-c", "\n".join(script)], cwd=start, env=env,
                             capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, f"session failed:\n{run.stdout}\n{run.stderr}")
        self.assertEqual(os.listdir(start), [], "the session wrote into the directory it "
                                               "started in (a reader's checkout)")
        outputs = re.split(rf"^{marker} \d+\n", run.stdout, flags=re.M)[1:]
        self.assertEqual(len(outputs), len(steps), run.stdout)
        for (cmd, expected), got in zip(steps, outputs):
            got_lines = got.splitlines()
            with self.subTest(command=cmd):
                self.assertEqual(len(got_lines), len(expected),
                                 f"$ {cmd}\nexpected:\n" + "\n".join(expected) +
                                 "\ngot:\n" + got)
                for pattern, line in zip(expected, got_lines):
                    self.assertTrue(matches(pattern, line),
                                    f"$ {cmd}\nexpected: {pattern!r}\ngot:      {line!r}")


if __name__ == "__main__":
    testmain.main(sys.argv[:1] + sys.argv[3:])
