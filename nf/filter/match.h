/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * The rule engine of filter.bpf.c: which rule takes a frame. Included
 * once, after the maps and struct fctx it uses; filter.h describes the
 * compiled set it reads ("A compiled rule set"), src/classes.rs how the
 * control plane makes it.
 */
#pragma once

/* Whether IPv4 address @a (host order) is covered by the longer
 * prefixes of list slot @slot, whose /24 has some (filter.bpf.c). */
static __always_inline int in_leaf(__u32 slot, __u32 a)
{
	void *leaves = bpf_map_lookup_elem(&list_leaves, &slot);
	const struct xnf_filter_leaf *leaf;
	__u32 n = a >> 8;

	if (!leaves)
		return -1;
	leaf = bpf_map_lookup_elem(leaves, &n);
	if (!leaf)
		return -1;
	return (leaf->w[(a >> 6) & 3] >> (a & 63)) & 1;
}

/* The bitmap's answer for IPv4 address @a (network order) in list slot
 * @slot: 1 or 0, or -1 when the trie must tell (no bitmap: the list is
 * small, or was filled by a build without them). */
static __always_inline int in_bits(__u32 slot, __u32 a)
{
	void *bits = bpf_map_lookup_elem(&list_bits, &slot);
	__u32 h = bpf_ntohl(a), n = h >> 8, k = n >> 5, two;
	__u64 *w;

	if (!bits)
		return -1;
	w = bpf_map_lookup_elem(bits, &k);
	if (!w)
		return -1;
	two = (*w >> ((n & 31) * 2)) & 3;
	if (two & 1)
		return 1;
	return two ? in_leaf(slot, h) : 0;
}

/* Whether @addr is in the list in slot @slot (an empty slot lists nothing). */
static __always_inline int in_list(__u32 slot, __u8 family, const __u32 *addr)
{
	struct xnf_filter_lpm_key k = {};
	void *trie;
	int bit;

	if (family == AF_INET) {
		bit = in_bits(slot, addr[0]);
		if (bit >= 0)
			return bit;
	}
	trie = bpf_map_lookup_elem(&lists, &slot);
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
