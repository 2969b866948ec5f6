/* `tollgate policy check|explain|test`: a policy judged before it is deployed, without a loop,
 * a listener or an upstream (core/cmd/policy_cmd.c; the explanations come from policy/explain.h).
 *
 * Exit status (stable, for scripts):
 *   check    0 every file loads, 1 some file does not, 2 bad arguments
 *   explain  0 allow, 1 deny, 3 limited, 4 approve, 2 bad arguments or a conf, grant or upstream
 *            that cannot be used
 *   test     0 every case passed, 1 some case failed, 2 bad arguments or a policy or cases file
 *            that cannot be loaded (nothing was tested) */
#ifndef TG_POLICY_CLI_H
#define TG_POLICY_CLI_H

/* argv[0] is "policy"; argv[1] the subcommand. Returns the exit status above. */
int tg_policy_cli(int argc, char **argv);

#endif
