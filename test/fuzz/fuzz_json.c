/* Strict JSON and JSON-RPC decoding (core/base/json.c, core/wire/msg.c), and their re-serialisation.
 * Properties, checked on every input the strict parser takes:
 *   decode(encode(decode(x))) = decode(x)   (the tree survives a round trip)
 *   encode(decode(encode(decode(x)))) = encode(decode(x))   (the output is a fixed point)
 *   a message decoded as JSON-RPC and written with a gateway id decodes again, with that id;
 *   what the fast path without a tree (core/base/json_scan.c) accepts, the strict parser accepts,
 *   with the same id, method, error and result slices;
 *   a second message made from the input by one byte changed (its place and value taken from
 *   the input's last two bytes), scanned right after the input so that its walk may resume from
 *   the input's checkpoint, gets what a walk from its first byte gets.
 * Any input: no crash, no leak, no undefined behaviour. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/wire/msg.h"

#define DEPTH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_slices(const struct tg_json_doc *f, const struct tg_json_doc *t)
{
    return f->id_raw.ptr == t->id_raw.ptr && f->id_raw.len == t->id_raw.len && f->method_raw.ptr == t->method_raw.ptr &&
           f->method_raw.len == t->method_raw.len && f->error_raw.ptr == t->error_raw.ptr &&
           f->error_raw.len == t->error_raw.len && f->result_raw.ptr == t->result_raw.ptr &&
           f->result_raw.len == t->result_raw.len;
}

/* The input p and a copy q with one byte changed (r: with one byte put in), scanned in turn
 * p q p q (p r p r): the walk of the second resumes where the two differ, the third and the
 * fourth may take the last message with one scalar swapped. Each must say what a walk from the
 * first byte says. */
static void resumed_chain(const char *p, const char *q, size_t qn, size_t size)
{
    const char *m[4] = {p, q, p, q};
    size_t n[4] = {size, qn, size, qn};
    struct tg_json_doc d[4], f;
    int r[4];
    for (int k = 0; k < 4; k++)
        r[k] = tg__json_scan_fast(m[k], n[k], DEPTH, &d[k]);
    for (int k = 1; k < 4; k++) {
        tg__json_scan_forget();
        int rf = tg__json_scan_fast(m[k], n[k], DEPTH, &f);
        if (rf != r[k] || (rf == 0 && !same_slices(&d[k], &f)))
            abort();
    }
}

static void resumed_pair(const char *p, size_t size)
{
    if (size < 3)
        return;
    char *q = malloc(size + 1);
    if (q == NULL)
        abort();
    memcpy(q, p, size);
    q[(unsigned char)p[size - 1] % size] = p[size - 2];
    resumed_chain(p, q, size, size);
    size_t at = (unsigned char)p[size - 2] % size;
    memcpy(q, p, at);
    q[at] = p[size - 1];
    memcpy(q + at + 1, p + at, size - at);
    resumed_chain(p, q, size + 1, size);
    free(q);
}

/* Tree equality, members in order. Numbers are equal when their doubles are (both out of range
 * the same way counts: -32E600 and -32E600 are both -inf, which cJSON_Compare calls different). */
static int same(const cJSON *a, const cJSON *b)
{
    if ((a->type & 0xff) != (b->type & 0xff))
        return 0;
    if ((a->string == NULL) != (b->string == NULL) || (a->string && strcmp(a->string, b->string) != 0))
        return 0;
    if (cJSON_IsNumber(a))
        return a->valuedouble == b->valuedouble || (a->valuedouble != a->valuedouble && b->valuedouble != b->valuedouble);
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    const cJSON *x = a->child, *y = b->child;
    for (; x != NULL && y != NULL; x = x->next, y = y->next)
        if (!same(x, y))
            return 0;
    return x == NULL && y == NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data;
    struct tg_json_doc a;
    if (tg_json_parse(p, size, DEPTH, 1, &a, NULL, NULL) == 0) {
        struct tg_buf e1, e2;
        tg_buf_init(&e1);
        tg_buf_init(&e2);
        tg_json_write(&e1, a.root);
        struct tg_json_doc b;
        if (tg_json_parse(e1.base ? e1.base : "", e1.len, DEPTH, 1, &b, NULL, NULL) != 0)
            abort(); /* what the gateway writes, it must read back */
        if (!same(a.root, b.root))
            abort();
        tg_json_write(&e2, b.root);
        if (e1.len != e2.len || (e1.len && memcmp(e1.base, e2.base, e1.len) != 0))
            abort();
        cJSON_Delete(b.root);
        cJSON_Delete(a.root);
        tg_buf_dispose(&e1);
        tg_buf_dispose(&e2);
    }
    struct tg_json_doc f, t;
    if (tg__json_scan_fast(p, size, DEPTH, &f) == 0) {
        if (tg_json_parse(p, size, DEPTH, 1, &t, NULL, NULL) != 0)
            abort();
        if (!same_slices(&f, &t))
            abort();
        cJSON_Delete(t.root);
    }
    resumed_pair(p, size);
    struct tg_msg m;
    const char *why = NULL;
    if (tg_msg_decode(p, size, DEPTH, &m, &why) == 0 && m.kind == TG_MSG_REQUEST) {
        struct tg_buf out;
        tg_buf_init(&out);
        tg_msg_write_with_id(&out, &m, 4242);
        struct tg_msg m2;
        if (tg_msg_decode(out.base, out.len, DEPTH, &m2, &why) != 0 || m2.kind != TG_MSG_REQUEST ||
            m2.id_len != 4 || memcmp(m2.id_raw, "4242", 4) != 0 || strcmp(m.method, m2.method) != 0)
            abort();
        tg_msg_dispose(&m2);
        tg_buf_dispose(&out);
    }
    tg_msg_dispose(&m);
    return 0;
}
