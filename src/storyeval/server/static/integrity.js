// How a free-text answer was produced, for the study's quality controls: counts and times only.
// No keystroke, pasted text or any other content leaves the page beyond the answer itself:
// for every field marked data-integrity, the number of keys typed and deleted, of pastes and
// drops and the characters they brought, of times the page lost focus while the answer was
// being written, and when the writing started and ended. On submit the counts go in a hidden
// field "integrity:NAME" beside the answer; the server checks them and flags pasted or
// machine-like answers (storyeval.server.integrity).
(function () {
  "use strict";
  var ACTIVE_GAP_MS = 5000; // a pause longer than this is not counted as composing

  function track(field) {
    var counts = {
      keys: 0, deletions: 0, pastes: 0, pasted_chars: 0, drops: 0, focus_losses: 0,
      first_ms: null, last_ms: null, active_ms: 0
    };
    function touched() {
      var now = performance.now();
      if (counts.first_ms === null) { counts.first_ms = now; }
      if (counts.last_ms !== null && now - counts.last_ms <= ACTIVE_GAP_MS) {
        counts.active_ms += now - counts.last_ms;
      }
      counts.last_ms = now;
    }
    field.addEventListener("keydown", function (event) {
      if (event.key === "Backspace" || event.key === "Delete") { counts.deletions += 1; }
      else if (event.key && event.key.length === 1 && !event.ctrlKey && !event.metaKey) {
        counts.keys += 1;
      } else { return; }
      touched();
    });
    field.addEventListener("paste", function (event) {
      var data = event.clipboardData ? event.clipboardData.getData("text") : "";
      counts.pastes += 1;
      counts.pasted_chars += data.length;
      touched();
    });
    field.addEventListener("drop", function (event) {
      var data = event.dataTransfer ? event.dataTransfer.getData("text") : "";
      counts.drops += 1;
      counts.pasted_chars += data.length;
      touched();
    });
    function left() {
      if (counts.first_ms !== null) { counts.focus_losses += 1; }
    }
    window.addEventListener("blur", left);
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "hidden") { left(); }
    });
    return counts;
  }

  function attach(form) {
    var fields = form.querySelectorAll("[data-integrity]");
    if (!fields.length) { return; }
    var tracked = [];
    for (var i = 0; i < fields.length; i += 1) {
      tracked.push([fields[i], track(fields[i])]);
    }
    form.addEventListener("submit", function () {
      for (var j = 0; j < tracked.length; j += 1) {
        var field = tracked[j][0], counts = tracked[j][1];
        var hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = "integrity:" + field.name;
        hidden.value = JSON.stringify({
          v: 1, keys: counts.keys, deletions: counts.deletions, pastes: counts.pastes,
          pasted_chars: counts.pasted_chars, drops: counts.drops,
          focus_losses: counts.focus_losses,
          composition_s: counts.first_ms === null ? 0 : (counts.last_ms - counts.first_ms) / 1000,
          active_s: counts.active_ms / 1000
        });
        form.appendChild(hidden);
      }
    });
  }

  var forms = document.querySelectorAll("form");
  for (var k = 0; k < forms.length; k += 1) { attach(forms[k]); }
})();
