/* The cluster's shared store: decisions by the plan (policy/counters.h) run against Redis
 * (cluster/redis/redis.h), and the table of operations the app installs (core/call/shared.h).
 * See cluster/cluster.h for the contract. */
#include "cluster/cluster.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/internal.h"
#include "cluster/redis/redis.h"
#include "core/base/buf.h"
#include "core/base/log.h"
#include "core/base/sha256.h"

/* A decision that waits for Redis. Owner: the cluster (cl->jobs), from its decide
 * until its last answer came (on_ops frees it), whether or not its caller is still there. */
struct tg_shared_job {
    struct tg_cluster *cl;
    struct tg_list link;
    struct tg_counter_plan plan;
    struct tg_redis_req *req;
    struct tg_policy *policy;
    char *grant, *session, *upstream, *tool;
    char *subject; /* NULL: the grant's own */
    char *issuer;  /* NULL: none */
    cJSON *args;
    int64_t now_ms;
    int continuation;
    struct tg_decision dec;
    tg_shared_decided_cb cb; /* NULL once detached */
    void *ud;
    const char *why; /* a fallback decision's: what failed */
    /* The round in flight: plan.ops[from, from + nround), then (first round only) the history
     * adds sent ahead; or, after the final pass, the effects the decision waits for. */
    struct tg_counter_op *batch;
    size_t from, nround;
    /* The calls the first pass recorded, added in the first round so that the answer that lets a
     * call through comes after its call is in Redis, in that one round trip; one the final pass
     * does not record again is taken back (HIST_DEL) before the answer. Entries in the plan. */
    struct tg_counter_op *spec;
    size_t nspec;
    unsigned char *kept; /* after the final pass: spec[i] recorded again (kept), else taken back */
    int spec_sent;
    int final_adds; /* the effects in flight add calls the decision records: they must land */
};


static void on_state(void *ud, int up, const char *why)
{
    struct tg_cluster *cl = ud;
    cl->up = up;
    if (up)
        tg_log(TG_LOG_INFO, "cluster: redis up", "redis=%s instance=%s", cl->conf.redis, cl->instance);
    else
        tg_log(TG_LOG_WARN, "cluster: redis unavailable", "redis=%s why=%s on_unavailable=%s", cl->conf.redis,
               why ? why : "-", cl->on_unavailable == TG_CLUSTER_LOCAL ? "local" : "deny");
}

struct tg_cluster *tg_cluster_new(uv_loop_t *loop, const struct tg_cluster_conf *cc, const struct tg_shared *local,
                                  char *why, size_t whyn)
{
    struct tg_cluster *cl = tg_xcalloc(1, sizeof(*cl));
    cl->loop = loop;
    cl->local = *local;
    cl->conf = *cc;
    cl->conf.redis = tg_xstrdup(cc->redis);
    cl->conf.password = cc->password ? tg_xstrdup(cc->password) : NULL;
    cl->conf.secret_file = NULL;
    cl->key_prefix = tg_xstrdup(cc->key_prefix ? cc->key_prefix : "tollgate:");
    cl->conf.key_prefix = cl->key_prefix;
    cl->instance = tg_xstrdup(cc->instance ? cc->instance : "tollgate");
    cl->conf.instance = cl->instance;
    cl->on_unavailable = cc->on_unavailable;
    cl->hist_calls = 64;
    uint8_t k[32];
    tg_hmac_labelled(cc->secret, "tollgate history entry", NULL, 0, k);
    memcpy(cl->hist_key, k, sizeof(cl->hist_key));
    memset(k, 0, sizeof(k));
    tg_list_init(&cl->jobs);
    struct tg_redis_opts o = {
        .address = cl->conf.redis,
        .password = cl->conf.password,
        .timeout_ms = (uint64_t)cc->timeout_ms,
        .backoff_ms = (uint64_t)cc->backoff_ms,
        .backoff_max_ms = (uint64_t)cc->backoff_max_ms,
        .max_pending = 0,
    };
    cl->redis = tg_redis_new(loop, &o, on_state, cl, why, whyn);
    if (cl->redis == NULL) {
        tg_cluster_free(cl);
        return NULL;
    }
    cl->lease = tg__lease_new(cl, cc);
    tg__cluster_approvals_start(cl); /* decisions for calls parked here, from other members */
    return cl;
}

