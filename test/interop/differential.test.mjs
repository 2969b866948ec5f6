// The same decision on every path: a differential test of the policy.
//
// For every case of CASES (a policy and a sequence of steps), each path of PATHS makes the same
// steps with a grant of its own (so every path starts on fresh counters) and turns each answer into
// a normalised record; the records of every path must equal those of the reference path (the
// first), and `tollgate policy explain` / `tollgate policy test` must predict them. A mismatch fails
// the case with a diff naming the case, the step and the two paths.
//
// Paths (PATHS below):
//   2025-http         2025 Streamable HTTP session -> the CoWork OS stand-in (2025, initialize local)
//   sse               legacy HTTP+SSE -> the stand-in
//   ws                WebSocket -> the stand-in
//   2026              2026-07-28 stateless requests -> the era2026 fixture (dual-era: served in 2026)
//   bridge 2025->2026 a 2025 session -> the era2026 fixture with --legacy reject (2026 only)
//   bridge 2026->2025 2026-07-28 stateless requests -> the stand-in (2025 only)
//   ws bridge 2025->2026  a WebSocket channel (2025) -> the 2026-only fixture
//   cluster 2025      one 2025 session made on instance a, its calls sent to a, b, a, b, ...
//                     (two gateways sharing one redis-server) -> the stand-in
//   cluster 2026      stateless requests sent to a, b, a, b, ... -> the era2026 fixture
//   cluster bridge 2025->2026  a 2025 session made on a, sent to a, b, ... -> the 2026-only fixture
//   cluster ws        WebSocket on instance b (a channel lives on one member) -> the stand-in
//   explain           `tollgate policy explain` for every step it can decide alone (a resource,
//                     a prompt, a tool's `hidden:`, the k-th of k identical calls with --repeat k,
//                     with its "counter values after this call"; in a case with `explainAfter`,
//                     every call, after the ones the reference let through given with --after:
//                     its "earlier call:" and "arguments:" compared too), and `tollgate policy
//                     test` for the whole sequence of tool calls (cases expecting the
//                     reference's decision, rule and reason, and with `attributes` the final
//                     arguments: a FAIL line is the mismatch)
//
// A record (see recordOf): the decision (allow, deny, limited, approve; `list` for a tools/list
// step), the JSON-RPC error code, error.message and error.data with what differs by nature taken
// out (an approval's id and page URL; `retry in N s` in a message), error.data.retry_after_ms
// (compared within the time that passed between the two paths' calls, plus 1.5 s), and the
// call's audit line (decision, rule, counters: the counter effects; args: the final arguments,
// audit.args = "values"; history), and what an allowed `echo` answered (both upstreams echo their
// text: the arguments the upstream received). error.data.history (and the audit line's) is
// compared as the step it names: its `at` becomes `step N` (that path's call of the named tool
// in flight nearest that instant), its upstream '<upstream>' when it is the path's own; a time
// and the upstream in a message become <time> and <upstream>. An allowed call is one the
// upstream answered, whatever it answered (a result, or an error of its own: the stand-in has no
// prompts, the era2026 fixture no cowork:// resources); its audit outcome is not compared.
//
// Adding a case (a new feature: history conditions, brakes, bound arguments, pins, ...): add an
// entry to CASES:
//   { name: 'short-id',                  // also the grant names' stem: [a-z0-9-]
//     why: 'what it pins',
//     policy: {...} | 'YAML text',       // an object is written as JSON, a string as YAML
//     steps: [ T('echo', {text: 'x'}), ... ],   // T(tool, args), R(uri), P(prompt), LIST, APPROVE(n),
//                                              // TRAW(tool, 'JSON text'): arguments sent as written
//     expect: ['allow', 'limited', ...],        // the reference path's decisions (the anchor: a
//                                              // case where every path is wrong alike fails)
//     anchors: { 3: 'brake', 1: ['echo'] },    // optional: the reference's deciding rule at step 3
//                                              // (its audit line's), the tools a LIST step shows
//     echoes: ['x', ...],                      // optional: what the upstream's echo answered, in
//                                              // order, on the reference path (the arguments it got)
//     conf: { limits: {...}, upstreams: { cowork: {...} } },  // optional, see below
//     attributes: { tenant: 'x' },             // optional: grants[].attributes of the case's grants
//     claims: { org: 7 },                      // optional: every path calls with a JWT (subject
//                                              // JWT_SUBJECT) carrying these claims, explain
//                                              // and policy test are given them
//     pins: ['echo'],                          // optional: the tools the case's pin file pins
//     bound: ['tenant', ...],                  // optional: a LIST records which of these the
//                                              // listed schemas show (properties, required)
//     explainAfter: true,                      // optional: explain every call (--after, above)
//     explainNot: { 8: 'why' },                // optional: steps explain cannot decide, printed
//     policyTestNot: 'why',                    // optional: policy test cannot run the case
//     skip: { 'PATH ID': 'why' },               // optional: a path that cannot take part
//     known: [{ path, steps: [1-based], why }] } // optional: a divergence found and not fixed yet
// - Steps may only call tools both upstreams have (`echo`, `execute_code`: ALLOWED_TOOLS) when
//   the policy lets them through (a tool the upstream lacks is an upstream JSON-RPC error, which
//   gives the call's counters back); denied calls may name anything.
// - Whatever the feature adds to error.data is compared as it is; a member that differs by
//   nature (a time, an id) goes into VOLATILE_DATA with how it is compared instead. A refusal of
//   the gateway's own is told from an upstream's error by isGatewayRefusal (a new -320xx code or
//   a new marker member goes there). The audit line's decision, rule and counters are compared;
//   a new audit member the feature writes goes into recordOf's `audit`.
// - A history condition or a brake is a sequence like the limits here: the steps are the calls,
//   and the record of the call that trips it (rule, message, error.data.history, retry_after_ms)
//   is compared across paths and cluster members. Bound arguments: the decision sees the final
//   arguments, the audit line logs them and `echo` answers with its bound text (both upstreams
//   get `text` and `message` set alike). A pin file belongs to an upstream, and the gateways are
//   shared: a case with `pins` sends to the same three upstreams under names of its own (upOf),
//   whose pin files before() makes with `tollgate pin` (strict gets dual's: `tollgate pin` lists
//   as a 2025 client) cut down to the case's tools. The gateway learns a pinned tool's definition
//   from a tools/list it relays, per cluster member: such a case lists twice first.
// - `conf`: merged into every gateway's configuration (all cases share the gateways): `limits`
//   into limits, `upstreams.NAME` into that upstream's entry. It must not change what the other
//   cases decide.
// - `skip` is printed as a diagnostic, never a silent pass. `known` is asserted as it is (each
//   listed path and step must still differ, printed as KNOWN DIVERGENCE), so that the entry goes
//   when the gateway is fixed.
// - The explain path can only decide what `policy explain` / `policy test` take: tool calls
//   (a sequence, through `policy test`), resources and prompts (one at a time), hidden tools.
//   It stops at the first APPROVE (no approvers offline).
// - DIFF_CASES=a,b runs those cases only; DIFF_REPEAT=N runs each N times on fresh grants (how
//   the cluster's give-back race was shaken out: about 1 run in 30 before the fix).
//
// Time: no window rolls and no bucket refills within a run (fixed windows are `day`, buckets hold
// a day's tokens); a run that would cross 00:00 UTC waits for it first (the one clock event the
// fixed windows depend on); history windows and brakes are a minute or more, longer than a run.
// Waits are for events (the answers, the audit lines, the admin API's listing). Whole file:
// about 16 s with an ASan build (22 cases x 12 paths).
//
//   TOLLGATE_BIN=build-asan/tollgate node --test test/interop/differential.test.mjs

