/* The counter scripts of the Redis client (cluster/redis/redis.c): one Lua script per kind of counter
 * operation, each reproducing policy/counters.c's local store bit for bit (the history scripts,
 * cluster/redis/history.c, keep lists instead).
 *
 * Why this works exactly: Redis's Lua 5.1 numbers are IEEE doubles, its arithmetic is the same
 * correctly rounded + - * / as the C code's, and floor, ceil and log10 are the same libm's. What
 * Lua lacks is written here the way C defines it: nearbyint (round half to even), the exact powers
 * of ten, DBL_EPSILON. Numbers cross the wire as "%.17g" strings both ways, which tg_num_parse
 * (C) and dec() (Lua: the same strict grammar, then tonumber) read back to the same double: Lua
 * numbers returned as such would be truncated to Redis integers. Neither accepts nan, inf, hex
 * or a value out of range, and a stored value below 0 is refused too: a key holding one fails
 * its op, so the decision fails closed.
 *
 * A key holds "stamp value" (two "%.17g" numbers): a bucket's last refill and tokens, or a
 * window's start and count. Its TTL is the local store's expire_ms less the caller's now_ms (the
 * clock is always the caller's, never Redis TIME); an update that the local store makes without
 * moving expire_ms keeps the TTL (KEEPTTL). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "cluster/redis/scripts.h"
#include "core/base/num.h"

#define LUA_HELPERS                                                                                                  \
    "local EPS = 2.220446049250313080847263336181640625e-16\n"                                                     \
    "local P10 = {1e1,1e2,1e3,1e4,1e5,1e6,1e7,1e8,1e9,1e10,1e11,1e12,1e13,1e14,1e15,1e16,1e17,1e18,1e19,1e20,"     \
    "1e21,1e22}\n"                                                                                                 \
    "local floor, ceil, abs = math.floor, math.ceil, math.abs\n"                                                   \
    "local function fmt(x) return string.format('%.17g', x) end\n"                                                \
    /* nearbyint in the default rounding mode: half to even. x - floor(x) is exact. */                             \
    "local function rint(x)\n"                                                                                     \
    "  if x ~= x or x >= 4503599627370496 or x <= -4503599627370496 then return x end\n"                           \
    "  local f = floor(x)\n"                                                                                       \
    "  local d = x - f\n"                                                                                          \
    "  if d > 0.5 then return f + 1 end\n"                                                                         \
    "  if d < 0.5 then return f end\n"                                                                             \
    "  if f % 2 == 0 then return f end\n"                                                                          \
    "  return f + 1\n"                                                                                             \
    "end\n"                                                                                                        \
    "local function refill(dt, cap, w)\n"                                                                          \
    "  if dt <= 0 then return 0 end\n"                                                                             \
    "  if dt >= w then return cap end\n"                                                                           \
    "  return dt * cap / w\n"                                                                                      \
    "end\n"                                                                                                        \
    "local function whole(t)\n"                                                                                    \
    "  local r = rint(t)\n"                                                                                        \
    "  local m = abs(t)\n"                                                                                         \
    "  if not (m > 1) then m = 1 end\n"                                                                            \
    "  if abs(t - r) <= 8 * EPS * m then return r + 0 end\n"                                                       \
    "  return t\n"                                                                                                 \
    "end\n"                                                                                                        \
    "local function settle(x, a, b)\n"                                                                             \
    "  if x == floor(x) or x ~= x or x == math.huge or x == -math.huge then\n"                                     \
    "    if x == 0 then return 0 end\n"                                                                            \
    "    return x\n"                                                                                               \
    "  end\n"                                                                                                      \
    "  local mag = abs(a)\n"                                                                                       \
    "  if abs(b) > mag then mag = abs(b) end\n"                                                                    \
    "  local k = 14 - floor(math.log10(mag))\n"                                                                    \
    "  if k <= 0 or k >= 23 then return x end\n"                                                                   \
    "  local q = P10[k]\n"                                                                                         \
    "  local r = rint(x * q) / q\n"                                                                                \
    "  if r == 0 then return 0 end\n"                                                                              \
    "  return r\n"                                                                                                 \
    "end\n"                                                                                                        \
    "local function ttl(ms)\n"                                                                                     \
    "  if not (ms >= 1) then ms = 1 end\n"                                                                         \
    "  if ms > 1e15 then ms = 1e15 end\n"                                                                          \
    "  return string.format('%.0f', ms)\n"                                                                         \
    "end\n"                                                                                                        \
    /* A stored number is read as core/base/num.c reads one: a JSON number with a finite value, and   \
     * never below 0 (no script writes a negative stamp or count; a window at -1e300 would never  \
     * fill). Lua's tonumber is strtod and more (hex, inf, nan, 1e999): never alone. */             \
    "local function dec(s)\n"                                                                      \
    "  if not s then return nil end\n"                                                             \
    "  local i, f, e = string.match(s, '^%-?(%d+)(%.?%d*)(.*)$')\n"                               \
    "  if not i or (#i > 1 and string.sub(i, 1, 1) == '0') or f == '.' then return nil end\n"     \
    "  if e ~= '' and not string.match(e, '^[eE][%+%-]?%d+$') then return nil end\n"              \
    "  local x = tonumber(s)\n"                                                                    \
    "  if x == nil or x ~= x or x == math.huge or x < 0 then return nil end\n"                   \
    "  return x\n"                                                                                 \
    "end\n"                                                                                        \
    /* a value a script is about to store, as dec() would read it back (fmt then dec is exact) */ \
    "local function valid(x) return x == x and x >= 0 and x < math.huge end\n"

