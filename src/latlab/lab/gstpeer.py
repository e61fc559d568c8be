"""latlab's GStreamer webrtcbin peer (a program run with the system's ``/usr/bin/python3``).

``python3 gstpeer.py --url ws://10.78.0.1:8080/ws --id bob --peer alice --role callee
--ice 10.77.0.2`` joins latlab's page server like a browser page does, and makes a 1:1
Opus call through ``webrtcbin`` (``webrtcbin`` is named ``wb``)::

    audiotestsrc name=src (live, sine, 10 ms buffers) ! AUDIO_CAPS ! audioconvert
      ! opusenc name=enc ! rtpopuspay name=pay pt=111 ! wb.
    wb. ! rtpopusdepay name=depay ! opusdec name=dec ! audioconvert name=rxconv
      ! fakesink name=sink sync=true

With ``--record FRAGMENT`` (the black box records what it receives: the lab's
``${signal.sink}``) a tee in front of the sink feeds it: ``rxconv ! tee name=rxtee !
queue ! fakesink ... rxtee. ! FRAGMENT``.

It signals only ICE candidates of ``--ice`` (its host's address on the call's link).
It sends the page server what the runner waits for: ``hello``, ``state`` (``ice``,
``connection``, ``signaling``: webrtcbin's states by their nicks), ``media`` (``side``
``send``: the first buffer into webrtcbin once connected: the payloader's packets are
dropped until then; ``recv``: the first decoded
buffer at the sink; ``t_ns``: CLOCK_MONOTONIC) and ``console`` (its log lines).

In a room (``--janus URL --room N --feed ID`` or ``--whip URL``) it is a publisher
through an SFU instead: it still reports to the page server, but its one offer goes to
the SFU once webrtcbin gathered its candidates (no trickle; only ``--ice``'s are kept):
to Janus's videoroom over its HTTP API (a session, the plugin, ``join`` as publisher
``ID``, ``configure`` with the offer; the answer comes as an event of the session's long
poll, which also keeps the session alive) or as a WHIP POST (RFC 9725: the answer in the
reply, the session's ``Location`` deleted at the end). It sends, and receives nothing.

SIGINT or SIGTERM: EOS into both paths (at the test source, and at the receiver's
input: webrtcbin's network source never ends), wait until it reached webrtcbin's sink
pad and the fakesink (and the recording's file, with ``--record``; at most
``EOS_WAIT_S``), stop, exit 0 (the latlab tracer, when
loaded, completes its trace at exit). An error of the
pipeline or of the signalling: one ``error:`` line on stderr, exit 1.

Only the standard library and ``gi`` (PyGObject with the Gst, GstWebRTC and GstSdp
typelibs) are used: the project's virtualenv has no ``gi``, the system python no aiohttp,
so the WebSocket client is a minimal RFC 6455 one (text frames, ping, close).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any
from urllib.parse import urlsplit

DEFAULT_AUDIO_CAPS = "audio/x-raw,rate=48000,channels=1"
DEFAULT_LATENCY_MS = 40
OPUS_PT = 111
EOS_WAIT_S = 2.0
RTP_CAPS = f"application/x-rtp,media=audio,encoding-name=OPUS,payload={OPUS_PT},clock-rate=48000"


def send_pipeline(audio_caps: str, latency_ms: int, noise: bool = False) -> str:
    """The sending half and webrtcbin, as a gst-launch description. With ``noise`` (a
    room's publisher) pink noise in variable-bitrate Opus: a steady tone in constant
    bitrate gives packets of one size, which nothing in a header tells apart through an
    SFU (docs/sfu.md)."""
    sound = "wave=pink-noise" if noise else "wave=sine freq=660"
    rate = " bitrate-type=vbr" if noise else ""
    return (
        f"webrtcbin name=wb bundle-policy=max-bundle latency={latency_ms} "
        f"audiotestsrc name=src is-live=true {sound} volume=0.3 samplesperbuffer=480 "
        f"! {audio_caps} ! audioconvert name=txconv ! opusenc name=enc frame-size=20{rate} "
        f"! rtpopuspay name=pay pt={OPUS_PT} ! {RTP_CAPS} ! wb."
    )


RECV_BIN = "rtpopusdepay name=depay ! opusdec name=dec ! audioconvert name=rxconv ! fakesink name=sink sync=true"  # noqa: E501


def recv_bin(record: str = "") -> str:
    """The receiving half; with ``record`` (the black box's ``${signal.sink}``, given by
    the lab) a branch off a tee in front of the sink records what it plays."""
    if not record:
        return RECV_BIN
    head = RECV_BIN.rsplit(" ! fakesink", 1)[0]
    return f"{head} ! tee name=rxtee ! queue ! fakesink name=sink sync=true rxtee. ! {record}"


class WebSocketClosed(Exception):
    """The server closed the WebSocket."""


class WebSocket:
    """A minimal WebSocket client: text frames out (masked), text frames in."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        parts = urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        self.sock = socket.create_connection((parts.hostname, parts.port or 80), timeout_s)
        self.lock = threading.Lock()
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise WebSocketClosed(f"{url}: connection closed during the handshake")
            head += chunk
        head, _, self.buffer = head.partition(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0].decode(errors="replace")
        if " 101 " not in status + " ":
            raise WebSocketClosed(f"{url}: handshake refused: {status}")
        self.sock.settimeout(None)

    def _frame(self, opcode: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        with self.lock:
            self.sock.sendall(header + mask + masked)

    def send(self, obj: dict[str, Any]) -> None:
        """Send ``obj`` as one JSON text frame."""
        self._frame(0x1, json.dumps(obj, separators=(",", ":")).encode())

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise WebSocketClosed("the page server closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self) -> str:
        """The next text message (pings answered, fragments joined); WebSocketClosed."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._read(8))
            payload = self._read(n)  # a server does not mask
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise WebSocketClosed("the page server closed the WebSocket")
            if opcode == 0x9:
                self._frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if b0 & 0x80:
                    return message.decode(errors="replace")

    def close(self) -> None:
        """Send a close frame and close the socket."""
        with contextlib.suppress(OSError):
            self._frame(0x8, struct.pack("!H", 1000))
        self.sock.close()


class Peer:
    """The pipeline, webrtcbin's signalling and the peer's reports to the page server."""

    def __init__(self, args: argparse.Namespace, ws: WebSocket, gst: Any) -> None:
        self.args = args
        self.ws = ws
        self.Gst, self.GstWebRTC, self.GstSdp, self.GLib = gst
        self.loop = self.GLib.MainLoop()
        self.failure: str | None = None
        self.stopping = False
        self.connected = False
        self.pending_ice: list[dict[str, Any]] = []
        # Never read webrtcbin's properties from this thread: its getter takes the lock
        # webrtcbin holds while it calls back into Python (a deadlock on the GIL).
        self.have_remote = False
        self.rx: Any = None
        self.eos_pending: set[str] = set()
        in_room = bool(args.janus or args.whip)
        self.pipe = self.Gst.parse_launch(
            send_pipeline(args.audio_caps, args.latency_ms, noise=in_room)
        )
        self.wb = self.pipe.get_by_name("wb")
        self.sfu = SfuSignalling(args) if args.janus or args.whip else None
        self.wb.connect("on-ice-candidate", self.on_ice)
        self.wb.connect("pad-added", self.on_pad)
        if args.role == "caller" or self.sfu is not None:
            self.wb.connect("on-negotiation-needed", self.on_negotiation_needed)
        if self.sfu is not None:
            self.wb.connect("notify::ice-gathering-state", self.on_gathering)
        self.offered = False
        for what in ("ice-connection-state", "connection-state", "signaling-state"):
            self.wb.connect(f"notify::{what}", self.on_state)
        bus = self.pipe.get_bus()
        bus.add_signal_watch()
        bus.connect("message", self.on_bus)
        pay = self.pipe.get_by_name("pay").get_static_pad("src")
        pay.add_probe(self.Gst.PadProbeType.BUFFER, self.drop_until_connected)

    # --- reports ------------------------------------------------------------------
    def log(self, text: str, level: str = "log") -> None:
        """A log line on stdout and as a ``console`` record."""
        print(f"{time.monotonic():.3f} {text}", flush=True)
        self.post({"type": "console", "level": level, "text": text})

    def post(self, obj: dict[str, Any]) -> None:
        """Send ``obj`` to the page server (dropped once the socket is gone)."""
        with contextlib.suppress(OSError):
            self.ws.send(obj)

    def fail(self, text: str) -> None:
        """Record the first failure and stop the main loop (exit code 1)."""
        if self.failure is None:
            self.failure = text
            self.log(f"error: {text}", "error")
        self.loop.quit()

    # --- GStreamer ----------------------------------------------------------------
    def on_bus(self, _bus: Any, msg: Any) -> None:
        Gst = self.Gst
        if msg.type == Gst.MessageType.ERROR:
            err, debug = msg.parse_error()
            self.fail(f"{msg.src.get_name()}: {err.message} ({debug or 'no details'})")
        elif msg.type == Gst.MessageType.WARNING:
            err, _ = msg.parse_warning()
            self.log(f"warning: {msg.src.get_name()}: {err.message}", "warn")
        elif msg.type == Gst.MessageType.EOS:
            self.log("EOS")
            self.loop.quit()

    def on_state(self, wb: Any, spec: Any) -> None:
        value = wb.get_property(spec.name).value_nick
        what = {"ice-connection-state": "ice", "connection-state": "connection",
                "signaling-state": "signaling"}[spec.name]  # fmt: skip
        self.post({"type": "state", "what": what, "value": value})
        if what == "connection" and value == "connected" and not self.connected:
            self.connected = True
            self.first_buffer(self.wb.get_static_pad("sink_0"), "send")
        elif what == "connection" and value == "failed":
            self.fail("webrtcbin: connection failed")

    def drop_until_connected(self, _pad: Any, _info: Any) -> Any:
        """Streaming thread: drop RTP packets at the payloader until connected.

        webrtcbin blocks its sink pad until negotiated and holds packets until DTLS is
        up; the live source then pushes its backlog in a burst, which the receiver's
        jitter buffer keeps as delay (hundreds of ms). Dropping keeps the source's thread
        running in real time; the first packet sent is then a current one.
        """
        if self.connected:
            return self.Gst.PadProbeReturn.REMOVE
        return self.Gst.PadProbeReturn.DROP

    def first_buffer(self, pad: Any, side: str) -> None:
        """Report the first buffer through ``pad`` as media flowing on ``side``."""

        def probe(_pad: Any, _info: Any) -> Any:
            self.post({"type": "media", "side": side, "t_ns": time.monotonic_ns()})
            if self.sfu is not None:  # a room's publisher: sending is all it does
                self.post({"type": "state", "what": "media", "value": "flowing"})
            return self.Gst.PadProbeReturn.REMOVE

        if pad is None:
            self.fail(f"no pad to watch for {side} media")
            return
        pad.add_probe(self.Gst.PadProbeType.BUFFER, probe)

    def on_pad(self, _wb: Any, pad: Any) -> None:
        if pad.direction != self.Gst.PadDirection.SRC:
            return
        caps = pad.get_current_caps()
        self.log(f"receiving {caps.to_string() if caps else 'unknown caps'}")
        rx = self.rx = self.Gst.parse_bin_from_description(recv_bin(self.args.record), True)
        rx.set_name("rx")
        self.pipe.add(rx)
        rx.sync_state_with_parent()
        if pad.link(rx.get_static_pad("sink")) != self.Gst.PadLinkReturn.OK:
            self.fail(f"cannot link {pad.get_name()} to the receiver")
            return
        self.first_buffer(rx.get_by_name("sink").get_static_pad("sink"), "recv")

    # --- signalling ---------------------------------------------------------------
    def signal_to_peer(self, obj: dict[str, Any]) -> None:
        self.post({"to": self.args.peer, **obj})

    def on_ice(self, _wb: Any, mline: int, candidate: str) -> None:
        if self.sfu is not None:
            return  # the SFU gets the candidates in the offer
        words = candidate.split()
        if len(words) > 4 and words[4] == self.args.ice:
            ice = {"candidate": candidate, "sdpMLineIndex": mline}
            self.signal_to_peer({"type": "ice", "candidate": ice})

    def on_negotiation_needed(self, _wb: Any) -> None:
        """webrtcbin's thread: the sink pad has caps; the caller makes its (one) offer."""
        if not self.offered:
            self.offered = True
            self.GLib.idle_add(self.create_offer)

    def create_offer(self) -> bool:
        """The caller's offer (only once the sink pad has caps: else it has no m-line)."""
        promise = self.Gst.Promise.new_with_change_func(self.on_created, "offer")
        self.wb.emit("create-offer", None, promise)
        return False

    def on_created(self, promise: Any, kind: str) -> None:
        reply = promise.get_reply()
        desc = reply.get_value(kind) if reply is not None else None
        if desc is None:
            self.fail(f"webrtcbin could not create the {kind}: {reply}")
            return
        self.wb.emit("set-local-description", desc, self.Gst.Promise.new())
        if self.sfu is None:
            self.signal_to_peer({"type": kind, "sdp": desc.sdp.as_text()})

    def on_gathering(self, wb: Any, _spec: Any) -> None:
        """webrtcbin's thread: once every candidate is gathered, offer to the SFU (from
        the main loop, which may read webrtcbin's properties)."""
        if wb.get_property("ice-gathering-state").value_nick == "complete":
            self.GLib.idle_add(self.offer_to_sfu)

    def offer_to_sfu(self) -> bool:
        """Send the local offer, its candidates but ``--ice``'s left out, to the SFU (on
        a thread: HTTP waits) and set its answer."""
        assert self.sfu is not None
        offer = only_candidates_of(self.wb.get_property("local-description").sdp.as_text(),
                                   self.args.ice)  # fmt: skip

        def exchange() -> None:
            try:
                answer = self.sfu.publish(offer)  # type: ignore[union-attr]
            except SignallingError as exc:
                self.GLib.idle_add(self.fail, f"signalling: {exc}")
                return
            self.log("answer received from the SFU")
            self.GLib.idle_add(self.set_remote, "answer", answer)

        threading.Thread(target=exchange, name="sfu-signalling", daemon=True).start()
        return False

    def set_remote(self, kind: str, sdp: str) -> None:
        GstWebRTC = self.GstWebRTC
        res, msg = self.GstSdp.SDPMessage.new_from_text(sdp)
        if res != self.GstSdp.SDPResult.OK:
            self.fail(f"unreadable {kind} SDP")
            return
        sdp_type = (
            GstWebRTC.WebRTCSDPType.OFFER if kind == "offer" else GstWebRTC.WebRTCSDPType.ANSWER
        )
        desc = GstWebRTC.WebRTCSessionDescription.new(sdp_type, msg)

        def done(_promise: Any) -> None:
            self.GLib.idle_add(self.remote_set, kind)

        self.wb.emit("set-remote-description", desc, self.Gst.Promise.new_with_change_func(done))

    def remote_set(self, kind: str) -> bool:
        self.have_remote = True
        for candidate in self.pending_ice:
            self.add_ice(candidate)
        self.pending_ice = []
        if kind == "offer":
            promise = self.Gst.Promise.new_with_change_func(self.on_created, "answer")
            self.wb.emit("create-answer", None, promise)
        return False

    def add_ice(self, candidate: dict[str, Any]) -> None:
        text = candidate.get("candidate")
        if text:
            self.wb.emit("add-ice-candidate", int(candidate.get("sdpMLineIndex") or 0), text)

    def on_message(self, text: str) -> bool:
        """One message from the page server (on the main loop)."""
        try:
            msg = json.loads(text)
        except ValueError:
            return False
        kind = msg.get("type")
        if kind in ("offer", "answer"):
            self.log(f"{kind} received")
            self.set_remote(kind, msg.get("sdp", ""))
        elif kind == "ice":
            candidate = msg.get("candidate") or {}
            if not self.have_remote:
                self.pending_ice.append(candidate)
            else:
                self.add_ice(candidate)
        return False

    def read_socket(self) -> None:
        """Reader thread: hand each message to the main loop."""
        try:
            while True:
                self.GLib.idle_add(self.on_message, self.ws.receive())
        except (WebSocketClosed, OSError) as exc:
            if not self.stopping:
                self.GLib.idle_add(self.fail, f"signalling: {exc}")

    # --- life cycle -----------------------------------------------------------------
    def stop(self) -> bool:
        """SIGINT/SIGTERM: EOS into both paths; stop once both ends saw it, or after
        ``EOS_WAIT_S``."""
        if self.stopping:
            return True
        self.stopping = True
        self.log("stopping: EOS")
        ends = [("send", self.wb.get_static_pad("sink_0"), self.pipe.get_by_name("src"))]
        if self.rx is not None:
            ends.append(("recv", self.rx.get_by_name("sink").get_static_pad("sink"), self.rx))
            recorder = next((e for e in self.elements(self.rx)
                             if e.get_factory().get_name() == "filesink"), None)  # fmt: skip
            if recorder is not None:  # the recording's file is complete once EOS reached it
                ends.append(("record", recorder.get_static_pad("sink"), None))
        for side, pad, _ in ends:
            if pad is not None:
                self.eos_pending.add(side)
                pad.add_probe(self.Gst.PadProbeType.EVENT_DOWNSTREAM, self.on_eos_probe, side)
        if not self.eos_pending:
            self.loop.quit()
            return True
        targets = [e.get_static_pad("sink") if e is self.rx else e for _, _, e in ends if e]
        # Sending EOS can block (a source whose streaming thread waits at webrtcbin's
        # blocked sink pad, before negotiation): not on the main loop, which must time out.
        threading.Thread(target=self.send_eos, args=(targets,), daemon=True).start()
        self.GLib.timeout_add(int(EOS_WAIT_S * 1000), self.eos_timeout)
        return True

    def elements(self, bin_: Any) -> list[Any]:
        """Every element inside ``bin_`` (its iterator is no Python iterable here)."""
        found: list[Any] = []
        it = bin_.iterate_recurse()
        while True:
            result, element = it.next()
            if result == self.Gst.IteratorResult.OK:
                found.append(element)
            elif result == self.Gst.IteratorResult.RESYNC:
                it.resync()
                found.clear()
            else:
                return found

    def send_eos(self, targets: list[Any]) -> None:
        """EOS into each target (an element or a pad)."""
        for target in targets:
            target.send_event(self.Gst.Event.new_eos())

    def on_eos_probe(self, _pad: Any, info: Any, side: str) -> Any:
        """Streaming thread: EOS reached the end of ``side``'s path."""
        if info.get_event().type != self.Gst.EventType.EOS:
            return self.Gst.PadProbeReturn.OK
        self.GLib.idle_add(self.eos_reached, side)
        return self.Gst.PadProbeReturn.REMOVE

    def eos_reached(self, side: str) -> bool:
        self.eos_pending.discard(side)
        if not self.eos_pending:
            self.log("EOS reached both ends")
            self.loop.quit()
        return False

    def eos_timeout(self) -> bool:
        if self.eos_pending:
            waiting = ", ".join(sorted(self.eos_pending))
            self.log(f"EOS did not reach the {waiting} end within {EOS_WAIT_S:g} s", "warn")
        self.loop.quit()
        return False

    def run(self) -> int:
        """Play until stopped or failed; the exit code."""
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.GLib.unix_signal_add(self.GLib.PRIORITY_HIGH, signum, self.stop)
        self.post({"type": "hello", "id": self.args.id, "peer": self.args.peer,
                   "role": self.args.role, "user_agent": f"GStreamer {self.Gst.version_string()} "
                   "webrtcbin (latlab gstpeer)", "t_ns": time.monotonic_ns()})  # fmt: skip
        threading.Thread(target=self.read_socket, daemon=True).start()
        if self.pipe.set_state(self.Gst.State.PLAYING) == self.Gst.StateChangeReturn.FAILURE:
            self.fail("the pipeline cannot go to PLAYING")
        else:
            self.loop.run()
        self.stopping = True
        self.pipe.set_state(self.Gst.State.NULL)
        if self.sfu is not None:
            self.sfu.leave()
        self.ws.close()
        if self.failure is not None:
            print(f"error: {self.failure}", file=sys.stderr, flush=True)
            return 1
        return 0


class SignallingError(Exception):
    """The SFU refused or did not answer; ``str()`` says what."""


def only_candidates_of(sdp: str, addr: str) -> str:
    """``sdp`` without the ``a=candidate`` lines of other addresses than ``addr``."""
    lines = sdp.split("\r\n")
    keep = [line for line in lines if not line.startswith("a=candidate:")
            or (line.split() + [""] * 5)[4] == addr]  # fmt: skip
    return "\r\n".join(keep)


class SfuSignalling:
    """A publisher's one offer/answer with an SFU: Janus's videoroom over its HTTP API, or
    WHIP; and leaving at the end. Runs on a thread of its own (blocking HTTP)."""

    def __init__(self, args: argparse.Namespace, timeout_s: float = 10.0) -> None:
        self.args = args
        self.timeout_s = timeout_s
        self.session: str | None = None  # Janus: its session URL
        self.resource: str | None = None  # WHIP: the session's Location
        self.polling = threading.Event()

    def publish(self, offer: str) -> str:
        """The SFU's answer to ``offer``; SignallingError."""
        try:
            return self._janus(offer) if self.args.janus else self._whip(offer)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise SignallingError(f"{self.args.janus or self.args.whip}: {exc}") from None

    def _request(self, url: str, body: bytes | None, content: str,
                 method: str | None = None) -> tuple[int, dict[str, str], bytes]:  # fmt: skip
        request = urllib.request.Request(url, data=body, method=method,
                                         headers={"Content-Type": content})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                return reply.status, dict(reply.headers), reply.read()
        except urllib.error.HTTPError as exc:
            raise SignallingError(f"{url}: HTTP {exc.code} {exc.read()[:200]!r}") from None

    def _janus_post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "transaction": os.urandom(6).hex()}
        _, _, data = self._request(url, json.dumps(body).encode(), "application/json", "POST")
        reply = json.loads(data)
        if reply.get("janus") == "error":
            raise SignallingError(f"{url}: {reply.get('error')}")
        return reply

    def _janus(self, offer: str) -> str:
        base = self.args.janus.rstrip("/")
        created = self._janus_post(base, {"janus": "create"})
        self.session = f"{base}/{created['data']['id']}"
        attached = self._janus_post(self.session, {"janus": "attach",
                                                   "plugin": "janus.plugin.videoroom"})  # fmt: skip
        handle = f"{self.session}/{attached['data']['id']}"
        join = {"request": "join", "room": self.args.room, "ptype": "publisher",
                "id": self.args.feed, "display": self.args.id}  # fmt: skip
        self._janus_post(handle, {"janus": "message", "body": join})
        self._event(lambda data, _jsep: data.get("videoroom") == "joined")
        configure = {"request": "configure", "audio": True, "video": False}
        jsep = {"type": "offer", "sdp": offer, "trickle": False}
        self._janus_post(handle, {"janus": "message", "body": configure, "jsep": jsep})
        _, answer = self._event(lambda _data, jsep: jsep is not None)
        threading.Thread(target=self._keep_alive, name="janus-poll", daemon=True).start()
        return str(answer["sdp"])

    def _event(self, wanted: Any) -> tuple[dict[str, Any], Any]:
        """The session's next plugin event that ``wanted(data, jsep)`` accepts (long poll)."""
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            _, _, body = self._request(f"{self.session}?maxev=1", None, "application/json")
            event = json.loads(body)
            data = ((event.get("plugindata") or {}).get("data")) or {}
            if data.get("error"):
                raise SignallingError(f"videoroom: {data.get('error')}")
            if event.get("janus") == "event" and wanted(data, event.get("jsep")):
                return data, event.get("jsep")
        raise SignallingError(f"{self.session}: no answer within {self.timeout_s:g} s")

    def _keep_alive(self) -> None:
        """Janus ends a session idle for 60 s: keep polling it until leaving."""
        while not self.polling.is_set():
            with contextlib.suppress(OSError, SignallingError, ValueError):
                self._request(f"{self.session}?maxev=1", None, "application/json")

    def _whip(self, offer: str) -> str:
        status, headers, body = self._request(self.args.whip, offer.encode(),
                                              "application/sdp", "POST")  # fmt: skip
        if status != 201:
            raise SignallingError(f"{self.args.whip}: HTTP {status}, not 201 Created")
        location = headers.get("Location") or headers.get("location")
        if location:
            self.resource = urllib.parse.urljoin(self.args.whip, location)
        return body.decode()

    def leave(self) -> None:
        """Destroy the Janus session or DELETE the WHIP resource (best effort)."""
        self.polling.set()
        with contextlib.suppress(OSError, SignallingError, ValueError):
            if self.session is not None:
                self._janus_post(self.session, {"janus": "destroy"})
            elif self.resource is not None:
                self._request(self.resource, None, "application/sdp", "DELETE")


def load_gi() -> tuple[Any, Any, Any, Any]:
    """Gst, GstWebRTC, GstSdp and GLib, initialised."""
    import gi

    gi.require_version("Gst", "1.0")
    gi.require_version("GstWebRTC", "1.0")
    gi.require_version("GstSdp", "1.0")
    from gi.repository import GLib, Gst, GstSdp, GstWebRTC

    Gst.init(None)
    return Gst, GstWebRTC, GstSdp, GLib


def main(argv: list[str] | None = None) -> int:
    """Command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="gstpeer")
    parser.add_argument("--url", required=True, help="the page server's WebSocket URL")
    parser.add_argument("--id", required=True)
    parser.add_argument("--peer", default="", help="the call's other peer (not in a room)")
    parser.add_argument("--role", choices=("caller", "callee", "publisher"), required=True)
    parser.add_argument("--janus", default="", help="a room's Janus API (a publisher)")
    parser.add_argument("--room", type=int, default=0, help="Janus's videoroom")
    parser.add_argument("--feed", type=int, default=0, help="the publisher's feed id")
    parser.add_argument("--whip", default="", help="a room's WHIP endpoint (a publisher)")
    parser.add_argument("--ice", required=True, help="the only local address to signal")
    parser.add_argument("--audio-caps", default=DEFAULT_AUDIO_CAPS)
    parser.add_argument("--latency-ms", type=int, default=DEFAULT_LATENCY_MS)
    parser.add_argument("--record", default="", help="the black box's ${signal.sink}")
    args = parser.parse_args(argv)
    try:
        gst = load_gi()
        ws = WebSocket(f"{args.url}?id={args.id}")
        peer = Peer(args, ws, gst)
    except Exception as exc:  # one line for the runner, whatever failed
        text = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"  # GLib.Error
        print(f"error: {text}", file=sys.stderr, flush=True)
        return 1
    return peer.run()


if __name__ == "__main__":
    sys.exit(main())
