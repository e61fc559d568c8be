"""latlab's page and signalling server for browser peers (run as a program).

``python -m latlab.lab.pageserver --port PORT --out DIR --peer alice --peer bob``
serves the peer page (``www/``) over HTTP and one WebSocket per page at ``/ws?id=NAME``.
``--gst-peer NAME`` (with ``--gst-out DIR``) admits a GStreamer webrtcbin peer
(:mod:`latlab.lab.gstpeer`) the same way; its records go to ``DIR/NAME.jsonl``.
It relays signalling between the pages (a message with ``to`` goes to that peer,
queued until it connects), sends clock pings every 250 ms, and writes every record a
page sends to ``DIR/NAME.jsonl`` with ``srv_ns``, its CLOCK_MONOTONIC arrival time
(format: docs/browser-records.md).

It tells the runner what happens on stdout, one line each: ``ready PORT`` once it
listens, then ``event NAME hello``, ``event NAME state WHAT VALUE``, ``event NAME frame
SIDE`` (the first frame at each transform side, or a webrtcbin peer's first ``media``
record of that side) and ``event NAME closed``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import IO, Any

from aiohttp import WSMsgType, web

from latlab.lab.sfu.livekit import CLIENT_BUNDLE

WWW = Path(__file__).resolve().parent / "www"
JANUS_JS = Path("/usr/share/javascript/janus-gateway/janus.js")  # Debian's janus-demos
ASSETS = {
    **{name: WWW / name for name in ("index.html", "sfu.html", "livekit.html", "whip.html",
                                     "page.js", "room.js", "frames.js", "transform.js",
                                     "tap-worklet.js", "quality.js")},
    "janus.js": JANUS_JS,
    "livekit-client.js": CLIENT_BUNDLE,  # bundled by scripts/setup.sh
}  # fmt: skip
CLOCK_PING_S = 0.25
# Cross-origin isolation gives the page performance.now() at 5 us instead of 100 us.
HEADERS = {
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Embedder-Policy": "require-corp",
}
RECORD_TYPES = (
    "hello", "stats", "sync", "tap", "console", "state", "media", "signal_audio", "output_ts",
    "video_codes", "sources", "presented",
)  # fmt: skip


def say(line: str) -> None:
    """One line to the runner."""
    sys.stdout.write(line.replace("\n", " ") + "\n")
    sys.stdout.flush()


class PageServer:
    """Relays signalling, pings clocks and writes each peer's records."""

    def __init__(self, out_dir: Path, peers: list[str], out_dirs: dict[str, Path]) -> None:
        self.out_dir = out_dir
        self.out_dirs = out_dirs  # peers whose records go elsewhere than out_dir
        self.peers = peers
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.queued: dict[str, list[str]] = {p: [] for p in peers}
        self.files: dict[str, IO[str]] = {}
        self.pings: dict[tuple[str, int], tuple[int, int]] = {}
        self.first_frames: set[tuple[str, str]] = set()

    def write(self, peer: str, record: dict[str, Any]) -> None:
        """Append one record line to the peer's file."""
        out = self.files.get(peer)
        if out is None:
            path = self.out_dirs.get(peer, self.out_dir) / f"{peer}.jsonl"
            out = self.files[peer] = path.open("a", encoding="utf-8")
        out.write(json.dumps(record, separators=(",", ":")) + "\n")
        out.flush()

    def close(self) -> None:
        """Close the record files."""
        for out in self.files.values():
            out.close()

    async def relay(self, to: str, text: str) -> None:
        """Send ``text`` to peer ``to`` now, or once it connects."""
        ws = self.sockets.get(to)
        if ws is None or ws.closed:
            self.queued.setdefault(to, []).append(text)
        else:
            await ws.send_str(text)

    async def websocket(self, request: web.Request) -> web.WebSocketResponse:
        """One page's WebSocket: its records and signalling."""
        peer = request.query.get("id", "")
        if peer not in self.peers:
            raise web.HTTPNotFound(text=f"unknown peer '{peer}'")
        ws = web.WebSocketResponse(max_msg_size=16 << 20)
        await ws.prepare(request)
        self.sockets[peer] = ws
        for text in self.queued.pop(peer, []):
            await ws.send_str(text)
        async for msg in ws:
            srv_ns = time.monotonic_ns()
            if msg.type == WSMsgType.TEXT:
                await self.message(peer, srv_ns, msg.data)
        if self.sockets.get(peer) is ws:
            del self.sockets[peer]
        say(f"event {peer} closed")
        return ws

    async def message(self, peer: str, srv_ns: int, text: str) -> None:
        """Handle one message from a page."""
        try:
            data = json.loads(text)
        except ValueError:
            self.write(peer, {"type": "console", "srv_ns": srv_ns, "level": "error",
                              "text": f"latlab: unreadable message {text[:200]!r}"})  # fmt: skip
            return
        kind = data.pop("type", None)
        if "to" in data:
            await self.relay(str(data["to"]), text)
        elif kind == "frames":
            self.frames(peer, srv_ns, data.get("frames", []))
        elif kind == "clock":
            self.clock(peer, srv_ns, data)
        elif kind in RECORD_TYPES:
            self.write(peer, {"type": kind, "srv_ns": srv_ns, **data})
            if kind == "hello":
                say(f"event {peer} hello")
            elif kind == "state":
                say(f"event {peer} state {data.get('what')} {data.get('value')}")
            elif kind == "media":
                self.first_frame(peer, str(data.get("side")))

    def frames(self, peer: str, srv_ns: int, frames: list[dict[str, Any]]) -> None:
        """One line per frame of a batch; the first frame at each side is announced."""
        for frame in frames:
            self.write(peer, {"type": "frame", "srv_ns": srv_ns, **frame})
            self.first_frame(peer, str(frame.get("side")))

    def first_frame(self, peer: str, side: str) -> None:
        """Announce the first frame (or media buffer) of a peer at ``side``."""
        if (peer, side) not in self.first_frames:
            self.first_frames.add((peer, side))
            say(f"event {peer} frame {side}")

    def clock(self, peer: str, srv_ns: int, data: dict[str, Any]) -> None:
        """A page's answer to a clock ping."""
        sent = self.pings.pop((peer, data.get("seq", -1)), None)
        if sent is None:
            return
        mono, real = sent
        self.write(peer, {"type": "clock", "srv_ns": srv_ns, "srv_realtime_ns": real,
                          "srv_monotonic_ns": mono, "page_ms": data.get("page_ms"),
                          "rtt_ms": (srv_ns - mono) / 1e6, "seq": data.get("seq")})  # fmt: skip

    async def ping(self) -> None:
        """Clock pings to every connected page, every 250 ms."""
        seq = 0
        while True:
            await asyncio.sleep(CLOCK_PING_S)
            seq += 1
            for peer, ws in list(self.sockets.items()):
                if ws.closed:
                    continue
                self.pings[(peer, seq)] = (time.monotonic_ns(), time.time_ns())
                with contextlib.suppress(ConnectionError, RuntimeError):
                    await ws.send_str(json.dumps({"type": "ping", "seq": seq}))
            self.pings = {k: v for k, v in self.pings.items() if k[1] > seq - 40}


