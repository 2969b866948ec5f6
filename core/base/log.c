#include "core/base/log.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "core/base/num.h"

/* The log sink is process-wide: there is one loop and one process, and every
 * module logs. It is configured before the loop starts and on reload.
 *
 * Once tg_log_start() has run, lines are not written by the caller: they are queued (up to
 * QUEUE_MAX bytes; past that they are dropped and counted, and the count is logged when there is
 * room again) and a writer thread does the write(2), so a stalled disk or a full stderr pipe
 * never holds the loop. The writer owns the descriptor then: a reopen or a new file is handed to
 * it as next_fd and it closes the old one between two writes. */
#define QUEUE_MAX (4u << 20)
static struct {
    int level;
    int format;
    int fd;
    char *path;
    int threaded;
    uv_thread_t thread;
    uv_mutex_t lock;
    uv_cond_t wake;
    struct tg_buf queue; /* lines waiting for the writer (under lock) */
    int next_fd;         /* -1, or the descriptor the writer switches to (under lock) */
    int stop;
    uint64_t dropped;
} logger = {.level = TG_LOG_INFO, .format = TG_LOG_LOGFMT, .fd = 2, .next_fd = -1};

static void writer_main(void *arg)
{
    (void)arg;
    uv_mutex_lock(&logger.lock);
    for (;;) {
        while (logger.queue.len == 0 && logger.next_fd < 0 && !logger.stop)
            uv_cond_wait(&logger.wake, &logger.lock);
        if (logger.next_fd >= 0) {
            if (logger.fd != 2)
                close(logger.fd);
            logger.fd = logger.next_fd;
            logger.next_fd = -1;
        }
        if (logger.queue.len == 0 && logger.stop)
            break;
        struct tg_buf batch = logger.queue;
        tg_buf_init(&logger.queue);
        int fd = logger.fd;
        uv_mutex_unlock(&logger.lock);
        for (size_t off = 0; off < batch.len;) {
            ssize_t w = write(fd, batch.base + off, batch.len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break; /* nothing better to do with a log that cannot be written */
            off += (size_t)w;
        }
        /* straight to malloc: the loop thread filled it, and a block kept in this thread's
         * free lists (core/base/slab.h) would never go back to that thread */
        free(batch.base);
        uv_mutex_lock(&logger.lock);
    }
    uv_mutex_unlock(&logger.lock);
}

int tg_log_start(void)
{
    if (logger.threaded)
        return 0;
    if (uv_mutex_init(&logger.lock) != 0 || uv_cond_init(&logger.wake) != 0)
        return -1;
    logger.stop = 0;
    logger.next_fd = -1;
    tg_buf_init(&logger.queue);
    if (uv_thread_create(&logger.thread, writer_main, NULL) != 0)
        return -1;
    logger.threaded = 1;
    return 0;
}

void tg_log_stop(void)
{
    if (!logger.threaded)
        return;
    uv_mutex_lock(&logger.lock);
    logger.stop = 1;
    uv_cond_signal(&logger.wake);
    uv_mutex_unlock(&logger.lock);
    uv_thread_join(&logger.thread);
    logger.threaded = 0;
    tg_buf_dispose(&logger.queue);
    uv_cond_destroy(&logger.wake);
    uv_mutex_destroy(&logger.lock);
}

/* The descriptor lines go to from now on: at once, or through the writer. */
static void use_fd(int fd)
{
    if (!logger.threaded) {
        if (logger.fd != 2)
            close(logger.fd);
        logger.fd = fd;
        return;
    }
    uv_mutex_lock(&logger.lock);
    if (logger.next_fd >= 0 && logger.next_fd != 2)
        close(logger.next_fd); /* two switches before the writer saw the first */
    logger.next_fd = fd;
    uv_cond_signal(&logger.wake);
    uv_mutex_unlock(&logger.lock);
}

static void emit(const char *p, size_t n)
{
    if (!logger.threaded) {
        ssize_t w = write(logger.fd, p, n); /* one write() per line keeps lines whole */
        (void)w;
        return;
    }
    uv_mutex_lock(&logger.lock);
    if (logger.queue.len + n > QUEUE_MAX) {
        logger.dropped++;
    } else {
        if (logger.dropped > 0 && logger.queue.len + n + 96 <= QUEUE_MAX) {
            tg_buf_appendf(&logger.queue, "msg=\"log lines dropped: the log could not keep up\" dropped=%llu\n",
                           (unsigned long long)logger.dropped);
            logger.dropped = 0;
        }
        tg_buf_append(&logger.queue, p, n);
        uv_cond_signal(&logger.wake);
    }
    uv_mutex_unlock(&logger.lock);
}

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
    use_fd(fd);
    free(logger.path);
    logger.path = (path && path[0]) ? tg_xstrdup(path) : NULL;
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
    use_fd(fd);
    return 0;
}