/* A single op's script: its key read and checked, then one op function below. */
#define LUA_COMMON                                                                                 \
    LUA_HELPERS                                                                                    \
    "local stamp, value\n"                                                                         \
    "local raw = redis.pcall('GET', KEYS[1])\n"                                                    \
    /* a key of another type (a list, a hash) is poison as well: no error to fall back from */    \
    "if type(raw) == 'table' then raw = '' end\n"                                                  \
    "if raw then\n"                                                                                \
    "  local s, v = string.match(raw, '^(%S+) (%S+)$')\n"                                          \
    "  stamp, value = dec(s), dec(v)\n"                                                            \
    /* a key the scripts did not write as such fails the op, never reads as an empty counter */    \
    "  if stamp == nil or value == nil then\n"                                                     \
    "    return redis.error_reply('" TG__REDIS_BADVALUE " counter key holds no finite decimal numbers')\n" \
    "  end\n"                                                                                      \
    "end\n"

/* The ops, as functions of the key's state (raw: the key exists; stamp, value: its numbers) and
 * the op's arguments. Each writes its reply's elements into out from index o (take 3: ok, level,
 * retry_ms; get and add 2: ok, value; give and sub 1: 1) and returns, when the key changes, its new
 * stamp and value and the TTL to set in ms (for ttl(); nil: KEEPTTL). A value in a reply is a
 * number when it is a whole number Redis can carry as an integer (below 2^53, and not -0), else
 * its "%.17g" text; the C side reads both to the same double. The single scripts and the batch
 * script run the same text, so a batch computes bit for bit what its ops one by one would. */
#define OP_NUM                                                                                    \
    "local function num(x)\n"                                                                      \
    "  if x == floor(x) and x < 9007199254740992 and x > -9007199254740992 and (x ~= 0 or 1 / x > 0) then\n" \
    "    return x\n"                                                                               \
    "  end\n"                                                                                      \
    "  return fmt(x)\n"                                                                            \
    "end\n"
#define OP_TAKE                                                                                   \
    "local function op_take(out, o, raw, stamp, value, cap, w, amount, now, extra)\n"              \
    "  local tokens = cap\n"                                                                       \
    "  if raw then\n"                                                                              \
    "    tokens = whole(value + refill(now - stamp, cap, w))\n"                                    \
    "    if tokens > cap then tokens = cap end\n"                                                  \
    "  end\n"                                                                                      \
    /* take up to (a lease, cluster/lease.c): amount + extra when the bucket has it, else amount */ \
    "  local want = amount\n"                                                                      \
    "  if extra then\n"                                                                            \
    "    out[o + 3] = 0\n"                                                                         \
    "    if extra > 0 and tokens >= amount + extra then want = amount + extra end\n"               \
    "  end\n"                                                                                      \
    "  if not (tokens >= amount) then\n"                                                           \
    "    local retry = -1\n"                                                                       \
    "    if not (amount > cap) then\n"                                                             \
    "      local ms = ceil((amount - tokens) * w / cap)\n"                                         \
    "      if ms < 1 then ms = 1 end\n"                                                            \
    "      while ms < w and not (whole(tokens + refill(ms, cap, w)) >= amount) do ms = ms + 1 end\n" \
    "      retry = ms\n"                                                                           \
    "    end\n"                                                                                    \
    "    out[o], out[o + 1], out[o + 2] = 0, num(tokens), retry\n"                                 \
    "    if not raw then return end\n"                                                             \
    "    local st = stamp\n"                                                                       \
    "    if now > st then st = now end\n"                                                          \
    "    return st, tokens\n"                                                                      \
    "  end\n"                                                                                      \
    "  local st = 0\n"                                                                             \
    "  if raw then st = stamp end\n"                                                               \
    "  tokens = whole(tokens - want)\n"                                                            \
    "  if now > st then st = now end\n"                                                            \
    "  local expire = st + ceil((cap - tokens) * w / cap) + 1\n"                                   \
    "  out[o], out[o + 1], out[o + 2] = 1, num(tokens), 0\n"                                       \
    "  if extra then out[o + 3] = num(want) end\n"                                                 \
    "  return st, tokens, expire - now\n"                                                          \
    "end\n"
