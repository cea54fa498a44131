// The topology page: routers and the links between them as an SVG graph, a router's details in
// the side panel.
//
// The layout is computed, not simulated, so that it is the same on every refresh and every
// reload: interiors on a circle in id order, each edge outside it beside the interior it uses
// as its uplink (remembered, so an edge that goes down stays where it was), clients and
// containers fanned out beyond their router. The drawing is scaled to fit its box.

import * as fmt from "./dom.js";
import { h, num, render, routeHref, s, table } from "./dom.js";

const CENTER = [0, 0];
const INTERIOR_RADIUS = 170;
const EDGE_RADIUS = 330;
const SATELLITE_DISTANCE = 85;
const MARGIN = 70;
const MIN_VIEW = [900, 640];

let app = null;
const anchors = new Map(); // edge id -> the interior it was drawn beside last
const toggles = { clients: false, containers: false };

export function init(shell) {
  app = shell;
  const svg = document.getElementById("topology-graph");
  const select = (target) => {
    const node = target.closest("[data-router]");
    if (node) location.hash = routeHref("topology", { router: node.dataset.router });
  };
  svg.addEventListener("click", (event) => select(event.target));
  svg.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      select(event.target);
    }
  });
  document.getElementById("router-panel").addEventListener("click", (event) => {
    if (event.target.closest("[data-action=close-panel]")) location.hash = "#topology";
  });
  for (const which of ["clients", "containers"]) {
    const box = document.getElementById(`show-${which}`);
    box.addEventListener("change", () => {
      toggles[which] = box.checked;
      app.reshow();
    });
  }
}

export function wants(route) {
  const wanted = ["/api/topology"];
  if (route.params.router) wanted.push(`/api/routers/${encodeURIComponent(route.params.router)}`);
  return wanted;
}

export function show(route, data) {
  const topo = data["/api/topology"];
  const svg = document.getElementById("topology-graph");
  if (!topo || topo.error) {
    render(svg, s("text", { x: 20, y: 40, class: "empty" }, topo ? topo.error : "loading…"));
  } else {
    draw(svg, topo, route.params.router);
  }
  showPanel(route, data);
}

// --- the graph -------------------------------------------------------------------------------

function polar(radius, angle) {
  return [CENTER[0] + radius * Math.cos(angle), CENTER[1] + radius * Math.sin(angle)];
}

/** id -> {x, y, angle} for every router; pure but for the edges' remembered anchors. */
function layout(routers) {
  const byId = (a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);
  const interiors = routers.filter((r) => r.mode !== "edge").sort(byId);
  const edges = routers.filter((r) => r.mode === "edge").sort(byId);
  const at = new Map();
  const n = interiors.length;
  interiors.forEach((r, i) => {
    const angle = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(n, 1);
    const [x, y] = polar(n === 1 ? 0 : INTERIOR_RADIUS, angle);
    at.set(r.id, { x, y, angle });
  });
  const groups = new Map(); // anchor interior ("" for none) -> edge ids
  for (const e of edges) {
    let anchor = at.has(e.uplink) ? e.uplink : anchors.get(e.id);
    if (!at.has(anchor)) anchor = "";
    if (anchor) anchors.set(e.id, anchor);
    groups.set(anchor, [...(groups.get(anchor) || []), e.id]);
  }
  const sector = (2 * Math.PI) / Math.max(n, 1);
  for (const [anchor, ids] of groups) {
    ids.forEach((id, k) => {
      let angle;
      if (anchor) {
        const step = Math.min(0.5, (0.8 * sector) / ids.length);
        angle = at.get(anchor).angle + (k - (ids.length - 1) / 2) * step;
      } else {
        // No uplink known yet: spread evenly, between the interiors' directions.
        angle = -Math.PI / 2 + sector / 2 + (2 * Math.PI * k) / ids.length;
      }
      const [x, y] = polar(EDGE_RADIUS, angle);
      at.set(id, { x, y, angle });
    });
  }
  return at;
}

/** Clients and containers of each router, fanned out in the widest gap between its links.
 * A client that is also a registered container is drawn once, as a container. */
