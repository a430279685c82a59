/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between afxdp.bpf.c and its control plane (src/selector.rs,
 * which uses the skeleton's generated mirrors of them).
 */
#pragma once

#include "xnf/classify.h"

/* Sizes of the selector's tables (an enum, so that BTF and the Rust skeleton carry them). */
enum xnf_afxdp_limits {
	XNF_AFXDP_MAX_QUEUES = 256, /* RX queues a program can have sockets on (XSKMAP size) */
	XNF_AFXDP_MAX_RULES = 16,   /* classes of traffic handed to user space */
};

/* One class of the selector's table; the first entry not in use ends it. */
struct xnf_afxdp_class {
	__u32 used;
	__u32 flags;         /* enum xnf_afxdp_class_flag */
	struct xnf_match m;
};

enum xnf_afxdp_class_flag {
	/* A frame that may be in the class but whose L4 header cannot be read
	 * is dropped; without the flag it goes to user space like the class. */
	XNF_AX_CLASS_UNSURE_DROP = 1 << 0,
};

/* What happened to a frame. */
enum xnf_afxdp_reason {
	XNF_AX_TO_USER = 0, /* redirected to the queue's AF_XDP socket */
	XNF_AX_NO_SOCKET,   /* selected, but no socket on its queue: the kernel's */
	XNF_AX_NO_MATCH,    /* no class matched: the kernel's */
	XNF_AX_NON_IP,      /* with classes set: ARP, LLDP, ... go to the kernel */
	XNF_AX_MALFORMED,   /* with classes set: truncated headers, the kernel's */
	XNF_AX_QINQ,        /* with classes set: stacked tags, the kernel's */
	XNF_AX_UNSURE_USER, /* may be in a class (L4 unreadable): to user space */
	XNF_AX_UNSURE_DROP, /* may be in a class (L4 unreadable): dropped */
	XNF_AX_MAX,
};

struct xnf_afxdp_stats {
	__u64 packets[XNF_AX_MAX];
};
