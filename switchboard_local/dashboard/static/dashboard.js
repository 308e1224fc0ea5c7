/* switchboard-local's dashboard: keeps a server-rendered page live.
 *
 * Each page arrives with its data (pages.py renders it; nothing is fetched at
 * load). This script opens ONE EventSource on /api/stream for the topics the
 * page shows, passing the page's data-since (the fingerprint it was rendered
 * with) so the stream names what moved since; whenever it names something,
 * the page fetches its own URL again and swaps in the parts marked data-live,
 * without a reload. EventSource reconnects by itself after a dropped
 * connection; when the browser gives up (the server answered an error), the
 * script opens a new one after a pause.
 *
 * It also runs the page's controls: actions (buttons with data-action: a POST
 * with the CSRF token), filters (the URL changes, no reload), "older" links
 * (the next page's rows appended), the body's views, and relative times.
 *
 * Safety: the page's HTML is the server's, autoescaped; what this script
 * writes itself goes in as text (textContent), never as HTML. The HTML it
 * fetches is parsed by DOMParser, which runs nothing. No inline script or
 * style anywhere (the Content-Security-Policy forbids both).
 */
(function () {
  "use strict";

  var page = document.body.dataset.page;
  var since = document.body.dataset.since || "";
  var MAX_ROWS = 1000; // the most rows a list reads at once (MAX_LIST_LIMIT)

  function $(selector) { return document.querySelector(selector); }

  // ---- relative times ------------------------------------------------------

  function ago(iso) {
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

  /* Times as of now, their tooltips in the reader's own zone (the server wrote UTC). */
  function localize(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var iso = t.getAttribute("datetime");
      t.textContent = ago(iso);
      t.title = new Date(iso).toLocaleString();
    });
  }

  setInterval(function () { localize(document); }, 15000);

  // ---- the page, fetched again ----------------------------------------------

  /* The page's HTML at `url`, parsed (an error answer of the guard is JSON: its message). */
  function fetchPage(url) {
    return fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin", cache: "no-store" }).then(function (response) {
      return response.text().then(function (text) {
        if (!/^text\/html/.test(response.headers.get("content-type") || "")) {
          var message = response.status + " " + response.statusText;
          try { message = JSON.parse(text).error.message || message; } catch (e) { /* not JSON either */ }
          throw new Error(message);
        }
        return new DOMParser().parseFromString(text, "text/html");
      });
    });
  }

  /* Each data-live part of the page, replaced by its namesake in `doc` (open <details> stay open). */
  function swap(doc) {
    document.querySelectorAll("[data-live]").forEach(function (old) {
      var fresh = doc.getElementById(old.id);
      if (!fresh || !fresh.hasAttribute("data-live")) return;
      old.querySelectorAll("details[id][open]").forEach(function (d) {
        var same = fresh.querySelector("details#" + CSS.escape(d.id));
        if (same) same.open = true;
      });
      old.replaceWith(document.adoptNode(fresh));
    });
    document.title = doc.title;
    localize(document);
  }

  // A list extended by "older" (the id of its rows' tbody) reads as many rows from the top when it refreshes.
  var extended = null;
  function pageUrl() {
    var url = new URL(location.href);
    var body = extended && document.getElementById(extended);
    if (body) url.searchParams.set("rows", String(Math.min(Math.max(body.rows.length, 1), MAX_ROWS)));
    return url;
  }

  var loading = null; // the fetch in flight
  var again = false; // a change arrived while it was in flight

  /* Fetch the page and swap; changes arriving meanwhile make one more round, not many. */
  function refresh() {
    if (loading) { again = true; return; }
    loading = fetchPage(pageUrl()).then(swap).catch(function (error) { toast("Could not refresh: " + error.message, true); })
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

  // ---- live: one EventSource per page -------------------------------------

  function setLive(state, text) {
    var badge = $("#live");
    if (!badge) return;
    badge.hidden = false;
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
  var caughtUp = false; // the stream has told what moved since the page's render
  function connect() {
    if (!window.EventSource) { setLive("off", "no live updates"); return; }
    var url = "/api/stream?topics=" + encodeURIComponent((TOPICS[page] || []).join(","));
    // The first stream says what moved since the render; a later one cannot know what the page holds.
    if (since && !caughtUp) url += "&since=" + encodeURIComponent(since);
    stream = new EventSource(url);
    stream.onopen = function () {
      retry = 1000;
      setLive("live", "live");
    };
    stream.onmessage = changed;
    stream.addEventListener("change", changed);
    stream.addEventListener("ready", function () {
      if (since && !caughtUp) { caughtUp = true; return; } // a "change" follows when anything moved
      caughtUp = true;
      soon(); // a reconnection: what moved while it was away is fetched now
    });
    stream.onerror = function () {
      setLive("reconnecting", "reconnecting");
      if (stream.readyState === EventSource.CLOSED) {
        // The browser gave up (an error answer): try again ourselves, backing off.
        stream.close();
        setTimeout(connect, retry);
        retry = Math.min(retry * 2, 15000);
      }
    };
  }

  // ---- actions ---------------------------------------------------------------

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

  function api(path) {
    return fetch(path, { headers: { Accept: "application/json" }, credentials: "same-origin", cache: "no-store" }).then(answer);
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
        body: body || "{}",
      });
    }).then(answer);
  }

  /* What an action says it did: data-done with {field} from its answer (data-done-empty when a list came back empty). */
  function doneText(button, result) {
    var text = button.dataset.done || "Done";
    var empty = false;
    text = text.replace(/\{(\w+)\}/g, function (_, name) {
      var value = result ? result[name] : undefined;
      if (Array.isArray(value)) { empty = empty || !value.length; return value.join(", "); }
      return value === null || value === undefined ? "—" : Number.isFinite(value) ? Number(value).toLocaleString() : String(value);
    });
    return empty && button.dataset.doneEmpty ? button.dataset.doneEmpty : text;
  }

  document.addEventListener("click", function (e) {
    var button = e.target.closest("button[data-action]");
    if (!button || button.disabled) return;
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    button.disabled = true;
    act(button.dataset.action, button.dataset.body).then(function (result) {
      toast(doneText(button, result));
      refresh();
    }, function (error) {
      button.disabled = false;
      toast(error.message, true);
    });
  });

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

  // ---- filters, older rows, the body's views -------------------------------

  /* Go to `url` in place: the URL changes (history), the page's live parts are fetched and swapped. */
  function visit(url, replace) {
    history[replace ? "replaceState" : "pushState"](null, "", url);
    extended = null;
    refresh();
  }

  var form = $("#filters");
  if (form) {
    form.addEventListener("submit", function (e) {
      e.preventDefault();
      var next = new URLSearchParams();
      new FormData(form).forEach(function (value, name) {
        value = String(value).trim();
        if (value) next.set(name, value);
      });
      var search = next.toString();
      visit(location.pathname + (search ? "?" + search : ""));
    });
    form.querySelectorAll("select").forEach(function (select) {
      select.addEventListener("change", function () { form.requestSubmit(); });
    });
  }
  window.addEventListener("popstate", function () { location.reload(); });

  document.addEventListener("click", function (e) {
    var link = e.target.closest("a[data-more], a[data-view]");
    if (!link || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    if (link.dataset.view) { visit(link.href, true); return; }
    // "Older": the next page's rows under these, the pager from it.
    var list = link.dataset.more;
    link.setAttribute("aria-busy", "true");
    fetchPage(link.href).then(function (doc) {
      var rows = doc.getElementById(list);
      var body = document.getElementById(list);
      if (rows && body) Array.from(rows.children).forEach(function (row) { body.appendChild(document.adoptNode(row)); });
      var pager = doc.getElementById("pager");
      if (pager && $("#pager")) $("#pager").replaceWith(document.adoptNode(pager));
      // "Newest" is for a page that does not start at the top; this one may.
      if (!new URL(location.href).searchParams.get("cursor")) {
        document.querySelectorAll("#pager a:not([data-more])").forEach(function (a) { a.remove(); });
      }
      extended = list;
      localize(document);
    }, function (error) {
      link.removeAttribute("aria-busy");
      toast(error.message, true);
    });
  });

  // ---- start ---------------------------------------------------------------

  localize(document);
  setLive("connecting", "connecting");
  connect();
})();
