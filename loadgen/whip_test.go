package main

// The whole program against a small WHIP/WHEP forwarder on the loopback address (a
// pion PeerConnection per session, every publisher's tracks forwarded to every
// subscriber): ready, the packet counts, the summary and a clean exit on SIGINT. The
// test binary runs itself as latlab-loadgen (LOADGEN_MAIN=1), so the real command line
// and signals are what is tested. The media are made with the lab's GStreamer commands.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
)

func TestMain(m *testing.M) {
	if os.Getenv("LOADGEN_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// forwarder is the test's SFU: WHIP sessions publish, WHEP sessions receive all.
type forwarder struct {
	api     *webrtc.API
	mu      sync.Mutex
	tracks  []*webrtc.TrackLocalStaticRTP
	pcs     map[string]*webrtc.PeerConnection
	next    int
	deleted atomic.Int32
	want    int           // publishers' tracks: a WHEP session waits for them all
	all     chan struct{} // closed when they are there
}

func newForwarder(t *testing.T, want int) *forwarder {
	m := &webrtc.MediaEngine{}
	if err := m.RegisterDefaultCodecs(); err != nil {
		t.Fatal(err)
	}
	var se webrtc.SettingEngine
	se.SetIncludeLoopbackCandidate(true)
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	return &forwarder{api: webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithSettingEngine(se)),
		pcs: map[string]*webrtc.PeerConnection{}, want: want, all: make(chan struct{})}
}

func (f *forwarder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodDelete {
		f.mu.Lock()
		pc := f.pcs[r.URL.Path]
		delete(f.pcs, r.URL.Path)
		f.mu.Unlock()
		if pc == nil {
			http.NotFound(w, r)
			return
		}
		_ = pc.Close()
		f.deleted.Add(1)
		return
	}
	offer, _ := io.ReadAll(r.Body)
	pc, err := f.api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		http.Error(w, err.Error(), 500)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/whip/") {
		id := strings.TrimPrefix(r.URL.Path, "/whip/room1/")
		pc.OnTrack(func(remote *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
			local, err := webrtc.NewTrackLocalStaticRTP(remote.Codec().RTPCodecCapability,
				remote.Kind().String(), id)
			if err != nil {
				return
			}
			f.mu.Lock()
			f.tracks = append(f.tracks, local)
			if len(f.tracks) == f.want {
				close(f.all)
			}
			f.mu.Unlock()
			buf := make([]byte, 1500)
			for {
				n, _, err := remote.Read(buf)
				if err != nil {
					return
				}
				_, _ = local.Write(buf[:n])
			}
		})
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: string(offer)}); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/whep/") {
		select {
		case <-f.all:
		case <-time.After(10 * time.Second):
			http.Error(w, "the publishers' tracks did not arrive", 503)
			return
		}
		f.mu.Lock()
		tracks := append([]*webrtc.TrackLocalStaticRTP(nil), f.tracks...)
		f.mu.Unlock()
		for _, track := range tracks {
			if _, err := pc.AddTrack(track); err != nil {
				http.Error(w, err.Error(), 500)
				return
			}
		}
	}
	answer, _ := pc.CreateAnswer(nil)
	done := webrtc.GatheringCompletePromise(pc)
	_ = pc.SetLocalDescription(answer)
	<-done
	f.mu.Lock()
	f.next++
	location := fmt.Sprintf("/session/%d", f.next)
	f.pcs[location] = pc
	f.mu.Unlock()
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, pc.LocalDescription().SDP)
}

// labMedia makes the load's media with the lab's GStreamer commands (docs/sfu.md).
func labMedia(t *testing.T) (string, string) {
	dir := t.TempDir()
	video, audio := filepath.Join(dir, "v.ivf"), filepath.Join(dir, "a.ogg")
	commands := [][]string{
		{"-q", "videotestsrc", "pattern=ball", "num-buffers=60", "!",
			"video/x-raw,width=640,height=360,framerate=30/1", "!", "vp8enc", "deadline=1",
			"target-bitrate=600000", "keyframe-max-dist=60", "!", "avmux_ivf", "!", "filesink",
			"location=" + video},
		{"-q", "audiotestsrc", "wave=pink-noise", "volume=0.3", "samplesperbuffer=960",
			"num-buffers=100", "!", "audio/x-raw,rate=48000,channels=2", "!", "opusenc",
			"bitrate-type=vbr", "frame-size=20", "!", "oggmux", "!", "filesink", "location=" + audio},
	}
	for _, args := range commands {
		out, err := exec.Command("gst-launch-1.0", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("gst-launch-1.0 (GStreamer, scripts/setup.sh installs it): %v %s", err, out)
		}
	}
	return video, audio
}

type loadgenRun struct {
	cmd    *exec.Cmd
	lines  chan string
	stderr strings.Builder
}

func startLoadgen(t *testing.T, args ...string) *loadgenRun {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "LOADGEN_MAIN=1")
	run := &loadgenRun{cmd: cmd, lines: make(chan string, 16)}
	cmd.Stderr = &run.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	go func() {
		scanner := bufio.NewScanner(stdout)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			run.lines <- scanner.Text()
		}
		close(run.lines)
	}()
	return run
}

func (r *loadgenRun) line(t *testing.T, timeout time.Duration) string {
	select {
	case line, ok := <-r.lines:
		if !ok {
			_ = r.cmd.Wait()
			t.Fatalf("latlab-loadgen ended (%v): %s", r.cmd.ProcessState, r.stderr.String())
		}
		return line
	case <-time.After(timeout):
		t.Fatalf("no line from latlab-loadgen in %s: %s", timeout, r.stderr.String())
	}
	return ""
}

