package main

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// ivf builds an IVF file: a 32-byte header (timebase 1/90000, as GStreamer's avmux_ivf
// writes) and frames at the given 90 kHz timestamps.
func ivf(frames [][]byte, pts []uint64) []byte {
	var b bytes.Buffer
	h := make([]byte, 32)
	copy(h, "DKIF")
	binary.LittleEndian.PutUint16(h[6:], 32)
	copy(h[8:], "VP80")
	binary.LittleEndian.PutUint16(h[12:], 640)
	binary.LittleEndian.PutUint16(h[14:], 360)
	binary.LittleEndian.PutUint32(h[16:], 90000)
	binary.LittleEndian.PutUint32(h[20:], 1)
	binary.LittleEndian.PutUint32(h[24:], uint32(len(frames)))
	b.Write(h)
	for i, f := range frames {
		fh := make([]byte, 12)
		binary.LittleEndian.PutUint32(fh, uint32(len(f)))
		binary.LittleEndian.PutUint64(fh[4:], pts[i])
		b.Write(fh)
		b.Write(f)
	}
	return b.Bytes()
}

func frame(size int, key bool) []byte {
	f := bytes.Repeat([]byte{0xab}, size)
	f[0] = 0x01 // P bit: an inter frame
	if key {
		f[0] = 0x00
	}
	return f
}

func TestIVFFramesArePacketisedOnceWithTheirTimestamps(t *testing.T) {
	raw := ivf([][]byte{frame(3000, true), frame(100, false), frame(1156, false)}, []uint64{0, 3000, 6000})
	track, err := parseIVF(raw)
	if err != nil {
		t.Fatal(err)
	}
	if track.width != 640 || track.height != 360 || len(track.frames) != 3 {
		t.Fatalf("got %dx%d, %d frames", track.width, track.height, len(track.frames))
	}
	// 3000 bytes at 1156 per packet: 1156 + 1156 + 688
	sizes := []int{}
	for _, c := range track.frames[0].chunks {
		sizes = append(sizes, len(c))
	}
	if len(sizes) != 3 || sizes[0] != 1156 || sizes[2] != 688 {
		t.Fatalf("key frame chunks %v", sizes)
	}
	if track.frames[1].ts != 3000 || track.frames[2].ts != 6000 || track.loopTs != 9000 {
		t.Fatalf("timestamps %d %d, loop %d", track.frames[1].ts, track.frames[2].ts, track.loopTs)
	}
	if !track.frames[0].key || track.frames[1].key || track.packets != 5 {
		t.Fatalf("key flags or packet count wrong: %d packets", track.packets)
	}
}

func TestIVFMustStartWithAKeyFrameAndBeVP8(t *testing.T) {
	if _, err := parseIVF(ivf([][]byte{frame(10, false)}, []uint64{0})); err == nil ||
		!strings.Contains(err.Error(), "key frame") {
		t.Fatalf("inter frame first: %v", err)
	}
	raw := ivf([][]byte{frame(10, true)}, []uint64{0})
	copy(raw[8:], "VP90")
	if _, err := parseIVF(raw); err == nil || !strings.Contains(err.Error(), "not VP8") {
		t.Fatalf("VP9: %v", err)
	}
	if _, err := parseIVF([]byte("nonsense")); err == nil {
		t.Fatal("garbage parsed")
	}
}

func TestVP8DescriptorCarriesA15BitPictureID(t *testing.T) {
	buf := make([]byte, rtpPayloadMax)
	p := writeVP8(buf, []byte{1, 2, 3}, true, 0x1234)
	want := []byte{0x90, 0x80, 0x80 | 0x12, 0x34, 1, 2, 3}
	if !bytes.Equal(p, want) {
		t.Fatalf("first packet % x, want % x", p, want)
	}
	p = writeVP8(buf, []byte{9}, false, 0x7fff)
	if !bytes.Equal(p, []byte{0x80, 0x80, 0xff, 0xff, 9}) {
		t.Fatalf("continuation % x", p)
	}
}

