// The page kit's behaviour (console/pagekit.py). A file of its own: the Content-Security-Policy
// allows no inline script, no inline style attribute and no on* handler.
(function () {
  "use strict";
  var opener = null;

  function dialog() { return document.getElementById("action-dialog"); }

  function focusInside(root) {
    var target = root.querySelector("[aria-invalid=true]") ||
      root.querySelector("[data-autofocus]") ||
      root.querySelector("input:not([type=hidden]), select, textarea, button");
    if (target) { target.focus(); }
  }

  // Widths through the CSSOM (allowed under CSP), from data- attributes the server wrote.
  function drawBar(bar) {
    var guaranteed = parseFloat(bar.dataset.guaranteed) || 0;
    var allocated = parseFloat(bar.dataset.allocated) || 0;
    var whole = Math.max(guaranteed, allocated);
    var inside = whole > 0 ? Math.min(allocated, guaranteed) / whole * 100 : 0;
    var over = whole > 0 ? Math.max(0, allocated - guaranteed) / whole * 100 : 0;
    bar.querySelector(".bar-in").style.width = inside + "%";
    bar.querySelector(".bar-over").style.width = over + "%";
    bar.classList.toggle("has-over", over > 0);
  }

  function drawBars(root) { root.querySelectorAll("[data-bar]").forEach(drawBar); }

  // A quota's allocation bar and its "over quota" words follow the quota's live figures
  // (data-live-bar / data-live-over name the topic; live.js announces each change, docs/live.md).
  function followQuota(topic, allocated, guaranteed) {
    var selector = "[data-live-bar='" + topic + "']";
    document.querySelectorAll(selector).forEach(function (bar) {
      bar.dataset.allocated = String(allocated);
      if (guaranteed !== undefined) { bar.dataset.guaranteed = String(guaranteed); }
      drawBar(bar);
    });
    document.querySelectorAll("[data-live-over='" + topic + "']").forEach(function (words) {
      var bar = document.querySelector(selector);
      var limit = guaranteed !== undefined ? guaranteed : parseFloat(bar ? bar.dataset.guaranteed : "0") || 0;
      words.hidden = !(allocated > limit + 1e-9);
    });
  }

  document.addEventListener("live:change", function (event) {
    var topic = event.detail.topic, change = event.detail.change;
    if (topic.lastIndexOf("quota:", 0) !== 0 || typeof change.allocated !== "number") { return; }
    followQuota(topic, change.allocated, change.guaranteed);
  });

  // After a reconnect the page was read again (live.js): the bars take its figures too.
  document.addEventListener("live:resynced", function (event) {
    event.detail.document.querySelectorAll("[data-live-bar]").forEach(function (fresh) {
      followQuota(fresh.dataset.liveBar, parseFloat(fresh.dataset.allocated) || 0, parseFloat(fresh.dataset.guaranteed) || 0);
    });
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.documentElement.classList.add("js");
    drawBars(document);
    var box = dialog();
    if (!box) { return; }
    box.addEventListener("close", function () {
      document.getElementById("action-dialog-body").replaceChildren();
      if (opener && document.contains(opener)) {
        // The link sat in a folded Actions menu: reopen it so focus has a visible home.
        var menu = opener.closest("details");
        if (menu) { menu.open = true; }
        opener.focus();
      }
      opener = null;
    });
    box.addEventListener("click", function (event) {
      var close = event.target.closest("[data-dialog-close]");
      if (close && box.open) { event.preventDefault(); box.close(); }
    });
  });

  document.addEventListener("click", function (event) {
    var link = event.target.closest("[data-opens-dialog]");
    if (link) { opener = link; }
    // A tab's body arrives by htmx; the tab strip outside it shows which one is current.
    var tab = event.target.closest("[data-tab]");
    if (tab) {
      tab.parentElement.querySelectorAll("[data-tab]").forEach(function (other) {
        other.classList.toggle("active", other === tab);
        if (other === tab) { other.setAttribute("aria-current", "page"); } else { other.removeAttribute("aria-current"); }
      });
    }
  });

  // A select marked data-autosubmit submits its form on change (instead of an inline onchange).
  document.addEventListener("change", function (event) {
    if (event.target.matches("[data-autosubmit]") && event.target.form) { event.target.form.requestSubmit(); }
  });

  document.addEventListener("htmx:afterSwap", function (event) {
    var box = dialog();
    if (!box) { return; }
    if (event.detail.target.id === "action-dialog-body" && !box.open) {
      box.showModal();
      focusInside(box);
    } else if (box.contains(event.detail.target) || box.contains(event.detail.elt)) {
      var panel = box.querySelector(".action-panel");
      if (panel) { focusInside(panel); }
    }
    drawBars(document);
  });
})();
