/* switchboard-local's dashboard: a client of the JSON read API.
 *
 * Each page is a server-rendered shell (body[data-page], body[data-id]); this
 * script fetches what the page shows from /api/..., builds the rows, and
 * opens ONE EventSource on /api/stream: whenever it says something changed,
 * the page fetches again and rebuilds, without a reload. EventSource
 * reconnects by itself after a dropped connection; when the browser gives up
 * (the server answered an error), the script opens a new one after a pause.
 *
 * Safety: everything from the API goes into the page as text (textContent,
 * createTextNode, attribute values), never as HTML: a payload, a title or a
 * delivery's body is shown, never interpreted. No inline script or style
 * anywhere (the Content-Security-Policy forbids both).
 */
(function () {
  "use strict";

  var page = document.body.dataset.page;
  var itemId = document.body.dataset.id;
  var SVG = "http://www.w3.org/2000/svg";
  var LARGE_JSON_CHARS = 8000; // a payload longer than this starts collapsed
  var LARGE_JSON_LINES = 120;
  var HEX_LIMIT = 64 * 1024; // bytes shown in the hex view

  // ---- DOM, as text only ------------------------------------------------

  /* el("td", {class: "num", "data-label": "Ready"}, "3", child, ...): attributes are set
   * with setAttribute and children as text nodes, so nothing is ever parsed as HTML. */
  function el(tag, attrs) {
    var node = document.createElement(tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    setAttrs(node, attrs);
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  }

  function setAttrs(node, attrs) {
    if (!attrs) return;
    Object.keys(attrs).forEach(function (name) {
      var value = attrs[name];
      if (value === null || value === undefined || value === false) return;
      if (name === "on") {
        Object.keys(value).forEach(function (type) { node.addEventListener(type, value[type]); });
      } else {
        node.setAttribute(name, value === true ? "" : String(value));
      }
    });
  }

  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  function replaceChildren(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    for (var i = 1; i < arguments.length; i++) append(node, arguments[i]);
  }

  function $(selector) { return document.querySelector(selector); }

  // ---- formatting -------------------------------------------------------

  function ago(iso) {
    if (!iso) return "—";
    var seconds = (Date.now() - Date.parse(iso)) / 1000;
    if (Math.abs(seconds) < 1) return "just now";
    return span(seconds) + (seconds >= 0 ? " ago" : " from now");
  }

  function span(seconds) {
    var s = Math.abs(seconds);
    if (s < 1) return "now";
    if (s < 60) return Math.floor(s) + "s";
    if (s < 3600) return Math.floor(s / 60) + "m";
    if (s < 86400) return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
    return Math.floor(s / 86400) + "d " + Math.floor((s % 86400) / 3600) + "h";
  }

  /* A time element that keeps itself current (the ticker below rewrites it). */
  function when(iso) {
    if (!iso) return el("span", { class: "muted" }, "—");
    return el("time", { datetime: iso, title: new Date(iso).toLocaleString() }, ago(iso));
  }

  function bytes(n) {
    if (n === null || n === undefined) return "—";
    if (n < 1024) return n + " B";
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KB";
    return (n / 1024 / 1024).toFixed(1) + " MB";
  }

  function count(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString(); }

  function badge(text, kind) { return el("span", { class: "badge " + (kind || text) }, text); }

  function stateBadge(todo) {
    if (todo.state === "failed") return badge("dead", "failed");
    if (todo.state === "pending" && todo.visible_at && Date.parse(todo.visible_at) > Date.now()) {
      // Pending, but not claimable yet: a delay, or a failed attempt's backoff.
      var b = badge(todo.attempt ? "retrying" : "delayed", "warn");
      b.title = "claimable " + ago(todo.visible_at);
      return b;
    }
    return badge(todo.state);
  }

  function todoLink(todo) { return el("a", { href: "/todos/" + Number(todo.id), class: "row-link" }, todo.title || "(untitled)"); }

  function eventLink(id) { return el("a", { href: "/events/" + Number(id) }, "#" + id); }

  function queueLink(queue) { return el("a", { href: "/todos?queue=" + encodeURIComponent(queue) }, queue); }

  function cell(label, content, cls) { return el("td", { "data-label": label, class: cls }, content); }

  function numCell(label, n, hotWhenPositive) {
    var cls = "num" + (!n ? " zero" : hotWhenPositive ? " hot" : "");
    return cell(label, count(n), cls);
  }

  function emptyRow(columns, text) { return el("tr", { class: "empty" }, el("td", { colspan: columns }, text)); }

  function pretty(value) {
    if (value === null || value === undefined) return null;
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  /* JSON (or text) in a <pre>, collapsed behind a summary when it is large. */
  function codeBlock(text, what) {
    var pre = el("pre", { class: "code" }, text);
    var lines = text.split("\n").length;
    if (text.length <= LARGE_JSON_CHARS && lines <= LARGE_JSON_LINES) return pre;
    return el("details", { class: "collapsible" },
      el("summary", null, "Show " + what + " (" + bytes(new TextEncoder().encode(text).length) + ", " + lines + " lines)"),
      pre);
  }

  function facts(pairs) {
    return el("dl", { class: "facts" }, pairs.filter(Boolean).map(function (pair) {
      return el("div", null, el("dt", null, pair[0]), el("dd", null, pair[1]));
    }));
  }

  function orDash(value, cls) {
    return value === null || value === undefined || value === "" ? el("span", { class: "muted" }, "—") : el("span", { class: cls }, String(value));
  }

  // ---- the API -----------------------------------------------------------

  function api(path) {
    return fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" })
      .then(answer);
  }

  function answer(response) {
    return response.text().then(function (text) {
      var data = null;
      try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
      if (!response.ok) {
        var message = data && data.error && data.error.message ? data.error.message : response.status + " " + response.statusText;
        var error = new Error(message);
        error.status = response.status;
        throw error;
      }
      return data;
    });
  }

  var csrf = null;
  function csrfToken() {
    if (csrf) return Promise.resolve(csrf);
    return api("/api/session").then(function (session) { csrf = session.csrf_token; return csrf; });
  }

  /* An action: a POST with the CSRF token (the guard also checks the origin and the token cookie). */
  function act(path, body) {
    return csrfToken().then(function (token) {
      return fetch(path, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRF-Token": token },
        body: JSON.stringify(body || {}),
      });
    }).then(answer);
  }

  /* A button that runs an action, says what happened, and refreshes the page. */
  function actionButton(label, cls, run, confirmText, done) {
    var button = el("button", { type: "button", class: cls });
    append(button, label);
    button.addEventListener("click", function () {
      if (confirmText && !window.confirm(confirmText)) return;
      button.disabled = true;
      run().then(function (result) {
        toast(typeof done === "function" ? done(result) : done);
        refresh();
      }, function (error) {
        button.disabled = false;
        toast(error.message, true);
      });
    });
    return button;
  }

  var toastTimer = null;
  function toast(text, bad) {
    var box = $("#toast");
    if (!box || !text) return;
    box.textContent = text;
    box.className = "toast" + (bad ? " bad" : "");
    box.hidden = false;
    clearTimeout(toastTimer);
    toastTimer = setTimeout(function () { box.hidden = true; }, bad ? 8000 : 3500);
  }

  function failed(container, error) {
    replaceChildren(container, el("div", { class: "card empty-state" }, el("strong", null, "Could not load this"), error.message));
  }

  // ---- live: one EventSource per page -------------------------------------

  var loading = null; // the fetch in flight
  var again = false; // a change arrived while it was in flight

  /* Fetch and rebuild the page; changes arriving meanwhile make one more round, not many. */
  function refresh() {
    var render = RENDER[page];
    if (!render) return;
    if (loading) { again = true; return; }
    loading = Promise.resolve().then(render).catch(function (error) { console.warn("refresh:", error); })
      .then(function () {
        loading = null;
        if (again) { again = false; refresh(); }
      });
  }

  var refreshTimer = null;
  function soon() {
    // Bursts of commits (a batch of deliveries) coalesce into one fetch.
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () { refreshTimer = null; refresh(); }, 150);
  }

  function setLive(state, text) {
    var badge = $("#live");
    if (!badge) return;
    badge.dataset.state = state;
    badge.textContent = text;
  }

  // The topics (as /api/stream names them) each page shows.
  var TOPICS = {
    queues: ["queues", "events"], todos: ["todos"], todo: ["todos"], events: ["events"], event: ["events", "todos"],
    dead: ["dead", "todos"], sources: ["sources", "adapters", "events"],
  };

  /* A message from the stream: fetch again if it names one of this page's topics (or names none). */
  function changed(message) {
    var topics = null;
    try {
      var data = JSON.parse(message.data);
      topics = Array.isArray(data) ? data : data && data.topics;
    } catch (e) { topics = null; }
    if (!Array.isArray(topics) || topics.some(function (t) { return (TOPICS[page] || []).indexOf(t) >= 0; })) soon();
  }

  var stream = null;
  var retry = 1000;
  function connect() {
    if (!window.EventSource) { setLive("off", "no live updates"); return; }
    stream = new EventSource("/api/stream?topics=" + encodeURIComponent((TOPICS[page] || []).join(",")));
    stream.onopen = function () {
      retry = 1000;
      setLive("live", "live");
    };
    stream.onmessage = changed;
    stream.addEventListener("change", changed);
    // "ready": the stream watches from now on; what changed since the page's first fetch is fetched now.
    stream.addEventListener("ready", soon);
    stream.onerror = function () {
      if (stream.readyState === EventSource.CLOSED) {
        // The browser gave up (an error answer): try again ourselves, backing off.
        setLive("reconnecting", "reconnecting");
        stream.close();
        setTimeout(connect, retry);
        retry = Math.min(retry * 2, 15000);
      } else {
        setLive("reconnecting", "reconnecting");
      }
    };
  }

  // Relative times stay current between changes.
  setInterval(function () {
    document.querySelectorAll("time[datetime]").forEach(function (t) { t.textContent = ago(t.getAttribute("datetime")); });
  }, 15000);

  // ---- filters (todos, events) --------------------------------------------

  function query() { return new URLSearchParams(window.location.search); }

  /* The filter form shows the query string's values; submitting it changes the URL (no reload). */
  function setUpFilters(fields) {
    var form = $("#filters");
    if (!form) return;
    var params = query();
    fields.forEach(function (name) {
      var input = form.elements[name];
      if (input && params.get(name)) {
        if (input.tagName === "SELECT" && !Array.from(input.options).some(function (o) { return o.value === params.get(name); })) {
          input.appendChild(el("option", { value: params.get(name) }, params.get(name)));
        }
        input.value = params.get(name);
      }
    });
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var next = new URLSearchParams();
      fields.forEach(function (name) {
        var value = form.elements[name] && form.elements[name].value.trim();
        if (value) next.set(name, value);
      });
      var search = next.toString();
      history.pushState(null, "", location.pathname + (search ? "?" + search : ""));
      cursorPages = [];
      refresh();
    });
    form.querySelectorAll("select").forEach(function (select) {
      select.addEventListener("change", function () { form.requestSubmit(); });
    });
    window.addEventListener("popstate", function () { location.reload(); });
  }

  function fillOptions(select, names) {
    if (!select) return;
    var current = select.value;
    var have = new Set(Array.from(select.options).map(function (o) { return o.value; }));
    names.forEach(function (name) { if (!have.has(name)) select.appendChild(el("option", { value: name }, name)); });
    select.value = current;
  }

  function apiQuery(fields, extra) {
    var params = query();
    var out = new URLSearchParams();
    fields.forEach(function (name) { if (params.get(name)) out.set(name, params.get(name)); });
    Object.keys(extra || {}).forEach(function (k) { if (extra[k] !== null && extra[k] !== undefined) out.set(k, extra[k]); });
    var s = out.toString();
    return s ? "?" + s : "";
  }

  // "Older": the pages after the first, kept across live refreshes.
  var cursorPages = [];

  // ---- the pages -----------------------------------------------------------

  var RENDER = {};

  var LATEST_EVENTS = 8;

  RENDER.queues = function () {
    var latest = api("/api/events?limit=" + LATEST_EVENTS).then(function (data) {
      var events = data.items || [];
      replaceChildren($("#events tbody"), events.length ? events.map(eventRow) : emptyRow(7, "No events yet."));
    });
    return Promise.all([latest, queueRows()]);
  };

  function queueRows() {
    return api("/api/queues").then(function (data) {
      var rows = data.items || [];
      var body = $("#queues tbody");
      if (!rows.length) {
        replaceChildren(body, emptyRow(8, "No queues yet: a todo made by a webhook, an adapter or `todo create` makes one."));
      } else {
        replaceChildren(body, rows.map(queueRow));
      }
      var total = rows.reduce(function (a, q) { return a + (q.ready || 0); }, 0);
      var dead = rows.reduce(function (a, q) { return a + (q.dead || 0); }, 0);
      replaceChildren($("#summary"), rows.length + (rows.length === 1 ? " queue · " : " queues · ") + count(total) + " ready" +
        (dead ? " · " + count(dead) + " dead" : ""));
    });
  }

  function queueRow(q) {
    var name = el("td", { class: "lead", "data-label": "Queue" }, queueLink(q.queue), q.paused ? [" ", badge("paused")] : null);
    var oldest = q.oldest_ready_age_seconds;
    return el("tr", { "data-queue": q.queue },
      name,
      numCell("Ready", q.ready),
      numCell("Delayed", q.delayed),
      numCell("Claimed", q.claimed),
      el("td", { "data-label": "Dead", class: "num" + (q.dead ? " hot" : " zero") },
        q.dead ? el("a", { href: "/dead", class: "hot" }, count(q.dead)) : "0"),
      numCell("Done 1h", q.done_last_hour),
      cell("Oldest ready", oldest === null || oldest === undefined ? "—" : span(oldest), "num" + (oldest ? "" : " zero")),
      cell("Last hour", sparkline(q.created_per_minute || [], q.finished_per_minute || [])));
  }

  /* The last hour in a small inline SVG: todos created per minute as bars, finished per minute
   * as a line over them; the hour's totals beside it. */
  function sparkline(created, finished) {
    var w = 180, h = 30, pad = 1.5;
    var n = Math.max(created.length, finished.length, 2);
    var top = Math.max(1, Math.max.apply(null, created.concat(finished)));
    var step = w / n;
    function y(v) { return h - pad - (v / top) * (h - 2 * pad); }
    var bars = created.map(function (v, i) {
      return v ? "M" + (i * step + 0.5).toFixed(1) + " " + (h - pad) + "V" + y(v).toFixed(1) + "h" + Math.max(1, step - 1).toFixed(1) + "V" + (h - pad) + "Z" : "";
    }).join("");
    var line = finished.map(function (v, i) {
      return (i ? "L" : "M") + (i * step + step / 2).toFixed(1) + " " + y(v).toFixed(1);
    }).join("");
    var sum = function (a) { return a.reduce(function (x, v) { return x + v; }, 0); };
    var made = sum(created), done = sum(finished);
    var label = "Last hour: " + made + " created, " + done + " finished (per minute)";
    return el("div", { class: "spark-cell" },
      svg("svg", { class: "spark", viewBox: "0 0 " + w + " " + h, role: "img", "aria-label": label, preserveAspectRatio: "none" },
        svg("title", null, label),
        svg("line", { class: "base", x1: 0, y1: h - pad + 0.5, x2: w, y2: h - pad + 0.5 }),
        bars ? svg("path", { class: "created", d: bars }) : null,
        finished.length ? svg("path", { class: "finished", d: line }) : null),
      el("span", { class: "spark-total" }, el("span", { class: "in" }, count(made) + " in"), el("span", { class: "out" }, count(done) + " out")));
  }

  var TODO_FILTERS = ["queue", "state", "kind", "assignee", "q"];

  RENDER.todos = function () {
    var first = api("/api/todos" + apiQuery(TODO_FILTERS));
    var more = cursorPages.map(function (cursor) { return api("/api/todos" + apiQuery(TODO_FILTERS, { cursor: cursor })); });
    return Promise.all([first].concat(more)).then(function (pages) {
      var todos = [].concat.apply([], pages.map(function (p) { return p.items || []; }));
      var last = pages[pages.length - 1];
      var body = $("#todos tbody");
      replaceChildren(body, todos.length ? todos.map(todoRow) : emptyRow(8, "No todos match."));
      pagerButton(last.next_cursor);
    });
  };

  function pagerButton(next) {
    var button = $("#more");
    if (!button) return;
    button.hidden = !next;
    button.onclick = function () { cursorPages.push(next); refresh(); };
  }

  function todoRow(t) {
    return el("tr", { "data-todo": t.id },
      cell("#", String(t.id), "num id muted"),
      el("td", { class: "lead title", "data-label": "Title" }, todoLink(t)),
      cell("Queue", queueLink(t.queue)),
      cell("State", stateBadge(t)),
      cell("Kind", orDash(t.kind, "mono")),
      cell("Assignee", orDash(t.assignee)),
      cell("Attempt", t.attempt + " / " + t.max_attempts, "num"),
      cell("Updated", when(t.updated_at), "num"));
  }

  RENDER.todo = function () {
    var container = $("#todo");
    return api("/api/todos/" + encodeURIComponent(itemId)).then(function (data) {
      var t = data;
      replaceChildren($("#title"), t.title || "(untitled)", " ", stateBadge(t));
      document.title = "Todo " + t.id + " · switchboard-local";
      replaceChildren($("#actions"), todoActions(t));
      var attempts = t.attempts || [];
      // A dead letter's or a retried todo's error is what the reader came for: first. A finished
      // todo's last error is history (an earlier attempt failed): after its result.
      var errorFirst = t.state === "failed" || t.state === "pending";
      var lastError = t.last_error ? el("section", { class: "card", id: "last-error" },
        el("h3", null, "Last error", errorFirst ? null : el("span", { class: "muted h-note" }, " · of an earlier attempt")),
        el("pre", { class: "code error" }, t.last_error)) : null;
      replaceChildren(container,
        el("section", { class: "card" }, facts([
          ["Queue", queueLink(t.queue)],
          ["Kind", orDash(t.kind, "mono")],
          ["Assignee", orDash(t.assignee)],
          ["Priority", String(t.priority)],
          ["Attempt", t.attempt + " of " + t.max_attempts],
          ["Owner", orDash(t.owner, "mono")],
          t.lease_expires_at ? ["Lease expires", when(t.lease_expires_at)] : null,
          t.visible_at ? ["Visible", when(t.visible_at)] : null,
          ["Made by", t.event ? el("a", { href: "/events/" + Number(t.event.id) }, t.event.source + " · " + t.event.type + " #" + t.event.id)
            : t.event_id ? eventLink(t.event_id) : el("span", { class: "muted" }, "created directly")],
          ["Idempotency key", orDash(t.idempotency_key, "mono")],
          ["Created", when(t.created_at)],
          ["Updated", when(t.updated_at)],
          t.completed_at ? ["Completed", when(t.completed_at)] : null,
          t.cancelled_by ? ["Cancelled by", t.cancelled_by + (t.cancel_reason ? ": " + t.cancel_reason : "")] : null,
        ])),
        errorFirst ? lastError : null,
        el("section", { class: "card", id: "payload" }, el("h3", null, "Payload"), codeBlock(pretty(t.payload) || "null", "payload")),
        t.result !== null && t.result !== undefined
          ? el("section", { class: "card", id: "result" }, el("h3", null, "Result"), codeBlock(pretty(t.result), "result")) : null,
        errorFirst ? null : lastError,
        el("h2", null, "Attempts"),
        el("section", { class: "card flush" }, el("table", { class: "grid", id: "attempts" },
          el("thead", null, el("tr", null, ["#", "Owner", "Claimed", "Ended", "Outcome", "Error"].map(function (h, i) {
            return el("th", { scope: "col", class: i === 0 ? "num id" : null }, h);
          }))),
          el("tbody", null, attempts.length ? attempts.map(attemptRow) : emptyRow(6, "Not claimed yet.")))));
    }, function (error) { failed(container, error); });
  };

  function attemptRow(a) {
    var outcome = a.outcome ? badge(a.outcome.replace(/_/g, " "), OUTCOME[a.outcome] || "") : badge("in progress", "claimed");
    return el("tr", null,
      cell("#", String(a.attempt), "num id muted"),
      el("td", { class: "lead mono", "data-label": "Owner" }, a.owner),
      cell("Claimed", when(a.claimed_at)),
      cell("Ended", when(a.ended_at)),
      cell("Outcome", outcome),
      cell("Error", a.error ? el("span", { class: "mono" }, a.error) : orDash(null)));
  }

  var OUTCOME = { completed: "done", failed: "failed", lease_expired: "warn", released: "pending", released_by_operator: "pending", cancelled: "" };

  function todoActions(t) {
    var buttons = [];
    if (t.state === "failed") {
      buttons.push(actionButton("Redrive", "", function () { return act("/api/todos/" + t.id + "/redrive"); }, null, "Todo " + t.id + " is ready again"));
    }
    if (t.state === "claimed") {
      buttons.push(actionButton("Release", "quiet", function () { return act("/api/todos/" + t.id + "/release"); },
        "Take todo " + t.id + " back from " + t.owner + "? Its holder's lease token stops working.", "Todo " + t.id + " released"));
    }
    if (t.state === "pending" || t.state === "claimed") {
      buttons.push(actionButton("Cancel", "danger", function () { return act("/api/todos/" + t.id + "/cancel", { reason: "cancelled from the dashboard" }); },
        "Cancel todo " + t.id + "?", "Todo " + t.id + " cancelled"));
    }
    return buttons;
  }

  var EVENT_FILTERS = ["source", "type"];

  RENDER.events = function () {
    var first = api("/api/events" + apiQuery(EVENT_FILTERS));
    var more = cursorPages.map(function (cursor) { return api("/api/events" + apiQuery(EVENT_FILTERS, { cursor: cursor })); });
    return Promise.all([first].concat(more)).then(function (pages) {
      var events = [].concat.apply([], pages.map(function (p) { return p.items || []; }));
      replaceChildren($("#events tbody"), events.length ? events.map(eventRow) : emptyRow(7, "No events match."));
      pagerButton(pages[pages.length - 1].next_cursor);
    });
  };

  function verifiedBadge(e) {
    if (e.trust_mode === "queue") return badge("trusted", "");  // read from Redis: trusted by the connection
    if (e.verified) return badge("verified", "ok");
    return e.trust_mode === "none" || e.trust_mode === "trusted" ? badge(e.trust_mode || "unsigned", "") : badge("unverified", "warn");
  }

  function eventRow(e) {
    return el("tr", { "data-event": e.id },
      cell("#", eventLink(e.id), "num id"),
      el("td", { class: "lead", "data-label": "Source" }, el("a", { href: "/events?source=" + encodeURIComponent(e.source), class: "row-link" }, e.source)),
      cell("Type", el("a", { href: "/events/" + Number(e.id), class: "mono" }, e.type)),
      cell("Verified", verifiedBadge(e)),
      cell("External id", orDash(e.external_id, "mono")),
      cell("Size", bytes(e.size), "num"),
      cell("Received", when(e.received_at), "num"));
  }

  RENDER.event = function () {
    var container = $("#event");
    return api("/api/events/" + encodeURIComponent(itemId)).then(function (data) {
      var e = data;
      var todos = data.todos || [];
      replaceChildren($("#title"), e.source + " · ", el("span", { class: "mono" }, e.type));
      document.title = "Event " + e.id + " · switchboard-local";
      replaceChildren($("#actions"), actionButton("Replay", "quiet", function () { return act("/api/events/" + e.id + "/replay"); }, null,
        function (r) { var ids = (r && r.todos) || []; return ids.length ? "Replayed: todo " + ids.join(", ") : "Replayed: no rule made a todo"; }));
      var headers = Object.keys(e.headers || {}).sort();
      replaceChildren(container,
        el("section", { class: "card" }, facts([
          ["Source", el("a", { href: "/events?source=" + encodeURIComponent(e.source) }, e.source)],
          ["Type", el("span", { class: "mono" }, e.type)],
          ["External id", orDash(e.external_id, "mono")],
          ["Received", when(e.received_at)],
          ["Verification", verifiedBadge(e)],
          ["Detail", orDash(e.verify_detail)],
          ["Content type", orDash(e.content_type, "mono")],
          ["Size", bytes(e.size)],
        ])),
        el("h2", null, "Todos it produced"),
        el("section", { class: "card flush" }, el("table", { class: "grid", id: "produced" },
          el("thead", null, el("tr", null, ["#", "Title", "Queue", "State"].map(function (h, i) {
            return el("th", { scope: "col", class: i === 0 ? "num id" : null }, h);
          }))),
          el("tbody", null, todos.length ? todos.map(function (t) {
            return el("tr", { "data-todo": t.id }, cell("#", String(t.id), "num id muted"), el("td", { class: "lead title", "data-label": "Title" }, todoLink(t)),
              cell("Queue", queueLink(t.queue)), cell("State", stateBadge(t)));
          }) : emptyRow(4, "No todo: no rule matched this event.")))),
        el("h2", null, "Body"),
        bodyCard(e),
        el("h2", null, "Headers"),
        el("section", { class: "card flush" }, el("table", { class: "grid", id: "headers" },
          el("tbody", null, headers.length ? headers.map(function (name) {
            return el("tr", null, el("td", { class: "lead mono nowrap", "data-label": "Header" }, name), cell("Value", el("span", { class: "mono" }, e.headers[name])));
          }) : emptyRow(2, "No headers.")))));
    }, function (error) { failed(container, error); });
  };

  // The body in the views it allows: pretty JSON, text, hex, base64.
  var bodyView = null;
  function bodyCard(e) {
    if (e.body_omitted || e.body === null || e.body === undefined) {
      return el("section", { class: "card" }, el("p", { class: "muted" }, "The body (" + bytes(e.size) + ") is larger than the API shows."));
    }
    var b64 = e.body_base64 || (e.body_encoding === "base64" ? e.body : null);
    var raw = b64 !== null ? base64Bytes(b64) : new TextEncoder().encode(e.body);
    var views = {};
    if (e.body_view === "json") views.pretty = JSON.stringify(e.body_json, null, 2);
    if (e.body_text !== null && e.body_text !== undefined) views.text = e.body_text;
    else if (e.body_encoding === "utf-8") views.text = e.body;
    views.hex = hexdump(raw);
    views.base64 = b64 !== null ? b64 : bytesBase64(raw);
    var names = Object.keys(views);
    if (!bodyView || !views[bodyView]) bodyView = names[0];
    var box = el("div", { id: "body" });
    var tabs = el("div", { class: "tabs", role: "group", "aria-label": "Body view" });
    function show(name) {
      bodyView = name;
      tabs.querySelectorAll("button").forEach(function (b) { b.setAttribute("aria-pressed", String(b.dataset.view === name)); });
      replaceChildren(box, codeBlock(views[name], "body"));
    }
    names.forEach(function (name) {
      tabs.appendChild(el("button", { type: "button", "data-view": name, on: { click: function () { show(name); } } },
        { pretty: "JSON", text: "Text", hex: "Hex", base64: "Base64" }[name]));
    });
    show(bodyView);
    return el("section", { class: "card" },
      el("div", { class: "section-head" }, el("span", { class: "muted" }, bytes(raw.length) + (e.body_encoding === "base64" ? " · binary" : " · UTF-8")), tabs),
      box);
  }

  function base64Bytes(text) {
    var s = atob(text), out = new Uint8Array(s.length);
    for (var i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
    return out;
  }

  function bytesBase64(data) {
    var s = "";
    for (var i = 0; i < data.length; i += 0x8000) s += String.fromCharCode.apply(null, data.subarray(i, i + 0x8000));
    return btoa(s);
  }

  function hexdump(data) {
    var lines = [], n = Math.min(data.length, HEX_LIMIT);
    for (var off = 0; off < n; off += 16) {
      var hex = "", text = "";
      for (var i = off; i < off + 16; i++) {
        if (i < n) {
          hex += (data[i] < 16 ? "0" : "") + data[i].toString(16) + (i % 16 === 7 ? "  " : " ");
          text += data[i] >= 32 && data[i] < 127 ? String.fromCharCode(data[i]) : ".";
        } else {
          hex += i % 16 === 7 ? "    " : "   ";
        }
      }
      lines.push(("0000000" + off.toString(16)).slice(-8) + "  " + hex + " " + text);
    }
    if (data.length > n) lines.push("… " + (data.length - n) + " more bytes");
    return lines.join("\n");
  }

  var DEAD_ROWS = 200; // failed todos fetched to fill the groups' tables
  var DEAD_SHOWN = 10; // rows shown per group

  RENDER.dead = function () {
    var container = $("#dead");
    return Promise.all([api("/api/dead"), api("/api/todos?state=failed&limit=" + DEAD_ROWS)]).then(function (both) {
      var groups = both[0].items || [];
      if (!groups.length) {
        replaceChildren(container, el("div", { class: "card empty-state" }, el("strong", null, "No dead letters"),
          "A todo that fails its last attempt waits here for an operator."));
        return;
      }
      var rows = {};
      (both[1].items || []).forEach(function (t) {
        var key = JSON.stringify([t.queue, t.last_error]);
        (rows[key] = rows[key] || []).push(t);
      });
      var byQueue = [], seen = {};
      groups.forEach(function (g) {
        var q = seen[g.queue];
        if (!q) byQueue.push(q = seen[g.queue] = { queue: g.queue, groups: [], total: 0 });
        q.groups.push(g);
        q.total += g.count;
      });
      replaceChildren(container, byQueue.map(function (q) {
        return el("div", { class: "queue-dead", "data-queue": q.queue },
          el("div", { class: "queue-head" },
            el("h2", null, queueLink(q.queue), el("span", { class: "count" }, count(q.total) + " dead")),
            actionButton("Purge " + (q.total === 1 ? "it" : "all " + count(q.total)), "small danger", function () {
              return act("/api/queues/" + encodeURIComponent(q.queue) + "/purge", { state: "failed" });
            }, "Delete " + (q.total === 1 ? "the dead letter" : "all " + q.total + " dead letters") + " of " + q.queue + " for good?",
            function (r) { return "Purged " + count(r && r.purged) + " from " + q.queue; })),
          q.groups.map(function (g) { return deadGroup(g, rows[JSON.stringify([g.queue, g.last_error])] || []); }));
      }));
    }, function (error) { failed(container, error); });
  };

  function deadGroup(g, todos) {
    var total = g.count;
    var shown = todos.slice(0, DEAD_SHOWN);
    return el("section", { class: "card group", "data-queue": g.queue },
      el("div", { class: "group-head" },
        el("div", { class: "what" },
          el("p", { class: "error-line" }, g.last_error || "(no error given)"),
          el("p", { class: "group-meta" }, badge(count(total) + (total === 1 ? " todo" : " todos"), "failed"), " last failed ", when(g.last_failed_at))),
        el("div", { class: "actions" },
          actionButton(total === 1 ? "Redrive" : "Redrive all " + count(total), "small", function () {
            return act("/api/dead/redrive", { queue: g.queue, last_error: g.last_error });
          }, null, function (r) { return "Redriven: " + count(r && r.redriven); }))),
      el("table", { class: "grid" },
        el("thead", null, el("tr", null, el("th", { scope: "col" }, "Todo"), el("th", { scope: "col" }, "Kind"),
          el("th", { scope: "col", class: "num" }, "Attempts"), el("th", { scope: "col", class: "num" }, "Failed"), el("th", { scope: "col" }, ""))),
        el("tbody", null, shown.map(function (t) {
          return el("tr", { "data-todo": t.id },
            el("td", { class: "lead title", "data-label": "Todo" }, el("span", { class: "muted" }, "#" + t.id + " "), todoLink(t)),
            cell("Kind", orDash(t.kind, "mono")),
            cell("Attempts", t.attempt + " / " + t.max_attempts, "num"),
            cell("Failed", when(t.updated_at), "num"),
            el("td", { class: "row-actions" }, el("div", null,
              actionButton("Redrive", "small quiet", function () { return act("/api/todos/" + t.id + "/redrive"); }, null, "Todo " + t.id + " is ready again"))));
        }))),
      total > shown.length ? el("p", { class: "muted more-rows" }, el("a", { href: "/todos?state=failed&queue=" + encodeURIComponent(g.queue) },
        "and " + count(total - shown.length) + " more")) : null);
  }

  RENDER.sources = function () {
    return Promise.all([api("/api/sources"), api("/api/adapters")]).then(function (both) {
      var sources = both[0].items || [];
      var adapters = both[1].items || [];
      var since = both[0].deliveries_since;
      replaceChildren($("#deliveries-since"), since ? ["Deliveries counted since ", when(since), " (this process's start)"] : null);
      replaceChildren($("#sources tbody"), sources.length ? sources.map(sourceRow)
        : emptyRow(7, "No webhook sources: `switchboard-local source add` makes one."));
      replaceChildren($("#adapters tbody"), adapters.length ? adapters.map(adapterRow)
        : emptyRow(7, "No Redis adapters: `switchboard-local adapter add` makes one."));
    });
  };

  function enabledBadge(s) { return s.enabled ? badge("enabled", "ok") : badge("disabled", ""); }

  function health(s) {
    if (!s.enabled) return el("span", { class: "muted" }, "—");
    if (s.last_error) return el("span", null, badge(s.consecutive_failures ? "failing ×" + s.consecutive_failures : "error", "bad"), " ",
      el("span", { class: "mono muted" }, s.last_error));
    return badge("healthy", "ok");
  }

  function outcomes(s) {
    var counts = s.deliveries || {};
    var names = Object.keys(counts);
    if (!names.length) return el("span", { class: "muted" }, "none yet");
    return names.map(function (name) {
      var kind = !counts[name] ? "" : name === "stored" ? "ok" : name === "duplicate" ? "" : "bad";
      return badge(name + " " + count(counts[name]), kind);
    });
  }

  function sourceRow(s) {
    return el("tr", null,
      el("td", { class: "lead", "data-label": "Name" }, el("a", { href: "/events?source=" + encodeURIComponent(s.name), class: "row-link" }, s.name)),
      cell("Kind", el("span", { class: "mono" }, s.kind)),
      cell("Enabled", enabledBadge(s)),
      cell("Events", count(s.events), "num"),
      cell("Last delivery", when(s.last_received_at), "num"),
      cell("Deliveries", outcomes(s)),
      cell("Health", health(s)));
  }

  function adapterRow(a) {
    var lag = a.lag_error ? el("span", { class: "muted", title: a.lag_error }, "unknown")
      : a.waiting === null || a.waiting === undefined ? el("span", { class: "muted" }, "—")
      : [count(a.waiting) + " waiting", a.unacked ? el("span", { class: "muted" }, " · " + count(a.unacked) + " unacked") : null];
    return el("tr", null,
      el("td", { class: "lead", "data-label": "Name" }, el("a", { href: "/events?source=" + encodeURIComponent(a.name), class: "row-link" }, a.name)),
      cell("Kind", el("span", { class: "mono" }, a.kind + (a.config && a.config.mode ? " " + a.config.mode : ""))),
      cell("Enabled", enabledBadge(a)),
      cell("Last poll", when(a.last_poll_at), "num"),
      cell("Stored", count(a.messages_stored), "num"),
      cell("Lag", lag, "num"),
      cell("Health", health(a)));
  }

  // ---- start ---------------------------------------------------------------

  function start() {
    if (page === "todos") {
      setUpFilters(TODO_FILTERS);
      api("/api/queues").then(function (d) {
        fillOptions(document.querySelector("select[name=queue]"), (d.items || []).map(function (q) { return q.queue; }));
      }, function () {});
    }
    if (page === "events") {
      setUpFilters(EVENT_FILTERS);
      Promise.all([api("/api/sources"), api("/api/adapters")]).then(function (both) {
        var names = (both[0].items || []).concat(both[1].items || []).map(function (s) { return s.name; });
        fillOptions(document.querySelector("select[name=source]"), names);
      }, function () {});
    }
    refresh();
    connect();
  }

  start();
})();
