#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""Runs tdc-style JSON test cases for `tc ... p3`, printing kselftest TAP.

The case format is that of the kernel's tools/testing/selftests/tc-testing
(id, name, category, setup, cmdUnderTest, expExitCode, verifyCmd,
matchPattern, matchCount, teardown), plus:

  expStderr   regex that the stderr of cmdUnderTest must match (re.search),
              e.g. the kernel's extack message as tc prints it;
  expStdout   the same for its stdout;
  matchJSON   the stdout of verifyJSONCmd (or else verifyCmd) is parsed as
              JSON and must contain this value: objects match if every
              expected key matches, lists element by element and of the
              same length, scalars by equality;
  verifyJSONCmd  lets one case check both tc's text (verifyCmd with
              matchPattern) and its JSON (tc -j);
  skip        "yes" reports the case as skipped.

Unlike tdc, verifyCmd and verifyJSONCmd must exit with status 0: a count
of zero matches proves nothing if the command failed.

Commands run with /bin/sh, after substituting $TC, $IP, $DEV (alias
$DUMMY), $NL (the raw netlink sender, selftests/p3nl.py -d $DEV) and $PY
(python3 -I -S, which starts faster).  A setup or teardown command is a
string (exit status 0 expected) or a list [command, accepted status...].
matchPattern is compiled with re.MULTILINE, not DOTALL, so ".*" stays
within a line and matchCount counts lines.

The runner re-executes itself in a new network namespace (unshare -n), so
the cases never see or touch the host's interfaces.  Before each case it
creates $DEV (a dummy device, p3d0); after the teardown it deletes $DEV
with whatever is still attached, so a failed case cannot leak a qdisc into
the next one.  A case also fails if the kernel logged a new WARNING, BUG,
Oops, KASAN or UBSAN line while it ran (read from /dev/kmsg).

  tdc.py [-f FILE...] [-e ID...] [-c CATEGORY...] [-l] [-v]
"""

import argparse
import errno
import glob
import json
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import p3nl  # noqa: E402  (raw rtnetlink: the test device, $NL)
DEFAULT_DIR = os.path.join(HERE, "tc-tests")
CMD_TIMEOUT = 30
EXCERPT = 1200

# Kernel log lines that mean a case broke the kernel.
KERNEL_TROUBLE = re.compile(
    r"WARNING:|\bBUG[: ]|Oops|KASAN|UBSAN|general protection fault|"
    r"kernel BUG|refcount_t:|list_(add|del) corruption")

REQUIRED = ("id", "name", "cmdUnderTest", "expExitCode")


class CaseError(Exception):
    """A case cannot run as written (bad JSON shape): the runner's fault."""


def substitute(cmd, env):
    for key in sorted(env, key=len, reverse=True):
        cmd = cmd.replace("$" + key, env[key])
    return cmd


def run(cmd, env, verbose):
    cmd = substitute(cmd, env)
    if verbose:
        print("# $ " + cmd, flush=True)
    try:
        p = subprocess.run(cmd, shell=True, capture_output=True, text=True,
                           errors="replace", timeout=CMD_TIMEOUT,
                           stdin=subprocess.DEVNULL)
        return cmd, p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if e.stdout else ""
        return cmd, None, out, "timed out after %ds" % CMD_TIMEOUT


def excerpt(text):
    text = text.rstrip("\n")
    if len(text) > EXCERPT:
        text = text[:EXCERPT] + " [...]"
    return text


class Failure:
    """Collects the diagnostic lines of a failed case."""

    def __init__(self):
        self.lines = []

    def add(self, what, cmd=None, rc=None, out=None, err=None):
        self.lines.append(what)
        if cmd is not None:
            self.lines.append("  command:   " + cmd)
        if rc is not None or cmd is not None:
            self.lines.append("  exit code: %s" % ("timeout" if rc is None
                                                   else rc))
        for label, text in (("stdout", out), ("stderr", err)):
            if text and text.strip():
                self.lines.append("  %s:" % label)
                self.lines.extend("    " + l
                                  for l in excerpt(text).split("\n"))

    def __bool__(self):
        return bool(self.lines)