import { describe, it, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import * as H from './lib/harness.mjs';
import * as C from './lib/cluster.mjs';
import { openClient, request as httpRequest, messagesOf, textOf } from './lib/clients.mjs';
import { startEra2026 } from './lib/conformance2026.mjs';

H.requireNodeModules();

// ---------------------------------------------------------------------------------------------
// The table

/** A tools/call step. */
const T = (name, args = {}) => ({ method: 'tools/call', params: { name, arguments: args } });
/** A resources/read step. */
const R = (uri) => ({ method: 'resources/read', params: { uri } });
/** A prompts/get step. */
const P = (name) => ({ method: 'prompts/get', params: { name } });
/** A tools/list step: the record is which of ALLOWED_TOOLS the list shows. */
const LIST = { method: 'tools/list', params: {} };
/**
 * An approver approves the path's n-th approval (1: the first the path met) on the admin API, with
 * the digest the listing shows; in a cluster on the instance that did not park the call. The
 * record is the admin API's answer; `policy test` has no approvers, so the explain path's records
 * end at the first APPROVE.
 */
const APPROVE = (n = 1) => ({ method: 'approve', params: { approval: n } });
const times = (n, step) => Array.from({ length: n }, () => step);
/**
 * A tools/call step whose arguments are sent as the JSON text `raw` as it is (its key order,
 * number spelling, spacing): what makes two calls "the same" for a brake or a `same` condition.
 */
const TRAW = (name, raw) => ({ method: 'tools/call', params: { name, arguments: JSON.parse(raw) }, raw });

/** Tools both upstreams (the stand-in and the era2026 fixture) have: an allowed call reaches a real tool. */
const ALLOWED_TOOLS = ['echo', 'execute_code'];
/** Arguments both upstreams' `echo` and `execute_code` accept (the rest is the case's). */
const echo = (more = {}) => T('echo', { text: 'hi', message: 'hi', ...more });
const exec = (more = {}) => T('execute_code', { language: 'python', code: 'print(1)', ...more });

const CASES = [
  {
    name: 'hosted-bucket',
    why: 'a hosted token bucket of 3 a day: the 4th call is limited, with the counter, retry_after_ms and message',
    policy: { version: '1', default: 'deny', tools: { echo: { limits: [{ counter: 'echoes', window: 'day', max: 3 }] } } },
    steps: times(5, echo()),
    expect: ['allow', 'allow', 'allow', 'limited', 'limited'],
  },
  {
    name: 'hosted-two-buckets',
    why: 'a tool bucket and a "*" bucket: the tighter one limits, all or nothing (the refused call spends neither)',
    policy: {
      version: '1', default: 'allow', tools: {
        echo: { limits: [{ counter: 'echo_day', window: 'day', max: 4 }] },
        '*': { limits: [{ counter: 'all_day', window: 'day', max: 3, scope: 'subject' }] },
      },
    },
    steps: [echo(), exec(), echo(), echo(), exec()],
    expect: ['allow', 'allow', 'allow', 'limited', 'limited'],
  },
  {
    name: 'hosted-actions',
    why: 'default deny, action deny with a reason, an unlisted tool, and a listed one allowed',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: { action: 'allow' },
        execute_code: { action: 'deny', reason: 'no code through the gateway' },
      },
    },
    steps: [echo(), exec(), T('delete_file', { path: '/tmp/x' }), LIST],
    expect: ['allow', 'deny', 'deny', 'list'],
  },
  {
    name: 'hide',
    why: 'hide: the tool is missing from tools/list and refused (hidden); default allow passes the rest',
    policy: { version: '1', default: 'allow', hide: ['execute_code'] },
    steps: [LIST, exec(), echo()],
    expect: ['list', 'deny', 'allow'],
  },
  {
    name: 'intercept-conditions',
    why: 'Intercept rules with conditions (in, lte, regex, exists): the first that fails names itself',
    policy: `# YAML on purpose: the other syntax of the same shapes
version: "1"
default: deny
tools:
  execute_code:
    rules:
      - name: python only
        conditions:
          - {path: args.language, op: in, value: [python]}
          - {path: args.code, op: regex, value: "^print"}
        on_deny: Only print statements in python
      - name: small amounts
        conditions: [{path: args.amount, op: lte, value: 5}]
  echo:
    rules:
      - name: needs a ticket
        conditions: [{path: args.ticket, op: exists, value: true}]
        on_deny: Say which ticket this is for
`,
    steps: [
      exec({ amount: 5 }), exec({ language: 'shell', amount: 1 }), exec({ code: 'import os', amount: 1 }),
      exec({ amount: 6 }), exec({ amount: '5' }), echo(), echo({ ticket: 'T-1' }),
    ],
    expect: ['allow', 'deny', 'deny', 'deny', 'deny', 'deny', 'allow'],
  },
  {
    name: 'intercept-state',
    why: 'a spend cap (state, increment_from) in a day window: the call that would pass the cap is limited and counts nothing',
    policy: {
      version: '1', default: 'deny', tools: {
        execute_code: {
          rules: [{
            name: 'daily spend',
            conditions: [{ path: 'state.execute_code.spend', op: 'lte', value: 10 }],
            state: { counter: 'spend', window: 'day', increment_from: 'args.amount' },
            on_deny: 'Daily budget of 10 spent',
          }],
        },
      },
    },
    steps: [exec({ amount: 4 }), exec({ amount: 4 }), exec({ amount: 4 }), exec({ amount: 2 }), exec({ amount: 1 }), exec({ amount: -1 })],
    expect: ['allow', 'allow', 'limited', 'allow', 'limited', 'deny'],
  },
  {
    name: 'intercept-rate-limit',
    why: 'rate_limit shorthand on a tool and on "*" (counted together, default message)',
    policy: {
      version: '1', default: 'allow', tools: {
        echo: { rules: [{ name: 'echo rate', rate_limit: '2/day' }] },
        '*': { rules: [{ name: 'global rate', rate_limit: '4/day' }] },
      },
    },
    steps: [echo(), echo(), echo(), exec(), exec(), exec()],
    expect: ['allow', 'allow', 'limited', 'allow', 'allow', 'limited'],
  },
  {
    name: 'intercept-deny-and-counter',
    why: 'a deny rule hides its tool; a counting rule read by a limiting rule (state.TOOL.COUNTER) of another',
    policy: {
      version: '1', default: 'allow', tools: {
        execute_code: { rules: [{ name: 'never', action: 'deny', on_deny: 'Not via agents' }] },
        echo: {
          rules: [
            { name: 'count echoes', conditions: [{ path: 'args.text', op: 'exists', value: true }], state: { counter: 'n', window: 'day' } },
            { name: 'two echoes', conditions: [{ path: 'state.echo.n', op: 'lt', value: 3 }], on_deny: 'Two echoes a day' },
          ],
        },
      },
    },
    // the refusals count nothing: in a cluster their first round did, and gave it back
    steps: [exec(), LIST, echo(), echo(), echo(), echo(), echo()],
    expect: ['deny', 'list', 'allow', 'allow', 'allow', 'limited', 'limited'],
  },
  {
    name: 'refusal-gives-back',
    why: 'a call refused by its second bucket spends nothing from its first, which another tool shares: the next calls find it whole',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: { limits: [{ counter: 'shared', window: 'day', max: 5 }, { counter: 'echo_only', window: 'day', max: 2 }] },
        execute_code: { limits: [{ counter: 'shared', window: 'day', max: 5 }] },
      },
    },
    steps: [echo(), echo(), echo(), echo(), exec(), exec(), exec(), exec()],
    expect: ['allow', 'allow', 'limited', 'limited', 'allow', 'allow', 'allow', 'limited'],
  },
  {
    name: 'scopes-of-counters',
    why: 'session and subject scopes beside grant: a session is one sequence here (the cluster path keeps its session across instances)',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: {
          limits: [
            { counter: 'per_session', window: 'day', max: 2, scope: 'session' },
            { counter: 'per_subject', window: 'day', max: 5, scope: 'subject' },
          ],
        },
        execute_code: { rules: [{ name: 'session window', rate_limit: '1/day' }] },
      },
    },
    steps: [echo(), echo(), echo(), exec(), exec()],
    expect: ['allow', 'allow', 'limited', 'allow', 'limited'],
  },
  {
    name: 'approve-retry',
    why: 'action approve in retry mode: -32003 pending at once (counters given back), the same call meets the same approval; approved, the call made again runs once and spends',
    policy: {
      version: '1', default: 'deny', tools: {
        execute_code: { action: 'approve', approval_mode: 'retry', limits: [{ counter: 'runs', window: 'day', max: 1 }] },
        echo: {},
      },
    },
    steps: [exec({ code: 'print(2)' }), exec({ code: 'print(2)' }), echo(), APPROVE(1), exec({ code: 'print(2)' }), exec({ code: 'print(2)' })],
    expect: ['approve', 'approve', 'allow', 'approved', 'allow', 'limited'],
  },
  {
    name: 'resources-prompts',
    why: 'resources and prompts groups: allow and deny globs, a reason, a URI decided in its normal form, one refused before matching',
    policy: {
      version: '1', default: 'deny', tools: {},
      resources: { allow: ['cowork://workspaces/**', 'test://static/*'], deny: ['**/secret*'], reason: 'only workspaces' },
      prompts: { allow: ['greeting*'], deny: ['greeting-admin'] },
    },
    steps: [
      R('cowork://workspaces/w1'), R('cowork://workspaces/secret-1'), R('cowork://tasks/t1'), R('COWORK://workspaces/../tasks/t1'),
      R('cowork://workspaces/%2Fetc'), P('greeting'), P('greeting-admin'), P('other'),
    ],
    expect: ['allow', 'deny', 'deny', 'allow', 'deny', 'allow', 'deny', 'deny'],
  },
  {
    name: 'default-deny-no-groups',
    why: 'default deny without resources and prompts groups refuses tools, resources and prompts alike',
    policy: { version: '1', default: 'deny', tools: { echo: {} } },
    steps: [echo(), exec(), R('cowork://workspaces'), P('greeting'), LIST],
    expect: ['allow', 'deny', 'deny', 'deny', 'list'],
  },
  // --- history, brakes, bound arguments (the calls before a call decide it too) -------------------
  {
    name: 'toxic-flow',
    why: 'tags and a history rule on "*": egress after a reads_secrets call is refused, error.data.history naming that call; egress before it, an untagged tool and the read itself pass',
    policy: `# YAML: the worked example's shape, over the two tools both upstreams have
version: "1"
default: allow
tools:
  echo: {tags: [reads_secrets]}
  execute_code: {tags: [egress]}
  "*":
    rules:
      - name: no-egress-after-secrets
        when: {tags: [egress]}
        conditions:
          - history: {tags: [reads_secrets], within: 10m}
            op: eq
            value: 0
`,
    // get_weather: untagged, on neither upstream (an upstream error: allowed by the policy)
    steps: [exec(), echo(), exec(), T('get_weather', { city: 'Oslo' }), echo(), exec({ code: 'print(3)' })],
    explainAfter: true,
    expect: ['allow', 'allow', 'deny', 'allow', 'allow', 'deny'],
    anchors: { 3: 'no-egress-after-secrets', 6: 'no-egress-after-secrets' },
  },
  {
    name: 'toxic-resource',
    why: 'a resource tagged by its group\'s pattern counts as the earlier call: error.data.history names the resource; an untagged read does not',
    policy: {
      version: '1', default: 'allow', tools: {
        execute_code: { tags: ['egress'], rules: [{ name: 'no-egress-after-secrets', conditions: [{ history: { tags: ['reads_secrets'], within: '10m' }, op: 'eq', value: 0 }] }] },
      },
      resources: { default: 'allow', tags: { 'cowork://workspaces/secret*': ['reads_secrets'] } },
    },
    // (the era2026 fixture has no cowork:// resources: an upstream error, allowed by the policy)
    steps: [R('cowork://workspaces/w1'), exec(), R('cowork://workspaces/secret-1'), exec()],
    explainAfter: true,
    expect: ['allow', 'allow', 'allow', 'deny'],
    anchors: { 4: 'no-egress-after-secrets' },
  },
  {
    name: 'history-distinct',
    why: 'at most 2 distinct args.repo an hour (canonical values: 1 and 1.0 are one), the refusal naming the latest counted call; a refused call is not remembered',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: {
          rules: [{
            name: 'two-repos',
            conditions: [{ history: { tools: ['echo'], distinct: 'args.repo', within: '1h' }, op: 'lte', value: 2 }],
          }],
        },
      },
    },
    steps: [
      echo({ repo: 'a' }), echo({ repo: 1 }), TRAW('echo', '{"repo": 1.0, "text": "hi", "message": "hi"}'),
      echo({ repo: 'c' }), echo({ repo: 'a' }), echo({ repo: 'd' }), echo({ repo: 1 }),
    ],
    explainAfter: true,
    expect: ['allow', 'allow', 'allow', 'deny', 'allow', 'deny', 'allow'],
    anchors: { 4: 'two-repos', 6: 'two-repos' },
  },
  {
    name: 'history-same',
    why: 'execute_code only after an echo of the same args.path in this session (list before delete): canonical values match, another path is refused with on_deny',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: {},
        execute_code: {
          rules: [{
            name: 'list-before-delete',
            when: { tools: ['execute_*'] },
            on_deny: 'list the directory first',
            conditions: [{ history: { tools: ['echo'], same: 'args.path', scope: 'session', within: '1h' }, op: 'gte', value: 1 }],
          }],
        },
      },
    },
    steps: [
      exec({ path: '/a' }), echo({ path: '/a' }), exec({ path: '/a' }), exec({ path: '/b' }),
      echo({ path: { d: 2, n: 1 } }), TRAW('execute_code', '{"path": {"n": 1e0, "d": 2.0}, "language": "python", "code": "print(1)"}'),
      exec({ path: { d: 2 } }),
    ],
    explainAfter: true,
    expect: ['deny', 'allow', 'allow', 'deny', 'allow', 'allow', 'deny'],
    anchors: { 1: 'list-before-delete', 4: 'list-before-delete', 7: 'list-before-delete' },
  },
  {
    name: 'brake',
    why: 'a brake of 2 identical calls a minute: the 3rd is braked whatever its key order and number spelling (-32002, rule brake, retry_after_ms); varied calls pass; a braked call spends nothing of the tool\'s bucket',
    policy: {
      version: '1', default: 'deny', tools: {
        echo: { brake: { repeats: 2, within: '60s' }, limits: [{ counter: 'echoes', window: 'day', max: 5 }] },
        execute_code: { brake: { repeats: 1, within: '60s', message: 'Run it once; then ask the user.' } },
      },
    },
    steps: [
      TRAW('echo', '{"text": "a", "message": "a", "n": 1}'), TRAW('echo', '{"n": 1.0, "message": "a", "text": "a"}'),
      TRAW('echo', '{"message":"a","text":"a","n":1e0}'), TRAW('echo', '{"text": "a", "message": "a", "n": 1}'),
      echo({ n: 2 }), echo({ n: 3 }), echo({ n: 4 }), echo({ n: 5 }),
      exec(), exec(), exec({ code: 'print(2)' }),
    ],
    // 5 echoes spent (1, 1.0, 2, 3, 4): the braked two took nothing, so n=5 is the first the bucket refuses
    explainAfter: true,
    explainNot: { 8: 'explain --after remembers earlier calls for history only, not the bucket they spent (policy test checks it)' },
    expect: ['allow', 'allow', 'limited', 'limited', 'allow', 'allow', 'allow', 'limited', 'allow', 'limited', 'allow'],
    anchors: { 3: 'brake', 4: 'brake', 8: 'echoes', 10: 'brake' },
  },
  {
    name: 'brake-cycle',
    why: 'a "*" brake with cycle and tags: a loop of two calls is braked as it starts its third round, the loop named; an untagged tool is never braked',
    policy: `version: "1"
default: allow
tools:
  echo: {tags: [write]}
  execute_code: {tags: [write]}
  "*":
    brake: {repeats: 2, within: 60s, cycle: 3, tags: [write]}
`,
    steps: [
      echo({ n: 1 }), exec({ n: 1 }), echo({ n: 1 }), exec({ n: 1 }), echo({ n: 1 }), exec({ n: 2 }),
      T('get_weather', { city: 'Oslo' }), T('get_weather', { city: 'Oslo' }), T('get_weather', { city: 'Oslo' }),
    ],
    explainAfter: true,
    expect: ['allow', 'allow', 'allow', 'allow', 'limited', 'allow', 'allow', 'allow', 'allow'],
    anchors: { 5: 'brake' },
  },
  {
    name: 'bind',
    why: 'set from grants[].attributes overwrites what the model sent (the upstream echoes the bound text, the audit line logs it), forbid removes, strict refuses another value, a claim a static token lacks denies (rule set); tools/list schemas without them',
    attributes: { tenant: 'acme-prod', region: 'eu' },
    policy: {
      version: '1', default: 'deny', tools: {
        '*': { forbid: ['debug'] },
        echo: {
          set: { text: '${grant.tenant}', message: '${grant.tenant}', region: '${grant.region}' },
          rules: [{ name: 'own-tenant', conditions: [{ path: 'args.text', op: 'eq', value: 'acme-prod' }] }],
        },
        execute_code: { set: { tenant: '${grant.tenant}' }, strict: true },
        delete_file: { set: { org: '${claims.org_id}' } },
      },
    },
    steps: [
      echo({ text: 'globex', message: 'globex', debug: true }), echo({ region: 'us' }),
      exec({ tenant: 'globex' }), exec({ tenant: 'acme-prod' }), exec(), exec({ debug: false }),
      T('delete_file', { path: '/tmp/x' }), LIST,
    ],
    explainAfter: true,
    expect: ['allow', 'allow', 'deny', 'allow', 'allow', 'deny', 'deny', 'list'],
    anchors: { 3: 'set', 6: 'forbid', 7: 'set', 8: ['echo', 'execute_code'] },
    bound: ['text', 'message', 'region', 'tenant', 'debug'], // tools/list: none of them in a schema
    echoes: ['acme-prod', 'acme-prod'],
  },
  {
    name: 'bind-claims',
    why: 'set from the caller\'s JWT claims and subject: a whole-string template keeps the claim\'s type (strict compares it canonically: 42.0 is 42, "42" is not), a template inside text, a claim the token lacks denies (rule set)',
    claims: { org_id: 42, team_name: 'blue' },
    policy: {
      version: '1', default: 'deny', tools: {
        echo: { set: { text: 'org ${claims.org_id} (${claims.team_name}) for ${subject}', message: 'org ${claims.org_id} (${claims.team_name}) for ${subject}' } },
        execute_code: { set: { org: '${claims.org_id}' }, strict: true },
        delete_file: { set: { region: '${claims.region}' } },
      },
    },
    steps: [
      echo({ text: 'org 7' }), TRAW('execute_code', '{"org": 42.0, "language": "python", "code": "print(1)"}'),
      exec({ org: '42' }), exec(), T('delete_file', { path: '/tmp/x' }),
    ],
    explainAfter: true,
    expect: ['allow', 'allow', 'deny', 'allow', 'deny'],
    anchors: { 3: 'set', 5: 'set' },
    echoes: ['org 42 (blue) for alice'],
  },
  {
    name: 'pins',
    why: 'a pin file pinning echo only: echo listed and allowed; execute_code, named by the policy but not pinned, hidden and refused under default deny (rule pin)',
    pins: ['echo'],
    policy: { version: '1', default: 'deny', tools: { echo: {}, execute_code: {} } },
    // the gateway learns a pinned tool's definition from a tools/list it relays (each cluster
    // member its own): two lists first, so that both members of a cluster path have seen one
    steps: [LIST, LIST, echo(), exec(), echo({ text: 'again', message: 'again' }), exec()],
    explainAfter: true,
    policyTestNot: 'policy test reads the policy file alone, without the conf\'s pin file',
    expect: ['list', 'list', 'allow', 'deny', 'allow', 'deny'],
    anchors: { 1: ['echo'], 2: ['echo'], 4: 'pin', 6: 'pin' },
  },
];

