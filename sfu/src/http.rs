//! Signalling: a small blocking HTTP/1.1 server on its own thread. It never touches a
//! packet or the SFU's state: it parses a request, hands the SDP offer (or a question)
//! to the loop over a bounded channel, wakes the loop, and waits for the answer.
//!
//! * `POST /whip/ROOM[?name=NAME]` (WHIP, RFC 9725): an SDP offer that publishes;
//!   `201 Created`, `Location: /resource/ID`, the SDP answer.
//! * `POST /whep/ROOM[?name=NAME]` (WHEP): an SDP offer with receive-only media;
//!   the same answer, the room's publishers flowing to it.
//! * `DELETE /resource/ID`: leaves. `PATCH` (trickle ICE) is not needed: the SFU is
//!   ICE-lite with one host candidate in its answer (405).
//! * `GET /stats`: the loop's counters as JSON; `GET /`: the participant page;
//!   `POST /report?name=NAME`: a page's getStats summary, logged as one line.
//!
//! One connection at a time, `Connection: close`, headers up to 16 KiB, bodies up to
//! 256 KiB, 5 s to send a request: a slow or malformed client costs only itself.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::net::Waker;

pub const PAGE: &str = include_str!("page.html");
const MAX_HEADERS: usize = 16 * 1024;
const MAX_BODY: usize = 256 * 1024;
const IO_TIMEOUT: Duration = Duration::from_secs(5);
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_NAME: usize = 64;

/// What the signalling thread asks of the loop.
pub enum Request {
    Publish {
        room: String,
        name: Option<String>,
        offer: String,
        reply: SyncSender<Reply>,
    },
    Subscribe {
        room: String,
        name: Option<String>,
        offer: String,
        reply: SyncSender<Reply>,
    },
    Leave {
        id: u64,
        reply: SyncSender<Reply>,
    },
    Stats {
        reply: SyncSender<Reply>,
    },
}

/// The loop's answer.
pub enum Reply {
    Created { id: u64, answer: String },
    Left,
    Stats(String),
    Error(u16, String),
}

/// Starts the signalling thread on `bind:port`; requests arrive on the receiver.
pub fn start(bind: Ipv4Addr, port: u16, waker: Arc<Waker>) -> Result<Receiver<Request>, String> {
    let listener =
        TcpListener::bind((bind, port)).map_err(|e| format!("bind http {bind}:{port}: {e}"))?;
    let (tx, rx) = mpsc::sync_channel(16);
    thread::Builder::new()
        .name("sfu-http".into())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Err(e) = serve(stream, &tx, &waker) {
                    log::debug!("http: {e}");
                }
            }
        })
        .map_err(|e| format!("http thread: {e}"))?;
    Ok(rx)
}

/// A parsed request.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    pub body: Vec<u8>,
}

/// Reads one request; `Err((status, why))` for what cannot be served.
pub fn read_request(reader: &mut impl BufRead) -> Result<HttpRequest, (u16, String)> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = reader
            .by_ref()
            .take((MAX_HEADERS + 1 - head.len().min(MAX_HEADERS)) as u64)
            .read_until(b'\n', &mut head)
            .map_err(|e| (400, format!("reading the request: {e}")))?;
        if n == 0 {
            return Err((400, "connection closed before the request ended".into()));
        }
        if head.len() > MAX_HEADERS {
            return Err((431, "request headers too large".into()));
        }
        let line = &head[before..];
        if line == b"\r\n" || line == b"\n" {
            break;
        }
    }
    let text = std::str::from_utf8(&head).map_err(|_| (400, "headers are not UTF-8".into()))?;
    let mut lines = text.lines();
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err((400, format!("bad request line: {request_line:.80}")));
    };
    if !version.starts_with("HTTP/1.") {
        return Err((505, "only HTTP/1.x".into()));
    }
    let mut length = 0usize;
    for line in lines {
        if let Some((k, v)) = line.split_once(':') {
            if k.trim().eq_ignore_ascii_case("content-length") {
                length = v
                    .trim()
                    .parse()
                    .map_err(|_| (400, "bad Content-Length".to_string()))?;
            }
            if k.trim().eq_ignore_ascii_case("transfer-encoding") {
                return Err((501, "chunked bodies are not supported".into()));
            }
        }
    }
    if length > MAX_BODY {
        return Err((413, "body too large".into()));
    }
    let mut body = vec![0u8; length];
    reader
        .read_exact(&mut body)
        .map_err(|e| (400, format!("reading the body: {e}")))?;
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        body,
    })
}

/// The value of `key` in a query string (no percent-decoding: names are plain).
pub fn query_value<'a>(query: &'a str, key: &str) -> Option<&'a str> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A room or participant name: 1-64 of `[A-Za-z0-9_.-]`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

struct Response {
    status: u16,
    content_type: &'static str,
    location: Option<String>,
    body: Vec<u8>,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        let mut body: String = body.into();
        body.push('\n');
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            location: None,
            body: body.into_bytes(),
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Error",
    }
}

