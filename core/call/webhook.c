#include "core/call/webhook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/base/json.h"
#include "core/base/log.h"
#include "core/base/sha256.h"
#include "core/call/gateway.h"
#include "upstream/fetch.h"

/* One event waiting. Owner: the webhook's queue; freed when delivered, given up or dropped. */
struct hook_event {
    struct tg_list node;
    char *body; /* NUL-terminated JSON */
    size_t len;
    int attempts; /* made so far */
};

/* Owner: the server (srv->webhook); freed in the timer's close callback after tg_webhook_free. */
struct tg_webhook {
    struct tg_server *srv;
    struct tg_list queue;    /* oldest first; the head is the one in flight or waiting to retry */
    size_t n;
    struct tg_fetch *inflight;
    uv_timer_t retry;        /* the head's next attempt */
    int waiting;             /* the timer runs */
};

static void attempt(struct tg_webhook *w);

static int64_t tg_webhook_wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void drop_head(struct tg_webhook *w)
{
    struct hook_event *e = tg_container_of(w->queue.next, struct hook_event, node);
    tg_list_unlink(&e->node);
    w->n--;
    free(e->body);
    free(e);
}

static void on_retry(uv_timer_t *t)
{
    struct tg_webhook *w = t->data;
    w->waiting = 0;
    attempt(w);
}

/* The head failed (why): tried again later, or given up after its last attempt. */
static void failed(struct tg_webhook *w, const char *why)
{
    struct hook_event *e = tg_container_of(w->queue.next, struct hook_event, node);
    struct tg_metrics *m = &w->srv->metrics;
    if (e->attempts >= TG_WEBHOOK_ATTEMPTS) {
        m->webhook[TG_WEBHOOK_FAILED]++;
        tg_log(TG_LOG_WARN, "approval webhook event given up", "attempts=%d why=\"%s\"", e->attempts, why);
        drop_head(w);
        attempt(w);
        return;
    }
    m->webhook[TG_WEBHOOK_RETRIED]++;
    uint64_t delay = 500ull << (e->attempts - 1); /* 0.5 s, 1 s, 2 s, 4 s */
    tg_log(TG_LOG_INFO, "approval webhook event failed; trying again", "attempt=%d in_ms=%llu why=\"%s\"",
           e->attempts, (unsigned long long)delay, why);
    w->waiting = 1;
    uv_timer_start(&w->retry, on_retry, delay, 0);
}

static void on_answer(void *ud, const struct tg_fetch_result *res)
{
    struct tg_webhook *w = ud;
    w->inflight = NULL;
    if (res->err == 0 && res->status >= 200 && res->status < 300) {
        w->srv->metrics.webhook[TG_WEBHOOK_SENT]++;
        drop_head(w);
        attempt(w);
        return;
    }
    char why[160];
    if (res->err != 0)
        snprintf(why, sizeof(why), "%.150s", res->why ? res->why : "failed");
    else
        snprintf(why, sizeof(why), "HTTP %d", res->status);
    failed(w, why);
}

/* Send the head, signed now, unless one is in flight or waits for its retry. */
static void attempt(struct tg_webhook *w)
{
    const struct tg_approvals_conf *ac = &w->srv->conf->approvals;
    if (w->inflight != NULL || w->waiting || tg_list_empty(&w->queue))
        return;
    if (ac->webhook_url == NULL || ac->webhook_secret == NULL) {
        /* A reload took the webhook away: what waits goes. */
        while (!tg_list_empty(&w->queue)) {
            w->srv->metrics.webhook[TG_WEBHOOK_DROPPED]++;
            drop_head(w);
        }
        return;
    }
    struct hook_event *e = tg_container_of(w->queue.next, struct hook_event, node);
    e->attempts++;
    char ts[24];
    int tn = snprintf(ts, sizeof(ts), "%lld", (long long)(tg_webhook_wall_ms() / 1000));
    struct tg_buf signed_text;
    tg_buf_init(&signed_text);
    tg_buf_append(&signed_text, ts, (size_t)tn);
    tg_buf_append(&signed_text, ".", 1);
    tg_buf_append(&signed_text, e->body, e->len);
    uint8_t mac[32];
    tg_hmac_sha256(ac->webhook_secret, ac->webhook_secret_len, signed_text.base, signed_text.len, mac);
    tg_buf_dispose(&signed_text);
    char hex[65];
    tg_hex_encode(mac, 32, hex);
    char headers[200];
    snprintf(headers, sizeof(headers),
             "Content-Type: application/json\r\nX-Tollgate-Timestamp: %s\r\nX-Tollgate-Signature: sha256=%s\r\n", ts,
             hex);
    struct tg_fetch_opts o = {
        .method = "POST",
        .url = ac->webhook_url,
        .headers = headers,
        .body = e->body,
        .body_len = e->len,
        .max_bytes = 65536,
        .timeout_ms = 10000,
    };
    const char *why = NULL;
    w->inflight = tg_fetch_start(w->srv->loop, &o, on_answer, w, &why);
    if (w->inflight == NULL)
        failed(w, why ? why : "cannot start");
}

