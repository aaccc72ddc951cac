#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0
"""The patch series sch_p3 would be sent as, made from this tree.

  scripts/upstream-series.py [--out DIR] [--kernel-src SRC] [--patches-only]
  scripts/upstream-series.py --check

Writes docs/upstream.md (the cover letter and what each patch holds) and,
in DIR (build/upstream), the patches as `git send-email` would take them:
kernel/000N-*.patch for net-next and iproute2/0001-*.patch.  The hunks
against files the kernel already has (net/sched/Kconfig, its Makefile,
include/uapi/linux/pkt_sched.h) need a kernel source tree, SRC (default:
the debug kernel's 6.1 source that selftests/debug-kernel/build.sh
unpacks); without one those patches are not written.  --check fails if
docs/upstream.md is not what the tree makes now.
"""
import argparse
import difflib
import glob
import json
import os
import re
import sys
import textwrap

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(TOP, "docs", "upstream.md")
# tdc's own keys: cases that need this project's helpers ($NL, $PY,
# expStderr) stay here.
TDC_KEYS = {"id", "name", "category", "plugins", "setup", "cmdUnderTest",
            "expExitCode", "verifyCmd", "matchPattern", "matchCount",
            "matchJSON", "verifyJSONCmd", "teardown"}
AUTHOR = "sch_p3 developers <sch-p3@lists.example.org>"
MAINTAINERS = """P3 PACKET SCHEDULER
M:	sch_p3 developers <sch-p3@lists.example.org>
L:	netdev@vger.kernel.org
S:	Maintained
F:	net/sched/sch_p3.c
F:	tools/testing/selftests/tc-testing/tc-tests/qdiscs/p3.json
"""
KCONFIG = """config NET_SCH_P3
	tristate "Priority-based Parameter Propagation (P3)"
	help
	  Say Y here if you want to use the P3 packet scheduler: strict
	  priority across up to 64 bands, read from DSCP (by an RFC 4594
	  map), skb->priority or skb->mark, a FIFO per flow within each
	  band served by deficit round robin, and priority inheritance so
	  that a flow is never reordered.  Made for the parameter traffic
	  of distributed training; see tc-p3(8).

	  To compile this code as a module, choose M here: the
	  module will be called sch_p3.

"""


def wrap(text):
    return textwrap.fill(text, 72)


def read(*path):
    with open(os.path.join(TOP, *path)) as f:
        return f.read()


def lines(text):
    return text.count("\n")


def upstream_qdisc():
    """kmod/sch_p3.c as net/sched/sch_p3.c: no private header, no shims."""
    src = read("kmod", "sch_p3.c")
    src = src.replace('#include <linux/pkt_sched_p3.h>\n', '')
    return src.replace('\n#include "compat.h"\n', '')


def uapi_block():
    """The attributes of pkt_sched_p3.h, as a section of pkt_sched.h."""
    h = read("include", "uapi", "linux", "pkt_sched_p3.h")
    body = h.split("#include <linux/types.h>\n", 1)[1]
    body = body.rsplit("#endif", 1)[0].strip("\n")
    return "/* P3 */\n\n" + body + "\n\n"


def tdc_cases():
    cases = json.loads(read("selftests", "tc-tests", "p3.json"))
    keep = [c for c in cases if set(c) <= TDC_KEYS and
            "$NL" not in json.dumps(c) and "$PY" not in json.dumps(c)]
    for c in keep:
        c.setdefault("plugins", {"requires": "nsPlugin"})
    return keep, len(cases)


def new_file(path, text):
    out = [f"diff --git a/{path} b/{path}\n", "new file mode 100644\n",
           "--- /dev/null\n", f"+++ b/{path}\n",
           f"@@ -0,0 +1,{lines(text)} @@\n"]
    out += ["+" + ln for ln in text.splitlines(True)]
    return "".join(out)


def changed_file(path, old, new):
    diff = difflib.unified_diff(old.splitlines(True), new.splitlines(True),
                                f"a/{path}", f"b/{path}", n=3)
    return f"diff --git a/{path} b/{path}\n" + "".join(diff)


def diffstat(body):
    """git format-patch's summary of @body, which checkpatch reads too."""
    stat, name = {}, None
    for ln in body.splitlines():
        if ln.startswith("diff --git a/"):
            name = ln.split(" b/", 1)[1]
            stat[name] = [0, 0]
        elif ln.startswith("+") and not ln.startswith("+++ "):
            stat[name][0] += 1
        elif ln.startswith("-") and not ln.startswith("--- "):
            stat[name][1] += 1
    width = max(len(n) for n in stat)
    out = [f" {n:<{width}} | {a + d} {'+' * min(a, 40)}{'-' * min(d, 40)}"
           for n, (a, d) in stat.items()]
    adds, dels = sum(a for a, _ in stat.values()), sum(d for _, d in stat.values())
    out.append(f" {len(stat)} files changed, {adds} insertions(+), "
               f"{dels} deletions(-)")
    return "\n".join(out) + "\n\n"


