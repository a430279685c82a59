/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf profile: where the kernel's receive path spends its time, from
 * tracepoints only (this kernel refuses kprobes and fentry; tp_btf works
 * from 5.5 on and costs about a function call per event).
 *
 * Three views, all aggregated in maps (no per-packet event stream):
 *
 * - Stages: CPU time inside the NET_RX softirq, cut at every tracepoint the
 *   path passes. Each interval between two consecutive events on a CPU is
 *   charged to the stage the pair names (stage_of), so the stages add up to
 *   the softirq time exactly, batched (list) receive included.
 * - Packets: each skb from netif_receive_skb to its end of life
 *   (transmitted, copied to user space, dropped with a reason, consumed),
 *   as log2 histograms per outcome; the table of packets in flight is
 *   bounded and what does not fit is counted as lost.
 * - Counts: NAPI polls and packets per poll per device, XDP redirects, TX
 *   and exceptions per device, drops by reason and place, context switches,
 *   ksoftirqd time and run-queue delay per CPU.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "stages.h"

/* The kernel's structures as far as they are read; CO-RE relocates the
 * offsets to the running kernel's BTF. */
struct ns_common {
	unsigned int inum;
} __attribute__((preserve_access_index));

struct net {
	struct ns_common ns;
} __attribute__((preserve_access_index));

typedef struct {
	struct net *net;
} possible_net_t;

struct net_device {
	char name[16];
	int ifindex;
	possible_net_t nd_net;
} __attribute__((preserve_access_index));

struct sk_buff {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct napi_struct {
	struct net_device *dev;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	char comm[16];
} __attribute__((preserve_access_index));

#define NET_TX_SOFTIRQ 2
#define NET_RX_SOFTIRQ 3

/* Set before load by user space. */
const volatile __u64 cpu_mask = 0;              /* 0: every CPU (< 64 otherwise) */
const volatile __u32 netns_filter = 0;          /* namespace inode, 0: all */
const volatile __u32 reason_consumed = 0xffffffff; /* SKB_CONSUMED in this kernel */
const volatile __u32 follow_every = 1;          /* follow 1 packet in N */
const volatile __u32 counts_only = 0;           /* no stages, no packet records */
const volatile __u32 dev_slot_mask = PROF_DEV_SLOTS - 1; /* fewer: tests */

struct cpu_state {
	__u64 last;             /* time of the previous boundary event */
	__u64 entered;          /* NET_RX softirq entry */
	__u64 tx_entered;
	__u64 ksoftirqd_in;     /* ksoftirqd switched in, 0: not running */
	__u32 prev;             /* previous boundary event */
	__u32 in_rx;
	__u32 seen;             /* packets into the stack, for follow_every */
	__u32 pad;
	/* A run of drops with one (reason, place), counted here and added to
	 * the drops table when the next drop differs: a sink dropping every
	 * frame costs a compare, not a hash lookup, per packet. The reader
	 * adds what is pending. */
	struct prof_drop_run drop;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} cpu_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROF_STAGES);
	__type(key, __u32);
	__type(value, struct prof_stage_total);
} stages SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prof_softirq);
} softirq SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct prof_outcomes);
} outcomes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROF_EVENTS);
	__type(key, __u32);
	__type(value, __u64);
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROF_LOSTS);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

/* skb address -> netif_receive_skb time. Sized by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} inflight SEC(".maps");

/* Per CPU, the followed packets in the order they entered the stack. A
 * datagram queued to a socket has no tracepoint of its own (sk_data_ready
 * names the socket, not the skb, and UDP frees read datagrams without a
 * tracepoint), but a CPU delivers what it received in that order, batches
 * included: sk_data_ready ends the oldest packet still in flight. */
#define RXQ 64

struct rxq {
	__u64 skb[RXQ];
	__u32 head;
	__u32 tail;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rxq);
} rxq SEC(".maps");

