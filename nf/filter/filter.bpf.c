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
	/* The class of each field (classify). */
	const struct xnf_filter_class *cls[XNF_FIELDS];
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

/* Whether @addr is in the list in slot @slot (an empty slot lists nothing). */
static __always_inline int in_list(__u32 slot, __u8 family, const __u32 *addr)
{
	struct xnf_filter_lpm_key k = {};
	void *trie = bpf_map_lookup_elem(&lists, &slot);

	if (!trie)
		return 0;
	k.family = family == AF_INET ? 4 : 6;
	k.prefixlen = 8 + (family == AF_INET ? 32 : 128);
	__builtin_memcpy(k.addr, addr, 16);
	return bpf_map_lookup_elem(trie, &k) != 0;
}

/* x * 0x03f79d71b4cb0a89 >> 58 for each x = 1 << i, to i: BPF has no
 * count-trailing-zeros instruction. */
static const __u8 debruijn64[64] = {
	0,  1,  48, 2,  57, 49, 28, 3,  61, 58, 50, 42, 38, 29, 17, 4,  62, 55, 59, 36, 53, 51,
	43, 22, 45, 39, 33, 30, 24, 18, 12, 5,  63, 47, 56, 27, 60, 41, 37, 16, 54, 35, 52, 21,
	44, 32, 23, 11, 46, 26, 40, 15, 34, 20, 31, 10, 25, 14, 19, 9,  13, 8,  7,  6,
};

/* The index of the lowest set bit of @x (not 0). */
static __always_inline __u32 lowest_bit(__u64 x)
{
	return debruijn64[((x & -x) * 0x03f79d71b4cb0a89ULL) >> 58];
}

/* Entry @idx of the reference table starting at record @base. */
static __always_inline __u32 ref_at(void *set, __u32 base, __u32 idx)
{
	__u32 k = base + (idx >> 6);
	const struct xnf_filter_refs *r = bpf_map_lookup_elem(set, &k);

	return r ? r->ref[idx & 63] : 0;
}

/* Rule @i of the live set (NULL beyond the table). */
static __always_inline const struct xnf_filter_rule *rule_at(const struct fctx *c, __u32 i)
{
	__u32 k = XNF_FR_RULES + i;

	if (i >= XNF_FILTER_MAX_RULES)
		return 0;
	return bpf_map_lookup_elem(c->set, &k);
}

/* Keeps field @i's class, @ref; 0 if its record is missing. */
static __always_inline int use_class(struct fctx *c, __u32 i, __u32 ref)
{
	__u32 k = XNF_FR_CLASSES + (ref & XNF_REF_CLASS_MASK);
	const struct xnf_filter_class *cls = bpf_map_lookup_elem(c->set, &k);

	if (!cls || i >= XNF_FIELDS)
		return 0;
	c->cls[i] = cls;
	return 1;
}

/* Field @i of the set's tables: its class for the frame's value @v
 * (table at record @base), and the words of rules it leaves in *@words;
 * *@unsure collects the classes' unsure flags. */
#define CLASSIFY(i, base, v)                                                 \
	do {                                                                 \
		__u32 ref = ref_at(set, base, v);                            \
		if (!use_class(c, i, ref))                                   \
			return 0;                                            \
		words &= ref >> XNF_REF_SUMMARY_SHIFT;                       \
		unsure |= ref & XNF_REF_UNSURE;                              \
	} while (0)

/*
 * The frame's class in each table the set uses, looked up by its value
 * of that field. Returns 0 when no rule can take the frame (no word of
 * rules is in every class, or a record is missing). A field the set does
 * not use gets the kind's class again, which changes no AND and costs
 * the search no branch. The words and flags are kept in registers: a
 * read-modify-write of the context per field would chain each field's
 * latency to the next one's.
 */
static __always_inline int classify(struct fctx *c)
{
	const struct xnf_pkt *p = &c->pkt;
	__u32 t = c->hdr->tables, ports = p->l4 == XNF_L4_PORTS, words = 0xffff, unsure = 0, i;
	void *set = c->set;

	CLASSIFY(0, XNF_FR_KIND, ((p->family == AF_INET6) << 11) | ((p->l4 & 7) << 8) | p->proto);
#pragma unroll
	for (i = 1; i < XNF_FIELDS; i++)
		c->cls[i] = c->cls[0];
	if (t & XNF_FT_SPORT)
		CLASSIFY(1, XNF_FR_SPORT, ports ? p->sport : 65536);
	if (t & XNF_FT_DPORT)
		CLASSIFY(2, XNF_FR_DPORT, ports ? p->dport : 65536);
	if (t & XNF_FT_TCP)
		CLASSIFY(3, XNF_FR_TCP, c->tcp_known ? c->tcp_flags : 256);
	if (t & XNF_FT_ICMP)
		CLASSIFY(4, XNF_FR_ICMP, c->icmp_known ? c->icmp_type : 256);
	if (t & XNF_FT_VLAN)
		CLASSIFY(5, XNF_FR_VLAN, p->tagged ? p->vid : 4096);
	if (t & XNF_FT_LEN)
		CLASSIFY(6, XNF_FR_LEN, c->len > 0xffff ? 65536 : c->len);
	c->words = words & 0xffff;
	c->maybe_unsure = !!unsure;
	return c->words != 0;
}

