// The approval console: the people who approve escalated agent actions sign in with their name
// and the service's bearer token, see each pending request exactly as the agent asked it,
// grant it for a while or refuse it with a reason, and watch the service's decisions live.
//
// No framework and no build step. Everything shown is built with createElement and
// textContent: tool arguments, messages and reasons are text an attacker may have written, and
// none of it is ever parsed as HTML. Nothing is loaded from another host (the page's
// Content-Security-Policy forbids it anyway).
'use strict';

(function () {
  const POLL_MS = 1000;
  const RECONNECT_MS = 2000;
  const FEED_LIMIT = 50;
  const STORE_NAME = 'portcullis.console.approver';
  const STORE_TOKEN = 'portcullis.console.token';
  const VALIDITY = [
    ['5m', '5 minutes'],
    ['15m', '15 minutes'],
    ['1h', '1 hour'],
    ['24h', '1 day'],
  ];
  const DEFAULT_VALIDITY = '15m';
  const POINTS = {
    input: 'Input',
    tool_call: 'Tool call',
    tool_result: 'Tool result',
    output: 'Output',
  };

  const $ = (id) => document.getElementById(id);

  // What a signed-in session holds; reset by signOut.
  let session = null;

  /** An error the API answered with, or one of the network. */
  class ApiError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }

  /** Signed out: the token is refused or the person left. */
  class SignedOut extends Error {}

  // ---- small DOM helpers (text only, never markup) ----

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = reveal(String(text));
    return node;
  }

  // Characters that change how text reads without being seen (bidirectional overrides and
  // isolates, zero-width characters, other controls) are shown as visible markers: an approver
  // must read the action as the tool will receive it.
  const HIDDEN_CHARACTERS =
    /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb]/g;

  function reveal(text) {
    return text.replace(HIDDEN_CHARACTERS, (c) =>
      '\u27e6U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + '\u27e7');
  }

  /** An identifier that may wrap after its `_`, `.`, `/` and `-` rather than anywhere. */
  function breakable(tag, className, text) {
    const node = el(tag, className);
    const parts = reveal(String(text ?? '\u2014')).split(/(?<=[_./-])/);
    parts.forEach((part, index) => {
      if (index) node.append(document.createElement('wbr'));
      node.append(part);
    });
    return node;
  }

  function pretty(value) {
    if (typeof value === 'string') return value;
    try {
      return JSON.stringify(value, null, 2) ?? String(value);
    } catch {
      return String(value);
    }
  }

  function timeElement(at) {
    const node = document.createElement('time');
    if (typeof at !== 'string' || at === '') {
      node.textContent = 'unknown';
      return node;
    }
    node.dateTime = at;
    const date = new Date(at);
    node.textContent = Number.isNaN(date.getTime()) ? reveal(at) : date.toLocaleString();
    node.title = at;
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // ---- the API ----

  async function api(method, path, body) {
    if (!session) throw new SignedOut();
    const headers = { Authorization: 'Bearer ' + session.token, Accept: 'application/json' };
    const init = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (error) {
      throw new ApiError(0, 'network', 'The service cannot be reached (' + error.message + ').');
    }
    if (response.status === 401) {
      signOut('The service refused the token. Sign in again with the current token.');
      throw new SignedOut();
    }
    let payload = null;
    try {
      payload = await response.json();
    } catch {
      payload = null;
    }
    if (!response.ok) {
      const error = payload && payload.error;
      const message =
        error && typeof error.message === 'string'
          ? error.message
          : 'The service answered ' + response.status + ' ' + response.statusText + '.';
      throw new ApiError(response.status, (error && error.code) || 'http', message);
    }
    return payload;
  }

  // ---- signing in and out ----

  function showSignIn(message) {
    $('console').hidden = true;
    $('who').hidden = true;
    $('sign-in').hidden = false;
    $('sign-in-message').textContent = message || '';
    const name = $('approver');
    if (!name.value) name.value = sessionStorage.getItem(STORE_NAME) || '';
    $('token').value = '';
    (name.value ? $('token') : name).focus();
  }

  function signIn(name, token) {
    sessionStorage.setItem(STORE_NAME, name);
    sessionStorage.setItem(STORE_TOKEN, token);
    session = {
      name,
      token,
      items: new Map(), // approval id -> its list item
      busy: new Set(), // approval ids with a decision on its way
      pollTimer: null,
      polling: false,
      pollAgain: false,
      pollOk: false,
      feedAbort: null,
      feedTimer: null,
    };
    $('sign-in').hidden = true;
    $('sign-in-message').textContent = '';
    $('who-name').textContent = reveal(name);
    $('who').hidden = false;
    $('console').hidden = false;
    $('alert').textContent = '';
    $('done').textContent = '';
    $('pending-status').textContent = 'Loading…';
    $('feed-status').textContent = 'Connecting…';
    clear($('pending'));
    clear($('feed'));
    clear($('counts-body'));
    $('counts-empty').hidden = false;
    updateCount();
    $('pending-title').focus();
    poll();
    connectFeed();
  }

  function signOut(message) {
    if (session) {
      clearTimeout(session.pollTimer);
      clearTimeout(session.feedTimer);
      if (session.feedAbort) session.feedAbort.abort();
    }
    session = null;
    sessionStorage.removeItem(STORE_TOKEN);
    clear($('pending'));
    clear($('feed'));
    clear($('counts-body'));
    document.title = 'Portcullis approvals';
    showSignIn(message);
  }

  // ---- pending approvals ----

  /** Polls now, unless a poll is running (then once more after it). */
  function poll() {
    if (!session) return;
    if (session.polling) {
      session.pollAgain = true;
      return;
    }
    clearTimeout(session.pollTimer);
    const current = session;
    current.polling = true;
    current.pollAgain = false;
    api('GET', '/v1/approvals?status=pending')
      .then((answer) => {
        if (session !== current) return;
        const records = answer && Array.isArray(answer.approvals) ? answer.approvals : [];
        current.pollOk = true;
        renderPending(records.filter((r) => r && r.status === 'pending'));
      })
      .catch((error) => {
        if (error instanceof SignedOut || session !== current) return;
        current.pollOk = false;
        $('pending-status').textContent = 'Not updated: ' + error.message;
      })
      .finally(() => {
        current.polling = false;
        if (session !== current) return;
        if (current.pollAgain) poll();
        else current.pollTimer = setTimeout(poll, POLL_MS);
      });
  }

  function requestedAt(record) {
    const time = Date.parse(record.requested_at);
    return Number.isNaN(time) ? 0 : time;
  }

  function renderPending(records) {
    records.sort((a, b) => requestedAt(b) - requestedAt(a));
    const list = $('pending');
    const wanted = new Set();
    let cursor = list.firstChild;
    for (const record of records) {
      if (typeof record.id !== 'string' || wanted.has(record.id)) continue;
      wanted.add(record.id);
      let item = session.items.get(record.id);
      if (!item) {
        item = approvalItem(record);
        session.items.set(record.id, item);
      }
      // Items already in place stay where they are: moving one would take the focus (and a
      // half-typed reason) away from whoever is working on it.
      if (item === cursor) cursor = cursor.nextSibling;
      else list.insertBefore(item, cursor);
    }
    for (const [id, item] of session.items) {
      // An item being decided stays until its answer arrives.
      if (!wanted.has(id) && !session.busy.has(id)) removeItem(id, item);
    }
    updateCount();
  }

  function updateCount() {
    const count = session ? session.items.size : 0;
    $('pending-count').textContent = count ? '(' + count + ')' : '';
    document.title = (count ? '(' + count + ') ' : '') + 'Portcullis approvals';
    if (session && session.pollOk) {
      $('pending-status').textContent = count ? '' : 'Nothing is waiting for approval.';
    }
  }

  function removeItem(id, item) {
    const hadFocus = item.contains(document.activeElement);
    const next = item.nextElementSibling || item.previousElementSibling;
    item.remove();
    session.items.delete(id);
    if (hadFocus) {
      const heading = next && next.querySelector('h3');
      (heading || $('pending-title')).focus();
    }
  }

  function field(list, term, value) {
    list.append(el('dt', null, term));
    const dd = el('dd');
    if (value instanceof Node) dd.append(value);
    else dd.textContent = reveal(String(value ?? '—'));
    list.append(dd);
  }

  function block(text, label) {
    const pre = el('pre', 'value', text);
    pre.tabIndex = 0; // a long value scrolls with the keyboard too
    if (label) pre.setAttribute('aria-label', label);
    return pre;
  }

  function textOf(value) {
    return typeof value === 'string' ? value : pretty(value);
  }

  /** The action as the agent asked it, by interception point. */
  function actionDetails(record) {
    const context = record.context && typeof record.context === 'object' ? record.context : {};
    const part = el('div', 'action');
    switch (record.interception_point) {
      case 'tool_call':
        part.append(el('h4', null, 'Arguments'));
        part.append(block(pretty(context.arguments ?? {}), 'Arguments'));
        break;
      case 'tool_result':
        part.append(el('h4', null, 'Result'));
        part.append(block(textOf(context.content ?? ''), 'Result'));
        break;
      case 'output': {
        const response = context.response && typeof context.response === 'object'
          ? context.response
          : {};
        part.append(el('h4', null, 'Response'));
        part.append(block(textOf(response.content ?? ''), 'Response'));
        break;
      }
      case 'input': {
        const messages = Array.isArray(context.messages) ? context.messages : [];
        part.append(el('h4', null, messages.length === 1 ? 'Message' : 'Messages'));
        const list = el('ol', 'messages');
        messages.forEach((message, index) => {
          const m = message && typeof message === 'object' ? message : {};
          const item = el('li', 'message-item');
          item.append(el('span', 'role', m.role ?? 'unknown'));
          item.append(block(textOf(m.content ?? ''), 'Message ' + (index + 1)));
          list.append(item);
        });
        part.append(list);
        break;
      }
      default:
        break;
    }
    return part;
  }

  function approvalItem(record) {
    const context = record.context && typeof record.context === 'object' ? record.context : {};
    const metadata = context.metadata && typeof context.metadata === 'object'
      ? context.metadata
      : {};
    const item = el('li', 'approval');
    item.dataset.id = record.id;
    const headingId = 'approval-' + record.id.replace(/[^A-Za-z0-9_-]/g, '_');
    const article = el('article');
    article.setAttribute('aria-labelledby', headingId);

    const point = record.interception_point;
    let title = POINTS[point] || String(point ?? 'Action');
    if ((point === 'tool_call' || point === 'tool_result') && context.tool_name !== undefined) {
      title += ': ' + context.tool_name;
    }
    const heading = el('h3', null, title);
    heading.id = headingId;
    heading.tabIndex = -1;
    article.append(heading);

    const facts = el('dl', 'fields');
    field(facts, 'Point', el('code', null, point));
    if (point === 'tool_call' || point === 'tool_result') {
      field(facts, 'Tool', el('code', 'tool', context.tool_name));
    }
    field(facts, 'Agent', metadata.agent_id);
    field(facts, 'Session', metadata.session_id);
    field(facts, 'Requested', timeElement(record.requested_at));
    if (record.expires_at) field(facts, 'Expires', timeElement(record.expires_at));
    const policies = el('ul', 'inline');
    for (const id of Array.isArray(record.policy_ids) ? record.policy_ids : []) {
      policies.append(breakable('li', 'policy', id));
    }
    field(facts, 'Policies', policies);
    const reasons = el('ul', 'reasons');
    for (const reason of Array.isArray(record.reasons) ? record.reasons : []) {
      reasons.append(el('li', null, reason));
    }
    field(facts, 'Reasons', reasons);
    article.append(facts);

    article.append(actionDetails(record));

    const whole = el('details', 'context');
    whole.append(el('summary', null, 'Whole context (JSON)'));
    whole.append(block(pretty(context), 'Whole context'));
    if (record.action_digest) {
      const digest = el('p', 'digest');
      digest.append('Action digest ', el('code', null, record.action_digest));
      whole.append(digest);
    }
    article.append(whole);

    article.append(decisionForms(record, headingId));
    item.append(article);
    return item;
  }

  /** Appends to `form` a label for `control`, then `control` and `button` side by side. */
  function labelledRow(form, labelText, control, button) {
    const label = el('label', null, labelText);
    label.htmlFor = control.id;
    const row = el('div', 'row');
    row.append(control, button);
    form.append(label, row);
  }

  function decisionForms(record, headingId) {
    const forms = el('div', 'decide');
    const base = headingId;

    const grant = el('form', 'grant');
    grant.setAttribute('aria-label', 'Approve');
    const validity = el('select');
    validity.id = base + '-ttl';
    validity.name = 'ttl';
    for (const [value, label] of VALIDITY) {
      const option = el('option', null, label);
      option.value = value;
      option.selected = value === DEFAULT_VALIDITY;
      validity.append(option);
    }
    const approve = el('button', 'primary approve', 'Approve');
    approve.type = 'submit';
    labelledRow(grant, 'Valid for', validity, approve);

    const refuse = el('form', 'refuse');
    refuse.setAttribute('aria-label', 'Refuse');
    const reason = el('input');
    reason.type = 'text';
    reason.id = base + '-reason';
    reason.name = 'reason';
    reason.required = true;
    reason.autocomplete = 'off';
    // The service takes a reason of at most 1,024 bytes.
    reason.maxLength = 1000;
    const refuseButton = el('button', 'danger refuse-button', 'Refuse');
    refuseButton.type = 'submit';
    labelledRow(refuse, 'Reason for refusing', reason, refuseButton);

    const controls = [validity, approve, reason, refuseButton];
    grant.addEventListener('submit', (event) => {
      event.preventDefault();
      decide(record, 'grant', { by: session.name, ttl: validity.value }, controls);
    });
    refuse.addEventListener('submit', (event) => {
      event.preventDefault();
      const text = reason.value.trim();
      if (!text) {
        reason.focus();
        return;
      }
      decide(record, 'refuse', { by: session.name, reason: text }, controls);
    });

    forms.append(grant, refuse);
    return forms;
  }

  async function decide(record, verb, body, controls) {
    if (!session || session.busy.has(record.id)) return;
    const current = session;
    current.busy.add(record.id);
    controls.forEach((c) => (c.disabled = true));
    $('alert').textContent = '';
    const what = describe(record);
    try {
      const answer = await api(
        'POST', '/v1/approvals/' + encodeURIComponent(record.id) + '/' + verb, body);
      if (session !== current) return;
      $('alert').textContent = '';
      const by = answer && typeof answer.decided_by === 'string' ? answer.decided_by : current.name;
      $('done').textContent = reveal(
        (verb === 'grant' ? 'Approved ' : 'Refused ') + what + ' (by ' + by + ').');
      finish(current, record.id);
    } catch (error) {
      if (error instanceof SignedOut || session !== current) return;
      $('done').textContent = '';
      $('alert').textContent = reveal(
        (verb === 'grant' ? 'Could not approve ' : 'Could not refuse ') + what + ': '
        + error.message);
      if (error.code === 'already_decided' || error.code === 'unknown_approval') {
        // Nothing left to decide here: someone else did, or it is gone.
        finish(current, record.id);
      } else {
        current.busy.delete(record.id);
        controls.forEach((c) => (c.disabled = false));
      }
    }
  }

  function finish(current, id) {
    current.busy.delete(id);
    const item = current.items.get(id);
    if (item) removeItem(id, item);
    updateCount();
    poll();
  }

  function describe(record) {
    const context = record.context || {};
    const agent = context.metadata && context.metadata.agent_id;
    let text = POINTS[record.interception_point] || String(record.interception_point);
    if (context.tool_name) text += ' ' + context.tool_name;
    if (agent) text += ' from ' + agent;
    return text;
  }

  // ---- the decision feed (Server-Sent Events read with fetch: it needs the header) ----

  function connectFeed() {
    if (!session) return;
    const current = session;
    clearTimeout(current.feedTimer);
    const abort = new AbortController();
    current.feedAbort = abort;
    readFeed(current, abort.signal)
      .then(() => {
        if (session === current) $('feed-status').textContent = 'Reconnecting…';
      })
      .catch((error) => {
        if (error instanceof SignedOut || session !== current || abort.signal.aborted) return;
        $('feed-status').textContent = 'Disconnected (' + error.message + '); reconnecting…';
      })
      .finally(() => {
        if (session !== current || abort.signal.aborted) return;
        current.feedTimer = setTimeout(connectFeed, RECONNECT_MS);
      });
  }

  async function readFeed(current, signal) {
    const response = await fetch('/v1/decisions/feed', {
      headers: { Authorization: 'Bearer ' + current.token, Accept: 'text/event-stream' },
      cache: 'no-store',
      credentials: 'omit',
      signal,
    });
    if (response.status === 401) {
      if (session === current) signOut('The service refused the token. Sign in again.');
      throw new SignedOut();
    }
    if (!response.ok || !response.body) {
      throw new Error('the service answered ' + response.status);
    }
    if (session === current) {
      $('feed-status').textContent = $('feed').children.length
        ? ''
        : 'Connected: no decisions since this page opened.';
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    const parser = sseParser((type, data) => {
      if (session === current) onFeedEvent(type, data);
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.push(value);
    }
    parser.end();
  }

  /**
   * The event-stream framing: lines end with CRLF, LF or CR; `field: value` lines; a blank
   * line dispatches; lines starting with `:` are comments (keep-alives).
   */
  function sseParser(dispatch) {
    let buffer = '';
    let type = '';
    let data = [];
    let first = true;

    function line(text) {
      if (text === '') {
        if (data.length) dispatch(type || 'message', data.join('\n'));
        type = '';
        data = [];
        return;
      }
      if (text.startsWith(':')) return;
      const colon = text.indexOf(':');
      const name = colon === -1 ? text : text.slice(0, colon);
      let value = colon === -1 ? '' : text.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (name === 'event') type = value;
      else if (name === 'data') data.push(value);
      // `id` and `retry` are not used: the console reconnects on its own schedule.
    }

    return {
      push(chunk) {
        buffer += chunk;
        if (first && buffer.length) {
          if (buffer.charCodeAt(0) === 0xfeff) buffer = buffer.slice(1);
          first = false;
        }
        let start = 0;
        for (let i = 0; i < buffer.length; i++) {
          const c = buffer[i];
          if (c !== '\n' && c !== '\r') continue;
          // A CR at the end may be the first half of a CRLF: wait for the next chunk.
          if (c === '\r' && i + 1 === buffer.length) break;
          line(buffer.slice(start, i));
          if (c === '\r' && buffer[i + 1] === '\n') i++;
          start = i + 1;
        }
        buffer = buffer.slice(start);
      },
      end() {
        // An unfinished event at the end of the stream is dropped, as the format says.
        buffer = '';
        type = '';
        data = [];
      },
    };
  }

  function onFeedEvent(type, data) {
    let value;
    try {
      value = JSON.parse(data);
    } catch {
      return;
    }
    if (!value || typeof value !== 'object') return;
    if (type === 'decision') {
      addDecision(value);
      if (value.decision === 'approval_pending') poll();
    } else if (type === 'counts') {
      renderCounts(value);
    }
  }

  function addDecision(decision) {
    const feed = $('feed');
    const item = el('li', 'decision');
    const kind = typeof decision.decision === 'string' ? decision.decision : String(decision.decision);
    item.dataset.decision = kind;
    const head = el('div', 'decision-head');
    head.append(breakable('span', 'badge', kind), breakable('span', 'policy', decision.policy_id));
    head.append(el('span', 'point', decision.interception_point ?? ''));
    item.append(head);
    const meta = el('p', 'meta');
    meta.append(timeElement(decision.at));
    if (decision.agent_id) meta.append(' · agent ', el('span', 'agent', decision.agent_id));
    if (decision.session_id) meta.append(' · session ', el('span', 'session', decision.session_id));
    item.append(meta);
    if (decision.reason !== null && decision.reason !== undefined && decision.reason !== '') {
      item.append(el('p', 'reason', decision.reason));
    }
    $('feed-status').textContent = '';
    feed.insertBefore(item, feed.firstChild);
    while (feed.children.length > FEED_LIMIT) feed.lastElementChild.remove();
  }

  function renderCounts(counts) {
    const body = $('counts-body');
    clear(body);
    const policies = Array.isArray(counts.policies) ? counts.policies : [];
    const title = $('counts-title');
    const seconds = Number(counts.window_seconds);
    title.textContent = Number.isFinite(seconds) && seconds > 0 && seconds !== 3600
      ? 'Decisions in the last ' + Math.round(seconds / 60) + ' minutes'
      : 'Decisions in the last hour';
    for (const policy of policies) {
      if (!policy || typeof policy !== 'object') continue;
      const row = el('tr');
      row.dataset.policy = String(policy.policy_id);
      const name = breakable('th', 'policy', policy.policy_id);
      name.scope = 'row';
      const decisions = policy.decisions && typeof policy.decisions === 'object'
        ? policy.decisions
        : {};
      const list = el('ul', 'inline tallies');
      let total = 0;
      for (const [kind, count] of Object.entries(decisions)) {
        const n = Number(count) || 0;
        total += n;
        const tally = el('li', 'tally');
        tally.dataset.decision = kind;
        tally.append(breakable('span', 'badge', kind), ' ', el('span', 'n', n));
        list.append(tally);
      }
      const cell = el('td');
      cell.append(list);
      row.append(name, cell, el('td', 'number', total));
      body.append(row);
    }
    $('counts-empty').hidden = body.children.length > 0;
  }

  // ---- start ----

  function start() {
    $('sign-in-form').addEventListener('submit', (event) => {
      event.preventDefault();
      const name = $('approver').value.trim();
      const token = $('token').value.trim();
      if (!name) {
        $('sign-in-message').textContent = 'Enter your name: each decision records who made it.';
        $('approver').focus();
        return;
      }
      if (!token) {
        $('sign-in-message').textContent = 'Enter the service token.';
        $('token').focus();
        return;
      }
      signIn(name, token);
    });
    $('sign-out').addEventListener('click', () => signOut('Signed out.'));

    const name = sessionStorage.getItem(STORE_NAME);
    const token = sessionStorage.getItem(STORE_TOKEN);
    if (name && token) signIn(name, token);
    else showSignIn('');
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
