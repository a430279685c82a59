/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * xnf filter: a DDoS filter and firewall at the XDP hook (the XDP paper §5.1).
 *
 * The first stage of an interface's entry program (xnf/stage.h). Each IP
 * frame is matched against the rule set, first match wins, in order; what
 * no rule takes meets the default policy. A frame that is let through
 * continues to the next stage (the load balancer, the router) in the same
 * XDP run, or to the kernel; a dropped frame costs the kernel nothing.
 *
 * Decided here, for every frame (README, "What the filter does with..."):
 * - not IP (ARP, LLDP, ...): not the rules' business; continues;
 * - an IP header the kernel would drop too (parse.h: "malformed"): dropped;
 * - stacked VLAN tags (QinQ), which the parser does not look into: the
 *   default policy, since no rule can be checked;
 * - a rule with L4 fields (ports, TCP flags, ICMP type) and a frame that
 *   does not show them (a later fragment, a truncated L4 header, too many
 *   extension headers): fail-closed. A drop or rate-limit rule takes the
 *   frame, a pass or count rule does not, so an undeterminable frame never
 *   gets past a drop rule by accident, nor past the default by a pass rule.
 *
 * Everything a change swaps is behind a map-in-map: the compiled rule set
 * (an inner array of records, filter.h) and each prefix list (an LPM
 * trie). An apply
 * fills new inner maps and then points the outer slot at them in one
 * update: a frame sees the old rules or the new ones whole. The kernel
 * frees an old inner map after an RCU grace period, off the data path.
 */
#include "xnf/common.h"
#define XNF_PARSE_INLINE /* parse.h says why */
#include "xnf/parse.h"
#include "xnf/classify.h" /* prefix_match, enum xnf_class_match */
#include "xnf/stage.h"
#include "filter.h"
#include "syncookie.h"

/* Puts these types into BTF for the Rust mirrors (src/program.rs). The
 * generator follows members, not pointers; the read-only data this costs
 * are never touched. */
const volatile struct {
	enum xnf_filter_limits limits;
	enum xnf_filter_field field;
	enum xnf_filter_action action;
	enum xnf_filter_counter counter;
	enum xnf_filter_region region;
	enum xnf_filter_table table;
	enum xnf_filter_ref ref;
	struct xnf_filter_header header;
	struct xnf_filter_rule rule;
	struct xnf_filter_class class;
	struct xnf_filter_refs refs;
	struct xnf_filter_record record;
	struct xnf_filter_lpm_key lpm_key;
	struct xnf_filter_bucket_key bucket_key;
	struct xnf_filter_top top;
	struct xnf_filter_capture capture;
	struct xnf_filter_rule_stats rule_stats;
} xnf_btf_anchor = {};

#define NS_PER_UNIT 1000000000ULL
#define RULE_DEFAULT XNF_FILTER_MAX_RULES
#define RULE_MALFORMED (XNF_FILTER_MAX_RULES + 1)
#define RULE_NONE 0xffffffffU
/* Sets of at most this many rules are scanned rule by rule. */
#define XNF_FILTER_LINEAR_RULES 4

/* A compiled rule set (filter.h): its records. */
struct xnf_filter_set_table {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_FR_COUNT);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, XNF_FILTER_RECORD);
};

/* The live rule set, swapped whole by the control plane. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 1);
	__type(key, __u32);
	__array(values, struct xnf_filter_set_table);
} rule_sets SEC(".maps");

/* LPM tries allow no BPF_F_INNER_MAP, so every list has the same limit
 * (entries are allocated as inserted: the limit costs nothing). */
struct xnf_filter_list {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1 << 23);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(struct xnf_filter_lpm_key));
	__uint(value_size, sizeof(__u8));
};

/* Prefix lists by slot. A rule set only names slots that are filled
 * before it goes live and emptied only after it is replaced. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XNF_FILTER_MAX_LISTS);
	__type(key, __u32);
	__array(values, struct xnf_filter_list);
} lists SEC(".maps");

/*
 * A big list's IPv4 part as a bitmap of the /24s, two bits each (bit 2i:
 * a prefix of /24 or shorter covers /24 i; bit 2i+1: a longer prefix lies
 * within it), and a leaf per /24 of the second kind saying which of its
 * addresses the longer prefixes cover. An LPM trie lookup walks a node
 * per bit that tells its prefixes apart, some twenty dependent loads with
 * a million prefixes; the bitmap answers in one load, and in a hash
 * lookup more for an address in a /24 with longer prefixes. Such a list's
 * trie holds its IPv6 prefixes only. Filled before the slot goes live
 * (src/lists.rs says which lists get them).
 */
