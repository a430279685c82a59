/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/* Layouts shared by stages.bpf.c and its reader (profile/src/maps.rs). */
#pragma once

#define PROF_BUCKETS 32         /* log2 ns buckets: [2^i, 2^(i+1)) */
#define PROF_WORK_BUCKETS 8     /* packets per poll: 0, 1, 2-3, ..., 64+ */

/* The tracepoints whose order splits the NET_RX softirq into stages. */
enum prof_event {
	EV_SOFTIRQ = 0,         /* irq:softirq_entry (NET_RX) */
	EV_GRO_ENTRY,           /* net:napi_gro_receive_entry */
	EV_GRO_EXIT,            /* net:napi_gro_receive_exit */
	EV_RECEIVE,             /* net:netif_receive_skb */
	EV_FIB,                 /* fib:fib_table_lookup, fib6:fib6_table_lookup */
	EV_QUEUE,               /* net:net_dev_queue */
	EV_XMIT,                /* net:net_dev_xmit */
	EV_SOCKET,              /* sock:sk_data_ready (6.4+) */
	EV_FREE,                /* skb:kfree_skb, skb:consume_skb */
	EV_EXIT,                /* irq:softirq_exit (NET_RX) */
	EV_NETIF_RX,            /* net:netif_rx (counted, no boundary) */
	EV_NAPI_POLL,           /* napi:napi_poll (counted, no boundary) */
	EV_COPY,                /* skb:skb_copy_datagram_iovec (counted) */
	EV_SWITCH,              /* sched:sched_switch (counted) */
	PROF_EVENTS,
};

/* CPU time inside the NET_RX softirq, attributed by the pair of events
 * around each interval (see stage_of). */
enum prof_stage {
	ST_DRIVER = 0,          /* NAPI poll: ring, XDP program, skb build; loop */
	ST_GRO,                 /* generic receive offload */
	ST_IP_RCV,              /* __netif_receive_skb_core .. route lookup */
	ST_ROUTE,               /* between route lookups of a batch */
	ST_LOCAL,               /* route lookup .. socket queue or drop */
	ST_FORWARD,             /* route lookup .. dev_queue_xmit */
	ST_XMIT,                /* dev_queue_xmit: qdisc, driver xmit */
	PROF_STAGES,
};

enum prof_outcome {
	OUT_FORWARDED = 0,      /* net_dev_xmit */
	OUT_DELIVERED,          /* queued to a socket (sk_data_ready, 6.4+) */
	OUT_DROPPED,            /* kfree_skb with a drop reason */
	OUT_CONSUMED,           /* consume_skb (or kfree_skb SKB_CONSUMED) */
	PROF_OUTCOMES,
};

/* What could not be recorded. */
enum prof_lost {
	LOST_INFLIGHT = 0,      /* per-packet table full: packet not followed */
	LOST_RESTARTED,         /* skb seen again before its end: freed untraced */
	LOST_DEVICES,           /* device table full */
	LOST_DROPS,             /* drop-reason table full */
	LOST_WAKEUPS,           /* wakeup table full */
	PROF_LOSTS,
};

struct prof_stage_total {
	__u64 ns;
	__u64 intervals;
};

struct prof_softirq {
	__u64 count;
	__u64 ns;
	__u64 hist[PROF_BUCKETS];
	__u64 tx_count;         /* NET_TX softirqs */
	__u64 tx_ns;
	__u64 switches;         /* context switches on this CPU */
	__u64 ksoftirqd_ns;     /* ksoftirqd on this CPU */
};

struct prof_outcomes {
	__u64 count[PROF_OUTCOMES];
	__u64 hist[PROF_OUTCOMES][PROF_BUCKETS];
	__u64 runq_hist[PROF_BUCKETS];  /* wakeup .. on CPU */
};

#define PROF_DEV_SLOTS 64       /* per-CPU direct-mapped device counters */

struct prof_dev {
	__u64 polls;
	__u64 work;
	__u64 full;             /* polls that used their whole budget */
	__u64 work_hist[PROF_WORK_BUCKETS];
	__u64 to_stack;         /* napi_gro_receive + netif_rx on this device */
	__u64 received;         /* netif_receive_skb on this device */
	__u64 redirect;
	__u64 redirect_err;
	__u64 tx;               /* XDP_TX frames sent (xdp_bulk_tx) */
	__u64 tx_drops;
	__u64 exception;        /* XDP_ABORTED, invalid actions, TX errors */
	__u64 xmit;             /* net_dev_xmit on this device */
	char name[16];
	/* Filled on each CPU's first use (a per-CPU hash entry made on one
	 * CPU is zero on the others). */
	__u32 netns;            /* inode of the namespace, 0: none (backlog) */
	__u32 ifindex;
	__u32 wanted;           /* in the namespace watched */
	__u32 init;
};

/* A device's counters in the per-CPU direct-mapped table, tagged with
 * the struct net_device address they belong to (0: free). */
struct prof_dev_slot {
	__u64 key;
	struct prof_dev d;
};

/* Per-CPU state the reader also needs: the drops of the last (reason,
 * place) not yet added to the drops table. */
struct prof_drop_run {
	__u64 location;
	__u64 pending;
	__u32 reason;
	__u32 pad;
};

struct prof_drop_key {
	__u32 reason;
	__u32 pad;
	__u64 location;
};
