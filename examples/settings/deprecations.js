// The page's Deprecated calls section: for each deprecation of the Partner API (a route, or a
// query parameter of one), the organization's keys that still called it in the last 30 days,
// how often and when last, beside its sunset date. Built with DOM calls only.
"use strict";

// A date of the API (YYYY-MM-DD, 00:00 UTC) as the page writes dates.
function apiDay(day) {
  if (!day) return "—";
  return new Date(day + "T00:00:00Z").toLocaleDateString("en-GB",
    { day: "numeric", month: "short", year: "numeric", timeZone: "UTC" });
}

function deprecationCell(deprecation) {
  const td = cell("", "target");
  const what = element("code", "", "GET /v1" + deprecation.target);
  // A link only to a web page: the service's JSON is trusted no further than that.
  let url = null;
  try { url = deprecation.link ? new URL(deprecation.link) : null; } catch (error) { url = null; }
  if (url && (url.protocol === "https:" || url.protocol === "http:")) {
    const link = element("a");
    link.href = url.href;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    link.append(what);
    td.append(link);
  } else {
    td.append(what);
  }
  // A space before each note: read as text (a screen reader, a copy), cell and note stay
  // two phrases, not one run-together word.
  if (deprecation.parameter) td.append(" ", element("small", "", `the ${deprecation.parameter} parameter`));
  return td;
}

function sunsetCell(deprecation) {
  const td = cell(apiDay(deprecation.sunsetOn), "sunset");
  if (deprecation.sunsetOn) {
    td.append(" ", element("small", "", deprecation.enforced ? "then 410 Gone" : "may stop answering"));
  }
  return td;
}

function deprecatedCallRows(deprecation, keyNames) {
  const rows = [];
  const callers = deprecation.keys.length ? deprecation.keys : [null];
  for (const caller of callers) {
    const row = document.createElement("tr");
    row.dataset.target = deprecation.target;
    const since = cell(apiDay(deprecation.deprecatedOn), "since");
    if (!caller) {
      const none = Object.assign(cell("No key called it in the last 30 days.", "empty"), { colSpan: 3 });
      row.append(deprecationCell(deprecation), since, sunsetCell(deprecation), none);
    } else {
      row.dataset.keyId = caller.keyId;
      const name = keyNames.get(caller.keyId);
      const key = cell(name ? `${name} (${caller.keyId})` : caller.keyId, "key");
      row.append(deprecationCell(deprecation), since, sunsetCell(deprecation), key,
        cell(String(caller.calls), "calls"), dateCell(caller.lastCallAt));
    }
    rows.push(row);
  }
  return rows;
}

// Called by the keys table after each drawing, with the keys it drew.
async function showDeprecatedCalls(keys) {
  const section = document.getElementById("deprecations-section");
  section.hidden = !abilities.deprecatedCalls;
  if (!abilities.deprecatedCalls) return;
  const body = document.getElementById("deprecated-calls");
  const keyNames = new Map(keys.map((key) => [key.id, key.label || "Untitled key"]));
  try {
    const { deprecations } = await call("GET", "/deprecated-calls");
    body.replaceChildren();
    for (const deprecation of deprecations) body.append(...deprecatedCallRows(deprecation, keyNames));
    if (deprecations.length === 0) {
      const row = body.insertRow();
      row.append(Object.assign(cell("Nothing in the Partner API is deprecated.", "empty"), { colSpan: 6 }));
    }
  } catch (error) {
    statusLine.textContent = "Could not load the deprecated calls: " + error.message;
  }
}
