/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf router: IPv4/IPv6 forwarding at the XDP hook, driven by the kernel FIB.
 *
 * The fast path owns exactly one case: a well-formed unicast IP packet, for
 * another host, whose route and neighbour the kernel already knows and whose
 * egress interface is managed by this router. Everything else is handed to
 * the kernel with XDP_PASS, unchanged, so the kernel's behaviour (ICMP
 * errors, neighbour resolution, fragmentation, local delivery, netfilter)
 * stays exactly what it was without xnf; the stats say why it happened.
 *
 * One program instance is loaded per attached interface; all instances share
 * the maps below, which the control plane pins under /sys/fs/bpf/xnf/.
 */
#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"
#include "router.h"
#include "xnf/fib.h"
#include "xnf/fib_cache.h"

/* Not used by the program: puts these types into BTF, so that the skeleton
 * gives the control plane their Rust mirrors (src/program.rs). */
const volatile struct {
	enum xnf_router_limits limits;
	enum xnf_fib_cache_limits cache_limits;
	enum xnf_fib_cache_aside aside;
	enum xnf_fib_cache_outcome outcome;
	struct xnf_fib_ctl ctl;
	struct xnf_fib_cache_key cache_key;
	struct xnf_fib_cache_entry cache_entry;
	struct xnf_fib_cache_slot cache_slot;
	enum xnf_neigh_use_limits neigh_use_limits;
} xnf_btf_anchor = {};

/* Set by the loader before load; the verifier prunes what they turn off. */
const volatile __u32 fib_flags = 0;   /* 0 or BPF_FIB_LOOKUP_DIRECT */
const volatile __u32 stats_slot = 0;  /* this interface's slot in ifaces/stats */
const volatile __u8 generic = 0;      /* attached in skb (generic) mode */
const volatile __u8 fib_cached = 0;   /* look routes up through the cache (fib_cache.h) */
const volatile __u8 count_bytes = 1;  /* keep byte counters (0: packets and reasons only) */

/*
 * Egress ports. A devmap (not bpf_redirect()) because the kernel then bulks
 * frames per destination and flushes them once per NAPI poll, and because a
 * missing key tells us the egress is not ours: bpf_redirect_map() then
 * returns the fallback action in its flags (XDP_PASS) instead of dropping.
 *
 * tx_ports holds the interfaces attached in driver (native) mode: a frame
 * redirected from a driver hook is sent with the egress driver's XDP
 * transmit (ndo_xdp_xmit), which a device attached in skb mode may not have
 * set up, so it would be lost. tx_ports_all holds every attached interface,
 * for instances attached in skb mode: their redirects take the kernel's
 * generic transmit, which reaches any device.
 */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, XNF_ROUTER_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, XNF_ROUTER_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports_all SEC(".maps");

/* Interfaces attached in skb mode: driver-mode instances hand frames for
 * them to the kernel and count why (egress-skb-mode). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_ROUTER_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} skb_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_ROUTER_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct xnf_router_iface);
} ifaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_ROUTER_MAX_IFACES);
	__type(key, __u32);
	__type(value, struct xnf_router_stats);
} stats SEC(".maps");

/* (physical ifindex, VID) -> VLAN device, for the FIB lookup. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_ROUTER_MAX_VLANS);
	__type(key, struct xnf_vlan_key);
	__type(value, struct xnf_vlan_ingress);
} vlan_ingress SEC(".maps");

/* VLAN device ifindex (as the FIB returns it) -> physical port and VID. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_ROUTER_MAX_VLANS);
	__type(key, __u32);
	__type(value, struct xnf_vlan_egress);
} vlan_egress SEC(".maps");

static __always_inline __u32 count(__u32 action, __u32 reason, __u64 len, __u32 outcome)
{
	struct xnf_router_stats *s;
	__u32 slot = stats_slot;

	s = bpf_map_lookup_elem(&stats, &slot);
	if (s && action < XNF_VERDICTS && reason < XNF_R_MAX) {
		s->packets[action]++;
		if (count_bytes)
			s->bytes[action] += len;
		s->reasons[reason]++;
		if (fib_cached && outcome < XNF_FC_MAX)
			s->cache[outcome]++;
	}
	return action;
}

/*
 * What the Ethernet header and the tag say, after parsing: whether the
 * frame is for this router at all, and the ingress ifindex the FIB must
 * see. For a tagged frame that is the VLAN device, so policy rules,
 * per-device forwarding and rp settings apply as in the kernel path.
 */