// ---------------------------------------------------------------------------------------------
// The paths

const PATHS = [
  { id: '2025-http', gw: 'local', kind: 'streamable', up: 'cowork' },
  { id: 'sse', gw: 'local', kind: 'sse', up: 'cowork' },
  { id: 'ws', gw: 'local', kind: 'ws', up: 'cowork' },
  { id: '2026', gw: 'local', kind: 'stateless', up: 'dual' },
  { id: 'bridge 2025->2026', gw: 'local', kind: 'streamable', up: 'strict' },
  { id: 'bridge 2026->2025', gw: 'local', kind: 'stateless', up: 'cowork' },
  { id: 'ws bridge 2025->2026', gw: 'local', kind: 'ws', up: 'strict' },
  { id: 'cluster 2025', gw: 'cluster', kind: 'streamable', up: 'cowork' },
  { id: 'cluster 2026', gw: 'cluster', kind: 'stateless', up: 'dual' },
  { id: 'cluster bridge 2025->2026', gw: 'cluster', kind: 'streamable', up: 'strict' },
  { id: 'cluster ws', gw: 'cluster', kind: 'ws', up: 'cowork', only: 1 },
  { id: 'explain', gw: 'none' },
];
const UPSTREAMS = ['cowork', 'dual', 'strict'];
/** The upstream a path of case c sends to: its own, or (a case with `pins`) the same one with c's pin file. */
const upOf = (c, up) => (c.pins ? `${up}-pins-${c.name}` : up);
/** The upstreams with pin files: [{name, entry (the conf's entry it copies), file}], made in before(). */
const pinned = [];

