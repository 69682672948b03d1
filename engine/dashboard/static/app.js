// siftbatch dashboard: keep the page's live part up to date over
// Server-Sent Events. Without JavaScript the page refreshes itself
// (a <noscript> meta refresh) instead.
"use strict";
(function () {
  var live = document.getElementById("live");
  if (!live || !live.dataset.stream || !window.EventSource) {
    return;
  }
  var es = new EventSource(live.dataset.stream);
  es.addEventListener("update", function (e) {
    // Keep keyboard focus on the element that had it, by id.
    var active = document.activeElement;
    var id = active && live.contains(active) ? active.id : "";
    live.innerHTML = e.data;
    if (id) {
      var el = document.getElementById(id);
      if (el) {
        el.focus();
      }
    }
    live.dataset.updates = String(Number(live.dataset.updates || "0") + 1);
  });
  es.addEventListener("signedout", function () {
    es.close();
    window.location.assign("/ui/");
  });
  es.addEventListener("gone", function () {
    es.close();
    window.location.reload();
  });
  window.addEventListener("pagehide", function () {
    es.close();
  });
})();