int tg_log_enabled(int level) { return level <= logger.level; }

/* The buffers tg_log_esc() filled since the last tg_log(): only these are kept as they are when
 * a %s value is already quoted. A string that merely looks quoted (a tool named "\"x\"") is a
 * value like any other and is escaped, so it cannot pass for the name x. */
static _Thread_local const char *esc_made[8];
static _Thread_local unsigned esc_nmade;

static int esc_made_here(const char *p)
{
    for (unsigned i = 0; i < esc_nmade && i < 8; i++)
        if (esc_made[i] == p)
            return 1;
    return 0;
}

const char *tg_log_esc(char *out, size_t outsz, struct tg_slice s)
{
    size_t o = 0;
    esc_made[esc_nmade++ % 8] = out;
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

/* ---- the pairs of a line -------------------------------------------------------------------
 *
 * tg_log formats its pairs itself, conversion by conversion, so that no string argument can end
 * a line or forge a field whether or not its caller escaped it:
 *   - `key=%s`: a bare value is kept as it is when it is printable ASCII with no blank, quote,
 *     backslash or '=' (or when it is what tg_log_esc() wrote for this line); anything else is
 *     quoted and escaped as tg_log_esc() does (at most VALUE_MAX bytes of it);
 *   - `key="%s"`: the bytes are escaped inside the caller's quotes;
 *   - a %s anywhere else is pairs a caller composed: kept, with control bytes escaped.
 * Other conversions are numbers and are written by snprintf. */
#define VALUE_MAX 512

static const char hexdig[] = "0123456789abcdef";

/* Escape p[0..n) as a quoted value's inside: \" \\ and, for control bytes, DEL and non-ASCII,
 * \xNN (logfmt) or \u00NN (json). */
static void escape(struct tg_buf *b, const char *p, size_t n, int json)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            tg_buf_append(b, e, 2);
        } else if (c < 0x20 || c >= 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hexdig[c >> 4], hexdig[c & 15]};
            if (json) {
                tg_buf_append(b, e, 6);
            } else {
                e[2] = '\\';
                e[3] = 'x';
                tg_buf_append(b, e + 2, 4);
            }
        } else {
            tg_buf_append(b, (const char *)&c, 1);
        }
    }
}

static void esc_inside(struct tg_buf *b, const char *p, size_t n) { escape(b, p, n, 0); }

/* A string value spelt true or false is quoted, so that a JSON line never reads a peer's name
 * as a boolean (a bare key, the gateway's own flag, is the only true). */
static int is_bool(const char *p, size_t n)
{
    return (n == 4 && memcmp(p, "true", 4) == 0) || (n == 5 && memcmp(p, "false", 5) == 0);
}

static int bare_ok(const char *p, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '=')
            return 0;
    }
    return 1;
}

/* 1 if p[0..n) is what tg_log_esc() writes: "…" holding printable ASCII, \" \\ and \xNN only. */
static int is_esc_value(const char *p, size_t n)
{
    if (n < 2 || p[0] != '"' || p[n - 1] != '"')
        return 0;
    for (size_t i = 1; i + 1 < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c < 0x20 || c >= 0x7f || c == '"')
            return 0;
        if (c == '\\') {
            if (i + 2 < n && (p[i + 1] == '"' || p[i + 1] == '\\'))
                i++;
            else if (i + 4 < n && p[i + 1] == 'x' && isxdigit((unsigned char)p[i + 2]) && isxdigit((unsigned char)p[i + 3]))
                i += 3;
            else
                return 0;
        }
    }
    return 1;
}

enum { CTX_VALUE, CTX_QUOTED, CTX_PAIRS };

static void put_string(struct tg_buf *b, int ctx, const char *s, size_t n)
{
    if (ctx == CTX_QUOTED) {
        esc_inside(b, s, n > VALUE_MAX ? VALUE_MAX : n);
        if (n > VALUE_MAX)
            tg_buf_appends(b, "..");
    } else if (ctx == CTX_PAIRS) {
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c < 0x20 || c == 0x7f) {
                char e[4] = {'\\', 'x', hexdig[c >> 4], hexdig[c & 15]};
                tg_buf_append(b, e, 4);
            } else {
                tg_buf_append(b, s + i, 1);
            }
        }
    } else if ((n <= VALUE_MAX && bare_ok(s, n) && !is_bool(s, n)) || (esc_made_here(s) && is_esc_value(s, n))) {
        tg_buf_append(b, s, n);
    } else {
        tg_buf_append(b, "\"", 1);
        esc_inside(b, s, n > VALUE_MAX ? VALUE_MAX : n);
        tg_buf_appends(b, n > VALUE_MAX ? "..\"" : "\"");
    }
}

