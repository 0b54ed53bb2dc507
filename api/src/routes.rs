//! The route table: every served operation with its method, path, operationId, access tier and
//! rate class, in one place (decisions.md §2: "tiers enforced on every route from one table").
//!
//! Routing uses one `matchit` router per method, so an unknown path (404) is told apart from a
//! known path with the wrong method (405).

use hyper::Method;

use crate::auth::Tier;
use crate::ratelimit::RateClass;

macro_rules! operations {
    ($( $op:ident => ($method:ident, $path:literal, $id:literal, $tier:ident, $rate:expr, $created:expr) ),* $(,)?) => {
        /// Every served operation.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Op { $($op),* }

        /// The table, in declaration order; `Op as usize` indexes it.
        pub const TABLE: &[Route] = &[
            $(Route { op: Op::$op, method: Method::$method, path: $path, operation_id: $id, tier: Tier::$tier, rate: $rate, created: $created }),*
        ];
    };
}

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Route {
    pub op: Op,
    pub method: Method,
    /// matchit syntax: `{param}`.
    pub path: &'static str,
    pub operation_id: &'static str,
    pub tier: Tier,
    pub rate: Option<RateClass>,
    /// Answers 201 on success.
    pub created: bool,
}

use RateClass::{PayApi, PerMinute20, PerMinute60, Public as PublicRate, Scan, Webhook};

