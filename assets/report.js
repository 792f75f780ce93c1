// syscatch's HTML leak report: renders the JSON block #report-data. Everything in it came from the target
// (symbols, paths, qualnames, environment values), so it is only ever set as text (textContent, text nodes,
// setAttribute of non-event attributes), never parsed as markup.
"use strict";
(function () {
  const errors = [];
  window.syscatchErrors = errors;
  window.addEventListener("error", (e) => errors.push(String(e.message)));
  const RAW = JSON.parse(document.getElementById("report-data").textContent);
  // A session's page holds a report per process: the one shown is chosen above (#pid-N in the address).
  const D = RAW.processes ? chooseProcess(RAW) : RAW;
  const MIB = 1048576;
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf"];

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (k === "text") e.textContent = v;
      else if (k === "class") e.className = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c);
    return e;
  }
  const $ = (id) => document.getElementById(id);

  function chooseProcess(all) {
    const want = (location.hash.match(/^#pid-(\d+)$/) || [])[1];
    const chosen = all.processes.find((p) => String(p.pid) === want) || all.processes[0];
    const rate = (p) => (p.lasting_mib_per_min === null ? "?" : p.lasting_mib_per_min.toFixed(2) + " MiB/min");
    const select = el("select", { id: "process" }, ...all.processes.map((p) => {
      const o = el("option", { value: String(p.pid), text: `${p.pid}  ${p.verdict}  ${rate(p)}  ${p.command}` });
      o.selected = p === chosen;
      return o;
    }));
    select.addEventListener("change", () => {
      location.hash = "pid-" + select.value;
      location.reload();
    });
    const note = `${all.processes.length} processes with a report, ranked by growth rate`;
    document.querySelector("header").append(el("p", null, el("label", { text: "process " }, select), " " + note));
    return Object.assign({}, chosen.page, { title: `${all.title}: process ${chosen.pid} (${chosen.command})` });
  }
  function size(b) {
    if (b === null || b === undefined) return "-";
    return b >= 10 * MIB ? (b / MIB).toFixed(1) + " MiB" : Math.floor(b / 1024) + " KiB";
  }
  const WEIGHTS = [
    ["growth", "growth", (s) => s.growth],
    ["still-mapped", "still mapped", (s) => s.still_mapped],
    ["resident", "resident", (s) => s.resident || 0],
    ["mapped", "mapped", (s) => s.mapped],
    ["calls", "calls", (s) => s.calls],
  ].filter((w) => w[0] !== "resident" || D.weighed);
  const weigh = (name) => (WEIGHTS.find((w) => w[0] === name) || WEIGHTS[0])[2];
  const amount = (v, weight) => (weight === "calls" ? v + " calls" : size(v));
  const stackById = new Map(D.stacks.map((s) => [s.id, s]));

  function frameList(ids) {
    return el("ol", { class: "frames" }, ...ids.map((i) => {
      const f = D.frames[i] || { text: "??", kind: "native" };
      return el("li", { class: f.kind === "python" ? "py" : "", text: f.text });
    }));
  }

  function header() {
    $("title").textContent = "syscatch leak report: " + D.title;
    const w = D.window;
    $("window").textContent = `Trace window ${w.from.toFixed(2)} s to ${w.to.toFixed(2)} s (growth is measured ` +
      `over its middle half, ${w.middle[0].toFixed(2)} s to ${w.middle[1].toFixed(2)} s); ` +
      `${D.timeline.times.length} samples of the target's regions.`;
  }

  function findings() {
    const sec = $("findings");
    const F = D.findings;
    if (!F) {
      sec.append(el("p", { class: "muted", text: "No findings: the report was made without the rules." }));
      return;
    }
    sec.append(el("p", { class: "headline", text: F.headline }));
    if (!F.findings.length) {
      sec.append(el("p", { text: "Nothing known matches. Growth by stack is ranked below (leak candidates)." }));
    }
    for (const f of F.findings) {
      const dl = el("dl");
      const row = (k, ...v) => dl.append(el("dt", { text: k }), el("dd", null, ...v));
      row("what", f.what);
      if (f.where.length) {
        const ids = f.stack_ids.map((s) => "stack " + s).join(", ");
        row("where", el("div", { class: "muted", text: `(${ids}; full stacks in the table below)` }),
          el("ol", { class: "frames" }, ...f.where.map((fr) => el("li", { class: fr.python ? "py" : "", text: fr.text }))));
      }
      row("why", f.why, f.evidence.length ? el("ul", null, ...f.evidence.map((e) => el("li", { text: e }))) : null);
      f.fix.forEach((x, i) => row(`fix ${i + 1}`, x.action,
        x.caveat ? el("div", { class: "muted", text: "caveat: " + x.caveat }) : null,
        x.doc ? el("div", { class: "muted", text: "doc: " + x.doc }) : null));
      sec.append(el("article", { class: "finding" },
        el("h3", null, `#${f.rank} ${f.title}`, el("span", { class: "rule", text: `  [${f.rule}]` })), dl));
    }
    for (const n of F.notes) sec.append(el("p", { class: "muted", text: n }));
    if (F.untraced) {
      sec.append(el("p", { text: F.untraced }), el("ul", null, ...F.next.map((s) => el("li", { text: s }))));
    }
    // glibc malloc's arenas: a heading line, then one line each.
    const heap = F.heap || [];
    if (heap.length) {
      sec.append(el("p", { text: heap[0] }), el("ul", null, ...heap.slice(1).map((s) => el("li", { text: s.trim() }))));
    }
  }

  function timeline() {
    const T = D.timeline;
    const host = $("timeline");
    const n = T.times.length;
    if (n === 0) {
      host.append(el("p", { class: "muted", text: "No samples in the window." }));
      return;
    }
    $("timeline-note").textContent = "Solid: Rss+Swap of the growing regions; dashed: bytes still mapped by the " +
      "top leak candidates; dots: the samples; shaded: the middle half of the window. Hover for values.";
    const fit = (v) => Array.from({ length: n }, (_, i) => (i < v.length ? v[i] : null));
    const mib = (u, v) => (v === null || v === undefined ? "--" : v.toFixed(2) + " MiB");
    const data = [T.times];
    const series = [{ label: "time", value: (u, v) => (v === null ? "--" : v.toFixed(2) + " s") }];
    T.regions.forEach((r, i) => {
      data.push(fit(r.kb).map((v) => (v === null ? null : v / 1024)));
      series.push({ label: "Rss+Swap " + r.label, stroke: COLORS[i % 10], width: 2, value: mib,
        points: { show: true, size: 5 } });
    });
    T.stacks.forEach((s, i) => {
      data.push(fit(s.bytes).map((v) => (v === null ? null : v / MIB)));
      series.push({ label: "still mapped by " + s.label, stroke: COLORS[(i + 5) % 10], width: 2, dash: [6, 4],
        value: mib, points: { show: true, size: 4 } });
    });
    const w = D.window;
    const band = (u) => {
      const x0 = u.valToPos(w.middle[0], "x", true);
      const x1 = u.valToPos(w.middle[1], "x", true);
      u.ctx.save();
      u.ctx.fillStyle = "rgba(0, 0, 0, 0.05)";
      u.ctx.fillRect(x0, u.bbox.top, x1 - x0, u.bbox.height);
      u.ctx.restore();
    };
    const opts = {
      width: Math.max(400, host.clientWidth || 900),
      height: 340,
      series,
      scales: { x: { time: false, range: () => [w.from, Math.max(w.to, w.from + 1e-3)] } },
      axes: [{ label: "seconds since attach" }, { label: "MiB", size: 70, values: (u, vs) => vs.map((v) => v + " MiB") }],
      hooks: { drawClear: [band] },
    };
    new uPlot(opts, data, host);
  }

  // Memory classes are measured at the start and the end of the trace only: a table beside the timeline.
  function classes() {
    const host = $("classes");
    if (!D.classes.length) return;
    const kb = (v) => (v === null || v === undefined ? "-" : v + " KiB");
    const body = el("tbody", null, ...D.classes.map((c) => el("tr", null, el("td", { text: c.class }),
      el("td", { class: "num", text: kb(c.before_kb) }), el("td", { class: "num", text: kb(c.after_kb) }),
      el("td", { class: "num", text: c.before_kb === null ? "-" : (c.after_kb - c.before_kb >= 0 ? "+" : "") +
        (c.after_kb - c.before_kb) + " KiB" }))));
    host.append(el("p", { class: "muted", text: "Rss+Swap by memory class, at the start of the trace and at its end:" }),
      el("table", { class: "classes" }, el("thead", null, el("tr", null, ...["class", "start", "end", "change"].map(
        (t, i) => el("th", { class: i ? "num" : "", text: t })))), body));
  }

  function tree(weight) {
    const f = weigh(weight);
    const root = { name: "all", value: 0, kind: "root", children: [] };
    const index = new Map([[root, new Map()]]);
    for (const s of D.stacks) {
      const v = s.kind === "leak" ? f(s) : 0;
      if (!v) continue;
      root.value += v;
      let node = root;
      const frames = s.frames.length ? s.frames.slice().reverse().map((i) => D.frames[i]) : [{ name: "(no stack)" }];
      for (const fr of frames) {
        const kids = index.get(node);
        let child = kids.get(fr.name);
        if (!child) {
          child = { name: fr.name, value: 0, kind: fr.kind, children: [] };
          kids.set(fr.name, child);
          index.set(child, new Map());
          node.children.push(child);
        }
        child.value += v;
        node = child;
      }
    }
    return root;
  }

  let chart = null;
  function flame() {
    const host = $("flame");
    const weight = $("weight").value;
    host.textContent = "";
    const data = tree(weight);
    if (!data.value) {
      chart = null;
      host.append(el("p", { class: "muted", text: `No ${weight} on a traced stack (try another weight).` }));
      return;
    }
    const pyColor = (name) => `hsl(${205 + (name.length * 7) % 30}, 60%, ${62 + (name.length * 3) % 14}%)`;
    chart = flamegraph.default()
      .width(Math.max(400, host.clientWidth || 960))
      .cellHeight(18)
      .transitionDuration(250)
      .sort(true)
      .title("")
      .setSearchMatch((d, term) => !!term && String(d.data.name).toLowerCase().includes(term.toLowerCase()))
      .setLabelHandler((d) => `${d.data.name}: ${amount(d.value, weight)} ` +
        `(${(100 * d.value / data.value).toFixed(1)}% of ${amount(data.value, weight)})`)
      .setColorMapper((d, original) => (d.highlight ? "#e600e6" : d.data.kind === "python" ? pyColor(d.data.name) : original))
      .setDetailsElement($("details"));
    d3.select(host).datum(data).call(chart);
    const term = $("search").value;
    if (term) chart.search(term);
  }

  function flameControls() {
    const sel = $("weight");
    for (const [value, label] of WEIGHTS) sel.append(el("option", { value, text: label }));
    sel.addEventListener("change", flame);
    $("search").addEventListener("input", (e) => {
      if (!chart) return;
      if (e.target.value) chart.search(e.target.value);
      else chart.clear();
    });
    $("reset").addEventListener("click", () => chart && chart.resetZoom());
    flame();
  }

  // A sortable table: columns [title, key of the row's values, numeric]; each row opens a detail row.
  function table(id, columns, rows) {
    const t = $(id);
    const head = el("tr");
    const body = el("tbody");
    t.append(el("thead", null, head), body);
    let order = { col: -1, dir: 1 };
    const entries = rows.map((r) => {
      const tr = el("tr", { class: "row", title: "click for the full stack" },
        ...columns.map(([, key, num, show]) => el("td", { class: num ? "num" : key === "caller" ? "caller" : "",
          text: show ? show(r.values[key]) : String(r.values[key] ?? "-") })));
      const detail = el("tr", { class: "detail", hidden: "" }, el("td", { colspan: String(columns.length) }, r.detail()));
      tr.addEventListener("click", () => detail.toggleAttribute("hidden"));
      return { r, tr, detail };
    });
    const render = () => {
      for (const e of entries) body.append(e.tr, e.detail);
    };
    columns.forEach(([title, key, num], i) => {
      const th = el("th", { class: num ? "num" : "", text: title });
      th.addEventListener("click", () => {
        order = { col: i, dir: order.col === i ? -order.dir : num ? -1 : 1 };
        entries.sort((a, b) => {
          const x = a.r.values[key] ?? -1;
          const y = b.r.values[key] ?? -1;
          return (num ? x - y : String(x).localeCompare(String(y))) * order.dir;
        });
        for (const h of head.children) h.classList.remove("sorted-asc", "sorted-desc");
        th.classList.add(order.dir > 0 ? "sorted-asc" : "sorted-desc");
        render();
      });
      head.append(th);
    });
    render();
  }

  function stackDetail(s) {
    return () => el("div", null, el("div", { class: "muted",
      text: `stack ${s.id}: ${s.verdict_text}; ${s.mmaps} mmap, ${s.munmaps} munmap, ${s.mremaps} mremap, ` +
        `${s.failed} failed; unmapped ${size(s.unmapped)}, gone unseen ${size(s.vanished)}` }),
    frameList(s.frames), s.truncated ? el("div", { class: "muted", text: "stack truncated: " + s.truncated }) : null);
  }

  function stacks() {
    const om = D.omitted;
    $("stacks-note").textContent = "Leak candidates (stacks that still hold memory) by growth, then working sets " +
      "(stacks that mapped and unmapped again). Click a column to sort, a row for its full stack." +
      (om.leaks || om.working_sets ? ` Left out here (all of them with --json): ${om.leaks} leak candidates, ` +
        `${om.working_sets} working sets.` : "");
    const columns = [["#", "rank", true], ["kind", "verdict", false], ["growth", "growth", true, size],
      ["still mapped", "still_mapped", true, size]];
    if (D.weighed) columns.push(["resident", "resident", true, size]);
    columns.push(["mapped", "mapped", true, size], ["calls", "calls", true], ["caller", "caller", false]);
    const rows = D.stacks.map((s, i) => ({
      values: Object.assign({}, s, { rank: i + 1, verdict: s.kind === "leak" ? s.verdict : "working set (holds nothing)" }),
      detail: stackDetail(s),
    }));
    table("stacks", columns, rows);
  }

  function regions() {
    const kb = (v) => (v === null || v === undefined ? "unknown" : v + " KiB");
    const mibMin = (v) => (v === null || v === undefined ? "unknown" : v.toFixed(2) + " MiB/min");
    const columns = [["region", "range", false], ["grew", "growth_kb", true, kb], ["grows", "lasting_mib_per_min", true, mibMin],
      ["Rss+Swap now", "rss_swap_kb", true, kb]];
    if (D.weighed) columns.push(["on traced stacks", "traced_resident_kb", true, kb]);
    columns.push(["how", "how", false], ["from", "caller", false]);
    const rows = D.regions.map((g) => ({
      values: Object.assign({}, g, {
        range: `${g.start}-${g.end}`,
        how: g.new ? "new" : g.before_trace ? "mapped before the trace" : "grew",
        caller: g.stacks.length ? g.stacks[0].caller + (g.stacks.length > 1 ? ` and ${g.stacks.length - 1} more` : "") : "-",
      }),
      detail: () => el("div", null, g.stacks.length ? null : el("p", { class: "muted",
        text: "No traced call mapped in it: mapped before the trace started (or by a call that was not traced)." }),
      ...g.stacks.map((s) => {
        const full = stackById.get(s.id);
        return el("div", null, el("p", { text: `${s.calls} calls, ${size(s.still_mapped)} still mapped, from ${s.caller}` }),
          full ? frameList(full.frames) : null);
      })),
    }));
    table("regions", columns, rows);
  }

  for (const part of [header, findings, timeline, classes, flameControls, stacks, regions]) {
    try {
      part();
    } catch (e) {
      errors.push(part.name + ": " + e);
      console.error("syscatch report:", part.name, e);
    }
  }
  document.body.dataset.ready = errors.length ? "with errors" : "yes";
})();