function satellites(topo, at) {
  const containers = new Set(topo.containers.map((c) => `${c.router}|${c.container}`));
  const items = [];
  if (toggles.containers) {
    for (const c of topo.containers) {
      items.push({ kind: "container", router: c.router, name: c.container, info: c });
    }
  }
  if (toggles.clients) {
    for (const c of topo.clients) {
      if (toggles.containers && containers.has(`${c.router}|${c.container}`)) continue;
      items.push({ kind: "client", router: c.router, name: c.container || c.host, info: c });
    }
  }
  const perRouter = new Map();
  for (const item of items) {
    if (!at.has(item.router)) continue;
    perRouter.set(item.router, [...(perRouter.get(item.router) || []), item]);
  }
  const placed = [];
  for (const [router, list] of perRouter) {
    const base = at.get(router);
    const [from, gap] = widestGap(base, neighbours(topo, at, router));
    list.forEach((item, k) => {
      const angle = from + (gap * (k + 1)) / (list.length + 1);
      const distance = SATELLITE_DISTANCE + (k % 2) * 28; // staggered: labels overlap less
      placed.push({
        ...item,
        x: base.x + distance * Math.cos(angle),
        y: base.y + distance * Math.sin(angle),
      });
    });
  }
  return placed;
}

function neighbours(topo, at, router) {
  const found = [];
  for (const lk of topo.links) {
    const other = lk.source === router ? lk.target : lk.target === router ? lk.source : null;
    if (other !== null && at.has(other)) found.push(at.get(other));
  }
  return found;
}

/** [start angle, width] of the widest empty sector around `base` between the directions to
 * `others`; with none, the whole circle from straight down. */
function widestGap(base, others) {
  const angles = others.map((o) => Math.atan2(o.y - base.y, o.x - base.x)).sort((a, b) => a - b);
  if (!angles.length) return [Math.PI / 2, 2 * Math.PI];
  let best = [angles[angles.length - 1], angles[0] + 2 * Math.PI - angles[angles.length - 1]];
  for (let i = 1; i < angles.length; i++) {
    const gap = angles[i] - angles[i - 1];
    if (gap > best[1]) best = [angles[i - 1], gap];
  }
  return best;
}

