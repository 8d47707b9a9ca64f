// AudioWorklet: mono capture at the AudioContext's own rate (the global `sampleRate`, often 44.1 or
// 48 kHz), posted in blocks of 100 ms. The page declares that rate in its start message and the server
// resamples to 16 kHz with soxr (a proper low-pass), so nothing is resampled here.
class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.out = new Float32Array(Math.round(sampleRate / 10));
    this.n = 0;
    this.port.onmessage = (e) => { if (e.data === "flush") this.flush(); };
  }
  flush() {
    if (this.n > 0) { this.port.postMessage(this.out.slice(0, this.n)); this.n = 0; }
  }
  process(inputs) {
    const input = inputs[0];
    if (!input || input.length === 0) return true;
    const ch = input[0];
    for (let i = 0; i < ch.length; i++) {
      this.out[this.n++] = ch[i];
      if (this.n === this.out.length) { this.port.postMessage(this.out.slice()); this.n = 0; }
    }
    return true;
  }
}
registerProcessor("capture", CaptureProcessor);
