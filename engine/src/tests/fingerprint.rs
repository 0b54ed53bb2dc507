//! Issue 16, item 6: the idempotency fingerprint is SHA-256 of an explicit, versioned, canonical
//! encoding of the request, not of `Debug` text. These tests pin its bytes, so a change to the
//! encoding shows up here and must come with a new `FINGERPRINT_VERSION`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use crate::runtime::fingerprint::{canonical_request, fingerprint, normalized_decimal};
use crate::runtime::idempotency::{Begin, IdempotencyTable};
use crate::shard::command::{Details, MoneyMove};
use crate::tests::{cur, dec};
use crate::{Command, WalletId};

fn deposit(amount: &str) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id: WalletId(42),
        amount: dec(amount),
        currency: Some(cur("YER")),
        details: Details {
            description: Some("rent".into()),
            ..Details::default()
        },
    })
}

fn path() -> Vec<(String, String)> {
    vec![("walletId".into(), "42".into())]
}

#[test]
fn issue_16_the_fingerprint_of_a_fixed_deposit_is_pinned() {
    let bytes = canonical_request("deposit", "customer:7", &path(), &deposit("100.50"));
    let expected: Vec<u8> = [
        &b"walletd.request\x01"[..],
        b"s\x05route\x07\0\0\0deposit",
        b"s\x06caller\x0a\0\0\0customer:7",
        b"s\x0dpath.walletId\x02\0\0\x0042",
        b"s\x07command\x07\0\0\0deposit",
        b"d\x06amount\x05\0\0\x00100.5",
        b"s\x08currency\x03\0\0\0YER",
        b"s\x13details.description\x04\0\0\0rent",
        b"u\x09wallet_id\x08\0\0\0\x2a\0\0\0\0\0\0\0",
    ]
    .concat();
    assert_eq!(bytes, expected);
    assert_eq!(
        hex::encode(fingerprint(
            "deposit",
            "customer:7",
            &path(),
            &deposit("100.50")
        )),
        "6d371f77ce06798118d31580c452ade82421cd36b12cd67aed9ba937f98139cf"
    );
}

#[test]
fn issue_16_equal_amounts_written_differently_have_one_fingerprint() {
    let of = |amount: &str| fingerprint("deposit", "customer:7", &path(), &deposit(amount));
    assert_eq!(of("100.5"), of("100.50"));
    assert_eq!(of("100"), of("100.00"));
    assert_ne!(of("100.5"), of("100.05"));
    assert_ne!(of("100.5"), of("1005"));
    assert_eq!(normalized_decimal(dec("7.000")), "7");
    assert_eq!(normalized_decimal(dec("0.10")), "0.1");
    // The caller, the route and the path are part of what was asked.
    let base = of("1");
    assert_ne!(
        base,
        fingerprint("deposit", "customer:8", &path(), &deposit("1"))
    );
    assert_ne!(
        base,
        fingerprint("withdraw", "customer:7", &path(), &deposit("1"))
    );
    assert_ne!(
        base,
        fingerprint("deposit", "customer:7", &[], &deposit("1"))
    );
}

/// A key answered under the previous release's fingerprint still replays for a retry that
/// carries it as the legacy fingerprint; a different request under the key is still refused.
#[test]
fn issue_16_a_key_stored_with_the_legacy_fingerprint_still_matches_its_retry() {
    let table = IdempotencyTable::new();
    let legacy = [9u8; 32];
    let record = crate::runtime::journal::IdempotencyRecord {
        caller: "customer:7".into(),
        key: "k".into(),
        fingerprint: legacy,
        at_ms: 0,
        route: 1,
        response: Some(b"answer".to_vec()),
        transfer_uuid: None,
    };
    table.record(&record, 5);
    let canonical = fingerprint("deposit", "customer:7", &path(), &deposit("1"));
    assert!(matches!(
        table.begin("customer:7", "k", canonical, 10),
        Begin::Reused
    ));
    assert!(matches!(
        table.begin_matching("customer:7", "k", canonical, &|| Some(legacy), 10, i64::MIN),
        Begin::Replay(answer) if answer == b"answer"
    ));
    assert!(matches!(
        table.begin_matching(
            "customer:7",
            "k",
            canonical,
            &|| Some([1; 32]),
            10,
            i64::MIN
        ),
        Begin::Reused
    ));
}

/// The previous release's fingerprint is SHA-256 over the operation, each path parameter and
/// the command's `Debug` text, as that release computed it in the API; a retry of a key it
/// answered matches through it.
#[test]
fn the_legacy_fingerprint_hashes_what_the_previous_release_hashed() {
    use sha2::{Digest, Sha256};
    let command = deposit("1");
    let legacy = crate::runtime::LegacyRequest {
        operation: "deposit",
        params: path(),
    };
    let mut hasher = Sha256::new();
    hasher.update(b"deposit\0walletId=42\0");
    hasher.update(format!("{command:?}").as_bytes());
    let expected: [u8; 32] = hasher.finalize().into();
    assert_eq!(legacy.fingerprint(&command), expected);
}

/// The legacy fingerprint is asked for only when a stored answer's fingerprint is not the
/// canonical one: a fresh key and a retry of a canonical answer never compute it.
#[test]
fn the_legacy_fingerprint_is_computed_only_when_the_canonical_one_differs() {
    let table = IdempotencyTable::new();
    let canonical = fingerprint("deposit", "customer:7", &path(), &deposit("1"));
    let asked = std::cell::Cell::new(0u32);
    let legacy = || {
        asked.set(asked.get() + 1);
        Some([9u8; 32])
    };
    assert!(matches!(
        table.begin_matching("customer:7", "fresh", canonical, &legacy, 10, i64::MIN),
        Begin::Fresh
    ));
    let record = |key: &str, fingerprint: [u8; 32]| crate::runtime::journal::IdempotencyRecord {
        caller: "customer:7".into(),
        key: key.into(),
        fingerprint,
        at_ms: 0,
        route: 1,
        response: Some(b"answer".to_vec()),
        transfer_uuid: None,
    };
    table.record(&record("same", canonical), 5);
    assert!(matches!(
        table.begin_matching("customer:7", "same", canonical, &legacy, 10, i64::MIN),
        Begin::Replay(_)
    ));
    assert_eq!(
        asked.get(),
        0,
        "computed for a fresh key or a canonical match"
    );
    table.record(&record("old", [9; 32]), 6);
    assert!(matches!(
        table.begin_matching("customer:7", "old", canonical, &legacy, 10, i64::MIN),
        Begin::Replay(_)
    ));
    assert_eq!(asked.get(), 1);
}
