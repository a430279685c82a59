/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between router.bpf.c and xnf's control plane
 * (mirrored in crates/bpf/src/router.rs; keep both in step).
 */
#pragma once

#include "xnf_common.h"

/* Interfaces one router instance can manage (devmap and stats slots). */
#define XNF_ROUTER_MAX_IFACES 256
/* VLAN sub-interfaces the router can translate. */
#define XNF_ROUTER_MAX_VLANS 4096

/*
 * Why a packet got its verdict. Forwarded packets count under
 * XNF_R_FORWARDED; every other reason explains an XDP_PASS (or, for
 * blackhole routes, an XDP_DROP).
 */
enum xnf_router_reason {
	XNF_R_FORWARDED = 0,
	XNF_R_NON_IP,        /* not IPv4/IPv6 (ARP, LLDP, ...) */
	XNF_R_MALFORMED,     /* truncated or inconsistent headers */
	XNF_R_QINQ,          /* 802.1ad or stacked tags */
	XNF_R_VLAN_UNKNOWN,  /* tag whose VID has no VLAN device here */
	XNF_R_NOT_OUR_MAC,   /* Ethernet destination is not the interface */
	XNF_R_IP_OPTIONS,    /* IPv4 options: the kernel processes them */
	XNF_R_IPV6_HBH,      /* IPv6 hop-by-hop options: every router reads them */
	XNF_R_BAD_CSUM,      /* IPv4 header checksum wrong */
	XNF_R_TTL,           /* TTL / hop limit <= 1: kernel sends time-exceeded */
	XNF_R_LOCAL,         /* for this host, or no route (FIB: not forwarded) */
	XNF_R_FWD_DISABLED,  /* forwarding disabled on the ingress interface */
	XNF_R_NO_NEIGH,      /* next hop has no neighbour entry yet */
	XNF_R_MTU,           /* larger than the egress MTU */
	XNF_R_UNREACHABLE,   /* unreachable/prohibit route: kernel sends ICMP */
	XNF_R_UNSUPPORTED,   /* route needs encapsulation (lwt) or has no source */
	XNF_R_NOT_MANAGED,   /* egress interface not attached to this router */
	XNF_R_NO_HEADROOM,   /* could not push a VLAN tag */
	XNF_R_BLACKHOLE,     /* blackhole route: dropped, as the kernel would */
	XNF_R_MAX,
};

struct xnf_router_stats {
	__u64 packets[XNF_VERDICTS]; /* indexed by XDP action */
	__u64 bytes[XNF_VERDICTS];
	__u64 reasons[XNF_R_MAX];    /* packets per reason */
};

/* Per managed interface, indexed by its stats slot. */
struct xnf_router_iface {
	__u8 mac[ETH_ALEN]; /* frames to another MAC are the kernel's to drop */
	__u16 flags;        /* control plane only: how it was attached */
	__u32 ifindex;      /* 0: slot unused */
};

/* Key of the ingress VLAN table: a tag seen on a physical interface. */
struct xnf_vlan_key {
	__u32 ifindex; /* physical (attached) interface */
	__u16 vid;
	__u16 pad;
};

/* Value of the egress VLAN table, keyed by the VLAN device's ifindex. */
struct xnf_vlan_egress {
	__u32 phys_ifindex;
	__u16 vid;
	__u16 pad;
};
