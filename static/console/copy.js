// Copy buttons and select-on-focus for read-only fields that hold something to paste elsewhere
// (a node token and its agent command line). Delegated, so fields swapped into the action
// dialog by htmx work too; the Content-Security-Policy allows no inline handler.
(function () {
  "use strict";

  document.addEventListener("focusin", function (event) {
    if (event.target.matches && event.target.matches("[data-select-on-focus]")) { event.target.select(); }
  });

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) { return; }
    var field = document.getElementById(button.dataset.copy);
    if (!field) { return; }
    field.focus();
    field.select();
    var label = button.textContent;
    function done(words) {
      button.textContent = words;
      window.setTimeout(function () { button.textContent = label; }, 2000);
    }
    // The Clipboard API needs a secure context; elsewhere the selected field is copied by hand.
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(field.value).then(
        function () { done("Copied"); },
        function () { done("Press Ctrl+C to copy"); }
      );
    } else {
      done("Press Ctrl+C to copy");
    }
  });
})();
