/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * Never loaded: this object exists so that the skeleton generator writes
 * Rust mirrors of the types every network function shares (src/abi.rs).
 * A type reaches the generated code only when BTF reaches it from a global,
 * hence the one anchor below, with a field of every shared type.
 */
#include "xnf/common.h"
#include "xnf/fib.h"
#include "xnf/parse.h"
#include "xnf/classify.h"
/* Also declares the route cache's maps (and neigh_use) in this object:
 * harmless, as it is never loaded. */
#include "xnf/fib_cache.h"

const volatile struct {
	enum xdp_action action;
	enum xnf_parse_result parse_result;
	enum xnf_frag frag;
	enum xnf_l4 l4;
	enum xnf_router_reason fwd_reason;
	enum xnf_rpf rpf;
	enum xnf_fib_limits fib_limits;
	enum xnf_match_flag match_flag;
	struct xnf_match match;
	enum xnf_fib_cache_aside fib_cache_aside;
	enum xnf_fib_cache_limits fib_cache_limits;
	struct xnf_fib_ctl fib_ctl;
} xnf_abi_anchor = {};

char _license[] SEC("license") = "Dual MIT/GPL";
