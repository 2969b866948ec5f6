/* `tollgate pin [-c CONF] [--out FILE] UPSTREAM` and `tollgate pin --diff [-c CONF] UPSTREAM`:
 * list an upstream's tools as `tollgate scan` does (core/cmd/scan_client.h; the conf's URL or
 * command, its headers, TLS settings, env and cwd) and write its pin file (policy/pins.h), or
 * compare the pin file with what the upstream lists now.
 *
 * The pin file goes to --out, else the upstream's pins = "FILE", else beside its policy as
 * POLICY_BASENAME.pins.json (the conf line to add is printed), else beside the conf as
 * UPSTREAM.pins.json.
 *
 * Exit status: pin: 0 written, 1 the upstream could not be listed or the file not written, 2 bad
 * arguments or conf. --diff: 0 no difference, 1 differences (printed), 2 errors. */
#ifndef TG_CMD_PIN_H
#define TG_CMD_PIN_H

#include <stddef.h>

/* argv[0] is "pin". */
int tg_pin_cli(int argc, char **argv);

struct tg_upstream_conf;
struct tg_policy;
struct tg_policy_explain;
/* `tollgate policy explain`'s pin line for tool of upstream u into pin (n bytes; "" when u has no
 * pins). A tool the pins refuse whatever the upstream lists (not pinned, default: deny) gets the
 * gateway's refusal in e, as the gateway decides it before the policy, unless refused (the
 * bindings refused it first). */
void tg_pin_explain(const struct tg_upstream_conf *u, const struct tg_policy *p, const char *tool, int refused,
                    struct tg_policy_explain *e, char *pin, size_t n);

#endif
