//! Opening an engine: recover, start, finish what a crash left half-done.
//!
//! 1. Load the newest valid snapshot (a corrupt newest one falls back to the previous, loudly).
//! 2. Open the log, which cuts a torn tail and refuses on corruption elsewhere, and replay every
//!    record after the snapshot in LSN order: a record for shard `s` is applied only if its LSN is
//!    above the LSN shard `s`'s image covers. Events carry every id, timestamp and hash, so replay
//!    recomputes nothing and rebuilds the same state byte for byte (invariant 6).
//! 3. Refuse a snapshot that covers more than the log holds (a log restored from an older copy).
//! 4. Start the shard actors, then finish every cross-shard transfer found reserved but not
//!    settled (credit, then finalize; release if the target refuses), recording the pending
//!    idempotency answer of each (invariant 4). A move that cannot be finished (a step the rules
//!    refuse, as in a log written before such states were prevented) is *quarantined*: logged
//!    at error with its uuid and reason, listed in [`RecoveryReport::quarantined`] and
//!    [`Engine::quarantined_moves`] (health, metrics and `walletd replay` show them), and left
//!    reserved, its money in transit, so every invariant still holds and the engine starts. The
//!    next start tries it again. Only a failed engine (log or shard) still refuses to open.
//!    Open atomic transfer batches are completed or released the same way
//!    (`runtime::atomic_batch`), and then, if nothing was quarantined, the keys of transfer
//!    batches over several records that the crash stopped before their answer are answered
//!    `batch_interrupted` ([`crate::Rejection::BatchInterrupted`]), and the key of a repeated
//!    cross-shard confirm stopped after its reserve (which found the charge finalized or
//!    released by another confirm) gets the live path's answer.
//!
//! Restart cost grows with the log written since the snapshot, not with history (invariant 7).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix::Actor;

use super::actor::ShardActor;
use super::clock::Clock;
use super::config::{EngineConfig, EngineError, Renderer};
use super::engine::{Engine, Inner, SnapshotState};
use super::history::{self, indexer::Filer, History};
use super::idempotency::IdempotencyTable;
use super::image;
use super::journal::JournalEntry;
use crate::commerce::payment::{PaymentMoveKind, PaymentReservation};
use crate::identity::directory::Directory;
use crate::ledger::transfer::TransferState;
use crate::shard::cold::Recall;
use crate::shard::command::TransferCredit;
use crate::shard::state::Shard;
use crate::values::currency::Currency;
use crate::values::error::Rejection;

impl Engine {
    /// Opens the data directory: recovers state from snapshot and log, starts the shards, and
    /// finishes any cross-shard transfer a crash interrupted (see this module's docs).
    pub fn open(
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        renderer: Arc<dyn Renderer>,
    ) -> Result<(Engine, RecoveryReport), OpenError> {
        open(config, clock, renderer, None)
    }
}

/// What opening found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// LSN covered by the snapshot loaded (the oldest of its shards), if one was.
    pub snapshot_lsn: Option<u64>,
    /// Records replayed, from the archive (see [`RecoveryReport::records_from_archive`]) and the
    /// live log.
    pub records_replayed: u64,
    /// Of those, records read from a WAL archive ([`Engine::open_from_archive`]).
    pub records_from_archive: u64,
    pub events_replayed: u64,
    /// The log's last LSN after recovery.
    pub last_lsn: u64,
    pub wallets: usize,
    /// Cross-shard transfers a crash had left reserved, now settled.
    pub transfers_completed: usize,
    /// Cross-shard payment steps (confirm or refund) a crash had left reserved, now settled.
    pub payment_moves_completed: usize,
    /// Atomic transfer batches a crash had left open, now completed (every source shard had
    /// logged its prepare) or released (`runtime::atomic_batch`).
    pub batches_completed: usize,
    pub batches_released: usize,
    /// Keys of transfer batches over several log records a crash stopped before their answer,
    /// now answered `batch_interrupted` (their items were settled like any other move).
    pub batch_keys_answered: usize,
    /// Keys of repeated cross-shard payment confirms a crash interrupted after the reserve (which
    /// found the charge already finalized or released by another confirm), now answered as the
    /// live path answers them.
    pub confirm_keys_answered: usize,
    /// A torn tail that was cut: segment, offset, reason.
    pub torn_tail: Option<String>,
    /// Cross-shard moves that could not be finished and were left reserved (see the module docs).
    pub quarantined: Vec<QuarantinedMove>,
    pub elapsed: Duration,
}

/// A cross-shard move recovery could not finish: still reserved, its money in transit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantinedMove {
    /// `transfer`, `transfer batch` (uuid: the batch's), or `payment charge` / `payment refund`
    /// for a payment's reservation.
    pub kind: &'static str,
    /// The transfer's or the payment reservation's uuid.
    pub uuid: crate::values::ids::Uuid,
    /// The payment, for a payment step.
    pub payment_uuid: Option<crate::values::ids::Uuid>,
    /// The moves it leaves reserved: 1, or a batch's transfers still reserved.
    pub moves: usize,
    /// Why finishing it failed.
    pub reason: String,
}

impl std::fmt::Display for QuarantinedMove {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.uuid)?;
        if let Some(payment) = &self.payment_uuid {
            write!(f, " (payment {payment})")?;
        }
        write!(f, ": {}", self.reason)
    }
}