/* The rules of word @w that every class lets take the frame. */
static __always_inline __u64 word_of(const struct fctx *c, __u32 w)
{
	__u64 x = ~0ULL;
	__u32 i;

	w &= XNF_FILTER_WORDS - 1;
#pragma unroll
	for (i = 0; i < XNF_FIELDS; i++)
		x &= c->cls[i]->take[w];
	return x;
}

/* Whether every class matched rule @r itself (not only took it fail-closed). */
static __always_inline int sure_of(const struct fctx *c, __u32 r)
{
	__u32 w = (r >> 6) & (XNF_FILTER_WORDS - 1), i;
	__u64 bit = 1ULL << (r & 63);

#pragma unroll
	for (i = 0; i < XNF_FIELDS; i++)
		if (!(c->cls[i]->sure[w] & bit))
			return 0;
	return 1;
}

/* The first rule every class takes, when no rule has an address. */
static __always_inline void search(struct fctx *c)
{
	__u32 words = c->words, i, w;
	__u64 x;

	for (i = 0; i < XNF_FILTER_WORDS && words; i++) {
		w = lowest_bit(words);
		x = word_of(c, w);
		if (x) {
			c->hit = w * 64 + lowest_bit(x);
			return;
		}
		words &= words - 1;
	}
}

/* Whether the addresses of frame @c fit rule @r's prefixes and lists. The
 * lists come last: a trie lookup costs more than everything else. */
static __always_inline int addresses_match(const struct fctx *c, __u32 r)
{
	const struct xnf_filter_rule *rule = rule_at(c, r);
	const struct xnf_pkt *p = &c->pkt;
	__u32 f;

	if (!rule)
		return 0;
	f = rule->flags;
	if ((f & XNF_F_SRC) && !prefix_match(p->src, rule->src, rule->src_mask))
		return 0;
	if ((f & XNF_F_DST) && !prefix_match(p->dst, rule->dst, rule->dst_mask))
		return 0;
	if ((f & XNF_F_SRC_LIST) && !in_list(rule->src_list, p->family, p->src))
		return 0;
	if ((f & XNF_F_DST_LIST) && !in_list(rule->dst_list, p->family, p->dst))
		return 0;
	return 1;
}

/* bpf_loop body of the search when rules have addresses: one step moves
 * to the next word of candidates, or tries the lowest candidate's
 * addresses. 1 stops. */
static long lazy_step(__u32 i, void *arg)
{
	struct fctx *c = arg;
	__u32 r;

	if (!c->cand) {
		if (!c->words)
			return 1;
		c->word = lowest_bit(c->words) & (XNF_FILTER_WORDS - 1);
		c->words &= c->words - 1;
		c->cand = word_of(c, c->word);
		return 0;
	}
	r = c->word * 64 + lowest_bit(c->cand);
	c->cand &= c->cand - 1;
	if (!addresses_match(c, r))
		return 0;
	c->hit = r;
	return 1;
}

/* The fields few rules have, in one test. */
#define XNF_F_RARE (XNF_F_VLAN | XNF_F_LENGTH | XNF_F_TCP_FLAGS | XNF_F_ICMP_TYPE | XNF_F_SRC_LIST | XNF_F_DST_LIST)

/* match_rule's fields in XNF_F_RARE: 0 (no), 1 (yes), 2 (yes, but a TCP
 * flags or ICMP type field could not be read). The lists come last: a
 * trie lookup costs more than every other field together. */
static __always_inline int match_rare(const struct xnf_filter_rule *r, const struct fctx *c, __u32 f)
{
	const struct xnf_pkt *p = &c->pkt;
	int unsure = 0;

	if ((f & XNF_F_VLAN) && (!p->tagged || p->vid != r->vid))
		return 0;
	if ((f & XNF_F_LENGTH) && (c->len < r->len_lo || c->len > r->len_hi))
		return 0;
	if (f & XNF_F_TCP_FLAGS) {
		if (!c->tcp_known)
			unsure = 1;
		else if ((c->tcp_flags & r->tcp_set) != r->tcp_set || (c->tcp_flags & r->tcp_clear))
			return 0;
	}
	if (f & XNF_F_ICMP_TYPE) {
		if (!c->icmp_known)
			unsure = 1;
		else if (c->icmp_type != r->icmp_type)
			return 0;
	}
	if ((f & XNF_F_SRC_LIST) && !in_list(r->src_list, p->family, p->src))
		return 0;
	if ((f & XNF_F_DST_LIST) && !in_list(r->dst_list, p->family, p->dst))
		return 0;
	return 1 + unsure;
}

