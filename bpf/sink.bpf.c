/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf sink: counts every frame (per CPU) and drops it.
 *
 * At the end of a measured path, dropping in XDP costs the receiver the
 * least and keeps the counted frames out of the sink's stack (no ICMP port
 * unreachable flowing back through the device under test). As a veth peer
 * it also gives redirected frames the XDP receive path they need.
 */
#include "xnf_common.h"

struct sink_count {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sink_count);
} counts SEC(".maps");

SEC("xdp")
int xnf_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct sink_count *c = bpf_map_lookup_elem(&counts, &zero);

	if (c) {
		c->packets++;
		c->bytes += ctx->data_end - ctx->data;
	}
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual MIT/GPL";
