/* core/mcp/envelope.c: the gateway's envelope around an upstream's requestState. A retry opens
 * it only for the same grant, upstream, method, tool and arguments, under the same key, before
 * it expires, and unchanged. */
#include "test/unit/unit.h"

#include <string.h>

#include "core/mcp/envelope.h"

static const uint8_t key[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};

static struct tg_mcp_state_binding binding(void)
{
    struct tg_mcp_state_binding b = {"alice", "cowork", "tools/call", "deploy", {0}};
    memset(b.args_sha256, 0xab, sizeof(b.args_sha256));
    return b;
}

static const char keys[] = "confirm\0region"; /* two issued input keys, NUL-separated */
#define NKEYS (sizeof(keys))                   /* with the last NUL */
#define NOW 1700000000000LL

static void seal(struct tg_buf *tok, const struct tg_mcp_state_binding *b, int64_t exp, const char *state)
{
    tok->len = 0;
    assert_int_equal(tg_mcp_state_seal(key, b, keys, NKEYS, exp, state, strlen(state), tok), 0);
    assert_true(tok->len > 0);
    for (size_t i = 0; i < tok->len; i++) {
        char c = tok->base[i];
        assert_true((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_');
    }
}

static int open_tok(const uint8_t *k, const struct tg_mcp_state_binding *b, int64_t now, struct tg_slice t,
                    struct tg_buf *state, struct tg_buf *ks, const char **why)
{
    return tg_mcp_state_open(k, b, now, t, state, ks, why);
}

static void round_trip(void **state_)
{
    struct tg_mcp_state_binding b = binding();
    struct tg_buf tok, st, ks;
    tg_buf_init(&tok);
    tg_buf_init(&st);
    tg_buf_init(&ks);
    seal(&tok, &b, NOW + 60000, "{\"upstream\":\"opaque state\"}");
    const char *why = "unset";
    assert_int_equal(open_tok(key, &b, NOW, tg_slice_of(tok.base, tok.len), &st, &ks, &why), 0);
    assert_null(why);
    assert_int_equal(st.len, strlen("{\"upstream\":\"opaque state\"}"));
    assert_memory_equal(st.base, "{\"upstream\":\"opaque state\"}", st.len);
    assert_int_equal(ks.len, NKEYS);
    assert_memory_equal(ks.base, keys, NKEYS);
    /* Two seals of the same state differ (a fresh nonce each time). */
    struct tg_buf tok2;
    tg_buf_init(&tok2);
    seal(&tok2, &b, NOW + 60000, "{\"upstream\":\"opaque state\"}");
    assert_false(tok.len == tok2.len && memcmp(tok.base, tok2.base, tok.len) == 0);
    tg_buf_dispose(&tok);
    tg_buf_dispose(&tok2);
    tg_buf_dispose(&st);
    tg_buf_dispose(&ks);
}

static void refused(void **state_)
{
    struct tg_mcp_state_binding b = binding();
    struct tg_buf tok, st, ks;
    tg_buf_init(&tok);
    tg_buf_init(&st);
    tg_buf_init(&ks);
    seal(&tok, &b, NOW + 60000, "state");
    struct tg_slice t = tg_slice_of(tok.base, tok.len);
    const char *why;

    /* Another grant (a replay of someone else's state), upstream, method, tool, or arguments. */
    struct tg_mcp_state_binding o = b;
    o.grant = "mallory";
    assert_int_equal(open_tok(key, &o, NOW, t, &st, &ks, &why), -1);
    assert_non_null(why);
    o = b;
    o.upstream = "other";
    assert_int_equal(open_tok(key, &o, NOW, t, &st, &ks, &why), -1);
    o = b;
    o.method = "prompts/get";
    assert_int_equal(open_tok(key, &o, NOW, t, &st, &ks, &why), -1);
    o = b;
    o.name = "delete_channel";
    assert_int_equal(open_tok(key, &o, NOW, t, &st, &ks, &why), -1);
    o = b;
    o.args_sha256[31] ^= 1;
    assert_int_equal(open_tok(key, &o, NOW, t, &st, &ks, &why), -1);

    /* Another key (another gateway, or a key rotated away). */
    uint8_t k2[32];
    memcpy(k2, key, 32);
    k2[0] ^= 0x80;
    assert_int_equal(open_tok(k2, &b, NOW, t, &st, &ks, &why), -1);

    /* Expired (at the expiry itself too). */
    assert_int_equal(open_tok(key, &b, NOW + 60000, t, &st, &ks, &why), -1);
    assert_string_equal(why, "requestState has expired");

    /* Every single changed character is refused. */
    for (size_t i = 0; i < tok.len; i++) {
        char save = tok.base[i];
        tok.base[i] = save == 'A' ? 'B' : 'A';
        if (open_tok(key, &b, NOW, t, &st, &ks, &why) == 0)
            fail_msg("a token changed at byte %zu opened", i);
        tok.base[i] = save;
    }
    /* Truncated, extended, padded, the standard alphabet, empty, garbage. */
    assert_int_equal(open_tok(key, &b, NOW, tg_slice_of(tok.base, tok.len - 1), &st, &ks, &why), -1);
    assert_int_equal(open_tok(key, &b, NOW, tg_slice_of(tok.base, 20), &st, &ks, &why), -1);
    struct tg_buf ext;
    tg_buf_init(&ext);
    tg_buf_append(&ext, tok.base, tok.len);
    tg_buf_append(&ext, "AAAA", 4);
    assert_int_equal(open_tok(key, &b, NOW, tg_slice_of(ext.base, ext.len), &st, &ks, &why), -1);
    ext.len = tok.len;
    tg_buf_append(&ext, "=", 1);
    assert_int_equal(open_tok(key, &b, NOW, tg_slice_of(ext.base, ext.len), &st, &ks, &why), -1);
    assert_int_equal(open_tok(key, &b, NOW, TG_SLICE(""), &st, &ks, &why), -1);
    assert_int_equal(open_tok(key, &b, NOW, TG_SLICE("not+a/token=="), &st, &ks, &why), -1);
    tg_buf_dispose(&ext);
    /* And the right one still opens. */
    assert_int_equal(open_tok(key, &b, NOW, t, &st, &ks, &why), 0);
    tg_buf_dispose(&tok);
    tg_buf_dispose(&st);
    tg_buf_dispose(&ks);
}

static void empty_state_and_keys(void **state_)
{
    struct tg_mcp_state_binding b = binding();
    struct tg_buf tok, st, ks;
    tg_buf_init(&tok);
    tg_buf_init(&st);
    tg_buf_init(&ks);
    assert_int_equal(tg_mcp_state_seal(key, &b, "", 0, NOW + 1, "", 0, &tok), 0);
    const char *why;
    assert_int_equal(tg_mcp_state_open(key, &b, NOW, tg_slice_of(tok.base, tok.len), &st, &ks, &why), 0);
    assert_int_equal(st.len, 0);
    assert_int_equal(ks.len, 0);
    tg_buf_dispose(&tok);
    tg_buf_dispose(&st);
    tg_buf_dispose(&ks);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),
        cmocka_unit_test(refused),
        cmocka_unit_test(empty_state_and_keys),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