void tg_cluster_free(struct tg_cluster *cl)
{
    if (cl == NULL)
        return;
    /* Unspent leases go back (written now, best effort: a give that is not written loses its
     * tokens, fewer calls, never more). */
    tg__lease_free(cl->lease);
    cl->lease = NULL;
    if (cl->redis != NULL)
        tg_redis_flush(cl->redis);
    /* The client answers every waiting request ECLOSED, which ends each job (on_ops). */
    if (cl->redis != NULL)
        tg_redis_free(cl->redis);
    cl->redis = NULL;
    memset(cl->conf.secret, 0, sizeof(cl->conf.secret));
    memset(cl->hist_key, 0, sizeof(cl->hist_key));
    free(cl->conf.redis);
    free(cl->conf.password);
    free(cl->key_prefix);
    free(cl->instance);
    free(cl);
}

void tg_cluster_reconf(struct tg_cluster *cl, const struct tg_cluster_conf *cc)
{
    cl->on_unavailable = cc->on_unavailable;
    tg__lease_conf(cl->lease, cc); /* every lease back: the policy's buckets may have changed */
    if (memcmp(cl->conf.secret, cc->secret, sizeof(cl->conf.secret)) != 0)
        tg_log(TG_LOG_WARN, "cluster: a new secret_file takes effect at restart (session ids and envelopes stay sealed with the old one)",
               "secret_file=%s", cc->secret_file);
    if (strcmp(cc->redis, cl->conf.redis) != 0 || strcmp(cc->key_prefix, cl->key_prefix) != 0 ||
        strcmp(cc->instance, cl->instance) != 0 || cc->timeout_ms != cl->conf.timeout_ms ||
        (cc->password == NULL) != (cl->conf.password == NULL) ||
        (cc->password != NULL && strcmp(cc->password, cl->conf.password) != 0))
        tg_log(TG_LOG_WARN, "cluster: redis, password, key_prefix, instance and timeout_ms take effect at restart",
               "redis=%s", cl->conf.redis);
}

void tg_cluster_history_calls(struct tg_cluster *cl, size_t calls)
{
    cl->hist_calls = calls < 1 ? 1 : calls > TG_HIST_MAX_CALLS ? TG_HIST_MAX_CALLS : calls;
}

int tg_cluster_up(const struct tg_cluster *cl) { return cl->up; }
const struct tg_cluster_stats *tg_cluster_stats(const struct tg_cluster *cl) { return &cl->stats; }
struct tg_redis *tg_cluster_redis(struct tg_cluster *cl) { return cl->redis; }

/* ---- fire and forget: gives, subs and taking back history adds -------------------------- */

/* The client copies the ops and the entries they point to (the plan that holds them goes now). */
static void send_effects(struct tg_cluster *cl, const struct tg_counter_op *ops, size_t n)
{
    if (n == 0 || cl->redis == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].kind == TG_COP_HIST_ADD)
            cl->stats.history_adds++;
        else if (ops[i].kind == TG_COP_HIST_DEL)
            cl->stats.history_dels++;
        else
            cl->stats.refunds++;
    }
    struct tg_redis_hist h = {NULL, cl->hist_calls, {0}};
    memcpy(h.key, cl->hist_key, sizeof(h.key));
    tg_redis_counter_ops(cl->redis, cl->key_prefix, (struct tg_counter_op *)ops, n, &h, NULL, NULL);
}

static void take_back_spec(struct tg_shared_job *j, int applied);

static int same_entry(const struct tg_hist_entry *a, const struct tg_hist_entry *b)
{
    if (a->at_ms != b->at_ms || a->call != b->call || a->session != b->session || a->kind != b->kind ||
        a->ntags != b->ntags || a->truncated != b->truncated || memcmp(a->vals, b->vals, sizeof(a->vals)) != 0 ||
        strcmp(a->upstream, b->upstream) != 0 || strcmp(a->name, b->name) != 0)
        return 0;
    for (size_t k = 0; k < a->ntags && k < TG_HIST_TAGS; k++)
        if (a->tags[k] != b->tags[k])
            return 0;
    return 1;
}

/* The calls this job has in Redis, taken back without waiting: it ends without an answer that
 * lets its call through. Before the final pass: every add sent ahead; after it, those it kept
 * (the others were taken back with its effects) and, if its effects were applied (applied), the
 * adds among them. Each is taken back once: two identical calls of a subject in one millisecond
 * are two equal elements, and a second LREM would take the other's. */
