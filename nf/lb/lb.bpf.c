/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf lb: a Layer-4 load balancer at the XDP hook (the XDP paper §5.3).
 *
 * The lb stage of an interface's entry program (xnf/stage.h), after the
 * filter. A frame to a service (VIP, protocol, port) goes to one of its
 * backends: encapsulated (IP-in-IP, GUE) or with the backend's MAC (DSR),
 * and sent with XDP_TX, or redirected when the route to the backend leaves
 * by another lb interface. Backends answer clients directly; replies never
 * cross the balancer.
 *
 * Which backend: the connection table (an LRU hash with per-CPU lists)
 * remembers each flow's backend, so a flow stays where it is while the
 * backend set changes (a drained backend keeps its flows). A flow without
 * an entry, and every TCP SYN (a new connection, whatever an old entry of
 * the same 5-tuple says), takes the backend in entry hash % size of its
 * service's Maglev table (flowhash.h, built by src/maglev.rs). Two
 * balancers with the same file pick the same backend for a flow without
 * sharing anything: ECMP in front of them may move flows between them.
 *
 * Atomic changes: a service record (its table slot, size and mode) is one
 * hash-map value, replaced whole; a change fills a table in the service's
 * idle slot and then points the record at it. Backends are records that
 * tables and connection-table entries name by id; an entry also holds the
 * record's generation, so an entry made for a removed backend no longer
 * matches once the control plane frees its record. Each CPU caches which
 * service a VIP's frames are for (service.h), valid until the control
 * plane's next write of a service or an interface's MAC.
 *
 * What the stage does not own goes on unchanged, counted:
 * - not a service's (another address, port or protocol, not IP, broken
 *   headers), or a VIP's frame sent to another MAC than the ingress
 *   interface's own (a promiscuous interface sees other hosts' frames;
 *   broadcast and multicast are no one's to balance): the next stage, or
 *   the kernel, as without the lb;
 * - a service's, but fragments, IPv4 options, IPv6 hop-by-hop options, a
 *   VLAN tag, no readable ports, ICMP that is not a too-big error of a
 *   service flow: XDP_PASS, the kernel's as without the lb;
 * - the route to the backend unknown to the fast path: no route or
 *   forwarding off (XDP_PASS of the frame as it came: the kernel says what
 *   it says without xnf), no neighbour yet or an egress without the stage
 *   (XDP_PASS of the encapsulated packet, addressed to this host's MAC:
 *   the kernel forwards it to the backend and resolves the neighbour, so
 *   the next packets take XDP); a DSR backend the route reaches through a
 *   gateway (dsr-not-onlink: its MAC is not on this segment, and the
 *   gateway would get a frame to the VIP), the frame as it came.
 * A packet that no longer fits the egress MTU once encapsulated is
 * answered with ICMP frag-needed / packet-too-big carrying the MTU left
 * for it, as a tunnel in the kernel would, if it is IPv6 or IPv4 with DF;
 * IPv4 without DF is dropped (too-big): frag-needed is only for DF
 * packets (RFC 1191), XDP cannot fragment, and the backend's decap cannot
 * reassemble outer fragments; an ICMP too-big error coming
 * back for a VIP's flow goes to the backend that owns the flow, whose
 * stack sent the packet that was too big.
 */
#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"
#include "xnf/stage.h"
#define XNF_NEIGH_OWN_EPOCH
#include "xnf/neigh_use.h"
#include "xnf/fib_cache.h"
#include "lb.h"
#include "service.h"
#include "flowhash.h"
#include "encap.h"

/* Puts these types into BTF for the Rust mirrors (src/program.rs). */
const volatile struct {
	enum xnf_lb_limits limits;
	enum xnf_lb_mode mode;
	enum xnf_lb_counter counter;
	struct xnf_lb_stats stats;
	struct xnf_lb_service_key service_key;
	struct xnf_lb_service service;
	struct xnf_lb_backend backend;
	struct xnf_lb_flow flow;
	struct xnf_lb_flow_backend flow_backend;
	struct xnf_lb_config config;
	struct xnf_lb_service_stats service_stats;
	struct xnf_lb_backend_stats backend_stats;
	struct xnf_lb_addr addr;
	struct xnf_lb_mac mac;
} xnf_btf_anchor = {};

