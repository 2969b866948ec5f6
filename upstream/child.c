#include "upstream/child.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "core/base/json.h"
#include "core/base/log.h"

#define KILL_GRACE_MS 2000

/* One child process. Owner: its user (a session's stdio link, or u->warm[] until taken) until
 * tg_child_kill() or the exit; from then on it is owned by itself, and on_closed() frees it once
 * the process and every pipe are closed. */
struct tg_child {
    uv_process_t proc;
    uv_pipe_t in, out, err;
    uv_timer_t kill_timer;
    const char *name; /* the upstream's, for logs (copied) */
    char namebuf[72];
    tg_child_message_cb on_message;
    tg_child_exit_cb on_exit;
    void *ud;
    struct tg_buf line;    /* stdout bytes not yet ending in a newline */
    struct tg_buf errline; /* stderr likewise */
    size_t max_line;
    int skipping;          /* inside an over-long line: drop up to the next newline */
    size_t skipped;        /* stdout lines that were not JSON-RPC */
    int handles;           /* open handles; freed at 0 */
    int exited;
    int killed;
    int paused;
    int pid;
    struct tg_child_tally *tally; /* reference, or NULL */
    size_t *counted_in;           /* &tally->live or &tally->leaving, NULL once reaped */
};

/* Process-wide count of live children, for metrics and the zombie tests. */
static size_t live_children;

size_t tg_child_live_count(void) { return live_children; }

struct tg_child_tally *tg_child_tally_new(void)
{
    struct tg_child_tally *t = tg_xcalloc(1, sizeof(*t));
    t->refs = 1;
    return t;
}

void tg_child_tally_unref(struct tg_child_tally *t)
{
    if (t != NULL && --t->refs == 0)
        free(t);
}

static void on_closed(uv_handle_t *h)
{
    struct tg_child *ch = h->data;
    if (--ch->handles > 0)
        return;
    tg_buf_dispose(&ch->line);
    tg_buf_dispose(&ch->errline);
    tg_child_tally_unref(ch->tally);
    free(ch);
}

static void close_all(struct tg_child *ch)
{
    uv_handle_t *hs[] = {(uv_handle_t *)&ch->in, (uv_handle_t *)&ch->out, (uv_handle_t *)&ch->err,
                         (uv_handle_t *)&ch->kill_timer};
    for (int i = 0; i < 4; i++)
        if (!uv_is_closing(hs[i]))
            uv_close(hs[i], on_closed);
    if (ch->exited && !uv_is_closing((uv_handle_t *)&ch->proc))
        uv_close((uv_handle_t *)&ch->proc, on_closed);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    static char scratch[65536]; /* one loop: reads are handled before the next one starts */
    *buf = uv_buf_init(scratch, sizeof(scratch));
}

