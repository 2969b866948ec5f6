/* Process log. One line per event, logfmt or JSON (log.format).
 *
 * Callers pass a message and logfmt pairs (`key=value key2="quoted value"`);
 * the JSON format converts those pairs. Values that come from a peer must be
 * passed through tg_log_esc() first: it quotes, escapes and truncates them so
 * a peer can never forge a field or a line. Secrets are never logged. */
#ifndef TG_LOG_H
#define TG_LOG_H

#include <stddef.h>
#include <stdint.h>

#include "core/base/buf.h"

enum tg_log_level { TG_LOG_ERROR = 0, TG_LOG_WARN = 1, TG_LOG_INFO = 2, TG_LOG_DEBUG = 3 };
enum tg_log_format { TG_LOG_LOGFMT = 0, TG_LOG_JSON = 1 };

/* Configure the sink. path NULL or "" = stderr. Returns 0 or -errno. */
int tg_log_setup(int level, int format, const char *path);
/* SIGUSR1: reopen the file (no-op for stderr). */
int tg_log_reopen(void);
int tg_log_enabled(int level);
/* From start to stop, lines are written by a thread of the log's own (tg_log never blocks on
 * the disk or a pipe; it may be called from any thread). stop writes what is left. */
int tg_log_start(void);
void tg_log_stop(void);
int tg_log_parse_level(const char *s);

void tg_log(int level, const char *msg, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Quote and escape untrusted bytes for a log value: returns out (NUL-terminated, at most outsz-1 bytes). */
const char *tg_log_esc(char *out, size_t outsz, struct tg_slice s);

#define TG_LOG_ON(lvl) tg_log_enabled(lvl)

#endif
