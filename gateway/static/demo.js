// voxgate demo page: one WebRTC call to the gateway (audio track + a data channel
// speaking the native protocol, docs/protocol.md). Plain JS, no build step.
"use strict";

const $ = (id) => document.getElementById(id);
// A session token from POST /v1/tokens (never an API key: the page's URL ends up in history and logs).
// It opens one call; reading the voices and the WebRTC config does not spend it. Taken out of the address bar.
const token = new URLSearchParams(location.search).get("token");
const authHeaders = token ? { Authorization: `Bearer ${token}` } : {};
if (token) {
  const url = new URL(location.href);
  url.searchParams.delete("token");
  history.replaceState(null, "", url);
}

// State the page shows; also read by the browser test.
const vg = (window.voxgate = {
  state: "disconnected",
  sessionId: null,
  events: [],
  level: 0, // RMS of the received audio, 0..1
  maxLevel: 0,
  turns: new Map(),
  gaps: { micro: 0, audible: 0 },
  speaking: false, // the gateway hears the caller (user.speech)
  speech: [], // user.speech events
  bargeIns: 0, // turns the caller's voice interrupted
  mic: null, // "on" | "muted" | "denied" | null (not used)
});

let pc = null;
let dc = null;
let audioCtx = null;
let analyser = null;
let speakCount = 0;
let pendingSendAt = null; // the agent picks the turn id: time the next turn from the last send
let micStream = null;

async function api(path, init = {}) {
  const resp = await fetch(path, { ...init, headers: { ...authHeaders, ...(init.headers || {}) } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.message || `${path}: HTTP ${resp.status}`);
  return body;
}

async function loadVoices() {
  try {
    const info = await api("/v1/voices");
    const sel = $("voice");
    sel.innerHTML = "";
    for (const v of info.voices) {
      const opt = new Option(v.language && v.language !== "auto" ? `${v.name} (${v.language})` : v.name, v.name);
      opt.selected = v.name === info.default;
      sel.add(opt);
    }
    const langSel = $("language");
    if (info.languages && info.languages.length) {
      langSel.innerHTML = "";
      for (const lang of ["auto", ...info.languages.filter((l) => l !== "auto")]) langSel.add(new Option(lang, lang));
    }
    const rtc = await api("/v1/webrtc/config");
    $("agent-kind").textContent = rtc.agent && rtc.agent !== "none"
      ? `agent: ${rtc.agent} · voice engine: ${rtc.engine}`
      : `no agent configured: use “Speak this text” · voice engine: ${rtc.engine}`;
    if (!rtc.agent || rtc.agent === "none") document.querySelector('input[value="speak"]').checked = true;
    // Without speech to text the caller's voice can interrupt but never reaches the agent: say so up front.
    $("stt-note").textContent = rtc.stt && rtc.stt !== "off"
      ? "Speech to text is on: what you say reaches the agent as if you had typed it."
      : "Speech to text is off: your voice can interrupt the agent, but what you say does not reach it. " +
        "Type instead, or set the config's stt section (an OpenAI-compatible transcription server).";
    vg.iceServers = rtc.ice_servers || [];
    vg.engine = rtc.engine;
  } catch (err) {
    logEvent({ type: "page.error", message: String(err) });
  }
}

function setState(state, detail) {
  vg.state = state;
  const pill = $("state");
  pill.textContent = detail ? `${state}: ${detail}` : state;
  pill.className = "pill " + (state === "connected" ? "connected" : state === "failed" ? "failed" : "");
  const live = state === "connected";
  for (const id of ["message", "send", "interrupt", "hangup"]) $(id).disabled = !live;
  $("use-mic").disabled = state === "connecting" || live;
  $("barge-in").disabled = state === "connecting" || live;
  $("mic").disabled = !live || !micStream;
  if (!live) setSpeaking(false);
  $("connect").disabled = state === "connecting" || live;
}

function waitForIce(peer, timeoutMs) {
  if (peer.iceGatheringState === "complete") return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => { peer.removeEventListener("icegatheringstatechange", check); resolve(); };
    const check = () => { if (peer.iceGatheringState === "complete") done(); };
    peer.addEventListener("icegatheringstatechange", check);
    setTimeout(done, timeoutMs); // go with what was gathered
  });
}

