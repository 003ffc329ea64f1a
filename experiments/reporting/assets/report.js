// atnat grid report: inlined into report.html; no external resources.
// Sorts any table.sortable by a header click (or Enter / Space on a focused header): numbers by
// the data-v value behind a cell (else its text, or the signed number leading a value with its unit or
// interval), text with numeric-aware collation, missing
// values ("", "–") last in both directions. The first sort of a column with data-better puts its
// best value first. Opens a folded <details> when the address names it or something inside it.
// Folds an overview's secondary columns behind a button.
(function () {
  "use strict";
  var NUMBER = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i;
  // a value followed by its unit or interval ("-1.08 [-2.13, -0.02]", "2.59\u00d7 [1.93, 3.48]"): its number
  var LEADING = /^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?(?=\u00d7|%|\s*[\[(])/i;
  var MISSING = { "": true, "\u2013": true, "\u2014": true, "-": true };

  function key(cell) {
    var raw = (cell.hasAttribute("data-v") ? cell.getAttribute("data-v") : cell.textContent).trim();
    if (MISSING[raw]) return { missing: true };
    if (NUMBER.test(raw)) return { num: parseFloat(raw) };
    var lead = raw.match(LEADING);
    return lead ? { num: parseFloat(lead[0]) } : { text: raw };
  }

  function compare(a, b) {
    if (a.num !== undefined && b.num !== undefined) return a.num - b.num;
    var x = a.num !== undefined ? String(a.num) : a.text;
    var y = b.num !== undefined ? String(b.num) : b.text;
    return x.localeCompare(y, undefined, { numeric: true, sensitivity: "base" });
  }

  function sortTable(table, column, descending) {
    var body = table.tBodies[0];
    var keyed = Array.prototype.map.call(body.rows, function (row, i) {
      return { row: row, key: key(row.cells[column]), i: i };
    });
    keyed.sort(function (p, q) {
      var gap = (p.key.missing ? 1 : 0) - (q.key.missing ? 1 : 0);
      if (gap || p.key.missing) return gap || p.i - q.i;
      var c = compare(p.key, q.key);
      return (descending ? -c : c) || p.i - q.i;
    });
    keyed.forEach(function (k) { body.appendChild(k.row); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, j) {
      if (j === column) th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    });
  }

  function sortBy(th) {
    var current = th.getAttribute("aria-sort");
    var descending = current ? current === "ascending" : th.getAttribute("data-better") === "higher";
    sortTable(th.closest("table"), th.cellIndex, descending);
  }

  function openTarget() {
    var target = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    for (var el = target; el; el = el.parentElement) {
      if (el.tagName === "DETAILS") el.open = true;
    }
  }

  document.querySelectorAll("table.sortable thead th").forEach(function (th) {
    th.tabIndex = 0;
    th.addEventListener("click", function () { sortBy(th); });
    th.addEventListener("keydown", function (e) {
      if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th); }
    });
  });
  // the overview folds its secondary columns (th.sec, td.sec) behind a button, so that the first
  // screen fits a 1400 px window; the button shows them all and hides them again
  document.querySelectorAll("div.folded-columns > button.more-columns").forEach(function (button) {
    var label = button.textContent;
    button.addEventListener("click", function () {
      var open = button.parentElement.classList.toggle("all");
      button.setAttribute("aria-expanded", open ? "true" : "false");
      button.textContent = open ? "Show fewer columns" : label;
    });
  });
  window.addEventListener("hashchange", openTarget);
  openTarget();
  window.atnatReport = { sortTable: sortTable };
  document.body.setAttribute("data-report-ready", "1");
})();