/* A Maglev table: entry -> backend id. Sizes differ per service, hence
 * BPF_F_INNER_MAP; the template's size is never used. */
struct xnf_lb_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, __u32);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XNF_LB_TABLE_SLOTS);
	__type(key, __u32);
	__array(values, struct xnf_lb_table);
} tables SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_LB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct xnf_lb_backend);
} backends SEC(".maps");

/* Per-CPU LRU lists (BPF_F_NO_COMMON_LRU): a CPU evicts its own least
 * recently used flows without taking a lock the other CPUs want; the
 * keys are shared, so a flow moved to another CPU keeps its entry. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XNF_LB_CT_ENTRIES);
	__uint(map_flags, BPF_F_NO_COMMON_LRU);
	__type(key, struct xnf_lb_flow);
	__type(value, struct xnf_lb_flow_backend);
} conntrack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_lb_config);
} encap_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_lb_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_LB_MAX_SERVICES);
	__type(key, __u32);
	__type(value, struct xnf_lb_service_stats);
} service_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_LB_MAX_BACKENDS);
	__type(key, __u32);
	__type(value, struct xnf_lb_backend_stats);
} backend_stats SEC(".maps");

/*
 * Interfaces with the lb stage, for frames whose backend is routed out of
 * another one. A devmap rather than bpf_redirect(): the kernel bulks frames
 * per egress and flushes once per NAPI poll, and a lookup tells whether the
 * egress is ours (a veth's peer, for one, only receives redirected frames
 * when it runs XDP itself).
 */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, XNF_LB_MAX_IFACES);
	__type(key, __u32);
	__type(value, __u32);
} tx_ports SEC(".maps");

struct lctx {
	struct xnf_pkt pkt;
	struct xnf_lb_stats *stats;
	struct xnf_lb_flow flow;
	struct ethhdr eth;     /* the frame's Ethernet header as it came */
	__u32 len;             /* the frame's length as it came */
	__u32 hash;            /* flow hash (flowhash.h) */
};

static __always_inline void count(const struct lctx *c, __u32 k)
{
	if (c->stats && k < XNF_LB_COUNTERS)
		c->stats->c[k]++;
}

/* Not a service's: the next stage, as if the lb were not there. */
static __always_inline int next(struct xdp_md *ctx, const struct lctx *c, __u32 why)
{
	count(c, why);
	count(c, XNF_LB_CONTINUE);
	return xnf_next_stage(ctx, XNF_STAGE_LB);
}

/* A service's frame that the fast path leaves to the kernel. */
static __always_inline int to_kernel(const struct lctx *c, __u32 why)
{
	count(c, why);
	count(c, XNF_LB_PASS);
	return XDP_PASS;
}

static __always_inline __u32 flow_hash(const struct xnf_lb_flow *f, __u8 hash3)
{
	__u32 ports = hash3 ? 0 : ((__u32)f->sport << 16) | f->dport;

	if (f->family == AF_INET)
		return xnf_flow_hash4(f->src[0], f->dst[0], ports, f->proto);
	return xnf_flow_hash6(f->src, f->dst, ports, f->proto);
}

/* The backend id in entry hash % size of the service's table. */
static __always_inline __u32 table_pick(const struct xnf_lb_service *s, __u32 hash)
{
	__u32 slot = s->slot, e, *id;
	void *table;

	if (!s->table_size)
		return XNF_LB_NONE;
	table = bpf_map_lookup_elem(&tables, &slot);
	if (!table)
		return XNF_LB_NONE;
	e = hash % s->table_size;
	id = bpf_map_lookup_elem(table, &e);
	return id ? *id : XNF_LB_NONE;
}

/* The record of backend @id if it is live (and of generation @gen, if given). */
static __always_inline const struct xnf_lb_backend *backend_at(__u32 id, __u32 gen)
{
	const struct xnf_lb_backend *b = bpf_map_lookup_elem(&backends, &id);

	if (!b || !b->gen || (gen && b->gen != gen))
		return 0;
	return b;
}

