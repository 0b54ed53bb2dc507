//! Issue 16, item 3, the black-box half: a poisoned log in a real `walletd serve` process. The
//! test-only fault hook (`WALLETD_FAULT_INJECTION=poison-wal-on-sigusr1`, `api/src/fault.rs`)
//! fails every log sync after a SIGUSR1. The first deposit after it is refused (503), health
//! answers 503 while the process is still up, and the watchdog stops it with exit code 70; a
//! restart then recovers every acknowledged deposit. Before item 3, the process kept running
//! with health at 200.

use walletd_tests::server::{dec, Options, Server, PLATFORM_BUSINESS_ID};

#[test]
fn issue_16_a_poisoned_log_exits_70_and_a_restart_recovers_every_acknowledged_deposit() {
    let mut server = Server::start_with(Options {
        env: vec![(
            "WALLETD_FAULT_INJECTION",
            "poison-wal-on-sigusr1".to_string(),
        )],
        ..Options::default()
    });
    let customer = server.register_customer();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let body = br#"{"amount": 1}"#;
    let mut acknowledged = 0u64;
    for _ in 0..5 {
        server.deposit(&operator.token, customer.wallet_id, "1");
        acknowledged += 1;
    }

    server.signal("USR1");
    // The signal is handled asynchronously: deposits answered 200 before it took effect were
    // acknowledged (durable) and count. The first refusal is the poisoned log.
    let mut refused = None;
    for _ in 0..10_000 {
        match server.try_request("POST", &path, Some(&operator.token), &[], Some(body)) {
            Ok(answer) if answer.status == 200 => acknowledged += 1,
            Ok(answer) => {
                refused = Some(answer.status);
                break;
            }
            // The watchdog may already have stopped the process.
            Err(_) => break,
        }
    }
    if let Some(status) = refused {
        assert_eq!(status, 503, "a deposit on a poisoned log");
        // Health reports the failure while the process is still up (or the process is gone).
        if let Ok(health) = server.try_request("GET", "/v1/health", None, &[], None) {
            assert_eq!(health.status, 503, "{}", health.text());
        }
    }
    let status = server.wait_for_exit();
    assert_eq!(
        status.code(),
        Some(70),
        "fail-stop exit; stderr:\n{}",
        server.stderr_text()
    );
    assert!(
        server.stderr_text().contains("fail-stop"),
        "{}",
        server.stderr_text()
    );

    // The supervisor restarts it (the hook stays inert without a new SIGUSR1).
    server.restart();
    let balance = server.balances(&customer.token, customer.wallet_id).balance;
    let acked = dec(&acknowledged.to_string());
    // Every acknowledged deposit survives; the one refused may have reached the disk too (its
    // write happened, its sync failed), never more.
    assert!(
        balance >= acked && balance <= acked + dec("1"),
        "balance {balance} after {acknowledged} acknowledged deposits of 1"
    );
    assert_eq!(server.get("/v1/health", None).status, 200);
}
