//! ARCHITECTURE.md invariants 1 and 2 at the engine's edge, with the log's fdatasync held back by
//! a gate in the file system under the WAL:
//!
//! - a command whose record is written but not yet synced is not answered (invariant 1);
//! - a read of the wallet it changed is not answered either, because what it would show is not
//!   durable (invariant 2);
//! - once the sync is let through, both answer, and the read shows the change.
//!
//! The shards answer with the result sealed with its WAL ticket (`actor::Durable`), and the
//! caller awaits the ticket; this test is what fails if any path hands a result out before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use engine::command::{CreateWallet, Details, MoneyMove};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, Renderer, WalFileSystem};
use engine::wallet::{OwnerType, WalletType};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;
use wal::fs::{FileSystem, StdFs, WalFile};

/// How long an answer that must not come is given to come anyway. A premature answer would be
/// ready microseconds after its record is written; this only bounds the test's running time.
const MUST_NOT_ANSWER_WITHIN: Duration = Duration::from_millis(300);

/// Holds every fdatasync of a segment file while `held`; counts the syncs waiting at it.
#[derive(Default)]
struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

#[derive(Default)]
struct GateState {
    held: bool,
    waiting: usize,
}

impl Gate {
    fn set_held(&self, held: bool) {
        self.state.lock().unwrap().held = held;
        self.changed.notify_all();
    }

    fn pass(&self) {
        let mut state = self.state.lock().unwrap();
        state.waiting += 1;
        self.changed.notify_all();
        while state.held {
            state = self.changed.wait(state).unwrap();
        }
        state.waiting -= 1;
    }

    /// Blocks until a sync is waiting at the gate.
    fn wait_for_a_held_sync(&self) {
        let mut state = self.state.lock().unwrap();
        while state.waiting == 0 {
            state = self.changed.wait(state).unwrap();
        }
    }
}

/// Opens the gate when dropped, so a failing assertion does not leave the log's writer (and the
/// engine's shutdown after it) waiting at the gate for ever.
struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.set_held(false);
    }
}

struct GatedFs(Arc<Gate>);

struct GatedFile {
    inner: Box<dyn WalFile>,
    gate: Option<Arc<Gate>>,
}

impl GatedFs {
    fn wrap(&self, path: &Path, inner: Box<dyn WalFile>) -> Box<dyn WalFile> {
        // Only segments (`N.wal`, and `N.wal.tmp` for the first one, renamed once ready): the
        // preallocator's spare and snapshots sync freely.
        let segment = path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().contains(".wal"));
        Box::new(GatedFile {
            inner,
            gate: segment.then(|| self.0.clone()),
        })
    }
}

impl WalFile for GatedFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        if let Some(gate) = &self.gate {
            gate.pass();
        }
        self.inner.sync_data()
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
}

impl FileSystem for GatedFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(self.wrap(path, StdFs.create(path)?))
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdFs.create_dir_all(path)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        StdFs.list(dir)
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(self.wrap(path, StdFs.open(path)?))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdFs.read(path)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        StdFs.remove(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        StdFs.rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        StdFs.sync_dir(dir)
    }
}

struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        format!("{route}:{result:?}").into_bytes()
    }
}

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

async fn balance(engine: Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_answered_or_shown_before_its_record_is_synced() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let mut config = EngineConfig::new(dir.path());
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.snapshot_every_records = 0;
    config.file_system = WalFileSystem(Arc::new(GatedFs(gate.clone())));
    let clock = Arc::new(SeededClock::new(5, 1_700_000_000_000));
    let engine = Engine::open(config, clock, Arc::new(DebugRenderer))
        .unwrap()
        .0;
    let created = engine
        .execute(Command::CreateWallet(CreateWallet {
            owner_type: OwnerType::Customer,
            owner_id: 1,
            currency: yer(),
            wallet_type: WalletType::Primary,
            business_id: 1,
            branch_id: 0,
            meta: None,
        }))
        .await
        .unwrap();
    let Outcome::Wallet(wallet) = created else {
        panic!("{created:?}")
    };
    let wallet_id = wallet.id;
    assert_eq!(balance(engine.clone(), wallet_id).await, Decimal::ZERO);

    gate.set_held(true);
    let _open_on_drop = OpenOnDrop(gate.clone());
    let mut deposit = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .execute(Command::Deposit(MoneyMove {
                    wallet_id,
                    amount: Decimal::from_str_exact("10.00").unwrap(),
                    currency: None,
                    details: Details::default(),
                }))
                .await
        }
    });
    // The deposit is applied in memory and its record written; its sync waits at the gate.
    let waiting = gate.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for_a_held_sync())
        .await
        .unwrap();
    let mut read = tokio::spawn(balance(engine.clone(), wallet_id));

    assert!(
        tokio::time::timeout(MUST_NOT_ANSWER_WITHIN, &mut deposit)
            .await
            .is_err(),
        "the deposit was answered before its record was synced"
    );
    assert!(
        tokio::time::timeout(MUST_NOT_ANSWER_WITHIN, &mut read)
            .await
            .is_err(),
        "a read showed the deposit before its record was synced"
    );

    gate.set_held(false);
    match deposit.await.unwrap().unwrap() {
        Outcome::Transaction(transaction) => {
            assert_eq!(
                transaction.amount,
                Decimal::from_str_exact("10.00").unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        read.await.unwrap(),
        Decimal::from_str_exact("10.00").unwrap()
    );
}