static void take_back_spec(struct tg_shared_job *j, int applied)
{
    size_t nb = j->kept && applied ? j->nround : 0; /* after the final pass: the effects sent */
    struct tg_counter_op *d = tg_xcalloc(j->nspec + nb + 1, sizeof(*d));
    size_t n = 0;
    for (size_t i = 0; j->spec_sent && i < j->nspec; i++)
        if (j->kept == NULL || j->kept[i]) {
            d[n] = j->spec[i];
            d[n++].kind = TG_COP_HIST_DEL;
        }
    for (size_t i = 0; i < nb; i++)
        if (j->batch[i].kind == TG_COP_HIST_ADD) {
            d[n] = j->batch[i];
            d[n++].kind = TG_COP_HIST_DEL;
        }
    send_effects(j->cl, d, n);
    free(d);
}

/* Everything the job's answered operations took, given back (the job ends without a decision
 * that keeps them). Operations of a batch that failed are not known to have run: they are left
 * to expire, which errs toward spending less. */
static void give_back_known(struct tg_shared_job *j)
{
    struct tg_counter_op *g = tg_xcalloc(j->plan.nknown ? j->plan.nknown : 1, sizeof(*g));
    size_t n = 0;
    for (size_t i = 0; i < j->plan.nknown; i++) {
        const struct tg_counter_op *op = &j->plan.ops[i];
        if (!op->ok || (op->kind != TG_COP_BUCKET_TAKE && op->kind != TG_COP_WINDOW_ADD))
            continue;
        g[n] = *op;
        g[n].kind = op->kind == TG_COP_BUCKET_TAKE ? TG_COP_BUCKET_GIVE : TG_COP_WINDOW_SUB;
        n++;
    }
    send_effects(j->cl, g, n);
    free(g);
}

static void cluster_refund(void *ud, const struct tg_decision *d)
{
    struct tg_cluster *cl = ud;
    if (!d->shared) {
        /* Decided on this member's counters (no counter reached, or a fallback). */
        cl->local.ops->refund(cl->local.ud, d);
        return;
    }
    struct tg_counter_op g[TG_MAX_RESERVATIONS];
    size_t n = 0;
    for (int i = d->nres - 1; i >= 0 && n < TG_MAX_RESERVATIONS; i--) {
        const struct tg_reservation *r = &d->res[i];
        double amount = r->amount;
        if (r->kind == 1 && (amount = tg__lease_refund(cl->lease, r->h1, r->h2, r->capacity, amount)) <= 0)
            continue; /* back in this member's lease */
        memset(&g[n], 0, sizeof(g[n]));
        g[n].kind = r->kind == 1 ? TG_COP_BUCKET_GIVE : TG_COP_WINDOW_SUB;
        g[n].h1 = r->h1;
        g[n].h2 = r->h2;
        g[n].capacity = r->capacity;
        g[n].amount = amount;
        g[n].window_start = r->window_start;
        n++;
    }
    send_effects(cl, g, n);
}

/* ---- decisions ------------------------------------------------------------------------ */

static void pass(struct tg_shared_job *j, const struct tg_caller *who)
{
    tg_plan_begin(&j->plan);
    if (j->continuation)
        tg_policy_decide_continuation(j->policy, &j->plan.base, who, j->tool, j->args, j->now_ms, &j->dec);
    else
        tg_policy_decide_call(j->policy, &j->plan.base, who, j->tool, j->args, j->now_ms, &j->dec);
}

static void job_free(struct tg_shared_job *j)
{
    tg_list_unlink(&j->link);
    tg_plan_dispose(&j->plan);
    tg_policy_unref(j->policy);
    free(j->grant);
    free(j->subject);
    free(j->issuer);
    free(j->session);
    free(j->upstream);
    free(j->tool);
    cJSON_Delete(j->args);
    free(j->batch);
    free(j->spec);
    free(j->kept);
    free(j);
}