static __always_inline __u32 check_l2(struct xdp_md *ctx, const struct xnf_pkt *pkt,
				      enum xnf_parse_result parsed, __u32 *fib_ifindex, __u8 *rpf)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct xnf_router_iface *iface;
	__u32 slot = stats_slot;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XNF_R_MALFORMED;
	iface = bpf_map_lookup_elem(&ifaces, &slot);
	if (!iface || !iface->ifindex)
		return XNF_R_UNCONFIGURED;
	/* Broadcast and multicast (ARP, ND, LLDP, STP) are the host's: the
	 * kernel delivers them or drops them, and never routes them. */
	if (xnf_mac_is_multicast(eth->h_dest))
		return XNF_R_MULTICAST;
	/* A frame for another MAC (a promiscuous port) is not routed either:
	 * the kernel drops it as PACKET_OTHERHOST, so we must not forward it. */
	if (!xnf_mac_eq(eth->h_dest, iface->mac))
		return XNF_R_NOT_OUR_MAC;
	if (parsed == XNF_PARSE_QINQ)
		return XNF_R_QINQ;
	if (parsed == XNF_PARSE_MALFORMED)
		return XNF_R_MALFORMED;
	*fib_ifindex = ctx->ingress_ifindex;
	*rpf = iface->rpf;
	/* VID 0 is a priority tag: the kernel takes the frame as untagged. */
	if (pkt->tagged && pkt->vid) {
		struct xnf_vlan_key key = { .ifindex = ctx->ingress_ifindex, .vid = pkt->vid };
		struct xnf_vlan_ingress *vlan = bpf_map_lookup_elem(&vlan_ingress, &key);

		if (!vlan)
			return XNF_R_VLAN_UNKNOWN;
		*fib_ifindex = vlan->ifindex;
		*rpf = vlan->rpf;
	}
	if (parsed == XNF_PARSE_NON_IP)
		return XNF_R_NON_IP;
	return XNF_R_FORWARDED;
}

static __always_inline long redirect_to(__u32 ifindex)
{
	if (generic)
		return bpf_redirect_map(&tx_ports_all, ifindex, XDP_PASS);
	return bpf_redirect_map(&tx_ports, ifindex, XDP_PASS);
}

/*
 * Point the frame at its egress: pick the devmap entry, resolving a VLAN
 * device to its physical port. bpf_redirect_map() only records the target;
 * the frame is still ours to rewrite until we return XDP_REDIRECT. Returns
 * XNF_R_FORWARDED or why the frame goes to the kernel.
 */
static __always_inline __u32 select_egress(__u32 ifindex, __u16 *out_vid)
{
	struct xnf_vlan_egress *v;

	/* Untagged egress is the common case: one devmap probe, no VLAN lookup. */
	if (redirect_to(ifindex) == XDP_REDIRECT)
		return XNF_R_FORWARDED;
	v = bpf_map_lookup_elem(&vlan_egress, &ifindex);
	if (v) {
		*out_vid = v->vid;
		ifindex = v->phys_ifindex;
		if (redirect_to(ifindex) == XDP_REDIRECT)
			return XNF_R_FORWARDED;
	}
	return bpf_map_lookup_elem(&skb_ports, &ifindex) ? XNF_R_EGRESS_SKB : XNF_R_NOT_MANAGED;
}

/*
 * Make room for, remove or rewrite the 802.1Q tag and write the new
 * Ethernet header. Returns the new L3 offset, or -1 (frame unchanged) if a
 * tag cannot be pushed.
 */
static __always_inline int rewrite_l2(struct xdp_md *ctx, const struct xnf_pkt *f,
				      const struct bpf_fib_lookup *p, __u16 out_vid)
{
	int delta = 0, l3_off = f->l3_off;
	struct vlan_hdr *vh;
	struct ethhdr *eth;
	void *data, *end;

	if (f->tagged && !out_vid)
		delta = sizeof(*vh);          /* pop */
	else if (!f->tagged && out_vid)
		delta = -(int)sizeof(*vh);    /* push */
	if (delta && bpf_xdp_adjust_head(ctx, delta))
		return -1;
	l3_off -= delta;

	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return -1;
	__builtin_memcpy(eth->h_dest, p->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p->smac, ETH_ALEN);
	if (!out_vid) {
		eth->h_proto = f->l3_proto;
		return l3_off;
	}
	vh = (void *)(eth + 1);
	if ((void *)(vh + 1) > end)
		return -1;
	eth->h_proto = bpf_htons(ETH_P_8021Q);
	/* Rewriting a tag keeps its PCP and DEI bits; a pushed tag has PCP 0. */
	vh->h_vlan_TCI = (f->tci & bpf_htons(~VLAN_VID_MASK)) | bpf_htons(out_vid);
	vh->h_vlan_encapsulated_proto = f->l3_proto;
	return l3_off;
}

