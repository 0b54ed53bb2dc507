//! The HTTP server: accept loop, connections, graceful shutdown, and the request pipeline.
//!
//! The accept loop follows hyper-util's `server_graceful` example: each connection is an
//! `http1` connection watched by a `GracefulShutdown`; on the shutdown signal the listener is
//! dropped and in-flight requests get up to 30 s to finish (their WAL acknowledgements included).
//! A connection limit bounds memory (TIGER_STYLE: put a limit on everything).
//!
//! Per request: request id (echoed or generated; over 128 characters is 400), route, rate
//! limit, body (1 MiB cap: 413), authentication, handler, error rendering, metrics. A handler's
//! future is dropped when its client disconnects; what must not stop with it runs detached in the
//! engine: a keyed command runs in its own task and its key's claim is released by a guard on
//! every path (`Engine::execute_idempotent`), and a multi-step command runs on a shard's Arbiter,
//! so a client that hangs up can neither cut a command in half nor wedge its key.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::app::SharedApp;
use crate::auth::{Principal, Subject};
use crate::error::ApiError;
use crate::handlers::{self, Call};
use crate::ratelimit::RateClass;
use crate::request_id::generate_request_id;
use crate::routes::{Matched, Op};
use crate::views::{Rendered, REQUEST_ID_PLACEHOLDER};

/// Largest accepted request body.
pub const BODY_BYTES_MAX: usize = 1 << 20;
/// Largest accepted body of the public identity routes (register, logins): their fields are
/// short, and nobody unauthenticated should make the server buffer a megabyte.
pub const AUTH_BODY_BYTES_MAX: usize = 16 << 10;
/// Largest accepted body of `POST /v1/transfers/batch`: 8,190 items of about 1 KiB each
/// (an item with ids, amount and currency is ~120 bytes; descriptions and references fill the rest).
pub const BATCH_BODY_BYTES_MAX: usize = 8 << 20;
/// Longest accepted X-Request-ID.
pub const REQUEST_ID_MAX: usize = 128;
/// Connections served at once; the accept loop waits for a free slot beyond that.
pub const CONNECTIONS_MAX: usize = 4096;
/// Time a client may take to send its request headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The body limit of `op` (decisions.md §5: 1 MiB; less on the unauthenticated identity routes,
/// more on the transfer batch).
pub fn body_bytes_max(op: Op) -> usize {
    match op {
        Op::RegisterCustomer | Op::LoginCustomer | Op::LoginEmployee => AUTH_BODY_BYTES_MAX,
        Op::CreateTransferBatch => BATCH_BODY_BYTES_MAX,
        _ => BODY_BYTES_MAX,
    }
}

/// Open connections per client address, with a guard per connection that gives its slot back.
#[derive(Default)]
struct PerAddress {
    /// Open connections, and whether a refusal was logged since the address was last under cap.
    open: dashmap::DashMap<IpAddr, (usize, bool)>,
}

struct AddressSlot {
    table: Arc<PerAddress>,
    address: IpAddr,
}

impl PerAddress {
    /// A slot for `address`, or `None` when it already holds `max` connections (logged once per
    /// episode, so a flood does not flood the log too).
    fn take(self: &Arc<Self>, address: IpAddr, max: usize) -> Option<AddressSlot> {
        let mut entry = self.open.entry(address).or_insert((0, false));
        let (open, logged) = &mut *entry;
        if *open >= max {
            if !*logged {
                *logged = true;
                tracing::warn!(%address, open = *open, limit = max, "connection limit per address reached; refusing its new connections");
            }
            return None;
        }
        *open += 1;
        Some(AddressSlot {
            table: self.clone(),
            address,
        })
    }
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        self.table
            .open
            .remove_if_mut(&self.address, |_, (open, logged)| {
                *open = open.saturating_sub(1);
                *logged = false;
                *open == 0
            });
    }
}