// error.data members that differ by nature, and how they are compared instead
const VOLATILE_DATA = {
  retry_after_ms: 'within the time between the two paths\' calls + 1.5 s (field retry_after_ms of the record)',
  approval_id: 'left out: an id per parked call',
  url: 'left out: the approvals page of the instance that answered',
  approval_url: 'left out: the approvals page of the instance that answered',
  expires_in_ms: 'left out: counts down',
};

// ---------------------------------------------------------------------------------------------
// Setup

const cleanup = new H.Cleanup();
let dir;
let standin;
let dual;
let strict;
let redis;
let local; // { gw, conf, audit }
let cluster; // [{ gw, conf, audit }, ...]
const grants = {}; // `${case}/${path}` -> { name, token }
const policyFiles = {}; // case name -> file
const STANDIN_TOKEN = 'cowork-' + H.randomToken();
const ADMIN_TOKEN = 'admin-' + H.randomToken();
const ADMIN = { authorization: `Bearer ${ADMIN_TOKEN}` };

const grantKey = (c, p) => `${c.name}/${p.id}`;

// A case with `claims` calls with a JWT of this issuer (keys made in before()), naming its grant
// by the claim dgrant.
const JWT_ISSUER = 'https://idp.differential.test/';
const JWT_AUDIENCE = 'tollgate-differential';
const JWT_SUBJECT = 'alice';
let jwtKey;
let jwksFile;
const b64u = (v) => Buffer.from(JSON.stringify(v)).toString('base64url');
/** The bearer token of grant g in case c: its static token, or a JWT with the case's claims. */
function tokenOf(c, g) {
  if (!c.claims) return g.token;
  const now = Math.floor(Date.now() / 1000);
  const input = `${b64u({ alg: 'RS256', typ: 'JWT', kid: 'd1' })}.${b64u({
    iss: JWT_ISSUER, aud: JWT_AUDIENCE, sub: JWT_SUBJECT, dgrant: g.name, iat: now, exp: now + 3600, ...c.claims,
  })}`;
  return `${input}.${crypto.sign('sha256', Buffer.from(input), jwtKey.privateKey).toString('base64url')}`;
}
const slug = (s) => s.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');

function writePolicies() {
  for (const c of CASES) {
    const yaml = typeof c.policy === 'string';
    const f = path.join(dir, `${c.name}.${yaml ? 'yaml' : 'json'}`);
    fs.writeFileSync(f, yaml ? c.policy : JSON.stringify(c.policy, null, 1) + '\n');
    policyFiles[c.name] = f;
    for (const p of PATHS) {
      const name = `d-${c.name}-${slug(p.id)}`;
      grants[grantKey(c, p)] = { name, token: `${name}-${H.randomToken()}` };
    }
  }
}

/** The conf of a gateway (local, or one cluster instance): every grant, each case's policy on every upstream. */
function confFor(sub, { auditFile, clusterGroup, withPins = true }) {
  fs.mkdirSync(sub, { recursive: true });
  const more = (up) => Object.assign({}, ...CASES.map((c) => c.conf?.upstreams?.[up] ?? {}));
  const base = [
    { name: 'cowork', url: standin.url, initialize: 'local', headers: { Authorization: `Bearer ${STANDIN_TOKEN}` }, policy: policyFiles[CASES[0].name], ...more('cowork') },
    { name: 'dual', url: dual.url, policy: policyFiles[CASES[0].name], ...more('dual') },
    { name: 'strict', url: strict.url, policy: policyFiles[CASES[0].name], ...more('strict') },
  ];
  return H.writeConf(sub, {
    limits: Object.assign({}, ...CASES.map((c) => c.conf?.limits ?? {})),
    admin: { token_sha256: H.sha256hex(ADMIN_TOKEN) },
    grants: CASES.flatMap((c) => PATHS.map((p) => {
      const g = grants[grantKey(c, p)];
      return {
        name: g.name, token_sha256: H.sha256hex(g.token),
        policies: [...UPSTREAMS, ...pinned.map((x) => x.name)].map((up) => ({ upstream: up, policy: policyFiles[c.name] })),
        ...(c.attributes ? { attributes: c.attributes } : {}),
        ...(c.claims ? { issuers: [JWT_ISSUER] } : {}),
      };
    })),
    upstreams: [
      ...base,
      // a case with `pins`: the same upstreams under names of their own, with its pin file
      ...(withPins ? pinned.map((x) => ({ ...base.find((b) => b.name === x.base), name: x.name, pins: x.file })) : []),
    ],
    audit: { file: auditFile, args: 'values' }, // the final arguments, as the upstream got them
    jwt: [{ issuer: JWT_ISSUER, audience: JWT_AUDIENCE, jwks_file: jwksFile, grant_claim: 'dgrant' }],
    cluster: clusterGroup,
  });
}

async function startGateway(sub, opts) {
  const auditFile = path.join(sub, 'audit.log');
  const conf = confFor(sub, { ...opts, auditFile });
  const gw = await H.startTollgate(conf, { cleanup, admin: true });
  for (const name of ['dual', 'strict', ...pinned.map((x) => x.name).filter((n) => !n.startsWith('cowork'))]) {
    await gw.waitForLog(new RegExp(`msg="upstream protocol" upstream=${name} era=`), { what: `the probe's verdict on ${name}` });
  }
  return { gw, conf, audit: auditFile };
}

/**
 * The pin files of the cases with `pins` (the tools they pin): `tollgate pin` of each upstream as
 * it lists its tools now, cut down to those tools, for an upstream of the case's own (upOf).
 */