// ogg builds an Ogg stream of pages, each with the given packets (lacing values from
// their sizes; a packet of 255 bytes or more spans several segments).
func ogg(pages ...[][]byte) []byte {
	var b bytes.Buffer
	for seq, packets := range pages {
		var lacing, body []byte
		for _, p := range packets {
			n := len(p)
			for n >= 255 {
				lacing = append(lacing, 255)
				n -= 255
			}
			lacing = append(lacing, byte(n))
			body = append(body, p...)
		}
		h := make([]byte, 27)
		copy(h, "OggS")
		binary.LittleEndian.PutUint32(h[14:], 7)
		binary.LittleEndian.PutUint32(h[18:], uint32(seq))
		h[26] = byte(len(lacing))
		b.Write(h)
		b.Write(lacing)
		b.Write(body)
	}
	return b.Bytes()
}

func opusHead() []byte {
	h := []byte("OpusHead")
	h = append(h, 1, 2, 0x38, 0x01, 0x80, 0xbb, 0, 0, 0, 0, 0)
	return h
}

func TestOggPagesAreSplitIntoOpusPackets(t *testing.T) {
	celt20 := func(n int) []byte { p := bytes.Repeat([]byte{7}, n); p[0] = 31 << 3; return p } // CELT 20 ms
	raw := ogg([][]byte{opusHead()}, [][]byte{[]byte("OpusTags........")},
		[][]byte{celt20(80), celt20(300), celt20(255)}, [][]byte{celt20(90)})
	track, err := parseOgg(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(track.packets) != 4 {
		t.Fatalf("%d packets, want 4", len(track.packets))
	}
	for i, n := range []int{80, 300, 255, 90} {
		if len(track.packets[i].data) != n || track.packets[i].duration != 960 {
			t.Fatalf("packet %d: %d bytes, %d samples", i, len(track.packets[i].data), track.packets[i].duration)
		}
	}
	if track.loopTs != 4*960 || track.offsets[3] != 3*960 {
		t.Fatalf("loop %d, offsets %v", track.loopTs, track.offsets)
	}
	if _, err := parseOgg(ogg([][]byte{[]byte("OpusTags")})); err == nil {
		t.Fatal("no OpusHead accepted")
	}
}

func TestOpusDurationsFromTheTOC(t *testing.T) {
	cases := []struct {
		packet []byte
		want   uint32
	}{
		{[]byte{31 << 3}, 960},          // CELT 20 ms, one frame
		{[]byte{28 << 3}, 120},          // CELT 2.5 ms
		{[]byte{1 << 3}, 960},           // SILK 20 ms
		{[]byte{3<<3 | 1}, 2 * 2880},    // SILK 60 ms, two frames
		{[]byte{13 << 3}, 960},          // hybrid 20 ms
		{[]byte{31<<3 | 3, 3}, 3 * 960}, // code 3: three frames
		{[]byte{31<<3 | 3, 7}, 0},       // 140 ms: over the 120 ms limit
	}
	for _, c := range cases {
		got, err := opusDuration(c.packet)
		if c.want == 0 {
			if err == nil {
				t.Errorf("% x: accepted %d", c.packet, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("% x: %d (%v), want %d", c.packet, got, err, c.want)
		}
	}
}

func TestLossAndJitterFollowRFC3550(t *testing.T) {
	var r rtpReceiveState
	t0 := time.Unix(0, 0)
	// 20 ms packets arriving on time, sequence numbers wrapping, one lost, one
	// retransmitted later
	seqs := []uint16{65533, 65534, 65535, 1, 2, 0}
	for _, s := range seqs[:5] {
		ts := uint32(int(s)+3) % 65536 * 960
		r.update(s, ts, t0.Add(time.Duration(ts)*time.Second/audioClock), audioClock)
	}
	if r.lost() != 1 {
		t.Fatalf("lost %d, want 1 (seq 0)", r.lost())
	}
	if r.jitter > 1 {
		t.Fatalf("jitter %.1f samples for packets on time", r.jitter)
	}
	r.update(0, 3*960, t0.Add(200*time.Millisecond), audioClock) // the retransmission
	if r.lost() != 0 {
		t.Fatalf("lost %d after the retransmission", r.lost())
	}
	if r.jitter == 0 {
		t.Fatal("a late packet left the jitter at 0")
	}
}

func TestArgumentsAreCheckedInOneLine(t *testing.T) {
	good := []string{"--sfu", "janus", "--url", "http://10.0.0.1:8088/janus", "--publishers", "2",
		"--subscribers", "3", "--video", "v.ivf", "--ice-ip", "10.0.0.2"}
	cfg, err := parseArgs(good)
	if err != nil || cfg.room != "1234" || cfg.readyTimeout != 30*time.Second || cfg.name != "load" {
		t.Fatalf("%+v %v", cfg, err)
	}
	bad := map[string][]string{
		"--sfu \"x\"":       {"--sfu", "x"},
		"needs --url":       {"--sfu", "janus", "--ice-ip", "1.2.3.4", "--video", "v"},
		"--key and":         {"--sfu", "livekit", "--url", "ws://x", "--ice-ip", "1.2.3.4", "--video", "v"},
		"--whip URL":        {"--sfu", "whip", "--ice-ip", "1.2.3.4", "--video", "v"},
		"nothing to send":   {"--sfu", "janus", "--url", "u", "--ice-ip", "1.2.3.4"},
		"not an IPv4":       {"--sfu", "janus", "--url", "u", "--ice-ip", "::1", "--video", "v"},
		"--publishers 0":    append(append([]string{}, good...), "--publishers", "0"),
		"unknown flag --xy": {"--xy"},
	}
	for want, args := range bad {
		_, err := parseArgs(args)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: %v, want one line with %q", args, err, want)
		}
	}
}

func TestPublishersStartAtTheirOwnPlaceInTheFiles(t *testing.T) {
	video := &videoTrack{loopTs: 300 * 3000}
	for i := 0; i < 300; i++ {
		video.frames = append(video.frames, videoFrame{ts: uint32(i * 3000), key: i%60 == 0})
	}
	audio := &audioTrack{loopTs: 500 * 960}
	for i := 0; i < 500; i++ {
		audio.packets = append(audio.packets, audioPacket{duration: 960})
		audio.offsets = append(audio.offsets, uint32(i*960))
	}
	m := &media{video: video, audio: audio}
	start := func(i, n int) *sendState {
		pub := &publisher{p: &participant{index: i}, count: n, media: m}
		s := newSendState(pub)
		s.start = time.Unix(100, 0)
		return s
	}
	// two publishers: key frames 0 and 120 (of 0, 60, ..., 240), audio at 4 s
	if s := start(1, 2); s.vFrame != 120 || s.aPacket != 200 {
		t.Fatalf("publisher 1 of 2 starts at frame %d, audio packet %d", s.vFrame, s.aPacket)
	}
	// seven: more than the key frames, spread evenly: frame 6*300/7 = 257
	s := start(6, 7)
	if s.vFrame != 257 {
		t.Fatalf("publisher 6 of 7 starts at frame %d", s.vFrame)
	}
	// its schedule starts now and runs on through the loop's end
	if !s.videoAt().Equal(s.start) {
		t.Fatalf("first frame due %s after the start", s.videoAt().Sub(s.start))
	}
	s.vFrame, s.vLoop = 0, 1 // the loop's first frame, after the wrap
	if got := s.videoAt().Sub(s.start); got != (300-257)*time.Second/30 {
		t.Fatalf("frame 0 of the next loop due %s after the start", got)
	}
}
