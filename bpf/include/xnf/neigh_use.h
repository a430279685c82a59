/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Which neighbours the fast path sends to: what keeps a STALE neighbour
 * entry from being used for ever.
 *
 * The kernel's own output path re-confirms the neighbours it sends to: a
 * frame to a STALE entry moves it to DELAY (neigh_event_send()), and unless
 * something confirms the neighbour within delay_first_probe_time the kernel
 * probes it by unicast, then gives it up (FAILED) if it does not answer;
 * the next frame makes it ask by broadcast. An XDP forwarder never takes
 * that path: bpf_fib_lookup() answers with a STALE entry (it is NUD_VALID)
 * and moves nothing, so a next hop whose MAC changed without a gratuitous
 * ARP (a replaced machine, a failover, an address moved to another host)
 * would be sent to at its old MAC for ever, where the kernel recovers in
 * seconds.
 *
 * So each frame the router forwards stamps its neighbour's slot here
 * with the follower's epoch (fib_ctl's neigh_epoch, fib_cache.h), and the
 * follower, for each neighbour the kernel has notified as STALE, looks at
 * the slot once an epoch that began after the notification has passed: if
 * it is stamped, it hands the kernel the event the output path would have
 * made, RTM_NEWNEIGH with NTF_USE (nf/router/src/neigh.rs). The rest is the
 * kernel's own state machine, timers included.
 *
 * The slots are direct-mapped by (egress ifindex, MAC) and shared by all
 * CPUs. A slot is written only when it holds another epoch, so at most once
 * per CPU per epoch: the line stays read-mostly. A cached route keeps its
 * neighbour's slot, so a hit costs a load and a compare, no hash. Two
 * neighbours on one slot make each look used when the other is: at worst
 * one probe the kernel would not have sent, never one missed.
 */
#pragma once

#include "common.h"

enum xnf_neigh_use_limits {
	XNF_NEIGH_USE_SLOTS = 4096,    /* a power of two */
	XNF_NEIGH_USE_SLOT_BITS = 12,  /* log2 of XNF_NEIGH_USE_SLOTS */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_NEIGH_USE_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
} neigh_use SEC(".maps");

/* A neighbour's slot, 0..XNF_NEIGH_USE_SLOTS-1: a multilinear hash of the
 * ifindex and the MAC's three 16-bit words (the MAC is 2-byte aligned in
 * struct bpf_fib_lookup) with odd 64-bit multipliers, then one xor-shift
 * and multiply (the sum alone spreads neighbours that differ in two words
 * at once, a few ifindexes times a run of MACs, a quarter worse than
 * chance), the top bits. Only a miss pays for it: a cached route keeps its
 * slot. Rust has the same function (neigh_use_slot). */
static __always_inline __u32 xnf_neigh_use_slot(__u32 ifindex, const __u8 *mac)
{
	const __u16 *w = (const __u16 *)mac;
	__u64 h = (__u64)ifindex * 0x9e3779b97f4a7c15ULL + (__u64)w[0] * 0xc2b2ae3d27d4eb4fULL +
		  (__u64)w[1] * 0x165667b19e3779f9ULL + (__u64)w[2] * 0x27d4eb2f165667c5ULL;

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h >> (64 - XNF_NEIGH_USE_SLOT_BITS);
}

/* A frame is sent to the neighbour of @slot during @epoch. */
static __always_inline void xnf_neigh_stamp(__u32 slot, __u32 epoch)
{
	__u32 *stamp = bpf_map_lookup_elem(&neigh_use, &slot);

	if (stamp && *stamp != epoch)
		*stamp = epoch;
}

/*
 * Programs without a control word of their own (the chain's exit, the lb)
 * keep the epoch in a one-entry array of their own, moved on by the
 * daemon's neighbour refresher (crates/core/src/neigh.rs). The router
 * reads its epoch from fib_ctl, which it reads anyway. Costs a forwarded
 * frame two array loads and the hash; no write once its slot holds the
 * epoch.
 */
#ifdef XNF_NEIGH_OWN_EPOCH
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u32);
} neigh_epoch SEC(".maps");

/* A frame is sent out of @ifindex to @mac. */
static __always_inline void xnf_neigh_used_at(__u32 slot)
{
	__u32 zero = 0;
	__u32 *epoch = bpf_map_lookup_elem(&neigh_epoch, &zero);

	if (epoch)
		xnf_neigh_stamp(slot, *epoch);
}

static __always_inline void xnf_neigh_used(__u32 ifindex, const __u8 *mac)
{
	xnf_neigh_used_at(xnf_neigh_use_slot(ifindex, mac));
}
#endif