/* Device counters: a slot of the direct-mapped per-CPU array first (its
 * lookup is a few instructions where a hash lookup is a helper call and a
 * jhash, and it runs per NAPI poll and per redirect flush), the hash for
 * the backlog and for devices whose slot is taken. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PROF_DEV_SLOTS);
	__type(key, __u32);
	__type(value, struct prof_dev_slot);
} devslots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 512);
	__type(key, __u64);             /* struct net_device *, 0: backlog */
	__type(value, struct prof_dev);
} devices SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1024);
	__type(key, struct prof_drop_key);
	__type(value, __u64);
} drops SEC(".maps");

/* pid -> wakeup time. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u64);
} wakeups SEC(".maps");

static __always_inline int cpu_wanted(void)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return cpu_mask == 0 || (cpu < 64 && (cpu_mask & (1ULL << cpu)));
}

static __always_inline void bump(void *map, __u32 i, __u64 by)
{
	__u64 *v = bpf_map_lookup_elem(map, &i);

	if (v)
		*v += by;
}

static __always_inline __u32 bucket(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) r += 1;
	return r < PROF_BUCKETS ? r : PROF_BUCKETS - 1;
}

static __always_inline __u32 dev_netns(struct net_device *dev)
{
	return BPF_CORE_READ(dev, nd_net.net, ns.inum);
}

/* The namespace filter: a device outside it (or none, with a filter) is
 * not counted. */
static __always_inline int dev_wanted(struct net_device *dev)
{
	return netns_filter == 0 || (dev && dev_netns(dev) == netns_filter);
}

static __always_inline struct prof_softirq *softirq_of_cpu(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&softirq, &zero);
}

/* The stage an interval belongs to, named by the events around it. After
 * an end of life (transmit, socket, free) the CPU is back in the batch:
 * what follows is the next packet's forwarding or delivery when the next
 * event says so, else the driver's loop. */
static __always_inline __u32 stage_of(__u32 prev, __u32 next)
{
	switch (prev) {
	case EV_GRO_ENTRY:
		return ST_GRO;
	case EV_RECEIVE:
		return ST_IP_RCV;
	case EV_QUEUE:
		return ST_XMIT;
	case EV_FIB:
		return next == EV_QUEUE ? ST_FORWARD : next == EV_FIB ? ST_ROUTE : ST_LOCAL;
	case EV_XMIT:
	case EV_SOCKET:
	case EV_FREE:
		return next == EV_QUEUE ? ST_FORWARD : next == EV_SOCKET ? ST_LOCAL : ST_DRIVER;
	default:
		return ST_DRIVER;
	}
}

/* Charges the time since the previous event to its stage. Returns the
 * time read (0 outside the NET_RX softirq: the callers read it then), so
 * that an event reads the clock once: in a VM a clock read is a good part
 * of a probe's cost. A route lookup from the driver's stage is XDP's
 * (bpf_fib_lookup) and leaves the stage as it is. */
static __always_inline __u64 boundary(__u32 ev)
{
	__u32 zero = 0;
	struct cpu_state *s = bpf_map_lookup_elem(&cpu_state, &zero);
	struct prof_stage_total *t;
	__u32 st;
	__u64 now;

	bump(&events, ev, 1);
	if (!s || !s->in_rx)
		return 0;
	now = bpf_ktime_get_ns();
	st = stage_of(s->prev, ev);
	t = bpf_map_lookup_elem(&stages, &st);
	if (t) {
		t->ns += now - s->last;
		t->intervals++;
	}
	if (!(ev == EV_FIB && st == ST_DRIVER))
		s->prev = ev;
	s->last = now;
	return now;
}

/* Whether this packet is followed: one in follow_every per CPU. */
static __always_inline int follow(void)
{
	__u32 zero = 0;
	struct cpu_state *s;

	if (follow_every <= 1)
		return 1;
	s = bpf_map_lookup_elem(&cpu_state, &zero);
	return s && s->seen++ % follow_every == 0;
}

/* The device's counters, or NULL when it is outside the namespace watched
 * (or the table is full). Keyed by the device's address, so that the
 * namespace and name are read once per device and CPU, not per event. */
