// Building elements, and updating the live page to match freshly built ones in place.
//
// Every refresh builds a page's content anew from the API's answers (simple, no state to keep
// in step) and `render` patches the live DOM to match: only changed text and attributes are
// touched, so nothing flickers, scroll positions, focus and text selections stay, and rows
// keep their identity (`data-key`) when others come and go.

export const SVG_NS = "http://www.w3.org/2000/svg";

/** An HTML element: h("td", {class: "num"}, "3"). Attributes that are null, undefined or
 * false are left out (true gives an empty one); children may be nodes, strings, numbers,
 * arrays of them, or null/false (skipped). */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, as h. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

function build(el, attrs, children) {
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    el.setAttribute(name, value === true ? "" : String(value));
  }
  add(el, children);
  return el;
}

function add(el, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    if (Array.isArray(child)) add(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** Makes `container`'s children those given, reusing the live nodes that match. */
export function render(container, ...children) {
  const fresh = container.namespaceURI === SVG_NS ? s("g") : h("div");
  add(fresh, children);
  patchChildren(container, fresh);
}

function patch(live, fresh) {
  if (live.nodeType !== fresh.nodeType || live.nodeName !== fresh.nodeName) {
    live.replaceWith(fresh);
    return;
  }
  if (live.nodeType !== Node.ELEMENT_NODE) {
    if (live.nodeValue !== fresh.nodeValue) live.nodeValue = fresh.nodeValue;
    return;
  }
  for (const { name } of [...live.attributes]) {
    if (!fresh.hasAttribute(name)) live.removeAttribute(name);
  }
  for (const { name, value } of fresh.attributes) {
    if (live.getAttribute(name) !== value) live.setAttribute(name, value);
  }
  patchChildren(live, fresh);
}

function keyOf(node) {
  return node.nodeType === Node.ELEMENT_NODE ? node.getAttribute("data-key") : null;
}

function patchChildren(live, fresh) {
  const keyed = new Map();
  for (const child of live.childNodes) {
    const key = keyOf(child);
    if (key !== null) keyed.set(key, child);
  }
  let cursor = live.firstChild;
  for (const next of [...fresh.childNodes]) {
    const key = keyOf(next);
    let match = null;
    if (key !== null) {
      match = keyed.get(key) || null;
      keyed.delete(key);
    } else if (cursor && keyOf(cursor) === null && cursor.nodeName === next.nodeName) {
      match = cursor;
    }
    if (match === null) {
      live.insertBefore(next, cursor);
      continue;
    }
    if (match !== cursor) live.insertBefore(match, cursor);
    cursor = match.nextSibling;
    patch(match, next);
  }
  while (cursor) {
    const gone = cursor;
    cursor = cursor.nextSibling;
    gone.remove();
  }
}

// --- tables ---------------------------------------------------------------------------------

/** A table cell that is a number (right-aligned), with attributes of its own if given. */
export function num(text, attrs = {}) {
  return { num: true, text, attrs };
}

function td(c) {
  if (c && typeof c === "object" && !(c instanceof Node) && !Array.isArray(c)) {
    return h("td", { class: c.num ? "num" : null, ...c.attrs }, c.text);
  }
  return h("td", null, c);
}

/** A table: `headers` strings or {text, num}; `rows` {key, attrs, cells, after} where a cell
 * is text, a node or num(...), and `after` more rows right below (an expanded row's details);
 * `attrs` the table's own, and `empty` what to say instead when there are no rows. */
export function table(headers, rows, { empty = "none", ...attrs } = {}) {
  if (!rows.length) return h("p", { class: "muted", id: attrs.id }, empty);
  return h(
    "table",
    { class: "compact", ...attrs },
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        headers.map((c) => h("th", { scope: "col", class: c.num ? "num" : null }, c.text ?? c)),
      ),
    ),
    h(
      "tbody",
      null,
      rows.map((row) => [
        h("tr", { "data-key": row.key, ...(row.attrs || {}) }, row.cells.map(td)),
        row.after || null,
      ]),
    ),
  );
}

// --- numbers as people read them ------------------------------------------------------------

/** Messages per second: "–" when unknown (the first scrape has no rate yet). */
export function rate(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0/s";
  if (value < 0.1) return "<0.1/s";
  return `${value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString("en")}/s`;
}

export function count(value) {
  return value === null || value === undefined ? "–" : Number(value).toLocaleString("en");
}

export function bytes(value) {
  if (value === null || value === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let n = value;
  let unit = 0;
  while (n >= 1024 && unit < units.length - 1) {
    n /= 1024;
    unit += 1;
  }
  return `${unit === 0 ? n : n.toFixed(n < 10 ? 1 : 0)} ${units[unit]}`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.floor(seconds);
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

/** A latency given in microseconds, in the unit that keeps it short. */
export function latency(us) {
  if (us === null || us === undefined) return "–";
  if (us < 1000) return `${Math.round(us)} µs`;
  if (us < 1e6) return `${(us / 1000).toFixed(us < 1e4 ? 2 : 1)} ms`;
  return `${(us / 1e6).toFixed(2)} s`;
}

export function clock(ms) {
  return new Date(ms).toLocaleTimeString("en-GB");
}

/** The network's own addresses (as view.py's `internal`): `_edge/…`, `_routernet/…`, `$…`. */
export function internal(address) {
  return address.startsWith("_") || address.startsWith("$");
}

/** A hash route: "#addresses?q=orders" -> {page: "addresses", params: {q: "orders"}}. */
export function parseRoute(hash) {
  const [page, query = ""] = hash.replace(/^#/, "").split("?", 2);
  return { page, params: Object.fromEntries(new URLSearchParams(query)) };
}

export function routeHref(page, params = {}) {
  const query = new URLSearchParams(
    Object.entries(params).filter(([, v]) => v !== undefined && v !== null && v !== ""),
  ).toString();
  return `#${page}${query ? `?${query}` : ""}`;
}
