#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
#
# Host tests of q_p3.so against the installed tc, no p3 kernel module
# needed.  Output is TAP.  Usage: test-parse.sh [DIR]
#
# DIR is where q_p3.so, test-shim.so and test-mkmsg are built (default
# ../build/tc, from this script).  Options that pass user-space checks are sent to the
# kernel inside a private network namespace: a kernel without p3 refuses
# them, one with p3 takes them; either way the plugin's part was right.
# test-shim.so captures what tc sends, and "tc monitor file" prints such
# captures, and messages made by test-mkmsg, back through the plugin.

here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here/../build/tc}
TC=${TC:-tc}

# Build first: "make check" builds only the plugin, not the helpers.
if [ -z "$P3_TEST_NETNS" ]; then
	mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || exit 1
	if ! log=$(make -s --no-print-directory -C "$here" OUT="$dir" \
		   test-helpers 2>&1); then
		echo "not ok 1 - build q_p3.so and the test helpers"
		echo "$log" | sed 's/^/# /'
		echo "1..1"
		exit 1
	fi
fi

# Never touch the host's own lo: re-run in a new netns if we can.
if [ -z "$P3_TEST_NETNS" ]; then
	for u in "unshare -n" "unshare -rn"; do
		if $u true 2>/dev/null; then
			P3_TEST_NETNS=1 exec $u "$0" "$dir"
		fi
	done
	P3_TEST_NETNS=none
fi

export TC_LIB_DIR="$dir"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

n=0
passed=0
failed=0
skipped=0
nsent=0
ntaken=0

ok() {
	n=$((n + 1)); passed=$((passed + 1))
	echo "ok $n - $1"
}

not_ok() {
	n=$((n + 1)); failed=$((failed + 1))
	echo "not ok $n - $1"
	[ -s "$tmp/err" ] && sed 's/^/# /' "$tmp/err"
	[ -s "$tmp/out" ] && sed 's/^/# /' "$tmp/out"
}

skip() {
	n=$((n + 1)); skipped=$((skipped + 1))
	echo "ok $n - $1 # SKIP $2"
}

check() {
	if [ "$2" = 0 ]; then ok "$1"; else not_ok "$1"; fi
}

p3() {
	$TC qdisc replace dev lo root p3 "$@" >"$tmp/out" 2>"$tmp/err"
}

p3class() {
	$TC class change dev lo classid 1:2 p3 "$@" >"$tmp/out" 2>"$tmp/err"
}

# rejects DESC REGEX OPTIONS...: tc exits 1 (a parse error, never sent),
# with one reason line matching REGEX, then the usage.
rejects() {
	desc=$1 re=$2
	shift 2
	p3 "$@"
	rc=$?
	reason_and_usage "$re"
	check "$desc" $?
}

# reason_and_usage REGEX: tc exited 1 ($rc) with one reason line matching
# REGEX, then the usage.
reason_and_usage() {
	re=$1
	[ $rc = 1 ] && head -n 1 "$tmp/err" | grep -Eq "$re" &&
		[ "$(grep -c '^p3: ' "$tmp/err")" = 1 ] &&
		grep -q '^Usage: \.\.\. p3 ' "$tmp/err"
}

# rejects_class DESC REGEX OPTIONS...: as rejects, for a class's options.
rejects_class() {
	desc=$1 re=$2
	shift 2
	p3class "$@"
	rc=$?
	reason_and_usage "$re"
	check "$desc" $?
}

# sent_by RUN OPTIONS...: RUN (p3, or p3class for a class's options)
# gets past parsing (exit 0 with p3 in the kernel, 2 with an extack
# error from a kernel without it) and the request goes to $tmp/cap.
sent_by() {
	run=$1
	shift
	rm -f "$tmp/cap"
	P3_CAPTURE="$tmp/cap" LD_PRELOAD="$dir/test-shim.so" $run "$@"
	rc=$?
	nsent=$((nsent + 1))
	[ $rc = 0 ] && ntaken=$((ntaken + 1))
	{ [ $rc = 0 ] || [ $rc = 2 ]; } && [ -s "$tmp/cap" ] &&
		! grep -q -e '^p3: ' -e '^Usage' "$tmp/err"
}