static const char *status_text(int status)
{
    switch (status) {
    case TG_REDIS_EDOWN: return "the shared counter store (Redis) is not connected";
    case TG_REDIS_ETIMEDOUT: return "the shared counter store (Redis) did not answer in time (cluster.timeout_ms)";
    case TG_REDIS_EREPLY: return "the shared counter store (Redis) gave an unexpected answer";
    case TG_REDIS_EBUSY: return "too many requests wait for the shared counter store (Redis)";
    case TG_REDIS_ECLOSED: return "the gateway is shutting down";
    case TG_REDIS_EVALUE:
        return "the shared counter store (Redis) holds a counter value that is not a finite decimal number of 0 or more, "
               "or a history entry that is not one";
    }
    return "the shared counter store (Redis) failed";
}

static void on_ops(void *ud, int status);
static void on_effects(void *ud, int status);
static void decided(struct tg_shared_job *j);

/* A value in Redis that no member writes: counted, and logged at most once a minute. */
static void value_refused(struct tg_shared_job *j)
{
    struct tg_cluster *cl = j->cl;
    cl->stats.values_refused++;
    uint64_t now = uv_now(cl->loop);
    if (cl->value_warned_ms != 0 && now - cl->value_warned_ms < 60000)
        return;
    cl->value_warned_ms = now ? now : 1;
    char esc[2][100];
    tg_log(TG_LOG_WARN, "cluster: a counter or history entry in Redis is not one a member writes; the decision is "
                        "refused",
           "upstream=%s tool=%s grant=%s refused=%llu",
           tg_log_esc(esc[0], sizeof(esc[0]), tg_slice_of(j->upstream, strlen(j->upstream))),
           tg_log_esc(esc[1], sizeof(esc[1]), tg_slice_of(j->tool, strlen(j->tool))), j->grant,
           (unsigned long long)cl->stats.values_refused);
}

/* A fallback decision, made by the local store (inline, as it always answers). */
static void on_fallback(void *ud, enum tg_shared_outcome o, struct tg_decision *d, const char *why)
{
    (void)o;
    (void)why;
    struct tg_shared_job *j = ud;
    j->cb(j->ud, TG_SHARED_FALLBACK, d, j->why);
}

static struct tg_redis_hist hist_of(struct tg_shared_job *j)
{
    struct tg_redis_hist h = {&j->plan, j->cl->hist_calls, {0}};
    memcpy(h.key, j->cl->hist_key, sizeof(h.key));
    return h;
}

/* The history adds among the plan's effects [from, to), copied into a new array (*n of them). */
static struct tg_counter_op *adds_of(const struct tg_counter_plan *p, size_t from, size_t to, size_t *n)
{
    *n = 0;
    for (size_t i = from; i < to; i++)
        *n += p->effects[i].kind == TG_COP_HIST_ADD;
    if (*n == 0)
        return NULL;
    struct tg_counter_op *a = tg_xcalloc(*n, sizeof(*a));
    size_t k = 0;
    for (size_t i = from; i < to; i++)
        if (p->effects[i].kind == TG_COP_HIST_ADD)
            a[k++] = p->effects[i];
    return a;
}

static void send_round(struct tg_shared_job *j, size_t from, size_t n)
{
    /* A window add learns the decision's time too, so its key expires when its window ends
     * (the plan's operations carry only what the decision asked). */
    for (size_t i = from; i < from + n; i++)
        if (j->plan.ops[i].kind == TG_COP_WINDOW_ADD)
            j->plan.ops[i].now_ms = j->now_ms;
    size_t ns = 0;
    if (!j->spec_sent) {
        /* The first pass's own records (the optimistic path: the one taken when every counter
         * fits), after the reads in the same write, so that the reads do not see them. */
        j->spec_sent = 1;
        j->spec = adds_of(&j->plan, j->plan.kept, j->plan.neffects, &j->nspec);
        ns = j->nspec;
    }
    j->batch = tg_xrealloc(j->batch, (n + ns ? n + ns : 1) * sizeof(*j->batch));
    memcpy(j->batch, j->plan.ops + from, n * sizeof(*j->batch));
    if (ns > 0)
        memcpy(j->batch + n, j->spec, ns * sizeof(*j->batch));
    j->from = from;
    j->nround = n;
    tg__lease_ask(j->cl->lease, j->batch, n); /* takes that may fill this member's leases */
    j->cl->stats.rounds++;
    j->cl->stats.history_adds += ns;
    struct tg_redis_hist h = hist_of(j);
    j->req = tg_redis_counter_ops(j->cl->redis, j->cl->key_prefix, j->batch, n + ns, &h, on_ops, j);
}

