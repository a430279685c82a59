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
	enum xnf_afxdp_class_flag class_flag;
	struct xnf_afxdp_class class; /* the class tables' values (declared by size) */
} xnf_btf_anchor = {};

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XNF_AFXDP_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/*
 * The classes, in order, behind a one-slot map of maps: the control plane
 * swaps in a whole new table, so a frame is classified by the old classes
 * or the new ones, never a mix. No table: no classes, every frame of a
 * queue with a socket goes to user space (xdpsock's behaviour).
 */
struct class_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_AFXDP_MAX_RULES);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct xnf_afxdp_class));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct class_table);
} classes SEC(".maps");

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

/* XNF_AX_TO_USER when the frame is in a class of @table, else why not. */
static __always_inline __u32 classify_frame(struct xdp_md *ctx, void *table)
{
	struct xnf_pkt f = {};
	__u32 i, key, unsure = 0;

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
		struct xnf_afxdp_class *c;
		enum xnf_class_match m;

		/* A copy for the helper: a loop counter whose address escapes
		 * lives on the stack, where the verifier cannot see it grow. */
		key = i;
		c = bpf_map_lookup_elem(table, &key);
		if (!c || !c->used)
			break;
		m = match_pkt(&c->m, &f);
		if (m == XNF_CLASS_YES)
			return XNF_AX_TO_USER;
		/* May be in the class: the NF sees it or nobody does, never the
		 * kernel behind the NF's back. But a later class may be sure of
		 * it, and every class leads to the same socket: only when none
		 * is does "may be" decide (the first such class's flags). */
		if (m == XNF_CLASS_UNSURE && !unsure)
			unsure = (c->flags & XNF_AX_CLASS_UNSURE_DROP) ? XNF_AX_UNSURE_DROP : XNF_AX_UNSURE_USER;
	}
	return unsure ? unsure : XNF_AX_NO_MATCH;
}

SEC("xdp")
int xnf_afxdp(struct xdp_md *ctx)
{
	__u32 zero = 0, reason = XNF_AX_TO_USER;
	void *table = bpf_map_lookup_elem(&classes, &zero);

	if (table)
		reason = classify_frame(ctx, table);
	if (reason == XNF_AX_UNSURE_DROP) {
		count(reason);
		return XDP_DROP;
	}
	if (reason != XNF_AX_TO_USER && reason != XNF_AX_UNSURE_USER) {
		count(reason);
		return XDP_PASS;
	}
	if (bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS) != XDP_REDIRECT) {
		count(XNF_AX_NO_SOCKET);
		return XDP_PASS;
	}
	count(reason);
	return XDP_REDIRECT;
}

char _license[] SEC("license") = "Dual MIT/GPL";
