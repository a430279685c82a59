/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * A route cache in front of bpf_fib_lookup(): per (ingress, destination,
 * TOS) what the helper returned for a lookup that succeeded — egress,
 * MACs, MTU — so the next packet to that destination costs one multiply-
 * and-shift and one cache line instead of a FIB walk and a neighbour
 * lookup.
 *
 * The cache is direct-mapped and per CPU: each CPU owns XNF_FIB_CACHE_SLOTS
 * slots of one array (its region starts at cpu * XNF_FIB_CACHE_SLOTS), and
 * a key has exactly one slot in it. Not an LRU hash: that costs a jhash of
 * the key, a bucket walk and the LRU's bookkeeping on every packet (7 ns
 * of 123 here, measured); an array lookup is inlined by the verifier, and
 * only the owning CPU ever writes or reads a region, so no line bounces
 * between CPUs and no lock is needed. Two hot destinations on one slot
 * evict each other: each such packet then costs what it costs without the
 * cache (one helper call), never a wrong answer, whoever chose the
 * addresses. Slots are 64 bytes in a page-aligned (mmapable) array: one
 * cache line each.
 *
 * Exactness rests on three things its keeper maintains (the shared one,
 * crates/core/src/route_cache.rs: run by the router's follower for the
 * router's cache, by the daemon for the lb's), one of them through the
 * kernel:
 *  - generation numbers, bumped after every netlink change that can alter
 *    a lookup's answer (routes, rules, neighbours, links, addresses,
 *    forwarding settings): by the kernel itself as it notifies the change
 *    (fib_kgen below) and by the follower when it has read it (fib_ctl's
 *    gen, which also moves with the families stepping aside). An entry
 *    stamped with another generation of either is a miss. Both are read
 *    *before* the helper runs: if the kernel changes in between, the
 *    entry carries the old numbers and the bump that follows the change
 *    retires it;
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
#include "fib.h"
#include "neigh_use.h"

enum xnf_fib_cache_limits {
	XNF_FIB_CACHE_SLOTS = 8192,    /* slots per CPU (direct-mapped: a power of two) */
	XNF_FIB_CACHE_SLOT_BITS = 13,  /* log2 of XNF_FIB_CACHE_SLOTS */
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

/* What an entry knows beyond the helper's fields. */
enum xnf_fib_cache_flags {
	/* The route's next hop is a gateway, not the destination itself (the
	 * helper wrote another address over the destination): the lb's DSR
	 * needs the backend on-link. */
	XNF_FIB_VIA_GATEWAY = 1,
};

struct xnf_fib_ctl {
	__u64 lease_until; /* bpf_jiffies64() before which the cache may be used */
	__u32 gen;         /* entries of another generation are misses */
	__u32 aside;       /* enum xnf_fib_cache_aside bits */
	__u32 neigh_epoch; /* what frames stamp their neighbour's slot with (neigh_use.h) */
	__u32 pad;
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
	__u64 kgen;      /* fib_kgen when it was filled */
	__u16 mtu;       /* the route's MTU the helper checked against */
	__u8 dmac[ETH_ALEN];
	__u8 smac[ETH_ALEN];
	__u16 neigh;     /* the next hop's slot in neigh_use */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_fib_ctl);
} fib_ctl SEC(".maps");

/*
 * The kernel's own count of changes: bumped by xnf_router_notify, a socket
 * filter the follower attaches to its rtnetlink socket. The kernel runs a
 * socket's filter for every notification it broadcasts, in the context of
 * the change itself (do_one_broadcast), after the change is visible: so
 * an entry is retired before the call that changed a route, a neighbour, a
 * link returns — however long the follower then waits for a CPU (it waited
 * up to 60 ms here, behind a routing daemon installing a million routes).
 * A separate map: user space rewrites fib_ctl whole, which would undo a
 * concurrent increment.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fib_kgen SEC(".maps");

/*
 * One slot. seq is odd while its owner writes it: a program that runs
 * nested on the same CPU (an XDP program under BPF_PROG_TEST_RUN can be
 * interrupted by a softirq running another instance) neither writes a slot
 * being written nor trusts what it read if seq moved meanwhile.
 */
