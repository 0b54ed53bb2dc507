//! Answers kept in generations: one keyspace per stretch of decision time, dropped whole once
//! every answer in it has expired.
//!
//! ```text
//! answers_from_<start ms>   digest(caller, key) -> (caller length | caller | key, StoredAnswer)
//! ```
//!
//! A generation takes the answers decided from its start for [`Generations::length_ms`], and
//! never past the next generation's start. An answer no generation takes (decided before every
//! start, or in a gap between two) starts a new one at its time. So a generation holds one
//! stretch of decision time, whatever order the answers come in, and what it holds expires
//! together.
//!
//! **When one is dropped.** Each generation's latest decision time is kept in `meta`
//! (`answers_latest:` start), written in the same write batch as the answers that raise it, so
//! it is never behind what the generation holds. Once it is outside the retention window every
//! answer in the generation has expired, and the purge deletes its keyspace (one metadata write)
//! instead of writing a tombstone per answer. An answer decided while the clock was ahead starts
//! a generation of its own, which stays on disk until it expires; the answers of the real time
//! go on into generations of their own times and are dropped as usual.
//!
//! **Why.** The answers' keys are random (a digest of a client's key), so every flushed table
//! of them overlaps the whole level below it. Purging them one by one (the layout before this,
//! [`super::digest_layout`]) read each answer back to check it was not replaced, wrote a
//! tombstone under a random key, and left compaction to rewrite both; in an hour-long soak with
//! a 10-minute window the indexer's waits doubled the minute the first answers expired, and
//! throughput fell by a quarter (BENCHMARKS.md, "Answers in generations"). A generation is
//! also a smaller tree than one keyspace of every live answer: fewer levels to compact through.
//!
//! **Settled once sealed.** A lookup of a key no generation holds (every first attempt) asks
//! every generation, and fjall probes the filter of each level-0 table and of one table per
//! level below in each. fjall merges level 0 only once it holds eight tables, so a generation
//! that took its last answers keeps up to seven there for the rest of its life: with a 2-minute
//! window (five generations) the lookups were 11.6 % of walletd's CPU, against 5.1 % with one
//! (BENCHMARKS.md, "Sealed generations settled"). Once a generation takes no more answers and
//! its memtables are flushed, the second compactor merges its level 0 into the level below
//! ([`Generations::settle_step`]): from then on a miss costs one probe per level of it. Only a
//! generation of up to ~256 MiB of keys is settled ([`SETTLED_BELOW_MAX`]): the default
//! window's six-hour generations keep their level 0.
//!
//! **After a crash.** Where an answer goes depends only on its decision time and the
//! generations that exist, and the indexer files in log order, so refiling the log puts every
//! answer where it went before (a generation whose creation was lost is created again with the
//! same start). Correctness does not rest on it: a lookup asks every generation, and a
//! generation is dropped by what its latest time says it holds. A generation without a latest
//! time holds nothing (the time is written with its first answers), and a latest time without
//! its keyspace (a crash between the two removals of a drop) is removed at open.
//!
//! **Expired answers are not filed while recovering.** At open, an answer decided before the
//! window (by the clock of the open) would only be purged again, and a rebuild over all history
//! (`--from-archive`) would otherwise create a generation for every stretch of the past. A
//! lookup treats an expired answer as absent, so one not filed is indistinguishable from one
//! filed and purged, as a lookup at the open would see it (a clock ahead at the open skips what
//! a lookup then would also treat as expired). Once the engine serves, every answer is filed
//! ([`Generations::file_every_answer`]): what the live indexer files was decided a moment ago.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use super::super::store::StoreError;
use crate::runtime::history::writes::Writes;

/// The name of a generation's keyspace: this prefix and its start (unix ms).
pub(crate) const PREFIX: &str = "answers_from_";

/// In `meta`: this prefix and a generation's start (big-endian) -> its latest decision time.
const LATEST: &[u8] = b"answers_latest:";

fn latest_key(start_ms: i64) -> Vec<u8> {
    let mut key = LATEST.to_vec();
    key.extend_from_slice(&start_ms.to_be_bytes());
    key
}

/// Generations a retention window spans: a lookup asks about this many and one more (the one
/// filling; answers decided out of order can add small ones in between), and an answer stays on
/// disk for about the window and a quarter.
pub(crate) const PER_WINDOW: i64 = 4;