sent() {
	sent_by p3 "$@"
}

# shown_back DESC EXPECT PREFIX RUN OPTIONS...: as sent_by, and the
# request printed back shows exactly EXPECT after PREFIX.
shown_back() {
	desc=$1 want=$2 prefix=$3 run=$4
	shift 4
	if [ "$P3_TEST_NETNS" = none ]; then
		skip "$desc" "no private network namespace"
		return
	fi
	sent_by "$run" "$@" &&
		got=$($TC monitor file "$tmp/cap" 2>>"$tmp/err" |
		      sed -n "s/^$prefix\(.*\)\$/<\1>/p") &&
		[ "$got" = "<$want>" ]
	rc=$?
	[ $rc = 0 ] || echo "got '$got', want '<$want>'" >>"$tmp/err"
	check "$desc" $rc
}

# accepts DESC EXPECT OPTIONS...: the qdisc's options EXPECT, exactly.
accepts() {
	desc=$1 want=$2
	shift 2
	shown_back "$desc" "$want" 'replaced qdisc p3 0: dev lo root refcnt 0 ' p3 "$@"
}

# class_sends DESC EXPECT OPTIONS...: the class's options EXPECT ("" for
# a reliable band, which prints nothing).
class_sends() {
	desc=$1 want=$2
	shift 2
	shown_back "$desc" "$want" 'class p3 1:2 dev lo parent none ' p3class "$@"
}

# shows DESC VARIANT REGEX...: tc -s prints a test-mkmsg message with
# lines matching each REGEX.
shows() {
	desc=$1 variant=$2
	shift 2
	"$dir/test-mkmsg" "$variant" >"$tmp/msg" &&
		$TC -s monitor file "$tmp/msg" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	for re in "$@"; do
		[ $rc = 0 ] || break
		grep -Eq "$re" "$tmp/out"
		rc=$?
	done
	check "$desc" $rc
}

# --- the plugin is loadable by this tc -------------------------------------

tcbin=$(command -v "$TC")
nm -D --undefined-only "$dir/q_p3.so" |
	awk '$1 == "U" && $2 !~ /@/ { print $2 }' | sort >"$tmp/need"
nm -D --defined-only "$tcbin" | awk '{ print $3 }' | sort >"$tmp/have"
comm -23 "$tmp/need" "$tmp/have" >"$tmp/err"
[ -s "$tmp/need" ] && [ ! -s "$tmp/err" ]
check "every tc symbol q_p3.so uses is exported by $tcbin" $?

nm -D --defined-only "$dir/q_p3.so" | grep -q ' D p3_qdisc_util$'
check "q_p3.so exports p3_qdisc_util" $?

# --- help and rejected options ---------------------------------------------

p3 help
[ $? = 1 ] && grep -q '^Usage: \.\.\. p3 ' "$tmp/err" && ! grep -q '^p3: ' "$tmp/err"
check "help prints the usage" $?

