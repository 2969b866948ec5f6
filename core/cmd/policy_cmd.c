/* `tollgate policy check|explain|test` (core/cmd/policy_cmd.h). Everything here runs before any
 * loop exists and touches nothing but the files it is given: decisions are taken on a scratch
 * counter store made for the command, so no real counter is consumed and nothing is contacted. */
#include "core/cmd/policy_cmd.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "core/cmd/pin.h"
#include "core/conf/conf.h"
#include "core/base/json.h"
#include "core/cmd/policy_bind.h"
#include "core/cmd/policy_cases.h"
#include "core/wire/msg.h"
#include "policy/explain.h"
#include "policy/scopes.h"
#include "policy/policy.h"

#define CASES_MAX_REPEAT 100000

static const char usage_text[] =
    "usage:\n"
    "  tollgate policy check FILE...\n"
    "      Load each policy (JSON or YAML, either PolicyLayer shape) as the gateway would. Errors and\n"
    "      warnings are printed as FILE: PATH.IN.FILE: reason (errors on stderr, warnings on stdout),\n"
    "      then \"FILE: ok (N tools)\" or \"FILE: invalid\". Exit 0 if every file loads, 1 if not.\n"
    "      An unknown field is an error (\"did you mean `action`?\" when a known one is close); a\n"
    "      policy without \"default\" denies what it does not name, and a note says so.\n"
    "\n"
    "  tollgate policy explain [-c CONF] [--grant G] [--subject S [--issuer I]] [--upstream U]\n"
    "                          [--session S] [--repeat N] [--scopes 'S1 S2'] [--after TOOL[:AGO]]...\n"
    "                          [--attribute NAME=VALUE]... [--claim NAME=VALUE]...\n"
    "                          (--call '{\"name\":T,\"arguments\":{...}}' | --method M [--params JSON])\n"
    "      Decide one call with the policy that governs grant G's calls to upstream U in CONF\n"
    "      (default conf/tollgate.conf; G may be left out when CONF has one grant, U when it has a\n"
    "      default upstream; --subject names the user inside the grant, for counters of scope\n"
    "      \"subject\", default the grant itself, as for a static token; --issuer the issuer of that\n"
    "      user's JWT, default none, as for a static token or a certificate: one subject name from\n"
    "      two issuers is two users). Nothing is contacted and no\n"
    "      real counter is taken: the call is decided\n"
    "      once, on fresh counters (--repeat N: N times at one instant, the last one explained, so\n"
    "      a rate limit shows). Prints the decision (allow, deny, limited, approve), its reason,\n"
    "      the rule and where it is in the file (and for a rule with conditions, the condition that\n"
    "      did not hold), whether tools/list hides the tool, and the counters a call takes or reads.\n"
    "      --method decides resources/read and resources/subscribe (params.uri), prompts/get\n"
    "      (params.name), completion/complete (params.ref), tools/call (params), and says whether\n"
    "      any other method may be sent. \"scopes:\" names the OAuth scopes the policy requires for\n"
    "      the call; with --scopes (the token's scopes, space-separated, '' for none) a call that\n"
    "      lacks some is explained as the gateway refuses it, before any rule: deny, rule\n"
    "      insufficient_scope (HTTP 403 with WWW-Authenticate: Bearer error=\"insufficient_scope\").\n"
    "      --after TOOL[:AGO] (repeated; AGO \"30s\", \"5m\", default 1 s) or '{\"tool\":T,\"args\":{..},\"ago\":A}'\n"
    "      (or resource, prompt): an earlier call of the caller, for history conditions and brakes.\n"
    "      A tool whose entry has \"set\" or \"forbid\" is decided on its final arguments, printed as\n"
    "      \"arguments:\"; --attribute gives a grant attribute (over CONF's grants[].attributes),\n"
    "      --claim a claim of the caller's token (VALUE as JSON when it is JSON, else a string); a\n"
    "      template naming one that is not given denies, rule set, as the gateway does.\n"
    "      Exit 0 allow, 1 deny, 3 limited, 4 approve, 2 on bad arguments or a conf that does not load.\n"
    "\n"
    "  tollgate policy test FILE CASES.yaml\n"
    "      Run cases against the policy in FILE, in order, on one fresh set of counters (so a rate\n"
    "      limit can be tested with repeat), all at the same instant (windows never roll, buckets never\n"
    "      refill). CASES.yaml (YAML or JSON) is a list of cases, or {cases: [...]}:\n"
    "        - name: prod deploys are refused      # optional\n"
    "          call: {name: deploy, arguments: {env: production}}\n"
    "          expect: deny                        # allow | deny | limited | approve\n"
    "          reason: production                  # optional: a substring of the reason\n"
    "          rule: no-prod                       # optional: a substring of the deciding rule or its path\n"
    "          hidden: true                        # optional: tools/list hides the tool (true/false)\n"
    "          grant: ci                           # optional (default \"test\"); also session (\"test-session\")\n"
    "          subject: alice                      # optional: the user inside the grant (default: the grant)\n"
    "          issuer: https://idp.example/        # optional: that user's JWT issuer (default: none)\n"
    "          repeat: 3                           # optional: make the call 3 times; expect is the last one's\n"    "          history: [read_env, {tool: fetch, args: {url: x}, ago: 5m}]  # optional: earlier calls of\n"
    "                                              # the same caller, remembered first (AGO default 1 s)\n"
    "          scopes: [deploy]                    # optional: the token's scopes (a list, or 'a b'); one\n"
    "                                              # that lacks what the policy requires is denied,\n"
    "                                              # rule insufficient_scope (default: not checked)\n"
    "          attributes: {tenant: acme}          # optional: the grant's attributes, for \"set\"\n"
    "          claims: {org: acme}                 # optional: the caller's token's claims (default: no token)\n"
    "          arguments: {tenant_id: acme}        # optional: the arguments after set and forbid\n"
    "      A call that is allowed or approved takes its counters, as in the gateway. Prints \"ok\" or\n"
    "      \"FAIL\" per case with the expected and actual decision and the deciding rule.\n"
    "      Exit 0 if every case passed, 1 if one failed, 2 if FILE or CASES.yaml cannot be loaded.\n";

