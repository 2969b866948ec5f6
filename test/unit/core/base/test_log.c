/* core/base/log.c: escaping of peer bytes (tg_log_esc) and whole log lines in both
 * formats. A peer must never be able to forge a field or a line, and every
 * JSON-format line must be strict JSON. */
#include "test/unit/unit.h"

#include <unistd.h>

#include "core/base/json.h"
#include "core/base/log.h"

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

/* The sink on a temp file while a test logs; the lines written, after (malloc'd). */
static char cap_path[32];
static void capture_begin(int format)
{
    snprintf(cap_path, sizeof(cap_path), "/tmp/tg-log-XXXXXX");
    int fd = mkstemp(cap_path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tg_log_setup(TG_LOG_DEBUG, format, cap_path), 0);
}
static char *capture_end(void)
{
    assert_int_equal(tg_log_setup(TG_LOG_INFO, TG_LOG_LOGFMT, NULL), 0);
    FILE *f = fopen(cap_path, "r");
    assert_non_null(f);
    char *text = calloc(1, 65536);
    size_t n = fread(text, 1, 65535, f);
    fclose(f);
    unlink(cap_path);
    text[n] = '\0';
    return text;
}

/* One JSON line (without its newline) parsed strictly, or the test fails. */
static cJSON *parse_line(const char *line, size_t n)
{
    struct tg_json_doc doc;
    const char *err = NULL;
    size_t off = 0;
    if (tg_json_parse(line, n, 8, 1, &doc, &err, &off) != 0)
        fail_msg("not JSON (%s at %zu): %.*s", err, off, (int)n, line);
    return doc.root;
}

/* Names a peer or an operator chooses, printed with a plain %s by a caller that did not escape
 * them: every line stays one line, each value one field, in both formats; JSON lines are strict
 * JSON and give the name back. */
static void unescaped_names_stay_one_field(void **state)
{
    char big[301];
    memset(big, 'n', 300);
    big[300] = '\0';
    big[150] = '"';
    static const char *const names[] = {"plain_tool", "a\nlevel=error msg=\"forged\"", "quo\"te", "back\\slash",
                                        "ctl\x01\x1f\x7f", "sp ace=1", "", "\"already quoted\"", "=", "tab\there",
                                        NULL};
    for (int format = 0; format < 2; format++) {
        for (size_t i = 0; i <= sizeof(names) / sizeof(names[0]); i++) {
            const char *name = i < sizeof(names) / sizeof(names[0]) ? names[i] : big;
            if (name == NULL)
                name = "\xc3\xa9t\xe9";
            capture_begin(format);
            tg_log(TG_LOG_INFO, "call parked for approval", "approval_id=%s grant=%s tool=%s reason=\"%s\" n=%d",
                   "ap-1", name, name, name, 7);
            char *text = capture_end();
            size_t n = strlen(text);
            assert_true(n > 0);
            assert_int_equal(text[n - 1], '\n');
            if (memchr(text, '\n', n - 1) != NULL)
                fail_msg("format %d, name %zu: more than one line: %s", format, i, text);
            if (format == TG_LOG_JSON) {
                cJSON *root = parse_line(text, n - 1);
                int ascii = 1;
                for (const char *q = name; *q; q++)
                    ascii &= (unsigned char)*q < 0x80;
                for (int f = 0; f < 3; f++) {
                    const char *key = f == 0 ? "grant" : f == 1 ? "tool" : "reason";
                    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
                    if (!cJSON_IsString(v))
                        fail_msg("name %zu: %s is not a string: %s", i, key, text);
                    if (ascii && strcmp(v->valuestring, name) != 0)
                        fail_msg("name %zu: %s is \"%s\": %s", i, key, v->valuestring, text);
                }
                assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "n")));
                assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "level")->valuestring, "info");
                assert_null(cJSON_GetObjectItemCaseSensitive(root, "msg\"")); /* nothing forged */
                cJSON_Delete(root);
            } else {
                /* logfmt: the line's own level and msg once, every value bare-safe or quoted */
                const char *lv = strstr(text, " level=");
                assert_non_null(lv);
                assert_null(strstr(lv + 1, " level="));
                assert_null(strstr(text, "msg=\"forged\""));
                for (size_t k = 0; k + 1 < n; k++)
                    if ((unsigned char)text[k] < 0x20 || (unsigned char)text[k] >= 0x7f)
                        fail_msg("raw byte 0x%02x in %s", (unsigned char)text[k], text);
                /* a name that looks quoted already is a name like any other: escaped, never kept */
                if (strcmp(name, "\"already quoted\"") == 0)
                    assert_non_null(strstr(text, " tool=\"\\\"already quoted\\\"\""));
            }
            free(text);
        }
    }
}

