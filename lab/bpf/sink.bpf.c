/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf sink: counts every frame (per CPU) and drops it.
 *
 * At the end of a measured path, dropping in XDP costs the receiver the
 * least and keeps the counted frames out of the sink's stack (no ICMP port
 * unreachable flowing back through the device under test). As a veth peer
 * it also gives redirected frames the XDP receive path they need.
 *
 * For verification it can also count frames with an 802.1Q tag outermost,
 * and of those the ones of VLAN tag_vid (count_tags: what `xnf lab router
 * --vlan` checks), frames per length (count_sizes) and
 * copy every frame, up to SINK_SNAP bytes, into a ring buffer (capture) for
 * user space to parse. Both are read-only data fixed at load: without them
 * the verifier removes their code and the fast path is the plain count.
 *
 * As the far end of a latency probe (reflect_port), it sends IPv4 UDP to
 * that port back where it came from (MACs, addresses and ports swapped,
 * XDP_TX), counted apart from what it drops: an echo in the receive path,
 * with no thread to wake. Swapping
 * leaves both checksums valid (one's-complement sums do not depend on the
 * order of their terms).
 */
#include "xnf/common.h"
#include "xnf/parse.h"

enum sink_limits {
	SINK_SNAP = 1518,       /* bytes copied per frame at most */
	SINK_SIZES = 2048,      /* lengths counted; longer ones count as the last */
};

/* Never read: the limits reach BTF, and so the skeleton's Rust mirror
 * (programs/sink.rs), only from a global whose type holds the enum. */
const volatile struct {
	enum sink_limits limits;
} sink_abi_anchor = {};

const volatile __u8 capture = 0;
const volatile __u8 count_sizes = 0;
const volatile __u8 count_tags = 0;
const volatile __u16 tag_vid = 0;
const volatile __u16 reflect_port = 0;   /* host order; 0: drop everything */

struct sink_count {
	__u64 packets;
	__u64 bytes;
	__u64 capture_lost;   /* frames not captured: the ring buffer was full */
	__u64 reflected;      /* probes turned around (not in packets/bytes) */
	__u64 tagged;         /* of packets: 802.1Q-tagged (count_tags) */
	__u64 tagged_vid;     /* of those: of VLAN tag_vid */
};

/* An Ethernet header with one 802.1Q tag. */
struct sink_vlan_hdr {
	struct ethhdr eth;
	__be16 tci;
	__be16 proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_count);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SINK_SIZES);
	__type(key, __u32);
	__type(value, __u64);
} sizes SEC(".maps");

/* One captured frame: its length on arrival, the CPU that received it, and
 * min(len, SINK_SNAP) bytes of it. */
struct sink_record {
	__u32 len;
	__u32 cpu;
	__u8 data[SINK_SNAP];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);   /* set by user space when capturing */
} ring SEC(".maps");

/* Staging for a record (too big for the stack); copied into the ring with
 * its real length, so small frames take little room there. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_record);
} scratch SEC(".maps");

static __always_inline int capture_frame(struct xdp_md *ctx, __u32 len)
{
	__s64 snap = len < SINK_SNAP ? len : SINK_SNAP;
	__u32 zero = 0;
	struct sink_record *r = bpf_map_lookup_elem(&scratch, &zero);

	if (!r)
		return -1;
	/* Two plain signed checks on the register the helper gets: the
	 * compiler would fold unsigned ones into one on snap - 1, which the
	 * verifier cannot use, and turns an unsigned "snap < 1" into
	 * "snap == 0", from which Linux 6.1's verifier learns no lower bound
	 * (later kernels do). */
	asm volatile("" : "+r"(snap));
	if (snap > SINK_SNAP)
		return -1;
	asm volatile("" : "+r"(snap));
	if (snap < 1)
		return -1;
	r->len = len;
	r->cpu = bpf_get_smp_processor_id();
	if (bpf_xdp_load_bytes(ctx, 0, r->data, snap))
		return -1;
	return bpf_ringbuf_output(&ring, r, 8 + snap, 0);
}

/* An untagged, unfragmented IPv4 UDP datagram to reflect_port, with no IP
 * options, turned around in place; 0 if it was one, -1 if not. Read with
 * the one parser (parse.h): a later fragment whose payload happens to look
 * like a UDP header to that port is not a probe, and is dropped. Only
 * loaded with reflect_port set, so the counting sink pays nothing for it. */
static __always_inline int reflect_probe(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = (void *)(eth + 1);
	struct udphdr *udp = (void *)(ip + 1);
	struct xnf_pkt p = {};
	__be32 addr;
	__be16 port;

	if (xnf_parse(ctx, &p) != XNF_PARSE_OK || p.tagged || p.family != AF_INET || p.ip_options ||
	    p.frag != XNF_FRAG_NONE || p.proto != IPPROTO_UDP || p.l4 != XNF_L4_PORTS || p.dport != reflect_port)
		return -1;
	if ((void *)(udp + 1) > end)
		return -1;
	addr = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = addr;
	port = udp->source;
	udp->source = udp->dest;
	udp->dest = port;
	return xnf_swap_macs(ctx);
}

SEC("xdp")
int xnf_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct sink_count *c = bpf_map_lookup_elem(&counts, &zero);
	__u32 len = ctx->data_end - ctx->data;

	if (!c)
		return XDP_DROP;
	if (reflect_port && !reflect_probe(ctx)) {
		c->reflected++;
		return XDP_TX;
	}
	c->packets++;
	c->bytes += len;
	if (count_tags) {
		struct sink_vlan_hdr *v = (void *)(long)ctx->data;

		if ((void *)(v + 1) <= (void *)(long)ctx->data_end && v->eth.h_proto == bpf_htons(ETH_P_8021Q)) {
			c->tagged++;
			if ((bpf_ntohs(v->tci) & 0xfff) == tag_vid)
				c->tagged_vid++;
		}
	}
	if (count_sizes) {
		__u32 k = len < SINK_SIZES ? len : SINK_SIZES - 1;
		__u64 *n = bpf_map_lookup_elem(&sizes, &k);

		if (n)
			(*n)++;
	}
	if (capture && capture_frame(ctx, len))
		c->capture_lost++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual MIT/GPL";