async function connect() {
  setState("connecting");
  audioCtx = audioCtx || new AudioContext();
  await audioCtx.resume().catch(() => {});
  pc = new RTCPeerConnection({ iceServers: (vg.iceServers || []).map((s) => (typeof s === "string" ? { urls: s } : s)) });
  micStream = null;
  if ($("use-mic").checked) {
    try {
      // Echo cancellation keeps the agent's own voice, played by the speakers, out of what the gateway hears.
      micStream = await navigator.mediaDevices.getUserMedia({
        audio: { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 },
      });
      vg.mic = "on";
    } catch (err) {
      vg.mic = "denied";
      logEvent({ type: "page.error", message: `microphone: ${err.message || err}` });
    }
  }
  if (micStream) {
    for (const track of micStream.getAudioTracks()) pc.addTrack(track, micStream); // sendrecv: our voice up, the agent's down
  } else {
    pc.addTransceiver("audio", { direction: "recvonly" });
  }
  showMic();
  dc = pc.createDataChannel("voxgate");
  dc.onopen = () => dc.send(JSON.stringify({
    type: "session.start", voice: $("voice").value || undefined, language: $("language").value,
    barge_in: micStream ? { mode: $("barge-in").checked ? "vad" : "detect" } : undefined,
    word_timings: true, // audio.words: the agent's words light up as they are heard
  }));
  dc.onmessage = (e) => onEvent(JSON.parse(e.data));
  dc.onclose = () => { if (vg.state === "connected") setState("disconnected"); };
  pc.ontrack = (e) => attachAudio(e.streams[0] || new MediaStream([e.track]));
  pc.onconnectionstatechange = () => {
    if (pc && (pc.connectionState === "failed" || pc.connectionState === "closed")) setState("failed", pc.connectionState);
  };
  try {
    await pc.setLocalDescription(await pc.createOffer());
    await waitForIce(pc, 3000);
    const answer = await api("/v1/webrtc/offer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ sdp: pc.localDescription.sdp, type: pc.localDescription.type }),
    });
    vg.sessionId = answer.session_id;
    $("session-id").textContent = answer.session_id;
    const codec = /a=rtpmap:\d+ ([^\r\n/]+\/\d+)/.exec(answer.sdp);
    $("codec").textContent = codec ? codec[1] : "";
    await pc.setRemoteDescription(answer);
  } catch (err) {
    setState("failed", String(err.message || err));
    logEvent({ type: "page.error", message: String(err) });
  }
}

function setSpeaking(on) {
  vg.speaking = on;
  $("speaking").className = "pill speaking" + (on ? " on" : "");
  $("speaking").textContent = on ? "you are speaking" : "not speaking";
}

function showMic() {
  const btn = $("mic");
  const live = micStream && micStream.getAudioTracks().some((t) => t.enabled);
  btn.textContent = micStream ? (live ? "Mute mic" : "Unmute mic") : "Mic off";
  btn.className = live ? "mic on" : "mic";
}

function toggleMic() {
  if (!micStream) return;
  for (const t of micStream.getAudioTracks()) t.enabled = !t.enabled;
  vg.mic = micStream.getAudioTracks().some((t) => t.enabled) ? "on" : "muted";
  showMic();
}

function hangup() {
  if (dc && dc.readyState === "open") dc.send(JSON.stringify({ type: "session.end" }));
  setTimeout(() => {
    if (pc) pc.close();
    if (micStream) for (const t of micStream.getTracks()) t.stop();
    pc = null; dc = null; micStream = null; showMic(); setState("disconnected");
  }, 100);
}

function attachAudio(stream) {
  // Chrome renders a remote WebRTC stream through WebAudio only while a media element plays it too.
  $("remote").srcObject = stream;
  $("remote").play().catch(() => {});
  const source = audioCtx.createMediaStreamSource(stream);
  analyser = audioCtx.createAnalyser();
  analyser.fftSize = 1024;
  source.connect(analyser);
}

