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
      if (figure.live) { follow(element, figure.live); }
      if (element.dataset.drillUrl) { drillOnClick(element); }
      element.dataset.ready = "true";
      element.dispatchEvent(new CustomEvent("chart:ready", { bubbles: true }));
    }).catch(function (error) {
      element.dataset.drawn = "false";
      element.textContent = "The chart could not be drawn: " + error.message;
    });
  }

  // ---- The Overview's quota in view (docs/console.md): a click on a treemap box opens it (plotly
  // zooms the treemap) and the section of the stacked area is read again for that quota, which
  // then stacks its children; the pathbar or the top box goes back up the same way. The picker and
  // the trail swap the same section (htmx); the treemap then opens at the quota they chose. ----
  function drillOnClick(element) {
    element.on("plotly_treemapclick", function (event) {
      // A leaf has no level below it: plotly leaves the treemap as it is, and so does the page.
      if (!event || event.nextLevel === undefined || !window.htmx) { return; }
      var level = /^[0-9]+$/.test(String(event.nextLevel)) ? String(event.nextLevel) : "";
      var url = element.dataset.drillUrl + (level ? "&quota=" + level : "");
      element.dataset.clickedLevel = level;
      window.htmx.ajax("GET", url, { target: "#" + element.dataset.drillTarget, swap: "outerHTML" }).then(function () {
        window.history.replaceState(null, "", url);
      });
    });
  }

  function followLevel(section) {
    var treemap = document.querySelector("[data-drill-target='" + section.id + "']");
    if (!treemap || treemap.dataset.ready !== "true" || !window.Plotly || !treemap.data) { return; }
    var level = section.dataset.treemapLevel || "";
    var clicked = treemap.dataset.clickedLevel;
    delete treemap.dataset.clickedLevel;
    if (clicked === level || String(treemap.data[0].level || "") === level) { return; }  // plotly zoomed already
    window.Plotly.restyle(treemap, { level: [level] }, [0]);
  }

  // A section swapped outerHTML is a new element: look it up rather than trust the event's.
  document.addEventListener("htmx:afterSettle", function () {
    document.querySelectorAll("section[data-treemap-level]").forEach(followLevel);
  });

  // ---- Charts that move (docs/live.md): the quota figures live.js hears extend them. ----
  // A figure with a "live" block follows its quotas' topics (the page lists them in
  // data-live-topics). Each change appends one point per trace at the server's time now (the
  // browser's clock corrected by the figure's "now"), with Plotly.extendTraces, keeping at most
  // live.max_points per trace, and the x axis shows the chosen range up to that moment. The
  // changes of one commit arrive as one message per quota: they are gathered for a moment and
  // drawn as one point, so a GPU moving from one quota to another never shows in both or neither.
  var GATHER_MS = 150;
  var heard = {};       // quota id -> its latest figures, until the next flush
  var flushTimer = null;

  function serverTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").slice(0, 23);
  }

  function follow(element, live) {
    var now = live.now ? Date.parse(live.now.replace(" ", "T") + "Z") : NaN;
    element._live = {
      spec: live,
      offset: isNaN(now) ? 0 : now - Date.now(),
      quotas: Object.assign({}, live.quotas || {}),
    };
  }

  function rounded(value) { return Math.round(value * 1000) / 1000; }

  // The stacked area's next point: per band its allocation and its guarantee, whose line is drawn
  // on top of the bands below it (console/selectors.py, _stacked_area).
  function stackedPoint(state) {
    var point = { allocated: [], guaranteed: [], lines: [] };
    var below = 0;
    state.spec.bands.forEach(function (terms) {
      var own = 0, guarantee = 0;
      terms.forEach(function (term) {
        var figures = state.quotas[String(term[0])] || [0, 0];
        own += term[1] * figures[0];
        guarantee += term[1] * figures[1];
      });
      own = rounded(Math.max(0, own));
      guarantee = rounded(Math.max(0, guarantee));
      point.allocated.push(own);
      point.guaranteed.push(guarantee);
      point.lines.push(rounded(below + guarantee));
      below = rounded(below + own);
    });
    return point;
  }

  // The table under the chart: each band's figures now, in the words of the page.
  function fillBandCells(element, point) {
    document.querySelectorAll("[data-band-of='" + element.dataset.chart + "']").forEach(function (cell) {
      var band = parseInt(cell.dataset.band, 10);
      var allocated = point.allocated[band], guaranteed = point.guaranteed[band];
      var field = cell.dataset.bandField;
      var shown = field === "allocated" ? allocated : field === "guaranteed" ? guaranteed : Math.max(0, allocated - guaranteed);
      cell.textContent = String(rounded(shown));
    });
  }

  function readable(value) { return rounded(value).toLocaleString("en-US", { maximumFractionDigits: 3 }); }

  // The treemap: each box whose quota's figures changed is recoloured (allocated ÷ guaranteed)
  // and relabelled, and the sentence under it names the quotas over their guarantee now.
  function recolour(element, state) {
    var touched = false;
    Object.keys(heard).forEach(function (id) {
      if (id in state.quotas) { state.quotas[id] = [heard[id].allocated, heard[id].guaranteed, heard[id].fair_share]; touched = true; }
    });
    if (!touched) { return; }
    var trace = element.data[0];
    var cap = state.spec.ratio_cap;
    var colours = [], custom = [], over = [];
    trace.ids.forEach(function (id, index) {
      var figures = state.quotas[id];
      var allocated = figures[0], guaranteed = figures[1];
      var ratio = guaranteed > 0 ? Math.min(allocated / guaranteed, cap) : (allocated > 0 ? cap : 0);
      colours.push(rounded(ratio));
      var was = trace.customdata[index];
      custom.push([readable(allocated), was[1], figures.length > 2 ? readable(figures[2]) : was[2]]);
      if (allocated > guaranteed + 1e-9) { over.push(trace.labels[index] + " (" + readable(allocated) + " of " + readable(guaranteed) + " GPUs)"); }
    });
    window.Plotly.restyle(element, { "marker.colors": [colours], customdata: [custom] }, [0]);
    var sentence = document.querySelector("[data-testid='over-quota']");
    if (sentence) {
      sentence.textContent = over.length ? "Over quota now: " + over.join(", ") + "." : "No quota is over its guarantee now.";
      sentence.classList.toggle("muted", !over.length);
    }
    element.dataset.extended = String((parseInt(element.dataset.extended, 10) || 0) + 1);
  }

  function extend(element) {
    var state = element._live;
    if (!state || element.dataset.ready !== "true" || !window.Plotly) { return; }
    if (state.spec.kind === "treemap") { recolour(element, state); return; }
    var values;
    if (state.spec.kind === "stacked") {
      var touched = false;
      Object.keys(heard).forEach(function (id) {
        if (id in state.quotas) { state.quotas[id] = [heard[id].allocated, heard[id].guaranteed]; touched = true; }
      });
      if (!touched) { return; }
      var point = stackedPoint(state);
      fillBandCells(element, point);
      values = point.allocated.concat(point.lines);
    } else if (state.spec.kind === "quota") {
      var mine = heard[String(state.spec.quota)];
      if (!mine) { return; }
      values = [mine.allocated, mine.guaranteed, mine.fair_share];
    } else {
      return;
    }
    var at = Date.now() + state.offset;
    var moment = serverTime(at);
    // The figures before the change held until this moment: the tail point carries them here.
    if (state.tail) { moveTail(element, moment); state.tail = false; }
    var xs = [], ys = [], indices = [];
    values.forEach(function (value, index) { xs.push([moment]); ys.push([value]); indices.push(index); });
    window.Plotly.extendTraces(element, { x: xs, y: ys }, indices, state.spec.max_points);
    showUntil(element, at);
    element.dataset.extended = String((parseInt(element.dataset.extended, 10) || 0) + 1);
  }

  // The range ends at `at`; it starts where the data does while that is younger than the range.
  function showUntil(element, at) {
    var state = element._live;
    var first = Date.parse(String(element.data[0].x[0]).replace(" ", "T") + "Z");
    var start = Math.max(at - state.spec.range_seconds * 1000, isNaN(first) ? -Infinity : first);
    window.Plotly.relayout(element, { "xaxis.range": [serverTime(start), serverTime(at)] });
  }

  // The traces `extend` grows: a band and a guarantee line per quota, or a quota's three lines.
  function liveTraces(element) {
    var spec = element._live.spec;
    var count = spec.kind === "stacked" ? spec.bands.length * 2 : spec.kind === "quota" ? 3 : 0;
    return element.data.slice(0, count);
  }

  function moveTail(element, moment) {
    liveTraces(element).forEach(function (trace) {
      if (trace.x && trace.x.length) { trace.x[trace.x.length - 1] = moment; }
    });
  }

  // Figures hold until the next change, so every TAIL_MS the last figures are carried to now
  // (one "tail" point per trace, moved rather than added): without it the latest step would sit,
  // zero wide, at the right edge until the next change, and the chart would look as it did before.
  var TAIL_MS = 2000;

  function carryToNow(element) {
    var state = element._live;
    if (!state || (state.spec.kind !== "stacked" && state.spec.kind !== "quota")) { return; }
    if (element.dataset.ready !== "true" || !window.Plotly || !element.data || !element.data.length) { return; }
    var at = Date.now() + state.offset;
    var moment = serverTime(at);
    if (state.tail) {
      moveTail(element, moment);
      window.Plotly.redraw(element);
    } else {
      var xs = [], ys = [], indices = [];
      liveTraces(element).forEach(function (trace, index) {
        xs.push([moment]);
        ys.push([trace.y[trace.y.length - 1]]);
        indices.push(index);
      });
      window.Plotly.extendTraces(element, { x: xs, y: ys }, indices, state.spec.max_points);
      state.tail = true;
    }
    showUntil(element, at);
  }

  window.setInterval(function () {
    if (document.hidden) { return; }
    document.querySelectorAll("[data-chart]").forEach(carryToNow);
  }, TAIL_MS);

  function flush() {
    flushTimer = null;
    document.querySelectorAll("[data-chart]").forEach(extend);
    heard = {};
  }

  document.addEventListener("live:change", function (event) {
    var topic = event.detail.topic;
    var change = event.detail.change;
    if (topic.lastIndexOf("quota:", 0) !== 0 || change.allocated === undefined) { return; }
    heard[topic.slice(6)] = change;
    if (!flushTimer) { flushTimer = window.setTimeout(flush, GATHER_MS); }
  });

  // After a reconnect live.js read the page again: draw the live charts from its fresh figures,
  // so that what changed while the socket was down shows too.
  document.addEventListener("live:resynced", function (event) {
    var fresh = event.detail.document;
    document.querySelectorAll("[data-chart]").forEach(function (element) {
      if (!element._live || !window.Plotly) { return; }
      var source = fresh.getElementById(element.dataset.chart);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      document.getElementById(element.dataset.chart).textContent = source.textContent;
      window.Plotly.react(element, figure.data, themed(figure.layout, element)).then(function () {
        if (figure.live) { follow(element, figure.live); }
      });
      document.querySelectorAll("[data-band-of='" + element.dataset.chart + "']").forEach(function (cell) {
        var match = fresh.querySelector("[data-band-of='" + element.dataset.chart + "'][data-band='" + cell.dataset.band + "'][data-band-field='" + cell.dataset.bandField + "']");
        if (match) { cell.textContent = match.textContent; }
      });
    });
  });

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
  // A figure shown later (the Job page's, on its first GPU sample: job_gpus.js) asks to be drawn.
  document.addEventListener("chart:draw", function (event) { drawWithin(event.target); });
  // htmx:load fires for every element htmx adds (a tab's body); afterSwap covers swaps into a target.
  document.addEventListener("htmx:load", function (event) { drawWithin(event.detail.elt); });
  document.addEventListener("htmx:afterSwap", function (event) { drawWithin(event.detail.target); });
  // Charts about to be swapped out: let plotly drop its listeners (resize) and state.
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!window.Plotly || !event.detail.target) { return; }
    event.detail.target.querySelectorAll(".js-plotly-plot").forEach(function (plot) { window.Plotly.purge(plot); });
  });
})();
