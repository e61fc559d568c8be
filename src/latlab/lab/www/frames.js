// latlab: records every encoded frame of every RTCPeerConnection the page makes, for pages
// whose peer connections a client library creates (janus.js, an SFU's SDK): the
// constructor is wrapped so that each sender gets an RTCRtpScriptTransform when its track
// is added and each receiver when its track arrives (during the remote description, before
// the answer: a transform set after negotiation sees no frame). The worker (transform.js)
// records the frames; they reach the page server as `frames` records
// (docs/browser-records.md). Load after page.js, before the client library.
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
  const Native = window.RTCPeerConnection;
  window.RTCPeerConnection = class extends Native {
    constructor(...args) {
      super(...args);
      this.addEventListener('track', (e) => tap(e.receiver, 'recv'));
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
})();
