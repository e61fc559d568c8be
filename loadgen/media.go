package main

// The media a light publisher sends: a VP8 IVF file cut once into RTP payloads and an
// Ogg Opus file cut into its packets, both kept in memory and shared read-only by every
// publisher. Sending then costs no codec work and no parsing: each packet is a
// descriptor patched into a per-publisher buffer and a copy of a slice.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/pion/webrtc/v4/pkg/media/ivfreader"
	"github.com/pion/webrtc/v4/pkg/media/oggreader"
)

const (
	videoClock = 90000
	audioClock = 48000
	// rtpPayloadMax keeps a packet (12-byte header, a few bytes of extensions, SRTP's
	// 10-byte tag) well under a 1280-byte path MTU, like browsers' 1200.
	rtpPayloadMax = 1160
	vp8Descriptor = 4 // X, I and a 15-bit picture ID (M=1): the same length every packet
)

// videoFrame is one encoded VP8 frame: its RTP timestamp from the file's start and its
// payload chunks (without the VP8 payload descriptor, which is written per send).
type videoFrame struct {
	ts     uint32
	chunks [][]byte
	key    bool
}

// videoTrack is a whole IVF file: frames in order and the length of one loop in 90 kHz
// ticks (the last frame lasts as long as the one before it).
type videoTrack struct {
	width   int
	height  int
	frames  []videoFrame
	loopTs  uint32
	packets int // RTP packets in one loop
}

// audioPacket is one Opus packet and its duration in 48 kHz samples.
type audioPacket struct {
	data     []byte
	duration uint32
}

type audioTrack struct {
	packets []audioPacket
	offsets []uint32 // each packet's position in the loop, 48 kHz samples
	loopTs  uint32
}

// media is what every publisher sends (either may be nil).
type media struct {
	video *videoTrack
	audio *audioTrack
}

// loadVideo reads a VP8 IVF file. The first frame must be a key frame: every loop
// starts with one, so a subscriber that joins can decode from the loop's start.
func loadVideo(path string) (*videoTrack, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--video: %w", err)
	}
	track, err := parseIVF(raw)
	if err != nil {
		return nil, fmt.Errorf("--video %s: %w", path, err)
	}
	return track, nil
}

func parseIVF(raw []byte) (*videoTrack, error) {
	reader, header, err := ivfreader.NewWith(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not an IVF file: %w", err)
	}
	if header.FourCC != "VP80" {
		return nil, fmt.Errorf("codec %q, not VP8 (VP80)", header.FourCC)
	}
	// ivfreader's Timestamp is pts*rate/scale; a frame's time is pts*scale/rate seconds.
	rate, scale := uint64(header.TimebaseDenominator), uint64(header.TimebaseNumerator)
	track := &videoTrack{width: int(header.Width), height: int(header.Height)}
	var last uint64
	for {
		frame, fh, err := reader.ParseNextFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", len(track.frames), err)
		}
		if len(frame) == 0 {
			continue
		}
		pts := fh.Timestamp * scale / rate
		ticks := pts * scale * videoClock / rate
		if len(track.frames) > 0 && ticks <= last {
			return nil, fmt.Errorf("frame %d: timestamp does not increase", len(track.frames))
		}
		last = ticks
		key := frame[0]&0x01 == 0 // VP8 frame tag: P bit clear on a key frame
		if len(track.frames) == 0 && !key {
			return nil, errors.New("the first frame is not a key frame")
		}
		chunks := splitFrame(frame, rtpPayloadMax-vp8Descriptor)
		track.frames = append(track.frames, videoFrame{ts: uint32(ticks), chunks: chunks, key: key})
		track.packets += len(chunks)
	}
	switch n := len(track.frames); {
	case n == 0:
		return nil, errors.New("no frames")
	case n == 1:
		track.loopTs = videoClock / 30
	default:
		step := track.frames[n-1].ts - track.frames[n-2].ts
		track.loopTs = track.frames[n-1].ts + step
	}
	base := track.frames[0].ts
	for i := range track.frames {
		track.frames[i].ts -= base
	}
	track.loopTs -= base
	return track, nil
}

// splitFrame cuts a frame into chunks of at most max bytes: full chunks, then the rest.
func splitFrame(frame []byte, max int) [][]byte {
	chunks := make([][]byte, 0, (len(frame)+max-1)/max)
	for len(frame) > max {
		chunks = append(chunks, frame[:max])
		frame = frame[max:]
	}
	return append(chunks, frame)
}