static const char usage_short[] =
    "usage: tollgate policy check FILE...\n"
    "       tollgate policy explain [-c CONF] [--grant G] [--subject S] [--upstream U] (--call JSON | --method M [--params JSON])\n"
    "       tollgate policy test FILE CASES.yaml\n"
    "       tollgate policy --help\n";

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "tollgate policy: ");
    fprintf(stderr, fmt, arg ? arg : "");
    fprintf(stderr, "\n%s", usage_short);
    return 2;
}

static int64_t wall_ms(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* ---- check ------------------------------------------------------------------------------- */

static int cmd_check(int argc, char **argv)
{
    if (argc < 3)
        return usage_error("check: no policy file given%s", NULL);
    int bad = 0;
    for (int i = 2; i < argc; i++) {
        struct tg_buf err, warn;
        tg_buf_init(&err);
        tg_buf_init(&warn);
        struct tg_policy *p = NULL;
        int rc = tg_policy_load(argv[i], &p, &err, &warn);
        if (warn.len)
            fwrite(warn.base, 1, warn.len, stdout);
        if (rc != 0) {
            fwrite(err.base, 1, err.len, stderr);
            printf("%s: invalid\n", argv[i]);
            bad = 1;
        } else {
            printf("%s: ok (%zu tools)\n", argv[i], tg_policy_tool_count(p));
        }
        fflush(stdout);
        tg_policy_unref(p);
        tg_buf_dispose(&err);
        tg_buf_dispose(&warn);
    }
    return bad;
}

/* ---- explain ----------------------------------------------------------------------------- */

static int verdict_status(enum tg_verdict v)
{
    switch (v) {
    case TG_VERDICT_ALLOW: return 0;
    case TG_VERDICT_DENY: return 1;
    case TG_VERDICT_LIMITED: return 3;
    case TG_VERDICT_APPROVE: return 4;
    }
    return 2;
}

static void print_explain(const struct tg_policy *p, const char *tool, const struct tg_policy_explain *e)
{
    const struct tg_decision *d = &e->d;
    printf("decision: %s\n", tg_policy_verdict_str(d->verdict));
    printf("reason: %s\n", d->message[0] ? d->message : "-");
    printf("rule: %s\n", d->rule[0] ? d->rule : "-");
    printf("at: %s\n", e->where[0] ? e->where : "-");
    if (e->cond >= 0)
        printf("condition: conditions[%d] does not hold: %s\n", e->cond, e->cond_text);
    printf("hidden: %s\n", e->hidden ? "yes (tools/list does not show it)" : "no");
    if (d->history_json[0])
        printf("earlier call: %s\n", d->history_json);
    if (d->verdict == TG_VERDICT_LIMITED)
        printf("limited by: %s (retry in %llu ms)\n", d->counter, (unsigned long long)d->retry_after_ms);
    if (d->verdict == TG_VERDICT_APPROVE) {
        static const char *const modes[] = {"the upstream's, else by the client (task for params.task, hold for a "
                                            "2025 call with a progressToken, else retry)",
                                            "hold", "retry", "task"};
        printf("approval timeout: %d s\n", d->approval_timeout_ms / 1000);
        printf("approval mode: %s\n", modes[d->approval_mode]);
    }
    struct tg_buf b;
    tg_buf_init(&b);
    tg_policy_explain_counters(p, tool, &b);
    printf("counters (taken or read when the call gets past the entries before them):%s\n", b.len ? "" : " none");
    if (b.len)
        fwrite(b.base, 1, b.len, stdout);
    tg_buf_dispose(&b);
    if (d->counters_json[0])
        printf("counter values after this call: {%s}\n", d->counters_json);
}

/* "--name VALUE" or "--name=VALUE" at argv[*i]; 1 and *val set if it is this option. */
static int option(int argc, char **argv, int *i, const char *name, const char **val, int *missing)
{
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0)
        return 0;
    if (argv[*i][n] == '=') {
        *val = argv[*i] + n + 1;
        return 1;
    }
    if (argv[*i][n] != '\0')
        return 0;
    if (*i + 1 >= argc) {
        *missing = 1;
        return 1;
    }
    *val = argv[++*i];
    return 1;
}

