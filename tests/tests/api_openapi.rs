//! The served OpenAPI document against the route table and against live answers.
//!
//! - Every row of `operations!` in api/src/routes.rs (read as text: this package does not link
//!   `api`) is in `GET /v1/openapi.json` under its path and method with the same operationId,
//!   `x-tier`, `x-rate-class`, security, success status and path parameters; the document has no
//!   operation the table lacks.
//! - The server serves api/openapi.json as it is in the tree (a stale binary fails here).
//! - Every `$ref` resolves; the error-code enum and `info.description` name every code the engine
//!   and the API can answer.
//! - Live answers of many operations fit the success schema their operation documents, and error
//!   answers fit `Error`, with a small JSON Schema checker (type, const, enum, properties,
//!   required, additionalProperties, items, oneOf, $ref): the document matches views.rs.

use std::collections::BTreeSet;
use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{Server, PLATFORM_BUSINESS_ID};

const ROUTES: &str = include_str!("../../api/src/routes.rs");
const DOCUMENT: &str = include_str!("../../api/openapi.json");
const ENGINE_ERRORS: &str = include_str!("../../engine/src/values/error.rs");

/// Codes the API answers besides the engine's rejections (api/src/error.rs, handlers, server).
const API_CODES: [&str; 20] = [
    "malformed_json",
    "bad_request",
    "validation_failed",
    "unauthorized",
    "forbidden",
    "not_found",
    "payload_too_large",
    "rate_limited",
    "idempotency_key_reused",
    "request_in_progress",
    "method_not_allowed",
    "unknown_owner",
    "internal_error",
    "unavailable",
    "duplicate",
    "too_many_failed_logins",
    "too_many_connections",
    "request_timeout",
    "timeout",
    "busy",
];

#[derive(Debug)]
struct Row {
    method: String,
    path: String,
    operation_id: String,
    tier: String,
    rate: String,
    created: bool,
}

/// `Op => (METHOD, "path", "operationId", Tier, rate, created),` rows of the `operations!` call.
fn table() -> Vec<Row> {
    let start = ROUTES
        .find("operations! {")
        .expect("the operations! invocation in routes.rs");
    let block = &ROUTES[start..];
    let block = &block[..block.find("\n}").expect("end of the operations! block")];
    let rows: Vec<Row> = block
        .lines()
        .filter_map(|line| {
            let (_, rest) = line.split_once(" => (")?;
            let inner = rest.trim().strip_suffix("),")?;
            let fields: Vec<&str> = inner.split(',').map(str::trim).collect();
            let [method, path, id, tier, rate, created] = fields.as_slice() else {
                panic!("unexpected route row: {line}");
            };
            let unquote = |s: &str| s.trim_matches('"').to_owned();
            Some(Row {
                method: method.to_ascii_lowercase(),
                path: unquote(path),
                operation_id: unquote(id),
                tier: snake(tier),
                rate: match *rate {
                    "None" => "none".to_owned(),
                    "Some(PerMinute60)" => "60/min".to_owned(),
                    "Some(PerMinute20)" => "20/min".to_owned(),
                    "Some(PayApi)" => "pay_api".to_owned(),
                    "Some(PublicRate)" => "public".to_owned(),
                    "Some(Webhook)" => "webhook".to_owned(),
                    "Some(Scan)" => "scan".to_owned(),
                    other => panic!("unknown rate class {other} in: {line}"),
                },
                created: match *created {
                    "true" => true,
                    "false" => false,
                    other => panic!("unknown created flag {other} in: {line}"),
                },
            })
        })
        .collect();
    assert_eq!(
        rows.len(),
        block.matches(" => (").count(),
        "every row of the table parsed"
    );
    assert!(rows.len() >= 20, "only {} routes parsed", rows.len());
    rows
}

/// `CustomerOrBusiness` -> `customer_or_business`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The engine's rejection codes (`Self::X => "code"` in `Rejection::code`).
fn engine_codes() -> Vec<String> {
    let start = ENGINE_ERRORS
        .find("pub fn code(&self)")
        .expect("Rejection::code");
    let body = &ENGINE_ERRORS[start..];
    let body = &body[..body.find("\n    }\n").expect("end of Rejection::code")];
    body.lines()
        .filter_map(|line| line.split_once("=> \"").map(|(_, rest)| rest))
        .filter_map(|rest| rest.split_once('"').map(|(code, _)| code.to_owned()))
        .collect()
}