static __always_inline struct prof_dev *device(struct net_device *dev)
{
	__u64 k = (__u64)dev;
	struct prof_dev_slot *fast = 0;
	struct prof_dev *d = 0;
	__u32 slot;

	/* The slot: Fibonacci hashing of the interface's index and namespace
	 * (the verifier allows no arithmetic on the address itself; these
	 * are plain loads through the BTF-typed pointer, not helper calls). */
	if (dev) {
		slot = (((dev->ifindex ^ (dev->nd_net.net->ns.inum << 8)) * 0x9E3779B1u) >> 26) & dev_slot_mask;
		fast = bpf_map_lookup_elem(&devslots, &slot);
	}

	if (fast && (fast->key == k || !fast->key)) {
		fast->key = k;
		d = &fast->d;
	} else {
		d = bpf_map_lookup_elem(&devices, &k);
	}
	if (!d) {
		struct prof_dev fresh = {};

		if (bpf_map_update_elem(&devices, &k, &fresh, BPF_NOEXIST) && !bpf_map_lookup_elem(&devices, &k)) {
			bump(&lost, LOST_DEVICES, 1);
			return 0;
		}
		d = bpf_map_lookup_elem(&devices, &k);
		if (!d)
			return 0;
	}
	if (!d->init) {
		d->init = 1;
		if (dev) {
			d->netns = dev_netns(dev);
			d->ifindex = BPF_CORE_READ(dev, ifindex);
			bpf_probe_read_kernel_str(d->name, sizeof(d->name), dev->name);
		} else {
			__builtin_memcpy(d->name, "(backlog)", 10);
		}
		d->wanted = netns_filter == 0 || (dev && d->netns == netns_filter);
	}
	return d->wanted ? d : 0;
}

/* A packet's end of life: its time since netif_receive_skb by outcome. */
static __always_inline void end_of_life(__u64 skb, __u32 outcome, __u64 now)
{
	__u64 *start = bpf_map_lookup_elem(&inflight, &skb);
	struct prof_outcomes *o;
	__u32 zero = 0;
	__u64 d;

	if (!start)
		return;
	d = (now ? now : bpf_ktime_get_ns()) - *start;
	bpf_map_delete_elem(&inflight, &skb);
	o = bpf_map_lookup_elem(&outcomes, &zero);
	if (!o || outcome >= PROF_OUTCOMES)
		return;
	o->count[outcome]++;
	o->hist[outcome][bucket(d)]++;
}

SEC("tp_btf/softirq_entry")
int prof_softirq_entry(__u64 *ctx)
{
	__u32 vec = (__u32)ctx[0], zero = 0;
	struct cpu_state *s;

	if (!cpu_wanted() || (vec != NET_RX_SOFTIRQ && vec != NET_TX_SOFTIRQ))
		return 0;
	s = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!s)
		return 0;
	if (vec == NET_TX_SOFTIRQ) {
		s->tx_entered = bpf_ktime_get_ns();
		return 0;
	}
	bump(&events, EV_SOFTIRQ, 1);
	s->in_rx = 1;
	s->prev = EV_SOFTIRQ;
	s->entered = s->last = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int prof_softirq_exit(__u64 *ctx)
{
	__u32 vec = (__u32)ctx[0], zero = 0;
	struct prof_softirq *q = softirq_of_cpu();
	struct cpu_state *s;
	__u64 d;

	if (!cpu_wanted() || !q || (vec != NET_RX_SOFTIRQ && vec != NET_TX_SOFTIRQ))
		return 0;
	s = bpf_map_lookup_elem(&cpu_state, &zero);
	if (!s)
		return 0;
	if (vec == NET_TX_SOFTIRQ) {
		if (s->tx_entered) {
			q->tx_count++;
			q->tx_ns += bpf_ktime_get_ns() - s->tx_entered;
			s->tx_entered = 0;
		}
		return 0;
	}
	if (!s->in_rx)
		return 0;
	boundary(EV_EXIT);
	d = s->last - s->entered;
	q->count++;
	q->ns += d;
	q->hist[bucket(d)]++;
	s->in_rx = 0;
	return 0;
}

