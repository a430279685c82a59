/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf profile --stack: a perf_event program sampling the CPUs it is
 * attached to (a software cpu-clock event: this machine has no PMU). Each
 * sample's kernel and user stacks are copied whole into a ring buffer
 * record, which user space drains while sampling runs and counts by (cpu,
 * pid, command, stacks). No stack map: BPF_MAP_TYPE_STACK_TRACE keeps one
 * stack per hash bucket and refuses a second (-EEXIST), so it loses more
 * the more distinct stacks there are. What is lost is counted here.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

/* kernel.perf_event_max_stack's default: the kernel copies no deeper. */
#define SAMPLE_DEPTH 127

/* One sample; fixed size, so it is reserved in the ring and the stacks are
 * copied straight into it (no second copy). Mirrored in src/sample.rs. */
struct sample_rec {
	__u32 pid;
	__u32 cpu;
	char comm[16];
	__s32 kbytes;           /* bytes of kips copied; negative: -errno */
	__s32 ubytes;
	__u64 kips[SAMPLE_DEPTH];
	__u64 uips[SAMPLE_DEPTH];
};

enum sample_lost {
	SAMPLE_LOST_RING = 0,   /* no room in the ring: the sample is gone */
	SAMPLE_LOST_KSTACK,     /* the kernel could not copy a stack there was */
	SAMPLE_LOST_USTACK,
	SAMPLE_LOSTS,
};

/* Sized by user space before load (cpus x Hz x record, about a second). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SAMPLE_LOSTS);
	__type(key, __u32);
	__type(value, __u64);
} sample_lost SEC(".maps");

static __always_inline void lost(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&sample_lost, &i);

	if (v)
		(*v)++;
}

SEC("perf_event")
int prof_sample(struct bpf_perf_event_data *ctx)
{
	struct sample_rec *r;
	__u64 flags;

	r = bpf_ringbuf_reserve(&samples, sizeof(*r), 0);
	if (!r) {
		lost(SAMPLE_LOST_RING);
		return 0;
	}
	r->pid = bpf_get_current_pid_tgid() >> 32;
	r->cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(r->comm, sizeof(r->comm));
	/* 0 bytes is no stack: no kernel stack when the CPU was in user mode,
	 * no user stack in the idle task or a kernel thread (no mm). Negative
	 * is a stack that was there and not copied (-EFAULT: the per-CPU
	 * callchain buffer was in use). */
	r->kbytes = bpf_get_stack(ctx, r->kips, sizeof(r->kips), 0);
	r->ubytes = bpf_get_stack(ctx, r->uips, sizeof(r->uips), BPF_F_USER_STACK);
	if (r->kbytes < 0)
		lost(SAMPLE_LOST_KSTACK);
	if (r->ubytes < 0)
		lost(SAMPLE_LOST_USTACK);
	/* A wakeup per sample would wake the reader thousands of times a
	 * second (and sample it doing so): it polls on a timer instead, and
	 * is woken early only when the ring is past half full. */
	flags = bpf_ringbuf_query(&samples, BPF_RB_AVAIL_DATA) > bpf_ringbuf_query(&samples, BPF_RB_RING_SIZE) / 2 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(r, flags);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
