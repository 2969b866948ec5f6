/* core/conf/signals.c: signals at the top level and per upstream, strict values. */
#include "test/unit/unit.h"

#include "core/conf/conf.h"

#include "test/unit/core/conf/conf_harness.h"
#define GRANTS "grants = ( { name = \"local\"; anonymous = true; } );\n"

static void default_is_tollgate(void **state)
{
    struct loaded l;
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; } );\n");
    assert_int_equal(l.c->signals, TG_SIGNALS_TOLLGATE);
    assert_int_equal(l.c->upstreams[0].signals, TG_SIGNALS_TOLLGATE);
    loaded_dispose(&l);
}

static void top_level_reaches_every_upstream_and_one_overrides(void **state)
{
    struct loaded l;
    load_ok(&l, LISTEN GRANTS "signals = \"mcp-drafts\";\n"
                "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; },\n"
                "              { name = \"u2\"; url = \"http://127.0.0.1:3334/mcp\"; signals = \"tollgate\"; } );\n");
    assert_int_equal(l.c->signals, TG_SIGNALS_MCP_DRAFTS);
    assert_int_equal(l.c->upstreams[0].signals, TG_SIGNALS_MCP_DRAFTS);
    assert_int_equal(l.c->upstreams[1].signals, TG_SIGNALS_TOLLGATE);
    loaded_dispose(&l);
    load_ok(&l, LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; },\n"
                "              { name = \"u2\"; url = \"http://127.0.0.1:3334/mcp\"; signals = \"mcp-drafts\"; } );\n");
    assert_int_equal(l.c->signals, TG_SIGNALS_TOLLGATE);
    assert_int_equal(l.c->upstreams[0].signals, TG_SIGNALS_TOLLGATE);
    assert_int_equal(l.c->upstreams[1].signals, TG_SIGNALS_MCP_DRAFTS);
    loaded_dispose(&l);
}

static void other_values_are_load_errors(void **state)
{
    const char *top = LISTEN GRANTS "signals = \"mcp\";\n"
                                    "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; } );\n";
    expect_error(top, line_of(top, "signals ="), "signals", "must be \"tollgate\" or \"mcp-drafts\"");
    const char *up = LISTEN GRANTS "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\";\n"
                                   "  signals = \"MCP-Drafts\"; } );\n";
    expect_error(up, line_of(up, "signals ="), "signals", "must be \"tollgate\" or \"mcp-drafts\"");
    const char *num = LISTEN GRANTS "signals = 1;\n"
                                    "upstreams = ( { name = \"u1\"; url = \"http://127.0.0.1:3333/mcp\"; } );\n";
    expect_error(num, line_of(num, "signals ="), "signals", "must be a string");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_is_tollgate),
        cmocka_unit_test(top_level_reaches_every_upstream_and_one_overrides),
        cmocka_unit_test(other_values_are_load_errors),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