struct Fixture {
    server: Server,
    document: Value,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let response = server.get("/v1/openapi.json", None);
        assert_eq!(response.status, 200, "{}", response.text());
        assert_eq!(response.header("content-type"), Some("application/json"));
        let document = response.json();
        Fixture { server, document }
    })
}

fn resolve<'a>(document: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(pointer) => {
            let pointer = pointer.strip_prefix('#').expect("local $ref");
            let target = document
                .pointer(pointer)
                .unwrap_or_else(|| panic!("$ref {pointer} does not resolve"));
            resolve(document, target)
        }
        None => value,
    }
}

#[test]
fn every_route_of_the_table_is_documented_with_its_operation_id_tier_and_rate_class() {
    let f = fixture();
    let document = &f.document;
    assert_eq!(document["openapi"], json!("3.1.0"));
    assert_eq!(
        document["servers"][0]["url"],
        json!("http://127.0.0.1:8080")
    );
    let paths = document["paths"].as_object().expect("paths");
    let rows = table();
    let mut documented = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().expect("path item").keys() {
            documented.insert((method.clone(), path.clone()));
        }
    }
    let mut routed = BTreeSet::new();
    for row in &rows {
        routed.insert((row.method.clone(), row.path.clone()));
        let what = format!("{} {} ({})", row.method, row.path, row.operation_id);
        let operation = paths
            .get(&row.path)
            .and_then(|item| item.get(&row.method))
            .unwrap_or_else(|| panic!("{what} is missing from the document"));
        assert_eq!(operation["operationId"], json!(row.operation_id), "{what}");
        assert_eq!(operation["x-tier"], json!(row.tier), "{what}: x-tier");
        assert_eq!(
            operation["x-rate-class"],
            json!(row.rate),
            "{what}: x-rate-class"
        );
        let security = operation["security"].as_array().expect("security");
        if row.tier == "public" {
            assert!(security.is_empty(), "{what}: public routes need no token");
        } else {
            assert_eq!(
                security,
                &vec![json!({"bearerAuth": []})],
                "{what}: security"
            );
        }
        let success = if row.created { "201" } else { "200" };
        let responses = operation["responses"].as_object().expect("responses");
        assert!(
            responses.contains_key(success),
            "{what}: {success} documented"
        );
        let other = if row.created { "200" } else { "201" };
        assert!(!responses.contains_key(other), "{what}: {other} documented");
        for status in ["400", "401", "403", "404", "409", "422", "429", "500"] {
            assert!(
                responses.contains_key(status),
                "{what}: {status} documented"
            );
        }
        if row.method == "post" {
            assert!(responses.contains_key("413"), "{what}: 413 documented");
        }
        // Path parameters: each {name} of the path is declared, required, in: path.
        let declared: Vec<&Value> = operation["parameters"]
            .as_array()
            .map(|p| p.iter().map(|p| resolve(document, p)).collect())
            .unwrap_or_default();
        for name in row
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        {
            assert!(
                declared.iter().any(|p| p["in"] == json!("path")
                    && p["name"] == json!(name)
                    && p["required"] == json!(true)),
                "{what}: path parameter {name} declared"
            );
        }
        assert!(
            declared
                .iter()
                .any(|p| p["in"] == json!("header") && p["name"] == json!("X-Request-ID")),
            "{what}: X-Request-ID declared"
        );
    }
    let extra: Vec<_> = documented.difference(&routed).collect();
    assert!(extra.is_empty(), "documented but not routed: {extra:?}");
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.operation_id.as_str()).collect();
    assert_eq!(ids.len(), rows.len(), "operationIds are unique");
}

