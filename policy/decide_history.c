/* What a decision of a recording policy does with history (policy/history_rules.h): brakes, the
 * "when" of rules, history conditions and their refusals, and remembering the call. Part of
 * policy/decide.c's work, which calls in here only when the policy records (tg_policy.records),
 * so a policy without these features pays nothing.
 *
 * The rings: one per (grant, issuer, subject), and one per grant that every subject of it also
 * writes to (a caller with no subject of its own is the grant's own: one ring is both). Keys are
 * tg_counters_hash_parts() of "hist" and those names, the same in every process, so members of a
 * cluster share them (tg_keyhash for a store whose keys stay in the process). Not per upstream: a flow from one upstream's secrets to another's egress is
 * what they are for. A ring is read at most once per decision, before anything is added. */
#include "policy/history_rules.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/buf.h"
#include "core/base/json.h"
#include "policy/explain.h"

enum { HX_SUBJ = 1, HX_GRANT = 2, HX_SELF = 4, HX_KEYS = 8 };
_Static_assert(TG_TAGS_PER_TOOL <= TG_HIST_TAGS, "an entry holds every tag of a tool");

static const char *const kind_word[] = {"tool", "resource", "prompt"};

void tg__hist_begin(struct tg__hctx *h, const struct tg_policy *p, struct tg_counters *cs,
                    const struct tg_caller *who, const char *tool, const struct ptool *t, const cJSON *args,
                    int64_t now_ms, int continuation)
{
    h->p = p;
    h->cs = cs;
    h->who = who;
    h->tool = tool;
    h->t = t;
    h->args = args;
    h->now_ms = now_ms;
    h->continuation = continuation;
    h->have = 0;
    h->unproven = 0;
    h->has_cause = 0;
}

/* ---- a call's identity, fast ------------------------------------------------------------------
 * The same canonical-JSON equality as tg_json_canon (key order, number spelling and whitespace
 * do not count) without writing the canonical text: a hash over the tree, members of an object
 * summed (so their order does not count), a number by its canonical digits (an integer of up to
 * 15 digits as written, which is its canonical form; anything else through tg_json_canon).
 * Words are read little-endian, so every member of a cluster computes the same. Not keyed: a
 * caller who finds a collision only brakes its own calls or escapes a brake it could escape by
 * changing an argument; values that decide access ("same", "distinct") use tg_json_canon_hash. */
static inline uint64_t hmix(uint64_t h, uint64_t w)
{
    h ^= w;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 31;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

static inline uint64_t le64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    return w;
}

/* n bytes: one multiply per word, mixed fully at the end. */
static uint64_t hbytes(uint64_t h, const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    h ^= (uint64_t)n * 0x9e3779b97f4a7c15ULL;
    for (; n >= 8; p += 8, n -= 8) {
        h = (h ^ le64(p)) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    /* the last 0..7 bytes as one word: two 4-byte loads that overlap (n >= 4), or the bytes; for
     * a given n two different tails give two different words */
    uint64_t w = 0;
    if (n >= 4) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + n - 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        w = (uint64_t)lo | (uint64_t)hi << 32;
    } else if (n > 0) {
        w = (uint64_t)p[0] | (uint64_t)p[n >> 1] << 8 | (uint64_t)p[n - 1] << 16;
    }
    return hmix(h, w);
}

