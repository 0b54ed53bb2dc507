//! `POST /v1/transfers/batch` over HTTP (issue 15): mixed success and failure, atomic rollback,
//! cross-shard items on 4 shards (atomic too), replay under an Idempotency-Key (an atomic batch
//! across shards too), bodies refused whole, a SIGKILL in the middle of batch traffic followed
//! by the crash drill's audit, and keyed batches cut by a SIGKILL retried to a final answer.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use rust_decimal::Decimal;
use serde_json::{json, Value};
use walletd_tests::server::{dec, Customer, Options, Server, PLATFORM_BUSINESS_ID};

const BATCH: &str = "/v1/transfers/batch";

fn item(from: u64, to: u64, amount: &str) -> Value {
    json!({"from_wallet_id": from, "to_wallet_id": to, "amount": serde_json::from_str::<Value>(amount).unwrap(), "currency_code": "YER"})
}

fn funded(server: &Server, amount: &str) -> Customer {
    let customer = server.register_customer();
    server.deposit(&server.admin_token(), customer.wallet_id, amount);
    customer
}

fn balance(server: &Server, wallet_id: u64) -> Decimal {
    server.balances(&server.admin_token(), wallet_id).balance
}

fn codes(answer: &Value) -> Vec<String> {
    answer["data"]["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|item| {
            if item["status"] == Value::Bool(true) {
                "ok".to_owned()
            } else {
                item["error"]["code"].as_str().unwrap_or("?").to_owned()
            }
        })
        .collect()
}