const samples = new Float32Array(1024);
function drawLevel() {
  let rms = 0;
  if (analyser) {
    analyser.getFloatTimeDomainData(samples);
    let sum = 0;
    for (let i = 0; i < samples.length; i++) sum += samples[i] * samples[i];
    rms = Math.sqrt(sum / samples.length);
  }
  // The receiver's own level (RFC 6464 style) works even when WebAudio is suspended.
  const rx = pc && pc.getReceivers().find((r) => r.track && r.track.kind === "audio");
  const src = rx && rx.getSynchronizationSources ? rx.getSynchronizationSources()[0] : null;
  if (src && typeof src.audioLevel === "number" && performance.timeOrigin + performance.now() - src.timestamp < 500) {
    rms = Math.max(rms, src.audioLevel);
  }
  vg.level = rms;
  vg.maxLevel = Math.max(vg.maxLevel, rms);
  const db = rms > 0 ? 20 * Math.log10(rms) : -Infinity;
  $("level-bar").style.width = `${Math.max(0, Math.min(100, ((db + 60) / 60) * 100))}%`;
  $("level-db").textContent = Number.isFinite(db) ? `${db.toFixed(0)} dB` : "–∞ dB";
  const canvas = $("wave");
  const g = canvas.getContext("2d");
  g.fillStyle = "#0f172a";
  g.fillRect(0, 0, canvas.width, canvas.height);
  g.strokeStyle = "#38bdf8";
  g.beginPath();
  for (let i = 0; i < samples.length; i += 2) {
    const x = (i / samples.length) * canvas.width;
    const y = canvas.height / 2 - (analyser ? samples[i] : 0) * canvas.height * 0.9;
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  }
  g.stroke();
  requestAnimationFrame(drawLevel);
}

function logEvent(ev) {
  vg.events.push({ ...ev, at: performance.now() });
  const pre = $("events");
  pre.textContent += JSON.stringify(ev) + "\n";
  if (pre.textContent.length > 20000) pre.textContent = pre.textContent.slice(-15000);
  pre.scrollTop = pre.scrollHeight;
}

function turnRow(turnId) {
  let t = vg.turns.get(turnId);
  if (!t) {
    const tr = document.createElement("tr");
    tr.innerHTML = "<td></td><td></td><td></td><td></td><td></td><td></td>";
    tr.cells[0].textContent = turnId;
    $("turns").tBodies[0].prepend(tr);
    t = { tr, sentAt: null, text: "" };
    vg.turns.set(turnId, t);
  }
  return t;
}

function say(who, text, cls) {
  const div = document.createElement("div");
  div.className = `msg ${cls}`;
  const w = document.createElement("span");
  w.className = "who";
  w.textContent = who;
  const body = document.createElement("span");
  body.className = "body";
  body.textContent = text;
  div.append(w, body);
  $("transcript").append(div);
  $("transcript").scrollTop = $("transcript").scrollHeight;
  return body;
}

// The agent's text as word spans (from audio.words), each lit once its end has played, then the text still unspoken.
function renderWords(t) {
  if (!t.body) return;
  if (!t.words || !t.words.length) {
    t.body.textContent = t.text;
    return;
  }
  const parts = [];
  let at = 0;
  for (const w of t.words) {
    const found = t.text.indexOf(w.text, at);
    if (found < 0) break; // a word the page has not seen the text of yet
    if (found > at) parts.push(document.createTextNode(t.text.slice(at, found)));
    if (!w.el) {
      w.el = document.createElement("span");
      w.el.className = "word";
      w.el.textContent = w.text;
    }
    parts.push(w.el);
    at = found + w.text.length;
  }
  parts.push(document.createTextNode(t.text.slice(at)));
  t.body.replaceChildren(...parts);
}

function strikeUnheard(t, playedText) {
  let heard = playedText.split(/\s+/).filter(Boolean).length;
  for (const w of t.words) {
    heard -= w.text.split(/\s+/).filter(Boolean).length;
    if (w.el) w.el.classList.add(heard >= 0 ? "spoken" : "unheard");
  }
}

function lightWords() {
  const now = performance.now();
  for (const t of vg.turns.values()) {
    if (!t.words || t.done || t.audioAt == null) continue;
    for (const w of t.words) if (w.el && now - t.audioAt >= w.end_ms) w.el.classList.add("spoken");
  }
}
setInterval(lightWords, 50);

