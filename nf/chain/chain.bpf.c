/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf chain: steer classes of traffic through network functions that live
 * in their own network namespaces (containers), one after the other, and
 * route what comes out of the last one with the kernel FIB.
 *
 * One program, attached to two kinds of port (the `ports` map says which):
 *
 *  - an ingress: a frame for this host whose headers match a rule is sent
 *    into the first NF of that rule's chain; everything else (no match,
 *    ARP, broadcast, malformed) is XDP_PASS, untouched: the kernel's.
 *  - the host end of an NF's veth: whatever the NF sends back (its output,
 *    possibly rewritten, possibly an answer) goes to the NF's successor, or,
 *    after the last NF, is routed out like xnf router would.
 *
 * The next hop is a property of the NF, not of the packet: an NF has one
 * successor, so the control plane lets chains share an NF only where they
 * continue the same way after it, and refuses cycles. That keeps every hop
 * a single map lookup with no per-packet chain state to carry.
 *
 * Every hop is XDP_REDIRECT through the `tx` devmap: the kernel bulks
 * frames per target and flushes once per NAPI poll, and a key that is
 * missing (the NF's veth vanished with its namespace; the kernel removes
 * unregistered devices from devmaps) makes bpf_redirect_map() return its
 * fallback action instead of sending into nothing.
 */
#include "xnf/common.h"
#include "xnf/parse.h"
#include "xnf/csum.h"
#include "xnf/fib.h"
#define XNF_NEIGH_OWN_EPOCH
#include "xnf/neigh_use.h"
#include "chain.h"

/* Not used by the program: puts these types into BTF, so that the skeleton
 * gives the control plane their Rust mirrors (src/program.rs). */
const volatile struct {
	enum xnf_chain_limits limits;
	enum xnf_chain_port_kind port_kind;
	enum xnf_ingress_reason ingress_reason;
	enum xnf_rule_flag rule_flag;
	struct xnf_chain_rule rule; /* the rule tables' values (declared by size) */
} xnf_btf_anchor = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_CHAIN_MAX_PORTS);
	__type(key, __u32);
	__type(value, struct xnf_chain_port);
} ports SEC(".maps");

/*
 * The classifier's rules, in order, behind a one-slot map of maps: the
 * control plane builds a whole new rule table and swaps it in with one
 * update, so a packet sees the old rules or the new ones, never a mix, and
 * a CPU still scanning the old table keeps it alive until it is done.
 */
struct rule_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_CHAIN_MAX_RULES);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct xnf_chain_rule));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct rule_table);
} rules SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_CHAIN_MAX_NFS);
	__type(key, __u32);
	__type(value, struct xnf_chain_nf);
} nfs SEC(".maps");

/* NF ports and egress ports, keyed by ifindex. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, XNF_CHAIN_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} tx SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_CHAIN_MAX_INGRESS);
	__type(key, __u32);
	__type(value, struct xnf_ingress_stats);
} ingress_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_CHAIN_MAX_CHAINS);
	__type(key, __u32);
	__type(value, struct xnf_chain_stats);
} chain_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_CHAIN_MAX_NFS);
	__type(key, __u32);
	__type(value, struct xnf_nf_stats);
} nf_stats SEC(".maps");

static __always_inline __u32 ingress_count(__u32 slot, __u32 reason)
{
	struct xnf_ingress_stats *s = bpf_map_lookup_elem(&ingress_stats, &slot);

	if (s && reason < XNF_IN_MAX)
		s->packets[reason]++;
	return reason;
}

static __always_inline struct xnf_nf_stats *nf_counters(__u32 slot)
{
	return bpf_map_lookup_elem(&nf_stats, &slot);
}

/*
 * Send the frame into NF @slot: point the redirect at its port first (a
 * vanished port means a drop, never a bypass of the NF), then write the
 * Ethernet header its stack accepts as PACKET_HOST. @pop removes the one
 * 802.1Q tag the ingress classified on: NFs see the inner frame.
 */
static __always_inline __u32 steer(struct xdp_md *ctx, __u32 slot, __be16 l3_proto, int pop)
{
	__u64 len = ctx->data_end - ctx->data;
	struct xnf_chain_nf *nf = bpf_map_lookup_elem(&nfs, &slot);
	struct xnf_nf_stats *s = nf_counters(slot);
	struct ethhdr *eth;
	void *end;

	if (!nf || !nf->ifindex || bpf_redirect_map(&tx, nf->ifindex, XDP_DROP) != XDP_REDIRECT) {
		if (s)
			s->gone++;
		return XDP_DROP;
	}
	if (pop) {
		if (bpf_xdp_adjust_head(ctx, (int)sizeof(struct vlan_hdr)))
			return XDP_DROP;
		len -= sizeof(struct vlan_hdr);
	}
	eth = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if ((void *)(eth + 1) > end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, nf->nf_mac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, nf->host_mac, ETH_ALEN);
	if (pop)
		eth->h_proto = l3_proto;
	if (s) {
		s->in_packets++;
		s->in_bytes += len;
	}
	return XDP_REDIRECT;
}

