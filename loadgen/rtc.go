package main

// The WebRTC side shared by every signalling: one pion API per participant (VP8 and
// Opus only, host candidates on --ice-ip only, pion's NACK, RTCP report and TWCC
// interceptors and a counter of the RTCP feedback), publishers that send the files in
// real time and subscribers that read RTP without decoding.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"
)

const (
	videoPT = 96
	audioPT = 111
)

var (
	vp8Codec = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: videoClock,
		RTCPFeedback: []webrtc.RTCPFeedback{{Type: "ccm", Parameter: "fir"}}}
	opusCodec = webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: audioClock,
		Channels: 2, SDPFmtpLine: "minptime=10;useinbandfec=1"}
)

// feedbackCounter is an interceptor that counts the RTCP feedback a PeerConnection
// sends (NACK, PLI, FIR from pion's interceptors) and receives. It is registered
// first, so it sees everything the others write and everything read from the wire.
type feedbackCounter struct {
	interceptor.NoOp
	p *participant
}

type feedbackCounterFactory struct{ p *participant }

func (f feedbackCounterFactory) NewInterceptor(string) (interceptor.Interceptor, error) {
	return &feedbackCounter{p: f.p}, nil
}

func (c *feedbackCounter) BindRTCPReader(reader interceptor.RTCPReader) interceptor.RTCPReader {
	return interceptor.RTCPReaderFunc(func(b []byte, a interceptor.Attributes) (int, interceptor.Attributes, error) {
		n, a, err := reader.Read(b, a)
		if err != nil {
			return n, a, err
		}
		if a == nil {
			a = interceptor.Attributes{}
		}
		if packets, perr := a.GetRTCPPackets(b[:n]); perr == nil {
			c.p.received.count(packets)
		}
		return n, a, nil
	})
}

func (c *feedbackCounter) BindRTCPWriter(writer interceptor.RTCPWriter) interceptor.RTCPWriter {
	return interceptor.RTCPWriterFunc(func(packets []rtcp.Packet, a interceptor.Attributes) (int, error) {
		c.p.sent.count(packets)
		return writer.Write(packets, a)
	})
}

// newAPI is a participant's pion API: its own media engine, settings and interceptors.
func newAPI(cfg *config, p *participant) (*webrtc.API, error) {
	m := &webrtc.MediaEngine{}
	video := webrtc.RTPCodecParameters{RTPCodecCapability: vp8Codec, PayloadType: videoPT}
	if err := m.RegisterCodec(video, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, err
	}
	audio := webrtc.RTPCodecParameters{RTPCodecCapability: opusCodec, PayloadType: audioPT}
	if err := m.RegisterCodec(audio, webrtc.RTPCodecTypeAudio); err != nil {
		return nil, err
	}
	registry := &interceptor.Registry{}
	registry.Add(feedbackCounterFactory{p})
	if err := webrtc.ConfigureNack(m, registry); err != nil {
		return nil, err
	}
	if err := webrtc.ConfigureRTCPReports(registry); err != nil {
		return nil, err
	}
	if err := webrtc.ConfigureTWCCSender(m, registry); err != nil {
		return nil, err
	}
	if p.role == "publisher" {
		// transport-wide sequence numbers on what it sends, as browsers do: the SFU
		// then does the feedback work a browser publisher costs it
		if err := webrtc.ConfigureTWCCHeaderExtensionSender(m, registry); err != nil {
			return nil, err
		}
	}
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(settings(cfg)),
		webrtc.WithInterceptorRegistry(registry)), nil
}

// settings: host candidates on --ice-ip only (UDP over IPv4), no mDNS, ICE declared
// failed 10 s after it stops answering.
func settings(cfg *config) webrtc.SettingEngine {
	var se webrtc.SettingEngine
	ip := cfg.iceIP
	se.SetIPFilter(func(candidate net.IP) bool { return candidate.Equal(ip) })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetICETimeouts(5*time.Second, 10*time.Second, 2*time.Second)
	if ip.IsLoopback() {
		se.SetIncludeLoopbackCandidate(true)
	}
	return se
}

