/* Resource URIs in one normal form (RFC 3986 §6.2.2), so that a policy's globs, the decision
 * and what the upstream is sent all read the same URI. Pure functions: no allocation, no I/O.
 *
 * tg_uri_normalize() writes, in order:
 *   - the scheme, lower-cased (a URI without one cannot be parsed: refused);
 *   - percent-encoding: an escape of an unreserved character (ALPHA DIGIT - . _ ~) decoded, the
 *     hex of every other escape upper-cased; a malformed escape is refused;
 *   - the authority (after "//") with its host lower-cased (other schemes' userinfo and port as they are);
 *     for the schemes a URL parser treats as special (file, http, https, ws, wss, ftp), what it
 *     drops dropped too: a file: URI's "localhost" host, an empty or default port ("https://h:443/"
 *     is "https://h/"); such a URI without "//" after its scheme ("file:/x", "file:x",
 *     "http:h/x", which the parser reads as "file:///x" and "http://h/x") is refused, and so is
 *     one whose host holds a non-ASCII byte or an escape (the parser maps it: IDNA) or is an
 *     IPv4 address written another way than a.b.c.d (the parser rewrites it), or that has a
 *     user name or password before the host (a client fetching it reads the host alone);
 *   - the path with empty segments collapsed ("//" -> "/") and then dot segments removed
 *     (§5.2.4), so "a//../b" is "a/b"'s parent's "b" as a file system reads it;
 *   - the query and fragment as they are (escapes as above).
 * Refused whatever else it holds: more than TG_URI_MAX bytes, an encoded "/" (%2F) or "\" (%5C), any "\", a NUL (raw or
 * %00), a control character (raw or encoded), and a ".." segment left after normalisation
 * (in the query or fragment, or of a path dot-segment removal cannot remove).
 * The normal form is never longer than the input, and normalising it again gives itself. */
#ifndef TG_POLICY_URI_H
#define TG_POLICY_URI_H

#include <stddef.h>

/* The longest URI a decision reads: a longer one is refused (resources/read, subscribe, list
 * entries, updates), so that matching a peer's URI against a policy's globs, which costs its
 * length times the patterns', stays small whatever the body limit allows. Browsers and
 * servers draw their line about here too. */
#define TG_URI_MAX 8192

/* Normalise in[0..n) into out, which has room for n + 1 bytes (NUL-terminated). Returns the
 * length written, or -1 with *why (static text, for an error message) if the URI is refused. */
long tg_uri_normalize(const char *in, size_t n, char *out, const char **why);

/* The percent-encoding of in[0..n) in its normal form, into out (room for n bytes; no NUL is
 * written): an escape of an unreserved character decoded, the hex of every other upper-cased,
 * every other byte as it is. Returns the length written; -1 with *why for a malformed escape,
 * -2 with *why for an escape of a NUL, "/", "\" or a control character. tg_uri_normalize's
 * escape step, for a caller with refusals of its own (core/conf/grants.c's pinned roots). */
long tg_uri_normalize_escapes(const char *in, size_t n, char *out, const char **why);

/* RFC 3986 §5.2.4 remove_dot_segments over path[0..n), in place; returns the new length. The
 * path is taken as it is (no decoding); exposed for the RFC's own examples. */
size_t tg_uri_remove_dot_segments(char *path, size_t n);

#endif
