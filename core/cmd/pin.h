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

/* argv[0] is "pin". */
int tg_pin_cli(int argc, char **argv);

#endif
