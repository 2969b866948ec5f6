// The approvals page: polls /admin/ui/queue every second and renders one row per parked call.
// Every value is put in the page as text (textContent), never as HTML. Decisions are POSTs that
// carry the session's CSRF token in X-CSRF-Token.
'use strict';
(() => {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const tbody = document.querySelector('#queue tbody');
  const table = document.getElementById('queue');
  const empty = document.getElementById('empty');
  const status = document.getElementById('status');
  const rows = new Map(); // approval id -> <tr>
  const POLL_MS = 1000;

  const secs = (ms) => {
    const s = Math.round(ms / 1000);
    return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
  };
  const cell = (tr, cls, text) => {
    const td = document.createElement('td');
    if (cls) td.className = cls;
    if (text !== undefined) td.textContent = text;
    tr.appendChild(td);
    return td;
  };
  // The arguments' text as tollgate received it (args_text), laid out one member a line. It is
  // never parsed: every token is copied as written, so 1e400, a 30-digit integer or 2^53+1 show
  // as sent (JSON.parse would turn them into Infinity or a rounded number).
  const pretty = (text) => {
    if (typeof text !== 'string') return '';
    let out = '';
    let depth = 0;
    const nl = () => `\n${' '.repeat(depth)}`;
    for (let i = 0; i < text.length; i++) {
      const ch = text[i];
      if (ch === '"') {
        let j = i + 1;
        while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
        out += text.slice(i, j + 1);
        i = j;
      } else if (ch === '{' || ch === '[') {
        const close = ch === '{' ? '}' : ']';
        let j = i + 1;
        while (j < text.length && /\s/.test(text[j])) j++;
        if (text[j] === close) {
          out += ch + close;
          i = j;
        } else {
          depth++;
          out += ch + nl();
        }
      } else if (ch === '}' || ch === ']') {
        depth--;
        out += nl() + ch;
      } else if (ch === ',') {
        out += ',' + nl();
      } else if (ch === ':') {
        out += ': ';
      } else if (!/\s/.test(ch)) {
        out += ch;
      }
    }
    return out;
  };

  function newRow(a) {
    const tr = document.createElement('tr');
    tr.dataset.approvalId = a.id;
    cell(tr, 'tool', a.tool);
    cell(tr, 'grant', a.grant);
    cell(tr, 'subject', a.subject);
    cell(tr, 'upstream', a.upstream);
    const pre = document.createElement('pre');
    pre.textContent = pretty(a.args_text);
    pre.title = `digest ${a.digest}`;
    cell(tr, 'args').appendChild(pre);
    cell(tr, 'waited');
    cell(tr, 'deadline');
    const td = cell(tr, 'decide');
    const approve = document.createElement('button');
    approve.type = 'button';
    approve.dataset.action = 'approve';
    approve.textContent = 'Approve';
    const reason = document.createElement('input');
    reason.name = 'reason';
    reason.placeholder = 'reason (sent to the client)';
    reason.maxLength = 200;
    const deny = document.createElement('button');
    deny.type = 'button';
    deny.dataset.action = 'deny';
    deny.textContent = 'Deny';
    td.append(approve, ' ', reason, ' ', deny);
    // An approve names the digest of this row: tollgate runs the call only if it is the parked one.
    approve.addEventListener('click', () => decide(tr, a.id, 'approve', { digest: a.digest }));
    deny.addEventListener('click', () => decide(tr, a.id, 'deny', { reason: reason.value }));
    return tr;
  }

  function update(tr, a) {
    tr.querySelector('.waited').textContent = secs(a.waited_ms);
    const d = tr.querySelector('.deadline');
    const at = new Date(Date.now() + a.expires_in_ms);
    d.textContent = `in ${secs(a.expires_in_ms)} (${at.toLocaleTimeString()})`;
    d.classList.toggle('soon', a.expires_in_ms < 30000);
    // The configuration in force no longer lets it run (a reload since it was parked): marked, and
    // approve is off (the gateway would refuse it with 409); deny still tells its client.
    let note = tr.querySelector('.blocked');
    if (a.blocked && !note) {
      note = document.createElement('div');
      note.className = 'blocked';
      tr.querySelector('.tool').appendChild(note);
    }
    if (note) note.textContent = a.blocked || '';
    if (note && !a.blocked) note.remove();
    tr.classList.toggle('is-blocked', !!a.blocked);
    const approve = tr.querySelector('button[data-action="approve"]');
    if (approve) approve.disabled = !!a.blocked;
  }

  // Calls decided lately: what, which way, by whom, when.
  const decidedBody = document.querySelector('#decided tbody');
  const decidedTable = document.getElementById('decided');
  function renderDecided(list) {
    decidedBody.replaceChildren();
    for (const d of list ?? []) {
      const tr = document.createElement('tr');
      tr.dataset.decidedId = d.id;
      cell(tr, 'tool', d.tool);
      cell(tr, 'grant', d.grant);
      cell(tr, 'subject', d.subject);
      cell(tr, 'upstream', d.upstream);
      cell(tr, 'decision', d.decision);
      cell(tr, 'by', d.by);
      cell(tr, 'when', new Date(d.decided_at_ms).toLocaleTimeString());
      decidedBody.appendChild(tr);
    }
    decidedTable.hidden = decidedBody.children.length === 0;
  }

  function render(list) {
    const seen = new Set();
    for (const a of list) {
      seen.add(a.id);
      let tr = rows.get(a.id);
      if (!tr) {
        tr = newRow(a);
        rows.set(a.id, tr);
        tbody.appendChild(tr);
      }
      update(tr, a);
    }
    for (const [id, tr] of rows) {
      if (!seen.has(id)) {
        tr.remove();
        rows.delete(id);
      }
    }
    table.hidden = rows.size === 0;
    empty.hidden = rows.size !== 0;
  }

  async function decide(tr, id, verb, fields) {
    for (const b of tr.querySelectorAll('button')) b.disabled = true;
    try {
      const res = await fetch(`/admin/ui/approvals/${encodeURIComponent(id)}/${verb}`, {
        method: 'POST',
        headers: { 'X-CSRF-Token': csrf, 'Content-Type': 'application/x-www-form-urlencoded' },
        body: new URLSearchParams(fields).toString(),
        credentials: 'same-origin',
      });
      if (res.status === 401) return location.reload();
      const body = await res.json().catch(() => ({}));
      status.textContent = res.ok ? `${verb === 'approve' ? 'approved' : 'denied'} ${id}` : `${res.status}: ${body.error ?? 'failed'}`;
    } catch (e) {
      status.textContent = `failed: ${e.message}`;
    }
    poll();
  }

  let timer;
  async function poll() {
    clearTimeout(timer);
    try {
      const res = await fetch('/admin/ui/queue', { credentials: 'same-origin', cache: 'no-store' });
      if (res.status === 401) return location.reload(); // the session ended: back to the login form
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const q = await res.json();
      render(q.approvals);
      renderDecided(q.decided);
      status.textContent = `${q.approvals.length} waiting · updated ${new Date().toLocaleTimeString()}`;
      status.classList.remove('stale');
    } catch (e) {
      status.textContent = `cannot reach tollgate (${e.message}); retrying`;
      status.classList.add('stale');
    }
    timer = setTimeout(poll, POLL_MS);
  }
  poll();
})();