// watchConnection turns a PeerConnection's failure into the participant's error and
// closes connected when it first connects.
func watchConnection(pc *webrtc.PeerConnection, p *participant, connected chan<- struct{},
	failed func(error)) {
	var once sync.Once
	start := time.Now()
	pc.OnICEConnectionStateChange(func(s webrtc.ICEConnectionState) {
		p.setState("ICE " + s.String())
	})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		switch s {
		case webrtc.PeerConnectionStateConnected:
			once.Do(func() { close(connected) })
		case webrtc.PeerConnectionStateFailed:
			ice := pc.ICEConnectionState()
			if ice == webrtc.ICEConnectionStateFailed {
				failed(fmt.Errorf("ICE failed after %.0f s", time.Since(start).Seconds()))
			} else {
				failed(fmt.Errorf("connection failed after %.1f s (ICE %s, DTLS did not complete)",
					time.Since(start).Seconds(), ice))
			}
		}
	})
}

// gathered sets the local description and waits until every candidate is in it: the
// signalling here sends one complete SDP, no trickle.
func gathered(ctx context.Context, pc *webrtc.PeerConnection, sdp webrtc.SessionDescription) (string, error) {
	done := webrtc.GatheringCompletePromise(pc)
	if err := pc.SetLocalDescription(sdp); err != nil {
		return "", err
	}
	select {
	case <-done:
	case <-ctx.Done():
		return "", errors.New("ICE gathering did not complete")
	}
	return pc.LocalDescription().SDP, nil
}

// ---- publishers

// publisher sends the media files on its tracks (one RTP stream each, no simulcast).
type publisher struct {
	p                  *participant
	count              int // publishers in all: where in the files this one starts
	media              *media
	video, audio       *boundTrack
	videoStat, audStat *trackStats
	pc                 *webrtc.PeerConnection // nil when the SDK owns it (LiveKit)
	connected          chan struct{}
	sending            chan struct{} // closed once every track has sent a packet
}

// boundTrack is a TrackLocalStaticRTP that says when a PeerConnection bound it.
type boundTrack struct {
	*webrtc.TrackLocalStaticRTP
	stat  *trackStats // its SSRC is the binding's
	bound chan struct{}
	once  sync.Once
}

func (t *boundTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	codec, err := t.TrackLocalStaticRTP.Bind(ctx)
	if err == nil {
		t.stat.ssrc.Store(uint32(ctx.SSRC()))
		t.once.Do(func() { close(t.bound) })
	}
	return codec, err
}

func newBoundTrack(c webrtc.RTPCodecCapability, id, stream string, stat *trackStats) (*boundTrack, error) {
	t, err := webrtc.NewTrackLocalStaticRTP(c, id, stream)
	if err != nil {
		return nil, err
	}
	return &boundTrack{TrackLocalStaticRTP: t, stat: stat, bound: make(chan struct{})}, nil
}

func newPublisher(p *participant, count int, m *media) (*publisher, error) {
	pub := &publisher{p: p, count: count, media: m, connected: make(chan struct{}), sending: make(chan struct{})}
	var err error
	if m.video != nil {
		pub.videoStat = &trackStats{kind: "video"}
		if pub.video, err = newBoundTrack(vp8Codec, "video", p.name, pub.videoStat); err != nil {
			return nil, err
		}
		p.addTrack(pub.videoStat)
	}
	if m.audio != nil {
		pub.audStat = &trackStats{kind: "audio"}
		if pub.audio, err = newBoundTrack(opusCodec, "audio", p.name, pub.audStat); err != nil {
			return nil, err
		}
		p.addTrack(pub.audStat)
	}
	return pub, nil
}

func (pub *publisher) tracks() []*boundTrack {
	var tracks []*boundTrack
	for _, t := range []*boundTrack{pub.audio, pub.video} {
		if t != nil {
			tracks = append(tracks, t)
		}
	}
	return tracks
}

