/* core/log.c: escaping of peer bytes (tg_log_esc) and whole log lines in both
 * formats. A peer must never be able to forge a field or a line, and every
 * JSON-format line must be strict JSON. */
#include "test/unit/unit.h"

#include <unistd.h>

#include "core/json.h"
#include "core/log.h"

/* Output of tg_log_esc: "…" with only printable ASCII inside, \" \\ and \xNN escapes. */
static void check_escaped(const char *out, size_t outsz)
{
    size_t n = strlen(out);
    assert_true(n < outsz);
    assert_true(n >= 2);
    assert_int_equal(out[0], '"');
    assert_int_equal(out[n - 1], '"');
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)out[i];
        if (c < 0x20 || c >= 0x7f)
            fail_msg("raw byte 0x%02x at %zu in %s", c, i, out);
        if (c == '"')
            fail_msg("unescaped quote at %zu in %s", i, out);
        if (c == '\\') {
            unsigned char e = (unsigned char)out[i + 1];
            if (e == '"' || e == '\\') {
                i++;
            } else if (e == 'x' && i + 3 < n - 1 && strchr("0123456789abcdef", out[i + 2]) &&
                       strchr("0123456789abcdef", out[i + 3])) {
                i += 3;
            } else {
                fail_msg("bad escape at %zu in %s", i, out);
            }
        }
    }
}

static void esc_escapes_everything(void **state)
{
    char out[64];
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("plain")), "\"plain\"");
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("")), "\"\"");
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("a\"b\\c")), "\"a\\\"b\\\\c\"");
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("x\ny\r\tz\x7f")), "\"x\\x0ay\\x0d\\x09z\\x7f\"");
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("\xC3\xA9\0")), "\"\\xc3\\xa9\\x00\"");
    /* A forged field or line stays inside one quoted value. */
    assert_string_equal(tg_log_esc(out, sizeof(out), TG_SLICE("x\" level=error msg=\"pwned\n")),
                        "\"x\\\" level=error msg=\\\"pwned\\x0a\"");
    /* Every byte value, alone. */
    for (int c = 0; c < 256; c++) {
        char in = (char)c;
        check_escaped(tg_log_esc(out, sizeof(out), tg_slice_of(&in, 1)), sizeof(out));
    }
}

static void esc_truncates_within_bounds(void **state)
{
    /* Exact-size heap buffers: ASan catches a write one past the end. */
    static const char *const inputs[] = {"abcdefghijklmnopqrstuvwxyz0123456789", "\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"\"",
                                         "\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", "a\xff" "b\xfe" "c\xfd" "d\xfc" "e"};
    for (size_t k = 0; k < sizeof(inputs) / sizeof(inputs[0]); k++) {
        for (size_t sz = 0; sz <= 80; sz++) {
            char *out = malloc(sz ? sz : 1);
            const char *r = tg_log_esc(out, sz, tg_slice_cstr(inputs[k]));
            assert_ptr_equal(r, out);
            if (sz == 0) {
                free(out);
                continue;
            }
            if (sz < 8) {
                assert_string_equal(out, "");
            } else {
                check_escaped(out, sz);
                /* Truncation is marked. */
                size_t full = 0;
                for (const char *p = inputs[k]; *p; p++)
                    full += (*p == '"' || *p == '\\') ? 2 : ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) ? 4 : 1;
                if (full + 3 > sz)
                    assert_non_null(strstr(out, "..\""));
            }
            free(out);
        }
    }
}

