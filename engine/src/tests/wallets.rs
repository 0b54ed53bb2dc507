//! Currencies, amounts, wallet life cycle, verify-integrity, queries.

use super::{cur, dec, deposit, Harness};
use crate::ledger::wallet::{OwnerType, WalletStatus, WalletType};
use crate::shard::command::{CreateWallet, Page};
use crate::values::currency::UnknownCurrency;
use crate::values::money::validate_amount;
use crate::{Command, Currency, Outcome, Rejection, WalletId};

#[test]
fn currency_table_parses_exact_upper_case_codes() {
    for (code, minor) in [
        ("YER", 2),
        ("SAR", 2),
        ("USD", 2),
        ("EUR", 2),
        ("AED", 2),
        ("GBP", 2),
        ("JPY", 0),
        ("KWD", 3),
        ("BHD", 3),
        ("OMR", 3),
        ("JOD", 3),
        ("EGP", 2),
        ("INR", 2),
        ("CNY", 2),
        ("TRY", 2),
        ("CHF", 2),
        ("CAD", 2),
        ("AUD", 2),
    ] {
        let currency = Currency::from_code(code).unwrap();
        assert_eq!((currency.code(), currency.minor_units()), (code, minor));
    }
    for bad in ["usd", "US", "USDD", " USD", "XXX", ""] {
        assert_eq!(Currency::from_code(bad), Err(UnknownCurrency), "{bad:?}");
    }
    let codes: Vec<String> = Currency::all().map(|c| c.code().to_owned()).collect();
    let mut sorted = codes.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(codes, sorted, "table must stay sorted for binary search");
}

#[test]
fn amounts_are_validated_and_rescaled() {
    let usd = cur("USD");
    assert_eq!(
        validate_amount(dec("10.5"), usd).unwrap().to_string(),
        "10.50"
    );
    assert_eq!(
        validate_amount(dec("10.50"), usd).unwrap().to_string(),
        "10.50"
    );
    assert_eq!(
        validate_amount(dec("10.500"), usd).unwrap().to_string(),
        "10.50"
    );
    assert_eq!(
        validate_amount(dec("1000000000000"), usd)
            .unwrap()
            .to_string(),
        "1000000000000.00"
    );
    for bad in ["10.505", "0", "0.00", "-1", "1000000000000.01", "0.001"] {
        assert!(
            matches!(
                validate_amount(dec(bad), usd),
                Err(Rejection::InvalidAmount(_))
            ),
            "{bad}"
        );
    }
    assert!(validate_amount(dec("1.5"), cur("JPY")).is_err());
    assert_eq!(
        validate_amount(dec("7"), cur("JPY")).unwrap().to_string(),
        "7"
    );
    assert_eq!(
        validate_amount(dec("1.234"), cur("KWD"))
            .unwrap()
            .to_string(),
        "1.234"
    );
}

#[test]
fn create_wallet_is_unique_per_owner_currency_and_type() {
    let mut h = Harness::new();
    let first = h.create(7, "USD");
    let view = h.shard.wallet_view(first).unwrap();
    assert_eq!(
        (view.owner_id, view.currency, view.status),
        (7, cur("USD"), WalletStatus::Active)
    );
    assert_eq!(view.balance.to_string(), "0.00");
    assert_eq!(view.balance_verified_at_ms, view.created_at_ms);
    let duplicate = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id: 7,
        currency: cur("USD"),
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: Some("{}".into()),
    });
    assert_eq!(h.reject(duplicate).code(), "duplicate");
    // Other currency, other type, other owner: fine.
    h.create(7, "EUR");
    h.create_typed(OwnerType::Customer, 7, "USD", WalletType::Savings);
    h.create_typed(OwnerType::Merchant, 7, "USD", WalletType::Primary);
    assert_eq!(
        h.shard
            .wallet_of_owner(OwnerType::Customer, 7, cur("USD"), WalletType::Primary),
        Some(first)
    );
}

