/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf profile --stack: a perf_event program sampling the CPUs it is
 * attached to (a software cpu-clock event: this machine has no PMU), each
 * sample counted by (pid, command, kernel stack, user stack). The stacks
 * are symbolised in user space into a flame graph and a top-functions
 * table; what the stack map or the count table could not hold is counted.
 */
#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#define SAMPLE_DEPTH 127

struct sample_key {
	__u32 pid;
	__s32 kstack;           /* stack id, negative: none or lost */
	__s32 ustack;
	__u32 cpu;
	char comm[16];
};

enum sample_lost {
	SAMPLE_LOST_KSTACK = 0, /* stack map full or collision */
	SAMPLE_LOST_USTACK,
	SAMPLE_LOST_COUNTS,     /* count table full */
	SAMPLE_LOSTS,
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, SAMPLE_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 32768);
	__type(key, struct sample_key);
	__type(value, __u64);
} counts SEC(".maps");

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
	struct sample_key k = {};
	__u64 one = 1, *n;

	k.pid = bpf_get_current_pid_tgid() >> 32;
	k.cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(k.comm, sizeof(k.comm));
	k.kstack = bpf_get_stackid(ctx, &stacks, 0);
	/* The idle task and kernel threads have no user stack: -EFAULT there
	 * is not a loss. */
	k.ustack = k.pid ? bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK) : -1;
	if (k.kstack == -12 /* ENOMEM */ || k.kstack == -17 /* EEXIST */)
		lost(SAMPLE_LOST_KSTACK);
	if (k.ustack == -12 || k.ustack == -17)
		lost(SAMPLE_LOST_USTACK);
	n = bpf_map_lookup_elem(&counts, &k);
	if (n)
		__sync_fetch_and_add(n, 1);
	else if (bpf_map_update_elem(&counts, &k, &one, BPF_NOEXIST) && !bpf_map_lookup_elem(&counts, &k))
		lost(SAMPLE_LOST_COUNTS);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
