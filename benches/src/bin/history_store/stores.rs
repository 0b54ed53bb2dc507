//! The two candidate engines behind one small trait, with the key layouts of issue 14:
//!
//! * `tx`: transaction id (u64) → encoded `Transaction`
//! * `wallet_entries`: wallet id (u64) ‖ per-wallet entry sequence (u64) → encoded `LedgerEntry`
//! * `tx_by_uuid`: uuid (16 B) → transaction id (u64)
//! * `meta`: `"lsn"` → the last WAL position the store covers, written in every batch
//!
//! fjall keys are big-endian bytes (byte order = numeric order); redb keys are typed (`u64`,
//! `(u64, u64)`, `[u8; 16]`), which redb orders numerically itself.

use std::path::Path;

use anyhow::Result;

/// One indexer batch: the rows of a group of WAL records, plus the LSN they bring the store to.
#[derive(Default)]
pub struct Batch {
    pub txs: Vec<(u64, Vec<u8>)>,
    /// (wallet id, entry sequence, encoded entry)
    pub entries: Vec<(u64, u64, Vec<u8>)>,
    pub uuids: Vec<([u8; 16], u64)>,
    pub lsn: u64,
}

impl Batch {
    pub fn clear(&mut self) {
        self.txs.clear();
        self.entries.clear();
        self.uuids.clear();
    }

    pub fn rows(&self) -> usize {
        self.txs.len() + self.entries.len() + self.uuids.len() + 1
    }
}

pub trait Store: Sync {
    /// Writes one batch in one write transaction / write batch. `durable`: this batch is a
    /// checkpoint and everything up to it must be on disk when this returns; otherwise the
    /// store's own durability is off.
    fn write(&self, batch: &Batch, durable: bool) -> Result<()>;
    /// Value length of a transaction by id (0 when absent).
    fn tx(&self, id: u64) -> Result<usize>;
    fn tx_by_uuid(&self, uuid: &[u8; 16]) -> Result<Option<u64>>;
    /// A page of up to `limit` entries of `wallet` with sequence < `before`, newest first (the
    /// cursor of the next page is the last sequence returned). Returns (entries, value bytes).
    fn page(&self, wallet: u64, before: u64, limit: usize) -> Result<(usize, usize)>;
    /// The LSN the store covers (the indexer's restart point).
    fn lsn(&self) -> Result<Option<u64>>;
}

pub fn open(
    engine: &str,
    path: &Path,
    cache_bytes: u64,
    journal_bytes: u64,
) -> Result<Box<dyn Store>> {
    Ok(match engine {
        "fjall" => Box::new(Fjall::open(path, cache_bytes, journal_bytes)?),
        "redb" => Box::new(Redb::open(path, cache_bytes)?),
        other => anyhow::bail!("unknown engine {other:?} (fjall, redb)"),
    })
}

fn entry_key(wallet: u64, seq: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&wallet.to_be_bytes());
    key[8..].copy_from_slice(&seq.to_be_bytes());
    key
}

fn u64_of(bytes: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(bytes.try_into()?))
}

// ---------------------------------------------------------------------------------------------
// fjall (LSM tree)

pub struct Fjall {
    db: fjall::Database,
    tx: fjall::Keyspace,
    entries: fjall::Keyspace,
    uuids: fjall::Keyspace,
    meta: fjall::Keyspace,
}

impl Fjall {
    pub fn open(path: &Path, cache_bytes: u64, journal_bytes: u64) -> Result<Self> {
        // Journal writes go to the OS on every batch commit (so a process crash loses nothing),
        // but nothing is fsynced until `persist` at a checkpoint.
        let db = fjall::Database::builder(path)
            .cache_size(cache_bytes)
            // Bounds what a reopen replays: past this, memtables are flushed to tables.
            .max_journaling_size(journal_bytes)
            .open()?;
        let ks = |name: &str| db.keyspace(name, fjall::KeyspaceCreateOptions::default);
        Ok(Self {
            tx: ks("tx")?,
            entries: ks("wallet_entries")?,
            uuids: ks("tx_by_uuid")?,
            meta: ks("meta")?,
            db,
        })
    }
}