#[test]
fn mixed_batch_posts_the_good_items_and_answers_each_in_order() {
    let server = Server::start();
    let alice = funded(&server, "100.00");
    let bob = server.register_customer();
    let carol = funded(&server, "50.00");
    let body = json!({"transfers": [
        item(alice.wallet_id, bob.wallet_id, "10.00"),
        item(alice.wallet_id, bob.wallet_id, "1000.00"),   // insufficient funds
        item(alice.wallet_id, 999_999, "1.00"),            // unknown target
        item(carol.wallet_id, bob.wallet_id, "5.00"),      // not alice's wallet: hidden, 404
        {"from_wallet_id": alice.wallet_id, "to_wallet_id": bob.wallet_id, "amount": "5", "currency_code": "YER"},
        item(alice.wallet_id, bob.wallet_id, "0.001"),     // too many decimals for YER
        {"from_wallet_id": alice.wallet_id, "to_wallet_id": bob.wallet_id, "amount": 2.50, "currency_code": "YER", "description": "rent", "reference": "inv-7"},
    ]});
    let response = server.post(BATCH, Some(&alice.token), &body.to_string());
    assert_eq!(response.status, 200, "{}", response.text());
    // Amounts are exact JSON numbers with the currency's scale, as POST /v1/transfers renders
    // them (rendered through serde_json::Value, they came out as floats: 10.0, 2.5).
    let text = response.text();
    assert!(text.contains(r#""amount":10.00,"#), "{text}");
    assert!(text.contains(r#""amount":2.50,"#), "{text}");
    let answer = response.json();
    assert_eq!(
        codes(&answer),
        [
            "ok",
            "insufficient_funds",
            "not_found",
            "not_found",
            "validation_failed",
            "invalid_amount",
            "ok"
        ],
        "{answer}"
    );
    assert_eq!(answer["data"]["posted"], 2);
    assert_eq!(answer["data"]["failed"], 5);
    // A posted item is the transfer as POST /v1/transfers renders it: the debit side.
    let first = &answer["data"]["results"][0]["data"];
    assert_eq!(first["wallet_id"], alice.wallet_id);
    assert_eq!(first["transaction_type"], "transfer");
    let last = &answer["data"]["results"][6]["data"];
    assert_eq!(last["description"], "rent");
    assert_eq!(last["external_reference"], "inv-7");
    assert_eq!(balance(&server, alice.wallet_id), dec("87.50"));
    assert_eq!(balance(&server, bob.wallet_id), dec("12.50"));
    assert_eq!(balance(&server, carol.wallet_id), dec("50.00"));
    // The same single transfer is refused the same way the item was.
    let single = server.post(
        "/v1/transfers",
        Some(&alice.token),
        &item(carol.wallet_id, bob.wallet_id, "5.00").to_string(),
    );
    assert_eq!(single.status, 404);
}

#[test]
fn atomic_batch_posts_all_or_nothing() {
    let server = Server::start();
    let alice = funded(&server, "100.00");
    let bob = server.register_customer();
    // The third item overdraws only together with the first two: nothing may stay posted.
    let body = json!({"atomic": true, "transfers": [
        item(alice.wallet_id, bob.wallet_id, "40.00"),
        item(alice.wallet_id, bob.wallet_id, "40.00"),
        item(alice.wallet_id, bob.wallet_id, "40.00"),
    ]});
    let refused = server.post(BATCH, Some(&alice.token), &body.to_string());
    assert_eq!(refused.status, 422, "{}", refused.text());
    let refused = refused.json();
    assert_eq!(refused["error"]["code"], "insufficient_funds", "{refused}");
    assert_eq!(refused["error"]["details"]["failed_index"], 2);
    let results = &refused["error"]["details"]["results"];
    assert_eq!(results[0]["error"]["code"], "batch_aborted");
    assert_eq!(results[2]["error"]["code"], "insufficient_funds");
    assert_eq!(balance(&server, alice.wallet_id), dec("100.00"));
    assert_eq!(balance(&server, bob.wallet_id), dec("0.00"));
    // An item refused before the engine (another's wallet) refuses the batch the same way.
    let carol = funded(&server, "10.00");
    let body = json!({"atomic": true, "transfers": [
        item(alice.wallet_id, bob.wallet_id, "1.00"),
        item(carol.wallet_id, bob.wallet_id, "1.00"),
    ]});
    let refused = server.post(BATCH, Some(&alice.token), &body.to_string());
    assert_eq!(refused.status, 404, "{}", refused.text());
    assert_eq!(refused.json()["error"]["details"]["failed_index"], 1);
    assert_eq!(balance(&server, alice.wallet_id), dec("100.00"));
    // All fit: all post.
    let body = json!({"atomic": true, "transfers": [
        item(alice.wallet_id, bob.wallet_id, "40.00"),
        item(alice.wallet_id, bob.wallet_id, "60.00"),
    ]});
    let answer = server.post_expect(BATCH, Some(&alice.token), &body.to_string(), 200);
    assert_eq!(codes(&answer), ["ok", "ok"]);
    assert_eq!(balance(&server, alice.wallet_id), dec("0.00"));
    assert_eq!(balance(&server, bob.wallet_id), dec("100.00"));
    // The refused attempt left every ledger verifiable.
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    for wallet in [alice.wallet_id, bob.wallet_id] {
        let report = server.get_ok(
            &format!("/v1/wallets/{wallet}/verify-integrity"),
            &auditor.token,
        );
        assert_eq!(report["data"]["valid"], Value::Bool(true), "{report}");
    }
}

/// Once `enough()` holds, SIGKILLs the server in the middle of the load, stops and joins the
/// threads sending it, and restarts the server on its data dir.
fn kill_mid_load(
    server: &mut Server,
    enough: impl Fn() -> bool,
    stop: &AtomicBool,
    threads: Vec<std::thread::JoinHandle<()>>,
) {
    while !enough() {
        std::thread::yield_now();
    }
    server.kill_hard();
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    server.restart();
}

/// Stops the server (exit 0), then `walletd replay --verify` must rebuild the same state from
/// its data dir.
fn stop_and_verify_replay(server: &mut Server) {
    let status = server.stop();
    assert_eq!(status.code(), Some(0));
    let (status, stdout, stderr) = server.run_tool(&["replay", "--verify"]);
    assert!(
        status.success() && stdout.contains("verified"),
        "walletd replay --verify: {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
}

/// Customers whose wallets live on each of `shards` shards (at least `per_shard` each).
fn spread(server: &Server, shards: u32, per_shard: usize, amount: &str) -> Vec<Vec<Customer>> {
    let mut by_shard: Vec<Vec<Customer>> = (0..shards).map(|_| Vec::new()).collect();
    while by_shard.iter().any(|c| c.len() < per_shard) {
        let customer = funded(server, amount);
        let shard = engine::shard_of(customer.wallet_id, shards) as usize;
        by_shard[shard].push(customer);
    }
    by_shard
}

#[test]
fn cross_shard_items_post_on_four_shards() {
    let server = Server::start_with(Options {
        shards: Some(4),
        ..Options::default()
    });
    let by_shard = spread(&server, 4, 2, "100.00");
    let payer = &by_shard[0][0];
    let mut transfers = Vec::new();
    for (shard, customers) in by_shard.iter().enumerate() {
        for customer in customers {
            if customer.wallet_id != payer.wallet_id {
                transfers.push(item(payer.wallet_id, customer.wallet_id, "3.00"));
            }
        }
        assert!(!customers.is_empty(), "shard {shard} has wallets");
    }
    // One item the target's currency refuses after the reserve: released, the rest posted.
    transfers.push(json!({"from_wallet_id": payer.wallet_id, "to_wallet_id": by_shard[1][0].wallet_id, "amount": 1, "currency_code": "USD"}));
    let count = transfers.len();
    let answer = server.post_expect(
        BATCH,
        Some(&payer.token),
        &json!({ "transfers": transfers }).to_string(),
        200,
    );
    let each = codes(&answer);
    assert_eq!(each.len(), count);
    assert!(each[..count - 1].iter().all(|c| c == "ok"), "{answer}");
    assert_eq!(each[count - 1], "currency_mismatch", "{answer}");
    let paid = Decimal::from(3) * Decimal::from((count - 1) as u64);
    assert_eq!(balance(&server, payer.wallet_id), dec("100.00") - paid);
    for customers in &by_shard {
        for customer in customers {
            if customer.wallet_id != payer.wallet_id {
                assert_eq!(balance(&server, customer.wallet_id), dec("103.00"));
            }
        }
    }
    // Atomic across shards: every item posts, the one whose target is on the payer's shard
    // included.
    let before = balance(&server, payer.wallet_id);
    let body = json!({"atomic": true, "transfers": [
        item(payer.wallet_id, by_shard[0][1].wallet_id, "1.00"),
        item(payer.wallet_id, by_shard[2][0].wallet_id, "2.00"),
        item(payer.wallet_id, by_shard[3][0].wallet_id, "3.00"),
    ]});
    let answer = server.post_expect(BATCH, Some(&payer.token), &body.to_string(), 200);
    assert_eq!(codes(&answer), ["ok", "ok", "ok"], "{answer}");
    assert_eq!(
        answer["data"]["results"][1]["data"]["wallet_id"],
        payer.wallet_id
    );
    assert_eq!(balance(&server, payer.wallet_id), before - dec("6.00"));
    assert_eq!(balance(&server, by_shard[0][1].wallet_id), dec("104.00"));
    assert_eq!(balance(&server, by_shard[2][0].wallet_id), dec("105.00"));
    assert_eq!(balance(&server, by_shard[3][0].wallet_id), dec("106.00"));
    // Sources on several shards (an admin moves money out of each): one overdraws, none posts.
    let admin = server.admin_token();
    let snapshot = |server: &Server| -> Vec<Decimal> {
        by_shard
            .iter()
            .flatten()
            .map(|c| balance(server, c.wallet_id))
            .collect()
    };
    let untouched = snapshot(&server);
    let body = json!({"atomic": true, "transfers": [
        item(by_shard[1][0].wallet_id, by_shard[2][1].wallet_id, "5.00"),
        item(by_shard[2][0].wallet_id, by_shard[1][1].wallet_id, "5.00"),
        item(by_shard[3][0].wallet_id, by_shard[0][1].wallet_id, "5000.00"),
    ]});
    let refused = server.post(BATCH, Some(&admin), &body.to_string());
    assert_eq!(refused.status, 422, "{}", refused.text());
    let refused = refused.json();
    assert_eq!(refused["error"]["code"], "insufficient_funds", "{refused}");
    assert_eq!(refused["error"]["details"]["failed_index"], 2);
    assert_eq!(snapshot(&server), untouched, "an aborted batch moved money");
    // A frozen target refuses the batch before anything is reserved; an earlier item that
    // overdraws is named first, as the items run in order would.
    let frozen = by_shard[3][1].wallet_id;
    server.post_expect(
        &format!("/v1/wallets/{frozen}/freeze"),
        Some(&admin),
        "",
        200,
    );
    let body = json!({"atomic": true, "transfers": [
        item(by_shard[1][0].wallet_id, by_shard[2][1].wallet_id, "5.00"),
        item(by_shard[2][0].wallet_id, frozen, "5.00"),
    ]});
    let refused = server.post(BATCH, Some(&admin), &body.to_string()).json();
    assert_eq!(refused["error"]["code"], "wallet_frozen", "{refused}");
    assert_eq!(refused["error"]["details"]["failed_index"], 1);
    let body = json!({"atomic": true, "transfers": [
        item(by_shard[1][0].wallet_id, by_shard[2][1].wallet_id, "5000.00"),
        item(by_shard[2][0].wallet_id, frozen, "5.00"),
    ]});
    let refused = server.post(BATCH, Some(&admin), &body.to_string()).json();
    assert_eq!(refused["error"]["code"], "insufficient_funds", "{refused}");
    assert_eq!(refused["error"]["details"]["failed_index"], 0);
    assert_eq!(snapshot(&server), untouched, "a refused batch moved money");
    // Atomic with every wallet on one shard posts as before.
    let body = json!({"atomic": true, "transfers": [
        item(payer.wallet_id, by_shard[0][1].wallet_id, "1.00"),
    ]});
    server.post_expect(BATCH, Some(&payer.token), &body.to_string(), 200);
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    for customer in by_shard.iter().flatten() {
        let report = server.get_ok(
            &format!("/v1/wallets/{}/verify-integrity", customer.wallet_id),
            &auditor.token,
        );
        assert_eq!(report["data"]["valid"], Value::Bool(true), "{report}");
    }
}

#[test]
fn a_keyed_batch_replays_its_whole_answer() {
    let server = Server::start();
    let alice = funded(&server, "100.00");
    let bob = server.register_customer();
    let body = json!({"transfers": [
        item(alice.wallet_id, bob.wallet_id, "10.00"),
        item(alice.wallet_id, bob.wallet_id, "500.00"),
    ]})
    .to_string();
    let first = server.post_idempotent(BATCH, &alice.token, "batch-0001", &body);
    assert_eq!(first.status, 200, "{}", first.text());
    let again = server.post_idempotent(BATCH, &alice.token, "batch-0001", &body);
    assert_eq!(again.status, 200);
    assert_eq!(again.body, first.body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(balance(&server, alice.wallet_id), dec("90.00"));
    let other = json!({"transfers": [item(alice.wallet_id, bob.wallet_id, "11.00")]}).to_string();
    let reused = server.post_idempotent(BATCH, &alice.token, "batch-0001", &other);
    assert_eq!(reused.status, 422);
    assert_eq!(reused.error_code(), "idempotency_key_reused");
    assert_eq!(balance(&server, alice.wallet_id), dec("90.00"));
    // Still replayed after a restart (the answer is in the log).
    let mut server = server;
    server.stop();
    server.restart();
    let after = server.post_idempotent(BATCH, &alice.token, "batch-0001", &body);
    assert_eq!(after.body, first.body);
    assert_eq!(balance(&server, alice.wallet_id), dec("90.00"));
}

/// An atomic batch across shards under an Idempotency-Key: its answer, posted or refused, is
/// replayed byte for byte, also after a restart, and nothing moves twice.
#[test]
fn a_keyed_atomic_batch_across_shards_replays_its_answer() {
    let server = Server::start_with(Options {
        shards: Some(2),
        ..Options::default()
    });
    let by_shard = spread(&server, 2, 2, "100.00");
    let payer = &by_shard[0][0];
    let posted = json!({"atomic": true, "transfers": [
        item(payer.wallet_id, by_shard[1][0].wallet_id, "10.00"),
        item(payer.wallet_id, by_shard[0][1].wallet_id, "5.00"),
    ]})
    .to_string();
    let refused = json!({"atomic": true, "transfers": [
        item(payer.wallet_id, by_shard[1][1].wallet_id, "1.00"),
        item(payer.wallet_id, by_shard[1][0].wallet_id, "500.00"),
    ]})
    .to_string();
    let first = server.post_idempotent(BATCH, &payer.token, "atomic-0001", &posted);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(codes(&first.json()), ["ok", "ok"]);
    let no = server.post_idempotent(BATCH, &payer.token, "atomic-0002", &refused);
    assert_eq!(no.status, 422, "{}", no.text());
    assert_eq!(no.json()["error"]["details"]["failed_index"], 1);
    let check = |server: &Server| {
        assert_eq!(balance(server, payer.wallet_id), dec("85.00"));
        assert_eq!(balance(server, by_shard[1][0].wallet_id), dec("110.00"));
        assert_eq!(balance(server, by_shard[0][1].wallet_id), dec("105.00"));
        assert_eq!(balance(server, by_shard[1][1].wallet_id), dec("100.00"));
    };
    check(&server);
    let mut server = server;
    for round in 0..2 {
        let again = server.post_idempotent(BATCH, &payer.token, "atomic-0001", &posted);
        assert_eq!(again.status, 200, "round {round}");
        assert_eq!(again.body, first.body, "round {round}");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        let again = server.post_idempotent(BATCH, &payer.token, "atomic-0002", &refused);
        assert_eq!(again.status, 422, "round {round}");
        // An error envelope names the request that carried it; the rest is the first answer.
        let without_request = |mut body: Value| {
            body.as_object_mut().unwrap().remove("request_id");
            body
        };
        assert_eq!(
            without_request(again.json()),
            without_request(no.json()),
            "round {round}"
        );
        check(&server);
        server.stop();
        server.restart();
    }
}

#[test]
fn malformed_and_oversized_batches_are_refused_whole() {
    let server = Server::start();
    let alice = funded(&server, "100.00");
    let bob = server.register_customer();
    let syntax = server.post(BATCH, Some(&alice.token), r#"{"transfers": [ {"#);
    assert_eq!(syntax.status, 400);
    let empty = server.post(BATCH, Some(&alice.token), r#"{"transfers": []}"#);
    assert_eq!(empty.status, 422);
    let shape = server.post(BATCH, Some(&alice.token), r#"{"transfers": 7}"#);
    assert_eq!(shape.status, 422);
    let one = item(alice.wallet_id, bob.wallet_id, "0.01");
    let many: Vec<Value> = (0..8191).map(|_| one.clone()).collect();
    let too_many = server.post(
        BATCH,
        Some(&alice.token),
        &json!({ "transfers": many }).to_string(),
    );
    assert_eq!(too_many.status, 413, "{}", too_many.text());
    assert_eq!(balance(&server, alice.wallet_id), dec("100.00"));
    // 8190 is accepted, and fits the route's body limit.
    let most: Vec<Value> = (0..8190).map(|_| one.clone()).collect();
    let answer = server.post_expect(
        BATCH,
        Some(&alice.token),
        &json!({ "transfers": most, "atomic": true }).to_string(),
        200,
    );
    assert_eq!(answer["data"]["posted"], 8190);
    assert_eq!(balance(&server, alice.wallet_id), dec("18.10"));
}

/// The largest batch under a key: its events and its whole answer must each fit the log's
/// records (before, a keyed batch of a few thousand items built a record the log refused, which
/// stops the shard), and one with texts too long for that is refused whole.
#[test]
fn a_keyed_batch_of_8190_items_posts_and_replays() {
    let server = Server::start();
    let alice = funded(&server, "200.00");
    let bob = server.register_customer();
    let one = item(alice.wallet_id, bob.wallet_id, "0.01");
    let body = json!({ "transfers": vec![one; 8190] }).to_string();
    let first = server.post_idempotent(BATCH, &alice.token, "big-0001", &body);
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(first.json()["data"]["posted"], 8190);
    let again = server.post_idempotent(BATCH, &alice.token, "big-0001", &body);
    assert_eq!(again.body, first.body);
    assert_eq!(balance(&server, alice.wallet_id), dec("118.10"));
    // Atomic, with texts at their longest: its items cannot share one record.
    let long = json!({"from_wallet_id": alice.wallet_id, "to_wallet_id": bob.wallet_id, "amount": 0.01, "currency_code": "YER", "description": "d".repeat(4096), "reference": "r".repeat(4096)});
    let body = json!({ "atomic": true, "transfers": vec![long; 900] }).to_string();
    let refused = server.post(BATCH, Some(&alice.token), &body);
    assert_eq!(refused.status, 413, "{}", refused.text());
    assert_eq!(refused.error_code(), "batch_too_large");
    assert_eq!(balance(&server, alice.wallet_id), dec("118.10"));
    // The shard still serves.
    let small = json!({"transfers": [item(alice.wallet_id, bob.wallet_id, "1.00")]});
    server.post_expect(BATCH, Some(&alice.token), &small.to_string(), 200);
}

/// The crash drill for batches: threads send non-atomic batches across 4 shards, atomic ones
/// inside shard 0 and atomic ones whose two sources and two targets are on four shards; the
/// server is SIGKILLed mid-load; after a restart every acknowledged item is applied, money is
/// conserved, every atomic batch is all or nothing, every ledger verifies, and `walletd replay
/// --verify` rebuilds the same state.
#[test]
fn sigkill_mid_batch_loses_no_acknowledged_item_and_halves_no_atomic_batch() {
    const THREADS: usize = 4;
    let mut server = Server::start_with(Options {
        shards: Some(4),
        ..Options::default()
    });
    let by_shard = spread(&server, 4, 3, "1000.00");
    assert!(by_shard.iter().all(|wallets| wallets.len() >= 3));
    // The first two wallets of shard 0 take only atomic batches inside the shard, the first
    // wallet of each other shard and the second of shard 0 only atomic ones across shards
    // (a → b and c → d); the others only non-atomic ones.
    let pair = (by_shard[0][0].clone(), by_shard[0][1].clone());
    let quartet = [
        by_shard[1][0].clone(),
        by_shard[2][0].clone(),
        by_shard[3][0].clone(),
        by_shard[0][2].clone(),
    ];
    let atomic_ids: Vec<u64> = [&pair.0, &pair.1]
        .into_iter()
        .chain(quartet.iter())
        .map(|c| c.wallet_id)
        .collect();
    let wallets: Vec<Customer> = by_shard
        .iter()
        .flatten()
        .filter(|c| !atomic_ids.contains(&c.wallet_id))
        .cloned()
        .collect();
    let admin_token = server.admin_token();
    let initial: Decimal = wallets.iter().map(|c| balance(&server, c.wallet_id)).sum();
    let acked = Arc::new(Mutex::new(Vec::<(usize, String)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let address = server.address();
    let mut threads = Vec::new();
    for thread in 0..THREADS {
        let wallets = wallets.clone();
        let pair = pair.clone();
        let quartet = quartet.clone();
        let admin_token = admin_token.clone();
        let acked = Arc::clone(&acked);
        let stop = Arc::clone(&stop);
        threads.push(std::thread::spawn(move || {
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                round += 1;
                let payer = &wallets[(thread + round) % wallets.len()];
                let (body, token) = if round.is_multiple_of(3) {
                    // Atomic inside shard 0: 0.30 moves, or nothing.
                    let (a, b) = (&pair.0, &pair.1);
                    (json!({"atomic": true, "transfers": [item(a.wallet_id, b.wallet_id, "0.10"), item(a.wallet_id, b.wallet_id, "0.20")]}), &pair.0.token)
                } else if round % 3 == 1 {
                    // Atomic across four shards: a → b 0.10 and c → d 0.20, both or neither.
                    let [a, b, c, d] = &quartet;
                    (json!({"atomic": true, "transfers": [item(a.wallet_id, b.wallet_id, "0.10"), item(c.wallet_id, d.wallet_id, "0.20")]}), &admin_token)
                } else {
                    let transfers: Vec<Value> = wallets
                        .iter()
                        .filter(|c| c.wallet_id != payer.wallet_id)
                        .map(|c| item(payer.wallet_id, c.wallet_id, "0.01"))
                        .collect();
                    (json!({ "transfers": transfers }), &payer.token)
                };
                let authorization = format!("Bearer {token}");
                let sent = walletd_tests::http::send(
                    address,
                    "POST",
                    BATCH,
                    &[("Authorization", &authorization)],
                    Some(body.to_string().as_bytes()),
                );
                match sent {
                    Ok(response) if response.status == 200 => {
                        let answer = response.json();
                        for result in answer["data"]["results"].as_array().unwrap() {
                            if result["status"] == Value::Bool(true) {
                                let uuid = result["data"]["uuid"].as_str().unwrap().to_owned();
                                let wallet = result["data"]["wallet_id"].as_u64().unwrap();
                                acked.lock().unwrap().push((wallet as usize, uuid));
                            }
                        }
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        }));
    }
    // Kill once a good number of batches have been acknowledged.
    kill_mid_load(
        &mut server,
        || acked.lock().unwrap().len() >= 200,
        &stop,
        threads,
    );
    // Every acknowledged item is in its wallet's history.
    let admin = server.admin_token();
    for (wallet, uuid) in acked.lock().unwrap().iter() {
        let found = (1..)
            .map(|page| {
                server.get_ok(
                    &format!("/v1/wallets/{wallet}/transactions?per_page=100&page={page}"),
                    &admin,
                )
            })
            .take_while(|page| !page["data"]["data"].as_array().unwrap().is_empty())
            .any(|page| {
                page["data"]["data"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["uuid"].as_str() == Some(uuid))
            });
        assert!(
            found,
            "acknowledged transfer {uuid} of wallet {wallet} is gone"
        );
    }
    // Money is conserved, and each atomic batch moved 0.30 or nothing.
    let after: Decimal = wallets.iter().map(|c| balance(&server, c.wallet_id)).sum();
    assert_eq!(after, initial, "money was created or destroyed");
    let moved = dec("1000.00") - balance(&server, pair.0.wallet_id);
    assert_eq!(balance(&server, pair.1.wallet_id), dec("1000.00") + moved);
    assert!(
        (moved % dec("0.30")).is_zero(),
        "an atomic batch was half applied: {moved} moved"
    );
    let [a, b, c, d] = &quartet;
    let sent_ab = dec("1000.00") - balance(&server, a.wallet_id);
    let sent_cd = dec("1000.00") - balance(&server, c.wallet_id);
    assert_eq!(balance(&server, b.wallet_id), dec("1000.00") + sent_ab);
    assert_eq!(balance(&server, d.wallet_id), dec("1000.00") + sent_cd);
    assert_eq!(
        sent_ab * dec("2"),
        sent_cd,
        "an atomic batch across shards was half applied: {sent_ab} and {sent_cd} moved"
    );
    assert!(
        sent_ab > Decimal::ZERO,
        "no atomic batch across shards ran before the kill"
    );
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    for customer in wallets
        .iter()
        .chain([&pair.0, &pair.1])
        .chain(quartet.iter())
    {
        let report = server.get_ok(
            &format!("/v1/wallets/{}/verify-integrity", customer.wallet_id),
            &auditor.token,
        );
        assert_eq!(report["data"]["valid"], Value::Bool(true), "{report}");
    }
    stop_and_verify_replay(&mut server);
}

/// What became of one keyed batch sent while the server was killed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fate {
    /// Every item posted (answered before the kill, or by a retry after it).
    Posted,
    /// 409 `batch_interrupted`: the crash stopped it between its records; recovery settled its
    /// items (an atomic one all or nothing) and no retry runs it again.
    Interrupted,
}

/// Keyed batches cut by a SIGKILL get a final answer, and none runs twice: threads send keyed
/// atomic batches inside shard 0 (one record each) and across two shards (a prepare record on
/// each source shard, then credits and a close: a kill can fall between them); after the kill
/// and a restart every batch that was sent but not answered is retried with its key and body.
/// Each retry is answered for good (200, or 409 `batch_interrupted`; never `request_in_progress`),
/// a second retry gets the same answer, and the money each pair of wallets moved is exactly
/// what the batches that posted moved, give or take the interrupted ones (a batch answered
/// before the kill and run again by its retry would show as one batch too many).
#[test]
fn keyed_batches_cut_by_sigkill_get_a_final_answer_and_run_once() {
    const THREADS: usize = 4;
    let mut server = Server::start_with(Options {
        shards: Some(2),
        ..Options::default()
    });
    let by_shard = spread(&server, 2, 4, "1000.00");
    // Inside shard 0: p → q moves 0.30. Across shards: a (shard 0) → b (shard 1) 0.10 and
    // c (shard 1) → d (shard 0) 0.20, both or neither.
    let [p, q, a, d] = [0, 1, 2, 3].map(|i| by_shard[0][i].clone());
    let [b, c] = [0, 1].map(|i| by_shard[1][i].clone());
    let inside = json!({"atomic": true, "transfers": [
        item(p.wallet_id, q.wallet_id, "0.10"),
        item(p.wallet_id, q.wallet_id, "0.20"),
    ]})
    .to_string();
    let across = json!({"atomic": true, "transfers": [
        item(a.wallet_id, b.wallet_id, "0.10"),
        item(c.wallet_id, d.wallet_id, "0.20"),
    ]})
    .to_string();
    let admin_token = server.admin_token();
    let wallets = [&p, &q, &a, &b, &c, &d];
    let initial: Decimal = wallets.iter().map(|w| balance(&server, w.wallet_id)).sum();
    // (key, inside shard 0?) of every batch sent, and the keys answered 200 before the kill.
    let sent = Arc::new(Mutex::new(Vec::<(String, bool)>::new()));
    let answered = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let address = server.address();
    let mut threads = Vec::new();
    for thread in 0..THREADS {
        let (sent, answered, stop) = (sent.clone(), answered.clone(), stop.clone());
        let (inside, across) = (inside.clone(), across.clone());
        let authorization = format!("Bearer {admin_token}");
        threads.push(std::thread::spawn(move || {
            for round in 0usize.. {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let in_shard = round % 4 == 0;
                let key = format!("cut-{thread}-{round}");
                sent.lock().unwrap().push((key.clone(), in_shard));
                let body = if in_shard { &inside } else { &across };
                let response = walletd_tests::http::send(
                    address,
                    "POST",
                    BATCH,
                    &[("Authorization", &authorization), ("Idempotency-Key", &key)],
                    Some(body.as_bytes()),
                );
                match response {
                    Ok(response) => {
                        assert_eq!(response.status, 200, "{key}: {}", response.text());
                        answered.lock().unwrap().push(key);
                    }
                    Err(_) => return,
                }
            }
        }));
    }
    kill_mid_load(
        &mut server,
        || answered.lock().unwrap().len() >= 120,
        &stop,
        threads,
    );

    let admin_token = server.admin_token();
    let answered = answered.lock().unwrap().clone();
    let mut fates: Vec<(bool, Fate)> = Vec::new();
    let mut retried = 0;
    for (key, in_shard) in sent.lock().unwrap().iter() {
        if answered.contains(key) {
            fates.push((*in_shard, Fate::Posted));
            continue;
        }
        retried += 1;
        let body = if *in_shard { &inside } else { &across };
        let first = server.post_idempotent(BATCH, &admin_token, key, body);
        let fate = match first.status {
            200 => {
                assert_eq!(codes(&first.json()), ["ok", "ok"], "{key}");
                Fate::Posted
            }
            409 => {
                let code = first.json()["error"]["code"].clone();
                assert_eq!(code, json!("batch_interrupted"), "{key}: {}", first.text());
                Fate::Interrupted
            }
            other => panic!(
                "{key}: a retry after the crash answered {other}: {}",
                first.text()
            ),
        };
        let again = server.post_idempotent(BATCH, &admin_token, key, body);
        assert_eq!(again.status, first.status, "{key}: {}", again.text());
        if first.status == 200 {
            assert_eq!(
                again.body, first.body,
                "{key}: the second retry replays the first"
            );
        }
        fates.push((*in_shard, fate));
    }
    assert!(retried > 0, "the kill cut no batch: nothing was retried");

    let count = |in_shard: bool, fate: Fate| {
        let n = fates.iter().filter(|f| **f == (in_shard, fate)).count();
        Decimal::from(n as u64)
    };
    // Every wallet started with 1000.00 and takes part in one kind of batch only.
    let change = |customer: &Customer| balance(&server, customer.wallet_id) - dec("1000.00");
    let inside_runs = -change(&p) / dec("0.30");
    let across_runs = -change(&a) / dec("0.10");
    assert!(
        inside_runs.fract().is_zero() && across_runs.fract().is_zero(),
        "a batch was half applied: {inside_runs} inside, {across_runs} across"
    );
    assert_eq!(change(&q), inside_runs * dec("0.30"));
    assert_eq!(change(&b), across_runs * dec("0.10"));
    for (wallet, what) in [(&c, "sent"), (&d, "received")] {
        assert_eq!(
            change(wallet).abs(),
            across_runs * dec("0.20"),
            "an atomic batch across shards was half applied: c→d {what} another amount than a→b"
        );
    }
    for (in_shard, runs) in [(true, inside_runs), (false, across_runs)] {
        let posted = count(in_shard, Fate::Posted);
        let interrupted = count(in_shard, Fate::Interrupted);
        assert!(
            posted <= runs && runs <= posted + interrupted,
            "inside shard 0: {in_shard}; {runs} ran, {posted} posted, {interrupted} interrupted"
        );
    }
    let after: Decimal = wallets.iter().map(|w| balance(&server, w.wallet_id)).sum();
    assert_eq!(after, initial, "money was created or destroyed");
    stop_and_verify_replay(&mut server);
}
