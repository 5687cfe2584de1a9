// The panel's one stylesheet, inlined in every page: nothing is fetched from the network.
export const STYLES = `
:root { --bg:#f5f6f8; --card:#fff; --ink:#1c2330; --muted:#667085; --line:#e3e6eb; --accent:#2f5bea;
  --ok:#117a48; --ok-bg:#e3f5ec; --run:#1d4ed8; --run-bg:#e4ecff; --wait:#8a5a00; --wait-bg:#fff3d6;
  --bad:#b42318; --bad-bg:#fde8e6; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink); font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; }
header.top { display:flex; align-items:center; gap:16px; padding:10px 24px; background:#111827; color:#e5e7eb; }
header.top .brand { font-weight:650; letter-spacing:.2px; color:#fff; text-decoration:none; }
header.top .who { color:#9ca3af; font-size:13px; }
header.top .spacer { flex:1; }
header.top form { margin:0; }
header.top button { background:none; border:1px solid #374151; color:#d1d5db; border-radius:6px; padding:3px 10px; cursor:pointer; font:inherit; font-size:12px; }
.live { font-size:12px; color:#9ca3af; display:inline-flex; align-items:center; gap:6px; }
.live::before { content:""; width:8px; height:8px; border-radius:50%; background:#6b7280; }
.live[data-state="live"] { color:#86efac; } .live[data-state="live"]::before { background:#22c55e; }
.live[data-state="reconnecting"] { color:#fcd34d; } .live[data-state="reconnecting"]::before { background:#f59e0b; }
main { max-width:1240px; margin:0 auto; padding:20px 24px 48px; }
nav.crumbs { font-size:13px; color:var(--muted); margin-bottom:6px; }
nav.crumbs a { color:var(--accent); text-decoration:none; }
h1 { font-size:22px; margin:0 0 16px; font-weight:650; word-break:break-all; }
h2 { font-size:15px; margin:28px 0 10px; color:#344054; font-weight:600; }
a { color:var(--accent); }
.cards { display:grid; grid-template-columns:repeat(auto-fit,minmax(220px,1fr)); gap:12px; }
.cards.convoy { grid-template-columns:1fr 1fr 1.35fr; }
.card { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:14px 16px; }
.card .label { font-size:12px; text-transform:uppercase; letter-spacing:.6px; color:var(--muted); }
.card .value { font-size:38px; font-weight:700; line-height:1.2; margin-top:4px; font-variant-numeric:tabular-nums; }
.card.primary { border-color:#c7d4fb; box-shadow:0 1px 0 #dbe3fd; }
.card .when time { display:block; font-size:18px; white-space:nowrap; font-weight:650; margin-top:8px; font-variant-numeric:tabular-nums; }
.card .when .age { font-size:13px; color:var(--muted); }
.statuses { display:flex; gap:6px; flex-wrap:wrap; margin-top:10px; }
table { width:100%; border-collapse:collapse; background:var(--card); border:1px solid var(--line); border-radius:10px; overflow:hidden; }
th, td { text-align:left; padding:9px 11px; border-bottom:1px solid var(--line); vertical-align:top; }
th { font-size:12px; font-weight:600; color:var(--muted); background:#fafbfc; text-transform:uppercase; letter-spacing:.5px; }
tr:last-child td { border-bottom:none; }
td.num { font-variant-numeric:tabular-nums; }
td.big { font-size:18px; font-weight:700; }
td .when { display:flex; flex-direction:column; }
td .when time { font-variant-numeric:tabular-nums; font-weight:600; white-space:nowrap; font-size:13px; }
td.run a { text-decoration:none; } td.run a:hover { text-decoration:underline; }
td.mono, td .badge { white-space:nowrap; }
.lease { margin-top:3px; font-size:12px; } td .lease .when { display:inline; } .lease .badge { margin-left:4px; font-size:11px; }
[hidden] { display:none !important; }
td .when .age, .muted { color:var(--muted); font-size:12px; }
code, .mono { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:600; background:#eef0f3; color:#344054; }
.status-completed { background:var(--ok-bg); color:var(--ok); }
.status-running { background:var(--run-bg); color:var(--run); }
.status-queued { background:var(--wait-bg); color:var(--wait); }
.status-failed, .stalled { background:var(--bad-bg); color:var(--bad); }
.empty { padding:28px; text-align:center; color:var(--muted); background:var(--card); border:1px dashed var(--line); border-radius:10px; }
ol.timeline { list-style:none; margin:0; padding:0; border-left:2px solid var(--line); margin-left:8px; }
ol.timeline li { position:relative; margin:0 0 12px 18px; background:var(--card); border:1px solid var(--line); border-radius:10px; padding:10px 14px; }
ol.timeline li::before { content:""; position:absolute; left:-26px; top:14px; width:12px; height:12px; border-radius:50%; background:var(--accent); border:2px solid var(--bg); }
ol.timeline li.event { background:#fbfbfd; border-style:dashed; }
ol.timeline li.event::before { background:#9ca3af; }
ol.timeline li.event-run_failed::before { background:var(--bad); }
ol.timeline li.event-role_complete::before { background:var(--ok); }
.row { display:flex; gap:14px; flex-wrap:wrap; align-items:baseline; }
.row .seq { font-weight:700; font-size:15px; }
.row .when time { font-variant-numeric:tabular-nums; }
.row .when .age { margin-left:6px; color:var(--muted); font-size:12px; }
h1 .sub { display:block; font-size:12.5px; font-weight:400; color:var(--muted); margin-top:2px; }
.chip { display:inline-block; background:#eef2ff; color:#3730a3; border-radius:6px; padding:0 6px; font-size:12px; margin-right:4px; }
.verified { color:var(--ok); font-weight:600; } .broken { color:var(--bad); font-weight:600; }
details summary { cursor:pointer; color:var(--muted); font-size:12.5px; margin-top:4px; }
details ul { margin:6px 0 0; padding-left:18px; }
.login { max-width:420px; margin:12vh auto; background:var(--card); border:1px solid var(--line); border-radius:12px; padding:28px; }
.login input { width:100%; padding:9px 10px; border:1px solid #cfd4dc; border-radius:8px; font:inherit; margin:8px 0 14px; }
.login button { background:var(--accent); color:#fff; border:none; border-radius:8px; padding:9px 16px; font:inherit; font-weight:600; cursor:pointer; }
.error { color:var(--bad); background:var(--bad-bg); padding:8px 10px; border-radius:8px; margin-bottom:12px; }
/* operator actions (pages-actions.ts, pages-settings.ts) */
form.action { display:inline; margin:0 4px 0 0; }
form.action button, .actions button { font:inherit; font-size:12px; padding:2px 10px; border:1px solid #cfd4dc; border-radius:6px; background:#fff; cursor:pointer; }
.cp-actions { display:inline-flex; gap:8px; align-items:baseline; }
.actions { margin-top:8px; }
.status-cancelled { background:#eef0f3; color:#475467; }
pre.diff, pre.args { background:#fff; border:1px solid var(--line); border-radius:8px; padding:8px 10px; overflow:auto; font-size:12px; line-height:1.4; }
pre.diff .add { color:var(--ok); background:var(--ok-bg); } pre.diff .del { color:var(--bad); background:var(--bad-bg); }
pre.diff .hunk, pre.diff .meta { color:var(--muted); }
.plus { color:var(--ok); font-weight:600; } .minus { color:var(--bad); font-weight:600; }
ul.diff-files, ul.calls { list-style:none; padding:0; }
.notice.ok { color:var(--ok); background:var(--ok-bg); padding:8px 10px; border-radius:8px; margin-bottom:12px; }
/* finding, inspecting, confirming (pages-runs.ts, pages-workspace.ts, confirm.ts) */
form.filters { display:flex; flex-wrap:wrap; gap:10px 14px; align-items:flex-end; margin:0 0 14px; }
form.filters label { display:flex; flex-direction:column; font-size:12px; color:var(--muted); gap:3px; }
form.filters input, form.filters select { font:inherit; padding:5px 8px; border:1px solid #cfd4dc; border-radius:6px; max-width:100%; }
form.filters button { font:inherit; padding:5px 14px; border:none; border-radius:6px; background:var(--accent); color:#fff; cursor:pointer; }
nav.pager { display:flex; gap:16px; margin:12px 0; }
.card .value.small { font-size:20px; }
dl.facts { display:grid; grid-template-columns:max-content 1fr; gap:6px 16px; background:var(--card); border:1px solid var(--line);
  border-radius:10px; padding:12px 16px; margin:12px 0 0; }
dl.facts dt { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.5px; }
dl.facts dd { margin:0; min-width:0; overflow-wrap:anywhere; }
.brief { white-space:pre-wrap; }
button.copy { font:inherit; font-size:11px; padding:0 6px; border:1px solid #cfd4dc; border-radius:5px; background:#fff; cursor:pointer; }
code.copyable { user-select:all; overflow-wrap:anywhere; }
.wrap { overflow-wrap:anywhere; }
details.call { display:inline-block; vertical-align:top; margin:4px 6px 0 0; max-width:100%; }
details.call[open] { display:block; }
.confirm { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:16px; }
.confirm a { margin-left:12px; }
label.field { display:inline-flex; flex-direction:column; gap:2px; font-size:12px; color:var(--muted); margin:4px 8px 4px 0; max-width:100%; }
label.field input, label.field select { font:inherit; font-size:13px; color:var(--ink); padding:4px 7px; border:1px solid #cfd4dc; border-radius:6px; max-width:100%; }
button.danger, form.action button.danger { background:var(--bad); color:#fff; border-color:var(--bad); }
/* a doc-writer run's review (pages-doc-review.ts) */
form.send-back { display:flex; flex-wrap:wrap; align-items:flex-end; gap:4px 8px; margin-top:8px; }
label.field textarea { font:inherit; font-size:13px; color:var(--ink); padding:4px 7px; border:1px solid #cfd4dc;
  border-radius:6px; width:32em; max-width:100%; box-sizing:border-box; }
/* narrow screens: tables become stacked rows, nothing is wider than the viewport */
@media (max-width: 700px) {
  header.top { flex-wrap:wrap; gap:8px 12px; padding:8px 12px; }
  main { padding:14px 12px 40px; }
  .cards, .cards.convoy { grid-template-columns:minmax(0,1fr); }
  table, thead, tbody, tr, th, td { display:block; width:100%; }
  thead { display:none; }
  tr { border-bottom:1px solid var(--line); padding:6px 0; }
  td { border:none; padding:3px 12px; }
  td.mono, td .badge, td .when time, .card .when time { white-space:normal; }
  code, .mono, pre { overflow-wrap:anywhere; white-space:pre-wrap; }
  dl.facts { grid-template-columns:minmax(0,1fr); }
  ol.timeline li { margin-left:12px; }
  .row { gap:6px 10px; }
}
`;