/* The pairs of fmt with ap's arguments, into b (see above). */
static void format_pairs(struct tg_buf *b, const char *fmt, va_list ap)
{
    int inq = 0;
    char prev = ' ';
    for (const char *p = fmt; *p;) {
        if (*p != '%') {
            const char *run = p;
            for (; *p && *p != '%'; p++)
                if (*p == '"')
                    inq = !inq;
            prev = p[-1];
            tg_buf_append(b, run, (size_t)(p - run));
            continue;
        }
        if (p[1] == '%') {
            tg_buf_append(b, "%", 1);
            p += 2;
            continue;
        }
        /* %[flags][width][.precision][length]conversion, with * read from the arguments */
        char spec[48];
        size_t k = 0;
        spec[k++] = '%';
        p++;
        while (*p && strchr("-+ #0", *p) && k < 8)
            spec[k++] = *p++;
        if (*p == '*') {
            k += (size_t)snprintf(spec + k, 12, "%d", va_arg(ap, int));
            p++;
        } else {
            while (*p >= '0' && *p <= '9' && k < 20)
                spec[k++] = *p++;
        }
        int prec = -1;
        if (*p == '.') {
            p++;
            if (*p == '*') {
                prec = va_arg(ap, int);
                p++;
            } else {
                prec = 0;
                for (; *p >= '0' && *p <= '9'; p++)
                    if (prec < 100000)
                        prec = prec * 10 + (*p - '0');
            }
            if (prec >= 0)
                k += (size_t)snprintf(spec + k, 12, ".%d", prec);
        }
        int len = 0; /* 1 h/hh, 2 l, 3 ll, 4 z, 5 j, 6 t, 7 L */
        const char *lp = p;
        while (*p && strchr("hlzjtL", *p))
            p++;
        size_t ln = (size_t)(p - lp);
        if (ln > 2)
            ln = 2;
        if (ln)
            len = lp[0] == 'h' ? 1 : lp[0] == 'l' ? (ln == 2 ? 3 : 2) : lp[0] == 'z' ? 4 : lp[0] == 'j' ? 5 : lp[0] == 't' ? 6 : 7;
        memcpy(spec + k, lp, ln);
        k += ln;
        char conv = *p ? *p++ : '\0';
        spec[k++] = conv;
        spec[k] = '\0';
        char num[128];
        int w = -1;
        switch (conv) {
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (s == NULL)
                s = "(null)";
            size_t n = prec >= 0 ? strnlen(s, (size_t)prec) : strlen(s);
            put_string(b, inq ? CTX_QUOTED : prev == '=' ? CTX_VALUE : CTX_PAIRS, s, n);
            break;
        }
        case 'c': {
            char c = (char)va_arg(ap, int);
            put_string(b, inq ? CTX_QUOTED : prev == '=' ? CTX_VALUE : CTX_PAIRS, &c, 1);
            break;
        }
        case 'd':
        case 'i':
            switch (len) {
            case 2: w = snprintf(num, sizeof(num), spec, va_arg(ap, long)); break;
            case 3: w = snprintf(num, sizeof(num), spec, va_arg(ap, long long)); break;
            case 4: w = snprintf(num, sizeof(num), spec, va_arg(ap, ssize_t)); break;
            case 5: w = snprintf(num, sizeof(num), spec, va_arg(ap, intmax_t)); break;
            case 6: w = snprintf(num, sizeof(num), spec, va_arg(ap, ptrdiff_t)); break;
            default: w = snprintf(num, sizeof(num), spec, va_arg(ap, int)); break;
            }
            break;
        case 'u':
        case 'x':
        case 'X':
        case 'o':
            switch (len) {
            case 2: w = snprintf(num, sizeof(num), spec, va_arg(ap, unsigned long)); break;
            case 3: w = snprintf(num, sizeof(num), spec, va_arg(ap, unsigned long long)); break;
            case 4: w = snprintf(num, sizeof(num), spec, va_arg(ap, size_t)); break;
            case 5: w = snprintf(num, sizeof(num), spec, va_arg(ap, uintmax_t)); break;
            case 6: w = snprintf(num, sizeof(num), spec, va_arg(ap, ptrdiff_t)); break;
            default: w = snprintf(num, sizeof(num), spec, va_arg(ap, unsigned)); break;
            }
            break;
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G':
        case 'a':
        case 'A':
            if (len == 7)
                w = snprintf(num, sizeof(num), spec, va_arg(ap, long double));
            else
                w = snprintf(num, sizeof(num), spec, va_arg(ap, double));
            break;
        case 'p': w = snprintf(num, sizeof(num), spec, va_arg(ap, void *)); break;
        default:
            /* A conversion this reader does not know: its argument cannot be taken safely, so
             * the rest of the format is not read (the compiler's format check keeps this out). */
            tg_buf_appends(b, "?");
            return;
        }
        if (w > 0)
            tg_buf_append(b, num, (size_t)w < sizeof(num) ? (size_t)w : sizeof(num) - 1);
        prev = conv;
    }
}