static void add_string(struct tg_buf *b, const char *name, const char *v)
{
    tg_buf_appendf(b, ",\"%s\":", name);
    if (v != NULL)
        tg_json_write_string(b, v, strlen(v));
    else
        tg_buf_appends(b, "null");
}

void tg_webhook_post(struct tg_server *srv, const struct tg_webhook_event *ev)
{
    if (srv->conf->approvals.webhook_url == NULL)
        return;
    struct tg_webhook *w = srv->webhook;
    if (w == NULL) {
        w = srv->webhook = tg_xcalloc(1, sizeof(*w));
        w->srv = srv;
        tg_list_init(&w->queue);
        uv_timer_init(srv->loop, &w->retry);
        w->retry.data = w;
        uv_unref((uv_handle_t *)&w->retry);
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_buf_appends(&b, "{\"event\":");
    tg_json_write_string(&b, ev->event, strlen(ev->event));
    add_string(&b, "id", ev->id);
    add_string(&b, "tool", ev->tool);
    add_string(&b, "grant", ev->grant);
    add_string(&b, "subject", ev->subject);
    add_string(&b, "upstream", ev->upstream);
    add_string(&b, "args_sha256", ev->args_sha256 && ev->args_sha256[0] ? ev->args_sha256 : NULL);
    add_string(&b, "decided_by", ev->decided_by);
    add_string(&b, "reason", ev->reason && ev->reason[0] ? ev->reason : NULL);
    tg_buf_appendf(&b, ",\"time_ms\":%lld}", (long long)tg_webhook_wall_ms());
    const int q = srv->conf->approvals.webhook_queue;
    const size_t cap = q >= 2 ? (size_t)q : TG_WEBHOOK_QUEUE;
    while (w->n >= cap) {
        /* Full (or a reload made it smaller): the oldest waiting goes (the head, unless it is in
         * flight or waiting to retry; that one is never taken from under its attempt). */
        struct tg_list *victim = w->queue.next;
        if (w->inflight != NULL || w->waiting)
            victim = victim->next;
        if (victim == &w->queue)
            break;
        struct hook_event *old = tg_container_of(victim, struct hook_event, node);
        tg_list_unlink(&old->node);
        w->n--;
        free(old->body);
        free(old);
        srv->metrics.webhook[TG_WEBHOOK_DROPPED]++;
    }
    struct hook_event *e = tg_xcalloc(1, sizeof(*e));
    e->len = b.len;
    tg_buf_append(&b, "", 1);
    e->body = tg_buf_release(&b);
    tg_list_insert_tail(&w->queue, &e->node);
    w->n++;
    attempt(w);
}

static void on_closed(uv_handle_t *h) { free(h->data); }

void tg_webhook_free(struct tg_server *srv)
{
    struct tg_webhook *w = srv->webhook;
    if (w == NULL)
        return;
    srv->webhook = NULL;
    if (w->inflight != NULL)
        tg_fetch_cancel(w->inflight);
    while (!tg_list_empty(&w->queue))
        drop_head(w);
    uv_close((uv_handle_t *)&w->retry, on_closed);
}
