// The table pages: addresses, queues and topics, flows, health. Each keeps what the user set
// (filter, checkboxes, expanded rows, window) in its controls or in the route, never in what a
// refresh replaces.

import * as fmt from "./dom.js";
import { h, internal, num, render, routeHref, s, table } from "./dom.js";

function routerLink(id) {
  return h("a", { href: routeHref("topology", { router: id }), "data-router-link": id }, id);
}

function notice(text, attrs = {}) {
  return h("p", { class: "notice", ...attrs }, text);
}

/** A search box whose text is also the route's `q`, so a link can open the page filtered. */
function filterBox(id, page, app) {
  const box = document.getElementById(id);
  box.addEventListener("input", () => {
    history.replaceState(null, "", routeHref(page, { q: box.value }));
    app.reshow();
  });
  return {
    enter(route) {
      if (route.params.q !== undefined) box.value = route.params.q;
    },
    text: () => box.value.trim().toLowerCase(),
  };
}

// --- addresses -------------------------------------------------------------------------------

export const addresses = (() => {
  let app = null;
  let filter = null;
  const expanded = new Set();

  function init(shell) {
    app = shell;
    filter = filterBox("address-filter", "addresses", app);
    document.getElementById("show-internal").addEventListener("change", () => app.reshow());
    document.getElementById("addresses-content").addEventListener("click", (event) => {
      const button = event.target.closest("[data-expand]");
      if (!button) return;
      const address = button.dataset.expand;
      if (expanded.has(address)) expanded.delete(address);
      else expanded.add(address);
      app.reshow();
    });
  }

  function enter(route) {
    filter.enter(route);
    // An internal address asked for by name (a health problem's link) is shown.
    if (route.params.q && internal(route.params.q))
      document.getElementById("show-internal").checked = true;
  }

  function wants() {
    return ["/api/addresses"];
  }

  /** The address on each router: its clients there, and the router's own counters (which
   * count a message again on every router it passes). */
  function perRouter(a) {
    return h(
      "tr",
      { class: "detail", "data-key": `${a.address}#routers` },
      h(
        "td",
        { colspan: 10 },
        table(
          [
            "router",
            { text: "client consumers", num: true },
            { text: "senders", num: true },
            { text: "from clients", num: true },
            { text: "to clients", num: true },
            { text: "held", num: true },
            { text: "subscribers", num: true },
            { text: "router in", num: true },
            { text: "router out", num: true },
            "consumers seen on",
          ],
          a.routers.map((r) => ({
            key: r.router,
            attrs: { "data-address-router": r.router },
            cells: [
              routerLink(r.router),
              num(fmt.count(r.clientConsumers + r.containers)),
              num(fmt.count(r.senders)),
              num(fmt.rate(r.fromClientsPerSecond)),
              num(fmt.rate(r.toClientsPerSecond)),
              num(fmt.count(r.held)),
              num(fmt.count(r.consumers)),
              num(`${fmt.rate(r.ingressPerSecond)} (${fmt.count(r.ingress)})`),
              num(`${fmt.rate(r.egressPerSecond)} (${fmt.count(r.egress)})`),
              r.remoteRouters.join(", ") || "–",
            ],
          })),
        ),
      ),
    );
  }

  function show(_route, data) {
    const answer = data["/api/addresses"];
    const content = document.getElementById("addresses-content");
    const routes = document.getElementById("link-routes-content");
    if (!answer || answer.error) {
      render(content, notice(answer ? answer.error : "loading…"));
      return;
    }
    const showInternal = document.getElementById("show-internal").checked;
    const text = filter.text();
    const all = answer.addresses;
    const hidden = all.filter((a) => a.internal && !showInternal).length;
    const shown = all.filter(
      (a) => (showInternal || !a.internal) && (!text || a.address.toLowerCase().includes(text)),
    );
    document.getElementById("address-count").textContent =
      `${shown.length} of ${all.length} addresses` + (hidden ? ` (${hidden} internal hidden)` : "");
    render(
      content,
      table(
        [
          { text: "", num: false },
          "address",
          "distribution",
          "declared as",
          { text: "consumers", num: true },
          { text: "senders", num: true },
          { text: "in msgs/s", num: true },
          { text: "out msgs/s", num: true },
          { text: "held", num: true },
          "routers",
        ],
        shown.map((a) => {
          const open = expanded.has(a.address);
          return {
            key: a.address,
            attrs: {
              "data-address": a.address,
              "data-internal": String(a.internal),
              class: a.senders && !a.consumers ? "warn-row" : null,
            },
            cells: [
              h(
                "button",
                {
                  type: "button",
                  class: "expand",
                  "data-expand": a.address,
                  "aria-expanded": String(open),
                  "aria-label": `per-router counts of ${a.address}`,
                },
                open ? "▾" : "▸",
              ),
              h(
                "span",
                { class: "mono" },
                a.address,
                a.internal ? h("span", { class: "badge" }, "internal") : null,
              ),
              a.distribution,
              a.declared ? `${a.declared.name} (${a.declared.key})` : "–",
              num(fmt.count(a.consumers), { "data-consumers": a.consumers }),
              num(fmt.count(a.senders), { "data-senders": a.senders }),
              num(fmt.rate(a.ingressPerSecond), { "data-rate-in": a.ingressPerSecond ?? "" }),
              num(fmt.rate(a.egressPerSecond), { "data-rate-out": a.egressPerSecond ?? "" }),
              num(fmt.count(a.held)),
              a.routers.map((r) => r.router).join(", "),
            ],
            after: open ? perRouter(a) : null,
          };
        }),
        {
          id: "addresses-table",
          empty: all.length ? "No address matches." : "No address has consumers or senders yet.",
        },
      ),
    );
    render(
      routes,
      answer.linkRoutes.length
        ? table(
            ["name", "key", "directions", "container", "connection", "active on"],
            answer.linkRoutes.map((lr) => ({
              key: lr.key,
              attrs: { "data-link-route": lr.key },
              cells: [
                lr.name,
                h("span", { class: "mono" }, lr.key),
                (lr.directions || []).join(", "),
                lr.containerId || "–",
                lr.connection || lr.connector || "–",
                lr.activeOn.length
                  ? lr.activeOn.join(", ")
                  : h("span", { class: "muted" }, "no container connected"),
              ],
            })),
            { id: "link-routes-table" },
          )
        : h("p", { class: "muted" }, "No link routes declared."),
    );
  }

  return { init, enter, wants, show };
})();

