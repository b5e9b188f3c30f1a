// Submit job and Jobs: the kind's presets, and filters that leave empty values out of the URL.
// A file of its own: the Content-Security-Policy allows no inline script or handler.
(function () {
  "use strict";

  // Kind → priority and preemptible (scheduling.models.KIND_DEFAULTS, written by the server
  // into data-presets). The estimate follows: the kind's input event is already on its way.
  document.addEventListener("change", function (event) {
    var kind = event.target;
    if (!(kind instanceof HTMLSelectElement) || !kind.dataset.presets || !kind.form) { return; }
    var preset = JSON.parse(kind.dataset.presets)[kind.value];
    if (!preset) { return; }
    var priority = kind.form.elements.namedItem("priority");
    var preemptible = kind.form.elements.namedItem("preemptible");
    if (priority) { priority.value = String(preset.priority); }
    if (preemptible) { preemptible.checked = Boolean(preset.preemptible); }
    kind.form.dispatchEvent(new Event("input", { bubbles: true }));
  });

  // A filtered list's URL names only the filters in use (/jobs/?state=running).
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || form.dataset.cleanQuery === undefined) { return; }
    Array.prototype.forEach.call(form.elements, function (field) {
      if (field.name && field.value === "") { field.disabled = true; }
    });
  });
})();