rejects "bands 70 is above 64"		'^p3: invalid bands "70": expected 2\.\.64$' bands 70
rejects "bands 1 is below 2"		'^p3: invalid bands "1"' bands 1
rejects "bands 4x is not a number"	'^p3: invalid bands "4x"' bands 4x
rejects "default 64 is no band"		'^p3: invalid default "64"' default 64
rejects "default 4 with bands 4"	'^p3: invalid default "4": expected 0\.\.3 for bands 4$' bands 4 default 4
rejects "default before bands is checked too" '^p3: invalid default "8"' default 8 bands 8
rejects "tag foo is no source"		'^p3: invalid tag "foo": expected priority, dscp or mark$' tag foo
rejects "limit 0"			'^p3: invalid limit "0"' limit 0
rejects "limit above u32"		'^p3: invalid limit "4294967296"' limit 4294967296
rejects "memory -1"			'^p3: invalid memory "-1"' memory -1
rejects "memory 4q has a bad unit"	'^p3: invalid memory "4q"' memory 4q
rejects "memory 5gb is above u32"	'^p3: invalid memory "5gb"' memory 5gb
rejects "quantum abc"			'^p3: invalid quantum "abc"' quantum abc
rejects "buckets 1000 is no power of two"	'^p3: invalid buckets "1000": expected a power of two, 16\.\.1048576$' buckets 1000
rejects "buckets 8 is below 16"		'^p3: invalid buckets "8"' buckets 8
rejects "buckets 2097152 is above 2^20"	'^p3: invalid buckets "2097152"' buckets 2097152
rejects "flows 0 is below 1"		'^p3: invalid flows "0": expected a flow count, 1\.\.1048576$' flows 0
rejects "flows 1048577 is above 2^20"	'^p3: invalid flows "1048577"' flows 1048577
rejects "flows above u32"		'^p3: invalid flows "4294967296"' flows 4294967296
rejects "flows 1k is not a number"	'^p3: invalid flows "1k"' flows 1k
rejects "flows -1"			'^p3: invalid flows "-1"' flows -1
rejects "rate fast"			'^p3: invalid rate "fast"' rate fast
rejects "rate -10mbit"			'^p3: invalid rate "-10mbit"' rate -10mbit
rejects "unknown option"		'^p3: unknown option "bandz"$' bandz 4
rejects "dscpmap without a colon"	'^p3: invalid dscpmap "46": expected CODE:BAND pairs' dscpmap 46
rejects "dscpmap code point 64"		'^p3: invalid dscpmap "64:0": expected a code point 0\.\.63' dscpmap 64:0
rejects "dscpmap unknown name"		'^p3: invalid dscpmap "af44:0": expected a code point' dscpmap af44:0
rejects "dscpmap band 64"		'^p3: invalid dscpmap "ef:64": expected a band' dscpmap ef:64
rejects "option without a value"	'^p3: "limit" needs a value$' bands 4 limit

# --- accepted options reach the kernel, encoded as the ABI says ------------

if [ "$P3_TEST_NETNS" = none ]; then
	skip "TCA_OPTIONS carries NLA_F_NESTED" "no private network namespace"
else
	sent
	rc=$?
	# nlmsghdr (16) and tcmsg (20), then TCA_KIND, then TCA_OPTIONS.
	kind_len=$(od -An -tu2 -j36 -N2 "$tmp/cap" | tr -d ' ')
	off=$((36 + ((kind_len + 3) & ~3)))
	type=$(od -An -tu2 -j$((off + 2)) -N2 "$tmp/cap" | tr -d ' ')
	[ $rc = 0 ] && [ "$type" = $((0x8000 | 2)) ]
	check "TCA_OPTIONS carries NLA_F_NESTED" $?
fi

accepts "no options send an empty nest" ""
accepts "every option round-trips" \
	"bands 4 default 3 tag mark limit 100 memory 4Mb quantum 3028b rate 10Mbit buckets 65536 flows 4096 " \
	bands 4 default 3 tag mark limit 100 memory 4mb quantum 3028 rate 10mbit buckets 65536 flows 4096
accepts "only the options given are sent (change keeps the rest)" \
	"limit 5 " limit 5
accepts "bands 64 default 63 is the upper edge" \
	"bands 64 default 63 " bands 64 default 63
accepts "bands 2 default 1 tag priority is the lower edge" \
	"bands 2 default 1 tag priority " bands 2 default 1 tag priority
accepts "memory 0 and rate 0 mean no cap and unpaced" \
	"tag dscp memory 0b rate 0bit " tag dscp memory 0 rate 0
accepts "buckets 16 and 1048576 are the edges" "buckets 1048576 " buckets 16 buckets 1048576
accepts "flows 1 is the lower edge" "flows 1 " flows 1
accepts "flows 1048576 is the upper edge" "flows 1048576 " flows 1048576
accepts "flows in hex, as tc's other counts" "flows 4096 " flows 0x1000
accepts "the last of a repeated option wins" "bands 16 " bands 8 bands 16
accepts "dscpmap by names and numbers, shown as numbers" \
	"dscpmap 1:7,10:2,46:0,48:0,56:0 " dscpmap ef:0,cs6:0,CS7:0,le:7,af11:2
accepts "dscpmap builtin sends the map with no band named" "" dscpmap builtin

echo "# the kernel took $ntaken of $nsent requests (none without sch_p3)"

# --- class options: a band's deadline -------------------------------------