/* With --scopes (have): a call whose token lacks the scopes it needs is refused before any rule,
 * as the gateway refuses it. 1 if so (printed). */
static int scopes_refuse(int lacks, const char *need, const char *have)
{
    if (have == NULL || !lacks)
        return 0;
    printf("decision: deny\n");
    printf("reason: insufficient_scope: the call needs a token with the scopes \"%s\" (it has \"%s\")\n", need, have);
    printf("rule: insufficient_scope\nat: scopes\n");
    printf("answer: HTTP 403, WWW-Authenticate: Bearer error=\"insufficient_scope\", scope=\"%s\" (-32005 where no "
           "status can be shown)\n",
           need);
    return 1;
}

static cJSON *parse_json_arg(const char *what, const char *text)
{
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 1);
    if (j == NULL)
        fprintf(stderr, "tollgate policy: explain: %s is not JSON (near \"%.20s\")\n", what,
                end != NULL ? end : text);
    return j;
}

static int explain_other(const struct tg_policy *p, const char *method, const cJSON *params, const char *have)
{
    struct tg_decision d;
    memset(&d, 0, sizeof(d));
    int res = strcmp(method, "resources/read") == 0 || strcmp(method, "resources/subscribe") == 0;
    int completion = strcmp(method, "completion/complete") == 0;
    if (completion) { /* decided as the prompt or the resource template its ref names */
        const cJSON *ref = tg_json_get(params, "ref"), *type = tg_json_get(ref, "type");
        res = cJSON_IsString(type) && strcmp(type->valuestring, "ref/resource") == 0;
        if (!res && !(cJSON_IsString(type) && strcmp(type->valuestring, "ref/prompt") == 0))
            params = NULL; /* the gateway refuses any other ref as invalid params: so does explain */
        else
            params = ref;
    }
    if (res || completion || strcmp(method, "prompts/get") == 0) {
        const cJSON *what = tg_json_get(params, res ? "uri" : "name");
        if (!cJSON_IsString(what))
            return usage_error(completion ? "explain: completion/complete needs --params '{\"ref\":{\"type\":"
                                            "\"ref/prompt\",\"name\":...}}' or a ref/resource with \"uri\"%s"
                               : res ? "explain: resources/read and resources/subscribe need --params '{\"uri\":...}'%s"
                                     : "explain: prompts/get needs --params '{\"name\":...}'%s",
                               NULL);
        if (res)
            tg_policy_decide_resource(p, what->valuestring, &d);
        else
            tg_policy_decide_prompt(p, what->valuestring, &d);
        char need[TG_SCOPES_MAX];
        int lacks = res ? tg_policy_scopes_resource(p, what->valuestring, have ? have : "", need, sizeof(need))
                        : tg_policy_scopes_prompt(p, what->valuestring, have ? have : "", need, sizeof(need));
        if (d.verdict != TG_VERDICT_DENY && scopes_refuse(lacks, need, have))
            return 1;
        printf("decision: %s\n", tg_policy_verdict_str(d.verdict));
        printf("reason: %s\n", d.message[0] ? d.message : "-");
        printf("rule: %s\n", d.rule[0] ? d.rule : "-");
        printf("at: %s\n", d.rule[0] ? (res ? "resources" : "prompts") : "-");
        printf("scopes: %s\n", d.verdict != TG_VERDICT_DENY && need[0] ? need : "none");
        return verdict_status(d.verdict);
    }
    if (tg_msg_is_standard_client_method(method, TG_MSG_REQUEST)) {
        printf("decision: allow\nreason: %s is a standard MCP method; the policy does not decide it\n", method);
        return 0;
    }
    if (tg_policy_method_allowed(p, method)) {
        printf("decision: allow\nreason: %s is named by the policy's \"methods\"\nat: methods\n", method);
        return 0;
    }
    printf("decision: deny\nreason: %s is not a standard MCP method and the policy's \"methods\" does not name it\n",
           method);
    return 1;
}

/* An approval in retry mode is answered at once and gives its counters back (the call made
 * again reserves its own), as the gateway does; hold and task keep them while the call is parked.
 * mode: the tool's, else the upstream's (explain); left open, it is chosen per call there, and
 * taken as kept here. */
static void settle_approval(struct tg_counters *c, const struct tg_decision *d, int upstream_mode, int64_t now)
{
    int mode = d->approval_mode != TG_APPROVAL_AUTO ? d->approval_mode : upstream_mode;
    if (d->verdict == TG_VERDICT_APPROVE && mode == TG_APPROVAL_RETRY)
        tg_policy_refund(c, d, now);
}

