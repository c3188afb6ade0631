// fleetsync's dashboard: reads the /v1 API with the session cookie (same origin), one
// page or one summary at a time, and follows the event watch to re-read only what an
// event names. No framework: DOM nodes are built with el() and text is always text.
'use strict';

const PHASES = ['Pending', 'Applying', 'Applied', 'Failed', 'Parked'];
const MATRIX_PAGE = 200;
const KEYS_PAGE = 100;
const SYNCSETS_PAGE = 100;
const SOURCES_PAGE = 100;
const KEY_EVENTS = 20;
const MAX_SYNCSETS = 2000;
const ROLLOUTS_POLL = 5000;
const CLUSTERS_PAGE = 100;
// How long a view waits before it reads again what costs a scan (failures by cause,
// clusters by label) while changes keep coming.
const READ_AGAIN = 2000;
// How often the applies-and-failures chart is read again while the fleet page is open.
const ACTIVITY_POLL = 30000;
const CONDITIONS = ['Degraded', 'Progressing', 'Ready', 'NoKeys'];
// A cluster condition's colour: the phase its keys are in.
const CONDITION_PHASE = { Degraded: 'Failed', Progressing: 'Applying', Ready: 'Applied', NoKeys: 'none' };

const state = { subject: '', grants: [], tenant: '', view: null, watch: null };

// ---- DOM helpers -------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else if (k.startsWith('on')) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const $ = (id) => document.getElementById(id);
const q = encodeURIComponent;

function badge(phase) {
  return el('span', { class: 'badge phase-' + phase, 'data-phase': phase, text: phase });
}

function rolloutBadge(phase) {
  return el('span', { class: 'badge rollout-' + phase, 'data-rollout-phase': phase, text: phase });
}

function conditionBadge(c) {
  return el('span', { class: 'badge phase-' + CONDITION_PHASE[c], 'data-condition': c, text: c });
}

// The clusters list with these search parameters.
function clustersLink(params, text, attrs, ...children) {
  return el('a', { href: '#/clusters?' + new URLSearchParams(params).toString(), text, ...(attrs || {}) }, ...children);
}

function link(hash, text) {
  return el('a', { href: hash, text });
}

function age(ts) {
  if (!ts) return '';
  const s = Math.max(0, Math.round((Date.now() - Date.parse(ts)) / 1000));
  if (s < 120) return s + ' s';
  if (s < 7200) return Math.round(s / 60) + ' min';
  return Math.round(s / 3600) + ' h';
}

function showError(e) {
  const p = $('error');
  if (!e) { p.hidden = true; p.textContent = ''; return; }
  p.hidden = false;
  p.textContent = String(e.message || e);
}

// ---- the API -----------------------------------------------------------------------

class SignedOut extends Error {}

async function api(path, method) {
  const resp = await fetch(path, { method: method || 'GET', credentials: 'same-origin', headers: { Accept: 'application/json' } });
  if (resp.status === 401) { signedOut(); throw new SignedOut('signed out'); }
  let body = null;
  try { body = await resp.json(); } catch (_) { body = null; }
  if (!resp.ok) {
    const err = new Error((body && body.error) || ('HTTP ' + resp.status));
    err.status = resp.status;
    throw err;
  }
  return body;
}

// Whether the caller may change the tenant's objects and keys (editor, admin or
// fleet-admin): the page offers its actions only then; the hub checks again.
function canEdit() {
  return state.grants.some((g) => g === 'fleet-admin' || g === state.tenant + ':editor' || g === state.tenant + ':admin');
}

// An action button: the first click asks `question` beside it, Confirm does `run` (a
// POST with the session; the hub records the caller as its actor) and says in
// #action-result what came of it. The view follows the change through the event watch.
// The question asked stays asked when the view is drawn again meanwhile (the events of
// a failing fleet redraw it often); `what` tells apart actions that ask alike.
let asking = null;
function actionButton(label, question, run, attrs, what) {
  if (!canEdit()) return '';
  const id = question + '\n' + (what || '');
  const box = el('span', { class: 'action' });
  const button = el('button', { type: 'button', text: label, ...(attrs || {}),
    onclick: () => { asking = id; ask(); } });
  const ask = () => {
    const confirm = el('button', { type: 'button', class: 'confirm', text: 'Confirm', onclick: async () => {
      asking = null;
      box.replaceChildren(el('span', { class: 'muted', text: 'working…' }));
      try {
        report(await run(), false);
      } catch (e) {
        if (e instanceof SignedOut) return;
        report(label + ': ' + (e.message || e), true);
      }
      box.replaceChildren(button);
    } });
    const cancel = el('button', { type: 'button', text: 'Cancel', onclick: () => { asking = null; box.replaceChildren(button); } });
    box.replaceChildren(el('span', { class: 'question', text: question + ' ' }), confirm, cancel);
  };
  if (asking === id) ask(); else box.append(button);
  return box;
}

function report(text, failed) {
  const p = $('action-result');
  p.hidden = false;
  p.classList.toggle('error', failed);
  p.textContent = text;
}

function tenantQuery() {
  return 'tenant=' + q(state.tenant);
}

// Runs `f` over `items`, at most `n` at a time.
async function pool(items, n, f) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() {
    while (next < items.length) {
      const i = next++;
      out[i] = await f(items[i]);
    }
  }
  await Promise.all(Array.from({ length: Math.min(n, items.length) }, worker));
  return out;
}

// ---- session -----------------------------------------------------------------------

function signedOut() {
  stopWatch();
  state.view = null;
  $('session').hidden = true;
  $('view').hidden = true;
  $('sign-in').hidden = false;
}

async function signIn(ev) {
  ev.preventDefault();
  const token = $('token').value.trim();
  $('sign-in-error').textContent = '';
  const resp = await fetch('/ui/session', {
    method: 'POST', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token }),
  });
  $('token').value = '';
  if (!resp.ok) {
    let msg = 'HTTP ' + resp.status;
    try { msg = (await resp.json()).error || msg; } catch (_) { /* keep the status */ }
    $('sign-in-error').textContent = msg;
    return;
  }
  await start();
}

async function signOut() {
  stopWatch();
  sessionStorage.clear();
  await fetch('/ui/session', { method: 'DELETE', credentials: 'same-origin' });
  signedOut();
}

// The tenants the grants name; a fleet-admin may type any.
function grantedTenants() {
  const tenants = new Set();
  for (const g of state.grants) {
    const tenant = String(g).split(':')[0];
    if (tenant !== 'fleet-admin') tenants.add(tenant);
  }
  return [...tenants].sort();
}

async function start() {
  let me;
  try { me = await api('/v1/whoami'); } catch (e) { if (!(e instanceof SignedOut)) showError(e); return; }
  state.subject = me.subject;
  state.grants = me.grants || [];
  const tenants = grantedTenants();
  const list = $('tenants');
  list.replaceChildren(...tenants.map((t) => el('option', { value: t })));
  // The tenant chosen last in this tab, if this caller may read it.
  const saved = sessionStorage.getItem('fleetsync.tenant');
  const fleetAdmin = state.grants.includes('fleet-admin');
  state.tenant = saved && (fleetAdmin || tenants.includes(saved)) ? saved : (tenants[0] || 'default');
  $('tenant').value = state.tenant;
  $('subject').textContent = state.subject;
  $('sign-in').hidden = true;
  $('session').hidden = false;
  $('view').hidden = false;
  // The view is read once the watch has its cursor (or after 2 s without one).
  await Promise.race([startWatch(), new Promise((r) => setTimeout(r, 2000))]);
  render();
}

function setTenant() {
  const t = $('tenant').value.trim();
  if (!t || t === state.tenant) return;
  state.tenant = t;
  sessionStorage.setItem('fleetsync.tenant', t);
  render();
}

// ---- views -------------------------------------------------------------------------

