/* core/wire/http_fast.c against llhttp itself: whatever the fast path takes, llhttp (set up as
 * transports/http1/conn.c and upstream/pool/http_conn.c set it up) must take too, as one whole message
 * of the same length, with the same method or status, target, headers, body and keep-alive;
 * and what it must leave to llhttp, it leaves. The differential cases mutate usual requests
 * and answers byte by byte (a fixed seed) and check every one the fast path takes. */
#include "test/unit/unit.h"

#include <llhttp.h>

#include "core/wire/http_fast.h"

#define MAXH 64 /* MAXH */

/* What llhttp read, gathered the way http1.c's callbacks gather it. */
struct ref {
    int begun, complete;
    char url[4096];
    size_t url_len;
    struct {
        char name[256], value[2048];
        size_t name_len, value_len;
    } h[MAXH + 1];
    int nh, last_was_value, too_many;
    char body[8192];
    size_t body_len;
    int method, status, keep_alive;
};

static struct ref *ref_of(llhttp_t *p) { return p->data; }

static int span(char *dst, size_t *len, size_t cap, const char *at, size_t n)
{
    if (*len + n > cap)
        return -1;
    memcpy(dst + *len, at, n);
    *len += n;
    return 0;
}

static int r_begin(llhttp_t *p)
{
    struct ref *r = ref_of(p);
    r->begun++;
    return 0;
}
static int r_url(llhttp_t *p, const char *at, size_t n) { return span(ref_of(p)->url, &ref_of(p)->url_len, 4096, at, n); }
static int r_field(llhttp_t *p, const char *at, size_t n)
{
    struct ref *r = ref_of(p);
    if (r->nh == 0 || r->last_was_value) {
        if (r->nh == MAXH + 1) {
            r->too_many = 1;
            return -1;
        }
        r->nh++;
        r->h[r->nh - 1].name_len = r->h[r->nh - 1].value_len = 0;
        r->last_was_value = 0;
    }
    return span(r->h[r->nh - 1].name, &r->h[r->nh - 1].name_len, 256, at, n);
}
static int r_value(llhttp_t *p, const char *at, size_t n)
{
    struct ref *r = ref_of(p);
    if (r->nh == 0)
        return 0;
    r->last_was_value = 1;
    return span(r->h[r->nh - 1].value, &r->h[r->nh - 1].value_len, 2048, at, n);
}
static int r_headers_complete(llhttp_t *p)
{
    ref_of(p)->method = p->method;
    ref_of(p)->status = p->status_code;
    return 0;
}
static int r_body(llhttp_t *p, const char *at, size_t n) { return span(ref_of(p)->body, &ref_of(p)->body_len, 8192, at, n); }
static int r_complete(llhttp_t *p)
{
    struct ref *r = ref_of(p);
    r->keep_alive = llhttp_should_keep_alive(p);
    r->complete = 1;
    return HPE_PAUSED;
}

static const llhttp_settings_t ref_settings = {
    .on_message_begin = r_begin,
    .on_url = r_url,
    .on_header_field = r_field,
    .on_header_value = r_value,
    .on_headers_complete = r_headers_complete,
    .on_body = r_body,
    .on_message_complete = r_complete,
};

/* llhttp over p[0..n): 1 when it completes one message, with *used its length. */
static int ref_parse(llhttp_type_t kind, const char *p, size_t n, struct ref *r, size_t *used)
{
    llhttp_t parser;
    memset(r, 0, sizeof(*r));
    llhttp_init(&parser, kind, &ref_settings);
    parser.data = r;
    llhttp_errno_t err = llhttp_execute(&parser, p, n);
    if (err != HPE_PAUSED || !r->complete)
        return 0;
    *used = (size_t)(llhttp_get_error_pos(&parser) - p);
    return 1;
}

static struct tg_http_header fh[MAXH];

static int fast(llhttp_type_t kind, const char *p, size_t n, int max, struct tg_http_fast *f)
{
    return kind == HTTP_REQUEST ? tg_http_fast_request(p, n, fh, max, f) : tg_http_fast_response(p, n, fh, max, f);
}

