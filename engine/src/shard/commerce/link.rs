//! Deciding payment links and QR payloads (records in `payment`, payload format in `emvco`).

use crate::commerce::payment::{PaymentLink, QrCode, LINK_MINUTES_DEFAULT, LINK_MINUTES_MAX};
use crate::shard::command::{CreatePaymentLink, CreateQr};
use crate::shard::event::Event;
use crate::shard::ledger::checks::bounded_text;
use crate::shard::ledger::posting::Draft;
use crate::shard::state::Shard;
use crate::values::emvco::{merchant_payload, MerchantQr};
use crate::values::error::Rejection;
use crate::values::ids::{PaymentLinkId, QrId, UuidKind};
use crate::values::money::validate_amount;

const MS_PER_MINUTE: i64 = 60_000;

/// `now + minutes`, for links and QR payloads (1..=43200 minutes, default one day).
fn link_expiry(now_ms: i64, minutes: Option<u32>) -> Result<i64, Rejection> {
    let minutes = minutes.unwrap_or(LINK_MINUTES_DEFAULT);
    if !(1..=LINK_MINUTES_MAX).contains(&minutes) {
        return Err(Rejection::InvalidRequest(
            "expires_in_minutes must be 1 to 43200",
        ));
    }
    now_ms
        .checked_add(i64::from(minutes) * MS_PER_MINUTE)
        .ok_or(Rejection::InvalidRequest("expiry out of range"))
}

impl Shard {
    pub(crate) fn decide_create_payment_link(
        &self,
        draft: &mut Draft<'_>,
        request: &CreatePaymentLink,
    ) -> Result<(), Rejection> {
        let description = bounded_text(request.description.as_deref())?;
        let expires_at_ms = link_expiry(draft.now_ms(), request.expires_in_minutes)?;
        let merchant = self.client_wallet(request.merchant_wallet_id)?;
        if merchant.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        let id = PaymentLinkId(self.record_id(self.commerce.next_link_seq)?);
        draft.push(Event::PaymentLinkCreated(Box::new(PaymentLink {
            id,
            uuid: draft.uuid(UuidKind::PaymentLink, id.0),
            merchant_wallet_id: merchant.id(),
            merchant_id: merchant.business_id(),
            amount,
            currency: request.currency,
            description,
            created_at_ms: draft.now_ms(),
            expires_at_ms,
            used_by_payment_uuid: None,
            used_at_ms: None,
        })));
        Ok(())
    }

    pub(crate) fn decide_create_qr(
        &self,
        draft: &mut Draft<'_>,
        request: &CreateQr,
    ) -> Result<(), Rejection> {
        let expires_at_ms = link_expiry(draft.now_ms(), request.expires_in_minutes)?;
        let merchant = self.client_wallet(request.merchant_wallet_id)?;
        let currency = request.currency;
        if merchant.currency() != currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = match request.amount {
            Some(amount) => Some(validate_amount(amount, currency)?),
            None => None,
        };
        let id = QrId(self.record_id(self.commerce.next_qr_seq)?);
        let branch_id = request.branch_id.unwrap_or(merchant.branch_id());
        let amount_text = amount.map(|amount| amount.to_string());
        let account_number = format!("{:012}", merchant.id().0);
        let mut merchant_name = format!("MERCHANT {}", merchant.business_id());
        if merchant_name.len() > 25 {
            merchant_name = "MERCHANT".to_owned();
        }
        let payload = merchant_payload(&MerchantQr {
            account_number: &account_number,
            branch_id,
            currency_numeric: currency.numeric_code(),
            amount: amount_text.as_deref(),
            merchant_name: &merchant_name,
            reference_label: &format!("QR{}", id.0),
        })?;
        draft.push(Event::QrCreated(Box::new(QrCode {
            id,
            uuid: draft.uuid(UuidKind::Qr, id.0),
            merchant_wallet_id: merchant.id(),
            merchant_id: merchant.business_id(),
            amount,
            currency,
            branch_id,
            payload: payload.into_boxed_str(),
            created_at_ms: draft.now_ms(),
            expires_at_ms,
        })));
        Ok(())
    }
}