static __always_inline void count_service(const struct xnf_lb_service *s, __u32 len, int flow, int no_backend)
{
	__u32 id = s->id;
	struct xnf_lb_service_stats *st = bpf_map_lookup_elem(&service_stats, &id);

	if (!st)
		return;
	st->packets++;
	st->bytes += len;
	st->flows += flow;
	st->no_backend += no_backend;
}

static __always_inline void count_backend(__u32 id, __u32 len)
{
	struct xnf_lb_backend_stats *st = bpf_map_lookup_elem(&backend_stats, &id);

	if (st) {
		st->packets++;
		st->bytes += len;
	}
}

/*
 * The backend of c->flow, a packet of service @s: the connection table's,
 * unless @syn or the entry is stale; else the table's, remembered. NULL:
 * a new flow and no backend takes new flows.
 */
static __always_inline const struct xnf_lb_backend *choose(struct lctx *c, const struct xnf_lb_service *s, int syn,
							  __u32 *id)
{
	const struct xnf_lb_flow_backend *ct = bpf_map_lookup_elem(&conntrack, &c->flow);
	const struct xnf_lb_backend *b;
	struct xnf_lb_flow_backend v = {};

	if (ct && !syn) {
		b = backend_at(ct->id, ct->gen);
		if (b) {
			c->hash = ct->hash ? ct->hash : flow_hash(&c->flow, s->hash3);
			count(c, XNF_LB_CT_HIT);
			*id = ct->id;
			count_service(s, c->len, 0, 0);
			return b;
		}
		count(c, XNF_LB_CT_STALE);
	} else {
		count(c, ct ? XNF_LB_CT_SYN : XNF_LB_CT_MISS);
	}
	c->hash = flow_hash(&c->flow, s->hash3);
	v.id = table_pick(s, c->hash);
	b = backend_at(v.id, 0);
	count_service(s, c->len, 1, !b);
	if (!b)
		return 0;
	v.gen = b->gen;
	v.hash = c->hash;
	bpf_map_update_elem(&conntrack, &c->flow, &v, BPF_ANY);
	*id = v.id;
	return b;
}

/* The flow's outer source: the configured prefix, its host bits from the
 * hash. -1 if the file gave no prefix of that family. */
static __always_inline int outer_source(__u8 family, __u32 hash, __u32 *src)
{
	__u32 zero = 0;
	const struct xnf_lb_config *cfg = bpf_map_lookup_elem(&encap_cfg, &zero);

	if (!cfg)
		return -1;
	if (family == AF_INET) {
		if (!cfg->src4)
			return -1;
		src[0] = cfg->src4 | (bpf_htonl(hash) & cfg->host4);
		return 0;
	}
	if (!(cfg->src6[0] | cfg->src6[1] | cfg->src6[2] | cfg->src6[3]))
		return -1;
	__builtin_memcpy(src, cfg->src6, 16);
	src[3] |= bpf_htonl(hash) & cfg->host6;
	return 0;
}

/* Whether the IPv4 packet of @p has DF set (the header is still the one
 * that came: nothing is written before the route is known). */
static __always_inline int ipv4_df(struct xdp_md *ctx, const struct xnf_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct iphdr *ip;

	if (p->l3_off > XNF_MAX_OFF)
		return 0;
	ip = data + p->l3_off;
	if ((void *)(ip + 1) > end)
		return 0;
	return (ip->frag_off & bpf_htons(0x4000)) != 0;
}

/* Answers a packet too big once encapsulated (encap.h), back the way it
 * came; IPv4 without DF is dropped instead: frag-needed is for DF packets
 * only (RFC 1191: the sender of one without DF expects the path to
 * fragment it and lowers nothing), XDP cannot fragment, and the kernel,
 * given the frame, would route it to the VIP, not balance it. */
static __always_inline int answer_too_big(struct xdp_md *ctx, const struct lctx *c, __u32 mtu)
{
	if (c->pkt.family == AF_INET && !ipv4_df(ctx, &c->pkt)) {
		count(c, XNF_LB_TOO_BIG);
		count(c, XNF_LB_DROP);
		return XDP_DROP;
	}
	if (xnf_lb_too_big(ctx, &c->pkt, &c->eth, mtu))
		return to_kernel(c, XNF_LB_ERROR);
	count(c, XNF_LB_ICMP_SENT);
	count(c, XNF_LB_TX);
	return XDP_TX;
}