struct xnf_filter_list_bits {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XNF_FILTER_BITS_WORDS);
	__type(key, __u32);
	__type(value, __u64);
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XNF_FILTER_MAX_LISTS);
	__type(key, __u32);
	__array(values, struct xnf_filter_list_bits);
} list_bits SEC(".maps");

struct xnf_filter_list_leaves {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, XNF_FILTER_LEAVES_MAX);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(key_size, sizeof(__u32)); /* the /24: address >> 8, host order */
	__uint(value_size, sizeof(struct xnf_filter_leaf));
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, XNF_FILTER_MAX_LISTS);
	__type(key, __u32);
	__array(values, struct xnf_filter_list_leaves);
} list_leaves SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_filter_stats);
} stats SEC(".maps");

/* Slot XNF_FILTER_MAX_RULES counts the default policy. Named anew when
 * the rule limit grew from 256 (a pinned map keeps its size: an upgrade
 * makes this one fresh instead of reusing the smaller one). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, XNF_FILTER_MAX_RULES + 1);
	__type(key, __u32);
	__type(value, struct xnf_filter_rule_stats);
} rule_counters SEC(".maps");

/* Per-source token buckets. An LRU: a flood of new sources evicts the
 * least recently seen ones, whose next frame starts a full bucket. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, XNF_FILTER_BUCKETS);
	__type(key, struct xnf_filter_bucket_key);
	__type(value, struct xnf_filter_bucket);
} buckets SEC(".maps");

/*
 * Dropped sources, per CPU: a slot per hash of the source address. A
 * table, not an LRU hash: under a flood from many sources an LRU insert
 * (a lock, an eviction) on each new source cost several times the filter
 * itself; this costs one per-CPU array write per drop.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1 << XNF_FILTER_TOP_BITS);
	__type(key, __u32);
	__type(value, struct xnf_filter_top);
} top_sources SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_filter_capture);
} capture_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xnf_filter_capture_state);
} capture_state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} capture_ring SEC(".maps");

/* The fields of a compiled set's tables: the kind, then enum xnf_filter_table's. */
#define XNF_FIELDS 7

/* A frame as the rules see it. */
struct fctx {
	struct xnf_pkt pkt;
	void *set;                            /* the live compiled set (filter.h) */
	const struct xnf_filter_header *hdr;  /* its header; NULL: no rules applied */
	struct xnf_filter_stats *stats;       /* this CPU's counters, looked up once */
	const struct xnf_filter_rule *rule; /* the rule that took it, when known */
	__u32 len;        /* frame bytes (no FCS) */
	__u32 hit;        /* index of the rule that took the frame, or RULE_NONE */
	__u32 words;      /* words of rules every class has some rule in */
	__u32 word;       /* the lazy search: the word it is in, */
	__u64 cand;       /* and the candidates left there */
	__u8 maybe_unsure; /* some class has rules it cannot tell about */
	__u8 unsure;      /* it took the frame fail-closed */
	__u8 tcp_flags;
	__u8 tcp_known;   /* the flags byte lies within the IP packet */
	__u8 icmp_type;
	__u8 icmp_known;
	/* The class of each field, written by classify before any read:
	 * last, and not zeroed (seven stores a frame for nothing). */
	const struct xnf_filter_class *cls[XNF_FIELDS];
};

/* c->stats is never NULL past the program's first lines. */
static __always_inline void count(const struct fctx *c, __u32 k)
{
	if (k < XNF_FC_MAX)
		c->stats->counters[k]++;
}

static __always_inline void count_rule(__u32 rule, __u32 len, int dropped)
{
	struct xnf_filter_rule_stats *s = bpf_map_lookup_elem(&rule_counters, &rule);

	if (!s)
		return;
	s->packets++;
	s->bytes += len;
	s->dropped += dropped;
}

