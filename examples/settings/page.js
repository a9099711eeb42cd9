// The Settings -> Partner API page's script. A file of its own (the CSP allows no inline
// script), loaded in the head so it sees every CSP violation; the page starts once parsed.
// Every element is built with createElement and textContent, never from an HTML string, so
// no key field (a label, a hint) can ever be read as markup.
"use strict";

// CSP violations, for the page's test and a developer's console: none is expected.
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.cspViolations.push(`${event.violatedDirective} ${event.blockedURI}`);
  console.warn("CSP violation:", event.violatedDirective, event.blockedURI);
});

const api = "/settings/partner-api/api";
const DAY_SECONDS = 86400;
const OVERLAPS = [
  ["3600", "Old key works 1 more hour"],
  ["86400", "Old key works 24 more hours"],
  ["604800", "Old key works 7 more days"],
  ["0", "Old key stops now"],
];

// One address range as people write it: IPv4 or IPv6, optionally with a prefix length. The
// server checks each exactly (no bits past the prefix, at most 100); this catches typos early.
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;

// An IPv4 address or range.
function isIPv4Range(text) {
  const [address, prefix, extra] = text.split("/");
  return extra === undefined && IPV4.test(address) &&
    (prefix === undefined || /^(3[0-2]|[12]?\d)$/.test(prefix));
}

// An IPv6 address or range: groups of 1 to 4 hex digits, one "::" at most, an IPv4 tail
// allowed (::ffff:192.0.2.1); "203.0.113.7:443" (an address with a port) is not one.
function isIPv6Range(text) {
  const [address, prefix, extra] = text.split("/");
  if (extra !== undefined || (prefix !== undefined && !/^(12[0-8]|1[01]\d|[1-9]?\d)$/.test(prefix))) return false;
  if (!/^[0-9A-Fa-f:.]+$/.test(address) || !address.includes(":") || address.includes(":::")) return false;
  const halves = address.split("::");
  if (halves.length > 2) return false;
  const groups = halves.flatMap((half) => (half === "" ? [] : half.split(":")));
  let count = groups.length;
  const last = groups[groups.length - 1];
  if (last !== undefined && last.includes(".")) {
    if (!IPV4.test(last)) return false;
    groups.pop();
    count += 1;
  }
  if (groups.some((group) => !/^[0-9A-Fa-f]{1,4}$/.test(group))) return false;
  return halves.length === 2 ? count < 8 : count === 8;
}

// The ranges typed in `input` (separated by commas or spaces), or null after saying why not.
// The provider ids of a comma-separated field: none for an empty one.
function providersOf(input) {
  return input.value.split(",").map((provider) => provider.trim()).filter((provider) => provider !== "");
}

// What a key may read, in words, when it is limited: its permissions and providers.
function accessOf(key) {
  const parts = [];
  const permissions = key.permissions || ["orders", "events"];
  if (permissions.length < 2) {
    parts.push(permissions.length ? "Reads " + permissions.join(" and ") : "Reads /me only");
  }
  if (key.providers) parts.push("Providers " + key.providers.join(", "));
  return parts.join(" · ");
}

// Sets a key's access: its permissions, then its providers.
async function setAccess(key, permissions, providers) {
  const id = encodeURIComponent(key.id);
  await call("POST", `/keys/${id}/permissions`, { permissions });
  await call("POST", `/keys/${id}/providers`, { providers });
}

function rangesOf(input, what) {
  const ranges = input.value.split(/[\s,]+/).filter((range) => range !== "");
  const bad = ranges.find((range) => !isIPv4Range(range) && !isIPv6Range(range));
  if (bad !== undefined) {
    input.setAttribute("aria-invalid", "true");
    statusLine.textContent = `Could not ${what}: "${bad}" is not an IP address or CIDR range (such as 203.0.113.0/24).`;
    input.focus();
    return null;
  }
  if (ranges.length > 100) {
    input.setAttribute("aria-invalid", "true");
    statusLine.textContent = `Could not ${what}: a key may carry at most 100 address ranges.`;
    input.focus();
    return null;
  }
  input.removeAttribute("aria-invalid");
  return ranges;
}

let csrf = "";
let statusLine = null;
// The id of the key whose plaintext is shown, so it can be hidden once that key is revoked.
let shownKeyId = null;

