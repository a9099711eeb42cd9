// The page's usage: a sparkline of each key's last 30 days in its row, and daily bars stacked
// by outcome, for one key or all, with totals and the share refused. Drawn as SVG through DOM
// calls (the CSP allows no inline script or style, and nothing is parsed from a string); the
// totals are text, so the chart reads without colour.
"use strict";

const USAGE_DAYS = 30;
const DAY_MS = 86400000;
const SVG_NS = "http://www.w3.org/2000/svg";
const OUTCOMES = [
  ["ok", "OK"],
  ["not_modified", "Not modified"],
  ["error", "Error"],
  ["rate_limited", "Rate limited"],
  ["address_not_allowed", "Address not allowed"],
  ["permission_missing", "Permission missing"],
  ["expired", "Expired"],
  ["revoked", "Revoked"],
];
// The outcomes of a key that was refused (an error is ours, not a refusal).
const REFUSED = ["rate_limited", "address_not_allowed", "permission_missing", "expired", "revoked"];

// Per key id: the counts of each day (oldest first), each an object of outcome -> count.
let usageByKey = new Map();
let usageKeys = [];
// The days usageByKey was read for: a chart drawn again (another key chosen) after a UTC
// midnight labels its bars with these, not with a new day the counts were never read for.
let usageDaysRead = usageDays();

function svgElement(tag, attributes) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attributes || {})) node.setAttribute(name, String(value));
  return node;
}

// The first instants of the last 30 UTC days, oldest first.
function usageDays() {
  const now = new Date();
  const today = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  return Array.from({ length: USAGE_DAYS }, (_, i) => today - (USAGE_DAYS - 1 - i) * DAY_MS);
}

function total(counts) {
  return Object.values(counts).reduce((sum, n) => sum + n, 0);
}

function dayName(start) {
  return new Date(start).toLocaleDateString("en-GB", { day: "numeric", month: "short", timeZone: "UTC" });
}

async function readUsage(keys, days) {
  const from = new Date(days[0]).toISOString();
  const to = new Date(days[days.length - 1] + DAY_MS).toISOString();
  const query = `from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&granularity=day`;
  const read = await Promise.all(keys.map((key) =>
    call("GET", `/keys/${encodeURIComponent(key.id)}/usage?${query}`).then((data) => [key.id, data], () => [key.id, null])));
  const byKey = new Map();
  for (const [id, data] of read) {
    const perDay = days.map(() => ({}));
    for (const bucket of data ? data.buckets : []) {
      const index = Math.round((Date.parse(bucket.start) - days[0]) / DAY_MS);
      if (index >= 0 && index < days.length) {
        perDay[index][bucket.outcome] = (perDay[index][bucket.outcome] || 0) + bucket.count;
      }
    }
    byKey.set(id, perDay);
  }
  return byKey;
}

// A key's 30 days as bars 24 px high, and its total as text beside them.
function drawSparkline(cellNode, perDay) {
  const totals = perDay.map(total);
  const sum = totals.reduce((a, b) => a + b, 0);
  const most = Math.max(1, ...totals);
  const chart = svgElement("svg", { viewBox: `0 0 ${USAGE_DAYS * 3} 24`, width: 60, height: 24, class: "sparkline", preserveAspectRatio: "none", role: "img",
    "aria-label": `${sum} requests in the last 30 days` });
  totals.forEach((n, i) => {
    const height = n === 0 ? 0 : Math.max(1, Math.round((n / most) * 22));
    chart.append(svgElement("rect", { x: i * 3, y: 23 - height, width: 2, height, class: "spark-bar" }));
  });
  chart.append(svgElement("line", { x1: 0, y1: 23.5, x2: USAGE_DAYS * 3, y2: 23.5, class: "spark-base" }));
  cellNode.replaceChildren(chart, element("span", "spark-total", String(sum)));
  cellNode.title = `${sum} requests in the last 30 days`;
}

