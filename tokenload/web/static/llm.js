/* tokenload live LLM charts: polls api/series and draws line charts on <canvas>.
 * No dependencies, nothing loaded from elsewhere. After each draw every chart's canvas carries
 * data-points (the finite points drawn) and window.__tokenloadCharts[id] = {points, series}. */
(function () {
  "use strict";

  var POLL_MS = 1500;
  var MAX_POINTS = 20000;
  var root = document.documentElement;
  var params = new URLSearchParams(window.location.search);

  root.dataset.embed = params.get("embed") === "1" ? "1" : "0";
  var theme = params.get("theme");
  if (theme !== "dark" && theme !== "light") {
    theme = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }
  root.dataset.theme = theme;

  var errors = [];
  function noteError(msg) {
    errors.push(String(msg));
    root.dataset.errors = String(errors.length);
    var banner = document.getElementById("error-banner");
    if (banner) {
      banner.hidden = false;
      banner.textContent = "Error: " + errors[errors.length - 1];
    }
  }
  window.addEventListener("error", function (ev) { noteError(ev.message || "script error"); });
  window.addEventListener("unhandledrejection", function (ev) { noteError(ev.reason || "promise rejected"); });

  // -- what is charted -----------------------------------------------------------------------
  var C = {
    blue: "#1f77b4", red: "#d62728", green: "#2ca02c", purple: "#9467bd",
    orange: "#ff7f0e", brown: "#8c564b", gray: "#7f7f7f"
  };
  var CHARTS = [
    {
      id: "ttft", title: "Time to first token", unit: "ms", yLabel: "TTFT (ms)", window: true,
      lines: [
        { src: "client", key: "ttft_p50", name: "p50", color: C.blue },
        { src: "client", key: "ttft_p99", name: "p99", color: C.red }
      ]
    },
    {
      id: "tpot", title: "Time per output token", unit: "ms", yLabel: "TPOT (ms)", window: true,
      lines: [
        { src: "client", key: "tpot_p50", name: "p50", color: C.blue },
        { src: "client", key: "tpot_p99", name: "p99", color: C.red }
      ]
    },
    {
      id: "tokens", title: "Output tokens per second", unit: "tok/s", yLabel: "tokens/s", window: true,
      lines: [
        { src: "client", key: "output_tokens_per_s", name: "client", color: C.green },
        { src: "server", key: "generation_tokens_per_s", name: "server", color: C.purple, dash: [5, 3] }
      ]
    },
    {
      id: "kv", title: "Server KV cache usage", unit: "%", yLabel: "KV cache used (%)", yMax: 100,
      lines: [
        { src: "server", key: "kv_cache_usage_ratio", name: "KV cache", color: C.orange, scale: 100 },
        // Several replicas scraped: the fullest one's, which the mean hides (shown only then).
        {
          src: "server", key: "kv_cache_usage_ratio_fullest", name: "fullest replica", color: C.red,
          scale: 100, dash: [4, 3], optional: true
        }
      ]
    },
    {
      id: "queue", title: "Server requests running / waiting", unit: "", yLabel: "requests",
      lines: [
        { src: "client", key: "users", name: "users (Locust)", color: C.gray, dash: [6, 4], width: 3, alpha: 0.55 },
        { src: "server", key: "requests_running", name: "running", color: C.blue },
        { src: "server", key: "requests_waiting", name: "waiting", color: C.red }
      ]
    },
    {
      id: "preempt", title: "Server preemptions", unit: "", yLabel: "preemptions",
      lines: [
        { src: "server", key: "preemptions_increase", name: "total since start", color: C.brown },
        { src: "server", key: "preemptions_per_s", name: "per second", color: C.orange, dash: [4, 3] }
      ]
    }
  ];

  // -- state ---------------------------------------------------------------------------------
  var S = {
    seriesId: null,
    client: null,
    server: null,
    serverOff: false,
    status: null,
    steps: [],
    windowS: null,
    now: null,
    paused: false,
    hoverT: null
  };
  window.__tokenloadCharts = {};
  window.tokenloadSetPaused = function (p) { S.paused = !!p; };

  function appendCols(dst, src) {
    if (!src || !src.t) return dst;
    if (!dst) {
      dst = {};
      Object.keys(src).forEach(function (k) { dst[k] = src[k].slice(); });
      return dst;
    }
    Object.keys(src).forEach(function (k) {
      if (!dst[k]) dst[k] = new Array(dst.t.length).fill(null);
      Array.prototype.push.apply(dst[k], src[k]);
    });
    if (dst.t.length > MAX_POINTS) { // thin the older half by two
      var half = Math.floor(dst.t.length / 2);
      Object.keys(dst).forEach(function (k) {
        var col = dst[k], out = [];
        for (var i = 0; i < half; i += 2) out.push(col[i]);
        dst[k] = out.concat(col.slice(half));
      });
    }
    return dst;
  }

  function lastT(cols) {
    return cols && cols.t && cols.t.length ? cols.t[cols.t.length - 1] : null;
  }

  // -- formatting ----------------------------------------------------------------------------
  function fmtNum(v, unit) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    var a = Math.abs(v), s;
    if (a >= 10000) s = (v / 1000).toFixed(1) + "k";
    else if (a >= 100) s = v.toFixed(0);
    else if (a >= 10) s = v.toFixed(1);
    else s = v.toFixed(2);
    return unit ? s + " " + unit : s;
  }
  function fmtDur(sec) {
    if (sec === null || sec === undefined || !isFinite(sec)) return "–";
    sec = Math.max(0, Math.round(sec));
    var h = Math.floor(sec / 3600), m = Math.floor((sec % 3600) / 60), s = sec % 60;
    var mm = (h ? String(m).padStart(2, "0") : String(m)) + ":" + String(s).padStart(2, "0");
    return h ? h + ":" + mm : mm;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // -- chart drawing -------------------------------------------------------------------------
  function niceStep(range, target) {
    var raw = range / Math.max(1, target);
    var p = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / p;
    var n = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
    return n * p;
  }
  function timeStep(range) {
    var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400];
    for (var i = 0; i < steps.length; i++) if (range / steps[i] <= 7) return steps[i];
    return 28800;
  }
  function cssVar(name) {
    return getComputedStyle(root).getPropertyValue(name).trim() || "#888";
  }

  function buildChart(def) {
    var card = el("section", "chart");
    card.id = "chart-" + def.id;
    card.appendChild(el("h3", null, def.title));
    var sub = el("div", "subtitle");
    card.appendChild(sub);
    var legend = el("div", "legend");
    var items = def.lines.map(function (ln) {
      var it = el("span", "item");
      var sw = el("span", "swatch" + (ln.dash ? " dashed" : ""));
      sw.style.background = ln.color;
      sw.style.borderColor = ln.color;
      var val = el("span", "val", "–");
      if (ln.optional) it.style.display = "none";  // until its series has a point
      it.appendChild(sw);
      it.appendChild(el("span", null, ln.name));
      it.appendChild(val);
      legend.appendChild(it);
      return val;
    });
    card.appendChild(legend);
    var canvas = document.createElement("canvas");
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", def.title);
    canvas.dataset.points = "0";
    card.appendChild(canvas);
    def.el = { card: card, sub: sub, values: items, canvas: canvas };
    canvas.addEventListener("mousemove", function (ev) {
      var g = def.geom;
      if (!g) return;
      var r = canvas.getBoundingClientRect();
      var x = ev.clientX - r.left;
      if (x < g.left || x > g.left + g.w) { S.hoverT = null; } else {
        S.hoverT = g.t0 + ((x - g.left) / g.w) * (g.t1 - g.t0);
      }
      drawAll();
    });
    canvas.addEventListener("mouseleave", function () { S.hoverT = null; drawAll(); });
    return card;
  }

  function seriesOf(ln) {
    var cols = S[ln.src];
    if (!cols || !cols.t || !cols[ln.key]) return { t: [], v: [] };
    var scale = ln.scale || 1;
    var okCol = ln.src === "server" ? cols.ok : null;
    var t = cols.t, src = cols[ln.key], v = new Array(t.length);
    for (var i = 0; i < t.length; i++) {
      var x = src[i];
      v[i] = okCol && okCol[i] === false ? null : (x === null || x === undefined ? null : x * scale);
    }
    return { t: t, v: v };
  }

  function valueAt(series, t) {
    // the last point at or before t (the latest value when t is null)
    var ts = series.t;
    if (!ts.length) return null;
    if (t === null) {
      for (var j = ts.length - 1; j >= 0; j--) if (series.v[j] !== null) return series.v[j];
      return null;
    }
    var lo = 0, hi = ts.length - 1;
    if (t < ts[0]) return null;
    while (lo < hi) {
      var mid = (lo + hi + 1) >> 1;
      if (ts[mid] <= t) lo = mid; else hi = mid - 1;
    }
    return series.v[lo];
  }

  function drawChart(def, t0, t1) {
    var canvas = def.el.canvas;
    var dpr = window.devicePixelRatio || 1;
    var cw = canvas.clientWidth || 400, ch = canvas.clientHeight || 210;
    if (canvas.width !== Math.round(cw * dpr) || canvas.height !== Math.round(ch * dpr)) {
      canvas.width = Math.round(cw * dpr);
      canvas.height = Math.round(ch * dpr);
    }
    var g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, cw, ch);
    var fg = cssVar("--fg"), muted = cssVar("--muted"), grid = cssVar("--grid"), axis = cssVar("--axis");
    var shade = cssVar("--shade");
    var font = "11px system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif";

    var series = def.lines.map(seriesOf);
    var ymax = 0, count = 0, perSeries = {};
    series.forEach(function (s, i) {
      var n = 0;
      for (var k = 0; k < s.t.length; k++) {
        var v = s.v[k];
        if (v !== null && isFinite(v) && s.t[k] >= t0) { n++; if (v > ymax) ymax = v; }
      }
      perSeries[def.lines[i].key] = n;
      count += n;
    });
    if (def.yMax) ymax = Math.max(def.yMax, ymax);
    if (!(ymax > 0)) ymax = 1;
    var ystep = niceStep(ymax, 4);
    var ytop = def.yMax && ymax <= def.yMax ? def.yMax : Math.ceil((ymax * 1.05) / ystep) * ystep;
    if (def.yMax && ymax <= def.yMax) ystep = 25;

    g.font = font;
    var ylabels = [];
    for (var yv = 0; yv <= ytop + ystep * 1e-6; yv += ystep) ylabels.push(yv);
    var labelW = 0;
    var decimals = Math.max(0, Math.min(3, -Math.floor(Math.log10(ystep) + 1e-9)));
    if (ystep * Math.pow(10, decimals) % 1 > 1e-6) decimals += 1; // 2.5, 0.25
    function fmtTick(v) { return v >= 10000 ? (v / 1000).toFixed(v % 1000 ? 1 : 0) + "k" : v.toFixed(decimals); }
    ylabels.forEach(function (yv) { labelW = Math.max(labelW, g.measureText(fmtTick(yv)).width); });
    var left = Math.ceil(labelW) + 24, right = 16, top = 8, bottom = 32;
    var w = Math.max(10, cw - left - right), h = Math.max(10, ch - top - bottom);
    if (t1 <= t0) t1 = t0 + 1;
    def.geom = { left: left, w: w, t0: t0, t1: t1 };
    function X(t) { return left + ((t - t0) / (t1 - t0)) * w; }
    function Y(v) { return top + h - (v / ytop) * h; }

    // step windows: warm-up shaded, a line at each step's start, its label on top
    S.steps.forEach(function (st) {
      var a = Math.max(st.start, t0), b = st.measure_start !== null ? st.measure_start : t1;
      if (b > a) {
        g.fillStyle = shade;
        g.fillRect(X(a), top, Math.max(1, X(Math.min(b, t1)) - X(a)), h);
      }
      if (st.start >= t0 && st.start <= t1) {
        g.strokeStyle = axis;
        g.setLineDash([2, 3]);
        g.beginPath(); g.moveTo(X(st.start) + 0.5, top); g.lineTo(X(st.start) + 0.5, top + h); g.stroke();
        g.setLineDash([]);
        g.fillStyle = muted;
        g.textAlign = "left"; g.textBaseline = "top";
        g.fillText("S" + st.index + (st.concurrency ? " \u00b7 " + st.concurrency + "u" : ""), X(st.start) + 3, top + 1);
      }
    });

    // grid and y axis
    g.lineWidth = 1;
    g.textAlign = "right"; g.textBaseline = "middle";
    ylabels.forEach(function (yv) {
      var y = Math.round(Y(yv)) + 0.5;
      g.strokeStyle = grid;
      g.beginPath(); g.moveTo(left, y); g.lineTo(left + w, y); g.stroke();
      g.fillStyle = muted;
      g.fillText(fmtTick(yv), left - 5, y);
    });
    // x axis: elapsed time since the test started
    var xs = timeStep(t1 - t0);
    g.textAlign = "center"; g.textBaseline = "top";
    for (var tx = Math.ceil(0 / xs) * xs; t0 + tx <= t1 + 1e-6; tx += xs) {
      var x = Math.round(X(t0 + tx)) + 0.5;
      g.strokeStyle = grid;
      g.beginPath(); g.moveTo(x, top + h); g.lineTo(x, top + h + 4); g.stroke();
      g.fillStyle = muted;
      g.fillText(fmtDur(tx), x, top + h + 5);
    }
    g.strokeStyle = axis;
    g.beginPath(); g.moveTo(left + 0.5, top); g.lineTo(left + 0.5, top + h + 0.5); g.lineTo(left + w, top + h + 0.5); g.stroke();
    g.fillStyle = muted;
    g.fillText("elapsed (m:ss)", left + w / 2, top + h + 18);
    g.save();
    g.translate(10, top + h / 2);
    g.rotate(-Math.PI / 2);
    g.textAlign = "center"; g.textBaseline = "middle";
    g.fillText(def.yLabel, 0, 0);
    g.restore();

    // the lines (a gap where a value is missing)
    g.save();
    g.beginPath(); g.rect(left, top - 1, w + 1, h + 2); g.clip();
    series.forEach(function (s, i) {
      var ln = def.lines[i];
      g.strokeStyle = ln.color;
      g.fillStyle = ln.color;
      g.lineWidth = ln.width || 1.6;
      g.globalAlpha = ln.alpha || 1;
      g.setLineDash(ln.dash || []);
      g.beginPath();
      var open = false, lone = [];
      for (var k = 0; k < s.t.length; k++) {
        var v = s.v[k];
        if (v === null || !isFinite(v) || s.t[k] < t0) { open = false; continue; }
        var px = X(s.t[k]), py = Y(Math.min(v, ytop));
        if (!open) {
          g.moveTo(px, py);
          var nextOk = k + 1 < s.t.length && s.v[k + 1] !== null;
          if (!nextOk) lone.push([px, py]);
          open = true;
        } else {
          g.lineTo(px, py);
        }
      }
      g.stroke();
      g.setLineDash([]);
      g.globalAlpha = 1;
      lone.forEach(function (p) { g.beginPath(); g.arc(p[0], p[1], 2, 0, 2 * Math.PI); g.fill(); });
    });
    g.restore();

    // hover crosshair
    if (S.hoverT !== null && S.hoverT >= t0 && S.hoverT <= t1) {
      g.strokeStyle = fg;
      g.globalAlpha = 0.35;
      g.beginPath(); g.moveTo(X(S.hoverT) + 0.5, top); g.lineTo(X(S.hoverT) + 0.5, top + h); g.stroke();
      g.globalAlpha = 1;
    }
    if (!count) {
      g.fillStyle = muted;
      g.textAlign = "center"; g.textBaseline = "middle";
      g.font = "12px system-ui, -apple-system, Segoe UI, Roboto, Arial, sans-serif";
      g.fillText(emptyText(def), left + w / 2, top + h / 2);
    }

    // legend values: at the hovered time, else the latest
    series.forEach(function (s, i) {
      var val = def.el.values[i];
      val.textContent = fmtNum(valueAt(s, S.hoverT), def.unit);
      if (def.lines[i].optional) val.parentNode.style.display = perSeries[def.lines[i].key] ? "" : "none";
    });
    canvas.dataset.points = String(count);
    canvas.dataset.series = JSON.stringify(perSeries);
    window.__tokenloadCharts[def.id] = { points: count, series: perSeries };
  }

  function emptyText(def) {
    var server = def.lines.every(function (ln) { return ln.src === "server"; });
    if (server && S.serverOff) return "server metrics are not scraped (--no-server-metrics or no host)";
    if (server && S.server && S.server.t && S.server.t.length) return "the server does not export this";
    return "waiting for data";
  }

  function timeRange() {
    var st = S.status || {};
    var t0 = st.start_time;
    var cand = [lastT(S.client), lastT(S.server), S.now].filter(function (x) { return x !== null && x !== undefined; });
    var t1 = cand.length ? Math.max.apply(null, cand) : null;
    if (!t0) {
      var firsts = [S.client, S.server].filter(function (c) { return c && c.t && c.t.length; })
        .map(function (c) { return c.t[0]; });
      t0 = firsts.length ? Math.min.apply(null, firsts) : t1;
    }
    if (t0 === null || t0 === undefined) { t0 = 0; t1 = 60; }
    if (t1 - t0 < 60) t1 = t0 + 60; // at least a minute wide, so the first points do not fill it
    return [t0, t1];
  }

  var drawPending = false;
  function drawAll() {
    if (drawPending) return;
    drawPending = true;
    window.requestAnimationFrame(function () {
      drawPending = false;
      var r = timeRange();
      CHARTS.forEach(function (def) {
        try { drawChart(def, r[0], r[1]); } catch (e) { noteError(e && e.message ? e.message : e); }
      });
      root.dataset.drawn = String(Number(root.dataset.drawn || "0") + 1);
    });
  }

  // -- status and the step table ---------------------------------------------------------------
  function loadText(step) {
    // A rate step's load is its request rate; its users are only the pool that sends it.
    return step.rate_rps !== null && step.rate_rps !== undefined ? step.rate_rps + " req/s" : step.users + " users";
  }

  function setText(id, text, cls) {
    var e = document.getElementById(id);
    if (!e) return;
    e.textContent = text;
    e.className = "value" + (cls ? " " + cls : "");
  }

  // The run directory's results, for download (/tokenload/files/NAME): the reports and
  // summary once a test has stopped; the records as they are written.
  function renderFiles(files, writtenAt) {
    var box = document.getElementById("st-files");
    if (!box) return;
    var key = files.map(function (f) { return f.name + ":" + f.written_at; }).join(",");
    if (box.getAttribute("data-key") === key) return;
    box.setAttribute("data-key", key);
    box.textContent = "";
    if (!files.length) { box.textContent = "none yet: stop the test to write the reports"; return; }
    files.forEach(function (f, i) {
      if (i) box.appendChild(document.createTextNode(" \u00b7 "));
      var a = el("a", "run-file", f.name);
      a.href = "files/" + encodeURIComponent(f.name);
      a.setAttribute("download", f.name);
      a.title = f.bytes + " bytes";
      box.appendChild(a);
    });
    if (!writtenAt) box.appendChild(document.createTextNode(" (reports when a test stops)"));
  }

  function renderStatus() {
    var st = S.status || {};
    setText("st-state", st.state || "–");
    setText("st-users", st.users === null || st.users === undefined ? "–" :
      String(st.users) + (st.workers ? " on " + st.workers + " workers" : ""));
    setText("st-elapsed", fmtDur(st.elapsed_s));
    var step = st.step;
    if (!step) {
      setText("st-step", "constant load (no steps)");
    } else if (step.phase === "warmup" || step.phase === "measure") {
      var of = step.of ? " of " + step.of : "";
      var dur = step.phase === "warmup" ? step.warmup_s : (step.duration_s !== null ? step.duration_s - (step.warmup_s || 0) : null);
      var prog = dur ? " " + fmtDur(step.phase_elapsed_s) + "/" + fmtDur(dur) : "";
      setText("st-step", step.index + of + " \u00b7 " + loadText(step) + " \u00b7 " +
        (step.phase === "warmup" ? "warm-up" : "measuring") + prog, "phase-" + step.phase);
    } else if (step.phase === "ramp") {
      setText("st-step", step.index !== null ? "ramping to step " + step.index + " (" + loadText(step) + ")" : "ramping");
    } else if (step.phase === "done") {
      setText("st-step", "all " + (step.of || "") + " steps done");
    } else {
      setText("st-step", step.of ? step.of + " steps planned" : "–");
    }
    var failed = st.requests_failed || 0;
    setText("st-requests", (st.requests_ok || 0) + " / " + failed, failed ? "bad" : "");
    var sm = st.server_metrics;
    if (!sm) {
      setText("st-server", S.serverOff ? "off" : "not scraped yet");
    } else {
      var fails = 0;
      Object.keys(sm.failures || {}).forEach(function (u) {
        Object.keys(sm.failures[u]).forEach(function (r) { fails += sm.failures[u][r]; });
      });
      var n = (sm.targets || []).length;
      setText("st-server", (n === 1 ? sm.targets[0] : n + " targets") + (fails ? " \u00b7 " + fails + " failed scrapes" : ""),
        fails ? "bad" : "");
    }
    renderFiles(st.files || [], st.results_written_at);
    CHARTS.forEach(function (def) {
      if (!def.window || !S.windowS) return;
      var both = def.lines.some(function (l) { return l.src === "server"; });
      def.el.sub.textContent = "client: requests finished in the last " + S.windowS + " s" +
        (both ? " \u00b7 server: per /metrics scrape" : "");
    });
    var note = document.getElementById("window-note");
    if (note && S.windowS) {
      note.textContent = "Client charts: each point covers the requests that finished in the last " + S.windowS +
        " s (percentiles from the merged histogram buckets of that window; on a distributed run, requests are counted " +
        "when their worker reports them). Server charts: one point per /metrics scrape. Shaded: a step's warm-up.";
    }
  }

  function cell(tr, text, cls) {
    var td = el("td", cls, text);
    tr.appendChild(td);
    return td;
  }

  function renderSteps() {
    var table = document.getElementById("steps");
    var empty = document.getElementById("steps-empty");
    var steps = S.steps || [];
    table.hidden = !steps.length;
    empty.hidden = !!steps.length;
    var tbody = table.tBodies[0];
    while (tbody.firstChild) tbody.removeChild(tbody.firstChild);
    var cur = S.status && S.status.step ? S.status.step.index : null;
    steps.forEach(function (s) {
      var tr = el("tr", s.index === cur && s.state !== "done" ? "current" : null);
      cell(tr, s.index);
      cell(tr, s.concurrency !== null ? s.concurrency : (s.target_rate_rps !== null ? s.target_rate_rps + " rps" : "–"));
      cell(tr, s.state === "warmup" ? "warm-up" : s.state === "measure" ? "measuring" : "done",
        s.state === "done" ? null : "phase-" + s.state);
      cell(tr, s.ok);
      cell(tr, s.failed, s.failed ? "bad" : null);
      cell(tr, fmtNum(s.ttft_p50));
      cell(tr, fmtNum(s.ttft_p99));
      cell(tr, fmtNum(s.tpot_p50));
      cell(tr, fmtNum(s.tpot_p99));
      cell(tr, fmtNum(s.output_tokens_per_s));
      cell(tr, s.kv_cache_usage_mean !== null && s.kv_cache_usage_mean !== undefined ? fmtNum(100 * s.kv_cache_usage_mean) : "–");
      cell(tr, s.preemptions !== null && s.preemptions !== undefined ? fmtNum(s.preemptions) : "–");
      var td = cell(tr, null);
      var v = s.verdict;
      if (v) {
        var label = el("span", "verdict " + (v.saturated ? "saturated" : "ok"),
          v.bottleneck === "none" ? "not saturated" : v.bottleneck.replace(/_/g, " "));
        td.appendChild(label);
        var notes = s.verdict_notes || [];  // worded by the server (tokenload.report.tables.verdict_notes)
        if (notes.length) td.appendChild(el("span", "muted", " (" + notes.join(", ") + ")"));
        if ((v.evidence || []).length || (v.advice || []).length) {
          var det = el("details");
          det.appendChild(el("summary", null, "evidence and advice"));
          var ul = el("ul");
          (v.evidence || []).forEach(function (e) {
            ul.appendChild(el("li", null, e.metric + " = " + e.value + ": " + e.rule));
          });
          (v.advice || []).forEach(function (a) { ul.appendChild(el("li", "muted", a)); });
          det.appendChild(ul);
          td.appendChild(det);
        }
      } else if (s.verdict_pending) {
        td.appendChild(el("span", "muted", "pending (waiting for the last reports)"));
      } else {
        td.appendChild(el("span", "muted", s.state === "done" ? "–" : "after the step"));
      }
      tbody.appendChild(tr);
    });
    var vn = document.getElementById("verdict-note");
    vn.textContent = S.verdictError ? "Verdicts unavailable: " + S.verdictError :
      (steps.length ? "Step figures cover each step's measured part (after its warm-up). Verdicts: tokenload.analysis.diagnosis, as in summary.json." : "");
  }

  // -- polling ----------------------------------------------------------------------------------
  var inFlight = false;
  var failures = 0;
  function poll() {
    if (inFlight || (S.paused && S.seriesId)) return;
    inFlight = true;
    var q = [];
    if (S.client && lastT(S.client) !== null) q.push("client_since=" + lastT(S.client));
    if (S.server && lastT(S.server) !== null) q.push("server_since=" + lastT(S.server));
    fetch("api/series" + (q.length ? "?" + q.join("&") : ""), { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("api/series: HTTP " + r.status);
        return r.json();
      })
      .then(function (d) {
        failures = 0;
        document.getElementById("error-banner").hidden = errors.length === 0;
        if (S.seriesId !== d.series_id) { S.client = null; S.server = null; S.seriesId = d.series_id; }
        S.client = appendCols(S.client, d.client);
        S.serverOff = d.server === null && d.status && d.status.state && d.status.state !== "ready" && !d.status.server_metrics;
        if (d.server) S.server = appendCols(S.server, d.server);
        S.status = d.status;
        S.steps = d.steps || [];
        S.windowS = d.window_s;
        S.now = d.now;
        S.verdictError = d.verdict_error;
        renderStatus();
        renderSteps();
        drawAll();
        root.dataset.polls = String(Number(root.dataset.polls || "0") + 1);
      })
      .catch(function (e) {
        failures += 1;
        var banner = document.getElementById("error-banner");
        banner.hidden = false;
        banner.textContent = "Cannot reach the Locust web UI (" + (e && e.message ? e.message : e) + "); retrying.";
      })
      .then(function () { inFlight = false; });
  }

  function init() {
    var main = document.getElementById("charts");
    CHARTS.forEach(function (def) {
      main.appendChild(buildChart(def));
      var client = def.lines.some(function (l) { return l.src === "client"; });
      def.el.sub.textContent = def.window ? "client: requests finished in a sliding window" :
        (client ? "server: per /metrics scrape \u00b7 users: Locust" : "server: per /metrics scrape");
    });
    window.addEventListener("resize", drawAll);
    drawAll();
    poll();
    window.setInterval(poll, POLL_MS);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
