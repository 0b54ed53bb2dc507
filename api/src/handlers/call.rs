//! What every handler shares: the routed request ([`Call`]) with JSON decoding (the 400/422
//! split), path and query parsing and idempotency keys; running a command with or without a key;
//! mapping engine errors in one place ([`engine_error`]); the wallet scope check; rendering.

use std::net::SocketAddr;

use bytes::Bytes;
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::owner_shard;
use engine::runtime::{EngineError, IdempotencyKey, LegacyRequest, WalletScope};
use engine::{Command, Currency, Rejection, Uuid, WalletId};
use hyper::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;

use crate::app::SharedApp;
use crate::auth::{Principal, Scope};
use crate::error::ApiError;
use crate::routes::Op;
use crate::views::{render_outcome, Rendered};

/// A routed, authenticated request, body read.
pub struct Call {
    pub op: Op,
    pub params: Vec<(String, String)>,
    pub query: String,
    pub body: Bytes,
    pub headers: HeaderMap,
    pub principal: Option<Principal>,
    pub request_id: String,
    pub remote: SocketAddr,
}

/// What a handler returns: the response, and whether it replays an earlier answer.
pub type Handled = Result<(Rendered, bool), ApiError>;

impl Call {
    /// The authenticated caller (the server refuses non-public routes without one).
    pub fn principal(&self) -> Result<&Principal, ApiError> {
        self.principal.as_ref().ok_or_else(ApiError::unauthorized)
    }

    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The `{walletId}` path parameter; anything but a positive integer is an unknown wallet.
    pub fn wallet_id(&self) -> Result<WalletId, ApiError> {
        self.param("walletId")
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|id| *id > 0)
            .map(WalletId)
            .ok_or_else(|| ApiError::not_found("wallet"))
    }

    /// A uuid path parameter; a malformed one is an unknown resource.
    pub fn uuid_param(&self, name: &str, what: &str) -> Result<Uuid, ApiError> {
        self.param(name)
            .and_then(|v| v.parse::<Uuid>().ok())
            .ok_or_else(|| ApiError::not_found(what))
    }

    /// The JSON body as `T`: syntax errors are 400, type and shape errors 422.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        let bytes: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &self.body
        };
        // serde reads a JSON array into a struct positionally ([1] would be {"amount": 1}):
        // every request body of this API is an object.
        if bytes
            .iter()
            .find(|b| !b.is_ascii_whitespace())
            .is_some_and(|b| *b != b'{')
        {
            return Err(
                match serde_json::from_slice::<serde::de::IgnoredAny>(bytes) {
                    Err(error) => {
                        ApiError::malformed_json(format!("the body is not valid JSON: {error}"))
                    }
                    Ok(_) => ApiError::unprocessable(
                        "validation_failed",
                        "the body must be a JSON object",
                    ),
                },
            );
        }
        serde_json::from_slice(bytes).map_err(|error| {
            use serde_json::error::Category;
            match error.classify() {
                Category::Syntax | Category::Eof | Category::Io => {
                    ApiError::malformed_json(format!("the body is not valid JSON: {error}"))
                }
                Category::Data => ApiError::unprocessable(
                    "validation_failed",
                    format!("the body does not fit: {error}"),
                ),
            }
        })
    }

    /// Query parameters (percent-decoded).
    pub fn query_pairs(&self) -> Vec<(String, String)> {
        self.query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect()
    }

    pub fn query(&self, name: &str) -> Option<String> {
        self.query_pairs()
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }

    /// `page` (≥ 1, default 1) and `per_page` (1..=100, default 20); out of range: 422.
    pub fn page(&self) -> Result<engine::Page, ApiError> {
        let number = |name: &str, default: u32| -> Result<u32, ApiError> {
            match self.query(name) {
                None => Ok(default),
                Some(text) => text
                    .parse::<u32>()
                    .map_err(|_| ApiError::invalid_field(name, "must be a positive integer")),
            }
        };
        let page = number("page", 1)?;
        let per_page = number("per_page", 20)?;
        if page < 1 {
            return Err(ApiError::invalid_field("page", "must be at least 1"));
        }
        if !(1..=100).contains(&per_page) {
            return Err(ApiError::invalid_field(
                "per_page",
                "must be between 1 and 100",
            ));
        }
        engine::Page::new(page, per_page).map_err(|r| ApiError::from_rejection(&r))
    }

    /// The `Idempotency-Key` header: a structured-field string (`"..."`) or a bare token.
    pub fn idempotency_key(&self) -> Result<Option<String>, ApiError> {
        let Some(value) = self.headers.get("idempotency-key") else {
            return Ok(None);
        };
        let text = value
            .to_str()
            .map_err(|_| ApiError::bad_request("Idempotency-Key must be visible ASCII"))?
            .trim();
        let key = text
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .unwrap_or(text);
        if key.is_empty() || key.len() > 255 {
            return Err(ApiError::bad_request(
                "Idempotency-Key must be 1 to 255 characters",
            ));
        }
        Ok(Some(key.to_owned()))
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(decoded) => {
                        out.push(decoded);
                        i += 3;
                        continue;
                    }
                    None => out.push(b),
                }
            }
            b'+' => out.push(b' '),
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The error code of a request whose Idempotency-Key is still being processed.
pub const REQUEST_IN_PROGRESS: &str = "request_in_progress";

