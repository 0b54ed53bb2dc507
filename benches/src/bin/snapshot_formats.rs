//! Issue 14 item 5: a validated rkyv archive of the hot state against today's postcard image.
//!
//! Usage: `cargo run --release -p walletd-benches --features snapshot-compare --bin
//! snapshot_formats [WALLETS] [ACTIVE_PERCENT]` (defaults 1000000 wallets, 50 % with a history
//! head). Behind the `snapshot-compare` feature so the default build and CI never compile rkyv.
//!
//! What is compared is a wallet's hot record exactly as a version-4 snapshot carries it: ids,
//! owner, business and branch, balance, held and pending (each `Decimal` as its 16 canonical
//! bytes, as `values::money::decimal` writes it), three timestamps, currency, the four small
//! enums, and for a wallet that has posted anything its history head (chain head, the hash of the
//! entry before the first one held, and the all-time counts; no records, as after a replay). The
//! engine's `Wallet` fields are crate-private, so the record is mirrored here field for field; the
//! postcard side uses the same serde shapes the engine uses, so its bytes are the size of a real
//! snapshot's wallet section.
//!
//! Three numbers per format, each the best of five runs (the machine is noisy):
//!
//! - **encode**: the state to bytes;
//! - **load**: bytes to the owned `Vec<Wallet>` a shard mutates (postcard decodes; rkyv validates
//!   the archive, then deserializes it and checks each decimal's bytes as postcard's adapter does);
//! - **access** (rkyv only): validate the archive and read every balance in place, the zero-copy
//!   case. A shard cannot run on archived wallets (it mutates balances in place and keeps
//!   indexes), so this is the lower bound of a load, not a way to restart.

use std::hint::black_box;
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

/// A wallet's hot record, as the engine holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Wallet {
    id: u64,
    uuid: [u8; 16],
    owner_id: u64,
    business_id: u64,
    branch_id: u64,
    #[serde(with = "decimal_bytes")]
    balance: Decimal,
    #[serde(with = "decimal_bytes")]
    held: Decimal,
    #[serde(with = "decimal_bytes")]
    pending: Decimal,
    balance_verified_at_ms: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    currency: [u8; 4],
    owner_type: u8,
    wallet_type: u8,
    status: u8,
    history: Option<Box<Head>>,
}

/// A wallet's history head once its records are filed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Head {
    meta: Option<Box<str>>,
    chain_head: [u8; 32],
    entries_before: [u8; 32],
    transactions: u64,
    entries: u64,
    holds: u64,
}

/// The same record for rkyv: decimals as their 16 bytes (rust_decimal 1.x has no rkyv 0.8
/// support; dependencies.md §3).
#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct ArchivedShape {
    id: u64,
    uuid: [u8; 16],
    owner_id: u64,
    business_id: u64,
    branch_id: u64,
    balance: [u8; 16],
    held: [u8; 16],
    pending: [u8; 16],
    balance_verified_at_ms: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    currency: [u8; 4],
    owner_type: u8,
    wallet_type: u8,
    status: u8,
    history: Option<Box<HeadShape>>,
}

#[derive(rkyv::Archive, rkyv::Serialize, rkyv::Deserialize)]
struct HeadShape {
    meta: Option<String>,
    chain_head: [u8; 32],
    entries_before: [u8; 32],
    transactions: u64,
    entries: u64,
    holds: u64,
}

mod decimal_bytes {
    use rust_decimal::Decimal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
        value.serialize().serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
        let bytes = <[u8; 16]>::deserialize(deserializer)?;
        super::decimal_from_bytes(bytes)
            .ok_or_else(|| serde::de::Error::custom("non-canonical decimal bytes"))
    }
}

/// As `engine::values::money::decimal_from_bytes`: refuses bytes that do not round-trip.
fn decimal_from_bytes(bytes: [u8; 16]) -> Option<Decimal> {
    let value = Decimal::deserialize(bytes);
    (value.serialize() == bytes).then_some(value)
}

fn to_shape(wallet: &Wallet) -> ArchivedShape {
    ArchivedShape {
        id: wallet.id,
        uuid: wallet.uuid,
        owner_id: wallet.owner_id,
        business_id: wallet.business_id,
        branch_id: wallet.branch_id,
        balance: wallet.balance.serialize(),
        held: wallet.held.serialize(),
        pending: wallet.pending.serialize(),
        balance_verified_at_ms: wallet.balance_verified_at_ms,
        created_at_ms: wallet.created_at_ms,
        updated_at_ms: wallet.updated_at_ms,
        currency: wallet.currency,
        owner_type: wallet.owner_type,
        wallet_type: wallet.wallet_type,
        status: wallet.status,
        history: wallet.history.as_ref().map(|head| {
            Box::new(HeadShape {
                meta: head.meta.as_deref().map(str::to_owned),
                chain_head: head.chain_head,
                entries_before: head.entries_before,
                transactions: head.transactions,
                entries: head.entries,
                holds: head.holds,
            })
        }),
    }
}