/* The job cannot be decided by Redis (status): what it took is given back, and it is decided on
 * this member's own store (on_unavailable = "local") or refused. */
static void fail(struct tg_shared_job *j, int status)
{
    struct tg_cluster *cl = j->cl;
    struct tg_caller who = {j->grant, j->session, j->upstream, j->subject, j->issuer};
    give_back_known(j);
    take_back_spec(j, 0); /* they may have been added */
    if (status == TG_REDIS_EVALUE)
        value_refused(j);
    if (j->cb != NULL) {
        const char *why = status_text(status);
        /* A poisoned counter is no outage: deciding on the local counters instead would let
         * whoever wrote it reset the budget. It fails closed whatever on_unavailable says. */
        if (cl->on_unavailable == TG_CLUSTER_LOCAL && status != TG_REDIS_ECLOSED && status != TG_REDIS_EVALUE) {
            cl->stats.fallback_local++;
            struct tg_shared_ask q = {j->policy, who, j->tool, j->args, j->now_ms, j->continuation};
            j->why = why;
            struct tg_shared_job *later = cl->local.ops->decide(cl->local.ud, &q, &j->dec, on_fallback, j);
            (void)later; /* always NULL: the local store answers inside decide */
        } else {
            cl->stats.unavailable++;
            j->cb(j->ud, TG_SHARED_UNAVAILABLE, NULL, why);
        }
    }
    job_free(j);
}

/* After the final pass: its gives and subs, its records not sent ahead, and the taking back of
 * those sent ahead that it does not record; the caller hears the decision once Redis has them. */
static void send_final(struct tg_shared_job *j)
{
    struct tg_cluster *cl = j->cl;
    struct tg_counter_plan *p = &j->plan;
    unsigned char *kept = j->kept = tg_xcalloc(j->nspec ? j->nspec : 1, 1);
    struct tg_counter_op *l = tg_xcalloc(p->neffects + j->nspec + 1, sizeof(*l));
    size_t n = 0;
    for (size_t i = 0; i < p->neffects; i++) {
        const struct tg_counter_op *e = &p->effects[i];
        if (e->kind == TG_COP_HIST_ADD) {
            size_t s = 0;
            while (s < j->nspec && (kept[s] || j->spec[s].h1 != e->h1 || j->spec[s].h2 != e->h2 ||
                                    !same_entry(j->spec[s].entry, e->entry)))
                s++;
            if (s < j->nspec) { /* in Redis already */
                kept[s] = 1;
                continue;
            }
            j->final_adds = 1;
            cl->stats.history_adds++;
        } else {
            cl->stats.refunds++;
        }
        l[n++] = *e;
    }
    for (size_t s = 0; s < j->nspec; s++)
        if (!kept[s]) {
            l[n] = j->spec[s];
            l[n++].kind = TG_COP_HIST_DEL;
            cl->stats.history_dels++;
        }
    free(j->batch);
    j->batch = l;
    j->nround = n;
    if (n == 0) {
        decided(j);
        job_free(j);
        return;
    }
    /* What earlier passes took and this decision gives back is back in Redis before the caller
     * hears the decision: a call refused here spends nothing, and the next call (on any member)
     * must not find it still counted, nor find a call in the history that was refused. A
     * give-back that fails is left to expire; a record that fails fails the decision. */
    struct tg_redis_hist h = hist_of(j);
    j->req = tg_redis_counter_ops(cl->redis, cl->key_prefix, l, n, &h, on_effects, j);
}

static void on_ops(void *ud, int status)
{
    struct tg_shared_job *j = ud;
    j->req = NULL;
    struct tg_caller who = {j->grant, j->session, j->upstream, j->subject, j->issuer};
    tg__lease_answered(j->cl->lease, j->batch, j->nround, status == TG_REDIS_OK);
    if (status != TG_REDIS_OK) {
        fail(j, status);
        return;
    }
    memcpy(j->plan.ops + j->from, j->batch, j->nround * sizeof(*j->batch));
    tg_plan_answered(&j->plan);
    if (j->cb == NULL) { /* detached: nothing keeps what was taken */
        give_back_known(j);
        take_back_spec(j, 0);
        job_free(j);
        return;
    }
    pass(j, &who);
    size_t from, n = tg_plan_end(&j->plan, &from);
    if (n > 0) {
        send_round(j, from, n);
        return;
    }
    send_final(j);
}

