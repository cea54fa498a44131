// The console's shell: hash routing between the pages, one refresh loop at the scraper's pace,
// the header (health summary, "updated N s ago", analysis link, theme toggle).
//
// Each page is a module with `wants(route)` (the API paths it reads) and `show(route, data)`
// (renders them); the shell fetches what the page on screen wants, plus /api/health and
// /api/topology for the header, every `interval` seconds of the API's answers.

import { parseRoute } from "./dom.js";
import * as topology from "./topology.js";
import * as pages from "./pages.js";

const PAGES = {
  topology,
  addresses: pages.addresses,
  nodes: pages.nodes,
  flows: pages.flows,
  health: pages.health,
};
const STALE_INTERVALS = 3;
const THEME_KEY = "routernet-theme";
const TOKEN_KEY = "routernet-token";

const state = {
  route: { page: "topology", params: {} },
  interval: 2,
  data: {}, // API path -> its last answer (or {error})
  dataTime: null, // Date.now() of the scrape the data shows, on this browser's clock
  failure: null, // why the last refresh failed, or null
  timer: null,
  generation: 0,
};

/** The bearer token the user gave (a console with --token-review), as a request header. */
function authorization() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** A 401 with a Bearer challenge: the browser cannot answer it alone, the user can. */
function askForToken(hadToken) {
  const form = document.getElementById("token-form");
  document.getElementById("token-error").textContent = hadToken
    ? "that token was refused (unknown, expired, or not allowed to list Routers)"
    : "";
  form.hidden = false;
}

async function getJSON(path) {
  const response = await fetch(path, {
    headers: { Accept: "application/json", ...authorization() },
  });
  const body = await response.json().catch(() => ({}));
  if (response.status === 401 && /^Bearer/i.test(response.headers.get("WWW-Authenticate") || "")) {
    askForToken(Boolean(sessionStorage.getItem(TOKEN_KEY)));
  }
  if (!response.ok) {
    return {
      error: body.error || `${response.status} ${response.statusText}`,
      status: response.status,
    };
  }
  // The scrape's age by the server's own clock (its Date header), so a browser whose clock is
  // off still reads "updated 2 s ago" right.
  const serverNow = Date.parse(response.headers.get("Date") || "") || Date.now();
  if (typeof body.at === "number") {
    const age = Math.max(0, serverNow - body.at * 1000);
    state.dataTime = Date.now() - age;
  }
  if (typeof body.interval === "number" && body.interval > 0) state.interval = body.interval;
  return body;
}

async function refresh() {
  clearTimeout(state.timer);
  const generation = ++state.generation;
  const route = state.route;
  const page = PAGES[route.page];
  const paths = [...new Set(["/api/health", "/api/topology", ...page.wants(route)])];
  const results = await Promise.allSettled(paths.map(getJSON));
  if (generation !== state.generation) return; // a newer refresh (the route changed) took over
  state.failure = null;
  results.forEach((result, i) => {
    if (result.status === "fulfilled") state.data[paths[i]] = result.value;
    else state.failure = String(result.reason?.message || result.reason);
  });
  showAll();
  state.timer = setTimeout(refresh, state.interval * 1000);
}

function showAll() {
  showHeader();
  const page = PAGES[state.route.page];
  page.show(state.route, state.data);
}

function showHeader() {
  const health = state.data["/api/health"];
  const topo = state.data["/api/topology"];
  const summary = document.getElementById("health-summary");
  if (health && !health.error) {
    const { up, total } = health.routers;
    const problems = health.problems;
    const errors = problems.filter((p) => p.severity === "error").length;
    const warnings = problems.filter((p) => p.severity === "warning").length;
    summary.dataset.level = errors || up < total ? "error" : warnings ? "warn" : "ok";
    summary.textContent =
      `${up}/${total} routers up · ` +
      (problems.length
        ? `${problems.length} problem${problems.length > 1 ? "s" : ""}`
        : "no problems");
    summary.title = problems.map((p) => `${p.severity}: ${p.what}`).join("\n") || "nothing wrong";
  }
  if (topo && !topo.error) {
    const source = document.getElementById("source");
    source.textContent = topo.source;
    source.title = topo.source;
    document.title = `Routernet console: ${topo.source}`;
    const analysis = document.getElementById("analysis-link");
    analysis.hidden = !topo.analysis;
    if (topo.analysis) analysis.href = topo.analysis;
  }
  showUpdated();
}

/** "updated 3 s ago", stale (marked) after STALE_INTERVALS scrapes without a new one. */
function showUpdated() {
  const updated = document.getElementById("updated");
  if (state.dataTime === null) {
    updated.textContent = state.failure
      ? `console unreachable: ${state.failure}`
      : "not updated yet";
    updated.dataset.stale = state.failure ? "true" : "false";
    return;
  }
  const age = Math.max(0, (Date.now() - state.dataTime) / 1000);
  const stale = age > STALE_INTERVALS * state.interval;
  updated.dataset.stale = String(stale);
  updated.textContent =
    `updated ${age < 1 ? "just now" : `${Math.round(age)} s ago`}` +
    (stale ? (state.failure ? " · console unreachable" : " · stale") : "");
  updated.title = state.failure ? `the last refresh failed: ${state.failure}` : "";
}

function route() {
  const parsed = parseRoute(location.hash);
  state.route = PAGES[parsed.page] ? parsed : { page: "topology", params: {} };
  for (const section of document.querySelectorAll("main > section")) {
    section.hidden = section.dataset.page !== state.route.page;
  }
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.page === state.route.page) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  PAGES[state.route.page].enter?.(state.route);
  showAll(); // at once from what is known, then fresh
  refresh();
}

function effectiveTheme() {
  const chosen = document.documentElement.dataset.theme;
  if (chosen) return chosen;
  return matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function showThemeButton() {
  const button = document.getElementById("theme-toggle");
  const dark = effectiveTheme() === "dark";
  // A toggle: its name stays, aria-pressed (drawn highlighted) says whether it is on.
  button.setAttribute("aria-pressed", String(dark));
}

function toggleTheme() {
  const next = effectiveTheme() === "dark" ? "light" : "dark";
  document.documentElement.dataset.theme = next;
  try {
    localStorage.setItem(THEME_KEY, next);
  } catch {
    // not remembered, still switched
  }
  showThemeButton();
}

/** Re-shows the page on screen from the data at hand (a filter typed, a row expanded). */
function reshow() {
  showAll();
}

/** Refetches now (a selection that needs other data, as a router's details). */
function refetch() {
  refresh();
}

function signIn(event) {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, document.getElementById("token-input").value.trim());
  document.getElementById("token-form").hidden = true;
  refresh();
}

for (const page of Object.values(PAGES)) page.init?.({ reshow, refetch });
document.getElementById("token-form").addEventListener("submit", signIn);
document.getElementById("theme-toggle").addEventListener("click", toggleTheme);
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", showThemeButton);
window.addEventListener("hashchange", route);
setInterval(showUpdated, 1000);
showThemeButton();
route();