async function call(method, path, body) {
  const options = { method, headers: { "Accept": "application/json" } };
  if (method !== "GET") {
    options.headers["Content-Type"] = "application/json";
    options.headers["X-CSRF-Token"] = csrf;
    options.body = JSON.stringify(body || {});
  }
  const response = await fetch(api + path, options);
  const json = await response.json().catch(() => ({}));
  // The service's errors are {"error": {"message": ...}} (a 409 when a key cannot be rolled).
  if (!response.ok) throw new Error((json.error && json.error.message) || response.statusText);
  return json.data;
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function cell(text, className) {
  return element("td", className, text);
}

function dateCell(iso) {
  const td = cell(iso ? "" : "—", "date");
  if (iso) {
    const at = new Date(iso);
    td.textContent = at.toLocaleDateString("en-GB", { day: "numeric", month: "short", year: "numeric" });
    td.append(element("small", "", at.toLocaleTimeString("en-GB", { hour: "2-digit", minute: "2-digit" })));
    td.title = at.toString();
  }
  return td;
}

function statusOf(key) {
  if (key.revokedAt && key.revokedReason === "leaked") return ["leaked", "Leaked"];
  if (key.revokedAt && key.revokedReason === "rolled") return ["revoked", "Rolled"];
  if (key.revokedAt) return ["revoked", "Revoked"];
  if (key.expiresAt && new Date(key.expiresAt) <= new Date()) return ["expired", "Expired"];
  if (key.expiresAt) return ["expiring", "Expires"];
  return ["active", "Active"];
}

function button(text, className, onClick, label) {
  const b = element("button", className, text);
  b.type = "button";
  b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

// What the host's store offers besides the keys themselves (GET /abilities); until it is
// known, everything is shown.
let abilities = { keyPolicy: true, leakReports: true, lastUse: true, apiVersions: true,
  apiVersionPreview: true, restrictions: true, webhooks: true,
  webhookTestEvents: true, webhookDeliveryHistory: true, webhookApiVersions: true, usage: true, deprecatedCalls: true, auditLog: true };

// The partner API's versions (GET /api-versions), newest first, for the keys' pins.
let apiVersions = [];

// A key's hint, and under it its API version: what its requests without a version header
// are answered at (after an upgrade, the version it had is in the title and the Version form).
function hintCell(key) {
  const td = cell(key.hint || "—", "hint");
  const version = element("small", "version", "API " + key.apiVersion);
  const back = openRollback(key);
  version.title = back
    ? `Upgraded from ${back.to}; can be undone until ${new Date(back.until).toLocaleString("en-GB")}`
    : "The API version the key's requests are answered at";
  td.append(version);
  td.id = "hint-" + key.id;
  showCallsPerVersion(td, versionCalls.get(key.id));
  return td;
}

// Under a key's version, its calls per version in the last 30 days, if any.
function showCallsPerVersion(td, calls) {
  td.querySelector(".version-calls")?.remove();
  if (!calls || !calls.length) return;
  const text = calls.map((counted) => `${counted.version}: ${counted.calls}`).join(", ");
  const line = element("small", "version-calls", "Calls (30 days) " + text);
  line.title = "The key's calls per API version in the last 30 days";
  td.append(line);
}

// The way back from the key's last upgrade, while it is open.
function openRollback(key) {
  const back = key.apiVersionRollback;
  return back && new Date(back.until) > new Date() ? back : null;
}

async function rollBackVersion(key) {
  statusLine.textContent = "";
  try {
    await call("POST", `/keys/${encodeURIComponent(key.id)}/api-version/rollback`, {});
    await refresh();
  } catch (error) {
    statusLine.textContent = "Could not undo the upgrade: " + error.message;
  }
}

function showPin(actions, key) {
  const name = key.label || "this key";
  const form = element("form", "roll");
  const label = element("label", "sr-only", "API version of " + name);
  label.htmlFor = "version-" + key.id;
  const select = element("select", "pin-versions");
  select.id = label.htmlFor;
  apiVersions.forEach((listed, index) => {
    const option = element("option", "", listed.version + (index === 0 ? " (newest)" : ""));
    option.value = listed.version;
    option.title = listed.changes.join(" ") || "The first version";
    option.selected = listed.version === key.apiVersion;
    select.append(option);
  });
  const save = element("button", "primary confirm-pin", "Save");
  save.type = "submit";
  save.setAttribute("aria-label", "Save the API version of " + name);
  const cancel = element("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => refresh());
  form.append(label, select, save, cancel);
  if (abilities.apiVersionPreview) {
    form.append(button("Preview", "preview-version", () => showPreview(form, key, select.value),
      `Preview ${name} at the chosen API version`));
  }
  const back = openRollback(key);
  if (back) {
    form.append(button("Back to " + back.to, "undo-version", () => rollBackVersion(key),
      `Undo the upgrade of ${name}: back to ${back.to}`));
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    statusLine.textContent = "";
    try {
      await call("POST", `/keys/${encodeURIComponent(key.id)}/api-version`, { apiVersion: select.value });
      await refresh();
    } catch (error) {
      statusLine.textContent = "Could not change the API version: " + error.message;
      select.focus();
    }
  });
  actions.replaceChildren(form);
  select.focus();
}

// What the key would read at `version`: the organization's own orders and events at the
// key's version and at the chosen one, field by field (GET /keys/{id}/api-version/preview).
async function showPreview(form, key, version) {
  statusLine.textContent = "";
  let preview;
  try {
    preview = await call("GET",
      `/keys/${encodeURIComponent(key.id)}/api-version/preview?version=${encodeURIComponent(version)}`);
  } catch (error) {
    statusLine.textContent = "Could not preview the API version: " + error.message;
    return;
  }
  form.querySelector(".version-preview")?.remove();
  const section = element("section", "version-preview");
  section.setAttribute("aria-label", `Preview from ${preview.from} to ${preview.to}`);
  section.append(element("h3", "", `From ${preview.from} to ${preview.to}`));
  if (preview.changes.length) {
    const list = element("ul", "preview-changes");
    preview.changes.forEach((change) => list.append(element("li", "", change)));
    section.append(list);
  }
  const rows = [];
  for (const [what, items] of [["Order", preview.orders], ["Event", preview.events]]) {
    for (const item of items) {
      for (const difference of item.differences) rows.push([`${what} ${item.id}`, difference]);
    }
  }
  if (!rows.length) {
    section.append(element("p", "preview-same", "Your orders and events read the same at both versions."));
  } else {
    const scroller = element("div", "preview-scroll");
    const table = element("table", "preview-differences");
    const head = element("tr");
    ["Where", "Field", "Change", "From", "To"].forEach((title) => head.append(element("th", "", title)));
    table.append(head);
    const shown = (value) => value === undefined ? "—" : JSON.stringify(value);
    for (const [where, difference] of rows) {
      const row = element("tr", "preview-difference");
      row.append(cell(where), cell(difference.field, "field"), cell(difference.change, "change"),
        cell(shown(difference.from)), cell(shown(difference.to)));
      table.append(row);
    }
    scroller.append(table);
    section.append(scroller);
  }
  form.append(section);
}

function render(keys) {
  const body = document.getElementById("keys");
  body.replaceChildren();
  if (shownKeyId && keys.some((key) => key.id === shownKeyId && key.revokedAt)) hideReveal();
  document.getElementById("last-used-column").hidden = !abilities.lastUse;
  document.getElementById("usage-column").hidden = !abilities.usage;
  if (keys.length === 0) {
    const row = body.insertRow();
    const columns = 8 + (abilities.lastUse ? 1 : 0) + (abilities.usage ? 1 : 0);
    row.append(Object.assign(cell("No keys yet: create one above.", "empty"), { colSpan: columns }));
    showUsage(keys);
    showSecurityLog(keys);
    showDeprecatedCalls(keys);
    return;
  }
  for (const key of keys) {
    const row = body.insertRow();
    row.dataset.id = key.id;
    const name = key.label || "Untitled key";
    const [state, stateText] = statusOf(key);
    const env = cell(key.environment ? key.environment[0].toUpperCase() + key.environment.slice(1) : "—", "env " + (key.environment || ""));
    const status = cell("");
    status.append(element("span", "badge " + state, stateText));
    // Where a secret scanner found the key: a link only to a web address.
    if (key.leak && /^https?:\/\//.test(key.leak.url)) {
      const where = element("a", "leak-link", "where");
      where.href = key.leak.url;
      where.rel = "noopener noreferrer";
      where.target = "_blank";
      where.title = `Found in public (${key.leak.source}) on ${new Date(key.leak.reportedAt).toLocaleString("en-GB")}`;
      status.append(" ", where);
    }
    const ips = cell(key.allowedIps.length ? key.allowedIps.join(", ") : "Any", "ips");
    ips.id = "access-" + key.id;
    const actions = cell("", "actions");
    if (state === "active" || state === "expiring") {
      actions.append(button("Roll", "roll-key", () => showRoll(actions, key), "Roll " + name));
      actions.append(button("IPs", "restrict-key", () => showRestrict(actions, key), "Allowed IPs of " + name));
      if (abilities.restrictions) {
        actions.append(button("Access", "limit-key", () => showAccess(actions, key), "What " + name + " may read"));
      }
      if (abilities.apiVersions && apiVersions.length > 1) {
        actions.append(button("Version", "pin-version", () => showPin(actions, key), "API version of " + name));
      }
    }
    if (!key.revokedAt) {
      actions.append(button("Revoke", "danger revoke-key", () => revoke(key), "Revoke " + name));
    }
    // A store that records no last use: the column is hidden, not a row of dashes.
    const lastUsed = abilities.lastUse ? [dateCell(key.lastUsedAt)] : [];
    // Drawn by usage.js once the key's usage is read.
    const usage = abilities.usage ? [Object.assign(cell("", "spark"), { id: "spark-" + key.id })] : [];
    // Under its addresses, what a limited key may read (the label cell names the key alone).
    const access = accessOf(key);
    if (access) ips.append(element("div", "access", access));
    row.append(cell(name, "label"), hintCell(key), env, dateCell(key.createdAt),
      ...lastUsed, ...usage, dateCell(key.expiresAt), ips, status, actions);
  }
  showUsage(keys);
  showSecurityLog(keys);
  showDeprecatedCalls(keys);
}

// Each key's calls per API version over the last 30 days (GET /api-versions/calls), by key
// id; empty when the host counts none.
let versionCalls = new Map();

async function refresh() {
  let keys;
  try { keys = (await call("GET", "/keys")).keys; render(keys); }
  catch (error) { statusLine.textContent = "Could not load the keys: " + error.message; return; }
  await showSuggestions(keys);
  // The calls per version come after, into the keys' cells where they are.
  if (!abilities.deprecatedCalls) return;
  try {
    const counted = (await call("GET", "/api-versions/calls")).keys;
    versionCalls = new Map(counted.map((key) => [key.keyId, key.versions]));
    for (const key of keys) {
      const td = document.getElementById("hint-" + key.id);
      if (td) showCallsPerVersion(td, versionCalls.get(key.id));
    }
  } catch (_) { /* the keys are shown without their calls per version */ }
}

// Flags each key that holds permissions it never used in 30 days (GET
// /permissions/suggestions), under what it may read, with a button that narrows it to those
// it used (never adding one).
async function showSuggestions(keys) {
  if (!abilities.usage || !abilities.restrictions) return;
  let suggestions;
  try { suggestions = (await call("GET", "/permissions/suggestions")).suggestions; }
  catch (_) { return; /* the keys are shown without suggestions */ }
  for (const suggestion of suggestions) {
    const key = keys.find((key) => key.id === suggestion.keyId);
    const td = document.getElementById("access-" + suggestion.keyId);
    if (!key || !td || suggestion.unused.length === 0) continue;
    const name = key.label || "this key";
    const kept = suggestion.held.filter((permission) => suggestion.suggested.includes(permission));
    const flag = element("div", "unused", "Unused in 30 days: " + suggestion.unused.join(", ") + " ");
    const narrow = button("Narrow", "narrow-key", async () => {
      const to = kept.length ? "reading " + kept.join(" and ") : "/me only";
      if (!window.confirm(`Narrow ${name} to ${to}? Calls of the routes it drops get a 403.`)) return;
      statusLine.textContent = "";
      try {
        await call("POST", `/keys/${encodeURIComponent(key.id)}/permissions`, { permissions: kept });
        await refresh();
      } catch (error) {
        statusLine.textContent = "Could not narrow the key: " + error.message;
      }
    }, "Narrow " + name + " to the permissions it used");
    flag.append(narrow);
    td.append(flag);
  }
}

function reveal(plaintext, id) {
  shownKeyId = id;
  document.getElementById("reveal-empty").hidden = true;
  document.getElementById("reveal-key").hidden = false;
  document.getElementById("reveal").classList.add("shown");
  document.getElementById("new-key").textContent = plaintext;
  const copyButton = document.getElementById("copy");
  copyButton.textContent = "Copy";
  copyButton.focus();
}

// The key is revoked: its plaintext is of no use any more, and is taken off the page.
function hideReveal() {
  shownKeyId = null;
  document.getElementById("new-key").textContent = "";
  document.getElementById("reveal-key").hidden = true;
  document.getElementById("reveal-empty").hidden = false;
  document.getElementById("reveal").classList.remove("shown");
  document.getElementById("copy").textContent = "Copy";
}

async function copy(event) {
  const target = event.currentTarget;
  try {
    await navigator.clipboard.writeText(document.getElementById("new-key").textContent);
    target.textContent = "Copied";
  } catch (error) {
    target.textContent = "Select and copy";
  }
}

async function create(event) {
  event.preventDefault();
  statusLine.textContent = "";
  const form = event.target;
  const seconds = form.expiry.value;
  const allowedIps = rangesOf(form.allowedIps, "create the key");
  if (allowedIps === null) return;
  const body = { label: form.label.value.trim() || null, environment: form.environment.value, allowedIps };
  if (abilities.restrictions) {
    const permissions = [form.readOrders.checked && "orders", form.readEvents.checked && "events"].filter(Boolean);
    if (permissions.length < 2) body.permissions = permissions;
    const providers = providersOf(form.providers);
    if (providers.length) body.providers = providers;
  }
  if (seconds) body.expiresAt = new Date(Date.now() + seconds * 1000).toISOString();
  try {
    const created = await call("POST", "/keys", body);
    form.reset();
    reveal(created.key, created.record.id);
    await refresh();
  } catch (error) { statusLine.textContent = "Could not create the key: " + error.message; }
}

async function revoke(key) {
  const name = key.label || "this key";
  if (!window.confirm(`Revoke ${name} (${key.hint})? Partners using it lose access at once.`)) return;
  statusLine.textContent = "";
  try {
    await call("POST", `/keys/${encodeURIComponent(key.id)}/revoke`);
    if (key.id === shownKeyId) hideReveal();
    await refresh();
  } catch (error) { statusLine.textContent = "Could not revoke the key: " + error.message; }
}

function showRoll(actions, key) {
  const name = key.label || "this key";
  const form = element("form", "roll");
  const overlapLabel = element("label", "sr-only", "Old key keeps working for");
  overlapLabel.htmlFor = "overlap-" + key.id;
  const overlap = element("select", "overlap");
  overlap.id = overlapLabel.htmlFor;
  for (const [value, text] of OVERLAPS) overlap.add(new Option(text, value));
  overlap.value = "86400";
  // Empty: the new key keeps the lifetime its predecessor was issued with.
  const expiryLabel = element("label", "sr-only", "New key expires in (days), empty to keep the old key's lifetime");
  expiryLabel.htmlFor = "roll-expiry-" + key.id;
  const expiry = element("input", "roll-expiry");
  expiry.id = expiryLabel.htmlFor;
  expiry.type = "number";
  expiry.min = "1";
  expiry.step = "1";
  expiry.inputMode = "numeric";
  expiry.placeholder = "Expires in (days)";
  expiry.title = "The new key's lifetime in days; empty keeps the old key's";
  const rollButton = element("button", "primary confirm-roll", "Roll");
  rollButton.type = "submit";
  rollButton.setAttribute("aria-label", "Roll " + name);
  const cancel = element("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => refresh());
  form.append(overlapLabel, overlap, expiryLabel, expiry, rollButton, cancel);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    statusLine.textContent = "";
    const body = { overlapSeconds: Number(overlap.value) };
    if (expiry.validity.badInput || expiry.value.trim() !== "") {
      const days = Number(expiry.value);
      if (expiry.validity.badInput || !Number.isInteger(days) || days < 1) {
        statusLine.textContent = "Could not roll the key: give the new key's lifetime in whole days, 1 or more, or leave it empty.";
        expiry.focus();
        return;
      }
      body.expiresInSeconds = days * DAY_SECONDS;
    }
    try {
      const rolled = await call("POST", `/keys/${encodeURIComponent(key.id)}/roll`, body);
      reveal(rolled.key, rolled.record.id);
      await refresh();
    } catch (error) {
      statusLine.textContent = "Could not roll the key: " + error.message;
      // A 409 means the key was revoked or expired meanwhile: show it as it is now.
      await refresh();
    }
  });
  actions.replaceChildren(form);
  overlap.focus();
}

function showRestrict(actions, key) {
  const name = key.label || "this key";
  const form = element("form", "roll");
  const label = element("label", "sr-only", "Addresses allowed to use " + name + ", empty for any");
  label.htmlFor = "ips-" + key.id;
  const input = element("input", "restrict-ips");
  input.id = label.htmlFor;
  input.value = key.allowedIps.join(", ");
  input.placeholder = "Any address";
  input.title = "IP addresses or CIDR ranges, separated by commas; empty for any address";
  input.autocomplete = "off";
  const save = element("button", "primary confirm-restrict", "Save");
  save.type = "submit";
  save.setAttribute("aria-label", "Save the allowed IPs of " + name);
  const cancel = element("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => refresh());
  form.append(label, input, save, cancel);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    statusLine.textContent = "";
    const allowedIps = rangesOf(input, "change the allowed IPs");
    if (allowedIps === null) return;
    try {
      await call("POST", `/keys/${encodeURIComponent(key.id)}/restrict`, { allowedIps });
      await refresh();
    } catch (error) {
      statusLine.textContent = "Could not change the allowed IPs: " + error.message;
      input.focus();
    }
  });
  actions.replaceChildren(form);
  input.focus();
}