/* What the first rule that takes a frame decides (a copy: the rule table
 * may be swapped by the control plane after the lookup). */
struct xnf_chain_pick {
	__u32 chain;
	__u32 first_nf;
	__u32 flags;
	__u32 unsure;   /* the class may hold the frame (XNF_CLASS_UNSURE) */
};

/*
 * Finds the first rule for a frame from @ifindex whose class takes the
 * frame, or may take it, and copies its decision into @pick: 1 if one
 * does, 0 if none.
 *
 * Global, not inlined, so that the verifier checks it once for any frame.
 * Inlined, its 64-rule loop is walked again for each of the parser's
 * outcomes; Linux 6.1's verifier then gives up at its million-instruction
 * limit (E2BIG), while later kernels prune enough to accept it.
 */
__attribute__((noinline)) int xnf_chain_classify(__u32 ifindex, const struct xnf_pkt *f,
						 struct xnf_chain_pick *pick)
{
	__u32 zero = 0, i, key;
	void *table = bpf_map_lookup_elem(&rules, &zero);
	struct xnf_chain_rule *r;
	enum xnf_class_match m;

	if (!table || !f || !pick)
		return 0;
	for (i = 0; i < XNF_CHAIN_MAX_RULES; i++) {
		/* A copy for the helper: a loop counter whose address escapes
		 * lives on the stack, where the verifier cannot see it grow. */
		key = i;
		r = bpf_map_lookup_elem(table, &key);
		if (!r || !r->ifindex)
			return 0;
		if (r->ifindex != ifindex)
			continue;
		m = match_pkt(&r->m, f);
		if (m != XNF_CLASS_NO) {
			pick->chain = r->chain;
			pick->first_nf = r->first_nf;
			pick->flags = r->flags;
			pick->unsure = m == XNF_CLASS_UNSURE;
			return 1;
		}
	}
	return 0;
}

/* Parses the frame into @f, or names why it is not a chain's to take. */
static __always_inline __u32 parse_ingress(struct xdp_md *ctx, const struct xnf_chain_port *port,
					   struct xnf_pkt *f)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	enum xnf_parse_result parsed = xnf_parse(ctx, f);
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > end)
		return XNF_IN_MALFORMED;
	/* For every host, or for another: the kernel's to deliver or to drop;
	 * a chain only takes what this host would route. */
	if (xnf_mac_is_multicast(eth->h_dest))
		return XNF_IN_MULTICAST;
	if (!xnf_mac_eq(eth->h_dest, port->mac))
		return XNF_IN_NOT_OUR_MAC;
	switch (parsed) {
	case XNF_PARSE_OK:
		return XNF_IN_STEERED;
	case XNF_PARSE_QINQ:
		return XNF_IN_QINQ;
	case XNF_PARSE_NON_IP:
		return XNF_IN_NON_IP;
	default:
		return XNF_IN_MALFORMED;
	}
}

static __always_inline __u32 from_ingress(struct xdp_md *ctx, const struct xnf_chain_port *port)
{
	__u64 len = ctx->data_end - ctx->data;
	struct xnf_chain_pick pick = {};
	struct xnf_chain_stats *cs;
	struct xnf_pkt f = {};
	__u32 reason, chain;

	reason = parse_ingress(ctx, port, &f);
	if (reason != XNF_IN_STEERED) {
		ingress_count(port->slot, reason);
		return XDP_PASS;
	}
	if (!xnf_chain_classify(ctx->ingress_ifindex, &f, &pick)) {
		ingress_count(port->slot, XNF_IN_NO_MATCH);
		return XDP_PASS;
	}
	chain = pick.chain;
	cs = bpf_map_lookup_elem(&chain_stats, &chain);
	if (cs) {
		cs->packets++;
		cs->bytes += len;
	}
	/* May be the chain's class: into its NF, or dropped as the chain says;
	 * never past the NF on the kernel path. */
	if (pick.unsure && (pick.flags & XNF_RULE_UNSURE_DROP)) {
		ingress_count(port->slot, XNF_IN_UNSURE_DROPPED);
		return XDP_DROP;
	}
	/* A chain with an NF missing fails closed: its class is dropped, not
	 * routed around the NF (which may be a firewall). */
	if (!pick.first_nf) {
		ingress_count(port->slot, XNF_IN_DOWN);
		return XDP_DROP;
	}
	if (steer(ctx, pick.first_nf - 1, f.l3_proto, f.tagged) != XDP_REDIRECT) {
		ingress_count(port->slot, XNF_IN_NF_GONE);
		return XDP_DROP;
	}
	ingress_count(port->slot, pick.unsure ? XNF_IN_UNSURE_STEERED : XNF_IN_STEERED);
	return XDP_REDIRECT;
}

