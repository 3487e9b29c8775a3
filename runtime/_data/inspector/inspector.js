// step-runtime inspector: live updates by polling the inspector's JSON endpoints.
// Run data is set as text (textContent), never as markup; links are built from a fixed prefix.
"use strict";
(function () {
  var PERIOD = 2000;

  function cell(row, text) {
    var td = document.createElement("td");
    td.textContent = text === null || text === undefined ? "" : String(text);
    row.appendChild(td);
    return td;
  }

  function runsTable(table) {
    var live = document.getElementById("live");
    function draw(runs) {
      var body = document.createElement("tbody");
      runs.forEach(function (r) {
        var row = document.createElement("tr");
        row.setAttribute("data-run", r.run_id);
        var link = document.createElement("a");
        link.textContent = r.run_id;
        link.href = "/inspect/runs/" + encodeURIComponent(r.run_id);
        cell(row, "").appendChild(link);
        cell(row, r.pipeline);
        var badge = document.createElement("span");
        badge.className = "status " + String(r.status).replace(/[^a-z]/g, "");
        badge.textContent = r.status;
        cell(row, "").appendChild(badge);
        cell(row, r.started);
        cell(row, r.seconds);
        cell(row, r.steps);
        cell(row, r.error);
        body.appendChild(row);
      });
      table.replaceChild(body, table.tBodies[0]);
    }
    function poll() {
      fetch(table.getAttribute("data-poll"), { credentials: "same-origin" })
        .then(function (resp) { return resp.json(); })
        .then(function (data) {
          draw(data.runs);
          if (live) { live.textContent = "live, updated " + new Date().toLocaleTimeString(); }
        })
        .catch(function () { if (live) { live.textContent = "not updating (server unreachable)"; } })
        .then(function () { setTimeout(poll, PERIOD); });
    }
    setTimeout(poll, PERIOD);
  }

  function runPage(head) {
    var status = head.getAttribute("data-status");
    var events = head.getAttribute("data-events");
    function poll() {
      fetch(head.getAttribute("data-poll"), { credentials: "same-origin" })
        .then(function (resp) { return resp.json(); })
        .then(function (data) {
          if (String(data.status) !== status || String(data.events) !== events) {
            window.location.reload();
            return;
          }
          if (status === "running") { setTimeout(poll, PERIOD); }
        })
        .catch(function () { setTimeout(poll, PERIOD * 5); });
    }
    // a finished run does not change: only a running one is followed
    if (status === "running") { setTimeout(poll, PERIOD); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    var table = document.getElementById("runs");
    if (table) { runsTable(table); }
    var head = document.getElementById("run");
    if (head) { runPage(head); }
  });
})();
