/* The approvals webhook (approvals.webhook in the conf): what happens to a parked call is POSTed
 * as JSON to the operator's URL, so that a chat bot or a pager can tell an approver.
 *
 * Events: "parked", "approved", "denied", "refused" (approved, but the configuration in force no
 * longer allowed it), "expired", "withdrawn" (its client or session went). Each is one JSON object
 * {event, id, tool, grant, subject, upstream, args_sha256, decided_by, reason, time_ms}
 * (decided_by and reason null when unknown), signed: X-Tollgate-Timestamp is the Unix time in
 * seconds of the attempt, X-Tollgate-Signature is "sha256=" and the hex HMAC-SHA-256, under the
 * secret of approvals.webhook.secret_file, of TIMESTAMP "." BODY. A receiver recomputes it and
 * refuses an old timestamp, so a captured event cannot be replayed later.
 *
 * Delivery never blocks the loop (upstream/fetch.h, one event in flight at a time, in order): a
 * 2xx answer is delivered; anything else (a status, a timeout, a refused connection) is tried
 * again after 0.5 s, 1 s, 2 s, 4 s (five attempts), then given up. At most approvals.webhook.queue
 * events wait (TG_WEBHOOK_QUEUE by default, the one in flight counted); past that the oldest
 * waiting is dropped. Each outcome is counted (metrics webhook[]).
 *
 * State: srv->webhook, made at the first event, freed by tg_webhook_free(). Loop thread only. */
#ifndef TG_CALL_WEBHOOK_H
#define TG_CALL_WEBHOOK_H

struct tg_server;

#define TG_WEBHOOK_QUEUE 256
#define TG_WEBHOOK_ATTEMPTS 5

/* One event, as the body names its fields. Strings borrowed for the call; NULL: null. */
struct tg_webhook_event {
    const char *event, *id, *tool, *grant, *subject, *upstream, *args_sha256, *decided_by, *reason;
};

/* Queue e (nothing without approvals.webhook in the conf in force). */
void tg_webhook_post(struct tg_server *srv, const struct tg_webhook_event *e);
/* Shutdown: what waits is dropped, the attempt in flight cancelled. */
void tg_webhook_free(struct tg_server *srv);

#endif
