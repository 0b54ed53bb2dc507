//! The journal record's version byte: the lowest version that holds the entry's events, so an
//! older binary refuses a record it cannot read by its version instead of misparsing it. From
//! version 7 every entry is written at 7 at least (its postings are stamped at the shard's
//! floor); the tests of what each older version could hold label entries as older builds did.

use super::commerce_support::{initiate, merchant_wallet, pay};
use super::Harness;
use crate::runtime::journal::{
    IdempotencyRecord, JournalEntry, JOURNAL_FORMAT_VERSION, POSTED_AT_FLOOR_VERSION,
};
use crate::values::error::DecodeError;

/// The entry labelled with the lowest version that holds it, as builds before
/// [`POSTED_AT_FLOOR_VERSION`] wrote it.
fn labelled(entry: &JournalEntry) -> Vec<u8> {
    let written = entry.encode().unwrap();
    assert_eq!(
        written[0],
        entry.format_version().max(POSTED_AT_FLOOR_VERSION)
    );
    let mut bytes = vec![entry.format_version()];
    bytes.extend_from_slice(&written[1..]);
    bytes
}

#[test]
fn every_entry_is_written_at_the_posting_floor_version_at_least() {
    let mut h = Harness::new();
    let payer = h.create(1, "YER");
    h.deposit(payer, "50.00");
    let mark = h.log.len();
    h.deposit(payer, "5.00");
    let plain = entry(&h, mark);
    assert_eq!(plain.format_version(), 1);
    let bytes = plain.encode().unwrap();
    assert_eq!(bytes[0], POSTED_AT_FLOOR_VERSION);
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), plain);
    // An older build's label still reads: what it logged is the same bytes after the version.
    let mut older = bytes;
    older[0] = 1;
    assert_eq!(JournalEntry::decode(&older).unwrap(), plain);
}

/// The events the harness logged from position `from` on.
fn entry(h: &Harness, from: usize) -> JournalEntry {
    JournalEntry {
        shard: 0,
        events: h.log[from..].to_vec(),
        directory: Vec::new(),
        idempotency: Vec::new(),
    }
}

#[test]
fn entries_carry_the_lowest_version_that_holds_their_events() {
    let mut h = Harness::new();
    let payer = h.create(1, "YER");
    // The shard's first transaction chooses its uuid key (version 4), logged with it.
    h.deposit(payer, "50.00");
    let keyed = entry(&h, 0);
    let key_at = keyed
        .events
        .iter()
        .position(|event| matches!(event, crate::Event::UuidKeyChosen { .. }));
    let recorded_at = keyed
        .events
        .iter()
        .position(|event| matches!(event, crate::Event::TransactionRecorded { .. }));
    assert!(
        key_at.is_some() && key_at < recorded_at,
        "{:?}",
        keyed.events
    );
    let bytes = labelled(&keyed);
    assert_eq!(bytes[0], 4, "the uuid key needs version 4");
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), keyed);
    let mut older = bytes.clone();
    older[0] = 3;
    assert!(JournalEntry::decode(&older).is_err());

    let mark = h.log.len();
    h.deposit(payer, "5.00");
    let plain = entry(&h, mark);
    let bytes = labelled(&plain);
    assert_eq!(
        bytes[0], 1,
        "wallet and deposit events need no more than version 1"
    );
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), plain);

    let mark = h.log.len();
    let merchant = merchant_wallet(&mut h, 7, "YER");
    let payment = pay(&mut h, initiate(merchant, payer, "10.00", "YER"));
    h.ok(crate::Command::ConfirmPayment {
        payment_uuid: payment.uuid,
    });
    let commerce = entry(&h, mark);
    let bytes = labelled(&commerce);
    assert_eq!(bytes[0], 2, "commerce events need version 2");
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), commerce);

    // A refused cross-shard credit (issue 16) needs version 3.
    let refused = JournalEntry {
        shard: 0,
        events: vec![crate::Event::PaymentCreditRefused {
            reservation_uuid: crate::Uuid([1; 16]),
            payment_uuid: crate::Uuid([2; 16]),
            target_wallet_id: merchant,
            at_ms: 1,
        }],
        directory: Vec::new(),
        idempotency: Vec::new(),
    };
    let bytes = labelled(&refused);
    assert_eq!(bytes[0], 3);
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), refused);
    let mut older = bytes.clone();
    older[0] = 2;
    assert!(JournalEntry::decode(&older).is_err());
    let bytes = labelled(&commerce);
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), commerce);

    // Labelled version 1, it would claim to hold only what version 1 knew: refused.
    let mut mislabelled = bytes.clone();
    mislabelled[0] = 1;
    assert!(matches!(
        JournalEntry::decode(&mislabelled),
        Err(DecodeError::Malformed(_))
    ));
    let mut future = bytes;
    future[0] = JOURNAL_FORMAT_VERSION + 1;
    assert!(matches!(
        JournalEntry::decode(&future),
        Err(DecodeError::UnsupportedVersion(v)) if v == JOURNAL_FORMAT_VERSION + 1
    ));
}