static int explain_run(int argc, char **argv, struct tg__bind_opts *bo, cJSON *afters);

static int cmd_explain(int argc, char **argv)
{
    struct tg__bind_opts bo = {0};
    cJSON *afters = cJSON_CreateArray(); /* --after, in order */
    int rc = explain_run(argc, argv, &bo, afters);
    tg__bind_opts_dispose(&bo);
    cJSON_Delete(afters);
    return rc;
}

static int explain_run(int argc, char **argv, struct tg__bind_opts *bo, cJSON *afters)
{
    const char *conf_path = "conf/tollgate.conf", *grant = NULL, *upstream = NULL, *session = "explain";
    const char *subject = NULL, *issuer = NULL;
    const char *call = NULL, *method = NULL, *params = NULL, *repeat_s = NULL, *scopes = NULL, *after = NULL;
    for (int i = 2; i < argc; i++) {
        int missing = 0;
        if (option(argc, argv, &i, "--after", &after, &missing)) {
            cJSON *one = missing ? NULL : after[0] == '{' ? cJSON_Parse(after) : cJSON_CreateString(after);
            if (one == NULL)
                return usage_error("explain: --after needs TOOL[:AGO] or a JSON map, not %s", missing ? "nothing" : after);
            cJSON_AddItemToArray(afters, one);
        } else if (tg__bind_option(argc, argv, &i, bo, &missing)) {
            if (missing)
                return usage_error("explain: %s needs NAME=VALUE (at most 64 attributes)", argv[i]);
        } else if (strcmp(argv[i], "-c") == 0) {
            if (i + 1 >= argc)
                return usage_error("explain: -c needs a value%s", NULL);
            conf_path = argv[++i];
        } else if (option(argc, argv, &i, "--conf", &conf_path, &missing) ||
                   option(argc, argv, &i, "--grant", &grant, &missing) ||
                   option(argc, argv, &i, "--upstream", &upstream, &missing) ||
                   option(argc, argv, &i, "--session", &session, &missing) ||
                   option(argc, argv, &i, "--subject", &subject, &missing) ||
                   option(argc, argv, &i, "--issuer", &issuer, &missing) ||
                   option(argc, argv, &i, "--call", &call, &missing) ||
                   option(argc, argv, &i, "--method", &method, &missing) ||
                   option(argc, argv, &i, "--params", &params, &missing) ||
                   option(argc, argv, &i, "--repeat", &repeat_s, &missing) ||
                   option(argc, argv, &i, "--scopes", &scopes, &missing)) {
            if (missing)
                return usage_error("explain: %s needs a value", argv[i]);
        } else {
            return usage_error("explain: unknown argument: %s", argv[i]);
        }
    }
    char hwhy[300];
    if (tg_policy_history_add_list(NULL, NULL, NULL, afters, 0, hwhy, sizeof(hwhy)) != 0)
        return usage_error("explain: --after: %s", hwhy);
    long repeat = 1;
    if (repeat_s != NULL) {
        char *end;
        errno = 0;
        repeat = strtol(repeat_s, &end, 10);
        if (errno != 0 || end == repeat_s || *end != '\0' || repeat < 1 || repeat > CASES_MAX_REPEAT)
            return usage_error("explain: --repeat must be a whole number from 1 to 100000, not %s", repeat_s);
    }
    if ((call == NULL) == (method == NULL))
        return usage_error("explain: give either --call or --method%s", NULL);
    if (call != NULL && params != NULL)
        return usage_error("explain: --params goes with --method, not --call%s", NULL);
    cJSON *pj = NULL;
    if (call != NULL || params != NULL) {
        pj = parse_json_arg(call ? "--call" : "--params", call ? call : params);
        if (pj == NULL)
            return 2;
    }
    if (method == NULL)
        method = "tools/call";
    const cJSON *name = tg_json_get(pj, "name");
    const cJSON *args = tg_json_get(pj, "arguments");
    if (strcmp(method, "tools/call") == 0 &&
        (!cJSON_IsObject(pj) || !cJSON_IsString(name) || (args != NULL && !cJSON_IsObject(args)))) {
        cJSON_Delete(pj);
        return usage_error("explain: a tools/call needs {\"name\": a string, \"arguments\": an object}%s", NULL);
    }
    struct tg_buf err;
    tg_buf_init(&err);
    struct tg_conf *conf = tg_conf_load(conf_path, &err);
    if (conf == NULL) {
        fwrite(err.base, 1, err.len, stderr);
        fprintf(stderr, "tollgate policy: explain: configuration %s is invalid\n", conf_path);
        tg_buf_dispose(&err);
        cJSON_Delete(pj);
        return 2;
    }
    tg_buf_dispose(&err);
    int rc = 2;
    const struct tg_grant_conf *g = NULL;
    int u = -1;
    if (grant != NULL)
        g = tg_conf_find_grant(conf, grant);
    else if (conf->ngrants == 1)
        g = &conf->grants[0];
    if (upstream != NULL)
        tg_conf_find_upstream(conf, tg_slice_cstr(upstream), &u);
    else
        u = conf->default_upstream;
    if (g == NULL) {
        if (grant)
            fprintf(stderr, "tollgate policy: explain: %s has no grant named \"%s\"\n", conf_path, grant);
        else
            fprintf(stderr, "tollgate policy: explain: %s has %zu grants: name one with --grant\n", conf_path,
                    conf->ngrants);
        goto out;
    }
    if (u < 0) {
        if (upstream)
            fprintf(stderr, "tollgate policy: explain: %s has no upstream named \"%s\"\n", conf_path, upstream);
        else
            fprintf(stderr, "tollgate policy: explain: %s has no default upstream: name one with --upstream\n",
                    conf_path);
        goto out;
    }
    struct tg_policy *p = tg_conf_policy_for(conf, g, u);
    if (subject != NULL)
        printf("policy: %s (grant %s, subject %s%s%s, upstream %s)\n", tg_policy_name(p), g->name, subject,
               issuer ? " of " : "", issuer ? issuer : "", conf->upstreams[u].name);
    else
        printf("policy: %s (grant %s, upstream %s)\n", tg_policy_name(p), g->name, conf->upstreams[u].name);
    if (strcmp(method, "tools/call") != 0) {
        rc = explain_other(p, method, pj, scopes);
        goto out;
    }
    char need[TG_SCOPES_MAX];
    int lacks = tg_policy_scopes_tool(p, name->valuestring, scopes ? scopes : "", need, sizeof(need));
    if (scopes_refuse(lacks, need, scopes)) {
        rc = 1;
        goto out;
    }
    struct tg_counters *scratch = tg_counters_new();
    struct tg_policy_explain *e = tg_xmalloc(sizeof(*e));
    struct tg_caller who = {g->name, session, conf->upstreams[u].name, subject, issuer};
    int64_t now = wall_ms();
    tg_policy_history_add_list(p, scratch, &who, afters, now, hwhy, sizeof(hwhy));
    if (cJSON_GetArraySize(afters) > 0)
        printf("after: %d earlier call%s of this caller\n", cJSON_GetArraySize(afters),
               cJSON_GetArraySize(afters) == 1 ? "" : "s");
    for (size_t k = 0; k < g->nattributes; k++) { /* the conf's, unless an --attribute gives it */
        int given = 0;
        for (size_t j = 0; j < bo->nattrs; j++)
            given |= strcmp(bo->attrs[2 * j], g->attributes[2 * k]) == 0;
        cJSON *v = cJSON_CreateString(g->attributes[2 * k + 1]);
        if (!given)
            tg__bind_opt_add(bo, 0, g->attributes[2 * k], strlen(g->attributes[2 * k]), v);
        cJSON_Delete(v);
    }
    int refused = tg__bind_call(p, pj, g->name, subject, bo, 1, e) < 0; /* the final arguments are decided */
    args = tg_json_get(pj, "arguments");
    for (long r = 0; r < repeat && !refused; r++) { /* the same instant: the calls before the last take their counters */
        tg_policy_explain_call(p, scratch, &who, name->valuestring, args, now, e);
        if (r + 1 < repeat)
            settle_approval(scratch, &e->d, conf->upstreams[u].approval_mode, now);
    }
    char pin[700];
    tg_pin_explain(&conf->upstreams[u], p, name->valuestring, refused, e, pin, sizeof(pin));
    if (repeat > 1)
        printf("call: %ld of %ld at the same instant (the first %ld took their counters if allowed)\n", repeat,
               repeat, repeat - 1);
    print_explain(p, name->valuestring, e);
    printf("scopes: %s\n", need[0] ? need : "none");
    if (pin[0] != '\0')
        printf("pin: %s\n", pin);
    rc = verdict_status(e->d.verdict);
    free(e);
    tg_counters_free(scratch);
out:
    tg_conf_unref(conf);
    cJSON_Delete(pj);
    return rc;
}

