#!/usr/bin/env bash
# `tollgate policy check|explain|test` on the fixture policies in test/fixtures/policies/: the real
# binary, its exact exit statuses and the lines operators and scripts read. Runs from the source
# root. Usage: policy-cli.sh TOLLGATE
set -uo pipefail
tg=${1:?usage: policy-cli.sh path/to/tollgate}
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
P=test/fixtures/policies
C=$P/explain.conf
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
fails=0 n=0
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"


# ---- check
run 0 policy check conf/policies/*.json && has out ": ok ("
for f in conf/policies/*.json; do has out "$f: ok ("; done
run 0 policy check $P/hosted.json $P/intercept.yaml
has out "$P/hosted.json: ok (4 tools)"; has out "$P/intercept.yaml: ok (4 tools)"
# An unknown field is an error with the file and the path in it, and the known field it is close to.
run 1 policy check $P/warn.json
has err "$P/warn.json: colour: unknown field (this object takes version, description, default, hide, tools, methods, resources, prompts)"
has out "$P/warn.json: invalid"; hasnt out "ok ("
T=$(mktemp -d); trap 'rm -f "$out" "$err"; rm -rf "$T"' EXIT
printf '{"version":"1","defualt":"allow","tools":{"read":{"acton":"allow"},"s":{"limits":[{"window":"minute","max":1,"scoep":"grant"}]}}}\n' >"$T/typo.json"
printf 'version: "1"\ndefault: deny\ntools:\n  deploy:\n    rules:\n      - name: r\n        conditons: [{path: args.env, op: eq, value: dev}]\n' >"$T/typo.yaml"
run 1 policy check "$T/typo.json" "$T/typo.yaml"
has err "$T/typo.json: defualt: unknown field; did you mean \`default\`?"
has err "$T/typo.json: tools.read.acton: unknown field; did you mean \`action\`?"
has err "$T/typo.json: tools.s.limits[0].scoep: unknown field; did you mean \`scope\`?"
has err "$T/typo.yaml: tools.deploy.rules[0].conditons: unknown field; did you mean \`conditions\`?"
has out "$T/typo.json: invalid"; has out "$T/typo.yaml: invalid"
# No default: a note that what the policy does not name is denied, and explain denies it.
printf '{"version":"1","tools":{"read_file":{"action":"allow"}}}\n' >"$T/nodefault.json"
run 0 policy check "$T/nodefault.json"
has out "$T/nodefault.json: default: not set, so what this policy does not name is denied"
has out "$T/nodefault.json: ok (1 tools)"
printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "a"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
    "$T/nodefault.json" >"$T/nodefault.conf"
run 1 policy explain -c "$T/nodefault.conf" --call '{"name":"write_file","arguments":{}}'
has out "decision: deny"; has out "at: default"
run 0 policy explain -c "$T/nodefault.conf" --call '{"name":"read_file","arguments":{}}'
run 0 -t -c "$T/nodefault.conf"
has out "$T/nodefault.json: default: not set, so what this policy does not name is denied"; has out "is ok"
run 1 policy check $P/broken.json
has err "$P/broken.json: tools.deploy.rules[0].conditions[0].op: unknown operator \"equals\""
has err "$P/broken.json: tools.search.limits[0].window: must be"
has out "$P/broken.json: invalid"
run 1 policy check $P/hosted.json $P/broken.yaml $P/missing.json
has out "$P/hosted.json: ok"; has err "$P/broken.yaml: line 4:"; has out "$P/broken.yaml: invalid"
has err "$P/missing.json: cannot open"
# -t prints the same lines for a conf's policies.
printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "a"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
    "$PWD/$P/broken.json" >"$out.conf"
run 1 -t -c "$out.conf"
has err "$P/broken.json: tools.deploy.rules[0].conditions[0].op: unknown operator \"equals\""
# -t refuses a policy with a misspelt key, as start and reload do.
sed "s|$PWD/$P/broken.json|$T/typo.json|" "$out.conf" >"$T/typo.conf"
run 1 -t -c "$T/typo.conf"
has err "$T/typo.json: tools.read.acton: unknown field; did you mean \`action\`?"
has err "configuration $T/typo.conf is invalid"; hasnt out "is ok"
rm -f "$out.conf"

# ---- explain
E=(policy explain -c "$C")
run 0 "${E[@]}" --grant ops --call '{"name":"read_file","arguments":{"path":"/etc/hosts"}}'
has out "decision: allow"; has out "at: tools.read_file"; has out "hidden: no"; has out "policy: $P/hosted.json (grant ops, upstream tools)"
run 1 "${E[@]}" --grant ops --upstream tools --call '{"name":"delete_file","arguments":{}}'
has out "decision: deny"; has out "reason: Deleting files is not allowed through the gateway"
has out "rule: delete_file"; has out "at: tools.delete_file.action"; has out "hidden: yes"
run 4 "${E[@]}" --grant ops --call '{"name":"send_email","arguments":{"to":"a@example.com"}}'
has out "decision: approve"; has out "approval timeout: 120 s"
has out "approval mode: the upstream's, else by the client"
has out "emails: token bucket, scope global, capacity 20, refills 20 per hour, takes 1 per call (tools.send_email.limits[0])"
# A fresh store each time: three searches are allowed, the fourth at the same instant is limited.
run 0 "${E[@]}" --grant ops --repeat 3 --call '{"name":"search","arguments":{"q":"x"}}'
has out "counter values after this call: {\"searches\":0}"
run 3 "${E[@]}" --grant ops --repeat 4 --call '{"name":"search","arguments":{"q":"x"}}'
has out "decision: limited"; has out "at: tools.search.limits[0]"; has out "limited by: searches (retry in 20000 ms)"
has out "searches: token bucket, scope grant, capacity 3, refills 3 per minute"
run 0 "${E[@]}" --grant ops --call '{"name":"search","arguments":{"q":"x"}}'  # nothing was kept
# The grant's own policy (Intercept shape, YAML): the condition that did not hold.
run 1 "${E[@]}" --grant ci --call '{"name":"deploy","arguments":{"env":"production","ref":"v1.2"}}'
has out "policy: $P/intercept.yaml (grant ci, upstream tools)"
has out "rule: staging-only"; has out "at: tools.deploy.rules[0]"
has out 'condition: conditions[0] does not hold: args.env in ["staging","dev"] (the call has "production")'
run 1 "${E[@]}" --grant ci --call '{"name":"deploy","arguments":{"env":"dev"}}'
has out 'condition: conditions[1] does not hold: args.ref regex'; has out "(the call has no such argument)"
run 0 "${E[@]}" --grant ci --call '{"name":"deploy","arguments":{"env":"dev","ref":"v1.2"}}'
has out "_global._rate_minute: fixed window of a minute, scope grant, adds 1 per call, allowed while the total stays <= 5 (tools.*.rules[0], rule \"calls-per-minute\")"
run 3 "${E[@]}" --grant ci --call '{"name":"wire","arguments":{"amount":1500}}'
has out "decision: limited"; has out "rule: wire-budget"; has out "limited by: wire.total"
has out "wire.total: fixed window of a day, scope grant, adds args.amount per call, allowed while the total stays <= 1000"
run 1 "${E[@]}" --grant ci --call '{"name":"transfer","arguments":{"amount":-1}}'
has out "at: tools.transfer.rules[0].state.increment_from"
run 1 "${E[@]}" --grant ci --call '{"name":"debug_dump"}'
has out "rule: (hidden)"; has out "at: hide"; has out "hidden: yes"
run 1 "${E[@]}" --grant ci --call '{"name":"exec_shell","arguments":{"cmd":"ls"}}'
has out "reason: No shell"; has out "hidden: yes"
run 1 "${E[@]}" --grant ops --upstream bare --call '{"name":"anything"}'
has out "policy: (no policy: everything denied)"
run 0 "${E[@]}" --grant ops --method ping
# Resources and prompts follow the policy's default (deny here, no groups); URIs in normal form.
run 1 "${E[@]}" --grant ops --method resources/subscribe --params '{"uri":"FILE:///srv/../etc/passwd"}'
has out 'reason: Resource "file:///etc/passwd" is not permitted by policy (no "resources" rules'
run 1 "${E[@]}" --grant ops --method resources/read --params '{"uri":"file:///a/..%2Fb"}'
has out 'holds an encoded "/" (%2F)'; has out "rule: (uri)"
run 1 "${E[@]}" --grant ops --method completion/complete --params '{"ref":{"type":"ref/prompt","name":"p"}}'
has out 'reason: Prompt "p" is not permitted by policy'
run 2 "${E[@]}" --grant ops --method completion/complete --params '{}'; has err "completion/complete needs"
run 2 "${E[@]}" --grant ops --method completion/complete --params '{"ref":{"type":"ref/other","name":"p"}}'; has err "completion/complete needs"
run 1 "${E[@]}" --grant ops --method vendor/thing
has out "is not a standard MCP method"
run 0 "${E[@]}" --grant ops --method tools/call --params '{"name":"read_file"}'

# ---- test
run 0 policy test $P/hosted.json $P/hosted.cases.yaml
has out "ok   6 the fourth is limited: limited (rule \"searches\" at tools.search.limits[0])"
has out "7 cases, 7 passed, 0 failed"
run 0 policy test $P/intercept.yaml $P/intercept.cases.yaml
has out "9 cases, 9 passed, 0 failed"; hasnt out "FAIL"
# The example in docs/cli.md ("Testing a policy"), extracted from the page itself so that the two cannot drift apart.
sed -n '/^# CASES.yaml: a list/,/^```$/p' docs/cli.md | sed '$d' >"$out.cases"
cmp -s "$out.cases" $P/readme.cases.yaml || { echo "not ok - docs/cli.md's CASES.yaml differs from $P/readme.cases.yaml"; fails=$((fails + 1)); }
run 0 policy test $P/readme.yaml "$out.cases"; has out "6 cases, 6 passed, 0 failed"
rm -f "$out.cases"
# Bound arguments (set): explain decides and prints the final arguments; the conf's attribute, an
# --attribute over it, --claim as JSON; a claim not given denies with rule set.
printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "a"; anonymous = true; attributes = { tenant = "acme"; }; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
    "$PWD/$P/readme.yaml" >"$T/bind.conf"
run 0 policy explain -c "$T/bind.conf" --claim org_id=42 --call '{"name":"create_ticket","arguments":{"tenant_id":"evil","t":1}}'
has out 'arguments: {"tenant_id":"acme","t":1,"org_id":42} (after set and forbid)'; has out "decision: allow"
run 0 policy explain -c "$T/bind.conf" --attribute tenant=other --claim 'org_id="x"' --call '{"name":"create_ticket"}'
has out 'arguments: {"tenant_id":"other","org_id":"x"} (after set and forbid)'
run 1 policy explain -c "$T/bind.conf" --call '{"name":"create_ticket","arguments":{}}'
has out "decision: deny"; has out "rule: set"; has out "at: tools.create_ticket.set"; has out 'no claim "org_id"'
run 2 policy explain -c "$T/bind.conf" --claim org_id --call '{"name":"create_ticket"}'
# A tool refused whatever its arguments (default deny) is refused as such, not by the binding of "*".
printf '{"version":"1","default":"deny","tools":{"*":{"set":{"t":"${claims.org}"}},"x":{}}}\n' >"$T/bindstar.json"
sed "s|$PWD/$P/readme.yaml|$T/bindstar.json|" "$T/bind.conf" >"$T/bindstar.conf"
run 1 policy explain -c "$T/bindstar.conf" --call '{"name":"y"}'; has out "at: default"
run 1 policy explain -c "$T/bindstar.conf" --call '{"name":"x"}'; has out "at: tools.*.set"
run 1 policy test $P/hosted.json $P/failing.cases.yaml
has out "ok   1 reading is allowed: allow (tools.read_file)"
has out "FAIL 2 wrongly expects deletes to pass: expected allow, got deny (rule \"delete_file\" at tools.delete_file.action)"
has out "FAIL 3 wrong reason: reason \"Deleting files is not allowed through the gateway\" does not contain \"some other words\""
has out "FAIL 4 wrongly expects the email tool hidden: expected the tool hidden, but tools/list shows it"
has out "FAIL 5 case 5: expected deny, got allow (tools.read_file)"; has out "ok   6 case 6: allow (tools.read_file)"
has out "6 cases, 2 passed, 4 failed"
run 2 policy test $P/hosted.json $P/bad.cases.yaml
has err "$P/bad.cases.yaml: cases[0].expect: must be allow, deny, limited or approve"
has err "$P/bad.cases.yaml: cases[2].colour: unknown field"; has err "nothing tested"
run 2 policy test $P/broken.json $P/hosted.cases.yaml
has err "$P/broken.json: tools.deploy.rules[0].conditions[0].op"

# ---- scopes: what explain and test say of a call that needs OAuth scopes (both shapes)
printf '{"version":"1","default":"allow","tools":{"deploy":{"action":"allow","scopes":["deploy"]}},"prompts":{"scopes":{"admin-*":["admin"]}}}\n' >"$T/scoped.json"
printf 'version: "1"\ndefault: allow\ntools:\n  deploy:\n    scopes: [deploy]\n    rules:\n      - name: no prod\n        conditions: [{path: args.env, op: neq, value: prod}]\n' >"$T/scoped.yaml"
run 0 policy check "$T/scoped.json" "$T/scoped.yaml"
for f in scoped.json scoped.yaml; do
    printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "a"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
        "$T/$f" >"$T/$f.conf"
    run 0 policy explain -c "$T/$f.conf" --call '{"name":"deploy","arguments":{"env":"dev"}}'
    has out "decision: allow"; has out "scopes: deploy"
    run 1 policy explain -c "$T/$f.conf" --scopes 'read' --call '{"name":"deploy","arguments":{"env":"dev"}}'
    has out "decision: deny"; has out "rule: insufficient_scope"; has out 'scope="deploy"'
    run 0 policy explain -c "$T/$f.conf" --scopes 'read deploy' --call '{"name":"deploy","arguments":{"env":"dev"}}'
    has out "decision: allow"
    run 0 policy explain -c "$T/$f.conf" --scopes '' --call '{"name":"other","arguments":{}}'
    has out "scopes: none"
done
run 1 policy explain -c "$T/scoped.json.conf" --scopes '' --method prompts/get --params '{"name":"admin-reset"}'
has out "rule: insufficient_scope"
run 0 policy explain -c "$T/scoped.json.conf" --method prompts/get --params '{"name":"admin-reset"}'
has out "scopes: admin"
printf -- '- {call: {name: deploy, arguments: {env: dev}}, scopes: [read], expect: deny, rule: insufficient_scope}\n- {call: {name: deploy, arguments: {env: dev}}, scopes: "read deploy", expect: allow}\n- {call: {name: deploy, arguments: {env: prod}}, scopes: [deploy], expect: deny, rule: no prod}\n- {call: {name: deploy, arguments: {env: dev}}, expect: allow}\n' >"$T/scoped.cases.yaml"
run 0 policy test "$T/scoped.yaml" "$T/scoped.cases.yaml"; has out "4 cases, 4 passed, 0 failed"
printf -- '- {call: {name: deploy}, scopes: [7], expect: deny}\n' >"$T/badscopes.cases.yaml"
run 2 policy test "$T/scoped.yaml" "$T/badscopes.cases.yaml"; has err "cases[0].scopes: must be a list of scopes"
printf '{"version":"1","default":"allow","tools":{"deploy":{"scopes":["deploy",3],"scope":["x"]}}}\n' >"$T/badscopes.json"
run 1 policy check "$T/badscopes.json"
has err "tools.deploy.scopes[1]: a scope must be a string"; has err "tools.deploy.scope: unknown field; did you mean \`scopes\`?"
# ---- approval_mode per tool, in both shapes
printf 'version: "1"\ndefault: deny\ntools:\n  deploy:\n    action: approve\n    approval_mode: task\n    rules:\n      - name: no prod\n        action: evaluate\n        conditions: [{path: args.env, op: neq, value: prod}]\n        on_deny: not in prod\n' >"$T/mode.yaml"
printf '{"version":"1","default":"deny","tools":{"deploy":{"action":"approve","approval_mode":"retry"}}}\n' >"$T/mode.json"
for f in mode.yaml mode.json; do
    printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "staff"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
        "$T/$f" >"$T/$f.conf"
    run 4 policy explain -c "$T/$f.conf" --call '{"name":"deploy","arguments":{"env":"dev"}}'
    has out "decision: approve"
done
run 4 policy explain -c "$T/mode.yaml.conf" --call '{"name":"deploy","arguments":{"env":"dev"}}'; has out "approval mode: task"
run 4 policy explain -c "$T/mode.json.conf" --call '{"name":"deploy","arguments":{"env":"dev"}}'; has out "approval mode: retry"
printf '{"version":"1","default":"deny","tools":{"deploy":{"action":"approve","approval_mode":"later"}}}\n' >"$T/badmode.json"
run 1 policy check "$T/badmode.json"; has err "tools.deploy.approval_mode: must be hold, retry or task"
# ---- users inside a grant: scope "subject", explain --subject, a case's subject
printf '{"version":"1","default":"deny","tools":{"ask":{"limits":[{"counter":"per_user","window":"hour","max":2,"scope":"subject"}]}}}\n' >"$T/subject.json"
printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "staff"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
    "$T/subject.json" >"$T/subject.conf"
run 3 policy explain -c "$T/subject.conf" --subject alice --repeat 3 --call '{"name":"ask"}'
has out "policy: $T/subject.json (grant staff, subject alice, upstream u)"; has out "decision: limited"
has out "per_user: token bucket, scope subject"; has out "limited to 2 calls per hour for this user"
run 0 policy explain -c "$T/subject.conf" --subject alice --repeat 2 --call '{"name":"ask"}'
run 2 policy explain -c "$T/subject.conf" --subject; has err "--subject needs a value"
printf -- '- {call: {name: ask}, subject: alice, expect: allow}\n- {call: {name: ask}, subject: alice, expect: allow}\n- {call: {name: ask}, subject: alice, expect: limited, reason: for this user}\n- {call: {name: ask}, subject: bob, expect: allow}\n- {call: {name: ask}, expect: allow}\n- {call: {name: ask}, subject: test, expect: allow}\n- {call: {name: ask}, expect: limited}\n' >"$T/subject.cases.yaml"
run 0 policy test "$T/subject.json" "$T/subject.cases.yaml"; has out "7 cases, 7 passed, 0 failed"
# one subject name from two issuers is two users; without an issuer, a third (the static form)
run 3 policy explain -c "$T/subject.conf" --subject alice --issuer https://a.test/ --repeat 3 --call '{"name":"ask"}'
has out "policy: $T/subject.json (grant staff, subject alice of https://a.test/, upstream u)"; has out "decision: limited"
printf -- '- {call: {name: ask}, subject: alice, issuer: "https://a.test/", expect: allow}\n- {call: {name: ask}, subject: alice, issuer: "https://a.test/", expect: allow}\n- {call: {name: ask}, subject: alice, issuer: "https://a.test/", expect: limited}\n- {call: {name: ask}, subject: alice, issuer: "https://b.test/", expect: allow}\n- {call: {name: ask}, subject: alice, expect: allow}\n' >"$T/issuer.cases.yaml"
run 0 policy test "$T/subject.json" "$T/issuer.cases.yaml"; has out "5 cases, 5 passed, 0 failed"

# ---- session history and brakes: explain --after, a case's history
printf 'version: "1"\ndefault: allow\ntools:\n  read_env: {tags: [reads_secrets]}\n  http_post: {tags: [egress]}\n  create_issue:\n    brake: {repeats: 2, within: 60s}\n  "*":\n    rules:\n      - name: no-egress-after-secrets\n        when: {tags: [egress]}\n        conditions:\n          - history: {tags: [reads_secrets], within: 10m}\n            op: eq\n            value: 0\n' >"$T/hist.yaml"
printf 'listen = ( { address = "127.0.0.1"; port = 1; } );\ngrants = ( { name = "staff"; anonymous = true; } );\nupstreams = ( { name = "u"; url = "http://127.0.0.1:1/mcp"; policy = "%s"; } );\n' \
    "$T/hist.yaml" >"$T/hist.conf"
run 0 policy explain -c "$T/hist.conf" --call '{"name":"http_post","arguments":{}}'
run 1 policy explain -c "$T/hist.conf" --after read_env:5m --call '{"name":"http_post","arguments":{}}'
has out "after: 1 earlier call of this caller"; has out "rule: no-egress-after-secrets"; has out "at: tools.*.rules[0]"
has out "history: history{tags [reads_secrets], within 10 min, scope subject} count eq 0, read by tools.*.rules[0].conditions[0]"
has out "condition: conditions[0] does not hold: history{tags [reads_secrets], within 10 min, scope subject} count eq 0"
has out 'earlier call: {"tool":"read_env","upstream":"u","at":'
run 0 policy explain -c "$T/hist.conf" --after read_env:11m --call '{"name":"http_post","arguments":{}}'
run 3 policy explain -c "$T/hist.conf" --after '{"tool":"create_issue","args":{"a":1,"b":"x"},"ago":"20s"}' \
    --after '{"tool":"create_issue","args":{"b":"x","a":1.0}}' --call '{"name":"create_issue","arguments":{"a":1e0,"b":"x"}}'
has out "rule: brake"; has out "at: tools.create_issue.brake"
has out "brake: more than 2 calls with the same arguments within 60 s, checked before any counter (tools.create_issue.brake)"
has out "reason: you have called create_issue with the same arguments 3 times in 60 s; stop and report to the user"
has out "limited by: brake (retry in 40000 ms)"
run 2 policy explain -c "$T/hist.conf" --after '{"tool":"x","ago":"2d"}' --call '{"name":"x"}'; has err "history[0].ago: must be"
printf -- '- {call: {name: http_post}, expect: allow}\n- {history: [read_env:5m], call: {name: http_post}, expect: deny, rule: no-egress-after-secrets, reason: read_env}\n- {subject: bob, history: [{tool: read_env, ago: 11m}], call: {name: http_post}, expect: allow}\n- {subject: carol, call: {name: create_issue, arguments: {a: 1}}, repeat: 3, expect: limited, rule: brake}\n' >"$T/hist.cases.yaml"
run 0 policy test "$T/hist.yaml" "$T/hist.cases.yaml"; has out "4 cases, 4 passed, 0 failed"
printf -- '- {history: [{tool: x, agoo: 1}], call: {name: x}, expect: allow}\n' >"$T/badhist.cases.yaml"
run 2 policy test "$T/hist.yaml" "$T/badhist.cases.yaml"; has err "cases[0]: history[0].agoo: unknown field"

# ---- bad arguments and help
run 0 policy --help; has out "tollgate policy test FILE CASES.yaml"; has out "Exit 0 allow, 1 deny, 3 limited, 4 approve"
has out "An unknown field is an error"
run 0 -h; has out "tollgate policy check FILE..."
run 2 policy; has err "usage: tollgate policy check FILE..."
run 2 policy frobnicate; has err "unknown subcommand: frobnicate"
run 2 policy check; has err "usage:"
run 2 policy test $P/hosted.json; has err "usage:"
run 2 "${E[@]}"; has err "give either --call or --method"
run 2 "${E[@]}" --call; has err "--call needs a value"
run 2 "${E[@]}" --grant ops --call '{"name":'; has err "--call is not JSON"
run 2 "${E[@]}" --grant ops --call '{"arguments":{}}'; has err "needs {\"name\""
run 2 "${E[@]}" --call '{"name":"x"}'; has err "has 2 grants: name one with --grant"
run 2 "${E[@]}" --grant nobody --call '{"name":"x"}'; has err "no grant named \"nobody\""
run 2 "${E[@]}" --grant ops --upstream nowhere --call '{"name":"x"}'; has err "no upstream named \"nowhere\""
run 2 "${E[@]}" --grant ops --repeat 0 --call '{"name":"x"}'; has err "--repeat must be"
run 2 "${E[@]}" --grant ops --frob; has err "unknown argument: --frob"
run 2 policy explain -c $P/missing.conf --call '{"name":"x"}'; has err "is invalid"

echo "$n runs, $fails failures"
(( fails == 0 ))
