package main

// Janus's videoroom over its plain HTTP JSON API: one session for the whole load (one
// long poll for its events, one keepalive), one handle per participant. A publisher
// joins room ROOM as a publisher (Janus gives it a feed id) and configures with its
// offer; a subscriber joins as a subscriber to every publisher's feed, answers Janus's
// offer and starts. Leaving is destroying the session (Janus hangs up every handle).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
)

const (
	janusPlugin     = "janus.plugin.videoroom"
	janusKeepalive  = 25 * time.Second // the session times out after 60 s without a request
	janusNoSuchFeed = 428
)

type janusMessage struct {
	Janus       string `json:"janus"`
	Transaction string `json:"transaction"`
	Sender      uint64 `json:"sender"`
	SessionID   uint64 `json:"session_id"`
	Data        struct {
		ID uint64 `json:"id"`
	} `json:"data"`
	Error *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"error"`
	PluginData struct {
		Plugin string          `json:"plugin"`
		Data   json.RawMessage `json:"data"`
	} `json:"plugindata"`
	Jsep   *webrtc.SessionDescription `json:"jsep"`
	Reason string                     `json:"reason"`
}

// videoroomData is what the videoroom plugin answers.
type videoroomData struct {
	Videoroom  string `json:"videoroom"`
	ID         uint64 `json:"id"`
	Configured string `json:"configured"`
	Started    string `json:"started"`
	ErrorCode  int    `json:"error_code"`
	Error      string `json:"error"`
	Streams    []struct {
		Mid    string `json:"mid"`
		FeedID uint64 `json:"feed_id"`
		Type   string `json:"type"`
	} `json:"streams"`
}

type janusDriver struct {
	cfg     *config
	base    string
	client  *http.Client
	session uint64
	next    atomic.Uint64

	mu      sync.Mutex
	waiters map[string]chan janusMessage // by transaction
	handles map[uint64]*participant      // by handle, for hang-ups
	fails   map[uint64]func(error)
	feeds   map[*publisher]uint64
	names   map[uint64]string // feed id -> publisher name
	stop    context.CancelFunc
}

func newJanus(cfg *config) *janusDriver {
	base := strings.TrimRight(cfg.url, "/")
	return &janusDriver{cfg: cfg, base: base,
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}},
		waiters: map[string]chan janusMessage{}, handles: map[uint64]*participant{},
		fails: map[uint64]func(error){}, feeds: map[*publisher]uint64{},
		names: map[uint64]string{}}
}

func (j *janusDriver) transaction() string { return "t" + strconv.FormatUint(j.next.Add(1), 36) }

// post sends a request and returns Janus's immediate answer (an error for "error").
func (j *janusDriver) post(ctx context.Context, path string, body map[string]any) (janusMessage, error) {
	var answer janusMessage
	raw, err := json.Marshal(body)
	if err != nil {
		return answer, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.base+path, bytes.NewReader(raw))
	if err != nil {
		return answer, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := j.client.Do(req)
	if err != nil {
		return answer, fmt.Errorf("Janus API %s: %w", j.base, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer, err
	}
	if resp.StatusCode != http.StatusOK {
		return answer, fmt.Errorf("Janus API answered HTTP %d to %s", resp.StatusCode, body["janus"])
	}
	if err := json.Unmarshal(data, &answer); err != nil {
		return answer, fmt.Errorf("Janus API: not JSON: %.80s", data)
	}
	if answer.Janus == "error" && answer.Error != nil {
		return answer, fmt.Errorf("Janus %s: %d %s", body["janus"], answer.Error.Code, answer.Error.Reason)
	}
	return answer, nil
}

func (j *janusDriver) open(ctx context.Context) error {
	answer, err := j.post(ctx, "", map[string]any{"janus": "create", "transaction": j.transaction()})
	if err != nil {
		return err
	}
	j.session = answer.Data.ID
	loop, stop := context.WithCancel(context.Background())
	j.stop = stop
	go j.poll(loop)
	go j.keepalive(loop)
	return nil
}

// poll is the session's long poll: it hands each event to the request waiting on its
// transaction, and turns a hang-up into its participant's failure.
func (j *janusDriver) poll(ctx context.Context) {
	url := fmt.Sprintf("%s/%d?maxev=16", j.base, j.session)
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := j.client.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond) // Janus busy: ask again shortly
			}
			continue
		}
		data, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			continue
		}
		var events []janusMessage
		if len(data) > 0 && data[0] == '{' {
			var one janusMessage
			if json.Unmarshal(data, &one) == nil {
				events = append(events, one)
			}
		} else if json.Unmarshal(data, &events) != nil {
			continue
		}
		for _, e := range events {
			j.dispatch(e)
		}
	}
}

func (j *janusDriver) dispatch(e janusMessage) {
	j.mu.Lock()
	waiter, ok := j.waiters[e.Transaction]
	if ok && e.Janus != "ack" {
		delete(j.waiters, e.Transaction)
	}
	fail := j.fails[e.Sender]
	j.mu.Unlock()
	if ok && e.Janus != "ack" {
		waiter <- e
		return
	}
	if e.Janus == "hangup" && fail != nil {
		fail(fmt.Errorf("Janus hung up its PeerConnection (%s)", e.Reason))
	}
}

func (j *janusDriver) keepalive(ctx context.Context) {
	ticker := time.NewTicker(janusKeepalive)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			_, _ = j.post(ctx, fmt.Sprintf("/%d", j.session),
				map[string]any{"janus": "keepalive", "transaction": j.transaction()})
		}
	}
}

func (j *janusDriver) attach(ctx context.Context, p *participant, fail func(error)) (uint64, error) {
	answer, err := j.post(ctx, fmt.Sprintf("/%d", j.session), map[string]any{
		"janus": "attach", "plugin": janusPlugin, "transaction": j.transaction(),
		"opaque_id": p.name})
	if err != nil {
		return 0, err
	}
	j.mu.Lock()
	j.handles[answer.Data.ID] = p
	j.fails[answer.Data.ID] = fail
	j.mu.Unlock()
	return answer.Data.ID, nil
}

// message sends a request to the videoroom plugin and returns its answer: the
// immediate one, or the event that follows Janus's "ack".
func (j *janusDriver) message(ctx context.Context, handle uint64, body map[string]any,
	jsep *webrtc.SessionDescription) (videoroomData, *webrtc.SessionDescription, error) {
	var data videoroomData
	t := j.transaction()
	waiter := make(chan janusMessage, 1)
	j.mu.Lock()
	j.waiters[t] = waiter
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		delete(j.waiters, t)
		j.mu.Unlock()
	}()
	request := map[string]any{"janus": "message", "transaction": t, "body": body}
	if jsep != nil {
		request["jsep"] = map[string]string{"type": jsep.Type.String(), "sdp": jsep.SDP}
	}
	answer, err := j.post(ctx, fmt.Sprintf("/%d/%d", j.session, handle), request)
	if err != nil {
		return data, nil, err
	}
	if answer.Janus == "ack" {
		select {
		case answer = <-waiter:
		case <-ctx.Done():
			return data, nil, fmt.Errorf("no answer from Janus to %s", body["request"])
		}
	}
	if answer.Janus == "error" && answer.Error != nil {
		return data, nil, fmt.Errorf("Janus %s: %d %s", body["request"], answer.Error.Code, answer.Error.Reason)
	}
	if err := json.Unmarshal(answer.PluginData.Data, &data); err != nil {
		return data, nil, fmt.Errorf("Janus %s: no videoroom answer", body["request"])
	}
	if data.ErrorCode != 0 {
		return data, nil, &janusError{request: fmt.Sprint(body["request"]), code: data.ErrorCode, text: data.Error}
	}
	return data, answer.Jsep, nil
}

type janusError struct {
	request string
	code    int
	text    string
}

func (e *janusError) Error() string {
	return fmt.Sprintf("videoroom %s: %d %s", e.request, e.code, e.text)
}

func (j *janusDriver) room() any {
	if n, err := strconv.ParseUint(j.cfg.room, 10, 64); err == nil {
		return n
	}
	return j.cfg.room
}

func (j *janusDriver) trickleDone(ctx context.Context, handle uint64) {
	_, _ = j.post(ctx, fmt.Sprintf("/%d/%d", j.session, handle), map[string]any{
		"janus": "trickle", "transaction": j.transaction(),
		"candidate": map[string]bool{"completed": true}})
}

func (j *janusDriver) publish(ctx context.Context, pub *publisher, fail func(error)) error {
	p := pub.p
	p.setState("attaching")
	handle, err := j.attach(ctx, p, fail)
	if err != nil {
		return err
	}
	p.setState("joining")
	joined, _, err := j.message(ctx, handle, map[string]any{"request": "join", "room": j.room(),
		"ptype": "publisher", "display": p.name}, nil)
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.feeds[pub] = joined.ID
	j.names[joined.ID] = p.name
	j.mu.Unlock()
	if err := pub.newPC(j.cfg, fail); err != nil {
		return err
	}
	offer, err := pub.pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	p.setState("gathering")
	sdp, err := gathered(ctx, pub.pc, offer)
	if err != nil {
		return err
	}
	p.setState("configuring")
	_, answer, err := j.message(ctx, handle, map[string]any{"request": "configure",
		"audio": pub.audio != nil, "video": pub.video != nil},
		&webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: sdp})
	if err != nil {
		return err
	}
	if answer == nil {
		return errors.New("Janus configured the publisher without an SDP answer")
	}
	if err := pub.pc.SetRemoteDescription(*answer); err != nil {
		return fmt.Errorf("Janus's answer: %w", err)
	}
	j.trickleDone(ctx, handle)
	p.setState("connecting")
	return nil
}

func (j *janusDriver) subscribe(ctx context.Context, sub *subscriber, pubs []*publisher, fail func(error)) error {
	p := sub.p
	p.setState("attaching")
	handle, err := j.attach(ctx, p, fail)
	if err != nil {
		return err
	}
	j.mu.Lock()
	streams := make([]map[string]uint64, 0, len(pubs))
	for _, pub := range pubs {
		streams = append(streams, map[string]uint64{"feed": j.feeds[pub]})
	}
	j.mu.Unlock()
	p.setState("joining")
	var attached videoroomData
	var offer *webrtc.SessionDescription
	for {
		attached, offer, err = j.message(ctx, handle, map[string]any{"request": "join",
			"room": j.room(), "ptype": "subscriber", "streams": streams}, nil)
		var je *janusError
		if errors.As(err, &je) && je.code == janusNoSuchFeed {
			// a publisher's PeerConnection is not up in Janus yet: ask again shortly
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-ctx.Done():
				return err
			}
		}
		break
	}
	if err != nil {
		return err
	}
	if offer == nil {
		return errors.New("Janus attached the subscriber without an SDP offer")
	}
	mids := map[string]string{}
	j.mu.Lock()
	for _, s := range attached.Streams {
		mids[s.Mid] = j.names[s.FeedID]
	}
	j.mu.Unlock()
	sub.publisherOf = func(pc *webrtc.PeerConnection, r *webrtc.RTPReceiver, _ *webrtc.TrackRemote) string {
		_, mid := transceiverOf(pc, r)
		return mids[mid]
	}
	pc, _, err := sub.newPC(j.cfg, fail)
	if err != nil {
		return err
	}
	if err := pc.SetRemoteDescription(*offer); err != nil {
		return fmt.Errorf("Janus's offer: %w", err)
	}
	answer, err := pc.CreateAnswer(nil)
	if err != nil {
		return err
	}
	p.setState("gathering")
	sdp, err := gathered(ctx, pc, answer)
	if err != nil {
		return err
	}
	p.setState("starting")
	if _, _, err := j.message(ctx, handle, map[string]any{"request": "start", "room": j.room()},
		&webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: sdp}); err != nil {
		return err
	}
	j.trickleDone(ctx, handle)
	p.setState("connecting")
	return nil
}

func (j *janusDriver) close(ctx context.Context) {
	if j.session != 0 {
		_, _ = j.post(ctx, fmt.Sprintf("/%d", j.session),
			map[string]any{"janus": "destroy", "transaction": j.transaction()})
	}
	if j.stop != nil {
		j.stop()
	}
}
