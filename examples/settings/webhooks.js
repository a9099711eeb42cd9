// The Webhooks section of the Settings -> Partner API page: the organization's endpoints,
// their signing secrets (shown once), test events and delivery attempts. It uses page.js's
// `call`, `element`, `cell`, `button` and `dateCell`, and builds every element with
// textContent, never from HTML. Shown only when GET /abilities says the host offers webhooks;
// its test and attempts buttons only when it offers test events and the delivery history.
// page.js starts it once the abilities are known.
"use strict";

let webhookStatus = null;
// The endpoint whose attempts are shown.
let attemptsOf = null;

function showSecret(secret) {
  document.getElementById("secret-empty").hidden = true;
  document.getElementById("secret-shown").hidden = false;
  document.getElementById("secret-reveal").classList.add("shown");
  document.getElementById("new-secret").textContent = secret;
}

function renderEndpoints(endpoints) {
  const body = document.getElementById("endpoints");
  body.replaceChildren();
  if (endpoints.length === 0) {
    const row = body.insertRow();
    row.append(Object.assign(cell("No endpoints yet: add one above.", "empty"), { colSpan: 6 }));
    return;
  }
  for (const endpoint of endpoints) {
    const row = body.insertRow();
    row.dataset.id = endpoint.id;
    const status = cell("");
    status.append(element("span", "badge " + (endpoint.enabled ? "active" : "revoked"), endpoint.enabled ? "Enabled" : "Disabled"));
    const actions = cell("", "actions");
    const name = endpoint.url;
    if (endpoint.enabled && abilities.webhookTestEvents) actions.append(button("Send test", "test-endpoint", () => act(endpoint, "test", "send a test event"), "Send a test event to " + name));
    if (abilities.webhookDeliveryHistory) actions.append(button("Attempts", "show-attempts", () => showAttempts(endpoint), "Attempts of " + name));
    if (abilities.webhookApiVersions && apiVersions.length > 1) actions.append(button("Version", "pin-endpoint-version", () => showEndpointPin(actions, endpoint), "API version of " + name));
    actions.append(button("Rotate secret", "rotate-endpoint", () => rotate(endpoint), "Rotate the secret of " + name));
    actions.append(endpoint.enabled
      ? button("Disable", "disable-endpoint", () => act(endpoint, "disable", "disable the endpoint"), "Disable " + name)
      : button("Enable", "enable-endpoint", () => act(endpoint, "enable", "enable the endpoint"), "Enable " + name));
    actions.append(button("Remove", "danger remove-endpoint", () => remove(endpoint), "Remove " + name));
    const url = cell(endpoint.url, "url");
    const version = element("small", "version", "API " + endpoint.apiVersion);
    version.title = "The API version its orders' bodies are rendered at";
    url.append(version);
    const heard = (endpoint.events.length ? endpoint.events.join(", ") : "All")
      + (endpoint.providers ? " · Providers " + endpoint.providers.join(", ") : "");
    row.append(url, cell(heard, "events"),
      cell(endpoint.description || "—", "description"), dateCell(endpoint.createdAt), status, actions);
  }
}

// How many endpoints the organization has of the most its policy allows; at the cap the
// add button is off (the service would answer 409). A host without key policies shows the
// count alone.
function renderRoom(count, max) {
  const room = document.getElementById("endpoint-room");
  if (max === null) {
    room.textContent = `${count} endpoints.`;
    return;
  }
  room.textContent = `${count} of ${max} endpoints` + (count >= max ? ": remove one to add another." : ".");
  document.getElementById("add-endpoint-button").disabled = count >= max;
}

async function refreshEndpoints() {
  try {
    const [list, policy] = await Promise.all([
      call("GET", "/webhooks"), abilities.keyPolicy ? call("GET", "/policy").catch(() => null) : null]);
    renderEndpoints(list.endpoints);
    renderRoom(list.endpoints.length, policy ? policy.policy.maxWebhookEndpoints : null);
  } catch (error) { webhookStatus.textContent = "Could not load the endpoints: " + error.message; }
}

async function addEndpoint(event) {
  event.preventDefault();
  webhookStatus.textContent = "";
  const form = event.target;
  const events = [...form.querySelectorAll('input[name="events"]:checked')].map((box) => box.value);
  // Providers: the view of their orders it hears of (none: every order).
  const providers = providersOf(form.providers);
  const body = { url: form.url.value.trim(), events, description: form.description.value.trim(),
    providers: providers.length ? providers : null };
  try {
    const added = await call("POST", "/webhooks", body);
    form.reset();
    showSecret(added.endpoint.secret);
    await refreshEndpoints();
  } catch (error) { webhookStatus.textContent = "Could not add the endpoint: " + error.message; }
}