/* The fast path's reading of p[0..n), checked against llhttp's. Returns 1 if it took it. */
static int check_one(llhttp_type_t kind, const char *p, size_t n)
{
    struct tg_http_fast f;
    /* in a block of exactly n bytes, so that AddressSanitizer sees a read past the end */
    char *exact = malloc(n ? n : 1);
    memcpy(exact, p, n);
    int took = fast(kind, exact, n, MAXH, &f);
    free(exact);
    if (!took)
        return 0;
    static struct ref r;
    size_t used = 0;
    size_t total = f.head_len + (size_t)f.body_len;
    if (!ref_parse(kind, p, n, &r, &used) || used != total || r.begun != 1) {
        fprintf(stderr, "fast path took %zu bytes llhttp did not read as one message (%zu):\n%.*s\n", total,
                used, (int)n, p);
        fail();
    }
    if (kind == HTTP_REQUEST)
        assert_int_equal(f.method, r.method);
    else
        assert_int_equal(f.status, r.status);
    assert_int_equal(f.keep_alive, r.keep_alive);
    assert_int_equal(f.url_len, r.url_len);
    assert_memory_equal(p + f.url_off, r.url, r.url_len);
    assert_int_equal(f.nheaders, r.nh);
    for (int i = 0; i < f.nheaders; i++) {
        assert_int_equal(fh[i].name_len, r.h[i].name_len);
        assert_memory_equal(p + fh[i].name_off, r.h[i].name, r.h[i].name_len);
        assert_int_equal(fh[i].value_len, r.h[i].value_len);
        assert_memory_equal(p + fh[i].value_off, r.h[i].value, r.h[i].value_len);
        assert_true(fh[i].name_off + fh[i].name_len <= f.head_len);
        assert_true(fh[i].value_off + fh[i].value_len <= f.head_len);
    }
    assert_int_equal(f.body_len, r.body_len);
    assert_memory_equal(p + f.head_len, r.body, r.body_len);
    return 1;
}

static const char CALL_BODY[] =
    "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"echo\",\"arguments\":{\"text\":\"hi\"}}}";

/* The requests clients send: wrk's call.lua, an SDK client's fetch, the SSE GET, a DELETE. */
static const char *const REQUESTS[] = {
    "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
    "Accept: application/json, text/event-stream\r\nMcp-Session-Id: 9f2c4a1e-77aa-4f3e-9c1b-0a0e8d6c2b11\r\n"
    "MCP-Protocol-Version: 2025-06-18\r\nContent-Length: %zu\r\n\r\n%s",
    "POST /bench/mcp HTTP/1.1\r\nhost: localhost:7000\r\nconnection: keep-alive\r\ncontent-type: application/json\r\n"
    "accept: application/json, text/event-stream\r\naccept-language: *\r\nsec-fetch-mode: cors\r\n"
    "user-agent: node\r\naccept-encoding: gzip, deflate\r\ncontent-length: %zu\r\n\r\n%s",
    "POST /mcp?x=1&y=%%2F HTTP/1.1\r\nHost: a\r\nConnection: close\r\nAuthorization: Bearer abc.def-ghi_jkl\r\n"
    "Content-Length: %zu\r\n\r\n%s",
    "GET /mcp HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\nMcp-Session-Id: abc\r\n\r\n",
    "DELETE /mcp HTTP/1.1\r\nHost: a\r\nMcp-Session-Id: abc\r\nContent-Length: 0\r\n\r\n",
    "GET / HTTP/1.1\r\n\r\n",
};

/* The answers upstreams give: the bench fixture's, an SDK server's, a 202, an error. */
static const char *const ANSWERS[] = {
    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: 4c6f0a52-5f0e-4a55-9a1c-3b2f1e0d9c88\r\n"
    "Date: Wed, 02 Dec 2026 11:31:47 GMT\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
    "Content-Length: %zu\r\n\r\n%s",
    "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n",
    "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n%s",
};

