/* A whole, plain HTTP/1.1 message read in one pass, without llhttp: the client's request
 * (transports/http1/conn.c) and the upstream's answer (upstream/pool/http_conn.c).
 *
 * Every tools/call arrives, and is answered, in the same shape: a first line, a handful of
 * headers, a Content-Length and the body, all in one read. llhttp reads it through a state
 * machine and a callback per piece; this reads only that shape and leaves everything else to
 * llhttp, so it can neither accept what llhttp refuses nor read a message differently
 * (test_http_fast holds it to that, message by message, against llhttp itself):
 *   - a request: GET, POST or DELETE, an origin-form target of unreserved, sub-delim, ':', '@',
 *     '/', '?' and '%' bytes (no fragment), and exactly "HTTP/1.1";
 *   - an answer: "HTTP/1.1", a status of 200 to 599 other than 204 and 304 (those have no body
 *     whatever they say), and a reason phrase of printable ASCII, not empty;
 *   - header names of token characters; values of printable ASCII, neither empty nor ending
 *     in a space, after spaces only (no tab) following the colon; every line ends in CRLF;
 *   - no Transfer-Encoding, Upgrade or Proxy-Connection header; Connection only once, as
 *     "keep-alive" or "close"; Content-Length exactly once in an answer, at most once in a
 *     request, 1 to 15 digits without a leading zero;
 *   - the head and all of the body already in the input.
 * A message outside the shape (0) costs its caller one scan, and llhttp reads it as before. */
#ifndef TG_HTTP_FAST_H
#define TG_HTTP_FAST_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

/* One header: offsets into the bytes it was read from (for a client's request: into
 * tg_http_req.head, which holds a copy of them). */
struct tg_http_header {
    uint32_t name_off, name_len, value_off, value_len;
};

/* What was read. Offsets are from the first byte of the message. */
struct tg_http_fast {
    int method; /* a request's: HTTP_GET, HTTP_POST or HTTP_DELETE (llhttp_method_t) */
    int status; /* an answer's */
    uint32_t url_off, url_len;
    int nheaders;
    uint32_t head_len; /* the head, through the blank line that ends it */
    uint64_t body_len; /* the body follows the head */
    int has_length;    /* a Content-Length was there (an answer is taken only with one) */
    int keep_alive;    /* what llhttp_should_keep_alive() says of it */
};

/* 1 when p[0..n) begins with one whole request of the shape above: *f says what it is, h[0..
 * f->nheaders) where its headers are, and the request is f->head_len + f->body_len bytes long.
 * 0 when it is not (or not yet) of that shape, or has more than max_headers headers. */
int tg_http_fast_request(const char *p, size_t n, struct tg_http_header *h, int max_headers,
                         struct tg_http_fast *f);

/* 1 if p[0..n) begins as a request tg_http_fast_request() might take ("GET /", "POST /" or
 * "DELETE /"): a test worth one branch before any state is touched. */
int tg_http_fast_maybe(const char *p, size_t n);

/* The same for an answer (f->status set, f->method and the url not). */
int tg_http_fast_response(const char *p, size_t n, struct tg_http_header *h, int max_headers,
                          struct tg_http_fast *f);

/* The raw value of parameter name in a request target's query q ("?a=1&b=2", the '?' optional):
 * no percent-decoding (session ids and tokens are plain); TG_SLICE_NULL when it is absent. */
struct tg_slice tg_http_fast_query_param(struct tg_slice q, const char *name);

#endif