// The selected key's (or every key's) days: bars stacked by outcome, and the totals.
function drawChart(days) {
  const selected = document.getElementById("usage-key").value;
  const ids = selected ? [selected] : usageKeys.map((key) => key.id);
  const perDay = days.map((_, i) => {
    const counts = {};
    for (const id of ids) {
      for (const [outcome, n] of Object.entries((usageByKey.get(id) || [])[i] || {})) counts[outcome] = (counts[outcome] || 0) + n;
    }
    return counts;
  });
  const [width, height, left, top, bottom] = [620, 180, 44, 10, 150];
  const most = Math.max(1, ...perDay.map(total));
  const slot = (width - left - 4) / days.length;
  const chart = svgElement("svg", { viewBox: `0 0 ${width} ${height}`, class: "usage-bars", role: "img",
    "aria-labelledby": "usage-title" });
  chart.append(svgElement("line", { x1: left, y1: bottom + 0.5, x2: width - 4, y2: bottom + 0.5, class: "axis" }));
  const maxLabel = svgElement("text", { x: left - 6, y: top + 10, class: "axis-label", "text-anchor": "end" });
  maxLabel.textContent = String(most);
  const zeroLabel = svgElement("text", { x: left - 6, y: bottom, class: "axis-label", "text-anchor": "end" });
  zeroLabel.textContent = "0";
  chart.append(maxLabel, zeroLabel);
  perDay.forEach((counts, i) => {
    const day = svgElement("g", { class: "day" });
    const title = svgElement("title");
    const parts = OUTCOMES.filter(([outcome]) => counts[outcome]).map(([outcome, name]) => `${name} ${counts[outcome]}`);
    title.textContent = `${dayName(days[i])}: ${total(counts)} requests${parts.length ? " (" + parts.join(", ") + ")" : ""}`;
    day.append(title);
    let y = bottom;
    for (const [outcome] of OUTCOMES) {
      const n = counts[outcome] || 0;
      if (n === 0) continue;
      const h = Math.max(1, (n / most) * (bottom - top));
      y -= h;
      day.append(svgElement("rect", { x: left + i * slot + 1, y, width: Math.max(1, slot - 2), height: h, class: "seg o-" + outcome }));
    }
    chart.append(day);
  });
  // The first and last labels are anchored at their outer bar's outer edge, so neither runs
  // past the chart's edge (a centred last label was cut: "26 No").
  const labelled = [[0, left + 1, "start"],
    [Math.floor(days.length / 2), left + Math.floor(days.length / 2) * slot + slot / 2, "middle"],
    [days.length - 1, left + days.length * slot - 1, "end"]];
  for (const [i, x, anchor] of labelled) {
    const label = svgElement("text", { x, y: height - 10, class: "axis-label", "text-anchor": anchor });
    label.textContent = dayName(days[i]);
    chart.append(label);
  }
  document.getElementById("usage-chart").replaceChildren(chart);

  const sums = {};
  for (const counts of perDay) for (const [outcome, n] of Object.entries(counts)) sums[outcome] = (sums[outcome] || 0) + n;
  const all = total(sums);
  const refused = REFUSED.reduce((sum, outcome) => sum + (sums[outcome] || 0), 0);
  const share = all === 0 ? 0 : Math.round((refused / all) * 1000) / 10;
  const totals = document.getElementById("usage-totals");
  totals.replaceChildren();
  const entry = (term, value, id, className) => {
    const dd = element("dd", "", value);
    if (id) dd.id = id;
    const pair = element("div");
    pair.append(element("dt", className, term), dd);
    totals.append(pair);
  };
  entry("Requests", String(all), "usage-total");
  entry("Refused", `${refused} (${share}%)`, "usage-refused");
  for (const [outcome, name] of OUTCOMES) entry(name, String(sums[outcome] || 0), "usage-" + outcome, "swatch o-" + outcome);
}

// Called by the keys table after each drawing: reads the keys' usage and draws it.
async function showUsage(keys) {
  const section = document.getElementById("usage-section");
  section.hidden = !abilities.usage;
  if (!abilities.usage) return;
  usageKeys = keys;
  const days = usageDays();
  try {
    usageByKey = await readUsage(keys, days);
    usageDaysRead = days;
  } catch (error) { statusLine.textContent = "Could not load the usage: " + error.message; return; }
  for (const key of keys) {
    const sparkCell = document.getElementById("spark-" + key.id);
    if (sparkCell) drawSparkline(sparkCell, usageByKey.get(key.id) || []);
  }
  const select = document.getElementById("usage-key");
  const chosen = select.value;
  select.replaceChildren(new Option("All keys", ""));
  for (const key of keys) select.add(new Option(`${key.label || "Untitled key"} (${key.hint || key.id})`, key.id));
  select.value = keys.some((key) => key.id === chosen) ? chosen : "";
  if (!select.dataset.bound) {
    select.dataset.bound = "true";
    select.addEventListener("change", () => drawChart(usageDaysRead));
  }
  drawChart(days);
}