/// Finishing a move failed: quarantine it, unless the engine itself failed (then memory and log
/// may disagree, and opening must fail).
fn quarantine(
    engine: &Engine,
    quarantined: &mut Vec<QuarantinedMove>,
    mut found: QuarantinedMove,
    error: EngineError,
) -> Result<(), OpenError> {
    if engine.failure().is_some() {
        return Err(OpenError::Complete(error));
    }
    found.reason = error.to_string();
    tracing::error!(
        kind = found.kind,
        uuid = %found.uuid,
        payment = ?found.payment_uuid.map(|u| u.to_string()),
        reason = %found.reason,
        "QUARANTINED a cross-shard move recovery cannot finish: it stays reserved with its money in transit; an operator must look at it (the next start tries it again)"
    );
    quarantined.push(found);
    Ok(())
}

/// An atomic transfer batch a crash left open, gathered from every shard before they start.
struct OpenBatch {
    batch: crate::values::ids::Uuid,
    /// Every source shard the batch names had it open: every prepare was durable.
    commit: bool,
    /// The shards that have it open.
    shards: Vec<u32>,
    /// Its transfers still reserved, in the batch's order per shard.
    transfers: Vec<crate::ledger::transfer::OutgoingTransfer>,
}

/// The open atomic batches of all shards (see `runtime::atomic_batch`, "Recovery").
fn open_batches(shards: &[Shard]) -> Vec<OpenBatch> {
    let mut found: std::collections::BTreeMap<
        crate::values::ids::Uuid,
        (Vec<Vec<u32>>, OpenBatch),
    > = std::collections::BTreeMap::new();
    for shard in shards {
        for (batch, prepared) in shard.prepared_batches() {
            let (declared, open) = found.entry(*batch).or_insert_with(|| {
                (
                    Vec::new(),
                    OpenBatch {
                        batch: *batch,
                        commit: false,
                        shards: Vec::new(),
                        transfers: Vec::new(),
                    },
                )
            });
            declared.push(prepared.shards.clone());
            open.shards.push(shard.shard_index());
            open.transfers.extend(
                prepared
                    .transfers
                    .iter()
                    .filter_map(|uuid| shard.outgoing_transfer(*uuid))
                    .filter(|transfer| {
                        transfer.state == crate::ledger::transfer::TransferState::Reserved
                    })
                    .cloned(),
            );
        }
    }
    found
        .into_values()
        .map(|(declared, mut open)| {
            // Every shard names the same voters, and all of them are here.
            open.commit = declared.iter().all(|shards| *shards == open.shards);
            open
        })
        .collect()
}

/// Why an engine could not open. Each says what to look at.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Wal(#[from] wal::Error),
    #[error("snapshot {path} cannot be used: {reason}")]
    Snapshot { path: String, reason: String },
    #[error("cannot start the shard actors: {0}")]
    Start(String),
    #[error("cannot finish interrupted transfers: {0}")]
    Complete(EngineError),
    #[error("history store {path} cannot be used: {reason}")]
    History { path: String, reason: String },
}

fn history_error(path: &std::path::Path, error: &history::StoreError) -> OpenError {
    OpenError::History {
        path: path.display().to_string(),
        reason: error.to_string(),
    }
}

/// The file in a data dir that records its shard count, as decimal text.
pub const SHARDS_FILE: &str = "shards";

/// Counts the report aggregates of a store that lacks them (see `history::report_days`).
fn build_reports(
    store: &history::HistoryStore,
    shards: &[Shard],
) -> Result<(), history::StoreError> {
    if store.reports_ready()? {
        return Ok(());
    }
    let started = std::time::Instant::now();
    let mut recount = history::Recount::default();
    for shard in shards {
        recount.shard(shard)?;
    }
    store.recount_filed(&mut recount)?;
    store.build_reports(recount)?;
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "report aggregates built from the records of a store written before them"
    );
    Ok(())
}

