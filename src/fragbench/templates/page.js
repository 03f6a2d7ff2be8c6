/* The filters: each select keeps the items whose attribute (its data-attribute) matches its
   value, whole or as one of its words (data-match), and all of them when its value is empty;
   the count says how many are shown. The form is shown only here, when the script runs. The
   sticky header's height is kept as the scroll padding, so a link to a call is not hidden
   under it. */
(function () {
  "use strict";
  var header = document.querySelector("header.top");
  function pad() {
    if (header) {
      document.documentElement.style.setProperty("--head", (header.offsetHeight + 8) + "px");
    }
  }
  window.addEventListener("resize", pad);
  var form = document.querySelector("form.filters");
  if (form) {
    var items = Array.prototype.slice.call(document.querySelectorAll(form.dataset.items));
    var selects = Array.prototype.slice.call(form.querySelectorAll("select"));
    var shown = form.querySelector("output.shown");
    var apply = function () {
      var count = 0;
      items.forEach(function (item) {
        var keep = selects.every(function (select) {
          if (!select.value) { return true; }
          var have = item.getAttribute(select.dataset.attribute) || "";
          if (select.dataset.match === "word") {
            return have.split(/\s+/).indexOf(select.value) >= 0;
          }
          return have === select.value;
        });
        item.hidden = !keep;
        if (keep) { count += 1; }
      });
      if (shown) { shown.value = String(count); }
    };
    form.addEventListener("change", apply);
    form.addEventListener("reset", function () { window.setTimeout(apply, 0); });
    form.addEventListener("submit", function (event) { event.preventDefault(); });
    form.hidden = false;
    apply();
    /* A link to an item the filters hide (the call a stop names) shows everything again. */
    window.addEventListener("hashchange", function () {
      var id = window.location.hash.slice(1);
      try { id = decodeURIComponent(id); } catch (error) { /* malformed: use it as it is */ }
      var target = document.getElementById(id);
      if (target && target.closest("[hidden]")) {
        form.reset();
        apply();
        target.scrollIntoView();
      }
    });
  }
  pad();
}());