static void decided(struct tg_shared_job *j)
{
    struct tg_cluster *cl = j->cl;
    if (j->cb == NULL) /* detached while its give-backs were sent */
        return;
    if (j->plan.unsettled) {
        cl->stats.unavailable++;
        j->cb(j->ud, TG_SHARED_UNAVAILABLE, NULL, "the shared counters changed under every round of this decision");
    } else {
        cl->stats.decisions_shared++;
        j->dec.shared = 1;
        j->cb(j->ud, TG_SHARED_DECIDED, &j->dec, NULL);
    }
}

static void on_effects(void *ud, int status)
{
    struct tg_shared_job *j = ud;
    j->req = NULL;
    if (status == TG_REDIS_ECLOSED && j->cb != NULL) { /* shutting down: no decision goes on from here */
        j->cb(j->ud, TG_SHARED_UNAVAILABLE, NULL, status_text(status));
    } else if (status != TG_REDIS_OK && j->final_adds) {
        /* The call would go through unrecorded: a flow the history must see could pass. */
        fail(j, status);
        return;
    } else if (j->cb == NULL) { /* detached while they were sent: it lets nothing through */
        give_back_known(j);
        take_back_spec(j, status == TG_REDIS_OK);
    } else {
        decided(j);
    }
    job_free(j);
}

static struct tg_shared_job *job_new(struct tg_cluster *cl, const struct tg_shared_ask *q,
                                     const struct tg_counter_plan *plan, tg_shared_decided_cb cb, void *cb_ud)
{
    struct tg_shared_job *j = tg_xcalloc(1, sizeof(*j));
    j->cl = cl;
    j->plan = *plan; /* the plan's arrays move with it; its operations table is static */
    j->policy = tg_policy_ref(q->policy);
    j->tool = tg_xstrdup(q->tool);
    j->args = q->args ? cJSON_Duplicate(q->args, 1) : NULL;
    j->now_ms = q->now_ms;
    j->continuation = q->continuation;
    j->grant = tg_xstrdup(q->who.grant ? q->who.grant : "");
    j->session = tg_xstrdup(q->who.session ? q->who.session : "");
    j->upstream = tg_xstrdup(q->who.upstream ? q->who.upstream : "");
    j->subject = q->who.subject ? tg_xstrdup(q->who.subject) : NULL;
    j->issuer = q->who.issuer && q->who.issuer[0] ? tg_xstrdup(q->who.issuer) : NULL;
    j->cb = cb;
    j->ud = cb_ud;
    tg_list_insert_tail(&cl->jobs, &j->link);
    return j;
}

/* The gives of a decision answered from the leases (a later check refused the call): back to
 * the leases, what they cannot take in to Redis. */
static void lease_effects(struct tg_cluster *cl, struct tg_counter_plan *p)
{
    size_t n = 0;
    for (size_t i = 0; i < p->neffects; i++) {
        struct tg_counter_op *e = &p->effects[i];
        if (e->kind == TG_COP_BUCKET_GIVE &&
            (e->amount = tg__lease_refund(cl->lease, e->h1, e->h2, e->capacity, e->amount)) <= 0)
            continue;
        p->effects[n++] = *e;
    }
    send_effects(cl, p->effects, n);
}

