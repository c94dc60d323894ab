"""The Python suites' runner (testmain.py): a skip is never a pass, in CI it is a failure, an
allowed skip is named, a run of nothing fails. No root or runsc needed.

Usage: test_testmain.py [unittest args]"""
import io
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import testmain

HERE = os.path.dirname(os.path.abspath(__file__))


def cases():
    """TestCase classes to run inside the tests (made here so that this module's own run does
    not collect them)."""
    class Passing(unittest.TestCase):
        def test_ok(self):
            pass

    class Skipping(unittest.TestCase):
        def test_ok(self):
            pass

        def test_skips(self):
            self.skipTest("kubectl is not installed")

    @unittest.skip("needs root")
    class SkippedClass(unittest.TestCase):
        def test_a(self):
            pass

        def test_b(self):
            pass

    class Failing(unittest.TestCase):
        def test_skips(self):
            self.skipTest("no runsc")

        def test_fails(self):
            self.fail("boom")

    return {c.__name__: c for c in (Passing, Skipping, SkippedClass, Failing)}


def run(*names):
    classes = cases()
    suite = unittest.TestSuite(unittest.defaultTestLoader.loadTestsFromTestCase(classes[n])
                               for n in names)
    result = unittest.TestResult()
    suite.run(result)
    return result


def verdict(names, ci, allowed=None):
    out = io.StringIO()
    return testmain.verdict(run(*names), ci, allowed, out), out.getvalue()


class VerdictTest(unittest.TestCase):
    def test_all_passed(self):
        self.assertEqual(verdict(["Passing"], ci=False), (0, ""))
        self.assertEqual(verdict(["Passing"], ci=True), (0, ""))

    def test_skip_is_not_a_pass(self):
        code, out = verdict(["Passing", "Skipping"], ci=False)
        self.assertEqual(code, testmain.SKIP_EXIT)
        self.assertIn("SKIPPED: Skipping.test_skips: kubectl is not installed", out)

    def test_skip_fails_in_ci(self):
        code, out = verdict(["Passing", "Skipping"], ci=True)
        self.assertEqual(code, 1)
        self.assertIn("SKIPPED: Skipping.test_skips", out)
        self.assertIn("1 test(s) skipped in CI", out)

    def test_allowed_skip_is_named(self):
        allowed = {"Skipping.test_skips": "the plain renderer covers it"}
        code, out = verdict(["Skipping"], ci=True, allowed=allowed)
        self.assertEqual(code, 0)
        self.assertIn("SKIPPED (allowed: the plain renderer covers it): Skipping.test_skips", out)
        # Allowing another test does not allow this one.
        self.assertEqual(verdict(["Skipping"], ci=True, allowed={"Skipping.test_ok": "x"})[0], 1)

    def test_skipped_class_lists_every_test(self):
        code, out = verdict(["SkippedClass"], ci=False)
        self.assertEqual(code, testmain.SKIP_EXIT)
        self.assertIn("SKIPPED: SkippedClass.test_a: needs root", out)
        self.assertIn("SKIPPED: SkippedClass.test_b: needs root", out)
        self.assertEqual(verdict(["SkippedClass"], ci=True)[0], 1)

    def test_failure_wins_over_skip(self):
        self.assertEqual(verdict(["Failing"], ci=False)[0], 1)

    def test_nothing_ran(self):
        code, out = verdict([], ci=False)
        self.assertEqual(code, 1)
        self.assertIn("no test ran", out)

    def test_ci_values(self):
        for v in ("true", "1", "yes", "True", " TRUE "):
            self.assertTrue(testmain.in_ci({"CI": v}), v)
        for v in ("", "0", "false", "no", "FALSE"):
            self.assertFalse(testmain.in_ci({"CI": v}), v)
        self.assertFalse(testmain.in_ci({}))


class MainTest(unittest.TestCase):
    """main() in a real interpreter: the exit status ctest sees, with and without CI."""

    def run_suite(self, body, *args, ci=None):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "suite.py")
            with open(path, "w") as f:
                f.write("import sys, unittest, testmain\n" + textwrap.dedent(body)
                        + "\ntestmain.main(sys.argv)\n")
            env = dict(os.environ, PYTHONPATH=HERE)
            env.pop("CI", None)
            if ci is not None:
                env["CI"] = ci
            return subprocess.run([sys.executable, path, *args], env=env, capture_output=True,
                                  text=True, timeout=60)

    SUITE = """
        class T(unittest.TestCase):
            def test_ok(self):
                pass

            def test_skip(self):
                self.skipTest("tool missing")
        """

    def test_exit_status(self):
        p = self.run_suite(self.SUITE)
        self.assertEqual(p.returncode, testmain.SKIP_EXIT, p.stderr)
        self.assertIn("SKIPPED: T.test_skip: tool missing", p.stderr)
        p = self.run_suite(self.SUITE, ci="true")
        self.assertEqual(p.returncode, 1, p.stderr)
        p = self.run_suite(self.SUITE, "T.test_ok", ci="true")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.run_suite(self.SUITE, "-k", "no_such_test")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("no test ran", p.stderr)
        p = self.run_suite(self.SUITE.replace('self.skipTest("tool missing")', "1 / 0"))
        self.assertEqual(p.returncode, 1, p.stderr)


if __name__ == "__main__":
    testmain.main(sys.argv)