rejects_class "deadline above 10s"	'^p3: invalid deadline "10001ms": expected a time up to 10s' deadline 10001ms
rejects_class "negative deadline"	'^p3: invalid deadline "-1ms"' deadline -1ms
rejects_class "deadline with an unknown unit" '^p3: invalid deadline "2min"' deadline 2min
rejects_class "deadline nan"		'^p3: invalid deadline "nan"' deadline nan
rejects_class "deadline without a value" '^p3: a class takes one option: deadline TIME$' deadline
rejects_class "a qdisc option on a class" '^p3: a class takes one option: deadline TIME$' limit 5
class_sends "deadline 2ms is sent as 2000 us" "deadline 2ms " deadline 2ms
class_sends "deadline 1.5ms is sent as 1500 us" "deadline 1500us " deadline 1.5ms
class_sends "a bare number is microseconds" "deadline 250us " deadline 250
class_sends "deadline 10s, the longest" "deadline 10s " deadline 10s
class_sends "a fraction of a microsecond rounds up" "deadline 1us " deadline 0.2us
class_sends "2.007ms is 2007 us, not the binary 2006.999..." "deadline 2007us " deadline 2.007ms
class_sends "0.000123s is 123 us" "deadline 123us " deadline 0.000123s
class_sends "units in capitals, as tc takes them" "deadline 2ms " deadline 2MS
class_sends "deadline 0 is sent, and prints nothing" "" deadline 0

# --- printing what the kernel dumps ----------------------------------------

shows "tc -s prints options and every xstats field" full \
	'^qdisc p3 8001: dev lo root bands 4 default 3 tag dscp limit 100 memory 4Mb quantum 3028b rate 10Mbit buckets 65536 flows 4096 $' \
	'^  flows 1 flows_active 2 flows_created 3 flows_gc 4$' \
	'^  preemptions 5000000005 boosts 6 untagged 7 throttled 11$' \
	'^  drops_limit 8 drops_memory 9$' \
	'^  drops_deadline 12 drops_tolerant 13$' \
	'^  spilled 14$'
shows "a shorter xstats from an older kernel reads as zeros" short \
	'^  flows 1 flows_active 2 flows_created 3 flows_gc 4$' \
	'^  preemptions 0 boosts 0 untagged 0 throttled 0$' \
	'^  drops_limit 0 drops_memory 0$' \
	'^  drops_deadline 0 drops_tolerant 0$' \
	'^  spilled 0$'
shows "a longer xstats from a newer kernel is cut to what we know" long \
	'^  preemptions 5000000005 boosts 6 untagged 7 throttled 11$' \
	'^  drops_limit 8 drops_memory 9$' \
	'^  spilled 14$'
shows "options from a kernel before flows print without it" noflows \
	' rate 10Mbit buckets 65536 $'
shows "an unknown tag source prints as its number" newtag ' tag 3 limit 100 '

if ! command -v python3 >/dev/null; then
	skip "tc -j -s prints every option and xstats as JSON" "no python3"
else
	"$dir/test-mkmsg" full >"$tmp/msg"
	P3_JSON=1 LD_PRELOAD="$dir/test-shim.so" \
		$TC -s monitor file "$tmp/msg" >"$tmp/out" 2>"$tmp/err"
	python3 - "$tmp/out" >>"$tmp/err" 2>&1 <<-'EOF'
	import json, sys
	q = json.load(open(sys.argv[1]))[0]
	want = {"bands": 4, "default": 3, "tag": "dscp", "limit": 100,
	        "memory": 4 << 20, "quantum": 3028, "rate": 1250000,
	        "buckets": 65536, "flows": 4096}
	assert q["options"] == want, q["options"]
	xs = ["flows", "flows_active", "flows_created", "flows_gc",
	      "preemptions", "boosts", "untagged", "drops_limit",
	      "drops_memory", "throttled", "drops_deadline",
	      "drops_tolerant", "spilled"]
	got = [q[k] for k in xs]
	assert got == [1, 2, 3, 4, 5000000005, 6, 7, 8, 9, 11, 12, 13, 14], got
	EOF
	check "tc -j -s prints every option and xstats as JSON" $?
fi

echo "1..$n"
echo "$passed passed, $failed failed, $skipped skipped"
[ $failed = 0 ]
