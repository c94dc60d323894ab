"""The Python suites' runner: unittest.main(), with skips that cannot pass for successes.

unittest counts a skipped test as a success, so a suite whose dependency is missing (not root, no
runsc, no kubectl) would pass in ctest having tested nothing. main() here:
  - lists every skip at the end, with its reason;
  - exits SKIP_EXIT (77) when anything was skipped: ctest (SKIP_RETURN_CODE 77 on every Python
    entry) reports the entry as "Skipped", not "Passed";
  - exits 1 for a skip when the environment says CI (CI=true, as CI services set it): in CI a
    skip hides a missing dependency, and that is a failure. A test may be allowed to skip in CI
    only by naming it ("Class.test_method") in `allowed_skips`, with why;
  - exits 1 when no test ran at all (a filter that matches nothing).
Failures and errors exit 1 as before."""
import os
import sys
import unittest

SKIP_EXIT = 77


def in_ci(environ=None):
    value = (os.environ if environ is None else environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no")


def skip_name(test):
    """"Class.test_method" for a skipped test; str(test) for what is not a test method (a
    setUpClass that raised SkipTest)."""
    method = getattr(test, "_testMethodName", None)
    return f"{type(test).__name__}.{method}" if method else str(test)


def verdict(result, ci, allowed_skips=None, out=sys.stderr):
    """The exit status for a finished unittest result; reports skips and why it fails on out."""
    allowed = allowed_skips or {}
    refused = []
    for test, reason in result.skipped:
        name = skip_name(test)
        why = allowed.get(name)
        if why:
            print(f"SKIPPED (allowed: {why}): {name}: {reason}", file=out)
        else:
            print(f"SKIPPED: {name}: {reason}", file=out)
            refused.append(name)
    if not result.wasSuccessful():
        return 1
    if result.testsRun == 0:
        print("FAILED: no test ran", file=out)
        return 1
    if refused and ci:
        print(f"FAILED: {len(refused)} test(s) skipped in CI (CI is set): a skip there hides a "
              "missing dependency", file=out)
        return 1
    return SKIP_EXIT if refused else 0


def main(argv, allowed_skips=None):
    """Runs the tests of __main__ with unittest's command line argv (argv[0] the program) and
    exits with verdict()."""
    prog = unittest.main(argv=argv, verbosity=2, exit=False)
    sys.stdout.flush()
    sys.exit(verdict(prog.result, in_ci(), allowed_skips))