function width(rateTotal) {
  return 1.5 + Math.min(10, Math.log10(1 + (rateTotal || 0)) * 4);
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

function draw(svg, topo, selected) {
  const routers = new Map(topo.routers.map((r) => [r.id, r]));
  const at = layout(topo.routers);
  const around = satellites(topo, at);
  const points = [...at.values(), ...around];
  const xs = points.map((p) => p.x);
  const ys = points.map((p) => p.y);
  if (points.length) {
    const x0 = Math.min(...xs) - MARGIN;
    const y0 = Math.min(...ys) - MARGIN;
    const w = Math.max(...xs) + MARGIN - x0;
    const hgt = Math.max(...ys) + MARGIN + 20 - y0; // + the label under the lowest node
    // At least MIN_VIEW, centred: a small network is not blown up to fill a large screen.
    const vw = Math.max(w, MIN_VIEW[0]);
    const vh = Math.max(hgt, MIN_VIEW[1]);
    const vx = x0 - (vw - w) / 2;
    const vy = y0 - (vh - hgt) / 2;
    svg.setAttribute(
      "viewBox",
      `${vx.toFixed(0)} ${vy.toFixed(0)} ${vw.toFixed(0)} ${vh.toFixed(0)}`,
    );
  }

  const links = topo.links.map((lk) => {
    const a = at.get(lk.source);
    const b = at.get(lk.target);
    if (!a || !b) return null; // a peer the console does not see (another network's router)
    const edgeEnd = [lk.source, lk.target].find((id) => routers.get(id)?.mode === "edge");
    const other = edgeEnd === lk.source ? lk.target : lk.source;
    const uplink = edgeEnd ? routers.get(edgeEnd).uplink : undefined;
    const standby = lk.kind === "edge" && Boolean(uplink) && uplink !== other;
    const total = lk.rate.total;
    const label = `${fmt.rate(total)}`;
    const mx = (a.x + b.x) / 2;
    const my = (a.y + b.y) / 2;
    const title =
      `${lk.source} – ${lk.target} (${lk.kind}${standby ? ", standby uplink" : ""})\n` +
      `${lk.source} → ${lk.target}: ${fmt.rate(lk.rate.forward)}\n` +
      `${lk.target} → ${lk.source}: ${fmt.rate(lk.rate.back)}\n` +
      `cost ${lk.cost ?? "–"}, dialled by ${lk.connector ?? "?"}`;
    return s(
      "g",
      {
        class: `link link-${lk.kind}${standby ? " standby" : ""}`,
        "data-key": `link:${lk.source}|${lk.target}`,
        "data-link": `${lk.source}|${lk.target}`,
        "data-kind": lk.kind,
        "data-rate": total ?? "",
      },
      s("title", null, title),
      s("line", {
        x1: a.x.toFixed(1),
        y1: a.y.toFixed(1),
        x2: b.x.toFixed(1),
        y2: b.y.toFixed(1),
        "stroke-width": width(total).toFixed(1),
      }),
      s("text", { class: "link-rate", x: mx.toFixed(1), y: (my - 6).toFixed(1) }, label),
    );
  });

  const spokes = around.map((c) => {
    const r = at.get(c.router);
    return s("line", {
      class: "spoke",
      "data-key": `spoke:${c.kind}:${c.router}:${c.name}:${c.info.host || ""}`,
      x1: r.x.toFixed(1),
      y1: r.y.toFixed(1),
      x2: c.x.toFixed(1),
      y2: c.y.toFixed(1),
    });
  });

  const nodes = topo.routers.map((r) => {
    const p = at.get(r.id);
    const down = r.state !== "up";
    const interior = r.mode !== "edge";
    const shape = interior
      ? s("circle", { class: "shape", r: 34 })
      : s("rect", { class: "shape", x: -32, y: -22, width: 64, height: 44, rx: 9 });
    const title = down
      ? `${r.id} (${r.mode}) is down: ${r.error || "not answering"}`
      : `${r.id} (${r.mode}), ${fmt.rate(r.msgsPerSecond)} out, ${r.connections} connections`;
    return s(
      "g",
      {
        class: `router ${interior ? "interior" : "edge"}${down ? " down" : ""}${r.id === selected ? " selected" : ""}`,
        "data-key": `router:${r.id}`,
        "data-router": r.id,
        "data-state": down ? "down" : "up",
        "data-mode": r.mode,
        transform: `translate(${p.x.toFixed(1)} ${p.y.toFixed(1)})`,
        tabindex: 0,
        role: "button",
        "aria-label": title,
        "aria-pressed": String(r.id === selected),
      },
      s("title", null, title),
      shape,
      down ? s("path", { class: "cross", d: "M-12,-12 L12,12 M12,-12 L-12,12" }) : null,
      s("text", { class: "router-id", y: interior ? 52 : 40 }, r.id),
      down
        ? s(
            "text",
            { class: "router-error", y: interior ? 68 : 56 },
            clip(`down: ${r.error || "not answering"}`, 44),
          )
        : s(
            "text",
            { class: "router-rate", y: interior ? 68 : 56, "data-rate": r.msgsPerSecond ?? "" },
            fmt.rate(r.msgsPerSecond),
          ),
    );
  });

  const satelliteNodes = around.map((c) => {
    const name = c.name || "?";
    const title =
      c.kind === "client"
        ? `client ${name} on ${c.router} (${c.info.host}, ${c.info.role}, ${c.info.links} links)\n` +
          `sends ${fmt.rate(c.info.sentPerSecond)}, receives ${fmt.rate(c.info.receivedPerSecond)}`
        : `container ${name}, attached to ${c.router}`;
    return s(
      "g",
      {
        class: `satellite ${c.kind}`,
        "data-key": `sat:${c.kind}:${c.router}:${name}:${c.info.host || ""}`,
        "data-client": c.kind === "client" ? name : null,
        "data-container": c.kind === "container" ? name : null,
        transform: `translate(${c.x.toFixed(1)} ${c.y.toFixed(1)})`,
      },
      s("title", null, title),
      c.kind === "client"
        ? s("circle", { class: "shape", r: 7 })
        : s("rect", {
            class: "shape",
            x: -7,
            y: -7,
            width: 14,
            height: 14,
            transform: "rotate(45)",
          }),
      s("text", { y: 20 }, clip(name, 22)),
    );
  });

  render(
    svg,
    s("g", { class: "links", "data-key": "links" }, links),
    s("g", { class: "spokes", "data-key": "spokes" }, spokes),
    s("g", { class: "satellites", "data-key": "satellites" }, satelliteNodes),
    s("g", { class: "routers", "data-key": "routers" }, nodes),
  );
}

// --- the side panel --------------------------------------------------------------------------

function showPanel(route, data) {
  const panel = document.getElementById("router-panel");
  const id = route.params.router;
  if (!id) {
    panel.dataset.selected = "";
    render(
      panel,
      h(
        "p",
        { class: "muted hint" },
        "Click a router for its state, connections, links, addresses, clients and log.",
      ),
    );
    return;
  }
  panel.dataset.selected = id;
  const detail = data[`/api/routers/${encodeURIComponent(id)}`];
  const close = h(
    "button",
    { type: "button", class: "close", "data-action": "close-panel", "aria-label": "Close" },
    "×",
  );
  if (!detail) {
    render(
      panel,
      h("div", { class: "panel-head" }, h("h2", null, id), close),
      h("p", { class: "muted" }, "loading…"),
    );
    return;
  }
  if (detail.error) {
    render(
      panel,
      h("div", { class: "panel-head" }, h("h2", null, id), close),
      h("p", { class: "error-text" }, detail.error),
    );
    return;
  }
  const r = detail.router;
  const down = r.state !== "up";
  const facts = [
    ["state", h("span", { class: `badge ${down ? "bad" : "good"}`, id: "panel-state" }, r.state)],
    down ? ["error", h("span", { class: "error-text" }, r.error || "not answering")] : null,
    ["mode", r.mode],
    ["network", `${r.network} (namespace ${r.namespace})`],
    ["endpoint", r.endpoint || "–"],
  ];
  // A router that does not answer has only what the source knows of it, and its log.
  const answered = down
    ? []
    : [
        ["version", r.version ?? "–"],
        ["uptime", fmt.duration(r.uptimeSeconds)],
        ["memory", fmt.bytes(r.memoryBytes)],
        ["msgs/s out", fmt.rate(r.msgsPerSecond)],
        ["connections", fmt.count(r.connections)],
        ["links", fmt.count(r.links)],
        ["clients", fmt.count(r.clients)],
        ["addresses", fmt.count(r.addresses)],
        r.mode === "edge" ? ["uplink", r.uplink || "none"] : null,
        r.mode !== "edge" && r.knownRouters
          ? ["routes to", r.knownRouters.join(", ") || "none"]
          : null,
        ["stuck / blocked", `${fmt.count(r.deliveriesStuck)} / ${fmt.count(r.linksBlocked)}`],
      ];
  const shown = [...facts, ...answered, ["log", r.where || "–"]].filter(Boolean);
  const dataLinks = detail.links.filter((lk) => lk.linkType !== "router-control");
  const addresses = detail.addresses.filter((a) => !a.internal);
  render(
    panel,
    h("div", { class: "panel-head" }, h("h2", null, r.id), close),
    h(
      "dl",
      { class: "facts" },
      shown.map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
    ),
    down
      ? null
      : [
          section(
            `Connections (${detail.connections.length})`,
            table(
              ["container", "role", "dir", "host"],
              detail.connections.map((c) => ({
                key: c.identity,
                cells: [wrap(c.container || "–"), c.role, c.dir, c.host || "–"],
              })),
            ),
          ),
          section(
            `Links (${dataLinks.length}, control links left out)`,
            table(
              [
                "dir",
                "address or name",
                { text: "msgs", num: true },
                { text: "held", num: true },
                { text: "unsettled", num: true },
              ],
              dataLinks.map((lk) => ({
                key: lk.identity,
                attrs: {
                  title: `${lk.linkType} link ${lk.linkName || ""}, credit ${lk.creditAvailable ?? "–"}`,
                },
                cells: [
                  lk.linkDir,
                  // Without the address key's class prefix (M0jobs, L$management).
                  wrap(
                    lk.owningAddr ? lk.owningAddr.replace(/^(M\d|[A-Z])/, "") : lk.linkName || "–",
                  ),
                  num(fmt.count(lk.deliveryCount)),
                  num(fmt.count(lk.undeliveredCount)),
                  num(fmt.count(lk.unsettledCount)),
                ],
              })),
            ),
          ),
          section(
            `Addresses (${addresses.length}, internal ones left out)`,
            table(
              [
                "address",
                { text: "consumers here", num: true },
                { text: "senders here", num: true },
              ],
              addresses.map((a) => {
                const here = a.routers.find((x) => x.router === r.id) || {};
                return {
                  key: a.address,
                  cells: [
                    h(
                      "a",
                      { href: routeHref("addresses", { q: a.address }), class: "wrap" },
                      a.address,
                    ),
                    num(fmt.count((here.clientConsumers || 0) + (here.containers || 0))),
                    num(fmt.count(here.senders)),
                  ],
                };
              }),
            ),
          ),
          section(
            `Clients (${detail.clients.length})`,
            table(
              ["container", "host", { text: "sends", num: true }, { text: "receives", num: true }],
              detail.clients.map((c) => ({
                key: `${c.container}@${c.host}`,
                cells: [
                  wrap(c.container || "–"),
                  c.host || "–",
                  num(fmt.rate(c.sentPerSecond)),
                  num(fmt.rate(c.receivedPerSecond)),
                ],
              })),
            ),
          ),
        ],
    section(
      `Log (last ${detail.log.length} lines)`,
      h("pre", { class: "log", id: "panel-log" }, detail.log.join("\n")),
    ),
  );
}

function wrap(text) {
  return h("span", { class: "wrap" }, text);
}

function section(title, body) {
  return h(
    "section",
    { class: "panel-section", "data-key": title.replace(/ \(.*/, "") },
    h("h3", null, title),
    body,
  );
}
