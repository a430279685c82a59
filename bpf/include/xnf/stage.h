/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Stages: how network functions share one interface.
 *
 * Each interface xnf manages has one XDP program attached, the entry
 * program (crates/core/bpf/entry.bpf.c), and one PROG_ARRAY of stages,
 * pinned with it. The entry tail-calls the first stage present; a stage
 * that lets a frame continue tail-calls the next stage present; the last
 * stage's verdict is the frame's. A slot is filled or emptied with one map
 * update, so a stage comes or goes between two frames: every frame runs
 * the old set of stages or the new one, never a mix, and none meets an
 * interface without its program (freplace, which libxdp's dispatcher
 * needs, is refused by some kernels; tail calls work everywhere).
 *
 * The order, and what a stage may return:
 *
 *   FILTER   (xnf filter)  XDP_DROP, or continue;
 *   LB       (xnf lb)      XDP_TX or XDP_REDIRECT for its services, or continue;
 *   FORWARD  (xnf router or xnf chain, one of them)
 *                          any verdict; XDP_PASS hands the frame to the kernel.
 *
 * "Continue" with no later stage present is XDP_PASS: the kernel's path,
 * exactly as without xnf. Stages are loaded per interface, with this
 * interface's array (the loader reuses the pinned map before load).
 */
#pragma once

#include "common.h"

enum xnf_stage {
	XNF_STAGE_FILTER = 0,
	XNF_STAGE_LB = 1,
	XNF_STAGE_FORWARD = 2,
	XNF_STAGES = 3,
};

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, XNF_STAGES);
	__type(key, __u32);
	__type(value, __u32);
} xnf_stages SEC(".maps");

/*
 * Runs the first stage present after @after (XNF_STAGES - 1 for the
 * entry's "before the first"). A tail call that finds its slot empty
 * falls through, so this tries each later slot in order; when none is
 * there the frame goes to the kernel.
 */
static __always_inline int xnf_next_stage(struct xdp_md *ctx, int after)
{
	if (after < XNF_STAGE_FILTER)
		bpf_tail_call(ctx, &xnf_stages, XNF_STAGE_FILTER);
	if (after < XNF_STAGE_LB)
		bpf_tail_call(ctx, &xnf_stages, XNF_STAGE_LB);
	if (after < XNF_STAGE_FORWARD)
		bpf_tail_call(ctx, &xnf_stages, XNF_STAGE_FORWARD);
	return XDP_PASS;
}