struct xnf_fib_cache_slot {
	__u32 seq;       /* 0: never filled; odd: being written */
	__u32 flags;     /* enum xnf_fib_cache_flags */
	struct xnf_fib_cache_key key;
	struct xnf_fib_cache_entry e;
};

/* max_entries is XNF_FIB_CACHE_SLOTS times the possible CPUs, set by the
 * loader; what is written here is one CPU's share. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_FIB_CACHE_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct xnf_fib_cache_slot);
} fib_cache SEC(".maps");

/*
 * A key's slot in a CPU's region: a multilinear hash (fixed odd 64-bit
 * multipliers, the top bits of the sum), cheap and spreading every word of
 * the key. User space has the same function (nf/router/src/program.rs,
 * cache_slot) to find an entry.
 */
static __always_inline __u32 fib_cache_slot(const struct xnf_fib_cache_key *k)
{
	__u64 h = (__u64)k->dst[0] * 0x9e3779b97f4a7c15ULL + (__u64)k->dst[1] * 0xc2b2ae3d27d4eb4fULL +
		  (__u64)k->dst[2] * 0x165667b19e3779f9ULL + (__u64)k->dst[3] * 0x27d4eb2f165667c5ULL +
		  (__u64)k->ifindex * 0x85ebca77c2b2ae63ULL + (__u64)k->tos * 0xff51afd7ed558ccdULL;

	return h >> (64 - XNF_FIB_CACHE_SLOT_BITS);
}

static __always_inline int fib_cache_key_eq(const struct xnf_fib_cache_key *a, const struct xnf_fib_cache_key *b)
{
	const __u64 *x = (const void *)a, *y = (const void *)b;

	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2];
}

/* No neigh_use slot known yet for a lookup's next hop. */
#define XNF_NEIGH_SLOT_UNKNOWN XNF_NEIGH_USE_SLOTS

/*
 * A frame is forwarded to the next hop in @p: its neigh_use slot stamped
 * with the follower's epoch (neigh_use.h). @slot is the slot a cached
 * route keeps, or XNF_NEIGH_SLOT_UNKNOWN: then it is hashed here, so that
 * only frames that are forwarded pay for it.
 */
static __always_inline void fib_neigh_used(const struct bpf_fib_lookup *p, __u32 slot)
{
	__u32 zero = 0;
	struct xnf_fib_ctl *ctl = bpf_map_lookup_elem(&fib_ctl, &zero);

	if (slot == XNF_NEIGH_SLOT_UNKNOWN)
		slot = xnf_neigh_use_slot(p->ifindex, p->dmac);
	xnf_neigh_stamp(slot, ctl ? ctl->neigh_epoch : 0);
}

/* The helper's parameters for @k alone: the destination, ingress and TOS
 * the cache keys on, source @src and IP length @len (a caller that sends
 * a packet of its own making, as the lb's outer header). */
static __always_inline void fib_fill_key(const struct xnf_fib_cache_key *k, const __u32 *src, __u32 len,
					 struct bpf_fib_lookup *p)
{
	__builtin_memset(p, 0, sizeof(*p));
	p->family = k->family;
	p->ifindex = k->ifindex;
	p->tot_len = len;
	if (k->family == AF_INET) {
		p->tos = k->tos;
		p->ipv4_src = src[0];
		p->ipv4_dst = k->dst[0];
	} else {
		__builtin_memcpy(p->ipv6_src, src, sizeof(p->ipv6_src));
		__builtin_memcpy(p->ipv6_dst, k->dst, sizeof(p->ipv6_dst));
	}
}

/* The helper itself, for a miss or a bypass; @p filled from @f first, or
 * with @f NULL from the key, @src and @len (fib_fill_key): a hit never
 * pays for filling it. */
