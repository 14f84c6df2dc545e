/* msprof report: draws the figures, then adds to the timeline span labels (once a span is wide
   enough), step labels that never overlap (one row per rank), a selected span with its
   launch-to-kernel links and details, and to every table sortable columns. Names from the
   profile are only ever set as text (textContent, plotly annotation text is escaped here). */
(function () {
  "use strict";
  var CFG = {responsive: true, displaylogo: false, scrollZoom: true};
  var storeNode = document.getElementById("timeline-store");
  var store = storeNode ? JSON.parse(storeNode.textContent) : null;

  // typed arrays: {dtype, bdata} (base64), zlib-compressed when z is set
  var TYPES = {u1: Uint8Array, u2: Uint16Array, u4: Uint32Array, i4: Int32Array,
               f4: Float32Array, f8: Float64Array};
  function bytes(b64) {
    var bin = atob(b64), out = new Uint8Array(bin.length);
    for (var k = 0; k < bin.length; k++) out[k] = bin.charCodeAt(k);
    return out;
  }
  function decode(spec) { return new TYPES[spec.dtype](bytes(spec.bdata).buffer); }
  function inflate(spec) {
    var raw = new Blob([bytes(spec.bdata)]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(raw).arrayBuffer().then(function (buf) { return new TYPES[spec.dtype](buf); });
  }
  var HOVER_POINTS = 2000;
  // where spans can be hovered: each at its middle, long ones also along them
  function hoverPoints(s, e, points) {
    var lo = Infinity, hi = -Infinity, sum = 0, xs = [], idx = [];
    for (var k = 0; k < s.length; k++) { lo = Math.min(lo, s[k]); hi = Math.max(hi, e[k]); sum += e[k] - s[k]; }
    var scale = Math.max(hi - lo, sum), step = scale > 0 ? scale / points : 1;
    for (k = 0; k < s.length; k++) {
      var d = e[k] - s[k], m = Math.min(points, Math.max(1, Math.ceil(d / step)));
      for (var j = 0; j < m; j++) { xs.push(s[k] + (j + 0.5) * d / m); idx.push(k); }
    }
    return [xs, idx];
  }
  // spans (sorted by start) joined where the next starts less than ``gap`` after the reach of
  // those before it: each result covers the spans it joined
  function merged(s, e, gap) {
    var os = [], oe = [];
    if (!s.length) return [os, oe];
    var a = s[0], b = e[0];
    for (var k = 1; k < s.length; k++) {
      if (s[k] <= b + gap) { if (s[k] < a) a = s[k]; if (e[k] > b) b = e[k]; }
      else { os.push(a); oe.push(b); a = s[k]; b = e[k]; }
    }
    os.push(a); oe.push(b);
    return [os, oe];
  }
  function segments(s, e, y) {
    var xs = new Float64Array(3 * s.length), ys = new Float64Array(3 * s.length).fill(y);
    for (var k = 0; k < s.length; k++) { xs[3 * k] = s[k]; xs[3 * k + 1] = e[k]; xs[3 * k + 2] = NaN; }
    return [xs, ys];
  }
  // number formats made once (toLocaleString with options builds one per call: slow)
  var NUM = [0, 1, 2, 3].map(function (d) {
    return new Intl.NumberFormat("en-US", {minimumFractionDigits: d, maximumFractionDigits: d});
  });
  var UPTO3 = new Intl.NumberFormat("en-US", {maximumFractionDigits: 3});
  // the same text as NUM[digits].format(v), ~10x faster (thousands of bin hover texts)
  function num(v, digits) {
    if (!isFinite(v) || Math.abs(v) >= 1e21) return NUM[digits].format(v);
    var t = v.toFixed(digits), dot = t.indexOf("."), whole = dot < 0 ? t : t.slice(0, dot);
    var sign = whole.charAt(0) === "-" ? "-" : "";
    if (sign) whole = whole.slice(1);
    if (whole.length > 3) whole = whole.replace(/\B(?=(\d{3})+$)/g, ",");
    return sign + whole + (dot < 0 ? "" : t.slice(dot));
  }
  function arr(v) { return v && v.bdata !== undefined ? decode(v) : v; }
  function concat(parts) {
    var n = 0, k = 0;
    parts.forEach(function (p) { n += p.length; });
    var out = new Float64Array(n);
    parts.forEach(function (p) { out.set(p, k); k += p.length; });
    return out;
  }
  // a stored hover text as plotly shows it: the name bold (up to a tab), lines split by "\n"
  function hoverHtml(text) {
    var cut = text.indexOf("\t");
    var name = cut < 0 ? text : text.slice(0, cut), rest = cut < 0 ? "" : text.slice(cut + 1);
    return "<b>" + name + "</b>" + rest.split("\n").join("<br>");
  }
  // the hover text of each drawn span of global indices ``gs`` (stored once per span)
  function hoverTexts(st, gs) {
    var drawn = [];
    st.lanes.forEach(function (L) {
      if (L && L.h) { if (!L.hd) L.hd = decode(L.h); drawn.push(L); }
    });
    var memo = {}, out = new Array(gs.length), li = 0;
    for (var k = 0; k < gs.length; k++) {
      var g = gs[k];
      if (!(li < drawn.length && g >= drawn[li].g && g < drawn[li].g + drawn[li].s.length)) {
        for (li = 0; li < drawn.length; li++)
          if (g >= drawn[li].g && g < drawn[li].g + drawn[li].s.length) break;
      }
      if (li >= drawn.length) { out[k] = ""; li = 0; continue; }
      var code = drawn[li].hd[g - drawn[li].g];
      out[k] = memo[code] || (memo[code] = hoverHtml(st.names[code]));
    }
    return out;
  }
  // The timeline's spans as few traces as possible (each WebGL trace costs the page time to
  // draw): one line trace per unit over every lane, one trace of hover markers for all. Its
  // pieces: per lane and unit its segments and hover points, from the span store (lanes drawn
  // span by span) or from the bins' columns (binned lanes); a
  // binned lane zoomed in far enough swaps its bins' pieces for its spans'.
  function compose(data, st) {
    var T = {units: [], lines: {}, pieces: [], binned: st.binned || []};
    var rest = [];
    function unit(u, color, legend) {
      if (!(u in T.lines)) { T.lines[u] = {color: color, legend: false}; T.units.push(u); }
      if (legend) T.lines[u].legend = true;
    }
    for (var i = 0; i < data.length; i++) rest.push(data[i]);
    // lanes drawn span by span: per unit its segments and hover markers (each carrying its
    // span's global index), from the span store's columns
    st.lanes.forEach(function (L) {
      if (!L || !L.units) return;
      L.units.forEach(function (U) {
        var s = [], e = [], g = [];
        for (var k = 0; k < L.s.length; k++)
          if (st.names[L.u[k]] === U.unit) { s.push(L.s[k]); e.push(L.e[k]); g.push(L.g + k); }
        unit(U.unit, U.color, U.legend);
        var seg = segments(s, e, L.y), hp = hoverPoints(s, e, HOVER_POINTS);
        var cd = hp[1].map(function (k) { return g[k]; });
        T.pieces.push({unit: U.unit, lx: seg[0], ly: seg[1]});
        T.pieces.push({unit: U.unit, mx: hp[0], my: new Float64Array(cd.length).fill(L.y),
                       text: hoverTexts(st, cd), color: U.color, custom: cd});
      });
    });
    // the first view shows the whole profile: there, bins closer than a pixel are drawn as one
    // segment ("coarse": a few hundred segments per lane instead of thousands; each WebGL
    // segment costs draw time in a software renderer); zoomed in, every bin is drawn
    var lo = Infinity, hi = -Infinity;
    T.binned.forEach(function (b) {
      b.units.forEach(function (u) {
        u.cols = {s: decode(u.s), e: decode(u.e), c: decode(u.c), busy: decode(u.busy),
                  span: decode(u.span), top: decode(u.top)};
        if (u.cols.s.length) { lo = Math.min(lo, u.cols.s[0]); hi = Math.max(hi, u.cols.e[u.cols.e.length - 1]); }
      });
    });
    var figNode = document.getElementById("fig-timeline");
    var gap = (hi - lo) / Math.max(200, (figNode && figNode.clientWidth) || 1400);
    T.extent = [lo, hi, gap];
    T.binned.forEach(function (b) {
      var total = 0;
      b.units.forEach(function (u) { total += u.cols.s.length; });
      b.mode = "coarse"; b.bins = []; b.coarse = []; b.spans = [];
      b.units.forEach(function (u) {
        var c = u.cols, seg = segments(c.s, c.e, b.lane), m = merged(c.s, c.e, gap);
        var cseg = segments(m[0], m[1], b.lane);
        b.coarse.push({unit: u.unit, lx: cseg[0], ly: cseg[1]});
        unit(u.unit, u.color, u.legend);
        var hp = hoverPoints(c.s, c.e, Math.max(50, Math.round(HOVER_POINTS * c.s.length / total)));
        var text = hp[1].map(function (k) {
          var ext = c.e[k] - c.s[k], share = ext > 0 ? c.busy[k] / ext : 1;
          return "<b>" + num(c.c[k], 0) + " spans aggregated</b><br>" +
            num(c.s[k], 1) + " us to " + num(c.e[k], 1) + " us<br>busy: " + num(c.busy[k], 1) +
            " us (" + Math.round(share * 100) + "% of the bin)<br>span time: " +
            num(c.span[k], 1) + " us<br>most time: " + esc(st.names[c.top[k]]);
        });
        b.bins.push({unit: u.unit, lx: seg[0], ly: seg[1]});
        var marks = {unit: u.unit, mx: hp[0], my: new Float64Array(hp[0].length).fill(b.lane),
                     text: text, color: u.color, custom: null};
        b.bins.push(marks);
        b.coarse.push(marks);
      });
    });
    T.lineIdx = {};
    T.units.forEach(function (u) {
      T.lineIdx[u] = rest.length;
      rest.push({type: "scattergl", x: [], y: [], mode: "lines", line: {width: 14, color: T.lines[u].color},
                 hoverinfo: "skip", showlegend: T.lines[u].legend, legendgroup: u, name: u,
                 xaxis: "x", yaxis: "y"});
    });
    T.markerIdx = rest.length;
    rest.push({type: "scattergl", x: [], y: [], mode: "markers", marker: {size: 6, opacity: 0.35},
               hoverinfo: "text", showlegend: false, name: "spans", xaxis: "x", yaxis: "y"});
    fill(T, rest, T.units);
    // the lanes' traces first, as in the figure (hover breaks when the step lines come first)
    var first = rest.length - T.units.length - 1, lanes = rest.slice(first);
    T.markerIdx -= first;
    T.units.forEach(function (u) { T.lineIdx[u] -= first; });
    return [lanes.concat(rest.slice(0, first)), T];
  }
  // every piece now drawn: the drawn lanes', and per binned lane its bins or its spans
  function current(T) {
    var out = T.pieces.slice();
    T.binned.forEach(function (b) { out = out.concat(b[b.mode === "detail" ? "spans" : b.mode]); });
    return out;
  }
  // the line traces of ``units`` and the markers trace, from the current pieces
  function fill(T, data, units) {
    var all = current(T);
    units.forEach(function (u) {
      var mine = all.filter(function (p) { return p.unit === u && p.lx; });
      data[T.lineIdx[u]].x = concat(mine.map(function (p) { return p.lx; }));
      data[T.lineIdx[u]].y = concat(mine.map(function (p) { return p.ly; }));
    });
    var ms = all.filter(function (p) { return p.mx; }), text = [], color = [], custom = [];
    ms.forEach(function (p) {
      for (var k = 0; k < p.mx.length; k++) {
        text.push(p.text[k]);
        color.push(typeof p.color === "string" ? p.color : p.color[k]);
        custom.push(p.custom ? p.custom[k] : -1);
      }
    });
    var m = data[T.markerIdx];
    m.x = concat(ms.map(function (p) { return p.mx; }));
    m.y = concat(ms.map(function (p) { return p.my; }));
    m.hovertext = text; m.marker.color = color; m.customdata = custom;
  }
  var nodes = document.querySelectorAll("script[type='application/json'][id$='-data']");
  for (var i = 0; i < nodes.length; i++) {
    var fig = JSON.parse(nodes[i].textContent), id = nodes[i].id.slice(0, -5);
    if (id === "fig-timeline" && store) {
      var made = compose(fig.data, store);
      fig.data = made[0];
      store.T = made[1];
    }
    var drawn = Plotly.newPlot(id, fig.data, fig.layout, CFG);
    // readiness: the timeline drawn and the frame showing it painted (two animation frames
    // after plotly's promise), for benchmarks and tests
    if (id === "fig-timeline") drawn.then(function () {
      requestAnimationFrame(function () {
        requestAnimationFrame(function () { window.msprofTimelineReady = performance.now(); });
      });
    });
  }
  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function fmt(us) {
    return Math.abs(us) >= 10000 ? UPTO3.format(us / 1000) + " ms" : UPTO3.format(us) + " us";
  }

  var gd = document.getElementById("fig-timeline");
  var tl = null;
  if (gd && store && gd.data) tl = timeline(gd, store);
  window.msprofTimeline = tl;

  function timeline(gd, st) {
    var n = st.lane_names.length, owner = {};
    var selected = null, mark = null, busy = false;
    // the spans of a binned lane drawn one by one: global index DBASE + lane * DSTRIDE + k,
    // k the span's place in the lane's time order (the same whatever the view)
    var DBASE = 1e12, DSTRIDE = 1e9, MAXD = st.max_spans, CHUNK = st.chunk;
    st.lanes.forEach(function (L, li) {
      if (!L) return;
      ["id", "op", "tk"].forEach(function (f) { if (L[f]) L[f] = arr(L[f]); });
      for (var k = 0; k < L.s.length; k++) owner[L.g + k] = [li, k];
    });
    function pos(li) { return n - 1 - li; }
    function span(g) {
      var o = owner[g];
      var L = null, k = -1;
      if (g >= DBASE) {  // a span of a binned lane: from its chunk, once inflated
        var dl = Math.floor((g - DBASE) / DSTRIDE), key = g - DBASE - dl * DSTRIDE;
        var b = binnedAt[dl], c = b && b.chunks[Math.floor(key / CHUNK)];
        if (c && c.data) { o = [dl, key % CHUNK]; L = c.data; }
      } else if (o) L = st.lanes[o[0]];
      if (!o || !L) return null;
      k = o[1];
      return {g: g, lane: o[0], rank: st.lane_ranks[o[0]], kind: st.lane_kinds[o[0]],
              s: L.s[k], e: L.e[k], name: st.names[L.n[k]], unit: st.names[L.u[k]],
              module: L.m ? st.names[L.m[k]] : "", site: L.c ? st.names[L.c[k]] : "",
              id: L.id ? L.id[k] : -1, op: L.op ? L.op[k] : -1, tk: L.tk ? L.tk[k] : -1};
    }
    var binnedAt = {};  // lane index -> its binned entry (chunks numbered in time order)
    (st.binned || []).forEach(function (b) {
      binnedAt[n - 1 - b.lane] = b;
      b.chunks.forEach(function (c, i) { c.i = i; });
    });
    // spans by id, per lane (made on first use; a detail lane's anew after each redraw)
    function byField(L, f) {
      L.by = L.by || {};
      if (!L.by[f]) {
        var m = new Map(), col = L[f];
        for (var k = 0; col && k < col.length; k++) {
          if (col[k] < 0) continue;
          var got = m.get(col[k]);
          if (got === undefined) m.set(col[k], [k]); else got.push(k);
        }
        L.by[f] = m;
      }
      return L.by[f];
    }
    // the spans of lanes of ``kind`` of ``rank`` whose ``f`` is ``v`` (a promise of global
    // indices): on lanes drawn span by span, and in the detail chunks of binned lanes whose
    // range of ``f`` holds ``v`` (inflated for it: the linked span may lie outside the view)
    function find(rank, kind, f, v) {
      var out = [], waits = [];
      if (v === undefined || v < 0) return Promise.resolve(out);
      st.lanes.forEach(function (L, li) {
        if (!L || L.detail || st.lane_ranks[li] !== rank || st.lane_kinds[li] !== kind) return;
        (byField(L, f).get(v) || []).forEach(function (k) { out.push(L.g + k); });
      });
      Object.keys(binnedAt).forEach(function (key) {
        var li = Number(key), b = binnedAt[li];
        if (st.lane_ranks[li] !== rank || st.lane_kinds[li] !== kind) return;
        b.chunks.forEach(function (c) {
          var r = c.r && c.r[f];
          if (!r || v < r[0] || v > r[1]) return;
          waits.push(chunkSpans(c).then(function (d) {
            (byField(d, f).get(v) || []).forEach(function (k) {
              out.push(DBASE + li * DSTRIDE + c.i * CHUNK + k);
            });
          }));
        });
      });
      return Promise.all(waits).then(function () { return out; });
    }
    // what a span is linked to (a promise): a kernel's op and launch, a launch's kernel, an
    // op's kernels
    function links(x) {
      if (x.kind === "stream")
        return Promise.all([find(x.rank, "thread", "id", x.op), find(x.rank, "launch", "tk", x.id)])
          .then(function (a) { return {op: a[0][0], launch: a[1][0]}; });
      if (x.kind === "launch")
        return find(x.rank, "stream", "id", x.tk).then(function (a) { return {kernel: a[0]}; });
      if (x.kind === "thread")
        return find(x.rank, "stream", "op", x.id).then(function (a) { return {kernels: a}; });
      return Promise.resolve({});
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
    var arrows = [];  // [from, to] global indices of the selection's launch/op -> kernel
    function flows() {
      var out = [];
      if (selected === null) return out;
      arrows.forEach(function (a) {
        var from = span(a[0]), k = span(a[1]);
        if (!from || !k) return;
        out.push({x: k.s, y: pos(k.lane), ax: from.e, ay: pos(from.lane), xref: "x", yref: "y",
                  axref: "x", ayref: "y", showarrow: true, arrowhead: 2, arrowwidth: 1.5,
                  arrowcolor: "#111", text: "", name: "flow"});
      });
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
    // a binned lane's spans in view, from its detail chunks (inflated once, then kept)
    var EXTRA = ["m", "c", "id", "op", "tk"], DELTAS = {id: 1, op: 1, tk: 1};
    function chunkSpans(c) {
      if (!c.spans) {
        var keys = EXTRA.filter(function (f) { return c[f]; });
        c.spans = Promise.all([inflate(c.ds), inflate(c.d), inflate(c.nm), inflate(c.u)]
          .concat(keys.map(function (f) { return inflate(c[f]); })))
          .then(function (a) {
            var s = new Float64Array(c.n), e = new Float64Array(c.n), t = c.t0;
            for (var k = 0; k < c.n; k++) { t += a[0][k]; s[k] = t / 1e3; e[k] = (t + a[1][k]) / 1e3; }
            var out = {s: s, e: e, n: a[2], u: a[3], i: c.i};
            c.data = out;
            keys.forEach(function (f, j) {
              var col = a[4 + j];
              if (DELTAS[f]) {  // ids are stored as deltas
                var sum = new Float64Array(col.length), acc = 0;
                for (var q = 0; q < col.length; q++) { acc += col[q]; sum[q] = acc; }
                col = sum;
              }
              out[f] = col;
            });
            return out;
          });
      }
      return c.spans;
    }
    // redraw the traces of a binned lane's units (and the markers) after a change of mode
    function refill(b) {
      var T = st.T, units = b.units.map(function (u) { return u.unit; });
      var data = {};
      data[T.markerIdx] = {marker: {}};
      units.forEach(function (u) { data[T.lineIdx[u]] = {}; });
      fill(T, data, units);
      var idx = units.map(function (u) { return T.lineIdx[u]; });
      return Plotly.restyle(gd, {x: idx.map(function (k) { return data[k].x; }),
                                 y: idx.map(function (k) { return data[k].y; })}, idx)
        .then(function () {
          var m = data[T.markerIdx];
          return Plotly.restyle(gd, {x: [m.x], y: [m.y], hovertext: [m.hovertext],
                                     "marker.color": [m.marker.color], customdata: [m.customdata]},
                                [T.markerIdx]);
        });
    }
    // a binned lane drawn as bins: coarse while the view holds every bin (then a gap of less
    // than a pixel of the first view is less than a pixel of this one), each bin once zoomed in
    function binsOn(b, li, v) {
      var x = st.T.extent, want = v.x0 <= x[0] + x[2] && v.x1 >= x[1] - x[2] ? "coarse" : "bins";
      if (b.mode === want) return null;
      b.mode = want; b.spans = [];
      st.lanes[li] = null;
      return refill(b);
    }
    function detailOn(b, li, parts, v) {
      var D = {s: [], e: [], n: [], u: [], K: [], detail: true}, S = D.s, E = D.e, N = D.n, U = D.u;
      var extra = EXTRA.filter(function (f) { return parts.length && parts[0][f]; });
      extra.forEach(function (f) { D[f] = []; });
      parts.forEach(function (p) {
        for (var k = 0; k < p.s.length; k++)
          if (p.e[k] >= v.x0 && p.s[k] <= v.x1) {
            S.push(p.s[k]); E.push(p.e[k]); N.push(p.n[k]); U.push(p.u[k]);
            D.K.push(p.i * CHUNK + k);
            for (var j = 0; j < extra.length; j++) D[extra[j]].push(p[extra[j]][k]);
          }
      });
      if (S.length > MAXD) return binsOn(b, li, v);
      b.mode = "detail";
      var base = DBASE + li * DSTRIDE, y = n - 1 - li;
      D.g = base;
      st.lanes[li] = D;
      b.spans = [];
      b.units.forEach(function (u) {
        var s = [], e = [];
        for (var k = 0; k < S.length; k++) if (st.names[U[k]] === u.unit) { s.push(S[k]); e.push(E[k]); }
        var seg = segments(s, e, y);
        b.spans.push({unit: u.unit, lx: seg[0], ly: seg[1]});
      });
      var hp = hoverPoints(S, E, HOVER_POINTS), colors = {};
      b.units.forEach(function (u) { colors[u.unit] = u.color; });
      b.spans.push({unit: "", mx: Float64Array.from(hp[0]), my: new Float64Array(hp[0].length).fill(y),
        text: hp[1].map(function (k) {
          return "<b>" + esc(st.names[N[k]]) + "</b> (" + esc(st.names[U[k]]) + ")<br>start: " +
            fmt(S[k]) + "<br>duration: " + fmt(E[k] - S[k]);
        }),
        color: hp[1].map(function (k) { return colors[st.names[U[k]]] || "#888"; }),
        custom: hp[1].map(function (k) { return base + D.K[k]; })});
      return refill(b);
    }
    function detail(v, me) {
      return Promise.all((st.binned || []).map(function (b) {
        var li = n - 1 - b.lane;
        var want = b.chunks.filter(function (c) { return c.b >= v.x0 && c.a <= v.x1; });
        var count = want.reduce(function (t, c) { return t + c.n; }, 0);
        var missing = b.until !== undefined && v.x1 >= b.until;
        if (missing || count > MAXD + 2 * CHUNK) return binsOn(b, li, v);
        return Promise.all(want.map(chunkSpans)).then(function (parts) {
          return me === gen ? detailOn(b, li, parts, v) : null;
        });
      }));
    }
    var gen = 0;  // the latest redraw: an older one that finishes later changes nothing
    // the labels, links and shapes drawn now (the figure's own at first: none)
    var drawnKey = JSON.stringify({annotations: gd.layout.annotations || [], shapes: gd.layout.shapes || []});
    function redraw() {
      if (!gd._fullLayout || !gd._fullLayout.xaxis) return Promise.resolve();
      var me = ++gen;
      outline.style.display = "none";
      return detail(view(), me).then(function () {
        if (me !== gen) return null;
        var v = view(), edit = {annotations: stepLabels(v).concat(spanLabels(v), flows()),
                                shapes: shapes()};
        // a new annotations or shapes array replots every trace (WebGL included: seconds on
        // a large profile in a software renderer), so only when they changed
        var key = JSON.stringify(edit);
        if (key === drawnKey) return null;
        drawnKey = key;
        return Plotly.relayout(gd, edit);
      }).then(function () { api.drawn = true; }, function (err) { console.warn(String(err)); });
    }
    var pending = null;
    gd.on("plotly_relayout", function (ev) {
      if (busy) return;
      var keys = Object.keys(ev || {});
      if (!keys.some(function (k) { return k.indexOf("xaxis") === 0 || k === "autosize" || k === "width"; })) return;
      clearTimeout(pending);
      pending = setTimeout(redraw, 30);
    });
    // the span under the mouse gets an outline: a box over the plot, outside plotly (a
    // relayout would end the hover it follows)
    var outline = document.createElement("div");
    outline.className = "tl-hover";
    outline.style.cssText = "position:absolute;pointer-events:none;border:2px solid #111;" +
      "border-radius:2px;display:none;box-sizing:border-box";
    gd.style.position = "relative";
    gd.appendChild(outline);
    gd.on("plotly_hover", function (ev) {
      var p = ev && ev.points && ev.points[0];
      var g = p && p.customdata !== undefined && p.customdata !== null && p.customdata >= 0 ? Number(p.customdata) : null;
      var x = g === null ? null : span(g);
      if (!x) { outline.style.display = "none"; return; }
      var xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
      var a = Math.max(xa.l2p(x.s), 0), b = Math.min(xa.l2p(x.e), xa._length);
      var yc = ya.l2p(pos(x.lane));
      outline.style.left = (xa._offset + a - 2) + "px";
      outline.style.width = Math.max(b - a + 4, 6) + "px";
      outline.style.top = (ya._offset + yc - 10) + "px";
      outline.style.height = "20px";
      outline.style.display = "block";
      outline.dataset.g = String(g);
    });
    gd.on("plotly_unhover", function () { outline.style.display = "none"; });
    gd.on("plotly_click", function (ev) {
      var p = ev && ev.points && ev.points[0];
      if (!p || p.customdata === undefined || p.customdata === null || p.customdata < 0) return;
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
    var choosing = 0;  // the latest selection: an older one resolving later changes nothing
    function select(g, zoom) {
      var x = span(g);
      if (!x) return Promise.resolve();
      var me = ++choosing;
      selected = g; mark = x; arrows = [];
      if (zoom) {
        var d = Math.max((x.e - x.s) * 4, 5);
        Plotly.relayout(gd, {"xaxis.range": [x.s - d, x.e + d], "xaxis2.range": [x.s - d, x.e + d]});
      }
      return links(x).then(function (l) {
        // an op's kernels: each one's own launch, for its arrow
        var ks = x.kind === "stream" ? [] : l.kernels ? l.kernels.slice(0, 60) : l.kernel !== undefined ? [l.kernel] : [];
        return Promise.all(ks.map(function (k) { var y = span(k); return y ? links(y) : {}; }))
          .then(function (kl) { return [l, ks, kl]; });
      }).then(function (got) {
        if (me !== choosing) return null;
        var l = got[0], ks = got[1], kl = got[2];
        if (x.kind === "stream") {
          var from = l.launch !== undefined ? l.launch : l.op;
          if (from !== undefined) arrows.push([from, g]);
        }
        ks.forEach(function (k, j) {
          var from = kl[j].launch !== undefined ? kl[j].launch : kl[j].op;
          if (from !== undefined) arrows.push([from, k]);
        });
        if (panel) {
          panel.textContent = "";
          line("Selected", describe(x));
          if (x.module) line("Module", x.module);
          if (x.site) line("Call site", x.site);
          if (l.launch !== undefined) line("Launched by", describe(span(l.launch)), l.launch);
          if (l.op !== undefined) {
            var op = span(l.op);
            line("Op", describe(op), l.op);
            if (op.module) line("Op module", op.module);
            if (op.site) line("Op call site", op.site);
          }
          if (l.kernel !== undefined) line("Kernel", describe(span(l.kernel)), l.kernel);
          if (l.kernels && l.kernels.length) {
            line("Kernels launched", String(l.kernels.length));
            l.kernels.slice(0, 20).forEach(function (k) { line("  kernel", describe(span(k)), k); });
          }
          panel.hidden = false;
        }
        return redraw();
      });
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
    // labels after the page has loaded and drawn: they never delay its first draw
    if (document.readyState === "complete") setTimeout(redraw, 0);
    else window.addEventListener("load", function () { setTimeout(redraw, 0); });
    var api = {select: select, highlight: highlight, redraw: redraw, drawn: false};
    return api;
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