impl Store for Fjall {
    fn write(&self, batch: &Batch, durable: bool) -> Result<()> {
        let mut wb = self.db.batch();
        for (id, value) in &batch.txs {
            wb.insert(&self.tx, id.to_be_bytes(), value.as_slice());
        }
        for (wallet, seq, value) in &batch.entries {
            wb.insert(&self.entries, entry_key(*wallet, *seq), value.as_slice());
        }
        for (uuid, id) in &batch.uuids {
            wb.insert(&self.uuids, *uuid, id.to_be_bytes());
        }
        wb.insert(&self.meta, "lsn", batch.lsn.to_be_bytes());
        wb.commit()?;
        if durable {
            self.db.persist(fjall::PersistMode::SyncData)?;
        }
        Ok(())
    }

    fn tx(&self, id: u64) -> Result<usize> {
        Ok(self.tx.get(id.to_be_bytes())?.map_or(0, |v| v.len()))
    }

    fn tx_by_uuid(&self, uuid: &[u8; 16]) -> Result<Option<u64>> {
        self.uuids.get(uuid)?.map(|v| u64_of(&v)).transpose()
    }

    fn page(&self, wallet: u64, before: u64, limit: usize) -> Result<(usize, usize)> {
        let (mut n, mut bytes) = (0, 0);
        for guard in self
            .entries
            .range(entry_key(wallet, 0)..entry_key(wallet, before))
            .rev()
            .take(limit)
        {
            let (_key, value) = guard.into_inner()?;
            n += 1;
            bytes += value.len();
        }
        Ok((n, bytes))
    }

    fn lsn(&self) -> Result<Option<u64>> {
        self.meta.get("lsn")?.map(|v| u64_of(&v)).transpose()
    }
}

// ---------------------------------------------------------------------------------------------
// redb (copy-on-write B-tree)

use redb::ReadableDatabase;

const TX: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("tx");
const ENTRIES: redb::TableDefinition<(u64, u64), &[u8]> =
    redb::TableDefinition::new("wallet_entries");
const UUIDS: redb::TableDefinition<[u8; 16], u64> = redb::TableDefinition::new("tx_by_uuid");
const META: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");

pub struct Redb {
    db: redb::Database,
}

impl Redb {
    pub fn open(path: &Path, cache_bytes: u64) -> Result<Self> {
        let db = redb::Database::builder()
            .set_cache_size(usize::try_from(cache_bytes)?)
            .create(path.join("history.redb"))?;
        // Create the tables so readers never see them missing.
        let w = db.begin_write()?;
        w.open_table(TX)?;
        w.open_table(ENTRIES)?;
        w.open_table(UUIDS)?;
        w.open_table(META)?;
        w.commit()?;
        Ok(Self { db })
    }
}

impl Store for Redb {
    fn write(&self, batch: &Batch, durable: bool) -> Result<()> {
        let mut w = self.db.begin_write()?;
        if durable {
            // A checkpoint: fsynced, and with the allocator state saved so that reopening after
            // a crash does not walk the whole file.
            w.set_durability(redb::Durability::Immediate)?;
            w.set_quick_repair(true);
        } else {
            w.set_durability(redb::Durability::None)?;
        }
        {
            let mut tx = w.open_table(TX)?;
            for (id, value) in &batch.txs {
                tx.insert(id, value.as_slice())?;
            }
            let mut entries = w.open_table(ENTRIES)?;
            for (wallet, seq, value) in &batch.entries {
                entries.insert((*wallet, *seq), value.as_slice())?;
            }
            let mut uuids = w.open_table(UUIDS)?;
            for (uuid, id) in &batch.uuids {
                uuids.insert(uuid, id)?;
            }
            w.open_table(META)?.insert("lsn", batch.lsn)?;
        }
        w.commit()?;
        Ok(())
    }

    fn tx(&self, id: u64) -> Result<usize> {
        let r = self.db.begin_read()?;
        let t = r.open_table(TX)?;
        Ok(t.get(id)?.map_or(0, |v| v.value().len()))
    }

    fn tx_by_uuid(&self, uuid: &[u8; 16]) -> Result<Option<u64>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(UUIDS)?;
        Ok(t.get(uuid)?.map(|v| v.value()))
    }

    fn page(&self, wallet: u64, before: u64, limit: usize) -> Result<(usize, usize)> {
        let r = self.db.begin_read()?;
        let t = r.open_table(ENTRIES)?;
        let (mut n, mut bytes) = (0, 0);
        for item in t.range((wallet, 0)..(wallet, before))?.rev().take(limit) {
            let (_key, value) = item?;
            n += 1;
            bytes += value.value().len();
        }
        Ok((n, bytes))
    }

    fn lsn(&self) -> Result<Option<u64>> {
        let r = self.db.begin_read()?;
        let t = r.open_table(META)?;
        Ok(t.get("lsn")?.map(|v| v.value()))
    }
}
