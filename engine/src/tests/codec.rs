//! Event codec and snapshot bytes: round trips, arbitrary input never panics, readable JSON.

use proptest::prelude::*;
use rust_decimal::Decimal;

use super::{dec, Harness};
use crate::ledger::hold::{Hold, HoldStatus};
use crate::ledger::transaction::{
    Direction, EntryRef, Hash, LedgerEntry, Transaction, TransactionStatus, TransactionText,
    TransactionType,
};
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer, TransferState};
use crate::ledger::wallet::{OwnerType, WalletStatus, WalletType};
use crate::shard::event::{WalletCreated, EVENT_FORMAT_VERSION};
use crate::values::ids::{EntryId, HoldId, TransactionId};
use crate::{decode, encode, Currency, DecodeError, Event, Shard, Uuid, WalletId};

fn uuid() -> impl Strategy<Value = Uuid> {
    any::<[u8; 16]>().prop_map(Uuid)
}

fn hash() -> impl Strategy<Value = Hash> {
    any::<[u8; 32]>().prop_map(Hash)
}

fn positive() -> impl Strategy<Value = Decimal> {
    (1i64..i64::MAX, 0u32..=3).prop_map(|(mantissa, scale)| Decimal::new(mantissa, scale))
}

fn signed() -> impl Strategy<Value = Decimal> {
    (any::<i64>(), 0u32..=3).prop_map(|(mantissa, scale)| Decimal::new(mantissa, scale))
}

fn currency() -> impl Strategy<Value = Currency> {
    let all: Vec<Currency> = Currency::all().collect();
    proptest::sample::select(all)
}

fn text() -> impl Strategy<Value = Option<Box<str>>> {
    proptest::option::of(".{0,12}".prop_map(String::into_boxed_str))
}

fn wallet_id() -> impl Strategy<Value = WalletId> {
    any::<u64>().prop_map(WalletId)
}

fn direction() -> impl Strategy<Value = Direction> {
    prop_oneof![Just(Direction::Debit), Just(Direction::Credit)]
}

fn kind() -> impl Strategy<Value = TransactionType> {
    prop_oneof![
        Just(TransactionType::Deposit),
        Just(TransactionType::Withdrawal),
        Just(TransactionType::Transfer),
        Just(TransactionType::Refund),
        Just(TransactionType::Reversal),
        Just(TransactionType::HoldCapture),
    ]
}

fn wallet_created() -> impl Strategy<Value = Event> {
    let owner = prop_oneof![
        Just((OwnerType::Customer, WalletType::Primary)),
        Just((OwnerType::Merchant, WalletType::Savings)),
        Just((OwnerType::Business, WalletType::Escrow)),
        Just((OwnerType::System, WalletType::Float)),
        Just((OwnerType::System, WalletType::InTransit)),
    ];
    (
        wallet_id(),
        uuid(),
        owner,
        any::<u64>(),
        currency(),
        any::<u64>(),
        any::<u64>(),
        text(),
        any::<i64>(),
    )
        .prop_map(
            |(
                wallet_id,
                uuid,
                (owner_type, wallet_type),
                owner_id,
                currency,
                business_id,
                branch_id,
                meta,
                at_ms,
            )| {
                Event::WalletCreated(WalletCreated {
                    wallet_id,
                    uuid,
                    owner_type,
                    owner_id,
                    wallet_type,
                    currency,
                    business_id,
                    branch_id,
                    meta,
                    at_ms,
                })
            },
        )
}

