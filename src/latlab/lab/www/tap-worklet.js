// latlab: AudioWorklet tap on the remote track. Every ~200 ms it reports the 128-sample
// blocks processed since the last report, how many were audible, and their RMS level.
// As the black box's recorder (processorOptions.record), it also sends every sample it
// is given, as 16-bit chunks with the context frame of their first sample; a block
// without input is recorded as silence, so chunk positions follow the context's frames.
'use strict';
const AUDIBLE_ENERGY = 1e-4;  // sum of squares over one block
const CHUNK_FRAMES = 9600;  // 200 ms at 48 kHz

class Tap extends AudioWorkletProcessor {
  constructor(options) {
    super();
    this.record = Boolean(options && options.processorOptions && options.processorOptions.record);
    this.chunk = this.record ? new Int16Array(CHUNK_FRAMES) : null;
    this.filled = 0;
    this.chunkFrame = 0;
    this.blocks = 0;
    this.audible = 0;
    this.energy = 0;
    this.samples = 0;
    this.last = currentTime;
  }

  recordBlock(ch) {
    const n = ch ? ch.length : 128;
    for (let i = 0; i < n; i++) {
      if (this.filled === 0) this.chunkFrame = currentFrame + i;
      const v = ch ? Math.max(-1, Math.min(1, ch[i])) : 0;
      this.chunk[this.filled++] = Math.round(v * 32767);
      if (this.filled === CHUNK_FRAMES) {
        this.port.postMessage({pcm: this.chunk.buffer, frame: this.chunkFrame},
          [this.chunk.buffer]);
        this.chunk = new Int16Array(CHUNK_FRAMES);
        this.filled = 0;
      }
    }
  }

  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (this.record) this.recordBlock(ch);
    this.blocks++;
    if (ch) {
      let e = 0;
      for (let i = 0; i < ch.length; i++) e += ch[i] * ch[i];
      if (e > AUDIBLE_ENERGY) this.audible++;
      this.energy += e;
      this.samples += ch.length;
    }
    if (currentTime - this.last >= 0.2) {
      this.port.postMessage({
        blocks: this.blocks,
        audible_blocks: this.audible,
        rms: this.samples ? Math.sqrt(this.energy / this.samples) : 0,
        context_time_s: currentTime,
      });
      this.last = currentTime;
      this.blocks = this.audible = this.energy = this.samples = 0;
    }
    return true;
  }
}
registerProcessor('tap', Tap);