SEC("tp_btf/napi_gro_receive_entry")
int prof_gro_entry(__u64 *ctx)
{
	struct sk_buff *skb = (void *)ctx[0];
	struct net_device *dev = skb->dev;
	struct prof_dev *d;

	if (!cpu_wanted())
		return 0;
	boundary(EV_GRO_ENTRY);
	if ((d = device(dev)))
		d->to_stack++;
	return 0;
}

SEC("tp_btf/napi_gro_receive_exit")
int prof_gro_exit(__u64 *ctx)
{
	if (cpu_wanted())
		boundary(EV_GRO_EXIT);
	return 0;
}

SEC("tp_btf/netif_rx")
int prof_netif_rx(__u64 *ctx)
{
	struct sk_buff *skb = (void *)ctx[0];
	struct net_device *dev = skb->dev;
	struct prof_dev *d;

	if (!cpu_wanted())
		return 0;
	bump(&events, EV_NETIF_RX, 1);
	if ((d = device(dev)))
		d->to_stack++;
	return 0;
}

/* A packet enters the stack: the per-packet clock starts. */
SEC("tp_btf/netif_receive_skb")
int prof_receive(__u64 *ctx)
{
	__u64 skb = ctx[0], now;
	struct net_device *dev = ((struct sk_buff *)ctx[0])->dev;
	struct prof_dev *d;
	struct rxq *q;
	__u32 zero = 0;
	long err;

	if (!cpu_wanted())
		return 0;
	now = boundary(EV_RECEIVE);
	d = device(dev);
	if (!d)
		return 0;
	d->received++;
	if (!follow())
		return 0;
	if (!now)
		now = bpf_ktime_get_ns();
	err = bpf_map_update_elem(&inflight, &skb, &now, BPF_NOEXIST);
	if (err == -17 /* EEXIST: its end was not traced */) {
		bump(&lost, LOST_RESTARTED, 1);
		bpf_map_update_elem(&inflight, &skb, &now, BPF_EXIST);
	} else if (err) {
		bump(&lost, LOST_INFLIGHT, 1);
		return 0;
	}
	q = bpf_map_lookup_elem(&rxq, &zero);
	if (q) {
		q->skb[q->tail & (RXQ - 1)] = skb;
		q->tail++;
		if (q->tail - q->head > RXQ)
			q->head = q->tail - RXQ;
	}
	return 0;
}

SEC("tp_btf/fib_table_lookup")
int prof_fib(__u64 *ctx)
{
	if (cpu_wanted())
		boundary(EV_FIB);
	return 0;
}

SEC("tp_btf/fib6_table_lookup")
int prof_fib6(__u64 *ctx)
{
	if (cpu_wanted())
		boundary(EV_FIB);
	return 0;
}

SEC("tp_btf/net_dev_queue")
int prof_queue(__u64 *ctx)
{
	if (cpu_wanted())
		boundary(EV_QUEUE);
	return 0;
}

SEC("tp_btf/net_dev_xmit")
int prof_xmit(__u64 *ctx)
{
	struct net_device *dev = (void *)ctx[2];
	struct prof_dev *d;
	__u64 now;

	if (!cpu_wanted())
		return 0;
	now = boundary(EV_XMIT);
	if ((d = device(dev)))
		d->xmit++;
	if ((int)ctx[1] == 0)
		end_of_life(ctx[0], OUT_FORWARDED, now);
	return 0;
}

/* Only on kernels that have it (6.4+): user space leaves it unloaded.
 * Packets this CPU received that ended meanwhile (dropped, or freed and
 * reused) are skipped. */
