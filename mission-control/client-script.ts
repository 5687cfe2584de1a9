// The panel's one inline script. It opens an EventSource on the page's feed and, on each
// change that concerns the page, re-fetches what the page shows and updates it in place:
// the convoy panel applies /api/convoys/:id JSON to its [data-field] cells; other pages
// (and a convoy that gained a run) swap in the freshly rendered <main>. No reloads, no
// polling: the only timer re-labels ages ("12 s ago") from timestamps already on the page, and
// fetches again once when a running run's lease on the page passes.
// Formatting matches html.ts (formatTime, formatAge).
export const CLIENT_SCRIPT = String.raw`
(() => {
  const body = document.body;
  const feed = body.dataset.events;
  if (!feed) return;
  const jsonUrl = body.dataset.json || '';
  const convoyId = body.dataset.convoy || '';
  const runId = body.dataset.run || '';
  const liveEl = document.querySelector('[data-testid="live-status"]');

  const formatTime = (iso) => iso ? iso.replace('T', ' ').slice(0, 19) + ' UTC' : '\u2014';
  const formatAge = (iso) => {
    if (!iso) return '';
    const seconds = Math.round((Date.now() - Date.parse(iso)) / 1000);
    const abs = Math.abs(seconds);
    if (abs < 2) return 'just now';
    const span = abs < 90 ? abs + ' s' : abs < 5400 ? Math.round(abs / 60) + ' min'
      : abs < 172800 ? Math.round(abs / 3600) + ' h' : Math.round(abs / 86400) + ' d';
    return seconds >= 0 ? span + ' ago' : 'in ' + span;
  };
  const tickAges = () => {
    for (const el of document.querySelectorAll('[data-iso]')) {
      const age = el.querySelector('.age');
      if (age && el.dataset.iso) age.textContent = formatAge(el.dataset.iso);
    }
  };
  // A running run whose lease runs out is stalled from that moment: no row changes, so no
  // notification comes; the flag carries the lease and is raised here when it passes. A heartbeat
  // renews the lease without a notification either, so a lease the page read before it passed is
  // read again first: the flag rises only on a lease fetched after its own expiry.
  let fetchedAt = Date.now();
  let leaseCheckAt = 0;
  const tickStalls = () => {
    let stale = false;
    for (const el of document.querySelectorAll('[data-field="stalled"][data-kind="flag"]')) {
      if (el.dataset.lease === undefined) continue;
      const lease = el.dataset.lease ? Date.parse(el.dataset.lease) : NaN;
      const expired = el.dataset.running === '1' && lease < Date.now();
      if (expired && fetchedAt <= lease) stale = true;
      el.hidden = !(expired && fetchedAt > lease);
    }
    if (stale && Date.now() - leaseCheckAt > 2000) { leaseCheckAt = Date.now(); refresh(); }
  };
  setInterval(() => { tickAges(); tickStalls(); }, 1000);

  // Copy buttons (branch, commit, worktree); the text stays selectable where the clipboard is refused.
  document.addEventListener('click', (event) => {
    const button = event.target instanceof Element ? event.target.closest('button.copy') : null;
    if (!button || !navigator.clipboard) return;
    navigator.clipboard.writeText(button.dataset.copy || '').then(
      () => { button.textContent = 'copied'; },
      () => { button.textContent = 'select to copy'; },
    );
  });

  const setLive = (state, text) => { if (liveEl) { liveEl.dataset.state = state; liveEl.textContent = text; } };

  // Sets one [data-field] cell inside scope; timestamps carry data-iso, statuses a badge class.
  const setField = (scope, name, value) => {
    const el = scope.querySelector('[data-field="' + name + '"]');
    if (!el) return;
    if (el.dataset.kind === 'flag') {
      el.hidden = !value;
      if (scope.dataset.lease !== undefined) el.dataset.lease = scope.dataset.lease;
      if (scope.dataset.running !== undefined) el.dataset.running = scope.dataset.running;
    } else if (el.hasAttribute('data-iso')) {
      const iso = value || '';
      el.dataset.iso = iso;
      const time = el.querySelector('time');
      if (time) { time.textContent = formatTime(iso); time.setAttribute('datetime', iso); }
      const age = el.querySelector('.age');
      if (age) age.textContent = iso ? formatAge(iso) : (time ? '' : '\u2014');
    } else if (el.classList.contains('badge')) {
      el.textContent = value;
      el.className = 'badge status-' + value;
    } else {
      el.textContent = value === null || value === undefined ? '\u2014' : String(value);
    }
  };

  // Returns false when the JSON holds a run the page has no row for: the page must be re-rendered.
  const applyConvoy = (data) => {
    const totals = document.querySelector('[data-convoy-totals]');
    if (totals) {
      setField(totals, 'checkpointCount', data.checkpointCount);
      setField(totals, 'lastCheckpointAt', data.lastCheckpointAt);
      for (const status of ['queued', 'running', 'completed', 'failed', 'cancelled']) {
        setField(totals, 'runs-' + status, data.runs.filter((r) => r.status === status).length);
      }
    }
    let complete = true;
    for (const run of data.runs) {
      const row = document.querySelector('[data-run-id="' + CSS.escape(run.agentRunId) + '"]');
      if (!row) { complete = false; continue; }
      row.dataset.lease = run.leaseExpiresAt || '';
      row.dataset.running = run.status === 'running' ? '1' : '';
      for (const name of ['checkpointCount', 'lastCheckpointAt', 'status', 'attempt', 'step', 'workerId', 'heartbeatAt', 'leaseExpiresAt', 'stalled']) {
        setField(row, name, run[name]);
      }
    }
    return complete && document.querySelectorAll('[data-run-id]').length === data.runs.length;
  };

  const signIn = () => location.assign('/login?next=' + encodeURIComponent(location.pathname + location.search));

  const swapMain = async (asked) => {
    // The page's own query (filters, cursor, before) is kept: a refresh shows the same page.
    const query = new URLSearchParams(location.search);
    query.set('fragment', 'main');
    const res = await fetch(location.pathname + '?' + query, { credentials: 'same-origin' });
    if (res.redirected && new URL(res.url).pathname === '/login') { signIn(); return; }
    if (!res.ok) return;
    const main = document.querySelector('main');
    if (main) main.innerHTML = await res.text();
    fetchedAt = asked;
  };

  const refreshOnce = async () => {
    const asked = Date.now();
    if (!jsonUrl) return swapMain(asked);
    const res = await fetch(jsonUrl, { credentials: 'same-origin', headers: { accept: 'application/json' } });
    if (res.status === 401) { signIn(); return; }
    if (!res.ok) return swapMain(asked);
    if (!applyConvoy(await res.json())) await swapMain(asked);
    else fetchedAt = asked;
  };

  // At most one refresh in flight; changes that arrive meanwhile fold into one more.
  let running = false;
  let again = false;
  const refresh = async () => {
    if (running) { again = true; return; }
    running = true;
    try {
      do { again = false; await refreshOnce(); } while (again);
      body.dataset.refreshed = String(Number(body.dataset.refreshed || 0) + 1);
    } catch (err) {
      console.error('mission control refresh failed', err);
    } finally {
      running = false;
    }
  };

  const concerns = (notice) =>
    (!convoyId || notice.convoyId === convoyId) && (!runId || notice.agentRunId === runId);

  let opened = false;
  // A browser retries a dropped stream itself, but gives up for good on an error status (a 503
  // while the database is away): the feed is then opened again here, a little later.
  const listen = () => {
    const source = new EventSource(feed);
    source.addEventListener('ready', () => {
      setLive('live', 'live');
      if (opened) refresh(); // back after a drop: changes may have been missed
      opened = true;
    });
    source.addEventListener('change', (event) => {
      try { if (concerns(JSON.parse(event.data))) refresh(); } catch { refresh(); }
    });
    source.addEventListener('resync', () => refresh());
    source.addEventListener('error', () => {
      setLive('reconnecting', 'reconnecting\u2026');
      if (source.readyState === EventSource.CLOSED) setTimeout(listen, 3000);
    });
  };
  listen();
})();
`;