static struct tg_shared_job *cluster_decide(void *ud, const struct tg_shared_ask *q, struct tg_decision *d,
                                            tg_shared_decided_cb cb, void *cb_ud)
{
    struct tg_cluster *cl = ud;
    /* The first pass runs on the stack, with the caller's strings: a decision that reaches no
     * counter and records nothing (most of them) allocates nothing and never asks Redis, whether
     * or not it is up. */
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    tg_plan_begin(&plan);
    if (q->continuation)
        tg_policy_decide_continuation(q->policy, &plan.base, &q->who, q->tool, q->args, q->now_ms, d);
    else
        tg_policy_decide_call(q->policy, &plan.base, &q->who, q->tool, q->args, q->now_ms, d);
    size_t from, n = tg_plan_end(&plan, &from);
    int records = 0;
    for (size_t i = 0; i < plan.neffects; i++)
        records |= plan.effects[i].kind == TG_COP_HIST_ADD;
    if (n == 0 && !records) {
        d->shared = 0;
        cl->stats.decisions_local++;
        tg_plan_dispose(&plan);
        cb(cb_ud, TG_SHARED_DECIDED, d, NULL);
        return NULL;
    }
    if (n > 0 && !records && from == 0 && tg__lease_serve(cl->lease, plan.ops, n)) {
        /* Every counter the decision takes from is in this member's leases: the second pass
         * decides on those answers, without Redis. */
        tg_plan_answered(&plan);
        tg_plan_begin(&plan);
        if (q->continuation)
            tg_policy_decide_continuation(q->policy, &plan.base, &q->who, q->tool, q->args, q->now_ms, d);
        else
            tg_policy_decide_call(q->policy, &plan.base, &q->who, q->tool, q->args, q->now_ms, d);
        n = tg_plan_end(&plan, &from);
        for (size_t i = 0; i < plan.neffects; i++)
            records |= plan.effects[i].kind == TG_COP_HIST_ADD;
        if (n == 0 && !records && !plan.unsettled) {
            lease_effects(cl, &plan);
            d->shared = 1; /* its refunds come back here (cluster_refund), to the lease first */
            cl->stats.decisions_lease++;
            tg_plan_dispose(&plan);
            cb(cb_ud, TG_SHARED_DECIDED, d, NULL);
            return NULL;
        }
        /* The answers changed its path (it never does for takes that all succeed): on to
         * Redis with what the lease answered kept (a failure gives it back to Redis). */
    }
    struct tg_shared_job *j = job_new(cl, q, &plan, cb, cb_ud);
    if (n == 0) {
        /* Decided without a counter or a history read, but it records the call: the answer waits
         * until the call is in Redis (one round trip), so that the next call, on any member,
         * finds it. */
        j->dec = *d;
        j->spec_sent = 1;
        cl->stats.rounds++;
        send_final(j);
    } else {
        send_round(j, from, n);
    }
    /* Until the answer comes: nothing reserved, nothing allowed. */
    memset(d, 0, sizeof(*d));
    d->verdict = TG_VERDICT_DENY;
    return j;
}

static void cluster_detach(void *ud, struct tg_shared_job *job)
{
    (void)ud;
    if (job == NULL)
        return;
    job->cb = NULL;
    job->ud = NULL;
}

/* A read's entry goes to Redis as a decision's would: the record made against a plan (one pass,
 * nothing to answer), its adds sent without waiting. Without Redis, to this member's store. */
static void cluster_record_read(void *ud, const struct tg_policy *p, const struct tg_caller *who, int prompt,
                                const char *name, int64_t now_ms)
{
    struct tg_cluster *cl = ud;
    if (cl->redis == NULL) {
        cl->local.ops->record_read(cl->local.ud, p, who, prompt, name, now_ms);
        return;
    }
    struct tg_counter_plan plan;
    tg_plan_init(&plan);
    tg_plan_begin(&plan);
    tg_policy_record_read(p, &plan.base, who, prompt, name, now_ms);
    send_effects(cl, plan.effects, plan.neffects);
    tg_plan_dispose(&plan);
}

static const struct tg_shared_ops cluster_ops = {
    .record_read = cluster_record_read,
    .decide = cluster_decide,
    .detach = cluster_detach,
    .refund = cluster_refund,
    .session_share = tg__cluster_session_share,
    .session_used = tg__cluster_session_used,
    .session_forget = tg__cluster_session_forget,
    .session_fetch = tg__cluster_session_fetch,
    .approval_park = tg__cluster_approval_park,
    .approval_gone = tg__cluster_approval_gone,
    .approvals_list = tg__cluster_approvals_list,
    .approval_decide = tg__cluster_approval_decide,
    .record_find = tg__cluster_record_find,
    .record_detach = tg__cluster_record_detach,
    .record_put = tg__cluster_record_put,
    .record_drop = tg__cluster_record_drop,
    .record_settled = tg__cluster_record_settled,
};

void tg_cluster_store(struct tg_cluster *cl, struct tg_shared *st)
{
    st->ops = &cluster_ops;
    st->ud = cl;
}