/// What a connection over its address's cap is told before it is closed (the body is 112 bytes;
/// a unit test checks the length).
const TOO_MANY_CONNECTIONS: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 112\r\n\r\n{\"status\":false,\"message\":\"too many open connections from this address\",\"error\":{\"code\":\"too_many_connections\"}}";

/// Serves `listener` until `shutdown` resolves, then drains in-flight requests.
pub async fn serve(
    listener: TcpListener,
    app: SharedApp,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(CONNECTIONS_MAX));
    let per_address = Arc::new(PerAddress::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => match permit { Ok(p) => p, Err(_) => break },
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, remote) = match accepted {
            Ok(pair) => pair,
            Err(error) => {
                // Like axum::serve: connection-level errors are the peer's; others (EMFILE) back off.
                if !matches!(
                    error.kind(),
                    std::io::ErrorKind::ConnectionRefused
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset
                ) {
                    tracing::error!(%error, "accept failed; backing off for a second");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                continue;
            }
        };
        let Some(address_slot) = per_address.take(remote.ip(), app.connections_per_address) else {
            // Best effort, never waiting on the peer: the answer fits in the socket buffer.
            let _ = stream.try_write(TOO_MANY_CONNECTIONS);
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let service = hyper::service::service_fn(move |request| {
            let app = app.clone();
            async move { Ok::<_, Infallible>(handle(app, request, remote).await) }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEADER_READ_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _permit = permit;
            let _address_slot = address_slot;
            if let Err(error) = connection.await {
                tracing::debug!(%error, "connection ended with an error");
            }
        });
    }
    app.ready.store(false, Ordering::SeqCst);
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => tracing::info!("all connections drained"),
        () = tokio::time::sleep(Duration::from_secs(30)) => tracing::warn!("shutdown timed out with connections still open"),
    }
}

/// Handles one request end to end; never fails (errors become responses).
async fn handle(
    app: SharedApp,
    request: Request<Incoming>,
    remote: SocketAddr,
) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let request_id = match request_id(&request) {
        Ok(id) => id,
        Err(error) => {
            let id = generate_request_id();
            return respond(error_response(&error, &id), &id, false, &[]);
        }
    };
    let span = tracing::info_span!("request", request_id = %request_id, method = %request.method(), path = %request.uri().path());
    let (op, response) = match tracing::Instrument::instrument(
        route_and_run(&app, request, remote, &request_id),
        span,
    )
    .await
    {
        Ok(done) => {
            let headers = done.limits.map(limit_header_values).unwrap_or_default();
            (
                Some(done.op),
                respond(done.rendered, &request_id, done.replayed, &headers),
            )
        }
        Err((op, error)) => {
            if error.status.is_server_error() {
                tracing::error!(request_id = %request_id, code = error.code, message = %error.message, "request failed");
            }
            (
                op,
                respond(
                    error_response(&error, &request_id),
                    &request_id,
                    false,
                    error.headers(),
                ),
            )
        }
    };
    let name = op.map_or("unmatched", |op| op.route().operation_id);
    app.metrics
        .observe(name, response.status().as_u16(), started.elapsed());
    response
}

type Failure = (Option<Op>, ApiError);

/// A handled request.
struct Done {
    op: Op,
    rendered: Rendered,
    /// An idempotent replay of an earlier answer.
    replayed: bool,
    /// The rate-limit verdict, reported in `RateLimit-*` headers.
    limits: Option<crate::ratelimit::Decision>,
}

