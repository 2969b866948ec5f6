/* core/call/session.c: the session table (ids, lookup, refcounts, growth, sweep).
 * Runs under ASan/LSan: a session freed too early or never freed fails the test.
 * The .c file is included to see the table's buckets (its symbols then come from
 * here, not from tgcore's session.o, which the linker leaves out). */
#include "test/unit/unit.h"

#include "core/call/session.c"

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static void create_find_remove(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    assert_int_equal(tg_session_table_count(t), 0);
    char grant[] = "alice";
    struct tg_session *s = tg_session_create(t, grant, 2);
    assert_non_null(s);
    assert_int_equal(tg_session_table_count(t), 1);
    assert_int_equal(strlen(s->id_str), TG_SESSION_ID_LEN);
    assert_int_equal(strspn(s->id_str, b64url), TG_SESSION_ID_LEN);
    assert_int_equal(s->refcnt, 1);
    assert_int_equal(s->live, 1);
    assert_int_equal(s->upstream, 2);
    assert_int_equal(s->initialized, 0);
    assert_null(s->up_session);
    /* The grant name is copied. */
    assert_ptr_not_equal(s->grant, grant);
    grant[0] = 'X';
    assert_string_equal(s->grant, "alice");
    /* The id string is the base64url of the 16 id bytes. */
    char enc[32];
    tg_b64url_encode(s->id, 16, enc);
    assert_string_equal(enc, s->id_str);

    assert_ptr_equal(tg_session_find(t, tg_slice_cstr(s->id_str)), s);
    /* The id need not be NUL-terminated where the client sent it. */
    char wire[64];
    memcpy(wire, s->id_str, TG_SESSION_ID_LEN);
    memcpy(wire + TG_SESSION_ID_LEN, "garbage", 7);
    assert_ptr_equal(tg_session_find(t, tg_slice_of(wire, TG_SESSION_ID_LEN)), s);

    tg_session_remove(t, s); /* drops the table's only reference: s is freed */
    assert_int_equal(tg_session_table_count(t), 0);
    assert_null(tg_session_find(t, tg_slice_of(wire, TG_SESSION_ID_LEN)));
    tg_session_table_free(t);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void ids_distinct_and_findable(void **state)
{
    enum { N = 10000 };
    struct tg_session_table *t = tg_session_table_new();
    struct tg_session **all = calloc(N, sizeof(*all));
    char **ids = calloc(N, sizeof(*ids));
    for (int i = 0; i < N; i++) {
        all[i] = tg_session_create(t, i % 2 ? "a" : "b", 0);
        ids[i] = all[i]->id_str;
        assert_int_equal(strlen(ids[i]), TG_SESSION_ID_LEN);
        assert_int_equal(strspn(ids[i], b64url), TG_SESSION_ID_LEN);
    }
    assert_int_equal(tg_session_table_count(t), N);
    qsort(ids, N, sizeof(*ids), cmp_str);
    for (int i = 1; i < N; i++)
        if (strcmp(ids[i - 1], ids[i]) == 0)
            fail_msg("session id %s issued twice", ids[i]);
    /* Every one is found, past several table growths (starts at 1024 buckets). */
    for (int i = 0; i < N; i++)
        assert_ptr_equal(tg_session_find(t, tg_slice_cstr(all[i]->id_str)), all[i]);
    assert_int_equal(tg_session_count_for_grant(t, "a"), N / 2);
    assert_int_equal(tg_session_count_for_grant(t, "b"), N / 2);
    /* Remove every third; the rest stay findable. */
    for (int i = 0; i < N; i += 3) {
        char id[TG_SESSION_ID_LEN + 1];
        memcpy(id, all[i]->id_str, sizeof(id));
        tg_session_remove(t, all[i]);
        all[i] = NULL;
        assert_null(tg_session_find(t, tg_slice_cstr(id)));
    }
    size_t left = 0;
    for (int i = 0; i < N; i++)
        if (all[i]) {
            left++;
            assert_ptr_equal(tg_session_find(t, tg_slice_cstr(all[i]->id_str)), all[i]);
        }
    assert_int_equal(tg_session_table_count(t), left);
    free(ids);
    free(all);
    tg_session_table_free(t); /* frees the rest: LSan checks */
}

static void growth_past_1024(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    enum { N = 1025 + 2048 + 1 };
    struct tg_session *s[N];
    for (int i = 0; i < N; i++) {
        s[i] = tg_session_create(t, "g", i);
        /* All earlier ones are still found right after each insertion (growth happens at 1025 and 2049). */
        if (i == 1023 || i == 1024 || i == 1025 || i == 2048 || i == 2049 || i == N - 1)
            for (int k = 0; k <= i; k++)
                assert_ptr_equal(tg_session_find(t, tg_slice_cstr(s[k]->id_str)), s[k]);
    }
    assert_int_equal(tg_session_table_count(t), N);
    for (int k = 0; k < N; k++)
        assert_int_equal(tg_session_find(t, tg_slice_cstr(s[k]->id_str))->upstream, k);
    /* The table keeps at most one session per bucket on average, and chains stay short. */
    assert_int_equal(t->nbuckets, 4096);
    size_t longest = 0, total = 0;
    for (size_t b = 0; b < t->nbuckets; b++) {
        size_t n = 0;
        for (struct tg_session *x = t->buckets[b]; x; x = x->hnext)
            n++;
        total += n;
        if (n > longest)
            longest = n;
    }
    assert_int_equal(total, N);
    if (longest > 12)
        fail_msg("a bucket chain of %zu sessions in a table of %zu buckets and %d sessions", longest, t->nbuckets, N);
    tg_session_table_free(t);
}

static void find_rejects_malformed(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    struct tg_session *s = tg_session_create(t, "g", 0);
    char id[TG_SESSION_ID_LEN + 2];
    memcpy(id, s->id_str, TG_SESSION_ID_LEN + 1);
    assert_null(tg_session_find(t, TG_SLICE_NULL));
    assert_null(tg_session_find(t, TG_SLICE("")));
    assert_null(tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN - 1)));
    id[TG_SESSION_ID_LEN] = 'A';
    assert_null(tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN + 1)));
    id[TG_SESSION_ID_LEN] = '\0';
    /* Any single character replaced by any other (alphabet or not) is another id. */
    static const char others[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_+/=. %\x80\xff";
    for (size_t pos = 0; pos < TG_SESSION_ID_LEN; pos++) {
        char orig = id[pos];
        for (size_t k = 0; k < sizeof(others) - 1; k++) {
            if (others[k] == orig)
                continue;
            id[pos] = others[k];
            struct tg_session *f = tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN));
            if (f != NULL)
                fail_msg("id %.*s (position %zu changed from '%c') found session %s", TG_SESSION_ID_LEN, id, pos, orig,
                         s->id_str);
        }
        id[pos] = '\0';
        assert_null(tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN)));
        id[pos] = orig;
    }
    assert_ptr_equal(tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN)), s);
    /* Case matters in base64url. */
    for (size_t pos = 0; pos < TG_SESSION_ID_LEN; pos++) {
        char c = id[pos];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            id[pos] = (char)(c ^ 0x20);
            assert_null(tg_session_find(t, tg_slice_of(id, TG_SESSION_ID_LEN)));
            id[pos] = c;
        }
    }
    tg_session_table_free(t);
}

