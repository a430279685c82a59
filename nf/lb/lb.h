/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between lb.bpf.c, decap.bpf.c and their control plane
 * (src/program.rs, src/decap.rs).
 */
#pragma once

#include "xnf/common.h"

enum xnf_lb_limits {
	XNF_LB_MAX_SERVICES = 256,    /* services of one file (config.rs: MAX_SERVICES) */
	XNF_LB_TABLE_SLOTS = 512,     /* two table slots per service: a change fills the idle one */
	XNF_LB_MAX_BACKENDS = 65536,  /* backend records over all services (config.rs) */
	XNF_LB_CT_ENTRIES = 262144,   /* connection table entries (LRU, per-CPU lists) */
	XNF_LB_MAX_IFACES = 256,      /* interfaces the stage may redirect to */
	XNF_LB_SVC_CACHE_BITS = 8,    /* a CPU's service cache: 256 slots of 64 bytes */
	XNF_LB_SVC_CACHE_SLOTS = 1 << XNF_LB_SVC_CACHE_BITS,
	XNF_LB_QUOTE4 = 64,           /* bytes of the too-big IPv4 packet an ICMP error quotes */
	XNF_LB_QUOTE6 = 128,          /* and of an IPv6 packet (ICMPv6) */
	XNF_LB_OUTER_TTL = 64,        /* TTL / hop limit of the outer header */
	XNF_LB_NONE = 0xffffffff,    /* a table entry no backend takes (maglev.rs: NO_BACKEND) */
};

/* How a service's packets reach its backends (config.rs: Mode). */
enum xnf_lb_mode {
	XNF_LB_IPIP = 0,   /* IPv4 in IPv4 (protocol 4), IPv6 in IPv6 (protocol 41) */
	XNF_LB_GUE,        /* IP in UDP (GUE variant 1: no GUE header), outer family the backend's */
	XNF_LB_DSR,        /* the frame as it came, to the backend's MAC */
};

/* Outcomes and reasons, one counter each (struct xnf_lb_stats). */
enum xnf_lb_counter {
	XNF_LB_RX = 0,          /* every frame the stage saw */
	XNF_LB_CONTINUE,        /* not a service's: on to the next stage (or the kernel) */
	XNF_LB_TX,              /* sent back out of the interface it came in on */
	XNF_LB_REDIRECT,        /* sent out of another lb interface */
	XNF_LB_PASS,            /* a service's packet handed to the kernel (a reason below) */
	XNF_LB_DROP,            /* a service's packet dropped (no-backend, too-big) */
	XNF_LB_CT_HIT,          /* the connection table named the backend */
	XNF_LB_CT_MISS,         /* no entry: the table decided and the entry was made */
	XNF_LB_CT_SYN,          /* a TCP SYN with an entry: the table decided afresh */
	XNF_LB_CT_STALE,        /* an entry whose backend was removed: the table decided */
	XNF_LB_ICMP_ROUTED,     /* frag-needed / packet-too-big for a flow, sent to its backend */
	XNF_LB_ICMP_SENT,       /* too big once encapsulated: answered with frag-needed / too-big */
	XNF_LB_NON_IP,          /* continue: ARP, LLDP, ... */
	XNF_LB_MALFORMED,       /* continue: a header the kernel drops (the filter's business) */
	XNF_LB_QINQ,            /* continue: stacked tags */
	XNF_LB_NOT_SERVICE,     /* continue: no service has this address, protocol and port */
	XNF_LB_FRAGMENT,        /* pass: a fragment to a VIP (the kernel reassembles or drops) */
	XNF_LB_IP_OPTIONS,      /* pass: IPv4 options to a VIP */
	XNF_LB_IPV6_HBH,        /* pass: IPv6 hop-by-hop options to a VIP */
	XNF_LB_NO_PORTS,        /* pass: to a VIP, but no ports to read (truncated, unknown chain) */
	XNF_LB_VLAN,            /* pass: a tagged frame to a VIP */
	XNF_LB_ICMP_OTHER,      /* pass: ICMP to a VIP that is no too-big error of a service flow */
	XNF_LB_NO_ROUTE,        /* pass: no route to the backend (unreachable, blackhole, local) */
	XNF_LB_FWD_DISABLED,    /* pass: forwarding is off on the ingress interface */
	XNF_LB_NO_NEIGH,        /* pass: next hop unresolved; the kernel forwards it and resolves */
	XNF_LB_NOT_MANAGED,     /* pass: the route leaves by an interface without the lb stage */
	XNF_LB_NO_SOURCE,       /* pass: no outer source address for the backend's family */
	XNF_LB_ERROR,           /* pass: the frame could not be grown or shrunk */
	XNF_LB_NO_BACKEND,      /* drop: a new flow of a service whose backends are all drained */
	/* Later additions, at the end so that earlier counters keep their index. */
	XNF_LB_NOT_OUR_MAC,     /* continue: to a VIP, but not to the ingress interface's own MAC */
	XNF_LB_DSR_NOT_ONLINK,  /* pass: dsr, but the route to the backend goes through a gateway */
	XNF_LB_TOO_BIG,         /* drop: IPv4 without DF too big once encapsulated (XDP cannot fragment) */
	XNF_LB_COUNTERS,
};