def with_kernel(src):
    """The hunks against SRC's own files, or None without SRC."""
    if not src or not os.path.isdir(os.path.join(src, "net", "sched")):
        return None

    def get(path):
        with open(os.path.join(src, path)) as f:
            return f.read()
    kc, mk = get("net/sched/Kconfig"), get("net/sched/Makefile")
    mt = get("MAINTAINERS")
    hdr = get("include/uapi/linux/pkt_sched.h")
    at = kc.index("config NET_SCH_FQ_CODEL")
    kc2 = kc[:at] + KCONFIG + kc[at:]
    mk2 = re.sub(r"(obj-\$\(CONFIG_NET_SCH_FQ_CODEL\)\s+\+= sch_fq_codel\.o\n)",
                 r"\1obj-$(CONFIG_NET_SCH_P3)	+= sch_p3.o\n", mk)
    # The first entry whose title sorts after ours (titles follow a blank
    # line, past the file's preamble).
    at = next(m.start(1) for m in re.finditer(r"\n\n([A-Z0-9][^\n]*)\n", mt)
              if m.start() > mt.index("\nMaintainers List") and
              m.group(1) > MAINTAINERS.split("\n", 1)[0])
    mt2 = mt[:at] + MAINTAINERS + "\n" + mt[at:]
    end = hdr.rindex("#endif")
    hdr2 = hdr[:end] + uapi_block() + hdr[end:]
    return {"uapi": changed_file("include/uapi/linux/pkt_sched.h", hdr, hdr2),
            "maintainers": changed_file("MAINTAINERS", mt, mt2),
            "kconfig": changed_file("net/sched/Kconfig", kc, kc2) +
            changed_file("net/sched/Makefile", mk, mk2)}


def series():
    """(tree, file name, subject, body, [(path, lines)]) for each patch."""
    qdisc = upstream_qdisc()
    cases, all_cases = tdc_cases()
    tc = read("tc", "q_p3.c").replace('#include "tc_plugin.h"\n',
                                       '#include "utils.h"\n#include "tc_util.h"\n')
    man = read("docs", "tc-p3.8")
    return [
        ("kernel", "0001-net-sched-add-the-p3-qdisc-uapi.patch",
         "net/sched: add the uAPI of the p3 qdisc",
         "The attributes of the p3 qdisc (TCA_P3_*), its tag sources, its "
         "class attribute (a band's deadline) and its statistics "
         "(struct tc_p3_xstats).",
         [("include/uapi/linux/pkt_sched.h", lines(uapi_block()))]),
        ("kernel", "0002-net-sched-add-sch_p3.patch",
         "net/sched: add sch_p3, strict priority with per-flow FIFOs",
         "Strict priority across bands read from DSCP, skb->priority or "
         "skb->mark; within a band a FIFO per flow under deficit round "
         "robin; priority inheritance keeps a re-tagged flow in order; "
         "loss-tolerant bands with a deadline; an optional pacer.",
         [("net/sched/sch_p3.c", lines(qdisc)),
          ("net/sched/Kconfig", lines(KCONFIG)),
          ("net/sched/Makefile", 1)]),
        ("kernel", "0003-selftests-tc-testing-add-p3.patch",
         "selftests: tc-testing: add tests of the p3 qdisc",
         f"{len(cases)} of the {all_cases} tdc cases of this tree: those "
         "that need only tc and ip (the rest use raw netlink and Python "
         "senders, helpers tdc does not have).",
         [("tools/testing/selftests/tc-testing/tc-tests/qdiscs/p3.json",
           lines(json.dumps(cases, indent=4)) + 1)]),
        ("iproute2", "0001-tc-add-the-p3-qdisc.patch",
         "tc: add the p3 qdisc",
         "Options, class options (deadline), statistics, and tc-p3(8).",
         [("tc/q_p3.c", lines(tc)), ("man/man8/tc-p3.8", lines(man))]),
    ], {"qdisc": qdisc, "tdc": json.dumps(cases, indent=4) + "\n", "tc": tc,
        "man": man}