/*
 * After the last NF: route like xnf router does, with the NF's port as the
 * FIB's ingress. XDP_PASS on any miss hands the frame to the kernel as if
 * the NF had sent it through the host stack: the kernel then resolves the
 * neighbour, sends the ICMP error or fragments, and the next frames of the
 * flow take XDP again. The port has forwarding enabled (the control plane
 * sees to it), so both paths agree. What the NF sends to every host (its
 * ARP and ND) is the kernel's.
 */
static __always_inline __u32 route_out(struct xdp_md *ctx, const struct xnf_chain_port *port, __u32 *reason)
{
	__u32 trailer = ctx->data_end - ctx->data;
	struct bpf_fib_lookup p;
	struct xnf_pkt f = {};
	enum xnf_parse_result parsed;
	struct ethhdr *eth;
	long rc;

	parsed = xnf_parse(ctx, &f);
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end) {
		*reason = XNF_R_MALFORMED;
		return XDP_PASS;
	}
	/* The kernel forwards no frame sent to every host (ip_forward wants
	 * PACKET_HOST). A unicast frame is routed whatever its destination
	 * MAC: a reflector sends frames back as they came. */
	if (xnf_mac_is_multicast(eth->h_dest)) {
		*reason = XNF_R_MULTICAST;
		return XDP_PASS;
	}
	switch (parsed) {
	case XNF_PARSE_OK:
		/* An NF sends untagged frames; a tag here has no VLAN device. */
		*reason = f.tagged ? XNF_R_VLAN_UNKNOWN : fib_check(ctx, &f);
		break;
	case XNF_PARSE_QINQ:
		*reason = XNF_R_VLAN_UNKNOWN;
		break;
	case XNF_PARSE_NON_IP:
		*reason = f.tagged ? XNF_R_VLAN_UNKNOWN : XNF_R_NON_IP;
		break;
	default:
		*reason = XNF_R_MALFORMED;
	}
	if (*reason)
		return XDP_PASS;

	fib_fill(&f, ctx->ingress_ifindex, &p);
	rc = bpf_fib_lookup(ctx, &p, sizeof(p), 0);
	if (f.family == AF_INET && fib_forwards(rc)) {
		*reason = fib_check_source(ctx, &f, ctx->ingress_ifindex, p.ifindex, port->rpf, 0);
		if (*reason)
			return XDP_PASS;
	}
	*reason = fib_result(rc, &f);
	if (*reason)
		return *reason == XNF_R_BLACKHOLE ? XDP_DROP : XDP_PASS;
	if (bpf_redirect_map(&tx, p.ifindex, XDP_PASS) != XDP_REDIRECT) {
		*reason = XNF_R_NOT_MANAGED;
		return XDP_PASS;
	}
	trailer -= f.ip_end;
	if (trim_trailer(ctx, trailer)) {
		*reason = XNF_R_MALFORMED; /* unreachable: the IP packet is shorter */
		return XDP_PASS;
	}
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end) {
		*reason = XNF_R_MALFORMED; /* unreachable: parsed above */
		return XDP_DROP;
	}
	__builtin_memcpy(eth->h_dest, p.dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, p.smac, ETH_ALEN);
	if (decrement_hops_at(ctx, f.l3_proto, ETH_HLEN)) {
		*reason = XNF_R_MALFORMED; /* unreachable: checked by the parser */
		return XDP_DROP;
	}
	/* Sent past the kernel's output path: keep the neighbour confirmed
	 * as that path would (neigh_use.h). */
	xnf_neigh_used(p.ifindex, p.dmac);
	return XDP_REDIRECT;
}

static __always_inline __u32 from_nf(struct xdp_md *ctx, const struct xnf_chain_port *port)
{
	__u64 len = ctx->data_end - ctx->data;
	__u32 slot = port->slot;
	struct xnf_nf_stats *s = nf_counters(slot);
	struct xnf_chain_nf *nf = bpf_map_lookup_elem(&nfs, &slot);
	__u32 reason = XNF_R_FORWARDED, action;

	if (s) {
		s->out_packets++;
		s->out_bytes += len;
	}
	if (nf && nf->next)
		return steer(ctx, nf->next - 1, 0, 0);
	action = route_out(ctx, port, &reason);
	if (s && reason < XNF_R_MAX)
		s->exit[reason]++;
	return action;
}

SEC("xdp")
int xnf_chain(struct xdp_md *ctx)
{
	__u32 ifindex = ctx->ingress_ifindex;
	struct xnf_chain_port *port = bpf_map_lookup_elem(&ports, &ifindex);

	if (!port)
		return XDP_PASS;
	if (port->kind == XNF_PORT_NF)
		return from_nf(ctx, port);
	return from_ingress(ctx, port);
}

char _license[] SEC("license") = "Dual MIT/GPL";
