// Dashboard behaviour, no inline handlers: local times everywhere; on a chat page the
// composer (Enter sends, Shift+Enter adds a line, disabled while sending) and live updates
// from the chat's WebSocket (docs/EVENTS.md), each message shown exactly once (and fetched
// again when `message.updated` says it changed); approval
// cards of tool calls, each shown as the server renders it for this person.
(function () {
  "use strict";

  function localizeTimes(root) {
    root.querySelectorAll("time[datetime][data-local]").forEach(function (el) {
      var when = new Date(el.getAttribute("datetime"));
      if (!isNaN(when)) {
        el.textContent = when.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
        el.title = when.toString();
      }
      el.removeAttribute("data-local");
    });
  }

  // A client id for a message (its resend is stored once) and the CSRF header htmx sends
  // (set on <body> by base.html), for the pages' own requests.
  var newId = window.Hermes.newId;
  var csrfHeaders = window.Hermes.csrfHeaders;

  function setupChat(chat) {
    var list = document.getElementById("messages");
    var form = document.getElementById("composer");
    var agentName = chat.dataset.agentName;
    var messagesUrl = chat.dataset.messagesUrl;
    var lastSeq = parseInt(chat.dataset.lastSeq, 10) || 0;
    var olderHeight = null;

    function nearBottom() {
      return list.scrollHeight - list.scrollTop - list.clientHeight < 80;
    }

    function show(el, follow) {
      var empty = document.getElementById("no-messages");
      if (empty) empty.remove();
      localizeTimes(el);
      if (window.htmx) htmx.process(el);
      if (follow) list.scrollTop = list.scrollHeight;
    }

    // Insert a rendered message in id order, replacing its streaming placeholder if any.
    // If it changed after its HTML was rendered (an update came before it was shown), fetch
    // it again.
    function place(html, placeholder) {
      var tpl = document.createElement("template");
      tpl.innerHTML = html.trim();
      var el = tpl.content.firstElementChild;
      if (!el || document.getElementById(el.id)) return;
      var follow = nearBottom();
      if (placeholder && placeholder.isConnected) {
        placeholder.replaceWith(el);
      } else {
        var id = parseInt(el.dataset.id, 10);
        var later = Array.from(list.querySelectorAll("article[data-id]")).find(function (m) {
          return parseInt(m.dataset.id, 10) > id;
        });
        list.insertBefore(el, later || list.querySelector(".is-streaming"));
      }
      show(el, follow);
      if (stale.delete(el.id)) {
        refreshMessage({ id: el.dataset.id });
      }
    }

    function fetchMessage(message, placeholder) {
      if (!message || document.getElementById("message-" + message.id)) {
        if (placeholder && message) placeholder.remove();
        return;
      }
      fetch(messagesUrl + "/" + message.id, {
        headers: { "HX-Request": "true" },
        credentials: "same-origin",
      })
        .then(function (r) { return r.ok ? r.text() : ""; })
        .then(function (html) { if (html) place(html, placeholder); });
    }

    // A message shown already changed (an app's part of it, e.g. its files settled): fetch
    // it again and replace it where it is. Updates can come in quick succession (a
    // transcript's progress, then its end): only the latest fetch of a message is applied,
    // to whatever element shows it when the answer arrives (an earlier answer may have
    // replaced it already). An update of a message not shown yet (its fetch, or the upload
    // that sent it, still under way) is remembered, and `place` fetches it again: the HTML
    // it places may have been rendered before the change.
    var refreshes = {}; // message element id -> the ticket of its latest fetch in flight
    var lastTicket = 0;
    var stale = new Set(); // message element ids, oldest first
    var STALE_KEPT = 100;

    function refreshMessage(message) {
      if (!message) return;
      var key = "message-" + message.id;
      if (!document.getElementById(key)) {
        stale.add(key);
        if (stale.size > STALE_KEPT) stale.delete(stale.values().next().value);
        return;
      }
      var ticket = ++lastTicket;
      refreshes[key] = ticket;
      fetch(messagesUrl + "/" + message.id, {
        headers: { "HX-Request": "true" },
        credentials: "same-origin",
      })
        .then(function (r) { return r.ok ? r.text() : ""; }, function () { return ""; })
        .then(function (html) {
          if (refreshes[key] !== ticket) return; // a later update's fetch answers instead
          delete refreshes[key]; // the latest answered: a page open for days keeps no trail
          var tpl = document.createElement("template");
          tpl.innerHTML = html.trim();
          var el = tpl.content.firstElementChild;
          var shown = document.getElementById(key);
          if (!el || !shown) return;
          shown.replaceWith(el);
          localizeTimes(el);
          if (window.htmx) htmx.process(el);
        });
    }

    function streaming(turnId) {
      var el = document.getElementById("streaming-" + turnId);
      if (el) return el;
      el = document.createElement("article");
      el.id = "streaming-" + turnId;
      el.className = "message message-assistant is-streaming";
      el.innerHTML = '<header class="meta"><span class="author"></span>' +
        '<span class="typing">typing…</span>' +
        '<button type="button" class="link stop">Stop</button></header>' +
        '<div class="tools"></div><div class="body"></div>';
      el.querySelector(".author").textContent = agentName;
      el.querySelector(".stop").addEventListener("click", function (e) {
        e.target.disabled = true;
        fetch(chat.dataset.chatUrl + "turns/" + turnId + "/stop", {
          method: "POST",
          headers: csrfHeaders(),
          credentials: "same-origin",
        });
      });
      var follow = nearBottom();
      list.appendChild(el);
      show(el, follow);
      return el;
    }

    function toolChip(event) {
      var box = streaming(event.turn_id).querySelector(".tools");
      var chip = box.querySelector('[data-call="' + CSS.escape(event.call_id) + '"]');
      if (!chip) {
        chip = document.createElement("span");
        chip.dataset.call = event.call_id;
        box.appendChild(chip);
      }
      var state = event.type === "tool.started" ? "running" : event.ok ? "done" : "error";
      chip.className = "chip chip-" + state;
      chip.textContent = event.name + " · " + state +
        (event.duration_ms != null ? " · " + event.duration_ms + " ms" : "");
      if (event.error) chip.title = event.error;
    }

    // The turn waits for a decider (turn.waiting) or runs again (turn.started, resumed).
    function waitingFor(turnId, waiting) {
      var el = streaming(turnId);
      el.querySelector(".typing").textContent = waiting ? "waiting for approval" : "typing…";
      el.classList.toggle("is-waiting", waiting);
    }

    // Approval cards: fetched as HTML (escaped, with buttons only for deciders), placed once
    // by id; a decided card replaces the open one, never the other way round.
    var cards = document.getElementById("approvals");

    function placeCard(el) {
      if (!cards || !el || !el.id) return;
      var shown = document.getElementById(el.id);
      if (shown && el.dataset.status === "pending") return;
      if (shown) shown.replaceWith(el);
      else cards.appendChild(el);
      localizeTimes(el);
      if (window.htmx) htmx.process(el);
    }

    function fetchCards(url) {
      fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : ""; })
        .then(function (html) {
          var tpl = document.createElement("template");
          tpl.innerHTML = html.trim();
          Array.from(tpl.content.children).forEach(placeCard);
        });
    }

    function fetchCard(card) {
      if (cards && card && card.id) fetchCards(cards.dataset.url + "/" + card.id);
    }

    function finish(event) {
      var placeholder = document.getElementById("streaming-" + event.turn_id);
      if (placeholder) {
        var stop = placeholder.querySelector(".stop");
        if (stop) stop.remove();
      }
      if (event.message) return fetchMessage(event.message, placeholder);
      if (!placeholder) return;
      if (event.type === "turn.failed" || event.type === "turn.interrupted") {
        placeholder.querySelector(".typing").textContent = event.error || event.reason || "";
        placeholder.classList.remove("is-streaming");
        placeholder.classList.add(event.type === "turn.failed" ? "is-failed" : "is-interrupted");
      } else {
        placeholder.remove();
      }
    }

    function handle(event) {
      if (typeof event.seq === "number") {
        if (event.seq <= lastSeq) return; // seen already (replayed after a reconnect)
        lastSeq = event.seq;
      }
      switch (event.type) {
        case "message.created":
        case "summary.created":
          return fetchMessage(event.message, null);
        case "message.updated":
          return refreshMessage(event.message);
        case "turn.started":
          return waitingFor(event.turn_id, false);
        case "turn.waiting":
          waitingFor(event.turn_id, true);
          return fetchCard(event.card);
        case "approval.requested":
        case "approval.decided":
          return fetchCard(event.card);
        case "turn.delta": {
          var follow = nearBottom();
          streaming(event.turn_id).querySelector(".body").textContent += event.text;
          if (follow) list.scrollTop = list.scrollHeight;
          return;
        }
        case "tool.started":
        case "tool.finished":
          return toolChip(event);
        case "turn.finished":
        case "turn.interrupted":
        case "turn.failed":
          return finish(event);
      }
    }

    // The login session ended (logged out, or the password changed): reload, so a logged-out
    // tab shows the login page instead of the chat, and a still-valid one reconnects. At most
    // once a minute, so a socket refused for another reason cannot make the page loop.
    function sessionEnded() {
      var last = Number(sessionStorage.getItem("hermes-session-reload") || 0);
      if (Date.now() - last < 60000) return;
      sessionStorage.setItem("hermes-session-reload", String(Date.now()));
      location.reload();
    }

    var delay = 1000;
    function connect() {
      var scheme = location.protocol === "https:" ? "wss://" : "ws://";
      var socket = new WebSocket(scheme + location.host + chat.dataset.wsPath + "?after=" + lastSeq);
      socket.addEventListener("open", function () { delay = 1000; });
      socket.addEventListener("message", function (e) {
        var event;
        try { event = JSON.parse(e.data); } catch (err) { return; }
        handle(event);
      });
      socket.addEventListener("close", function (e) {
        if (e.code === 4401) return sessionEnded();
        if (e.code === 4400 || e.code === 4404) return; // retrying won't help
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 15000);
      });
    }

    if (form) {
      var text = form.querySelector("textarea");
      var clientId = form.querySelector('input[name="client_id"]');
      var button = form.querySelector("button[type=submit]");
      text.addEventListener("keydown", function (e) {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
          e.preventDefault();
          // Files alone make a message too (attachments.js marks the form).
          if (!text.readOnly && (text.value.trim() || form.dataset.hasFiles)) form.requestSubmit();
        }
      });
      // Enter sends from here on: a page (or a test) that types at once waits for this mark.
      form.dataset.ready = "true";
      form.addEventListener("htmx:configRequest", function (e) {
        // One id per message, kept until it is stored: a resend after a failure stores once.
        if (!clientId.value) clientId.value = newId();
        e.detail.parameters.client_id = clientId.value;
      });
      form.addEventListener("htmx:beforeRequest", function () {
        text.readOnly = true;
        button.disabled = true;
      });
      form.addEventListener("htmx:afterRequest", function (e) {
        text.readOnly = false;
        button.disabled = false;
        // Not `successful`: a refusal shown as a partial (400, 429) counts as one for htmx,
        // and its message and the typed text must stay.
        if (e.detail.xhr && e.detail.xhr.status < 300) {
          form.reset();
          clientId.value = "";
          var error = document.getElementById("composer-error");
          if (error) error.textContent = "";
        }
        text.focus();
      });
    }

    document.body.addEventListener("htmx:beforeSwap", function (e) {
      var xhr = e.detail.xhr;
      var source = e.detail.requestConfig && e.detail.requestConfig.elt;
      var refused = xhr.status === 400 || xhr.status === 429 ||
        (source && source.closest(".approval") && [403, 404, 409].indexOf(xhr.status) >= 0);
      if (refused) { // refusals come back as partials to show
        e.detail.shouldSwap = true;
        e.detail.isError = false;
      }
      if (e.detail.target === list && xhr.status < 300) {
        var id = (xhr.responseText.match(/id="(message-\d+)"/) || [])[1];
        if (id && document.getElementById(id)) e.detail.shouldSwap = false; // came live first
      }
      if (e.detail.target.classList.contains("load-older")) olderHeight = list.scrollHeight;
    });
    document.body.addEventListener("htmx:afterSwap", function (e) {
      localizeTimes(document);
      var empty = document.getElementById("no-messages");
      if (empty && list.querySelector("article")) empty.remove();
      if (olderHeight !== null) { // keep the reader where they were
        list.scrollTop += list.scrollHeight - olderHeight;
        olderHeight = null;
      } else if (e.detail.target === list) {
        list.scrollTop = list.scrollHeight;
      }
    });

    // A message an app sent from the composer itself (attachments.js), rendered by the server.
    list.addEventListener("hermes:message-html", function (e) {
      if (e.detail && e.detail.html) place(e.detail.html, null);
      list.scrollTop = list.scrollHeight;
    });

    list.scrollTop = list.scrollHeight;
    if (chat.dataset.wsPath) connect();
    if (cards) fetchCards(cards.dataset.url);
  }

  document.addEventListener("DOMContentLoaded", function () {
    localizeTimes(document);
    var chat = document.getElementById("chat");
    if (chat) setupChat(chat);
  });
})();
