//! Black-box tests of the process lifecycle (decisions.md §1): SIGTERM drains and exits 0 with the
//! data intact; one process owns a data dir; routing answers 404 and 405.

use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::json;
use walletd_tests::http;
use walletd_tests::server::{Server, PASSWORD, PLATFORM_BUSINESS_ID};

#[test]
fn sigterm_exits_zero_and_the_data_survives_a_restart() {
    let mut server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customer = server.register_customer();
    server.deposit(&operator.token, customer.wallet_id, "12.34");
    let before = server.wallet(&customer.token, customer.wallet_id);

    let status = server.stop();
    assert_eq!(status.code(), Some(0), "SIGTERM exit status: {status:?}");
    server.restart();
    // Tokens issued before the restart still work (same key, same subjects).
    let after = server.wallet(&customer.token, customer.wallet_id);
    assert_eq!(after, before);
    let (text, _) = server.balance(&operator.token, customer.wallet_id);
    assert!(text.contains(r#""balance":12.34"#), "{text}");
    // Passwords and identities survive: both log in again.
    let login = json!({"phone": customer.phone, "password": PASSWORD}).to_string();
    assert_eq!(
        server.post("/v1/auth/customer/login", None, &login).status,
        200
    );
    let login =
        json!({"business_id": PLATFORM_BUSINESS_ID, "email": operator.email, "password": PASSWORD});
    assert_eq!(
        server
            .post("/v1/auth/employee/login", None, &login.to_string())
            .status,
        200
    );
    // The restarted server keeps counting ids where it left off.
    let next = server.register_customer();
    assert!(next.id > customer.id && next.wallet_id > customer.wallet_id);
}

/// A graceful stop ends with a shutdown snapshot of everything logged since the last one, so the
/// next start loads it and replays no log record (issue 14's restart target); a crash (SIGKILL)
/// has no such snapshot and replays the log, which is why the second half kills.
#[test]
fn sigterm_takes_a_shutdown_snapshot_so_the_next_start_replays_no_record() {
    let mut server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customer = server.register_customer();
    for _ in 0..20 {
        server.deposit(&operator.token, customer.wallet_id, "1.25");
    }
    let status = server.stop();
    assert_eq!(status.code(), Some(0), "SIGTERM exit status: {status:?}");

    let (status, stdout, stderr) = server.run_tool(&["replay"]);
    assert!(status.success(), "replay: {stdout} {stderr}");
    let line = stdout
        .lines()
        .find(|line| line.starts_with("replayed "))
        .unwrap_or_else(|| panic!("no replay summary in {stdout}"));
    assert!(
        line.starts_with("replayed 0 records (0 events) onto snapshot LSN "),
        "after SIGTERM: {line}"
    );
    let snapshot_lsn = line
        .split("onto snapshot LSN ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_default();
    assert!(
        line.contains(&format!("last LSN {snapshot_lsn};")),
        "the shutdown snapshot covers the whole log: {line}"
    );

    // The restarted server serves the same money; a crash after more writes replays them.
    server.restart();
    let (text, _) = server.balance(&operator.token, customer.wallet_id);
    assert!(text.contains(r#""balance":25.00"#), "{text}");
    server.deposit(&operator.token, customer.wallet_id, "1.25");
    server.kill_hard();
    let (status, stdout, stderr) = server.run_tool(&["replay"]);
    assert!(status.success(), "replay: {stdout} {stderr}");
    assert!(
        !stdout.contains("replayed 0 records"),
        "a SIGKILL leaves records to replay: {stdout}"
    );
}

/// SIGTERM under load: requests already being handled are answered and kept; the process exits
/// 0; after a restart each wallet holds every acknowledged deposit and at most the one deposit
/// per client that got no answer.
#[test]
fn sigterm_under_load_answers_or_refuses_cleanly_and_keeps_every_acknowledged_deposit() {
    const CLIENTS: usize = 4;
    let mut server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let wallets: Vec<u64> = (0..CLIENTS)
        .map(|_| server.register_customer().wallet_id)
        .collect();
    let (acked_tx, acked_rx) = mpsc::channel::<()>();
    let address = server.address();
    let clients: Vec<_> = wallets
        .iter()
        .map(|wallet| {
            let path = format!("/v1/wallets/{wallet}/deposit");
            let authorization = format!("Bearer {}", operator.token);
            let acked_tx = acked_tx.clone();
            std::thread::spawn(move || {
                let mut acked = 0u64;
                loop {
                    let answer = http::send(
                        address,
                        "POST",
                        &path,
                        &[("Authorization", &authorization)],
                        Some(br#"{"amount": 1}"#),
                    );
                    match answer {
                        Ok(response) if response.status == 200 => {
                            acked += 1;
                            let _ = acked_tx.send(());
                        }
                        // Draining: a 503 refusal is allowed, nothing else.
                        Ok(response) if response.status == 503 => return acked,
                        Ok(response) => panic!("{}: {}", response.status, response.text()),
                        Err(_) => return acked,
                    }
                }
            })
        })
        .collect();
    for n in 0..40 {
        if acked_rx.recv_timeout(Duration::from_secs(60)).is_err() {
            panic!(
                "only {n} deposits acknowledged; stderr:\n{}",
                server.stderr_text()
            );
        }
    }
    let status = server.stop();
    assert_eq!(status.code(), Some(0), "SIGTERM under load: {status:?}");
    let results: Vec<u64> = clients
        .into_iter()
        .map(|c| c.join().expect("client thread"))
        .collect();
    server.restart();
    for (wallet, acked) in wallets.iter().zip(&results) {
        let (text, json) = server.balance(&operator.token, *wallet);
        let balance = json["data"]["balance"].as_f64().expect("balance") as u64;
        assert!(
            (*acked..=acked + 1).contains(&balance),
            "wallet {wallet}: {acked} acknowledged deposits of 1, balance {text}"
        );
    }
}

#[test]
fn a_second_server_on_the_same_data_dir_exits_non_zero_saying_in_use() {
    let server = Server::start();
    let output = Server::run_to_exit(&mut server.serve_command(), Duration::from_secs(30));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "second server exit: {:?}",
        output.status
    );
    assert!(stderr.contains("in use"), "stderr: {stderr}");
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains("listening"),
        "the second server must not listen"
    );
    // The offline tools refuse a live data dir the same way.
    let (status, _, stderr) = server.run_tool(&["replay"]);
    assert!(!status.success(), "replay on a live data dir: {status:?}");
    assert!(stderr.contains("in use"), "replay stderr: {stderr}");
    // And the first server is unharmed.
    assert_eq!(server.get("/v1/health", None).status, 200);
}

#[test]
fn unknown_paths_are_404_and_known_paths_with_another_method_are_405() {
    let server = Server::start();
    let missing = server.get("/v1/nope", None);
    assert_eq!(missing.status, 404, "{}", missing.text());
    assert_eq!(missing.error_code(), "not_found");
    let wrong = server.request("DELETE", "/v1/wallets", None, &[], None);
    assert_eq!(wrong.status, 405, "{}", wrong.text());
    assert_eq!(wrong.error_code(), "method_not_allowed");
    assert!(wrong.header("x-request-id").is_some());
    let metrics = server.get("/metrics", None);
    assert_eq!(metrics.status, 200);
    assert!(
        metrics.text().contains("walletd_http_requests_total"),
        "{}",
        metrics.text()
    );
    // Where a slow request waited: the log's fsyncs, the indexer's back-pressure on the log,
    // and the store's flushes behind the indexer. Each is a number.
    let text = metrics.text();
    for name in [
        "walletd_wal_slow_fsyncs_total",
        "walletd_wal_indexer_wait_seconds_total",
        "walletd_history_indexed_lsn",
        "walletd_history_memtable_wait_seconds_total",
        // And the store reads a request itself waited on (idempotency lookups, a shard's
        // recall of records that left its memory).
        "walletd_history_foreground_reads_total",
        "walletd_history_foreground_read_seconds_total",
        "walletd_history_slow_foreground_reads_total",
        // And what the store holds in memory, by part, beside its tables on disk.
        "walletd_history_memory_bytes{part=\"memtables\"}",
        "walletd_history_memory_bytes{part=\"block_cache\"}",
        "walletd_history_memory_bytes{part=\"pinned_filters\"}",
        "walletd_history_memory_bytes{part=\"pinned_indexes\"}",
        "walletd_history_tables",
        "walletd_history_answer_generations",
        // And what the background snapshots cost, and whether one fails.
        "walletd_snapshots_total{result=\"written\"}",
        "walletd_snapshots_total{result=\"failed\"}",
        "walletd_snapshot_running",
        "walletd_snapshot_seconds_total",
        "walletd_snapshot_cpu_seconds_total",
    ] {
        let value = text
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("{name} missing from /metrics"));
        assert!(value.parse::<f64>().is_ok(), "{name} {value}");
    }
}

/// A data dir records its shard count: the offline tools find it without `--shards`, and
/// another count is refused with a message that names both, instead of replaying every wallet
/// onto the wrong shard.
#[test]
fn offline_tools_use_the_recorded_shard_count_and_refuse_another() {
    let mut server = Server::start_with(walletd_tests::server::Options {
        shards: Some(4),
        ..walletd_tests::server::Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    for _ in 0..3 {
        let customer = server.register_customer();
        server.deposit(&operator.token, customer.wallet_id, "7.00");
    }
    let status = server.stop();
    assert_eq!(status.code(), Some(0), "SIGTERM exit status: {status:?}");

    let replay = |shards: Option<&str>| {
        let mut command = std::process::Command::new(walletd_tests::server::walletd_binary());
        command
            .args(["replay", "--verify", "--data-dir"])
            .arg(server.data_dir())
            .env_remove("WALLETD_DATA_DIR")
            .env_remove("WALLETD_SHARDS")
            .stdin(Stdio::null());
        if let Some(shards) = shards {
            command.args(["--shards", shards]);
        }
        command.output().expect("run walletd replay")
    };
    let recorded = replay(None);
    assert!(
        recorded.status.success() && String::from_utf8_lossy(&recorded.stdout).contains("verified"),
        "replay without --shards: {recorded:?}"
    );
    let other = replay(Some("1"));
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(
        !other.status.success() && stderr.contains("created with 4 shards"),
        "replay --shards 1 on a 4-shard data dir: {other:?}"
    );
}

/// Issue 16, item 11: a `*` fee fallback that cannot apply to every currency it covers refuses
/// start with a message naming the setting, instead of starting and refusing payments later.
#[test]
fn issue_16_an_invalid_fee_fallback_refuses_to_start() {
    let mut server = Server::start();
    server.stop();
    for schedule in ["YER:1,*:101", "*:1+0.5"] {
        let mut command = server.serve_command();
        command.env("WALLETD_FEE_SCHEDULE", schedule);
        let output = Server::run_to_exit(&mut command, Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{schedule}: {:?}", output.status);
        assert!(
            stderr.contains("WALLETD_FEE_SCHEDULE") && stderr.contains("fee entry for *"),
            "{schedule}: {stderr}"
        );
    }
}