async fn route_and_run(
    app: &SharedApp,
    request: Request<Incoming>,
    remote: SocketAddr,
    request_id: &str,
) -> Result<Done, Failure> {
    let (parts, body) = request.into_parts();
    let path = parts.uri.path().to_owned();
    let (op, params) = match app.router.find(&parts.method, &path) {
        Matched::Found(op, params) => (op, params),
        Matched::MethodNotAllowed => {
            return Err((
                None,
                ApiError::new(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "method not allowed on this path",
                ),
            ))
        }
        Matched::NotFound => {
            return Err((
                None,
                ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such route"),
            ))
        }
    };
    let route = op.route();
    let fail = |error: ApiError| (Some(op), error);

    // Authenticate first (cheap, no body read), so the rate limit can key on the subject. Public
    // routes never look at a token: keyed by the client address alone, a token cannot buy them
    // a fresh budget (decisions.md §2).
    let public = route.tier == crate::auth::Tier::Public;
    let principal = match bearer(&parts.headers) {
        Some(token) if !public => Some(authenticate(app, token).await.map_err(fail)?),
        _ => None,
    };
    if !public && principal.is_none() {
        return Err(fail(ApiError::unauthorized()));
    }
    let mut limit_headers = None;
    if let (Some(class), true) = (route.rate, app.rate_limits) {
        let caller = principal
            .as_ref()
            .map_or_else(|| remote.ip().to_string(), Principal::caller);
        let now = Instant::now();
        let decision = app.limiter.check(&caller, class, now);
        if !decision.allowed {
            return Err(fail(rate_limited(class, decision)));
        }
        limit_headers = Some(decision);
        // An employee's wallet list scans every shard: the scan class too, like the reports.
        let scans = op == Op::ListWallets
            && principal
                .as_ref()
                .is_some_and(|p| matches!(p.subject, Subject::Employee(_)));
        if scans {
            let scan = app.limiter.check(&caller, RateClass::Scan, now);
            if !scan.allowed {
                return Err(fail(rate_limited(RateClass::Scan, scan)));
            }
            if scan.remaining < decision.remaining {
                limit_headers = Some(scan);
            }
        }
    }

    let limit = body_bytes_max(op);
    if declared_length(&parts.headers).is_some_and(|length| length > limit as u64) {
        return Err(fail(payload_too_large(limit)));
    }
    let body = match tokio::time::timeout(app.body_read_timeout, read_body(body, limit)).await {
        Ok(read) => read.map_err(fail)?,
        Err(_) => {
            return Err(fail(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                format!(
                    "the request body did not arrive within {} ms",
                    app.body_read_timeout.as_millis()
                ),
            )))
        }
    };
    let query = parts.uri.query().unwrap_or("").to_owned();
    let call = Call {
        op,
        params,
        query,
        body,
        headers: parts.headers,
        principal,
        request_id: request_id.to_owned(),
        remote,
    };
    // The handler runs in its own task: past the timeout the client is told so, and the handler
    // still runs to its end (a command is never cut in half; a retry with the same
    // Idempotency-Key gets its answer). The handler's future is boxed: it is as large as the
    // largest route's, and spawning it unboxed copied all of it several times on the way into
    // the task (~6 % of walletd's samples, in `memmove`; BENCHMARKS.md, "Cheaper requests").
    let handler = {
        let app = app.clone();
        tokio::spawn(Box::pin(
            async move { handlers::dispatch(&app, call).await },
        ))
    };
    let handled = match tokio::time::timeout(app.handler_timeout, handler).await {
        Ok(Ok(handled)) => handled,
        Ok(Err(_)) => Err(ApiError::internal()),
        Err(_) => {
            tracing::warn!(
                operation = route.operation_id,
                timeout_ms = app.handler_timeout.as_millis() as u64,
                "a handler ran past its timeout; answered 503"
            );
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "timeout",
                format!(
                    "the request took longer than {} ms; its outcome is unknown: retry with the same Idempotency-Key",
                    app.handler_timeout.as_millis()
                ),
            ))
        }
    };
    let (rendered, replayed) = handled.map_err(|mut error| {
        if let Some(decision) = limit_headers {
            for (name, value) in limit_header_values(decision) {
                error.add_header(name, value);
            }
        }
        (Some(op), error)
    })?;
    Ok(Done {
        op,
        rendered,
        replayed,
        limits: limit_headers,
    })
}

fn limit_header_values(decision: crate::ratelimit::Decision) -> Vec<(&'static str, String)> {
    vec![
        ("ratelimit-limit", decision.limit.to_string()),
        ("ratelimit-remaining", decision.remaining.to_string()),
        ("ratelimit-reset", decision.reset_secs.to_string()),
    ]
}

fn rate_limited(class: RateClass, decision: crate::ratelimit::Decision) -> ApiError {
    let mut error = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        format!(
            "rate limit of {} requests per minute ({}) reached",
            class.limit(),
            class.name()
        ),
    )
    .with_header("retry-after", decision.reset_secs.to_string());
    for (name, value) in limit_header_values(decision) {
        error.add_header(name, value);
    }
    error
}