#[test]
fn create_wallet_refuses_system_accounts_and_long_meta() {
    let mut h = Harness::new();
    let mut create = CreateWallet {
        owner_type: OwnerType::System,
        owner_id: 1,
        currency: cur("USD"),
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: None,
    };
    assert_eq!(
        h.reject(Command::CreateWallet(create.clone())).code(),
        "invalid_request"
    );
    create.owner_type = OwnerType::Customer;
    create.wallet_type = WalletType::Float;
    assert_eq!(
        h.reject(Command::CreateWallet(create.clone())).code(),
        "invalid_request"
    );
    create.wallet_type = WalletType::Primary;
    create.meta = Some("x".repeat(5000));
    assert_eq!(
        h.reject(Command::CreateWallet(create.clone())).code(),
        "invalid_request"
    );
    create.meta = Some(r#"{"tier":"gold"}"#.into());
    let Outcome::Wallet(view) = h.ok(Command::CreateWallet(create)) else {
        panic!()
    };
    assert_eq!(view.meta.as_deref(), Some(r#"{"tier":"gold"}"#));
}

#[test]
fn freeze_and_unfreeze() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    assert_eq!(
        h.reject(Command::UnfreezeWallet { wallet_id: wallet })
            .code(),
        "invalid_state"
    );
    let Outcome::Wallet(view) = h.ok(Command::FreezeWallet { wallet_id: wallet }) else {
        panic!()
    };
    assert_eq!(view.status, WalletStatus::Frozen);
    assert_eq!(
        h.reject(Command::FreezeWallet { wallet_id: wallet }).code(),
        "invalid_state"
    );
    assert_eq!(h.reject(deposit(wallet, "1")).code(), "wallet_frozen");
    let Outcome::Wallet(view) = h.ok(Command::UnfreezeWallet { wallet_id: wallet }) else {
        panic!()
    };
    assert_eq!(view.status, WalletStatus::Active);
    h.deposit(wallet, "1");
}

#[test]
fn unknown_and_foreign_wallets() {
    let mut h = Harness::new();
    assert_eq!(h.reject(deposit(WalletId(99), "1")).code(), "not_found");
    let mut two = Harness::with_shard(crate::Shard::new(1, 2).unwrap());
    let own = two.create(1, "USD");
    assert_eq!(own.0 % 2, 1, "shard 1 of 2 mints odd ids");
    assert_eq!(
        two.reject(deposit(WalletId(4), "1")),
        Rejection::WrongShard(WalletId(4))
    );
    assert_eq!(two.reject(deposit(WalletId(5), "1")).code(), "not_found");
}

#[test]
fn system_accounts_are_not_client_addressable() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "5");
    let float = h
        .shard
        .system_account(cur("USD"), WalletType::Float)
        .unwrap();
    assert_eq!(h.shard.balance(float).unwrap().balance, dec("-5.00"));
    assert_eq!(h.reject(deposit(float, "1")).code(), "invalid_request");
    assert_eq!(
        h.reject(Command::FreezeWallet { wallet_id: float }).code(),
        "invalid_request"
    );
}

#[test]
fn verify_integrity_reports_and_records_verification() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    h.deposit(wallet, "2.5");
    h.now_ms += 1000;
    let Outcome::Integrity(report) = h.ok(Command::VerifyIntegrity {
        wallet_id: wallet,
        filed: None,
    }) else {
        panic!()
    };
    assert!(report.valid);
    assert_eq!(report.entries_checked, 2);
    assert_eq!(report.ledger_balance, Some(dec("12.50")));
    assert_eq!(report.cached_balance, dec("12.50"));
    assert_eq!(
        report.chain_head,
        h.shard.wallet(wallet).unwrap().chain_head()
    );
    assert_eq!(report.first_invalid_entry_id, None);
    assert_eq!(
        h.shard.wallet(wallet).unwrap().balance_verified_at_ms(),
        h.now_ms
    );

    // Tamper with the first entry: the report names it, and nothing is recorded.
    let first = h.shard.wallet(wallet).unwrap().entries()[0].id;
    h.shard.wallets[0].history.as_mut().unwrap().entries[0].amount = dec("11.00");
    let before = h.shard.wallet(wallet).unwrap().balance_verified_at_ms();
    h.now_ms += 1000;
    let ctx = h.ctx();
    let events = h
        .shard
        .decide(
            &Command::VerifyIntegrity {
                wallet_id: wallet,
                filed: None,
            },
            &ctx,
        )
        .unwrap();
    assert!(
        events.is_empty(),
        "an invalid chain is not recorded as verified"
    );
    let report = h.shard.integrity_report(wallet, h.now_ms, None).unwrap();
    assert!(!report.valid);
    assert_eq!(report.first_invalid_entry_id, Some(first));
    assert_eq!(
        h.shard.wallet(wallet).unwrap().balance_verified_at_ms(),
        before
    );
    assert!(matches!(
        h.shard.check_invariants(),
        Err(crate::InvariantViolation::BrokenChain { .. })
    ));
}