fn transaction() -> impl Strategy<Value = Transaction> {
    let ids = (any::<u64>(), uuid(), kind(), direction(), positive());
    let links = (
        proptest::option::of(wallet_id()),
        proptest::option::of(any::<u64>().prop_map(TransactionId)),
        proptest::option::of(uuid()),
        (text(), text(), text(), text()),
        proptest::collection::vec((wallet_id(), any::<u64>()), 1..4),
    );
    let tail = (
        signed(),
        proptest::option::of(any::<u64>().prop_map(TransactionId)),
        any::<i64>(),
        proptest::option::of(any::<i64>()),
    );
    (ids, links, tail).prop_map(
        |((id, uuid, transaction_type, direction, amount), links, tail)| {
            let (
                counterparty_wallet_id,
                reference_transaction_id,
                transfer_uuid,
                (description, external_reference, idempotency_key, meta),
                legs,
            ) = links;
            let (refunded_amount, reversed_by_transaction_id, created_at_ms, reversed_at_ms) = tail;
            Transaction {
                id: TransactionId(id),
                uuid,
                transaction_type,
                direction,
                status: if reversed_at_ms.is_some() {
                    TransactionStatus::Reversed
                } else {
                    TransactionStatus::Completed
                },
                amount,
                fee_amount: Decimal::ZERO,
                net_amount: amount,
                counterparty_wallet_id,
                reference_transaction_id,
                transfer_uuid,
                text: TransactionText {
                    description,
                    external_reference,
                    idempotency_key,
                    meta,
                },
                legs: legs
                    .into_iter()
                    .map(|(wallet_id, entry)| EntryRef {
                        wallet_id,
                        entry_id: EntryId(entry),
                    })
                    .collect(),
                refunded_amount,
                reversed_by_transaction_id,
                created_at_ms,
                completed_at_ms: created_at_ms,
                reversed_at_ms,
            }
        },
    )
}

fn entry() -> impl Strategy<Value = LedgerEntry> {
    let head = (
        any::<u64>(),
        uuid(),
        any::<u64>(),
        direction(),
        kind(),
        positive(),
        signed(),
    );
    let tail = (
        proptest::option::of(any::<u64>().prop_map(EntryId)),
        text(),
        text(),
        any::<i64>(),
        hash(),
    );
    (head, tail).prop_map(
        |((id, uuid, tx, direction, entry_type, amount, balance_after), tail)| {
            let (reverses_entry_id, description, idempotency_key, created_at_ms, hash) = tail;
            LedgerEntry {
                id: EntryId(id),
                uuid,
                transaction_id: TransactionId(tx),
                direction,
                entry_type,
                amount,
                balance_after,
                reverses_entry_id,
                reversed_by_entry_id: None,
                description,
                idempotency_key,
                created_at_ms,
                hash,
            }
        },
    )
}

fn hold() -> impl Strategy<Value = Hold> {
    (
        any::<u64>(),
        uuid(),
        positive(),
        text(),
        any::<i32>(),
        0i64..1_000_000_000,
    )
        .prop_map(|(id, uuid, amount, reason, created, ttl)| Hold {
            id: HoldId(id),
            uuid,
            amount,
            status: HoldStatus::Active,
            reason,
            created_at_ms: i64::from(created),
            expires_at_ms: i64::from(created) + ttl,
            closed_at_ms: None,
            captured_amount: None,
            capture_transaction_id: None,
        })
}

fn transfer_state() -> impl Strategy<Value = TransferState> {
    Just(TransferState::Reserved)
}