static __always_inline long fib_cache_helper(struct xdp_md *ctx, const struct xnf_pkt *f,
					     const struct xnf_fib_cache_key *k, const __u32 *src, __u32 len,
					     struct bpf_fib_lookup *p, __u32 flags)
{
	if (f)
		fib_fill(f, k->ifindex, p);
	else
		fib_fill_key(k, src, len, p);
	return bpf_fib_lookup(ctx, p, sizeof(*p), flags);
}

/* Whether the helper replaced the destination of @p by a gateway. */
static __always_inline int fib_via_gateway(const struct bpf_fib_lookup *p, const struct xnf_fib_cache_key *k)
{
	if (k->family == AF_INET)
		return p->ipv4_dst != k->dst[0];
	return p->ipv6_dst[0] != k->dst[0] || p->ipv6_dst[1] != k->dst[1] || p->ipv6_dst[2] != k->dst[2] ||
	       p->ipv6_dst[3] != k->dst[3];
}

/*
 * The lookup of @key through the cache: bpf_fib_lookup()'s return code and
 * the fields of @p a caller reads (ifindex, smac, dmac; mtu_result on
 * FRAG_NEEDED), and, when the answer is cached (a hit, or a miss that
 * filled a slot), the next hop's slot in neigh_use in @neigh (kept in the
 * entry, so a hit hashes nothing) and whether the next hop is a gateway in
 * @gw; both are left alone otherwise. On a miss or a bypass the helper
 * gets @p, filled from @f (fib_fill) or, with @f NULL, from @key, @src
 * and @len (fib_fill_key); a hit never pays for filling it. @len is the IP length a hit
 * checks against the route's MTU. @outcome says how it was answered.
 */
static __always_inline long fib_lookup_cached_key(struct xdp_md *ctx, struct xnf_fib_cache_key *key, __u32 len,
						  const struct xnf_pkt *f, const __u32 *src, struct bpf_fib_lookup *p,
						  __u32 flags,
						  __u32 *outcome, __u32 *neigh, __u32 *gw)
{
	struct xnf_fib_cache_slot *sl;
	struct xnf_fib_cache_entry e;
	__u32 zero = 0, aside, gen, idx, seq, fl;
	struct xnf_fib_ctl *ctl;
	__u64 *kgen_p, kgen;
	long rc;

	ctl = bpf_map_lookup_elem(&fib_ctl, &zero);
	aside = key->family == AF_INET ? XNF_FIB_ASIDE_V4 : XNF_FIB_ASIDE_V6;
	if (!ctl || (ctl->aside & aside) || bpf_jiffies64() > ctl->lease_until) {
		*outcome = XNF_FC_BYPASS;
		return fib_cache_helper(ctx, f, key, src, len, p, flags);
	}
	/* Both before the helper: see the top of this file. */
	gen = ctl->gen;
	kgen_p = bpf_map_lookup_elem(&fib_kgen, &zero);
	kgen = kgen_p ? *(volatile __u64 *)kgen_p : 0;
	idx = bpf_get_smp_processor_id() * XNF_FIB_CACHE_SLOTS + fib_cache_slot(key);
	sl = bpf_map_lookup_elem(&fib_cache, &idx);
	if (!sl) {
		/* A CPU beyond the ones possible at load: no region. */
		*outcome = XNF_FC_BYPASS;
		return fib_cache_helper(ctx, f, key, src, len, p, flags);
	}
	seq = sl->seq;
	xnf_barrier();
	if (seq && !(seq & 1) && fib_cache_key_eq(&sl->key, key)) {
		e = sl->e;
		fl = sl->flags;
		xnf_barrier();
		if (e.gen == gen && e.kgen == kgen && sl->seq == seq) {
			*outcome = XNF_FC_HIT;
			/* The helper checks the MTU before it looks at the next
			 * hop: a packet too big for the route gets FRAG_NEEDED
			 * and ifindex stays the ingress, as from the helper. */
			if (len > e.mtu) {
				p->ifindex = key->ifindex;
				p->mtu_result = e.mtu;
				return BPF_FIB_LKUP_RET_FRAG_NEEDED;
			}
			p->ifindex = e.ifindex;
			__builtin_memcpy(p->dmac, e.dmac, ETH_ALEN);
			__builtin_memcpy(p->smac, e.smac, ETH_ALEN);
			*neigh = e.neigh;
			*gw = fl & XNF_FIB_VIA_GATEWAY;
			return BPF_FIB_LKUP_RET_SUCCESS;
		}
	}
	*outcome = XNF_FC_MISS;
	rc = fib_cache_helper(ctx, f, key, src, len, p, flags);
	/* On success the helper leaves the route's MTU in mtu_result (the
	 * union with tot_len). A kernel that did not would leave tot_len
	 * there: larger packets would then go to the kernel, never out
	 * wrongly. A slot being written (by the program this one interrupted)
	 * is left to its writer. */
	seq = sl->seq;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS && !(seq & 1)) {
		sl->seq = seq + 1;
		xnf_barrier();
		sl->key = *key;
		sl->e.gen = gen;
		sl->e.kgen = kgen;
		sl->e.ifindex = p->ifindex;
		sl->e.mtu = p->mtu_result;
		__builtin_memcpy(sl->e.dmac, p->dmac, ETH_ALEN);
		__builtin_memcpy(sl->e.smac, p->smac, ETH_ALEN);
		*neigh = xnf_neigh_use_slot(p->ifindex, p->dmac);
		sl->e.neigh = *neigh;
		*gw = fib_via_gateway(p, key) ? XNF_FIB_VIA_GATEWAY : 0;
		sl->flags = *gw;
		xnf_barrier();
		sl->seq = seq + 2;
	}
	return rc;
}

