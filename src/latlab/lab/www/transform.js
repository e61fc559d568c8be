// latlab: worker for RTCRtpScriptTransform. Every encoded frame passing a sender or
// receiver transform becomes one `frame` record (docs/browser-records.md); records go to
// the page in batches every 100 ms. Frame metadata times (captureTime, receiveTime) are
// relative to this worker's performance.timeOrigin, so they are made absolute here.
'use strict';
let batch = [];
const now = () => performance.timeOrigin + performance.now();
const abs = (ms) => (ms === undefined || ms === null ? null : performance.timeOrigin + ms);

function record(side, frame) {
  const t = now();
  const m = frame.getMetadata();
  const capture = abs(m.captureTime);
  // On the receiver, captureTime comes from the abs-capture-time header extension
  // (mapped to this clock with senderCaptureTimeOffset); the sender has no header.
  const fromHeader = side === 'recv' && m.senderCaptureTimeOffset !== undefined;
  batch.push({
    side,
    kind: (m.mimeType || 'audio/').split('/')[0],
    ssrc: m.synchronizationSource,
    rtp_ts: m.rtpTimestamp ?? frame.timestamp,
    seq: m.sequenceNumber ?? null,
    t_ms: t,
    bytes: frame.data.byteLength,
    capture_ms: capture,
    receive_ms: abs(m.receiveTime),
    abs_capture_ms: fromHeader ? capture : null,
    sender_capture_time_offset_ms: m.senderCaptureTimeOffset ?? null,
    payload_type: m.payloadType ?? null,
    audio_level: m.audioLevel ?? null,
  });
}

function pipe(readable, writable, side) {
  const ts = new TransformStream({
    transform(frame, controller) {
      record(side, frame);
      controller.enqueue(frame);
    },
  });
  readable.pipeThrough(ts).pipeTo(writable)
    .catch((e) => self.postMessage({error: `${side} transform: ${e}`}));
}

setInterval(() => {
  if (batch.length) {
    self.postMessage({frames: batch});
    batch = [];
  }
}, 100);

self.onrtctransform = (event) => {
  const t = event.transformer;
  pipe(t.readable, t.writable, t.options.side);
};
