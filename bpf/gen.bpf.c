/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf gen: the in-kernel traffic generator's XDP program.
 *
 * User space runs it with BPF_PROG_TEST_RUN and BPF_F_TEST_XDP_LIVE_FRAMES:
 * the kernel builds frames from one template, runs this program on each and
 * transmits those it returns XDP_TX for on the ingress interface (a veth
 * here, so they arrive at its peer). Live-frame pages are recycled through a
 * page pool and come back holding whatever the receiver wrote into them (a
 * router rewrites MACs and TTL), so every run writes the headers afresh.
 * Flows differ by UDP source port; the template's UDP checksum (computed
 * for base_sport) is patched incrementally for the port.
 *
 * Rate: a live-frame run cannot sleep, and each BPF_PROG_TEST_RUN call ends
 * with a teardown that waits milliseconds, so pacing by short calls is
 * impossible. Instead the program paces itself: with rate_pps set, a frame
 * whose time has not come is dropped here (cheaply, before any device sees
 * it) and the next one is tried. The CPU spins either way; the wire sees an
 * even rate with bursts of at most GEN_BURST frames.
 */
#include "xnf_common.h"
#include "csum.h"

#define GEN_HDR_V4 (14 + 20 + 8)
#define GEN_HDR_V6 (14 + 40 + 8)

const volatile __u32 flows = 1;        /* distinct source ports */
const volatile __u16 base_sport = 1024;
const volatile __u8 ipv6 = 0;

/* ctl[0]: frames per second per generator CPU, 0 = as fast as possible.
 * A map, so another thread can change it while a run is in progress. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} ctl SEC(".maps");

#define GEN_BURST 32

/* Headers of the template frame; filled by user space before load. */
__u8 hdr[GEN_HDR_V6] = {};

struct gen_state {
	__u64 sent;     /* frames returned XDP_TX (also the flow sequence) */
	__u64 next_ns;  /* when the next frame is due, with a rate */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gen_state);
} state SEC(".maps");

/* True if a frame may go now; advances the schedule. */
static __always_inline int paced(struct gen_state *st)
{
	__u64 now, gap, earliest, rate;
	__u32 zero = 0;
	__u64 *r = bpf_map_lookup_elem(&ctl, &zero);

	rate = r ? *r : 0;
	if (!rate)
		return 1;
	now = bpf_ktime_get_ns();
	gap = 1000000000ULL / rate;
	/* A schedule made for a slower rate is dropped: a new rate applies at once. */
	if (st->next_ns > now + gap)
		st->next_ns = now;
	if (now < st->next_ns)
		return 0;
	/* After an idle spell, catch up by at most a burst. */
	earliest = now - GEN_BURST * gap;
	if (st->next_ns < earliest)
		st->next_ns = earliest;
	st->next_ns += gap;
	return 1;
}

static __always_inline int write_hdr(struct xdp_md *ctx, __u16 sport)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct udphdr *uh;

	if (ipv6) {
		if (data + GEN_HDR_V6 > end)
			return -1;
		__builtin_memcpy(data, hdr, GEN_HDR_V6);
		uh = data + 14 + 40;
	} else {
		if (data + GEN_HDR_V4 > end)
			return -1;
		__builtin_memcpy(data, hdr, GEN_HDR_V4);
		uh = data + 14 + 20;
	}
	/* 0 means "no checksum" (IPv4 only); a computed 0 is sent as 0xffff. */
	if (uh->check) {
		uh->check = csum_replace16(uh->check, bpf_htons(base_sport), bpf_htons(sport));
		if (!uh->check)
			uh->check = 0xffff;
	}
	uh->source = bpf_htons(sport);
	return 0;
}

SEC("xdp")
int xnf_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct gen_state *st = bpf_map_lookup_elem(&state, &zero);
	__u16 sport = base_sport;

	if (!st)
		return XDP_ABORTED;
	if (!paced(st))
		return XDP_DROP;
	if (flows > 1)
		sport += st->sent % flows;
	if (write_hdr(ctx, sport))
		return XDP_ABORTED;
	st->sent++;
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