/* Whether the next hop bpf_fib_lookup found is backend @b itself. */
static __always_inline int is_backend(const struct bpf_fib_lookup *fib, const struct xnf_lb_backend *b)
{
	if (fib->family != b->family)
		return 0;
	if (b->family == AF_INET)
		return fib->ipv4_dst == b->addr[0];
	return fib->ipv6_dst[0] == b->addr[0] && fib->ipv6_dst[1] == b->addr[1] && fib->ipv6_dst[2] == b->addr[2] &&
	       fib->ipv6_dst[3] == b->addr[3];
}

/*
 * Sends the IP packet of @c to backend @b of service @s. The route to the
 * backend (bpf_fib_lookup, as the kernel's forwarding path would find it)
 * gives the egress, both MACs and the MTU the encapsulated packet must fit.
 */
static __always_inline int send(struct xdp_md *ctx, const struct lctx *c, const struct xnf_lb_service *s,
				const struct xnf_lb_backend *b, int icmp_error)
{
	__u32 extra = xnf_lb_overhead(s->mode, b->family);
	struct xnf_fib_cache_key key __attribute__((aligned(8))) = { .ifindex = ctx->ingress_ifindex, .family = b->family };
	__u32 outcome = XNF_FC_MAX, neigh = XNF_NEIGH_SLOT_UNKNOWN, gw = 0;
	__u32 len = c->pkt.ip_end - c->pkt.l3_off + extra;
	/* Filled by the lookup: what a hit gives (fib_cache.h), everything on
	 * a miss; nothing is read that the lookup did not write. */
	struct bpf_fib_lookup fib;
	__u32 src[4] = {};
	__u32 ifindex;
	long rc;

	if (s->mode != XNF_LB_DSR && outer_source(b->family, c->hash, src))
		return to_kernel(c, XNF_LB_NO_SOURCE);
	if (b->family == AF_INET) {
		/* The FIB matches DSCP, never ECN (IPTOS_RT_MASK). */
		key.tos = inner_tos(&c->pkt) & 0xfc;
		key.dst[0] = b->addr[0];
	} else {
		__builtin_memcpy(key.dst, b->addr, 16);
	}
	/* Through the route cache while the daemon keeps it (fib_cache.h):
	 * the answer does not depend on the outer source the helper is
	 * given, only on the backend, the ingress and the TOS (the cache
	 * steps aside where it would: rules, multipath). */
	rc = fib_lookup_cached_key(ctx, &key, len, 0, src, &fib, 0, &outcome, &neigh, &gw);
	if (rc == BPF_FIB_LKUP_RET_FRAG_NEEDED) {
		/* Never an ICMP error about an ICMP error (RFC 1122 3.2.2,
		 * RFC 4443 2.4(e)): a routed one that does not fit is the
		 * caller's to leave to the kernel. */
		if (icmp_error)
			return -1;
		return answer_too_big(ctx, c, fib.mtu_result - extra);
	}
	if (rc == BPF_FIB_LKUP_RET_FWD_DISABLED)
		return to_kernel(c, XNF_LB_FWD_DISABLED);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS && rc != BPF_FIB_LKUP_RET_NO_NEIGH)
		return to_kernel(c, XNF_LB_NO_ROUTE);
	/* The lookup puts a gateway, if the route has one, in the destination
	 * (of its family): DSR's frame keeps the VIP as its destination, so it
	 * must go to the backend itself, never to a router. */
	if (s->mode == XNF_LB_DSR && (outcome == XNF_FC_HIT ? gw : !is_backend(&fib, b)))
		return to_kernel(c, XNF_LB_DSR_NOT_ONLINK);
	ifindex = fib.ifindex;
	if (rc == BPF_FIB_LKUP_RET_SUCCESS && ifindex != ctx->ingress_ifindex &&
	    !bpf_map_lookup_elem(&tx_ports, &ifindex))
		rc = -1; /* routed out of an interface without the stage */
	if (rc != BPF_FIB_LKUP_RET_SUCCESS) {
		__u32 why = rc == BPF_FIB_LKUP_RET_NO_NEIGH ? XNF_LB_NO_NEIGH : XNF_LB_NOT_MANAGED;

		/* DSR's frame, as it came, is the kernel's to do what it does
		 * without xnf; an encapsulated packet is addressed to this host
		 * for the kernel to forward it. */
		if (s->mode == XNF_LB_DSR)
			return to_kernel(c, why);
		if (trim_trailer(ctx, c->len - c->pkt.ip_end) ||
		    xnf_lb_encap(ctx, &c->pkt, c->hash, s, b, src, c->eth.h_dest, c->eth.h_source))
			return to_kernel(c, XNF_LB_ERROR);
		return to_kernel(c, why);
	}
	if (trim_trailer(ctx, c->len - c->pkt.ip_end) ||
	    xnf_lb_encap(ctx, &c->pkt, c->hash, s, b, src, b->has_mac ? b->mac : fib.dmac, fib.smac))
		return to_kernel(c, XNF_LB_ERROR);
	/* Sent past the kernel's output path: keep the neighbour the route
	 * gave confirmed as that path would (neigh_use.h); a backend with
	 * its own MAC has no neighbour entry to keep. */
	if (!b->has_mac)
		xnf_neigh_used_at(neigh == XNF_NEIGH_SLOT_UNKNOWN ? xnf_neigh_use_slot(ifindex, fib.dmac) : neigh);
	if (ifindex == ctx->ingress_ifindex) {
		count(c, XNF_LB_TX);
		return XDP_TX;
	}
	count(c, XNF_LB_REDIRECT);
	return bpf_redirect_map(&tx_ports, ifindex, 0);
}

