// The report page's interactions (gruc/runtime/page.py writes the page; this file is inlined
// into it).  Charts are Plotly's: this code only turns the embedded data into Plotly traces and
// answers the user's clicks and hovers.  Why in the browser: a tile's page (its memory map, its
// variables and their lifetimes) and a zoomed-in window of a chart of 1,472 tiles are made on
// demand from the compact arrays embedded once, instead of thousands of charts written ahead.
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("gruc-data").textContent);
  const CONFIG = {displaylogo: false, responsive: true,
                  modeBarButtonsToRemove: ["lasso2d", "select2d"]};
  const MAX_POINTS = 1200;  // a chart of more tiles than this shows the busiest of each bin
  const TRACE_BINS = 1200;  // time columns of the trace view, whatever its window
  const LIVE_LISTED = 25;   // variables listed by a liveness hover, largest first

  // ---- decoding and formatting -------------------------------------------------------------
  function decode(text, Type) {
    const raw = atob(text);
    const bytes = new Uint8Array(raw.length);
    for (let k = 0; k < raw.length; k++) bytes[k] = raw.charCodeAt(k);
    return new Type(bytes.buffer);
  }
  const grouped = (n) => Math.round(n).toLocaleString("en-US");
  const bytesText = (n) => grouped(n) + " B (" + (n / 1024).toFixed(1) + " KiB)";
  const hex = (n) => "0x" + n.toString(16).padStart(5, "0");
  function escape(text) {
    return String(text).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;",
                                                      '"': "&quot;", "'": "&#39;"})[c]);
  }
  function table(headers, rows, id) {
    const head = "<tr>" + headers.map((h) => "<th>" + escape(h) + "</th>").join("") + "</tr>";
    const body = rows.map((row) => "<tr>" + row.map((cell) => {
      const text = typeof cell === "number" ? grouped(cell) : escape(cell);
      return "<td" + (typeof cell === "number" ? "" : ' class="text"') + ">" + text + "</td>";
    }).join("") + "</tr>").join("");
    return '<table id="' + id + '"><thead>' + head + "</thead><tbody>" + body + "</tbody></table>";
  }

  const blocks = {
    tileStart: decode(DATA.blocks.tileStart, Int32Array),
    variable: decode(DATA.blocks.variable, Int32Array),
    address: decode(DATA.blocks.address, Int32Array),
    nbytes: decode(DATA.blocks.nbytes, Int32Array),
  };
  const V = DATA.variables;
  const landing = {steps: DATA.landing.steps, bytes: decode(DATA.landing.bytes, Int32Array)};
  const categoryNames = DATA.categories.map((c) => c.name);
  const colourOf = Object.fromEntries(DATA.categories.map((c) => [c.name, c.colour]));
  const FIXED = ["vertexCode", "vertexInstanceState", "vertexFieldData", "controlCode",
                 "internalExchangeCode"];

  function liveAt(v, step) {
    if (V.always_live[v]) return true;
    const runs = V.live_steps[v];
    for (let k = 0; k < runs.length; k += 2) {
      if (step >= runs[k] && step <= runs[k + 1]) return true;
    }
    return false;
  }
  function liveText(v) {
    if (V.always_live[v]) return "always live";
    const runs = V.live_steps[v];
    if (!runs.length) return "never live";
    const parts = [];
    for (let k = 0; k < runs.length; k += 2) {
      parts.push(runs[k] === runs[k + 1] ? String(runs[k]) : runs[k] + "-" + runs[k + 1]);
    }
    return "steps " + parts.join(", ");
  }
  function categoryOf(v) {
    const kind = V.constant[v] ? "constant" : V.always_live[v] ? "variable (always live)"
      : "variable (not always live)";
    return V.interleaved[v] ? kind + ", interleaved" : kind;
  }
  function tileBlocks(tile) {
    const rows = [];
    for (let k = blocks.tileStart[tile]; k < blocks.tileStart[tile + 1]; k++) {
      rows.push({v: blocks.variable[k], address: blocks.address[k], nbytes: blocks.nbytes[k]});
    }
    return rows;
  }
  function stepName(step) {
    const s = DATA.steps[step];
    return "step " + step + " (" + s.where + ": " + s.what + ")";
  }

  // Whole-number axes (tiles, steps) tick on whole numbers only: plotly's own ticks fall on
  // halves when a zoom leaves a few values, and "d" formatting then repeats labels.
  function integerTicks(span) {
    for (let power = 1; ; power *= 10) {
      for (const base of [1, 2, 5]) {
        if (span / (base * power) <= 12) return {tick0: 0, dtick: base * power, tickformat: "d"};
      }
    }
  }

  // ---- charts of every tile, the busiest of each bin when there are more tiles than pixels ---
  function binned(lo, hi, weight) {
    const tiles = [];
    const size = Math.max(1, Math.ceil((hi - lo) / MAX_POINTS));
    for (let first = lo; first < hi; first += size) {
      let best = first;
      for (let t = first; t < Math.min(first + size, hi); t++) if (weight[t] > weight[best]) best = t;
      tiles.push(best);
    }
    return {tiles: tiles, size: size};
  }
  function perTileChart(id, series, weight, unit, yTitle) {
    const element = document.getElementById(id);
    if (!element) return;
    const n = weight.length;
    function traces(lo, hi) {
      const pick = binned(lo, hi, weight);
      const note = pick.size > 1 ? " (busiest of " + pick.size + " tiles)" : "";
      return series.map((s) => ({
        type: "scatter", mode: "lines", stackgroup: "one", name: s.name, x: pick.tiles,
        visible: s.hidden !== flipped.has(s.name) ? "legendonly" : true,
        y: pick.tiles.map((t) => s.values[t]), line: {width: 0, shape: "hvh"},
        fillcolor: s.colour, marker: {color: s.colour},
        hovertemplate: "%{y:,} " + unit + note + "<extra>" + escape(s.name) + "</extra>",
      }));
    }
    const ipuLines = [];
    for (let t = DATA.tilesPerIpu; t < n; t += DATA.tilesPerIpu) {
      ipuLines.push({type: "line", xref: "x", yref: "paper", x0: t - 0.5, x1: t - 0.5, y0: 0,
                     y1: 1, line: {color: "#333", width: 1}});
    }
    const layout = {
      height: 380, margin: {l: 70, r: 20, t: 10, b: 50}, hovermode: "x unified",
      xaxis: {title: {text: "tile"}, range: [-0.5, n - 0.5], ...integerTicks(n)},
      yaxis: {title: {text: yTitle}, rangemode: "tozero", tickformat: ".3~s"},
      legend: {orientation: "h", y: -0.2}, shapes: ipuLines, plot_bgcolor: "white",
    };
    const flipped = new Set();  // series the user showed or hid in the legend: kept on zoom
    Plotly.newPlot(element, traces(0, n), layout, CONFIG);
    element.on("plotly_legendclick", (event) => {
      const name = event.data[event.curveNumber].name;
      if (flipped.has(name)) flipped.delete(name); else flipped.add(name);
    });
    let drawing = false;
    element.on("plotly_relayout", (change) => {
      if (drawing) return;
      let lo = 0, hi = n;
      if (change["xaxis.range[0]"] !== undefined) {
        lo = Math.max(0, Math.floor(change["xaxis.range[0]"]));
        hi = Math.min(n, Math.ceil(change["xaxis.range[1]"]) + 1);
      } else if (!change["xaxis.autorange"]) return;
      drawing = true;
      Object.assign(element.layout.xaxis, integerTicks(hi - lo));
      Plotly.react(element, traces(lo, hi), element.layout).then(() => { drawing = false; });
    });
    element.on("plotly_click", (event) => openTile(event.points[0].x));
  }

  // ---- a tile's page ------------------------------------------------------------------------
  function tileFigures(tile) {
    const ipu = Math.floor(tile / DATA.tilesPerIpu);
    const local = tile % DATA.tilesPerIpu;
    const where = "IPU " + ipu + ", row " + Math.floor(local / DATA.grid[1]) + ", column " +
      (local % DATA.grid[1]);
    const rows = categoryNames.map((name) => [name, DATA.tiles[name][tile]]);
    rows.push(["total including gaps", DATA.total[tile]]);
    const peak = DATA.peakStep[tile];
    const text = "<p>" + escape(where) + "; " + bytesText(DATA.total[tile]) + " of " +
      bytesText(DATA.capacity) + " (" + (100 * DATA.total[tile] / DATA.capacity).toFixed(1) +
      "%); not-always-live peak at " + (peak >= 0 ? escape(stepName(peak)) : "no step") +
      "; cycles: " + grouped(DATA.cycles.compute[tile]) + " compute, " +
      grouped(DATA.cycles.exchange[tile]) + " exchange, " + grouped(DATA.cycles.sync[tile]) +
      " sync</p>";
    return text + table(["category", "bytes"], rows, "tile-categories");
  }

  function memoryMap(tile, own) {
    // rows from the lowest address up: the fixed categories, tensor blocks, landing room, gaps
    const items = [];
    let at = 0;
    for (const name of FIXED) {
      const size = DATA.tiles[name][tile];
      if (size > 0) items.push({label: name, start: at, size: size, colour: colourOf[name],
                                what: name});
      at += size;
    }
    for (const b of own) {
      const name = V.always_live[b.v] ? "variable (always live)" : "variable (not always live)";
      items.push({label: V.name[b.v], start: b.address, size: b.nbytes,
                  colour: colourOf[V.constant[b.v] ? "constant" : name],
                  what: categoryOf(b.v) + "; " + liveText(b.v)});
    }
    const tensorEnd = own.filter((b) => b.address < DATA.interleavedBase[tile])
      .reduce((end, b) => Math.max(end, b.address + b.nbytes), DATA.tensorBase[tile]);
    const noninterleaved = DATA.nonInterleavedEnd[tile];
    if (noninterleaved > tensorEnd && DATA.tiles.message[tile] > 0) {
      items.push({label: "message (landing buffers)", start: tensorEnd,
                  size: noninterleaved - tensorEnd, colour: colourOf.message,
                  what: "room the exchange's landing buffers need at the tile's peak"});
    }
    // gaps: addresses below the tile's total that nothing ever occupies
    const spans = items.map((i) => [i.start, i.start + i.size]).sort((a, b) => a[0] - b[0]);
    const gaps = [];
    let reached = 0;
    for (const [start, end] of spans) {
      if (start > reached) gaps.push([reached, start]);
      reached = Math.max(reached, end);
    }
    if (DATA.total[tile] > reached) gaps.push([reached, DATA.total[tile]]);
    for (const [start, end] of gaps) {
      items.push({label: "gap", start: start, size: end - start, colour: colourOf.gaps,
                  what: "never occupied (alignment, the interleaved region's start, freed space)"});
    }
    const shown = items.filter((i) => i.label !== "gap");
    const labels = [...new Set(shown.sort((a, b) => a.start - b.start).map((i) => i.label))];
    labels.push("gap");
    const trace = {
      type: "bar", orientation: "h", y: items.map((i) => i.label), x: items.map((i) => i.size),
      base: items.map((i) => i.start), marker: {color: items.map((i) => i.colour)},
      customdata: items.map((i) => [hex(i.start), hex(i.start + i.size), i.what]),
      hovertemplate: "%{y}<br>%{customdata[0]} - %{customdata[1]}: %{x:,} B<br>" +
        "%{customdata[2]}<extra></extra>",
    };
    const marks = [[DATA.interleavedStart, "interleaved region"], [DATA.capacity, "capacity"]];
    // blocks of a few bytes are slivers on a 624 KiB axis: the map opens on the region in use
    const whole = [0, Math.max(DATA.capacity, DATA.total[tile]) * 1.02];
    const low = [0, Math.max(DATA.nonInterleavedEnd[tile], 1) * 1.02];
    const high = [DATA.interleavedBase[tile], Math.max(DATA.total[tile],
                                                        DATA.interleavedBase[tile] + 1)];
    const hasHigh = DATA.total[tile] > DATA.interleavedBase[tile];
    const views = [["non-interleaved region in use", low], ["whole tile", whole]];
    if (hasHigh) views.splice(1, 0, ["interleaved region in use", high]);
    const layout = {
      height: Math.min(1600, 150 + 18 * labels.length), margin: {l: 220, r: 20, t: 60, b: 50},
      barmode: "overlay", plot_bgcolor: "white", showlegend: false,
      updatemenus: [{type: "buttons", direction: "right", x: 0, xanchor: "left", y: 1.02,
                     yanchor: "bottom", pad: {b: 18}, showactive: true,
                     buttons: views.map(([label, range]) => ({
                       label: label, method: "relayout", args: [{"xaxis.range": range}]}))}],
      xaxis: {title: {text: "address (bytes from the tile's first)"}, tickformat: ".3~s",
              range: low},
      yaxis: {categoryorder: "array", categoryarray: labels, autorange: "reversed",
              automargin: true},
      shapes: marks.map(([x]) => ({type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0,
                                   y1: 1, line: {color: "#c53030", dash: "dash", width: 1}})),
      annotations: marks.map(([x, text]) => ({x: x, y: 1, xref: "x", yref: "paper", text: text,
                                              showarrow: false, yanchor: "bottom",
                                              font: {size: 10, color: "#c53030"}})),
    };
    Plotly.newPlot("tile-memory-map", [trace], layout, CONFIG);
  }

  function openTile(tile) {
    tile = Number(tile);
    if (!Number.isInteger(tile) || tile < 0 || tile >= DATA.numTiles) return;
    const page = document.getElementById("tile-page");
    page.hidden = false;
    document.getElementById("tile-title").textContent = "Tile " + tile;
    const own = tileBlocks(tile);
    document.getElementById("tile-figures").innerHTML = tileFigures(tile);
    memoryMap(tile, own);
    const rows = own.slice().sort((a, b) => b.nbytes - a.nbytes || a.address - b.address)
      .map((b) => [V.name[b.v], V.type[b.v], b.nbytes, hex(b.address) + " - " +
                   hex(b.address + b.nbytes), categoryOf(b.v), liveText(b.v)]);
    document.getElementById("tile-variables").innerHTML = rows.length
      ? table(["variable", "type", "bytes on this tile", "addresses", "category", "live"],
              rows, "tile-variable-table")
      : "<p>No tensor data on this tile.</p>";
    document.getElementById("liveness-tile").value = tile;
    tileLiveness(tile, [["tile-liveness-chart", "liveness-info"],
                        ["tile-page-liveness", "tile-live-info"]]);
    if (location.hash !== "#tile=" + tile) history.replaceState(null, "", "#tile=" + tile);
    page.scrollIntoView();
  }

  // ---- liveness --------------------------------------------------------------------------------
  function landingOn(tile) {
    const perStep = new Array(DATA.steps.length).fill(0);
    landing.steps.forEach((step, k) => {
      perStep[step] += landing.bytes[k * DATA.numTiles + tile];
    });
    return perStep;
  }
  function tileLiveness(tile, charts) {
    const own = tileBlocks(tile);
    const steps = DATA.steps.map((_, k) => k);
    let fixed = 0;
    for (const name of FIXED) fixed += DATA.tiles[name][tile];
    const always = own.filter((b) => V.always_live[b.v]).reduce((s, b) => s + b.nbytes, 0);
    const later = steps.map((s) => own.filter((b) => !V.always_live[b.v] && liveAt(b.v, s))
      .reduce((sum, b) => sum + b.nbytes, 0));
    const message = landingOn(tile);
    const band = (name, y, colour) => ({type: "scatter", mode: "lines", stackgroup: "one",
                                        name: name, x: steps, y: y, fillcolor: colour,
                                        line: {width: 0, shape: "hvh"}, marker: {color: colour},
                                        hovertemplate: "%{y:,} B<extra>" + name + "</extra>"});
    const traces = [band("code and vertex state", steps.map(() => fixed), colourOf.vertexCode),
                    band("always-live tensors", steps.map(() => always),
                         colourOf["variable (always live)"]),
                    band("not-always-live tensors", later, colourOf["variable (not always live)"]),
                    band("message (landing buffers)", message, colourOf.message)];
    const layout = {height: 320, margin: {l: 70, r: 20, t: 30, b: 50}, hovermode: "x unified",
                    title: {text: "Tile " + tile + ": bytes live at each step", font: {size: 13}},
                    xaxis: {title: {text: "program step"}, ...integerTicks(steps.length)},
                    yaxis: {title: {text: "bytes"}, tickformat: ".3~s", rangemode: "tozero"},
                    legend: {orientation: "h", y: -0.25}, plot_bgcolor: "white"};
    for (const [id, infoId] of charts) {
      const element = document.getElementById(id);
      Plotly.newPlot(element, traces, layout, CONFIG);  // (drops the last tile's listeners)
      element.on("plotly_hover", (event) => {
        const step = event.points[0].x;
        const live = own.filter((b) => liveAt(b.v, step)).sort((a, b) => b.nbytes - a.nbytes);
        const total = fixed + always + later[step] + message[step];
        document.getElementById(infoId).innerHTML =
          "<b>Tile " + tile + ", " + escape(stepName(step)) + "</b>: " + bytesText(total) +
          " live (" + grouped(later[step]) + " B not-always-live tensors, " +
          grouped(message[step]) + " B landing buffers)" + listed(live.map((b) =>
            [V.name[b.v], b.nbytes]));
      });
    }
  }
  function listed(pairs) {
    if (!pairs.length) return "";
    const shown = pairs.slice(0, LIVE_LISTED).map(([name, n]) => escape(name) + " " +
                                                  grouped(n) + " B");
    const more = pairs.length > LIVE_LISTED ? ", and " + (pairs.length - LIVE_LISTED) + " more" : "";
    return "<br>live: " + shown.join(", ") + more;
  }
  function allTilesLiveness() {
    const element = document.getElementById("liveness-chart");
    if (!element || !element.on) return;
    element.on("plotly_hover", (event) => {
      const step = event.points[0].x;
      const total = DATA.live.total[step];
      const live = V.name.map((_, v) => v).filter((v) => !V.always_live[v] && liveAt(v, step))
        .sort((a, b) => V.bytes[b] - V.bytes[a]);
      document.getElementById("liveness-info").innerHTML =
        "<b>All tiles, " + escape(stepName(step)) + "</b>: " + bytesText(total) +
        " of tensor data live (" + grouped(DATA.live.always) + " B always-live, " +
        grouped(total - DATA.live.always) + " B not-always-live); busiest tile " +
        grouped(DATA.live.maxTile[step]) + " B" + listed(live.map((v) => [V.name[v], V.bytes[v]]));
    });
  }

  // ---- the program tree and steps -------------------------------------------------------------
  function treeHtml(nodes) {
    return '<ul class="tree">' + nodes.map((node) => {
      if (typeof node === "number") {
        const s = DATA.steps[node];
        const cycles = s.compute + s.exchange + s.sync;
        return '<li><a href="#step=' + node + '" class="step-link" data-step="' + node +
          '">step ' + node + "</a> " + escape(s.what) + ' <span class="cost">x' +
          grouped(s.executions) + ", " + grouped(cycles) + " cycles each, " +
          grouped(s.exchangeBytes) + " B exchanged each</span></li>";
      }
      return "<li><details open><summary>" + escape(node.t) + "</summary>" + treeHtml(node.c) +
        "</details></li>";
    }).join("") + "</ul>";
  }
  function showStep(step) {
    const s = DATA.steps[step];
    const each = s.compute + s.exchange + s.sync;
    const all = DATA.steps.reduce((t, x) => t + x.executions * (x.compute + x.exchange + x.sync), 0);
    const rows = [["executions", s.executions], ["compute cycles each", s.compute],
                  ["exchange cycles each", s.exchange], ["sync cycles each", s.sync],
                  ["cycles, all executions", s.executions * each],
                  ["share of the run", all ? (100 * s.executions * each / all).toFixed(1) + "%"
                                           : "no run"],
                  ["exchange bytes each", s.exchangeBytes],
                  ["exchange bytes, all executions", s.executions * s.exchangeBytes],
                  ["tensor data live (all tiles)", DATA.live.total[step]],
                  ["busiest tile's tensor data", DATA.live.maxTile[step]]];
    document.getElementById("step-detail").innerHTML = "<h3>" + escape(stepName(step)) + "</h3>" +
      table(["", ""], rows, "step-table");
    const chart = document.getElementById("steps-chart");
    if (chart && chart.data) {
      Plotly.restyle(chart, {selectedpoints: [[step]]});
    }
  }

  // ---- the BSP trace ----------------------------------------------------------------------------
  function traceView() {
    const element = document.getElementById("trace-chart");
    const info = document.getElementById("trace-info");
    const T = DATA.trace;
    if (!T) return;
    const ev = {row: decode(T.row, Int32Array), kind: decode(T.kind, Int32Array),
                start: decode(T.start, Float64Array), dur: decode(T.dur, Float64Array)};
    const steps = {start: decode(T.stepStart, Float64Array), dur: decode(T.stepDur, Float64Array),
                   step: decode(T.step, Int32Array)};
    const kinds = ["waiting", "exchange", "compute", "sync", "later iterations"];
    const colours = ["#ffffff", "#3182bd", "#31a354", "#bdbdbd", "#dadaeb"];
    function raster(t0, t1) {
      const bins = TRACE_BINS;
      const width = (t1 - t0) / bins;
      const rows = T.rows.length;
      const time = new Float64Array(rows * bins * 5);
      for (let k = 0; k < ev.row.length; k++) {
        const a = Math.max(ev.start[k], t0), b = Math.min(ev.start[k] + ev.dur[k], t1);
        if (b <= a) continue;
        const first = Math.floor((a - t0) / width), last = Math.min(bins - 1, Math.floor((b - t0) / width));
        for (let bin = first; bin <= last; bin++) {
          const lo = Math.max(a, t0 + bin * width), hi = Math.min(b, t0 + (bin + 1) * width);
          if (hi > lo) time[(ev.row[k] * bins + bin) * 5 + ev.kind[k]] += hi - lo;
        }
      }
      const z = [];
      for (let r = 0; r < rows; r++) {
        const line = [];
        for (let bin = 0; bin < bins; bin++) {
          let best = 0, most = 0;
          for (let kind = 1; kind < 5; kind++) {
            const spent = time[(r * bins + bin) * 5 + kind];
            if (spent > most) { most = spent; best = kind; }
          }
          line.push(best);
        }
        z.push(line);
      }
      const x = Array.from({length: bins}, (_, b) => t0 + (b + 0.5) * width);
      const scale = [];
      colours.forEach((c, k) => { scale.push([k / 5, c], [(k + 1) / 5, c]); });
      return [{type: "heatmap", z: z, x: x, y: T.rows, zmin: -0.5, zmax: 4.5,
               colorscale: scale, hoverinfo: "none",
               colorbar: {tickvals: [0, 1, 2, 3, 4], ticktext: kinds, len: 0.9}}];
    }
    const layout = {height: Math.min(900, 160 + 9 * T.rows.length),
                    margin: {l: 150, r: 20, t: 10, b: 50}, plot_bgcolor: "white",
                    xaxis: {title: {text: "time (us)"}, range: [0, T.end]},
                    yaxis: {autorange: "reversed", tickfont: {size: 9}}};
    Plotly.newPlot(element, raster(0, T.end), layout, CONFIG);
    let drawing = false;
    element.on("plotly_relayout", (change) => {
      if (drawing) return;
      let t0 = 0, t1 = T.end;
      if (change["xaxis.range[0]"] !== undefined) {
        t0 = Math.max(0, change["xaxis.range[0]"]);
        t1 = Math.min(T.end, change["xaxis.range[1]"]);
      } else if (!change["xaxis.autorange"]) return;
      if (t1 <= t0) return;
      drawing = true;
      Plotly.react(element, raster(t0, t1), element.layout).then(() => { drawing = false; });
    });
    element.on("plotly_hover", (event) => {
      const point = event.points[0];
      const t = point.x;
      let found = "";
      for (const [start, dur, name] of T.loops) {
        if (t >= start && t < start + dur) found = name + " of a loop (as its first)";
      }
      let lo = 0, hi = steps.start.length - 1;
      while (lo < hi) {  // the last step starting at or before t
        const mid = (lo + hi + 1) >> 1;
        if (steps.start[mid] <= t) lo = mid; else hi = mid - 1;
      }
      if (!found && steps.start.length && t < steps.start[lo] + steps.dur[lo]) {
        found = stepName(steps.step[lo]);
      }
      info.innerHTML = "<b>" + t.toFixed(2) + " us</b>, " + escape(point.y) + ": " +
        escape(kinds[point.z]) + (found ? " in " + escape(found) : "");
    });
  }

  // ---- wiring -----------------------------------------------------------------------------------
  function start() {
    const series = categoryNames.map((name) => ({name: name, values: DATA.tiles[name],
                                                 colour: colourOf[name], hidden: name === "gaps"}));
    perTileChart("memory-chart", series, DATA.total, "B", "bytes (total including gaps)");
    const cycles = DATA.cycles;
    const busy = cycles.compute.map((c, t) => c + cycles.exchange[t]);
    perTileChart("tile-cycles-chart",
                 [{name: "compute", values: cycles.compute, colour: "#31a354"},
                  {name: "exchange", values: cycles.exchange, colour: "#3182bd"},
                  {name: "sync", values: cycles.sync, colour: "#bdbdbd"}],
                 busy, "cycles", "cycles (all executions)");
    const map = document.getElementById("tile-heatmap");
    if (map && map.on) {
      map.on("plotly_click", (event) => openTile(event.points[0].customdata));
      map.on("plotly_hover", (event) => {
        const tile = event.points[0].customdata;
        if (tile === null || tile === undefined || tile < 0) return;
        document.getElementById("tile-map-info").innerHTML = "<b>Tile " + tile + "</b>: " +
          bytesText(DATA.total[tile]) + "; " + categoryNames.filter((n) => DATA.tiles[n][tile])
            .map((n) => escape(n) + " " + grouped(DATA.tiles[n][tile]) + " B").join(", ");
      });
    }
    const steps = document.getElementById("steps-chart");
    if (steps && steps.on) steps.on("plotly_click", (event) => showStep(event.points[0].x));
    document.getElementById("program-tree").innerHTML = DATA.tree.length ? treeHtml(DATA.tree)
      : "<p>A plan-only report has no lowered program tree; the steps are listed below.</p>";
    document.body.addEventListener("click", (event) => {
      const link = event.target.closest("[data-step], [data-tile]");
      if (!link) return;
      event.preventDefault();
      if (link.dataset.step !== undefined) showStep(Number(link.dataset.step));
      else openTile(Number(link.dataset.tile));
    });
    document.getElementById("tile-close").addEventListener("click", () => {
      document.getElementById("tile-page").hidden = true;
      history.replaceState(null, "", "#tile-map");
    });
    const chooser = document.getElementById("liveness-tile");
    chooser.addEventListener("change", () => {
      const tile = Number(chooser.value);
      if (Number.isInteger(tile) && tile >= 0 && tile < DATA.numTiles) {
        tileLiveness(tile, [["tile-liveness-chart", "liveness-info"]]);
      }
    });
    allTilesLiveness();
    tileLiveness(Number(chooser.value), [["tile-liveness-chart", "liveness-info"]]);
    traceView();
    const wanted = /^#tile=(\d+)$/.exec(location.hash);
    if (wanted) openTile(Number(wanted[1]));
    document.body.dataset.ready = "1";
  }
  start();
})();
