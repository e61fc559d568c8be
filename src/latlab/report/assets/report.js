// latlab HTML report: draws every <figure data-chart> from the JSON data block on a canvas.
// Text from the data is only ever drawn with fillText or set with textContent (never markup).
(() => {
  'use strict';
  const DATA = JSON.parse(document.getElementById('latlab-data').textContent);
  const PALETTE = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
    '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#ad494a', '#637939', '#7b4173', '#3182bd',
    '#e6550d'];
  const KIND = {capture: '#8c564b', processing: '#1f77b4', queue: '#9467bd', network: '#2ca02c',
    jitterbuffer: '#ff7f0e', playout: '#d62728', other: '#7f7f7f', end_to_end: '#2f4b7c'};
  const FONT = '11px system-ui, sans-serif';
  const FEW_POINTS = 60;  // below this many points a scatter draws big markers
  const color = (i) => (i < PALETTE.length ? PALETTE[i] : `hsl(${(i * 137.5) % 360},60%,42%)`);
  const lookup = (path) => path.split('.').reduce((o, k) => (o == null ? o : o[k]), DATA);

  function niceStep(span, count) {
    const raw = (span || 1) / count;
    const mag = 10 ** Math.floor(Math.log10(raw));
    return [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  }
  function ticks(min, max, count) {
    const step = niceStep(max - min, count);
    const out = [];
    for (let v = Math.ceil(min / step) * step; v <= max + step * 1e-9; v += step) {
      out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    }
    return out;
  }
  function fmt(v) {
    const a = Math.abs(v);
    const text = a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : a >= 1 ? v.toFixed(2) : v.toFixed(3);
    return text.includes('.') ? text.replace(/0+$/, '').replace(/\.$/, '') : text;
  }
  // A tick label with as many decimals as the step needs (fmt alone can print one label
  // for every tick of a narrow range far from zero, e.g. -33.9 for -33.90 ... -33.85).
  function tickFmt(v, step) {
    let digits = 0;
    while (digits < 6 && Math.abs(Math.round(step * 10 ** digits) - step * 10 ** digits) > 1e-6) {
      digits++;
    }
    const strip = (t) => (t.includes('.') ? t.replace(/0+$/, '').replace(/\.$/, '') : t);
    const decimals = (t) => (t.includes('.') ? t.length - t.indexOf('.') - 1 : 0);
    const text = fmt(v);
    const exact = strip(v.toFixed(digits));
    return decimals(text) >= decimals(exact) ? text : exact;
  }
  function range(arrays, {zero = false, pad = 0.04} = {}) {
    let lo = Infinity;
    let hi = -Infinity;
    for (const a of arrays) {
      for (const v of a) {
        if (v == null || !Number.isFinite(v)) continue;
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
    }
    if (!Number.isFinite(lo)) return [0, 1];
    if (zero) { lo = Math.min(lo, 0); hi = Math.max(hi, 0); }
    if (hi === lo) { hi += 0.5; lo -= zero && lo === 0 ? 0 : 0.5; }
    const p = (hi - lo) * pad;
    return [zero && lo === 0 ? 0 : lo - p, hi + p];
  }
  function innerWidth(el) {
    const style = getComputedStyle(el);
    return Math.floor(el.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight));
  }
  function clip(text, ctx, width) {
    if (ctx.measureText(text).width <= width) return text;
    let cut = text;
    while (cut.length > 1 && ctx.measureText('…' + cut).width > width) cut = cut.slice(1);
    return '…' + cut;
  }

  // A canvas with an x/y frame: scales, grid, tick labels and axis titles.
  class Plot {
    constructor(fig, {height = 260, left = 56, right = 16, top = 12, bottom = 38} = {}) {
      this.fig = fig;
      const canvas = fig.querySelector('canvas');
      const width = Math.max(innerWidth(fig), 240);
      const dpr = window.devicePixelRatio || 1;
      canvas.width = Math.round(width * dpr);
      canvas.height = Math.round(height * dpr);
      canvas.style.width = `${width}px`;
      canvas.style.height = `${height}px`;
      this.canvas = canvas;
      this.ctx = canvas.getContext('2d');
      this.ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      this.ctx.font = FONT;
      this.w = width;
      this.h = height;
      this.m = {left, right, top, bottom};
      this.ctx.fillStyle = '#ffffff';
      this.ctx.fillRect(0, 0, width, height);
    }
    get x0() { return this.m.left; }
    get x1() { return this.w - this.m.right; }
    get y0() { return this.h - this.m.bottom; }
    get y1() { return this.m.top; }
    scales(xr, yr) {
      this.xr = xr;
      this.yr = yr;
      this.sx = (v) => this.x0 + ((v - xr[0]) / (xr[1] - xr[0] || 1)) * (this.x1 - this.x0);
      this.sy = (v) => this.y0 - ((v - yr[0]) / (yr[1] - yr[0] || 1)) * (this.y0 - this.y1);
      this.ix = (px) => xr[0] + ((px - this.x0) / (this.x1 - this.x0)) * (xr[1] - xr[0]);
      this.iy = (py) => yr[0] + ((this.y0 - py) / (this.y0 - this.y1)) * (yr[1] - yr[0]);
    }
    frame(xr, yr, xlabel, ylabel, {xticks = true, yticks = true} = {}) {
      this.scales(xr, yr);
      const c = this.ctx;
      c.strokeStyle = '#e4e4e4';
      c.fillStyle = '#444';
      c.lineWidth = 1;
      c.textAlign = 'right';
      c.textBaseline = 'middle';
      const ystep = niceStep(Math.max(...yr) - Math.min(...yr), 6);
      for (const v of yticks ? ticks(Math.min(...yr), Math.max(...yr), 6) : []) {
        const y = Math.round(this.sy(v)) + 0.5;
        c.beginPath(); c.moveTo(this.x0, y); c.lineTo(this.x1, y); c.stroke();
        c.fillText(tickFmt(v, ystep), this.x0 - 4, y);
      }
      if (xticks) {
        c.textAlign = 'center';
        c.textBaseline = 'top';
        const count = Math.max(3, Math.floor((this.x1 - this.x0) / 70));
        const xstep = niceStep(xr[1] - xr[0], count);
        for (const v of ticks(xr[0], xr[1], count)) {
          const x = Math.round(this.sx(v)) + 0.5;
          c.beginPath(); c.moveTo(x, this.y1); c.lineTo(x, this.y0); c.stroke();
          c.fillText(tickFmt(v, xstep), x, this.y0 + 4);
        }
      }
      c.strokeStyle = '#888';
      c.strokeRect(this.x0 + 0.5, this.y1 + 0.5, this.x1 - this.x0, this.y0 - this.y1);
      c.textAlign = 'center';
      c.textBaseline = 'bottom';
      if (xlabel) c.fillText(xlabel, (this.x0 + this.x1) / 2, this.h - 2);
      if (ylabel) {
        c.save();
        c.translate(12, (this.y0 + this.y1) / 2);
        c.rotate(-Math.PI / 2);
        c.textBaseline = 'middle';
        c.fillText(ylabel, 0, 0);
        c.restore();
      }
    }
    clipArea() {
      this.ctx.save();
      this.ctx.beginPath();
      this.ctx.rect(this.x0, this.y1, this.x1 - this.x0, this.y0 - this.y1);
      this.ctx.clip();
    }
    points(xs, ys, fill, r = 1.6) {
      const c = this.ctx;
      c.fillStyle = fill;
      this.clipArea();
      for (let i = 0; i < xs.length; i++) {
        if (ys[i] == null) continue;
        c.fillRect(this.sx(xs[i]) - r / 2, this.sy(ys[i]) - r / 2, r, r);
      }
      c.restore();
    }
    line(xs, ys, stroke, width = 1.5, dash = []) {
      const c = this.ctx;
      this.clipArea();
      c.strokeStyle = stroke;
      c.lineWidth = width;
      c.setLineDash(dash);
      c.beginPath();
      let pen = false;
      for (let i = 0; i < xs.length; i++) {
        if (ys[i] == null) { pen = false; continue; }
        const x = this.sx(xs[i]);
        const y = this.sy(ys[i]);
        if (pen) c.lineTo(x, y); else c.moveTo(x, y);
        pen = true;
      }
      c.stroke();
      c.setLineDash([]);
      c.restore();
    }
    vline(x, stroke, label, row = 0) {
      const c = this.ctx;
      const px = Math.round(this.sx(x)) + 0.5;
      if (px < this.x0 || px > this.x1) return;
      c.strokeStyle = stroke;
      c.setLineDash([4, 3]);
      c.beginPath(); c.moveTo(px, this.y1); c.lineTo(px, this.y0); c.stroke();
      c.setLineDash([]);
      if (label) {
        c.fillStyle = stroke;
        const left = px + 3 + c.measureText(label).width > this.x1;  // would run off the frame
        c.textAlign = left ? 'right' : 'left';
        c.textBaseline = 'top';
        c.fillText(label, left ? px - 3 : px + 3, this.y1 + 2 + 13 * row);
      }
    }
    readout(format) {
      const out = this.fig.querySelector('.readout');
      this.canvas.onmousemove = (e) => {
        const box = this.canvas.getBoundingClientRect();
        const px = e.clientX - box.left;
        const py = e.clientY - box.top;
        if (px < this.x0 || px > this.x1 || py < this.y1 || py > this.y0) { out.textContent = ''; return; }
        out.textContent = format(this.ix(px), this.iy(py));
      };
    }
  }

  function legend(fig, items) {
    const box = fig.querySelector('.legend');
    box.replaceChildren();
    for (const [label, fill] of items) {
      const item = document.createElement('span');
      const swatch = document.createElement('i');
      swatch.style.background = fill;
      item.append(swatch, document.createTextNode(label));
      box.append(item);
    }
  }

  // Horizontal bars over named rows (waterfall, tail split).
  function rows(fig, labels, draw, xr, xlabel) {
    const probe = document.createElement('canvas').getContext('2d');
    probe.font = FONT;
    const widest = Math.max(...labels.map((l) => probe.measureText(l).width), 40);
    const width = Math.max(innerWidth(fig), 240);
    const left = Math.min(widest + 12, width * 0.42);
    const p = new Plot(fig, {height: 40 + 22 * labels.length, left});
    p.frame(xr, [labels.length, 0], xlabel, '', {yticks: false});
    const c = p.ctx;
    c.fillStyle = '#222';
    c.textAlign = 'right';
    c.textBaseline = 'middle';
    labels.forEach((label, i) => c.fillText(clip(label, c, left - 10), p.x0 - 6, p.sy(i + 0.5)));
    const band = (i, start, len, fill, lo, hi) => {
      const y = p.sy(i) + (p.sy(i + 1) - p.sy(i)) * lo;
      const h = (p.sy(i + 1) - p.sy(i)) * (hi - lo);
      const x = p.sx(start);
      c.fillStyle = fill;
      c.fillRect(x, y, Math.max(p.sx(start + len) - x, 1), h);
    };
    draw(band, p);
    p.readout((x) => `${fmt(x)} ms`);
    return p;
  }

  // Point labels under a categorical axis; turned when they do not fit side by side.
  function pointLabels(p, at) {
    const c = p.ctx;
    const labels = DATA.points.map((pt) => pt.label || pt.name);
    const slot = (p.x1 - p.x0) / labels.length;
    const widest = Math.max(...labels.map((l) => c.measureText(l).width));
    c.fillStyle = '#444';
    labels.forEach((label, i) => {
      if (widest <= slot - 4) {
        c.textAlign = 'center';
        c.textBaseline = 'top';
        c.fillText(label, p.sx(at(i)), p.y0 + 4);
        return;
      }
      c.save();
      c.translate(p.sx(at(i)), p.y0 + 4);
      c.rotate(-Math.PI / 4);
      c.textAlign = 'right';
      c.textBaseline = 'middle';
      c.fillText(clip(label, c, p.m.bottom * 1.3), 0, 0);
      c.restore();
    });
    c.textAlign = 'center';
    c.textBaseline = 'bottom';
    c.fillText(DATA.axis || '', (p.x0 + p.x1) / 2, p.h - 2);
  }

  const CHARTS = {
    waterfall(fig, d) {
      const labels = [...d.labels, 'end to end'];
      const n = d.labels.length;
      const end = Math.max(d.e2e_p99 || 0, ...d.p99.map((v, i) => v + d.p99_start[i]));
      rows(fig, labels, (band) => {
        d.p50.forEach((v, i) => {
          band(i, d.p99_start[i], d.p99[i], '#c6d7ea', 0.15, 0.85);
          band(i, d.p50_start[i], v, KIND[d.kinds[i]] || '#555', 0.3, 0.7);
        });
        band(n, 0, d.e2e_p99 || 0, '#c6d7ea', 0.15, 0.85);
        band(n, 0, d.e2e_p50 || 0, KIND.end_to_end, 0.3, 0.7);
      }, range([[0, end]], {zero: true}), 'ms along the path (p50 dark, p99 light)');
      legend(fig, Object.entries(KIND).filter(([k]) => d.kinds.includes(k) || k === 'end_to_end')
        .map(([k, v]) => [`${k} p50`, v]).concat([['p99', '#c6d7ea']]));
    },
    tail(fig, d) {
      const end = Math.max(...d.median, ...d.worst, 0);
      rows(fig, d.labels, (band) => {
        d.median.forEach((v, i) => band(i, 0, v, '#1f77b4', 0.12, 0.48));
        d.worst.forEach((v, i) => band(i, 0, v, '#d62728', 0.52, 0.88));
      }, range([[0, end]], {zero: true}), 'mean ms per segment');
      legend(fig, [[`median units (${d.median_units})`, '#1f77b4'],
        [`worst 1 % (${d.worst_units})`, '#d62728']]);
    },
    scatter(fig, d) {
      const p = new Plot(fig, {height: 420});
      p.frame(range(d.lines.map((l) => l.x)), range(d.lines.map((l) => l.y), {zero: true}),
        's since the run started', 'ms after the first probe');
      d.lines.forEach((l, i) => p.points(l.x, l.y, color(i)));
      legend(fig, d.lines.map((l, i) => [l.probe, color(i)]));
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} ms`);
    },
    e2e(fig, d) {
      const p = new Plot(fig);
      p.frame(range([d.x]), range([d.y]), 's since the run started', 'end to end ms');
      // a stream of a few units (a simulcast layer used briefly) gets markers one can see
      p.points(d.x, d.y, KIND.end_to_end, d.x.length < FEW_POINTS ? 6 : 2);
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} ms`);
    },
    loss(fig, d) {
      const p = new Plot(fig, {height: 180});
      const xr = range([d.x.map((v) => v - d.bin_s / 2), d.x.map((v) => v + d.bin_s / 2)], {pad: 0});
      p.frame(xr, range([d.y, [1]], {zero: true}), 's since the run started', 'units');
      p.ctx.fillStyle = '#d62728';
      d.x.forEach((x, i) => {
        if (!d.y[i]) return;
        const a = p.sx(x - d.bin_s / 2);
        p.ctx.fillRect(a, p.sy(d.y[i]), Math.max(p.sx(x + d.bin_s / 2) - a - 1, 1), p.sy(0) - p.sy(d.y[i]));
      });
      p.line([xr[0], xr[1]], [0, 0], '#d62728', 1);
      legend(fig, [[`${d.incomplete} units incomplete in all`, '#d62728']]);
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} units`);
    },
    concealment(fig, d) {
      const p = new Plot(fig, {height: 180});
      p.frame(range([d.x]), range([d.y, [1]], {zero: true}), 's since the run started', '% concealed');
      p.line(d.x, d.y, '#9467bd');
      p.points(d.x, d.y, '#9467bd', 3);
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} %`);
    },
    jitter_buffer(fig, d) {
      const p = new Plot(fig, {height: 200});
      p.frame(range([d.x]), range([d.delay, d.target], {zero: true}), 's since the run started', 'ms');
      p.line(d.x, d.target, '#ff7f0e', 1.5, [5, 3]);
      p.line(d.x, d.delay, '#1f77b4');
      legend(fig, [['jitter-buffer delay', '#1f77b4'], ['target', '#ff7f0e']]);
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} ms`);
    },
    cpu(fig, d) {
      const p = new Plot(fig, {height: 200});
      p.frame(range(d.lines.map((l) => l.x)), range(d.lines.map((l) => l.y), {zero: true}),
        's since the run started', '% of one core');
      d.lines.forEach((l, i) => p.line(l.x, l.y, color(i)));
      legend(fig, d.lines.map((l, i) => [l.process, color(i)]));
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} %`);
    },
    distribution(fig, d) {
      const p = new Plot(fig, {height: 200, right: 36});
      const xr = [d.edges[0], d.edges[d.edges.length - 1]];
      const top = Math.max(...d.counts, 1);
      const noun = d.noun || 'units';
      p.frame(xr, [0, top * 1.08], `ms (${d.count} ${noun})`, noun);
      const c = p.ctx;
      c.fillStyle = KIND[d.kind] || '#1f77b4';
      c.globalAlpha = 0.85;
      d.counts.forEach((n, i) => {
        if (!n) return;
        const a = p.sx(d.edges[i]);
        c.fillRect(a, p.sy(n), Math.max(p.sx(d.edges[i + 1]) - a - 0.5, 1), p.sy(0) - p.sy(n));
      });
      c.globalAlpha = 1;
      const cdf = d.cdf_y.map((q) => q * top * 1.08);
      p.line(d.cdf_x, cdf, '#222', 1.5);
      c.fillStyle = '#444';
      c.textAlign = 'left';
      c.textBaseline = 'middle';
      for (const q of [0, 0.5, 1]) c.fillText(fmt(q), p.x1 + 4, p.sy(q * top * 1.08));
      if (d.p50 != null) p.vline(d.p50, '#2ca02c', `p50 ${fmt(d.p50)}`);
      if (d.p99 != null) p.vline(d.p99, '#d62728', `p99 ${fmt(d.p99)}`, 1);
      legend(fig, [[`histogram (${noun})`, KIND[d.kind] || '#1f77b4'], ['CDF (right axis)', '#222']]
        .concat(d.beyond ? [[`${d.beyond} outside the bars' range (in the end bars); p99 `
          + `${fmt(d.p99)} ms, max ${fmt(d.max)} ms`, '#fff']] : []));
      p.readout((x, y) => `${fmt(x)} ms, ${fmt(y)} ${noun}`);
    },
    blackbox(fig, d) {
      const lines = [['black box', d.black_box, KIND.end_to_end], ['probed, same units', d.probed,
        KIND.jitterbuffer], ['unexplained (black box - probed)', d.unexplained, KIND.playout]];
      const p = new Plot(fig);
      p.frame(range([d.x]), range(lines.map((l) => l[1]), {zero: true}), d.x_label, 'ms');
      p.line([p.xr[0], p.xr[1]], [0, 0], '#888', 1);
      for (const [, y, stroke] of lines) {
        p.line(d.x, y, stroke, 1);
        p.points(d.x, y, stroke, 4);
      }
      legend(fig, lines.map(([label, , stroke]) => [label, stroke]));
      p.readout((x, y) => `${fmt(x)} s, ${fmt(y)} ms`);
    },
    composite(fig, d) {
      const names = DATA.points.map((pt) => pt.name);
      const p = new Plot(fig, {height: 460, bottom: 80});
      const ys = d.slices.flatMap((s) => (s ? s.y : []));
      p.frame([0, names.length], range(ys, {zero: true}), '', 'ms after the first probe',
        {xticks: false});
      pointLabels(p, (i) => i + 0.5);
      d.slices.forEach((s, i) => {
        if (i) p.line([i, i], [p.yr[0], p.yr[1]], '#bbb', 1);
        if (!s) return;
        const xs = s.y[0].map((_, k) => i + 0.05 + (0.9 * k) / Math.max(s.units - 1, 1));
        s.probes.forEach((probe, j) => p.points(xs, s.y[j], color(d.probes.indexOf(probe)), 1.6));
      });
      legend(fig, d.probes.map((probe, j) => [probe, color(j)]));
      p.readout((x, y) => `${names[Math.floor(x)] || ''}: ${fmt(y)} ms`);
    },
    sweep_metric(fig, d) {
      const names = DATA.points.map((pt) => pt.name);
      const p = new Plot(fig, {height: 260, bottom: 80});
      p.frame([-0.5, names.length - 0.5], range(d.series.map((s) => s.y), {zero: true}),
        '', d.unit, {xticks: false});
      pointLabels(p, (i) => i);
      const xs = names.map((_, i) => i);
      d.series.forEach((s, k) => {
        p.line(xs, s.y, color(k));
        p.points(xs, s.y, color(k), 6);
      });
      legend(fig, d.series.map((s, k) => [s.stream, color(k)]));
      p.readout((x, y) => `${names[Math.round(x)] || ''}: ${fmt(y)} ${d.unit}`);
    },
  };

  function drawAll() {
    const start = performance.now();
    for (const fig of document.querySelectorAll('figure[data-chart]')) {
      if (!fig.querySelector('.legend')) {
        const legendBox = document.createElement('div');
        legendBox.className = 'legend';
        const readout = document.createElement('div');
        readout.className = 'readout';
        fig.append(legendBox, readout);
      }
      const data = lookup(fig.dataset.src);
      const draw = CHARTS[fig.dataset.chart];
      if (!data || !draw) {
        console.error(`latlab report: no data or renderer for ${fig.id}`);
        continue;
      }
      draw(fig, data);
      fig.dataset.drawn = '1';
    }
    document.body.dataset.drawn = '1';
    document.body.dataset.drawMs = (performance.now() - start).toFixed(1);
  }

  let pending = 0;
  window.addEventListener('resize', () => {
    clearTimeout(pending);
    pending = setTimeout(drawAll, 150);
  });
  drawAll();
})();
