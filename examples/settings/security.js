// The page's security log: the organization's audit entries (who changed which key or
// endpoint, from where, when), newest first, a page at a time. Built with DOM calls only.
"use strict";

const ACTIONS = {
  "key.issued": "Created key",
  "key.rolled": "Rolled key",
  "key.revoked": "Revoked key",
  "key.leaked": "Revoked leaked key",
  "key.restricted": "Changed allowed IPs",
  "key.permissions_changed": "Changed permissions",
  "key.api_version_pinned": "Changed API version",
  "key.api_version_rolled_back": "Rolled back API version",
  "policy.changed": "Changed key policy",
  "webhook.added": "Added endpoint",
  "webhook.secret_rotated": "Rotated endpoint secret",
  "webhook.enabled": "Enabled endpoint",
  "webhook.disabled": "Disabled endpoint",
  "webhook.removed": "Removed endpoint",
  "webhook.test_sent": "Sent test event",
  "webhook.message_retried": "Retried message",
  "webhook.messages_recovered": "Recovered messages",
  "audit.pruned": "Deleted old log entries",
};

// Why webhook delivery disabled an endpoint (the detail of its `webhook.disabled` entry).
const DISABLE_REASONS = new Map([
  ["gone", "it answered 410 Gone"],
  ["failing", "its deliveries failed for the disable period"],
]);

// Key ids to labels, so an entry names the key as the table above does.
let securityKeyNames = new Map();

function securityRow(entry) {
  const row = document.createElement("tr");
  row.dataset.action = entry.action;
  const what = cell(ACTIONS[entry.action] || entry.action, "action");
  what.title = entry.action;
  let target = entry.target || "—";
  if (entry.target && entry.action.startsWith("key.")) {
    const name = securityKeyNames.get(entry.target);
    if (name) target = `${name} (${entry.target})`;
  }
  const targetCell = cell(target, "target");
  if (entry.detail) {
    const reason = entry.action === "webhook.disabled" && DISABLE_REASONS.get(entry.detail);
    targetCell.append(element("small", "", reason || entry.detail));
  }
  const from = cell(entry.sourceAddress || "—", "source");
  if (entry.userAgent) from.title = entry.userAgent;
  row.append(dateCell(entry.at), cell(entry.actor, "actor"), what, targetCell, from);
  return row;
}

async function loadSecurityLog(token) {
  const body = document.getElementById("security-log");
  const more = document.getElementById("security-more");
  const query = "?limit=20" + (token ? "&page_token=" + encodeURIComponent(token) : "");
  try {
    const page = await call("GET", "/audit" + query);
    if (!token) body.replaceChildren();
    for (const entry of page.entries) body.append(securityRow(entry));
    if (!token && page.entries.length === 0) {
      const row = body.insertRow();
      row.append(Object.assign(cell("No changes yet.", "empty"), { colSpan: 5 }));
    }
    more.hidden = !page.nextPageToken;
    more.dataset.token = page.nextPageToken || "";
  } catch (error) {
    statusLine.textContent = "Could not load the security log: " + error.message;
  }
}

// Called by the keys table after each drawing: the log has the change just made.
function showSecurityLog(keys) {
  const section = document.getElementById("security-section");
  section.hidden = !abilities.auditLog;
  if (!abilities.auditLog) return;
  securityKeyNames = new Map(keys.map((key) => [key.id, key.label || "Untitled key"]));
  const more = document.getElementById("security-more");
  if (!more.dataset.bound) {
    more.dataset.bound = "true";
    more.addEventListener("click", () => loadSecurityLog(more.dataset.token));
  }
  loadSecurityLog(null);
}
