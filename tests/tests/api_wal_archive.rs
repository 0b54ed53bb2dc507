//! Issue 14, items 6 and 8, over a real `walletd`: `serve --wal-archive DIR` moves retired WAL
//! segments into DIR, and `walletd replay --from-archive DIR --verify` rebuilds the hot state and
//! the history store from LSN 1.
//!
//! The server runs with 64 KiB segments and a snapshot every 40 records, so segments are retired
//! (archived) while deposits and transfers are acknowledged. It is then SIGKILLed (so the kill
//! may land while a background snapshot archives a segment), and:
//!
//! - the live log alone no longer starts at LSN 1: without the archive the history is gone;
//! - an archive missing its first segment is refused, naming the missing LSNs, and the history
//!   store that was there is put back;
//! - `replay --from-archive DIR --verify` rebuilds everything from LSN 1, moves the old store
//!   aside (kept), and verifies every invariant, the rebuilt store against the shards, and that
//!   the state rebuilt from LSN 1 equals the state the snapshot and the log rebuild;
//! - a normal restart serves, and every balance and transaction count equals what was
//!   acknowledged.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rust_decimal::Decimal;
use walletd_tests::server::{dec, Options, Server, TempDir, PLATFORM_BUSINESS_ID};

const WALLETS: usize = 4;
/// Archived segments to wait for before the kill.
const ARCHIVED_SEGMENTS_MIN: usize = 3;
/// How long the load may take to get that many segments archived.
const LOAD_DEADLINE: Duration = Duration::from_secs(180);

/// Segment files (`*.wal`) in `dir`, sorted (their names sort in LSN order).
fn segment_files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("list a segment directory")
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "wal"))
        .collect();
    found.sort();
    found
}

fn first_lsn(segment: &Path) -> u64 {
    segment
        .file_stem()
        .and_then(|stem| stem.to_str())
        .and_then(|stem| stem.parse().ok())
        .unwrap_or_else(|| panic!("{} is not a segment name", segment.display()))
}

/// Entries of `dir` whose name starts with `prefix`.
fn entries_starting_with(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("list the data directory")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.starts_with(prefix))
        .collect()
}

#[test]
fn issue_14_replay_from_archive_rebuilds_everything_a_killed_server_acknowledged() {
    let archive = TempDir::new("wal-archive");
    let mut server = Server::start_with(Options {
        env: vec![
            ("WALLETD_WAL_ARCHIVE", archive.path().display().to_string()),
            ("WALLETD_WAL_SEGMENT_BYTES", "65536".to_owned()),
            ("WALLETD_SNAPSHOT_EVERY", "40".to_owned()),
        ],
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customers: Vec<_> = (0..WALLETS).map(|_| server.register_customer()).collect();
    let mut balances = [Decimal::ZERO; WALLETS];
    let mut transactions = [0u64; WALLETS];

    // Acknowledged deposits and transfers until enough segments were archived.
    let started = Instant::now();
    let mut round = 0usize;
    while segment_files(archive.path()).len() < ARCHIVED_SEGMENTS_MIN {
        assert!(
            started.elapsed() < LOAD_DEADLINE,
            "only {} segments archived after {round} rounds; stderr:\n{}",
            segment_files(archive.path()).len(),
            server.stderr_text()
        );
        let (a, b) = (round % WALLETS, (round + 1) % WALLETS);
        server.deposit(&operator.token, customers[a].wallet_id, "10.25");
        balances[a] += dec("10.25");
        transactions[a] += 1;
        let body = format!(
            r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": 3.10, "currency_code": "YER"}}"#,
            customers[a].wallet_id, customers[b].wallet_id
        );
        let response = server.post("/v1/transfers", Some(&operator.token), &body);
        assert!(
            (200..300).contains(&response.status),
            "transfer: {}",
            response.text()
        );
        balances[a] -= dec("3.10");
        balances[b] += dec("3.10");
        transactions[a] += 1;
        transactions[b] += 1;
        round += 1;
    }
    server.kill_hard();
    println!(
        "{round} rounds acknowledged; {} segments archived",
        segment_files(archive.path()).len()
    );

    let data = server.data_dir().to_path_buf();
    let live = segment_files(&data.join("wal"));
    let archived = segment_files(archive.path());
    assert_eq!(first_lsn(&archived[0]), 1, "the archive starts at LSN 1");
    assert!(
        first_lsn(&live[0]) > 1,
        "the live log no longer starts at LSN 1: {live:?}"
    );

    // An archive without its first segment leaves LSNs from 1 in neither place: refused, named,
    // and the store that was there is put back.
    let gapped = TempDir::new("wal-archive-gapped");
    for segment in &archived[1..] {
        std::fs::copy(segment, gapped.path().join(segment.file_name().unwrap()))
            .expect("copy an archived segment");
    }
    let gapped_path = gapped.path().display().to_string();
    let (status, _, stderr) = server.run_tool(&["replay", "--from-archive", &gapped_path]);
    assert!(
        !status.success(),
        "a gapped archive was accepted:\n{stderr}"
    );
    let missing = format!("records LSN 1 to {}", first_lsn(&archived[1]) - 1);
    assert!(
        stderr.contains(&missing),
        "expected {missing:?} in:\n{stderr}"
    );
    assert!(stderr.contains("put the history store back"), "{stderr}");
    assert!(data.join("history").is_dir());
    assert!(entries_starting_with(&data, "history.before-rebuild-").is_empty());

    // The full drill.
    let archive_path = archive.path().display().to_string();
    let (status, stdout, stderr) =
        server.run_tool(&["replay", "--from-archive", &archive_path, "--verify"]);
    assert!(
        status.success(),
        "replay --from-archive failed:\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        stdout.contains("rebuilt the hot state and the history store from LSN 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "verified: the state rebuilt from LSN 1 equals the state the newest snapshot and the log rebuild"
        ),
        "{stdout}"
    );
    assert!(stdout.contains("history store:"), "{stdout}");
    println!("replay --from-archive --verify:\n{stdout}{stderr}");
    assert!(stderr.contains("history.before-rebuild-"), "{stderr}");
    let aside = entries_starting_with(&data, "history.before-rebuild-");
    assert_eq!(aside.len(), 1, "the old store is kept aside: {aside:?}");

    // A normal start serves what was acknowledged, from the rebuilt store.
    server.restart();
    for (index, customer) in customers.iter().enumerate() {
        let shown = server.balances(&customer.token, customer.wallet_id);
        assert_eq!(shown.balance, balances[index], "wallet {index}");
        let page = server.get_ok(
            &format!("/v1/wallets/{}/transactions?per_page=1", customer.wallet_id),
            &customer.token,
        );
        assert_eq!(
            page["data"]["total"].as_u64(),
            Some(transactions[index]),
            "wallet {index}: {page}"
        );
    }
    let status = server.stop();
    assert!(status.success(), "{}", server.stderr_text());
}