static uint64_t hjson(const cJSON *v, int depth)
{
    if (v == NULL || depth > 64)
        return hmix(1, 'n');
    switch (v->type & 0xFF) {
    case cJSON_False: return hmix(1, 'f');
    case cJSON_True: return hmix(1, 't');
    case cJSON_NULL: return hmix(1, 'n');
    case cJSON_String: return hbytes(2, v->valuestring, strlen(v->valuestring));
    case cJSON_Number: {
        const char *t = v->valuestring;
        size_t n = 0;
        if (t != NULL) { /* -?[1-9][0-9]{0,14} or 0: its own canonical form */
            size_t neg = t[0] == '-';
            n = neg;
            while (t[n] >= '0' && t[n] <= '9' && n - neg < 16)
                n++;
            if (t[n] != '\0' || n == neg || n - neg > 15 || (t[neg] == '0' && (neg || n > 1)))
                n = 0;
        }
        if (n > 0)
            return hbytes(3, t, n);
        struct tg_buf b;
        tg_buf_init(&b);
        tg_json_canon(&b, v);
        uint64_t h = hbytes(3, b.base ? b.base : "", b.len);
        tg_buf_dispose(&b);
        return h;
    }
    case cJSON_Array: {
        uint64_t h = hmix(4, '[');
        for (const cJSON *c = v->child; c != NULL; c = c->next)
            h = hmix(h, hjson(c, depth + 1));
        return h;
    }
    case cJSON_Object: {
        uint64_t sum = 0, n = 0;
        for (const cJSON *c = v->child; c != NULL; c = c->next, n++)
            sum += hmix(hbytes(5, c->string ? c->string : "", c->string ? strlen(c->string) : 0), hjson(c, depth + 1));
        return hmix(hmix(6, n), sum);
    }
    default: return hmix(1, 'r');
    }
}

static void le32(unsigned char *out, size_t v)
{
    for (int b = 0; b < 4; b++)
        out[b] = (unsigned char)((uint64_t)v >> (8 * b));
}

static void keys(struct tg__hctx *h)
{
    if (h->have & HX_KEYS)
        return;
    h->have |= HX_KEYS;
    const char *grant = h->who->grant ? h->who->grant : "";
    h->own = h->who->subject == NULL;
    if (tg_counters_private_keys(h->cs)) { /* keys that never leave the process: the faster hash */
        const char *iss = h->who->issuer ? h->who->issuer : "";
        struct tg_keyhash k;
        tg_keyhash_begin(&k);
        tg_keyhash_part(&k, "hist\x1fg", 6);
        tg_keyhash_part(&k, grant, strlen(grant));
        tg_keyhash_end(&k, &h->kg1, &h->kg2);
        h->ks1 = h->kg1;
        h->ks2 = h->kg2;
        if (!h->own) {
            tg_keyhash_begin(&k);
            tg_keyhash_part(&k, "hist\x1fu", 6);
            tg_keyhash_part(&k, grant, strlen(grant));
            tg_keyhash_part(&k, iss, strlen(iss));
            tg_keyhash_part(&k, h->who->subject, strlen(h->who->subject));
            tg_keyhash_end(&k, &h->ks1, &h->ks2);
        }
        return;
    }
    const char *part[6];
    size_t len[6];
    part[0] = "hist\x1fg\x1f";
    len[0] = 7;
    part[1] = grant;
    len[1] = strlen(grant);
    tg_counters_hash_parts(part, len, 2, &h->kg1, &h->kg2);
    if (h->own) {
        h->ks1 = h->kg1;
        h->ks2 = h->kg2;
        return;
    }
    /* as a counter of scope subject: the lengths keep (grant, issuer, subject) apart */
    const char *iss = h->who->issuer ? h->who->issuer : "";
    unsigned char lg[4], li[4];
    le32(lg, len[1]);
    le32(li, strlen(iss));
    part[0] = "hist\x1fu\x1f";
    part[1] = (const char *)lg;
    len[1] = 4;
    part[2] = grant;
    len[2] = strlen(grant);
    part[3] = (const char *)li;
    len[3] = 4;
    part[4] = iss;
    len[4] = strlen(iss);
    part[5] = h->who->subject;
    len[5] = strlen(h->who->subject);
    tg_counters_hash_parts(part, len, 6, &h->ks1, &h->ks2);
}

static const struct tg_hist_view *subj_view(struct tg__hctx *h)
{
    if (!(h->have & HX_SUBJ)) {
        keys(h);
        tg_hist_get(h->cs, h->ks1, h->ks2, &h->subj);
        h->have |= HX_SUBJ;
    }
    return &h->subj;
}

