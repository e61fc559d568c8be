// latlab-loadgen: light WebRTC participants for load on an SFU (docs/sfu.md, "Light
// participants"). One process runs every participant as goroutines: publishers send
// pre-encoded VP8 and Opus from files in real time, subscribers receive every
// publisher's tracks and read RTP without decoding; real ICE, DTLS, SRTP and RTCP
// feedback, no codec work.
//
// Output: `ready` on stdout once every publisher sends and every subscriber has RTP on
// every expected track; one `error: ...` line on stderr and exit 1 on a failure or
// when not ready within --ready-timeout; on SIGINT/SIGTERM it leaves the room, prints
// one `{"type":"summary",...}` line and exits 0.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pion/webrtc/v4"
)

const usage = `usage: latlab-loadgen --sfu janus|livekit|whip --url URL [--room ROOM]
  --publishers N --subscribers M [--video FILE.ivf] [--audio FILE.ogg] --ice-ip IPV4
  [--key K --secret S] [--whip URL --whep URL] [--ready-timeout 30s]
  [--stats FILE.jsonl] [--name PREFIX]
The secret may come from LATLAB_LOADGEN_SECRET instead of --secret.`

// leaveBudget bounds leaving the room at the end: the summary follows within 2 s.
const leaveBudget = 1500 * time.Millisecond

type config struct {
	sfu, url, room          string
	publishers, subscribers int
	video, audio            string
	iceIP                   net.IP
	key, secret             string
	whip, whep              string
	readyTimeout            time.Duration
	stats                   string
	name                    string
}

// secretVariable may hold LiveKit's API secret instead of --secret, which every user of
// the machine could read in the process list.
const secretVariable = "LATLAB_LOADGEN_SECRET"

