// The console's live parts. Record contents are written with textContent only (never
// innerHTML), so a record holding markup shows as text.
"use strict";

function cell(row, text, pre) {
  const td = row.insertCell();
  if (pre) { const p = document.createElement("pre"); p.textContent = text; td.appendChild(p); }
  else { td.textContent = text; }
  return td;
}

function startTail() {
  const table = document.getElementById("records");
  const box = document.getElementById("tail");
  let timer = null;
  // as the page's own rows show it (app.py record_time): a UTC date to the millisecond
  function recordTime(ms) {
    if (ms < 0) { return "-"; }
    return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  }
  async function poll() {
    const d = table.dataset;
    const url = "/api/topics/" + encodeURIComponent(d.topic) + "/messages?partition=" +
      d.partition + "&offset=" + d.next + "&format=" + d.format + "&limit=200";
    try {
      const res = await fetch(url);
      const body = await res.json();
      for (const r of body.records || []) {
        const row = table.insertRow();
        cell(row, String(r.offset));
        const ts = cell(row, recordTime(r.timestamp)); ts.className = "ts"; ts.title = r.timestamp + " ms";
        cell(row, r.key, true); cell(row, r.value, true);
        const h = cell(row, "");
        for (const [k, v] of r.headers) {
          const div = document.createElement("div"); div.textContent = k + ": " + v; h.appendChild(div);
        }
        d.next = String(r.offset + 1);
      }
    } finally {
      if (box.checked) { timer = setTimeout(poll, 1000); }
    }
  }
  box.addEventListener("change", () => {
    if (box.checked) { poll(); } else if (timer) { clearTimeout(timer); }
  });
}

function lineChart(canvas, label) {
  return new Chart(canvas, {
    type: "line",
    data: { datasets: [] },
    options: { animation: false, maintainAspectRatio: false, parsing: false,
      scales: { x: { type: "linear", ticks: { callback: (v) => new Date(v).toLocaleTimeString() } },
                y: { beginAtZero: true, title: { display: true, text: label } } } },
  });
}

function startLagChart() {
  const canvas = document.getElementById("lag-chart");
  const chart = lineChart(canvas, "total lag");
  chart.data.datasets = [{ label: "total lag", data: [], borderColor: "#2563eb" }];
  async function poll() {
    try {
      const res = await fetch("/api/groups/" + encodeURIComponent(canvas.dataset.group) + "/lag");
      const body = await res.json();
      if (body.history) {
        chart.data.datasets[0].data = body.history.map(([t, v]) => ({ x: t, y: v }));
        const last = body.history.length ? body.history[body.history.length - 1][0] : Date.now();
        chart.options.scales.x.min = last - 5 * 60 * 1000;  // the last five minutes
        chart.options.scales.x.max = last;
        chart.update();
        document.getElementById("total-lag").textContent = String(body.total);
      }
    } finally { setTimeout(poll, 5000); }
  }
  poll();
}

function startMetrics() {
  const brokerChart = lineChart(document.getElementById("broker-chart"), "per second");
  const topicChart = lineChart(document.getElementById("topic-chart"), "per second");
  const series = new Map();
  function push(chart, label, at, value) {
    let ds = chart.data.datasets.find((d) => d.label === label);
    if (!ds) { ds = { label: label, data: [] }; chart.data.datasets.push(ds); }
    ds.data.push({ x: at, y: value });
    if (ds.data.length > 360) { ds.data.shift(); }
  }
  async function poll() {
    try {
      const body = await (await fetch("/api/metrics")).json();
      const at = body.at * 1000;
      for (const c of [brokerChart, topicChart]) { c.options.scales.x.min = at - 10 * 60 * 1000; c.options.scales.x.max = at; }
      for (const [url, rates] of Object.entries(body.brokers)) {
        for (const [meter, v] of Object.entries(rates)) { push(brokerChart, url + " " + meter, at, v); }
      }
      for (const [topic, rates] of Object.entries(body.topics)) {
        for (const [meter, v] of Object.entries(rates)) { push(topicChart, topic + " " + meter, at, v); }
      }
      brokerChart.update(); topicChart.update();
      document.getElementById("metrics-errors").textContent =
        Object.entries(body.errors).map(([u, e]) => u + ": " + e).join("; ");
    } finally { setTimeout(poll, 5000); }
  }
  poll();
}