function onEvent(ev) {
  if (ev.type !== "playout.stats") logEvent(ev);
  switch (ev.type) {
    case "session.started":
      setState("connected");
      break;
    case "playout.stats":
      $("buffer-ms").textContent = `${Math.round(ev.buffered_ms)} ms`;
      $("buffer-bar").style.width = `${Math.min(100, ev.buffered_ms / 50)}%`; // full bar = 5 s
      vg.bufferedMs = ev.buffered_ms;
      break;
    case "agent.text": {
      const t = turnRow(ev.turn_id);
      if (!t.body) t.body = say("agent", "", "agent");
      t.text += ev.text;
      renderWords(t);
      if (t.sentAt == null && pendingSendAt != null) { t.sentAt = pendingSendAt; pendingSendAt = null; }
      break;
    }
    case "audio.start": {
      const t = turnRow(ev.turn_id);
      if (t.sentAt == null && pendingSendAt != null) { t.sentAt = pendingSendAt; pendingSendAt = null; }
      t.tr.cells[1].textContent = `${ev.ttfa_ms.toFixed(0)} ms`;
      if (t.sentAt != null) t.tr.cells[2].textContent = `${(performance.now() - t.sentAt).toFixed(0)} ms`;
      $("last-ttfa").textContent = `${ev.ttfa_ms.toFixed(0)} ms (${ev.turn_id})`;
      t.audioAt = performance.now(); // audio.words count from the turn's first sample: about now at the speaker
      break;
    }
    case "audio.words": {
      const t = turnRow(ev.turn_id);
      if (!t.body) t.body = say("agent", "", "agent");
      t.words = (t.words || []).concat(ev.words);
      renderWords(t);
      break;
    }
    case "underrun":
      vg.gaps[ev.kind] = (vg.gaps[ev.kind] || 0) + 1;
      $("gaps-micro").textContent = vg.gaps.micro;
      $("gaps-audible").textContent = vg.gaps.audible;
      break;
    case "turn.done": {
      const t = turnRow(ev.turn_id);
      t.tr.cells[3].textContent = `${(ev.played_ms / 1000).toFixed(2)} s`;
      t.tr.cells[4].textContent = `${ev.gaps.micro}/${ev.gaps.audible}`;
      t.tr.cells[5].textContent = ev.interrupted ? (ev.interrupted_by === "caller" ? "your voice" : "interrupted") : "done";
      if (ev.interrupted_by === "caller") vg.bargeIns += 1;
      t.done = true;
      if (t.words && t.words.length && typeof ev.played_text === "string") {
        strikeUnheard(t, ev.played_text); // the words after the last one heard are struck through
      } else if (ev.interrupted && t.body && typeof ev.played_text === "string") {
        const heard = document.createElement("span");
        heard.className = "heard";
        heard.textContent = ev.played_text;
        const rest = document.createElement("span");
        rest.className = "unheard";
        rest.textContent = t.text.slice(ev.played_text.length);
        t.body.replaceChildren(heard, rest);
      }
      break;
    }
    case "user.speech":
      vg.speech.push(ev);
      setSpeaking(ev.state === "started");
      break;
    case "user.text": // what the gateway's speech-to-text heard
      say("you (heard)", ev.text, "user");
      break;
    case "error":
      say("error", `${ev.code}: ${ev.message}`, "error");
      break;
    case "session.ended":
      setState("disconnected");
      break;
  }
}

function send(text, mode) {
  if (!dc || dc.readyState !== "open" || !text.trim()) return;
  if (mode === "agent") {
    say("you", text, "user");
    pendingSendAt = performance.now();
    dc.send(JSON.stringify({ type: "user.text", text }));
  } else {
    const turnId = `speak-${++speakCount}`;
    const t = turnRow(turnId);
    t.sentAt = performance.now();
    t.text = text;
    t.body = say("speak", text, "agent");
    dc.send(JSON.stringify({ type: "text", turn_id: turnId, text, final: true }));
  }
}
vg.send = send;

$("connect").onclick = connect;
$("hangup").onclick = hangup;
$("mic").onclick = toggleMic;
$("interrupt").onclick = () => dc && dc.readyState === "open" && dc.send(JSON.stringify({ type: "interrupt" }));
$("composer").onsubmit = (e) => {
  e.preventDefault();
  send($("message").value, document.querySelector('input[name="mode"]:checked').value);
  $("message").value = "";
};
setState("disconnected");
loadVoices();
requestAnimationFrame(drawLevel);
