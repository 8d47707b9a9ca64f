// mmst live translation page: microphone or file -> float32 frames at the capture's own rate over
// WebSocket (the server resamples to 16 kHz with soxr) -> captions. Reconnects with backoff when the
// connection drops. No external resource: everything comes from this server (Content-Security-Policy).
"use strict";

const state = { langs: [], charLangs: [], sampleRates: [], ws: null, ctx: null, node: null, source: null,
                stream: null, timer: null, words: {}, summary: null, closeCode: null, closeReason: "",
                running: false, rate: 16000, retries: 0, retryTimer: null, onReady: null };
// close codes after which reconnecting cannot help (the client's own error, or a normal end)
const FINAL_CODES = [1000, 1009, 4400, 4401, 4415, 4429];
window.mmstState = state;  // read by the browser test
const $ = (id) => document.getElementById(id);
// the token: from the page address's fragment (#token=..., never sent to a server or a proxy's log), or
// its query (?token=..., older links); sent as the Authorization header and the WebSocket subprotocol
const token = new URLSearchParams(location.hash.slice(1)).get("token")
  || new URLSearchParams(location.search).get("token");

function tokenSubprotocol(t) {
  // "mmst.bearer." + base64url(UTF-8 bytes), no padding: a valid subprotocol name for any token
  const bytes = new TextEncoder().encode(t);
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return "mmst.bearer." + btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function setStatus(text, live) {
  $("status").textContent = text;
  $("status").className = "status" + (live ? " live" : "");
}

function buildColumns(langs) {
  const main = $("columns");
  main.textContent = "";
  for (const lang of langs) {
    const col = document.createElement("section");
    col.className = "col";
    col.dataset.lang = lang;
    if (state.charLangs.includes(lang)) col.classList.add("chars");
    const h = document.createElement("h2");
    h.textContent = lang;
    const cap = document.createElement("div");
    cap.className = "captions";
    col.append(h, cap);
    main.append(col);
  }
}

function addWord(ev) {
  const cap = document.querySelector(`.col[data-lang="${ev.lang}"] .captions`);
  if (!cap) return;
  (state.words[ev.lang] = state.words[ev.lang] || []).push(ev);
  const lag = Math.max(0, ev.emit_ms - ev.start_ms);
  const last = cap.lastElementChild;
  const chars = state.charLangs.includes(ev.lang);
  if (chars && last && last.dataset.start === String(ev.start_ms) && last.dataset.segment === String(ev.segment)) {
    last.querySelector(".t").textContent += ev.text;  // characters of one write: one group, one lag
    return;
  }
  const w = document.createElement("span");
  w.className = "w";
  w.title = `written after ${(ev.start_ms / 1000).toFixed(2)} s of audio; shown ${(lag / 1000).toFixed(2)} s later`;
  const t = document.createElement("span");
  t.className = "t";
  t.textContent = ev.text;
  const l = document.createElement("span");
  l.className = "lag";
  l.textContent = (lag / 1000).toFixed(2);
  w.dataset.start = String(ev.start_ms);
  w.dataset.segment = String(ev.segment);
  w.append(t, l);
  cap.append(w);
  if (chars) hideOverlappingLag(w);
  cap.parentElement.scrollTop = cap.parentElement.scrollHeight;
}

// In ja/zh columns groups sit side by side without gaps, so a lag label (wider than one character)
// would run into the next; a group whose label would overlap the previous visible one shows none
// (its lag stays in the tooltip).
function hideOverlappingLag(w) {
  let prev = w.previousElementSibling;
  while (prev && !(prev.classList.contains("w") && !prev.classList.contains("nolag"))) {
    if (prev.classList.contains("seg-end")) return;
    prev = prev.previousElementSibling;
  }
  if (!prev) return;
  const a = prev.querySelector(".lag").getBoundingClientRect();
  const b = w.querySelector(".lag").getBoundingClientRect();
  if (Math.abs(a.top - b.top) < 1 && b.left < a.right + 2) w.classList.add("nolag");
}

function segmentEnd() {
  for (const cap of document.querySelectorAll(".captions")) {
    const br = document.createElement("span");
    br.className = "seg-end";
    cap.append(br);
  }
}

function connect(onReady) {
  const url = new URL("ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = token ? new WebSocket(url, ["mmst", tokenSubprotocol(token)]) : new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.onReady = onReady;
  state.summary = null;
  state.closeCode = null;
  ws.onopen = () => ws.send(JSON.stringify({ type: "start", langs: state.langs, sample_rate: state.rate,
                                             sample_format: "float32" }));
  ws.onmessage = (e) => {
    const ev = JSON.parse(e.data);
    if (ev.type === "ready") { state.retries = 0; onReady(); }
    else if (ev.type === "word") addWord(ev);
    else if (ev.type === "segment_end") segmentEnd();
    else if (ev.type === "summary") {
      state.summary = ev;
      const p95 = ev.added_latency_ms.p95;
      $("meta").textContent = `last stream: ${(ev.audio_ms / 1000).toFixed(1)} s audio, RTF ${ev.rtf}, ` +
        `server p95 added latency ${p95 === null ? "-" : p95 + " ms"}`;
    }
  };
  ws.onclose = (e) => {
    state.closeCode = e.code;
    state.closeReason = e.reason;
    if (state.running && state.stream && !FINAL_CODES.includes(e.code)) {  // live microphone: reconnect
      const delay = Math.min(30, 2 ** state.retries) * 1000;
      state.retries += 1;
      setStatus(`connection lost (${e.code}); reconnecting in ${delay / 1000} s…`, false);
      state.retryTimer = setTimeout(() => { state.retryTimer = null; if (state.running) connect(state.onReady); }, delay);
      return;
    }
    state.running = false;
    stopCapture();
    setStatus(e.code === 1000 ? "finished" : `closed (${e.code}${e.reason ? ": " + e.reason : ""})`, false);
  };
  ws.onerror = () => setStatus("connection error", false);
}

function sendFrame(samples) {
  const ws = state.ws;
  if (ws && ws.readyState === WebSocket.OPEN && state.running) ws.send(samples.buffer);
}

async function startMic() {
  buildColumns(state.langs);
  state.words = {};
  setStatus("asking for the microphone…", false);
  const stream = await navigator.mediaDevices.getUserMedia({ audio: { channelCount: 1, echoCancellation: false,
                                                                      noiseSuppression: false, autoGainControl: false } });
  let ctx = new AudioContext();
  if (!state.sampleRates.includes(ctx.sampleRate)) {  // a rate the server does not take: ask for 48 kHz
    ctx.close();
    ctx = new AudioContext({ sampleRate: 48000 });
  }
  await ctx.audioWorklet.addModule("capture-worklet.js");
  const source = ctx.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(ctx, "capture", { numberOfInputs: 1, numberOfOutputs: 0,
                                                      channelCount: 1, channelCountMode: "explicit" });
  Object.assign(state, { ctx, node, source, stream, rate: ctx.sampleRate, retries: 0 });
  node.port.onmessage = (e) => sendFrame(e.data);
  connect(() => {
    if (!state.running) source.connect(node);
    state.running = true;
    setStatus(`live (microphone at ${ctx.sampleRate} Hz; the server resamples to 16 kHz)`, true);
  });
  setButtons(true);
}

async function startFile(file) {
  buildColumns(state.langs);
  state.words = {};
  setStatus(`decoding ${file.name}…`, false);
  const buf = await file.arrayBuffer();
  const tmp = new AudioContext();
  const decoded = await tmp.decodeAudioData(buf);  // at the context's rate
  tmp.close();
  const rate = state.sampleRates.includes(decoded.sampleRate) ? decoded.sampleRate : 48000;
  state.rate = rate;
  const off = new OfflineAudioContext(1, Math.ceil(decoded.duration * rate), rate);  // downmixes to mono
  const src = off.createBufferSource();
  src.buffer = decoded;
  src.connect(off.destination);
  src.start();
  const pcm = (await off.startRendering()).getChannelData(0);
  let pos = 0;
  connect(() => {
    state.running = true;
    setStatus(`live (${file.name}, real-time speed)`, true);
    const t0 = performance.now();
    state.timer = setInterval(() => {  // real time: send what the clock says has been "spoken"
      const due = Math.min(pcm.length, Math.floor((performance.now() - t0) * rate / 1000));
      if (due > pos) { sendFrame(pcm.slice(pos, due)); pos = due; }
      if (pos >= pcm.length) stop();
    }, 100);
  });
  setButtons(true);
}

function stopCapture() {
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
  if (state.retryTimer) { clearTimeout(state.retryTimer); state.retryTimer = null; }
  if (state.source) { state.source.disconnect(); state.source = null; }
  if (state.stream) { state.stream.getTracks().forEach((t) => t.stop()); state.stream = null; }
  if (state.ctx) { state.ctx.close(); state.ctx = null; }
  state.node = null;
  setButtons(false);
}

function stop() {
  if (!state.running) return;
  if (state.node) state.node.port.postMessage("flush");
  // let a flushed block arrive, then end the stream; the server answers with a summary and closes
  setTimeout(() => {
    state.running = false;
    const ws = state.ws;
    stopCapture();
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "end" }));
    setStatus("finishing…", false);
  }, 150);
}

function setButtons(live) {
  $("mic").disabled = live;
  $("file").disabled = live;
  $("stop").disabled = !live;
}

async function init() {
  try {
    const resp = await fetch("config.json", token ? { headers: { Authorization: `Bearer ${token}` } } : {});
    if (resp.status === 401) {
      setStatus("this server needs #token=… at the end of the page address", false);
      return;
    }
    const cfg = await resp.json();
    state.langs = cfg.langs;
    state.charLangs = cfg.char_langs || [];
    state.sampleRates = cfg.sample_rates || [16000];
    buildColumns(state.langs);
    setStatus("ready", false);
  } catch (e) {
    setStatus("cannot reach the server", false);
  }
  $("mic").onclick = () => startMic().catch((e) => { setStatus(`microphone: ${e.message}`, false); stopCapture(); });
  $("stop").onclick = stop;
  $("file").onchange = (e) => { if (e.target.files[0]) startFile(e.target.files[0]).catch((err) => setStatus(err.message, false)); };
}

init();