fn from_shape(shape: ArchivedShape) -> Option<Wallet> {
    Some(Wallet {
        id: shape.id,
        uuid: shape.uuid,
        owner_id: shape.owner_id,
        business_id: shape.business_id,
        branch_id: shape.branch_id,
        balance: decimal_from_bytes(shape.balance)?,
        held: decimal_from_bytes(shape.held)?,
        pending: decimal_from_bytes(shape.pending)?,
        balance_verified_at_ms: shape.balance_verified_at_ms,
        created_at_ms: shape.created_at_ms,
        updated_at_ms: shape.updated_at_ms,
        currency: shape.currency,
        owner_type: shape.owner_type,
        wallet_type: shape.wallet_type,
        status: shape.status,
        history: shape.history.map(|head| {
            Box::new(Head {
                meta: head.meta.map(String::into_boxed_str),
                chain_head: head.chain_head,
                entries_before: head.entries_before,
                transactions: head.transactions,
                entries: head.entries,
                holds: head.holds,
            })
        }),
    })
}

/// Deterministic wallets: a splitmix64 stream seeded with 14 (logged in the output).
fn wallets(count: u64, active_percent: u64) -> Vec<Wallet> {
    let mut state = 14u64;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    (1..=count)
        .map(|id| {
            let mut uuid = [0u8; 16];
            uuid[..8].copy_from_slice(&next().to_le_bytes());
            uuid[8..].copy_from_slice(&next().to_le_bytes());
            let active = next() % 100 < active_percent;
            let balance = if active {
                Decimal::new((next() % 100_000_000) as i64, 2)
            } else {
                Decimal::ZERO
            };
            let created = 1_790_000_000_000 + id as i64;
            Wallet {
                id,
                uuid,
                owner_id: 1_000 + id,
                business_id: 1 + id % 50,
                branch_id: 0,
                balance,
                held: Decimal::ZERO,
                pending: Decimal::ZERO,
                balance_verified_at_ms: created,
                created_at_ms: created,
                updated_at_ms: created,
                currency: *b"YER\0",
                owner_type: 1,
                wallet_type: 1,
                status: 1,
                history: active.then(|| {
                    let mut chain_head = [0u8; 32];
                    for chunk in chain_head.chunks_mut(8) {
                        chunk.copy_from_slice(&next().to_le_bytes());
                    }
                    Box::new(Head {
                        meta: None,
                        chain_head,
                        entries_before: chain_head,
                        transactions: next() % 1_000,
                        entries: next() % 1_000,
                        holds: next() % 10,
                    })
                }),
            }
        })
        .collect()
}

/// The fastest of five runs of `run`, and its last result.
fn best<T>(mut run: impl FnMut() -> T) -> (Duration, T) {
    let mut fastest = Duration::MAX;
    let mut last = None;
    for _ in 0..5 {
        let started = Instant::now();
        let value = run();
        fastest = fastest.min(started.elapsed());
        last = Some(value);
    }
    (fastest, last.expect("five runs"))
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let count: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let active_percent: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(50);
    let state = wallets(count, active_percent);
    println!(
        "# snapshot_formats: {count} wallets, {active_percent} % with a history head, seed 14, \
         rkyv 0.8 (validated) vs postcard 1.1; best of 5"
    );

    let (postcard_encode, postcard_bytes) =
        best(|| postcard::to_allocvec(black_box(&state)).expect("postcard encodes"));
    let (postcard_load, decoded) = best(|| {
        postcard::from_bytes::<Vec<Wallet>>(black_box(&postcard_bytes)).expect("postcard decodes")
    });
    assert!(decoded == state, "postcard round trip");
    drop(decoded);

    let shapes: Vec<ArchivedShape> = state.iter().map(to_shape).collect();
    let (rkyv_encode, rkyv_bytes) =
        best(|| rkyv::to_bytes::<rkyv::rancor::Error>(black_box(&shapes)).expect("rkyv encodes"));
    drop(shapes);
    let (rkyv_load, loaded) = best(|| {
        let archived = rkyv::access::<rkyv::Archived<Vec<ArchivedShape>>, rkyv::rancor::Error>(
            black_box(&rkyv_bytes),
        )
        .expect("a valid archive");
        let shapes: Vec<ArchivedShape> =
            rkyv::deserialize::<Vec<ArchivedShape>, rkyv::rancor::Error>(archived)
                .expect("rkyv deserializes");
        shapes
            .into_iter()
            .map(from_shape)
            .collect::<Option<Vec<Wallet>>>()
            .expect("canonical decimals")
    });
    assert!(loaded == state, "rkyv round trip");
    drop(loaded);
    let (rkyv_access, total) = best(|| {
        let archived = rkyv::access::<rkyv::Archived<Vec<ArchivedShape>>, rkyv::rancor::Error>(
            black_box(&rkyv_bytes),
        )
        .expect("a valid archive");
        archived
            .iter()
            .map(|wallet| Decimal::deserialize(wallet.balance))
            .sum::<Decimal>()
    });
    let expected: Decimal = state.iter().map(|wallet| wallet.balance).sum();
    assert_eq!(total, expected, "balances read in place");

    println!();
    println!("| format | encode | load to owned wallets | validate + read in place | bytes | bytes per wallet |");
    println!("|---|---:|---:|---:|---:|---:|");
    println!(
        "| postcard (today) | {:.0} ms | {:.0} ms | – | {:.1} MiB | {:.0} |",
        ms(postcard_encode),
        ms(postcard_load),
        postcard_bytes.len() as f64 / (1 << 20) as f64,
        postcard_bytes.len() as f64 / count as f64
    );
    println!(
        "| rkyv, validated | {:.0} ms | {:.0} ms | {:.0} ms | {:.1} MiB | {:.0} |",
        ms(rkyv_encode),
        ms(rkyv_load),
        ms(rkyv_access),
        rkyv_bytes.len() as f64 / (1 << 20) as f64,
        rkyv_bytes.len() as f64 / count as f64
    );
}
