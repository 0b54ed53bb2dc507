//! The journal record's version byte: the lowest version that holds the entry's events, so an
//! older binary refuses a record it cannot read by its version instead of misparsing it.

use super::commerce_support::{initiate, merchant_wallet, pay};
use super::Harness;
use crate::runtime::journal::{JournalEntry, JOURNAL_FORMAT_VERSION};
use crate::values::error::DecodeError;

fn entry(h: &Harness) -> JournalEntry {
    JournalEntry {
        shard: 0,
        events: h.log.clone(),
        directory: Vec::new(),
        idempotency: None,
    }
}

#[test]
fn entries_carry_the_lowest_version_that_holds_their_events() {
    let mut h = Harness::new();
    let payer = h.create(1, "YER");
    h.deposit(payer, "50.00");
    let plain = entry(&h);
    let bytes = plain.encode().unwrap();
    assert_eq!(
        bytes[0], 1,
        "wallet and deposit events need no more than version 1"
    );
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), plain);

    let merchant = merchant_wallet(&mut h, 7, "YER");
    let payment = pay(&mut h, initiate(merchant, payer, "10.00", "YER"));
    h.ok(crate::Command::ConfirmPayment {
        payment_uuid: payment.uuid,
    });
    let commerce = entry(&h);
    let bytes = commerce.encode().unwrap();
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
        idempotency: None,
    };
    let bytes = refused.encode().unwrap();
    assert_eq!(bytes[0], JOURNAL_FORMAT_VERSION);
    assert_eq!(JournalEntry::decode(&bytes).unwrap(), refused);
    let mut older = bytes.clone();
    older[0] = 2;
    assert!(JournalEntry::decode(&older).is_err());
    let bytes = commerce.encode().unwrap();
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