/* A JSON string of p[0..n): quotes, backslashes, control bytes and non-ASCII escaped. */
static void json_string(struct tg_buf *b, const char *p, size_t n)
{
    tg_buf_append(b, "\"", 1);
    escape(b, p, n, 1);
    tg_buf_append(b, "\"", 1);
}

/* Convert `k=v k2="x y"` pairs into JSON members. Quoted values hold only the escapes
 * tg_log_esc() and format_pairs() write (\" \\ \xNN; \xNN becomes \u00NN). A bare value is a
 * JSON number only when all of it is one with a finite value, in 64 bytes at most (core/base/num.h:
 * 127.0.0.1, 0.1.0, 1e, 0x10, 01 and 1e999 are strings: a reader that takes numbers as doubles
 * would refuse the line or read inf), true and false are themselves, anything else is a string. */
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
        tg_buf_appends(b, ",");
        json_string(b, k, (size_t)(p - k));
        tg_buf_appends(b, ":");
        if (*p != '=') {
            tg_buf_appends(b, "true");
            continue;
        }
        p++;
        if (*p == '"') {
            p++;
            tg_buf_append(b, "\"", 1);
            while (*p && *p != '"') {
                unsigned char c = (unsigned char)*p;
                if (c == '\\') {
                    /* Only the escapes tg_log_esc() writes; one cut short ends the value. */
                    if (p[1] == 'x' && isxdigit((unsigned char)p[2]) && isxdigit((unsigned char)p[3])) {
                        tg_buf_appends(b, "\\u00");
                        char h[2] = {(char)tolower((unsigned char)p[2]), (char)tolower((unsigned char)p[3])};
                        tg_buf_append(b, h, 2);
                        p += 4;
                    } else if (p[1] == '"' || p[1] == '\\') {
                        tg_buf_append(b, p, 2);
                        p += 2;
                    } else {
                        while (*p)
                            p++;
                        break;
                    }
                } else if (c < 0x20 || c >= 0x7f) {
                    char e[6] = {'\\', 'u', '0', '0', hexdig[c >> 4], hexdig[c & 15]};
                    tg_buf_append(b, e, 6);
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
            double d;
            if (tg_num_parse(v, vn, &d) == 0 || (vn == 4 && memcmp(v, "true", 4) == 0) ||
                (vn == 5 && memcmp(v, "false", 5) == 0))
                tg_buf_append(b, v, vn);
            else
                json_string(b, v, vn);
        }
    }
}

void tg_log(int level, const char *msg, const char *fmt, ...)
{
    if (level > logger.level) {
        esc_nmade = 0;
        return;
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
    size_t msglen = msg ? strlen(msg) : 0;
    va_list ap;
    if (logger.format == TG_LOG_JSON) {
        /* The pairs are made first and then read again as JSON members. */
        struct tg_buf pairs;
        tg_buf_init(&pairs);
        if (fmt != NULL) {
            va_start(ap, fmt);
            format_pairs(&pairs, fmt, ap);
            va_end(ap);
        }
        tg_buf_append(&pairs, "", 1);
        tg_buf_appendf(&b, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":", ts, level_names[level]);
        json_string(&b, msg ? msg : "", msglen);
        pairs_to_json(&b, pairs.base);
        tg_buf_appends(&b, "}\n");
        tg_buf_dispose(&pairs);
    } else {
        /* logfmt: the pairs go into the line itself (no second buffer per line). */
        tg_buf_appendf(&b, "time=%s level=%s msg=\"", ts, level_names[level]);
        esc_inside(&b, msg ? msg : "", msglen);
        tg_buf_appends(&b, "\"");
        if (fmt != NULL) {
            size_t at = b.len;
            tg_buf_append(&b, " ", 1);
            va_start(ap, fmt);
            format_pairs(&b, fmt, ap);
            va_end(ap);
            if (b.len == at + 1)
                b.len = at; /* no pairs: no blank either */
        }
        tg_buf_appends(&b, "\n");
    }
    esc_nmade = 0; /* the arguments' tg_log_esc() buffers are this line's only */
    emit(b.base, b.len);
    tg_buf_dispose(&b);
}
