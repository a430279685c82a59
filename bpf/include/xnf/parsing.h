/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Bounds-checked header parsing over an XDP frame.
 *
 * Every parser takes a cursor, checks that its whole header lies before
 * data_end (the verifier insists, and a short frame must never be read past
 * its end), advances the cursor and returns a pointer to the header or NULL
 * when the frame is too short. Callers decide what a short frame means.
 */
#pragma once

#include "common.h"

struct cursor {
	void *pos;
	void *end;
};

static __always_inline void *cursor_take(struct cursor *c, __u32 len)
{
	void *hdr = c->pos;

	if (hdr + len > c->end)
		return NULL;
	c->pos = hdr + len;
	return hdr;
}

static __always_inline struct ethhdr *parse_eth(struct cursor *c)
{
	return cursor_take(c, sizeof(struct ethhdr));
}

static __always_inline struct vlan_hdr *parse_vlan(struct cursor *c)
{
	return cursor_take(c, sizeof(struct vlan_hdr));
}

static __always_inline int proto_is_vlan(__be16 proto)
{
	return proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD);
}

/* Fixed IPv4 header (20 bytes); options are the caller's business. */
static __always_inline struct iphdr *parse_ipv4(struct cursor *c)
{
	return cursor_take(c, sizeof(struct iphdr));
}

static __always_inline struct ipv6hdr *parse_ipv6(struct cursor *c)
{
	return cursor_take(c, sizeof(struct ipv6hdr));
}

/* Bytes from @hdr to the end of the frame. */
static __always_inline __u32 bytes_left(const void *hdr, const struct cursor *c)
{
	return c->end - hdr;
}

static __always_inline int mac_eq(const __u8 *a, const __u8 *b)
{
	return *(const __u32 *)a == *(const __u32 *)b &&
	       *(const __u16 *)(a + 4) == *(const __u16 *)(b + 4);
}