function showAccess(actions, key) {
  const name = key.label || "this key";
  const form = element("form", "roll access-form");
  const held = key.permissions || ["orders", "events"];
  const checks = ["orders", "events"].map((permission) => {
    const label = element("label", "check");
    const box = element("input", "limit-" + permission);
    box.type = "checkbox";
    box.checked = held.includes(permission);
    label.append(box, " " + permission[0].toUpperCase() + permission.slice(1));
    return [label, box];
  });
  const providersLabel = element("label", "sr-only", "Providers whose orders " + name + " may read, empty for every order");
  providersLabel.htmlFor = "providers-" + key.id;
  const providers = element("input", "limit-providers");
  providers.id = providersLabel.htmlFor;
  providers.value = (key.providers || []).join(", ");
  providers.placeholder = "All providers";
  providers.title = "Provider ids, separated by commas; empty for every order";
  providers.autocomplete = "off";
  const save = element("button", "primary confirm-limit", "Save");
  save.type = "submit";
  save.setAttribute("aria-label", "Save what " + name + " may read");
  const cancel = element("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => refresh());
  form.append(...checks.map(([label]) => label), providersLabel, providers, save, cancel);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    statusLine.textContent = "";
    const permissions = checks.filter(([, box]) => box.checked).map(([, box]) => box.className.slice("limit-".length));
    const listed = providersOf(providers);
    try {
      await setAccess(key, permissions, listed.length ? listed : null);
      await refresh();
    } catch (error) {
      statusLine.textContent = "Could not change what the key may read: " + error.message;
      providers.focus();
    }
  });
  actions.replaceChildren(form);
  checks[0][1].focus();
}

async function start() {
  csrf = document.querySelector('meta[name="csrf-token"]').content;
  statusLine = document.getElementById("status");
  document.getElementById("copy").addEventListener("click", copy);
  document.getElementById("create").addEventListener("submit", create);
  try { abilities = (await call("GET", "/abilities")).abilities; }
  catch (error) { /* an older service: show everything */ }
  document.getElementById("create-reads").hidden = !abilities.restrictions;
  document.getElementById("create-providers").hidden = !abilities.restrictions;
  try { apiVersions = (await call("GET", "/api-versions")).versions; }
  catch (error) { /* an older service: no versions to pin */ }
  refresh();
  startWebhooks();
}

document.addEventListener("DOMContentLoaded", start);
