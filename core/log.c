#include "core/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* The log sink is process-wide: there is one loop and one process, and every
 * module logs. It is configured before the loop starts and on reload. */
static struct {
    int level;
    int format;
    int fd;
    char *path;
} logger = {TG_LOG_INFO, TG_LOG_LOGFMT, 2, NULL};

static const char *level_names[] = {"error", "warn", "info", "debug"};

int tg_log_parse_level(const char *s)
{
    for (int i = 0; i < 4; i++)
        if (strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

int tg_log_setup(int level, int format, const char *path)
{
    int fd = 2;
    if (path != NULL && path[0] != '\0') {
        fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
        if (fd < 0)
            return -errno;
    }
    if (logger.fd != 2)
        close(logger.fd);
    free(logger.path);
    logger.path = (path && path[0]) ? tg_xstrdup(path) : NULL;
    logger.fd = fd;
    logger.level = level;
    logger.format = format;
    return 0;
}

int tg_log_reopen(void)
{
    if (logger.path == NULL)
        return 0;
    int fd = open(logger.path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (fd < 0)
        return -errno;
    close(logger.fd);
    logger.fd = fd;
    return 0;
}

int tg_log_enabled(int level) { return level <= logger.level; }

const char *tg_log_esc(char *out, size_t outsz, struct tg_slice s)
{
    size_t o = 0;
    if (outsz < 8) {
        if (outsz)
            out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (o + 6 >= outsz - 1) {
            out[o++] = '.';
            out[o++] = '.';
            break;
        }
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            static const char hx[] = "0123456789abcdef";
            out[o++] = '\\';
            out[o++] = 'x';
            out[o++] = hx[c >> 4];
            out[o++] = hx[c & 15];
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

/* Convert `k=v k2="x y"` pairs into JSON members. Values produced by
 * tg_log_esc() only contain \" and \\ and \xNN escapes; \xNN becomes \u00NN. */
static void pairs_to_json(struct tg_buf *b, const char *p)
{
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        const char *k = p;
        while (*p && *p != '=' && *p != ' ')
            p++;
        size_t kn = (size_t)(p - k);
        tg_buf_appends(b, ",\"");
        tg_buf_append(b, k, kn);
        tg_buf_appends(b, "\":");
        if (*p != '=') {
            tg_buf_appends(b, "true");
            continue;
        }
        p++;
        if (*p == '"') {
            p++;
            tg_buf_append(b, "\"", 1);
            while (*p && *p != '"') {
                if (*p == '\\') {
                    /* Only the escapes tg_log_esc() writes; one cut short by the line limit ends the value. */
                    if (p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) {
                        tg_buf_appends(b, "\\u00");
                        tg_buf_append(b, p + 2, 2);
                        p += 4;
                    } else if (p[1] == '"' || p[1] == '\\') {
                        tg_buf_append(b, p, 2);
                        p += 2;
                    } else {
                        while (*p)
                            p++;
                        break;
                    }
                } else if ((unsigned char)*p < 0x20) {
                    p++;
                } else {
                    tg_buf_append(b, p++, 1);
                }
            }
            if (*p == '"')
                p++;
            tg_buf_append(b, "\"", 1);
        } else {
            const char *v = p;
            while (*p && *p != ' ')
                p++;
            size_t vn = (size_t)(p - v);
            int numeric = vn > 0;
            for (size_t i = 0; i < vn; i++)
                if (!((v[i] >= '0' && v[i] <= '9') || (i == 0 && v[i] == '-') || v[i] == '.'))
                    numeric = 0;
            if (numeric || (vn == 4 && memcmp(v, "true", 4) == 0) || (vn == 5 && memcmp(v, "false", 5) == 0)) {
                tg_buf_append(b, v, vn);
            } else {
                tg_buf_append(b, "\"", 1);
                for (size_t i = 0; i < vn; i++) {
                    if (v[i] == '"' || v[i] == '\\')
                        tg_buf_append(b, "\\", 1);
                    tg_buf_append(b, v + i, 1);
                }
                tg_buf_append(b, "\"", 1);
            }
        }
    }
}

void tg_log(int level, const char *msg, const char *fmt, ...)
{
    if (level > logger.level)
        return;
    char pairs[2048];
    pairs[0] = '\0';
    if (fmt != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(pairs, sizeof(pairs), fmt, ap);
        va_end(ap);
    }
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[64];
    snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
    struct tg_buf b;
    tg_buf_init(&b);
    if (logger.format == TG_LOG_JSON) {
        tg_buf_appendf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"", ts, level_names[level], msg);
        pairs_to_json(&b, pairs);
        tg_buf_appends(&b, "}\n");
    } else {
        tg_buf_appendf(&b, "time=%s level=%s msg=\"%s\"%s%s\n", ts, level_names[level], msg, pairs[0] ? " " : "",
                       pairs);
    }
    /* One write() per line keeps lines whole when several processes share the file. */
    ssize_t w = write(logger.fd, b.base, b.len);
    (void)w;
    tg_buf_dispose(&b);
}