SEC("tp_btf/sk_data_ready")
int prof_socket(__u64 *ctx)
{
	__u32 zero = 0, i;
	struct rxq *q;
	__u64 skb, now;

	if (!cpu_wanted())
		return 0;
	now = boundary(EV_SOCKET);
	q = bpf_map_lookup_elem(&rxq, &zero);
	if (!q)
		return 0;
	for (i = 0; i < RXQ && q->head != q->tail; i++) {
		skb = q->skb[q->head & (RXQ - 1)];
		q->head++;
		if (bpf_map_lookup_elem(&inflight, &skb)) {
			end_of_life(skb, OUT_DELIVERED, now);
			break;
		}
	}
	return 0;
}

SEC("tp_btf/skb_copy_datagram_iovec")
int prof_copy(__u64 *ctx)
{
	bump(&events, EV_COPY, 1);
	end_of_life(ctx[0], OUT_DELIVERED, 0);
	return 0;
}

/* Adds a run of drops to the drops table. */
static __always_inline void add_drops(struct prof_drop_run *r)
{
	struct prof_drop_key k = { .reason = r->reason, .location = r->location };
	__u64 *n = bpf_map_lookup_elem(&drops, &k);

	if (n)
		*n += r->pending;
	else if (bpf_map_update_elem(&drops, &k, &r->pending, BPF_NOEXIST) && !bpf_map_lookup_elem(&drops, &k))
		bump(&lost, LOST_DROPS, r->pending);
}

/* Counts a drop: one more of the CPU's current run, or the start of a
 * new run (the previous one goes to the table). */
static __always_inline void count_drop(__u32 reason, __u64 location)
{
	__u32 zero = 0;
	struct cpu_state *s = bpf_map_lookup_elem(&cpu_state, &zero);

	if (!s)
		return;
	if (s->drop.pending && s->drop.reason == reason && s->drop.location == location) {
		s->drop.pending++;
		return;
	}
	if (s->drop.pending)
		add_drops(&s->drop);
	s->drop.reason = reason;
	s->drop.location = location;
	s->drop.pending = 1;
}

/* With stages: the free is a boundary and the end of its packet's life.
 * Returns whether it is a drop to count. */
static __always_inline int freed(__u64 skb, __u32 reason)
{
	__u64 now = boundary(EV_FREE);

	if (reason == reason_consumed) {
		end_of_life(skb, OUT_CONSUMED, now);
		return 0;
	}
	/* Under a namespace filter a drop counts when its packet was followed
	 * or its device is in the namespace. */
	if (netns_filter && !bpf_map_lookup_elem(&inflight, &skb) && !dev_wanted(BPF_CORE_READ((struct sk_buff *)skb, dev)))
		return 0;
	end_of_life(skb, OUT_DROPPED, now);
	return 1;
}

SEC("tp_btf/kfree_skb")
int prof_kfree(__u64 *ctx)
{
	__u64 skb = ctx[0], location = ctx[1];
	__u32 reason = (__u32)ctx[2];

	if (!cpu_wanted())
		return 0;
	if (counts_only) {
		/* Counting only, a drop is a counter: no stage boundary, no
		 * clock read, no packet to end (a sink dropping every frame
		 * gets here once per packet). */
		if (reason == reason_consumed || (netns_filter && !dev_wanted(BPF_CORE_READ((struct sk_buff *)skb, dev))))
			return 0;
	} else if (!freed(skb, reason)) {
		return 0;
	}
	count_drop(reason, location);
	return 0;
}

SEC("tp_btf/consume_skb")
int prof_consume(__u64 *ctx)
{
	if (!cpu_wanted())
		return 0;
	end_of_life(ctx[0], OUT_CONSUMED, boundary(EV_FREE));
	return 0;
}

SEC("tp_btf/napi_poll")
int prof_napi_poll(__u64 *ctx)
{
	struct napi_struct *napi = (void *)ctx[0];
	struct net_device *dev = napi->dev;
	int work = (int)ctx[1], budget = (int)ctx[2];
	struct prof_dev *d;
	__u32 b;

	if (!cpu_wanted())
		return 0;
	bump(&events, EV_NAPI_POLL, 1);
	if (!(d = device(dev)) || work < 0)
		return 0;
	d->polls++;
	d->work += work;
	if (work >= budget)
		d->full++;
	b = work == 0 ? 0 : bucket(work) + 1;
	if (b >= PROF_WORK_BUCKETS)
		b = PROF_WORK_BUCKETS - 1;
	d->work_hist[b]++;
	return 0;
}