static const struct tg_hist_view *grant_view(struct tg__hctx *h)
{
    keys(h);
    if (h->own)
        return subj_view(h);
    if (!(h->have & HX_GRANT)) {
        subj_view(h); /* always in this order: a plan's passes ask the same things in the same order */
        tg_hist_get(h->cs, h->kg1, h->kg2, &h->grant);
        h->have |= HX_GRANT;
    }
    return &h->grant;
}

static const cJSON *resolve(const cJSON *cur, const struct hpath *hp)
{
    for (int i = 0; i < hp->n && cur != NULL; i++) {
        if (cJSON_IsObject(cur))
            cur = tg_json_get(cur, hp->seg[i]);
        else if (cJSON_IsArray(cur) && hp->idx[i] >= 0)
            cur = cJSON_GetArrayItem(cur, (int)hp->idx[i]);
        else
            return NULL;
    }
    return cur;
}

static inline uint64_t path_tag(const struct hpath *p) { return (p->seed & 0xFFFF) ? (p->seed & 0xFFFF) : 1; }

/* The value an entry remembers for path p, or 0. */
static inline uint64_t val_of(const struct tg_hist_entry *e, uint64_t tag)
{
    for (int k = 0; k < TG_HIST_VALS; k++)
        if (e->vals[k] != 0 && (e->vals[k] & 0xFFFF) == tag)
            return e->vals[k];
    return 0;
}

/* How many of s's n bytes fit in max without cutting a UTF-8 character: a name cut inside one
 * would make error.data.history and the audit line invalid UTF-8 (a WebSocket client drops the
 * connection over such a text frame). */
static size_t utf8_fit(const char *s, size_t n, size_t max)
{
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
        max--;
    return max;
}

/* An entry for a call: everything but tags. */
static void fill_entry(struct tg__hctx *h, struct tg_hist_entry *e, enum tg_hist_kind kind, const char *name,
                       const cJSON *args, int64_t at_ms, int identify)
{
    memset(e, 0, sizeof(*e));
    const char *up = h->who->upstream ? h->who->upstream : "";
    const char *sess = h->who->session ? h->who->session : "";
    e->at_ms = at_ms;
    e->kind = (uint8_t)kind;
    size_t uplen = strlen(up), nlen = strlen(name);
    memcpy(e->upstream, up, utf8_fit(up, uplen, TG_HIST_UPSTREAM));
    memcpy(e->name, name, utf8_fit(name, nlen, TG_HIST_NAME));
    e->truncated = nlen > TG_HIST_NAME;
    e->session = sess[0] ? tg_hist_session_hash(sess, strlen(sess)) : 0;
    /* identity: upstream, kind, name, canonical arguments (absent arguments are {}) */
    cJSON empty;
    memset(&empty, 0, sizeof(empty));
    empty.type = cJSON_Object;
    /* 0 (unknown, equal to nothing) when no brake can ask: neither one of this tool nor a cycle */
    if (identify) {
        e->call = hmix(hbytes(hbytes(hmix(8, (uint64_t)kind), up, uplen), name, nlen), hjson(args ? args : &empty, 0));
        e->call += e->call == 0;
    }
    const struct hpolicy *hp = h->p->hist;
    for (int k = 0; hp != NULL && k < hp->npaths && args != NULL; k++) {
        const cJSON *v = resolve(args, &hp->paths[k]);
        if (v != NULL && !cJSON_IsNull(v)) {
            /* the low 16 bits say whose path it is (never 0), so that an entry another policy
             * recorded, or this one before a reload, is read by path and not by slot */
            e->vals[k] = (tg_json_canon_hash(v, hp->paths[k].seed) & ~(uint64_t)0xFFFF) | path_tag(&hp->paths[k]);
        }
    }
}

static void add_tags(struct tg_hist_entry *e, char *const *tags, int n)
{
    for (int i = 0; i < n && e->ntags < TG_HIST_TAGS; i++) {
        uint64_t th = tg_hist_tag_hash(tags[i], strlen(tags[i]));
        int dup = 0;
        for (int k = 0; k < e->ntags; k++)
            dup |= e->tags[k] == th;
        if (!dup)
            e->tags[e->ntags++] = th;
    }
}