// writeVP8 writes the VP8 payload descriptor (RFC 7741: X=1, S on a frame's first
// packet, I=1 with a 15-bit picture ID) and the chunk into buf; it returns the payload.
func writeVP8(buf []byte, chunk []byte, first bool, pictureID uint16) []byte {
	buf[0] = 0x80
	if first {
		buf[0] |= 0x10
	}
	buf[1] = 0x80
	buf[2] = 0x80 | byte(pictureID>>8&0x7f)
	buf[3] = byte(pictureID)
	n := copy(buf[vp8Descriptor:], chunk)
	return buf[:vp8Descriptor+n]
}

// loadAudio reads an Ogg Opus file into its packets (the OpusHead and OpusTags headers
// are checked and skipped).
func loadAudio(path string) (*audioTrack, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--audio: %w", err)
	}
	track, err := parseOgg(raw)
	if err != nil {
		return nil, fmt.Errorf("--audio %s: %w", path, err)
	}
	return track, nil
}

func parseOgg(raw []byte) (*audioTrack, error) {
	packets, err := oggPackets(raw)
	if err != nil {
		return nil, err
	}
	if len(packets) < 3 {
		return nil, errors.New("no Opus packets")
	}
	head, err := oggreader.ParseOpusHead(packets[0])
	if err != nil || !bytes.HasPrefix(packets[0], []byte("OpusHead")) {
		return nil, errors.New("not Ogg Opus (no OpusHead)")
	}
	if head.Channels == 0 || head.Channels > 2 {
		return nil, fmt.Errorf("%d channels: RTP Opus carries one or two", head.Channels)
	}
	if !bytes.HasPrefix(packets[1], []byte("OpusTags")) {
		return nil, errors.New("no OpusTags after OpusHead")
	}
	track := &audioTrack{}
	for i, data := range packets[2:] {
		duration, err := opusDuration(data)
		if err != nil {
			return nil, fmt.Errorf("Opus packet %d: %w", i, err)
		}
		track.packets = append(track.packets, audioPacket{data: data, duration: duration})
		track.offsets = append(track.offsets, track.loopTs)
		track.loopTs += duration
	}
	return track, nil
}

// oggPackets returns the packets of an Ogg file's first logical stream. pion's
// oggreader returns each page's payload whole, and GStreamer's oggmux puts about 25
// Opus packets on a page: the packets are found here from each page's lacing values.
func oggPackets(raw []byte) ([][]byte, error) {
	var packets [][]byte
	var partial []byte
	var serial uint32
	for page := 0; len(raw) > 0; page++ {
		if len(raw) < 27 || string(raw[:4]) != "OggS" {
			return nil, fmt.Errorf("page %d: no Ogg page (OggS) here", page)
		}
		s := binary.LittleEndian.Uint32(raw[14:18])
		segments := int(raw[26])
		if len(raw) < 27+segments {
			return nil, fmt.Errorf("page %d: truncated", page)
		}
		lacing := raw[27 : 27+segments]
		body := raw[27+segments:]
		size := 0
		for _, l := range lacing {
			size += int(l)
		}
		if len(body) < size {
			return nil, fmt.Errorf("page %d: truncated", page)
		}
		raw = body[size:]
		if page == 0 {
			serial = s
		} else if s != serial {
			continue // another logical stream
		}
		for _, l := range lacing {
			partial = append(partial, body[:l]...)
			body = body[l:]
			if l < 255 {
				packets = append(packets, partial)
				partial = nil
			}
		}
	}
	return packets, nil
}

// opusDuration is an Opus packet's duration in 48 kHz samples, from its TOC byte
// (RFC 6716, section 3.1).
func opusDuration(packet []byte) (uint32, error) {
	if len(packet) == 0 {
		return 0, errors.New("empty")
	}
	toc := packet[0]
	config := toc >> 3
	var frame uint32 // samples at 48 kHz
	switch {
	case config < 12: // SILK: 10, 20, 40, 60 ms
		frame = [4]uint32{480, 960, 1920, 2880}[config%4]
	case config < 16: // hybrid: 10, 20 ms
		frame = [2]uint32{480, 960}[config%2]
	default: // CELT: 2.5, 5, 10, 20 ms
		frame = [4]uint32{120, 240, 480, 960}[config%4]
	}
	count := uint32(1)
	switch toc & 3 {
	case 1, 2:
		count = 2
	case 3:
		if len(packet) < 2 {
			return 0, errors.New("code 3 without a frame count")
		}
		count = uint32(packet[1] & 0x3f)
	}
	if d := frame * count; d > 0 && d <= 5760 {
		return d, nil
	}
	return 0, errors.New("bad frame count")
}
