//! HTTP/1.1 client connections: a hand-written one ([`RawConn`], the default) and hyper's
//! ([`HyperConn`]). Both keep one TCP connection alive with one request in flight.
//!
//! The raw client writes each request with one `write` (head and body built into one buffer)
//! and reads the answer with `httparse`; it understands exactly what walletd and the baseline
//! send: a `Content-Length` body. Anything else (chunked, no length) is an error.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::args::ClientKind;

/// Where requests go: the resolved address and the `Host` header value.
#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: Arc<str>,
}

impl Target {
    /// Parses `http://host:port[/]` and resolves it (the first address).
    pub fn parse(url: &str) -> Result<Target, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url}: only http:// URLs are supported"))?;
        let host = rest.split('/').next().unwrap_or(rest);
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let with_port = if host
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
        {
            host.to_owned()
        } else {
            format!("{host}:80")
        };
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&with_port)
            .map_err(|e| format!("{url}: resolve {with_port}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url}: {with_port} resolves to nothing"))?;
        Ok(Target {
            addr,
            host: host.into(),
        })
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
}

impl Method {
    fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

/// One request. The body, when present, is JSON.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub token: Option<Arc<str>>,
    pub body: Option<String>,
    pub idempotency_key: Option<String>,
}

impl Request {
    pub fn get(path: String, token: Option<Arc<str>>) -> Request {
        Request {
            method: Method::Get,
            path,
            token,
            body: None,
            idempotency_key: None,
        }
    }

    pub fn post(path: String, token: Option<Arc<str>>, body: String) -> Request {
        Request {
            method: Method::Post,
            path,
            token,
            body: Some(body),
            idempotency_key: None,
        }
    }

    /// Appends the whole request (head and body) to `out`.
    fn encode(&self, host: &str, out: &mut Vec<u8>) {
        use std::io::Write as _;
        let _ = write!(
            out,
            "{} {} HTTP/1.1\r\nHost: {host}\r\n",
            self.method.as_str(),
            self.path
        );
        if let Some(token) = &self.token {
            let _ = write!(out, "Authorization: Bearer {token}\r\n");
        }
        if let Some(key) = &self.idempotency_key {
            let _ = write!(out, "Idempotency-Key: \"{key}\"\r\n");
        }
        match &self.body {
            Some(body) => {
                let _ = write!(
                    out,
                    "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                );
                out.extend_from_slice(body.as_bytes());
            }
            None => out.extend_from_slice(b"\r\n"),
        }
    }
}

/// An answer: status and body.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// A connection of either kind.
pub enum Conn {
    Raw(RawConn),
    Hyper(HyperConn),
}

impl Conn {
    pub async fn connect(kind: ClientKind, target: &Target) -> io::Result<Conn> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        Ok(match kind {
            ClientKind::Raw => Conn::Raw(RawConn::new(stream, target.host.clone())),
            ClientKind::Hyper => Conn::Hyper(HyperConn::new(stream, target.host.clone()).await?),
        })
    }

    /// Sends `request` and reads its answer. After an error the connection must be dropped.
    pub async fn send(&mut self, request: &Request) -> io::Result<Response> {
        match self {
            Conn::Raw(conn) => conn.send(request).await,
            Conn::Hyper(conn) => conn.send(request).await,
        }
    }

    /// Whether the server asked to close the connection after the last answer.
    pub fn closing(&self) -> bool {
        match self {
            Conn::Raw(conn) => conn.closing,
            Conn::Hyper(conn) => conn.sender.is_closed(),
        }
    }
}

/// Connects with a timeout.
pub async fn connect(kind: ClientKind, target: &Target, timeout: Duration) -> io::Result<Conn> {
    match tokio::time::timeout(timeout, Conn::connect(kind, target)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "connect timed out")),
    }
}

/// The hand-written client.
pub struct RawConn {
    stream: TcpStream,
    host: Arc<str>,
    write: Vec<u8>,
    read: Vec<u8>,
    closing: bool,
}

/// Headers we look at in an answer.
const HEADERS_MAX: usize = 32;

impl RawConn {
    pub fn new(stream: TcpStream, host: Arc<str>) -> RawConn {
        RawConn {
            stream,
            host,
            write: Vec::with_capacity(1024),
            read: Vec::with_capacity(8192),
            closing: false,
        }
    }

