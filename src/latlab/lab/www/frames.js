// latlab: records every encoded frame of every RTCPeerConnection the page makes, for pages
// whose peer connections a client library creates (janus.js, an SFU's SDK): the
// constructor is wrapped so that each sender gets an RTCRtpScriptTransform when its track
// is added and each receiver when its track arrives (during the remote description, before
// the answer: a transform set after negotiation sees no frame). The worker (transform.js)
// records the frames; they reach the page server as `frames` records
// (docs/browser-records.md). It also follows what each receiver plays out: its
// synchronization sources polled every 10 ms (`sources` records) and every received
// video frame a <video> element presents (`presented`, requestVideoFrameCallback), as the
// call page does. Load after page.js, before the client library.
'use strict';
(() => {
  const worker = new Worker('transform.js');
  worker.onmessage = (ev) => {
    if (ev.data.frames) post({type: 'frames', frames: ev.data.frames});
    else if (ev.data.error) console.error(ev.data.error);
  };
  const tapped = new WeakSet();
  const tap = (end, side) => {
    if (!end || tapped.has(end)) return;
    tapped.add(end);
    end.transform = new RTCRtpScriptTransform(worker, {side});
  };
  const receivers = [];
  const Native = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('track', (e) => {
        tap(e.receiver, 'recv');
        if (!receivers.includes(e.receiver)) receivers.push(e.receiver);
      });
    }

    addTrack(...args) {
      const sender = super.addTrack(...args);
      tap(sender, 'send');
      return sender;
    }

    addTransceiver(...args) {
      const transceiver = super.addTransceiver(...args);
      tap(transceiver.sender, 'send');
      tap(transceiver.receiver, 'recv');
      return transceiver;
    }
  };

  // Each change of a receiver's synchronization source: [kind, source, timestamp,
  // rtpTimestamp] (when it delivered a frame of that source, and the frame's RTP time).
  const entries = [];
  const last = new Map();
  setInterval(() => {
    for (const r of receivers) {
      const kind = r.track ? r.track.kind : 'audio';
      for (const s of r.getSynchronizationSources()) {
        const key = `${kind}:${s.source}`;
        const seen = last.get(key);
        if (seen && seen[0] === s.timestamp && seen[1] === s.rtpTimestamp) continue;
        last.set(key, [s.timestamp, s.rtpTimestamp]);
        entries.push([kind, s.source, s.timestamp, s.rtpTimestamp]);
      }
    }
  }, 10);
  // Every received frame a video element presents (local previews have no RTP time).
  const presented = [];
  const at = (ms) => (ms === undefined || ms === null ? null : performance.timeOrigin + ms);
  const watched = new WeakSet();
  const watch = (el) => {
    if (watched.has(el) || !el.requestVideoFrameCallback) return;
    watched.add(el);
    const onFrame = (now, m) => {
      if (m.rtpTimestamp !== undefined) {
        presented.push({rtp_ts: m.rtpTimestamp, receive_ms: at(m.receiveTime),
          capture_ms: at(m.captureTime), presentation_ms: at(m.presentationTime),
          expected_display_ms: at(m.expectedDisplayTime), callback_ms: at(now),
          processing_ms: m.processingDuration === undefined ? null : m.processingDuration * 1000,
          presented_frames: m.presentedFrames, width: m.width, height: m.height});
      }
      el.requestVideoFrameCallback(onFrame);
    };
    el.requestVideoFrameCallback(onFrame);
  };
  const srcObject = Object.getOwnPropertyDescriptor(HTMLMediaElement.prototype, 'srcObject');
  Object.defineProperty(HTMLMediaElement.prototype, 'srcObject', {
    configurable: true,
    get() { return srcObject.get.call(this); },
    set(stream) {
      srcObject.set.call(this, stream);
      if (stream && this instanceof HTMLVideoElement) watch(this);
    },
  });
  setInterval(() => {
    if (entries.length) post({type: 'sources', t_ms: pageMs(), entries: entries.splice(0)});
    if (presented.length) post({type: 'presented', frames: presented.splice(0)});
  }, 200);
})();