/// The shard count a data dir was created with; `None` for a new one (or one written before the
/// count was recorded).
pub fn recorded_shard_count(data_dir: &std::path::Path) -> Result<Option<u32>, OpenError> {
    let path = data_dir.join(SHARDS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse::<u32>() {
            Ok(count) if count >= 1 => Ok(Some(count)),
            _ => Err(OpenError::Config(format!(
                "{} does not hold a shard count: {:?}",
                path.display(),
                text.trim()
            ))),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(OpenError::Wal(wal::Error::Io {
            context: format!("read {}", path.display()),
            source,
        })),
    }
}

/// Writes `data_dir/shards` durably: a temporary file, fsynced, renamed, then the directory
/// fsynced (STYLE.md 22).
fn record_shard_count(data_dir: &std::path::Path, count: u32) -> Result<(), OpenError> {
    use std::io::Write;
    let io = |context: String| move |source| OpenError::Wal(wal::Error::Io { context, source });
    let path = data_dir.join(SHARDS_FILE);
    let temporary = data_dir.join(format!("{SHARDS_FILE}.tmp"));
    let mut file =
        std::fs::File::create(&temporary).map_err(io(format!("create {}", temporary.display())))?;
    file.write_all(format!("{count}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(io(format!("write {}", temporary.display())))?;
    std::fs::rename(&temporary, &path).map_err(io(format!("rename to {}", path.display())))?;
    std::fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .map_err(io(format!("sync {}", data_dir.display())))
}

pub(crate) fn open(
    config: EngineConfig,
    clock: Arc<dyn Clock>,
    renderer: Arc<dyn Renderer>,
    mut archive: Option<super::archive::ArchiveReplay>,
) -> Result<(Engine, RecoveryReport), OpenError> {
    let started = Instant::now();
    let count = config.shard_count;
    if !(1..=256).contains(&count) {
        return Err(OpenError::Config(format!(
            "shard count {count} is not within 1..=256"
        )));
    }
    // Wallets live on shard `id % count`: another count would look for every wallet on the
    // wrong shard, so a data dir keeps the count it was created with and refuses any other.
    let recorded = recorded_shard_count(&config.data_dir)?;
    if let Some(recorded) = recorded.filter(|recorded| *recorded != count) {
        return Err(OpenError::Config(format!(
            "the data directory {} was created with {recorded} shards and cannot be opened with \
             {count} (wallets are placed on shards by id); pass --shards {recorded} or leave it out",
            config.data_dir.display()
        )));
    }
    let dir = config.wal_dir();
    std::fs::create_dir_all(&dir).map_err(|e| {
        OpenError::Wal(wal::Error::Io {
            context: format!("create {}", dir.display()),
            source: e,
        })
    })?;

    // 1. The snapshot and the history store, 2. replay (in one pass with the log's own recovery
    // scan): records after the snapshot rebuild the shards, records after the store's last
    // checkpoint are filed into the store.
    // From an archive, replay starts at LSN 1 whatever snapshot there is.
    let store_path = config.data_dir.join(history::STORE_DIR);
    let store = match history::HistoryStore::open(&store_path, config.history.cache_bytes) {
        Ok(store) => Arc::new(store),
        // Another process has the data directory open (the WAL's lock would say the same).
        Err(history::StoreError::Engine(fjall::Error::Locked)) => {
            return Err(OpenError::Wal(wal::Error::Locked {
                lock: store_path.join("lock"),
                dir: store_path,
            }))
        }
        Err(error) => return Err(history_error(&store_path, &error)),
    };
    // Answers older than the retention window are not filed (a rebuild from the archive would
    // otherwise make a generation of them for every stretch of the past), and new generations
    // run a quarter of the window.
    store
        .retain_answers(config.idempotency_retention_ms(), clock.now_ms())
        .map_err(|e| history_error(&store_path, &e))?;
    // A store written before payments, payouts, settlements, links and QR payloads were filed
    // lacks those it covers: replay then keeps every one in memory, and they are filed from
    // there once replay is done (below).
    let commerce_filed = store
        .commerce_complete()
        .and_then(|complete| Ok(complete || store.indexed_lsn()? == 0))
        .map_err(|e| history_error(&store_path, &e))?;
    let mut state = match archive {
        Some(_) => Replayed::empty(count)?,
        None => Replayed::load_keeping(&dir, count, commerce_filed)?,
    };
    let mut filer = Filer::new(store.clone(), config.history.checkpoint_every)
        .map_err(|e| history_error(&store_path, &e))?;
    // Answers an older snapshot carried (format 3 and before) are older than any the log after
    // it holds, so they go in first; one the store holds decided later is kept.
    store
        .file_answers(&state.snapshot_answers)
        .map_err(|e| history_error(&store_path, &e))?;
    // A store written before moves were filed lacks the finished moves an older snapshot
    // carried (format 4 and before: every one); the shards dropped them at load.
    let files_moves = store
        .moves_since()
        .map_err(|e| history_error(&store_path, &e))?
        == Some(0)
        && filer.indexed_lsn > 0;
    if !files_moves {
        store
            .file_snapshot_moves(&state.snapshot_moves)
            .map_err(|e| history_error(&store_path, &e))?;
    }
    state.snapshot_moves = Vec::new();
    let store_covers = filer.indexed_lsn;
    if archive.is_some() && store_covers != 0 {
        return Err(OpenError::History {
            path: store_path.display().to_string(),
            reason: format!(
                "it already covers the log up to LSN {store_covers}; rebuilding from the archive \
                 needs an empty store: move it aside first"
            ),
        });
    }
    let mut replay_from = state.replay_from().min(store_covers + 1);
    let (tap, durable_records) = wal::tap::channel(config.history.queue_bytes_max);
    let mut wal_options = config.wal.clone();
    wal_options.durable_tap = Some(tap);
    let mut filing_error = None;
    let mut progress = archive.as_mut().and_then(|a| a.progress.take());
    let mut visit = |record: wal::RecordRef<'_>| {
        if let Err(error) = filer.add(record.lsn, record.payload) {
            filing_error.get_or_insert(error);
        }
        if let Some(progress) = progress.as_mut() {
            progress(record.lsn);
        }
        state.apply(record)
    };
    let mut records_from_archive = 0;
    if let Some(archive) = &archive {
        let scan = wal::archive::replay_archived(
            config.file_system.0.as_ref(),
            &archive.dir,
            &dir,
            config.wal.record_bytes_max,
            &mut visit,
        )?;
        replay_from = scan.next_lsn;
        records_from_archive = scan.records;
    }
    let opened = wal::Wal::open_with(
        config.file_system.0.clone(),
        &dir,
        wal_options,
        replay_from,
        &mut visit,
    );
    let (wal, recovered) = match opened {
        Ok(opened) => opened,
        Err(wal::Error::Unavailable {
            requested,
            first_available,
        }) if requested == store_covers + 1 => {
            return Err(OpenError::History {
                path: store_path.display().to_string(),
                reason: format!(
                    "it covers the log up to LSN {store_covers} but the log now starts at LSN \
                     {first_available}: the records in between are gone. Rebuild the store from \
                     an archive of the whole log (walletd replay --from-archive DIR)"
                ),
            });
        }
        Err(error) => return Err(error.into()),
    };
    if let Some(error) = filing_error {
        return Err(history_error(&store_path, &error));
    }
    filer
        .flush(true)
        .map_err(|e| history_error(&store_path, &e))?;
    if filer.indexed_lsn < recovered.last_lsn {
        return Err(OpenError::History {
            path: store_path.display().to_string(),
            reason: format!(
                "it covers the log up to LSN {} after replay but the log ends at LSN {}",
                filer.indexed_lsn, recovered.last_lsn
            ),
        });
    }
    if filer.indexed_lsn > recovered.last_lsn {
        return Err(OpenError::History {
            path: store_path.display().to_string(),
            reason: format!(
                "it holds history up to LSN {} but the log ends at LSN {}: the log is older \
                 than the store (restored from an older copy?)",
                filer.indexed_lsn, recovered.last_lsn
            ),
        });
    }
    // Every commerce record the shards hold is their latest version; filed as it is, it
    // completes a store written before they were (once: the store is then marked complete).
    // From here on final ones leave memory once filed.
    if !store
        .commerce_complete()
        .map_err(|e| history_error(&store_path, &e))?
    {
        store
            .file_commerce(state.shards.iter().map(|shard| &shard.commerce))
            .map_err(|e| history_error(&store_path, &e))?;
        tracing::info!(
            "filed the commerce records (payments, payouts, settlements, payment links, QR \
             payloads) of a store written before they were"
        );
    }
    for shard in &mut state.shards {
        shard.finals_leave = true;
    }
    // The answers of the records replay saw that a store written before answers were filed
    // lacks went in with the flush above, and those an older snapshot carried before replay:
    // from here on every answer of the retention window is in the store, durably, and memory
    // holds hot keys only.
    // Likewise the moves (a store written before moves were filed).
    filer
        .answers_complete()
        .and_then(|()| filer.moves_complete())
        .and_then(|()| store.persist())
        .map_err(|e| history_error(&store_path, &e))?;
    // A store written before the report aggregates existed gets them counted now, from the
    // records at the end of the log: the shards' wallets (in memory), the transactions,
    // payments, payouts and settlements the store filed (the shards' own version of a payment,
    // payout or settlement standing for its filed one). Until then filing left the aggregates
    // alone and reports are refused. The commerce records are filed above, so a crash anywhere
    // in this upgrade leaves a store the next open upgrades the same way.
    build_reports(&store, &state.shards).map_err(|e| history_error(&store_path, &e))?;
    // From here on the indexer files what was just decided: every answer, whatever the floor
    // recovery used (a clock set back after running ahead must not lose one).
    store
        .file_every_answer()
        .map_err(|e| history_error(&store_path, &e))?;
    let table = Arc::new(std::mem::take(&mut state.table));
    filer.serve_answers(history::indexer::Answers {
        table: table.clone(),
        clock: clock.clone(),
        retention_ms: config.idempotency_retention_ms(),
    });
    wal.set_retention_floor(filer.checkpoint_lsn);
    let (progress_tx, progress_rx) = tokio::sync::watch::channel(history::Progress {
        indexed_lsn: filer.indexed_lsn,
        checkpoint_lsn: filer.checkpoint_lsn,
        failed: None,
    });
    let indexer_wal = wal.clone();
    let filing = Arc::new(history::FilingGate::default());
    let indexer_filing = filing.clone();
    let indexer = std::thread::Builder::new()
        .name("history-indexer".into())
        .spawn(move || {
            history::indexer::run(
                filer,
                durable_records,
                progress_tx,
                indexer_wal,
                indexer_filing,
            )
        })
        .map_err(|e| OpenError::Start(format!("spawn the history indexer: {e}")))?;
    let history_handle = History::new(store.clone(), progress_rx, filing);
    // Recorded only once the log is open, so under its lock: no other process is using the dir.
    if recorded.is_none() {
        record_shard_count(&config.data_dir, count)?;
    }

    let Replayed {
        shards,
        covered,
        directory,
        events_replayed,
        snapshot,
        ..
    } = state;
    let snapshot_lsn = snapshot
        .as_ref()
        .map(|_| covered.iter().copied().min().unwrap_or(0));

    // 3. The log must reach at least as far as the snapshot.
    let newest_covered = covered.iter().copied().max().unwrap_or(0);
    if recovered.last_lsn < newest_covered {
        return Err(OpenError::Snapshot {
            path: snapshot.map(|path| path.display().to_string()).unwrap_or_default(),
            reason: format!(
                "it covers LSN {newest_covered} but the log ends at LSN {}: the log is older than the snapshot",
                recovered.last_lsn
            ),
        });
    }

    // 4. Start, then finish interrupted transfers.
    let pending: Vec<_> = shards
        .iter()
        .flat_map(Shard::pending_outgoing_transfers)
        .collect();
    let pending_payments: Vec<_> = shards
        .iter()
        .flat_map(Shard::pending_payment_reservations)
        .collect();
    let open_batches = open_batches(&shards);
    let wallets = shards.iter().map(Shard::wallet_count).sum();
    let primary =
        Currency::from_code(PRIMARY_CURRENCY).map_err(|e| OpenError::Config(e.to_string()))?;
    let without_wallet: Vec<u64> = directory
        .customers()
        .map(|c| c.id)
        .filter(|&id| {
            shards
                .get(crate::values::ids::owner_shard(id, count) as usize)
                .is_none_or(|shard| {
                    shard
                        .wallet_of_owner(
                            crate::ledger::wallet::OwnerType::Customer,
                            id,
                            primary,
                            crate::ledger::wallet::WalletType::Primary,
                        )
                        .is_none()
                })
        })
        .collect();
    let engine = start(
        config,
        shards,
        directory,
        wal,
        clock,
        table.clone(),
        renderer,
        (history_handle, store, indexer),
    )?;
    let mut quarantined = Vec::new();
    let (mut batches_completed, mut batches_released) = (0, 0);
    for open in &open_batches {
        match block_on(engine.settle_batch(open.batch, &open.shards, &open.transfers, open.commit))
        {
            Ok(()) if open.commit => {
                batches_completed += 1;
                tracing::info!(batch = %open.batch, transfers = open.transfers.len(), "completed an atomic transfer batch a crash had left open (every source shard had prepared it)");
            }
            Ok(()) => {
                batches_released += 1;
                tracing::info!(batch = %open.batch, transfers = open.transfers.len(), "released an atomic transfer batch a crash had left open (not every source shard had prepared it)");
            }
            Err(error) => {
                let found = QuarantinedMove {
                    kind: "transfer batch",
                    uuid: open.batch,
                    payment_uuid: None,
                    moves: open.transfers.len(),
                    reason: String::new(),
                };
                quarantine(&engine, &mut quarantined, found, error)?;
            }
        }
    }
    for transfer in &pending {
        let record = table.pending_for_transfer(transfer.uuid);
        let credit = TransferCredit::for_transfer(transfer);
        let finished = block_on(engine.complete_transfer(
            transfer.uuid,
            transfer.target_wallet_id,
            credit,
            record,
        ));
        match finished {
            Ok(_) => {
                tracing::info!(transfer = %transfer.uuid, "finished a cross-shard transfer interrupted by a crash");
            }
            Err(error) => {
                let found = QuarantinedMove {
                    kind: "transfer",
                    uuid: transfer.uuid,
                    payment_uuid: None,
                    moves: 1,
                    reason: String::new(),
                };
                quarantine(&engine, &mut quarantined, found, error)?;
            }
        }
    }
    for reservation in pending_payments.iter().cloned() {
        let uuid = reservation.uuid;
        let payment = reservation.payment_uuid;
        let kind = match reservation.kind {
            crate::commerce::payment::PaymentMoveKind::Charge => "payment charge",
            crate::commerce::payment::PaymentMoveKind::Refund => "payment refund",
        };
        let record = table.pending_for_transfer(uuid);
        match block_on(engine.complete_payment_move(reservation, record)) {
            Ok(_) => {
                tracing::info!(reservation = %uuid, payment = %payment, "finished a cross-shard payment step interrupted by a crash");
            }
            Err(error) => {
                let found = QuarantinedMove {
                    kind,
                    uuid,
                    payment_uuid: Some(payment),
                    moves: 1,
                    reason: String::new(),
                };
                quarantine(&engine, &mut quarantined, found, error)?;
            }
        }
    }
    let (batch_keys_answered, confirm_keys_answered) =
        answer_keys_left_pending(&engine, &table, &quarantined);
    let transfers_quarantined = quarantined.iter().filter(|m| m.kind == "transfer").count();
    let payments_quarantined = quarantined
        .iter()
        .filter(|m| m.payment_uuid.is_some())
        .count();
    engine
        .inner
        .quarantined
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone_from(&quarantined);
    // A crash between registering a customer and opening their wallet leaves the customer
    // without one: open it now (a no-op for everyone else).
    for customer_id in without_wallet {
        tracing::warn!(
            customer_id,
            "opening the primary wallet a crash kept from being opened at registration"
        );
        block_on(engine.open_primary_wallet(customer_id, primary)).map_err(OpenError::Complete)?;
    }

    let report = RecoveryReport {
        snapshot_lsn,
        records_replayed: records_from_archive + recovered.records_replayed,
        records_from_archive,
        events_replayed,
        last_lsn: engine.inner.wal.last_lsn(),
        wallets,
        transfers_completed: pending.len() - transfers_quarantined,
        payment_moves_completed: pending_payments.len() - payments_quarantined,
        batches_completed,
        batches_released,
        batch_keys_answered,
        confirm_keys_answered,
        torn_tail: recovered.torn_tail.map(|(path, offset, reason)| {
            format!("{} at offset {offset}: {reason}", path.display())
        }),
        quarantined,
        elapsed: started.elapsed(),
    };
    Ok((engine, report))
}

/// Starts the actor system on its own thread: one Arbiter per shard, one for orchestration.
/// State rebuilt from the newest snapshot and the log after it. Recovery uses it while it opens
/// the log; a background snapshot uses it to replay the durable log up to an LSN beside the live
/// shards (so taking a snapshot never pauses them).
pub(crate) struct Replayed {
    pub shards: Vec<Shard>,
    /// Per shard, the LSN its state covers.
    pub covered: Vec<u64>,
    pub directory: Directory,
    /// Hot keys only: the pending keys of unfinished moves ([`IdempotencyTable::record_hot`]).
    pub table: IdempotencyTable,
    /// Answers a snapshot written before answers went to the store carried (LSN 0: unknown).
    pub snapshot_answers: Vec<(u64, super::journal::IdempotencyRecord)>,
    /// The cross-shard moves the snapshot carried, before the shards dropped the finished ones:
    /// filed into a store written before moves were (see `history::moves`).
    pub snapshot_moves: Vec<crate::shard::moves::MoveRecord>,
    pub events_replayed: u64,
    /// The snapshot it started from.
    pub snapshot: Option<std::path::PathBuf>,
}

impl Replayed {
    /// Empty shards, before LSN 1.
    pub fn empty(count: u32) -> Result<Self, OpenError> {
        let mut shards = Vec::with_capacity(count as usize);
        for index in 0..count {
            let mut shard = Shard::new(index, count)
                .ok_or_else(|| OpenError::Config("bad shard index".into()))?;
            shard.set_recall(Recall::Replay);
            shards.push(shard);
        }
        Ok(Replayed {
            shards,
            covered: vec![0; count as usize],
            directory: Directory::new(),
            table: IdempotencyTable::new(),
            snapshot_answers: Vec::new(),
            snapshot_moves: Vec::new(),
            events_replayed: 0,
            snapshot: None,
        })
    }

    /// Loads the newest valid snapshot of `dir`, or empty shards when there is none.
    pub fn load(dir: &std::path::Path, count: u32) -> Result<Self, OpenError> {
        Self::load_keeping(dir, count, true)
    }

    /// As [`Replayed::load`]; `commerce_filed` false keeps every commerce record (payment,
    /// payout, settlement, link, QR payload) in memory (the store does not hold them yet).
    pub fn load_keeping(
        dir: &std::path::Path,
        count: u32,
        commerce_filed: bool,
    ) -> Result<Self, OpenError> {
        let snapshot = wal::snapshot::load_newest(&wal::fs::StdFs, dir)?;
        let table = IdempotencyTable::new();
        let Some(found) = snapshot else {
            let mut empty = Self::empty(count)?;
            for shard in &mut empty.shards {
                shard.finals_leave = commerce_filed;
            }
            return Ok(empty);
        };
        let path = found.path.display().to_string();
        let decoded = image::decode(&found.payload).map_err(|e| OpenError::Snapshot {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if decoded.shards.len() != count as usize {
            return Err(OpenError::Snapshot {
                path,
                reason: format!(
                    "it holds {} shards but the configured shard count is {count}; the shard count of a data directory cannot change",
                    decoded.shards.len()
                ),
            });
        }
        let mut snapshot_answers = Vec::new();
        for record in decoded.idempotency {
            if record.response.is_some() {
                snapshot_answers.push((0, record));
            } else {
                table.record(&record, 0);
            }
        }
        let mut snapshot_moves = Vec::new();
        let (shards, covered) = decoded
            .shards
            .into_iter()
            .map(|(lsn, mut shard)| {
                snapshot_moves.extend(shard.move_records());
                // Replay keeps hot state only: what the snapshot holds of history is filed.
                shard.set_recall(Recall::Replay);
                shard.finals_leave = commerce_filed;
                shard.evict_all();
                (shard, lsn)
            })
            .unzip();
        Ok(Replayed {
            shards,
            covered,
            directory: decoded.directory,
            table,
            snapshot_answers,
            snapshot_moves,
            events_replayed: 0,
            snapshot: Some(found.path),
        })
    }

    /// The first LSN replay needs.
    pub fn replay_from(&self) -> u64 {
        self.covered.iter().copied().min().unwrap_or(0) + 1
    }

    /// Applies one journal record to the shard it names, if that shard's state does not cover
    /// it yet. Deterministic: every value comes from the record.
    pub fn apply(&mut self, record: wal::RecordRef<'_>) -> wal::Result<()> {
        let refuse = |reason: String| wal::Error::Replay {
            lsn: record.lsn,
            reason,
        };
        let entry = JournalEntry::decode(record.payload)
            .map_err(|e| refuse(format!("undecodable entry: {e}")))?;
        let index = entry.shard as usize;
        let count = self.shards.len();
        let (Some(shard), Some(&covered_lsn)) =
            (self.shards.get_mut(index), self.covered.get(index))
        else {
            return Err(refuse(format!(
                "entry for shard {} but there are {count} shards",
                entry.shard
            )));
        };
        if record.lsn <= covered_lsn {
            return Ok(());
        }
        shard
            .apply_all(&entry.events)
            .map_err(|e| refuse(format!("shard {index}: {e}")))?;
        // Replay keeps no history: what this record closed (holds) leaves memory now.
        shard.evict_filed(u64::MAX);
        if !entry.directory.is_empty() && index != 0 {
            return Err(refuse(format!(
                "directory events on shard {index}; only shard 0 hosts the directory"
            )));
        }
        for event in &entry.directory {
            self.directory
                .apply(event)
                .map_err(|e| refuse(format!("directory: {e}")))?;
        }
        self.events_replayed += (entry.events.len() + entry.directory.len()) as u64;
        for key in &entry.idempotency {
            self.table.record_hot(key, record.lsn);
        }
        Ok(())
    }
}

/// Currency of the primary wallet every customer gets at registration (decisions.md §2).
pub const PRIMARY_CURRENCY: &str = "YER";

#[allow(clippy::too_many_arguments)]
fn start(
    config: EngineConfig,
    shards: Vec<Shard>,
    directory: Directory,
    wal: wal::Wal,
    clock: Arc<dyn Clock>,
    table: Arc<IdempotencyTable>,
    renderer: Arc<dyn Renderer>,
    (history, store, indexer): (
        History,
        Arc<history::HistoryStore>,
        std::thread::JoinHandle<()>,
    ),
) -> Result<Engine, OpenError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let actor_wal = wal.clone();
    let actor_clock = clock.clone();
    let actor_table = table.clone();
    let failure = Arc::new(std::sync::OnceLock::new());
    let actor_failure = Arc::clone(&failure);
    // A second compactor beside fjall's worker; its failure stops the engine like a shard's.
    let compactor_store = Arc::downgrade(&store);
    let compactor_failure = Arc::clone(&failure);
    std::thread::Builder::new()
        .name("history-compactor".into())
        .spawn(move || history::store::run_compactor(compactor_store, compactor_failure))
        .map_err(|e| OpenError::Start(format!("spawn the history compactor: {e}")))?;
    let capacity = config.mailbox_capacity;
    let hold_tick = config.hold_tick;
    let commands_logged = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let coalesce = super::actor::Coalesce {
        commands_max: config.coalesce_max,
        record_bytes_max: config.wal.record_bytes_max as usize,
        commands_logged: Arc::clone(&commands_logged),
    };
    let actor_history = history.clone();
    // Nothing is appended before the actors run: every history read waits for what recovery
    // replayed, which the indexer may still be filing.
    let history_bounds = Arc::new(history::HistoryBounds::new(wal.last_lsn()));
    let actor_bounds = Arc::clone(&history_bounds);
    let actor_store: Arc<dyn crate::shard::cold::ColdHistory> = store.clone();
    let handle = std::thread::Builder::new()
        .name("engine".into())
        .spawn(move || {
            let system = actix::System::new();
            let mut arbiters = Vec::new();
            let mut addrs = Vec::new();
            let mut directory = Some(directory);
            for mut shard in shards {
                // Records now leave memory once filed, and are read back from the store.
                shard.set_recall(Recall::Store(actor_store.clone()));
                shard.evict_all();
                let arbiter = actix::Arbiter::new();
                let hosted = if shard.shard_index() == 0 {
                    directory.take()
                } else {
                    None
                };
                let actor = ShardActor::new(
                    shard,
                    hosted,
                    actor_wal.clone(),
                    actor_clock.clone(),
                    actor_table.clone(),
                    renderer.clone(),
                    hold_tick,
                    Arc::clone(&actor_failure),
                    Some(actor_history.clone()),
                    Arc::clone(&actor_bounds),
                    coalesce.clone(),
                );
                addrs.push(ShardActor::start_in_arbiter(
                    &arbiter.handle(),
                    move |ctx| {
                        ctx.set_mailbox_capacity(capacity);
                        actor
                    },
                ));
                arbiters.push(arbiter);
            }
            let handles: Vec<actix::ArbiterHandle> =
                arbiters.iter().map(actix::Arbiter::handle).collect();
            drop(actor_wal);
            if tx.send((addrs, handles, actix::System::current())).is_err() {
                return;
            }
            if let Err(error) = system.run() {
                tracing::error!(%error, "the engine's actor system stopped with an error");
            }
            for arbiter in arbiters {
                arbiter.stop();
                let _ = arbiter.join();
            }
        })
        .map_err(|e| OpenError::Start(e.to_string()))?;
    let (shards, arbiters, system) = rx.recv().map_err(|e| OpenError::Start(e.to_string()))?;
    let last_lsn = wal.last_lsn();
    let in_flight = shards
        .iter()
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    Ok(Engine {
        inner: Arc::new(Inner {
            shards,
            in_flight,
            arbiters,
            wal,
            clock,
            idempotency: table,
            config,
            system,
            failure,
            actors: Mutex::new(Some(handle)),
            history,
            store,
            inline_lookup: std::sync::atomic::AtomicBool::new(false),
            pool_lookup: Arc::new(tokio::sync::Semaphore::new(1)),
            indexer: Mutex::new(Some(indexer)),
            wallet_scopes: super::Forgetful::new(super::engine::WALLET_SCOPES_MAX),
            history_bounds,
            quarantined: Mutex::new(Vec::new()),
            commands_logged,
            snapshot_state: Mutex::new(SnapshotState {
                last_lsn,
                commands_at_last: 0,
                commands_at_claim: 0,
                running: false,
                failures: 0,
                retry_at_ms: i64::MIN,
                stats: crate::runtime::snapshot::SnapshotStats::default(),
            }),
            snapshot_finished: tokio::sync::Notify::new(),
        }),
    })
}

/// Drives a future to completion on this thread (used before any runtime serves requests).
pub(crate) fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// The keys still pending once recovery has settled every move and batch it could, answered as
/// the live run would have answered them; answers (batch keys, confirm keys) answered.
///
/// - **No move named:** a keyed transfer batch over several records that the crash stopped
///   before its answer (its items were settled above, as single cross-shard transfers or as the
///   atomic batch, or never ran) is answered `batch_interrupted`, so a retry is told instead of
///   waiting on 409 for good. Not while anything is quarantined: the key does not say which
///   batch it is, so it might be a quarantined one's, whose items are still in flight; those
///   keys stay pending (409 `request_in_progress`, true then) until a start that quarantines
///   nothing.
/// - **A settled charge named:** a second confirm of a cross-shard payment reserves too (the
///   reserve is idempotent by payment and answers the reservation it finds), which logs its key
///   pending naming that reservation. If an earlier confirm had finalized it, a no-op finalize
///   answers the key (`Engine::confirm_across`): `invalid_state`. If another's credit was
///   refused and it was released, the second confirm completes it as the first did (credit
///   refused again, no-op release). A crash in between left the key pending for good, since
///   recovery settles only reservations still reserved.
/// - Anything else (a quarantined move's key, a move not found) stays pending, with a warning.
fn answer_keys_left_pending(
    engine: &Engine,
    table: &IdempotencyTable,
    quarantined: &[QuarantinedMove],
) -> (usize, usize) {
    let (mut batch_keys, mut confirm_keys) = (0, 0);
    for record in table.pending_records() {
        let (caller, key) = (record.caller.clone(), record.key.clone());
        let answered = match record.transfer_uuid {
            None if !quarantined.is_empty() => {
                tracing::warn!(caller, key, "the key of an interrupted transfer batch stays pending while moves are quarantined");
                continue;
            }
            None => block_on(answer_pending(
                engine,
                0,
                record,
                Rejection::BatchInterrupted,
            ))
            .map(|()| &mut batch_keys),
            Some(uuid) if quarantined.iter().any(|moved| moved.uuid == uuid) => continue,
            Some(uuid) => match settled_charge(engine, uuid) {
                Some((shard, reservation)) if reservation.state == TransferState::Finalized => {
                    let refusal = Rejection::InvalidState("payment is not pending");
                    block_on(answer_pending(engine, shard, record, refusal))
                        .map(|()| &mut confirm_keys)
                }
                Some((_, reservation)) => {
                    block_on(engine.complete_payment_move(reservation, Some(record)))
                        .map(|_| &mut confirm_keys)
                }
                None => {
                    tracing::warn!(caller, key, move_uuid = %uuid, "an idempotency key names a move recovery did not settle and that is no settled payment charge: it stays pending");
                    continue;
                }
            },
        };
        match answered {
            Ok(count) => {
                *count += 1;
                tracing::warn!(
                    caller,
                    key,
                    "answered the key of a request a crash interrupted, as the run would have"
                );
            }
            Err(error) => {
                tracing::error!(caller, key, %error, "could not answer the key of an interrupted request: it stays pending");
            }
        }
    }
    (batch_keys, confirm_keys)
}

/// The payment charge reservation `uuid`, finalized or released, and its shard (asked of every
/// shard: memory or the store); `None` for anything else.
fn settled_charge(engine: &Engine, uuid: crate::Uuid) -> Option<(u32, PaymentReservation)> {
    for shard in 0..engine.shard_count() {
        let read = block_on(engine.peek_shard(shard, move |s| {
            s.reservation_record(uuid)
                .map(|found| found.map(std::borrow::Cow::into_owned))
        }));
        match read {
            Ok(Ok(Some(reservation))) => {
                let settled = reservation.kind == PaymentMoveKind::Charge
                    && reservation.state != TransferState::Reserved;
                return settled.then_some((shard, reservation));
            }
            Ok(Ok(None)) => {}
            Ok(Err(error)) => {
                tracing::error!(move_uuid = %uuid, shard, %error, "could not read a payment reservation a pending key names");
            }
            Err(error) => {
                tracing::error!(move_uuid = %uuid, shard, %error, "could not ask a shard for a payment reservation a pending key names");
            }
        }
    }
    None
}

/// Logs `rejection` as the final answer under a pending key, on `shard` (any shard may log an
/// answer: replay keeps the last record of a key, whichever shard logged it).
async fn answer_pending(
    engine: &Engine,
    shard: u32,
    record: super::journal::IdempotencyRecord,
    rejection: Rejection,
) -> Result<(), EngineError> {
    use super::actor::{Answer, Claim, LogAnswer};
    let claim = Claim {
        record,
        answer: Answer::Rejected(rejection),
    };
    engine
        .addr(shard)?
        .send(LogAnswer(claim))
        .await
        .map_err(super::config::unavailable)??
        .wait()
        .await?;
    Ok(())
}
