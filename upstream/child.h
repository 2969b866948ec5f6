/* stdio upstreams: an MCP server run as a child process, newline-delimited JSON on its
 * stdin and stdout.
 *
 * tg_child_spawn() starts one child (uv_spawn with three pipes). Complete stdout lines
 * that hold a JSON object go to on_message; anything else on stdout (servers log there,
 * CoWork OS does) is skipped, logged and counted (tg_child_skipped), and stderr goes to the log
 * (or is this process's own, uc->stderr_inherit). on_exit runs once,
 * after the process is reaped. tg_child_kill() sends SIGTERM, then SIGKILL after a grace
 * period; the child frees itself once the process and its pipes are closed, and no
 * callback runs after tg_child_kill(). */
#ifndef TG_STDIO_H
#define TG_STDIO_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "core/conf/conf.h"

struct tg_child;

/* The children of one upstream, shared by the upstream and its children. live: from spawn until
 * tg_child_kill() or the exit, what upstreams[].max_children caps; leaving: killed and not yet
 * reaped (SIGKILL follows the SIGTERM within KILL_GRACE_MS), so that a session that gives up its
 * child makes room at once while the processes alive stay bounded. Owner: refcounted; the last
 * unref frees it. */
struct tg_child_tally {
    int refs;
    size_t live;
    size_t leaving;
};
struct tg_child_tally *tg_child_tally_new(void);
void tg_child_tally_unref(struct tg_child_tally *t);

struct tg_json_doc;
/* One JSON object from the child's stdout; doc is what its one validating parse found (valid for
 * the call only), so that no one parses it again; own, when not NULL, is the line buffer p is,
 * which the callee may take (leaving it empty) instead of copying a big answer. doc NULL: a line
 * over the limit was dropped, and p/n is its top-level "id" token as far as its first bytes show
 * it (n 0: unknown), so the call it answered can fail now rather than at its timeout. */
typedef void (*tg_child_message_cb)(void *ud, const char *p, size_t n, const struct tg_json_doc *doc,
                                    struct tg_buf *own);
typedef void (*tg_child_exit_cb)(void *ud, int64_t status, int term_signal);

/* tally (may be NULL): counted in live from spawn, in leaving from tg_child_kill() to the exit. */
struct tg_child *tg_child_spawn(uv_loop_t *loop, const struct tg_upstream_conf *uc, size_t max_line,
                                struct tg_child_tally *tally, tg_child_message_cb on_message, tg_child_exit_cb on_exit,
                                void *ud, int *err);
/* A child spawned earlier (a warm one) given to its user. */
void tg_child_bind(struct tg_child *ch, tg_child_message_cb on_message, tg_child_exit_cb on_exit, void *ud);
/* Write one message and a newline. Returns 0 or a negative error (the child is gone). */
int tg_child_send(struct tg_child *ch, const char *p, size_t n);
void tg_child_kill(struct tg_child *ch);
int tg_child_alive(const struct tg_child *ch);
void tg_child_pause(struct tg_child *ch);
void tg_child_resume(struct tg_child *ch);
int tg_child_pid(const struct tg_child *ch);
/* stdout lines skipped as not JSON-RPC so far. */
size_t tg_child_skipped(const struct tg_child *ch);
size_t tg_child_live_count(void);

#endif