def document(patches):
    fq = 1340
    qdisc_lines = patches[1][4][0][1]
    out = ["# The upstream series", "",
           "What `scripts/upstream-series.py` makes of this tree: sch_p3 as "
           "it would be sent to netdev (net-next) and to iproute2. "
           "`scripts/upstream-series.py --out DIR` writes the patches "
           "themselves; this page is checked against the tree by "
           "`make check` (`scripts/build-checks.sh`).", "",
           "## Cover letter", "",
           "    [PATCH net-next 0/3] net/sched: sch_p3, strict priority "
           "for distributed training", "",
           "    Distributed training exchanges each layer's parameters "
           "every step; the layers the",
           "    next forward pass needs first are the most urgent "
           "(Jayarajan et al., P3, SysML",
           "    2019). sch_p3 serves up to 64 bands in strict priority, "
           "read from DSCP by an",
           "    RFC 4594 map (libp3 tags each level with a local-use code "
           "point), skb->priority",
           "    or skb->mark. Within a band each flow has a FIFO and "
           "flows share the band by",
           "    deficit round robin; a flow re-tagged more urgent takes "
           "its queued packets with",
           "    it (priority inheritance), so no flow is ever reordered. "
           "A band can be made",
           "    loss-tolerant with a deadline (DLCP, Wang et al. 2020). "
           "Overflow pushes out the",
           "    least urgent band's packets first, and signals congestion "
           "only to the flow that paid.", "",
           "    It works at the root and beneath tbf, htb, hfsc, qfq, "
           "drr, ets, mq and mqprio; its",
           "    peek is a real peek, and the dequeue after it sends the "
           "peeked packet.", "",
           f"    sch_p3.c is {qdisc_lines} lines; sch_fq.c is {fq}.", "",
           "## Patches", "",
           "| tree | patch | subject | files (lines added) |",
           "|---|---|---|---|"]
    for tree, name, subject, _, files in patches:
        what = ", ".join(f"`{p}` ({n})" for p, n in files)
        out.append(f"| {tree} | {name} | {subject} | {what} |")
    out += ["", "## What each says", ""]
    for tree, name, subject, body, _ in patches:
        out += [f"**{name}** ({tree}). {body}", ""]
    out += ["## Not yet in upstream form", "",
            "- `sch_p3.c` is above `sch_fq.c`'s size (issue 70's redesign: "
            "a fixed flow array instead of the flow table and spill);",
            "- `flows` (most flow entries) and `memory` keep names that "
            "fq_codel gives other meanings (its flow buckets, "
            "`memory_limit`);",
            "- drops are `SKB_DROP_REASON_QDISC_DROP`: the kernels it is "
            "built for have no reasons of a qdisc's own, which the series "
            "would add to `dropreason-core.h`;",
            "- `tc/q_p3.c` is the plugin Debian's tc loads: "
            "`tc/tc_plugin.h` declares what iproute2's headers would.", ""]
    return "\n".join(out)


def write_patches(out, patches, files, src):
    hunks = with_kernel(src)
    body = {"0002-net-sched-add-sch_p3.patch":
            new_file("net/sched/sch_p3.c", files["qdisc"]),
            "0003-selftests-tc-testing-add-p3.patch":
            new_file("tools/testing/selftests/tc-testing/tc-tests/qdiscs/"
                     "p3.json", files["tdc"]),
            "0001-tc-add-the-p3-qdisc.patch":
            new_file("tc/q_p3.c", files["tc"]) +
            new_file("man/man8/tc-p3.8", files["man"])}
    if hunks:
        body["0001-net-sched-add-the-p3-qdisc-uapi.patch"] = hunks["uapi"]
        # In git's order: MAINTAINERS sorts before net/.
        body["0002-net-sched-add-sch_p3.patch"] = (
            hunks["maintainers"] + body["0002-net-sched-add-sch_p3.patch"] +
            hunks["kconfig"])
    written = []
    for i, (tree, name, subject, text, _) in enumerate(patches):
        if name not in body:
            continue
        n = sum(1 for p in patches if p[0] == tree)
        k = sum(1 for p in patches[:i + 1] if p[0] == tree)
        prefix = "PATCH net-next" if tree == "kernel" else "PATCH iproute2-next"
        os.makedirs(os.path.join(out, tree), exist_ok=True)
        path = os.path.join(out, tree, name)
        with open(path, "w") as f:
            f.write(f"From: {AUTHOR}\nSubject: [{prefix} {k}/{n}] "
                    f"{subject}\n\n{wrap(text)}\n\nSigned-off-by: "
                    f"{AUTHOR}\n---\n{diffstat(body[name])}{body[name]}")
        written.append(path)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default=os.path.join(TOP, "build", "upstream"))
    found = sorted(glob.glob("/var/cache/sch_p3/debug-kernel/*/src"))
    ap.add_argument("--kernel-src", default=found[0] if found else None)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--patches-only", action="store_true",
                    help="leave docs/upstream.md as it is")
    args = ap.parse_args()
    patches, files = series()
    doc = document(patches)
    if args.check:
        with open(DOC) as f:
            if f.read() != doc:
                print("docs/upstream.md is stale: run "
                      "scripts/upstream-series.py", file=sys.stderr)
                return 1
        return 0
    if not args.patches_only:
        with open(DOC, "w") as f:
            f.write(doc)
    for path in write_patches(args.out, patches, files, args.kernel_src):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