async function writePins() {
  const cases = CASES.filter((c) => c.pins);
  if (!cases.length) return;
  const pre = confFor(path.join(dir, 'pin'), { auditFile: path.join(dir, 'pin', 'audit.log'), withPins: false });
  const listed = {};
  // (strict is the same fixture as dual, served in 2026 only, which `tollgate pin`, a 2025
  // client, cannot list: it gets dual's definitions)
  for (const up of ['cowork', 'dual']) {
    const f = path.join(dir, 'pin', `${up}.pins.json`);
    const r = await run(['pin', '-c', pre, '--out', f, up]);
    assert.equal(r.code, 0, `tollgate pin ${up}: ${r.stdout}${r.stderr}`);
    listed[up] = JSON.parse(fs.readFileSync(f, 'utf8'));
  }
  listed.strict = listed.dual;
  for (const c of cases) {
    for (const up of UPSTREAMS) {
      const name = upOf(c, up);
      const tools = Object.fromEntries(c.pins.map((t) => [t, listed[up].tools[t]]));
      assert.ok(c.pins.every((t) => tools[t]), `${up} lists ${c.pins.join(', ')}`);
      const file = path.join(dir, `${name}.pins.json`);
      fs.writeFileSync(file, JSON.stringify({ ...listed[up], upstream: name, tools }, null, 1));
      pinned.push({ name, base: up, file });
    }
  }
}

/** Waits until 00:00 UTC has passed if it is less than `ms` away: the `day` windows must not roll mid-run. */
async function notAcrossMidnight(ms) {
  const day = 86400000;
  const left = day - (Date.now() % day);
  if (left < ms) {
    process.stderr.write(`# differential: ${left} ms to 00:00 UTC; waiting for the day windows to roll first\n`);
    await H.sleep(left + 1000);
  }
}

const logs = () => ({
  'tollgate (local) stderr': local?.gw.stderr(),
  'tollgate (cluster a) stderr': cluster?.[0]?.gw.stderr(),
  'tollgate (cluster b) stderr': cluster?.[1]?.gw.stderr(),
});

before(async () => {
  await notAcrossMidnight(60000);
  dir = H.makeTempDir(cleanup, 'tollgate-differential-');
  [standin, dual, strict, redis] = await Promise.all([
    H.startStandin({ cleanup, token: STANDIN_TOKEN }),
    startEra2026({ cleanup }),
    startEra2026({ cleanup, args: ['--legacy', 'reject'] }),
    C.startRedis({ cleanup, dir }),
  ]);
  writePolicies();
  jwtKey = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
  jwksFile = path.join(dir, 'jwks.json');
  fs.writeFileSync(jwksFile, JSON.stringify({ keys: [{ ...jwtKey.publicKey.export({ format: 'jwk' }), kid: 'd1', alg: 'RS256', use: 'sig' }] }) + '\n');
  await writePins();
  const secretFile = C.writeSecret(dir);
  const clusterGroup = (instance) => ({
    redis: redis.addr, key_prefix: `tollgate-diff-${H.randomToken(4)}:`, secret_file: secretFile,
    on_unavailable: 'deny', timeout_ms: 1000, instance,
  });
  const group = clusterGroup('a');
  [local, ...cluster] = await Promise.all([
    startGateway(path.join(dir, 'local'), {}),
    startGateway(path.join(dir, 'cluster-a'), { clusterGroup: group }),
    startGateway(path.join(dir, 'cluster-b'), { clusterGroup: { ...group, instance: 'b' } }),
  ]);
});

after(() => cleanup.run());

// ---------------------------------------------------------------------------------------------
// Running one path

/** A 2025 session made on ports[0] whose requests go to ports[i % n] (a cluster shares the session). */
async function roamingSession(ports, upstream, token) {
  const agent = new http.Agent({ keepAlive: true });
  cleanup.add(() => agent.destroy());
  const url = `/${upstream}/mcp`;
  const base = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${token}` };
  const init = { jsonrpc: '2.0', id: 'init', method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'differential', version: '1' } } };
  const r = await httpRequest(agent, ports[0], 'POST', url, base, JSON.stringify(init));
  assert.equal(r.status, 200, `initialize: HTTP ${r.status} ${r.text}`);
  const headers = { ...base, 'mcp-session-id': r.headers['mcp-session-id'], 'mcp-protocol-version': messagesOf(r)[0]?.result?.protocolVersion ?? '2025-06-18' };
  const n = await httpRequest(agent, ports[0], 'POST', url, headers, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }));
  assert.ok(n.status === 202 || n.status === 200, `initialized: HTTP ${n.status}`);
  let i = 0;
  let seq = 0;
  return {
    async request(method, params, { raw } = {}) {
      const port = ports[i++ % ports.length];
      const id = `roam-${++seq}`;
      const RAW = '\u0000raw\u0000';
      const body = raw == null ? JSON.stringify({ jsonrpc: '2.0', id, method, params })
        : JSON.stringify({ jsonrpc: '2.0', id, method, params: { ...params, arguments: RAW } }).replace(JSON.stringify(RAW), () => raw);
      const a = await httpRequest(agent, port, 'POST', url, headers, body);
      const m = messagesOf(a).find((x) => x && x.id === id);
      if (!m) throw new Error(`${method} on port ${port}: HTTP ${a.status} without an answer: ${a.text.slice(0, 300)}`);
      return m;
    },
    close: () => httpRequest(agent, ports[0], 'DELETE', url, headers, null).catch(() => {}),
  };
}

/** Clients of one path: request(method, params) and which gateway (index into gws) served each request. */
async function clientsFor(p, token, up) {
  if (p.gw === 'local') {
    const c = await openClient(p.kind, { port: local.gw.plainPort, upstream: up, token });
    return { gws: [local], pick: () => 0, request: (m, params, o) => c.request(m, params, o), close: () => c.close() };
  }
  if (p.only !== undefined) { // a channel lives on one instance: the cluster's counters, one member
    const c = await openClient(p.kind, { port: cluster[p.only].gw.plainPort, upstream: up, token });
    return { gws: cluster, pick: () => p.only, request: (m, params, o) => c.request(m, params, o), close: () => c.close() };
  }
  const ports = cluster.map((g) => g.gw.plainPort);
  let served = 0;
  if (p.kind === 'streamable') {
    const s = await roamingSession(ports, up, token);
    return { gws: cluster, pick: () => served++ % 2, request: (m, params, o) => s.request(m, params, o), close: () => s.close() };
  }
  const cs = await Promise.all(ports.map((port) => openClient(p.kind, { port, upstream: up, token })));
  let i = 0;
  return {
    gws: cluster, pick: () => served++ % 2,
    request: (m, params, o) => cs[i++ % 2].request(m, params, o),
    close: () => Promise.all(cs.map((c) => c.close())),
  };
}

/** Approves approval `id` on gateway g's admin API with the digest its listing shows; the answer is {approved: status}. */
async function approveOn(g, id) {
  const base = `http://127.0.0.1:${g.gw.adminPort}/admin/approvals`;
  let last;
  const item = await H.waitUntil(async () => {
    last = await (await fetch(base, { headers: ADMIN })).text();
    return JSON.parse(last).approvals?.find((x) => x.id === id);
  }, { what: `approval ${id} in GET /admin/approvals`, detail: () => last });
  const r = await fetch(`${base}/${id}/approve`, {
    method: 'POST', headers: { ...ADMIN, 'content-type': 'application/json' }, body: JSON.stringify({ digest: item.digest }),
  });
  return { approved: r.status, text: await r.text() };
}

const auditLines = (file) => (fs.existsSync(file)
  ? fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => { try { return JSON.parse(l); } catch { return { unparsable: l }; } })
  : []);
const AUDITED = new Set(['tools/call', 'resources/read', 'prompts/get']);
/** Seconds between the earlier calls the explain path gives with --after (see explainPath). */
const AFTER_SPACING = 0.2;