// --- queues and topics -----------------------------------------------------------------------

/** Depth over the kept scrapes as a small line, the last point marked. */
function sparkline(history) {
  const W = 120;
  const H = 26;
  const depths = history.map(([, depth]) => depth);
  if (!depths.length) return h("span", { class: "muted" }, "–");
  const max = Math.max(1, ...depths);
  const step = depths.length > 1 ? W / (depths.length - 1) : 0;
  const points = depths.map((d, i) => [i * step, H - 2 - (d / max) * (H - 4)]);
  if (points.length === 1) points.unshift([0, points[0][1]]);
  const [lx, ly] = points[points.length - 1];
  const first = history[0][0] * 1000;
  return s(
    "svg",
    {
      class: "sparkline",
      width: W + 4,
      height: H,
      viewBox: `-2 0 ${W + 4} ${H}`,
      role: "img",
      "aria-label": `depth over time, max ${max}`,
    },
    s(
      "title",
      null,
      `depth since ${fmt.clock(first)}: max ${max}, now ${depths[depths.length - 1]}`,
    ),
    s("polyline", { points: points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" ") }),
    s("circle", { cx: lx.toFixed(1), cy: ly.toFixed(1), r: 2.5 }),
  );
}

export const nodes = (() => {
  let app = null;
  let filter = null;

  function init(shell) {
    app = shell;
    filter = filterBox("node-filter", "nodes", app);
  }

  function show(_route, data) {
    const answer = data["/api/nodes"];
    const content = document.getElementById("nodes-content");
    if (!answer || answer.error) {
      render(content, notice(answer ? answer.error : "loading…"));
      return;
    }
    const text = filter.text();
    const shown = answer.nodes.filter((n) => !text || n.name.toLowerCase().includes(text));
    document.getElementById("node-count").textContent = `${shown.length} of ${answer.nodes.length}`;
    render(
      content,
      answer.nodes.length
        ? table(
            [
              "name",
              "type",
              "router",
              { text: "depth", num: true },
              "depth over time",
              { text: "consumers", num: true },
              { text: "producers", num: true },
              { text: "enqueued", num: true },
              { text: "dequeued", num: true },
              { text: "dead-lettered", num: true },
              { text: "expired", num: true },
              "dead letters to",
              { text: "size", num: true },
            ],
            shown.map((n) => ({
              key: `${n.name}@${n.router}`,
              attrs: {
                "data-node": n.name,
                "data-router": n.router,
                "data-outbox": String(n.outbox),
              },
              cells: [
                h(
                  "span",
                  { class: "mono" },
                  n.name,
                  n.outbox
                    ? h(
                        "span",
                        {
                          class: "badge warn",
                          title: "dead letters on their way to another router's node",
                        },
                        "outbox",
                      )
                    : null,
                ),
                n.type || "–",
                routerLink(n.router),
                num(fmt.count(n.depth), { "data-depth": n.depth }),
                sparkline(n.history),
                num(fmt.count(n.consumers), { "data-consumers": n.consumers }),
                num(fmt.count(n.producers)),
                num(fmt.count(n.enqueued)),
                num(fmt.count(n.dequeued)),
                num(fmt.count(n.deadLettered), { class: n.deadLettered ? "num warn-text" : "num" }),
                num(fmt.count(n.expired)),
                n.deadLetterAddress ? h("span", { class: "mono" }, n.deadLetterAddress) : "–",
                num(fmt.bytes(n.bytes)),
              ],
            })),
            { id: "nodes-table" },
          )
        : h(
            "p",
            { class: "muted", id: "nodes-none" },
            "No queue or topic is hosted: declare an Address with a node (examples/addresses.yaml).",
          ),
    );
  }

  return { init, enter: (route) => filter.enter(route), wants: () => ["/api/nodes"], show };
})();