#define OP_GIVE                                                                                   \
    "local function op_give(out, o, raw, stamp, value, cap, amount)\n"                             \
    "  out[o] = 1\n"                                                                               \
    "  if not raw then return end\n"                                                               \
    "  local v = whole(value + amount)\n"                                                          \
    "  if v > cap then v = cap end\n"                                                              \
    "  return stamp, v\n"                                                                          \
    "end\n"
#define OP_GET                                                                                    \
    "local function op_get(out, o, raw, stamp, value, ws)\n"                                       \
    "  out[o] = 1\n"                                                                               \
    "  if not raw or stamp ~= ws then out[o + 1] = 0 else out[o + 1] = num(value) end\n"           \
    "end\n"
#define OP_ADD                                                                                    \
    "local function op_add(out, o, raw, stamp, value, ws, w, amount, limit, op, now)\n"            \
    "  local cur = 0\n"                                                                            \
    "  if raw and stamp == ws then cur = value end\n"                                              \
    "  local nxt = settle(cur + amount, cur, amount)\n"                                            \
    "  local fits = true\n"                                                                        \
    "  if op == 1 then fits = nxt <= limit elseif op == 2 then fits = nxt < limit end\n"           \
    "  if not (amount >= 0) or nxt == math.huge or not fits then\n"                                \
    "    out[o], out[o + 1] = 0, num(cur)\n"                                                       \
    "    return\n"                                                                                 \
    "  end\n"                                                                                      \
    "  local left = w\n"                                                                           \
    "  if now > 0 and now >= ws then left = ws + w - now end\n"                                    \
    "  out[o], out[o + 1] = 1, num(nxt)\n"                                                         \
    "  return ws, nxt, left\n"                                                                     \
    "end\n"
#define OP_SUB                                                                                    \
    "local function op_sub(out, o, raw, stamp, value, ws, amount)\n"                               \
    "  out[o] = 1\n"                                                                               \
    "  if not raw or stamp ~= ws then return end\n"                                                \
    "  local nxt = settle(value - amount, value, amount)\n"                                        \
    "  if not (nxt > 0) then nxt = 0 end\n"                                                        \
    "  return ws, nxt\n"                                                                           \
    "end\n"
/* A single script's end: the op's write, then its reply. */
#define OP_STORE                                                                                  \
    "if st then\n"                                                                                 \
    "  local s = fmt(st) .. ' ' .. fmt(v)\n"                                                       \
    "  if px then redis.call('SET', KEYS[1], s, 'PX', ttl(px)) else redis.call('SET', KEYS[1], s, 'KEEPTTL') end\n" \
    "end\n"                                                                                        \
    "return y\n"

/* ARGV: capacity, window_ms, amount, now_ms, and for a take up to (a lease) extra. Returns
 * {ok, level, retry_ms (-1: never)}, with extra {ok, level, retry_ms, taken}. */
static const char take_lua[] = LUA_COMMON OP_NUM OP_TAKE
    "local y = {}\n"
    "local ex = nil\n"
    "if ARGV[5] then ex = tonumber(ARGV[5]) end\n"
    "local st, v, px = op_take(y, 1, raw, stamp, value, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),\n"
    "  tonumber(ARGV[4]), ex)\n" OP_STORE;

/* ARGV: capacity, amount. Returns {1}. */
static const char give_lua[] = LUA_COMMON OP_GIVE
    "local y = {}\n"
    "local st, v, px = op_give(y, 1, raw, stamp, value, tonumber(ARGV[1]), tonumber(ARGV[2]))\n" OP_STORE;