function route() {
  const [path, query] = location.hash.replace(/^#\/?/, '').split('?');
  const parts = (path || '').split('/').map(decodeURIComponent);
  switch (parts[0]) {
    case 'clusters': return new ClustersView(new URLSearchParams(query || ''));
    case 'events': return new EventsView(new URLSearchParams(query || ''));
    case 'syncset': return new SyncSetView(parts[1]);
    case 'cluster': return new ClusterView(parts[1]);
    case 'key': return new KeyView(parts[1], parts[2]);
    case 'sources': return new SourcesView();
    default: return new FleetView(new URLSearchParams(query || ''));
  }
}

async function render() {
  if ($('session').hidden) return;
  showError(null);
  $('action-result').hidden = true;
  asking = null;
  const view = route();
  state.view = view;
  const root = $('view');
  root.replaceChildren(view.root);
  try { await view.load(); } catch (e) { if (!(e instanceof SignedOut)) showError(e); }
}

// Re-reads what `changed` names in the current view, one read at a time.
let refreshing = Promise.resolve();
function refresh(changed) {
  const view = state.view;
  if (!view) return;
  refreshing = refreshing.then(() => view === state.view && view.refresh(changed)).catch((e) => {
    if (!(e instanceof SignedOut)) showError(e);
  });
}

// A table from rows of cells; `head` names the columns.
function table(head, rows, attrs) {
  return el('table', attrs || {}, el('thead', {}, el('tr', {}, head.map((h) => el('th', { text: h })))),
    el('tbody', {}, rows));
}

// The keys by phase; `phaseLink(p)`, if given, makes each phase's card a link.
function summaryCards(summary, idPrefix, phaseLink) {
  const phases = summary.phases || {};
  return el('div', { class: 'cards' },
    el('div', { class: 'card' }, el('span', { class: 'n', id: idPrefix + 'total', text: summary.total }), 'keys'),
    PHASES.map((p) => el(phaseLink ? 'a' : 'div', { class: 'card', href: phaseLink && phaseLink(p), 'data-phase-card': p },
      el('span', { class: 'n', 'data-phase-total': p, text: phases[p] || 0 }), badge(p))),
    el('div', { class: 'card' }, el('span', { class: 'n', id: idPrefix + 'at-generation', text: summary.atGeneration }),
      'applied the generation they are told'));
}

// A rollout as a bar per step: each step's clusters healthy, updated and not yet
// healthy, failed, and not updated yet; the current step outlined.
function stepBars(r) {
  return el('span', { class: 'steps' }, (r.steps || []).map((st, i) => {
    const parts = [['Applied', st.healthy], ['Applying', Math.max(0, st.updated - st.healthy - st.failed)],
      ['Failed', st.failed], ['none', Math.max(0, st.clusters - st.updated)]];
    const bar = el('span', { class: 'step' + (i === r.step ? ' current' : ''), 'data-summary': st.healthy + '/' + st.clusters,
      title: 'step ' + (i + 1) + ': ' + st.clusters + ' clusters, ' + st.updated + ' updated, ' + st.healthy + ' healthy, '
        + st.failed + ' failed, ' + st.pending + ' pending' },
    parts.filter(([, n]) => n > 0).map(([phase, n]) => {
      const seg = el('span', { class: 'seg phase-' + phase });
      seg.style.flexGrow = n;
      return seg;
    }));
    return bar;
  }));
}

// A rollout's controls, as its phase allows them (the hub refuses the rest, 409).
function rolloutControls(r) {
  const controls = r.phase === 'Progressing' ? ['pause', 'promote', 'abort'] : r.phase === 'Paused' ? ['resume', 'abort'] : [];
  return el('span', { class: 'controls' }, controls.map((c) => actionButton(c[0].toUpperCase() + c.slice(1),
    c[0].toUpperCase() + c.slice(1) + ' the rollout of ' + r.syncset + '?', async () => {
      const after = await api('/v1/rollouts/' + q(r.syncset) + '/' + c + '?' + tenantQuery(), 'POST');
      return 'Rollout of ' + r.syncset + ': ' + c + ' done, now ' + after.phase + '.';
    }, { 'data-control': c })));
}

// The failing keys of the tenant (or of one SyncSet) grouped by cause: how many, in
// which phases, the SyncSets and the first clusters behind each, one key's whole error,
// and a retry of every key of the group.
async function failureGroups(syncset) {
  const scope = tenantQuery() + (syncset ? '&syncset=' + q(syncset) : '');
  const f = await api('/v1/status/failures?' + scope);
  if (!f.groups.length) return el('p', { class: 'muted', text: 'No failed or parked keys.' });
  const rows = f.groups.map((g) => {
    const more = g.clusterCount - g.clusters.length;
    const clusters = g.clusters.map((c) => link('#/cluster/' + q(c), c));
    const phases = Object.entries(g.phases).flatMap(([p, n]) => [badge(p), ' ' + n + ' ']);
    return el('tr', { 'data-cause': g.cause, 'data-keys': g.keys },
      el('td', { class: 'num', text: g.keys }), el('td', {}, el('pre', { class: 'cause', text: g.cause })),
      el('td', {}, phases), el('td', {}, g.syncsets.flatMap((s, i) => [i ? ', ' : '', link('#/syncset/' + q(s), s)])),
      el('td', {}, clusters.flatMap((c, i) => [i ? ', ' : '', c]), more > 0 ? ' and ' + more + ' more' : ''),
      el('td', {}, el('details', {}, el('summary', { text: 'one error' }), el('pre', { text: g.example }))),
      el('td', {}, actionButton('Retry ' + g.keys, 'Retry the ' + g.keys + ' keys of this cause now?', async () => {
        const r = await api('/v1/status/failures/retry?' + scope + '&cause=' + q(g.cause), 'POST');
        return 'Retried ' + r.retried + ' keys' + (r.truncated ? ' (the first 20,000 failing keys were read: retry again for more)' : '') + '.';
      }, { class: 'retry-group' }, g.cause)));
  });
  return el('div', {},
    el('p', { class: 'muted', id: 'failure-count', text: f.keys + ' failing keys, ' + f.groups.length + ' causes' + (f.truncated ? ' (the first ' + f.keys + ' read)' : '') }),
    table(['keys', 'cause', 'phases', 'SyncSets', 'clusters', '', ''], rows, { id: 'failure-groups' }));
}

// Pages of a list: `continue` tokens of the pages seen, to go back.
class Pager {
  constructor(onChange) { this.tokens = ['']; this.next = ''; this.onChange = onChange; }
  get current() { return this.tokens[this.tokens.length - 1]; }
  reset() { this.tokens = ['']; this.next = ''; }
  controls(prefix) {
    const prev = el('button', { type: 'button', id: prefix + 'prev-page', disabled: this.tokens.length < 2, text: 'Previous page',
      onclick: () => { this.tokens.pop(); this.onChange(); } });
    const next = el('button', { type: 'button', id: prefix + 'next-page', disabled: !this.next, text: 'Next page',
      onclick: () => { this.tokens.push(this.next); this.onChange(); } });
    return [prev, next, el('span', { class: 'muted', text: 'page ' + this.tokens.length })];
  }
}

// The fleet at a glance: the tenant's totals and first failures (one summary the hub
// keeps counted), each SyncSet's summary, members, and a page of keys as a SyncSet x
// cluster matrix.
class FleetView {
  // `?phase=` (a phase card's link) narrows the matrix to that phase.
  constructor(params) {
    this.summaries = new Map();
    this.phase = params.get('phase') || sessionStorage.getItem('fleetsync.phase') || '';
    this.toMatrix = params.has('phase');
    this.pager = new Pager(() => this.loadMatrix());
    this.matrixKeys = new Set();
    this.matrixFull = false;
    this.totals = el('div', { id: 'totals' });
    this.heat = el('div', { id: 'heat-map' });
    this.activity = el('div', { id: 'activity' });
    this.groupBy = sessionStorage.getItem('fleetsync.groupBy') || 'region';
    this.failures = el('div', { id: 'failures' });
    this.failing = -1;
    this.rollouts = new Map();
    this.rolloutsOpen = false;
    this.rolloutTimer = null;
    this.rolloutPanel = el('div', { id: 'rollouts' });
    this.members = el('div', { id: 'members' });
    this.syncsets = el('div', { id: 'syncsets' });
    this.matrix = el('div', { id: 'matrix-view' });
    this.root = el('div', {}, el('h1', { text: 'Fleet' }),
      el('nav', { class: 'toolbar' }, link('#/clusters', 'Clusters'), link('#/events', 'Events'), link('#/sources', 'Sources')), this.totals,
      el('h2', { text: 'Applies and failures, last hour' }), this.activity,
      el('h2', { text: 'Clusters by label' }), this.heat,
      el('h2', { text: 'Failures' }), this.failures,
      el('h2', { text: 'Rollouts' }), this.rolloutPanel,
      el('h2', { text: 'Matrix' }), this.matrix,
      el('h2', { text: 'SyncSets' }), this.syncsets,
      el('h2', { text: 'Members' }), this.members);
  }

  async load() {
    await Promise.all([this.loadSummaries(), this.loadRollouts(), this.loadMembers(), this.loadMatrix(), this.loadHeat(),
      this.loadActivity()]);
    await this.loadFailures();
  }

  // Applies (up, green) and failures (down, red) per minute over the last hour, a
  // column a minute; read again every 30 s.
  async loadActivity() {
    const a = await api('/v1/status/activity?' + tenantQuery());
    const H = 40;
    const top = Math.max(1, ...a.minutes.map((m) => m.applied));
    const bottom = Math.max(1, ...a.minutes.map((m) => m.failed));
    const bar = (n, most, cls) => {
      const b = el('span', { class: 'bar-' + cls });
      b.style.height = (n ? Math.max(1, Math.round(H * n / most)) : 0) + 'px';
      return b;
    };
    const columns = a.minutes.map((m) => el('span', { class: 'minute', 'data-applied': m.applied, 'data-failed': m.failed,
      title: new Date(m.at).toLocaleTimeString() + ': ' + m.applied + ' applied, ' + m.failed + ' failed' },
    el('span', { class: 'up' }, bar(m.applied, top, 'applied')), el('span', { class: 'down' }, bar(m.failed, bottom, 'failed'))));
    const sum = (f) => a.minutes.reduce((n, m) => n + m[f], 0);
    this.activity.replaceChildren(el('div', { class: 'toolbar' },
      el('span', { id: 'activity-chart', role: 'img', 'aria-label': 'applies and failures per minute' }, columns),
      el('span', { class: 'muted', id: 'activity-totals', 'data-applied': sum('applied'), 'data-failed': sum('failed'),
        text: sum('applied') + ' applied, ' + sum('failed') + ' failed (at most ' + top + ' and ' + bottom + ' a minute)'
          + (a.countedFrom ? '; counted from ' + new Date(a.countedFrom).toLocaleTimeString() + ' (a burst: its newest events)' : '') })));
    clearTimeout(this.activityTimer);
    this.activityTimer = setTimeout(() => { if (this === state.view) this.soon('activity', () => this.loadActivity()); }, ACTIVITY_POLL);
  }

  // The fleet as a picture: per value of the chosen label, a bar of its clusters by
  // condition, each part a link to those clusters.
  async loadHeat() {
    const h = await api('/v1/status/heatmap?' + tenantQuery() + '&groupBy=' + q(this.groupBy));
    const pick = el('input', { id: 'group-by', value: this.groupBy, size: 16, spellcheck: 'false',
      onchange: (ev) => {
        this.groupBy = ev.target.value.trim() || 'region';
        sessionStorage.setItem('fleetsync.groupBy', this.groupBy);
        this.loadHeat().catch(showError);
      } });
    const widest = Math.max(1, ...h.groups.map((g) => g.clusters));
    const rows = h.groups.map((g) => {
      const selector = g.value === null ? '!' + h.label : g.value.startsWith('(') ? '' : h.label + '=' + g.value;
      const name = g.value === null ? '(no ' + h.label + ')' : g.value;
      const parts = CONDITIONS.filter((c) => g.byCondition[c]).map((c) => {
        const n = g.byCondition[c];
        return clustersLink({ labelSelector: selector, condition: c }, String(n), {
          class: 'seg phase-' + CONDITION_PHASE[c], 'data-condition': c, 'data-n': n,
          title: name + ': ' + n + ' ' + c, 'aria-label': name + ': ' + n + ' ' + c,
        });
      });
      const bar = el('div', { class: 'bar' }, parts);
      bar.style.width = Math.max(4, Math.round(100 * g.clusters / widest)) + '%';
      for (const seg of parts) seg.style.flexGrow = seg.dataset.n;
      return el('tr', { 'data-value': name },
        el('th', {}, selector ? clustersLink({ labelSelector: selector }, name) : name),
        el('td', { class: 'num', text: g.clusters }),
        el('td', { class: 'num' }, g.stale ? clustersLink({ labelSelector: selector, stale: 'true' }, String(g.stale)) : '0'),
        el('td', { class: 'bar-cell' }, bar));
    });
    this.heat.replaceChildren(
      el('div', { class: 'toolbar' }, el('label', {}, 'Label ', pick),
        el('span', { class: 'legend' }, CONDITIONS.map(conditionBadge))),
      h.groups.length ? table([h.label, 'clusters', 'stale', 'by condition'], rows, { id: 'heat-table' })
        : el('p', { class: 'muted', text: 'No clusters.' }));
  }

  // Runs `read` once in a while (READ_AGAIN), however many changes ask for it meanwhile.
  soon(what, read) {
    this.timers = this.timers || {};
    if (this.timers[what]) return;
    this.timers[what] = setTimeout(() => {
      this.timers[what] = null;
      if (this === state.view) refreshing = refreshing.then(read).catch((e) => { if (!(e instanceof SignedOut)) showError(e); });
    }, READ_AGAIN);
  }

  // The failing keys by cause, read again when the tenant's count of failing keys moves
  // (or, every few seconds, while keys change and some fail).
  async loadFailures() {
    const phases = (this.tenant && this.tenant.phases) || {};
    this.failing = (phases.Failed || 0) + (phases.Parked || 0);
    this.failures.replaceChildren(this.failing ? await failureGroups('') : el('p', { class: 'muted', text: 'No failed or parked keys.' }));
  }

  async loadSummaries() {
    const names = [];
    let token = '';
    do {
      const page = await api('/v1/syncsets?' + tenantQuery() + '&limit=' + SYNCSETS_PAGE + (token ? '&continue=' + q(token) : ''));
      for (const s of page.items) names.push(s.metadata.name);
      token = page.continue || '';
    } while (token && names.length < MAX_SYNCSETS);
    this.truncated = !!token;
    this.summaries.clear();
    await Promise.all([pool(names, 6, (name) => this.loadSummary(name)), this.loadTenantSummary()]);
    this.drawSummaries();
  }

  async loadTenantSummary() {
    const status = await api('/v1/status/summary?' + tenantQuery());
    this.tenant = status.summary;
    this.clusters = status.clusters;
  }

  async loadSummary(name) {
    try {
      const s = await api('/v1/status/syncsets/' + q(name) + '?' + tenantQuery() + '&limit=1');
      this.summaries.set(name, { generation: s.generation, summary: s.summary });
    } catch (e) {
      if (e.status === 404) this.summaries.delete(name); else throw e;
    }
  }

  drawSummaries() {
    const total = this.tenant;
    const rows = [];
    for (const [name, { generation, summary }] of [...this.summaries].sort((a, b) => a[0].localeCompare(b[0]))) {
      rows.push(el('tr', { 'data-syncset': name },
        el('td', {}, link('#/syncset/' + q(name), name)), el('td', { class: 'num', text: generation }),
        el('td', { class: 'num', text: summary.total }),
        PHASES.map((p) => el('td', { class: 'num', text: summary.phases[p] || 0 })),
        el('td', { class: 'num', text: summary.atGeneration }),
        el('td', { text: age(summary.oldestPendingSince) })));
    }
    const waiting = total.oldestPendingSince ? ', the longest-waiting key due for ' + age(total.oldestPendingSince) : '';
    const clusters = this.clusters || {};
    const conditions = [['ready', 'Ready', 'Applied'], ['progressing', 'Progressing', 'Applying'], ['degraded', 'Degraded', 'Failed']];
    this.totals.replaceChildren(summaryCards(total, '', (p) => '#/?phase=' + q(p)),
      el('div', { class: 'cards', id: 'cluster-conditions' },
        el('div', { class: 'card' }, el('span', { class: 'n', text: conditions.reduce((n, [c]) => n + (clusters[c] || 0), 0) }), 'clusters with keys'),
        conditions.map(([c, label, phase]) => clustersLink({ condition: label, sort: 'name' }, '', { class: 'card', 'data-condition-card': label },
          el('span', { class: 'n', 'data-clusters': c, text: clusters[c] || 0 }),
          el('span', { class: 'badge phase-' + phase, text: label }))),
        clustersLink({ stale: 'true', sort: 'seen' }, '', { class: 'card', 'data-condition-card': 'stale',
          title: 'No successful run and no agent report for the stale-after window (of those above)' },
        el('span', { class: 'n', 'data-clusters': 'stale', text: clusters.stale || 0 }),
        el('span', { class: 'badge phase-Parked', text: 'Stale' }))),
      el('p', { class: 'muted', text: this.summaries.size + ' SyncSets' + (this.truncated ? ' (the first ' + MAX_SYNCSETS + ' listed below)' : '') + waiting }));
    this.syncsets.replaceChildren(table(['SyncSet', 'generation', 'keys', ...PHASES, 'at generation', 'oldest pending'], rows,
      { id: 'syncset-list' }));
  }

  // Every rollout of the tenant (one read), or one SyncSet's (gone: it has none now).
  async loadRollouts() {
    const page = await api('/v1/rollouts?' + tenantQuery());
    this.rollouts = new Map(page.items.map((r) => [r.syncset, r]));
    this.drawRollouts();
  }

  async loadRollout(name) {
    try {
      this.rollouts.set(name, await api('/v1/rollouts/' + q(name) + '?' + tenantQuery()));
    } catch (e) {
      if (e.status === 404) this.rollouts.delete(name); else throw e;
    }
  }

  // The rollouts not completed, each with its current step's clusters (counted from 1
  // for people: step 0 is "1 of N"); the completed ones folded away below them.
  drawRollouts() {
    const all = [...this.rollouts.values()].sort((a, b) => a.syncset.localeCompare(b.syncset));
    const open = all.filter((r) => r.phase !== 'Completed');
    const done = all.filter((r) => r.phase === 'Completed');
    const counts = ['clusters', 'updated', 'healthy', 'failed', 'pending'];
    const rows = open.map((r) => {
      const steps = r.steps || [];
      const step = steps[r.step];
      return el('tr', { 'data-rollout': r.syncset },
        el('td', {}, link('#/syncset/' + q(r.syncset), r.syncset)), el('td', {}, rolloutBadge(r.phase)),
        el('td', { class: 'num', text: (r.step + 1) + ' of ' + steps.length }), el('td', {}, stepBars(r)),
        el('td', { class: 'num', text: r.revision }), el('td', { class: 'num', text: r.stable || 'none' }),
        counts.map((n) => el('td', { class: 'num', text: step ? step[n] : '' })),
        el('td', { text: age(r.stepStartedAt) + ' ago' }), el('td', { text: r.waiting || '' }),
        el('td', {}, r.reason ? el('pre', { text: r.reason }) : ''), el('td', {}, rolloutControls(r)));
    });
    const parts = [];
    if (!all.length) {
      parts.push(el('p', { class: 'muted', id: 'rollouts-empty', text: 'No rollouts: no SyncSet of this tenant has spec.rollout.' }));
    } else if (open.length) {
      parts.push(el('p', { class: 'muted', text: 'Clusters to pending: the current step\'s clusters, and where they stand.' }),
        table(['SyncSet', 'phase', 'step', 'steps', 'revision', 'stable', ...counts, 'step started', 'waiting for', 'reason', 'actions'], rows, { id: 'rollout-list' }));
    } else {
      parts.push(el('p', { class: 'muted', text: 'No rollout under way.' }));
    }
    if (done.length) {
      const doneRows = done.map((r) => el('tr', { 'data-rollout': r.syncset },
        el('td', {}, link('#/syncset/' + q(r.syncset), r.syncset)), el('td', { class: 'num', text: r.revision }),
        el('td', { text: age(r.updatedAt) + ' ago' })));
      parts.push(el('details', { id: 'rollouts-completed', open: this.rolloutsOpen, ontoggle: (ev) => { this.rolloutsOpen = ev.target.open; } },
        el('summary', { text: done.length + ' completed' }),
        table(['SyncSet', 'revision', 'completed'], doneRows, { id: 'rollout-completed-list' })));
    }
    this.rolloutPanel.replaceChildren(...parts);
    // A step's counts also move with what agents report (readiness, drift), which is no
    // event: while a rollout is under way it is read again every few seconds, through
    // the same refresh as events.
    clearTimeout(this.rolloutTimer);
    const moving = open.filter((r) => r.phase !== 'RolledBack').map((r) => r.syncset);
    this.rolloutTimer = moving.length ? setTimeout(() => {
      if (this === state.view) refresh({ ...emptyChange(), rollouts: new Set(moving) });
    }, ROLLOUTS_POLL) : null;
  }

  async loadMembers() {
    try {
      const members = await api('/v1/members');
      // Saturation: keys in flight against the members' limits (a member that did not
      // tell its limit counts none).
      const inFlight = members.items.reduce((n, m) => n + (m.maxInFlight ? m.inFlight : 0), 0);
      const limit = members.items.reduce((n, m) => n + (m.maxInFlight || 0), 0);
      const share = limit ? ' (' + Math.round(100 * inFlight / limit) + '%)' : '';
      this.members.replaceChildren(
        el('p', { id: 'saturation', 'data-in-flight': inFlight, 'data-limit': limit,
          text: 'Keys in flight: ' + inFlight + ' of ' + limit + share + ' across ' + members.items.length + ' members' }),
        table(['member', 'shards', 'in flight', 'limit', 'started', 'heartbeat'],
          members.items.map((m) => el('tr', {}, el('td', { text: m.id }), el('td', { class: 'num', text: m.shards }),
            el('td', { class: 'num', text: m.inFlight }), el('td', { class: 'num', text: m.maxInFlight || '-' }),
            el('td', { text: age(m.startedAt) + ' ago' }), el('td', { text: age(m.heartbeatAt) + ' ago' }))), { id: 'member-list' }));
    } catch (e) {
      if (e.status !== 403) throw e;
      this.members.replaceChildren(el('p', { class: 'muted', text: 'Members are shown to fleet-admins.' }));
    }
  }

  async loadMatrix() {
    const phase = this.phase ? '&phase=' + q(this.phase) : '';
    const token = this.pager.current;
    const page = await api('/v1/status?' + tenantQuery() + '&limit=' + MATRIX_PAGE + phase + (token ? '&continue=' + q(token) : ''));
    this.pager.next = page.continue || '';
    this.drawMatrix(page.items);
    if (this.toMatrix) {
      this.toMatrix = false;
      this.matrix.scrollIntoView();
    }
  }

  drawMatrix(items) {
    const filter = el('select', { id: 'phase-filter', onchange: (ev) => {
      this.phase = ev.target.value;
      sessionStorage.setItem('fleetsync.phase', this.phase);
      this.pager.reset();
      this.loadMatrix().catch(showError);
    } }, el('option', { value: '', text: 'every phase' }), el('option', { value: 'Failed,Parked', text: 'Failed or Parked' }),
    PHASES.map((p) => el('option', { value: p, text: p })));
    filter.value = this.phase;
    const bad = (k) => k.phase === 'Failed' || k.phase === 'Parked';
    // Failures first: SyncSets and clusters with a failed key lead the page.
    const score = (keys) => -keys.filter(bad).length;
    const bySyncSet = new Map();
    const byCluster = new Map();
    for (const k of items) {
      if (!bySyncSet.has(k.syncset)) bySyncSet.set(k.syncset, []);
      if (!byCluster.has(k.cluster)) byCluster.set(k.cluster, []);
      bySyncSet.get(k.syncset).push(k);
      byCluster.get(k.cluster).push(k);
    }
    const order = (m) => [...m.keys()].sort((a, b) => score(m.get(a)) - score(m.get(b)) || a.localeCompare(b));
    const syncsets = order(bySyncSet);
    const clusters = order(byCluster);
    const cells = new Map(items.map((k) => [k.cluster + '/' + k.syncset, k]));
    this.matrixKeys = new Set(cells.keys());
    this.matrixClusters = new Set(clusters);
    this.matrixSyncSets = new Set(syncsets);
    this.matrixFull = !!this.pager.next;
    const head = el('tr', {}, el('th', { text: 'SyncSet \\ cluster' }),
      clusters.map((c) => el('th', { class: 'col' }, link('#/cluster/' + q(c), c))));
    const rows = syncsets.map((s) => el('tr', { 'data-syncset': s }, el('th', {}, link('#/syncset/' + q(s), s)),
      clusters.map((c) => {
        const k = cells.get(c + '/' + s);
        if (!k) return el('td', { class: 'cell empty' });
        const title = c + ' / ' + s + ': ' + k.phase + (k.lastError ? ' — ' + k.lastError : '');
        return el('td', { class: 'cell phase-' + k.phase, title, 'data-cluster': c, 'data-syncset': s, 'data-phase': k.phase },
          el('a', { href: '#/key/' + q(c) + '/' + q(s), 'aria-label': title, text: bad(k) ? '!' : '' }));
      })));
    const matrix = items.length
      ? el('table', { class: 'matrix', id: 'matrix' }, el('thead', {}, head), el('tbody', {}, rows))
      : el('p', { class: 'muted', id: 'matrix-empty', text: 'No keys' + (this.phase ? ' in ' + this.phase : '') + '.' });
    this.matrix.replaceChildren(
      el('div', { class: 'toolbar' }, el('label', {}, 'Phase ', filter), this.pager.controls(''),
        el('span', { class: 'muted', id: 'matrix-count', text: items.length + ' keys on this page' })),
      el('div', { class: 'legend' }, PHASES.map(badge)), matrix);
  }

  async refresh(changed) {
    const names = new Set([...changed.syncsets].filter((s) => s));
    if (changed.all) {
      await this.loadSummaries();
    } else if (names.size) {
      await Promise.all([pool([...names], 6, (name) => this.loadSummary(name)), this.loadTenantSummary()]);
      this.drawSummaries();
    }
    // The failure groups and the clusters by label read every failing key and every
    // cluster: while keys keep changing they are read again at most every few seconds.
    const phases = (this.tenant && this.tenant.phases) || {};
    const failing = (phases.Failed || 0) + (phases.Parked || 0);
    if (changed.all || failing !== this.failing) await this.loadFailures();
    else if (failing && changed.keys.size) this.soon('failures', () => this.loadFailures());
    if (changed.all) await this.loadHeat();
    else if (changed.clusters.size) this.soon('heat', () => this.loadHeat());
    // A rollout an event names: its SyncSet, a move of it, or a key of one not completed.
    if (changed.all) {
      await this.loadRollouts();
    } else {
      const moving = (s) => this.rollouts.has(s) && this.rollouts.get(s).phase !== 'Completed';
      const rollouts = new Set([...changed.rollouts, ...[...changed.syncsets].filter(moving)]);
      if (rollouts.size) {
        await pool([...rollouts], 6, (name) => this.loadRollout(name));
        this.drawRollouts();
      }
    }
    // The page holds a changed key, or has room for a new one: read it again (one page).
    const touches = [...changed.keys].some((k) => this.matrixKeys.has(k))
      || [...changed.clusters].some((c) => this.matrixClusters.has(c))
      || [...changed.syncsets].some((s) => this.matrixSyncSets.has(s))
      || (!this.matrixFull && (changed.keys.size || changed.syncsets.size || changed.clusters.size));
    if (touches || changed.all) await this.loadMatrix();
  }
}

// The clusters found by name, label selector, condition, staleness and reachability,
// sorted, a page at a time; the search is the URL's (#/clusters?name=&labelSelector=&condition=&stale=&reachability=&sort=),
// so every counter of the fleet page links to its clusters.
class ClustersView {
  constructor(params) {
    this.params = params;
    this.offset = Number(params.get('offset')) || 0;
    this.body = el('div', {});
    const field = (name, attrs) => el('input', { name, value: params.get(name) || '', spellcheck: 'false', ...attrs });
    const choice = (name, options) => {
      const sel = el('select', { name }, options.map(([v, t]) => el('option', { value: v, text: t })));
      sel.value = params.get(name) || '';
      return sel;
    };
    this.form = el('form', { id: 'cluster-search', class: 'toolbar', onsubmit: (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(this.form)) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = '#/clusters?' + next.toString();
    } },
    el('label', {}, 'Name ', field('name', { size: 14, placeholder: 'part of a name' })),
    el('label', {}, 'Labels ', field('labelSelector', { size: 24, placeholder: 'region=eu,tier!=canary' })),
    el('label', {}, 'Condition ', choice('condition', [['', 'any'], ...CONDITIONS.map((c) => [c, c])])),
    el('label', {}, 'Stale ', choice('stale', [['', 'either'], ['true', 'stale'], ['false', 'not stale']])),
    el('label', {}, 'Reachability ', choice('reachability', [['', 'either'], ['Unreachable', 'unreachable'], ['Reachable', 'reachable']])),
    el('label', {}, 'Sort by ', choice('sort', [['', 'name'], ['condition', 'condition'], ['failing', 'failing keys'], ['seen', 'last seen']])),
    el('button', { type: 'submit', text: 'Search' }));
    this.root = el('div', {}, el('h1', { text: 'Clusters' }), this.form, this.body);
  }

  async load() {
    const p = new URLSearchParams(this.params);
    p.delete('offset');
    const started = performance.now();
    const list = await api('/v1/status/clusters?' + tenantQuery() + '&limit=' + CLUSTERS_PAGE + '&offset=' + this.offset
      + (p.toString() ? '&' + p.toString() : ''));
    this.names = new Set(list.items.map((c) => c.name));
    const rows = list.items.map((c) => el('tr', { 'data-cluster': c.name, 'data-condition': c.condition },
      el('td', {}, link('#/cluster/' + q(c.name), c.name)), el('td', {}, conditionBadge(c.condition)),
      el('td', { class: 'num', text: c.keys }), el('td', { class: 'num', text: c.failing }), el('td', { class: 'num', text: c.applied }),
      el('td', { text: c.seen ? age(c.seen) + ' ago' : 'never' }), el('td', { text: c.stale ? 'stale' : '' }),
      el('td', { class: 'labels', text: Object.entries(c.labels).map(([k, v]) => k + '=' + v).join(', ') })));
    const page = (offset, text, id) => {
      const next = new URLSearchParams(p);
      if (offset) next.set('offset', offset);
      return el('a', { href: '#/clusters?' + next.toString(), id, text });
    };
    const last = this.offset + list.items.length;
    this.body.replaceChildren(
      el('div', { class: 'toolbar' },
        el('span', { id: 'cluster-count', 'data-total': list.total, 'data-ms': Math.round(performance.now() - started),
          text: list.total ? (this.offset + 1) + '–' + last + ' of ' + list.total + ' clusters' : 'No clusters found.' }),
        this.offset > 0 ? page(Math.max(0, this.offset - CLUSTERS_PAGE), 'Previous page', 'clusters-prev') : '',
        last < list.total ? page(last, 'Next page', 'clusters-next') : ''),
      list.items.length ? table(['cluster', 'condition', 'keys', 'failing', 'applied', 'last seen', '', 'labels'], rows, { id: 'cluster-list' }) : '');
  }

  async refresh(changed) {
    if (changed.all || [...changed.clusters].some((c) => this.names && this.names.has(c))) await this.load();
  }
}