static const struct brake *brake_of(const struct ptool *t, const struct ptool *wild, const struct ptool **owner)
{
    if (t != NULL && t->brake != NULL) {
        *owner = t;
        return t->brake;
    }
    if (wild == NULL || wild->brake == NULL)
        return NULL;
    const struct brake *b = wild->brake;
    int fits = b->ntags == 0;
    for (int i = 0; i < b->ntags && !fits && t != NULL; i++)
        fits = tg__has_tag(t->tags, t->ntags, b->tags[i]);
    *owner = wild;
    return fits ? b : NULL;
}

static const struct tg_hist_entry *self_entry(struct tg__hctx *h)
{
    if (!(h->have & HX_SELF)) {
        const struct ptool *owner;
        fill_entry(h, &h->self, TG_HIST_TOOL, h->tool, h->args, h->now_ms,
                   h->p->hist->cycles || brake_of(h->t, h->p->wildcard, &owner) != NULL);
        if (h->t != NULL && h->t->ntags > 0) { /* distinct, at most TG_TAGS_PER_TOOL: hashed at load */
            memcpy(h->self.tags, h->t->tagh, (size_t)h->t->ntags * sizeof(uint64_t));
            h->self.ntags = (uint8_t)h->t->ntags;
        }
        h->have |= HX_SELF;
    }
    return &h->self;
}

static inline int filter_match(const struct hfilter *f, const struct tg_hist_entry *e)
{
    int nt = e->ntags;
    for (int i = 0; i < f->ntags; i++)
        for (int k = 0; k < nt; k++)
            if (e->tags[k] == f->tagh[i])
                return 1;
    if (f->ntools == 0 && f->nresources == 0 && f->nprompts == 0)
        return f->ntags == 0; /* no filter at all: every call */
    char *const *g = e->kind == TG_HIST_TOOL ? f->tools : e->kind == TG_HIST_RESOURCE ? f->resources : f->prompts;
    int ng = e->kind == TG_HIST_TOOL ? f->ntools : e->kind == TG_HIST_RESOURCE ? f->nresources : f->nprompts;
    for (int i = 0; i < ng; i++)
        if (tg__glob_match(g[i], e->name, 0))
            return 1;
    return 0;
}

static void iso_ms(int64_t ms, char *out, size_t n)
{
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    if (ms < 0 || gmtime_r(&s, &tm) == NULL) {
        snprintf(out, n, "?");
        return;
    }
    char b[32];
    strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, n, "%s.%03dZ", b, (int)(ms % 1000));
}

/* ---- when ---------------------------------------------------------------------------------- */

int tg__hist_when(const struct hwhen *w, const char *tool, const struct ptool *t)
{
    for (int i = 0; i < w->f.ntags && t != NULL; i++)
        if (tg__has_tag(t->tags, t->ntags, w->f.tags[i]))
            return 1;
    for (int i = 0; i < w->f.ntools; i++)
        if (tg__glob_match(w->f.tools[i], tool, 0))
            return 1;
    return 0;
}

/* ---- brakes --------------------------------------------------------------------------------- */

static void braked(struct tg_decision *d, const struct brake *b, int64_t oldest_ms, int64_t now_ms, const char *fmt,
                   const char *a, int n)
{
    char w[32];
    tg__hist_duration(b->within_ms, w, sizeof(w));
    int64_t retry = oldest_ms + b->within_ms - now_ms;
    d->verdict = TG_VERDICT_LIMITED;
    tg_strlcpy(d->rule, "brake", sizeof(d->rule));
    tg_strlcpy(d->counter, "brake", sizeof(d->counter));
    d->retry_after_ms = (uint64_t)(retry > 0 ? retry : 1);
    if (b->message != NULL)
        tg_strlcpy(d->message, b->message, sizeof(d->message));
    else
        snprintf(d->message, sizeof(d->message), fmt, a, n, w);
}

