//! The shards' uuid keys as the indexer knows them, so that it files a uuid index entry
//! (`tx_uuids`, `hold_uuids`) only for the uuids that do not open to their own record
//! (`values::sealed`).
//!
//! A key is learnt from the `UuidKeyChosen` event that logged it (filed to `meta` under
//! `uuid_key | shard`, in the same write batch as the records that follow it) and read back
//! from `meta` when the indexer starts or after a batch that did not commit. Skipping an entry
//! is safe exactly when the uuid opens, under its shard's key, to the record being filed: the
//! shard that owns the wallet finds it by opening it. The key is looked up by the shard that
//! logged the record (`JournalEntry::shard`), which is the shard that owns every wallet its
//! events name (apply refuses any other). Any doubt (no key known yet) files the entry, which
//! is never wrong, only redundant. A second, different key for a shard is refused, as apply
//! refuses it: overwriting the first would lose the uuids it sealed.

use std::collections::HashMap;

use super::writes::Writes;
use crate::runtime::history::store::{HistoryStore, Open, StoreError};
use crate::values::ids::{Uuid, UuidKind};
use crate::values::sealed::UuidKey;

/// Prefix of a shard's key in `meta`; the shard index follows, big-endian.
const UUID_KEY: &[u8] = b"uuid_key:";

fn meta_key(shard: u32) -> Vec<u8> {
    let mut key = UUID_KEY.to_vec();
    key.extend_from_slice(&shard.to_be_bytes());
    key
}

/// Each shard's key, once loaded from `meta`.
#[derive(Default)]
pub(crate) struct UuidKeys {
    loaded: bool,
    by_shard: HashMap<u32, UuidKey>,
}

impl UuidKeys {
    /// Forgets what was learnt (after a batch that did not commit: `meta` is read again).
    pub(crate) fn clear(&mut self) {
        self.loaded = false;
        self.by_shard.clear();
    }

    /// Reads the filed keys, once.
    pub(crate) fn load(&mut self, open: &Open) -> Result<(), StoreError> {
        if self.loaded {
            return Ok(());
        }
        self.by_shard.clear();
        for item in open.meta.prefix(UUID_KEY) {
            let (key, value) = item.into_inner()?;
            let shard = key
                .get(UUID_KEY.len()..)
                .and_then(|bytes| <[u8; 4]>::try_from(bytes).ok())
                .map(u32::from_be_bytes);
            let bytes = <[u8; 32]>::try_from(&*value).ok();
            let (Some(shard), Some(bytes)) = (shard, bytes) else {
                return Err(StoreError::Rule(format!(
                    "meta key {key:?}: not a shard's uuid key"
                )));
            };
            self.by_shard.insert(shard, UuidKey(bytes));
        }
        self.loaded = true;
        Ok(())
    }

    /// Files shard `shard`'s key and knows it from now on; refuses a key other than the one
    /// already filed.
    pub(crate) fn file(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        shard: u32,
        key: UuidKey,
    ) -> Result<(), StoreError> {
        if self.by_shard.get(&shard).is_some_and(|filed| *filed != key) {
            return Err(StoreError::Rule(format!(
                "shard {shard}'s uuid key was chosen already: the log and the store disagree"
            )));
        }
        writes.insert(&open.meta, meta_key(shard), key.0.to_vec());
        self.by_shard.insert(shard, key);
        Ok(())
    }

    /// Whether `uuid` opens, under shard `shard`'s key, to record `id` of `kind` in `wallet`:
    /// then it needs no index entry.
    pub(crate) fn sealed(
        &self,
        shard: u32,
        kind: UuidKind,
        (wallet, id): (u64, u64),
        uuid: Uuid,
    ) -> bool {
        self.by_shard
            .get(&shard)
            .is_some_and(|key| key.sealed(kind, wallet, id, uuid))
    }
}

impl HistoryStore {
    /// Shard `shard`'s uuid key as the indexer filed it (`replay --verify` compares it with the
    /// shard's).
    pub(crate) fn uuid_key(&self, shard: u32) -> Result<Option<UuidKey>, StoreError> {
        self.with(|open| {
            let mut keys = UuidKeys::default();
            keys.load(open)?;
            Ok(keys.by_shard.get(&shard).copied())
        })
    }
}