func parseArgs(args []string) (*config, error) {
	cfg := &config{}
	fs := flag.NewFlagSet("latlab-loadgen", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cfg.sfu, "sfu", "", "")
	fs.StringVar(&cfg.url, "url", "", "")
	fs.StringVar(&cfg.room, "room", "", "")
	fs.IntVar(&cfg.publishers, "publishers", 1, "")
	fs.IntVar(&cfg.subscribers, "subscribers", 1, "")
	fs.StringVar(&cfg.video, "video", "", "")
	fs.StringVar(&cfg.audio, "audio", "", "")
	iceIP := fs.String("ice-ip", "", "")
	fs.StringVar(&cfg.key, "key", "", "")
	fs.StringVar(&cfg.secret, "secret", "", "")
	fs.StringVar(&cfg.whip, "whip", "", "")
	fs.StringVar(&cfg.whep, "whep", "", "")
	fs.DurationVar(&cfg.readyTimeout, "ready-timeout", 30*time.Second, "")
	fs.StringVar(&cfg.stats, "stats", "", "")
	fs.StringVar(&cfg.name, "name", "load", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, errors.New(strings.ReplaceAll(err.Error(), "flag provided but not defined: -", "unknown flag --"))
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	switch cfg.sfu {
	case "janus":
		if cfg.room == "" {
			cfg.room = "1234"
		}
	case "livekit":
		if cfg.secret == "" {
			cfg.secret = os.Getenv(secretVariable)
		}
		if cfg.key == "" || cfg.secret == "" {
			return nil, errors.New("--sfu livekit needs --key and --secret or " + secretVariable + " (the server's API key)")
		}
	case "whip":
		if cfg.whip == "" || cfg.whep == "" {
			return nil, errors.New("--sfu whip needs --whip URL and --whep URL")
		}
	case "":
		return nil, errors.New("--sfu is required: janus, livekit or whip")
	default:
		return nil, fmt.Errorf("--sfu %q: not janus, livekit or whip", cfg.sfu)
	}
	if cfg.room == "" {
		cfg.room = "latlab"
	}
	if cfg.url == "" && cfg.sfu != "whip" {
		return nil, fmt.Errorf("--sfu %s needs --url", cfg.sfu)
	}
	if cfg.publishers < 1 {
		return nil, fmt.Errorf("--publishers %d: at least 1", cfg.publishers)
	}
	if cfg.subscribers < 0 {
		return nil, fmt.Errorf("--subscribers %d: not a count", cfg.subscribers)
	}
	if cfg.video == "" && cfg.audio == "" {
		return nil, errors.New("nothing to send: give --video FILE.ivf, --audio FILE.ogg or both")
	}
	if cfg.iceIP = net.ParseIP(*iceIP).To4(); cfg.iceIP == nil {
		return nil, fmt.Errorf("--ice-ip %q: not an IPv4 address", *iceIP)
	}
	if cfg.readyTimeout <= 0 {
		return nil, fmt.Errorf("--ready-timeout %s: not a duration above 0", cfg.readyTimeout)
	}
	if cfg.name == "" || strings.ContainsAny(cfg.name, "/{} ") {
		return nil, fmt.Errorf("--name %q: a non-empty name without spaces, slashes or braces", cfg.name)
	}
	return cfg, nil
}

// driver is one SFU's signalling.
type driver interface {
	open(ctx context.Context) error
	// publish signals a publisher in (its media starts once connected)
	publish(ctx context.Context, pub *publisher, fail func(error)) error
	// subscribe signals a subscriber in to every publisher's tracks
	subscribe(ctx context.Context, sub *subscriber, pubs []*publisher, fail func(error)) error
	// close leaves the room (bounded by ctx)
	close(ctx context.Context)
}

func main() {
	cfg, err := parseArgs(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		fmt.Println(usage)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
	os.Exit(run(cfg, os.Stdout, os.Stderr))
}

// loadgen is one run: its participants, the failure that ends it, the reporter.
type loadgen struct {
	cfg     *config
	media   *media
	drv     driver
	started time.Time
	pubs    []*publisher
	subs    []*subscriber
	parts   []*participant
	ready   bool
	readyAt time.Duration
	readyMu sync.Mutex

	failOnce sync.Once
	failed   chan error
	stopping chan struct{}
}

func (lg *loadgen) fail(p *participant, err error) {
	select {
	case <-lg.stopping:
		return // leaving: hang-ups are ours
	default:
	}
	lg.failOnce.Do(func() { lg.failed <- fmt.Errorf("%s: %v", p.label(), err) })
}

func newDriver(cfg *config) driver {
	switch cfg.sfu {
	case "janus":
		return newJanus(cfg)
	case "livekit":
		return newLiveKit(cfg)
	default:
		return newWHIP(cfg)
	}
}

func run(cfg *config, stdout, stderr io.Writer) int {
	m := &media{}
	var err error
	if cfg.video != "" {
		if m.video, err = loadVideo(cfg.video); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
	}
	if cfg.audio != "" {
		if m.audio, err = loadAudio(cfg.audio); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 1
		}
	}
	lg := &loadgen{cfg: cfg, media: m, drv: newDriver(cfg), started: time.Now(),
		failed: make(chan error, 1), stopping: make(chan struct{})}
	tracksEach := 0
	if m.video != nil {
		tracksEach++
	}
	if m.audio != nil {
		tracksEach++
	}
	for i := 0; i < cfg.publishers; i++ {
		p := &participant{index: i, role: "publisher", name: fmt.Sprintf("%s-pub-%d", cfg.name, i), state: "waiting"}
		pub, err := newPublisher(p, cfg.publishers, m)
		if err != nil {
			fmt.Fprintf(stderr, "error: %s: %v\n", p.label(), err)
			return 1
		}
		lg.pubs = append(lg.pubs, pub)
		lg.parts = append(lg.parts, p)
	}
	for i := 0; i < cfg.subscribers; i++ {
		p := &participant{index: i, role: "subscriber", name: fmt.Sprintf("%s-sub-%d", cfg.name, i), state: "waiting"}
		lg.subs = append(lg.subs, newSubscriber(p, cfg.publishers*tracksEach))
		lg.parts = append(lg.parts, p)
	}

	var statsFile *os.File
	if cfg.stats != "" {
		if statsFile, err = os.Create(cfg.stats); err != nil {
			fmt.Fprintf(stderr, "error: --stats: %v\n", err)
			return 1
		}
		defer statsFile.Close()
	}

	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(signals)

	media, stopMedia := context.WithCancel(context.Background())
	defer stopMedia()
	setup, stopSetup := context.WithTimeout(context.Background(), cfg.readyTimeout)
	defer stopSetup()
	readyCh := make(chan struct{})
	go lg.setUp(setup, media, readyCh)

	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	timeout := time.NewTimer(cfg.readyTimeout)
	defer timeout.Stop()
	code := 0
loop:
	for {
		select {
		case <-readyCh:
			readyCh = nil
			timeout.Stop()
			lg.readyMu.Lock()
			lg.ready = true
			lg.readyAt = time.Since(lg.started)
			lg.readyMu.Unlock()
			fmt.Fprintln(stdout, "ready")
		case <-timeout.C:
			fmt.Fprintf(stderr, "error: %s\n", lg.notReady())
			code = 1
			break loop
		case err := <-lg.failed:
			fmt.Fprintf(stderr, "error: %v\n", err)
			code = 1
			break loop
		case <-signals:
			break loop
		case <-ticker.C:
			if statsFile != nil {
				lg.write(statsFile, "stats")
			}
		}
	}
	close(lg.stopping)
	stopSetup()
	stopMedia()
	final := lg.snapshot("summary")
	lg.leave()
	if statsFile != nil {
		lg.write(statsFile, "stats")
	}
	if code == 0 {
		line, _ := json.Marshal(final)
		fmt.Fprintf(stdout, "%s\n", line)
	}
	return code
}

// setUp signals every publisher in, then (once every publisher sends) every
// subscriber, all concurrently within each group, and closes ready when every
// subscriber has RTP on every expected track.
func (lg *loadgen) setUp(ctx, media context.Context, ready chan<- struct{}) {
	if err := lg.drv.open(ctx); err != nil {
		lg.failOnce.Do(func() { lg.failed <- fmt.Errorf("%s: %v", lg.cfg.sfu, err) })
		return
	}
	var wg sync.WaitGroup
	for _, pub := range lg.pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) { lg.fail(pub.p, err) }
			if err := lg.drv.publish(ctx, pub, fail); err != nil {
				lg.setupFailed(ctx, pub.p, err)
				return
			}
			go pub.run(media)
			select {
			case <-pub.sending:
				pub.p.mu.Lock()
				pub.p.ready = true
				pub.p.mu.Unlock()
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	if !lg.allReady(lg.pubs) {
		return
	}
	for _, sub := range lg.subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) { lg.fail(sub.p, err) }
			if err := lg.drv.subscribe(ctx, sub, lg.pubs, fail); err != nil {
				lg.setupFailed(ctx, sub.p, err)
				return
			}
			select {
			case <-sub.allFlow:
				sub.p.mu.Lock()
				sub.p.ready = true
				sub.p.state = "receiving"
				sub.p.mu.Unlock()
			case <-ctx.Done():
			}
		}()
	}
	wg.Wait()
	for _, sub := range lg.subs {
		if !sub.p.isReady() {
			return
		}
	}
	close(ready)
}

