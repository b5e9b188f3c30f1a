// The Nodes page's GPU grid: how much of each GPU is held, drawn through the CSSOM from the
// data- attribute the server wrote (the Content-Security-Policy allows no style="").
(function () {
  "use strict";
  function drawUse(root) {
    root.querySelectorAll("[data-gpu-used]").forEach(function (use) {
      var used = Math.max(0, Math.min(1, parseFloat(use.dataset.gpuUsed) || 0));
      var fill = use.querySelector(".gpu-fill");
      if (fill) { fill.style.width = (used * 100) + "%"; }
    });
  }
  document.addEventListener("DOMContentLoaded", function () { drawUse(document); });
  document.addEventListener("htmx:afterSwap", function () { drawUse(document); });
})();
