// dawnpipe report pages: draw every chart with plotly.js (embedded once in the
// page before this script; no network). A chart is a div.chart followed by
// its figure as JSON in a script.chart-data element (dawnpipe.report.charts).
// A chart is drawn when it comes near the window (an IntersectionObserver):
// the page's tables are readable at once however many charts it holds, and a
// chart in a closed <details> (no size to draw into) is drawn when opened.
// Before printing, every chart is drawn. A chart drawn is marked data-drawn.
(function () {
  "use strict";
  var options = { displaylogo: false, responsive: true };
  var holders = Array.prototype.slice.call(document.querySelectorAll("div.chart"));
  function draw(holder) {
    if (holder.hasAttribute("data-drawn")) { return; }
    var spec = JSON.parse(holder.nextElementSibling.textContent);
    holder.setAttribute("data-drawn", "");
    Plotly.newPlot(holder, spec.data, spec.layout, options);
  }
  window.addEventListener("beforeprint", function () { holders.forEach(draw); });
  if (!("IntersectionObserver" in window)) {
    holders.forEach(draw);
    return;
  }
  var near = new IntersectionObserver(function (seen) {
    seen.forEach(function (entry) {
      if (entry.isIntersecting) {
        near.unobserve(entry.target);
        draw(entry.target);
      }
    });
  }, { rootMargin: "300px 0px" });
  holders.forEach(function (holder) { near.observe(holder); });
}());