#[test]
fn the_server_serves_the_document_in_the_tree_and_every_ref_resolves() {
    let f = fixture();
    let in_tree: Value = serde_json::from_str(DOCUMENT).expect("api/openapi.json is JSON");
    // Not assert_eq: a mismatch would print two 100 KB documents.
    assert!(
        f.document == in_tree,
        "the server serves another api/openapi.json than the tree's (a stale walletd binary?)"
    );
    fn walk(document: &Value, value: &Value, refs: &mut usize) {
        match value {
            Value::Object(map) => {
                if let Some(pointer) = map.get("$ref") {
                    let pointer = pointer.as_str().expect("$ref is a string");
                    let local = pointer.strip_prefix('#').expect("local $ref");
                    assert!(
                        document.pointer(local).is_some(),
                        "{pointer} does not resolve"
                    );
                    *refs += 1;
                }
                map.values().for_each(|v| walk(document, v, refs));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(document, v, refs)),
            _ => {}
        }
    }
    let mut refs = 0;
    walk(&f.document, &f.document, &mut refs);
    assert!(refs > 100, "only {refs} $refs");
    let scheme = &f.document["components"]["securitySchemes"]["bearerAuth"];
    assert_eq!(scheme["type"], json!("http"));
    assert_eq!(scheme["scheme"], json!("bearer"));
    assert_eq!(scheme["bearerFormat"], json!("JWT"));
    let idempotency = &f.document["components"]["parameters"]["IdempotencyKey"];
    assert_eq!(idempotency["name"], json!("Idempotency-Key"));
    assert_eq!(idempotency["in"], json!("header"));
}

#[test]
fn every_error_code_is_listed_and_described() {
    let f = fixture();
    let engine = engine_codes();
    assert!(engine.len() >= 15, "parsed only {engine:?}");
    let listed: Vec<&str> = f.document["components"]["schemas"]["Error"]["properties"]["error"]
        ["properties"]["code"]["enum"]
        .as_array()
        .expect("error code enum")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let description = f.document["info"]["description"]
        .as_str()
        .expect("info.description");
    // wrong_shard is a routing bug: answered as internal_error, never shown.
    for code in engine
        .iter()
        .map(String::as_str)
        .filter(|c| *c != "wrong_shard")
        .chain(API_CODES)
    {
        assert!(
            listed.contains(&code),
            "{code} missing from the Error code enum"
        );
        assert!(
            description.contains(&format!("`{code}`")),
            "{code} missing from info.description"
        );
    }
    for decision in [
        "Idempotency-Key",
        "Idempotent-Replayed",
        "RateLimit-Limit",
        "Retry-After",
        "X-Request-ID",
        "1 MiB",
        "1e12",
        "\"10.00\"",
        "pay_api",
    ] {
        assert!(
            description.contains(decision),
            "{decision} missing from info.description"
        );
    }
}

/// Checks `value` against a JSON Schema subset; returns the first mismatch.
fn check(document: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(document, schema);
    if let Some(choices) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = choices
            .iter()
            .filter(|choice| check(document, choice, value, at).is_ok())
            .count();
        return match fits {
            1 => Ok(()),
            n => Err(format!("{at}: {value} fits {n} of oneOf")),
        };
    }
    if let Some(constant) = schema.get("const") {
        if constant != value {
            return Err(format!("{at}: {value} is not {constant}"));
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array) {
        if !allowed.contains(value) {
            return Err(format!("{at}: {value} not in {allowed:?}"));
        }
    }
    if let Some(types) = schema.get("type") {
        let types: Vec<&str> = match types {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => return Err(format!("{at}: bad type in schema")),
        };
        let fits = types.iter().any(|t| match *t {
            "null" => value.is_null(),
            "boolean" => value.is_boolean(),
            "integer" => value.is_i64() || value.is_u64(),
            "number" => value.is_number(),
            "string" => value.is_string(),
            "array" => value.is_array(),
            "object" => value.is_object(),
            _ => false,
        });
        if !fits {
            return Err(format!("{at}: {value} is not {types:?}"));
        }
    }
    if let (Some(object), Some(properties)) = (
        value.as_object(),
        schema.get("properties").and_then(Value::as_object),
    ) {
        for required in schema["required"].as_array().into_iter().flatten() {
            let name = required.as_str().unwrap_or_default();
            if !object.contains_key(name) {
                return Err(format!("{at}: required {name} missing"));
            }
        }
        for (name, inner) in object {
            match properties.get(name) {
                Some(property) => check(document, property, inner, &format!("{at}.{name}"))?,
                None if schema.get("additionalProperties") == Some(&json!(false)) => {
                    return Err(format!("{at}: undocumented field {name}"))
                }
                None => {}
            }
        }
    }
    if let (Some(items), Some(schema)) = (value.as_array(), schema.get("items")) {
        for (i, item) in items.iter().enumerate() {
            check(document, schema, item, &format!("{at}[{i}]"))?;
        }
    }
    Ok(())
}