// newPC makes the publisher's own PeerConnection with a sendonly transceiver per track
// and a reader of each sender's RTCP (which pion's interceptors act on: NACKs are
// answered from the NACK responder's send buffer of 1024 packets).
func (pub *publisher) newPC(cfg *config, failed func(error)) error {
	api, err := newAPI(cfg, pub.p)
	if err != nil {
		return err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	pub.pc = pc
	for _, t := range pub.tracks() {
		tr, err := pc.AddTransceiverFromTrack(t, webrtc.RTPTransceiverInit{
			Direction: webrtc.RTPTransceiverDirectionSendonly})
		if err != nil {
			return err
		}
		go drainRTCP(tr.Sender())
	}
	watchConnection(pc, pub.p, pub.connected, failed)
	return nil
}

func drainRTCP(sender *webrtc.RTPSender) {
	buf := make([]byte, 1500)
	for {
		if _, _, err := sender.Read(buf); err != nil {
			return
		}
	}
}

// run sends until ctx ends: every track bound and (with its own PeerConnection)
// connected first. The schedule starts when the first packet has been written (with
// LiveKit's SDK, the first write waits for DTLS). Frames are sent at their time in the
// file; a loop follows the last frame seamlessly, RTP timestamps and sequence numbers
// going on. A frame found late (the process was not scheduled in time) is sent at once
// and counted; none is skipped. A PLI or FIR cannot be answered at once: the next key
// frame is the file's next one (every 2 s with the lab's files).
func (pub *publisher) run(ctx context.Context) {
	for _, t := range pub.tracks() {
		select {
		case <-t.bound:
		case <-ctx.Done():
			return
		}
	}
	if pub.pc != nil {
		select {
		case <-pub.connected:
		case <-ctx.Done():
			return
		}
	}
	pub.p.setState("sending")
	s := newSendState(pub)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	first := true
	for {
		now := time.Now()
		if first {
			s.sendVideo(now)
			s.sendAudio(now)
			s.start = time.Now()
			first = false
			close(pub.sending)
			continue
		}
		next := s.next()
		if wait := time.Until(next); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		} else if ctx.Err() != nil {
			return
		}
		now = time.Now()
		for s.video != nil && !s.videoAt().After(now) {
			s.sendVideo(now)
		}
		for s.audio != nil && !s.audioAt().After(now) {
			s.sendAudio(now)
		}
	}
}

// sendState is a publisher's position in its files and its RTP numbering.
type sendState struct {
	pub   *publisher
	start time.Time
	video *videoTrack
	audio *audioTrack

	vFrame, aPacket int    // next to send
	vLoop, aLoop    uint64 // loops completed
	vBase, aBase    uint64 // where in its loop it started (clock ticks)
	vSeq, aSeq      uint16
	vTs0, aTs0      uint32
	pictureID0      uint16
	packet          rtp.Packet
	buf             [rtpPayloadMax]byte
}

func newSendState(pub *publisher) *sendState {
	s := &sendState{pub: pub, video: pub.media.video, audio: pub.media.audio,
		vSeq: uint16(rand.Uint32()), aSeq: uint16(rand.Uint32()),
		vTs0: rand.Uint32(), aTs0: rand.Uint32(), pictureID0: uint16(rand.Uint32() & 0x7fff)}
	s.packet.Version = 2
	s.place(pub.p.index, pub.count)
	return s
}

// place starts publisher i of n at its own place in the files: each sends other frames
// than the others at any moment, so that an SFU's forwarded packets can be told apart
// by their sizes (publishers that start together on the same frames would make every
// packet ambiguous to the dwell matcher). With no more publishers than key frames each
// starts on its own key frame, else they are spread evenly over the loop (a start
// between key frames is decodable from the next one); the audio starts at the same
// time in its file.
func (s *sendState) place(i, n int) {
	var at float64 // seconds into the loop
	if s.video != nil {
		var keys []int
		for k, f := range s.video.frames {
			if f.key {
				keys = append(keys, k)
			}
		}
		s.vFrame = i * len(s.video.frames) / n
		if n <= len(keys) {
			s.vFrame = keys[i*len(keys)/n]
		}
		s.vBase = uint64(s.video.frames[s.vFrame].ts)
		at = float64(s.vBase) / videoClock
	} else if s.audio != nil {
		at = float64(i) / float64(n) * float64(s.audio.loopTs) / audioClock
	}
	if s.audio != nil {
		ticks := uint32(at*audioClock) % s.audio.loopTs
		s.aPacket = sort.Search(len(s.audio.offsets), func(k int) bool { return s.audio.offsets[k] >= ticks })
		s.aPacket %= len(s.audio.packets)
		s.aBase = uint64(s.audio.offsets[s.aPacket])
	}
}

func (s *sendState) videoAt() time.Time {
	ticks := s.vLoop*uint64(s.video.loopTs) + uint64(s.video.frames[s.vFrame].ts) - s.vBase
	return s.start.Add(time.Duration(ticks * uint64(time.Second) / videoClock))
}

