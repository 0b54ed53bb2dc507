//! The engine crash drill's shared pieces: how the child (`engine_crash_child`) and the parent
//! (`tests/engine_crash.rs`) open the engine, which wallets the child uses, and the lines the child
//! prints and the parent reads.
//!
//! # Lines
//!
//! ```text
//! OPEN <records_replayed> <transfers_completed> <open_ms>   recovery done
//! WALLET <owner_id> <wallet_id>                              a drill wallet, found or created
//! READY                                                      traffic starts
//! TRY <op> <kind> <source> <target> <amount> <keyed>         before the engine runs it
//! ACK <op> <kind> <source> <target> <amount> <keyed> <answer> after it was accepted
//! REJ <op> <kind> <source> <target> <amount> <keyed> <code>   after a business rejection
//! SNAP <lsn>                                                 an explicit snapshot was written
//! ERR <message>                                              anything else; the child exits 1
//! ```
//!
//! Every line is flushed before the task that printed it goes on, so an `ACK` the parent reads is
//! a promise the engine made. `<op>` is unique over the whole drill (`<run>.<task>.<counter>`) and
//! is also the `description` of every transaction the operation posts: a transfer's description
//! travels with its credit leg to the target shard, so after a crash the parent finds each
//! operation's legs in the ledger and checks that an operation posted all of them or none.
//! `<kind>` is `deposit`, `withdraw` or `transfer`; a deposit or withdrawal names its wallet as both
//! source and target. Amounts are YER with two decimals.
//!
//! `<keyed>` is `1` when the operation ran under an idempotency key (its op id, see
//! [`idempotency_key`]) through `Engine::execute_idempotent`, `0` for plain `Engine::execute`. A
//! keyed answer is what [`DrillRenderer`] rendered (`ok:<transaction uuid>:<amount>`, the
//! transaction on the source wallet); an unkeyed one is `-`. After a crash the parent retries
//! keyed operations under the same key: one that landed must be answered from the idempotency
//! table with the same bytes, one that did not must run now.

use std::path::Path;
use std::sync::Arc;

use engine::runtime::{EngineConfig, IdempotencyKey, Renderer};
use engine::shard::command::{Details, MoneyMove, TransferArgs};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;

/// Customer wallets the drill moves money between, owners `1..=WALLETS`.
pub const WALLETS: u64 = 16;
/// Concurrent tasks in the child.
pub const TASKS: usize = 32;
/// Snapshot after this many records, so automatic snapshots happen during every run.
pub const SNAPSHOT_EVERY_RECORDS: u64 = 500;

/// How the child and the parent open the drill's data directory: small segments so they rotate
/// during a run, fsync on every group commit, frequent snapshots.
pub fn config(dir: &Path, shards: u32) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.shard_count = shards;
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.wal.fsync = wal::FsyncPolicy::Always;
    config.snapshot_every_records = SNAPSHOT_EVERY_RECORDS;
    config
}

/// The drill's currency.
pub fn yer() -> Currency {
    Currency::from_code("YER").unwrap_or_else(|e| panic!("YER is a known currency: {e}"))
}

/// Renders an answer as one word: `ok:<transaction uuid>:<amount>`, `ok:other` or
/// `err:<rejection code>`.
pub struct DrillRenderer;

impl Renderer for DrillRenderer {
    fn render(&self, _route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        match result {
            Ok(Outcome::Transaction(t)) => format!("ok:{}:{}", t.uuid, t.amount),
            Ok(_) => "ok:other".to_string(),
            Err(rejection) => format!("err:{}", rejection.code()),
        }
        .into_bytes()
    }
}

/// The renderer both the child and the parent open the engine with.
pub fn renderer() -> Arc<dyn Renderer> {
    Arc::new(DrillRenderer)
}

/// The idempotency key of a keyed operation: caller `drill`, key its op id, fingerprint derived
/// from everything it asks.
pub fn idempotency_key(op: &Op) -> IdempotencyKey {
    let words = op.words();
    let mut fingerprint = [0u8; 32];
    for (i, chunk) in fingerprint.chunks_exact_mut(8).enumerate() {
        let salted = format!("{i}:{words}");
        chunk.copy_from_slice(&crate::crash::fnv1a64(salted.as_bytes()).to_le_bytes());
    }
    IdempotencyKey {
        caller: "drill".into(),
        key: op.id.clone(),
        fingerprint,
        legacy: None,
        route: 1,
    }
}

/// The engine command of an operation; its op id is the description of what it posts.
pub fn command(op: &Op) -> Command {
    let details = Details {
        description: Some(op.id.clone()),
        ..Details::default()
    };
    match op.kind {
        Kind::Deposit | Kind::Withdraw => {
            let movement = MoneyMove {
                wallet_id: WalletId(op.source),
                amount: op.amount,
                currency: Some(yer()),
                details,
            };
            if op.kind == Kind::Deposit {
                Command::Deposit(movement)
            } else {
                Command::Withdraw(movement)
            }
        }
        Kind::Transfer => Command::Transfer(TransferArgs {
            source_wallet_id: WalletId(op.source),
            target_wallet_id: WalletId(op.target),
            amount: op.amount,
            currency: yer(),
            details,
        }),
    }
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Deposit,
    Withdraw,
    Transfer,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Deposit => "deposit",
            Kind::Withdraw => "withdraw",
            Kind::Transfer => "transfer",
        }
    }

    pub fn parse(text: &str) -> Option<Kind> {
        match text {
            "deposit" => Some(Kind::Deposit),
            "withdraw" => Some(Kind::Withdraw),
            "transfer" => Some(Kind::Transfer),
            _ => None,
        }
    }
}

