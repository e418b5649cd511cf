// The leasehold status page: renders the snapshots /api/events pushes
// (server-sent events; /api/leases polled where EventSource is missing) and
// a lease's terms from /api/history. Everything is built with textContent:
// no store data is ever parsed as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const rows = new Map(); // lease name -> {tr, cells, last, deadline}
let timelineLease = null;
let timelineOpener = null;
let firstSnapshot = true;

function el(tag, props, ...children) {
  const e = document.createElement(tag);
  Object.assign(e, props || {});
  for (const c of children) e.append(c);
  return e;
}

function announce(msg) {
  const p = el("p", { textContent: msg });
  const box = $("announcer");
  box.append(p);
  while (box.childElementCount > 5) box.firstElementChild.remove();
}

function setConnection(state, text) {
  $("connection").dataset.state = state;
  $("connection-text").textContent = text;
}

function fmtSeconds(s) {
  if (s >= 120) return Math.floor(s / 60) + " min " + Math.round(s % 60) + " s";
  return s.toFixed(1) + " s";
}

function fmtTime(iso) {
  const d = new Date(iso);
  const ms = String(d.getMilliseconds()).padStart(3, "0");
  return d.toLocaleDateString() + " " + d.toLocaleTimeString([], { hour12: false }) + "." + ms;
}

function stateText(v) {
  switch (v.state) {
    case "held": return "held";
    case "expired": return "expired";
    default: return v.token > 0 ? "free" : "never granted";
  }
}

function describe(v) {
  if (v.state === "held") return v.name + ": held by " + v.holder + ", token " + v.token;
  if (v.state === "expired") return v.name + ": the term of " + v.holder + " (token " + v.token + ") expired";
  return v.name + ": free";
}

function newRow(name) {
  const tr = el("tr");
  tr.dataset.lease = name;
  const cells = {
    name: el("th", { scope: "row", textContent: name }),
    state: el("td"),
    holder: el("td", { className: "holder" }),
    token: el("td", { className: "num token" }),
    left: el("td", { className: "num left" }),
    meta: el("td", { className: "meta" }),
    action: el("td"),
  };
  const btn = el("button", { type: "button", className: "timeline-button" },
    "Timeline", el("span", { className: "visually-hidden", textContent: " of " + name }));
  btn.setAttribute("aria-controls", "timeline");
  btn.setAttribute("aria-expanded", "false");
  btn.addEventListener("click", () => openTimeline(name, btn));
  cells.action.append(btn);
  tr.append(cells.name, cells.state, cells.holder, cells.token, cells.left, cells.meta, cells.action);
  return { tr, cells, btn, last: null, deadline: 0 };
}

function render(snap) {
  $("store-name").textContent = snap.store;
  $("scope").textContent = (snap.listed ? "Every lease in the store." : "The leases named with --lease.") +
    (snap.watch ? " The store pushes changes." : " The store is read every interval.") +
    " Last read " + fmtTime(snap.at) + ".";
  const err = $("error");
  err.hidden = !snap.error;
  err.textContent = snap.error || "";
  if (snap.error) return;

  const body = $("lease-rows");
  if (rows.size === 0) body.replaceChildren();
  const seen = new Set();
  const now = performance.now();
  let placed = null; // the row last put in place
  for (const v of snap.leases) {
    seen.add(v.name);
    let r = rows.get(v.name);
    if (!r) {
      r = newRow(v.name);
      rows.set(v.name, r);
    }
    // Keeps the store's order, moving a row only when it is out of place:
    // moving a node takes the focus from a button in it, and a keyboard
    // user would lose their place at every read.
    const at = placed ? placed.nextSibling : body.firstChild;
    if (at !== r.tr) body.insertBefore(r.tr, at);
    placed = r.tr;
    const prev = r.last;
    const changed = !prev || prev.holder !== v.holder || prev.token !== v.token || prev.state !== v.state;
    r.cells.state.replaceChildren(el("span", { className: "state state-" + (v.token > 0 ? v.state : "never"), textContent: stateText(v) }));
    r.cells.holder.replaceChildren(v.holder || "—");
    if (v.self) r.cells.holder.append(el("span", { className: "self", textContent: "this node" }));
    r.cells.token.textContent = v.token > 0 ? String(v.token) : "—";
    r.cells.meta.textContent = v.metadata || "";
    r.deadline = v.state === "held" ? now + v.remaining_seconds * 1000 : 0;
    r.ttl = v.ttl_seconds;
    r.last = v;
    if (changed && prev) {
      announce(describe(v));
      r.tr.classList.remove("flash");
      void r.tr.offsetWidth;
      r.tr.classList.add("flash");
      if (timelineLease === v.name) loadTimeline(v.name);
    }
  }
  for (const [name, r] of rows) {
    if (!seen.has(name)) {
      r.tr.remove();
      rows.delete(name);
      announce(name + ": no longer in the store");
    }
  }
  if (rows.size === 0) body.replaceChildren(el("tr", {}, el("td", { colSpan: 7, textContent: "No leases yet." })));
  if (firstSnapshot) {
    firstSnapshot = false;
    announce(snap.leases.length + (snap.leases.length === 1 ? " lease" : " leases") + " shown");
  }
  tick();
}