int tg__hist_brake(struct tg__hctx *h, const struct ptool *wild, struct tg_decision *d, const struct ptool **owner)
{
    const struct brake *b = brake_of(h->t, wild, owner);
    if (b == NULL)
        return 0;
    const struct tg_hist_entry *self = self_entry(h);
    const struct tg_hist_view *v = subj_view(h);
    size_t len = tg_hist_view_len(v);
    int64_t start = h->now_ms - b->within_ms;
    /* cycles first, so that the message names the loop: this call and the ones before it, newest
     * first (s[0] = this call), a run within the window. The calls ending with this one go round a
     * sequence of L different calls for the N+1th time: s[i] == s[i + L] over N * L + 1 calls. */
    size_t run = 1;
    while (b->cycle >= 2 && run - 1 < len && tg_hist_view_newest(v, run - 1)->at_ms > start)
        run++;
    for (int L = 2; L <= b->cycle; L++) {
        size_t total = (size_t)b->repeats * (size_t)L + 1;
        if (total > run)
            break;
        int same = 1, varied = 0;
        for (size_t i = 0; i + (size_t)L < total && same; i++) {
            uint64_t a = i == 0 ? self->call : tg_hist_view_newest(v, i - 1)->call;
            same = a != 0 && a == tg_hist_view_newest(v, i + (size_t)L - 1)->call;
            varied |= i < (size_t)L && a != self->call;
        }
        if (!same || !varied)
            continue;
        char names[200];
        size_t o = 0;
        names[0] = '\0';
        for (int k = L - 1; k >= 0; k--) { /* in the order they were called */
            const char *nm = k == 0 ? h->tool : tg_hist_view_newest(v, (size_t)k - 1)->name;
            int wr = snprintf(names + o, sizeof(names) - o, "%s%s", k == L - 1 ? "" : ", ", nm);
            if (wr < 0 || (size_t)wr >= sizeof(names) - o)
                break;
            o += (size_t)wr;
        }
        char what[260];
        snprintf(what, sizeof(what), "the same %d calls (%s)", L, names);
        /* fewer than N rounds are left in the window when the oldest counted call leaves it */
        braked(d, b, tg_hist_view_newest(v, total - 2)->at_ms, h->now_ms,
               "you have repeated %s %d times in %s; stop and report to the user", what, b->repeats + 1);
        return 1;
    }
    /* repeats: the same call (upstream, tool, canonical arguments) more than repeats times */
    int n = 0;
    int64_t nth_ms = 0;
    const uint64_t call = self->call;
    for (int r = 0; r < 2 && n < b->repeats; r++) { /* newest first: the ring's head run, then its tail */
        const struct tg_hist_entry *run0 = r == 0 ? v->b : v->a;
        for (size_t k = r == 0 ? v->nb : v->na; k-- > 0;) {
            const struct tg_hist_entry *e = &run0[k];
            if (e->at_ms <= start) /* the rest is older (one out of order brakes late, no more) */
                goto counted;
            if (e->call == call && ++n == b->repeats) {
                nth_ms = e->at_ms; /* when it leaves the window, fewer than repeats are left */
                goto counted;
            }
        }
    }
counted:
    if (n >= b->repeats) {
        braked(d, b, nth_ms, h->now_ms, "you have called %s with the same arguments %d times in %s; stop and report to "
               "the user", h->tool, n + 1);
        return 1;
    }
    return 0;
}