/* ARGV: window_start. Returns {1, value}. */
static const char get_lua[] = LUA_COMMON OP_NUM OP_GET
    "local y = {}\n"
    "op_get(y, 1, raw, stamp, value, tonumber(ARGV[1]))\n"
    "return y\n";

/* ARGV: window_start, window_ms, amount, limit, limit_op (0 none, 1 <=, 2 <), now_ms (0: unknown,
 * the TTL is then the whole window, which is never shorter than what is left of it). Returns
 * {ok, value}. */
static const char add_lua[] = LUA_COMMON OP_NUM OP_ADD
    "local y = {}\n"
    "local st, v, px = op_add(y, 1, raw, stamp, value, tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),\n"
    "  tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))\n" OP_STORE;

/* ARGV: window_start, amount. Returns {1}. */
static const char sub_lua[] = LUA_COMMON OP_SUB
    "local y = {}\n"
    "local st, v, px = op_sub(y, 1, raw, stamp, value, tonumber(ARGV[1]), tonumber(ARGV[2]))\n" OP_STORE;

/* The counter ops of several requests in one call (cluster/redis/batch.c). KEYS: the distinct
 * keys. ARGV: per op, its kind (enum tg_counter_op_kind, 0..4, or 5: a take up to, the 5
 * arguments of a take with extra), the index of its key in KEYS, then the arguments its single
 * script takes. The ops run in order, exactly as their single scripts
 * would one after the other: each key is read once (GET) into a table that each op reads and
 * updates, and each key an op changed is written once at the end (SET), with the TTL its last
 * PX gave it (KEEPTTL when no op set one). Returns one flat array: per op, the elements of its
 * single script's reply (3 for a take, 4 for a take up to, 2 for a get or an add, 1 for a give or
 * a sub). A key whose
 * value is not two finite decimal numbers of 0 or more fails each op on it, as it would fail each
 * single script: that op's first element is then the string TGBADVALUE (the rest 0), and the
 * other ops go on. */
static const char batch_lua[] = LUA_HELPERS OP_NUM OP_TAKE OP_GIVE OP_GET OP_ADD OP_SUB
    "local NARGS, NOUT = {[0] = 4, 2, 1, 6, 2, 5}, {[0] = 3, 1, 2, 2, 1, 4}\n"
    "local cache, dirty, nd, out, o = {}, {}, 0, {}, 1\n"
    "local function load(k)\n"
    "  local c = {raw = false}\n"
    "  local raw = redis.pcall('GET', KEYS[k])\n"
    "  if type(raw) == 'table' then raw = '' end\n"
    "  if raw then\n"
    "    local s, v = string.match(raw, '^(%S+) (%S+)$')\n"
    "    c.raw, c.stamp, c.value = true, dec(s), dec(v)\n"
    "    c.bad = c.stamp == nil or c.value == nil\n"
    "  end\n"
    "  cache[k] = c\n"
    "  return c\n"
    "end\n"
    "local i, n = 1, #ARGV\n"
    "while i <= n do\n"
    "  local kind, k = tonumber(ARGV[i]), tonumber(ARGV[i + 1])\n"
    "  local na = NARGS[kind]\n"
    "  if na == nil or KEYS[k] == nil or i + 1 + na > n then return redis.error_reply('ERR tollgate batch: malformed') end\n"
    "  local a = i + 2\n"
    "  i = a + na\n"
    "  local c = cache[k] or load(k)\n"
    "  if c.bad then\n"
    "    out[o] = '" TG__REDIS_BADVALUE "'\n"
    "    for j = 1, NOUT[kind] - 1 do out[o + j] = 0 end\n"
    "  else\n"
    "    local st, v, px\n"
    "    if kind == 0 or kind == 5 then\n"
    "      local ex = nil\n"
    "      if kind == 5 then ex = tonumber(ARGV[a + 4]) end\n"
    "      st, v, px = op_take(out, o, c.raw, c.stamp, c.value, tonumber(ARGV[a]), tonumber(ARGV[a + 1]),\n"
    "        tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), ex)\n"
    "    elseif kind == 1 then\n"
    "      st, v, px = op_give(out, o, c.raw, c.stamp, c.value, tonumber(ARGV[a]), tonumber(ARGV[a + 1]))\n"
    "    elseif kind == 2 then\n"
    "      op_get(out, o, c.raw, c.stamp, c.value, tonumber(ARGV[a]))\n"
    "    elseif kind == 3 then\n"
    "      st, v, px = op_add(out, o, c.raw, c.stamp, c.value, tonumber(ARGV[a]), tonumber(ARGV[a + 1]),\n"
    "        tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]))\n"
    "    else\n"
    "      st, v, px = op_sub(out, o, c.raw, c.stamp, c.value, tonumber(ARGV[a]), tonumber(ARGV[a + 1]))\n"
    "    end\n"
    "    if st then\n"
    /* what the next single script would read back: the numbers, or poison if one is not valid */
    "      c.raw, c.stamp, c.value = true, st, v\n"
    "      c.bad = not (valid(st) and valid(v))\n"
    "      if px then c.px = px end\n"
    "      if not c.dirty then\n"
    "        c.dirty = true\n"
    "        nd = nd + 1\n"
    "        dirty[nd] = k\n"
    "      end\n"
    "    end\n"
    "  end\n"
    "  o = o + NOUT[kind]\n"
    "end\n"
    "for j = 1, nd do\n"
    "  local k = dirty[j]\n"
    "  local c = cache[k]\n"
    "  local s = fmt(c.stamp) .. ' ' .. fmt(c.value)\n"
    "  if c.px then redis.call('SET', KEYS[k], s, 'PX', ttl(c.px)) else redis.call('SET', KEYS[k], s, 'KEEPTTL') end\n"
    "end\n"
    "return out\n";

