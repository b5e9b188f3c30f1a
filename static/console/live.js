// Live updates over /ws/live/ (docs/live.md). A page marks what may change:
//   <span data-live="job:12:state" data-live-class="badge">Running</span>
// The topic is "job:12", the field "state"; the text becomes change.state_display (or
// change.state), and with data-live-class the classes become "badge <state>". Extra topics may be
// listed on any element as data-live-topics="cluster quota:3". data-live-format="gpus" writes a
// number as the server's `gpus` filter does (8, 0.500), after adding data-live-offset if given.
// A file of its own: the Content-Security-Policy allows no inline script.
//
// Regions that htmx polls (data-poll, e.g. a job's placement block) are the fallback for when no
// socket is live: while one is, their timed polls are skipped, and a change on the socket
// refreshes them instead ("live:changed", at most every 300 ms).
(function () {
  "use strict";
  var BACKOFF_MS = [1000, 2000, 4000, 8000, 15000, 30000];
  var socket = null;
  var attempts = 0;
  var everOpen = false;
  var stopped = false;
  var syncing = null;   // a promise while the page re-reads its state over HTTP
  var queued = [];      // changes that arrived meanwhile, applied after it
  var live = false;     // subscribed and open: the socket carries every change
  var refreshTimer = null;

  function refreshPolled() {
    if (refreshTimer || !window.htmx) { return; }
    refreshTimer = window.setTimeout(function () {
      refreshTimer = null;
      document.querySelectorAll("[data-poll]").forEach(function (region) { window.htmx.trigger(region, "live:changed"); });
    }, 300);
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var detail = event.detail || {};
    var timed = !(detail.requestConfig && detail.requestConfig.triggeringEvent);
    if (live && timed && detail.elt && detail.elt.hasAttribute("data-poll")) { event.preventDefault(); }
  });

  function cells() { return document.querySelectorAll("[data-live]"); }

  function topics() {
    var wanted = {};
    cells().forEach(function (cell) {
      var parts = cell.dataset.live.split(":");
      if (parts.length >= 2) { wanted[parts.slice(0, parts.length - 1).join(":")] = true; }
    });
    document.querySelectorAll("[data-live-topics]").forEach(function (element) {
      element.dataset.liveTopics.split(/\s+/).forEach(function (topic) { if (topic) { wanted[topic] = true; } });
    });
    return Object.keys(wanted);
  }

  function badge(state, text) {
    var element = document.getElementById("live-status");
    if (!element) { return; }
    element.hidden = false;
    element.textContent = text;          // the words say it; the colour only repeats them
    element.dataset.state = state;
    element.className = "badge live-status " + (state === "live" ? "running" : state === "stopped" ? "cancelled" : "pending");
  }

  // data-live-format="gpus": a GPU figure as the server's `gpus` filter writes it (8, 0.500);
  // data-live-offset="-8" adds a number first (a fair share less the guarantee: the idle share).
  function formatted(value, cell) {
    var offset = parseFloat(cell.dataset.liveOffset);
    if (typeof value === "number" && !isNaN(offset)) { value = Math.round((value + offset) * 1000) / 1000; }
    if (cell.dataset.liveFormat === "gpus" && typeof value === "number") {
      return Number.isInteger(value) ? String(value) : value.toFixed(3);
    }
    return String(value);
  }

  function apply(topic, change) {
    document.dispatchEvent(new CustomEvent("live:change", { detail: { topic: topic, change: change } })); // for charts (docs/live.md)
    cells().forEach(function (cell) {
      var key = cell.dataset.live;
      if (key.lastIndexOf(topic + ":", 0) !== 0) { return; }
      var field = key.slice(topic.length + 1);
      if (!(field in change)) { return; }
      var value = change[field];
      var label = change[field + "_display"];
      cell.textContent = label !== undefined ? label : formatted(value, cell);
      if (cell.dataset.liveClass !== undefined) { cell.className = cell.dataset.liveClass + " " + value; }
    });
  }

  // After a reconnect: read the page again over HTTP and copy the live cells, so that a message
  // lost while the socket was down costs nothing; changes that arrive meanwhile wait for it.
  function resync() {
    syncing = fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        // A figure may be shown twice (a fair share, and less the guarantee): cells pair in order.
        var seen = {};
        cells().forEach(function (cell) {
          var key = cell.dataset.live;
          seen[key] = seen[key] === undefined ? 0 : seen[key] + 1;
          var match = fresh.querySelectorAll('[data-live="' + CSS.escape(key) + '"]')[seen[key]];
          if (match) { cell.textContent = match.textContent; cell.className = match.className; }
        });
        // Charts redraw from the fresh page's figures (charts.js).
        document.dispatchEvent(new CustomEvent("live:resynced", { detail: { document: fresh } }));
      })
      .catch(function () { /* the page stays as it was; the socket's changes still apply */ })
      .then(function () {
        var waiting = queued;
        syncing = null;
        queued = [];
        waiting.forEach(function (message) { apply(message.topic, message.change); });
      });
  }

  var subscribed = {};   // the topics asked for on this socket
  var started = false;   // a socket was opened once: reconnects are the backoff's, not a swap's

  function connect() {
    var wanted = topics();
    if (!wanted.length || stopped) { return; }
    started = true;
    subscribed = {};
    wanted.forEach(function (topic) { subscribed[topic] = true; });
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + window.location.host + "/ws/live/");
    socket.addEventListener("open", function () {
      if (everOpen) { resync(); }
      everOpen = true;
      attempts = 0;
      // The topics now: a swap while the socket was connecting may have added some.
      wanted = topics();
      wanted.forEach(function (topic) { subscribed[topic] = true; });
      socket.send(JSON.stringify({ subscribe: wanted }));
    });
    socket.addEventListener("message", function (event) {
      var message = JSON.parse(event.data);
      if (message.type === "subscription") {
        live = true;
        badge("live", "Live");
      } else if (message.type === "change") {
        if (syncing) { queued.push(message); } else { apply(message.topic, message.change); }
        // GPU samples (every 5 s, docs/telemetry.md) change no polled region: charts take them.
        if (!(message.topic.lastIndexOf("node", 0) === 0 || Object.keys(message.change).join() === "telemetry")) { refreshPolled(); }
      } else if (message.type === "signed_out") {
        stopped = true;
      }
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      live = false;
      if (stopped || event.code === 4401 || event.code === 4404) {
        stopped = true;
        badge("stopped", "Live updates stopped: sign in again and reload");
        return;
      }
      var wait = BACKOFF_MS[Math.min(attempts, BACKOFF_MS.length - 1)];
      attempts += 1;
      badge("reconnecting", "Reconnecting…");
      window.setTimeout(connect, wait + Math.random() * 500);
    });
  }

  // Content swapped in by htmx (a quota's Monitoring tab) may name topics the page had not:
  // subscribe to them on the open socket, or open one if the page had none.
  document.addEventListener("htmx:afterSettle", function () {
    if (stopped) { return; }
    if (!socket) { if (!started) { connect(); } return; }
    var more = topics().filter(function (topic) { return !subscribed[topic]; });
    if (!more.length || socket.readyState !== WebSocket.OPEN) { return; }
    more.forEach(function (topic) { subscribed[topic] = true; });
    socket.send(JSON.stringify({ subscribe: more }));
  });

  document.addEventListener("DOMContentLoaded", connect);
})();
