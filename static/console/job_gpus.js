// The Job page's utilisation chart (telemetry/charts.py) moves with the job:<id> changes that
// live.js announces as "live:change": each sample extends its GPU's two traces (utilisation and
// memory) with Plotly.extendTraces, the window trimmed to the figure's max_points. A GPU the
// figure does not have yet (the job just started, or moved) gets its two traces first.
// A job without a sample shows a sentence instead, its figure hidden (data-chart-later): the
// first sample shows and draws it (charts.js, "chart:draw"), and the samples heard until
// plotly.js has drawn it ("chart:ready") are added then. A job that starts while the page
// waits for its first sample changes the sentence ("has not started" would be wrong).
(function () {
  "use strict";
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];

  function layoutOf(element) {
    if (element._gpuTraces) { return element._gpuTraces; }
    var figure = JSON.parse(document.getElementById(element.dataset.chart).textContent);
    var traces = {};
    var count = figure.gpus.length;
    figure.gpus.forEach(function (key, index) { traces[key] = [index, count + index]; });
    element._gpuTraces = { traces: traces, total: 2 * count, maxPoints: figure.max_points || 2000 };
    return element._gpuTraces;
  }

  function addGpu(Plotly, element, state, key, sample) {
    var colour = PALETTE[Object.keys(state.traces).length % PALETTE.length];
    Plotly.addTraces(element, [
      { type: "scatter", mode: "lines", name: sample.label, legendgroup: key, x: [], y: [],
        line: { color: colour, width: 1.5 }, hovertemplate: sample.label + ": %{y:.0f} %<extra></extra>" },
      { type: "scatter", mode: "lines", name: sample.label + " memory", legendgroup: key, showlegend: false,
        x: [], y: [], yaxis: "y2", line: { color: colour, width: 1.5, dash: "dot" },
        hovertemplate: sample.label + ": %{y:.1f} GiB<extra></extra>" }
    ]);
    state.traces[key] = [state.total, state.total + 1];
    state.total += 2;
  }

  function note(element) {
    var section = element.closest("section");
    return section ? section.querySelector("[data-testid='job-gpus-note']") : null;
  }

  // The first sample of a job that had none: the figure shows, and is drawn; its samples wait.
  function showChart(element, samples) {
    element._waiting = (element._waiting || []).concat([samples]);
    if (element.dataset.chart) { return; }
    var sentence = note(element);
    if (sentence && sentence.dataset.noteSampled) { sentence.textContent = sentence.dataset.noteSampled; }
    element.hidden = false;
    element.dataset.chart = element.dataset.chartLater;
    element.dispatchEvent(new CustomEvent("chart:draw", { bubbles: true }));
  }

  function extend(element, samples) {
    var state = layoutOf(element);
    var xs = [], ys = [], indices = [];
    Object.keys(samples).sort().forEach(function (key) {
      var sample = samples[key];
      if (!state.traces[key]) { addGpu(window.Plotly, element, state, key, sample); }
      xs.push([sample.at], [sample.at]);
      ys.push([sample.util], [Math.round(sample.memory_used_mib / 1024 * 100) / 100]);
      indices.push(state.traces[key][0], state.traces[key][1]);
    });
    if (indices.length) {
      window.Plotly.extendTraces(element, { x: xs, y: ys }, indices, state.maxPoints);
      element.dataset.extended = String((parseInt(element.dataset.extended, 10) || 0) + 1);
    }
  }

  document.addEventListener("live:change", function (event) {
    var element = document.querySelector('[data-job-gpus="' + event.detail.topic + '"]');
    if (!element) { return; }
    var change = event.detail.change;
    if (change.state === "running" && element.hidden) {
      var sentence = note(element);
      if (sentence && sentence.dataset.noteStarted) { sentence.textContent = sentence.dataset.noteStarted; }
    }
    var samples = change.telemetry;
    if (!samples) { return; }
    if (element.dataset.chartLater && element.dataset.ready !== "true") { showChart(element, samples); return; }
    if (!window.Plotly || element.dataset.ready !== "true") { return; }
    extend(element, samples);
  });

  document.addEventListener("chart:ready", function (event) {
    var element = event.target;
    if (!element.dataset || !element.dataset.jobGpus || !element._waiting) { return; }
    var waiting = element._waiting;
    element._waiting = null;
    waiting.forEach(function (samples) { extend(element, samples); });
  });
})();
