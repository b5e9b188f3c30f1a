// Charts whose figures the server built (console/selectors.py): each <figure data-chart="ID">
// is drawn from the json_script block with that id. plotly.js (5 MB) loads on first use only,
// from our own static files; so does its stylesheet, which must be in the page before plotly.js
// runs, or plotly injects a <style> element that the Content-Security-Policy refuses
// (console/plotly_assets.py). Tabs arrive by htmx, so charts are drawn on htmx:load as well.
(function () {
  "use strict";
  var script = document.currentScript;
  var plotlySrc = script.dataset.plotlySrc;
  var plotlyCss = script.dataset.plotlyCss;
  var placeholders = (script.dataset.plotlyPlaceholders || "").split(" ").filter(Boolean);
  var loading = null;

  function loadPlotly() {
    if (window.Plotly) { return Promise.resolve(window.Plotly); }
    if (loading) { return loading; }
    loading = new Promise(function (resolve, reject) {
      if (!document.getElementById("plotly.js-style-global")) {
        var link = document.createElement("link");
        link.id = "plotly.js-style-global";
        link.className = "no-inline-styles"; // plotly.js's own switch: "the rules are here already"
        link.rel = "stylesheet";
        link.href = plotlyCss;
        document.head.appendChild(link);
      }
      // plotly.js adds maplibre's <style> unless an element with its id exists; the console
      // draws no maps, so an empty element stands in for it (console/plotly_assets.py).
      placeholders.forEach(function (id) {
        if (document.getElementById(id)) { return; }
        var marker = document.createElement("meta");
        marker.id = id;
        document.head.appendChild(marker);
      });
      var tag = document.createElement("script");
      tag.src = plotlySrc;
      tag.addEventListener("load", function () { resolve(window.Plotly); });
      tag.addEventListener("error", function () { loading = null; reject(new Error("plotly.js did not load")); });
      document.head.appendChild(tag);
    });
    return loading;
  }

  // The page's text colour (light or dark scheme) for the chart's text and axes.
  function themed(layout, element) {
    var colour = getComputedStyle(element).color;
    layout.font = Object.assign({}, layout.font || {}, { color: colour });
    layout.autosize = true;
    return layout;
  }

  function draw(element) {
    if (element.dataset.drawn === "true") { return; }
    var source = document.getElementById(element.dataset.chart);
    if (!source) { return; }
    element.dataset.drawn = "true";
    var figure = JSON.parse(source.textContent);
    loadPlotly().then(function (Plotly) {
      return Plotly.newPlot(element, figure.data, themed(figure.layout, element), {
        responsive: true,
        displaylogo: false,
        displayModeBar: false,
      });
    }).then(function () {
      element.dataset.ready = "true";
    }).catch(function (error) {
      element.dataset.drawn = "false";
      element.textContent = "The chart could not be drawn: " + error.message;
    });
  }

  // A colour key drawn in HTML, not plotly's colour bar: plotly sets an empty style="" on the
  // bar's rectangles, which the Content-Security-Policy refuses. Its gradient is set through the
  // CSSOM, as the allocation bars are (console.js), from the scale the server sent.
  function paintKeys(root) {
    root.querySelectorAll("[data-colour-scale]").forEach(function (key) {
      var stops = JSON.parse(key.dataset.colourScale).map(function (stop) {
        return stop[1] + " " + (stop[0] * 100) + "%";
      });
      key.style.backgroundImage = "linear-gradient(to right, " + stops.join(", ") + ")";
    });
  }

  function drawWithin(root) {
    if (!root || !root.querySelectorAll) { return; }
    paintKeys(root);
    if (root.matches && root.matches("[data-chart]")) { draw(root); }
    root.querySelectorAll("[data-chart]").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", function () { drawWithin(document.body); });
  // htmx:load fires for every element htmx adds (a tab's body); afterSwap covers swaps into a target.
  document.addEventListener("htmx:load", function (event) { drawWithin(event.detail.elt); });
  document.addEventListener("htmx:afterSwap", function (event) { drawWithin(event.detail.target); });
  // Charts about to be swapped out: let plotly drop its listeners (resize) and state.
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!window.Plotly || !event.detail.target) { return; }
    event.detail.target.querySelectorAll(".js-plotly-plot").forEach(function (plot) { window.Plotly.purge(plot); });
  });
})();
