//! Checks every deciding step shares: bounded client text, frozen wallets, spendable funds.

use crate::ledger::transaction::TransactionText;
use crate::ledger::wallet::Wallet;
use crate::shard::command::{Details, TEXT_BYTES_MAX};
use crate::values::error::Rejection;

/// Bounds a client text field.
pub(crate) fn bounded_text(value: Option<&str>) -> Result<Option<Box<str>>, Rejection> {
    match value {
        None => Ok(None),
        Some(text) if text.len() > TEXT_BYTES_MAX => Err(Rejection::InvalidRequest(
            "text field longer than 4096 bytes",
        )),
        Some(text) => Ok(Some(text.into())),
    }
}

pub(crate) fn details_text(details: &Details) -> Result<TransactionText, Rejection> {
    Ok(TransactionText {
        description: bounded_text(details.description.as_deref())?,
        external_reference: bounded_text(details.external_reference.as_deref())?,
        idempotency_key: bounded_text(details.idempotency_key.as_deref())?,
        meta: bounded_text(details.meta.as_deref())?,
    })
}

pub(crate) fn check_not_frozen(wallet: &Wallet) -> Result<(), Rejection> {
    if wallet.is_frozen() {
        return Err(Rejection::WalletFrozen);
    }
    Ok(())
}

pub(crate) fn check_spendable(
    wallet: &Wallet,
    amount: rust_decimal::Decimal,
) -> Result<(), Rejection> {
    match wallet.available() {
        Some(available) if available >= amount => Ok(()),
        _ => Err(Rejection::InsufficientFunds),
    }
}
