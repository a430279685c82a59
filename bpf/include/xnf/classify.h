/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Traffic classes: the header fields a class looks at and whether a parsed
 * frame (struct xnf_pkt, parse.h) matches. Shared by the chain classifier
 * (nf/chain) and the AF_XDP selector (nf/afxdp), so `--match` means the
 * same everywhere (Rust side: crates/core/src/class.rs).
 */
#pragma once

#include "common.h"
#include "parse.h"

/* Fields a class looks at (xnf_match.flags). */
enum xnf_match_flag {
	XNF_M_VLAN = 1 << 0,  /* one 802.1Q tag with this VID (else: untagged only) */
	XNF_M_PROTO = 1 << 1,
	XNF_M_SPORT = 1 << 2, /* UDP/TCP source port range */
	XNF_M_DPORT = 1 << 3,
	XNF_M_SRC = 1 << 4,   /* source prefix */
	XNF_M_DST = 1 << 5,   /* destination prefix */
};

struct xnf_match {
	__u16 flags;
	__u16 vid;
	__u8 family;     /* 0 (any), AF_INET or AF_INET6 */
	__u8 proto;
	__u16 pad;
	__u16 sport_lo, sport_hi;  /* host order, inclusive */
	__u16 dport_lo, dport_hi;
	__u32 src[4], src_mask[4]; /* network order, IPv4 in word 0 */
	__u32 dst[4], dst_mask[4];
};

static __always_inline int prefix_match(const __u32 *addr, const __u32 *net, const __u32 *mask)
{
	return ((addr[0] & mask[0]) == net[0]) & ((addr[1] & mask[1]) == net[1]) &
	       ((addr[2] & mask[2]) == net[2]) & ((addr[3] & mask[3]) == net[3]);
}

enum xnf_class_match {
	XNF_CLASS_NO = 0,
	XNF_CLASS_YES,
	/* Every field that could be read matches, but the class needs the
	 * protocol or the ports and the frame does not show them (a later
	 * fragment, a truncated L4 header, too many extension headers). The
	 * frame may be in the class: an NF that may be a firewall must see it
	 * or it must be dropped, never let around the NF. */
	XNF_CLASS_UNSURE,
};

/*
 * Whether the parsed frame @p is in class @m. A priority tag (VID 0)
 * counts as untagged.
 */
static __always_inline enum xnf_class_match match_pkt(const struct xnf_match *m, const struct xnf_pkt *p)
{
	int tagged = p->tagged && p->vid;
	int unsure = 0;

	if (m->flags & XNF_M_VLAN) {
		if (!tagged || p->vid != m->vid)
			return XNF_CLASS_NO;
	} else if (tagged) {
		return XNF_CLASS_NO;
	}
	if (m->family && m->family != p->family)
		return XNF_CLASS_NO;
	if ((m->flags & XNF_M_SRC) && !prefix_match(p->src, m->src, m->src_mask))
		return XNF_CLASS_NO;
	if ((m->flags & XNF_M_DST) && !prefix_match(p->dst, m->dst, m->dst_mask))
		return XNF_CLASS_NO;
	if (m->flags & XNF_M_PROTO) {
		if (p->l4 == XNF_L4_UNKNOWN)
			unsure = 1;
		else if (m->proto != p->proto)
			return XNF_CLASS_NO;
	}
	if (m->flags & (XNF_M_SPORT | XNF_M_DPORT)) {
		if (p->l4 != XNF_L4_PORTS)
			/* Port classes are UDP/TCP classes (the control plane
			 * insists): a frame of another protocol is not in them,
			 * one whose ports are unknown may be. */
			return p->l4 == XNF_L4_NO_PORTS ? XNF_CLASS_NO : XNF_CLASS_UNSURE;
		if ((m->flags & XNF_M_SPORT) && (p->sport < m->sport_lo || p->sport > m->sport_hi))
			return XNF_CLASS_NO;
		if ((m->flags & XNF_M_DPORT) && (p->dport < m->dport_lo || p->dport > m->dport_hi))
			return XNF_CLASS_NO;
	}
	return unsure ? XNF_CLASS_UNSURE : XNF_CLASS_YES;
}