/*
 * The forward lookup of the checked packet @f arriving on @iif through the
 * cache (fib_lookup_cached_key, keyed by the packet's destination and
 * TOS). @p needs no initialising.
 */
static __always_inline long fib_lookup_cached(struct xdp_md *ctx, const struct xnf_pkt *f, __u32 iif,
					      struct bpf_fib_lookup *p, __u32 flags, __u32 *outcome,
					      __u32 *neigh)
{
	struct xnf_fib_cache_key key __attribute__((aligned(8))) = { .ifindex = iif, .family = f->family };
	__u32 gw;

	if (f->family == AF_INET) {
		key.tos = f->tos & 0xfc;
		key.dst[0] = f->dst[0];
	} else {
		__builtin_memcpy(key.dst, f->dst, sizeof(key.dst));
	}
	return fib_lookup_cached_key(ctx, &key, f->ip_end - f->l3_off, f, 0, p, flags, outcome, neigh, &gw);
}

/* One more change seen by the kernel (see fib_kgen). */
static __always_inline void fib_cache_kernel_bump(void)
{
	__u64 *k;
	__u32 zero = 0;

	k = bpf_map_lookup_elem(&fib_kgen, &zero);
	if (k)
		__sync_fetch_and_add(k, 1);
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

/*
 * The two programs a keeper (crates/core/src/route_cache.rs) needs from an
 * NF whose program uses this cache, named after the NF:
 * - @lease, run by the keeper through BPF_PROG_TEST_RUN to renew the lease
 *   (in jiffies, which user space cannot read); never attached;
 * - @notify, attached by the keeper to its rtnetlink socket (SO_ATTACH_BPF),
 *   never to an interface: the kernel runs it for every notification of
 *   the keeper's groups as it makes the change (fib_kgen above). It keeps
 *   every message: the keeper reads them all.
 */
#define XNF_FIB_CACHE_PROGRAMS(lease, notify)          \
	SEC("xdp")                                      \
	int lease(struct xdp_md *ctx)                   \
	{                                               \
		fib_cache_renew();                      \
		return XDP_PASS;                        \
	}                                               \
	SEC("socket")                                   \
	int notify(struct __sk_buff *skb)               \
	{                                               \
		fib_cache_kernel_bump();                \
		return skb->len;                        \
	}