    pub async fn send(&mut self, request: &Request) -> io::Result<Response> {
        self.write.clear();
        request.encode(&self.host, &mut self.write);
        self.stream.write_all(&self.write).await?;
        self.read.clear();
        loop {
            if let Some(head) = parse_head(&self.read)? {
                let end = head.length + head.content_length;
                while self.read.len() < end {
                    self.fill().await?;
                }
                self.closing = head.close;
                let body = self.read.get(head.length..end).unwrap_or_default().to_vec();
                self.read.drain(..end);
                return Ok(Response {
                    status: head.status,
                    body,
                });
            }
            self.fill().await?;
        }
    }

    async fn fill(&mut self) -> io::Result<()> {
        if self.read.capacity() - self.read.len() < 4096 {
            self.read.reserve(8192);
        }
        let n = self.stream.read_buf(&mut self.read).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            ));
        }
        Ok(())
    }
}

struct Head {
    status: u16,
    /// Bytes of the status line and headers, blank line included.
    length: usize,
    content_length: usize,
    close: bool,
}

fn parse_head(bytes: &[u8]) -> io::Result<Option<Head>> {
    let mut headers = [httparse::EMPTY_HEADER; HEADERS_MAX];
    let mut response = httparse::Response::new(&mut headers);
    let length = match response.parse(bytes) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(error) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("malformed answer: {error}"),
            ))
        }
    };
    let status = response.code.unwrap_or(0);
    let mut content_length = None;
    let mut close = false;
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            content_length = std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "chunked answers are not supported by the raw client (use --client hyper)",
            ));
        } else if header.name.eq_ignore_ascii_case("connection") {
            close = header.value.eq_ignore_ascii_case(b"close");
        }
    }
    let content_length = match (content_length, status) {
        (Some(n), _) => n,
        (None, 204 | 304) | (None, 100..=199) => 0,
        (None, _) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "an answer without Content-Length",
            ))
        }
    };
    Ok(Some(Head {
        status,
        length,
        content_length,
        close,
    }))
}

/// hyper's client connection.
pub struct HyperConn {
    sender: hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: Arc<str>,
    driver: tokio::task::JoinHandle<()>,
}

impl HyperConn {
    pub async fn new(stream: TcpStream, host: Arc<str>) -> io::Result<HyperConn> {
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(io::Error::other)?;
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(HyperConn {
            sender,
            host,
            driver,
        })
    }

    pub async fn send(&mut self, request: &Request) -> io::Result<Response> {
        self.sender.ready().await.map_err(io::Error::other)?;
        let mut builder = hyper::Request::builder()
            .method(match request.method {
                Method::Get => hyper::Method::GET,
                Method::Post => hyper::Method::POST,
            })
            .uri(request.path.as_str())
            .header(hyper::header::HOST, &*self.host);
        if let Some(token) = &request.token {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(key) = &request.idempotency_key {
            builder = builder.header("idempotency-key", format!("\"{key}\""));
        }
        let body = match &request.body {
            Some(body) => {
                builder = builder.header(hyper::header::CONTENT_TYPE, "application/json");
                Bytes::from(body.clone())
            }
            None => Bytes::new(),
        };
        let http_request = builder
            .body(Full::new(body))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let answer = self
            .sender
            .send_request(http_request)
            .await
            .map_err(io::Error::other)?;
        let status = answer.status().as_u16();
        let body = answer
            .into_body()
            .collect()
            .await
            .map_err(io::Error::other)?
            .to_bytes();
        Ok(Response {
            status,
            body: body.to_vec(),
        })
    }
}

impl Drop for HyperConn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_encode_as_one_buffer() {
        let mut request = Request::post("/v1/x".into(), Some("t0k".into()), "{\"a\":1}".into());
        request.idempotency_key = Some("k-1".into());
        let mut out = Vec::new();
        request.encode("h:1", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "POST /v1/x HTTP/1.1\r\nHost: h:1\r\nAuthorization: Bearer t0k\r\nIdempotency-Key: \"k-1\"\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
        );
    }

    #[test]
    fn heads_parse_partially_and_completely() {
        let full = b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}";
        assert!(parse_head(&full[..10]).unwrap().is_none());
        let head = parse_head(full).unwrap().unwrap();
        assert_eq!(
            (head.status, head.content_length, head.close),
            (201, 2, true)
        );
        assert_eq!(head.length, full.len() - 2);
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").is_err());
    }

    #[test]
    fn urls_parse() {
        let target = Target::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(target.addr.port(), 8080);
        assert_eq!(&*target.host, "127.0.0.1:8080");
        assert!(Target::parse("https://x").is_err());
    }
}
