// latlab: what every SFU participant page shares (sfu.html for Janus, livekit.html for
// LiveKit), whichever client library joins the room: the hello record, a getStats sample
// of the page's peer connections every 200 ms (one `stats` record), and the `media
// flowing` state once its video moves (a publisher sends it, a subscriber decodes it; in a
// room whose publishers send audio only, `expect=audio`, once a subscriber decodes audio),
// which the runner waits for (docs/browser-records.md). Load after page.js.
'use strict';
const ROOM_STATS_TYPES = ['outbound-rtp', 'inbound-rtp', 'remote-inbound-rtp', 'media-source',
  'candidate-pair', 'transport', 'codec'];
const ROOM_SAMPLE_MS = 200;

function roomHello(id, role) {
  post({type: 'hello', id, role, user_agent: navigator.userAgent, page_ms: pageMs(),
    time_origin_ms: performance.timeOrigin, cross_origin_isolated: self.crossOriginIsolated});
}

// Every 200 ms: the stats of the peer connections `pcs()` returns, and `media flowing`
// the first time the video moves for a member of this `role`.
function roomSampling(role, pcs) {
  let flowing = false;
  const sample = async () => {
    const reports = [];
    for (const pc of pcs()) {
      (await pc.getStats()).forEach((r) => { if (ROOM_STATS_TYPES.includes(r.type)) reports.push(r); });
    }
    if (!reports.length) return;
    post({type: 'stats', t_ms: pageMs(), reports});
    const video = reports.filter((r) => r.kind === 'video');
    const audioOnly = new URLSearchParams(location.search).get('expect') === 'audio';
    const moving = role === 'publisher'
      ? video.some((r) => r.type === 'outbound-rtp' && r.packetsSent > 0)
      : audioOnly
        ? reports.some((r) => r.kind === 'audio' && r.type === 'inbound-rtp' && r.totalSamplesReceived > 0)
        : video.some((r) => r.type === 'inbound-rtp' && r.framesDecoded > 0);
    if (moving && !flowing) {
      flowing = true;
      post({type: 'state', what: 'media', value: 'flowing'});
    }
  };
  setInterval(() => sample().catch((x) => console.error(`getStats: ${x}`)), ROOM_SAMPLE_MS);
}