struct kind {
    llhttp_type_t type;
    const char *const *usual;
    size_t nusual;
};
static const struct kind REQUEST = {HTTP_REQUEST, REQUESTS, sizeof(REQUESTS) / sizeof(REQUESTS[0])};
static const struct kind ANSWER = {HTTP_RESPONSE, ANSWERS, sizeof(ANSWERS) / sizeof(ANSWERS[0])};

static size_t usual(const struct kind *k, int i, char *out, size_t cap)
{
    int n = snprintf(out, cap, k->usual[i], strlen(CALL_BODY), CALL_BODY);
    assert_true(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* Every usual message is taken whole; none of its prefixes is; two back to back, the first. */
static void takes_usual(const struct kind *k)
{
    char buf[2048];
    for (size_t i = 0; i < k->nusual; i++) {
        size_t n = usual(k, (int)i, buf, sizeof(buf));
        assert_true(check_one(k->type, buf, n));
        for (size_t cut = 0; cut < n; cut++)
            assert_false(check_one(k->type, buf, cut));
        char two[4096];
        struct tg_http_fast f;
        memcpy(two, buf, n);
        memcpy(two + n, buf, n);
        assert_true(fast(k->type, two, 2 * n, MAXH, &f));
        assert_int_equal(f.head_len + f.body_len, n);
    }
}

static void takes_usual_requests(void **state)
{
    (void)state;
    takes_usual(&REQUEST);
}

static void takes_usual_answers(void **state)
{
    (void)state;
    takes_usual(&ANSWER);
}

static void refuses(llhttp_type_t type, const char *const *list, size_t n)
{
    struct tg_http_fast f;
    for (size_t i = 0; i < n; i++) {
        if (fast(type, list[i], strlen(list[i]), MAXH, &f)) {
            fprintf(stderr, "taken, should be llhttp's: %s\n", list[i]);
            fail();
        }
    }
}

/* Inside llhttp's language but outside the fast path's shape (or not HTTP at all): refused. */
static void leaves_other_requests_to_llhttp(void **state)
{
    (void)state;
    static const char *const OTHER[] = {
        "POST /mcp HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
        "PUT /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        "POST http://a/mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        "POST /mcp#frag HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length: 02\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length: 2 \r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length:\t2\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length: 1234567890123456\r\n\r\n{}",
        "POST /mcp HTTP/1.1\r\nContent-Length: 3\r\n\r\n{}",
        "GET /mcp HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nConnection: Upgrade\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nConnection: keep-alive, close\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nProxy-Connection: close\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A: b\r\n c\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A:\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A: b\tc\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A: caf\xc3\xa9\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A : b\r\n\r\n",
        "GET /mcp HTTP/1.1\r\nX-A: b\n\r\n",
        "GET /mcp HTTP/1.1\nX-A: b\r\n\r\n",
        "GET /mcp HTTP/1.1\r\n\n",
        "GET  /mcp HTTP/1.1\r\n\r\n",
        "GET /mcp  HTTP/1.1\r\n\r\n",
        "get /mcp HTTP/1.1\r\n\r\n",
        "\r\nGET /mcp HTTP/1.1\r\n\r\n",
    };
    refuses(HTTP_REQUEST, OTHER, sizeof(OTHER) / sizeof(OTHER[0]));
    /* more headers than the connection has room for */
    char big[8192];
    struct tg_http_fast f;
    size_t n = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
    for (int i = 0; i < MAXH; i++)
        n += (size_t)snprintf(big + n, sizeof(big) - n, "X-%d: v\r\n", i);
    memcpy(big + n, "\r\n", 2);
    assert_true(check_one(HTTP_REQUEST, big, n + 2));
    assert_false(tg_http_fast_request(big, n + 2, fh, MAXH - 1, &f));
}

static void leaves_other_answers_to_llhttp(void **state)
{
    (void)state;
    static const char *const OTHER[] = {
        "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: {}\n\n",
        "HTTP/1.1 204 No Content\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 304 Not Modified\r\nContent-Length: 2\r\n\r\n",
        "HTTP/1.1 101 Switching Protocols\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 199 Odd\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 600 Odd\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 O\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n{}",
        "HTTP/1.1 200 OK\r\nConnection: upgrade\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nUpgrade: h2c\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A: b\r\n c\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\nContent-Length: 0\r\n\r\n",
    };
    refuses(HTTP_RESPONSE, OTHER, sizeof(OTHER) / sizeof(OTHER[0]));
}

/* Mutations of the usual messages: every one the fast path takes, llhttp reads the same way. */
static void agrees_with_llhttp(const struct kind *k, uint64_t rng)
{
    static const char ALPHABET[] = {' ', '\t', '\r', '\n', ':', ',', '0', '9', 'a', 'Z', '-', '#', '/', '?',
                                    '%', '"', '(', 0x7f, (char)0x80, (char)0xff, '\0', '+', ';', '='};
    static const char *const LINES[] = {"Content-Length: 0\r\n", "Connection: close\r\n", "Connection: keep-alive\r\n",
                                        "Transfer-Encoding: chunked\r\n", "Upgrade: h2c\r\n", "Content-Length: 5\r\n",
                                        "X-Empty: \r\n", " folded\r\n", "\r\n", "Host: b\r\n"};
    char buf[4096];
    unsigned taken = 0, tried = 0;
    for (int round = 0; round < 150000; round++) {
        size_t n = usual(k, (int)tg_unit_rnd(&rng, (unsigned)k->nusual), buf, sizeof(buf) - 256);
        int edits = 1 + (int)tg_unit_rnd(&rng, 3);
        for (int e = 0; e < edits && n > 1; e++) {
            size_t at = tg_unit_rnd(&rng, (unsigned)n);
            switch (tg_unit_rnd(&rng, 5)) {
            case 0: buf[at] = ALPHABET[tg_unit_rnd(&rng, sizeof(ALPHABET))]; break;
            case 1: /* insert a byte */
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = ALPHABET[tg_unit_rnd(&rng, sizeof(ALPHABET))];
                n++;
                break;
            case 2: /* delete a byte */
                memmove(buf + at, buf + at + 1, n - at - 1);
                n--;
                break;
            case 3: { /* a header line at the start of a line */
                const char *l = LINES[tg_unit_rnd(&rng, sizeof(LINES) / sizeof(LINES[0]))];
                const char *nl = memchr(buf + at, '\n', n - at);
                if (nl == NULL)
                    break;
                size_t pos = (size_t)(nl - buf) + 1, ln = strlen(l);
                memmove(buf + pos + ln, buf + pos, n - pos);
                memcpy(buf + pos, l, ln);
                n += ln;
                break;
            }
            default: /* cut short */
                n = at + 1;
                break;
            }
            if (n + 64 > sizeof(buf) - 256)
                break;
        }
        tried++;
        taken += (unsigned)check_one(k->type, buf, n);
    }
    /* the check ran on a good share of them, and refused a good share */
    fprintf(stderr, "differential: %u of %u mutated %s taken by the fast path\n", taken, tried,
            k->type == HTTP_REQUEST ? "requests" : "answers");
    assert_true(taken > tried / 20);
    assert_true(taken < tried - tried / 5);
}

static void requests_agree_with_llhttp(void **state)
{
    (void)state;
    agrees_with_llhttp(&REQUEST, 0x9e3779b97f4a7c15ULL);
}

static void answers_agree_with_llhttp(void **state)
{
    (void)state;
    agrees_with_llhttp(&ANSWER, 0x2545f4914f6cdd1dULL);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(takes_usual_requests),
        cmocka_unit_test(takes_usual_answers),
        cmocka_unit_test(leaves_other_requests_to_llhttp),
        cmocka_unit_test(leaves_other_answers_to_llhttp),
        cmocka_unit_test(requests_agree_with_llhttp),
        cmocka_unit_test(answers_agree_with_llhttp),
    };
    return tg_unit_run("http_fast", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
