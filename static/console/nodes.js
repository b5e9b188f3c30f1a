// The Nodes page's GPU grid: how much of each GPU is held, and how busy it is as a heat colour,
// drawn through the CSSOM from the data- attributes the server wrote (the Content-Security-Policy
// allows no style=""). Utilisation follows the node:<id> changes that live.js announces.
(function () {
  "use strict";
  // The quota charts' scale (console/selectors.py): idle teal, half amber, busy red.
  var HEAT = [[0, [42, 157, 143]], [0.5, [233, 196, 106]], [1, [214, 40, 40]]];

  function heat(util) {
    var share = Math.max(0, Math.min(1, util / 100));
    for (var i = 1; i < HEAT.length; i++) {
      if (share <= HEAT[i][0]) {
        var low = HEAT[i - 1], high = HEAT[i];
        var t = (share - low[0]) / (high[0] - low[0]);
        var rgb = low[1].map(function (channel, k) { return Math.round(channel + t * (high[1][k] - channel)); });
        return "rgb(" + rgb.join(", ") + ")";
      }
    }
    return "rgb(" + HEAT[HEAT.length - 1][1].join(", ") + ")";
  }

  function paintHeat(cell) {
    if (cell.dataset.gpuUtil === undefined) { return; }
    var colour = heat(parseFloat(cell.dataset.gpuUtil) || 0);
    cell.style.borderLeftColor = colour;
    var strip = cell.querySelector(".gpu-heat");
    if (strip) { strip.style.backgroundColor = colour; }
  }

  function drawUse(root) {
    root.querySelectorAll("[data-gpu-used]").forEach(function (use) {
      var used = Math.max(0, Math.min(1, parseFloat(use.dataset.gpuUsed) || 0));
      var fill = use.querySelector(".gpu-fill");
      if (fill) { fill.style.width = (used * 100) + "%"; }
    });
    root.querySelectorAll("[data-gpu-util]").forEach(paintHeat);
  }

  // The page listens to one topic, "nodes" (docs/live.md): {"util": {"<node id>": {"<gpu>": 91.5}}},
  // every node of a sample batch, however many nodes the page shows. Its cells are marked
  // data-live="nodes:util.<node>.<gpu>" so that live.js subscribes to it and copies them on a
  // reconnect; their text is written here, as the field is nested.
  document.addEventListener("live:change", function (event) {
    if (event.detail.topic !== "nodes") { return; }
    var util = event.detail.change.util || {};
    Object.keys(util).forEach(function (nodeId) {
      var card = document.querySelector('[data-node-id="' + nodeId + '"]');
      if (!card) { return; }
      card.querySelectorAll("[data-gpu]").forEach(function (cell) {
        var value = util[nodeId][cell.dataset.gpu];
        if (value === undefined) { return; }
        cell.dataset.gpuUtil = String(value);
        var text = cell.querySelector("[data-live]");
        if (text) { text.textContent = Math.round(value) + " %"; }
        paintHeat(cell);
      });
    });
  });
  document.addEventListener("DOMContentLoaded", function () { drawUse(document); });
  document.addEventListener("htmx:afterSwap", function () { drawUse(document); });
})();
