// latlab: the quality matrix's recorders (docs/sfu.md, "Quality matrix"). With quality=1
// in its URL a room page records what it plays out: the audio it hears (a publisher: its
// local track) through the AudioWorklet tap, every sample as `signal_audio` records with
// `output_ts` (as the black box's recorder, docs/signal.md), and the frame code of every
// video frame it shows (a publisher: its local preview), read with
// requestVideoFrameCallback and a small canvas over the code bar (latlab.signal.avclip),
// as `video_codes` records: [display time (page ms), code (-1: unreadable), width,
// height, presented frames]. Load after page.js.
'use strict';
const QUALITY = new URLSearchParams(location.search).get('quality') === '1';
const QUALITY_CELLS = 16;
const QUALITY_BAR = 80 / 720;  // the code bar's share of the frame's height
const QUALITY_POST_MS = 500;
let qualityAudio = null;  // the one track whose audio is recorded

async function qualityTapAudio(track, side) {
  if (!QUALITY || qualityAudio) return;
  qualityAudio = track;
  try {
    const ctx = new AudioContext({sampleRate: 48000});
    await ctx.audioWorklet.addModule('tap-worklet.js');
    const node = new AudioWorkletNode(ctx, 'tap', {processorOptions: {record: true}});
    ctx.createMediaStreamSource(new MediaStream([track])).connect(node);
    node.connect(ctx.destination);
    node.port.onmessage = (e) => { if (e.data.pcm) qualityPostAudio(ctx, e.data, side); };
    if (ctx.state !== 'running') await ctx.resume();
  } catch (x) { console.error(`quality: audio tap failed: ${x}`); }
}

function qualityPostAudio(ctx, chunk, side) {
  const ts = ctx.getOutputTimestamp();
  post({type: 'output_ts', t_ms: pageMs(), context_s: ts.contextTime,
    out_ms: performance.timeOrigin + ts.performanceTime});
  const bytes = new Uint8Array(chunk.pcm);
  let text = '';
  for (let i = 0; i < bytes.length; i += 8192) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8192));
  }
  post({type: 'signal_audio', side, frame: chunk.frame, rate: ctx.sampleRate, pcm: btoa(text)});
}

const qualityWatched = new WeakSet();
function qualityReadVideo(el, side) {
  if (!QUALITY || qualityWatched.has(el)) return;
  if (!el.requestVideoFrameCallback) { console.error('quality: no requestVideoFrameCallback'); return; }
  qualityWatched.add(el);
  const width = QUALITY_CELLS * 4;
  const canvas = document.createElement('canvas');
  canvas.width = width; canvas.height = 4;
  const g = canvas.getContext('2d', {willReadFrequently: true});
  let batch = [];
  const onFrame = (now, meta) => {
    try {
      const w = el.videoWidth, h = el.videoHeight;
      if (w && h) {
        g.drawImage(el, 0, 0, w, Math.max(1, Math.round(h * QUALITY_BAR)), 0, 0, width, 4);
        const px = g.getImageData(0, 0, width, 4).data;
        let word = 0;
        for (let k = 0; k < QUALITY_CELLS; k++) {
          const i = (2 * width + k * 4 + 2) * 4;  // row 2, the middle of cell k
          const y = 0.299 * px[i] + 0.587 * px[i + 1] + 0.114 * px[i + 2];
          word = word * 2 + (y > 128 ? 1 : 0);
        }
        const n = word >> 4, check = word & 15;
        const ok = ((n ^ (n >> 4) ^ (n >> 8) ^ 5) & 15) === check;
        batch.push([performance.timeOrigin + meta.expectedDisplayTime, ok ? n : -1,
          meta.width, meta.height, meta.presentedFrames]);
      }
    } catch (x) { console.error(`quality: frame code: ${x}`); }
    el.requestVideoFrameCallback(onFrame);
  };
  el.requestVideoFrameCallback(onFrame);
  setInterval(() => {
    if (batch.length) { post({type: 'video_codes', side, frames: batch}); batch = []; }
  }, QUALITY_POST_MS);
}