/// The entry as versions 1 to 5 declared it: at most one idempotency entry, as an `Option`.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
struct EntryBeforeCoalescing {
    shard: u32,
    events: Vec<crate::Event>,
    directory: Vec<crate::identity::directory::DirectoryEvent>,
    idempotency: Option<IdempotencyRecord>,
}

fn record(key: &str) -> IdempotencyRecord {
    IdempotencyRecord {
        caller: "customer:1".into(),
        key: key.into(),
        fingerprint: [9; 32],
        at_ms: 1_700_000_000_000,
        route: 3,
        response: Some(b"answer".to_vec()),
        transfer_uuid: None,
    }
}

#[test]
fn an_entry_with_one_key_encodes_as_the_optional_key_did() {
    let mut h = Harness::new();
    let payer = h.create(1, "YER");
    // The shard's first transaction also logs its uuid key (version 4); the second does not.
    h.deposit(payer, "1.00");
    let mark = h.log.len();
    h.deposit(payer, "5.00");
    let events = h.log[mark..].to_vec();
    for key in [None, Some(record("k1"))] {
        let older = EntryBeforeCoalescing {
            shard: 0,
            events: events.clone(),
            directory: Vec::new(),
            idempotency: key.clone(),
        };
        let now = JournalEntry {
            shard: 0,
            events: events.clone(),
            directory: Vec::new(),
            idempotency: key.into_iter().collect(),
        };
        let older_bytes = postcard::to_allocvec(&older).unwrap();
        let bytes = labelled(&now);
        assert_eq!(bytes[0], 1, "one key or none needs no newer version");
        assert_eq!(&bytes[1..], &older_bytes[..], "the same bytes as before");
        let mut logged_before = vec![1];
        logged_before.extend_from_slice(&older_bytes);
        assert_eq!(JournalEntry::decode(&logged_before).unwrap(), now);
    }
}

#[test]
fn an_entry_with_several_keys_needs_version_6() {
    let entry = JournalEntry {
        shard: 0,
        events: Vec::new(),
        directory: Vec::new(),
        idempotency: vec![record("k1"), record("k2")],
    };
    let bytes = labelled(&entry);
    assert_eq!(bytes[0], 6);
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), entry);
    // Labelled 5, it claims what version 5 could hold: refused, not misread.
    let mut mislabelled = bytes.clone();
    mislabelled[0] = 5;
    assert!(matches!(
        JournalEntry::decode(&mislabelled),
        Err(DecodeError::Malformed(_))
    ));
    // What a version-5 binary sees: an `Option` tag of 2, which it cannot read.
    assert!(postcard::from_bytes::<EntryBeforeCoalescing>(&bytes[1..]).is_err());
}
