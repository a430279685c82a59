/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Types shared between filter.bpf.c and its control plane (src/program.rs).
 */
#pragma once

#include "xnf/common.h"

enum xnf_filter_limits {
	XNF_FILTER_MAX_RULES = 1024,  /* rules in one rule set (rules.rs: MAX_RULES) */
	XNF_FILTER_WORDS = 16,        /* 64-bit words of a set of rules */
	XNF_FILTER_MAX_CLASSES = 4096, /* distinct sets of rules one set's fields give */
	XNF_FILTER_RECORD = 256,      /* bytes of one record of a compiled set */
	XNF_FILTER_MAX_LISTS = 16,    /* list slots: 8 lists live + 8 being replaced */
	XNF_FILTER_BITS_WORDS = 1 << 19, /* a list's bitmap of /24s: 2 bits each (filter.bpf.c) */
	XNF_FILTER_LEAVES_MAX = 1 << 23, /* a list's /24s with longer prefixes (its leaves) */
	XNF_FILTER_BUCKETS = 65536,   /* per-source token buckets (LRU) */
	XNF_FILTER_TOP_BITS = 12,     /* 4096 slots of dropped sources per CPU */
	XNF_FILTER_SNAPLEN = 256,     /* bytes of a dropped frame a capture keeps */
};

/*
 * A compiled rule set (src/compile.rs, src/classes.rs): one array of
 * 256-byte records, swapped whole. Each field a rule can look at without
 * an address (the protocol, the ports, TCP flags, ICMP type, VLAN, length)
 * has a table from the frame's value of that field to a class: the set of
 * rules that field lets take the frame. A frame's rules are the AND of its
 * classes, the first set bit deciding; the cost is a lookup per field the
 * set uses and a word per 64 rules at most, whatever the rules are.
 *
 * Record indexes: the regions, each after the one before.
 */
enum xnf_filter_region {
	XNF_FR_HEADER = 0,
	XNF_FR_RULES = 1,                                       /* a struct xnf_filter_rule each */
	XNF_FR_CLASSES = XNF_FR_RULES + XNF_FILTER_MAX_RULES,   /* a struct xnf_filter_class each */
	/* Tables of class references (struct xnf_filter_refs, 64 a record). */
	XNF_FR_KIND = XNF_FR_CLASSES + XNF_FILTER_MAX_CLASSES,  /* family x l4 state x protocol: 4096 */
	XNF_FR_SPORT = XNF_FR_KIND + 64,                        /* port, or 65536: ports unknown */
	XNF_FR_DPORT = XNF_FR_SPORT + 1025,
	XNF_FR_TCP = XNF_FR_DPORT + 1025,                       /* flags byte, or 256: unknown */
	XNF_FR_ICMP = XNF_FR_TCP + 5,                           /* type, or 256: unknown */
	XNF_FR_VLAN = XNF_FR_ICMP + 5,                          /* VID, or 4096: untagged */
	XNF_FR_LEN = XNF_FR_VLAN + 65,                          /* frame length, or 65536: longer */
	XNF_FR_COUNT = XNF_FR_LEN + 1025,
};

/* The tables a set uses (xnf_filter_header.fields); the kind is always used. */
enum xnf_filter_table {
	XNF_FT_SPORT = 1 << 0,
	XNF_FT_DPORT = 1 << 1,
	XNF_FT_TCP = 1 << 2,
	XNF_FT_ICMP = 1 << 3,
	XNF_FT_VLAN = 1 << 4,
	XNF_FT_LEN = 1 << 5,
};

/* A class reference: the class, which words of its take set are not
 * zero, and whether its sure set differs (some rule only unsure). */
enum xnf_filter_ref {
	XNF_REF_CLASS_MASK = 0xfff,
	XNF_REF_SUMMARY_SHIFT = 12,     /* 16 bits: word w of take is not zero */
	XNF_REF_UNSURE = 1 << 28,
};

struct xnf_filter_header {
	__u32 nrules;
	__u32 tables;      /* enum xnf_filter_table */
	__u8 default_drop;
	__u8 lazy;         /* some rule has a prefix or a list: checked per candidate */
	__u8 extras;       /* some rule needs TCP flags or ICMP type (syn-cookie too) */
	__u8 zero;         /* always 0 (filter.bpf.c, find_rule, says why) */
	__u8 pad[4];
	__u64 digest;      /* of every record: the same digest, the same set */
};

/* Rules a field value lets take the frame: take has the rules it matches
 * and those it cannot tell about that stop the frame (fail-closed); sure
 * only the rules it matches. Bit r of word r / 64 is rule r. */
struct xnf_filter_class {
	__u64 take[XNF_FILTER_WORDS];
	__u64 sure[XNF_FILTER_WORDS];
};

struct xnf_filter_refs {
	__u32 ref[64];
};

/* Fields a rule looks at (xnf_filter_rule.flags). */
enum xnf_filter_field {
	XNF_F_VLAN = 1 << 0,
	XNF_F_LENGTH = 1 << 1,
	XNF_F_SRC = 1 << 2,       /* src/src_mask */
	XNF_F_DST = 1 << 3,
	XNF_F_SRC_LIST = 1 << 4,  /* src_list: a list slot */
	XNF_F_DST_LIST = 1 << 5,
	XNF_F_PROTO = 1 << 6,
	XNF_F_SPORT = 1 << 7,
	XNF_F_DPORT = 1 << 8,
	XNF_F_TCP_FLAGS = 1 << 9,
	XNF_F_ICMP_TYPE = 1 << 10,
	XNF_F_PPS = 1 << 11,      /* rate-limit by packets */
	XNF_F_BPS = 1 << 12,      /* rate-limit by bytes */
};

