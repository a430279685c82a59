/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf gen: the in-kernel traffic generator's XDP program.
 *
 * User space runs it with BPF_PROG_TEST_RUN and BPF_F_TEST_XDP_LIVE_FRAMES:
 * the kernel builds frames from one template, runs this program on each and
 * transmits those it returns XDP_TX for on the ingress interface (a veth
 * here, so they arrive at its peer). Live-frame pages are recycled through a
 * page pool and come back holding whatever the receiver wrote into them (a
 * router rewrites MACs and TTL), and with whatever length the last run left,
 * so every run sets the length and writes all headers afresh.
 *
 * Sizes: up to GEN_CLASSES size classes, sent in the repeating order of
 * seq[] (IMIX). Each class has its headers precomputed by user space for
 * flow 0: lengths and checksums included. The payload is zero (the template
 * is all zeros past the headers and bpf_xdp_adjust_tail zeroes what it
 * grows), so no per-packet checksum is ever computed over data.
 *
 * Flows: a flow is (source port, destination port, source address,
 * destination address), counted like an odometer with the source port
 * turning fastest. Every field that differs from flow 0 patches the IPv4
 * header and L4 checksums incrementally (RFC 1624): for ports the delta is
 * computed here, for addresses it comes precomputed with each address.
 *
 * VLAN: with vlan set, the headers carry one 802.1Q tag (user space puts
 * it in each class's headers, from the template) and every offset past the
 * Ethernet header is 4 bytes further; the program never reads the tag.
 *
 * Rate: a live-frame run cannot sleep, and each BPF_PROG_TEST_RUN call ends
 * with a teardown that waits milliseconds, so pacing by short calls is
 * impossible. Instead the program paces itself: with a rate set, a frame
 * whose time has not come is dropped here (cheaply, before any device sees
 * it) and the next one is tried. The CPU spins either way; the wire sees an
 * even rate, at most twice as fast for as long as it takes to catch up
 * after the pause between two runs, so the average rate is the one set.
 *
 * Count: with a limit set, frames beyond it are dropped here, so exactly
 * `limit` frames leave however many times user space runs the program.
 */
#include "xnf/common.h"
#include "xnf/csum.h"

enum gen_limits {
	GEN_CLASSES = 8,        /* size classes (a power of two) */
	GEN_SEQ = 1024,         /* longest class sequence (a power of two) */
	GEN_HDR_MAX = 80,       /* Ethernet + 802.1Q + IPv6 + TCP = 78 */
};

const volatile __u8 ipv6 = 0;
const volatile __u8 tcp = 0;
const volatile __u8 vlan = 0;       /* one 802.1Q tag after the MACs */
const volatile __u32 seq_len = 1;    /* classes sent in the order seq[0..seq_len) */
const volatile __u32 n_sports = 1;   /* source ports base_sport.. */
const volatile __u32 n_dports = 1;   /* destination ports base_dport.. */
const volatile __u32 n_srcs = 1;     /* entries of srcs[] */
const volatile __u32 n_dsts = 1;     /* entries of dsts[] */
const volatile __u16 base_sport = 1024;
const volatile __u16 base_dport = 9;

/* Headers of flow 0 for one size class; len = the frame's length. */
struct gen_class {
	__u8 hdr[GEN_HDR_MAX];
	__u32 len;
	__u32 pad;
};

const volatile struct gen_class classes[GEN_CLASSES] = {};
const volatile __u8 seq[GEN_SEQ] = {};

/* An address of flow index i and the one's complement delta (RFC 1624,
 * ~old + new, folded) that changes flow 0's checksums to it. IPv4 uses
 * addr[0]. The IPv4 header and L4 pseudo-header take the same delta. */
struct gen_addr {
	__u32 addr[4];
	__u32 delta;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);          /* set by user space */
	__type(key, __u32);
	__type(value, struct gen_addr);
} srcs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);          /* set by user space */
	__type(key, __u32);
	__type(value, struct gen_addr);
} dsts SEC(".maps");

/* ctl[GEN_CTL_RATE]: frames per second per generator CPU, 0 = as fast as
 * possible. ctl[GEN_CTL_LIMIT]: frames this CPU may send in all, 0 = no
 * limit. ctl[GEN_CTL_BURST]: with a rate, frames sent back to back each
 * time the schedule allows (0 or 1: one, evenly spaced); the average rate
 * is the same, but a receiver on the sending CPU (veth) then polls whole
 * bursts, as it does behind a NIC, instead of a frame per poll. A map, so
 * another thread can change them while a run is going. */
