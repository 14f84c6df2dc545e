/* msprof report: draws the figures, then adds to the timeline span labels (once a span is wide
   enough), step labels that never overlap (one row per rank), a selected span with its
   launch-to-kernel links and details, and to every table sortable columns. Names from the
   profile are only ever set as text (textContent, plotly annotation text is escaped here). */
(function () {
  "use strict";
  var CFG = {responsive: true, displaylogo: false, scrollZoom: true};
  var nodes = document.querySelectorAll("script[type='application/json'][id$='-data']");
  for (var i = 0; i < nodes.length; i++) {
    var fig = JSON.parse(nodes[i].textContent);
    Plotly.newPlot(nodes[i].id.slice(0, -5), fig.data, fig.layout, CFG);
  }
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function fmt(us) {
    return Math.abs(us) >= 10000 ? (us / 1000).toLocaleString("en-US", {maximumFractionDigits: 3}) + " ms"
      : us.toLocaleString("en-US", {maximumFractionDigits: 3}) + " us";
  }

  var gd = document.getElementById("fig-timeline");
  var storeNode = document.getElementById("timeline-store");
  var tl = null;
  if (gd && storeNode && gd.data) tl = timeline(gd, JSON.parse(storeNode.textContent));
  window.msprofTimeline = tl;

  function timeline(gd, st) {
    var n = st.lane_names.length, owner = {}, kernelOf = {}, kernelsOfOp = {}, kernelOfLaunch = {};
    var selected = null, mark = null, busy = false;
    st.lanes.forEach(function (L, li) {
      if (L) for (var k = 0; k < L.s.length; k++) owner[L.g + k] = [li, k];
    });
    st.links.forEach(function (l) {
      kernelOf[l[0]] = [l[1], l[2]];
      if (l[1] >= 0) (kernelsOfOp[l[1]] = kernelsOfOp[l[1]] || []).push(l[0]);
      if (l[2] >= 0) kernelOfLaunch[l[2]] = l[0];
    });
    function pos(li) { return n - 1 - li; }
    function span(g) {
      var o = owner[g];
      if (!o) return null;
      var L = st.lanes[o[0]];
      return {g: g, lane: o[0], s: L.s[o[1]], e: L.e[o[1]], name: st.names[L.n[o[1]]],
              unit: st.names[L.u[o[1]]], module: L.m ? st.names[L.m[o[1]]] : ""};
    }
    function view() {
      var xa = gd._fullLayout.xaxis;
      return {x0: xa.range[0], x1: xa.range[1], px: xa._length / (xa.range[1] - xa.range[0])};
    }
    function spanLabels(v) {
      var out = [], MAXL = 300;
      st.lanes.forEach(function (L, li) {
        if (!L) return;
        var cand = [];
        for (var k = 0; k < L.s.length; k++) {
          var a = Math.max(L.s[k], v.x0), b = Math.min(L.e[k], v.x1);
          var w = (b - a) * v.px;
          if (w >= 40) cand.push([w, a, b, k]);
        }
        cand.sort(function (p, q) { return q[0] - p[0]; });
        var placed = [];
        for (var c = 0; c < cand.length && out.length < MAXL; c++) {
          var a0 = cand[c][1], b0 = cand[c][2], clash = false;
          for (var j = 0; j < placed.length; j++)
            if (a0 < placed[j][1] && placed[j][0] < b0) { clash = true; break; }
          if (clash) continue;
          var name = st.names[L.n[cand[c][3]]], room = Math.floor((cand[c][0] - 8) / 6.2);
          if (room < 3) continue;
          placed.push([a0, b0]);
          out.push({x: (a0 + b0) / 2, y: pos(li), xref: "x", yref: "y", showarrow: false,
                    text: esc(name.length > room ? name.slice(0, room - 1) + "\u2026" : name),
                    font: {size: 10, color: "#fff"}, name: "span-label"});
        }
      });
      return out;
    }
    function stepLabels(v) {
      var out = [], rows = {};
      st.lane_ranks.forEach(function (r, li) { if (!(r in rows)) rows[r] = li; });
      Object.keys(rows).forEach(function (r) {
        var last = -Infinity, steps = st.steps.filter(function (s) { return String(s[0]) === r; });
        steps.sort(function (p, q) { return p[2] - q[2]; });
        for (var k = 0; k < steps.length && out.length < 400; k++) {
          var s = steps[k], a = Math.max(s[2], v.x0), b = Math.min(s[3], v.x1);
          if (b <= a) continue;
          var text = "step " + s[1], w = 6 * text.length + 8, mid = (a + b) / 2;
          var left = (mid - v.x0) * v.px - w / 2;
          if (left < last + 6 || w > (b - a) * v.px + 40) continue;
          last = left + w;
          out.push({x: mid, y: pos(rows[r]) + 0.5, xref: "x", yref: "y", yanchor: "top",
                    showarrow: false, text: text, font: {size: 10, color: "#333"},
                    name: "step-label"});
        }
      });
      return out;
    }
    function flows() {
      var out = [];
      if (selected === null) return out;
      var ks = [], me = span(selected);
      if (selected in kernelOf) ks = [selected];
      else if (selected in kernelsOfOp) ks = kernelsOfOp[selected].slice(0, 60);
      else if (selected in kernelOfLaunch) ks = [kernelOfLaunch[selected]];
      ks.forEach(function (g) {
        var k = span(g), from = kernelOf[g][1] >= 0 ? span(kernelOf[g][1]) : span(kernelOf[g][0]);
        if (!k || !from) return;
        out.push({x: k.s, y: pos(k.lane), ax: from.e, ay: pos(from.lane), xref: "x", yref: "y",
                  axref: "x", ayref: "y", showarrow: true, arrowhead: 2, arrowwidth: 1.5,
                  arrowcolor: "#111", text: "", name: "flow"});
      });
      if (!me) return out;
      return out;
    }
    function shapes() {
      var out = [], seen = {};
      st.lane_ranks.forEach(function (r, li) {
        if (li > 0 && !(r in seen))
          out.push({type: "line", xref: "paper", yref: "y", x0: 0, x1: 1, y0: pos(li) + 0.5,
                    y1: pos(li) + 0.5, line: {color: "#999", width: 1}});
        seen[r] = true;
      });
      if (mark) out.push({type: "rect", xref: "x", yref: "y", x0: mark.s, x1: mark.e,
                          y0: pos(mark.lane) - 0.3, y1: pos(mark.lane) + 0.3,
                          line: {color: "#000", width: 2.5}, fillcolor: "rgba(255,215,0,0.25)",
                          name: "highlight"});
      return out;
    }
    function redraw() {
      if (!gd._fullLayout || !gd._fullLayout.xaxis) return;
      var v = view();
      busy = true;
      Plotly.relayout(gd, {annotations: stepLabels(v).concat(spanLabels(v), flows()),
                           shapes: shapes()}).then(function () { busy = false; },
                                                   function () { busy = false; });
    }
    var pending = null;
    gd.on("plotly_relayout", function (ev) {
      if (busy) return;
      var keys = Object.keys(ev || {});
      if (!keys.some(function (k) { return k.indexOf("xaxis") === 0 || k === "autosize" || k === "width"; })) return;
      clearTimeout(pending);
      pending = setTimeout(redraw, 30);
    });
    gd.on("plotly_click", function (ev) {
      var p = ev && ev.points && ev.points[0];
      if (!p || p.customdata === undefined || p.customdata === null) return;
      select(Number(p.customdata));
    });
    var panel = document.getElementById("tl-details");
    function line(label, text, g) {
      var p = document.createElement("p"), b = document.createElement("b");
      b.textContent = label + ": ";
      p.appendChild(b);
      if (g === undefined) p.appendChild(document.createTextNode(text));
      else {
        var a = document.createElement("a");
        a.href = "#timeline"; a.textContent = text; a.className = "tl-jump"; a.dataset.g = g;
        a.addEventListener("click", function (e) { e.preventDefault(); select(g, true); });
        p.appendChild(a);
      }
      panel.appendChild(p);
    }
    function describe(x) {
      return x.name + " (" + x.unit + ") on " + st.lane_names[x.lane] + " at " + fmt(x.s) +
             ", " + fmt(x.e - x.s);
    }
    function select(g, zoom) {
      var x = span(g);
      if (!x) return;
      selected = g; mark = x;
      if (panel) {
        panel.textContent = "";
        line("Selected", describe(x));
        if (x.module) line("Module", x.module);
        var link = kernelOf[g];
        if (link) {
          if (link[1] >= 0) line("Launched by", describe(span(link[1])), link[1]);
          if (link[0] >= 0) {
            var op = span(link[0]);
            line("Op", describe(op), link[0]);
            if (op.module) line("Op module", op.module);
          }
        }
        if (g in kernelOfLaunch) line("Kernel", describe(span(kernelOfLaunch[g])), kernelOfLaunch[g]);
        if (g in kernelsOfOp) {
          var ks = kernelsOfOp[g];
          line("Kernels launched", String(ks.length));
          ks.slice(0, 20).forEach(function (k) { line("  kernel", describe(span(k)), k); });
        }
        panel.hidden = false;
      }
      if (zoom) {
        var d = Math.max((x.e - x.s) * 4, 5);
        Plotly.relayout(gd, {"xaxis.range": [x.s - d, x.e + d], "xaxis2.range": [x.s - d, x.e + d]});
      }
      redraw();
    }
    function highlight(laneName, s, e) {
      var li = st.lane_names.indexOf(laneName);
      mark = li >= 0 ? {lane: li, s: s, e: e} : null;
      selected = null;
      var d = Math.max((e - s) * 4, 5);
      busy = true;
      return Plotly.relayout(gd, {"xaxis.range": [s - d, e + d], "xaxis2.range": [s - d, e + d]})
        .then(function () { busy = false; redraw(); });
    }
    setTimeout(redraw, 0);  // labels after the first draw, which they never delay
    return {select: select, highlight: highlight, redraw: redraw};
  }

  // a finding's op link zooms the timeline onto where that op ran longest and marks it
  var links = document.querySelectorAll("a.op-link");
  for (var j = 0; j < links.length; j++) {
    links[j].addEventListener("click", function () {
      var s = parseFloat(this.dataset.start), e = parseFloat(this.dataset.end);
      if (tl) tl.highlight(this.dataset.lane || "", s, e);
    });
  }

  // sortable tables: a click on a header sorts by that column (again: the other way)
  var heads = document.querySelectorAll("table.sortable th");
  for (var h = 0; h < heads.length; h++) {
    heads[h].addEventListener("click", function () {
      var th = this, table = th.closest("table"), body = table.tBodies[0];
      var col = Array.prototype.indexOf.call(th.parentNode.children, th);
      var numeric = th.dataset.numeric === "1", dir = th.dataset.dir === "asc" ? -1 : 1;
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        if (numeric) { x = parseFloat(x); y = parseFloat(y); x = isNaN(x) ? -Infinity : x; y = isNaN(y) ? -Infinity : y; }
        return x < y ? -dir : x > y ? dir : 0;
      });
      rows.forEach(function (r) { body.appendChild(r); });
      var all = th.parentNode.children;
      for (var k = 0; k < all.length; k++) { all[k].dataset.dir = ""; all[k].classList.remove("asc", "desc"); }
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      th.classList.add(dir === 1 ? "asc" : "desc");
    });
  }
})();
