//! Who may move money out of a wallet (decisions.md §2; issue 17, "read-only roles move money"):
//! every money-moving route, tried by every role of the wallet's business, the owner, another
//! customer and a foreign business's staff. For each try the status is checked, and a refusal
//! must leave every balance of the wallet (posted, held, available) where it was.
//!
//! One server for the file; each try gets a fresh setup (its own payment, hold, deposit or
//! withdrawal to act on), made by the platform admin, so an allowed try cannot starve the next.

use std::sync::OnceLock;

use serde_json::json;
use walletd_tests::server::{Balances, Customer, Server, PLATFORM_BUSINESS_ID};

const ROLES: [&str; 9] = [
    "admin",
    "operator",
    "finance",
    "merchant",
    "merchant_finance",
    "restricted_operator",
    "restricted_approver",
    "restricted_auditor",
    "restricted_finance",
];

struct Fixture {
    server: Server,
    /// The wallet's owner (business 1's customer).
    owner: Customer,
    /// Another customer, with a wallet of the same currency (the transfer target).
    other: Customer,
    /// (caller name, token): one employee per role of business 1, the owner, the other customer,
    /// and the admin, operator and finance of a foreign business.
    callers: Vec<(String, String)>,
    /// A merchant business (payments go to it) and its YER wallet.
    merchant_id: u64,
    /// A foreign (non-merchant) business with a YER wallet of its own.
    foreign_wallet: u64,
    foreign_admin: String,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let owner = server.register_customer();
        let other = server.register_customer();
        let admin = server.admin_token();
        server.deposit(&admin, owner.wallet_id, "1000000");
        let mut callers = vec![
            ("owner".to_owned(), owner.token.clone()),
            ("other customer".to_owned(), other.token.clone()),
        ];
        for role in ROLES {
            let employee = server.create_employee(PLATFORM_BUSINESS_ID, &[role]);
            callers.push((role.to_owned(), employee.token));
        }
        let merchant_id = server.create_business(true);
        let merchant_operator = server.create_employee(merchant_id, &["operator"]);
        server.create_merchant_wallet(&merchant_operator.token, merchant_id, "YER");
        let foreign = server.create_business(false);
        let foreign_admin = server.create_employee(foreign, &["admin"]).token;
        for role in ["admin", "operator", "finance"] {
            let employee = server.create_employee(foreign, &[role]);
            callers.push((format!("foreign {role}"), employee.token));
        }
        let created = server.post_expect(
            "/v1/wallets",
            Some(&foreign_admin),
            &json!({"owner_type": "business", "owner_id": foreign, "currency_code": "YER"})
                .to_string(),
            201,
        );
        let foreign_wallet = created["data"]["id"].as_u64().expect("wallet id");
        server.deposit(&foreign_admin, foreign_wallet, "1000");
        Fixture {
            server,
            owner,
            other,
            callers,
            merchant_id,
            foreign_wallet,
            foreign_admin,
        }
    })
}

/// One money-moving request against the owner's wallet: set up (as the admin), then sent.
struct Route {
    name: &'static str,
    /// Callers allowed (2xx); everyone else is refused with 403, or 404 where noted.
    allowed: &'static [&'static str],
    /// Makes what the request acts on; returns (method path, body).
    prepare: fn(&Fixture) -> (String, String),
}

fn uuid_of(value: &serde_json::Value) -> String {
    value["data"]["uuid"]
        .as_str()
        .or_else(|| value["data"]["transaction"]["uuid"].as_str())
        .unwrap_or_else(|| panic!("no uuid in {value}"))
        .to_owned()
}

fn payment(f: &Fixture) -> String {
    f.server.initiate_payment(
        &f.owner.token,
        f.owner.wallet_id,
        f.merchant_id,
        "1",
        "YER",
        "",
    )
}

const MONEY_OUT: &[&str] = &["owner", "admin", "operator", "finance"];

fn routes() -> Vec<Route> {
    vec![
        Route {
            name: "transfer",
            allowed: MONEY_OUT,
            prepare: |f| {
                let body = json!({"from_wallet_id": f.owner.wallet_id, "to_wallet_id": f.other.wallet_id, "amount": 1, "currency_code": "YER"});
                ("POST /v1/transfers".into(), body.to_string())
            },
        },
        Route {
            name: "initiate payment",
            allowed: MONEY_OUT,
            prepare: |f| {
                let body = json!({"merchant_id": f.merchant_id, "wallet_id": f.owner.wallet_id, "amount": 1, "currency_code": "YER"});
                ("POST /v1/payments/initiate".into(), body.to_string())
            },
        },
        Route {
            name: "confirm payment",
            allowed: MONEY_OUT,
            prepare: |f| {
                (
                    format!("POST /v1/payments/{}/confirm", payment(f)),
                    String::new(),
                )
            },
        },
        Route {
            name: "cancel payment",
            allowed: MONEY_OUT,
            prepare: |f| {
                (
                    format!("POST /v1/payments/{}/cancel", payment(f)),
                    String::new(),
                )
            },
        },
        Route {
            name: "withdraw",
            allowed: &["admin", "operator"],
            prepare: |f| {
                (
                    format!("POST /v1/wallets/{}/withdraw", f.owner.wallet_id),
                    r#"{"amount": 1}"#.into(),
                )
            },
        },
        Route {
            name: "hold",
            allowed: &["admin", "operator"],
            prepare: |f| {
                let body =
                    json!({"wallet_id": f.owner.wallet_id, "amount": 1, "currency_code": "YER"});
                ("POST /v1/wallets/hold".into(), body.to_string())
            },
        },
        Route {
            name: "capture hold",
            allowed: &["admin", "operator"],
            prepare: |f| {
                let body =
                    json!({"wallet_id": f.owner.wallet_id, "amount": 1, "currency_code": "YER"});
                let hold = f.server.post_expect(
                    "/v1/wallets/hold",
                    Some(&f.server.admin_token()),
                    &body.to_string(),
                    200,
                );
                (
                    format!("POST /v1/wallets/holds/{}/capture", uuid_of(&hold)),
                    String::new(),
                )
            },
        },
        Route {
            name: "reverse a deposit",
            allowed: &["admin", "restricted_finance"],
            prepare: |f| {
                let deposit = f
                    .server
                    .deposit(&f.server.admin_token(), f.owner.wallet_id, "1");
                let body = json!({"transaction_uuid": uuid_of(&deposit), "reason": "test"});
                ("POST /v1/wallets/reverse".into(), body.to_string())
            },
        },
        Route {
            name: "create payout",
            allowed: &["admin", "finance"],
            prepare: |f| {
                let body = json!({"wallet_id": f.owner.wallet_id, "amount": 1, "currency_code": "YER", "payout_method": "bank_transfer", "payout_destination": {"iban": "YE00TEST0001"}});
                ("POST /v1/payouts".into(), body.to_string())
            },
        },
    ]
}

