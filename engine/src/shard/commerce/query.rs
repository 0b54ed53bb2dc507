//! Reads of the commerce records: lookups, views, filtered pages, and what recovery must finish.
//!
//! Lists are newest first (highest id first: ids only grow within a shard). With several shards
//! each shard pages its own records; the API merges (a record lives on exactly one shard: its
//! wallet's).

use std::borrow::Cow;

use crate::commerce::payment::{
    IncomingPaymentCredit, Payment, PaymentLink, PaymentReservation, PaymentStatus, QrCode,
    RefusedPaymentCredit,
};
use crate::commerce::payout::{Payout, PayoutStatus, Settlement, SettlementStatus};
use crate::commerce::view::{PaymentLinkView, PaymentView, PayoutView, QrView, SettlementView};
use crate::ledger::transfer::TransferState;
use crate::ledger::view::{TransactionView, WalletView};
use crate::ledger::wallet::{OwnerType, Wallet};
use crate::shard::cold::{ColdHistory, ColdResult};
use crate::shard::command::{paginate, Page, Paged};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{PayoutId, SettlementId, TransactionId, Uuid, WalletId};

/// Filters of the payment list; `None` matches everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaymentFilter {
    pub merchant_id: Option<u64>,
    pub merchant_wallet_id: Option<WalletId>,
    pub status: Option<PaymentStatus>,
}

/// Filters of `GET /payouts`; `None` matches everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayoutFilter {
    pub wallet_id: Option<WalletId>,
    pub status: Option<PayoutStatus>,
    pub business_id: Option<u64>,
}

impl PayoutFilter {
    /// Whether `payout` passes every filter that is set.
    #[must_use]
    pub fn accepts(&self, payout: &Payout) -> bool {
        matches(self.wallet_id, payout.wallet_id)
            && matches(self.status, payout.status)
            && matches(self.business_id, payout.business_id)
    }
}

/// Filters of `GET /wallet-settlements`; `None` matches everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SettlementFilter {
    pub wallet_id: Option<WalletId>,
    pub status: Option<SettlementStatus>,
    pub business_id: Option<u64>,
}

impl SettlementFilter {
    /// Whether `settlement` passes every filter that is set.
    #[must_use]
    pub fn accepts(&self, settlement: &Settlement) -> bool {
        matches(self.wallet_id, settlement.wallet_id)
            && matches(self.status, settlement.status)
            && matches(self.business_id, settlement.business_id)
    }
}

fn matches<T: PartialEq>(filter: Option<T>, value: T) -> bool {
    filter.is_none_or(|wanted| wanted == value)
}