/** Makes the case's steps on path p; returns one record per step. */
async function runPath(c, p) {
  const g = grants[grantKey(c, p)];
  const cl = await clientsFor(p, tokenOf(c, g), upOf(c, p.up));
  const raw = [];
  const approvalIds = []; // in the order the path met them
  try {
    for (const step of c.steps) {
      const at = Date.now();
      if (step.method === 'approve') {
        const k = cl.gws.length - 1;
        raw.push({ step, answer: await approveOn(cl.gws[k], approvalIds[step.params.approval - 1]), at, gwIndex: k });
        continue;
      }
      const gwIndex = cl.pick();
      const answer = await cl.request(step.method, step.params, step.raw === undefined ? undefined : { raw: step.raw });
      const id = answer.error?.data?.approval_id;
      if (id !== undefined && !approvalIds.includes(id)) approvalIds.push(id);
      raw.push({ step, answer, at, done: Date.now(), gwIndex });
    }
  } finally {
    await cl.close();
  }
  // The audit lines of this grant. A line that ends an approval (approved, rejected, ...) is the
  // APPROVE step's, found by its approval_id on whichever gateway held the approval. The others
  // are in order per gateway: the i-th audited call on gateway k is its i-th such line there,
  // except a call that meets an approval already pending (the same call made again), which has
  // no line of its own. Allowed calls are written when they finish: wait for all of them.
  const approvals = new Map(); // approval_id -> its number in this path (1, 2, ...)
  for (const r of raw) {
    const id = r.answer.error?.data?.approval_id;
    r.audited = AUDITED.has(r.step.method);
    if (id !== undefined) {
      if (approvals.has(id)) r.audited = false;
      else approvals.set(id, approvals.size + 1);
      r.approval = approvals.get(id);
    }
    if (r.step.method === 'approve') r.approvalId = approvalIds[r.step.params.approval - 1];
  }
  const ENDS = new Set(['approved', 'rejected', 'expired', 'cancelled', 'refused']);
  const want = cl.gws.map((_, k) => raw.filter((r) => r.gwIndex === k && r.audited).length);
  const wantEnds = raw.filter((r) => r.approvalId !== undefined).map((r) => r.approvalId);
  const read = () => cl.gws.map((gw) => auditLines(gw.audit).filter((l) => l.grant === g.name));
  const lines = await H.waitUntil(() => {
    const got = read();
    const calls = got.map((l) => l.filter((x) => !ENDS.has(x.decision)));
    const ends = got.flat().filter((x) => ENDS.has(x.decision)).map((x) => x.approval_id);
    return calls.every((l, k) => l.length >= want[k]) && wantEnds.every((id) => ends.includes(id)) && got;
  }, { what: `${want.join('+')} audit lines of calls and ${wantEnds.length} of approvals of grant ${g.name}`, detail: () => show(read()) });
  const callLines = lines.map((l) => l.filter((x) => !ENDS.has(x.decision)));
  const endLines = lines.flat().filter((x) => ENDS.has(x.decision));
  const next = cl.gws.map(() => 0);
  return raw.map((r, self) => {
    let audit;
    if (r.approvalId !== undefined) audit = endLines.find((x) => x.approval_id === r.approvalId);
    else if (r.audited) audit = callLines[r.gwIndex][next[r.gwIndex]++];
    const rec = recordOf(r.step, r.answer, r.at, audit, { up: upOf(c, p.up), steps: raw, self, bound: c.bound });
    if (r.approval !== undefined) {
      rec.data.approval = r.approval; // which approval: the same call made again meets the same one
      if (!r.audited) rec.audit = `none (approval ${r.approval} is already pending)`;
    }
    return rec;
  });
}

// ---------------------------------------------------------------------------------------------
// Records

// (a pinned upstream's name, which each path has its own, is '<upstream>' too)
const normMessage = (s, up) => (typeof s !== 'string' ? s : s
  .replaceAll(up?.includes('-pins-') ? up : '\u0000', '<upstream>')
  .replace(/retry in \d+ s/g, 'retry in N s')
  .replace(/https?:\/\/127\.0\.0\.1:\d+\S*/g, '<url>')
  // a history refusal names the earlier call's time and upstream (each path has its own)
  .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>')
  .replace(/ on (cowork|dual|strict) at /g, ' on <upstream> at ')
  .replace(/\b[0-9a-f]{32,64}\b/g, '<hex>'));

/** The gateway's own refusals carry one of these in error.data; an upstream's error does not. */
const isGatewayRefusal = (e) => e && typeof e.data === 'object' && e.data !== null &&
  [-32001, -32002, -32003, -32004, -32005].includes(e.code) &&
  ('rule' in e.data || 'counter' in e.data || 'approval_id' in e.data || 'upstream' in e.data || e.data.error === 'insufficient_scope');

function decisionOf(e) {
  switch (e.code) {
    case -32001: return 'deny';
    case -32002: return 'limited';
    case -32003: return 'approve';
    case -32005: return 'insufficient_scope';
    default: return `gateway error ${e.code}`;
  }
}

/**
 * error.data.history with what differs by path made comparable: `upstream` (this path's own is
 * '<upstream>') and `at`: which of this path's calls of that tool (resource, prompt) it names,
 * `step N`, the one in flight nearest that instant (the gateway's clock is its event loop's, a
 * millisecond or so behind the test's), among the steps before ctx.self (the step whose answer
 * names it: an earlier call is never the call itself; on a fast path two steps can share the
 * millisecond).
 */
function historyOf(h, ctx) {
  if (!h || typeof h !== 'object' || !ctx) return h;
  const t = typeof h.at === 'number' ? h.at : Date.parse(h.at);
  const named = (st) => (h.tool !== undefined ? st.method === 'tools/call' && st.params.name === h.tool
    : h.resource !== undefined ? st.method === 'resources/read' && st.params.uri === h.resource
      : st.method === 'prompts/get' && st.params.name === h.prompt);
  let best = -1;
  let dist = Infinity;
  ctx.steps.forEach((r, j) => {
    if (!r.done || !named(r.step) || (ctx.self !== undefined && j >= ctx.self)) return;
    const d = t < r.at ? r.at - t : t > r.done ? t - r.done : 0;
    if (d <= dist) { best = j; dist = d; }
  });
  const at = best < 0 || dist > 1000 ? `${h.at} (during no call of it)` : `step ${best + 1}`;
  return { ...h, upstream: h.upstream === ctx.up ? '<upstream>' : h.upstream, at };
}

/** Members sorted at every depth: two JSON values compared as values. */
const canon = (v) => (Array.isArray(v) ? v.map(canon) : v && typeof v === 'object'
  ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])])) : v);

/** The comparable record of one step's answer (and its audit line); ctx: {up, steps} of the path. */
function recordOf(step, answer, at, audit, ctx) {
  if (step.method === 'approve') {
    return {
      decision: answer.approved === 200 ? 'approved' : `approve: HTTP ${answer.approved} ${answer.text}`, at,
      // who decided, without the member (a cluster writes api@b): the same approver everywhere
      audit: audit && { decision: audit.decision, rule: audit.rule, counters: audit.counters, decided_by: String(audit.decided_by).replace(/@.*$/, '') },
    };
  }
  if (step.method === 'tools/list') {
    const tools = answer.result?.tools ?? [];
    const names = tools.map((t) => t.name);
    const rec = { decision: answer.result ? 'list' : 'list failed', visible: ALLOWED_TOOLS.filter((n) => names.includes(n)), at };
    if (ctx?.bound) {
      // which of the bound and forbidden arguments the listed schemas still show (none: the
      // upstreams' own schemas differ, stripped they agree)
      rec.schema = canon(Object.fromEntries(tools.filter((t) => ALLOWED_TOOLS.includes(t.name)).map((t) => [t.name, [
        ...Object.keys(t.inputSchema?.properties ?? {}), ...(t.inputSchema?.required ?? []).map((r) => `required ${r}`),
      ].filter((k) => ctx.bound.includes(k.replace(/^required /, ''))).sort()])));
    }
    return rec;
  }
  const rec = { decision: 'allow', at };
  const e = answer.error;
  if (isGatewayRefusal(e)) {
    rec.decision = decisionOf(e);
    rec.code = e.code;
    rec.message = normMessage(e.message, ctx?.up);
    const data = {};
    for (const [k, v] of Object.entries(e.data)) {
      if (k === 'retry_after_ms') rec.retry_after_ms = v;
      else if (k === 'history') data[k] = historyOf(v, ctx);
      else if (!(k in VOLATILE_DATA)) data[k] = typeof v === 'string' ? normMessage(v, ctx?.up) : v;
    }
    rec.data = data;
  } else if (step.params?.name === 'echo' && answer.result) {
    rec.echoed = textOf(answer); // what the upstream received: both upstreams' echo answers with its text
  }
  if (audit) {
    // args: the final arguments (bound values written, forbidden ones removed), canonical
    rec.audit = { method: audit.method, tool: audit.tool, decision: audit.decision, rule: audit.rule, counters: audit.counters, args: canon(audit.args) };
    if (audit.history !== undefined) rec.audit.history = historyOf(audit.history, ctx);
  }
  return rec;
}

// ---------------------------------------------------------------------------------------------
// The explain path: tollgate policy explain / policy test, offline

function run(args) {
  return new Promise((resolve) => {
    execFile(H.tollgateBin(), args, { cwd: dir, env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=1' } }, (err, stdout, stderr) => {
      resolve({ code: err ? err.code : 0, stdout, stderr });
    });
  });
}

/** `tollgate policy explain` output as { decision, reason, rule, at, hidden, counters }. */
function parseExplain(out) {
  const field = (k) => new RegExp(`^${k}: (.*)$`, 'm').exec(out)?.[1];
  const after = /^counter values after this call: (.*)$/m.exec(out)?.[1];
  return {
    decision: field('decision'), reason: field('reason'), rule: field('rule'), hidden: field('hidden'),
    counters: after ? JSON.parse(after) : undefined,
    earlier: (() => { const e = /^earlier call: (.*)$/m.exec(out)?.[1]; return e === undefined ? undefined : JSON.parse(e); })(),
    arguments: (() => { const a = /^arguments: (.*) \(after set and forbid\)$/m.exec(out)?.[1]; return a === undefined ? undefined : JSON.parse(a); })(),
    retry: /retry in (\d+) ms\)/.exec(out)?.[1],
  };
}

