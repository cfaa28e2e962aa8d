// The composer's files (docs/FILES.md, "Dashboard"), no inline handlers: files come by the
// Attach button, by drag and drop anywhere on the chat, or by pasting (images from the
// clipboard); each gets a chip with its name and size and a remove button. A message with
// files is sent by XMLHttpRequest, text and files in one multipart request, with the upload's
// progress; a message without files goes the composer's usual way (htmx, chat.js). The
// server's answer carries the message as the page renders it: chat.js places it (once, by
// id, whichever of it and the live event comes first).
(function () {
  "use strict";

  // A client id for a message (its resend is stored once) and the CSRF header htmx sends
  // (set on <body> by base.html), for the pages' own requests.
  var newId = window.Hermes.newId;
  var csrfHeaders = window.Hermes.csrfHeaders;

  function sizeText(bytes) {
    if (bytes < 1024) return bytes + " B";
    if (bytes < 1024 * 1024) return (bytes / 1024).toFixed(1) + " KB";
    return (bytes / (1024 * 1024)).toFixed(1) + " MB";
  }

  function setup(box) {
    var form = box.closest("form");
    var chat = document.getElementById("chat");
    var list = document.getElementById("messages");
    var input = document.getElementById("composer-file-input");
    var attach = document.getElementById("composer-attach");
    var chips = document.getElementById("file-chips");
    var progress = document.getElementById("upload-progress");
    var text = form.querySelector("textarea");
    var clientId = form.querySelector('input[name="client_id"]');
    var send = form.querySelector("button[type=submit]");
    var maxBytes = parseInt(box.dataset.maxFileBytes, 10) || Infinity;
    var maxFiles = parseInt(box.dataset.maxFiles, 10) || Infinity;
    var maxBody = parseInt(box.dataset.maxBodyBytes, 10) || Infinity;
    var pending = []; // {file, chip, tooLarge}
    var sending = false;

    function showError(message) {
      var error = document.getElementById("composer-error");
      if (error) error.textContent = message || "";
    }

    // A message held for its files (being read before the answer): say so, with a Stop that
    // releases it without an answer; the note goes once the answer starts streaming.
    function offerStop(stopUrl) {
      var error = document.getElementById("composer-error");
      if (!error) return;
      var note = document.createElement("span");
      note.className = "files-wait";
      note.textContent = " Reading the files before the answer… ";
      var button = document.createElement("button");
      button.type = "button";
      button.className = "link stop";
      button.textContent = "Stop";
      button.addEventListener("click", function () {
        button.disabled = true;
        fetch(stopUrl, { method: "POST", headers: csrfHeaders(), credentials: "same-origin" })
          .then(function (r) {
            note.textContent = r.status === 204
              ? " Stopped: the message stays, with no answer."
              : "";
          });
      });
      note.appendChild(button);
      error.appendChild(note);
      var watch = new MutationObserver(function () {
        if (list.querySelector('[id^="streaming-"]')) { note.remove(); watch.disconnect(); }
      });
      watch.observe(list, { childList: true });
    }

    function sync() {
      var any = pending.length > 0;
      form.dataset.hasFiles = any ? "true" : "";
      text.required = !any; // a message may be files alone
      chips.classList.toggle("is-empty", !any);
    }

    function remove(item) {
      if (sending) return;
      pending = pending.filter(function (other) { return other !== item; });
      item.chip.remove();
      sync();
      text.focus();
    }

    function chipFor(item) {
      var chip = document.createElement("li");
      chip.className = "file-chip" + (item.tooLarge ? " is-too-large" : "");
      var name = document.createElement("span");
      name.className = "chip-name";
      name.textContent = item.file.name;
      var size = document.createElement("span");
      size.className = "chip-size";
      size.textContent = sizeText(item.file.size);
      var state = document.createElement("span");
      state.className = "chip-state";
      if (item.tooLarge) state.textContent = "over " + sizeText(maxBytes) + ": not sent";
      var drop = document.createElement("button");
      drop.type = "button";
      drop.className = "link chip-remove";
      drop.textContent = "×";
      drop.setAttribute("aria-label", "Remove " + item.file.name);
      drop.addEventListener("click", function () { remove(item); });
      chip.append(name, size, state, drop);
      return chip;
    }

    function add(files) {
      Array.from(files || []).forEach(function (file) {
        if (pending.length >= maxFiles) {
          showError("A message may carry at most " + maxFiles + " files: " + file.name + " was not added.");
          return;
        }
        var item = { file: file, tooLarge: file.size > maxBytes };
        item.chip = chipFor(item);
        pending.push(item);
        chips.appendChild(item.chip);
      });
      sync();
    }

    attach.addEventListener("click", function () { if (!sending) input.click(); });
    input.addEventListener("change", function () {
      add(input.files);
      input.value = ""; // the same file may be chosen again
    });

    // Pasting files (a screenshot from the clipboard) attaches them; pasting text stays text.
    text.addEventListener("paste", function (e) {
      var files = e.clipboardData && e.clipboardData.files;
      if (files && files.length) {
        e.preventDefault();
        add(files);
      }
    });

    function carriesFiles(e) {
      return e.dataTransfer && Array.from(e.dataTransfer.types || []).indexOf("Files") >= 0;
    }
    var dropZone = chat || form;
    dropZone.addEventListener("dragover", function (e) {
      if (!carriesFiles(e)) return;
      e.preventDefault();
      e.dataTransfer.dropEffect = "copy";
      dropZone.classList.add("is-dropping");
    });
    dropZone.addEventListener("dragleave", function (e) {
      if (e.target === dropZone) dropZone.classList.remove("is-dropping");
    });
    dropZone.addEventListener("drop", function (e) {
      dropZone.classList.remove("is-dropping");
      if (!carriesFiles(e)) return;
      e.preventDefault();
      if (!sending) add(e.dataTransfer.files);
    });

    function setBusy(busy) {
      sending = busy;
      text.readOnly = busy;
      send.disabled = busy;
      attach.disabled = busy;
      progress.hidden = !busy;
      if (!busy) progress.value = 0;
    }

    function showProgress(loaded, total, items) {
      if (!total) return;
      progress.value = Math.min(100, Math.round((loaded / total) * 100));
      // The body carries the files in order: each chip's share of what went out so far.
      var offset = total - items.reduce(function (sum, it) { return sum + it.file.size; }, 0);
      items.forEach(function (item) {
        var done = Math.max(0, Math.min(item.file.size, loaded - offset));
        var percent = item.file.size ? Math.round((done / item.file.size) * 100) : 100;
        item.chip.querySelector(".chip-state").textContent = percent + "%";
        item.chip.classList.add("is-uploading");
        offset += item.file.size;
      });
    }

    function reset(skipped) {
      pending = [];
      chips.textContent = "";
      form.reset();
      clientId.value = "";
      sync();
      var notes = skipped.map(function (item) {
        return item.file.name + ": larger than " + sizeText(maxBytes) + ", not sent.";
      });
      return notes.join(" ");
    }

    function upload() {
      var items = pending.filter(function (item) { return !item.tooLarge; });
      var skipped = pending.filter(function (item) { return item.tooLarge; });
      if (!items.length && !text.value.trim()) {
        showError("Files over " + sizeText(maxBytes) + " cannot be sent: remove them, or write a message.");
        return;
      }
      var total = items.reduce(function (sum, item) { return sum + item.file.size; }, 0);
      if (total + text.value.length * 4 + 4096 > maxBody) {
        // The server would refuse the whole request (message included) before reading it.
        showError("These files add up to " + sizeText(total) + "; one message may carry at most " +
          sizeText(maxBody) + ". Remove some and send them in another message.");
        return;
      }
      if (!clientId.value) clientId.value = newId(); // a resend after a failure stores once
      var data = new FormData();
      data.append("client_id", clientId.value);
      data.append("text", text.value);
      items.forEach(function (item) { data.append("files", item.file, item.file.name); });
      var xhr = new XMLHttpRequest();
      xhr.open("POST", box.dataset.uploadUrl);
      var headers = csrfHeaders();
      Object.keys(headers).forEach(function (key) { xhr.setRequestHeader(key, headers[key]); });
      xhr.setRequestHeader("Accept", "application/json");
      xhr.upload.addEventListener("progress", function (e) {
        if (e.lengthComputable) showProgress(e.loaded, e.total, items);
      });
      xhr.addEventListener("load", function () {
        var body = {};
        try { body = JSON.parse(xhr.responseText); } catch (err) { body = {}; }
        setBusy(false);
        if (body.message_id) { // stored (with all, some or none of its files)
          if (body.html) {
            list.dispatchEvent(new CustomEvent("hermes:message-html", { detail: { html: body.html } }));
          }
          var note = reset(skipped);
          showError([body.error, note].filter(Boolean).join(" "));
          if (body.turn_waits_for_files && body.stop_url) offerStop(body.stop_url);
        } else {
          items.forEach(function (item) { item.chip.querySelector(".chip-state").textContent = ""; });
          var error = body.error && typeof body.error === "object" ? body.error.message : body.error;
          showError(error || "The upload failed (" + xhr.status + "): send it again.");
        }
        text.focus();
      });
      xhr.addEventListener("error", function () {
        setBusy(false);
        showError("The upload was interrupted: send it again.");
      });
      setBusy(true);
      showError("");
      xhr.send(data);
    }

    // Files another control made (the record button, recorder.js): added as chips, and sent
    // at once when it asks (with the text typed so far).
    box.addEventListener("hermes:add-files", function (e) {
      if (sending) return;
      add(e.detail.files);
      if (e.detail.send) upload();
    });

    // Before htmx sees the submit (it listens on the form): with files, this request instead.
    document.addEventListener("submit", function (e) {
      if (e.target !== form || !pending.length) return;
      e.preventDefault();
      e.stopImmediatePropagation();
      if (!sending) upload();
    }, true);

    sync();
  }

  // Thumbnails an image cannot have (too large to preview) leave the card alone.
  document.addEventListener("error", function (e) {
    var img = e.target;
    if (img && img.tagName === "IMG" && img.closest(".file-image")) {
      img.closest(".file-image").classList.add("no-thumbnail");
    }
  }, true);

  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("composer-files");
    if (box && box.closest("form")) setup(box);
  });
})();