func (s *sendState) audioAt() time.Time {
	ticks := s.aLoop*uint64(s.audio.loopTs) + s.audioOffset() - s.aBase
	return s.start.Add(time.Duration(ticks * uint64(time.Second) / audioClock))
}

// audioOffset is the next packet's position in its loop (48 kHz samples).
func (s *sendState) audioOffset() uint64 { return uint64(s.audio.offsets[s.aPacket]) }

func (s *sendState) next() time.Time {
	switch {
	case s.video == nil:
		return s.audioAt()
	case s.audio == nil:
		return s.videoAt()
	}
	v, a := s.videoAt(), s.audioAt()
	if a.Before(v) {
		return a
	}
	return v
}

func (s *sendState) late(stat *trackStats, due, now time.Time) {
	if s.start.IsZero() {
		return
	}
	lag := now.Sub(due)
	if lag > lateAfter {
		stat.lateFrames.Add(1)
	}
	if us := uint64(lag.Microseconds()); lag > 0 && us > stat.lagMaxUs.Load() {
		stat.lagMaxUs.Store(us)
	}
}

func (s *sendState) sendVideo(now time.Time) {
	if s.video == nil {
		return
	}
	stat := s.pub.videoStat
	if !s.start.IsZero() {
		s.late(stat, s.videoAt(), now)
	}
	frame := &s.video.frames[s.vFrame]
	frameNo := s.vLoop*uint64(len(s.video.frames)) + uint64(s.vFrame)
	pictureID := uint16((uint64(s.pictureID0) + frameNo) & 0x7fff)
	ts := s.vTs0 + uint32(s.vLoop*uint64(s.video.loopTs)) + frame.ts
	h := &s.packet.Header
	h.PayloadType = videoPT
	h.Timestamp = ts
	for i, chunk := range frame.chunks {
		h.SequenceNumber = s.vSeq
		h.Marker = i == len(frame.chunks)-1
		s.packet.Payload = writeVP8(s.buf[:], chunk, i == 0, pictureID)
		s.vSeq++
		if err := s.pub.video.WriteRTP(&s.packet); err == nil {
			stat.packets.Add(1)
			stat.bytes.Add(uint64(12 + len(s.packet.Payload)))
		}
	}
	s.vFrame++
	if s.vFrame == len(s.video.frames) {
		s.vFrame = 0
		s.vLoop++
	}
}

func (s *sendState) sendAudio(now time.Time) {
	if s.audio == nil {
		return
	}
	stat := s.pub.audStat
	if !s.start.IsZero() {
		s.late(stat, s.audioAt(), now)
	}
	packet := &s.audio.packets[s.aPacket]
	h := &s.packet.Header
	h.PayloadType = audioPT
	h.SequenceNumber = s.aSeq
	h.Timestamp = s.aTs0 + uint32(s.aLoop*uint64(s.audio.loopTs)+s.audioOffset())
	h.Marker = false
	s.packet.Payload = packet.data
	s.aSeq++
	if err := s.pub.audio.WriteRTP(&s.packet); err == nil {
		stat.packets.Add(1)
		stat.bytes.Add(uint64(12 + len(packet.data)))
	}
	s.aPacket++
	if s.aPacket == len(s.audio.packets) {
		s.aPacket = 0
		s.aLoop++
	}
}

// ---- subscribers

// subscriber receives every publisher's tracks and reads their RTP without decoding.
type subscriber struct {
	p        *participant
	expected int // tracks: publishers × tracks each
	pcs      []*webrtc.PeerConnection
	mu       sync.Mutex
	flowing  int // tracks that have received a packet
	allFlow  chan struct{}
	// publisherOf names a track's publisher from what the signalling said (may be nil)
	publisherOf func(*webrtc.PeerConnection, *webrtc.RTPReceiver, *webrtc.TrackRemote) string
}

func newSubscriber(p *participant, expected int) *subscriber {
	return &subscriber{p: p, expected: expected, allFlow: make(chan struct{})}
}

