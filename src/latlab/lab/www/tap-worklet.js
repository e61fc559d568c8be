// latlab: AudioWorklet tap on the remote track. Every ~200 ms it reports the 128-sample
// blocks processed since the last report, how many were audible, and their RMS level.
'use strict';
const AUDIBLE_ENERGY = 1e-4;  // sum of squares over one block

class Tap extends AudioWorkletProcessor {
  constructor() {
    super();
    this.blocks = 0;
    this.audible = 0;
    this.energy = 0;
    this.samples = 0;
    this.last = currentTime;
  }

  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
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