const yamlString = (s) => JSON.stringify(s); // a JSON string is a YAML double-quoted scalar

/**
 * The explain path's records: an explain per step it can decide alone (with --after, the calls
 * before it that the table expects allowed: the reference path is held to them). Returns
 * { records, notes }; it runs beside the other paths (policyTestOf runs after them).
 */
async function explainPath(c) {
  const g = grants[grantKey(c, PATHS.find((p) => p.id === 'explain'))];
  const base = ['policy', 'explain', '-c', local.conf, '--grant', g.name, '--upstream', upOf(c, 'cowork'),
    ...(c.claims ? ['--subject', JWT_SUBJECT, '--issuer', JWT_ISSUER, ...Object.entries(c.claims).flatMap(([k, v]) => ['--claim', `${k}=${JSON.stringify(v)}`])] : [])];
  const records = [];
  const notes = [];
  const approveAt = c.steps.findIndex((s) => s.method === 'approve');
  const until = approveAt < 0 ? c.steps.length : approveAt; // policy test has no approvers
  for (let i = 0; i < c.steps.length; i++) {
    const step = c.steps[i];
    if (i >= until) { records.push(null); continue; }
    if (step.method === 'tools/list') {
      const visible = [];
      for (const name of ALLOWED_TOOLS) {
        const r = parseExplain((await run([...base, '--call', JSON.stringify({ name, arguments: {} })])).stdout);
        if (r.hidden === 'no') visible.push(name);
      }
      records.push({ decision: 'list', visible, at: Date.now() });
      continue;
    }
    // the k-th of k identical tool calls (nothing else before it) is what --repeat k explains; in
    // a case with history (c.explainAfter), any call after the ones the reference let through
    // (--after, oldest first: a refused call is not remembered)
    const same = c.steps.slice(0, i + 1).every((s) => JSON.stringify(s) === JSON.stringify(step));
    if (step.method === 'tools/call' && !same && !c.explainAfter) { records.push(null); continue; }
    if (c.explainNot?.[i + 1]) { records.push(null); notes.push(`explain: step ${i + 1} not explained: ${c.explainNot[i + 1]}`); continue; }
    const callText = step.raw === undefined ? JSON.stringify(step.params)
      : JSON.stringify({ ...step.params, arguments: '\u0000' }).replace('"\\u0000"', () => step.raw);
    // each AFTER_SPACING s before the next, so that the instant of the earlier call a refusal names
    // tells which step it was
    const remembered = c.explainAfter && !same ? c.steps.slice(0, i).map((s, j) => ({ s, j }))
      .filter(({ s, j }) => c.expect[j] === 'allow' && AUDITED.has(s.method)) : [];
    const agoOf = (k) => (remembered.length - k) * AFTER_SPACING;
    const earlier = remembered.flatMap(({ s }, k) => ['--after', JSON.stringify(
      s.method === 'tools/call' ? { tool: s.params.name, args: s.params.arguments, ago: agoOf(k) }
        : s.method === 'resources/read' ? { resource: s.params.uri, ago: agoOf(k) } : { prompt: s.params.name, ago: agoOf(k) })]);
    const args = step.method === 'tools/call'
      ? ['--call', callText, ...(same ? ['--repeat', String(i + 1)] : earlier)]
      : ['--method', step.method, '--params', JSON.stringify(step.params), ...earlier];
    const started = Date.now();
    const out = await run([...base, ...args]);
    const now = (started + Date.now()) / 2; // the instant explain decided at, about
    const x = parseExplain(out.stdout);
    if (!x.decision) { records.push({ decision: `explain failed (${out.code}): ${out.stderr.trim()}` }); continue; }
    const rec = { decision: x.decision, at: Date.now() };
    if (x.decision !== 'allow') {
      rec.message = normMessage(x.reason, upOf(c, 'cowork'));
      // a counter names the limit that refused; explain's "rule:" is the counter then
      rec.explainRule = x.rule;
      if (x.retry !== undefined) rec.retry_after_ms = Number(x.retry);
    }
    // (--after gives earlier calls to history only: the counters start fresh, and only `policy test`
    // sees the sequence's counters)
    if (x.counters !== undefined && step.method === 'tools/call' && same) rec.counters = x.counters;
    if (x.arguments !== undefined) rec.arguments = canon(x.arguments);
    if (x.earlier !== undefined) {
      const t = Date.parse(x.earlier.at);
      let k = -1;
      remembered.forEach((_, n) => { if (k < 0 || Math.abs(now - agoOf(n) * 1000 - t) < Math.abs(now - agoOf(k) * 1000 - t)) k = n; });
      rec.history = { ...x.earlier, upstream: x.earlier.upstream === 'cowork' ? '<upstream>' : x.earlier.upstream, at: k < 0 ? x.earlier.at : `step ${remembered[k].j + 1}` };
    }
    records.push(rec);
  }
  return { records, notes };
}

/**
 * `tollgate policy test` over the case's tool calls, each expecting what the reference path
 * `ref` got; returns { notes, testFails }.
 */
async function policyTestOf(c, ref) {
  const notes = [];
  const testFails = []; // {step, lines}
  const approveAt = c.steps.findIndex((s) => s.method === 'approve');
  const until = approveAt < 0 ? c.steps.length : approveAt; // policy test has no approvers
  // policy test: the whole sequence of tool calls on one set of counters, each case expecting
  // what the reference path got
  const calls = c.steps.map((s, i) => ({ s, i })).filter(({ s, i }) => s.method === 'tools/call' && i < until);
  if (c.policyTestNot) notes.push(`policy test not run: ${c.policyTestNot}`);
  else if (calls.length) {
    let prev = 0;
    const lines = calls.map(({ s, i }) => {
      const r = ref[i];
      let text = `- name: ${yamlString(`step ${i + 1}`)}\n  session: test-session\n  call: ${JSON.stringify(s.params)}\n  expect: ${r.decision}\n`;
      // reads and prompts the reference let through since the last call: the case's history
      const reads = c.steps.slice(prev, i).flatMap((x, k) => (ref[prev + k].decision !== 'allow' ? []
        : x.method === 'resources/read' ? [{ resource: x.params.uri }] : x.method === 'prompts/get' ? [{ prompt: x.params.name }] : []));
      prev = i + 1;
      if (c.explainAfter && reads.length) text += `  history: ${JSON.stringify(reads)}\n`;
      if (c.attributes) text += `  attributes: ${JSON.stringify(c.attributes)}\n`;
      if (c.claims) text += `  claims: ${JSON.stringify(c.claims)}\n  subject: ${JWT_SUBJECT}\n  issuer: ${yamlString(JWT_ISSUER)}\n`;
      // the final arguments the upstream got (the audit line's)
      if ((c.attributes || c.claims) && r.decision === 'allow' && r.audit?.args) text += `  arguments: ${JSON.stringify(r.audit.args)}\n`;
      if (r.decision !== 'allow') {
        if (r.audit?.rule) text += `  rule: ${yamlString(r.audit.rule)}\n`;
        // what the model reads, less what only the gateway can say (the retry time, the page)
        // (and what differs by path: the earlier call's upstream and time)
        const reason = r.decision === 'approve' ? '' : String(r.message).replace(/;? ?retry in N s.*$/, '').split(/ on <upstream> at |<(time|hex|url)>/)[0];
        if (reason) text += `  reason: ${yamlString(reason)}\n`;
      }
      return text;
    });
    const casesFile = path.join(dir, `${c.name}.cases.yaml`);
    fs.writeFileSync(casesFile, lines.join(''));
    const out = await run(['policy', 'test', policyFiles[c.name], casesFile]);
    // each FAIL line (and the reason line under it) is a mismatch of that step
    const outLines = out.stdout.split('\n');
    outLines.forEach((l, j) => {
      const m = /^FAIL +\d+ step (\d+): (.*)$/.exec(l);
      if (m) testFails.push({ step: Number(m[1]) - 1, lines: [`policy test: ${m[2]}`, ...(/^ +reason:/.test(outLines[j + 1] ?? '') ? [`policy test: ${outLines[j + 1].trim()}`] : [])] });
    });
    if (out.code !== 0 && !testFails.length) testFails.push({ step: -1, lines: [`policy test exited ${out.code}:`, out.stdout, out.stderr] });
    notes.push(`policy test ${path.basename(casesFile)}: ${calls.length} calls, exit ${out.code}`);
  }
  return { notes, testFails };
}

