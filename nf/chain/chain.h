/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between chain.bpf.c and its control plane (src/program.rs,
 * which uses the skeleton's generated mirrors of them).
 */
#pragma once

#include "xnf/common.h"
#include "xnf/fib.h"
#include "xnf/classify.h"

/* Sizes of the chain's tables (an enum, so that BTF and the Rust skeleton carry them). */
enum xnf_chain_limits {
	XNF_CHAIN_MAX_RULES = 64,   /* classifier rules over all ingresses; the rules map holds two copies */
	XNF_CHAIN_MAX_CHAINS = 64,  /* chains (stats slots) */
	XNF_CHAIN_MAX_NFS = 256,    /* network functions (NF table and stats slots) */
	XNF_CHAIN_MAX_INGRESS = 64, /* ingress interfaces (stats slots) */
	XNF_CHAIN_MAX_PORTS = 512,  /* devmap: NF ports plus egress ports */
};

/* What an interface carrying the chain program is. */
enum xnf_chain_port_kind {
	XNF_PORT_INGRESS = 1, /* classifies and steers into a chain */
	XNF_PORT_NF = 2,      /* host end of an NF's veth: what comes back out */
};

struct xnf_chain_port {
	__u8 kind;
	__u8 rpf;            /* NF port: enum xnf_rpf of the host end (the exit's FIB ingress) */
	__u8 mac[ETH_ALEN];  /* ingress: frames to another MAC are not ours */
	__u32 slot;          /* ingress stats slot, or NF slot */
};

/* One class of traffic entering a chain. First match wins, in map order. */
struct xnf_chain_rule {
	__u32 ifindex;   /* ingress interface; 0 ends the list */
	__u32 chain;     /* chain stats slot */
	__u32 first_nf;  /* NF slot + 1; 0: the chain is down and drops its class */
	__u32 flags;     /* enum xnf_rule_flag */
	struct xnf_match m;
};

enum xnf_rule_flag {
	/* A frame that may be in the class (its L4 header cannot be read,
	 * XNF_CLASS_UNSURE) is dropped; without the flag it goes into the NF. */
	XNF_RULE_UNSURE_DROP = 1 << 0,
};

/* A network function, indexed by its slot. */
struct xnf_chain_nf {
	__u32 ifindex;             /* host end of its veth; 0: slot unused */
	__u32 next;                /* next NF's slot + 1; 0: route out (FIB) */
	__u8 host_mac[ETH_ALEN];   /* source MAC of frames sent into it */
	__u8 nf_mac[ETH_ALEN];     /* its own end: destination MAC */
};

/* What happened to frames arriving on an ingress. */
enum xnf_ingress_reason {
	XNF_IN_STEERED = 0,  /* matched a chain and sent into its first NF */
	XNF_IN_NO_MATCH,     /* no rule matched: the kernel's, untouched */
	XNF_IN_NOT_OUR_MAC,  /* for another host: the kernel's */
	XNF_IN_NON_IP,       /* ARP, LLDP, ...: the kernel's */
	XNF_IN_MALFORMED,    /* truncated headers: the kernel's */
	XNF_IN_QINQ,         /* 802.1ad or stacked tags: the kernel's */
	XNF_IN_DOWN,         /* matched a chain that is down: dropped */
	XNF_IN_NF_GONE,      /* the first NF's port vanished: dropped */
	XNF_IN_UNSURE_STEERED, /* may be in a class (L4 unreadable): into its first NF */
	XNF_IN_UNSURE_DROPPED, /* may be in a class (L4 unreadable): dropped, as its chain says */
	XNF_IN_MULTICAST,    /* broadcast/multicast (ARP, ND, LLDP): the kernel's */
	XNF_IN_MAX,
};

struct xnf_ingress_stats {
	__u64 packets[XNF_IN_MAX];
};

struct xnf_chain_stats {
	__u64 packets; /* matched this chain's class */
	__u64 bytes;
};

struct xnf_nf_stats {
	__u64 in_packets;  /* sent into the NF */
	__u64 in_bytes;
	__u64 out_packets; /* came back out of it */
	__u64 out_bytes;
	__u64 gone;        /* could not be sent in (port vanished): dropped */
	/* Frames leaving the chain after this NF: routed by XDP
	 * (XNF_R_FORWARDED), or why the kernel got them (router reasons). */
	__u64 exit[XNF_R_MAX];
};
