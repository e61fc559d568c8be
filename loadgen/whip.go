package main

// WHIP (RFC 9725) and WHEP: an HTTP POST of the SDP offer (application/sdp) answered by
// 201 Created with the SDP answer and the session's Location, which is DELETEd at the
// end. The endpoints are templates: {room} is --room, {id} the participant's name. A
// WHEP template with {pub} makes one session per subscriber and publisher ({pub} the
// publisher's name); without it one session per subscriber receives every publisher
// (its offer has one audio and one video transceiver per publisher).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/pion/webrtc/v4"
)

type whipDriver struct {
	cfg    *config
	client *http.Client

	mu        sync.Mutex
	locations []string

	order  sync.Mutex // publishers join in index order
	turn   *sync.Cond
	joined int
}

func newWHIP(cfg *config) *whipDriver {
	w := &whipDriver{cfg: cfg, client: &http.Client{}}
	w.turn = sync.NewCond(&w.order)
	return w
}

func (w *whipDriver) open(context.Context) error { return nil }

func (w *whipDriver) endpoint(template, id, pub string) string {
	r := strings.NewReplacer("{room}", url.PathEscape(w.cfg.room), "{id}", url.PathEscape(id),
		"{pub}", url.PathEscape(pub))
	return r.Replace(template)
}

// exchange posts an offer and returns the answer; it keeps the session's Location.
func (w *whipDriver) exchange(ctx context.Context, endpoint, offer string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(offer))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/sdp")
	resp, err := w.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("POST %s: %w", endpoint, errors.Unwrap(err))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("POST %s: HTTP %d %s", endpoint, resp.StatusCode,
			strings.Join(strings.Fields(string(body)), " "))
	}
	if loc := resp.Header.Get("Location"); loc != "" {
		if u, err := resp.Request.URL.Parse(loc); err == nil {
			w.mu.Lock()
			w.locations = append(w.locations, u.String())
			w.mu.Unlock()
		}
	}
	return string(body), nil
}

func (w *whipDriver) negotiate(ctx context.Context, p *participant, pc *webrtc.PeerConnection, endpoint string) error {
	offer, err := pc.CreateOffer(nil)
	if err != nil {
		return err
	}
	p.setState("gathering")
	sdp, err := gathered(ctx, pc, offer)
	if err != nil {
		return err
	}
	p.setState("posting the offer")
	answer, err := w.exchange(ctx, endpoint, sdp)
	if err != nil {
		return err
	}
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: answer}); err != nil {
		return fmt.Errorf("the answer of %s: %w", endpoint, err)
	}
	p.setState("connecting")
	return nil
}

// publish signals publishers one at a time, in order: an SFU that gives a WHEP
// session's transceivers to the publishers in the order they joined (latlab-sfu) then
// gives the i-th to publisher i.
func (w *whipDriver) publish(ctx context.Context, pub *publisher, fail func(error)) error {
	w.order.Lock()
	for w.joined != pub.p.index {
		w.turn.Wait()
	}
	w.order.Unlock()
	defer func() {
		w.order.Lock()
		w.joined++
		w.turn.Broadcast()
		w.order.Unlock()
	}()
	if err := pub.newPC(w.cfg, fail); err != nil {
		return err
	}
	return w.negotiate(ctx, pub.p, pub.pc, w.endpoint(w.cfg.whip, pub.p.name, ""))
}

func (w *whipDriver) subscribe(ctx context.Context, sub *subscriber, pubs []*publisher, fail func(error)) error {
	perPublisher := strings.Contains(w.cfg.whep, "{pub}")
	groups := [][]*publisher{pubs}
	if perPublisher {
		groups = groups[:0]
		for _, pub := range pubs {
			groups = append(groups, []*publisher{pub})
		}
	}
	names := map[string]string{} // a track's stream id -> its publisher, when the SFU keeps it
	for _, pub := range pubs {
		names[pub.p.name] = pub.p.name
	}
	// one session for all: the SFU's stream id if it is a publisher's name, else the
	// transceiver's place (the i-th of each kind is the i-th publisher's: they
	// published one after another, in order)
	each := len(pubs[0].tracks())
	sub.publisherOf = func(pc *webrtc.PeerConnection, r *webrtc.RTPReceiver, t *webrtc.TrackRemote) string {
		if name, ok := names[t.StreamID()]; ok {
			return name
		}
		if i, _ := transceiverOf(pc, r); i >= 0 && i/each < len(pubs) {
			return pubs[i/each].p.name
		}
		return ""
	}
	for _, group := range groups {
		pc, _, err := sub.newPC(w.cfg, fail)
		if err != nil {
			return err
		}
		for _, pub := range group {
			for _, t := range pub.tracks() {
				if _, err := pc.AddTransceiverFromKind(t.Kind(), webrtc.RTPTransceiverInit{
					Direction: webrtc.RTPTransceiverDirectionRecvonly}); err != nil {
					return err
				}
			}
		}
		pubName := ""
		if perPublisher {
			pubName = group[0].p.name
			pc.OnTrack(func(t *webrtc.TrackRemote, r *webrtc.RTPReceiver) {
				go sub.read(t, r, pubName)
			})
		}
		if err := w.negotiate(ctx, sub.p, pc, w.endpoint(w.cfg.whep, sub.p.name, pubName)); err != nil {
			return err
		}
	}
	return nil
}

// close DELETEs every session it made, all at once.
func (w *whipDriver) close(ctx context.Context) {
	w.mu.Lock()
	locations := append([]string(nil), w.locations...)
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, loc := range locations {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodDelete, loc, nil)
			if err != nil {
				return
			}
			if resp, err := w.client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
}