/* ---- test -------------------------------------------------------------------------------- */

/* One case of a cases file, borrowed from its cJSON tree. */
struct tcase {
    const char *name;
    const char *tool;
    const cJSON *args;
    const char *grant, *session, *subject, *issuer;
    enum tg_verdict expect;
    const cJSON *history; /* earlier calls, or NULL */
    const char *reason, *rule;
    int hidden; /* -1 not checked */
    long repeat;
    char default_name[24]; /* "case N" when the case has no name */
    int has_scopes;        /* the case gives the token's scopes: checked as the gateway does */
    char scopes[TG_SCOPES_MAX];
    cJSON *call;           /* the call, copied: its arguments are bound (set, forbid) */
    const cJSON *want_args; /* "arguments": what they must be after the binding, or NULL */
    struct tg__bind_opts bind; /* "attributes" and "claims" */
};

static int parse_verdict(const char *s, enum tg_verdict *v)
{
    static const enum tg_verdict all[] = {TG_VERDICT_ALLOW, TG_VERDICT_DENY, TG_VERDICT_LIMITED, TG_VERDICT_APPROVE};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        if (strcmp(s, tg_policy_verdict_str(all[i])) == 0) {
            *v = all[i];
            return 0;
        }
    return -1;
}

static const char *opt_string(const cJSON *c, const char *key, const char *def, int *bad)
{
    const cJSON *v = tg_json_get(c, key);
    if (v == NULL || cJSON_IsNull(v))
        return def;
    if (!cJSON_IsString(v)) {
        *bad = 1;
        return def;
    }
    return v->valuestring;
}