// --- flows -----------------------------------------------------------------------------------

export const flows = (() => {
  let app = null;
  let minutes = 5;

  function path() {
    return `/api/flows?minutes=${minutes}`;
  }

  function showButtons() {
    for (const b of document.querySelectorAll("#flow-minutes [data-minutes]")) {
      b.setAttribute("aria-pressed", String(Number(b.dataset.minutes) === minutes));
    }
  }

  function init(shell) {
    app = shell;
    document.getElementById("flow-minutes").addEventListener("click", (event) => {
      const button = event.target.closest("[data-minutes]");
      if (!button) return;
      minutes = Number(button.dataset.minutes);
      history.replaceState(null, "", routeHref("flows", { minutes }));
      showButtons();
      app.reshow();
      app.refetch();
    });
    document.getElementById("flows-internal").addEventListener("change", () => app.reshow());
    showButtons();
  }

  function enter(route) {
    const asked = Number(route.params.minutes);
    if ([1, 5, 15, 60].includes(asked)) minutes = asked;
    showButtons();
  }

  /** A cell's background: the theme's heat colour, stronger with the volume; at most 55% of
   * it, so that the text on the busiest cell keeps its contrast in either theme. */
  function heat(value, max, undeliverable) {
    if (!value) return null;
    const share = Math.round(10 + 45 * Math.sqrt(value / max));
    const colour = undeliverable ? "var(--bad)" : "var(--heat)";
    return `background: color-mix(in srgb, ${colour} ${share}%, transparent)`;
  }

  function matrix(answer, routers) {
    const cells = new Map(answer.matrix.map((c) => [`${c.ingress}|${c.egress ?? ""}`, c]));
    const max = Math.max(1, ...answer.matrix.map((c) => c.deliveries));
    const column = (ingress, egress) => {
      const c = cells.get(`${ingress}|${egress ?? ""}`);
      const title = c
        ? `${ingress} → ${egress ?? "undeliverable"}: ${fmt.count(c.deliveries)} deliveries ` +
          `(${fmt.bytes(c.bytes)}), dropped ${c.dropped}, rejected ${c.rejected}, released ${c.released}`
        : `${ingress} → ${egress ?? "undeliverable"}: nothing`;
      return h(
        "td",
        {
          class: `num cell${egress === null ? " undeliverable" : ""}`,
          "data-ingress": ingress,
          "data-egress": egress ?? "",
          "data-deliveries": c ? c.deliveries : 0,
          style: c ? heat(c.deliveries, max, egress === null) : null,
          title,
        },
        c
          ? [h("span", null, fmt.rate(c.perSecond)), h("small", null, fmt.count(c.deliveries))]
          : "·",
      );
    };
    return h(
      "table",
      { class: "compact matrix", id: "flow-matrix" },
      h(
        "caption",
        null,
        "Traffic matrix: messages from ingress (rows) to egress (columns), per second over the window, and the count",
      ),
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          h("th", { scope: "col" }, "ingress \\ egress"),
          routers.map((r) => h("th", { scope: "col", class: "num" }, r)),
          h("th", { scope: "col", class: "num" }, "undeliverable"),
        ),
      ),
      h(
        "tbody",
        null,
        routers.map((ingress) =>
          h(
            "tr",
            { "data-key": ingress },
            h("th", { scope: "row" }, ingress),
            routers.map((egress) => column(ingress, egress)),
            column(ingress, null),
          ),
        ),
      ),
    );
  }

  function show(_route, data) {
    const answer = data[path()];
    const content = document.getElementById("flows-content");
    if (!answer) {
      render(content, notice("loading…"));
      return;
    }
    if (answer.error) {
      render(content, notice(answer.error));
      return;
    }
    if (!answer.available) {
      render(content, notice(`No flows: ${answer.reason}`, { id: "flows-unavailable" }));
      return;
    }
    const topo = data["/api/topology"];
    const known = topo && !topo.error ? topo.routers.map((r) => r.id) : [];
    const routers = [...new Set([...known, ...answer.routers])].sort();
    const showInternal = document.getElementById("flows-internal").checked;
    const paths = answer.paths.filter((p) => showInternal || !internal(p.address));
    const hidden = answer.paths.length - paths.length;
    render(
      content,
      h(
        "p",
        { class: "muted", id: "flows-window" },
        `${fmt.count(answer.records)} flow records from ${fmt.clock(answer.from)} to ${fmt.clock(answer.to)}`,
      ),
      answer.unanswered?.length
        ? h(
            "ul",
            { class: "error-text", id: "flows-unanswered" },
            answer.unanswered.map((why) => h("li", null, `Missing: ${why}`)),
          )
        : null,
      matrix(answer, routers),
      h("h2", null, "Busiest paths"),
      hidden
        ? h("p", { class: "muted" }, `${hidden} of the busiest are internal addresses, hidden`)
        : null,
      table(
        [
          "address",
          "path",
          { text: "deliveries", num: true },
          { text: "msgs/s", num: true },
          { text: "size", num: true },
          { text: "dropped", num: true },
          { text: "rejected", num: true },
          { text: "released", num: true },
          { text: "p50", num: true },
          { text: "p90", num: true },
          { text: "p99", num: true },
          { text: "samples", num: true },
        ],
        paths.map((p) => ({
          key: `${p.address}|${p.ingress}|${p.egress}|${p.nodeLeg}`,
          attrs: { "data-path": p.address, "data-deliveries": p.deliveries },
          cells: [
            h("span", { class: "mono" }, p.address),
            [
              p.ingress,
              " → ",
              p.egress ?? h("span", { class: "error-text" }, "undeliverable"),
              p.nodeLeg ? h("span", { class: "muted" }, ` (${p.nodeLeg})`) : null,
            ],
            num(fmt.count(p.deliveries)),
            num(fmt.rate(p.perSecond)),
            num(fmt.bytes(p.bytes)),
            num(fmt.count(p.dropped)),
            num(fmt.count(p.rejected)),
            num(fmt.count(p.released)),
            num(fmt.latency(p.latencyUs.p50)),
            num(fmt.latency(p.latencyUs.p90)),
            num(fmt.latency(p.latencyUs.p99)),
            num(fmt.count(p.latencyUs.samples)),
          ],
        })),
        { id: "flow-paths", empty: "No traffic in this window." },
      ),
    );
  }

  return { init, enter, wants: () => [path()], show };
})();