/* ---- history conditions --------------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int has_val(const struct tg_hist_entry *e, uint64_t v)
{
    for (int k = 0; k < TG_HIST_VALS; k++)
        if (e->vals[k] == v)
            return 1;
    return 0;
}

int tg__hist_cond(struct tg__hctx *h, const struct cond *c)
{
    const struct hcond *hc = c->hist;
    const struct tg_hist_entry *self = self_entry(h);
    const struct tg_hist_view *v = hc->scope == HS_GRANT ? grant_view(h) : subj_view(h);
    size_t len = tg_hist_view_len(v);
    int64_t start = h->now_ms - hc->within_ms;
    uint64_t want = hc->same >= 0 ? self->vals[hc->same] : 0;
    uint64_t small[64], *vals = small;
    size_t nvals = 0;
    if (hc->distinct >= 0 && len + 1 > sizeof(small) / sizeof(small[0]))
        vals = tg_xmalloc((len + 1) * sizeof(*vals));
    double count = 0;
    uint64_t dv, dtag = hc->distinct >= 0 ? path_tag(&h->p->hist->paths[hc->distinct]) : 0;
    h->has_cause = 0;
    h->unproven = 0;
    if (!h->continuation && filter_match(&hc->f, self) && (hc->same < 0 || want != 0)) {
        if (hc->distinct < 0)
            count++;
        else if (self->vals[hc->distinct] != 0)
            vals[nvals++] = self->vals[hc->distinct];
    }
    for (size_t i = 0; i < len; i++) {
        /* newest first, over the ring's two runs without working out an index each time */
        const struct tg_hist_entry *e = i < v->nb ? &v->b[v->nb - 1 - i] : &v->a[len - 1 - i];
        if (e->at_ms <= start)
            continue;
        if (hc->scope == HS_SESSION && e->session != self->session)
            continue;
        if (!filter_match(&hc->f, e))
            continue;
        if (hc->same >= 0 && (want == 0 || !has_val(e, want)))
            continue;
        if (hc->distinct < 0)
            count++;
        else if ((dv = val_of(e, dtag)) != 0)
            vals[nvals++] = dv;
        else
            continue;
        if (!h->has_cause) {
            h->cause = *e;
            h->has_cause = 1;
        }
    }
    if (hc->distinct >= 0) {
        qsort(vals, nvals, sizeof(*vals), cmp_u64);
        for (size_t i = 0; i < nvals; i++)
            count += i == 0 || vals[i] != vals[i - 1];
        if (vals != small)
            free(vals);
    }
    h->count = count;
    double want_n = c->num;
    int holds;
    switch (c->op) {
    case OP_EQ: holds = count == want_n; break;
    case OP_NEQ: holds = count != want_n; break;
    case OP_LT: holds = count < want_n; break;
    case OP_LTE: holds = count <= want_n; break;
    case OP_GT: holds = count > want_n; break;
    default: holds = count >= want_n; break;
    }
    if (v->known_since_ms > start) {
        /* Calls in the window may have been forgotten: the true count is this one or more. What
         * more calls cannot change stands; anything else cannot be proven, and fails closed. */
        int sure = (c->op == OP_GT || c->op == OP_GTE) ? holds
                 : c->op == OP_NEQ                     ? count > want_n
                                                       : !holds;
        if (!sure) {
            h->unproven = 1;
            h->known_since_ms = v->known_since_ms;
            return 0;
        }
    }
    return holds;
}

static void history_json(const struct tg_hist_entry *e, struct tg_decision *d)
{
    char at[40];
    iso_ms(e->at_ms, at, sizeof(at));
    for (int cut = 0; cut < 2; cut++) {
        cJSON *o = cJSON_CreateObject();
        char name[TG_HIST_NAME + 1], up[TG_HIST_UPSTREAM + 1];
        snprintf(name, sizeof(name), "%.*s", (int)utf8_fit(e->name, strlen(e->name), cut ? 32 : TG_HIST_NAME), e->name);
        snprintf(up, sizeof(up), "%.*s", (int)utf8_fit(e->upstream, strlen(e->upstream), cut ? 16 : TG_HIST_UPSTREAM),
                 e->upstream);
        cJSON_AddStringToObject(o, kind_word[e->kind < 3 ? e->kind : 0], name);
        cJSON_AddStringToObject(o, "upstream", up);
        cJSON_AddStringToObject(o, "at", at);
        char *s = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        int fits = s != NULL && strlen(s) < sizeof(d->history_json);
        if (fits)
            tg_strlcpy(d->history_json, s, sizeof(d->history_json));
        free(s);
        if (fits)
            return;
    }
}