/* Check case i; on error print "CASES: cases[i].FIELD: reason" and return -1. */
static int parse_case(const char *file, int i, const cJSON *c, struct tcase *t)
{
    memset(t, 0, sizeof(*t));
    t->hidden = -1;
    t->repeat = 1;
    const char *field = NULL, *why = NULL;
    if (!cJSON_IsObject(c)) {
        field = "";
        why = "a case must be a map {name, call, expect, ...}";
        goto bad;
    }
    static const char *const known[] = {"name",   "call",   "grant",  "session", "subject",    "issuer",
                                        "expect", "reason", "rule",   "hidden",  "repeat",     "scopes",
                                        "claims", "attributes", "arguments", "history", NULL};
    for (const cJSON *k = c->child; k; k = k->next) {
        int ok = 0;
        for (int j = 0; known[j]; j++)
            ok |= strcmp(k->string, known[j]) == 0;
        if (!ok) {
            fprintf(stderr, "%s: cases[%d].%s: unknown field (name call grant session subject issuer expect reason rule "
                            "hidden repeat scopes claims attributes arguments history)\n", file, i, k->string);
            return -1;
        }
    }
    int bad = 0;
    snprintf(t->default_name, sizeof(t->default_name), "case %d", i + 1);
    t->name = opt_string(c, "name", t->default_name, &bad);
    if (bad) {
        field = "name", why = "must be a string";
        goto bad;
    }
    const cJSON *call = tg_json_get(c, "call");
    const cJSON *tn = tg_json_get(call, "name");
    t->args = tg_json_get(call, "arguments");
    if (!cJSON_IsObject(call) || !cJSON_IsString(tn)) {
        field = "call", why = "must be a map {name: TOOL, arguments: {...}}";
        goto bad;
    }
    if (t->args != NULL && !cJSON_IsObject(t->args) && !cJSON_IsNull(t->args)) {
        field = "call.arguments", why = "must be a map";
        goto bad;
    }
    if (cJSON_IsNull(t->args))
        t->args = NULL;
    t->tool = tn->valuestring;
    const cJSON *jc = tg_json_get(c, "claims"), *ja = tg_json_get(c, "attributes");
    if ((jc != NULL && !cJSON_IsObject(jc)) || (ja != NULL && !cJSON_IsObject(ja))) {
        field = "claims, attributes", why = "must be maps {NAME: VALUE}";
        goto bad;
    }
    for (const cJSON *e = jc != NULL ? jc->child : NULL; e != NULL; e = e->next)
        tg__bind_opt_add(&t->bind, 1, e->string, strlen(e->string), e);
    for (const cJSON *e = ja != NULL ? ja->child : NULL; e != NULL; e = e->next)
        if (tg__bind_opt_add(&t->bind, 0, e->string, strlen(e->string), e) != 0) {
            field = "attributes", why = "must be at most 64 strings";
            goto bad;
        }
    t->want_args = tg_json_get(c, "arguments");
    if (t->want_args != NULL && !cJSON_IsObject(t->want_args)) {
        field = "arguments", why = "must be a map: the arguments after set and forbid";
        goto bad;
    }
    const cJSON *ex = tg_json_get(c, "expect");
    if (!cJSON_IsString(ex) || parse_verdict(ex->valuestring, &t->expect) != 0) {
        field = "expect", why = "must be allow, deny, limited or approve";
        goto bad;
    }
    t->grant = opt_string(c, "grant", "test", &bad);
    t->session = opt_string(c, "session", "test-session", &bad);
    t->subject = opt_string(c, "subject", NULL, &bad);
    t->issuer = opt_string(c, "issuer", NULL, &bad);
    t->reason = opt_string(c, "reason", NULL, &bad);
    t->rule = opt_string(c, "rule", NULL, &bad);
    if (bad) {
        field = "grant, session, subject, issuer, reason, rule", why = "must be strings";
        goto bad;
    }
    const cJSON *h = tg_json_get(c, "hidden");
    if (h != NULL) {
        if (!cJSON_IsBool(h)) {
            field = "hidden", why = "must be true or false";
            goto bad;
        }
        t->hidden = cJSON_IsTrue(h);
    }
    const cJSON *r = tg_json_get(c, "repeat");
    if (r != NULL) {
        if (!cJSON_IsNumber(r) || r->valuedouble < 1 || r->valuedouble > CASES_MAX_REPEAT ||
            r->valuedouble != (double)(long)r->valuedouble) {
            field = "repeat", why = "must be a whole number from 1 to 100000";
            goto bad;
        }
        t->repeat = (long)r->valuedouble;
    }
    static char hwhy[300];
    t->history = tg_json_get(c, "history");
    if (t->history != NULL && tg_policy_history_add_list(NULL, NULL, NULL, t->history, 0, hwhy, sizeof(hwhy)) != 0) {
        field = "", why = hwhy;
        goto bad;
    }
    const cJSON *sc = tg_json_get(c, "scopes");
    if (sc != NULL) {
        t->has_scopes = 1;
        int ok = cJSON_IsString(sc) || cJSON_IsArray(sc);
        for (const char *q = cJSON_IsString(sc) ? sc->valuestring : ""; *q != '\0' && ok;) {
            const char *sp = strchr(q, ' ');
            size_t len = sp ? (size_t)(sp - q) : strlen(q);
            char one[TG_SCOPE_MAX];
            ok = tg_scope_token_ok(q, len);
            if (ok) {
                memcpy(one, q, len);
                one[len] = '\0';
                ok = tg_scopes_add(t->scopes, sizeof(t->scopes), one) == 0;
            }
            q += len + (sp != NULL);
        }
        for (const cJSON *e = cJSON_IsArray(sc) ? sc->child : NULL; e != NULL && ok; e = e->next)
            ok = cJSON_IsString(e) && tg_scope_token_ok(e->valuestring, strlen(e->valuestring)) &&
                 tg_scopes_add(t->scopes, sizeof(t->scopes), e->valuestring) == 0;
        if (!ok) {
            field = "scopes", why = "must be a list of scopes, or one string of them separated by spaces";
            goto bad;
        }
    }
    return 0;
bad:
    fprintf(stderr, "%s: cases[%d]%s%s: %s\n", file, i, field[0] ? "." : "", field, why);
    return -1;
}

