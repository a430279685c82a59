/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf pass: XDP_PASS and nothing else.
 *
 * Frames redirected (or XDP_TX-ed) into a veth are delivered to its peer
 * only when the peer has an XDP program (or GRO) enabled: that switches the
 * peer's receive side to NAPI with an XDP ring. Without it redirected frames
 * stall. xnf attaches this program to such peers when it cannot attach a
 * real network function there.
 */
#include "xnf/common.h"

SEC("xdp")
int xnf_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
