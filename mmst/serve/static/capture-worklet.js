// AudioWorklet: mono capture, resampled to 16 kHz (linear interpolation) in blocks of 100 ms.
// Runs at the AudioContext's rate (often 44.1 or 48 kHz; the global `sampleRate`).
class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.step = sampleRate / 16000;  // input samples per output sample
    this.pos = 0;                    // position of the next output sample, in input samples (relative to prev)
    this.prev = 0;                   // last input sample of the previous block
    this.out = new Float32Array(1600);
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
    const len = ch.length;
    // sample i of this block is at position i + 1 relative to prev (prev is at 0)
    while (this.pos <= len) {
      const i = Math.floor(this.pos);
      const f = this.pos - i;
      const a = i === 0 ? this.prev : ch[i - 1];
      const b = i < len ? ch[i] : a;
      this.out[this.n++] = a + (b - a) * f;
      if (this.n === this.out.length) { this.port.postMessage(this.out.slice()); this.n = 0; }
      this.pos += this.step;
    }
    this.pos -= len;
    this.prev = ch[len - 1];
    return true;
  }
}
registerProcessor("capture-16k", CaptureProcessor);
