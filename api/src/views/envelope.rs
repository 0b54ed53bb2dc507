//! The envelopes around every answer (contract 2.1): `{status, message?, data}`, paginated lists,
//! the merchant `meta` list, and [`Rendered`], the status and bytes of a response.

use hyper::StatusCode;
use serde::Serialize;

use crate::error::ApiError;

/// `{status: true, message?, data}`.
#[derive(Serialize)]
pub struct Envelope<T: Serialize> {
    status: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_translated: Option<&'static str>,
    data: T,
}

pub fn envelope<T: Serialize>(data: T, message: Option<&'static str>) -> Envelope<T> {
    Envelope {
        status: true,
        message,
        message_translated: None,
        data,
    }
}

/// The standard envelope with `message_translated` (wallet refund; payout approve, reject,
/// execute).
pub fn translated<T: Serialize>(data: T, message: &'static str) -> Envelope<T> {
    Envelope {
        status: true,
        message: Some(message),
        message_translated: Some(message),
        data,
    }
}

/// Laravel-style page inside `data` (contract 2.1; decisions.md §6 for `from`/`to`).
#[derive(Serialize)]
pub struct Page<T: Serialize> {
    data: Vec<T>,
    current_page: u32,
    last_page: u64,
    per_page: u32,
    total: u64,
    from: Option<u64>,
    to: Option<u64>,
}

pub fn page<T: Serialize>(records: Vec<T>, total: usize, page: u32, per_page: u32) -> Page<T> {
    let total = total as u64;
    let per_page_u = u64::from(per_page.max(1));
    let last_page = total.div_ceil(per_page_u).max(1);
    let first = (u64::from(page.max(1)) - 1) * per_page_u;
    let (from, to) = if records.is_empty() {
        (None, None)
    } else {
        (Some(first + 1), Some(first + records.len() as u64))
    };
    Page {
        data: records,
        current_page: page,
        last_page,
        per_page,
        total,
        from,
        to,
    }
}

/// A rendered response: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// `application/json` for everything but `/metrics`; not part of the stored form.
    pub content_type: &'static str,
}

/// The content type of JSON responses.
pub const JSON: &str = "application/json";

impl Rendered {
    pub fn json(status: StatusCode, value: &impl Serialize) -> Self {
        Rendered {
            status,
            body: serde_json::to_vec(value).unwrap_or_default(),
            content_type: JSON,
        }
    }

    pub fn error(error: &ApiError) -> Self {
        Rendered {
            status: error.status,
            body: error.body(REQUEST_ID_PLACEHOLDER),
            content_type: JSON,
        }
    }

    /// Stored form for the idempotency table: 2 bytes of status, then the body.
    pub fn to_stored(&self) -> Vec<u8> {
        let mut bytes = self.status.as_u16().to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    pub fn from_stored(bytes: &[u8]) -> Option<Self> {
        let (status, body) = bytes.split_at_checked(2)?;
        let status = u16::from_be_bytes([*status.first()?, *status.get(1)?]);
        Some(Rendered {
            status: StatusCode::from_u16(status).ok()?,
            body: body.to_vec(),
            content_type: JSON,
        })
    }
}

/// Written into error bodies that are stored for replay; replaced by the live request's id.
pub const REQUEST_ID_PLACEHOLDER: &str = "\u{0}request-id\u{0}";

/// The merchant transaction list (contract 2.1): `{status, data: [...], meta: {...}}`.
#[derive(Serialize)]
pub struct MetaList<T: Serialize> {
    status: bool,
    data: Vec<T>,
    meta: PageMeta,
}

/// Contract 2.1 `PaginationMeta`; `from`/`to` as in [`page`].
#[derive(Serialize)]
pub struct PageMeta {
    current_page: u32,
    last_page: u64,
    per_page: u32,
    total: u64,
    from: Option<u64>,
    to: Option<u64>,
}

pub fn meta_list<T: Serialize>(
    records: Vec<T>,
    total: u64,
    page: u32,
    per_page: u32,
) -> MetaList<T> {
    let per_page_u = u64::from(per_page.max(1));
    let first = (u64::from(page.max(1)) - 1) * per_page_u;
    let (from, to) = if records.is_empty() {
        (None, None)
    } else {
        (Some(first + 1), Some(first + records.len() as u64))
    };
    MetaList {
        status: true,
        data: records,
        meta: PageMeta {
            current_page: page,
            last_page: total.div_ceil(per_page_u).max(1),
            per_page,
            total,
            from,
            to,
        },
    }
}