impl Shard {
    /// The payment with this uuid, if on this shard: in memory or, once it left, in the history
    /// store (which holds every shard's).
    pub fn payment(&self, uuid: Uuid) -> Result<Option<Cow<'_, Payment>>, Rejection> {
        let found = self.hot_or_filed(self.commerce.payments.get(&uuid), |store| {
            store.payment(uuid)
        })?;
        Ok(found.filter(|payment| self.owns(payment.merchant_wallet_id)))
    }

    /// Whether this shard holds the payment with this uuid (see [`Presence`]).
    #[must_use]
    pub fn holds_payment(&self, uuid: Uuid) -> crate::shard::state::Presence {
        crate::shard::state::Presence::of(self.payment(uuid))
    }

    /// The payment with this uuid (`PaymentResult` source).
    pub fn payment_view(&self, uuid: Uuid) -> Result<PaymentView, Rejection> {
        let payment = self.payment(uuid)?.ok_or(Rejection::NotFound("payment"))?;
        Ok(PaymentView::of(self, &payment))
    }

    /// Every payment of this shard to merchant wallets that `wanted` accepts (memory and store
    /// merged, memory's version winning), in no particular order, until `visit` returns false.
    pub fn for_each_payment(
        &self,
        wanted: impl Fn(&Wallet) -> bool,
        visit: impl FnMut(&Payment) -> bool,
    ) -> Result<(), Rejection> {
        self.for_each_merged(
            self.commerce.payments.values(),
            (
                |payment: &Payment| payment.merchant_wallet_id,
                |payment: &Payment| self.commerce.payments.contains_key(&payment.uuid),
            ),
            wanted,
            |store, wallet, visit| store.for_each_payment(wallet, visit),
            visit,
        )
    }

    /// Records of this shard's wallets that `wanted` accepts: those in memory (`hot`), then
    /// each wanted wallet's filed ones (`filed`) that memory does not hold, until `visit`
    /// returns false. `(wallet_of, held)`: a record's wallet, and whether memory holds it.
    fn for_each_merged<'a, T: 'a>(
        &self,
        hot: impl Iterator<Item = &'a T>,
        (wallet_of, held): (impl Fn(&T) -> WalletId, impl Fn(&T) -> bool),
        wanted: impl Fn(&Wallet) -> bool,
        filed: impl Fn(&dyn ColdHistory, WalletId, &mut dyn FnMut(&T) -> bool) -> ColdResult<()>,
        mut visit: impl FnMut(&T) -> bool,
    ) -> Result<(), Rejection> {
        for record in hot {
            if self.wallet(wallet_of(record)).is_some_and(&wanted) && !visit(record) {
                return Ok(());
            }
        }
        let Some(store) = self.recall.store() else {
            return Ok(());
        };
        let mut going = true;
        for wallet in self.wallets.iter().filter(|w| !w.is_system() && wanted(w)) {
            filed(store, wallet.id(), &mut |record| {
                if !held(record) {
                    going = visit(record);
                }
                going
            })
            .map_err(|e| crate::shard::cold::unavailable(&e))?;
            if !going {
                break;
            }
        }
        Ok(())
    }

    /// Payments, newest first (memory and store merged).
    pub fn payments_page(
        &self,
        filter: &PaymentFilter,
        page: Page,
    ) -> Result<Paged<PaymentView>, Rejection> {
        let mut payments: Vec<Payment> = Vec::new();
        self.for_each_payment(
            |wallet| {
                matches(filter.merchant_wallet_id, wallet.id())
                    && matches(filter.merchant_id, wallet.business_id())
            },
            |payment| {
                if matches(filter.merchant_id, payment.merchant_id)
                    && matches(filter.merchant_wallet_id, payment.merchant_wallet_id)
                    && matches(filter.status, payment.status)
                {
                    payments.push(payment.clone());
                }
                true
            },
        )?;
        payments.sort_unstable_by_key(|payment| std::cmp::Reverse(payment.id));
        let paged = paginate(payments.iter(), page);
        Ok(Paged {
            records: paged
                .records
                .into_iter()
                .map(|payment| PaymentView::of(self, payment))
                .collect(),
            total: paged.total,
        })
    }

    /// The payment link with this uuid, if on this shard: in memory or, once it left, in the
    /// store (which holds every shard's).
    pub fn payment_link(&self, uuid: Uuid) -> Result<Option<Cow<'_, PaymentLink>>, Rejection> {
        let found = self.hot_or_filed(self.commerce.links.get(&uuid), |store| {
            store.payment_link(uuid)
        })?;
        Ok(found.filter(|link| self.owns(link.merchant_wallet_id)))
    }

    /// The link with its status as of `now_ms`.
    pub fn payment_link_view(&self, uuid: Uuid, now_ms: i64) -> Result<PaymentLinkView, Rejection> {
        self.payment_link(uuid)?
            .map(|link| PaymentLinkView::of(&link, now_ms))
            .ok_or(Rejection::NotFound("payment link"))
    }

    /// The QR payload with this uuid, if on this shard (as `payment_link`).
    pub fn qr(&self, uuid: Uuid) -> Result<Option<Cow<'_, QrCode>>, Rejection> {
        let found = self.hot_or_filed(self.commerce.qrs.get(&uuid), |store| store.qr(uuid))?;
        Ok(found.filter(|qr| self.owns(qr.merchant_wallet_id)))
    }

    pub fn qr_view(&self, uuid: Uuid) -> Result<QrView, Rejection> {
        self.qr(uuid)?
            .map(|qr| QrView::of(&qr))
            .ok_or(Rejection::NotFound("qr"))
    }

    /// The payout with this id, if on this shard: in memory or, once it left, in the store.
    pub fn payout(&self, payout_id: PayoutId) -> Result<Option<Cow<'_, Payout>>, Rejection> {
        let found = self.hot_or_filed(self.commerce.payouts.get(&payout_id), |store| {
            store.payout(payout_id)
        })?;
        Ok(found.filter(|payout| self.owns(payout.wallet_id)))
    }

    pub fn payout_view(&self, payout_id: PayoutId) -> Result<PayoutView, Rejection> {
        let payout = self
            .payout(payout_id)?
            .ok_or(Rejection::NotFound("payout"))?;
        Ok(PayoutView::of(self, &payout))
    }

    /// Every payout of this shard's wallets that `wanted` accepts (memory and store merged,
    /// memory's version winning), in no particular order, until `visit` returns false.
    pub fn for_each_payout(
        &self,
        wanted: impl Fn(&Wallet) -> bool,
        visit: impl FnMut(&Payout) -> bool,
    ) -> Result<(), Rejection> {
        self.for_each_merged(
            self.commerce.payouts.values(),
            (
                |payout: &Payout| payout.wallet_id,
                |payout: &Payout| self.commerce.payouts.contains_key(&payout.id),
            ),
            wanted,
            |store, wallet, visit| store.for_each_payout(wallet, visit),
            visit,
        )
    }

    /// Payouts, newest first (memory and store merged).
    pub fn payouts_page(
        &self,
        filter: &PayoutFilter,
        page: Page,
    ) -> Result<Paged<PayoutView>, Rejection> {
        let mut matching: Vec<Payout> = Vec::new();
        self.for_each_payout(
            |wallet| {
                matches(filter.wallet_id, wallet.id())
                    && matches(filter.business_id, wallet.business_id())
            },
            |payout| {
                if filter.accepts(payout) {
                    matching.push(payout.clone());
                }
                true
            },
        )?;
        matching.sort_unstable_by_key(|payout| std::cmp::Reverse(payout.id));
        let paged = paginate(matching.iter(), page);
        Ok(Paged {
            records: paged
                .records
                .into_iter()
                .map(|payout| PayoutView::of(self, payout))
                .collect(),
            total: paged.total,
        })
    }

    /// The settlement with this id, from memory or the store.
    pub fn settlement(
        &self,
        settlement_id: SettlementId,
    ) -> Result<Option<Cow<'_, Settlement>>, Rejection> {
        let found = self.hot_or_filed(self.commerce.settlements.get(&settlement_id), |store| {
            store.settlement(settlement_id)
        })?;
        Ok(found.filter(|settlement| self.owns(settlement.wallet_id)))
    }

    pub fn settlement_view(
        &self,
        settlement_id: SettlementId,
    ) -> Result<SettlementView, Rejection> {
        let settlement = self
            .settlement(settlement_id)?
            .ok_or(Rejection::NotFound("settlement"))?;
        Ok(SettlementView::of(self, &settlement))
    }

    /// The settlement that claims merchant credit `transaction_id`: a live one in memory, or an
    /// executed one that left memory (the store keeps its claims).
    pub fn settled_by(
        &self,
        transaction_id: TransactionId,
    ) -> Result<Option<SettlementId>, Rejection> {
        let found = self
            .hot_or_filed(self.index.commerce.settled.get(&transaction_id), |store| {
                store.settled_by(transaction_id)
            })?;
        Ok(found.map(Cow::into_owned))
    }

    /// The settlements in memory, newest first: every one in a shard without a store (the
    /// tests' reference); the API lists them from the store (`Engine::settlements_page`).
    #[must_use]
    pub fn settlements_page(&self, filter: &SettlementFilter, page: Page) -> Paged<SettlementView> {
        let matching = self
            .commerce
            .settlements
            .values()
            .rev()
            .filter(|settlement| filter.accepts(settlement));
        let paged = paginate(matching, page);
        Paged {
            records: paged
                .records
                .into_iter()
                .map(|settlement| SettlementView::of(self, settlement))
                .collect(),
            total: paged.total,
        }
    }

    /// The merchant's wallets on this shard (owner type merchant, business `merchant_id`), in id
    /// order (the merchant overview).
    #[must_use]
    pub fn merchant_wallets(&self, merchant_id: u64) -> Vec<WalletView> {
        self.wallets()
            .filter(|wallet| {
                wallet.owner_type() == OwnerType::Merchant && wallet.business_id() == merchant_id
            })
            .map(WalletView::of)
            .collect()
    }

    /// The merchant's wallets on this shard (owner type merchant, business `merchant_id`), in
    /// id order.
    pub fn merchant_wallets_of(&self, merchant_id: u64) -> impl Iterator<Item = &Wallet> {
        self.wallets().filter(move |wallet| {
            wallet.owner_type() == OwnerType::Merchant && wallet.business_id() == merchant_id
        })
    }

    /// Every transaction of the merchant's wallets on this shard (payments in, refunds, payouts,
    /// settlements, deposits, ...), newest first, memory and store merged: the reference the
    /// tests hold [`crate::runtime::Engine::merchant_transactions_page`] to (it reads the store
    /// off this thread, O(page) keys instead of every transaction).
    pub fn merchant_transactions_page(
        &self,
        merchant_id: u64,
        page: Page,
    ) -> Result<Paged<TransactionView>, Rejection> {
        let mut credits: Vec<(
            &crate::ledger::wallet::Wallet,
            crate::ledger::transaction::Transaction,
        )> = Vec::new();
        for wallet in self.merchant_wallets_of(merchant_id) {
            self.for_each_transaction(wallet, |transaction| {
                credits.push((wallet, transaction.clone()));
                true
            })?;
        }
        credits.sort_unstable_by_key(|(_, transaction)| std::cmp::Reverse(transaction.id));
        let paged = paginate(credits.into_iter(), page);
        Ok(Paged {
            records: paged
                .records
                .into_iter()
                .map(|(wallet, transaction)| TransactionView::of(wallet, &transaction))
                .collect(),
            total: paged.total,
        })
    }

    /// A cross-shard payment step this shard is the source of, if in memory (in flight, or
    /// finished and not yet filed; [`Shard::reservation_record`] also reads the store).
    #[must_use]
    pub fn payment_reservation(&self, uuid: Uuid) -> Option<&PaymentReservation> {
        self.commerce.reservations.get(&uuid)
    }

    /// The charge reservation of a payment that is not released (reserved or finalized), if in
    /// memory ([`Shard::open_charge_record`] also reads the store).
    #[must_use]
    pub fn open_charge_reservation(&self, payment_uuid: Uuid) -> Option<&PaymentReservation> {
        self.index
            .commerce
            .open_charges
            .get(&payment_uuid)
            .and_then(|uuid| self.commerce.reservations.get(uuid))
    }

    /// A cross-shard payment step this shard credited, if in memory ([`Shard::credit_record`]
    /// also reads the store).
    #[must_use]
    pub fn incoming_payment_credit(&self, uuid: Uuid) -> Option<&IncomingPaymentCredit> {
        self.commerce.credits.get(&uuid)
    }

    /// The refusal this shard logged for reservation `uuid`'s credit, if in memory
    /// ([`Shard::refusal_record`] also reads the store).
    #[must_use]
    pub fn refused_payment_credit(&self, uuid: Uuid) -> Option<&RefusedPaymentCredit> {
        self.commerce.refused_credits.get(&uuid)
    }

    /// Payment reservations still `reserved` (neither finalized nor released), in uuid order:
    /// what recovery must complete (see `payment` docs).
    #[must_use]
    pub fn pending_payment_reservations(&self) -> Vec<PaymentReservation> {
        self.commerce
            .reservations
            .values()
            .filter(|reservation| reservation.state == TransferState::Reserved)
            .cloned()
            .collect()
    }
}
