//! `MetricsListen = ADDR:PORT`: `/metrics` in the Prometheus text format,
//! served over HTTP by a thread of its own.
//!
//! A scrape asks the event loop for the same snapshot `braid show --json`
//! reads (one request through the control channel, answered between two
//! batches, like `wg show`), and renders it here, off the data plane.
//! Nobody scraping costs nothing: the thread sleeps in `accept`. A
//! snapshot younger than [`MIN_INTERVAL`] is served again rather than
//! asked for anew, so a client scraping in a loop cannot make the event
//! loop take more snapshots than that. One client is served at a time,
//! each within [`CLIENT_TIMEOUT`].

mod names;
mod render;

pub use render::{Exposition, Kind, DEVICE, PEER};

use crate::daemon::control::Requester;
use crate::uapi::{Request, Response};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant, SystemTime};

/// Scrapes closer together than this get the previous answer.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);
/// How long one client may take to send its request and read the answer.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a scrape waits for the event loop's snapshot.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(5);
/// Largest request head read (a scrape's is a few hundred bytes).
const MAX_REQUEST: usize = 8192;

/// Binds `addr` (before privileges are dropped, so any port works).
pub fn bind(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("MetricsListen {addr}: {e}")))
}

/// Starts the metrics thread of interface `name` on `listener`.
pub fn serve(name: &str, listener: TcpListener, requester: Requester) -> std::io::Result<()> {
    let name = name.to_string();
    let at = listener.local_addr()?;
    std::thread::Builder::new()
        .name("braid-metrics".into())
        .spawn(move || {
            crate::info!(name, "metrics on {}", url(at));
            let mut cache: Option<(Instant, String)> = None;
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                if let Err(e) = answer(&name, stream, &requester, &mut cache) {
                    crate::debug!(name, "metrics client: {e}");
                }
            }
        })?;
    Ok(())
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    Metrics { head_only: bool },
    Index { head_only: bool },
    NotFound,
    BadMethod,
    Malformed,
}

/// Reads the request line of an HTTP/1.x request head.
pub fn parse_request(head: &[u8]) -> Asked {
    let text = String::from_utf8_lossy(head);
    let mut words = text.lines().next().unwrap_or("").split_whitespace();
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return Asked::Malformed;
    };
    if !version.starts_with("HTTP/1.") {
        return Asked::Malformed;
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Asked::BadMethod,
    };
    // Prometheus may add query parameters; they change nothing here.
    match target.split('?').next().unwrap_or("") {
        "/metrics" => Asked::Metrics { head_only },
        "/" => Asked::Index { head_only },
        _ => Asked::NotFound,
    }
}

fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_REQUEST {
            break;
        }
    }
    Ok(head)
}

fn answer(
    name: &str,
    mut stream: TcpStream,
    requester: &Requester,
    cache: &mut Option<(Instant, String)>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let head = read_head(&mut stream)?;
    let (status, content_type, body, head_only) = match parse_request(&head) {
        Asked::Metrics { head_only } => match exposition(name, requester, cache) {
            Some(text) => (
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                text,
                head_only,
            ),
            None => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                "the daemon did not answer in time\n".to_string(),
                head_only,
            ),
        },
        Asked::Index { head_only } => (
            "200 OK",
            "text/plain; charset=utf-8",
            format!("braid {name}: metrics are at /metrics\n"),
            head_only,
        ),
        Asked::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "not found; metrics are at /metrics\n".to_string(),
            false,
        ),
        Asked::BadMethod => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET and HEAD\n".to_string(),
            false,
        ),
        Asked::Malformed => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "not an HTTP/1 request\n".to_string(),
            false,
        ),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Allow: GET, HEAD\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        reply.push_str(&body);
    }
    stream.write_all(reply.as_bytes())?;
    stream.flush()
}

/// The text of a scrape: the cached one if it is recent, else a new
/// snapshot rendered (`None` when the event loop did not answer).
fn exposition(
    name: &str,
    requester: &Requester,
    cache: &mut Option<(Instant, String)>,
) -> Option<String> {
    if let Some((at, text)) = cache {
        if at.elapsed() < MIN_INTERVAL {
            return Some(text.clone());
        }
    }
    let snap = match requester.ask_within(Request::GetBraid, SNAPSHOT_WAIT)? {
        Response::Braid(snap) => snap,
        _ => return None,
    };
    let mut exp = Exposition::default();
    render::render(name, &snap, SystemTime::now(), &mut exp);
    process_metrics(&mut exp);
    let text = exp.finish();
    *cache = Some((Instant::now(), text.clone()));
    Some(text)
}

/// The daemon process itself, under the names Prometheus' client
/// libraries use (`process_…`), from /proc/self.
fn process_metrics(exp: &mut Exposition) {
    let Some(p) = ProcessFigures::read() else {
        return;
    };
    exp.sample(
        "process_cpu_seconds_total",
        Kind::Counter,
        "Total user and system CPU time spent in seconds.",
        &[],
        p.cpu_seconds,
    );
    exp.sample(
        "process_resident_memory_bytes",
        Kind::Gauge,
        "Resident memory size in bytes.",
        &[],
        p.resident_bytes,
    );
    exp.sample(
        "process_start_time_seconds",
        Kind::Gauge,
        "Start time of the process since unix epoch in seconds.",
        &[],
        p.start_unix,
    );
    exp.sample(
        "process_open_fds",
        Kind::Gauge,
        "Number of open file descriptors.",
        &[],
        p.open_fds,
    );
}

/// What /proc says about this process.
pub struct ProcessFigures {
    pub cpu_seconds: f64,
    pub resident_bytes: f64,
    pub start_unix: f64,
    pub open_fds: f64,
}

impl ProcessFigures {
    pub fn read() -> Option<ProcessFigures> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let uptime = std::fs::read_to_string("/proc/uptime").ok()?;
        // SAFETY: sysconf has no preconditions.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        // SAFETY: as above.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as f64;
        let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as f64;
        let now = SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_secs_f64();
        parse_process(&stat, &uptime, ticks, page, now, open_fds)
    }
}

/// /proc/self/stat and /proc/uptime read into figures (fields after the
/// parenthesised command name: utime 14, stime 15, starttime 22, rss 24).
pub fn parse_process(
    stat: &str,
    uptime: &str,
    ticks: f64,
    page: f64,
    now_unix: f64,
    open_fds: f64,
) -> Option<ProcessFigures> {
    if ticks <= 0.0 || page <= 0.0 {
        return None;
    }
    let rest = stat.rsplit_once(") ")?.1;
    // `rest` starts at field 3 (state).
    let field = |n: usize| -> Option<f64> { rest.split_whitespace().nth(n - 3)?.parse().ok() };
    let (utime, stime, start, rss) = (field(14)?, field(15)?, field(22)?, field(24)?);
    let up: f64 = uptime.split_whitespace().next()?.parse().ok()?;
    Some(ProcessFigures {
        cpu_seconds: (utime + stime) / ticks,
        resident_bytes: rss * page,
        start_unix: now_unix - up + start / ticks,
        open_fds,
    })
}

/// `http://ADDR/metrics` for a listen address (what the docs and the log
/// print).
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/metrics")
}