async function act(endpoint, action, what) {
  webhookStatus.textContent = "";
  try {
    const done = await call("POST", `/webhooks/${encodeURIComponent(endpoint.id)}/${action}`);
    if (action === "test") webhookStatus.textContent = `Test event queued (${done.messageId}).`;
    await refreshEndpoints();
    if (attemptsOf && attemptsOf.id === endpoint.id) await refreshAttempts();
  } catch (error) { webhookStatus.textContent = `Could not ${what}: ` + error.message; }
}

// The endpoint's API version: a pin applies from its next delivery attempt on.
function showEndpointPin(actions, endpoint) {
  const form = element("form", "roll");
  const label = element("label", "sr-only", "API version of " + endpoint.url);
  label.htmlFor = "endpoint-version-" + endpoint.id;
  const select = element("select", "endpoint-versions");
  select.id = label.htmlFor;
  apiVersions.forEach((listed, index) => {
    const option = element("option", "", listed.version + (index === 0 ? " (newest)" : ""));
    option.value = listed.version;
    option.selected = listed.version === endpoint.apiVersion;
    select.append(option);
  });
  const save = element("button", "primary confirm-endpoint-pin", "Save");
  save.type = "submit";
  save.setAttribute("aria-label", "Save the API version of " + endpoint.url);
  const cancel = element("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", () => refreshEndpoints());
  form.append(label, select, save, cancel);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    webhookStatus.textContent = "";
    try {
      await call("POST", `/webhooks/${encodeURIComponent(endpoint.id)}/api-version`, { apiVersion: select.value });
      await refreshEndpoints();
    } catch (error) {
      webhookStatus.textContent = "Could not change the API version: " + error.message;
      select.focus();
    }
  });
  actions.replaceChildren(form);
  select.focus();
}

async function rotate(endpoint) {
  if (!window.confirm(`Rotate the signing secret of ${endpoint.url}? The old secret keeps signing beside the new one for 24 hours.`)) return;
  webhookStatus.textContent = "";
  try {
    const rotated = await call("POST", `/webhooks/${encodeURIComponent(endpoint.id)}/rotate`, { overlapSeconds: 86400 });
    showSecret(rotated.endpoint.secret);
  } catch (error) { webhookStatus.textContent = "Could not rotate the secret: " + error.message; }
}

async function remove(endpoint) {
  if (!window.confirm(`Remove ${endpoint.url}? Its queued events are dropped.`)) return;
  webhookStatus.textContent = "";
  try {
    await call("POST", `/webhooks/${encodeURIComponent(endpoint.id)}/remove`);
    if (attemptsOf && attemptsOf.id === endpoint.id) {
      attemptsOf = null;
      document.getElementById("attempts-panel").hidden = true;
    }
    await refreshEndpoints();
  } catch (error) { webhookStatus.textContent = "Could not remove the endpoint: " + error.message; }
}

async function showAttempts(endpoint) {
  attemptsOf = endpoint;
  document.getElementById("attempts-title").textContent = "Attempts: " + endpoint.url;
  document.getElementById("attempts-panel").hidden = false;
  await refreshAttempts();
}

async function refreshAttempts() {
  if (!attemptsOf) return;
  const body = document.getElementById("attempts");
  try {
    const { attempts } = await call("GET", `/webhooks/${encodeURIComponent(attemptsOf.id)}/attempts`);
    body.replaceChildren();
    if (attempts.length === 0) {
      const row = body.insertRow();
      row.append(Object.assign(cell("No attempts yet.", "empty"), { colSpan: 7 }));
    }
    for (const attempt of attempts) {
      const row = body.insertRow();
      row.dataset.messageId = attempt.messageId;
      const outcome = cell("", "outcome");
      outcome.append(element("span", "badge " + (attempt.outcome === "succeeded" ? "active" : "revoked"), attempt.outcome));
      row.append(dateCell(attempt.attemptedAt), cell(attempt.eventType, "event"), cell(String(attempt.attempt), "attempt"),
        outcome, cell(attempt.responseStatus === null ? "—" : String(attempt.responseStatus), "http-status"),
        cell(attempt.error || "—", "error"), cell(attempt.durationMs + " ms", "duration"));
    }
  } catch (error) { webhookStatus.textContent = "Could not load the attempts: " + error.message; }
}

async function startWebhooks() {
  webhookStatus = document.getElementById("webhook-status");
  if (!abilities.webhooks) return; // This host serves no webhooks: the section stays hidden.
  document.getElementById("webhooks-section").hidden = false;
  refreshEndpoints();
  document.getElementById("add-endpoint").addEventListener("submit", addEndpoint);
  document.getElementById("attempts-refresh").addEventListener("click", refreshAttempts);
}

