//! The bare hyper baseline: walletd's HTTP shape without walletd.
//!
//! hyper 1.x http1 on a multi-thread tokio runtime with 2 workers, TCP_NODELAY, the same
//! connection settings walletd uses (`header_read_timeout` with a `TokioTimer`), reading every
//! request body in full, and answering every request with a fixed JSON body: a copy of
//! walletd's answer to a deposit (a Transaction envelope, 682 bytes there), with the same
//! headers (`content-type`, `x-request-id`; hyper adds `content-length` and `date`). What
//! walletd does on top of this (routing, authentication, JSON decoding, the ledger, the
//! durable log, rendering) is what a walletd/baseline ratio measures.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use super::args::BaselineArgs;

/// walletd's answer to `POST /v1/wallets/1/deposit {"amount": 100.50}`, ids widened to the
/// size they have after a few hundred thousand requests.
pub const DEPOSIT_ANSWER: &str = concat!(
    r#"{"status":true,"data":{"id":123456,"uuid":"a958d8a8-ca18-4c37-a999-c8b304d31ad3","#,
    r#""wallet_id":42,"owner_type":"customer","owner_id":42,"transaction_type":"deposit","#,
    r#""direction":"credit","status":"completed","amount":100.50,"currency_code":"YER","#,
    r#""exchange_rate":null,"local_amount":null,"fee_amount":0.00,"net_amount":100.50,"#,
    r#""reference_type":null,"reference_id":null,"transfer_uuid":null,"#,
    r#""counterparty_wallet_id":null,"external_reference":null,"idempotency_key":null,"#,
    r#""business_id":1,"branch_id":0,"payment_method":null,"description":null,"meta":null,"#,
    r#""refunded_amount":0.00,"completed_at":"2026-11-22T05:11:49.603Z","failed_at":null,"#,
    r#""reversed_at":null,"created_at":"2026-11-22T05:11:49.603Z"}}"#
);

const REQUEST_ID: &str = "f7772978-bb04-4c3f-80b4-268637739ac6";

/// Serves until the process is killed (or SIGINT/SIGTERM); prints the address on stdout.
pub fn serve(args: &BaselineArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers.max(1))
        .enable_all()
        .thread_name("baseline")
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(args.listen).await?;
        let address = listener.local_addr()?;
        println!("baseline listening on http://{address}");
        use std::io::Write as _;
        std::io::stdout().flush()?;
        let mut stop = std::pin::pin!(stop_signal());
        loop {
            let accepted = tokio::select! {
                accepted = listener.accept() => accepted,
                () = &mut stop => return anyhow::Ok(()),
            };
            let (stream, _) = match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    eprintln!("accept failed: {error}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(30))
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer))
                    .await;
            });
        }
    })
}

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    // Read the body as walletd does, so both pay for it.
    let _ = request.into_body().collect().await;
    let mut response = Response::new(Full::new(Bytes::from_static(DEPOSIT_ANSWER.as_bytes())));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static("x-request-id"),
        HeaderValue::from_static(REQUEST_ID),
    );
    Ok(response)
}

async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_is_walletd_sized_json() {
        let value: serde_json::Value = serde_json::from_str(DEPOSIT_ANSWER).unwrap();
        assert_eq!(value["data"]["transaction_type"], "deposit");
        assert!(
            (650..750).contains(&DEPOSIT_ANSWER.len()),
            "{}",
            DEPOSIT_ANSWER.len()
        );
    }
}