// The tenant's events, newest first: the log's newest page (500 events of the tenants
// the caller sees), filtered by kind, actor and part of the object's name (the URL's
// #/events?kind=&actor=&object=), older pages on request, and every new event that
// matches added on top as the watch brings it.
const EVENTS_PAGE = 500;
const EVENTS_SHOWN = 1000;
class EventsView {
  constructor(params) {
    this.filter = { kind: params.get('kind') || '', actor: params.get('actor') || '', object: params.get('object') || '' };
    this.rows = el('tbody', {});
    this.oldest = null;
    this.shown = 0;
    const field = (name, attrs) => el('input', { name, value: this.filter[name], spellcheck: 'false', ...attrs });
    const kinds = ['', 'Status', 'SyncSet', 'Cluster', 'Rollout', 'Secret', 'GitRepository', 'OCIRepository', 'Notifier'];
    const kind = el('select', { name: 'kind' }, kinds.map((k) => el('option', { value: k, text: k || 'every kind' })));
    kind.value = this.filter.kind;
    this.form = el('form', { id: 'event-filter', class: 'toolbar', onsubmit: (ev) => {
      ev.preventDefault();
      const next = new URLSearchParams();
      for (const [k, v] of new FormData(this.form)) if (String(v).trim()) next.set(k, String(v).trim());
      location.hash = '#/events?' + next.toString();
    } }, el('label', {}, 'Kind ', kind),
    el('label', {}, 'Actor ', field('actor', { size: 18, placeholder: 'token:ci' })),
    el('label', {}, 'Object ', field('object', { size: 18, placeholder: 'part of a name' })),
    el('button', { type: 'submit', text: 'Filter' }));
    this.count = el('span', { id: 'event-count', class: 'muted' });
    this.older = el('button', { type: 'button', id: 'older-events', text: 'Older events', onclick: () => this.page().catch(showError) });
    this.root = el('div', {}, el('h1', { text: 'Events' }), this.form,
      el('div', { class: 'toolbar' }, this.count, this.older),
      el('table', { id: 'event-list' }, el('thead', {}, el('tr', {},
        ['seq', 'when', 'kind', 'object', 'action', 'generation', 'actor'].map((h) => el('th', { text: h })))), this.rows));
  }