enum gen_ctl {
	GEN_CTL_RATE,
	GEN_CTL_LIMIT,
	GEN_CTL_BURST,
	GEN_CTL_MAX,
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, GEN_CTL_MAX);
	__type(key, __u32);
	__type(value, __u64);
} ctl SEC(".maps");

/* Never read: the limits and control keys user space must agree on reach
 * BTF, and so the skeleton's Rust mirror (programs/gen.rs), only from a
 * global whose type has a field of each enum. */
const volatile struct {
	enum gen_limits limits;
	enum gen_ctl ctl;
} gen_abi_anchor = {};

/* How far the schedule may fall behind (a pause between runs: the kernel
 * spends milliseconds tearing each one down) and be caught up, at no more
 * than twice the rate, so the average holds without back-to-back bursts. */
#define GEN_MAX_LAG_NS 100000000ULL
#define GEN_BURST 32
/* Largest burst of GEN_CTL_BURST: a live-frame batch. */
#define GEN_BURST_MAX 64

struct gen_state {
	__u64 sent;     /* frames returned XDP_TX; first: user space sums it */
	__u64 next_ns;  /* when the next frame is due, with a rate */
	__u64 last_ns;  /* when the last frame went, with a rate */
	__u64 rate;     /* the rate next_ns was scheduled for */
	__u32 pos;      /* position in seq[] */
	__u32 sport_i;  /* the flow odometer */
	__u32 dport_i;
	__u32 src_i;
	__u32 dst_i;
	__u32 left;     /* frames of the current burst still to go */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} state SEC(".maps");

static __always_inline __u64 ctl_get(__u32 key)
{
	__u64 *v = bpf_map_lookup_elem(&ctl, &key);

	return v ? *v : 0;
}

/* True if a frame may go now; advances the schedule, a burst at a time. */
static __always_inline int paced(struct gen_state *st)
{
	__u64 now, gap, lag, burst, rate = ctl_get(GEN_CTL_RATE);

	if (!rate)
		return 1;
	burst = ctl_get(GEN_CTL_BURST);
	if (!burst || burst > GEN_BURST_MAX)
		burst = 1;
	/* A new rate starts a new schedule now: no catching up with the old one. */
	if (st->rate != rate) {
		st->rate = rate;
		st->next_ns = bpf_ktime_get_ns();
		st->last_ns = 0;
		st->left = 0;
	}
	/* The rest of a burst goes back to back. */
	if (st->left) {
		st->left--;
		return 1;
	}
	now = bpf_ktime_get_ns();
	gap = 1000000000ULL * burst / rate;
	if (now < st->next_ns)
		return 0;
	/* Behind schedule: catch up at twice the rate at most (after a
	 * first frame: on a machine up for less than gap / 2, say a fresh
	 * guest at 1 pps in bursts of 32, no frame would ever go)... */
	if (st->last_ns && now < st->last_ns + gap / 2)
		return 0;
	/* ...and by GEN_MAX_LAG_NS (or a burst at slow rates) at most. */
	lag = GEN_BURST * gap > GEN_MAX_LAG_NS ? GEN_BURST * gap : GEN_MAX_LAG_NS;
	if (st->next_ns + lag < now)
		st->next_ns = now - lag;
	st->next_ns += gap;
	st->last_ns = now;
	st->left = burst - 1;
	return 1;
}

/* Copies a header of constant length @len (even) in 8-byte words; packet
 * access need not be aligned on the architectures BPF JITs for. */
static __always_inline void copy_hdr(void *dst, const volatile void *src, const int len)
{
#pragma unroll
	for (int i = 0; i < len / 8; i++)
		((__u64 *)dst)[i] = ((const volatile __u64 *)src)[i];
	if (len & 4)
		*(__u32 *)(dst + (len & ~7)) = *(const volatile __u32 *)(src + (len & ~7));
	if (len & 2)
		*(__u16 *)(dst + (len & ~3)) = *(const volatile __u16 *)(src + (len & ~3));
}

/* Copies the headers of a layout whose IP header starts at @l3 (constant). */
static __always_inline void copy_hdrs(void *data, const volatile void *hdr, const int l3)
{
	if (ipv6 && tcp)
		copy_hdr(data, hdr, l3 + 40 + 20);
	else if (ipv6)
		copy_hdr(data, hdr, l3 + 40 + 8);
	else if (tcp)
		copy_hdr(data, hdr, l3 + 20 + 20);
	else
		copy_hdr(data, hdr, l3 + 20 + 8);
}