const char *const tg__redis_scripts[TG__REDIS_NSCRIPTS] = {
    [TG_COP_BUCKET_TAKE] = take_lua, [TG_COP_BUCKET_GIVE] = give_lua, [TG_COP_WINDOW_GET] = get_lua,
    [TG_COP_WINDOW_ADD] = add_lua,   [TG_COP_WINDOW_SUB] = sub_lua,  [TG_COP_HIST_GET] = tg__redis_hist_get_lua,
    [TG_COP_HIST_ADD] = tg__redis_hist_add_lua, [TG_COP_HIST_DEL] = tg__redis_hist_del_lua,
    [TG__REDIS_SCRIPT_BATCH] = batch_lua,
};

/* ---- the arguments of an op, and its answer ------------------------------------------------ */

/* A number a script answered: an integer (a whole number below 2^53), or a string; -1 when the
 * reply is neither, -2 when the string is not a finite decimal number (core/base/num.c: no nan,
 * inf, hex or 1e999 becomes a counter's value). */
static int parse_double(const redisReply *e, double *out)
{
    if (e && e->type == REDIS_REPLY_INTEGER && e->integer < (1LL << 53) && e->integer > -(1LL << 53)) {
        *out = (double)e->integer; /* a whole number the script sent as one (num()) */
        return 0;
    }
    if (!e || e->type != REDIS_REPLY_STRING)
        return -1;
    return tg_num_parse(e->str, e->len, out) == 0 ? 0 : -2;
}

/* Fill op from a script's reply: {ok, "value", retry} (take), {ok, "value"} (add, get), {1}.
 * 0; -1 for a reply of another shape; -2 when its value is not a finite decimal number. */
int tg__redis_op_parse(struct tg_counter_op *op, const redisReply *y, const struct tg_redis_hist *hist)
{
    int e;
    if (y->type != REDIS_REPLY_ARRAY || y->elements < 1 || y->element[0]->type != REDIS_REPLY_INTEGER)
        return -1;
    op->ok = y->element[0]->integer ? 1 : 0;
    switch (op->kind) {
    case TG_COP_BUCKET_TAKE:
        if (y->elements != (op->extra > 0 ? 4u : 3u) || y->element[2]->type != REDIS_REPLY_INTEGER)
            return -1;
        if ((e = parse_double(y->element[1], &op->value)) < 0)
            return e;
        op->retry_ms = y->element[2]->integer < 0 ? UINT64_MAX : (uint64_t)y->element[2]->integer;
        op->taken = op->ok ? op->amount : 0;
        if (op->extra > 0) {
            if ((e = parse_double(y->element[3], &op->taken)) < 0)
                return e;
            /* never more than asked for, nor less than a take that succeeded took */
            if (op->ok ? !(op->taken >= op->amount && op->taken <= op->amount + op->extra) : op->taken != 0)
                return -2;
        }
        return 0;
    case TG_COP_WINDOW_GET:
    case TG_COP_WINDOW_ADD:
        if (y->elements != 2)
            return -1;
        return parse_double(y->element[1], &op->value);
    case TG_COP_BUCKET_GIVE:
    case TG_COP_WINDOW_SUB:
        return y->elements == 1 ? 0 : -1;
    case TG_COP_HIST_GET: return tg__redis_hist_parse(op, y, hist);
    case TG_COP_HIST_ADD:
    case TG_COP_HIST_DEL: return y->elements == 1 ? 0 : -1;
    }
    return -1;
}