  matches(e) {
    const f = this.filter;
    return e.tenant === state.tenant && (!f.kind || e.kind === f.kind)
      && (!f.actor || (e.actor || '').includes(f.actor)) && (!f.object || e.name.includes(f.object));
  }

  row(e) {
    const object = e.kind === 'Status' ? link('#/key/' + e.name.split('/').map(q).join('/'), e.name)
      : e.kind === 'Cluster' ? link('#/cluster/' + q(e.name), e.name)
        : e.kind === 'SyncSet' || e.kind === 'Rollout' ? link('#/syncset/' + q(e.name), e.name) : e.name;
    return el('tr', { 'data-seq': e.seq, 'data-kind': e.kind },
      el('td', { class: 'num', text: e.seq }), el('td', { text: age(e.at) + ' ago', title: e.at }), el('td', { text: e.kind }),
      el('td', {}, object), el('td', {}, e.kind === 'Status' ? badge(e.action) : e.action),
      el('td', { class: 'num', text: e.generation }), el('td', { text: e.actor || '' }));
  }

  async load() {
    this.rows.replaceChildren();
    this.oldest = null;
    this.shown = 0;
    await this.page();
  }

  // The next page back of the log, what matches appended.
  async page() {
    const before = this.oldest !== null ? '&before=' + this.oldest : '';
    const page = await api('/v1/events?order=desc&limit=' + EVENTS_PAGE + before);
    for (const e of page.items) {
      if (this.matches(e)) { this.rows.append(this.row(e)); this.shown++; }
    }
    if (page.items.length) this.oldest = page.items[page.items.length - 1].seq;
    this.older.disabled = page.items.length < EVENTS_PAGE;
    this.counted();
  }