func TestWHIPAndWHEPRoundTripThroughAForwarder(t *testing.T) {
	video, audio := labMedia(t)
	fwd := newForwarder(t, 4)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: fwd}
	go func() { _ = server.Serve(listener) }()
	defer server.Close()
	base := "http://" + listener.Addr().String()
	stats := filepath.Join(t.TempDir(), "stats.jsonl")

	run := startLoadgen(t, "--sfu", "whip", "--room", "room1", "--publishers", "2",
		"--subscribers", "3", "--video", video, "--audio", audio, "--ice-ip", "127.0.0.1",
		"--whip", base+"/whip/{room}/{id}", "--whep", base+"/whep/{room}/{id}",
		"--ready-timeout", "20s", "--stats", stats)
	if line := run.line(t, 25*time.Second); line != "ready" {
		t.Fatalf("first line %q, want ready", line)
	}
	// a little more than a second of media after ready, waited on the stats file's lines
	waitStatsLines(t, stats, 3, 10*time.Second)
	stopped := time.Now()
	if err := run.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	var summary report
	if err := json.Unmarshal([]byte(run.line(t, 3*time.Second)), &summary); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- run.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v: %s", err, run.stderr.String())
		}
	case <-time.After(3 * time.Second):
		t.Fatal("not exited 3 s after SIGINT")
	}
	if took := time.Since(stopped); took > 2*time.Second {
		t.Errorf("took %s from SIGINT to exit, the contract says 2 s", took)
	}
	if summary.Type != "summary" || !summary.Ready || len(summary.Parts) != 5 {
		t.Fatalf("summary %+v", summary)
	}
	if got := fwd.deleted.Load(); got != 5 {
		t.Errorf("%d sessions DELETEd, want 5", got)
	}
	sent := map[string]uint64{}
	for _, p := range summary.Parts[:2] {
		for _, tr := range p.Tracks {
			sent[p.Name+"/"+tr.Kind] = tr.Packets
			if tr.SSRC == 0 {
				t.Errorf("%s's %s track has no SSRC in the summary", p.Name, tr.Kind)
			}
		}
	}
	for _, p := range summary.Parts[2:] {
		if len(p.Tracks) != 4 {
			t.Fatalf("%s received %d tracks, want 4", p.Name, len(p.Tracks))
		}
		for _, tr := range p.Tracks {
			want := sent[tr.Publisher+"/"+tr.Kind]
			// a subscriber joins after its publishers send: it misses their first
			// packets (its set-up, well under a second on the loopback: 50 video and
			// 50 audio packets at most here)
			if tr.Packets == 0 || tr.Packets > want || want-tr.Packets > 50 {
				t.Errorf("%s got %d of %s's %d %s packets", p.Name, tr.Packets, tr.Publisher, want, tr.Kind)
			}
			if *tr.Lost != 0 {
				t.Errorf("%s lost %d on the loopback", p.Name, *tr.Lost)
			}
		}
	}
}

func waitStatsLines(t *testing.T, path string, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		raw, _ := os.ReadFile(path)
		ready := 0
		for _, line := range strings.Split(string(raw), "\n") {
			var r report
			if json.Unmarshal([]byte(line), &r) == nil && r.Ready {
				ready++
			}
		}
		if ready >= n {
			return
		}
		time.Sleep(50 * time.Millisecond) // polling a file the program writes once a second
	}
	t.Fatalf("fewer than %d ready stats lines in %s", n, timeout)
}

func TestFailuresAreOneLineNamingWhatFailed(t *testing.T) {
	video, audio := labMedia(t)
	// Janus's API refuses the connection: the signalling fails at once
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := refused.Addr().String()
	refused.Close()
	// a WHEP endpoint that never gets the publishers' tracks: the subscriber is not
	// ready in time
	fwd := newForwarder(t, 5)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: fwd}
	go func() { _ = server.Serve(listener) }()
	defer server.Close()
	base := "http://" + listener.Addr().String()
	cases := map[string][]string{
		"error: janus: Janus API http://" + addr + "/janus: ": {"--sfu", "janus",
			"--url", "http://" + addr + "/janus"},
		"error: subscriber 0: not ready after 3s (posting the offer; RTP on 0 of 2 tracks)": {
			"--sfu", "whip", "--whip", base + "/whip/{room}/{id}", "--whep", base + "/whep/{room}/{id}"},
	}
	for want, args := range cases {
		args = append(args, "--publishers", "1", "--subscribers", "1", "--video", video,
			"--audio", audio, "--ice-ip", "127.0.0.1", "--ready-timeout", "3s")
		run := startLoadgen(t, args...)
		done := make(chan error, 1)
		go func() {
			for range run.lines {
			}
			done <- run.cmd.Wait()
		}()
		select {
		case err := <-done:
			code := -1
			if exit, ok := err.(*exec.ExitError); ok {
				code = exit.ExitCode()
			}
			lines := strings.Split(strings.TrimSpace(run.stderr.String()), "\n")
			if code != 1 || len(lines) != 1 || !strings.HasPrefix(lines[0], want) {
				t.Errorf("exit %d, stderr %q; want 1 and one line starting %q", code, lines, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%v: still running 10 s later", args)
		}
	}
}
