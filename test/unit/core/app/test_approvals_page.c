/* core/app/approvals_page.c: what the approvals page reads from a peer (form fields, a reason's text) and
 * its session table (bounded, least recently used replaced, expiry). The .c file is included to
 * reach its statics. */
#include "test/unit/unit.h"

#include "core/app/approvals_page.c"

static long field(const char *body, const char *key, char *out, size_t cap)
{
    return form_value(tg_slice_cstr(body), key, out, cap);
}

static void form_fields(void **state)
{
    char v[16];
    assert_int_equal(field("token=abc", "token", v, sizeof(v)), 3);
    assert_string_equal(v, "abc");
    assert_int_equal(field("a=1&token=x%2By+z&b=2", "token", v, sizeof(v)), 5);
    assert_string_equal(v, "x+y z");
    assert_int_equal(field("xtoken=1&token=2", "token", v, sizeof(v)), 1); /* a longer key is another key */
    assert_string_equal(v, "2");
    assert_int_equal(field("token=", "token", v, sizeof(v)), 0);
    assert_int_equal(field("tokenx", "token", v, sizeof(v)), -1);
    assert_int_equal(field("other=1", "token", v, sizeof(v)), -1);
    assert_int_equal(field("", "token", v, sizeof(v)), -1);
    assert_int_equal(field("token=%zz", "token", v, sizeof(v)), -1); /* bad escape */
    assert_int_equal(field("token=%4", "token", v, sizeof(v)), -1);  /* cut escape */
    assert_int_equal(field("token=%00a", "token", v, sizeof(v)), 2); /* a NUL is counted, not an end */
    assert_int_equal(field("token=0123456789abcdef", "token", v, sizeof(v)), -2); /* longer than cap - 1 */
    assert_int_equal(field("token=0123456789abcde", "token", v, sizeof(v)), 15);
}

static void reasons_are_clean_utf8(void **state)
{
    char a[] = "ok \xc3\xa4 \xe2\x80\x94 \xf0\x9f\x98\x80";
    clean_text(a);
    assert_string_equal(a, "ok \xc3\xa4 \xe2\x80\x94 \xf0\x9f\x98\x80");
    char b[] = "x\xc3"; /* cut sequence */
    clean_text(b);
    assert_string_equal(b, "x?");
    char c[] = "\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\xff"; /* overlong, surrogate, > U+10FFFF, never valid */
    clean_text(c);
    assert_string_equal(c, "??|???|????|?");
    char d[] = "line\nbreak\ttab\x7f";
    clean_text(d);
    assert_string_equal(d, "line break tab ");
}

static int live(void)
{
    int n = 0;
    for (size_t i = 0; i < TG_ADMIN_UI_SESSIONS; i++)
        n += sessions[i].used;
    return n;
}

static struct ui_session *find(const char *id)
{
    uint8_t h[32];
    tg_sha256(id, ID_HEX, h);
    for (size_t i = 0; i < TG_ADMIN_UI_SESSIONS; i++)
        if (sessions[i].used && memcmp(sessions[i].id_sha256, h, 32) == 0)
            return &sessions[i];
    return NULL;
}

static void sessions_are_bounded(void **state)
{
    static struct tg_server srv;
    static uv_loop_t loop;
    assert_int_equal(uv_loop_init(&loop), 0);
    srv.loop = &loop;
    memset(sessions, 0, sizeof(sessions));
    char ids[TG_ADMIN_UI_SESSIONS + 1][ID_HEX + 1];
    uint64_t base = uv_now(&loop);
    for (int i = 0; i < TG_ADMIN_UI_SESSIONS; i++) {
        assert_int_equal(session_open(&srv, ids[i], ""), 0);
        find(ids[i])->used_ms = base - TG_ADMIN_UI_SESSIONS + (uint64_t)i; /* 0 is the least recently used */
    }
    assert_int_equal(live(), TG_ADMIN_UI_SESSIONS);
    assert_string_not_equal(ids[0], ids[1]);
    assert_string_not_equal(find(ids[0])->csrf, find(ids[1])->csrf);
    assert_int_equal(session_open(&srv, ids[TG_ADMIN_UI_SESSIONS], "ann\x01"), 0);
    assert_int_equal(live(), TG_ADMIN_UI_SESSIONS);
    assert_null(find(ids[0]));
    assert_non_null(find(ids[1]));
    assert_non_null(find(ids[TG_ADMIN_UI_SESSIONS]));
    assert_string_equal(find(ids[1])->approver, "page");                    /* no name given */
    assert_string_equal(find(ids[TG_ADMIN_UI_SESSIONS])->approver, "ann?"); /* printable ASCII only */
    /* expiry: idle or too old */
    struct ui_session *s = find(ids[1]);
    uint64_t now = uv_now(&loop);
    s->created_ms = now;
    s->used_ms = now;
    assert_false(expired(s, now + TG_ADMIN_UI_IDLE_MS - 1));
    assert_true(expired(s, now + TG_ADMIN_UI_IDLE_MS));
    s->used_ms = now + TG_ADMIN_UI_LIFE_MS - 1;
    assert_true(expired(s, now + TG_ADMIN_UI_LIFE_MS));
    uv_loop_close(&loop);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(form_fields),
        cmocka_unit_test(reasons_are_clean_utf8),
        cmocka_unit_test(sessions_are_bounded),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
