/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Which service a frame is for (lb.bpf.c): the service records and VIPs as
 * the control plane wrote them, each lb interface's own MAC, and each
 * CPU's cache of their answers, valid for the control plane's generation.
 */
#pragma once

#include "xnf/common.h"
#include "xnf/parse.h"
#include "lb.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 2 * XNF_LB_MAX_SERVICES);
	__type(key, struct xnf_lb_service_key);
	__type(value, struct xnf_lb_service);
} services SEC(".maps");

/* Every VIP, for the frames that show no port (fragments, ICMP). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_LB_MAX_SERVICES);
	__type(key, struct xnf_lb_addr);
	__type(value, __u32);
} vips SEC(".maps");

/*
 * The own MAC of each interface with the lb stage, written by attach (and
 * rewritten by every attach, detach and apply): XDP has no helper that
 * reads the ingress device's address, and one lookup per frame to a VIP
 * costs less than the slow path it saves a promiscuous interface from.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_LB_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct xnf_lb_mac);
} own_macs SEC(".maps");

/*
 * The control plane's generation: moved on (src/program.rs) after every
 * write of `services` or `own_macs`, so that a service cache slot filled
 * before the write no longer matches. A map of its own: the record layouts
 * stay as they were.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lb_gen SEC(".maps");

/*
 * Each CPU's service cache: the answers of find_service() and own_macs for
 * recent (ingress, VIP, protocol, port), direct-mapped. A frame of a cached
 * service pays a multiply-hash and one compare instead of two hash-map
 * lookups (a jhash of the key, a bucket walk and a key compare each): 36 ns
 * of the stage's 121 by test run before it. Per CPU, so a slot's line
 * never moves between CPUs; the seq word guards against a program run
 * nested on the same CPU (fib_cache.h says when).
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_LB_SVC_CACHE_SLOTS);
	__type(key, __u32);
	__type(value, struct xnf_lb_svc_slot);
} svc_cache SEC(".maps");

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	/* Bytewise: the frame's copy on the stack is not 4-byte aligned, and
	 * the verifier refuses misaligned stack reads. */
	return !((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4]) | (a[5] ^ b[5]));
}

/* Whether the frame was sent to the ingress interface's own MAC: an
 * interface without an entry (no lb attached) owns no frame. */
static __always_inline int to_our_mac(struct xdp_md *ctx, const __u8 *dmac)
{
	__u32 ifindex = ctx->ingress_ifindex;
	const struct xnf_lb_mac *m = bpf_map_lookup_elem(&own_macs, &ifindex);

	return m && mac_eq(dmac, m->addr);
}

static __always_inline const struct xnf_lb_service *find_service(const __u32 *vip, __u8 family, __u8 proto,
								   __u16 port)
{
	struct xnf_lb_service_key k = { .family = family, .proto = proto, .port = port };
	const struct xnf_lb_service *s;

	__builtin_memcpy(k.vip, vip, sizeof(k.vip));
	s = bpf_map_lookup_elem(&services, &k);
	if (s)
		return s;
	/* A port-specific service takes precedence over the all-ports one. */
	k.port = 0;
	return bpf_map_lookup_elem(&services, &k);
}

static __always_inline __u32 svc_cache_slot(const struct xnf_lb_service_key *k, __u32 ifindex)
{
	const __u32 *w = (const __u32 *)k;
	__u64 h = (__u64)w[0] * 0x9e3779b97f4a7c15ULL + (__u64)w[1] * 0xc2b2ae3d27d4eb4fULL +
		  (__u64)w[2] * 0x165667b19e3779f9ULL + (__u64)w[3] * 0x27d4eb2f165667c5ULL +
		  (__u64)w[4] * 0x85ebca77c2b2ae63ULL + (__u64)ifindex * 0xff51afd7ed558ccdULL;

	return h >> (64 - XNF_LB_SVC_CACHE_BITS);
}

static __always_inline int svc_key_eq(const struct xnf_lb_service_key *a, const struct xnf_lb_service_key *b)
{
	const __u32 *x = (const void *)a, *y = (const void *)b;

	return !((x[0] ^ y[0]) | (x[1] ^ y[1]) | (x[2] ^ y[2]) | (x[3] ^ y[3]) | (x[4] ^ y[4]));
}

/*
 * The service of packet @p (its destination, protocol and port), its
 * record copied to @out, through this CPU's service cache: 0, or the
 * counter of why the frame is not the lb's (not-service, not-our-mac), as
 * find_service() and to_our_mac() would say. A miss asks them and keeps a
 * positive answer.
 */
static __always_inline __u32 service_of(struct xdp_md *ctx, const struct xnf_pkt *p, const __u8 *dmac,
					struct xnf_lb_service *out)
{
	struct xnf_lb_service_key k __attribute__((aligned(8))) = {
		.port = p->dport, .family = p->family, .proto = p->proto
	};
	__u32 zero = 0, ifindex = ctx->ingress_ifindex, idx, seq;
	const struct xnf_lb_service *s;
	const struct xnf_lb_mac *m;
	struct xnf_lb_svc_slot *sl;
	__u64 *g, gen;

	__builtin_memcpy(k.vip, p->dst, sizeof(k.vip));
	g = bpf_map_lookup_elem(&lb_gen, &zero);
	gen = g ? *(volatile __u64 *)g : 0;
	idx = svc_cache_slot(&k, ifindex);
	sl = bpf_map_lookup_elem(&svc_cache, &idx);
	if (sl) {
		seq = sl->seq;
		xnf_barrier();
		if (seq && !(seq & 1) && sl->gen == gen && sl->ifindex == ifindex && svc_key_eq(&sl->key, &k)) {
			struct xnf_lb_svc_slot v = *sl;

			xnf_barrier();
			if (sl->seq == seq) {
				*out = v.svc;
				return mac_eq(dmac, v.mac) ? 0 : XNF_LB_NOT_OUR_MAC;
			}
		}
	}
	s = find_service(k.vip, k.family, k.proto, k.port);
	if (!s)
		return XNF_LB_NOT_SERVICE;
	*out = *s;
	m = bpf_map_lookup_elem(&own_macs, &ifindex);
	if (!m || !mac_eq(dmac, m->addr))
		return XNF_LB_NOT_OUR_MAC;
	if (!sl)
		return 0;
	/* A slot being written (by the program this one interrupted) is left
	 * to its writer. */
	seq = sl->seq;
	if (seq & 1)
		return 0;
	sl->seq = seq + 1;
	xnf_barrier();
	sl->ifindex = ifindex;
	sl->gen = gen;
	sl->key = k;
	sl->svc = *out;
	__builtin_memcpy(sl->mac, m->addr, sizeof(sl->mac));
	xnf_barrier();
	sl->seq = seq + 2;
	return 0;
}

static __always_inline int is_vip(const struct xnf_pkt *p)
{
	struct xnf_lb_addr a = { .family = p->family };

	__builtin_memcpy(a.addr, p->dst, sizeof(a.addr));
	return bpf_map_lookup_elem(&vips, &a) != 0;
}