void tg__hist_refuse(struct tg__hctx *h, const struct rule *r, const struct cond *c, struct tg_decision *d)
{
    static const char *const opn[] = {"eq", "neq", "in", "not_in", "lt", "lte", "gt", "gte"};
    const struct hcond *hc = c->hist;
    char w[32], why[360];
    tg__hist_duration(hc->within_ms, w, sizeof(w));
    d->verdict = TG_VERDICT_DENY;
    d->by_history = 1;
    tg_strlcpy(d->rule, r->name, sizeof(d->rule));
    if (h->has_cause)
        history_json(&h->cause, d);
    if (h->unproven) {
        char since[40];
        iso_ms(h->known_since_ms, since, sizeof(since));
        snprintf(why, sizeof(why), "history is too short to check it: calls before %s are forgotten and the rule "
                 "looks back %s; raise limits.history_calls", since, w);
        if (r->on_deny != NULL)
            snprintf(d->message, sizeof(d->message), "%s (%s)", r->on_deny, why);
        else
            snprintf(d->message, sizeof(d->message), "Denied by rule \"%s\": %s", r->name, why);
        return;
    }
    if (r->on_deny != NULL) {
        tg_strlcpy(d->message, r->on_deny, sizeof(d->message));
        return;
    }
    char last[300] = "";
    if (h->has_cause) {
        char at[40];
        iso_ms(h->cause.at_ms, at, sizeof(at));
        snprintf(last, sizeof(last), "; the latest: %s %s on %s at %s", kind_word[h->cause.kind < 3 ? h->cause.kind : 0],
                 h->cause.name, h->cause.upstream, at);
    }
    const char *what = hc->distinct >= 0 ? "distinct values of " : h->count == 1 ? "matching call" : "matching calls";
    snprintf(d->message, sizeof(d->message), "Denied by rule \"%s\": %g %s%s within %s (the rule needs %s %g)%s",
             r->name, h->count, what, hc->distinct >= 0 ? h->p->hist->paths[hc->distinct].text : "", w,
             c->op < 8 ? opn[c->op] : "?", c->num, last);
}

/* ---- remembering ------------------------------------------------------------------------------ */

void tg__hist_record(struct tg__hctx *h)
{
    if (h->continuation)
        return;
    self_entry(h);
    keys(h);
    tg_hist_add(h->cs, h->ks1, h->ks2, &h->self);
    if (!h->own)
        tg_hist_add(h->cs, h->kg1, h->kg2, &h->self);
}

static void record_other(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                         enum tg_hist_kind kind, const char *name, const cJSON *args, int64_t at_ms)
{
    if (!p->records)
        return;
    struct tg__hctx h;
    tg__hist_begin(&h, p, cs, who, name, NULL, args, at_ms, 0);
    fill_entry(&h, &h.self, kind, name, args, at_ms, 1);
    if (kind == TG_HIST_TOOL) {
        const struct ptool *t = NULL;
        for (int i = 0; i < p->ntools && t == NULL; i++)
            t = strcmp(p->tools[i].name, name) == 0 ? &p->tools[i] : NULL;
        if (t != NULL)
            add_tags(&h.self, t->tags, t->ntags);
    } else {
        const struct tagged_glob *g = kind == TG_HIST_RESOURCE ? p->hist->rtags : p->hist->ptags;
        int n = kind == TG_HIST_RESOURCE ? p->hist->nrtags : p->hist->nptags;
        for (int i = 0; i < n; i++)
            if (tg__glob_match(g[i].glob, name, 0))
                add_tags(&h.self, g[i].tags, g[i].ntags);
    }
    h.have |= HX_SELF;
    tg__hist_record(&h);
}

void tg_policy_record_read(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                           int prompt, const char *name, int64_t now_ms)
{
    record_other(p, cs, who, prompt ? TG_HIST_PROMPT : TG_HIST_RESOURCE, name, NULL, now_ms);
}

void tg_policy_history_add_call(const struct tg_policy *p, struct tg_counters *cs, const struct tg_caller *who,
                                const char *tool, const cJSON *args, int64_t at_ms)
{
    record_other(p, cs, who, TG_HIST_TOOL, tool, args, at_ms);
}