/// Maps an engine failure to the API's error. The one place this is decided.
pub fn engine_error(error: EngineError) -> ApiError {
    match error {
        EngineError::Rejected(rejection) => ApiError::from_rejection(&rejection),
        EngineError::IdempotencyKeyReused => ApiError::unprocessable(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different request",
        ),
        EngineError::IdempotencyInFlight => ApiError::conflict(
            REQUEST_IN_PROGRESS,
            "a request with this Idempotency-Key is still being processed; retry shortly",
        ),
        EngineError::Unavailable(reason) => {
            tracing::error!(%reason, "the ledger is unavailable");
            ApiError::unavailable("the ledger is unavailable; retry later")
        }
        _ => ApiError::internal(),
    }
}

/// Runs a command that changes state, under the request's idempotency key when it has one.
pub async fn run(app: &SharedApp, call: &Call, command: Command) -> Handled {
    let key = call.idempotency_key()?;
    run_keyed(app, call, command, key).await
}

/// [`run`] under `key` (the header's, or a body field's where the contract puts it there).
pub async fn run_keyed(
    app: &SharedApp,
    call: &Call,
    command: Command,
    key: Option<String>,
) -> Handled {
    let Some(key) = key else {
        let outcome = app.engine.execute(command).await.map_err(engine_error)?;
        return Ok((render_outcome(call.op.index(), &outcome), false));
    };
    let key = idempotency_key(call, &command, key)?;
    let reply = app
        .engine
        .execute_idempotent(command, key)
        .await
        .map_err(engine_error)?;
    let rendered = Rendered::from_stored(&reply.response).ok_or_else(ApiError::internal)?;
    Ok((rendered, reply.replayed))
}

/// The key of a keyed command: the caller, the client's key and the request's fingerprint.
pub fn idempotency_key(
    call: &Call,
    command: &Command,
    key: String,
) -> Result<IdempotencyKey, ApiError> {
    let caller = call.principal()?.caller();
    let operation = call.op.route().operation_id;
    Ok(IdempotencyKey {
        fingerprint: engine::runtime::fingerprint::fingerprint(
            operation,
            &caller,
            &call.params,
            command,
        ),
        legacy: Some(LegacyRequest {
            operation,
            params: call.params.clone(),
        }),
        caller,
        key,
        route: call.op.index(),
    })
}

/// Checks the caller may use wallet `wallet_id` at `call.op`'s tier. Reads only facts that never
/// change (owner, business), so it does not wait for durability: the command or read that
/// follows waits for what it shows.
pub async fn authorized_wallet(
    app: &SharedApp,
    call: &Call,
    wallet_id: WalletId,
) -> Result<WalletScope, ApiError> {
    let principal = call.principal()?;
    let wallet = app
        .engine
        .wallet_scope(wallet_id)
        .await
        .map_err(engine_error)?
        .ok_or_else(|| ApiError::not_found("wallet"))?;
    // The ledger's own accounts (float, fees, clearing, in-transit) are not client wallets.
    if wallet.owner_type == engine::ledger::wallet::OwnerType::System {
        return Err(ApiError::not_found("wallet"));
    }
    principal.require(call.op.route().tier, Scope::of_wallet_scope(&wallet))?;
    Ok(wallet)
}

/// A JSON success response.
pub fn ok(status: StatusCode, value: &impl serde::Serialize) -> Handled {
    Ok((Rendered::json(status, value), false))
}

/// Maps a `not_found` rejection of a lookup to a 404 naming `what`.
pub fn not_found_as(what: &'static str) -> impl Fn(Rejection) -> ApiError {
    move |rejection| match rejection {
        Rejection::NotFound(_) => ApiError::not_found(what),
        other => ApiError::from_rejection(&other),
    }
}

/// A currency code of a request field (422 naming the field when unknown).
pub fn currency_field(field: &str, code: &str) -> Result<Currency, ApiError> {
    Currency::from_code(code).map_err(|_| {
        let mut error = ApiError::unprocessable(
            "unknown_currency",
            format!("{field}: {code:?} is not an ISO 4217 currency we support"),
        );
        error.add_field(field, "unknown currency");
        error
    })
}

/// The merchant's wallet for a request: `wallet_id` when given (it must be the merchant's), else
/// its primary wallet in `currency`.
pub async fn merchant_wallet(
    app: &SharedApp,
    merchant_id: u64,
    wallet_id: Option<u64>,
    currency: Currency,
) -> Result<WalletId, ApiError> {
    let shard = owner_shard(merchant_id, app.engine.shard_count());
    let found = app
        .engine
        .peek_shard(shard, move |s| match wallet_id {
            Some(id) => s
                .wallet(WalletId(id))
                .filter(|w| w.owner_type() == OwnerType::Merchant && w.owner_id() == merchant_id)
                .map(|w| w.id()),
            None => s.wallet_of_owner(
                OwnerType::Merchant,
                merchant_id,
                currency,
                WalletType::Primary,
            ),
        })
        .await
        .map_err(engine_error)?;
    found.ok_or_else(|| ApiError::not_found("merchant wallet"))
}
