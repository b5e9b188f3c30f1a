// A <select data-autosubmit> submits its form when changed. A file, not an onchange="" attribute:
// the Content-Security-Policy refuses inline event handlers.
document.addEventListener("change", (event) => {
  const field = event.target;
  if (field instanceof HTMLSelectElement && field.dataset.autosubmit !== undefined && field.form) {
    field.form.requestSubmit();
  }
});