static void refcount_keeps_removed_session(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    struct tg_session *s = tg_session_create(t, "g", 0);
    char id[TG_SESSION_ID_LEN + 1];
    memcpy(id, s->id_str, sizeof(id));
    assert_ptr_equal(tg_session_ref(s), s); /* work in flight */
    assert_int_equal(s->refcnt, 2);
    s->up_session = tg_xstrdup("upstream-session");
    tg_session_remove(t, s);
    /* Out of the table, still valid for the holder (ASan would flag a use after free). */
    assert_int_equal(s->live, 0);
    assert_int_equal(s->refcnt, 1);
    assert_string_equal(s->grant, "g");
    assert_int_equal(tg_session_table_count(t), 0);
    assert_int_equal(tg_session_count_for_grant(t, "g"), 0);
    assert_null(tg_session_find(t, tg_slice_cstr(id)));
    /* Removing again is harmless and does not drop the holder's reference. */
    tg_session_remove(t, s);
    assert_int_equal(s->refcnt, 1);
    assert_int_equal(tg_session_table_count(t), 0);
    tg_session_unref(s); /* last reference: freed with its strings (LSan checks) */

    /* A table freed while work holds a session: the holder still frees it last. */
    struct tg_session *h = tg_session_ref(tg_session_create(t, "h", 1));
    tg_session_table_free(t);
    assert_int_equal(h->live, 0);
    assert_int_equal(h->refcnt, 1);
    assert_string_equal(h->grant, "h");
    tg_session_unref(h);
}