/*
 * XNF_CLASS_NO, _YES, or _UNSURE (every field that could be read
 * matches, but an L4 field could not be read). The order of the checks
 * changes no answer, only the cost: what most rules have first, each
 * field a rule lacks costing one test, the rare ones one test together.
 */
static __always_inline int match_rule(const struct xnf_filter_rule *r, const struct fctx *c)
{
	const struct xnf_pkt *p = &c->pkt;
	__u32 f = r->flags;
	int unsure = 0, rare;

	if (r->family && r->family != p->family)
		return XNF_CLASS_NO;
	if (f & XNF_F_PROTO) {
		if (p->l4 == XNF_L4_UNKNOWN)
			unsure = 1;
		else if (p->proto != r->proto)
			return XNF_CLASS_NO;
	}
	if (f & (XNF_F_SPORT | XNF_F_DPORT)) {
		/* The protocol is TCP or UDP (the control plane insists) and
		 * matched or unknown: the ports may only be unreadable. */
		if (p->l4 != XNF_L4_PORTS)
			unsure = 1;
		else if (((f & XNF_F_SPORT) && (p->sport < r->sport_lo || p->sport > r->sport_hi)) ||
			 ((f & XNF_F_DPORT) && (p->dport < r->dport_lo || p->dport > r->dport_hi)))
			return XNF_CLASS_NO;
	}
	if ((f & XNF_F_SRC) && !prefix_match(p->src, r->src, r->src_mask))
		return XNF_CLASS_NO;
	if ((f & XNF_F_DST) && !prefix_match(p->dst, r->dst, r->dst_mask))
		return XNF_CLASS_NO;
	if (f & XNF_F_RARE) {
		rare = match_rare(r, c, f);
		if (!rare)
			return XNF_CLASS_NO;
		unsure |= rare == 2;
	}
	return unsure ? XNF_CLASS_UNSURE : XNF_CLASS_YES;
}

/* Tries rule @i of a small set: 1 if it takes the frame (or there is
 * no rule @i), so the scan stops; 0 to go on. */
static __always_inline long try_rule(__u32 i, struct fctx *c)
{
	const struct xnf_filter_rule *r = rule_at(c, i);
	int m;

	if (!r)
		return 1;
	m = match_rule(r, c);
	if (m == XNF_CLASS_NO)
		return 0;
	/* Fail-closed: an undeterminable frame is taken only by rules
	 * that would stop it. */
	if (m == XNF_CLASS_UNSURE && (r->action == XNF_FA_PASS || r->action == XNF_FA_COUNT))
		return 0;
	c->hit = i;
	c->rule = r;
	c->unsure = m == XNF_CLASS_UNSURE;
	return 1;
}

/*
 * The first rule that takes the frame, in rule order: the AND of the
 * frame's classes, its lowest bit. Rules with addresses (a prefix or a
 * list) are in every address's classes and have their addresses checked
 * per candidate, in order, by bpf_loop (at most a step per word and one
 * per rule).
 */
static __always_inline void find_rule(struct fctx *c)
{
	__u32 n = c->hdr->nrules, i;

	/* A set of a few rules: checking them in turn is cheaper than the
	 * lookups of the classes (test run, one rule: 8 ns less). */
	if (n <= XNF_FILTER_LINEAR_RULES) {
#pragma unroll
		for (i = 0; i < XNF_FILTER_LINEAR_RULES; i++)
			if (i >= n || try_rule(i, c))
				return;
		return;
	}
	if (!classify(c))
		return;
	if (c->hdr->lazy) {
		/* Linux 6.1's verifier checks a bpf_loop body once, with the
		 * state at the call: were the search's candidates the constant
		 * 0 there, it would find the steps that try a candidate
		 * unreachable and remove them. A zero read from the set is not
		 * known to be one. */
		c->cand = c->hdr->zero;
		bpf_loop(XNF_FILTER_WORDS + XNF_FILTER_MAX_RULES, lazy_step, c, 0);
	}
	else
		search(c);
	if (c->hit != RULE_NONE && c->maybe_unsure)
		c->unsure = !sure_of(c, c->hit);
}

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
	struct fctx c = { .hit = RULE_NONE };
	__u32 zero = 0;
	enum xnf_parse_result res;
	void *table;

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
