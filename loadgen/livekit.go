package main

// LiveKit through its Go server SDK: every participant connects to the room with an
// access token made here from --key/--secret; a publisher publishes its two tracks
// (the same pre-packetised RTP as elsewhere, written to pion tracks the SDK binds), a
// subscriber subscribes to everything and reads RTP without decoding. The SDK makes
// the PeerConnections (two per participant, publisher and subscriber, as LiveKit's
// clients do), with its own NACK, RTCP report and TWCC interceptors and this
// program's feedback counter; its setting engine cannot be given, so ICE gathers on
// every address of the namespace (in the lab there is only the lab address).

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/livekit/protocol/auth"
	"github.com/livekit/protocol/livekit"
	protoLogger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/interceptor"
	"github.com/pion/webrtc/v4"
)

type livekitDriver struct {
	cfg   *config
	mu    sync.Mutex
	rooms []*lksdk.Room
}

func newLiveKit(cfg *config) *livekitDriver {
	lksdk.SetLogger(protoLogger.LogRLogger(logr.Discard()))
	return &livekitDriver{cfg: cfg}
}

func (l *livekitDriver) open(context.Context) error { return nil }

func (l *livekitDriver) token(identity string, publish bool) (string, error) {
	canPublish, canSubscribe := publish, !publish
	return auth.NewAccessToken(l.cfg.key, l.cfg.secret).SetIdentity(identity).
		SetValidFor(24 * time.Hour).
		SetVideoGrant(&auth.VideoGrant{RoomJoin: true, Room: l.cfg.room,
			CanPublish: &canPublish, CanSubscribe: &canSubscribe}).ToJWT()
}

func (l *livekitDriver) connect(ctx context.Context, p *participant, publish bool,
	cb *lksdk.RoomCallback, fail func(error)) (*lksdk.Room, error) {
	token, err := l.token(p.name, publish)
	if err != nil {
		return nil, err
	}
	cb.OnDisconnectedWithReason = func(reason lksdk.DisconnectionReason) {
		fail(fmt.Errorf("LiveKit disconnected it (%s)", reason))
	}
	timeout := time.Until(deadlineOf(ctx))
	p.setState("connecting to the room")
	room, err := lksdk.ConnectToRoomWithToken(l.cfg.url, token, cb,
		lksdk.WithAutoSubscribe(!publish), lksdk.WithConnectTimeout(timeout),
		lksdk.WithInterceptors([]interceptor.Factory{feedbackCounterFactory{p}}),
		lksdk.WithIncludeDefaultInterceptors(true), lksdk.WithDisableTURN(),
		lksdk.WithDisableRegionDiscovery())
	if err != nil {
		return nil, fmt.Errorf("LiveKit %s: %w", l.cfg.url, err)
	}
	l.mu.Lock()
	l.rooms = append(l.rooms, room)
	l.mu.Unlock()
	return room, nil
}

func deadlineOf(ctx context.Context) time.Time {
	if d, ok := ctx.Deadline(); ok {
		return d
	}
	return time.Now().Add(30 * time.Second)
}

func (l *livekitDriver) publish(ctx context.Context, pub *publisher, fail func(error)) error {
	room, err := l.connect(ctx, pub.p, true, lksdk.NewRoomCallback(), fail)
	if err != nil {
		return err
	}
	pub.p.setState("publishing")
	if pub.audio != nil {
		if _, err := room.LocalParticipant.PublishTrack(pub.audio, &lksdk.TrackPublicationOptions{
			Name: "audio", Source: livekit.TrackSource_MICROPHONE, Stereo: true}); err != nil {
			return fmt.Errorf("LiveKit audio track: %w", err)
		}
	}
	if pub.video != nil {
		v := pub.media.video
		if _, err := room.LocalParticipant.PublishTrack(pub.video, &lksdk.TrackPublicationOptions{
			Name: "video", Source: livekit.TrackSource_CAMERA, VideoWidth: v.width,
			VideoHeight: v.height}); err != nil {
			return fmt.Errorf("LiveKit video track: %w", err)
		}
	}
	pub.p.setState("connecting")
	return nil
}

func (l *livekitDriver) subscribe(ctx context.Context, sub *subscriber, _ []*publisher, fail func(error)) error {
	cb := lksdk.NewRoomCallback()
	cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication,
		rp *lksdk.RemoteParticipant) {
		// the SDK reads the receiver's RTCP itself (its publication's RTCP worker)
		go sub.read(track, nil, rp.Identity())
	}
	if _, err := l.connect(ctx, sub.p, false, cb, fail); err != nil {
		return err
	}
	sub.p.setState("subscribing")
	return nil
}

// close disconnects every participant at once.
func (l *livekitDriver) close(context.Context) {
	l.mu.Lock()
	rooms := append([]*lksdk.Room(nil), l.rooms...)
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, room := range rooms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			room.Disconnect()
		}()
	}
	wg.Wait()
}