static void deliver_line(struct tg_child *ch, const char *p, size_t n, struct tg_buf *own)
{
    while (n > 0 && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    size_t i = 0;
    while (i < n && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i == n)
        return;
    struct tg_json_doc doc;
    if (p[i] != '{' || tg_json_parse(p + i, n - i, 1000, 0, &doc, NULL, NULL) != 0) {
        char esc[256];
        ch->skipped++;
        tg_log(TG_LOG_INFO, "upstream stdout line is not JSON-RPC; skipped", "upstream=%s pid=%d line=%s", ch->name,
               ch->pid, tg_log_esc(esc, sizeof(esc), tg_slice_of(p + i, n - i)));
        return;
    }
    if (ch->on_message && !ch->killed)
        ch->on_message(ch->ud, p + i, n - i, &doc, own != NULL && own->base == p + i && own->len == n - i ? own : NULL);
}

/* One piece of a read from stdout: take bytes, ending a line if nl. */
static void stdout_piece(struct tg_child *ch, const char *p, size_t take, int nl)
{
    if (ch->skipping) {
        if (nl)
            ch->skipping = 0;
    } else if (ch->line.len + take > ch->max_line) {
        tg_log(TG_LOG_WARN, "upstream stdout line too long; skipped", "upstream=%s pid=%d limit=%zu", ch->name,
               ch->pid, ch->max_line);
        struct tg_slice id = TG_SLICE_NULL;
        if (ch->line.len > 0)
            tg_json_prefix_id(ch->line.base, ch->line.len, &id);
        else
            tg_json_prefix_id(p, take, &id);
        if (ch->on_message && !ch->killed)
            ch->on_message(ch->ud, id.ptr ? id.ptr : "", id.len, NULL, NULL);
        ch->line.len = 0;
        ch->skipping = !nl;
    } else if (nl && ch->line.len == 0) {
        deliver_line(ch, p, take, NULL); /* the common case: a whole line in this read, no copy */
    } else {
        tg_buf_append(&ch->line, p, take);
        if (nl) {
            deliver_line(ch, ch->line.base, ch->line.len, &ch->line);
            ch->line.len = 0;
            if (ch->line.cap > 1048576)
                tg_buf_dispose(&ch->line); /* one huge answer must not pin its size for good */
        }
    }
}

/* One piece of a read from stderr: a line (kept up to 4 KiB) is logged when it ends. */
static void stderr_piece(struct tg_child *ch, const char *p, size_t take, int nl)
{
    if (ch->errline.len + take <= 4096)
        tg_buf_append(&ch->errline, p, take);
    if (nl) {
        char esc[600];
        tg_log(TG_LOG_INFO, "upstream stderr", "upstream=%s pid=%d line=%s", ch->name, ch->pid,
               tg_log_esc(esc, sizeof(esc), tg_slice_of(ch->errline.base, ch->errline.len)));
        ch->errline.len = 0;
    }
}

/* A read from one of the child's pipes, cut at newlines into pieces; stdout stops at a kill. */
static void read_lines(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf,
                       void (*piece)(struct tg_child *, const char *, size_t, int))
{
    struct tg_child *ch = s->data;
    if (nread < 0) {
        uv_read_stop(s);
        return;
    }
    const char *p = buf->base;
    size_t n = (size_t)nread;
    while (n > 0 && !(piece == stdout_piece && ch->killed)) {
        const char *nl = memchr(p, '\n', n);
        size_t take = nl ? (size_t)(nl - p) : n;
        piece(ch, p, take, nl != NULL);
        if (!nl)
            break;
        p = nl + 1;
        n -= take + 1;
    }
}

static void on_stdout(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) { read_lines(s, nread, buf, stdout_piece); }
static void on_stderr(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf) { read_lines(s, nread, buf, stderr_piece); }

static void on_exit_cb(uv_process_t *p, int64_t status, int term_signal)
{
    struct tg_child *ch = p->data;
    ch->exited = 1;
    live_children--;
    if (ch->counted_in != NULL)
        (*ch->counted_in)--;
    ch->counted_in = NULL;
    uv_timer_stop(&ch->kill_timer);
    if (!ch->killed)
        tg_log(TG_LOG_WARN, "upstream process exited", "upstream=%s pid=%d status=%lld signal=%d", ch->name, ch->pid,
               (long long)status, term_signal);
    tg_child_exit_cb cb = ch->killed ? NULL : ch->on_exit;
    void *ud = ch->ud;
    ch->killed = 1; /* no callbacks from now on */
    close_all(ch);
    if (cb)
        cb(ud, status, term_signal);
}

struct tg_child *tg_child_spawn(uv_loop_t *loop, const struct tg_upstream_conf *uc, size_t max_line,
                                struct tg_child_tally *tally, tg_child_message_cb on_message, tg_child_exit_cb on_exit,
                                void *ud, int *err)
{
    struct tg_child *ch = tg_xcalloc(1, sizeof(*ch));
    snprintf(ch->namebuf, sizeof(ch->namebuf), "%s", uc->name);
    ch->name = ch->namebuf;
    ch->on_message = on_message;
    ch->on_exit = on_exit;
    ch->ud = ud;
    ch->max_line = max_line;
    tg_buf_init(&ch->line);
    tg_buf_init(&ch->errline);
    uv_pipe_init(loop, &ch->in, 0);
    uv_pipe_init(loop, &ch->out, 0);
    uv_pipe_init(loop, &ch->err, 0);
    uv_timer_init(loop, &ch->kill_timer);
    ch->in.data = ch->out.data = ch->err.data = ch->kill_timer.data = ch->proc.data = ch;
    ch->handles = 5;
    uv_stdio_container_t stdio[3];
    stdio[0].flags = UV_CREATE_PIPE | UV_READABLE_PIPE;
    stdio[0].data.stream = (uv_stream_t *)&ch->in;
    stdio[1].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[1].data.stream = (uv_stream_t *)&ch->out;
    stdio[2].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
    stdio[2].data.stream = (uv_stream_t *)&ch->err;
    if (uc->stderr_inherit) { /* ch->err stays unopened: closed with the others */
        stdio[2].flags = UV_INHERIT_FD;
        stdio[2].data.fd = 2;
    }
    uv_process_options_t opt;
    memset(&opt, 0, sizeof(opt));
    opt.file = uc->command[0];
    opt.args = uc->command;
    opt.exit_cb = on_exit_cb;
    opt.stdio = stdio;
    opt.stdio_count = 3;
    opt.cwd = uc->cwd;
    opt.env = uc->env; /* NULL: inherit */
    int r = uv_spawn(loop, &ch->proc, &opt);
    if (r != 0) {
        *err = r;
        tg_log(TG_LOG_ERROR, "cannot start upstream process", "upstream=%s command=%s error=\"%s\"", uc->name,
               uc->command[0], uv_strerror(r));
        ch->killed = 1;
        ch->exited = 1; /* uv_spawn initialised the handle even though it failed: close it too */
        close_all(ch);
        return NULL;
    }
    live_children++;
    if (tally != NULL) {
        ch->tally = tally;
        tally->refs++;
        tally->live++;
        ch->counted_in = &tally->live;
    }
    ch->pid = ch->proc.pid;
    uv_read_start((uv_stream_t *)&ch->out, on_alloc, on_stdout);
    if (!uc->stderr_inherit)
        uv_read_start((uv_stream_t *)&ch->err, on_alloc, on_stderr);
    tg_log(TG_LOG_DEBUG, "upstream process started", "upstream=%s pid=%d", uc->name, ch->pid);
    return ch;
}

void tg_child_bind(struct tg_child *ch, tg_child_message_cb on_message, tg_child_exit_cb on_exit, void *ud)
{
    ch->on_message = on_message;
    ch->on_exit = on_exit;
    ch->ud = ud;
}

/* One line written to the child's stdin, made by tg_child_send(). Owner: libuv until
 * on_written(), which frees it and its bytes. */
struct child_write {
    uv_write_t req;
    char *base;
};

static void on_written(uv_write_t *req, int status)
{
    struct child_write *w = tg_container_of(req, struct child_write, req);
    free(w->base);
    free(w);
}

int tg_child_send(struct tg_child *ch, const char *p, size_t n)
{
    if (ch->killed || ch->exited)
        return TG_ECLOSED;
    struct child_write *w = tg_xmalloc(sizeof(*w));
    w->base = tg_xmalloc(n + 1);
    memcpy(w->base, p, n);
    w->base[n] = '\n';
    uv_buf_t b = uv_buf_init(w->base, (unsigned)(n + 1));
    int r = uv_write(&w->req, (uv_stream_t *)&ch->in, &b, 1, on_written);
    if (r != 0) {
        free(w->base);
        free(w);
        return r;
    }
    return 0;
}

static void on_kill_timer(uv_timer_t *t)
{
    struct tg_child *ch = t->data;
    if (!ch->exited)
        uv_process_kill(&ch->proc, SIGKILL);
}

void tg_child_kill(struct tg_child *ch)
{
    if (ch == NULL)
        return;
    if (ch->killed && ch->exited)
        return;
    ch->killed = 1;
    ch->on_message = NULL;
    ch->on_exit = NULL;
    if (ch->exited)
        return;
    if (ch->tally != NULL && ch->counted_in == &ch->tally->live) { /* out of use: max_children no longer counts it */
        ch->tally->live--;
        ch->tally->leaving++;
        ch->counted_in = &ch->tally->leaving;
    }
    /* Closing stdin is how a stdio MCP server is asked to leave; SIGTERM and SIGKILL follow. */
    if (!uv_is_closing((uv_handle_t *)&ch->in))
        uv_close((uv_handle_t *)&ch->in, on_closed);
    uv_process_kill(&ch->proc, SIGTERM);
    uv_timer_start(&ch->kill_timer, on_kill_timer, KILL_GRACE_MS, 0);
}

int tg_child_alive(const struct tg_child *ch) { return ch != NULL && !ch->exited && !ch->killed; }
int tg_child_pid(const struct tg_child *ch) { return ch->pid; }
size_t tg_child_skipped(const struct tg_child *ch) { return ch->skipped; }

void tg_child_pause(struct tg_child *ch)
{
    if (!ch->paused && !ch->exited) {
        ch->paused = 1;
        uv_read_stop((uv_stream_t *)&ch->out);
    }
}

void tg_child_resume(struct tg_child *ch)
{
    if (ch->paused && !ch->exited) {
        ch->paused = 0;
        uv_read_start((uv_stream_t *)&ch->out, on_alloc, on_stdout);
    }
}
