/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf reflect: the stand-in network function of the container-NF thesis (xdp_tx_simple).
 * Every frame goes back out of the port it came in on, unchanged, by
 * XDP_TX: on an NF's veth that hands it straight back to the host end,
 * where the chain program sends it on. It measures what a chain costs
 * when the NF itself costs nothing.
 */
#include "xnf/common.h"

SEC("xdp")
int xnf_reflect(struct xdp_md *ctx)
{
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