operations! {
    GetHealth => (GET, "/v1/health", "getHealth", Public, Some(PublicRate), false),
    GetOpenApi => (GET, "/v1/openapi.json", "getOpenApi", Public, Some(PublicRate), false),
    GetMetrics => (GET, "/metrics", "getMetrics", Public, None, false),
    RegisterCustomer => (POST, "/v1/auth/customer/register", "registerCustomer", Public, Some(PayApi), true),
    LoginCustomer => (POST, "/v1/auth/customer/login", "loginCustomer", Public, Some(PayApi), false),
    LoginEmployee => (POST, "/v1/auth/employee/login", "loginEmployee", Public, Some(PayApi), false),
    ListWallets => (GET, "/v1/wallets", "listWallets", CustomerOrBusiness, Some(PerMinute60), false),
    CreateWallet => (POST, "/v1/wallets", "createWallet", BusinessOperator, Some(PerMinute20), true),
    CreateCustomerWallet => (POST, "/v1/wallets/users", "createCustomerWallet", BusinessOperator, Some(PerMinute20), true),
    GetWallet => (GET, "/v1/wallets/{walletId}", "getWallet", CustomerOrBusiness, Some(PerMinute60), false),
    GetWalletBalance => (GET, "/v1/wallets/{walletId}/balance", "getWalletBalance", CustomerOrBusiness, None, false),
    FreezeWallet => (POST, "/v1/wallets/{walletId}/freeze", "freezeWallet", RestrictedOperator, None, false),
    UnfreezeWallet => (POST, "/v1/wallets/{walletId}/unfreeze", "unfreezeWallet", RestrictedOperator, Some(PerMinute20), false),
    DepositWallet => (POST, "/v1/wallets/{walletId}/deposit", "depositWallet", BusinessOperator, None, false),
    WithdrawWallet => (POST, "/v1/wallets/{walletId}/withdraw", "withdrawWallet", BusinessOperator, None, false),
    ListWalletTransactions => (GET, "/v1/wallets/{walletId}/transactions", "listWalletTransactions", CustomerOrBusiness, Some(PerMinute60), false),
    RefundWalletTransaction => (POST, "/v1/wallets/refund", "refundWalletTransaction", BusinessOperator, Some(PerMinute20), false),
    HoldWalletFunds => (POST, "/v1/wallets/hold", "holdWalletFunds", BusinessOperator, Some(PerMinute20), false),
    ListWalletHolds => (GET, "/v1/wallets/{walletId}/holds", "listWalletHolds", CustomerOrBusiness, None, false),
    ReleaseHold => (POST, "/v1/wallets/holds/{holdUuid}/release", "releaseHold", BusinessOperator, None, false),
    CaptureHold => (POST, "/v1/wallets/holds/{holdUuid}/capture", "captureHold", BusinessOperator, None, false),
    ListWalletLedger => (GET, "/v1/wallets/{walletId}/ledger", "listWalletLedger", BusinessFinance, None, false),
    GetWalletStatement => (GET, "/v1/wallets/{walletId}/statement", "getWalletStatement", CustomerOrBusiness, Some(PerMinute60), false),
    VerifyWalletLedgerIntegrity => (GET, "/v1/wallets/{walletId}/verify-integrity", "verifyWalletLedgerIntegrity", RestrictedAuditor, None, false),
    ReverseLedgerPair => (POST, "/v1/wallets/reverse", "reverseLedgerPair", RestrictedFinance, None, false),
    CreateTransfer => (POST, "/v1/transfers", "createTransfer", CustomerOrBusiness, None, true),
    CreateBusiness => (POST, "/v1/admin/businesses", "createBusiness", PlatformAdmin, None, true),
    CreateEmployee => (POST, "/v1/admin/employees", "createEmployee", PlatformAdmin, None, true),
    // Appended, never inserted: a route's index is stored with pending idempotency keys.
    CreateMerchantWallet => (POST, "/v1/merchant-wallets", "createMerchantWallet", BusinessOperator, None, true),
    GetMerchantWalletOverview => (GET, "/v1/merchant-wallets/{merchantId}/overview", "getMerchantWalletOverview", Merchant, Some(PerMinute60), false),
    CreateMerchantPaymentLink => (POST, "/v1/merchant-wallets/{merchantId}/payment-link", "createMerchantPaymentLink", Merchant, None, true),
    CreateMerchantQrPayload => (POST, "/v1/merchant-wallets/{merchantId}/qr-payment", "createMerchantQrPayload", Merchant, None, true),
    RequestMerchantSettlement => (POST, "/v1/merchant-wallets/{merchantId}/settlement-request", "requestMerchantSettlement", MerchantFinance, Some(PerMinute60), false),
    ListMerchantTransactions => (GET, "/v1/merchant-wallets/{merchantId}/transactions", "listMerchantTransactions", Merchant, Some(PerMinute60), false),
    InitiatePayment => (POST, "/v1/payments/initiate", "initiatePayment", Authenticated, None, true),
    ConfirmPayment => (POST, "/v1/payments/{paymentUuid}/confirm", "confirmPayment", Authenticated, None, false),
    CancelPayment => (POST, "/v1/payments/{paymentUuid}/cancel", "cancelPayment", Authenticated, Some(PayApi), false),
    RefundPayment => (POST, "/v1/payments/{paymentUuid}/refund", "refundPayment", MerchantFinance, None, false),
    GetPaymentStatus => (GET, "/v1/payments/{paymentUuid}/status", "getPaymentStatus", Authenticated, None, false),
    ListPayouts => (GET, "/v1/payouts", "listPayouts", BusinessFinance, Some(PerMinute60), false),
    CreatePayout => (POST, "/v1/payouts", "createPayout", BusinessFinance, None, true),
    GetPayout => (GET, "/v1/payouts/{payoutId}", "getPayout", BusinessFinance, None, false),
    ApprovePayout => (POST, "/v1/payouts/{payoutId}/approve", "approvePayout", RestrictedApprover, Some(PerMinute20), false),
    CancelPayout => (POST, "/v1/payouts/{payoutId}/cancel", "cancelPayout", BusinessFinance, None, false),
    ExecutePayout => (POST, "/v1/payouts/{payoutId}/execute", "executePayout", RestrictedOperator, Some(PerMinute20), false),
    RejectPayout => (POST, "/v1/payouts/{payoutId}/reject", "rejectPayout", RestrictedApprover, Some(PerMinute20), false),
    ListSettlements => (GET, "/v1/wallet-settlements", "listSettlements", BusinessFinance, Some(PerMinute60), false),
    CreateSettlement => (POST, "/v1/wallet-settlements", "createSettlement", BusinessFinance, Some(PerMinute20), true),
    GetSettlement => (GET, "/v1/wallet-settlements/{settlementId}", "getSettlement", BusinessFinance, None, false),
    ApproveSettlement => (POST, "/v1/wallet-settlements/{settlementId}/approve", "approveSettlement", RestrictedApprover, Some(PerMinute20), false),
    CancelSettlement => (POST, "/v1/wallet-settlements/{settlementId}/cancel", "cancelSettlement", BusinessFinance, None, false),
    ExecuteSettlement => (POST, "/v1/wallet-settlements/{settlementId}/execute", "executeSettlement", RestrictedOperator, None, false),
    RejectSettlement => (POST, "/v1/wallet-settlements/{settlementId}/reject", "rejectSettlement", RestrictedApprover, None, false),
    GetFeeReport => (GET, "/v1/reports/fees", "getFeeReport", BusinessFinance, Some(Scan), false),
    GetPayoutReport => (GET, "/v1/reports/payouts", "getPayoutReport", BusinessFinance, Some(Scan), false),
    GetSettlementReport => (GET, "/v1/reports/settlements", "getSettlementReport", BusinessFinance, Some(Scan), false),
    GetBalanceSummary => (GET, "/v1/reports/summary", "getBalanceSummary", BusinessFinance, Some(Scan), false),
    GetTransactionReport => (GET, "/v1/reports/transactions", "getTransactionReport", BusinessFinance, Some(Scan), false),
    ReceiveProviderWebhook => (POST, "/v1/webhooks/{provider}", "receiveProviderWebhook", Public, Some(Webhook), false),
    GetPaymentLink => (GET, "/v1/payment-links/{linkUuid}", "getPaymentLink", Authenticated, None, false),
    // Unclassed like createTransfer: a batch is one request however many items it holds.
    CreateTransferBatch => (POST, "/v1/transfers/batch", "createTransferBatch", CustomerOrBusiness, None, false),
}