static __always_inline struct prof_dev *xdp_device(__u64 *ctx)
{
	if (!cpu_wanted())
		return 0;
	return device((void *)ctx[0]);
}

/* Redirected frames are counted per flush of the devmap's bulk queue (up
 * to 16 frames, bpf_redirect included), not per frame on xdp:xdp_redirect:
 * a per-frame tracepoint would cost a fast XDP path a third of its rate. */
SEC("tp_btf/xdp_devmap_xmit")
int prof_xdp_devmap_xmit(__u64 *ctx)
{
	struct prof_dev *d = xdp_device(ctx);

	if (d) {
		d->redirect += (int)ctx[2];
		d->redirect_err += (int)ctx[3];
	}
	return 0;
}

SEC("tp_btf/xdp_redirect_err")
int prof_xdp_redirect_err(__u64 *ctx)
{
	struct prof_dev *d = xdp_device(ctx);

	if (d)
		d->redirect_err++;
	return 0;
}

SEC("tp_btf/xdp_exception")
int prof_xdp_exception(__u64 *ctx)
{
	struct prof_dev *d = xdp_device(ctx);

	if (d)
		d->exception++;
	return 0;
}

SEC("tp_btf/xdp_bulk_tx")
int prof_xdp_bulk_tx(__u64 *ctx)
{
	struct prof_dev *d = xdp_device(ctx);

	if (d) {
		d->tx += (int)ctx[1];
		d->tx_drops += (int)ctx[2];
	}
	return 0;
}

static __always_inline int is_ksoftirqd(struct task_struct *t)
{
	char comm[10] = {};

	bpf_probe_read_kernel(comm, sizeof(comm), t->comm);
	return comm[0] == 'k' && comm[1] == 's' && comm[2] == 'o' && comm[3] == 'f' && comm[4] == 't' &&
	       comm[5] == 'i' && comm[6] == 'r' && comm[7] == 'q' && comm[8] == 'd';
}

SEC("tp_btf/sched_switch")
int prof_switch(__u64 *ctx)
{
	struct task_struct *prev = (void *)ctx[1], *next = (void *)ctx[2];
	struct prof_softirq *q = softirq_of_cpu();
	struct prof_outcomes *o;
	__u32 zero = 0, pid;
	struct cpu_state *s;
	__u64 now, *woken;

	if (!cpu_wanted() || !q)
		return 0;
	bump(&events, EV_SWITCH, 1);
	q->switches++;
	now = bpf_ktime_get_ns();
	s = bpf_map_lookup_elem(&cpu_state, &zero);
	if (s && s->ksoftirqd_in && is_ksoftirqd(prev)) {
		q->ksoftirqd_ns += now - s->ksoftirqd_in;
		s->ksoftirqd_in = 0;
	}
	if (s && is_ksoftirqd(next))
		s->ksoftirqd_in = now;
	pid = BPF_CORE_READ(next, pid);
	woken = bpf_map_lookup_elem(&wakeups, &pid);
	if (!woken)
		return 0;
	o = bpf_map_lookup_elem(&outcomes, &zero);
	if (o)
		o->runq_hist[bucket(now - *woken)]++;
	bpf_map_delete_elem(&wakeups, &pid);
	return 0;
}

static __always_inline void woken(struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, pid);
	__u64 now = bpf_ktime_get_ns();

	if (pid && bpf_map_update_elem(&wakeups, &pid, &now, BPF_ANY))
		bump(&lost, LOST_WAKEUPS, 1);
}

SEC("tp_btf/sched_wakeup")
int prof_wakeup(__u64 *ctx)
{
	woken((void *)ctx[0]);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int prof_wakeup_new(__u64 *ctx)
{
	woken((void *)ctx[0]);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