static void count_for_grant(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    struct tg_session *a1 = tg_session_create(t, "alice", 0);
    tg_session_create(t, "alice", 0);
    tg_session_create(t, "alice", 1);
    tg_session_create(t, "bob", 0);
    tg_session_create(t, "bob", 0);
    assert_int_equal(tg_session_count_for_grant(t, "alice"), 3);
    assert_int_equal(tg_session_count_for_grant(t, "bob"), 2);
    assert_int_equal(tg_session_count_for_grant(t, "carol"), 0);
    assert_int_equal(tg_session_count_for_grant(t, "alic"), 0);
    assert_int_equal(tg_session_count_for_grant(t, "alice2"), 0);
    tg_session_remove(t, a1);
    assert_int_equal(tg_session_count_for_grant(t, "alice"), 2);
    assert_int_equal(tg_session_table_count(t), 4);
    tg_session_table_free(t);
}

struct sweep_ctx {
    int visits;
    int remove_upstream;
    struct tg_session *seen[64];
};

static int on_visit(struct tg_session *s, void *arg)
{
    struct sweep_ctx *c = arg;
    assert_true(c->visits < 64);
    c->seen[c->visits++] = s;
    return s->upstream == c->remove_upstream;
}

static void sweep_removes_what_callback_says(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    struct tg_session *s[30];
    for (int i = 0; i < 30; i++)
        s[i] = tg_session_create(t, "g", i % 3);
    char ids[30][TG_SESSION_ID_LEN + 1];
    for (int i = 0; i < 30; i++)
        memcpy(ids[i], s[i]->id_str, TG_SESSION_ID_LEN + 1);
    struct tg_session *held = tg_session_ref(s[1]); /* upstream 1: will be removed */
    struct sweep_ctx c = {0, 1, {0}};
    tg_session_sweep(t, on_visit, &c);
    assert_int_equal(c.visits, 30);
    for (int i = 0; i < 30; i++) { /* each visited exactly once, in creation order */
        assert_ptr_equal(c.seen[i], s[i]);
    }
    assert_int_equal(tg_session_table_count(t), 20);
    for (int i = 0; i < 30; i++) {
        struct tg_session *f = tg_session_find(t, tg_slice_cstr(ids[i]));
        if (i % 3 == 1)
            assert_null(f);
        else
            assert_ptr_equal(f, s[i]);
    }
    assert_int_equal(held->live, 0);
    tg_session_unref(held);
    /* A callback that removes nothing, then one that removes everything. */
    c = (struct sweep_ctx){0, 99, {0}};
    tg_session_sweep(t, on_visit, &c);
    assert_int_equal(c.visits, 20);
    assert_int_equal(tg_session_table_count(t), 20);
    c.visits = 0;
    c.remove_upstream = 0;
    tg_session_sweep(t, on_visit, &c);
    c.visits = 0;
    c.remove_upstream = 2;
    tg_session_sweep(t, on_visit, &c);
    assert_int_equal(tg_session_table_count(t), 0);
    c.visits = 0;
    tg_session_sweep(t, on_visit, &c);
    assert_int_equal(c.visits, 0);
    tg_session_table_free(t);
}

