// The Resource Quotas tree: fold and unfold (remembered in localStorage), and the name filter.
(function () {
  "use strict";
  var KEY = "console.quotas.folded";

  function folded() {
    try { return new Set(JSON.parse(localStorage.getItem(KEY) || "[]")); } catch (e) { return new Set(); }
  }
  function remember(set) {
    try { localStorage.setItem(KEY, JSON.stringify(Array.from(set))); } catch (e) { /* private mode */ }
  }

  function rows(table) { return Array.from(table.querySelectorAll("tbody tr[data-quota-id]")); }

  // A row shows when no ancestor is folded (and, while filtering, when it or a descendant matches).
  function apply(table) {
    var closed = folded();
    var byId = {};
    rows(table).forEach(function (row) { byId[row.dataset.quotaId] = row; });
    var query = (document.querySelector("[data-quota-filter]") || { value: "" }).value.trim().toLowerCase();
    var matching = new Set();
    if (query) {
      rows(table).forEach(function (row) {
        if (row.dataset.quota.toLowerCase().indexOf(query) === -1) { return; }
        for (var at = row; at; at = byId[at.dataset.parentId]) { matching.add(at.dataset.quotaId); }
      });
    }
    var shown = 0;
    rows(table).forEach(function (row) {
      var hidden = false;
      if (query) {
        hidden = !matching.has(row.dataset.quotaId);
      } else {
        for (var up = byId[row.dataset.parentId]; up; up = byId[up.dataset.parentId]) {
          if (closed.has(up.dataset.quotaId)) { hidden = true; break; }
        }
      }
      row.hidden = hidden;
      if (!hidden) { shown += 1; }
      var button = row.querySelector("[data-fold]");
      if (button) {
        var isFolded = closed.has(row.dataset.quotaId) && !query;
        button.setAttribute("aria-expanded", isFolded ? "false" : "true");
        button.setAttribute("aria-label", (isFolded ? "Unfold " : "Fold ") + row.dataset.quota);
        button.querySelector("span").textContent = isFolded ? "▸" : "▾";
      }
    });
    var empty = document.querySelector("[data-filter-empty]");
    if (empty) { empty.hidden = shown > 0; }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.querySelector("[data-quota-tree]");
    if (!table) { return; }
    table.addEventListener("click", function (event) {
      var button = event.target.closest("[data-fold]");
      if (!button) { return; }
      var closed = folded();
      var id = button.dataset.fold;
      if (closed.has(id)) { closed.delete(id); } else { closed.add(id); }
      remember(closed);
      apply(table);
    });
    var filter = document.querySelector("[data-quota-filter]");
    if (filter) {
      filter.addEventListener("input", function () { apply(table); });
      // Typing filters at once; Enter must not reload the page.
      filter.form.addEventListener("submit", function (event) { event.preventDefault(); apply(table); });
    }
    apply(table);
  });
})();