fn balances(f: &Fixture) -> Balances {
    f.server
        .balances(&f.server.admin_token(), f.owner.wallet_id)
}

#[test]
fn issue17_only_the_roles_of_decisions_2_move_money_out_of_a_customer_wallet() {
    let f = fixture();
    let mut failures = Vec::new();
    for route in routes() {
        for (caller, token) in &f.callers {
            let (target, body) = (route.prepare)(f);
            let (method, path) = target.split_once(' ').expect("method path");
            let before = balances(f);
            let response = f.server.request(
                method,
                path,
                Some(token),
                &[],
                Some(body.as_bytes()).filter(|b| !b.is_empty()),
            );
            let allowed = route.allowed.contains(&caller.as_str());
            let expected: &[u16] = if allowed {
                &[200, 201]
            } else if caller == "other customer" {
                &[403, 404]
            } else {
                &[403]
            };
            if !expected.contains(&response.status) {
                failures.push(format!(
                    "{} by {caller}: {} (wanted {expected:?}): {}",
                    route.name,
                    response.status,
                    response.text()
                ));
                continue;
            }
            if !allowed {
                let after = balances(f);
                if after != before {
                    failures.push(format!(
                        "{} by {caller} was refused but moved money: {before:?} -> {after:?}",
                        route.name
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn issue17_merchant_staff_move_money_out_of_merchant_wallets_only_with_a_money_role() {
    let f = fixture();
    let merchant = f.server.create_business(true);
    let operator = f.server.create_employee(merchant, &["operator"]);
    let wallet = f
        .server
        .create_merchant_wallet(&operator.token, merchant, "YER")["id"]
        .as_u64()
        .expect("wallet id");
    f.server.deposit(&operator.token, wallet, "1000");
    let body = json!({"from_wallet_id": wallet, "to_wallet_id": f.other.wallet_id, "amount": 1, "currency_code": "YER"}).to_string();
    for (roles, status) in [
        (&["restricted_auditor"][..], 403),
        (&["merchant"][..], 403),
        (&["restricted_operator"][..], 403),
        (&["merchant_finance"][..], 201),
        (&["operator"][..], 201),
    ] {
        let employee = f.server.create_employee(merchant, roles);
        let before = f.server.balances(&operator.token, wallet);
        let response = f.server.post("/v1/transfers", Some(&employee.token), &body);
        assert_eq!(response.status, status, "{roles:?}: {}", response.text());
        if status == 403 {
            assert_eq!(
                f.server.balances(&operator.token, wallet),
                before,
                "{roles:?}"
            );
        }
    }
}

#[test]
fn issue17_a_reversal_is_refused_when_it_would_debit_another_business_s_client() {
    let f = fixture();
    let customer = f.server.register_customer();
    // The foreign business pays the customer, then tries to take it back with a reversal.
    let body = json!({"from_wallet_id": f.foreign_wallet, "to_wallet_id": customer.wallet_id, "amount": 10, "currency_code": "YER"});
    let sent = f.server.post_expect(
        "/v1/transfers",
        Some(&f.foreign_admin),
        &body.to_string(),
        201,
    );
    let uuid = sent["data"]["uuid"].as_str().expect("uuid").to_owned();
    let before = f.server.balances(&customer.token, customer.wallet_id);
    let reverse = json!({"transaction_uuid": uuid, "reason": "take it back"}).to_string();
    let response = f
        .server
        .post("/v1/wallets/reverse", Some(&f.foreign_admin), &reverse);
    assert_eq!(response.status, 403, "{}", response.text());
    assert_eq!(
        f.server.balances(&customer.token, customer.wallet_id),
        before,
        "a foreign business's reversal debited a customer of business 1"
    );
    // The platform's own admin covers both sides? No: the foreign wallet is outside business 1.
    let platform = f.server.post(
        "/v1/wallets/reverse",
        Some(&f.server.admin_token()),
        &reverse,
    );
    assert_eq!(platform.status, 403, "{}", platform.text());
}