  counted() {
    this.count.textContent = this.shown + ' events shown, back to #' + (this.oldest || '-');
  }

  onEvent(e) {
    if (!this.matches(e) || this.rows.querySelector('tr[data-seq="' + e.seq + '"]')) return;
    this.rows.prepend(this.row(e));
    this.shown++;
    while (this.rows.children.length > EVENTS_SHOWN) { this.rows.lastChild.remove(); this.shown--; }
    this.counted();
  }

  // New events arrive through onEvent; after a gap in the watch (410), read again.
  async refresh(changed) {
    if (changed.all) await this.load();
  }
}

// One SyncSet: its summary, failures, and its keys a page at a time.
class SyncSetView {
  constructor(name) {
    this.name = name;
    this.pager = new Pager(() => this.load());
    this.root = el('div', {}, el('h1', { text: 'SyncSet ' + name }));
    this.body = el('div', {});
    this.spec = el('div', { id: 'syncset-doc' });
    this.root.append(this.body, this.spec);
    this.specRead = false;
  }

  async load() {
    if (!this.specRead) {
      this.specRead = true;
      await this.loadSpec();
    }
    const token = this.pager.current;
    const s = await api('/v1/status/syncsets/' + q(this.name) + '?' + tenantQuery() + '&limit=' + KEYS_PAGE + (token ? '&continue=' + q(token) : ''));
    this.pager.next = s.continue || '';
    const rows = s.items.map((k) => el('tr', { 'data-cluster': k.cluster },
      el('td', {}, link('#/key/' + q(k.cluster) + '/' + q(this.name), k.cluster)), el('td', {}, badge(k.phase)),
      el('td', { class: 'num', text: k.observedGeneration + ' / ' + k.generation }), el('td', { class: 'num', text: k.attempts }),
      el('td', {}, el('pre', { text: k.lastError || '' }))));
    const p = s.progress;
    const rollout = p.rollout ? el('p', { id: 'syncset-rollout' }, 'Rollout ', rolloutBadge(p.rollout.phase),
      ' at step ' + (p.rollout.step + 1) + ' of ' + p.rollout.steps + ', generation ' + p.rollout.revision + ' (stable ' + p.rollout.stable + ')'
      + (p.rollout.waiting ? ': ' + p.rollout.waiting : '') + (p.rollout.reason ? ': ' + p.rollout.reason : ''), ' ',
      rolloutControls({ syncset: this.name, phase: p.rollout.phase })) : '';
    this.body.replaceChildren(
      el('p', { class: 'muted', text: 'generation ' + s.generation + (s.summary.oldestPendingSince ? ', oldest pending ' + age(s.summary.oldestPendingSince) : '') }),
      el('p', { id: 'syncset-condition', 'data-reason': p.reason, 'data-done': String(p.done) },
        el('strong', { text: p.done ? 'Applied' : p.reason }), ': ' + p.message),
      rollout,
      el('div', { class: 'cards' },
        el('div', { class: 'card' }, el('span', { class: 'n', id: 'syncset-clusters', text: p.clusters }), 'clusters'),
        el('div', { class: 'card' }, el('span', { class: 'n', id: 'syncset-applied', text: p.applied }), 'at generation ' + p.generation),
        el('div', { class: 'card' }, el('span', { class: 'n', id: 'syncset-held', text: p.held }),
          p.heldAt ? 'held at generation ' + p.heldAt + ' by the rollout' : 'held by a rollout')),
      summaryCards(s.summary, 'syncset-'),
      el('h2', { text: 'Failures' }),
      (s.summary.phases.Failed || s.summary.phases.Parked) ? await failureGroups(this.name)
        : el('p', { class: 'muted', text: 'No failed or parked keys.' }),
      el('h2', { text: 'Keys' }), el('div', { class: 'toolbar' }, this.pager.controls('')),
      table(['cluster', 'phase', 'observed / generation', 'attempts', 'last error'], rows, { id: 'key-list' }));
  }

