/* HTTP/1.1 requests as the gateway reads them (transports/http1/conn.c, out.c): the llhttp
 * request parser, the header and body limits, pipelining, keep-alive and close, answers made
 * at once, later, streamed (chunked) and upgrades. The bytes go in over a real loopback TCP
 * connection (see net.h), as a client would send them.
 *
 * Input: byte 0 picks how the rest is sent and the limits:
 *   bits 0-5: 0 = all at once, else chunks of that many bytes (each taken in before the next)
 *   bit 6: small limits (head 256 bytes, body 512 bytes), else 8 KiB and 64 KiB
 *   bit 7: the gateway is draining (every answer closes its connection)
 * then the bytes of the connection. The handler answers by path:
 *   /echo the body   /later on the next round   /sse a chunked stream ended on the next round
 *   /close closes the connection   /up upgrades and echoes raw bytes   other: the URL
 *
 * Properties:
 *   every request handed over is within the limits: head <= header_bytes, body <= body_bytes,
 *   at most TG_HTTP_MAX_HEADERS headers, the URL and every header inside the head buffer;
 *   what the client receives parses as HTTP/1.1 responses (until a 101), never more of them
 *   than requests handed over plus one (the error that ends a connection);
 *   the output accounting returns to zero once the connection is gone;
 *   no crash, leak or undefined behaviour. */
#include "test/fuzz/net.h"

#include <llhttp.h>
#include <stdio.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* One input's state. Owner: LLVMFuzzerTestOneInput (static, reset per input). */
static struct {
    struct tg_conn *held;   /* /later or /sse: answered on the next round */
    int held_stream;
    uv_idle_t later;        /* answers what is held */
    int requests;           /* handed over */
    int upgraded;
} st;

static void on_held_abort(struct tg_conn *c, void *exchange)
{
    (void)exchange;
    if (st.held == c)
        st.held = NULL;
}

static void on_later(uv_idle_t *i)
{
    uv_idle_stop(i);
    struct tg_conn *c = st.held;
    if (c == NULL)
        return;
    st.held = NULL;
    if (st.held_stream) {
        tg_http_stream_write(c, "data: 2\n\n", 9);
        tg_http_stream_end(c);
    } else {
        tg_http_respond(c, 200, NULL, "text/plain", "later", 5);
    }
}

static void on_up_data(struct tg_conn *c, void *ud)
{
    (void)ud;
    if (c->in.len == 0)
        return;
    tg_http_raw_write(c, c->in.base, c->in.len);
    c->in.len = 0;
}

static void check_limits(const struct fnet *n, const struct tg_conn *c)
{
    const struct tg_http_req *r = c->req;
    if (r->head.len > (size_t)n->limits.header_bytes || r->body.len > (size_t)n->limits.body_bytes)
        abort();
    if (r->nheaders > TG_HTTP_MAX_HEADERS)
        abort();
    if ((size_t)r->url_off + r->url_len > r->head.len)
        abort();
    for (int i = 0; i < r->nheaders; i++) {
        const struct tg_http_header *h = &r->headers[i];
        if ((size_t)h->name_off + h->name_len > r->head.len || (size_t)h->value_off + h->value_len > r->head.len)
            abort();
    }
    if (c->phase != TG_CONN_DISPATCHING)
        abort();
}

static void handler(struct fnet *n, struct tg_conn *c)
{
    check_limits(n, c);
    st.requests++;
    struct tg_slice url = tg_http_req_url(c->req);
    /* Exercise the lookups the router makes on every request. */
    (void)tg_http_req_header(c->req, "content-type");
    (void)tg_http_req_header_count(c->req, "authorization");
    if (tg_slice_eq(url, TG_SLICE("/echo"))) {
        tg_http_respond(c, 200, NULL, "application/json", c->req->body.base, c->req->body.len);
    } else if (tg_slice_eq(url, TG_SLICE("/later")) || tg_slice_eq(url, TG_SLICE("/sse"))) {
        st.held = c;
        st.held_stream = url.len == 4;
        c->exchange = &st;
        c->on_abort = on_held_abort;
        if (st.held_stream) {
            tg_http_stream_begin(c, 200, NULL, "text/event-stream");
            tg_http_stream_write(c, "data: 1\n\n", 9);
        }
        uv_idle_start(&st.later, on_later);
    } else if (tg_slice_eq(url, TG_SLICE("/close"))) {
        tg_conn_close(c, "the handler closes");
    } else if (tg_slice_eq(url, TG_SLICE("/up")) && tg_http_scratch_of(c)->parser.upgrade) {
        st.upgraded = 1;
        tg_http_upgrade(c, "Upgrade: echo\r\nConnection: Upgrade\r\n");
        tg_http_take_over(c, on_up_data, NULL, NULL, NULL);
        on_up_data(c, NULL); /* the bytes that came with the head */
    } else {
        tg_http_respond(c, 200, NULL, "text/plain", url.ptr, url.len);
    }
}

/* The client's view: responses, parsed with llhttp. */
static struct {
    int responses;
    int switched; /* a 101 went by: the rest is not HTTP */
} cl;

static int on_resp_headers(llhttp_t *p)
{
    if (p->status_code == 101)
        cl.switched = 1;
    return 0;
}

static int on_resp_complete(llhttp_t *p)
{
    (void)p;
    cl.responses++;
    return 0;
}

static void check_responses(const struct fnet *n)
{
    llhttp_settings_t s;
    llhttp_settings_init(&s);
    s.on_headers_complete = on_resp_headers;
    s.on_message_complete = on_resp_complete;
    llhttp_t p;
    llhttp_init(&p, HTTP_RESPONSE, &s);
    memset(&cl, 0, sizeof(cl));
    llhttp_errno_t e = n->got.len ? llhttp_execute(&p, n->got.base, n->got.len) : HPE_OK;
    if (e == HPE_OK && n->eof)
        e = llhttp_finish(&p); /* a stream without length ends with the connection */
    if (e != HPE_OK && !(e == HPE_PAUSED_UPGRADE && cl.switched))
        abort(); /* the gateway wrote something that is not an HTTP/1.1 response */
    if (getenv("TG_FUZZ_VERBOSE") != NULL)
        fprintf(stderr, "requests=%d responses=%d got=%zu eof=%d switched=%d\n", st.requests, cl.responses,
                n->got.len, n->eof, cl.switched);
    if (cl.responses > st.requests + 1)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fnet *n = fnet_get(handler);
    if (st.later.loop == NULL)
        uv_idle_init(&n->loop, &st.later);
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    data++;
    size--;
    fnet_default_limits(&n->limits);
    if (mode & 0x40) {
        n->limits.header_bytes = 256;
        n->limits.body_bytes = 512;
    }
    n->draining = (mode & 0x80) != 0;
    st.held = NULL;
    st.requests = 0;
    st.upgraded = 0;
    fnet_connect(n);
    size_t chunk = mode & 0x3f;
    if (chunk == 0)
        chunk = size;
    for (size_t off = 0; off < size; off += chunk)
        fnet_send(n, data + off, size - off < chunk ? size - off : chunk);
    fnet_settle(n);
    check_responses(n);
    fnet_close(n);
    uv_idle_stop(&st.later);
    if (st.held != NULL)
        abort(); /* on_abort told us it went away */
    return 0;
}