fn payload_too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("request bodies of this route are limited to {limit} bytes"),
    )
}

/// The declared `Content-Length`, when there is one that parses.
fn declared_length(headers: &hyper::HeaderMap) -> Option<u64> {
    headers
        .get(hyper::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn read_body(body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    match Limited::new(body, limit).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(error)
            if error
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(payload_too_large(limit))
        }
        Err(_) => Err(ApiError::bad_request("the request body could not be read")),
    }
}

fn bearer(headers: &hyper::HeaderMap) -> Option<&str> {
    let value = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(token.trim())
}

/// Verifies a token and confirms its subject exists.
async fn authenticate(app: &SharedApp, token: &str) -> Result<Principal, ApiError> {
    let now = app.now_secs();
    if let Some(principal) = app.verified_tokens.get(token, now) {
        return Ok(principal);
    }
    let claims = app.tokens.verify(token, now).map_err(|error| {
        tracing::debug!(%error, "refused a bearer token");
        ApiError::unauthorized()
    })?;
    let subject = Subject::parse(&claims.sub).ok_or_else(ApiError::unauthorized)?;
    let principal = match app.known_subjects.get(&subject) {
        Some(known) => known.clone(),
        None => {
            let loaded = handlers::identity::load_principal(app, subject)
                .await?
                .ok_or_else(ApiError::unauthorized)?;
            app.known_subjects.insert(subject, loaded.clone());
            loaded
        }
    };
    // Remember the verified token until it expires (bounded: tokens not used lately are
    // forgotten by generations).
    app.verified_tokens
        .insert(token, principal.clone(), claims.exp, now);
    Ok(principal)
}

fn request_id(request: &Request<Incoming>) -> Result<String, ApiError> {
    match request.headers().get("x-request-id") {
        None => Ok(generate_request_id()),
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| ApiError::bad_request("X-Request-ID must be visible ASCII"))?;
            if text.is_empty() || text.len() > REQUEST_ID_MAX {
                return Err(ApiError::bad_request(format!(
                    "X-Request-ID must be 1 to {REQUEST_ID_MAX} characters"
                )));
            }
            Ok(text.to_owned())
        }
    }
}

fn error_response(error: &ApiError, request_id: &str) -> Rendered {
    Rendered {
        status: error.status,
        body: error.body(request_id),
        content_type: crate::views::JSON,
    }
}

/// Builds the HTTP response: JSON body (with the live request id in error bodies), headers.
fn respond(
    rendered: Rendered,
    request_id: &str,
    replayed: bool,
    extra_headers: &[(&'static str, String)],
) -> Response<Full<Bytes>> {
    let content_type = rendered.content_type;
    let body = if rendered.status.as_u16() >= 400 {
        fill_request_id(rendered.body, request_id)
    } else {
        rendered.body
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = rendered.status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(value) = HeaderValue::from_str(request_id) {
        headers.insert(HeaderName::from_static("x-request-id"), value);
    }
    if replayed {
        headers.insert(
            HeaderName::from_static("idempotent-replayed"),
            HeaderValue::from_static("true"),
        );
    }
    for (name, value) in extra_headers {
        if let Ok(value) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// Replaces the placeholder a stored error body carries with this request's id.
fn fill_request_id(body: Vec<u8>, request_id: &str) -> Vec<u8> {
    let placeholder = serde_json::to_string(REQUEST_ID_PLACEHOLDER).unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    if !text.contains(&placeholder) {
        return body;
    }
    let live = serde_json::to_string(request_id).unwrap_or_else(|_| "\"\"".into());
    text.replacen(&placeholder, &live, 1).into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_too_many_connections_answer_declares_its_body_length() {
        let text = std::str::from_utf8(TOO_MANY_CONNECTIONS).unwrap_or_default();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or_default();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{text}"
        );
        assert!(
            serde_json::from_str::<serde_json::Value>(body).is_ok(),
            "{body}"
        );
    }
}