/* Whether the TCP segment at l4_off opens a connection (SYN without ACK). */
static __always_inline int is_syn(struct xdp_md *ctx, const struct xnf_pkt *p)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	__u8 *flags;

	if (p->proto != IPPROTO_TCP || p->l4_off > XNF_MAX_OFF || p->l4_off + 14 > p->ip_end)
		return 0;
	flags = data + p->l4_off + 13;
	if ((void *)(flags + 1) > end)
		return 0;
	return (*flags & 0x12) == 0x02;
}

/*
 * An ICMP frag-needed (IPv4) or packet-too-big (IPv6) error sent to a VIP:
 * it quotes a packet the VIP's backend sent to a client, so it belongs to
 * the flow client -> VIP read backwards from the quote. Goes to the backend
 * that flow has (without making an entry); -1 if it is no such error.
 */
static __always_inline int route_icmp(struct xdp_md *ctx, struct lctx *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const struct xnf_lb_flow_backend *ct;
	const struct xnf_lb_service *s;
	const struct xnf_lb_backend *b;
	struct xnf_pkt *p = &c->pkt;
	__u32 off = p->l4_off;
	__be16 *ports;
	__u8 *icmp;
	int v;

	if (off > XNF_MAX_OFF)
		return -1;
	icmp = data + off;
	if (p->family == AF_INET) {
		struct iphdr *in = (void *)(icmp + 8);

		if (p->proto != IPPROTO_ICMP || (void *)(in + 1) > end || icmp[0] != 3 || icmp[1] != 4)
			return -1;
		/* Options in the quote move the ports; the quote of a later
		 * fragment has none. */
		if (*(__u8 *)in != 0x45 || (in->frag_off & bpf_htons(0x1fff)))
			return -1;
		ports = (void *)(in + 1);
		if ((void *)(ports + 2) > end || off + 8 + sizeof(*in) + 4 > p->ip_end)
			return -1;
		c->flow.src[0] = in->daddr;
		c->flow.dst[0] = in->saddr;
		c->flow.proto = in->protocol;
	} else {
		struct ipv6hdr *in = (void *)(icmp + 8);

		if (p->proto != IPPROTO_ICMPV6 || (void *)(in + 1) > end || icmp[0] != 2 || icmp[1] != 0)
			return -1;
		ports = (void *)(in + 1);
		if ((void *)(ports + 2) > end || off + 8 + sizeof(*in) + 4 > p->ip_end)
			return -1;
		__builtin_memcpy(c->flow.src, &in->daddr, 16);
		__builtin_memcpy(c->flow.dst, &in->saddr, 16);
		c->flow.proto = in->nexthdr;
	}
	if (c->flow.proto != IPPROTO_TCP && c->flow.proto != IPPROTO_UDP)
		return -1;
	c->flow.family = p->family;
	c->flow.sport = bpf_ntohs(ports[1]);
	c->flow.dport = bpf_ntohs(ports[0]);
	s = find_service(c->flow.dst, c->flow.family, c->flow.proto, c->flow.dport);
	if (!s)
		return -1;
	c->hash = flow_hash(&c->flow, s->hash3);
	ct = bpf_map_lookup_elem(&conntrack, &c->flow);
	b = ct ? backend_at(ct->id, ct->gen) : 0;
	if (!b)
		b = backend_at(table_pick(s, c->hash), 0);
	if (!b)
		return -1;
	v = send(ctx, c, s, b, 1);
	if (v >= 0)
		count(c, XNF_LB_ICMP_ROUTED);
	return v;
}

