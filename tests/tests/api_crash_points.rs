//! Issue 14, item 8, at exact points: a real `walletd` SIGKILLs itself (the test-only hook
//! `WALLETD_FAULT_INJECTION=sigkill-before:OP:N:NAME`, `api/src/fault.rs`) just before one step
//! of writing a snapshot or of removing or archiving a retired WAL segment, while deposits and
//! transfers are acknowledged one at a time. A kill from outside lands on such a step only by
//! chance (`api_crash.rs`, `api_wal_archive.rs`); here every step named below is hit.
//!
//! For each point the test checks that the process died of SIGKILL with the step's files as the
//! step left them, then restarts without the hook and checks:
//!
//! - every acknowledged operation is there and the one in flight at the kill landed whole or not
//!   at all (every balance equals the acknowledged one, or every balance equals it plus the
//!   in-flight operation's effect);
//! - every wallet's ledger verifies (`verify-integrity`);
//! - a graceful stop exits 0 and finishes what the kill interrupted (no snapshot temp file left;
//!   an archived segment that was still in the log is gone from it);
//! - `walletd replay --verify` passes, and with an archive `walletd replay --from-archive DIR
//!   --verify` rebuilds the same state from LSN 1.
//!
//! The server runs with 64 KiB segments and a snapshot every 40 records, so snapshots are
//! written and segments retired within a few hundred operations.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use walletd_tests::server::{dec, Options, Server, TempDir, PLATFORM_BUSINESS_ID};

const WALLETS: usize = 4;
/// How long the load may run before the step must have been reached.
const LOAD_DEADLINE: Duration = Duration::from_secs(180);
const FAULT_ENV: &str = "WALLETD_FAULT_INJECTION";

/// Files in `dir` whose names end with `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|entry| entry.expect("a directory entry").path())
                .filter(|path| path.to_string_lossy().ends_with(suffix))
                .collect()
        })
        .unwrap_or_default();
    found.sort();
    found
}

/// What one operation does to the balances: (wallet index, change).
type Effect = Vec<(usize, Decimal)>;

/// The run up to the kill: balances every acknowledged operation gives, and the effect of the
/// operation that was in flight when the process died (it may or may not have landed).
struct Killed {
    server: Server,
    archive: Option<TempDir>,
    customers: Vec<walletd_tests::server::Customer>,
    acknowledged: [Decimal; WALLETS],
    in_flight: Effect,
}