// ---------------------------------------------------------------------------------------------
// Comparing

const show = (v) => JSON.stringify(v);

/** The differences between record a (path A) and b (path B): a list of lines, empty when they agree. */
export function diffRecords(a, b, { explain = false } = {}) {
  const out = [];
  if (a === null || b === null) return out;
  const cmp = (what, x, y) => { if (show(x) !== show(y)) out.push(`${what}: ${show(x)} vs ${show(y)}`); };
  cmp('decision', a.decision, b.decision);
  if (a.decision === 'list' || b.decision === 'list') {
    cmp('tools/list shows', a.visible, b.visible);
    if (!explain) cmp('bound arguments in the listed schemas', a.schema, b.schema);
    return out;
  }
  if (explain) {
    // explain says what the model reads and which rule or counter decided, and the counters after
    if (b.decision !== 'allow' || a.decision !== 'allow') {
      // an approval's answer adds how to get it approved (retry mode: the page, the id) to what
      // explain says; the rest is the same
      if (a.decision === 'approve' && b.decision === 'approve') {
        if (!String(a.message).startsWith(b.message)) out.push(`message: ${show(a.message)} does not start with ${show(b.message)}`);
      } else {
        cmp('message', a.message, b.message);
      }
      // (a call that met a pending approval has no audit line of its own to say them)
      if (typeof a.audit === 'object') cmp('rule (the audit line\'s)', a.audit?.rule, b.explainRule);
      if (a.data?.history !== undefined || b.history !== undefined) cmp('error.data.history (explain\'s "earlier call:")', a.data?.history, b.history);
    }
    if (b.counters !== undefined && typeof a.audit === 'object') cmp('counters after the call', a.audit.counters ?? {}, b.counters);
    if (b.arguments !== undefined && a.decision === 'allow' && typeof a.audit === 'object') cmp('final arguments (explain\'s vs the audit line\'s)', a.audit.args, b.arguments);
    if (a.decision !== 'limited' || b.decision !== 'limited') return out; // explain gives a retry only for a limit
  } else {
    cmp('error.code', a.code, b.code);
    cmp('error.message', a.message, b.message);
    cmp('error.data', a.data, b.data);
    cmp('audit line', a.audit, b.audit);
    cmp('what the upstream echoed', a.echoed, b.echoed);
  }
  if (a.retry_after_ms !== undefined || b.retry_after_ms !== undefined) {
    const tol = Math.abs((a.at ?? 0) - (b.at ?? 0)) + 1500;
    if (a.retry_after_ms === undefined || b.retry_after_ms === undefined || Math.abs(a.retry_after_ms - b.retry_after_ms) > tol) {
      out.push(`retry_after_ms: ${a.retry_after_ms} vs ${b.retry_after_ms} (tolerance ${tol} ms)`);
    }
  }
  return out;
}

/** Every difference between the reference's records and each path's: [{path, step, lines}]. */
function differences(c, ref, byPath) {
  const out = [];
  for (const [id, recs] of Object.entries(byPath)) {
    for (let i = 0; i < c.steps.length; i++) {
      const lines = diffRecords(ref[i], recs[i], { explain: id === 'explain' });
      if (lines.length) out.push({ path: id, step: i, lines });
    }
  }
  return out;
}

/** The text of differences: case, step, path A vs path B, then what differs. */
const describeDiffs = (c, refId, diffs) => diffs.map((d) => [
  d.step < 0 ? `case ${c.name}: ${refId} vs ${d.path}` : `case ${c.name}, step ${d.step + 1} (${c.steps[d.step].method} ${show(c.steps[d.step].params)}): ${refId} vs ${d.path}`,
  ...d.lines.map((l) => `    ${l}`),
].join('\n')).join('\n');

/**
 * Splits diffs into the known ones (case.known: [{path, steps (1-based), why}], a divergence
 * reported and pinned until it is fixed) and the rest; a known one that no longer shows is a
 * failure too, so that its entry goes when the gateway is fixed.
 */
function sortOut(c, diffs) {
  const known = c.known ?? [];
  const isKnown = (d) => known.find((k) => d.path.split(' (')[0] === k.path && k.steps.includes(d.step + 1));
  const gone = [];
  for (const k of known) {
    for (const st of k.steps) {
      if (!diffs.some((d) => d.path.split(' (')[0] === k.path && d.step === st - 1)) gone.push(`${k.path} step ${st} (${k.why})`);
    }
  }
  return { knownDiffs: diffs.filter(isKnown), newDiffs: diffs.filter((d) => !isKnown(d)), gone };
}

// ---------------------------------------------------------------------------------------------
// The tests

describe('the comparison itself', () => {
  it('reports a different decision, message, data, audit line and a retry_after_ms out of tolerance', () => {
    const a = { decision: 'limited', code: -32002, message: 'x', data: { counter: 'c' }, retry_after_ms: 1000, at: 0, audit: { decision: 'limited', rule: 'c', counters: { c: 0 } } };
    assert.deepEqual(diffRecords(a, structuredClone(a)), []);
    for (const [k, v] of [['decision', 'deny'], ['message', 'y'], ['data', { counter: 'd' }], ['audit', { decision: 'limited', rule: 'c', counters: { c: 1 } }], ['retry_after_ms', 4000]]) {
      assert.equal(diffRecords(a, { ...structuredClone(a), [k]: v }).length, 1, `a different ${k} is reported`);
    }
    assert.deepEqual(diffRecords(a, { ...structuredClone(a), retry_after_ms: 2400 }), [], 'within 1.5 s is the same');
  });
});

// DIFF_CASES=name,name runs only those cases (while writing one), DIFF_REPEAT=N each of them N
// times on fresh grants (to shake out a race); ctest runs every case once.
const RUN = (process.env.DIFF_CASES ? CASES.filter((c) => process.env.DIFF_CASES.split(',').includes(c.name)) : CASES.slice())
  .flatMap((c) => Array.from({ length: Number(process.env.DIFF_REPEAT) || 1 }, (_, i) => (i ? { ...c, name: `${c.name}-r${i}` } : c)));
for (const c of RUN) if (!CASES.includes(c)) CASES.push(c);

describe('the same decision on every path', () => {
  for (const c of RUN) {
    it(`${c.name}: ${c.why}`, H.withLogs(logs, async (t) => {
      const skip = c.skip ?? {};
      const live = PATHS.filter((p) => p.gw !== 'none' && !(p.id in skip));
      for (const [id, why] of Object.entries(skip)) t.diagnostic(`path ${id} skipped: ${why}`);
      const explained = 'explain' in skip ? null : explainPath(c); // offline: beside the others
      const recs = await Promise.all(live.map((p) => runPath(c, p)));
      const byPath = Object.fromEntries(live.map((p, i) => [p.id, recs[i]]));
      const refId = live[0].id;
      const ref = byPath[refId];
      assert.deepEqual(ref.map((r) => r.decision), c.expect,
        `case ${c.name}: the reference path (${refId}) decided ${show(ref.map((r) => r.decision))}, the table expects ${show(c.expect)}`);
      // the reference's deciding rule (the audit line's) or, for a LIST, the tools it shows
      for (const [n, want] of Object.entries(c.anchors ?? {})) {
        const r = ref[n - 1];
        assert.deepEqual(Array.isArray(want) ? r.visible : r.audit?.rule, want, `case ${c.name}, step ${n} on the reference path (${refId}): ${show({ ...r, at: undefined })}`);
      }
      if (c.echoes) {
        assert.deepEqual(ref.filter((r) => r.echoed !== undefined).map((r) => r.echoed), c.echoes,
          `case ${c.name}: what the upstream echoed on the reference path (${refId})`);
      }
      delete byPath[refId];
      let testFails = [];
      if (explained) {
        const x = await explained;
        const y = await policyTestOf(c, ref);
        byPath.explain = x.records;
        testFails = y.testFails.map((f) => ({ path: 'explain (policy test)', ...f }));
        for (const n of [...x.notes, ...y.notes]) t.diagnostic(n);
      }
      const { knownDiffs, newDiffs, gone } = sortOut(c, [...differences(c, ref, byPath), ...testFails]);
      for (const k of c.known ?? []) t.diagnostic(`KNOWN DIVERGENCE, ${k.path} steps ${k.steps.join(', ')}: ${k.why}`);
      if (knownDiffs.length) t.diagnostic(describeDiffs(c, refId, knownDiffs));
      const refText = `reference records (${refId}):\n${ref.map((r, i) => `  ${i + 1}. ${show({ ...r, at: undefined })}`).join('\n')}`;
      assert.ok(!newDiffs.length, `the paths disagree:\n${describeDiffs(c, refId, newDiffs)}\n${refText}`);
      assert.ok(!gone.length, `a known divergence no longer shows (fixed? then remove it from the case's \`known\`): ${gone.join('; ')}`);
    }));
  }
});