/* log.format = "json": a bare value is a number only when all of it is a JSON number. */
static void json_numbers_only_when_numbers(void **state)
{
    static const struct {
        const char *v;
        int number;
    } cases[] = {{"127.0.0.1", 0}, {"0.1.0", 0}, {"1e", 0}, {"0x10", 0}, {"01", 0},    {"-", 0},
                 {"1.", 0},        {".5", 0},    {"+1", 0}, {"inf", 0},  {"nan", 0},   {"1e5x", 0}, {"1e999", 0}, {"-1e400", 0},
                 {"12345678901234567890123456789012345678901234567890123456789012345", 0},
                 {"true", 0},      {"false", 0}, {"null", 0},
                 {"0", 1},         {"-3", 1},    {"1.5", 1}, {"2e5", 1}, {"-0.25E-2", 1}, {"1234567890123", 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        capture_begin(TG_LOG_JSON);
        tg_log(TG_LOG_WARN, "m", "addr=%s", cases[i].v);
        char *text = capture_end();
        cJSON *root = parse_line(text, strlen(text) - 1);
        cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "addr");
        if (cases[i].number ? !cJSON_IsNumber(v) : !(cJSON_IsString(v) && strcmp(v->valuestring, cases[i].v) == 0))
            fail_msg("addr=%s: %s", cases[i].v, text);
        cJSON_Delete(root);
        free(text);
    }
    /* numbers the caller formats stay numbers; a message with a quote is escaped */
    capture_begin(TG_LOG_JSON);
    tg_log(TG_LOG_WARN, "say \"hi\"", "a=%d b=%llu c=%zu d=%.2f e=%.*s", -5, 18446744073709551615ULL, (size_t)3, 0.5,
           3, "abcdef");
    char *text = capture_end();
    cJSON *root = parse_line(text, strlen(text) - 1);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "msg")->valuestring, "say \"hi\"");
    assert_true(cJSON_GetObjectItemCaseSensitive(root, "a")->valuedouble == -5);
    assert_true(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(root, "b")));
    assert_true(cJSON_GetObjectItemCaseSensitive(root, "c")->valuedouble == 3);
    assert_true(cJSON_GetObjectItemCaseSensitive(root, "d")->valuedouble == 0.5);
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(root, "e")->valuestring, "abc");
    cJSON_Delete(root);
    free(text);
    /* and the same line in logfmt */
    capture_begin(TG_LOG_LOGFMT);
    tg_log(TG_LOG_WARN, "say \"hi\"", "a=%d e=%.*s peer=%s", -5, 3, "abcdef", "127.0.0.1");
    text = capture_end();
    assert_non_null(strstr(text, " msg=\"say \\\"hi\\\"\" a=-5 e=abc peer=127.0.0.1\n"));
    free(text);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(esc_escapes_everything),
        cmocka_unit_test(esc_truncates_within_bounds),
        cmocka_unit_test(json_lines_are_strict_json),
        cmocka_unit_test(logfmt_lines),
        cmocka_unit_test(json_line_cut_inside_escape),
        cmocka_unit_test(unescaped_names_stay_one_field),
        cmocka_unit_test(json_numbers_only_when_numbers),
    };
    return TG_UNIT_RUN(tests, argc, argv);
}
