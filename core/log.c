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
#include <uv.h>

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
    uv_cond_t wake, idle;
    struct tg_buf queue; /* lines waiting for the writer (under lock) */
    int next_fd;         /* -1, or the descriptor the writer switches to (under lock) */
    int stop, writing;
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
        logger.writing = 1;
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
         * free lists (core/slab.h) would never go back to that thread */
        free(batch.base);
        uv_mutex_lock(&logger.lock);
        logger.writing = 0;
        uv_cond_broadcast(&logger.idle);
    }
    uv_mutex_unlock(&logger.lock);
}

int tg_log_start(void)
{
    if (logger.threaded)
        return 0;
    if (uv_mutex_init(&logger.lock) != 0 || uv_cond_init(&logger.wake) != 0 || uv_cond_init(&logger.idle) != 0)
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
    uv_cond_destroy(&logger.idle);
    uv_mutex_destroy(&logger.lock);
}

void tg_log_flush(void)
{
    if (!logger.threaded)
        return;
    uv_mutex_lock(&logger.lock);
    while (logger.queue.len > 0 || logger.writing || logger.next_fd >= 0)
        uv_cond_wait(&logger.idle, &logger.lock);
    uv_mutex_unlock(&logger.lock);
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
            int numeric = vn > 0, digits = 0;
            for (size_t i = 0; i < vn; i++) {
                digits += v[i] >= '0' && v[i] <= '9';
                if (!((v[i] >= '0' && v[i] <= '9') || (i == 0 && v[i] == '-') || v[i] == '.'))
                    numeric = 0;
            }
            numeric = numeric && digits > 0; /* "-" alone (no value) is a string, not a number */
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
    emit(b.base, b.len);
    tg_buf_dispose(&b);
}