void tg_cluster_metrics(const struct tg_cluster *cl, struct tg_buf *out)
{
    const struct tg_redis_stats *rs = cl->redis ? tg_redis_stats(cl->redis) : NULL;
    tg_buf_appendf(out,
                   "# HELP tollgate_cluster_redis_up 1 while the shared store (Redis) is connected and ready.\n"
                   "# TYPE tollgate_cluster_redis_up gauge\ntollgate_cluster_redis_up %d\n",
                   cl->up);
#define CC(name, help, val)                                                                                   \
    tg_buf_appendf(out, "# HELP tollgate_cluster_" name " " help "\n# TYPE tollgate_cluster_" name            \
                        " counter\ntollgate_cluster_" name " %llu\n",                                         \
                   (unsigned long long)(val))
    CC("decisions_total", "tools/call decisions that waited for the shared counters and got their answer.",
       cl->stats.decisions_shared);
    CC("decisions_without_counters_total", "tools/call decisions that reached no counter (Redis not asked).",
       cl->stats.decisions_local);
    CC("fallback_decisions_total", "Decisions made on this instance's own counters because Redis failed (on_unavailable = local).",
       cl->stats.fallback_local);
    CC("unavailable_denials_total", "Calls refused with -32004 because Redis failed (on_unavailable = deny).",
       cl->stats.unavailable);
    CC("decision_rounds_total", "Redis round trips made for decisions.", cl->stats.rounds);
    CC("refund_ops_total", "Counter operations sent to give back reservations.", cl->stats.refunds);
    CC("history_adds_total", "Calls added to a history in Redis (those sent ahead of their decision included).",
       cl->stats.history_adds);
    CC("history_removals_total", "Calls sent ahead of their decision and taken back: the decision did not record "
       "them (refused, braked).", cl->stats.history_dels);
    CC("values_refused_total", "Decisions refused because a counter or history entry in Redis is not one a member "
       "writes (poisoned).", cl->stats.values_refused);
    CC("approval_listings_refused_total", "Approval listings read from Redis that did not verify (not shown, "
       "not decided).", cl->stats.listings_refused);
    CC("approval_records_refused_total", "Retry-mode approval records read from Redis that did not verify "
       "(ignored).", cl->stats.records_refused);
    CC("lease_decisions_total", "Decisions answered from this instance's token leases (cluster.lease), Redis "
       "not asked.", cl->stats.decisions_lease);
    CC("lease_tokens_taken_total", "Tokens taken from Redis into this instance's leases.", cl->stats.lease_taken);
    CC("lease_refills_total", "Leases topped up ahead of need (below half, nothing asked): takes of 0 with extra.",
       cl->stats.lease_refills);
    CC("lease_tokens_returned_total", "Unspent leased tokens given back to Redis.", cl->stats.lease_returned);
    tg_buf_appendf(out,
                   "# HELP tollgate_cluster_lease_keys Buckets with a lease on this instance now.\n"
                   "# TYPE tollgate_cluster_lease_keys gauge\ntollgate_cluster_lease_keys %llu\n",
                   (unsigned long long)tg__lease_keys(cl->lease));
    if (rs != NULL) {
        CC("redis_requests_total", "Requests made to Redis.", rs->requests);
        CC("redis_commands_total", "Commands written to Redis.", rs->commands);
        CC("redis_round_trips_total", "Writes to Redis that waited for replies.", rs->round_trips);
        CC("redis_writes_total", "Writes to Redis's command connection (one per loop iteration carries every "
           "request the iteration made).", rs->writes);
        CC("redis_reconnects_total", "Connections to Redis made after the first.", rs->reconnects);
        CC("redis_script_loads_total", "SCRIPT LOADs (at connect and after NOSCRIPT).", rs->script_loads);
        CC("redis_late_replies_total", "Redis replies that came after their request's deadline.", rs->late_replies);
        tg_buf_appends(out, "# HELP tollgate_cluster_redis_errors_total Redis requests that failed, by reason.\n"
                            "# TYPE tollgate_cluster_redis_errors_total counter\n");
        static const char *const reason[] = {NULL, "down", "timeout", "reply", "busy", "closed", "value"};
        for (int i = 1; i <= 6; i++)
            tg_buf_appendf(out, "tollgate_cluster_redis_errors_total{reason=\"%s\"} %llu\n", reason[i],
                           (unsigned long long)rs->errors[i]);
        tg_buf_appendf(out,
                       "# HELP tollgate_cluster_redis_pending Redis requests in flight.\n"
                       "# TYPE tollgate_cluster_redis_pending gauge\ntollgate_cluster_redis_pending %llu\n",
                       (unsigned long long)rs->pending);
    }
#undef CC
}
