// The piwf console's only script: deadlines counting down, and live pages over Server-Sent Events.
// No framework, no build step. Every page works without it (the data is in the HTML).
"use strict";

function left(seconds) {
  if (seconds <= 0) return "due";
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600),
        m = Math.floor(s % 3600 / 60), r = s % 60;
  if (d) return `in ${d}d${String(h).padStart(2, "0")}h`;
  if (h) return `in ${h}h${String(m).padStart(2, "0")}m`;
  if (m) return `in ${m}m${String(r).padStart(2, "0")}s`;
  return `in ${r}s`;
}

function tick() {
  const now = Date.now() / 1000;
  for (const el of document.querySelectorAll("[data-deadline]")) {
    const at = parseFloat(el.dataset.deadline);
    if (!el.dataset.stamp) el.dataset.stamp = el.textContent.split(" (")[0];
    el.textContent = `${el.dataset.stamp} (${left(at - now)})`;
    el.classList.toggle("due", at <= now);
  }
}

// Whether the person is in the middle of filling a form on this page (then a reload waits for them).
function busy(live) {
  const active = document.activeElement;
  if (active && live.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return true;
  for (const field of live.querySelectorAll("input:not([type=hidden]), textarea")) {
    if (field.value !== field.defaultValue) return true;
  }
  return false;
}

// A running node's output (`node_output` events of the run's stream), kept across page refreshes.
const output = [];
const MAX_OUTPUT_CHARS = 200000;

function drawOutput() {
  const pre = document.getElementById("node-output");
  if (!pre) return;
  pre.textContent = "";
  for (const chunk of output) {
    const part = document.createElement("span");
    part.className = chunk.stream;
    part.textContent = chunk.data;
    pre.appendChild(part);
  }
  pre.scrollTop = pre.scrollHeight;
}

function addOutput(event) {
  let chunk;
  try { chunk = JSON.parse(event.data); } catch (_) { return; }
  const last = output[output.length - 1];
  const head = `── ${chunk.node_id} (${chunk.attempt_id || ""})\n`;
  if (!last || last.node !== chunk.node_id || last.attempt !== chunk.attempt_id) {
    output.push({node: chunk.node_id, attempt: chunk.attempt_id, stream: "note", data: head});
  }
  output.push({node: chunk.node_id, attempt: chunk.attempt_id, stream: chunk.stream, data: String(chunk.data || "")});
  let size = output.reduce((n, c) => n + c.data.length, 0);
  while (size > MAX_OUTPUT_CHARS && output.length > 1) size -= output.shift().data.length;
  drawOutput();
}

async function refresh(live) {
  const response = await fetch(location.href, {credentials: "same-origin", headers: {"Accept": "text/html"}});
  if (!response.ok || response.redirected) return;
  const page = new DOMParser().parseFromString(await response.text(), "text/html");
  const fresh = page.getElementById("live");
  if (fresh) { live.innerHTML = fresh.innerHTML; tick(); drawOutput(); }
}

function follow() {
  const url = document.body.dataset.stream;
  const live = document.getElementById("live");
  if (!url || !live || !window.EventSource) return;
  const keepForms = document.body.dataset.keepForms === "1";
  let first = true, timer = null;
  const changed = () => {
    if (first) { first = false; return; }  // the first event is the view this page was drawn from
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (keepForms && busy(live)) {
        const banner = live.querySelector(".changed");
        if (banner) banner.hidden = false;
      } else {
        refresh(live).catch(() => {});
      }
    }, 300);
  };
  const source = new EventSource(url, {withCredentials: true});
  for (const topic of ["runs", "run", "interactions", "host"]) source.addEventListener(topic, changed);
  source.addEventListener("node_output", addOutput);  // appended in place: no reload per line
  // Fallen behind: the stream starts again with the current view and the output so far (replayed whole).
  source.addEventListener("overflow", () => { source.close(); output.length = 0; setTimeout(follow, 1000); first = true; });
  source.onerror = () => {
    // A finished run's stream ends: draw the last state once and stop.
    if (url.includes("/streams/runs/")) { source.close(); refresh(live).catch(() => {}); }
  };
}

document.addEventListener("DOMContentLoaded", () => {
  tick();
  setInterval(tick, 1000);
  follow();
});
