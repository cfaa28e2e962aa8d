// The usage page's chart: reads the figures from the JSON script tag the page renders
// (#usage-chart-data) and draws them with Chart.js (static/vendor, from the npm registry).
// No inline script or style: the site's CSP forbids both. Without JavaScript, or if
// Chart.js did not load, the canvas stays hidden and the table holds the same figures.
(function () {
  "use strict";

  function draw() {
    var canvas = document.getElementById("usage-chart");
    var source = document.getElementById("usage-chart-data");
    if (!canvas || !source || typeof window.Chart !== "function") return;
    var data = JSON.parse(source.textContent);
    canvas.hidden = false;
    var chart = new window.Chart(canvas, {
      type: "bar",
      data: {
        labels: data.days,
        datasets: [
          { label: "prompt tokens", data: data.prompt, stack: "tokens", yAxisID: "tokens" },
          { label: "completion tokens", data: data.completion, stack: "tokens", yAxisID: "tokens" },
          {
            label: "cost (" + data.currency + ")",
            data: data.cost,
            type: "line",
            yAxisID: "cost",
            spanGaps: false,
          },
        ],
      },
      options: {
        animation: false,
        responsive: true,
        scales: {
          tokens: { type: "linear", position: "left", stacked: true, beginAtZero: true },
          cost: { type: "linear", position: "right", beginAtZero: true, grid: { drawOnChartArea: false } },
          x: { stacked: true },
        },
      },
    });
    canvas.dataset.rendered = "true";
    window.hermesUsageChart = chart;
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", draw);
  } else {
    draw();
  }
})();
