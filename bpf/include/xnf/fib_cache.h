/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * A route cache in front of bpf_fib_lookup(): per (ingress, destination,
 * TOS) what the helper returned for a lookup that succeeded — egress,
 * MACs, MTU — so the next packet to that destination costs one hash
 * lookup instead of a FIB walk and a neighbour lookup.
 *
 * Exactness rests on three things the control plane keeps (the router's
 * follower, nf/router/src/cache.rs):
 *  - a generation number, bumped after every netlink change that can alter
 *    a lookup's answer (routes, rules, neighbours, links, addresses,
 *    forwarding settings). An entry stamped with an older generation is a
 *    miss. The generation is read *before* the helper runs: if the kernel
 *    changes in between, the entry carries the old number and the bump
 *    that follows the change retires it;
 *  - a lease: the cache is used only while the follower renews it
 *    (every 100 ms, for 256 jiffies). A follower that dies — kill -9 —
 *    cannot bump anymore, so its cache stops being trusted within the
 *    lease instead of going stale for ever;
 *  - stepping aside per family where the answer depends on more than the
 *    destination, the ingress and the TOS: policy rules beyond the
 *    defaults, multipath routes (their hash is keyed by a secret the
 *    kernel keeps), nexthop objects, IPv6 source-specific routes. Those
 *    lookups take the helper every time, as without the cache.
 * Only successful lookups are cached: the kernel's own path handles the
 * rest (neighbour resolution, ICMP errors), and each of those packets asks
 * the helper again.
 */
#pragma once

#include "common.h"

enum xnf_fib_cache_limits {
	XNF_FIB_CACHE_ENTRIES = 65536, /* entries (LRU: a full cache evicts the least used) */
	XNF_FIB_CACHE_LEASE = 256,     /* jiffies a renewal keeps the cache on */
};

/* Bits of xnf_fib_ctl.aside: families whose lookups skip the cache. */
enum xnf_fib_cache_aside {
	XNF_FIB_ASIDE_V4 = 1,
	XNF_FIB_ASIDE_V6 = 2,
};

/* How a packet's lookup went, counted per interface. */
enum xnf_fib_cache_outcome {
	XNF_FC_HIT = 0,  /* answered by the cache */
	XNF_FC_MISS,     /* asked the helper (and cached a success) */
	XNF_FC_BYPASS,   /* cache not used: no lease, or the family steps aside */
	XNF_FC_MAX,
};

struct xnf_fib_ctl {
	__u64 lease_until; /* bpf_jiffies64() before which the cache may be used */
	__u32 gen;         /* entries of another generation are misses */
	__u32 aside;       /* enum xnf_fib_cache_aside bits */
};

struct xnf_fib_cache_key {
	__u32 ifindex;   /* FIB ingress: the VLAN device for a tagged frame */
	__u8 family;
	__u8 tos;        /* IPv4 DSCP bits (routes and rules may match them); 0 for IPv6 */
	__u16 pad;
	__be32 dst[4];   /* IPv4 in dst[0] */
};

struct xnf_fib_cache_entry {
	__u32 gen;
	__u32 ifindex;   /* egress as the FIB returned it (maybe a VLAN device) */
	__u16 mtu;       /* the route's MTU the helper checked against */
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_fib_ctl);
} fib_ctl SEC(".maps");

/* LRU: a destination no longer used makes room by itself; per-CPU LRU
 * lists (NO_COMMON_LRU) so that filling takes no lock shared by CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XNF_FIB_CACHE_ENTRIES);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct xnf_fib_cache_key);
	__type(value, struct xnf_fib_cache_entry);
} fib_cache SEC(".maps");

/*
 * bpf_fib_lookup() through the cache: the same return code and the same
 * fields of @p a caller reads (ifindex, smac, dmac, mtu_result on
 * FRAG_NEEDED). @outcome says how it was answered.
 */
static __always_inline long fib_lookup_cached(struct xdp_md *ctx, struct bpf_fib_lookup *p, __u32 flags,
					      __u32 *outcome)
{
	struct xnf_fib_cache_key key = { .ifindex = p->ifindex, .family = p->family };
	struct xnf_fib_cache_entry *e;
	__u32 zero = 0, aside, gen;
	struct xnf_fib_ctl *ctl;
	__u16 tot_len;
	long rc;

	ctl = bpf_map_lookup_elem(&fib_ctl, &zero);
	aside = p->family == AF_INET ? XNF_FIB_ASIDE_V4 : XNF_FIB_ASIDE_V6;
	if (!ctl || (ctl->aside & aside) || bpf_jiffies64() > ctl->lease_until) {
		*outcome = XNF_FC_BYPASS;
		return bpf_fib_lookup(ctx, p, sizeof(*p), flags);
	}
	gen = ctl->gen; /* before the helper: see the top of this file */
	if (p->family == AF_INET) {
		key.tos = p->tos & 0xfc;
		key.dst[0] = p->ipv4_dst;
	} else {
		__builtin_memcpy(key.dst, p->ipv6_dst, sizeof(key.dst));
	}
	tot_len = p->tot_len;
	e = bpf_map_lookup_elem(&fib_cache, &key);
	if (e && e->gen == gen) {
		*outcome = XNF_FC_HIT;
		/* The helper checks the MTU before it looks at the next hop: a
		 * packet too big for the route gets FRAG_NEEDED and @p keeps
		 * the ingress in ifindex, as from the helper. */
		if (tot_len > e->mtu) {
			p->mtu_result = e->mtu;
			return BPF_FIB_LKUP_RET_FRAG_NEEDED;
		}
		p->ifindex = e->ifindex;
		__builtin_memcpy(p->dmac, e->dmac, ETH_ALEN);
		__builtin_memcpy(p->smac, e->smac, ETH_ALEN);
		return BPF_FIB_LKUP_RET_SUCCESS;
	}
	*outcome = XNF_FC_MISS;
	rc = bpf_fib_lookup(ctx, p, sizeof(*p), flags);
	/* On success the helper leaves the route's MTU in mtu_result (the
	 * union with tot_len). A kernel that did not would leave tot_len
	 * there: larger packets would then go to the kernel, never out
	 * wrongly. */
	if (rc == BPF_FIB_LKUP_RET_SUCCESS) {
		/* Built here, not on the hit path, which never needs it. */
		struct xnf_fib_cache_entry fill = { .gen = gen, .ifindex = p->ifindex, .mtu = p->mtu_result };

		__builtin_memcpy(fill.dmac, p->dmac, ETH_ALEN);
		__builtin_memcpy(fill.smac, p->smac, ETH_ALEN);
		bpf_map_update_elem(&fib_cache, &key, &fill, BPF_ANY);
	}
	return rc;
}

/*
 * Renews the lease (run by the follower through BPF_PROG_TEST_RUN, so that
 * the lease is in the kernel's own clock, jiffies, which user space cannot
 * read).
 */
static __always_inline void fib_cache_renew(void)
{
	struct xnf_fib_ctl *ctl;
	__u32 zero = 0;

	ctl = bpf_map_lookup_elem(&fib_ctl, &zero);
	if (ctl)
		ctl->lease_until = bpf_jiffies64() + XNF_FIB_CACHE_LEASE;
}
