// +Add on the Scheduling Configurations tab: adds an empty row in place (from the <template>
// the page carries) instead of the round trip the button makes without JavaScript. A file, not
// inline code: the Content-Security-Policy refuses inline scripts and handlers.
document.addEventListener("click", (event) => {
  const button = event.target instanceof Element ? event.target.closest("[data-add-rule]") : null;
  const form = button ? button.closest("form[data-rules-table]") : null;
  if (!form) return;
  const template = form.querySelector("template[data-empty-rule]");
  const rows = form.querySelector("[data-rule-rows]");
  const total = form.querySelector("input[name$='-TOTAL_FORMS']");
  if (!template || !rows || !total) return;
  event.preventDefault();
  const index = Number(total.value);
  const html = template.innerHTML.replaceAll("__prefix__", String(index)).replaceAll("__row__", String(index + 1));
  rows.insertAdjacentHTML("beforeend", html);
  total.value = String(index + 1);
  const added = rows.lastElementChild;
  const first = added ? added.querySelector("select, input, textarea") : null;
  if (first) first.focus();
});