/* The IP header now sits right after an untagged or a tagged Ethernet
 * header; constant offsets keep the verifier's packet-range tracking exact. */
static __always_inline int decrement_hops(struct xdp_md *ctx, const struct xnf_pkt *f, int l3_off)
{
	if (l3_off == ETH_HLEN)
		return decrement_hops_at(ctx, f->l3_proto, ETH_HLEN);
	if (l3_off == ETH_HLEN + (int)sizeof(struct vlan_hdr))
		return decrement_hops_at(ctx, f->l3_proto, ETH_HLEN + sizeof(struct vlan_hdr));
	return -1;
}

/* The forward lookup, through the cache when the instance has it (which
 * may give the next hop's neigh_use slot in @neigh). */
static __always_inline long lookup(struct xdp_md *ctx, const struct xnf_pkt *f, __u32 iif,
				   struct bpf_fib_lookup *p, __u32 *outcome, __u32 *neigh)
{
	if (fib_cached)
		return fib_lookup_cached(ctx, f, iif, p, fib_flags, outcome, neigh);
	fib_fill(f, iif, p);
	return bpf_fib_lookup(ctx, p, sizeof(*p), fib_flags);
}

static __always_inline __u32 route(struct xdp_md *ctx, __u32 *reason, __u32 *outcome)
{
	__u32 trailer = ctx->data_end - ctx->data;
	struct bpf_fib_lookup p; /* filled by lookup() */
	struct xnf_pkt f = {};
	enum xnf_parse_result parsed;
	__u16 out_vid = 0;
	__u32 iif = 0, neigh = XNF_NEIGH_SLOT_UNKNOWN;
	__u8 rpf = 0;
	int l3_off;
	long rc;

	parsed = xnf_parse(ctx, &f);
	*reason = check_l2(ctx, &f, parsed, &iif, &rpf);
	if (*reason)
		return XDP_PASS;
	*reason = fib_check(ctx, &f);
	if (*reason)
		return XDP_PASS;

	rc = lookup(ctx, &f, iif, &p, outcome, &neigh);
	if (f.family == AF_INET && fib_forwards(rc)) {
		*reason = fib_check_source(ctx, &f, iif, p.ifindex, rpf, fib_flags);
		if (*reason)
			return XDP_PASS;
	}
	*reason = fib_result(rc, &f);
	if (*reason)
		/* A blackhole route drops silently in the kernel too. */
		return *reason == XNF_R_BLACKHOLE ? XDP_DROP : XDP_PASS;

	*reason = select_egress(p.ifindex, &out_vid);
	if (*reason)
		return XDP_PASS;
	/* Forwarded to this neighbour: the follower keeps it confirmed. */
	fib_neigh_used(&p, neigh);
	trailer -= f.ip_end;
	if (trim_trailer(ctx, trailer)) {
		*reason = XNF_R_MALFORMED; /* unreachable: the IP packet is shorter */
		return XDP_PASS;
	}

	l3_off = rewrite_l2(ctx, &f, &p, out_vid);
	if (l3_off < 0) {
		*reason = XNF_R_NO_HEADROOM;
		return XDP_PASS;
	}
	if (decrement_hops(ctx, &f, l3_off)) {
		/* Unreachable: the header was bounds-checked before the rewrite. */
		*reason = XNF_R_MALFORMED;
		return XDP_DROP;
	}
	return XDP_REDIRECT;
}

SEC("xdp")
int xnf_router(struct xdp_md *ctx)
{
	__u64 len = ctx->data_end - ctx->data;
	__u32 reason = XNF_R_FORWARDED, outcome = XNF_FC_MAX;
	__u32 action = route(ctx, &reason, &outcome);

	return count(action, reason, len, outcome);
}

XNF_FIB_CACHE_PROGRAMS(xnf_router_lease, xnf_router_notify)

char _license[] SEC("license") = "Dual MIT/GPL";