def command_list(case, key):
    cmds = case.get(key, [])
    if not isinstance(cmds, list):
        raise CaseError("%s must be a list" % key)
    for c in cmds:
        if isinstance(c, str):
            yield c, [0]
        elif isinstance(c, list) and c and isinstance(c[0], str):
            yield c[0], [int(x) for x in c[1:]] or [0]
        else:
            raise CaseError("bad %s entry %r" % (key, c))


def json_contains(actual, expected, path="$"):
    """Returns None if @expected is a subset of @actual, else why not."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return "%s: expected an object, got %s" % (path, json.dumps(actual))
        for k, v in expected.items():
            if k not in actual:
                return "%s: no key %r (keys: %s)" % (path, k,
                                                    ", ".join(actual))
            why = json_contains(actual[k], v, "%s.%s" % (path, k))
            if why:
                return why
        return None
    if isinstance(expected, list):
        if not isinstance(actual, list):
            return "%s: expected a list, got %s" % (path, json.dumps(actual))
        if len(actual) != len(expected):
            return "%s: expected %d elements, got %d" % (
                path, len(expected), len(actual))
        for i, (a, e) in enumerate(zip(actual, expected)):
            why = json_contains(a, e, "%s[%d]" % (path, i))
            if why:
                return why
        return None
    if actual != expected or (isinstance(actual, bool) !=
                               isinstance(expected, bool)):
        return "%s: expected %s, got %s" % (path, json.dumps(expected),
                                            json.dumps(actual))
    return None


class KernelLog:
    """Reads the kernel log records added since the last mark().

    Reads /dev/kmsg in this process rather than running dmesg twice per
    case: every exec is slow under QEMU's TCG.
    """

    def __init__(self):
        try:
            self.fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            self.fd = None

    def mark(self):
        if self.fd is not None:
            os.lseek(self.fd, 0, os.SEEK_END)

    def new_trouble(self):
        found = []
        while self.fd is not None:
            try:
                rec = os.read(self.fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:     # overwritten before we read it
                continue
            if not rec:
                break
            # "prio,seq,usec,flags;text" then " KEY=value" lines
            text = rec.decode(errors="replace").split(";", 1)[-1]
            text = text.split("\n", 1)[0]
            if KERNEL_TROUBLE.search(text):
                found.append(text)
        return found


class Runner:
    def __init__(self, args):
        self.verbose = args.verbose
        self.env = {
            "TC": os.environ.get("TC", "tc"),
            "IP": os.environ.get("IP", "ip"),
            "DEV": args.dev,
            "DUMMY": args.dev,
            # -I -S: no site, no environment; starts several times faster.
            "PY": sys.executable + " -I -S",
            "NL": "%s -I -S %s -d %s" % (
                sys.executable, shlex.quote(os.path.join(HERE, "p3nl.py")),
                args.dev),
        }
        self.klog = KernelLog()
        self.nl = p3nl.Netlink()

    def sh(self, cmd):
        return run(cmd, self.env, self.verbose)

    def device_cleanup(self):
        """Deletes $DEV, and with it every qdisc and filter on it."""
        err = p3nl.link_del(self.nl, self.env["DEV"])
        if err not in (0, errno.ENODEV):
            return "cannot delete %s: %s" % (self.env["DEV"],
                                            os.strerror(err))
        return None

    def run_list(self, case, key, fail):
        for cmd, codes in command_list(case, key):
            cmd, rc, out, err = self.sh(cmd)
            if rc not in codes:
                fail.add("%s command failed (expected exit code %s)" % (
                    key, " or ".join(map(str, codes))), cmd, rc, out, err)
                return False
        return True

    def run_case(self, case):
        """Returns (result, diagnostic lines); result is ok/fail/skip."""
        if str(case.get("skip", "no")).lower() == "yes":
            return "skip", []
        fail = Failure()
        self.device_cleanup()
        self.klog.mark()
        err = p3nl.link_add(self.nl, self.env["DEV"], "dummy")
        if err:
            fail.add("cannot create the test device (ip link add dev %s "
                     "type dummy): %s" % (self.env["DEV"], os.strerror(err)))
            return "fail", fail.lines
        try:
            if self.run_list(case, "setup", fail):
                self.check(case, fail)
            self.run_list(case, "teardown", fail)
        except CaseError as e:
            fail.add("malformed case: %s" % e)
        why = self.device_cleanup()
        if why:
            fail.add(why)
        trouble = self.klog.new_trouble()
        if trouble:
            fail.add("the kernel logged a problem during the case:")
            fail.lines.extend("    " + l for l in trouble[:20])
        return ("fail" if fail else "ok"), fail.lines

    def check(self, case, fail):
        cmd, rc, out, err = self.sh(case["cmdUnderTest"])
        want = int(case["expExitCode"])
        if rc != want:
            fail.add("cmdUnderTest: expected exit code %d" % want,
                     cmd, rc, out, err)
            return
        for key, text in (("expStderr", err), ("expStdout", out)):
            if key in case and not re.search(case[key], text, re.MULTILINE):
                fail.add("cmdUnderTest: %s /%s/ not found" % (
                    key[3:].lower(), case[key]), cmd, rc, out, err)
        if "matchPattern" in case and "verifyCmd" not in case:
            raise CaseError("matchPattern without verifyCmd")
        if "matchJSON" in case and not ("verifyCmd" in case or
                                        "verifyJSONCmd" in case):
            raise CaseError("matchJSON without verifyCmd or verifyJSONCmd")
        if "verifyCmd" in case:
            cmd, rc, out, err = self.verify(case["verifyCmd"], fail)
        if "matchPattern" in case and rc == 0:
            count = len(re.findall(case["matchPattern"], out, re.MULTILINE))
            want = int(case.get("matchCount", 1))
            if count != want:
                fail.add("verifyCmd: /%s/ matched %d times, expected %d" % (
                    case["matchPattern"], count, want), cmd, rc, out, err)
        if "matchJSON" in case:
            what = "verifyCmd"
            if "verifyJSONCmd" in case:
                what = "verifyJSONCmd"
                cmd, rc, out, err = self.verify(case[what], fail)
            if rc != 0:
                return
            try:
                actual = json.loads(out)
            except ValueError as e:
                fail.add("%s: stdout is not JSON (%s)" % (what, e),
                         cmd, rc, out, err)
                return
            why = json_contains(actual, case["matchJSON"])
            if why:
                fail.add("%s: JSON mismatch, %s" % (what, why),
                         cmd, rc, out, err)

    def verify(self, command, fail):
        """Runs a verify command, which must succeed for its output to
        mean anything (a count of 0 matches is no proof otherwise)."""
        cmd, rc, out, err = self.sh(command)
        if rc != 0:
            fail.add("verify command failed (expected exit code 0)",
                     cmd, rc, out, err)
        return cmd, rc, out, err


def load_cases(files):
    cases, seen = [], {}
    for f in files:
        with open(f) as fp:
            try:
                data = json.load(fp)
            except ValueError as e:
                sys.exit("tdc: %s: %s" % (f, e))
        if not isinstance(data, list):
            sys.exit("tdc: %s: expected a list of cases" % f)
        for i, case in enumerate(data):
            missing = [k for k in REQUIRED if k not in case]
            if missing:
                sys.exit("tdc: %s: case %d (%s) lacks %s" % (
                    f, i, case.get("id", "?"), ", ".join(missing)))
            if case["id"] in seen:
                sys.exit("tdc: duplicate id %s in %s and %s" % (
                    case["id"], seen[case["id"]], f))
            seen[case["id"]] = f
            cases.append(case)
    return cases


def main():
    global CMD_TIMEOUT
    ap = argparse.ArgumentParser(
        description="tdc-style tc tests for the p3 qdisc, TAP output",
        epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-f", "--file", nargs="+", metavar="FILE",
                    help="JSON case files (default: tc-tests/*.json)")
    ap.add_argument("-e", "--execute", nargs="+", metavar="ID",
                    help="run only these case ids")
    ap.add_argument("-c", "--category", nargs="+", metavar="CAT",
                    help="run only cases in one of these categories")
    ap.add_argument("-x", "--exclude", nargs="+", metavar="CAT", default=[],
                    help="leave out the cases in any of these categories")
    ap.add_argument("-l", "--list", action="store_true",
                    help="list the cases and exit")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print every command as a TAP comment")
    ap.add_argument("--dev", default="p3d0", help="test device ($DEV)")
    ap.add_argument("--cmd-timeout", type=int, default=CMD_TIMEOUT,
                    help="seconds one command may take (%(default)s)")
    ap.add_argument("--no-netns", action="store_true",
                    help="run in the current network namespace")
    args = ap.parse_args()
    CMD_TIMEOUT = args.cmd_timeout

    files = args.file or sorted(glob.glob(os.path.join(DEFAULT_DIR,
                                                       "*.json")))
    cases = load_cases(files)
    if args.execute:
        ids = set(args.execute)
        unknown = ids - {c["id"] for c in cases}
        if unknown:
            sys.exit("tdc: no case with id %s" % ", ".join(sorted(unknown)))
        cases = [c for c in cases if c["id"] in ids]
    if args.category:
        cases = [c for c in cases
                 if set(args.category) & set(c.get("category", []))]
    unknown = set(args.exclude) - {cat for c in cases
                                   for cat in c.get("category", [])}
    if unknown:
        sys.exit("tdc: no case in category %s" % ", ".join(sorted(unknown)))
    cases = [c for c in cases
             if not set(args.exclude) & set(c.get("category", []))]

    if args.list:
        for c in cases:
            print("%s  %-28s %s" % (c["id"], ",".join(c.get("category", [])),
                                    c["name"]))
        return 0

    if os.geteuid() != 0:
        print("TAP version 13")
        print("1..0 # SKIP tdc.py needs root (run it under selftests/vm-run)")
        return 4
    if not args.no_netns and not os.environ.get("P3_TDC_NETNS"):
        os.environ["P3_TDC_NETNS"] = "1"
        try:
            os.execvp("unshare", ["unshare", "-n", sys.executable,
                                  os.path.abspath(__file__)] + sys.argv[1:])
        except OSError as e:
            print("TAP version 13")
            print("1..0 # SKIP cannot run unshare -n: %s" % e)
            return 4
    print("TAP version 13")
    print("1..%d" % len(cases), flush=True)
    runner = Runner(args)
    if runner.klog.fd is None:
        print("# /dev/kmsg is unreadable: kernel log checks are off")
    counts = {"ok": 0, "fail": 0, "skip": 0}
    start = time.monotonic()
    for n, case in enumerate(cases, 1):
        t0 = time.monotonic()
        result, lines = runner.run_case(case)
        counts[result] += 1
        title = "%s %s" % (case["id"], case["name"])
        if result == "skip":
            print("ok %d - %s # SKIP" % (n, title))
        elif result == "ok":
            print("ok %d - %s" % (n, title))
        else:
            print("not ok %d - %s" % (n, title))
            for l in lines:
                print("# " + l)
        if args.verbose:
            print("# %.2fs" % (time.monotonic() - t0))
        sys.stdout.flush()
    print("# %d cases in %.1fs" % (len(cases), time.monotonic() - start))
    print("# Totals: pass:%d fail:%d xfail:0 xpass:0 skip:%d error:0" % (
        counts["ok"], counts["fail"], counts["skip"]))
    print("%d passed, %d failed, %d skipped" % (counts["ok"], counts["fail"],
                                                counts["skip"]))
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