async def asset(request: web.Request) -> web.FileResponse:
    """The page and its scripts."""
    name = request.match_info.get("name") or "index.html"
    if name not in ASSETS or not ASSETS[name].is_file():
        raise web.HTTPNotFound()
    return web.FileResponse(ASSETS[name], headers=HEADERS)


async def serve(port: int, out_dir: Path, peers: list[str], out_dirs: dict[str, Path]) -> None:
    """Serve until SIGTERM or SIGINT."""
    server = PageServer(out_dir, peers, out_dirs)
    app = web.Application()
    app.router.add_get("/ws", server.websocket)
    app.router.add_get("/", asset)
    app.router.add_get("/{name}", asset)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "0.0.0.0", port).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    pinger = asyncio.create_task(server.ping())
    say(f"ready {port}")
    await stop.wait()
    pinger.cancel()
    for ws in list(server.sockets.values()):
        await ws.close()
    await runner.cleanup()
    server.close()


def main(argv: list[str] | None = None) -> None:
    """Command line: ``--port PORT --out DIR --peer NAME ...``, and for webrtcbin peers
    ``--gst-out DIR --gst-peer NAME ...``."""
    parser = argparse.ArgumentParser(prog="latlab.lab.pageserver")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--peer", action="append", default=[])
    parser.add_argument("--gst-out", type=Path)
    parser.add_argument("--gst-peer", action="append", default=[])
    args = parser.parse_args(argv)
    if not args.peer and not args.gst_peer:
        parser.error("at least one --peer or --gst-peer is needed")
    if args.gst_peer and args.gst_out is None:
        parser.error("--gst-peer needs --gst-out")
    out_dirs = {name: args.gst_out for name in args.gst_peer}
    for directory in (args.out, *out_dirs.values()):
        directory.mkdir(parents=True, exist_ok=True)
    asyncio.run(serve(args.port, args.out, [*args.peer, *args.gst_peer], out_dirs))


if __name__ == "__main__":
    main()
