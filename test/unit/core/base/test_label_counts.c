/* core/base/label_counts.c: counters by a pair of label values, as /metrics shows them (brakes by
 * upstream and tool, history refusals by upstream and rule). The values come from requests: the
 * table stays bounded and its text stays valid Prometheus whatever a tool is called. */
#include "../../unit.h"

#include "core/base/buf.h"
#include "core/base/label_counts.h"

static char *render(const struct tg_label_counts *t)
{
    struct tg_buf b;
    tg_buf_init(&b);
    tg_label_counts_render(t, &b, "tollgate_x_total", "Help.", "upstream", "tool");
    tg_buf_append(&b, "", 1);
    return b.base;
}

static void counts_and_renders(void **state)
{
    (void)state;
    struct tg_label_counts *t = NULL;
    char *s = render(t);
    assert_string_equal(s, "# HELP tollgate_x_total Help.\n# TYPE tollgate_x_total counter\n");
    free(s);
    tg_label_counts_add(&t, "cw", "jira.create_issue", 1);
    tg_label_counts_add(&t, "e26", "region_lookup", 1);
    tg_label_counts_add(&t, "cw", "jira.create_issue", 2);
    assert_int_equal(tg_label_counts_get(t, "cw", "jira.create_issue"), 3);
    assert_int_equal(tg_label_counts_get(t, "e26", "region_lookup"), 1);
    assert_int_equal(tg_label_counts_get(t, "e26", "jira.create_issue"), 0);
    s = render(t);
    assert_string_equal(s, "# HELP tollgate_x_total Help.\n# TYPE tollgate_x_total counter\n"
                           "tollgate_x_total{upstream=\"cw\",tool=\"jira.create_issue\"} 3\n"
                           "tollgate_x_total{upstream=\"e26\",tool=\"region_lookup\"} 1\n");
    free(s);
    tg_label_counts_free(t);
}

/* A quote, a backslash or a newline in a tool's name cannot end the label or the line. */
static void values_escaped(void **state)
{
    (void)state;
    struct tg_label_counts *t = NULL;
    tg_label_counts_add(&t, "u", "a\"b\\c\nd\x01" "e", 1);
    char *s = render(t);
    assert_non_null(strstr(s, "tollgate_x_total{upstream=\"u\",tool=\"a\\\"b\\\\c\\nd?e\"} 1\n"));
    free(s);
    tg_label_counts_free(t);
}

/* Past TG_LABEL_COUNTS_MAX pairs, everything new is counted under ("(other)", "(other)"); a long
 * value is cut (not inside a UTF-8 character) and still found. */
static void bounded(void **state)
{
    (void)state;
    struct tg_label_counts *t = NULL;
    char name[32];
    for (int i = 0; i < 3 * TG_LABEL_COUNTS_MAX; i++) {
        snprintf(name, sizeof(name), "tool%d", i);
        tg_label_counts_add(&t, "u", name, 1);
    }
    assert_int_equal(tg_label_counts_size(t), TG_LABEL_COUNTS_MAX);
    assert_int_equal(tg_label_counts_get(t, "u", "tool0"), 1);
    assert_int_equal(tg_label_counts_get(t, "(other)", "(other)"), 2 * TG_LABEL_COUNTS_MAX + 1);
    tg_label_counts_add(&t, "u", "tool0", 1);
    assert_int_equal(tg_label_counts_get(t, "u", "tool0"), 2);
    tg_label_counts_free(t);

    t = NULL;
    char longv[400];
    memset(longv, 'x', sizeof(longv));
    memcpy(longv + TG_LABEL_VALUE_MAX - 1, "\xc3\xa9", 2); /* an é across the cut */
    longv[sizeof(longv) - 1] = '\0';
    tg_label_counts_add(&t, "u", longv, 1);
    assert_int_equal(tg_label_counts_get(t, "u", longv), 1);
    char *s = render(t);
    assert_null(strstr(s, "\xc3\""));
    free(s);
    tg_label_counts_free(t);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(counts_and_renders),
        cmocka_unit_test(values_escaped),
        cmocka_unit_test(bounded),
    };
    return tg_unit_run("label_counts", tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
