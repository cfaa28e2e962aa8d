// The composer's record button (docs/VOICE.md, "Dashboard"), no inline handlers: the
// browser's MediaRecorder records the microphone (Opus in OGG where the browser makes it,
// else in WebM); pressing the button again stops and sends the recording as a file of a new
// message, through the composer's upload (attachments.js, "hermes:add-files"), with any text
// typed. Cancel drops it. Browsers give the microphone only to secure pages (HTTPS, or
// http://localhost): elsewhere the button says so instead of failing silently. A recording
// stops by itself after data-max-record-seconds.
(function () {
  "use strict";

  var TYPES = ["audio/ogg;codecs=opus", "audio/webm;codecs=opus", "audio/webm"];

  function pickType() {
    if (!window.MediaRecorder || !MediaRecorder.isTypeSupported) return "";
    for (var i = 0; i < TYPES.length; i++) {
      if (MediaRecorder.isTypeSupported(TYPES[i])) return TYPES[i];
    }
    return "";
  }

  function clock(seconds) {
    var s = Math.floor(seconds);
    return Math.floor(s / 60) + ":" + String(s % 60).padStart(2, "0");
  }

  function stamp(date) {
    function two(n) { return String(n).padStart(2, "0"); }
    return date.getFullYear() + two(date.getMonth() + 1) + two(date.getDate()) + "-" +
      two(date.getHours()) + two(date.getMinutes()) + two(date.getSeconds());
  }

  function setup(box) {
    var button = document.getElementById("composer-record");
    var cancel = document.getElementById("composer-record-cancel");
    if (!button) return;
    var maxSeconds = parseInt(box.dataset.maxRecordSeconds, 10) || 1800;
    var recorder = null;
    var stream = null;
    var chunks = [];
    var started = 0;
    var ticker = null;
    var dropping = false;

    function showError(message) {
      var error = document.getElementById("composer-error");
      if (error) error.textContent = message || "";
    }

    var secure = window.isSecureContext && navigator.mediaDevices &&
      typeof navigator.mediaDevices.getUserMedia === "function" && window.MediaRecorder;
    if (!secure) {
      button.classList.add("is-unavailable");
      button.title = "Recording needs HTTPS (or http://localhost): browsers give no microphone to other pages.";
    }

    function idle() {
      recorder = null;
      if (stream) stream.getTracks().forEach(function (track) { track.stop(); });
      stream = null;
      clearInterval(ticker);
      button.textContent = "Record";
      button.classList.remove("is-recording");
      button.setAttribute("aria-pressed", "false");
      cancel.hidden = true;
    }

    function finished() {
      var type = (recorder && recorder.mimeType) || "audio/webm";
      var ending = type.indexOf("ogg") >= 0 ? ".ogg" : ".webm";
      var data = chunks;
      var drop = dropping;
      chunks = [];
      dropping = false;
      idle();
      if (drop) return;
      var blob = new Blob(data, { type: type.split(";")[0] });
      if (!blob.size) {
        showError("Nothing was recorded: check the microphone and try again.");
        return;
      }
      var file = new File([blob], "voice-message-" + stamp(new Date()) + ending, { type: blob.type });
      box.dispatchEvent(new CustomEvent("hermes:add-files", { detail: { files: [file], send: true } }));
    }

    function start() {
      if (!secure) {
        showError("Recording needs HTTPS (or http://localhost): this page is served without it, " +
          "so the browser gives it no microphone. Attach an audio file instead.");
        return;
      }
      showError("");
      navigator.mediaDevices.getUserMedia({ audio: true }).then(function (media) {
        stream = media;
        var type = pickType();
        recorder = type ? new MediaRecorder(media, { mimeType: type }) : new MediaRecorder(media);
        chunks = [];
        recorder.addEventListener("dataavailable", function (e) {
          if (e.data && e.data.size) chunks.push(e.data);
        });
        recorder.addEventListener("stop", finished);
        recorder.addEventListener("error", function (e) {
          showError("The recording failed: " + ((e.error && e.error.message) || "unknown error") + ".");
          dropping = true;
        });
        recorder.start(1000);
        started = Date.now();
        button.classList.add("is-recording");
        button.setAttribute("aria-pressed", "true");
        cancel.hidden = false;
        function tick() {
          var seconds = (Date.now() - started) / 1000;
          button.textContent = "Send voice " + clock(seconds);
          if (seconds >= maxSeconds && recorder && recorder.state === "recording") recorder.stop();
        }
        tick();
        ticker = setInterval(tick, 500);
      }).catch(function (err) {
        idle();
        var why = err && err.name === "NotAllowedError"
          ? "the browser did not allow the microphone (check the site's permissions)"
          : (err && err.name === "NotFoundError" ? "no microphone was found" : String((err && err.message) || err));
        showError("Could not record: " + why + ".");
      });
    }

    button.addEventListener("click", function () {
      if (recorder && recorder.state === "recording") {
        recorder.stop();
      } else if (!recorder) {
        start();
      }
    });
    cancel.addEventListener("click", function () {
      if (recorder && recorder.state === "recording") {
        dropping = true;
        recorder.stop();
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("composer-files");
    if (box && box.closest("form")) setup(box);
  });
})();