/// Starts a server armed to SIGKILL itself before `step`, drives deposits and transfers one at a
/// time until it dies, and checks that it died of SIGKILL.
fn run_until_killed(step: &str, archive: bool) -> Killed {
    let archive = archive.then(|| TempDir::new("wal-archive"));
    let mut env = vec![
        (FAULT_ENV, format!("sigkill-before:{step}")),
        ("WALLETD_WAL_SEGMENT_BYTES", "65536".to_owned()),
        ("WALLETD_SNAPSHOT_EVERY", "40".to_owned()),
    ];
    if let Some(archive) = &archive {
        env.push(("WALLETD_WAL_ARCHIVE", archive.path().display().to_string()));
    }
    let mut server = Server::start_with(Options {
        env,
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customers: Vec<_> = (0..WALLETS).map(|_| server.register_customer()).collect();
    let mut acknowledged = [Decimal::ZERO; WALLETS];
    let started = Instant::now();
    let mut round = 0usize;
    let in_flight = loop {
        assert!(
            started.elapsed() < LOAD_DEADLINE,
            "{step}: not reached after {round} rounds; stderr:\n{}",
            server.stderr_text()
        );
        // A deposit into a wallet, then a transfer out of that same wallet: never short of funds.
        let (a, b) = ((round / 2) % WALLETS, (round / 2 + 1) % WALLETS);
        let (path, body, effect) = if round.is_multiple_of(2) {
            (
                format!("/v1/wallets/{}/deposit", customers[a].wallet_id),
                r#"{"amount": 10.25}"#.to_owned(),
                vec![(a, dec("10.25"))],
            )
        } else {
            (
                "/v1/transfers".to_owned(),
                format!(
                    r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": 3.10, "currency_code": "YER"}}"#,
                    customers[a].wallet_id, customers[b].wallet_id
                ),
                vec![(a, -dec("3.10")), (b, dec("3.10"))],
            )
        };
        match server.try_request(
            "POST",
            &path,
            Some(&operator.token),
            &[],
            Some(body.as_bytes()),
        ) {
            Ok(answer) if (200..300).contains(&answer.status) => {
                for (wallet, change) in effect {
                    acknowledged[wallet] += change;
                }
            }
            Ok(answer) => panic!(
                "{step}: {path} answered {}: {}",
                answer.status,
                answer.text()
            ),
            Err(_) => break effect,
        }
        round += 1;
    };
    let status = server.wait_for_exit();
    assert_eq!(
        status.signal(),
        Some(9),
        "{step}: walletd was not SIGKILLed ({status:?}); stderr:\n{}",
        server.stderr_text()
    );
    assert!(
        server
            .stderr_text()
            .contains("fault injection: SIGKILL before"),
        "{step}: killed, but not by the hook:\n{}",
        server.stderr_text()
    );
    println!("{step}: killed after {round} acknowledged operations");
    server.remove_env(FAULT_ENV);
    Killed {
        server,
        archive,
        customers,
        acknowledged,
        in_flight,
    }
}

/// Restarts without the hook and checks everything the module docs list.
fn recover_and_check(mut killed: Killed, step: &str) {
    let server = &mut killed.server;
    server.restart();
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    let shown: Vec<Decimal> = killed
        .customers
        .iter()
        .map(|customer| server.balances(&customer.token, customer.wallet_id).balance)
        .collect();
    let mut landed = killed.acknowledged;
    for (wallet, change) in &killed.in_flight {
        landed[*wallet] += *change;
    }
    assert!(
        shown == killed.acknowledged || shown == landed,
        "{step}: balances {shown:?} are neither the acknowledged {:?} nor those plus the operation \
         in flight {landed:?}",
        killed.acknowledged
    );
    for customer in &killed.customers {
        let report = server.get_ok(
            &format!("/v1/wallets/{}/verify-integrity", customer.wallet_id),
            &auditor.token,
        );
        assert_eq!(report["data"]["valid"], true, "{step}: {report}");
    }
    let status = server.stop();
    assert!(status.success(), "{step}: {}", server.stderr_text());
    let wal = server.data_dir().join("wal");
    assert!(
        files_ending(&wal, ".snap.tmp").is_empty(),
        "{step}: a snapshot temp file is left: {:?}",
        files_ending(&wal, ".snap.tmp")
    );
    let (status, stdout, stderr) = server.run_tool(&["replay", "--verify"]);
    assert!(
        status.success(),
        "{step}: replay --verify failed:\n{stdout}\n{stderr}"
    );
    if let Some(archive) = &killed.archive {
        let live = files_ending(&wal, ".wal");
        for segment in files_ending(archive.path(), ".wal") {
            let name = segment.file_name().expect("a segment name");
            assert!(
                !live.iter().any(|path| path.file_name() == Some(name)),
                "{step}: {name:?} is in the archive and still in the log after a checkpoint"
            );
        }
        let archive_path = archive.path().display().to_string();
        let (status, stdout, stderr) =
            server.run_tool(&["replay", "--from-archive", &archive_path, "--verify"]);
        assert!(
            status.success(),
            "{step}: replay --from-archive --verify failed:\n{stdout}\n{stderr}"
        );
    }
}

#[test]
fn issue_14_sigkill_before_a_snapshot_is_renamed_into_place() {
    let killed = run_until_killed("rename:3:.snap.tmp", false);
    let wal = killed.server.data_dir().join("wal");
    assert_eq!(
        files_ending(&wal, ".snap.tmp").len(),
        1,
        "the snapshot was written under its temp name when the process died"
    );
    recover_and_check(killed, "snapshot rename");
}

#[test]
fn issue_14_sigkill_before_a_retired_segment_is_removed() {
    let killed = run_until_killed("remove:2:.wal", false);
    recover_and_check(killed, "segment removal");
}

#[test]
fn issue_14_sigkill_before_a_retired_segment_is_linked_into_the_archive() {
    let killed = run_until_killed("hard-link:2:.wal", true);
    let archive = killed.archive.as_ref().expect("an archive");
    assert_eq!(
        files_ending(archive.path(), ".wal").len(),
        1,
        "one segment was archived before the kill"
    );
    recover_and_check(killed, "archive link");
}

#[test]
fn issue_14_sigkill_after_archiving_before_the_segment_leaves_the_log() {
    let killed = run_until_killed("remove:2:.wal", true);
    let archive = killed.archive.as_ref().expect("an archive");
    let archived = files_ending(archive.path(), ".wal");
    let live = files_ending(&killed.server.data_dir().join("wal"), ".wal");
    let both: Vec<_> = archived
        .iter()
        .filter(|segment| {
            live.iter()
                .any(|path| path.file_name() == segment.file_name())
        })
        .collect();
    assert_eq!(
        both.len(),
        1,
        "the segment being archived is in the archive and in the log: {archived:?} / {live:?}"
    );
    recover_and_check(killed, "archive remove");
}