/// The generation length before [`Generations::retain`] says otherwise: a quarter of the
/// default 24-hour window.
const DEFAULT_LENGTH_MS: i64 = 6 * 60 * 60 * 1000;

/// One generation: its start, its keyspace and the latest decision time of what it holds.
pub(crate) struct Generation {
    pub(crate) start_ms: i64,
    pub(crate) keyspace: fjall::Keyspace,
    /// `i64::MIN` while it holds nothing; raised once the batch that files a later answer is
    /// committed ([`Generation::write_latest`], [`Generation::committed`]).
    latest_ms: AtomicI64,
}

impl Generation {
    /// Adds the latest decision time `at_ms` to `writes` if it is later than the one kept;
    /// answers whether it did. [`Generation::committed`] raises the one kept once the batch is
    /// committed (never before: a batch that fails must not leave memory ahead of `meta`).
    pub(crate) fn write_latest(
        &self,
        meta: &fjall::Keyspace,
        writes: &mut Writes,
        at_ms: i64,
    ) -> bool {
        let later = at_ms > self.latest_ms.load(Ordering::Relaxed);
        if later {
            writes.insert(
                meta,
                latest_key(self.start_ms),
                at_ms.to_be_bytes().to_vec(),
            );
        }
        later
    }

    /// The batch that wrote `at_ms` as the latest time ([`Generation::write_latest`]) is
    /// committed.
    pub(crate) fn committed(&self, at_ms: i64) {
        self.latest_ms.fetch_max(at_ms, Ordering::Relaxed);
    }
}

/// The generations, oldest first. Readers take the list (one reference count) and let go of
/// the lock before they read the store; the indexer, the only writer, swaps in a new list.
type List = Arc<Vec<Arc<Generation>>>;

/// The store's generations, with how long a new one runs and which answers are too old to file.
pub(crate) struct Generations {
    list: RwLock<List>,
    /// The generation the last answer was filed in (the second compactor works on it).
    filling: Mutex<Option<Arc<Generation>>>,
    length_ms: AtomicI64,
    floor_ms: AtomicI64,
}

/// The generation an answer is filed in, and the decision times that go there too: a batch
/// files a run of answers into one generation without asking again.
pub(crate) struct Target {
    pub(crate) generation: Arc<Generation>,
    from_ms: i64,
    until_ms: i64,
}

impl Target {
    pub(crate) fn holds(&self, at_ms: i64) -> bool {
        (self.from_ms..self.until_ms).contains(&at_ms)
    }
}

/// A generation's keyspace name.
pub(crate) fn name(start_ms: i64) -> String {
    format!("{PREFIX}{start_ms}")
}

/// The start of the generation named `name`; `None` for any other keyspace.
pub(crate) fn start_of(name: &str) -> Option<i64> {
    name.strip_prefix(PREFIX)?.parse().ok()
}

impl Generations {
    /// The generations `db` holds (found by name), oldest first, with their latest times from
    /// `meta` (a latest time whose keyspace is gone is removed).
    pub(crate) fn open(
        db: &fjall::Database,
        meta: &fjall::Keyspace,
        options: fn(&str) -> fjall::KeyspaceCreateOptions,
    ) -> Result<Self, StoreError> {
        let mut list = Vec::new();
        for name in db.list_keyspace_names() {
            if let Some(start_ms) = start_of(&name) {
                let keyspace = db.keyspace(&name, || options(&name))?;
                let latest_ms = match meta.get(latest_key(start_ms))? {
                    Some(bytes) => {
                        let bytes: [u8; 8] =
                            bytes.as_ref().try_into().map_err(|_| StoreError::Corrupt {
                                what: "answers' latest time",
                                key: name.to_string(),
                                reason: format!("{} bytes, not 8", bytes.len()),
                            })?;
                        i64::from_be_bytes(bytes)
                    }
                    None => i64::MIN,
                };
                list.push(Arc::new(Generation {
                    start_ms,
                    keyspace,
                    latest_ms: AtomicI64::new(latest_ms),
                }));
            }
        }
        list.sort_by_key(|generation| generation.start_ms);
        for guard in meta.prefix(LATEST) {
            let key = guard.key()?;
            let start = key
                .get(LATEST.len()..)
                .and_then(|start| <[u8; 8]>::try_from(start).ok())
                .map(i64::from_be_bytes);
            if !start.is_some_and(|start| list.iter().any(|g| g.start_ms == start)) {
                meta.remove(key)?;
            }
        }
        Ok(Generations {
            list: RwLock::new(Arc::new(list)),
            filling: Mutex::new(None),
            length_ms: AtomicI64::new(DEFAULT_LENGTH_MS),
            floor_ms: AtomicI64::new(i64::MIN),
        })
    }

