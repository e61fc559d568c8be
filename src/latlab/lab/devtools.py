"""Close a Chromium through its DevTools endpoint, so it shuts down as a user's would.

A signal stops Chromium before its renderers hand their last trace chunks over, so
the end of its trace (``ingest.chrome_trace``) would be lost; ``Browser.close``
shuts it down in order and it completes the trace file. Chromium listens on the
loopback of its host's namespace (``--remote-debugging-port=0`` writes the port to
``DevToolsActivePort`` in its profile), so this runs inside that namespace::

    ip netns exec NS python -m latlab.lab.devtools PROFILE_DIR
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

PORT_FILE = "DevToolsActivePort"
TIMEOUT_S = 5.0


def endpoint(profile: Path) -> str:
    """The browser's DevTools WebSocket URL, from the port file in its profile."""
    port, path = profile.joinpath(PORT_FILE).read_text().split()[:2]
    return f"ws://127.0.0.1:{int(port)}{path}"


async def close_browser(url: str) -> None:
    """Send ``Browser.close`` and wait until Chromium answers or hangs up."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.ws_connect(url, max_msg_size=0) as ws,
    ):
        await ws.send_json({"id": 1, "method": "Browser.close"})
        async for message in ws:
            if message.type != aiohttp.WSMsgType.TEXT or '"id":1' in message.data:
                break


def main(argv: list[str]) -> int:
    """Close the browser whose profile directory is ``argv[0]``; 1 (and why) if it cannot."""
    try:
        asyncio.run(close_browser(endpoint(Path(argv[0]))))
    except (OSError, ValueError, IndexError, TimeoutError) as error:
        print(f"devtools: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # aiohttp's own errors: the browser is gone or not listening
        print(f"devtools: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
