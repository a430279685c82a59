/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Includes and small definitions shared by every xnf BPF program. */
#pragma once

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

#ifndef ETH_P_8021AD
#define ETH_P_8021AD 0x88A8
#endif

#define VLAN_VID_MASK 0x0fff

/* Offsets past this are not followed (XDP frames are smaller); a constant
 * bound lets the verifier accept data + offset. */
#define XNF_MAX_OFF 0x3fff

/* 802.1Q tag as it sits between the MAC addresses and the inner ethertype. */
struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

/* Swaps the frame's MAC addresses, for XDP_TX: a frame sent back with its
 * own source address would be taken by the peer's stack for its own.
 * -1 if the frame has no Ethernet header. */
static __always_inline int xnf_swap_macs(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	struct ethhdr *eth = data;
	__u8 tmp[ETH_ALEN];

	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return -1;
	__builtin_memcpy(tmp, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, tmp, ETH_ALEN);
	return 0;
}

/*
 * Drops the @trailer bytes after the IP packet: an Ethernet trailer or
 * padding, which the kernel trims on receive (ip_rcv_core, ipv6_rcv) and so
 * never forwards. Done before the frame meets the egress: the route's MTU
 * was checked against the IP length, and a device drops a frame longer
 * than its MTU.
 */
static __always_inline int trim_trailer(struct xdp_md *ctx, __u32 trailer)
{
	if (!trailer)
		return 0;
	if (trailer > XNF_MAX_OFF)
		return -1;
	return bpf_xdp_adjust_tail(ctx, -(int)trailer);
}

/* Keeps the compiler from moving loads and stores across it (the seq
 * words of the per-CPU caches: fib_cache.h, the lb's service cache). */
#define xnf_barrier() asm volatile("" ::: "memory")

/* One more than the largest XDP action (XDP_REDIRECT = 4): size of per-verdict arrays. */
#define XNF_VERDICTS 5