/* The decimal digits of x into out (at least 21 bytes), NUL-terminated; returns their length. */
static size_t fmt_i64(char *out, int64_t x)
{
    char tmp[24];
    size_t n = 0, len = 0;
    uint64_t u = x < 0 ? 0 - (uint64_t)x : (uint64_t)x;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (x < 0)
        out[len++] = '-';
    while (n > 0)
        out[len++] = tmp[--n];
    out[len] = 0;
    return len;
}

/* x as "%.17g" writes it (out: 32 bytes); returns the length. An integral value below 1e15 (every
 * amount, capacity and limit a policy can state as a whole number) is its digits exactly as
 * "%.17g" gives them, without the floating-point formatter (a decision's most expensive part of
 * its request). -0 keeps its sign through snprintf. */
static size_t fmt_g17(char *out, double x)
{
    if (x > -1e15 && x < 1e15 && x == (double)(int64_t)x && !(x == 0 && signbit(x)))
        return fmt_i64(out, (int64_t)x);
    int n = snprintf(out, 32, "%.17g", x);
    return n < 0 ? 0 : (size_t)n;
}

void tg__redis_op_argv(struct tg__redis_argv *v, const struct tg_counter_op *op, const char *prefix, const char *sha,
                       const struct tg_redis_hist *hist)
{
    char(*a)[32] = v->num;
    size_t al[6];
    int na = 0;
    int is_hist = op->kind == TG_COP_HIST_GET || op->kind == TG_COP_HIST_ADD || op->kind == TG_COP_HIST_DEL;
    /* prefix, "c:" or "h:", then h1 and h2 as 16 lowercase hex digits each */
    static const char hex[] = "0123456789abcdef";
    size_t pl = strlen(prefix);
    if (pl > sizeof(v->key) - 35)
        pl = sizeof(v->key) - 35;
    memcpy(v->key, prefix, pl);
    char *k = v->key + pl;
    *k++ = is_hist ? 'h' : 'c';
    *k++ = ':';
    for (int i = 60; i >= 0; i -= 4)
        *k++ = hex[(op->h1 >> i) & 15];
    for (int i = 60; i >= 0; i -= 4)
        *k++ = hex[(op->h2 >> i) & 15];
    *k = 0;
    v->argc = 0;
    v->argv[v->argc] = "EVALSHA";
    v->argvlen[v->argc++] = 7;
    v->argv[v->argc] = sha;
    v->argvlen[v->argc++] = strlen(sha);
    v->argv[v->argc] = "1";
    v->argvlen[v->argc++] = 1;
    v->argv[v->argc] = v->key;
    v->argvlen[v->argc++] = (size_t)(k - v->key);
    if (is_hist) {
        tg__redis_hist_argv(v, op, hist);
        return;
    }
#define I(x) (al[na] = fmt_i64(a[na], (int64_t)(x)), na++)
#define G(x) (al[na] = fmt_g17(a[na], (x)), na++)
    switch (op->kind) {
    case TG_COP_BUCKET_TAKE:
        G(op->capacity);
        I(op->window_ms);
        G(op->amount);
        I(op->now_ms);
        if (op->extra > 0)
            G(op->extra);
        break;
    case TG_COP_BUCKET_GIVE:
        G(op->capacity);
        G(op->amount);
        break;
    case TG_COP_WINDOW_GET: I(op->window_start); break;
    case TG_COP_WINDOW_ADD:
        I(op->window_start);
        I(op->window_ms);
        G(op->amount);
        G(op->limit);
        I(op->limit_op);
        I(op->now_ms);
        break;
    case TG_COP_WINDOW_SUB:
        I(op->window_start);
        G(op->amount);
        break;
    case TG_COP_HIST_GET:
    case TG_COP_HIST_ADD:
    case TG_COP_HIST_DEL:
        break;
    }
#undef I
#undef G
    for (int i = 0; i < na; i++) {
        v->argvlen[v->argc] = al[i];
        v->argv[v->argc++] = a[i];
    }
}