/* TCP flags and ICMP type, read only from within the IP packet. */
static __always_inline void read_l4_extras(struct xdp_md *ctx, struct fctx *c)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	const struct xnf_pkt *p = &c->pkt;
	__u32 off = p->l4_off;
	__u8 *b;

	if (off > XNF_MAX_OFF)
		return;
	b = data + off;
	if (p->proto == IPPROTO_TCP && p->l4 == XNF_L4_PORTS && off + 14 <= p->ip_end && (void *)(b + 14) <= end) {
		c->tcp_flags = b[13];
		c->tcp_known = 1;
	}
	if ((p->proto == IPPROTO_ICMP || p->proto == IPPROTO_ICMPV6) && p->l4 == XNF_L4_NO_PORTS &&
	    off + 1 <= p->ip_end && (void *)(b + 1) <= end) {
		c->icmp_type = b[0];
		c->icmp_known = 1;
	}
}

#include "match.h" /* which rule takes a frame */

/* Refills a bucket for the time since its last frame, capped at full. */
static __always_inline __u64 refill(__u64 tokens, __u64 elapsed, __u64 fill_ns, __u64 rate, __u64 size)
{
	if (elapsed > fill_ns)
		elapsed = fill_ns;
	tokens += elapsed * rate;
	return tokens > size ? size : tokens;
}

/*
 * Whether the frame fits its source's bucket under rule @idx (and takes
 * its tokens). No lock: the kernel allows none in an LRU map's values, and
 * a source's frames mostly arrive on one CPU (one flow hashes to one
 * queue). Two CPUs updating one bucket at the same instant may each see
 * the tokens before the other's frame: the error is that frame, not a rate.
 */
static __always_inline int rate_admit(const struct xnf_filter_rule *r, __u32 idx, const struct fctx *c)
{
	struct xnf_filter_bucket_key k = { .gen = r->bucket_gen, .rule = idx, .family = c->pkt.family };
	struct xnf_filter_bucket *b;
	__u64 now = bpf_ktime_get_ns(), elapsed, tp, tb, cost_b;
	int ok;

	__builtin_memcpy(k.addr, c->pkt.src, sizeof(k.addr));
	b = bpf_map_lookup_elem(&buckets, &k);
	if (!b) {
		struct xnf_filter_bucket fresh = { .last_ns = now, .tokens_p = r->burst_p, .tokens_b = r->burst_b };

		bpf_map_update_elem(&buckets, &k, &fresh, BPF_NOEXIST);
		b = bpf_map_lookup_elem(&buckets, &k);
		if (!b)
			return 0; /* no bucket to be within: fail-closed */
	}
	cost_b = (__u64)c->len * NS_PER_UNIT;
	/* Another CPU may have stamped a later time: no refill, no rewind. */
	elapsed = (__s64)(now - b->last_ns) > 0 ? now - b->last_ns : 0;
	if (elapsed)
		b->last_ns = now;
	tp = refill(b->tokens_p, elapsed, r->fill_ns_p, r->pps, r->burst_p);
	tb = refill(b->tokens_b, elapsed, r->fill_ns_b, r->bps, r->burst_b);
	ok = (!(r->flags & XNF_F_PPS) || tp >= NS_PER_UNIT) && (!(r->flags & XNF_F_BPS) || tb >= cost_b);
	if (ok) {
		if (r->flags & XNF_F_PPS)
			tp -= NS_PER_UNIT;
		if (r->flags & XNF_F_BPS)
			tb -= cost_b;
	}
	b->tokens_p = tp;
	b->tokens_b = tb;
	return ok;
}

/* Whether the running capture (@cfg) has room for a drop now: its own
 * token bucket. */
static __always_inline int capture_admit(const struct xnf_filter_capture *cfg)
{
	__u32 zero = 0;
	struct xnf_filter_capture_state *st;
	__u64 now, elapsed, size, tokens;
	int ok;

	st = bpf_map_lookup_elem(&capture_state, &zero);
	if (!st)
		return 0;
	now = bpf_ktime_get_ns();
	size = cfg->max_pps * NS_PER_UNIT;  /* one second's worth */
	bpf_spin_lock(&st->lock);
	elapsed = (__s64)(now - st->last_ns) > 0 ? now - st->last_ns : 0;
	if (elapsed)
		st->last_ns = now;
	tokens = refill(st->tokens, elapsed, NS_PER_UNIT, cfg->max_pps, size);
	ok = tokens >= NS_PER_UNIT;
	st->tokens = ok ? tokens - NS_PER_UNIT : tokens;
	bpf_spin_unlock(&st->lock);
	return ok;
}