/// `VerifyIntegrity` with a check of a prefix of the chain made elsewhere (the engine checks
/// the entries the store holds off the shard's thread): the shard continues it with the entries
/// after the prefix only, and the report equals the whole-chain one, wherever the prefix ends;
/// a prefix check that found a bad entry keeps the wallet unverified.
#[test]
fn verify_integrity_continues_a_prefix_checked_off_the_shard() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    for cents in 1..=9 {
        h.deposit(wallet, &format!("{cents}.25"));
    }
    h.now_ms += 1000;
    let whole = h.shard.integrity_report(wallet, h.now_ms, None).unwrap();
    assert!(whole.valid);
    let entries: Vec<_> = h
        .shard
        .wallet(wallet)
        .unwrap()
        .entries()
        .iter()
        .cloned()
        .collect();
    let currency = h.shard.wallet(wallet).unwrap().currency();
    for prefix in 0..=entries.len() {
        let mut checker = crate::ledger::transaction::ChainChecker::new(wallet, currency);
        for entry in &entries[..prefix] {
            checker.feed(entry);
        }
        let continued = h
            .shard
            .integrity_report(wallet, h.now_ms, Some(&checker))
            .unwrap();
        assert_eq!(continued, whole, "prefix of {prefix} entries");
    }

    // A prefix check that saw a tampered entry: the report names it and nothing is recorded.
    let mut tampered = entries[2].clone();
    tampered.amount = dec("99.00");
    let mut checker = crate::ledger::transaction::ChainChecker::new(wallet, currency);
    for entry in entries[..2].iter().chain([&tampered]) {
        checker.feed(entry);
    }
    let before = h.shard.wallet(wallet).unwrap().balance_verified_at_ms();
    h.now_ms += 1000;
    let ctx = h.ctx();
    let command = Command::VerifyIntegrity {
        wallet_id: wallet,
        filed: Some(Box::new(checker)),
    };
    assert!(h.shard.decide(&command, &ctx).unwrap().is_empty());
    let Ok(Outcome::Integrity(report)) = h.shard.execute(&command, &ctx).map(|(_, o)| o) else {
        panic!("no integrity report")
    };
    assert!(!report.valid);
    assert_eq!(report.first_invalid_entry_id, Some(entries[2].id));
    assert_eq!(
        h.shard.wallet(wallet).unwrap().balance_verified_at_ms(),
        before
    );
}

#[test]
fn queries_page_newest_first_with_totals() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    for i in 1..=5 {
        h.now_ms += 1000;
        h.deposit(wallet, &i.to_string());
    }
    let page = h
        .shard
        .transactions_page(wallet, Page::new(1, 2).unwrap())
        .unwrap();
    assert_eq!(page.total, 5);
    let amounts: Vec<String> = page.records.iter().map(|t| t.amount.to_string()).collect();
    assert_eq!(amounts, ["5.00", "4.00"]);
    let last = h
        .shard
        .transactions_page(wallet, Page::new(3, 2).unwrap())
        .unwrap();
    assert_eq!(last.records.len(), 1);
    let past = h
        .shard
        .transactions_page(wallet, Page::new(9, 2).unwrap())
        .unwrap();
    assert_eq!((past.records.len(), past.total), (0, 5));
    assert!(Page::new(0, 20).is_err() && Page::new(1, 0).is_err() && Page::new(1, 101).is_err());

    let ledger = h
        .shard
        .ledger_page(wallet, Page::default(), None, None)
        .unwrap();
    assert_eq!(ledger.total, 5);
    assert_eq!(ledger.records[0].balance_after, dec("15.00"));
    assert_eq!(ledger.records[0].prev_hash, ledger.records[1].hash);
    assert_eq!(
        ledger.records[4].prev_hash,
        crate::ledger::transaction::Hash::ZERO
    );
    let created: Vec<i64> = ledger.records.iter().map(|e| e.created_at_ms).collect();
    let window = h
        .shard
        .ledger_page(wallet, Page::default(), Some(created[3]), Some(created[1]))
        .unwrap();
    assert_eq!(window.total, 3);
    assert_eq!(window.records[0].created_at_ms, created[1]);

    let balance = h.shard.balance(wallet).unwrap();
    assert_eq!(
        (balance.balance, balance.available_balance),
        (dec("15.00"), dec("15.00"))
    );
    let uuid = page.records[0].uuid;
    assert_eq!(h.shard.transaction_view(uuid).unwrap().amount, dec("5.00"));
}

#[test]
fn rejection_codes_are_unique_and_precedence_is_ordered() {
    let all = [
        Rejection::UnknownCurrency,
        Rejection::InvalidRequest(""),
        Rejection::WrongShard(WalletId(0)),
        Rejection::NotFound(""),
        Rejection::Duplicate(""),
        Rejection::CurrencyMismatch,
        Rejection::InvalidAmount(""),
        Rejection::WalletFrozen,
        Rejection::InvalidState(""),
        Rejection::HoldExpired,
        Rejection::CaptureExceedsHold,
        Rejection::NotADebit,
        Rejection::AlreadyReversed,
        Rejection::RefundExceedsOriginal,
        Rejection::InsufficientFunds,
        Rejection::LimitExceeded(""),
    ];
    let precedences: Vec<u16> = all.iter().map(Rejection::precedence).collect();
    assert_eq!(precedences, (1..=16).collect::<Vec<u16>>());
    let mut codes: Vec<&str> = all.iter().map(Rejection::code).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), all.len());
}
