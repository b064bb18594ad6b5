// dawnpipe leaderboard page: sortable and filterable tables, no network, no
// library. A table with class "sortable" sorts by a header click (again: the
// other way); a cell's data-sort (the unrounded value) is its sort key, else
// its text. A filter box above each such table hides the rows whose text does
// not contain what is typed.
(function () {
  "use strict";
  function key(cell) {
    var raw = cell.getAttribute("data-sort");
    var text = raw === null ? cell.textContent.trim() : raw;
    var number = Number(text);
    if (text !== "" && isFinite(number)) {
      return { number: true, value: number };
    }
    return { number: false, value: text.toLowerCase() };
  }
  function compare(a, b) {
    if (a.number && b.number) { return a.value - b.value; }
    if (a.number !== b.number) { return a.number ? -1 : 1; }  // numbers before text ("-", "did not converge")
    return a.value < b.value ? -1 : (a.value > b.value ? 1 : 0);
  }
  function sortBy(table, column, header) {
    var body = table.tBodies[0];
    var descending = header.getAttribute("aria-sort") === "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var order = compare(key(r.cells[column]), key(s.cells[column]));
      return descending ? -order : order;
    });
    rows.forEach(function (row) { body.appendChild(row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) { th.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", descending ? "descending" : "ascending");
  }
  function addFilter(table) {
    var box = document.createElement("input");
    box.type = "search";
    box.className = "filter";
    box.placeholder = "filter rows";
    box.setAttribute("aria-label", "filter the rows of the table below");
    box.addEventListener("input", function () {
      var wanted = box.value.trim().toLowerCase();
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        row.hidden = wanted !== "" && row.textContent.toLowerCase().indexOf(wanted) < 0;
      });
    });
    table.parentNode.insertBefore(box, table);
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    if (!table.tHead || !table.tBodies.length) { return; }
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (header, column) {
      header.title = "sort by this column";
      header.addEventListener("click", function () { sortBy(table, column, header); });
    });
    addFilter(table);
  });
}());