/* Out of line: most drops are not captured, and the drop path should
 * not carry this one's code and registers (drop() decides a capture
 * wants the frame's rule; @cfg is the capture's). */
static __noinline int capture(struct xdp_md *ctx, const struct fctx *c, __u32 rule, const struct xnf_filter_capture *cfg)
{
	struct xnf_filter_record *rec;
	__u32 caplen = c->len;

	if (!capture_admit(cfg))
		return 0;
	rec = bpf_ringbuf_reserve(&capture_ring, sizeof(*rec), 0);
	if (!rec) {
		count(c, XNF_FC_CAPTURE_LOST);
		return 0;
	}
	if (caplen > XNF_FILTER_SNAPLEN)
		caplen = XNF_FILTER_SNAPLEN;
	/* The same value for any frame of 1..SNAPLEN bytes, written so the
	 * verifier sees it can be neither 0 nor more than the record holds. */
	caplen = ((caplen - 1) & (XNF_FILTER_SNAPLEN - 1)) + 1;
	if (bpf_xdp_load_bytes(ctx, 0, rec->data, caplen)) {
		bpf_ringbuf_discard(rec, 0);
		count(c, XNF_FC_CAPTURE_LOST);
		return 0;
	}
	rec->ts_ns = bpf_ktime_get_ns();
	rec->ifindex = ctx->ingress_ifindex;
	rec->rule = rule;
	rec->len = c->len;
	rec->caplen = caplen;
	bpf_ringbuf_submit(rec, 0);
	count(c, XNF_FC_CAPTURED);
	return 0;
}

/*
 * Counts a drop against its source. A slot holds one source; a source
 * hashing to a slot another holds wears that one's count down by one and
 * takes the slot when it reaches zero (the majority vote of each slot): a
 * heavy source keeps its slot and its count, sources that share a slot
 * with a heavier one go uncounted, so counts are lower bounds.
 */
static __always_inline void sample_source(const struct fctx *c)
{
	const __u32 *a = c->pkt.src;
	__u32 h = (a[0] ^ a[1] ^ a[2] ^ a[3]) * 2654435761U, slot = h >> (32 - XNF_FILTER_TOP_BITS);
	struct xnf_filter_top *t;

	if (!c->pkt.family)
		return;
	t = bpf_map_lookup_elem(&top_sources, &slot);
	if (!t)
		return;
	if (t->family == c->pkt.family && t->addr[0] == a[0] && t->addr[1] == a[1] && t->addr[2] == a[2] && t->addr[3] == a[3]) {
		t->count++;
	} else if (t->count > 1) {
		t->count--;
	} else {
		t->family = c->pkt.family;
		__builtin_memcpy(t->addr, a, sizeof(t->addr));
		t->count = 1;
	}
}

static __always_inline int drop(struct xdp_md *ctx, const struct fctx *c, __u32 rule)
{
	__u32 zero = 0;
	const struct xnf_filter_capture *cfg = bpf_map_lookup_elem(&capture_cfg, &zero);

	count(c, XNF_FC_DROP);
	sample_source(c);
	if (cfg && cfg->enabled && (cfg->rule == RULE_NONE || cfg->rule == rule))
		capture(ctx, c, rule, cfg);
	return XDP_DROP;
}

/* Lets the frame continue: the next stage, or the kernel. */
static __always_inline int pass(struct xdp_md *ctx, const struct fctx *c)
{
	count(c, XNF_FC_PASS);
	return xnf_next_stage(ctx, XNF_STAGE_FILTER);
}

/* What no rule took: the default policy. */
static __always_inline int by_default(struct xdp_md *ctx, const struct fctx *c, int default_drop)
{
	count_rule(RULE_DEFAULT, c->len, default_drop);
	if (default_drop) {
		count(c, XNF_FC_DEFAULT_DROP);
		return drop(ctx, c, RULE_DEFAULT);
	}
	count(c, XNF_FC_DEFAULT_PASS);
	return pass(ctx, c);
}

/* To the kernel, past the later stages (syncookie.h says why). */
static __always_inline int to_kernel(const struct fctx *c, __u32 rule, __u32 k)
{
	count_rule(rule, c->len, 0);
	count(c, k);
	count(c, XNF_FC_PASS);
	return XDP_PASS;
}