  async refresh(changed) {
    if (changed.all || changed.objects.has('SyncSet/' + this.name)) this.specRead = false;
    if (changed.all || changed.syncsets.has(this.name)) await this.load();
  }

  // The SyncSet as stored (Secret values redacted by the API): its spec and manifests,
  // and its rendering for one cluster against what that cluster last applied.
  async loadSpec() {
    const doc = await api('/v1/syncsets/' + q(this.name) + '?' + tenantQuery());
    const { resources, ...spec } = doc.spec || {};
    const ref = (m) => m.kind + ' ' + ((m.metadata && m.metadata.namespace) ? m.metadata.namespace + '/' : '') + ((m.metadata && m.metadata.name) || '');
    const manifests = (resources || []).map((m) => el('tr', { 'data-manifest': ref(m) },
      el('td', { text: ref(m) }), el('td', { text: m.apiVersion }),
      el('td', {}, el('details', {}, el('summary', { text: 'manifest' }), el('pre', { text: JSON.stringify(m, null, 2) })))));
    // The form and the rendering are kept across re-reads: what was typed stays, and the
    // rendering shown stays until the new one replaces it.
    if (!this.renderForm) {
      const cluster = el('input', { id: 'render-cluster', size: 20, spellcheck: 'false', placeholder: 'cluster name' });
      this.renderForm = el('form', { class: 'toolbar', id: 'render-form', onsubmit: (ev) => {
        ev.preventDefault();
        this.renderFor = cluster.value.trim();
        this.render();
      } }, el('label', {}, 'Cluster ', cluster), el('button', { type: 'submit', text: 'Render' }));
      this.rendered = el('div', { id: 'rendered' });
    }
    this.spec.replaceChildren(
      el('h2', { text: 'Spec' }), el('pre', { id: 'syncset-spec', text: JSON.stringify(spec, null, 2) }),
      el('h2', { text: 'Manifests' }),
      manifests.length ? table(['resource', 'apiVersion', ''], manifests, { id: 'manifest-list' })
        : el('p', { class: 'muted', text: spec.sourceRef ? 'Read from its source at the revision it follows.' : 'No resources.' }),
      el('h2', { text: 'For one cluster' }), this.renderForm, this.rendered);
    // A SyncSet changed while a rendering was shown: show the new one.
    if (this.renderFor) await this.render();
  }

