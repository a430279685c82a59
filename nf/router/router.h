/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between router.bpf.c and its control plane (src/program.rs).
 */
#pragma once

#include "xnf/common.h"
#include "xnf/fib.h"
#include "xnf/fib_cache.h"

/* Sizes of the router's tables (an enum, so that BTF and the Rust skeleton carry them). */
enum xnf_router_limits {
	XNF_ROUTER_MAX_IFACES = 256, /* interfaces one router can manage (devmap and stats slots) */
	XNF_ROUTER_MAX_VLANS = 4096, /* VLAN sub-interfaces it can translate */
};

/* Ordered so that a forwarded packet's counters (packets and bytes of
 * XDP_REDIRECT, its cache outcome, reason 0) share two cache lines. */
struct xnf_router_stats {
	__u64 packets[XNF_VERDICTS]; /* indexed by XDP action */
	__u64 bytes[XNF_VERDICTS];
	__u64 cache[XNF_FC_MAX];     /* route cache: lookups per outcome (cache mode only) */
	__u64 reasons[XNF_R_MAX];    /* packets per reason */
};

/* Per managed interface, indexed by its stats slot. */
struct xnf_router_iface {
	__u8 mac[ETH_ALEN]; /* frames to another MAC are the kernel's to drop */
	__u16 flags;        /* control plane only: how it was attached */
	__u32 ifindex;      /* 0: slot unused */
	__u8 rpf;           /* enum xnf_rpf of the interface */
	__u8 pad[3];
};

/* Key of the ingress VLAN table: a tag seen on a physical interface. */
struct xnf_vlan_key {
	__u32 ifindex; /* physical (attached) interface */
	__u16 vid;
	__u16 pad;
};

/* Value of the ingress VLAN table: the VLAN device a tag stands for. */
struct xnf_vlan_ingress {
	__u32 ifindex;
	__u8 rpf;           /* enum xnf_rpf of the VLAN device */
	__u8 pad[3];
};

/* Value of the egress VLAN table, keyed by the VLAN device's ifindex. */
struct xnf_vlan_egress {
	__u32 phys_ifindex;
	__u16 vid;
	__u16 pad;
};