enum xnf_filter_action {
	XNF_FA_DROP = 0,
	XNF_FA_PASS,
	XNF_FA_COUNT,  /* counted as a drop would be, and passed */
	XNF_FA_RATE,   /* per-source token buckets */
	XNF_FA_SYNCOOKIE, /* SYNs answered with a cookie from XDP (syncookie.h) */
};

/* Reasons and outcomes, one counter each (struct xnf_filter_stats). */
enum xnf_filter_counter {
	XNF_FC_RX = 0,         /* every frame the stage saw */
	XNF_FC_PASS,           /* continued to the next stage (or the kernel) */
	XNF_FC_DROP,           /* dropped */
	XNF_FC_RULE_PASS,      /* a pass rule took it */
	XNF_FC_RULE_DROP,      /* a drop rule took it */
	XNF_FC_COUNTED,        /* a count rule took it (passed) */
	XNF_FC_RATE_PASS,      /* within a rate-limit rule's bucket */
	XNF_FC_RATE_DROP,      /* over it */
	XNF_FC_DEFAULT_PASS,   /* no rule took it; default pass */
	XNF_FC_DEFAULT_DROP,   /* no rule took it; default drop */
	XNF_FC_UNSURE,         /* taken by a drop/rate rule whose L4 fields it could not show */
	XNF_FC_NON_IP,         /* ARP, LLDP, ...: not the rules' business, passed */
	XNF_FC_MALFORMED,      /* broken IP header: dropped (the kernel would drop it too) */
	XNF_FC_QINQ,           /* stacked tags: the default policy decides */
	XNF_FC_CAPTURED,       /* dropped frames written to the capture ring */
	XNF_FC_CAPTURE_LOST,   /* sampled for capture but the ring was full */
	XNF_FC_TX,             /* sent back out: a SYN-ACK carrying a cookie */
	XNF_FC_COOKIE_OK,      /* an ACK with a valid cookie: to the kernel's synproxy */
	XNF_FC_COOKIE_CONN,    /* a segment of a connection conntrack knows: to the kernel */
	XNF_FC_COOKIE_DROP,    /* taken by a syn-cookie rule: no SYN to answer, no known
	                        * connection, no valid cookie: dropped */
	XNF_FC_COOKIE_UNCHECKED, /* no conntrack lookup in this kernel: to the kernel unchecked */
	XNF_FC_MAX,
};

struct xnf_filter_stats {
	__u64 counters[XNF_FC_MAX];
};

/* Per rule (index in the rule set; XNF_FILTER_MAX_RULES: the default). */
struct xnf_filter_rule_stats {
	__u64 packets;  /* frames the rule took */
	__u64 bytes;
	__u64 dropped;  /* of those, dropped (a rate-limit rule's excess) */
};

struct xnf_filter_rule {
	__u32 flags;          /* enum xnf_filter_field */
	__u8 action;          /* enum xnf_filter_action */
	__u8 family;          /* 0 (any), AF_INET, AF_INET6 */
	__u8 proto;
	__u8 icmp_type;
	__u8 tcp_set, tcp_clear;
	__u8 src_list, dst_list;
	__u16 vid;
	__u16 len_lo, len_hi;
	__u16 sport_lo, sport_hi;
	__u16 dport_lo, dport_hi;
	__u16 mss;            /* syn-cookie: the MSS a SYN-ACK offers (IPv4; IPv6 20 less) */
	__u32 src[4], src_mask[4]; /* network order; IPv4 in word 0 */
	__u32 dst[4], dst_mask[4];
	/* Token buckets, in billionths of a packet or byte: a frame costs
	 * 1e9 (or 1e9 per byte); a nanosecond refills pps (or bps). */
	__u64 pps, bps;
	__u64 burst_p, burst_b;   /* bucket sizes, scaled */
	__u64 fill_ns_p, fill_ns_b; /* time to fill an empty bucket */
	__u32 bucket_gen;          /* changes when the rule does: fresh buckets */
	__u32 pad2;
};

/* Which addresses of one /24 a list's prefixes longer than /24 cover:
 * bit j of word j / 64 for address j of the /24. */
struct xnf_filter_leaf {
	__u64 w[4];
};

/* An address in a list (LPM trie key): family byte, then the address. */
struct xnf_filter_lpm_key {
	__u32 prefixlen;  /* 8 (the family byte) + prefix length */
	__u8 family;      /* 4 or 6 */
	__u8 addr[16];
	__u8 pad[3];
};

struct xnf_filter_bucket_key {
	__u32 gen;
	__u16 rule;
	__u8 family;
	__u8 pad;
	__u32 addr[4];
};

struct xnf_filter_bucket {
	__u64 last_ns;
	__u64 tokens_p, tokens_b;
#ifdef XNF_LAYOUT_BUMP
	__u64 upgraded; /* the upgrade tests' build: one more field */
#endif
};

/* A slot of the dropped-sources table (see sample_source). */
struct xnf_filter_top {
	__u64 count;
	__u8 family;
	__u8 pad[3];
	__u32 addr[4];
};

/* What a capture wants; written by `xnf filter capture`. */
struct xnf_filter_capture {
	__u32 enabled;
	__u32 rule;        /* rule index, or XNF_FILTER_MAX_RULES + 1 for any */
	__u64 max_pps;
};

struct xnf_filter_capture_state {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 last_ns;
	__u64 tokens;      /* scaled like the rule buckets */
};

/* One record in the capture ring. */
struct xnf_filter_record {
	__u64 ts_ns;       /* CLOCK_MONOTONIC */
	__u32 ifindex;
	__u32 rule;
	__u32 len;         /* the frame's length */
	__u32 caplen;      /* bytes in data */
	__u8 data[XNF_FILTER_SNAPLEN];
};
