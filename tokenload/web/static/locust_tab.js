/* Added to Locust's index page by tokenload: while the "LLM charts" tab is selected, lay
 * tokenload's live page (an <iframe> of /tokenload/llm) over the tab's content. Locust's extended
 * tabs can only render a table of text; this keeps to the outside of Locust's React tree (the
 * frame is a child of <body>) and only reads the URL's ?tab= and the tab bar's position. */
(function () {
  "use strict";
  var me = document.currentScript;
  var KEY = (me && me.getAttribute("data-key")) || "llm_charts";
  var PAGE = (me && me.getAttribute("data-page")) || "./tokenload/llm?embed=1";
  var root = document.documentElement;
  var frame = null;
  var theme = null;

  function isDark() {
    var m = getComputedStyle(document.body).backgroundColor.match(/\d+(\.\d+)?/g);
    if (!m || m.length < 3) return false;
    return 0.299 * m[0] + 0.587 * m[1] + 0.114 * m[2] < 128;
  }

  function selected() {
    return new URLSearchParams(window.location.search).get("tab") === KEY;
  }

  function setPaused(p) {
    try {
      if (frame && frame.contentWindow && frame.contentWindow.tokenloadSetPaused) {
        frame.contentWindow.tokenloadSetPaused(p);
      }
    } catch (e) { /* not loaded yet */ }
  }

  function place() {
    var tabs = document.querySelector('#root [role="tablist"]');
    if (!selected() || !tabs) {
      if (frame && frame.style.display !== "none") { frame.style.display = "none"; setPaused(true); }
      root.dataset.tokenloadTab = "hidden";
      return;
    }
    var dark = isDark();
    if (!frame) {
      theme = dark;
      frame = document.createElement("iframe");
      frame.id = "tokenload-llm-frame";
      frame.title = "tokenload live LLM charts";
      frame.src = PAGE + (PAGE.indexOf("?") >= 0 ? "&" : "?") + "theme=" + (dark ? "dark" : "light");
      frame.style.position = "absolute";
      frame.style.border = "0";
      frame.style.zIndex = "5";
      frame.style.background = getComputedStyle(document.body).backgroundColor;
      document.body.appendChild(frame);
    } else if (theme !== dark) {
      theme = dark;
      frame.style.background = getComputedStyle(document.body).backgroundColor;
      try { frame.contentDocument.documentElement.dataset.theme = dark ? "dark" : "light"; } catch (e) { /* */ }
    }
    if (frame.style.display === "none") { frame.style.display = "block"; setPaused(false); }
    // Under the tab bar, as wide as the container the tabs live in.
    var bar = tabs.closest(".MuiTabs-root") || tabs;
    var box = bar.parentElement || bar;
    var r = bar.getBoundingClientRect(), b = box.getBoundingClientRect();
    var top = r.bottom + window.scrollY + 16;
    frame.style.top = top + "px";
    frame.style.left = b.left + window.scrollX + "px";
    frame.style.width = b.width + "px";
    var h = 0;
    try { h = frame.contentDocument.documentElement.scrollHeight; } catch (e) { h = 0; }
    frame.style.height = Math.max(h || 0, window.innerHeight - r.bottom - 24, 400) + "px";
    root.dataset.tokenloadTab = "shown";
  }

  window.setInterval(place, 250);
  window.addEventListener("resize", place);
  window.addEventListener("popstate", place);
})();