// tick counts the time left down between snapshots.
function tick() {
  const now = performance.now();
  for (const r of rows.values()) {
    const v = r.last;
    if (!v) continue;
    let text = "—";
    if (v.state === "held") {
      const left = (r.deadline - now) / 1000;
      text = left > 0 ? fmtSeconds(left) : "expiring (the store decides)";
    } else if (v.state === "expired") {
      text = "expired";
    }
    if (r.cells.left.textContent !== text) r.cells.left.textContent = text;
  }
}

async function loadTimeline(name) {
  const list = $("terms");
  const note = $("timeline-note");
  let data;
  try {
    const resp = await fetch("/api/history?lease=" + encodeURIComponent(name), { cache: "no-store" });
    data = await resp.json();
  } catch (e) {
    note.textContent = "Could not read the history: " + e;
    return;
  }
  if (timelineLease !== name) return;
  if (data.error) {
    note.textContent = data.error;
    return;
  }
  if (!data.history) {
    note.textContent = "This store keeps no history of its leases (stores that do: sqlite, postgres, mysql).";
    list.replaceChildren();
    return;
  }
  note.textContent = data.terms.length === 0 ? "No terms recorded yet." :
    data.terms.length + (data.terms.length === 1 ? " term" : " terms") + ", newest first.";
  const durations = data.terms.map((t) => t.started ? (new Date(t.ended || Date.now()) - new Date(t.started)) : 0);
  const longest = Math.max(1, ...durations);
  list.replaceChildren(...data.terms.map((t, i) => {
    const li = el("li", { className: "term end-" + t.end });
    li.dataset.token = String(t.token);
    li.append(el("div", { className: "term-head", textContent: "Token " + t.token + ": " + t.holder }));
    let when = t.started ? "from " + fmtTime(t.started) : "from before the history kept";
    if (t.ended) when += " to " + fmtTime(t.ended);
    if (t.started && (t.ended || t.end === "holding")) when += " (" + fmtSeconds(durations[i] / 1000) + ")";
    li.append(el("div", { className: "term-when", textContent: when }));
    li.append(el("div", { className: "term-end", textContent: endText(t.end) }));
    if (t.metadata) li.append(el("div", { className: "term-when", textContent: "metadata: " + t.metadata }));
    const bar = el("span", { className: "bar" });
    bar.setAttribute("aria-hidden", "true");
    bar.style.width = Math.round(100 * durations[i] / longest) + "%";
    li.append(bar);
    return li;
  }));
}

function endText(end) {
  switch (end) {
    case "holding": return "Holding now";
    case "released": return "Ended: released by its holder";
    case "force-released": return "Ended: force-released by an operator";
    case "expired": return "Ended: expired (not renewed in time)";
    case "replaced": return "Ended: replaced by a new term of the same holder";
    default: return "Ended: not recorded";
  }
}

function openTimeline(name, btn) {
  if (timelineOpener) timelineOpener.setAttribute("aria-expanded", "false");
  timelineLease = name;
  timelineOpener = btn;
  btn.setAttribute("aria-expanded", "true");
  $("timeline-heading").textContent = "Timeline of " + name;
  $("timeline").hidden = false;
  $("terms").replaceChildren();
  $("timeline-note").textContent = "Reading the history…";
  loadTimeline(name);
  $("timeline-heading").focus();
}

function closeTimeline() {
  $("timeline").hidden = true;
  timelineLease = null;
  if (timelineOpener) {
    timelineOpener.setAttribute("aria-expanded", "false");
    timelineOpener.focus();
    timelineOpener = null;
  }
}

function connect() {
  if (!window.EventSource) {
    setConnection("live", "Polling");
    const poll = async () => {
      try {
        const resp = await fetch("/api/leases", { cache: "no-store" });
        render(await resp.json());
        setConnection("live", "Live (polling)");
      } catch (e) {
        setConnection("lost", "Not connected; retrying");
      }
      setTimeout(poll, 2000);
    };
    poll();
    return;
  }
  const es = new EventSource("/api/events");
  es.addEventListener("open", () => setConnection("live", "Live"));
  es.addEventListener("error", () => setConnection("lost", "Not connected; retrying"));
  es.addEventListener("leases", (e) => render(JSON.parse(e.data)));
}

$("timeline-close").addEventListener("click", closeTimeline);
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape" && timelineLease) closeTimeline();
});
setInterval(tick, 250);
connect();
