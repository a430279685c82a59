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
 */
#include "xnf_common.h"
#include "csum.h"

#define GEN_HDR_V4 (14 + 20 + 8)
#define GEN_HDR_V6 (14 + 40 + 8)

const volatile __u32 flows = 1;        /* distinct source ports */
const volatile __u16 base_sport = 1024;
const volatile __u8 ipv6 = 0;

/* Headers of the template frame; filled by user space before load. */
__u8 hdr[GEN_HDR_V6] = {};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} seq SEC(".maps");

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
	__u64 *n = bpf_map_lookup_elem(&seq, &zero);
	__u16 sport = base_sport;

	if (n) {
		if (flows > 1)
			sport += *n % flows;
		(*n)++;
	}
	if (write_hdr(ctx, sport))
		return XDP_ABORTED;
	return XDP_TX;
}

char _license[] SEC("license") = "Dual MIT/GPL";