    /// The list as it is now.
    fn list(&self) -> List {
        self.list
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Replaces the list with what `change` makes of it.
    fn change(&self, change: impl FnOnce(&mut Vec<Arc<Generation>>)) {
        let mut list = self
            .list
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut next = Vec::clone(&list);
        change(&mut next);
        *list = Arc::new(next);
    }

    fn filling_slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<Generation>>> {
        self.filling
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sets the retention window: new generations run a [`PER_WINDOW`]th of it, and until
    /// [`Self::file_every_answer`] answers decided before `now_ms - retention_ms` (expired by the
    /// clock of the open) are not filed.
    pub(crate) fn retain(&self, retention_ms: i64, now_ms: i64) {
        let length = (retention_ms / PER_WINDOW).max(1);
        self.length_ms.store(length, Ordering::Relaxed);
        self.floor_ms
            .store(now_ms.saturating_sub(retention_ms), Ordering::Relaxed);
    }

    /// Files every answer from now on, expired or not: what the live indexer files was decided
    /// a moment ago, and skipping one by a floor taken from a clock that ran ahead would lose
    /// an answer a lookup still honours once the clock is set back.
    pub(crate) fn file_every_answer(&self) {
        self.floor_ms.store(i64::MIN, Ordering::Relaxed);
    }

    /// How long a new generation runs.
    pub(crate) fn length_ms(&self) -> i64 {
        self.length_ms.load(Ordering::Relaxed)
    }

    /// Answers decided before this are expired and not filed.
    pub(crate) fn floor_ms(&self) -> i64 {
        self.floor_ms.load(Ordering::Relaxed)
    }

    /// Runs `look` on each generation, newest first, until it finds something.
    pub(crate) fn newest_first<T>(
        &self,
        mut look: impl FnMut(&fjall::Keyspace) -> Result<Option<T>, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        for generation in self.list().iter().rev() {
            if let Some(found) = look(&generation.keyspace)? {
                return Ok(Some(found));
            }
        }
        Ok(None)
    }

    /// The generation the last answer was filed in, if it is still kept.
    pub(crate) fn filling(&self) -> Option<fjall::Keyspace> {
        self.filling_slot().as_ref().map(|g| g.keyspace.clone())
    }

    /// How many there are.
    pub(crate) fn count(&self) -> usize {
        self.list().len()
    }

    /// Every generation's keyspace, oldest first.
    pub(crate) fn keyspaces(&self) -> Vec<fjall::Keyspace> {
        self.list().iter().map(|g| g.keyspace.clone()).collect()
    }

    /// Where an answer decided at `at_ms` is filed: the generation that holds its time, or a
    /// new one starting at it if none does (it is [`Self::length_ms`] or more past the start of
    /// the generation before it, or there is none). `None` if it is expired (before
    /// [`Self::floor_ms`]): it is not filed. Only the indexer's thread files.
    pub(crate) fn target(
        &self,
        db: &fjall::Database,
        options: fn(&str) -> fjall::KeyspaceCreateOptions,
        at_ms: i64,
    ) -> Result<Option<Target>, StoreError> {
        use fjall::AbstractTree;
        if at_ms < self.floor_ms() {
            return Ok(None);
        }
        let length = self.length_ms();
        let target = match holding(&self.list(), at_ms, length) {
            Some(target) => target,
            None => {
                // Created before the list changes: lookups never wait on the keyspace's
                // creation (fjall writes and syncs its metadata).
                let name = name(at_ms);
                let keyspace = db.keyspace(&name, || options(&name))?;
                let generation = Arc::new(Generation {
                    start_ms: at_ms,
                    keyspace,
                    latest_ms: AtomicI64::new(i64::MIN),
                });
                let mut predecessor = None;
                self.change(|list| {
                    let at = list.partition_point(|g| g.start_ms <= at_ms);
                    predecessor = at.checked_sub(1).and_then(|p| list.get(p)).cloned();
                    list.insert(at, generation.clone());
                });
                tracing::debug!(start_ms = at_ms, "a new generation of idempotency answers");
                // The generation before it now ends where it starts and takes only stragglers:
                // sealed, its memtable is flushed now instead of lingering (and counting against
                // the store's write buffer) until the generation is dropped.
                if let Some(previous) = predecessor {
                    if previous.keyspace.tree.active_memtable().size() > 0 {
                        previous.keyspace.rotate_memtable()?;
                    }
                }
                holding(&self.list(), at_ms, length).ok_or_else(|| {
                    StoreError::Rule(format!(
                        "the generation of idempotency answers created at {at_ms} does not hold it"
                    ))
                })?
            }
        };
        *self.filling_slot() = Some(target.generation.clone());
        Ok(Some(target))
    }

    /// Deletes every generation whose latest answer was decided before `cutoff_ms` (all it
    /// holds has expired). Answers how many were dropped.
    pub(crate) fn drop_expired(
        &self,
        db: &fjall::Database,
        meta: &fjall::Keyspace,
        cutoff_ms: i64,
    ) -> Result<usize, StoreError> {
        let expired: Vec<Arc<Generation>> = self
            .list()
            .iter()
            .filter(|g| g.latest_ms.load(Ordering::Relaxed) < cutoff_ms)
            .cloned()
            .collect();
        for generation in &expired {
            tracing::debug!(
                start_ms = generation.start_ms,
                "dropping an expired generation of idempotency answers"
            );
            // What its memtables hold is flushed first: fjall counts memtable bytes against
            // the write buffer until a flush frees them, and a deleted keyspace is never
            // flushed (the count would only grow, until the indexer waits on it for good).
            super::super::store::flush_and_wait(
                &[&generation.keyspace],
                "before dropping a generation of idempotency answers",
            )?;
            // A lookup that took the list before the change below may still read the keyspace:
            // fjall removes the files once the last handle is gone. The generation leaves the
            // list once deleted (a drop that fails part-way leaves the rest listed, to be
            // dropped by the next purge), and its latest time after that (a crash between the
            // two leaves a time without a keyspace, removed at open, never a keyspace without
            // its time).
            db.delete_keyspace(generation.keyspace.clone())?;
            self.change(|list| list.retain(|g| !Arc::ptr_eq(g, generation)));
            {
                let mut filling = self.filling_slot();
                if filling.as_ref().is_some_and(|g| Arc::ptr_eq(g, generation)) {
                    *filling = None;
                }
            }
            meta.remove(latest_key(generation.start_ms))?;
        }
        Ok(expired.len())
    }

    /// The latest decision time of any kept generation, when it lies after `cutoff_ms`: it
    /// keeps its generation on disk until it expires. After the clock was ahead it lies in the
    /// future (the indexer warns then).
    pub(crate) fn held_back_by(&self, cutoff_ms: i64) -> Option<i64> {
        self.list()
            .iter()
            .map(|g| g.latest_ms.load(Ordering::Relaxed))
            .max()
            .filter(|latest| *latest > cutoff_ms)
    }

    /// One step of settling the generations that take no more answers (every one but the
    /// newest and the one filling): for each whose memtables are flushed, whose level 0 holds
    /// tables and whose deeper levels hold at most [`SETTLED_BELOW_MAX`] tables, merges level 0
    /// into the level below with [`settle_strategy`] (a compaction like the keyspace's own,
    /// which runs beside fjall's and takes the tables no other compaction holds). Answers
    /// whether some level 0 shrank; `false` when none needed it or its tables were busy (a later
    /// step tries again). Runs on the second compactor's thread.
    pub(crate) fn settle_step(&self) -> Result<bool, StoreError> {
        use fjall::AbstractTree;
        let filling = self.filling_slot().clone();
        for generation in self.list().iter().rev().skip(1) {
            if filling.as_ref().is_some_and(|f| Arc::ptr_eq(f, generation)) {
                continue;
            }
            let tree = &generation.keyspace.tree;
            let level_0 = tree.level_table_count(0).unwrap_or(0);
            let below: usize = (1..usize::from(tree.tree_config().level_count))
                .filter_map(|level| tree.level_table_count(level))
                .sum();
            if level_0 == 0
                || below > SETTLED_BELOW_MAX
                || tree.active_memtable().size() > 0
                || tree.sealed_memtable_count() > 0
            {
                continue;
            }
            tree.compact(settle_strategy(), 0)
                .map_err(|error| StoreError::Rule(format!("settling a generation: {error}")))?;
            if tree.level_table_count(0).unwrap_or(0) < level_0 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The generations' starts, oldest first.
    #[cfg(test)]
    pub(crate) fn starts(&self) -> Vec<i64> {
        self.list().iter().map(|g| g.start_ms).collect()
    }
}

/// The tables a generation may hold below level 0 to be settled: up to the keyspace's own
/// level 1 (eight 32 MiB tables, `store::keyspace_options`). [`settle_strategy`] sizes level 1
/// at one table, so it may first push a level 1 that exceeds that down a level (a move when the
/// level below is empty, else a merge) before it takes level 0: bounded by this to a rewrite of
/// ~256 MiB of keys once per generation. A larger generation (the default window's are six
/// hours of answers) would be reshaped over gigabytes, and keeps its level 0 instead.
const SETTLED_BELOW_MAX: usize = 8;

/// The compaction [`Generations::settle_step`] runs: the generations' leveled strategy
/// (`store::keyspace_options`: 32 MiB tables) with a level-0 threshold of one table, so any
/// table in level 0 is merged into the level below (see [`SETTLED_BELOW_MAX`] for what it may
/// do first). A generation takes no more answers once sealed (stragglers aside), so each is
/// settled about once.
fn settle_strategy() -> Arc<fjall::compaction::Leveled> {
    Arc::new(
        fjall::compaction::Leveled::default()
            .with_l0_threshold(1)
            .with_table_target_size(crate::runtime::history::store::LEVELED_TABLE_BYTES),
    )
}

/// The generation of `list` that holds `at_ms`: the last one starting at or before it, up to
/// [`Generations::length_ms`] past its start and never past the next one's start. `None` when
/// none does (the time is before every start, or past the range of the one before it): a new
/// generation starts there.
fn holding(list: &[Arc<Generation>], at_ms: i64, length_ms: i64) -> Option<Target> {
    let index = list
        .partition_point(|g| g.start_ms <= at_ms)
        .checked_sub(1)?;
    let generation = list.get(index)?;
    let mut until_ms = generation.start_ms.saturating_add(length_ms);
    if let Some(next) = list.get(index + 1) {
        until_ms = until_ms.min(next.start_ms);
    }
    if at_ms >= until_ms {
        return None;
    }
    Some(Target {
        generation: generation.clone(),
        from_ms: generation.start_ms,
        until_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As the store's generations merge level 0 (`store::keyspace_options`): at eight tables.
    fn options(_: &str) -> fjall::KeyspaceCreateOptions {
        fjall::KeyspaceCreateOptions::default().compaction_strategy(Arc::new(
            fjall::compaction::Leveled::default().with_l0_threshold(8),
        ))
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        db: fjall::Database,
        meta: fjall::Keyspace,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let meta = db
            .keyspace("meta", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        Fixture {
            _dir: dir,
            db,
            meta,
        }
    }

    impl Fixture {
        fn open(&self) -> Generations {
            let generations = Generations::open(&self.db, &self.meta, options).unwrap();
            generations.retain(400, 0);
            generations
        }

        /// Files an answer decided at `at` as a batch would: its generation and latest time.
        fn file(&self, generations: &Generations, at: i64) -> Target {
            let target = generations.target(&self.db, options, at).unwrap().unwrap();
            assert!(target.holds(at));
            let mut writes = Writes::new(&self.db);
            target.generation.write_latest(&self.meta, &mut writes, at);
            writes.commit().unwrap();
            target.generation.committed(at);
            target
        }

        fn starts_on_disk(&self) -> Vec<i64> {
            let mut starts: Vec<i64> = self
                .db
                .list_keyspace_names()
                .iter()
                .filter_map(|name| start_of(name))
                .collect();
            starts.sort_unstable();
            starts
        }
    }

    /// An answer goes to the generation holding its time, which runs `length` from its start
    /// and never past the next one's start; an answer no generation holds starts one at its
    /// time, also between two others (decided out of order). The same are found after a reopen.
    #[test]
    fn answers_go_to_the_generation_of_their_time() {
        let f = fixture();
        let generations = f.open();
        assert_eq!(generations.length_ms(), 100, "a quarter of 400");
        f.file(&generations, 1_000);
        f.file(&generations, 1_099);
        assert_eq!(generations.starts(), vec![1_000]);
        f.file(&generations, 1_130);
        assert_eq!(generations.starts(), vec![1_000, 1_130]);
        let late = f.file(&generations, 1_120);
        assert!(
            !late.holds(1_099) && late.holds(1_129) && !late.holds(1_130),
            "a gap between two generations starts its own"
        );
        assert_eq!(generations.starts(), vec![1_000, 1_120, 1_130]);
        let early = f.file(&generations, 900);
        assert!(
            early.holds(999) && !early.holds(1_000),
            "a time before every start starts its own, up to the next"
        );
        f.file(&generations, 1_400);
        let all = vec![900, 1_000, 1_120, 1_130, 1_400];
        assert_eq!(generations.starts(), all);
        assert_eq!(f.starts_on_disk(), all);

        // Reopened, the same generations are found and chosen.
        drop(generations);
        let generations = f.open();
        assert_eq!(generations.starts(), all);
        let target = generations.target(&f.db, options, 1_200).unwrap().unwrap();
        assert!(target.holds(1_130) && target.holds(1_229) && !target.holds(1_230));
        assert_eq!(generations.starts(), all);
    }

    /// A generation that takes no more answers has its level 0 merged into the level below once
    /// its memtables are flushed (each lookup that missed probed every table of it); the one
    /// filling is left to fjall, a straggler's memtable waits for its flush, and whatever the
    /// settled generation holds is still found.
    #[test]
    fn a_sealed_generation_is_settled_out_of_level_0() {
        use fjall::AbstractTree;
        let level_0 = |g: &Generation| g.keyspace.tree.level_table_count(0).unwrap_or(0);
        let flush = |g: &Generation| {
            super::super::super::store::flush_and_wait(&[&g.keyspace], "a test").unwrap();
        };
        // Every table spans the same keys (as random answer digests do), so none can be moved
        // down a level without a merge (fjall may move the first table of an empty tree).
        let put = |g: &Generation, table: u8| {
            for i in 0..100u8 {
                g.keyspace.insert([i, table], [table; 8]).unwrap();
            }
        };
        let f = fixture();
        let generations = f.open();
        let first = f.file(&generations, 1_000).generation;
        for table in 0..2 {
            put(&first, table);
            flush(&first);
        }
        let flushed = level_0(&first);
        assert!(flushed >= 1);
        assert!(!generations.settle_step().unwrap(), "the newest is fjall's");
        assert_eq!(level_0(&first), flushed);

        let second = f.file(&generations, 1_100).generation;
        for table in 10..13 {
            put(&second, table);
            flush(&second);
        }
        let filling = level_0(&second);
        assert!(filling >= 2);
        // A straggler in the first, not flushed yet: it waits.
        put(&first, 2);
        assert!(!generations.settle_step().unwrap());
        assert_eq!(level_0(&first), flushed);
        flush(&first);
        assert_eq!(level_0(&first), flushed + 1);
        // While a straggler makes it the generation filling, it is left alone too.
        f.file(&generations, 1_050);
        assert!(
            !generations.settle_step().unwrap(),
            "the one filling is fjall's"
        );
        assert_eq!(level_0(&first), flushed + 1);
        f.file(&generations, 1_150);
        let mut steps = 0;
        while generations.settle_step().unwrap() {
            steps += 1;
            assert!(steps < 10, "settling does not end");
        }
        assert_eq!(level_0(&first), 0, "merged into the level below");
        assert!(first.keyspace.tree.table_count() > 0);
        assert_eq!(
            level_0(&second),
            filling,
            "the generation filling keeps its level 0"
        );
        for i in 0..100u8 {
            for table in 0..3u8 {
                let found = first.keyspace.get([i, table]).unwrap();
                assert_eq!(found.as_deref(), Some(&[table; 8][..]), "{i}/{table}");
            }
            let found = generations
                .newest_first(|keyspace| Ok(keyspace.get([i, 11]).unwrap()))
                .unwrap();
            assert_eq!(found.as_deref(), Some(&[11; 8][..]));
        }
    }

    /// A generation is dropped once the latest answer it holds is outside the window, also the
    /// one filling. The latest times are read back on open, and one without its keyspace is
    /// removed.
    #[test]
    fn a_generation_is_dropped_once_its_latest_answer_expired() {
        let f = fixture();
        let generations = f.open();
        for at in [1_000, 1_099, 1_100, 1_200, 1_150] {
            f.file(&generations, at);
        }
        assert_eq!(generations.starts(), vec![1_000, 1_100, 1_200]);
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 1_099).unwrap(), 0);
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 1_100).unwrap(), 1);
        assert_eq!(generations.starts(), vec![1_100, 1_200]);
        assert_eq!(
            generations.drop_expired(&f.db, &f.meta, 1_199).unwrap(),
            1,
            "1,150 was filed late into the second: its latest is 1,150"
        );
        assert_eq!(generations.held_back_by(1_199), Some(1_200));
        drop(generations);

        // A latest time left without its keyspace (a crash inside a drop) goes at open.
        f.meta.insert(latest_key(7), 5i64.to_be_bytes()).unwrap();
        let generations = f.open();
        assert_eq!(generations.starts(), vec![1_200]);
        assert_eq!(f.meta.get(latest_key(7)).unwrap(), None);
        assert_eq!(generations.held_back_by(0), Some(1_200), "read back");
        assert!(generations.filling().is_none());
        f.file(&generations, 1_250);
        assert!(generations.filling().is_some());
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 1_251).unwrap(), 1);
        assert_eq!(generations.starts(), Vec::<i64>::new());
        assert!(
            generations.filling().is_none(),
            "the dropped one is no longer filled"
        );
        assert_eq!(
            f.starts_on_disk(),
            Vec::<i64>::new(),
            "the keyspaces are deleted"
        );
    }

    /// While recovering, an answer decided before the window (by the clock of the open) is not
    /// filed; once serving, every answer is, also one decided after a purge whose clock ran
    /// ahead (a lookup honours it once the clock is set back).
    #[test]
    fn expired_answers_are_skipped_only_until_the_engine_serves() {
        let f = fixture();
        let generations = Generations::open(&f.db, &f.meta, options).unwrap();
        generations.retain(400, 2_000);
        assert!(generations.target(&f.db, options, 1_599).unwrap().is_none());
        assert!(generations.target(&f.db, options, 1_600).unwrap().is_some());
        generations.file_every_answer();
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 50_000).unwrap(), 1);
        let target = generations.target(&f.db, options, 2_100).unwrap();
        assert!(target.is_some(), "filed whatever the last cutoff was");
    }

    /// After the clock ran ahead, the generation it started keeps only its own answers: the
    /// answers of the real time go into generations of their own times, and each is dropped as
    /// its latest answer expires, while the one from the future stays until it does.
    #[test]
    fn a_generation_from_the_future_keeps_only_its_own_answers() {
        let f = fixture();
        let generations = f.open();
        f.file(&generations, 1_000);
        f.file(&generations, 50_000);
        for at in [1_050, 1_150, 1_250] {
            let target = f.file(&generations, at);
            assert!(!target.holds(50_000), "{at}");
        }
        assert_eq!(generations.starts(), vec![1_000, 1_150, 1_250, 50_000]);
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 1_200).unwrap(), 2);
        assert_eq!(generations.starts(), vec![1_250, 50_000]);
        assert_eq!(generations.held_back_by(1_300), Some(50_000));
        // Once it is the oldest, it still takes nothing before its start.
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 1_300).unwrap(), 1);
        assert_eq!(generations.starts(), vec![50_000]);
        assert!(!f.file(&generations, 1_400).holds(50_000));
        assert_eq!(generations.starts(), vec![1_400, 50_000]);
    }

    /// Dropping a generation whose memtable still holds answers flushes them first: fjall
    /// frees memtable bytes from its write buffer only when a flush writes them out.
    #[test]
    fn a_dropped_generation_leaves_nothing_in_the_write_buffer() {
        let f = fixture();
        let generations = f.open();
        let target = f.file(&generations, 1_000);
        target
            .generation
            .keyspace
            .insert([1u8; 16], vec![0u8; 4_096])
            .unwrap();
        assert!(f.db.write_buffer_size() >= 4_096);
        assert_eq!(generations.drop_expired(&f.db, &f.meta, 2_000).unwrap(), 1);
        assert!(
            f.db.write_buffer_size() < 4_096,
            "{} bytes left counted",
            f.db.write_buffer_size()
        );
    }

    /// Keyspace names round-trip, and no other keyspace is taken for a generation.
    #[test]
    fn generation_names_round_trip() {
        for start in [0, 1_700_000_000_000, -5, i64::MAX] {
            assert_eq!(start_of(&name(start)), Some(start));
        }
        for other in [
            "answers_by_digest",
            "answers_from_",
            "answers_from_x",
            "meta",
        ] {
            assert_eq!(start_of(other), None, "{other}");
        }
    }
}