/// One operation as the child prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub id: String,
    pub kind: Kind,
    pub source: u64,
    pub target: u64,
    pub amount: Decimal,
    /// Runs under an idempotency key.
    pub keyed: bool,
}

impl Op {
    /// The words after the tag: `<op> <kind> <source> <target> <amount> <keyed>`.
    pub fn words(&self) -> String {
        format!(
            "{} {} {} {} {} {}",
            self.id,
            self.kind.as_str(),
            self.source,
            self.target,
            self.amount,
            u8::from(self.keyed)
        )
    }

    /// The answer a keyed operation gets once it posted the transaction `uuid` on its source.
    pub fn accepted_answer(&self, uuid: &str) -> String {
        format!("ok:{uuid}:{}", self.amount)
    }

    /// What the operation does to each wallet's balance when it posts.
    pub fn effects(&self) -> Vec<(u64, Decimal)> {
        match self.kind {
            Kind::Deposit => vec![(self.target, self.amount)],
            Kind::Withdraw => vec![(self.source, -self.amount)],
            Kind::Transfer => vec![(self.source, -self.amount), (self.target, self.amount)],
        }
    }
}

/// A line the child printed, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Open {
        records_replayed: u64,
        transfers_completed: u64,
        open_ms: u64,
    },
    Wallet {
        owner_id: u64,
        wallet_id: u64,
    },
    Ready,
    Try(Op),
    /// The operation and its answer (`-` when unkeyed).
    Ack(Op, String),
    /// The operation and the rejection code.
    Rej(Op, String),
    Snap(u64),
    Err(String),
}

/// Parses one line of the child's output; `None` for anything malformed.
pub fn parse_line(line: &str) -> Option<Line> {
    let mut words = line.split(' ');
    let tag = words.next()?;
    let op = |words: &mut std::str::Split<'_, char>| -> Option<Op> {
        Some(Op {
            id: words.next()?.to_string(),
            kind: Kind::parse(words.next()?)?,
            source: words.next()?.parse().ok()?,
            target: words.next()?.parse().ok()?,
            amount: Decimal::from_str_exact(words.next()?).ok()?,
            keyed: match words.next()? {
                "0" => false,
                "1" => true,
                _ => return None,
            },
        })
    };
    let parsed = match tag {
        "OPEN" => Line::Open {
            records_replayed: words.next()?.parse().ok()?,
            transfers_completed: words.next()?.parse().ok()?,
            open_ms: words.next()?.parse().ok()?,
        },
        "WALLET" => Line::Wallet {
            owner_id: words.next()?.parse().ok()?,
            wallet_id: words.next()?.parse().ok()?,
        },
        "READY" => Line::Ready,
        "TRY" => Line::Try(op(&mut words)?),
        "ACK" => {
            let parsed = op(&mut words)?;
            Line::Ack(parsed, words.next()?.to_string())
        }
        "REJ" => {
            let parsed = op(&mut words)?;
            Line::Rej(parsed, words.next()?.to_string())
        }
        "SNAP" => Line::Snap(words.next()?.parse().ok()?),
        "ERR" => return Some(Line::Err(line.get(4..).unwrap_or("").to_string())),
        _ => return None,
    };
    words.next().is_none().then_some(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let op = Op {
            id: "7.3.12".into(),
            kind: Kind::Transfer,
            source: 5,
            target: 10,
            amount: Decimal::new(12345, 2),
            keyed: true,
        };
        assert_eq!(
            parse_line(&format!("ACK {} ok:x:123.45", op.words())),
            Some(Line::Ack(op.clone(), "ok:x:123.45".into()))
        );
        assert_eq!(parse_line(&format!("ACK {}", op.words())), None);
        assert_eq!(
            parse_line(&format!("REJ {} insufficient_funds", op.words())),
            Some(Line::Rej(op.clone(), "insufficient_funds".into()))
        );
        assert_eq!(parse_line(&format!("ACK {} a b", op.words())), None);
        assert_eq!(idempotency_key(&op), idempotency_key(&op.clone()));
        let other = Op {
            amount: Decimal::new(12346, 2),
            ..op.clone()
        };
        assert_ne!(
            idempotency_key(&op).fingerprint,
            idempotency_key(&other).fingerprint
        );
        assert_eq!(
            parse_line("OPEN 10 2 33"),
            Some(Line::Open {
                records_replayed: 10,
                transfers_completed: 2,
                open_ms: 33
            })
        );
        assert_eq!(
            parse_line("ERR boom now"),
            Some(Line::Err("boom now".into()))
        );
        assert_eq!(
            op.effects().iter().map(|(_, a)| *a).sum::<Decimal>(),
            Decimal::ZERO
        );
    }
}
