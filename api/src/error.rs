//! One error type for the HTTP edge, and the one place where failures become statuses.
//!
//! Body (decisions.md §5): `{status: false, message, error: {code, details?}, errors?: {field:
//! [messages]}, request_id}`. Engine rejections map to statuses in [`ApiError::from_rejection`];
//! nothing else in the crate picks a status for a business rule. A 500 never carries internals.

use std::collections::BTreeMap;

use hyper::StatusCode;
use serde::Serialize;

/// A failure to be rendered as the error envelope. Small, so `Result<_, ApiError>` stays cheap;
/// the rarely used parts live boxed in [`Extra`].
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    extra: Option<Box<Extra>>,
}

/// Details, per-field messages and extra headers of an error.
#[derive(Debug, Clone, Default)]
struct Extra {
    details: Option<serde_json::Value>,
    fields: BTreeMap<String, Vec<String>>,
    /// Extra response headers (e.g. `Retry-After` on 429).
    headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            extra: None,
        }
    }

    fn extra(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    /// Adds a message about one field (the `errors` object of the envelope).
    pub fn add_field(&mut self, field: &str, message: impl Into<String>) {
        self.extra()
            .fields
            .entry(field.to_owned())
            .or_default()
            .push(message.into());
    }

    /// Adds a response header.
    pub fn add_header(&mut self, name: &'static str, value: String) {
        self.extra().headers.push((name, value));
    }

    /// Extra response headers.
    pub fn headers(&self) -> &[(&'static str, String)] {
        self.extra
            .as_ref()
            .map_or(&[], |extra| extra.headers.as_slice())
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn malformed_json(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "malformed_json", message)
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or invalid credentials",
        )
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    pub fn not_found(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("{what} not found"),
        )
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    /// A validation failure of one field.
    pub fn invalid_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut error = Self::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
            format!("{field}: {message}"),
        );
        error.add_field(field, message);
        error
    }

    pub fn internal() -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "internal server error",
        )
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
    }

    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.extra().details = Some(details);
        self
    }

    pub fn with_header(mut self, name: &'static str, value: String) -> Self {
        self.add_header(name, value);
        self
    }

    /// A record read's refusal: not found names `what` (as the route calls it); anything else
    /// (a history store that cannot be read: 503) keeps its own status.
    pub fn from_read(rejection: &engine::Rejection, what: &str) -> Self {
        match rejection {
            engine::Rejection::NotFound(_) => Self::not_found(what),
            other => Self::from_rejection(other),
        }
    }

    /// Maps an engine rejection to its status. The only place this decision is made.
    pub fn from_rejection(rejection: &engine::Rejection) -> Self {
        use engine::Rejection as R;
        let status = match rejection {
            R::NotFound(_) => StatusCode::NOT_FOUND,
            R::Duplicate(_)
            | R::WalletFrozen
            | R::InvalidState(_)
            | R::HoldExpired
            | R::AlreadyReversed => StatusCode::CONFLICT,
            R::PaymentLinkExpired | R::BatchInterrupted => StatusCode::CONFLICT,
            R::FourEyes => StatusCode::FORBIDDEN,
            R::WrongShard(_) => StatusCode::INTERNAL_SERVER_ERROR,
            R::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            R::BatchTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::UNPROCESSABLE_ENTITY,
        };
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(%rejection, "engine refused a command as routed to the wrong shard");
            return Self::internal();
        }
        Self::new(status, rejection.code(), rejection.to_string())
    }

    /// The JSON body for this error.
    pub fn body(&self, request_id: &str) -> Vec<u8> {
        #[derive(Serialize)]
        struct Detail<'a> {
            code: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            details: Option<&'a serde_json::Value>,
        }
        #[derive(Serialize)]
        struct Envelope<'a> {
            status: bool,
            message: &'a str,
            error: Detail<'a>,
            #[serde(skip_serializing_if = "Option::is_none")]
            errors: Option<&'a BTreeMap<String, Vec<String>>>,
            request_id: &'a str,
        }
        let extra = self.extra.as_deref();
        let envelope = Envelope {
            status: false,
            message: &self.message,
            error: Detail {
                code: self.code,
                details: extra.and_then(|e| e.details.as_ref()),
            },
            errors: extra.map(|e| &e.fields).filter(|f| !f.is_empty()),
            request_id,
        };
        serde_json::to_vec(&envelope).unwrap_or_else(|_| br#"{"status":false}"#.to_vec())
    }
}