  // What the SyncSet's latest generation renders to on `cluster`, and whether that is
  // what the cluster last applied (the key's rendered hash).
  async render() {
    try {
      await this.drawRendering(this.renderFor);
    } catch (e) {
      if (!(e instanceof SignedOut)) this.rendered.replaceChildren(el('p', { class: 'error', text: e.message || String(e) }));
    }
  }

  async drawRendering(cluster) {
    if (!cluster) return;
    const [r, keys] = await Promise.all([
      api('/v1/syncsets/' + q(this.name) + '/render?' + tenantQuery() + '&cluster=' + q(cluster)),
      api('/v1/status?' + tenantQuery() + '&cluster=' + q(cluster) + '&syncset=' + q(this.name) + '&limit=1'),
    ]);
    const k = keys.items[0];
    const applied = k && k.renderedHash;
    const verdict = !k ? 'The SyncSet does not select ' + cluster + '.'
      : !applied ? cluster + ' has not applied a rendering of it yet (or it is not templated).'
        : applied === r.hash ? cluster + ' holds this rendering (generation ' + k.observedGeneration + ').'
          : cluster + ' holds another rendering (' + applied + ', generation ' + k.observedGeneration + '): generation ' + r.generation + ' renders to ' + r.hash + '.';
    this.rendered.replaceChildren(
      el('p', { id: 'render-verdict', 'data-same': String(!!applied && applied === r.hash), text: verdict }),
      el('pre', { id: 'render-output', text: JSON.stringify(r.resources, null, 2) }));
  }
}

// One cluster: the object, and its keys a page at a time.
class ClusterView {
  constructor(name) {
    this.name = name;
    this.pager = new Pager(() => this.load());
    this.body = el('div', {});
    this.root = el('div', {}, el('h1', { text: 'Cluster ' + name }), this.body);
  }

  async load() {
    const token = this.pager.current;
    const [cluster, page, status] = await Promise.all([
      api('/v1/clusters/' + q(this.name) + '?' + tenantQuery()),
      api('/v1/status?' + tenantQuery() + '&cluster=' + q(this.name) + '&limit=' + KEYS_PAGE + (token ? '&continue=' + q(token) : '')),
      api('/v1/status/clusters/' + q(this.name) + '?' + tenantQuery()),
    ]);
    this.pager.next = page.continue || '';
    const labels = Object.entries((cluster.metadata && cluster.metadata.labels) || {}).map(([k, v]) => k + '=' + v).join(', ');
    const rows = page.items.map((k) => el('tr', { 'data-syncset': k.syncset },
      el('td', {}, link('#/key/' + q(this.name) + '/' + q(k.syncset), k.syncset)), el('td', {}, badge(k.phase)),
      el('td', { class: 'num', text: k.observedGeneration + ' / ' + k.generation }), el('td', { class: 'num', text: k.attempts }),
      el('td', { text: age(k.lastAppliedAt) }), el('td', {}, el('pre', { text: k.lastError || '' }))));
    const c = status.condition;
    const r = status.reachability;
    const reach = !r ? 'unknown: no key has run on it yet' : r.state === 'Reachable' ? 'reachable'
      : 'unreachable since ' + r.since + ' (' + age(r.since) + ' ago): ' + (r.message || '');
    const endpoint = Object.entries((cluster.spec && cluster.spec.endpoint) || {})[0];
    const ref = endpoint && endpoint[1] && (endpoint[1].url || endpoint[1].secretRef);
    this.body.replaceChildren(el('p', { class: 'muted', text: labels ? 'labels: ' + labels : 'no labels' }),
      el('p', { class: 'muted', id: 'cluster-endpoint',
        text: 'endpoint: ' + (endpoint ? endpoint[0] + ' ' + (typeof ref === 'object' && ref ? 'Secret ' + ref.name : ref || '') : 'none') }),
      el('p', { id: 'cluster-condition', 'data-reason': c.reason }, el('strong', { text: c.reason }), ': ' + c.message),
      el('p', { id: 'cluster-reachability', 'data-state': r ? r.state : 'Unknown' }, el('strong', { text: 'Reachability' }), ': ' + reach),
      c.ready ? '' : actionButton('Retry failing keys', 'Run every failed or parked key of ' + this.name + ' again now?', async () => {
        const r = await api('/v1/status/clusters/' + q(this.name) + '/retry?' + tenantQuery(), 'POST');
        return 'Retried ' + r.retried + ' keys of ' + this.name + '.';
      }, { id: 'retry-cluster' }),
      el('div', { class: 'toolbar' }, this.pager.controls('')),
      table(['SyncSet', 'phase', 'observed / generation', 'attempts', 'applied', 'last error'], rows, { id: 'key-list' }));
  }

  async refresh(changed) {
    if (changed.all || changed.clusters.has(this.name)) await this.load();
  }
}

// One key: its phase, per-resource results of the last run, last error, drift.
class KeyView {
  constructor(cluster, syncset) {
    this.cluster = cluster;
    this.syncset = syncset;
    this.body = el('div', {});
    this.root = el('div', {}, el('h1', {},
      'Key ', link('#/cluster/' + q(cluster), cluster), ' / ', link('#/syncset/' + q(syncset), syncset)), this.body);
  }

  async load() {
    const key = q(this.cluster) + '/syncsets/' + q(this.syncset);
    const [page, events] = await Promise.all([
      api('/v1/status?' + tenantQuery() + '&cluster=' + q(this.cluster) + '&syncset=' + q(this.syncset) + '&limit=1'),
      api('/v1/status/clusters/' + key + '/events?' + tenantQuery() + '&limit=' + KEY_EVENTS),
    ]);
    const k = page.items[0];
    if (!k) { this.body.replaceChildren(el('p', { class: 'muted', text: 'No such key.' })); return; }
    const ref = (r) => r.kind + ' ' + (r.namespace ? r.namespace + '/' : '') + r.name;
    const facts = [['phase', badge(k.phase)], ['desired', String(k.desired)], ['generation', k.generation],
      ['observed generation', k.observedGeneration], ['attempts', k.attempts],
      ['last applied', k.lastAppliedAt ? age(k.lastAppliedAt) + ' ago' : 'never'],
      ['next attempt', k.nextAttemptAt || ''], ['updated', age(k.updatedAt) + ' ago']];
    const retry = actionButton('Retry now', 'Run this key again now?', async () => {
      await api('/v1/status/clusters/' + key + '/retry?' + tenantQuery(), 'POST');
      return 'Retried ' + this.syncset + ' on ' + this.cluster + '.';
    }, { id: 'retry-key' });
    this.body.replaceChildren(retry,
      el('table', { id: 'key-facts' }, el('tbody', {}, facts.map(([n, v]) => el('tr', {}, el('th', { text: n }), el('td', {}, v))))),
      el('h2', { text: 'Last error' }), el('pre', { id: 'last-error', text: k.lastError || 'none' }),
      el('h2', { text: 'Resources (last run)' }),
      table(['resource', 'apiVersion', 'outcome', 'ms', 'error'], (k.resources || []).map((r) => el('tr', { 'data-resource': ref(r.resource) },
        el('td', { text: ref(r.resource) }), el('td', { text: r.resource.apiVersion }), el('td', { text: r.outcome }),
        el('td', { class: 'num', text: r.durationMs }), el('td', {}, el('pre', { text: r.error || '' })))), { id: 'resources' }),
      el('h2', { text: 'Drift' }),
      (k.drift || []).length ? table(['resource', 'reason', 'live version'], k.drift.map((d) => el('tr', {},
        el('td', { text: ref(d.resource) }), el('td', { text: d.reason }), el('td', { text: d.resourceVersion }))))
        : el('p', { class: 'muted', text: 'No drift reported.' }),
      el('h2', { text: 'Recent events' }),
      events.items.length ? table(['seq', 'when', 'outcome', 'generation'], events.items.map((e) => el('tr', { 'data-seq': e.seq },
        el('td', { class: 'num', text: e.seq }), el('td', { text: age(e.at) + ' ago' }), el('td', {}, badge(e.action)),
        el('td', { class: 'num', text: e.generation }))), { id: 'key-events' })
        : el('p', { class: 'muted', id: 'key-events', text: 'No events kept for this key.' }));
  }

