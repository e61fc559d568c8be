// latlab: what every page shares (docs/browser-records.md): the WebSocket to latlab's
// page server (records out, signalling and clock pings in), console output and errors
// as records, the page clock. A page posts its hello first, then whatever it records.
'use strict';
const pageMs = () => performance.timeOrigin + performance.now();
const ws = new WebSocket(`ws://${location.host}/ws?id=${encodeURIComponent(
  new URLSearchParams(location.search).get('id'))}`);
const unsent = [];
function post(obj) {
  const text = JSON.stringify(obj);
  if (ws.readyState === WebSocket.OPEN) ws.send(text); else unsent.push(text);
}
ws.onopen = () => { while (unsent.length) ws.send(unsent.shift()); };

for (const level of ['log', 'info', 'warn', 'error']) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    original(...args);
    const text = args.map((a) => (typeof a === 'string' ? a : JSON.stringify(a))).join(' ');
    post({type: 'console', level, text});
  };
}
window.onerror = (message, source, line) => console.error(`${message} (${source}:${line})`);
window.onunhandledrejection = (e) => console.error(`unhandled rejection: ${e.reason}`);

// Answers the server's clock pings; every other message goes to `handler` (signalling).
function onServerMessage(handler) {
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    if (msg.type === 'ping') { post({type: 'clock', seq: msg.seq, page_ms: pageMs()}); return; }
    handler(msg);
  };
}
