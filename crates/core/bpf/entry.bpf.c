/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The entry program: the one XDP program xnf attaches to an interface. It
 * owns nothing but the interface's stage array (xnf/stage.h) and runs the
 * first stage present; with none present, XDP_PASS (the kernel's path).
 * Attached once, it never changes: network functions come and go by
 * filling and emptying their slots.
 */
#include "xnf/common.h"
#include "xnf/stage.h"

/* Puts the stage numbers into BTF for the Rust mirror (src/entry.rs). */
const volatile struct {
	enum xnf_stage stage;
} xnf_btf_anchor = {};

SEC("xdp")
int xnf_entry(struct xdp_md *ctx)
{
	return xnf_next_stage(ctx, -1);
}

char _license[] SEC("license") = "Dual MIT/GPL";
