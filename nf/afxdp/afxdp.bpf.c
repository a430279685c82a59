/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf afxdp: the XDP program in front of user-space network functions.
 *
 * It hands the selected traffic to the AF_XDP socket of the RX queue the
 * frame arrived on and leaves everything else to the kernel (XDP_PASS):
 * ping, ARP, SSH and the rest of the host keep working while one class of
 * traffic goes to user space — what AF_XDP has over kernel-bypass
 * frameworks that take the whole NIC.
 *
 * Why keyed by queue: a socket is bound to one queue of one device, and
 * the kernel only accepts a frame into a socket bound to the queue it came
 * in on (xsk_rcv checks both), so the XSKMAP slot is the queue index and
 * bpf_redirect_map() needs no lookup of its own. A queue without a socket
 * makes the helper return its fallback, XDP_PASS: the frame is the
 * kernel's instead of being dropped.
 *
 * Classes are the chain classifier's (include/classify.h), first match
 * wins; with no class, every frame on a socket's queue goes to user space
 * (xdpsock's behaviour).
 */
#include "xnf/common.h"
#include "xnf/classify.h"
#include "afxdp.h"

/* Not used by the program: puts these types into BTF, so that the skeleton
 * gives the control plane their Rust mirrors (src/selector.rs). */
const volatile struct {
	enum xnf_afxdp_limits limits;
	enum xnf_afxdp_reason reason;
} xnf_btf_anchor = {};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XNF_AFXDP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_AFXDP_MAX_RULES);
	__type(key, __u32);
	__type(value, struct xnf_match);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_afxdp_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_afxdp_stats);
} stats SEC(".maps");

static __always_inline void count(__u32 reason)
{
	__u32 zero = 0;
	struct xnf_afxdp_stats *s = bpf_map_lookup_elem(&stats, &zero);

	if (s && reason < XNF_AX_MAX)
		s->packets[reason]++;
}

/* XNF_AX_TO_USER when the frame is in a class, else why not. */
static __always_inline __u32 classify_frame(struct xdp_md *ctx, __u32 nrules)
{
	struct xnf_pkt f = {};
	__u32 i, key;

	switch (xnf_parse(ctx, &f)) {
	case XNF_PARSE_OK:
		break;
	case XNF_PARSE_QINQ:
		return XNF_AX_QINQ;
	case XNF_PARSE_NON_IP:
		return XNF_AX_NON_IP;
	default:
		return XNF_AX_MALFORMED;
	}
	for (i = 0; i < XNF_AFXDP_MAX_RULES; i++) {
		struct xnf_match *m;

		if (i >= nrules)
			break;
		key = i;
		m = bpf_map_lookup_elem(&rules, &key);
		if (m && match_pkt(m, &f))
			return XNF_AX_TO_USER;
	}
	return XNF_AX_NO_MATCH;
}

SEC("xdp")
int xnf_afxdp(struct xdp_md *ctx)
{
	__u32 zero = 0, reason = XNF_AX_TO_USER;
	struct xnf_afxdp_cfg *c = bpf_map_lookup_elem(&cfg, &zero);

	if (c && c->nrules)
		reason = classify_frame(ctx, c->nrules);
	if (reason != XNF_AX_TO_USER) {
		count(reason);
		return XDP_PASS;
	}
	if (bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS) != XDP_REDIRECT) {
		count(XNF_AX_NO_SOCKET);
		return XDP_PASS;
	}
	count(XNF_AX_TO_USER);
	return XDP_REDIRECT;
}

char _license[] SEC("license") = "Dual MIT/GPL";
