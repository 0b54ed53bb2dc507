//! The route table's dispatch: each operation to its handler.

use crate::app::SharedApp;
use crate::routes::Op;

use super::call::{Call, Handled};
use super::{
    batch, identity, merchants, money, payments, payouts, reports, system, wallets, webhooks,
};

/// Runs the handler of `call.op`.
pub async fn dispatch(app: &SharedApp, call: Call) -> Handled {
    match call.op {
        Op::GetHealth => system::health(app).await,
        Op::GetOpenApi => system::openapi(),
        Op::GetMetrics => system::metrics(app).await,
        Op::RegisterCustomer => identity::register_customer(app, &call).await,
        Op::LoginCustomer => identity::login_customer(app, &call).await,
        Op::LoginEmployee => identity::login_employee(app, &call).await,
        Op::CreateBusiness => identity::create_business(app, &call).await,
        Op::CreateEmployee => identity::create_employee(app, &call).await,
        Op::ListWallets => wallets::list(app, &call).await,
        Op::CreateWallet => wallets::create(app, &call).await,
        Op::CreateCustomerWallet => wallets::create_for_customer(app, &call).await,
        Op::GetWallet => wallets::get(app, &call).await,
        Op::GetWalletBalance => wallets::balance(app, &call).await,
        Op::FreezeWallet | Op::UnfreezeWallet => wallets::freeze(app, &call).await,
        Op::ListWalletTransactions => wallets::transactions(app, &call).await,
        Op::ListWalletLedger | Op::GetWalletStatement => wallets::ledger(app, &call).await,
        Op::VerifyWalletLedgerIntegrity => wallets::verify(app, &call).await,
        Op::ListWalletHolds => wallets::holds(app, &call).await,
        Op::DepositWallet | Op::WithdrawWallet => money::deposit_or_withdraw(app, &call).await,
        Op::CreateTransfer => money::transfer(app, &call).await,
        Op::CreateTransferBatch => batch::transfer_batch(app, &call).await,
        Op::RefundWalletTransaction => money::refund(app, &call).await,
        Op::ReverseLedgerPair => money::reverse(app, &call).await,
        Op::HoldWalletFunds => money::place_hold(app, &call).await,
        Op::ReleaseHold | Op::CaptureHold => money::close_hold(app, &call).await,
        Op::CreateMerchantWallet => merchants::create_wallet(app, &call).await,
        Op::GetMerchantWalletOverview => merchants::overview(app, &call).await,
        Op::CreateMerchantPaymentLink => merchants::payment_link(app, &call).await,
        Op::CreateMerchantQrPayload => merchants::qr_payment(app, &call).await,
        Op::RequestMerchantSettlement => merchants::settlement_request(app, &call).await,
        Op::ListMerchantTransactions => merchants::transactions(app, &call).await,
        Op::InitiatePayment => payments::initiate(app, &call).await,
        Op::ConfirmPayment | Op::CancelPayment | Op::RefundPayment => {
            payments::transition(app, &call).await
        }
        Op::GetPaymentStatus => payments::status(app, &call).await,
        Op::ListPayouts => payouts::list_payouts(app, &call).await,
        Op::CreatePayout => payouts::create_payout(app, &call).await,
        Op::GetPayout => payouts::get_payout(app, &call).await,
        Op::ApprovePayout | Op::RejectPayout | Op::CancelPayout | Op::ExecutePayout => {
            payouts::payout_transition(app, &call).await
        }
        Op::ListSettlements => payouts::list_settlements(app, &call).await,
        Op::CreateSettlement => payouts::create_settlement(app, &call).await,
        Op::GetSettlement => payouts::get_settlement(app, &call).await,
        Op::ApproveSettlement
        | Op::RejectSettlement
        | Op::CancelSettlement
        | Op::ExecuteSettlement => payouts::settlement_transition(app, &call).await,
        Op::GetFeeReport
        | Op::GetPayoutReport
        | Op::GetSettlementReport
        | Op::GetBalanceSummary
        | Op::GetTransactionReport => reports::report(app, &call).await,
        Op::ReceiveProviderWebhook => webhooks::receive(app, &call).await,
        Op::GetPaymentLink => merchants::get_payment_link(app, &call).await,
    }
}
