// The Job page's utilisation chart (telemetry/charts.py) moves with the job:<id> changes that
// live.js announces as "live:change": each sample extends its GPU's two traces (utilisation and
// memory) with Plotly.extendTraces, the window trimmed to the figure's max_points. A GPU the
// figure does not have yet (the job just started, or moved) gets its two traces first.
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

  document.addEventListener("live:change", function (event) {
    var samples = event.detail.change.telemetry;
    if (!samples || !window.Plotly) { return; }
    var element = document.querySelector('[data-job-gpus="' + event.detail.topic + '"]');
    if (!element || element.dataset.ready !== "true") { return; }
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
  });
})();
