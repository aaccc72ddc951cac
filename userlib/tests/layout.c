// SPDX-License-Identifier: LGPL-2.1-or-later
/*
 * Prints the layout of every public struct the Python binding mirrors
 * with ctypes (and the raw hello of test_python.py), one line per field ("struct field offset size") and one
 * per struct ("struct - 0 sizeof"), so that test_python.py can hold the
 * mirror to the header instead of trusting it.
 */
#include <stddef.h>
#include <stdio.h>

#include "p3.h"

#define FIELD(s, f) printf("%s %s %zu %zu\n", #s, #f, offsetof(struct s, f), \
			   sizeof(((struct s *)0)->f))
#define SIZE(s) printf("%s - 0 %zu\n", #s, sizeof(struct s))

int main(void)
{
	SIZE(p3_tensor);
	FIELD(p3_tensor, name); FIELD(p3_tensor, bytes); FIELD(p3_tensor, fwd);
	SIZE(p3_plan_opts);
	FIELD(p3_plan_opts, size); FIELD(p3_plan_opts, bands); FIELD(p3_plan_opts, slice_bytes);
	FIELD(p3_plan_opts, merge_bytes); FIELD(p3_plan_opts, alpha_s);
	FIELD(p3_plan_opts, beta_s_per_byte); FIELD(p3_plan_opts, order);
	SIZE(p3_slice);
	FIELD(p3_slice, tensor); FIELD(p3_slice, msg); FIELD(p3_slice, offset);
	FIELD(p3_slice, length); FIELD(p3_slice, prio); FIELD(p3_slice, level);
	SIZE(p3_chan_opts);
	FIELD(p3_chan_opts, size); FIELD(p3_chan_opts, bands); FIELD(p3_chan_opts, tag_method);
	FIELD(p3_chan_opts, notsent_lowat); FIELD(p3_chan_opts, chan_id);
	FIELD(p3_chan_opts, max_queued); FIELD(p3_chan_opts, max_payload);
	FIELD(p3_chan_opts, timeout_ms); FIELD(p3_chan_opts, progress);
	FIELD(p3_chan_opts, peer_timeout_ms); FIELD(p3_chan_opts, level_stride);
	FIELD(p3_chan_opts, checksum);
	SIZE(p3_buf);
	FIELD(p3_buf, data); FIELD(p3_buf, len);
	SIZE(p3_hello);
	FIELD(p3_hello, chan_id); FIELD(p3_hello, cookie); FIELD(p3_hello, band);
	FIELD(p3_hello, bands); FIELD(p3_hello, proto); FIELD(p3_hello, max_payload);
	SIZE(p3_completion);
	FIELD(p3_completion, tensor); FIELD(p3_completion, iter);
	FIELD(p3_completion, bytes); FIELD(p3_completion, t_first_ns);
	FIELD(p3_completion, t_done_ns);
	SIZE(p3_qdisc_opts);
	FIELD(p3_qdisc_opts, size); FIELD(p3_qdisc_opts, mask); FIELD(p3_qdisc_opts, bands);
	FIELD(p3_qdisc_opts, defband); FIELD(p3_qdisc_opts, tag);
	FIELD(p3_qdisc_opts, limit); FIELD(p3_qdisc_opts, memory);
	FIELD(p3_qdisc_opts, quantum); FIELD(p3_qdisc_opts, rate);
	FIELD(p3_qdisc_opts, buckets); FIELD(p3_qdisc_opts, flows);
	SIZE(p3_band_stats);
	FIELD(p3_band_stats, packets); FIELD(p3_band_stats, bytes);
	FIELD(p3_band_stats, drops); FIELD(p3_band_stats, overlimits);
	FIELD(p3_band_stats, requeues); FIELD(p3_band_stats, backlog);
	FIELD(p3_band_stats, qlen);
	SIZE(p3_xstats);
	FIELD(p3_xstats, flows); FIELD(p3_xstats, flows_active);
	FIELD(p3_xstats, flows_created); FIELD(p3_xstats, flows_gc);
	FIELD(p3_xstats, preemptions); FIELD(p3_xstats, boosts);
	FIELD(p3_xstats, untagged); FIELD(p3_xstats, drops_limit);
	FIELD(p3_xstats, drops_memory); FIELD(p3_xstats, drops_alloc);
	FIELD(p3_xstats, throttled);
	SIZE(p3_qdisc_stats);
	FIELD(p3_qdisc_stats, size); FIELD(p3_qdisc_stats, handle); FIELD(p3_qdisc_stats, parent);
	FIELD(p3_qdisc_stats, opts); FIELD(p3_qdisc_stats, total);
	FIELD(p3_qdisc_stats, have_xstats); FIELD(p3_qdisc_stats, xstats);
	FIELD(p3_qdisc_stats, nbands); FIELD(p3_qdisc_stats, band);
	FIELD(p3_qdisc_stats, drops_deadline); FIELD(p3_qdisc_stats, drops_tolerant);
	FIELD(p3_qdisc_stats, deadline_us); FIELD(p3_qdisc_stats, spilled);
	return 0;
}