impl Op {
    /// The row of this operation.
    pub fn route(self) -> &'static Route {
        // The macro builds TABLE in declaration order, so the discriminant indexes it.
        match TABLE.get(self as usize) {
            Some(route) => route,
            None => unreachable!("route table out of step with Op"),
        }
    }

    /// The operation at `index` of the table (used to render stored idempotent answers).
    pub fn from_index(index: u16) -> Option<Op> {
        TABLE.get(usize::from(index)).map(|route| route.op)
    }

    pub fn index(self) -> u16 {
        self as u16
    }

    /// Whether success is 201 Created (decisions.md §6).
    pub fn answers_created(self) -> bool {
        self.route().created
    }
}

/// Per-method routers.
pub struct Router {
    by_method: Vec<(Method, matchit::Router<Op>)>,
}

/// What a request path matched.
pub enum Matched {
    Found(Op, Vec<(String, String)>),
    /// The path exists for other methods.
    MethodNotAllowed,
    NotFound,
}

impl Router {
    /// Builds the routers from [`TABLE`]. A conflicting table is a programming error, caught by
    /// the tests at build time of the test suite.
    pub fn new() -> Result<Self, String> {
        let mut by_method: Vec<(Method, matchit::Router<Op>)> = Vec::new();
        for route in TABLE {
            let index = match by_method.iter().position(|(m, _)| *m == route.method) {
                Some(index) => index,
                None => {
                    by_method.push((route.method.clone(), matchit::Router::new()));
                    by_method.len() - 1
                }
            };
            if let Some((_, router)) = by_method.get_mut(index) {
                router
                    .insert(route.path, route.op)
                    .map_err(|e| format!("route {} {}: {e}", route.method, route.path))?;
            }
        }
        Ok(Router { by_method })
    }

    pub fn find(&self, method: &Method, path: &str) -> Matched {
        let mut elsewhere = false;
        for (m, router) in &self.by_method {
            if let Ok(found) = router.at(path) {
                if m == method {
                    let params = found
                        .params
                        .iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect();
                    return Matched::Found(*found.value, params);
                }
                elsewhere = true;
            }
        }
        if elsewhere {
            Matched::MethodNotAllowed
        } else {
            Matched::NotFound
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn table_builds_and_indexes_agree() {
        let router = Router::new().unwrap();
        for (index, route) in TABLE.iter().enumerate() {
            assert_eq!(route.op as usize, index);
            assert_eq!(Op::from_index(index as u16), Some(route.op));
            let concrete = route
                .path
                .replace("{walletId}", "12")
                .replace("{holdUuid}", "abc")
                .replace("{merchantId}", "7")
                .replace("{paymentUuid}", "abc")
                .replace("{payoutId}", "9")
                .replace("{settlementId}", "9")
                .replace("{provider}", "sandbox")
                .replace("{linkUuid}", "abc");
            match router.find(&route.method, &concrete) {
                Matched::Found(op, _) => assert_eq!(op, route.op, "{concrete}"),
                _ => panic!("{} {concrete} does not route", route.method),
            }
        }
        assert!(matches!(
            router.find(&Method::DELETE, "/v1/wallets"),
            Matched::MethodNotAllowed
        ));
        assert!(matches!(
            router.find(&Method::GET, "/v1/nope"),
            Matched::NotFound
        ));
    }
}