/* At max_children: the session of the same grant idle longest whose client is gone (no stream),
 * at any idleness; else one idle at least idle_ms, the grant's own first; never one with work
 * under way, without a child or of another upstream. */
static int has_stream(const struct tg_session *s) { return s->get_stream != NULL; }

static void pick_evictable(void **state)
{
    struct tg_session_table *t = tg_session_table_new();
    struct tg_uplink *link = (struct tg_uplink *)&t; /* any non-NULL: only looked at, never used */
    struct tg_session *a1 = tg_session_create(t, "a", 0), *a2 = tg_session_create(t, "a", 0);
    struct tg_session *b1 = tg_session_create(t, "b", 0), *other_up = tg_session_create(t, "a", 1);
    struct tg_session *no_child = tg_session_create(t, "a", 0);
    a1->uplink = a2->uplink = b1->uplink = other_up->uplink = link;
    a1->last_active_ms = 900, a2->last_active_ms = 950, b1->last_active_ms = 100;
    other_up->last_active_ms = no_child->last_active_ms = 0;
    int same = -1;
    /* Grant a: its own longest idle (a1), although b1 has been idle far longer. */
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 60000, has_stream, &same), a1);
    assert_int_equal(same, 1);
    /* A call in flight, an initialize pending, or any call but the GET stream: not idle. */
    a1->inflight = 1;
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 60000, has_stream, &same), a2);
    a1->inflight = 0;
    a1->init_pending = 1;
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 60000, has_stream, &same), a2);
    a1->init_pending = 0;
    struct tg_list parked;
    tg_list_insert_tail(&a1->calls, &parked);
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 60000, has_stream, &same), a2);
    /* With its GET stream open (and only that), its client is still there: a1 goes only once idle
     * idle_ms, after a2 (no stream) however fresh a2 is. */
    a1->get_stream = (struct tg_call *)&parked;
    a1->last_active_ms = 0;
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 100, has_stream, &same), a2);
    a2->uplink = NULL;
    assert_null(tg_session_pick_evictable(t, 0, "a", 1000, 1001, has_stream, &same));
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "a", 1000, 1000, has_stream, &same), a1);
    assert_int_equal(same, 1);
    a2->uplink = link;
    a1->get_stream = NULL;
    tg_list_unlink(&parked);
    a1->last_active_ms = 900;
    /* Grant c has no session: another grant's only once idle idle_ms, the longest first. */
    assert_null(tg_session_pick_evictable(t, 0, "c", 1000, 901, has_stream, &same));
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "c", 1000, 900, has_stream, &same), b1);
    assert_int_equal(same, 0);
    b1->inflight = 2;
    assert_ptr_equal(tg_session_pick_evictable(t, 0, "c", 1000, 100, has_stream, &same), a1);
    assert_null(tg_session_pick_evictable(t, 0, "c", 1000, 200, has_stream, &same));
    /* Grant b: its own b1 is busy; a's sessions are not idle long enough. */
    assert_null(tg_session_pick_evictable(t, 0, "b", 1000, 60000, has_stream, &same));
    assert_int_equal(same, 0);
    b1->inflight = 0;
    /* Upstream 1: only other_up; a removed session is not a candidate. */
    assert_ptr_equal(tg_session_pick_evictable(t, 1, "a", 1000, 0, has_stream, &same), other_up);
    other_up->uplink = NULL;
    tg_session_remove(t, other_up);
    assert_null(tg_session_pick_evictable(t, 1, "a", 1000, 0, has_stream, &same));
    a1->uplink = a2->uplink = b1->uplink = NULL;
    tg_session_table_free(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(create_find_remove),
        cmocka_unit_test(ids_distinct_and_findable),
        cmocka_unit_test(growth_past_1024),
        cmocka_unit_test(find_rejects_malformed),
        cmocka_unit_test(refcount_keeps_removed_session),
        cmocka_unit_test(count_for_grant),
        cmocka_unit_test(sweep_removes_what_callback_says),
        cmocka_unit_test(pick_evictable),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