struct xnf_lb_stats {
	__u64 c[XNF_LB_COUNTERS];
};

/* A service, keyed by what it takes; port 0 stands for all ports. */
struct xnf_lb_service_key {
	__u32 vip[4];     /* network order; IPv4 in word 0 */
	__u16 port;       /* host order */
	__u8 family;      /* AF_INET or AF_INET6 */
	__u8 proto;       /* IPPROTO_TCP or IPPROTO_UDP */
};

/* A service as the data plane needs it; replaced whole in one update. */
struct xnf_lb_service {
	__u32 slot;        /* its table in `tables` */
	__u32 table_size;  /* entries of that table (prime) */
	__u32 id;          /* its slot in `service_stats` */
	__be16 gue_port;   /* GUE's outer destination port */
	__u8 mode;         /* enum xnf_lb_mode */
	__u8 hash3;        /* hash source, destination and protocol only */
};

/*
 * One slot of a CPU's service cache (lb.bpf.c): what find_service() and
 * own_macs answered for a frame's ingress, VIP, protocol and port, valid
 * while the control plane's generation (lb_gen) is the one it was filled
 * under. 64 bytes: one cache line.
 */
struct xnf_lb_svc_slot {
	__u32 seq;         /* 0: never filled; odd: being written */
	__u32 ifindex;     /* the ingress it was filled for */
	__u64 gen;         /* lb_gen then */
	struct xnf_lb_service_key key;
	struct xnf_lb_service svc;
	__u8 mac[6];       /* the ingress interface's own MAC */
	__u16 pad;
	__u32 pad2;
};

/* A backend, by the id table entries and connection-table entries hold.
 * gen changes whenever the id changes hands: an entry made for an earlier
 * holder (or for a removed backend, gen 0) no longer matches. */
struct xnf_lb_backend {
	__u32 addr[4];     /* network order; IPv4 in word 0 */
	__u32 gen;         /* 0: free */
	__u8 family;       /* AF_INET or AF_INET6 */
	__u8 has_mac;      /* dsr: mac given by the file, else the neighbour table's */
	__u8 mac[6];
};

/* Where a flow goes once decided (connection-table value). */
struct xnf_lb_flow_backend {
	__u32 id;
	__u32 gen;
	/* The flow hash, kept so that a packet of a known flow need not
	 * compute it again (lookup3 was a fifth of the stage's own time);
	 * 0: not kept (an entry an upgrade copied from a build without it),
	 * computed again. */
	__u32 hash;
#ifdef XNF_LAYOUT_BUMP
	__u64 upgraded; /* the upgrade tests' build: one more field */
#endif
};

/* A flow as the connection table keys it: client to VIP. */
struct xnf_lb_flow {
	__u32 src[4], dst[4];  /* network order */
	__u16 sport, dport;    /* host order */
	__u8 family;
	__u8 proto;
	__u16 pad;
};

/* An lb interface's own MAC (own_macs, by ifindex): only frames sent to
 * it are balanced. */
struct xnf_lb_mac {
	__u8 addr[6];
	__u16 pad;
};

/* Outer source addresses: the prefix's host bits take the flow hash so
 * that a backend's receive-side scaling spreads the flows over its queues
 * (the outer header is all a NIC hashes). Network order. */
struct xnf_lb_config {
	__u32 src4;        /* 0: none configured */
	__u32 host4;       /* host bits of the IPv4 prefix */
	__u32 src6[4];     /* all 0: none */
	__u32 host6;       /* host bits in the IPv6 prefix's last word */
};

/* Traffic of one service, and of one backend. */
struct xnf_lb_service_stats {
	__u64 packets, bytes;
	__u64 flows;       /* decided by the table (new flows, SYNs, stale entries) */
	__u64 no_backend;
};

struct xnf_lb_backend_stats {
	__u64 packets, bytes;
};

/* The decap program's counters (decap.bpf.c). */
enum xnf_decap_counter {
	XNF_DECAP_RX = 0,       /* every frame the stage saw */
	XNF_DECAP_CONTINUE,     /* not encapsulated for this host: on to the next stage */
	XNF_DECAP_IPIP,         /* IPv4 in IPv4 stripped */
	XNF_DECAP_IP6IP6,       /* IPv6 in IPv6 stripped */
	XNF_DECAP_GUE,          /* IP in UDP stripped */
	XNF_DECAP_FRAGMENT,     /* pass: an outer fragment (the kernel's to reassemble) */
	XNF_DECAP_BAD_INNER,    /* pass: the inner packet is no IP packet of the right family */
	XNF_DECAP_ERROR,        /* pass: the frame could not be shrunk */
	XNF_DECAP_COUNTERS,
};

struct xnf_decap_stats {
	__u64 c[XNF_DECAP_COUNTERS];
};

/* An address: a VIP (lb's vips), one of this host's (decap's locals). */
struct xnf_lb_addr {
	__u32 addr[4];     /* network order; IPv4 in word 0 */
	__u32 family;
};