  async refresh(changed) {
    if (changed.all || changed.keys.has(this.cluster + '/' + this.syncset)) await this.load();
  }
}

// The tenant's sources (GitRepositories and OCIRepositories, the first page of each):
// what each follows, the revision its SyncSets read, and how its fetch (the key
// `source:NAME`) stands.
class SourcesView {
  constructor() {
    this.body = el('div', {});
    this.root = el('div', {}, el('h1', { text: 'Sources' }), this.body);
    this.keys = new Set();
  }

  async load() {
    const [git, oci] = await Promise.all(['gitrepositories', 'ocirepositories'].map((plural) =>
      api('/v1/' + plural + '?' + tenantQuery() + '&limit=' + SOURCES_PAGE)));
    const sources = [...git.items, ...oci.items].sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    const keyOf = (s) => 'source:' + s.metadata.name;
    this.keys = new Set(sources.map((s) => keyOf(s) + '/' + keyOf(s)));
    const fetches = await pool(sources, 6, async (s) => {
      const page = await api('/v1/status?' + tenantQuery() + '&cluster=' + q(keyOf(s)) + '&syncset=' + q(keyOf(s)) + '&limit=1');
      return page.items[0];
    });
    const ref = (r) => Object.entries(r || {}).map(([k, v]) => k + ' ' + v).join(', ') || 'tag latest';
    const rows = sources.map((s, i) => {
      const k = fetches[i], st = s.status || {};
      return el('tr', { 'data-source': s.metadata.name, 'data-kind': s.kind },
        el('td', {}, link('#/key/' + q(keyOf(s)) + '/' + q(keyOf(s)), s.metadata.name)), el('td', { text: s.kind }),
        el('td', { class: 'url', text: s.spec.url }), el('td', { text: ref(s.spec.ref) }),
        el('td', { class: 'revision', text: st.revision || '' }),
        el('td', { text: st.fetchedAt ? age(st.fetchedAt) + ' ago' : 'never' }),
        el('td', {}, k ? badge(k.phase) : ''), el('td', {}, el('pre', { text: (k && k.lastError) || '' })));
    });
    const more = git.continue || oci.continue;
    this.body.replaceChildren(...[
      sources.length
        ? table(['name', 'kind', 'url', 'ref', 'revision', 'fetched', 'fetch', 'last error'], rows, { id: 'source-list' })
        : el('p', { class: 'muted', id: 'source-list', text: 'No sources.' }),
      more && el('p', { class: 'muted', text: 'The first ' + SOURCES_PAGE + ' of each kind; `fleetsync get sources` lists them all.' }),
    ].filter(Boolean));
  }

  async refresh(changed) {
    if (changed.all || [...changed.keys].some((k) => this.keys.has(k))) await this.load();
  }
}

// ---- live: the event watch ---------------------------------------------------------

function emptyChange() {
  // `objects`: the Clusters and SyncSets themselves changed (`Kind/name`), not their keys.
  return { all: false, keys: new Set(), clusters: new Set(), syncsets: new Set(), rollouts: new Set(), objects: new Set() };
}

let pending = emptyChange();
let flushTimer = null;

// What an event changes, gathered for a moment so that a burst is one refresh.
function noteEvent(ev) {
  if (ev.tenant !== state.tenant) return;
  if (state.view && state.view.onEvent) state.view.onEvent(ev);
  if (ev.kind === 'Status') {
    const [cluster, syncset] = String(ev.name).split('/');
    pending.keys.add(ev.name);
    pending.clusters.add(cluster);
    pending.syncsets.add(syncset);
  } else if (ev.kind === 'SyncSet') {
    pending.syncsets.add(ev.name);
    pending.rollouts.add(ev.name);
    pending.objects.add('SyncSet/' + ev.name);
  } else if (ev.kind === 'Rollout') {
    pending.rollouts.add(ev.name);
  } else if (ev.kind === 'Cluster') {
    pending.clusters.add(ev.name);
    pending.objects.add('Cluster/' + ev.name);
  } else {
    return;
  }
  if (!flushTimer) flushTimer = setTimeout(flush, 250);
}

function flush() {
  flushTimer = null;
  const changed = pending;
  pending = emptyChange();
  refresh(changed);
}

function setLive(on) {
  const live = $('live');
  live.textContent = on ? 'live' : 'offline';
  live.classList.toggle('on', on);
}

function stopWatch() {
  if (state.watch) state.watch.abort();
  state.watch = null;
  setLive(false);
}

// Follows /v1/events?watch=true from now on (`since=now`: the page never reads the
// log's backlog, at fleet scale millions of events it has no use for; every event after
// that is a change to re-read), then from where it left off; after a 410 it starts from
// now again and re-reads the view once.
//
// Answers a promise that settles once the watch has its cursor (its first bookmark) or
// has failed: a view read after that misses no change.
function startWatch() {
  stopWatch();
  const ctl = new AbortController();
  state.watch = ctl;
  let after = null;
  let backoff = 1000;
  let started;
  const cursor = new Promise((resolve) => { started = resolve; });
  (async () => {
    while (!ctl.signal.aborted) {
      let gone = false;
      try {
        const url = '/v1/events?watch=true' + (after !== null ? '&after=' + after : '&since=now');
        const resp = await fetch(url, { credentials: 'same-origin', signal: ctl.signal });
        if (resp.status === 401) { started(); signedOut(); return; }
        if (resp.status === 410) gone = true;
        else if (!resp.ok || !resp.body) throw new Error('watch: HTTP ' + resp.status);
        else {
          setLive(true);
          backoff = 1000;
          gone = await readLines(resp.body, (line) => {
            if (line.type === 'EVENT') {
              after = line.event.seq;
              noteEvent(line.event);
            } else if (line.type === 'BOOKMARK') {
              after = line.seq;
              started();
            }
          });
        }
      } catch (e) {
        if (ctl.signal.aborted) { started(); return; }
      }
      started();
      setLive(false);
      if (gone) {
        after = null;
        refresh({ ...emptyChange(), all: true });
        continue;
      }
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 30000);
    }
    started();
  })();
  return cursor;
}

// Reads newline-delimited JSON; answers whether the stream ended with a 410.
async function readLines(body, onLine) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += decoder.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const text = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!text) continue;
      const line = JSON.parse(text);
      if (line.type === 'ERROR') return line.code === 410;
      onLine(line);
    }
  }
}

// ---- start -------------------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('sign-in-form').addEventListener('submit', (ev) => { signIn(ev).catch(showError); });
  $('sign-out').addEventListener('click', () => { signOut().catch(showError); });
  $('tenant').addEventListener('change', setTenant);
  window.addEventListener('hashchange', render);
  start();
});