pub(crate) fn event() -> impl Strategy<Value = Event> {
    let closed = prop_oneof![
        Just((HoldStatus::Released, None, None)),
        Just((HoldStatus::Expired, None, None)),
        (positive(), any::<u64>()).prop_map(|(amount, tx)| (
            HoldStatus::Captured,
            Some(amount),
            Some(TransactionId(tx))
        )),
    ];
    prop_oneof![
        wallet_created(),
        (
            wallet_id(),
            prop_oneof![Just(WalletStatus::Active), Just(WalletStatus::Frozen)],
            any::<i64>()
        )
            .prop_map(|(wallet_id, status, at_ms)| Event::WalletStatusChanged {
                wallet_id,
                status,
                at_ms
            }),
        (wallet_id(), transaction()).prop_map(|(wallet_id, transaction)| {
            Event::TransactionRecorded {
                wallet_id,
                transaction,
            }
        }),
        (wallet_id(), entry())
            .prop_map(|(wallet_id, entry)| Event::EntryPosted { wallet_id, entry }),
        (wallet_id(), any::<u64>(), any::<u64>()).prop_map(|(wallet_id, a, b)| {
            Event::EntryReversed {
                wallet_id,
                entry_id: EntryId(a),
                reversed_by_entry_id: EntryId(b),
            }
        }),
        (wallet_id(), any::<u64>(), any::<u64>(), any::<i64>()).prop_map(
            |(wallet_id, a, b, at_ms)| Event::TransactionReversed {
                wallet_id,
                transaction_id: TransactionId(a),
                reversed_by_transaction_id: TransactionId(b),
                at_ms
            }
        ),
        (wallet_id(), any::<u64>(), positive(), any::<i64>()).prop_map(
            |(wallet_id, a, refunded_amount, at_ms)| Event::RefundTotalChanged {
                wallet_id,
                transaction_id: TransactionId(a),
                refunded_amount,
                at_ms
            }
        ),
        (wallet_id(), hold()).prop_map(|(wallet_id, hold)| Event::HoldPlaced { wallet_id, hold }),
        (wallet_id(), any::<u64>(), closed, any::<i64>()).prop_map(
            |(wallet_id, hold, (status, captured_amount, capture_transaction_id), at_ms)| {
                Event::HoldClosed {
                    wallet_id,
                    hold_id: HoldId(hold),
                    status,
                    captured_amount,
                    capture_transaction_id,
                    at_ms,
                }
            }
        ),
        (
            uuid(),
            1u64..1000,
            1000u64..2000,
            positive(),
            currency(),
            any::<u64>(),
            transfer_state(),
            text(),
            any::<i64>()
        )
            .prop_map(
                |(uuid, source, target, amount, currency, tx, state, description, at_ms)| {
                    Event::TransferReserved(OutgoingTransfer {
                        uuid,
                        source_wallet_id: WalletId(source),
                        target_wallet_id: WalletId(target),
                        amount,
                        currency,
                        transaction_id: TransactionId(tx),
                        state,
                        description,
                        reserved_at_ms: at_ms,
                        settled_at_ms: None,
                    })
                }
            ),
        (
            uuid(),
            1u64..1000,
            1000u64..2000,
            positive(),
            currency(),
            any::<u64>(),
            any::<i64>()
        )
            .prop_map(|(uuid, source, target, amount, currency, tx, at_ms)| {
                Event::TransferCredited(IncomingTransfer {
                    uuid,
                    source_wallet_id: WalletId(source),
                    target_wallet_id: WalletId(target),
                    amount,
                    currency,
                    transaction_id: TransactionId(tx),
                    credited_at_ms: at_ms,
                })
            }),
        (uuid(), any::<i64>()).prop_map(|(transfer_uuid, at_ms)| Event::TransferFinalized {
            transfer_uuid,
            at_ms
        }),
        (uuid(), any::<i64>()).prop_map(|(transfer_uuid, at_ms)| Event::TransferReleased {
            transfer_uuid,
            at_ms
        }),
        (wallet_id(), any::<i64>())
            .prop_map(|(wallet_id, at_ms)| Event::BalanceVerified { wallet_id, at_ms }),
        any::<[u8; 32]>().prop_map(|key| Event::UuidKeyChosen {
            key: crate::values::sealed::UuidKey(key)
        }),
        (
            uuid(),
            proptest::collection::btree_set(any::<u32>(), 1..5),
            proptest::collection::btree_set(uuid(), 1..6)
        )
            .prop_map(|(batch, shards, transfers)| Event::TransferBatchPrepared {
                batch,
                shards: shards.into_iter().collect(),
                transfers: transfers.into_iter().collect(),
            }),
        uuid().prop_map(|batch| Event::TransferBatchClosed { batch }),
    ]
}

