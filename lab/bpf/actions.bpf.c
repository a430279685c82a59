/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf actions: the raw XDP verdicts as upper bounds (the xdp-bench set,
 * the XDP paper §4): every frame is counted and then dropped, passed to the
 * stack, sent back out of the port it came in on (MACs swapped), redirected
 * to another port, or redirected to another CPU.
 *
 * Redirects go through maps, not bpf_redirect(ifindex): a DEVMAP lets the
 * kernel batch frames per destination and flush once per NAPI poll, and a
 * CPUMAP is the only way to hand a frame to another CPU, where the kernel
 * builds the skb (or runs xnf_cpumap_count first, as here).
 */
#include "xnf/common.h"

/* What the program does with every frame. Typed in the rodata below, so
 * BTF carries the enum and the skeleton mirrors its values in Rust
 * (programs/actions.rs takes them from there). */
enum xnf_action {
	XNF_ACT_DROP,
	XNF_ACT_PASS,
	XNF_ACT_TX,
	XNF_ACT_REDIRECT,
	XNF_ACT_CPUMAP,
	XNF_ACT_MAX,
};

const volatile enum xnf_action action = XNF_ACT_DROP;
const volatile __u32 target_cpu = 0;

struct count {
	__u64 packets;
};

/* Frames the ingress program acted on. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct count);
} counts SEC(".maps");

/* Frames the CPUMAP program saw on the remote CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct count);
} remote_counts SEC(".maps");

/* Key 0: the egress port of XNF_ACT_REDIRECT. */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_port SEC(".maps");

/* Key = CPU number; user space fills target_cpu's entry. */
struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

static __always_inline void count(void *map)
{
	__u32 zero = 0;
	struct count *c = bpf_map_lookup_elem(map, &zero);

	if (c)
		c->packets++;
}

SEC("xdp")
int xnf_action(struct xdp_md *ctx)
{
	count(&counts);
	switch (action) {
	case XNF_ACT_PASS:
		return XDP_PASS;
	case XNF_ACT_TX:
		if (xnf_swap_macs(ctx))
			return XDP_ABORTED;
		return XDP_TX;
	case XNF_ACT_REDIRECT:
		return bpf_redirect_map(&tx_port, 0, 0);
	case XNF_ACT_CPUMAP:
		return bpf_redirect_map(&cpu_map, target_cpu, 0);
	default:
		return XDP_DROP;
	}
}

/* Runs on target_cpu for each frame the CPUMAP delivers, before any skb is
 * built: counting and dropping here measures the hand-over itself. */
SEC("xdp/cpumap")
int xnf_cpumap_count(struct xdp_md *ctx)
{
	count(&remote_counts);
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual MIT/GPL";
