// Knowledge pages: a folder upload keeps each file's path inside the folder (the browser's
// multipart names carry only the file's own name), and the document viewer marks the cited
// passage (or says it is gone when the document changed since the citation).
(function () {
  "use strict";

  var form = document.getElementById("upload-form");
  if (form) {
    form.addEventListener("submit", function (e) {
      var data = new FormData();
      data.append("csrfmiddlewaretoken", form.querySelector("[name=csrfmiddlewaretoken]").value);
      form.querySelectorAll("input[type=file]").forEach(function (input) {
        Array.prototype.forEach.call(input.files, function (file) {
          data.append("files", file, file.name);
          data.append("paths", file.webkitRelativePath || file.name);
        });
      });
      e.preventDefault();
      var button = form.querySelector("button[type=submit]");
      button.disabled = true;
      button.textContent = "Uploading…";
      fetch(form.action, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { "X-Requested-With": "fetch" },
      })
        .then(function (response) { return response.json(); })
        .then(function (answer) { window.location.assign(answer.url || window.location.href); })
        .catch(function () { button.disabled = false; button.textContent = "Upload"; });
    });
  }

  function markCited() {
    var id = window.location.hash.slice(1);
    if (!/^K\d+$/.test(id)) return;
    document.querySelectorAll(".passage.is-cited").forEach(function (el) { el.classList.remove("is-cited"); });
    var passage = document.getElementById(id);
    var gone = document.getElementById("cited-gone");
    if (!passage) {
      if (gone) gone.hidden = false;
      return;
    }
    passage.classList.add("is-cited");
    passage.scrollIntoView({ block: "center" });
    passage.focus({ preventScroll: true });
  }
  if (document.getElementById("document")) {
    markCited();
    window.addEventListener("hashchange", markCited);
  }
})();