/* A syn-cookie rule took the frame (syncookie.h). */
static __always_inline int syn_cookie(struct xdp_md *ctx, const struct fctx *c, const struct xnf_filter_rule *r, __u32 i)
{
	const struct xnf_pkt *p = &c->pkt;
	__u8 f = c->tcp_flags;
	int known;

	/* Fail-closed, and no handshake in fragments. */
	if (c->unsure || !c->tcp_known || p->frag != XNF_FRAG_NONE)
		goto out;
	if ((f & (XNF_TCP_SYN | XNF_TCP_ACK | XNF_TCP_RST | XNF_TCP_FIN)) == XNF_TCP_SYN) {
		if (!answer_syn(ctx, p, c->len, r->mss))
			goto out;
		count_rule(i, c->len, 0);
		count(c, XNF_FC_TX);
		return XDP_TX;
	}
	known = known_connection(ctx, p);
	if (known > 0)
		return to_kernel(c, i, XNF_FC_COOKIE_CONN);
	if ((f & (XNF_TCP_SYN | XNF_TCP_ACK | XNF_TCP_RST)) == XNF_TCP_ACK && cookie_valid(ctx, p))
		return to_kernel(c, i, XNF_FC_COOKIE_OK);
	if (known < 0)
		return to_kernel(c, i, XNF_FC_COOKIE_UNCHECKED);
out:
	count_rule(i, c->len, 1);
	count(c, XNF_FC_COOKIE_DROP);
	return drop(ctx, c, i);
}

/* Carries out what rule @i decided. */
static __always_inline int act(struct xdp_md *ctx, const struct fctx *c, __u32 i)
{
	const struct xnf_filter_rule *r = c->rule ? c->rule : rule_at(c, i);

	if (!r)
		return pass(ctx, c);
	if (c->unsure)
		count(c, XNF_FC_UNSURE);
	switch (r->action) {
	case XNF_FA_PASS:
		count_rule(i, c->len, 0);
		count(c, XNF_FC_RULE_PASS);
		return pass(ctx, c);
	case XNF_FA_COUNT:
		count_rule(i, c->len, 0);
		count(c, XNF_FC_COUNTED);
		return pass(ctx, c);
	case XNF_FA_RATE:
		if (rate_admit(r, i, c)) {
			count_rule(i, c->len, 0);
			count(c, XNF_FC_RATE_PASS);
			return pass(ctx, c);
		}
		count_rule(i, c->len, 1);
		count(c, XNF_FC_RATE_DROP);
		return drop(ctx, c, i);
	case XNF_FA_SYNCOOKIE:
		return syn_cookie(ctx, c, r, i);
	default:
		count_rule(i, c->len, 1);
		count(c, XNF_FC_RULE_DROP);
		return drop(ctx, c, i);
	}
}

SEC("xdp")
int xnf_filter(struct xdp_md *ctx)
{
	struct fctx c;
	__u32 zero = 0;
	enum xnf_parse_result res;
	void *table;

	__builtin_memset(&c, 0, offsetof(struct fctx, cls));
	c.hit = RULE_NONE;
	c.len = ctx->data_end - ctx->data;
	c.stats = bpf_map_lookup_elem(&stats, &zero);
	if (!c.stats)
		return XDP_PASS; /* never: key 0 of a one-entry array */
	count(&c, XNF_FC_RX);
	res = xnf_parse(ctx, &c.pkt);
	if (res == XNF_PARSE_NON_IP) {
		count(&c, XNF_FC_NON_IP);
		return pass(ctx, &c);
	}
	if (res == XNF_PARSE_MALFORMED) {
		count(&c, XNF_FC_MALFORMED);
		return drop(ctx, &c, RULE_MALFORMED);
	}
	table = bpf_map_lookup_elem(&rule_sets, &zero);
	c.hdr = table ? bpf_map_lookup_elem(table, &zero) : 0;
	if (!c.hdr)
		return by_default(ctx, &c, 0); /* no rules applied yet */
	c.set = table;
	if (res == XNF_PARSE_QINQ) {
		count(&c, XNF_FC_QINQ);
		return by_default(ctx, &c, c.hdr->default_drop);
	}
	if (c.hdr->extras)
		read_l4_extras(ctx, &c);
	find_rule(&c);
	if (c.hit == RULE_NONE)
		return by_default(ctx, &c, c.hdr->default_drop);
	return act(ctx, &c, c.hit);
}

char _license[] SEC("license") = "Dual MIT/GPL";