static int contains(const char *hay, const char *needle) { return needle == NULL || strstr(hay, needle) != NULL; }

static int cmd_test(int argc, char **argv)
{
    if (argc != 4)
        return usage_error("test: needs a policy FILE and a CASES.yaml%s", NULL);
    const char *pfile = argv[2], *cfile = argv[3];
    struct tg_buf err, warn;
    tg_buf_init(&err);
    tg_buf_init(&warn);
    struct tg_policy *p = NULL;
    int lrc = tg_policy_load(pfile, &p, &err, &warn);
    if (warn.len)
        fwrite(warn.base, 1, warn.len, stdout);
    if (lrc != 0)
        fwrite(err.base, 1, err.len, stderr);
    tg_buf_dispose(&err);
    tg_buf_dispose(&warn);
    if (lrc != 0) {
        fprintf(stderr, "tollgate policy: test: %s is invalid; nothing tested\n", pfile);
        return 2;
    }
    cJSON *root = tg__policy_load_cases(cfile);
    const cJSON *list = cJSON_IsObject(root) ? tg_json_get(root, "cases") : root;
    if (root != NULL && !cJSON_IsArray(list))
        fprintf(stderr, "%s: must be a list of cases, or a map {cases: [...]}\n", cfile);
    int n = cJSON_IsArray(list) ? cJSON_GetArraySize(list) : -1;
    struct tcase *cases = n > 0 ? tg_xcalloc((size_t)n, sizeof(*cases)) : NULL;
    int bad = n < 0;
    if (n == 0) {
        fprintf(stderr, "%s: no cases\n", cfile);
        bad = 1;
    }
    for (int i = 0; i < n; i++)
        bad |= parse_case(cfile, i, cJSON_GetArrayItem(list, i), &cases[i]) != 0;
    if (bad) {
        fprintf(stderr, "tollgate policy: test: %s is invalid; nothing tested\n", cfile);
        for (int i = 0; i < n; i++)
            tg__bind_opts_dispose(&cases[i].bind);
        free(cases);
        cJSON_Delete(root);
        tg_policy_unref(p);
        return 2;
    }
    struct tg_counters *scratch = tg_counters_new();
    struct tg_policy_explain *e = tg_xmalloc(sizeof(*e));
    int64_t now = wall_ms(); /* one instant for the whole file: windows never roll mid-test */
    int failed = 0;
    for (int i = 0; i < n; i++) {
        const struct tcase *t = &cases[i];
        struct tg_caller who = {t->grant, t->session, "test", t->subject, t->issuer};
        char need[TG_SCOPES_MAX];
        if (t->has_scopes && tg_policy_scopes_tool(p, t->tool, t->scopes, need, sizeof(need))) {
            /* refused before any rule, as the gateway does: nothing is decided or counted */
            memset(e, 0, sizeof(*e));
            e->d.verdict = TG_VERDICT_DENY;
            snprintf(e->d.rule, sizeof(e->d.rule), "insufficient_scope");
            snprintf(e->d.message, sizeof(e->d.message), "insufficient_scope: the call needs a token with the scopes \"%.400s\"",
                     need);
            snprintf(e->where, sizeof(e->where), "scopes");
            e->cond = -1;
            e->hidden = !tg_policy_tool_visible(p, t->tool);
        } else {
            char hwhy[300];
            if (t->history != NULL)
                tg_policy_history_add_list(p, scratch, &who, t->history, now, hwhy, sizeof(hwhy));
            cJSON *call = cJSON_CreateObject();
            cJSON_AddStringToObject(call, "name", t->tool);
            if (t->args != NULL)
                cJSON_AddItemToObject(call, "arguments", cJSON_Duplicate(t->args, 1));
            cases[i].call = call;
            if (tg__bind_call(p, call, t->grant, t->subject, &t->bind, 0, e) == 0)
                for (long r = 0; r < t->repeat; r++) {
                    tg_policy_explain_call(p, scratch, &who, t->tool, tg_json_get(call, "arguments"), now, e);
                    settle_approval(scratch, &e->d, TG_APPROVAL_AUTO, now);
                }
        }
        const struct tg_decision *d = &e->d;
        char why[700] = "";
        const cJSON *got = t->call != NULL ? tg_json_get(t->call, "arguments") : t->args;
        struct tg_buf wa, ga;
        tg_buf_init(&wa);
        tg_buf_init(&ga);
        if (t->want_args != NULL) {
            tg_json_canon(&wa, t->want_args);
            if (got != NULL)
                tg_json_canon(&ga, got);
            else
                tg_buf_appends(&ga, "{}");
        }
        if (wa.len != ga.len || (wa.len > 0 && memcmp(wa.base, ga.base, wa.len) != 0))
            snprintf(why, sizeof(why), "arguments after set and forbid are %.*s, expected %.*s", (int)(ga.len > 300 ? 300 : ga.len),
                     ga.base, (int)(wa.len > 300 ? 300 : wa.len), wa.base);
        tg_buf_dispose(&wa);
        tg_buf_dispose(&ga);
        if (why[0] != '\0')
            ;
        else if (d->verdict != t->expect)
            snprintf(why, sizeof(why), "expected %s, got %s", tg_policy_verdict_str(t->expect),
                     tg_policy_verdict_str(d->verdict));
        else if (!contains(d->message, t->reason))
            snprintf(why, sizeof(why), "reason \"%.200s\" does not contain \"%.200s\"", d->message, t->reason);
        else if (!contains(d->rule, t->rule) && !contains(e->where, t->rule))
            snprintf(why, sizeof(why), "decided by %s (%s), not \"%.200s\"", d->rule[0] ? d->rule : "-", e->where,
                     t->rule);
        else if (t->hidden >= 0 && t->hidden != e->hidden)
            snprintf(why, sizeof(why), "expected the tool %s, but tools/list %s it", t->hidden ? "hidden" : "shown",
                     e->hidden ? "hides" : "shows");
        failed += why[0] != '\0';
        char by[400];
        if (d->rule[0])
            snprintf(by, sizeof(by), "rule \"%s\" at %s", d->rule, e->where[0] ? e->where : "-");
        else
            snprintf(by, sizeof(by), "%s", e->where[0] ? e->where : "-");
        if (why[0])
            printf("FAIL %d %s: %s (%s)\n", i + 1, t->name, why, by);
        else
            printf("ok   %d %s: %s (%s)\n", i + 1, t->name, tg_policy_verdict_str(d->verdict), by);
        if (why[0] && d->message[0])
            printf("     reason: %s\n", d->message);
        if (why[0] && e->cond >= 0)
            printf("     condition: conditions[%d] does not hold: %s\n", e->cond, e->cond_text);
    }
    printf("%d cases, %d passed, %d failed\n", n, n - failed, failed);
    free(e);
    tg_counters_free(scratch);
    for (int i = 0; i < n; i++) {
        cJSON_Delete(cases[i].call);
        tg__bind_opts_dispose(&cases[i].bind);
    }
    free(cases);
    cJSON_Delete(root);
    tg_policy_unref(p);
    return failed ? 1 : 0;
}

int tg_policy_cli(int argc, char **argv)
{
    if (argc < 2)
        return usage_error("a subcommand is needed (check, explain, test)%s", NULL);
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0 || strcmp(sub, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    for (int i = 2; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
    if (strcmp(sub, "check") == 0)
        return cmd_check(argc, argv);
    if (strcmp(sub, "explain") == 0)
        return cmd_explain(argc, argv);
    if (strcmp(sub, "test") == 0)
        return cmd_test(argc, argv);
    return usage_error("unknown subcommand: %s", sub);
}