// setupFailed reports a participant's signalling error, unless the set-up ran out of
// time: then the ready timeout's line says who was not ready and what it was doing.
func (lg *loadgen) setupFailed(ctx context.Context, p *participant, err error) {
	if ctx.Err() == nil {
		lg.fail(p, err)
	}
}

func (p *participant) isReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

func (lg *loadgen) allReady(pubs []*publisher) bool {
	for _, pub := range pubs {
		if !pub.p.isReady() {
			return false
		}
	}
	return true
}

// notReady is the timeout's one line: the first participant that is not ready and
// what it was doing.
func (lg *loadgen) notReady() string {
	waited := fmt.Sprintf("not ready after %s", lg.cfg.readyTimeout)
	for _, pub := range lg.pubs {
		if !pub.p.isReady() {
			pub.p.mu.Lock()
			state := pub.p.state
			pub.p.mu.Unlock()
			return fmt.Sprintf("%s: %s (%s)", pub.p.label(), waited, state)
		}
	}
	for _, sub := range lg.subs {
		if !sub.p.isReady() {
			sub.mu.Lock()
			flowing := sub.flowing
			sub.mu.Unlock()
			sub.p.mu.Lock()
			state := sub.p.state
			sub.p.mu.Unlock()
			return fmt.Sprintf("%s: %s (%s; RTP on %d of %d tracks)", sub.p.label(), waited,
				state, flowing, sub.expected)
		}
	}
	return waited
}

func (lg *loadgen) snapshot(kind string) report {
	lg.readyMu.Lock()
	ready, readyAt := lg.ready, round3(lg.readyAt.Seconds())
	lg.readyMu.Unlock()
	r := report{Type: kind, SFU: lg.cfg.sfu, MonoNs: monotonicNs(),
		ElapsedS: round3(time.Since(lg.started).Seconds()), CPUs: cpuSeconds(), Ready: ready,
		Publishers: len(lg.pubs), Subscrs: len(lg.subs), Totals: map[string]uint64{}}
	for _, key := range []string{"sent_packets", "sent_bytes", "received_packets",
		"received_bytes", "lost", "nacks_sent", "plis_sent", "nacks_received", "plis_received"} {
		r.Totals[key] = 0
	}
	if ready {
		r.ReadyS = &readyAt
	}
	for _, p := range lg.parts {
		pr := p.report()
		r.Parts = append(r.Parts, pr)
		prefix := "received_"
		if p.role == "publisher" {
			prefix = "sent_"
		}
		r.Totals[prefix+"packets"] += pr.Packets
		r.Totals[prefix+"bytes"] += pr.Bytes
		if pr.Lost > 0 {
			r.Totals["lost"] += uint64(pr.Lost)
		}
		r.Totals["nacks_sent"] += pr.NacksSent
		r.Totals["plis_sent"] += pr.PLIsSent
		r.Totals["nacks_received"] += pr.NacksReceived
		r.Totals["plis_received"] += pr.PLIsReceived
	}
	return r
}

func (lg *loadgen) write(w io.Writer, kind string) {
	line, err := json.Marshal(lg.snapshot(kind))
	if err == nil {
		_, _ = w.Write(append(line, '\n'))
	}
}

// leave tells the SFU every participant is going and closes every PeerConnection, all
// at once, within leaveBudget.
func (lg *loadgen) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), leaveBudget)
	defer cancel()
	done := make(chan struct{})
	go func() {
		lg.drv.close(ctx)
		var wg sync.WaitGroup
		closePC := func(pc *webrtc.PeerConnection) {
			defer wg.Done()
			_ = pc.Close()
		}
		for _, pub := range lg.pubs {
			if pub.pc != nil {
				wg.Add(1)
				go closePC(pub.pc)
			}
		}
		for _, sub := range lg.subs {
			sub.mu.Lock()
			for _, pc := range sub.pcs {
				wg.Add(1)
				go closePC(pc)
			}
			sub.mu.Unlock()
		}
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