/// Asserts `response` (to `method` `route`, the table's path) fits what the document says.
fn conforms(f: &Fixture, method: &str, route: &str, response: &Response) {
    let operation = &f.document["paths"][route][method];
    assert!(operation.is_object(), "{method} {route} is not documented");
    let documented = &operation["responses"][response.status.to_string()];
    assert!(
        documented.is_object(),
        "{method} {route}: status {} is not documented: {}",
        response.status,
        response.text()
    );
    let documented = resolve(&f.document, documented);
    let schema = &documented["content"]["application/json"]["schema"];
    if let Err(mismatch) = check(&f.document, schema, &response.json(), "body") {
        panic!(
            "{method} {route} {}: {mismatch}\n{}",
            response.status,
            response.text()
        );
    }
    for (name, _) in documented["headers"].as_object().into_iter().flatten() {
        if name == "X-Request-ID" {
            assert!(response.header(name).is_some(), "{method} {route}: {name}");
        }
    }
}

#[test]
fn live_answers_fit_their_documented_schemas() {
    let f = fixture();
    let s = &f.server;
    let admin = s.admin_token();
    conforms(f, "get", "/v1/health", &s.get("/v1/health", None));

    let register = s.post(
        "/v1/auth/customer/register",
        None,
        &json!({"name": "Doc", "phone": "+967799000001", "password": "long enough password"})
            .to_string(),
    );
    conforms(f, "post", "/v1/auth/customer/register", &register);
    let customer = register.json()["data"]["customer"]["id"]
        .as_u64()
        .expect("id");
    let customer_token = register.json()["data"]["token"]
        .as_str()
        .expect("token")
        .to_owned();
    let wallet = register.json()["data"]["wallet"]["id"]
        .as_u64()
        .expect("id");
    conforms(
        f,
        "post",
        "/v1/auth/customer/login",
        &s.post(
            "/v1/auth/customer/login",
            None,
            r#"{"phone": "+967799000001", "password": "long enough password"}"#,
        ),
    );
    let business = s.post(
        "/v1/admin/businesses",
        Some(&admin),
        r#"{"name": "Doc Co", "is_merchant": false}"#,
    );
    conforms(f, "post", "/v1/admin/businesses", &business);
    let employee = s.post(
        "/v1/admin/employees",
        Some(&admin),
        &json!({"business_id": PLATFORM_BUSINESS_ID, "name": "Doc", "email": "doc@walletd.test",
                "password": "long enough password", "roles": ["operator", "finance", "restricted_auditor", "restricted_finance", "restricted_operator"]})
        .to_string(),
    );
    conforms(f, "post", "/v1/admin/employees", &employee);
    let login = s.post(
        "/v1/auth/employee/login",
        None,
        &json!({"business_id": PLATFORM_BUSINESS_ID, "email": "doc@walletd.test", "password": "long enough password"})
            .to_string(),
    );
    conforms(f, "post", "/v1/auth/employee/login", &login);
    let staff = login.json()["data"]["token"]
        .as_str()
        .expect("token")
        .to_owned();

    let w = |suffix: &str| format!("/v1/wallets/{wallet}{suffix}");
    let deposit = s.post(
        &w("/deposit"),
        Some(&staff),
        r#"{"amount": 100.5, "description": "doc"}"#,
    );
    conforms(f, "post", "/v1/wallets/{walletId}/deposit", &deposit);
    let withdraw = s.post(&w("/withdraw"), Some(&staff), r#"{"amount": 10}"#);
    conforms(f, "post", "/v1/wallets/{walletId}/withdraw", &withdraw);
    let debit = withdraw.json()["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    conforms(
        f,
        "post",
        "/v1/wallets/refund",
        &s.post(
            "/v1/wallets/refund",
            Some(&staff),
            &json!({"original_transaction_uuid": debit, "amount": 1}).to_string(),
        ),
    );
    let created = s.post(
        "/v1/wallets",
        Some(&staff),
        &json!({"owner_type": "customer", "owner_id": customer, "currency_code": "USD"})
            .to_string(),
    );
    conforms(f, "post", "/v1/wallets", &created);
    conforms(
        f,
        "post",
        "/v1/wallets/users",
        &s.post(
            "/v1/wallets/users",
            Some(&staff),
            &json!({"customer_id": customer, "currency_code": "EUR"}).to_string(),
        ),
    );
    let other = s.register_customer();
    conforms(
        f,
        "post",
        "/v1/transfers",
        &s.post(
            "/v1/transfers",
            Some(&customer_token),
            &json!({"from_wallet_id": wallet, "to_wallet_id": other.wallet_id, "amount": 5, "currency_code": "YER"})
                .to_string(),
        ),
    );
    let hold = s.post(
        "/v1/wallets/hold",
        Some(&staff),
        &json!({"wallet_id": wallet, "amount": 3, "currency_code": "YER", "reason": "doc"})
            .to_string(),
    );
    conforms(f, "post", "/v1/wallets/hold", &hold);
    let hold_uuid = hold.json()["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    conforms(
        f,
        "post",
        "/v1/wallets/holds/{holdUuid}/capture",
        &s.post(
            &format!("/v1/wallets/holds/{hold_uuid}/capture"),
            Some(&staff),
            r#"{"amount": 1}"#,
        ),
    );
    let second = s.post(
        "/v1/wallets/hold",
        Some(&staff),
        &json!({"wallet_id": wallet, "amount": 2, "currency_code": "YER"}).to_string(),
    );
    let second = second.json()["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    conforms(
        f,
        "post",
        "/v1/wallets/holds/{holdUuid}/release",
        &s.post(
            &format!("/v1/wallets/holds/{second}/release"),
            Some(&staff),
            "",
        ),
    );
    let reverse = s.post(
        "/v1/wallets/reverse",
        Some(&staff),
        &json!({"transaction_uuid": debit, "reason": "doc"}).to_string(),
    );
    conforms(f, "post", "/v1/wallets/reverse", &reverse);
    conforms(
        f,
        "post",
        "/v1/wallets/{walletId}/freeze",
        &s.post(&w("/freeze"), Some(&staff), ""),
    );
    conforms(
        f,
        "post",
        "/v1/wallets/{walletId}/unfreeze",
        &s.post(&w("/unfreeze"), Some(&staff), ""),
    );

    for (route, suffix, token) in [
        ("/v1/wallets", None, &customer_token),
        ("/v1/wallets", None, &staff),
        ("/v1/wallets/{walletId}", Some(""), &customer_token),
        (
            "/v1/wallets/{walletId}/balance",
            Some("/balance"),
            &customer_token,
        ),
        (
            "/v1/wallets/{walletId}/transactions",
            Some("/transactions"),
            &customer_token,
        ),
        (
            "/v1/wallets/{walletId}/holds",
            Some("/holds"),
            &customer_token,
        ),
        ("/v1/wallets/{walletId}/ledger", Some("/ledger"), &staff),
        (
            "/v1/wallets/{walletId}/statement",
            Some("/statement"),
            &customer_token,
        ),
        (
            "/v1/wallets/{walletId}/verify-integrity",
            Some("/verify-integrity"),
            &staff,
        ),
    ] {
        let path = suffix.map_or_else(|| route.to_owned(), &w);
        conforms(f, "get", route, &s.get(&path, Some(token)));
    }

    // Errors fit the Error schema under the status their operation documents.
    for (method, route, path, token, body, status) in [
        (
            "post",
            "/v1/wallets/{walletId}/withdraw",
            w("/withdraw"),
            Some(&staff),
            r#"{"amount": 100000}"#,
            422,
        ),
        (
            "post",
            "/v1/wallets/{walletId}/deposit",
            w("/deposit"),
            Some(&staff),
            r#"{"amount": "1"}"#,
            422,
        ),
        (
            "post",
            "/v1/wallets/{walletId}/deposit",
            w("/deposit"),
            Some(&staff),
            r#"{"amount": "#,
            400,
        ),
        (
            "post",
            "/v1/wallets/{walletId}/deposit",
            w("/deposit"),
            None,
            r#"{"amount": 1}"#,
            401,
        ),
        (
            "post",
            "/v1/wallets/{walletId}/deposit",
            w("/deposit"),
            Some(&customer_token),
            r#"{"amount": 1}"#,
            403,
        ),
        (
            "get",
            "/v1/wallets/{walletId}",
            "/v1/wallets/99999".to_owned(),
            Some(&staff),
            "",
            404,
        ),
        (
            "post",
            "/v1/wallets/{walletId}/unfreeze",
            w("/unfreeze"),
            Some(&staff),
            "",
            409,
        ),
    ] {
        let response = s.request(
            &method.to_ascii_uppercase(),
            &path,
            token.map(String::as_str),
            &[],
            (method == "post").then_some(body.as_bytes()),
        );
        assert_eq!(
            response.status,
            status,
            "{method} {path} {body}: {}",
            response.text()
        );
        conforms(f, method, route, &response);
    }
}