/* Runs one tg_log call with the sink on a temp file; returns the line (malloc'd). */
static char *log_line(int format, int level, const char *msg, const char *pairs)
{
    char path[] = "/tmp/tg-log-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tg_log_setup(TG_LOG_DEBUG, format, path), 0);
    tg_log(level, msg, "%s", pairs);
    assert_int_equal(tg_log_setup(TG_LOG_INFO, TG_LOG_LOGFMT, NULL), 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char *line = calloc(1, 8192);
    size_t n = fread(line, 1, 8191, f);
    fclose(f);
    unlink(path);
    line[n] = '\0';
    return line;
}

static void json_lines_are_strict_json(void **state)
{
    char esc[64], pairs[512];
    static const char *const peer[] = {"plain", "a\"b\\c", "line\nbreak", "\xC3\xA9\xFF\x01", "x\" injected=\"1",
                                       "\\x41", "\\", "\"", ""};
    for (size_t i = 0; i < sizeof(peer) / sizeof(peer[0]); i++) {
        snprintf(pairs, sizeof(pairs), "upstream=cowork-os status=502 ms=1.5 ok=true value=%s flag",
                 tg_log_esc(esc, sizeof(esc), tg_slice_cstr(peer[i])));
        char *line = log_line(TG_LOG_JSON, TG_LOG_WARN, "upstream said no", pairs);
        size_t n = strlen(line);
        assert_true(n > 0);
        assert_int_equal(line[n - 1], '\n');
        assert_null(memchr(line, '\n', n - 1)); /* one line */
        struct tg_json_doc doc;
        const char *err = NULL;
        size_t off = 0;
        if (tg_json_parse(line, n - 1, 8, 1, &doc, &err, &off) != 0)
            fail_msg("not JSON (%s at %zu): %s", err, off, line);
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(doc.root, "level")->valuestring, "warn");
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(doc.root, "msg")->valuestring, "upstream said no");
        assert_string_equal(cJSON_GetObjectItemCaseSensitive(doc.root, "upstream")->valuestring, "cowork-os");
        assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(doc.root, "status")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc.root, "ok")));
        assert_true(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(doc.root, "flag")));
        assert_null(cJSON_GetObjectItemCaseSensitive(doc.root, "injected"));
        cJSON *v = cJSON_GetObjectItemCaseSensitive(doc.root, "value");
        assert_true(cJSON_IsString(v));
        cJSON_Delete(doc.root);
        free(line);
    }
}

static void logfmt_lines(void **state)
{
    char esc[64], pairs[256];
    snprintf(pairs, sizeof(pairs), "peer=%s", tg_log_esc(esc, sizeof(esc), TG_SLICE("a\nlevel=error")));
    char *line = log_line(TG_LOG_LOGFMT, TG_LOG_ERROR, "bad request", pairs);
    assert_non_null(strstr(line, " level=error msg=\"bad request\" peer=\"a\\x0alevel=error\"\n"));
    assert_int_equal(strncmp(line, "time=", 5), 0);
    assert_ptr_equal(strchr(line, '\n'), line + strlen(line) - 1); /* one line */
    free(line);
    /* Below the configured level nothing is written. */
    assert_int_equal(tg_log_setup(TG_LOG_WARN, TG_LOG_LOGFMT, NULL), 0);
    assert_int_equal(tg_log_enabled(TG_LOG_WARN), 1);
    assert_int_equal(tg_log_enabled(TG_LOG_INFO), 0);
    assert_int_equal(tg_log_setup(TG_LOG_INFO, TG_LOG_LOGFMT, NULL), 0);
    assert_int_equal(tg_log_parse_level("debug"), TG_LOG_DEBUG);
    assert_int_equal(tg_log_parse_level("error"), TG_LOG_ERROR);
    assert_int_equal(tg_log_parse_level("DEBUG"), -1);
    assert_int_equal(tg_log_parse_level("verbose"), -1);
}

/* The formatted pairs are cut at 2047 bytes. A cut inside a \xNN escape or right after
 * a backslash of a tg_log_esc() value must still leave a JSON line (it used to copy the
 * broken escape: a lone backslash then escaped the closing quote). */
static void json_line_cut_inside_escape(void **state)
{
    for (size_t pad = 2030; pad < 2047; pad++) {
        char pairs[4096];
        memset(pairs, 'a', sizeof(pairs));
        memcpy(pairs, "k=", 2);
        size_t n = pad;
        pairs[n - 1] = ' ';
        memcpy(pairs + n, "v=\"\\x41\\x42\\\\\\\"\"", 16);
        pairs[n + 16] = '\0';
        char *line = log_line(TG_LOG_JSON, TG_LOG_WARN, "long", pairs);
        size_t len = strlen(line);
        struct tg_json_doc doc;
        const char *err = NULL;
        size_t off = 0;
        int r = tg_json_parse(line, len ? len - 1 : 0, 8, 1, &doc, &err, &off);
        cJSON_Delete(doc.root);
        if (r != 0)
            print_error("pairs cut at %zu: %s at %zu: ...%s", pad, err, off, line + (off > 40 ? off - 40 : 0));
        free(line);
        if (r != 0)
            fail();
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(esc_escapes_everything),
        cmocka_unit_test(esc_truncates_within_bounds),
        cmocka_unit_test(json_lines_are_strict_json),
        cmocka_unit_test(logfmt_lines),
        cmocka_unit_test(json_line_cut_inside_escape),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