fn write_response(stream: &mut TcpStream, r: &Response) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
         Access-Control-Allow-Origin: *\r\nAccess-Control-Allow-Methods: GET, POST, DELETE, PATCH, OPTIONS\r\n\
         Access-Control-Allow-Headers: content-type\r\nAccess-Control-Expose-Headers: location\r\n\
         Cache-Control: no-store\r\n",
        r.status,
        reason(r.status),
        r.content_type,
        r.body.len()
    );
    if let Some(loc) = &r.location {
        head.push_str(&format!("Location: {loc}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    stream.write_all(&r.body)?;
    stream.flush()
}

fn serve(stream: TcpStream, tx: &SyncSender<Request>, waker: &Waker) -> io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut stream = stream;
    let response = match read_request(&mut reader) {
        Ok(req) => route(&req, tx, waker),
        Err((status, why)) => Response::text(status, why),
    };
    write_response(&mut stream, &response)
}

fn ask(
    tx: &SyncSender<Request>,
    waker: &Waker,
    make: impl FnOnce(SyncSender<Reply>) -> Request,
) -> Reply {
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    if tx.try_send(make(reply_tx)).is_err() {
        return Reply::Error(503, "the SFU is busy; try again".into());
    }
    waker.wake();
    reply_rx
        .recv_timeout(ANSWER_TIMEOUT)
        .unwrap_or_else(|_| Reply::Error(503, "the SFU did not answer".into()))
}

fn route(req: &HttpRequest, tx: &SyncSender<Request>, waker: &Waker) -> Response {
    let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
    let reply = match (req.method.as_str(), segments.as_slice()) {
        ("GET", [""]) | ("GET", ["index.html"]) => {
            return Response {
                status: 200,
                content_type: "text/html; charset=utf-8",
                location: None,
                body: PAGE.as_bytes().to_vec(),
            }
        }
        ("OPTIONS", _) => return Response::text(204, ""),
        ("POST", ["report"]) => {
            // A page's getStats summary: one line on stderr (signalling thread only).
            let name = query_value(&req.query, "name")
                .filter(|n| valid_name(n))
                .unwrap_or("?");
            let text = String::from_utf8_lossy(&req.body[..req.body.len().min(2048)])
                .replace(['\r', '\n'], " ");
            log::info!("page {name}: {text}");
            return Response::text(204, "");
        }
        ("GET", ["stats"]) => ask(tx, waker, |reply| Request::Stats { reply }),
        ("POST", [kind @ ("whip" | "whep"), room]) => {
            if !valid_name(room) {
                return Response::text(400, format!("bad room name: {room:.80}"));
            }
            let name = query_value(&req.query, "name");
            if let Some(n) = name {
                if !valid_name(n) {
                    return Response::text(400, format!("bad name: {n:.80}"));
                }
            }
            let Ok(offer) = String::from_utf8(req.body.clone()) else {
                return Response::text(400, "the offer is not UTF-8");
            };
            if !offer.starts_with("v=0") {
                return Response::text(415, "expected an SDP offer (application/sdp)");
            }
            let (room, name) = (room.to_string(), name.map(String::from));
            if *kind == "whip" {
                ask(tx, waker, |reply| Request::Publish {
                    room,
                    name,
                    offer,
                    reply,
                })
            } else {
                ask(tx, waker, |reply| Request::Subscribe {
                    room,
                    name,
                    offer,
                    reply,
                })
            }
        }
        ("DELETE", ["resource", id]) => match id.parse() {
            Ok(id) => ask(tx, waker, |reply| Request::Leave { id, reply }),
            Err(_) => return Response::text(404, "no such resource"),
        },
        ("PATCH", ["resource", _]) => {
            return Response::text(405, "no trickle ICE: the answer holds the one candidate")
        }
        _ => return Response::text(404, format!("no such resource: {:.80}", req.path)),
    };
    match reply {
        Reply::Created { id, answer } => Response {
            status: 201,
            content_type: "application/sdp",
            location: Some(format!("/resource/{id}")),
            body: answer.into_bytes(),
        },
        Reply::Left => Response::text(200, "left"),
        Reply::Stats(json) => Response {
            status: 200,
            content_type: "application/json",
            location: None,
            body: json.into_bytes(),
        },
        Reply::Error(status, why) => Response::text(status, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(text: &[u8]) -> Result<HttpRequest, (u16, String)> {
        read_request(&mut BufReader::new(text))
    }

    #[test]
    fn reads_a_whip_post() {
        let r = parse(b"POST /whip/room1?name=alice HTTP/1.1\r\nHost: x\r\nContent-Type: application/sdp\r\nContent-Length: 5\r\n\r\nv=0\r\nrest").unwrap();
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            ("POST", "/whip/room1")
        );
        assert_eq!(query_value(&r.query, "name"), Some("alice"));
        assert_eq!(r.body, b"v=0\r\n");
    }

    #[test]
    fn refuses_what_it_cannot_serve() {
        assert_eq!(parse(b"GET / HTTP/2\r\n\r\n").unwrap_err().0, 505);
        assert_eq!(parse(b"GARBAGE\r\n\r\n").unwrap_err().0, 400);
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n")
                .unwrap_err()
                .0,
            413
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            parse(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nshort")
                .unwrap_err()
                .0,
            400
        );
        let big = [
            b"GET / HTTP/1.1\r\nX: ".as_slice(),
            &[b'a'; 20000],
            b"\r\n\r\n",
        ]
        .concat();
        assert_eq!(parse(&big).unwrap_err().0, 431);
        assert!(valid_name("room-1.a_b") && !valid_name("") && !valid_name("a/b"));
    }

    proptest! {
        #[test]
        fn any_bytes_parse_or_fail_cleanly(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&bytes);
        }
    }
}
