/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Runs the one parser (xnf/parse.h) on a frame and leaves what it found in
 * a map, for the parser's own differential fuzzing against the kernel's
 * rules (src/kernel.rs). The frame is never changed.
 */
#include "xnf/common.h"
#include "xnf/parse.h"

struct probe_out {
	__u32 result;        /* enum xnf_parse_result */
	__u32 pad;
	struct xnf_pkt pkt;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct probe_out);
} out SEC(".maps");

SEC("xdp")
int xnf_parse_probe(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct probe_out *o = bpf_map_lookup_elem(&out, &zero);

	if (!o)
		return XDP_ABORTED;
	__builtin_memset(&o->pkt, 0, sizeof(o->pkt));
	o->result = xnf_parse(ctx, &o->pkt);
	return XDP_PASS;
}

char _license[] SEC("license") = "Dual MIT/GPL";
