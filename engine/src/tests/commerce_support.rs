//! Helpers for the commerce tests: merchant wallets, command builders, outcome unwrapping.

use rust_decimal::Decimal;

use super::{cur, dec, Harness};
use crate::commerce::payment::{PaymentProvider, PaymentReservation};
use crate::commerce::payout::{PeriodType, DAY_MS};
use crate::commerce::view::{PaymentLinkView, PaymentView, PayoutView, QrView, SettlementView};
use crate::ledger::view::TransactionView;
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::command::{
    CreatePaymentLink, CreatePayout, CreateQr, CreateSettlement, CreateWallet, InitiatePayment,
    RefundPayment,
};
use crate::values::fee::FeeRule;
use crate::{Command, Outcome, PayoutId, SettlementId, Uuid, WalletId};

/// The merchant (business) id the helpers use.
pub(crate) const MERCHANT: u64 = 7;
/// Employees: one creates, another approves.
pub(crate) const MAKER: u64 = 100;
pub(crate) const CHECKER: u64 = 200;

pub(crate) fn fee(percent: &str, fixed: &str) -> FeeRule {
    FeeRule {
        percent: dec(percent),
        fixed: dec(fixed),
    }
}

/// A merchant wallet of business `merchant_id` (owner type merchant, owner id = business id).
pub(crate) fn merchant_wallet(h: &mut Harness, merchant_id: u64, currency: &str) -> WalletId {
    match h.ok(Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Merchant,
        owner_id: merchant_id,
        currency: cur(currency),
        wallet_type: WalletType::Primary,
        business_id: merchant_id,
        branch_id: 3,
        meta: None,
    })) {
        Outcome::Wallet(view) => view.id,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn initiate(
    merchant_wallet_id: WalletId,
    payer_wallet_id: WalletId,
    amount: &str,
    currency: &str,
) -> InitiatePayment {
    InitiatePayment {
        merchant_id: MERCHANT,
        merchant_wallet_id,
        payer_wallet_id,
        amount: dec(amount),
        currency: cur(currency),
        fee: fee("2.5", "0.30"),
        provider: PaymentProvider::Wallet,
        description: Some("order 1".into()),
        metadata: Some("{\"order\":1}".into()),
        idempotency_key: None,
        payment_link_uuid: None,
    }
}

pub(crate) fn payment_of(outcome: Outcome) -> PaymentView {
    match outcome {
        Outcome::Payment(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn payout_of(outcome: Outcome) -> PayoutView {
    match outcome {
        Outcome::Payout(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn settlement_of(outcome: Outcome) -> SettlementView {
    match outcome {
        Outcome::Settlement(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn link_of(outcome: Outcome) -> PaymentLinkView {
    match outcome {
        Outcome::PaymentLink(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn qr_of(outcome: Outcome) -> QrView {
    match outcome {
        Outcome::Qr(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

pub(crate) fn reserved_of(outcome: Outcome) -> (PaymentReservation, TransactionView) {
    match outcome {
        Outcome::PaymentReserved {
            reservation,
            transaction,
        } => (reservation, transaction),
        other => panic!("unexpected {other:?}"),
    }
}

/// Initiates and returns the pending payment.
pub(crate) fn pay(h: &mut Harness, request: InitiatePayment) -> PaymentView {
    payment_of(h.ok(Command::InitiatePayment(request)))
}

/// Initiates and confirms (same shard).
pub(crate) fn pay_now(
    h: &mut Harness,
    merchant: WalletId,
    payer: WalletId,
    amount: &str,
) -> PaymentView {
    let currency = h
        .shard
        .wallet(merchant)
        .unwrap()
        .currency()
        .code()
        .to_owned();
    let payment = pay(h, initiate(merchant, payer, amount, &currency));
    payment_of(h.ok(Command::ConfirmPayment {
        payment_uuid: payment.uuid,
    }))
}

pub(crate) fn refund(payment_uuid: Uuid, amount: Option<&str>) -> Command {
    Command::RefundPayment(RefundPayment {
        payment_uuid,
        amount: amount.map(dec),
        reason: Some("returned goods".into()),
    })
}

pub(crate) fn link(merchant_wallet_id: WalletId, amount: &str, minutes: Option<u32>) -> Command {
    let currency = "USD";
    Command::CreatePaymentLink(CreatePaymentLink {
        merchant_wallet_id,
        amount: dec(amount),
        currency: cur(currency),
        description: Some("invoice 9".into()),
        expires_in_minutes: minutes,
    })
}

pub(crate) fn qr(merchant_wallet_id: WalletId, amount: Option<&str>, currency: &str) -> Command {
    Command::CreateQr(CreateQr {
        merchant_wallet_id,
        amount: amount.map(dec),
        currency: cur(currency),
        branch_id: None,
        expires_in_minutes: None,
    })
}

pub(crate) fn create_payout(wallet_id: WalletId, amount: &str, currency: &str) -> Command {
    Command::CreatePayout(CreatePayout {
        wallet_id,
        amount: dec(amount),
        currency: cur(currency),
        payout_method: "bank_transfer".into(),
        payout_destination: Some("{\"iban\":\"YE00\"}".into()),
        description: Some("weekly payout".into()),
        idempotency_key: Some("po-1".into()),
        created_by: MAKER,
    })
}

pub(crate) fn approve_payout(payout_id: PayoutId, by: u64) -> Command {
    Command::ApprovePayout {
        payout_id,
        by,
        notes: Some("ok".into()),
    }
}

/// The UTC day start of `at_ms`.
pub(crate) fn day_of(at_ms: i64) -> i64 {
    at_ms - at_ms.rem_euclid(DAY_MS)
}

pub(crate) fn create_settlement(wallet_id: WalletId, start_ms: i64, end_ms: i64) -> Command {
    Command::CreateSettlement(CreateSettlement {
        wallet_id,
        period_type: PeriodType::Custom,
        period_start_ms: start_ms,
        period_end_ms: end_ms,
        notes: Some("week 12".into()),
        idempotency_key: Some("st-1".into()),
        created_by: MAKER,
    })
}

pub(crate) fn approve_settlement(settlement_id: SettlementId, by: u64) -> Command {
    Command::ApproveSettlement {
        settlement_id,
        by,
        notes: None,
    }
}

/// Sum of the shard's per-currency entry sums (zero when balanced).
pub(crate) fn all_zero(h: &Harness) -> bool {
    h.shard
        .balance_sums_by_currency()
        .values()
        .all(|sum| sum.is_some_and(|sum| sum == Decimal::ZERO))
}