/* A frame that shows no ports, or that the fast path leaves alone: the
 * kernel's if it is for a VIP, else the next stage's. */
static __always_inline int special(struct xdp_md *ctx, struct lctx *c)
{
	const struct xnf_pkt *p = &c->pkt;
	int v;

	if (!is_vip(p))
		return next(ctx, c, XNF_LB_NOT_SERVICE);
	if (!to_our_mac(ctx, c->eth.h_dest))
		return next(ctx, c, XNF_LB_NOT_OUR_MAC);
	if (p->tagged)
		return to_kernel(c, XNF_LB_VLAN);
	if (p->frag)
		return to_kernel(c, XNF_LB_FRAGMENT);
	if (p->ip_options)
		return to_kernel(c, XNF_LB_IP_OPTIONS);
	if (p->hbh)
		return to_kernel(c, XNF_LB_IPV6_HBH);
	if (p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6) {
		v = route_icmp(ctx, c);
		return v >= 0 ? v : to_kernel(c, XNF_LB_ICMP_OTHER);
	}
	return to_kernel(c, XNF_LB_NO_PORTS);
}

SEC("xdp")
int xnf_lb(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const struct xnf_lb_backend *b;
	struct xnf_lb_service svc;
	struct lctx c = {};
	enum xnf_parse_result res;
	__u32 zero = 0, id = 0, why;

	c.len = end - data;
	c.stats = bpf_map_lookup_elem(&stats, &zero);
	count(&c, XNF_LB_RX);
	res = xnf_parse(ctx, &c.pkt);
	if (res == XNF_PARSE_NON_IP)
		return next(ctx, &c, XNF_LB_NON_IP);
	if (res == XNF_PARSE_MALFORMED)
		return next(ctx, &c, XNF_LB_MALFORMED);
	if (res == XNF_PARSE_QINQ)
		return next(ctx, &c, XNF_LB_QINQ);
	if ((void *)((struct ethhdr *)data + 1) > end)
		return next(ctx, &c, XNF_LB_MALFORMED);
	__builtin_memcpy(&c.eth, data, sizeof(c.eth));
	if (c.pkt.tagged || c.pkt.frag || c.pkt.ip_options || c.pkt.hbh || c.pkt.l4 != XNF_L4_PORTS)
		return special(ctx, &c);
	/* The MAC is checked once the frame is a service's: other traffic
	 * pays no lookup. */
	why = service_of(ctx, &c.pkt, c.eth.h_dest, &svc);
	if (why)
		return next(ctx, &c, why);
	__builtin_memcpy(c.flow.src, c.pkt.src, sizeof(c.flow.src));
	__builtin_memcpy(c.flow.dst, c.pkt.dst, sizeof(c.flow.dst));
	c.flow.sport = c.pkt.sport;
	c.flow.dport = c.pkt.dport;
	c.flow.family = c.pkt.family;
	c.flow.proto = c.pkt.proto;
	b = choose(&c, &svc, is_syn(ctx, &c.pkt), &id);
	if (!b) {
		count(&c, XNF_LB_NO_BACKEND);
		count(&c, XNF_LB_DROP);
		return XDP_DROP;
	}
	count_backend(id, c.len);
	return send(ctx, &c, &svc, b, 0);
}

XNF_FIB_CACHE_PROGRAMS(xnf_lb_lease, xnf_lb_notify)

char _license[] SEC("license") = "Dual MIT/GPL";