// --- health ----------------------------------------------------------------------------------

export const health = (() => {
  /** Where a problem's subject is shown: its router in the topology, its address or queue. */
  function links(subject) {
    const found = [];
    if (subject.address) {
      found.push(
        h(
          "a",
          {
            href: routeHref("addresses", { q: subject.address }),
            "data-address-link": subject.address,
          },
          `address ${subject.address}`,
        ),
      );
    }
    if (subject.node) {
      found.push(
        h(
          "a",
          { href: routeHref("nodes", { q: subject.node }), "data-node-link": subject.node },
          `queue ${subject.node}`,
        ),
      );
    }
    for (const id of [subject.router, subject.peer]) {
      if (id)
        found.push(
          h(
            "a",
            { href: routeHref("topology", { router: id }), "data-router-link": id },
            `router ${id}`,
          ),
        );
    }
    return found;
  }

  function show(_route, data) {
    const answer = data["/api/health"];
    const content = document.getElementById("health-content");
    if (!answer || answer.error) {
      render(content, notice(answer ? answer.error : "loading…"));
      return;
    }
    const { up, total } = answer.routers;
    const problems = answer.problems;
    render(
      content,
      h(
        "p",
        { class: "summary", id: "health-line" },
        h("span", { class: `badge ${up < total ? "bad" : "good"}` }, `${up}/${total} routers up`),
        ` · ${fmt.count(answer.addresses)} address${answer.addresses === 1 ? "" : "es"} · `,
        problems.length
          ? `${problems.length} problem${problems.length > 1 ? "s" : ""}`
          : "no problems",
      ),
      problems.length
        ? h(
            "ul",
            { class: "problems", id: "problems" },
            problems.map((p, i) =>
              h(
                "li",
                {
                  "data-key": `${p.kind}|${JSON.stringify(p.subject)}|${i}`,
                  "data-problem-kind": p.kind,
                  "data-severity": p.severity,
                },
                h("span", { class: `badge sev-${p.severity}` }, p.severity),
                h("span", { class: "what" }, p.what),
                h("span", { class: "where muted" }, `look at: ${p.where}`),
                h("span", { class: "goto" }, links(p.subject)),
              ),
            ),
          )
        : h(
            "p",
            { class: "ok-text", id: "no-problems" },
            "Nothing wrong: every router is up and reachable, every address with senders has a consumer.",
          ),
    );
  }

  return { wants: () => ["/api/health"], show };
})();