proptest! {
    #[test]
    fn events_round_trip(events in proptest::collection::vec(event(), 0..8)) {
        for event in &events {
            prop_assert_eq!(event.validate(), Ok(()));
        }
        let bytes = encode(&events).unwrap();
        prop_assert_eq!(bytes.first(), Some(&EVENT_FORMAT_VERSION));
        prop_assert_eq!(decode(&bytes), Ok(events.clone()));
        // Human-readable form round-trips too.
        let json = serde_json::to_string(&events).unwrap();
        let back: Vec<Event> = serde_json::from_str(&json).unwrap();
        prop_assert_eq!(back, events);
    }

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = decode(&bytes);
        let mut versioned = vec![EVENT_FORMAT_VERSION];
        versioned.extend_from_slice(&bytes);
        let _ = decode(&versioned);
    }

    #[test]
    fn decode_never_panics_on_mutated_records(events in proptest::collection::vec(event(), 1..4), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut bytes = encode(&events).unwrap();
        for (at, value) in flips {
            let len = bytes.len();
            bytes[at % len] ^= value;
        }
        let _ = decode(&bytes);
        let len = bytes.len();
        let _ = decode(&bytes[..cut % len]);
    }

    #[test]
    fn snapshot_loading_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6)) {
        let _ = Shard::from_snapshot_bytes(&bytes);
        let mut snapshot = sample_shard().snapshot_bytes().unwrap();
        let len = snapshot.len();
        for (at, value) in flips {
            snapshot[at % len] ^= value;
        }
        if let Ok(shard) = Shard::from_snapshot_bytes(&snapshot) {
            // Whatever loads must be usable without panicking.
            let _ = shard.check_invariants();
            let _ = shard.state_digest();
            let _ = shard.expire_holds(i64::MAX);
        }
    }

    /// The whole snapshot image (shards' states borrowed out of it, directory, keys): random
    /// bytes, and a real image with bytes flipped or cut short, never panic.
    #[test]
    fn image_loading_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..6), cut in any::<usize>()) {
        use crate::identity::directory::Directory;
        use crate::runtime::image;
        let _ = image::decode(&bytes);
        let mut encoded =
            image::encode(&[(7, sample_shard())], &Directory::new(), &[]).unwrap();
        let len = encoded.len();
        let _ = image::decode(&encoded[..cut % len]);
        for (at, value) in flips {
            encoded[at % len] ^= value;
        }
        let _ = image::decode(&encoded);
    }
}

fn sample_shard() -> Shard {
    let mut h = Harness::new();
    let a = h.create(1, "USD");
    let b = h.create(2, "USD");
    h.deposit(a, "10");
    h.ok(crate::Command::Transfer(super::transfer(a, b, "3", "USD")));
    h.shard
}

#[test]
fn decode_refuses_bad_framing() {
    let events = vec![Event::BalanceVerified {
        wallet_id: WalletId(1),
        at_ms: 5,
    }];
    let bytes = encode(&events).unwrap();
    assert_eq!(decode(&[]), Err(DecodeError::Empty));
    assert_eq!(decode(&[9, 0]), Err(DecodeError::UnsupportedVersion(9)));
    let mut trailing = bytes.clone();
    trailing.push(0);
    assert_eq!(decode(&trailing), Err(DecodeError::TrailingBytes(1)));
    assert!(matches!(
        decode(&bytes[..bytes.len() - 1]),
        Err(DecodeError::Malformed(_))
    ));
    // An event that breaks its own rules is refused after decoding.
    let bad = vec![Event::HoldClosed {
        wallet_id: WalletId(1),
        hold_id: HoldId(1),
        status: HoldStatus::Captured,
        captured_amount: None,
        capture_transaction_id: None,
        at_ms: 0,
    }];
    assert!(matches!(
        decode(&encode(&bad).unwrap()),
        Err(DecodeError::Invalid(_))
    ));
}

#[test]
fn non_canonical_decimal_bytes_are_refused() {
    let mut bytes = encode(&[Event::RefundTotalChanged {
        wallet_id: WalletId(1),
        transaction_id: TransactionId(2),
        refunded_amount: dec("1.00"),
        at_ms: 0,
    }])
    .unwrap();
    // Layout: version, count, variant, wallet id, tx id, then the decimal's 4 flag bytes: set an unused bit.
    let flags_at = 5;
    bytes[flags_at] |= 0x01;
    assert!(matches!(decode(&bytes), Err(DecodeError::Malformed(_))));
}

#[test]
fn json_form_is_readable() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "12.5");
    let json = serde_json::to_string(&h.log).unwrap();
    assert!(json.contains(r#""amount":"12.50""#), "{json}");
    assert!(json.contains(r#""currency":"USD""#), "{json}");
    assert!(json.contains(r#""wallet_created""#), "{json}");
    let uuid = h.shard.wallet(wallet).unwrap().uuid().to_string();
    assert!(json.contains(&uuid), "uuids are hyphenated strings");
    assert_eq!(
        uuid.parse::<Uuid>().unwrap(),
        h.shard.wallet(wallet).unwrap().uuid()
    );
    assert_eq!(&uuid[14..15], "4", "version 4");
}