// newPC makes one of the subscriber's PeerConnections (one per SFU session).
func (sub *subscriber) newPC(cfg *config, failed func(error)) (*webrtc.PeerConnection, chan struct{}, error) {
	api, err := newAPI(cfg, sub.p)
	if err != nil {
		return nil, nil, err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return nil, nil, err
	}
	connected := make(chan struct{})
	watchConnection(pc, sub.p, connected, failed)
	pc.OnTrack(func(track *webrtc.TrackRemote, receiver *webrtc.RTPReceiver) {
		name := ""
		if sub.publisherOf != nil {
			name = sub.publisherOf(pc, receiver, track)
		}
		go sub.read(track, receiver, name)
	})
	sub.mu.Lock()
	sub.pcs = append(sub.pcs, pc)
	sub.mu.Unlock()
	return pc, connected, nil
}

// transceiverOf is the index among pc's transceivers of the one receiving on receiver
// and its mid (-1 if none).
func transceiverOf(pc *webrtc.PeerConnection, receiver *webrtc.RTPReceiver) (int, string) {
	for i, tr := range pc.GetTransceivers() {
		if tr.Receiver() == receiver {
			return i, tr.Mid()
		}
	}
	return -1, ""
}

func (sub *subscriber) flowed() {
	sub.mu.Lock()
	sub.flowing++
	if sub.flowing == sub.expected {
		close(sub.allFlow)
	}
	sub.mu.Unlock()
}

// read is a track's one read loop: counts, RFC 3550 loss (expected from the extended
// highest sequence number less received, retransmissions included, never below 0)
// and interarrival jitter. The receiver's RTCP is read by pion (its interceptors send
// the receiver reports, NACKs and TWCC feedback).
func (sub *subscriber) read(track *webrtc.TrackRemote, receiver *webrtc.RTPReceiver, publisher string) {
	kind := track.Kind().String()
	stat := &trackStats{kind: kind, publisher: publisher}
	stat.ssrc.Store(uint32(track.SSRC()))
	sub.p.addTrack(stat)
	if receiver != nil {
		go func() {
			buf := make([]byte, 1500)
			for {
				if _, _, err := receiver.Read(buf); err != nil {
					return
				}
			}
		}()
	}
	clock := float64(track.Codec().ClockRate)
	if clock == 0 {
		clock = videoClock
	}
	buf := make([]byte, 1500)
	var rs rtpReceiveState
	first := true
	for {
		n, _, err := track.Read(buf)
		if err != nil {
			return
		}
		if n < 12 {
			continue
		}
		now := time.Now()
		seq := binary.BigEndian.Uint16(buf[2:4])
		ts := binary.BigEndian.Uint32(buf[4:8])
		rs.update(seq, ts, now, clock)
		stat.packets.Add(1)
		stat.bytes.Add(uint64(n))
		stat.lost.Store(rs.lost())
		stat.jitterBits.Store(math.Float64bits(rs.jitter / clock * 1000))
		if first {
			first = false
			sub.flowed()
		}
	}
}

// rtpReceiveState is RFC 3550's per-source receive state (appendix A.1, A.8).
type rtpReceiveState struct {
	started  bool
	base     uint32 // extended first sequence number
	maxSeq   uint16
	cycles   uint32
	received uint64
	transit  float64
	jitter   float64 // timestamp units
	t0       time.Time
}

func (r *rtpReceiveState) update(seq uint16, ts uint32, now time.Time, clock float64) {
	arrival := now.Sub(r.t0).Seconds() * clock
	if !r.started {
		r.started, r.base, r.maxSeq, r.t0 = true, uint32(seq), seq, now
		r.received = 1
		r.transit = -float64(ts)
		return
	}
	r.received++
	if delta := seq - r.maxSeq; delta != 0 && delta < 0x8000 {
		if seq < r.maxSeq {
			r.cycles += 1 << 16
		}
		r.maxSeq = seq
	}
	transit := arrival - float64(ts)
	d := transit - r.transit
	// timestamps wrap at 2^32: a difference is taken modulo 2^32
	if d > 1<<31 {
		d -= 1 << 32
	} else if d < -(1 << 31) {
		d += 1 << 32
	}
	r.transit = transit
	r.jitter += (math.Abs(d) - r.jitter) / 16
}

func (r *rtpReceiveState) lost() int64 {
	if !r.started {
		return 0
	}
	expected := int64(r.cycles) + int64(r.maxSeq) - int64(r.base) + 1
	if lost := expected - int64(r.received); lost > 0 {
		return lost
	}
	return 0
}