/* Looks up address entry @i; NULL only if user space sized the map wrong. */
static __always_inline struct gen_addr *addr_of(void *map, __u32 i)
{
	return bpf_map_lookup_elem(map, &i);
}

static __always_inline void put_addr(void *at, const struct gen_addr *a)
{
	if (ipv6) {
		((__u32 *)at)[0] = a->addr[0];
		((__u32 *)at)[1] = a->addr[1];
		((__u32 *)at)[2] = a->addr[2];
		((__u32 *)at)[3] = a->addr[3];
	} else {
		*(__u32 *)at = a->addr[0];
	}
}

/* Advances the flow odometer (source port fastest) and the class sequence. */
static __always_inline void advance(struct gen_state *st)
{
	if (++st->pos >= seq_len)
		st->pos = 0;
	if (++st->sport_i < n_sports)
		return;
	st->sport_i = 0;
	if (++st->dport_i < n_dports)
		return;
	st->dport_i = 0;
	if (++st->src_i < n_srcs)
		return;
	st->src_i = 0;
	if (++st->dst_i >= n_dsts)
		st->dst_i = 0;
}

SEC("xdp")
int xnf_gen(struct xdp_md *ctx)
{
	/* Offsets and lengths are constants per loaded program (read-only
	 * data): the verifier knows them and drops the branches not taken. */
	const __u32 l3 = vlan ? 14 + 4 : 14;
	const __u32 l4 = l3 + (ipv6 ? 40 : 20);
	const __u32 hdr_len = l4 + (tcp ? 20 : 8);
	const __u32 saddr = l3 + (ipv6 ? 8 : 12);
	const __u32 daddr = l3 + (ipv6 ? 24 : 16);
	const __u32 l4_check = l4 + (tcp ? 16 : 6);
	__u32 zero = 0, c = 0, l4_delta = 0, ip_delta = 0;
	struct gen_state *st = bpf_map_lookup_elem(&state, &zero);
	const volatile struct gen_class *cls;
	void *data, *end;
	__u64 limit;
	int delta;

	if (!st)
		return XDP_ABORTED;
	limit = ctl_get(GEN_CTL_LIMIT);
	if (limit && st->sent >= limit)
		return XDP_DROP;
	if (!paced(st))
		return XDP_DROP;
	if (seq_len > 1)
		c = seq[st->pos & (GEN_SEQ - 1)] & (GEN_CLASSES - 1);
	cls = &classes[c];

	/* Make the length the class's. The template is longer than any class
	 * (programs/gen.rs), so this always changes it: only then does the
	 * kernel take the frame's length from here, and not keep the one a
	 * receiver of the page's last frame gave it. */
	delta = (int)cls->len - (int)(ctx->data_end - ctx->data);
	if (delta && bpf_xdp_adjust_tail(ctx, delta))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	if (data + hdr_len > end)
		return XDP_ABORTED;

	/* Constant lengths, so that the copies unroll: one per layout. */
	if (vlan)
		copy_hdrs(data, cls->hdr, 18);
	else
		copy_hdrs(data, cls->hdr, 14);

	if (n_sports > 1) {
		__u16 port = bpf_htons(base_sport + st->sport_i);

		l4_delta += (__u16)~bpf_htons(base_sport) + (__u32)port;
		*(__u16 *)(data + l4) = port;
	}
	if (n_dports > 1) {
		__u16 port = bpf_htons(base_dport + st->dport_i);

		l4_delta += (__u16)~bpf_htons(base_dport) + (__u32)port;
		*(__u16 *)(data + l4 + 2) = port;
	}
	if (n_srcs > 1) {
		struct gen_addr *a = addr_of(&srcs, st->src_i);

		if (!a)
			return XDP_ABORTED;
		put_addr(data + saddr, a);
		ip_delta += a->delta;
	}
	if (n_dsts > 1) {
		struct gen_addr *a = addr_of(&dsts, st->dst_i);

		if (!a)
			return XDP_ABORTED;
		put_addr(data + daddr, a);
		ip_delta += a->delta;
	}

	/* Addresses are in the L4 pseudo-header too. */
	l4_delta += ip_delta;
	if (l4_delta) {
		__u16 *check = data + l4_check;

		*check = csum_add_delta(*check, l4_delta);
		/* A computed UDP checksum of 0 is sent as 0xffff (0 = none). */
		if (!tcp && !*check)
			*check = 0xffff;
	}
	if (!ipv6 && ip_delta) {
		struct iphdr *iph = data + l3;

		iph->check = csum_add_delta(iph->check, ip_delta);
	}

	advance(st);
	st->sent++;
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
