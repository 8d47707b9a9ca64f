// mmst live translation page: microphone or file -> 16 kHz float32 frames over WebSocket -> captions.
// No external resource: everything comes from this server (see the Content-Security-Policy header).
"use strict";

const state = { langs: [], charLangs: [], ws: null, ctx: null, node: null, source: null, stream: null, timer: null,
                words: {}, summary: null, closeCode: null, closeReason: "", running: false };
window.mmstState = state;  // read by the browser test
const $ = (id) => document.getElementById(id);
const token = new URLSearchParams(location.search).get("token");

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
  if (state.charLangs.includes(ev.lang) && last && last.dataset.start === String(ev.start_ms) &&
      last.dataset.segment === String(ev.segment)) {
    last.querySelector(".t").textContent += ev.text;  // characters of one write share one lag
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
  cap.parentElement.scrollTop = cap.parentElement.scrollHeight;
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
  if (token) url.searchParams.set("token", token);
  const ws = new WebSocket(url);
  ws.binaryType = "arraybuffer";
  state.ws = ws;
  state.summary = null;
  state.closeCode = null;
  ws.onopen = () => ws.send(JSON.stringify({ type: "start", langs: state.langs, sample_rate: 16000,
                                             sample_format: "float32" }));
  ws.onmessage = (e) => {
    const ev = JSON.parse(e.data);
    if (ev.type === "ready") onReady();
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
  const ctx = new AudioContext();
  await ctx.audioWorklet.addModule("capture-worklet.js");
  const source = ctx.createMediaStreamSource(stream);
  const node = new AudioWorkletNode(ctx, "capture-16k", { numberOfInputs: 1, numberOfOutputs: 0,
                                                          channelCount: 1, channelCountMode: "explicit" });
  Object.assign(state, { ctx, node, source, stream });
  connect(() => {
    state.running = true;
    node.port.onmessage = (e) => sendFrame(e.data);
    source.connect(node);
    setStatus(`live (microphone at ${ctx.sampleRate} Hz → 16 kHz)`, true);
  });
  setButtons(true);
}

async function startFile(file) {
  buildColumns(state.langs);
  state.words = {};
  setStatus(`decoding ${file.name}…`, false);
  const buf = await file.arrayBuffer();
  const tmp = new AudioContext();
  const decoded = await tmp.decodeAudioData(buf);
  tmp.close();
  const off = new OfflineAudioContext(1, Math.ceil(decoded.duration * 16000), 16000);  // resamples, downmixes
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
      const due = Math.min(pcm.length, Math.floor((performance.now() - t0) * 16));
      if (due > pos) { sendFrame(pcm.slice(pos, due)); pos = due; }
      if (pos >= pcm.length) stop();
    }, 100);
  });
  setButtons(true);
}

function stopCapture() {
  if (state.timer) { clearInterval(state.timer); state.timer = null; }
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
    const cfg = await (await fetch("config.json")).json();
    state.langs = cfg.langs;
    state.charLangs = cfg.char_langs || [];
    buildColumns(state.langs);
    setStatus("ready", false);
    if (cfg.token_required && !token) setStatus("this server needs ?token=… in the page address", false);
  } catch (e) {
    setStatus("cannot reach the server", false);
  }
  $("mic").onclick = () => startMic().catch((e) => { setStatus(`microphone: ${e.message}`, false); stopCapture(); });
  $("stop").onclick = stop;
  $("file").onchange = (e) => { if (e.target.files[0]) startFile(e.target.files[0]).catch((err) => setStatus(err.message, false)); };
}

init();
