package main

// Counters every participant keeps, and the JSON lines they are reported in: a
// `stats` line per second (--stats FILE) and the final `summary` line on stdout.
// Counters are atomics written by the one goroutine that owns them (a send loop, a
// track's read loop, an RTCP interceptor) and read by the reporter once a second.

import (
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pion/rtcp"
	"golang.org/x/sys/unix"
)

// feedback counts RTCP feedback a participant's PeerConnections sent and received.
type feedback struct {
	nacks, nackedPackets, plis, firs atomic.Uint64
}

func (f *feedback) count(packets []rtcp.Packet) {
	for _, p := range packets {
		switch p := p.(type) {
		case *rtcp.TransportLayerNack:
			f.nacks.Add(1)
			n := 0
			for _, pair := range p.Nacks {
				n += len(pair.PacketList())
			}
			f.nackedPackets.Add(uint64(n))
		case *rtcp.PictureLossIndication:
			f.plis.Add(1)
		case *rtcp.FullIntraRequest:
			f.firs.Add(1)
		}
	}
}

// trackStats is one track a participant sends or receives.
type trackStats struct {
	kind      string // "audio" or "video"
	publisher string // a received track's publisher, when the signalling says
	ssrc      atomic.Uint32
	packets   atomic.Uint64
	bytes     atomic.Uint64
	// receiver only
	lost       atomic.Int64
	jitterBits atomic.Uint64 // float64 ms
	// sender only
	lateFrames atomic.Uint64 // sent more than lateAfter behind the schedule
	lagMaxUs   atomic.Uint64 // largest lag behind the schedule, µs
}

const lateAfter = 20 * time.Millisecond

type participant struct {
	index int
	role  string // "publisher" or "subscriber"
	name  string

	sent, received feedback

	mu     sync.Mutex
	tracks []*trackStats
	state  string // what it is doing, for a failure's one line
	ready  bool
}

func (p *participant) label() string { return p.role + " " + strconv.Itoa(p.index) }

func (p *participant) setState(s string) {
	p.mu.Lock()
	p.state = s
	p.mu.Unlock()
}

func (p *participant) addTrack(t *trackStats) {
	p.mu.Lock()
	p.tracks = append(p.tracks, t)
	p.mu.Unlock()
}

func (p *participant) trackList() []*trackStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*trackStats(nil), p.tracks...)
}

// JSON shapes of the report lines.

type trackReport struct {
	Kind       string   `json:"kind"`
	Publisher  string   `json:"publisher,omitempty"`
	SSRC       uint32   `json:"ssrc"`
	Packets    uint64   `json:"packets"`
	Bytes      uint64   `json:"bytes"`
	Lost       *int64   `json:"lost,omitempty"`
	JitterMs   *float64 `json:"jitter_ms,omitempty"`
	LateFrames *uint64  `json:"late_frames,omitempty"`
	LagMaxMs   *float64 `json:"lag_max_ms,omitempty"`
}

type participantReport struct {
	Name          string        `json:"name"`
	Role          string        `json:"role"`
	Index         int           `json:"index"`
	Ready         bool          `json:"ready"`
	Packets       uint64        `json:"packets"`
	Bytes         uint64        `json:"bytes"`
	Lost          int64         `json:"lost"`
	NacksSent     uint64        `json:"nacks_sent"`
	NackedSent    uint64        `json:"nacked_packets_sent"`
	PLIsSent      uint64        `json:"plis_sent"`
	FIRsSent      uint64        `json:"firs_sent"`
	NacksReceived uint64        `json:"nacks_received"`
	NackedRecv    uint64        `json:"nacked_packets_received"`
	PLIsReceived  uint64        `json:"plis_received"`
	FIRsReceived  uint64        `json:"firs_received"`
	Tracks        []trackReport `json:"tracks"`
}

type report struct {
	Type       string              `json:"type"` // "stats" or "summary"
	SFU        string              `json:"sfu"`
	MonoNs     int64               `json:"monotonic_ns"` // CLOCK_MONOTONIC at the report
	ElapsedS   float64             `json:"elapsed_s"`
	CPUs       float64             `json:"cpu_s"` // this process's user+system CPU time
	Ready      bool                `json:"ready"`
	ReadyS     *float64            `json:"ready_s"` // from the start to `ready`
	Publishers int                 `json:"publishers"`
	Subscrs    int                 `json:"subscribers"`
	Totals     map[string]uint64   `json:"totals"`
	Parts      []participantReport `json:"participants"`
}

func (p *participant) report() participantReport {
	r := participantReport{Name: p.name, Role: p.role, Index: p.index, Tracks: []trackReport{}}
	p.mu.Lock()
	r.Ready = p.ready
	p.mu.Unlock()
	r.NacksSent, r.NackedSent = p.sent.nacks.Load(), p.sent.nackedPackets.Load()
	r.PLIsSent, r.FIRsSent = p.sent.plis.Load(), p.sent.firs.Load()
	r.NacksReceived, r.NackedRecv = p.received.nacks.Load(), p.received.nackedPackets.Load()
	r.PLIsReceived, r.FIRsReceived = p.received.plis.Load(), p.received.firs.Load()
	for _, t := range p.trackList() {
		tr := trackReport{Kind: t.kind, Publisher: t.publisher, SSRC: t.ssrc.Load(),
			Packets: t.packets.Load(), Bytes: t.bytes.Load()}
		if p.role == "subscriber" {
			lost := t.lost.Load()
			jitter := round3(math.Float64frombits(t.jitterBits.Load()))
			tr.Lost, tr.JitterMs = &lost, &jitter
			r.Lost += lost
		} else {
			late := t.lateFrames.Load()
			lag := round3(float64(t.lagMaxUs.Load()) / 1000)
			tr.LateFrames, tr.LagMaxMs = &late, &lag
		}
		r.Packets += tr.Packets
		r.Bytes += tr.Bytes
		r.Tracks = append(r.Tracks, tr)
	}
	return r
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

func monotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return round3(tv(ru.Utime) + tv(ru.Stime))
}
