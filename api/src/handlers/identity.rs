//! Registration, login, tokens, and the platform admin's identity routes (decisions.md §2).

use engine::identity::directory::{Customer, DirectoryCommand, DirectoryEvent, Employee, Role};
use engine::Currency;
use hyper::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::call::{engine_error, ok, Call, Handled};
use crate::app::SharedApp;
use crate::auth::token::{Claims, AUDIENCE, ISSUER};
use crate::auth::{Principal, Subject, Tier, PLATFORM_BUSINESS_ID};
use crate::error::ApiError;
use crate::views::{envelope, timestamp, wallet, WalletJson};

/// `data` of register and customer login (decisions.md §2).
#[derive(Serialize)]
struct CustomerAuth {
    token: String,
    token_type: &'static str,
    expires_in: i64,
    customer: Value,
    wallet: Option<WalletJson>,
}

/// `data` of employee login.
#[derive(Serialize)]
struct EmployeeAuth {
    token: String,
    token_type: &'static str,
    expires_in: i64,
    employee: Value,
}

/// Loads the principal of a token's subject; `None` when the subject does not exist.
pub async fn load_principal(
    app: &SharedApp,
    subject: Subject,
) -> Result<Option<Principal>, ApiError> {
    app.engine
        .read_directory(move |d| match subject {
            Subject::Customer(id) => d.customer(id).map(|_| Principal {
                subject,
                business_id: PLATFORM_BUSINESS_ID,
                roles: Vec::new(),
            }),
            Subject::Employee(id) => d.employee(id).map(|e| Principal {
                subject,
                business_id: e.business_id,
                roles: e.roles.clone(),
            }),
        })
        .await
        .map_err(engine_error)
}

fn valid_phone(phone: &str) -> bool {
    phone.strip_prefix('+').is_some_and(|digits| {
        (7..=15).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())
    })
}

/// The strength rule of every password, the bootstrap admin's included (decisions.md §2).
pub fn check_password(password: &str) -> Result<(), ApiError> {
    let chars = password.chars().count();
    if (8..=128).contains(&chars) {
        Ok(())
    } else {
        Err(ApiError::invalid_field(
            "password",
            "must be 8 to 128 characters",
        ))
    }
}

fn check_name(field: &str, name: &str) -> Result<(), ApiError> {
    if name.trim().is_empty() || name.len() > 256 {
        return Err(ApiError::invalid_field(
            field,
            "must be 1 to 256 characters",
        ));
    }
    Ok(())
}

fn check_email(email: Option<&str>) -> Result<(), ApiError> {
    match email {
        Some(email)
            if email.len() > 256
                || !email.contains('@')
                || email.starts_with('@')
                || email.ends_with('@') =>
        {
            Err(ApiError::invalid_field("email", "must be an email address"))
        }
        _ => Ok(()),
    }
}

/// Mints a token for `principal`.
fn issue(app: &SharedApp, principal: &Principal) -> String {
    let now = app.now_secs();
    let claims = Claims {
        sub: principal.subject.to_sub(),
        business_id: principal.business_id,
        roles: principal
            .roles
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
        iat: now,
        exp: now + app.token_ttl_secs,
        jti: crate::request_id::generate_request_id(),
        iss: ISSUER.into(),
        aud: AUDIENCE.into(),
    };
    app.known_subjects
        .insert(principal.subject, principal.clone());
    app.tokens.sign(&claims)
}

fn customer_json(customer: &Customer) -> Value {
    json!({
        "id": customer.id,
        "name": customer.name,
        "phone": customer.phone,
        "email": customer.email,
        "created_at": timestamp(customer.created_at_ms),
    })
}

pub fn employee_json(employee: &Employee) -> Value {
    json!({
        "id": employee.id,
        "business_id": employee.business_id,
        "branch_id": employee.branch_id,
        "name": employee.name,
        "email": employee.email,
        "phone": employee.phone,
        "roles": employee.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
        "created_at": timestamp(employee.created_at_ms),
    })
}

#[derive(Deserialize)]
struct Register {
    name: String,
    phone: String,
    password: String,
    #[serde(default)]
    email: Option<String>,
}

pub async fn register_customer(app: &SharedApp, call: &Call) -> Handled {
    let body: Register = call.json()?;
    check_name("name", &body.name)?;
    if !valid_phone(&body.phone) {
        return Err(ApiError::invalid_field(
            "phone",
            "must be + followed by 7 to 15 digits",
        ));
    }
    check_password(&body.password)?;
    check_email(body.email.as_deref())?;
    let taken = app
        .engine
        .read_directory({
            let phone = body.phone.clone();
            move |d| d.customer_by_phone(&phone).is_some()
        })
        .await
        .map_err(engine_error)?;
    if taken {
        return Err(ApiError::conflict(
            "duplicate",
            "a customer with this phone is already registered",
        ));
    }
    let hash = app.hasher.hash(body.password).await?;
    let currency = Currency::from_code(engine::runtime::recovery::PRIMARY_CURRENCY)
        .map_err(|_| ApiError::internal())?;
    let (customer, primary) = app
        .engine
        .register_customer(body.name, body.phone, body.email, hash, currency)
        .await
        .map_err(engine_error)?;
    let principal = Principal {
        subject: Subject::Customer(customer.id),
        business_id: PLATFORM_BUSINESS_ID,
        roles: Vec::new(),
    };
    let data = CustomerAuth {
        token: issue(app, &principal),
        token_type: "Bearer",
        expires_in: app.token_ttl_secs,
        customer: customer_json(&customer),
        wallet: Some(wallet(&primary)),
    };
    ok(
        StatusCode::CREATED,
        &envelope(data, Some("Customer registered")),
    )
}

#[derive(Deserialize)]
struct CustomerLogin {
    phone: String,
    password: String,
}

pub async fn login_customer(app: &SharedApp, call: &Call) -> Handled {
    let body: CustomerLogin = call.json()?;
    let account = format!("customer:{}", body.phone);
    refuse_locked(app, &account)?;
    let phone = body.phone.clone();
    let found = app
        .engine
        .read_directory(move |d| d.customer_by_phone(&phone).cloned())
        .await
        .map_err(engine_error)?;
    let verified = app
        .hasher
        .verify(
            body.password,
            found.as_ref().map(|c| c.password_hash.clone()),
        )
        .await?;
    let (Some(customer), true) = (found, verified) else {
        app.failed_logins
            .record_failure(&account, std::time::Instant::now());
        return Err(ApiError::unauthorized());
    };
    let primary = primary_wallet(app, customer.id).await?;
    let principal = Principal {
        subject: Subject::Customer(customer.id),
        business_id: PLATFORM_BUSINESS_ID,
        roles: Vec::new(),
    };
    let data = CustomerAuth {
        token: issue(app, &principal),
        token_type: "Bearer",
        expires_in: app.token_ttl_secs,
        customer: customer_json(&customer),
        wallet: primary.map(|w| wallet(&w)),
    };
    ok(StatusCode::OK, &envelope(data, Some("Logged in")))
}

/// 429 while `account` has too many recent failed logins (decisions.md §2; auth/lockout.rs).
fn refuse_locked(app: &SharedApp, account: &str) -> Result<(), ApiError> {
    match app
        .failed_logins
        .locked_for(account, std::time::Instant::now())
    {
        None => Ok(()),
        Some(seconds) => Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_failed_logins",
            format!(
                "{} failed logins within {} minutes: this account's logins are refused for {seconds} s",
                crate::auth::lockout::FAILURES_MAX,
                crate::auth::lockout::WINDOW.as_secs() / 60
            ),
        )
        .with_header("retry-after", seconds.to_string())),
    }
}

async fn primary_wallet(
    app: &SharedApp,
    customer_id: u64,
) -> Result<Option<engine::ledger::view::WalletView>, ApiError> {
    let currency = Currency::from_code(engine::runtime::recovery::PRIMARY_CURRENCY)
        .map_err(|_| ApiError::internal())?;
    let shard = engine::runtime::owner_shard(customer_id, app.engine.shard_count());
    app.engine
        .read_shard(shard, move |s| {
            let id = s.wallet_of_owner(
                engine::ledger::wallet::OwnerType::Customer,
                customer_id,
                currency,
                engine::ledger::wallet::WalletType::Primary,
            )?;
            s.wallet_view(id).ok()
        })
        .await
        .map_err(engine_error)
}

#[derive(Deserialize)]
struct EmployeeLogin {
    business_id: u64,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    phone: Option<String>,
    password: String,
}

pub async fn login_employee(app: &SharedApp, call: &Call) -> Handled {
    let body: EmployeeLogin = call.json()?;
    let Some(login) = body.email.clone().or(body.phone.clone()) else {
        return Err(ApiError::invalid_field(
            "email",
            "email or phone is required",
        ));
    };
    let business_id = body.business_id;
    let account = format!("employee:{business_id}:{}", login.to_lowercase());
    refuse_locked(app, &account)?;
    let found = app
        .engine
        .read_directory(move |d| d.employee_by_login(business_id, &login).cloned())
        .await
        .map_err(engine_error)?;
    let verified = app
        .hasher
        .verify(
            body.password,
            found.as_ref().map(|e| e.password_hash.clone()),
        )
        .await?;
    let (Some(employee), true) = (found, verified) else {
        app.failed_logins
            .record_failure(&account, std::time::Instant::now());
        return Err(ApiError::unauthorized());
    };
    let principal = Principal {
        subject: Subject::Employee(employee.id),
        business_id: employee.business_id,
        roles: employee.roles.clone(),
    };
    let data = EmployeeAuth {
        token: issue(app, &principal),
        token_type: "Bearer",
        expires_in: app.token_ttl_secs,
        employee: employee_json(&employee),
    };
    ok(StatusCode::OK, &envelope(data, Some("Logged in")))
}

#[derive(Deserialize)]
struct CreateBusiness {
    name: String,
    #[serde(default)]
    is_merchant: bool,
}

pub async fn create_business(app: &SharedApp, call: &Call) -> Handled {
    call.principal()?.require_tier(Tier::PlatformAdmin)?;
    let body: CreateBusiness = call.json()?;
    check_name("name", &body.name)?;
    let event = app
        .engine
        .directory(DirectoryCommand::CreateBusiness {
            name: body.name,
            is_merchant: body.is_merchant,
        })
        .await
        .map_err(engine_error)?;
    let DirectoryEvent::BusinessCreated(business) = event else {
        return Err(ApiError::internal());
    };
    let data = json!({
        "id": business.id,
        "name": business.name,
        "is_merchant": business.is_merchant,
        "created_at": timestamp(business.created_at_ms),
    });
    ok(StatusCode::CREATED, &envelope(data, None))
}

#[derive(Deserialize)]
struct CreateEmployee {
    business_id: u64,
    name: String,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    phone: Option<String>,
    password: String,
    roles: Vec<String>,
    #[serde(default)]
    branch_id: Option<u64>,
}

pub async fn create_employee(app: &SharedApp, call: &Call) -> Handled {
    call.principal()?.require_tier(Tier::PlatformAdmin)?;
    let body: CreateEmployee = call.json()?;
    check_name("name", &body.name)?;
    check_email(body.email.as_deref())?;
    if let Some(phone) = &body.phone {
        if !valid_phone(phone) {
            return Err(ApiError::invalid_field(
                "phone",
                "must be + followed by 7 to 15 digits",
            ));
        }
    }
    if body.email.is_none() && body.phone.is_none() {
        return Err(ApiError::invalid_field(
            "email",
            "email or phone is required",
        ));
    }
    check_password(&body.password)?;
    let mut roles = Vec::new();
    for name in &body.roles {
        roles.push(
            Role::parse(name).ok_or_else(|| {
                ApiError::invalid_field("roles", format!("unknown role {name:?}"))
            })?,
        );
    }
    if roles.is_empty() {
        return Err(ApiError::invalid_field(
            "roles",
            "at least one role is required",
        ));
    }
    let password_hash = app.hasher.hash(body.password).await?;
    let command = DirectoryCommand::CreateEmployee {
        business_id: body.business_id,
        branch_id: body.branch_id.unwrap_or(0),
        name: body.name,
        email: body.email,
        phone: body.phone,
        roles,
        password_hash,
    };
    let event = app.engine.directory(command).await.map_err(engine_error)?;
    let DirectoryEvent::EmployeeCreated(employee) = event else {
        return Err(ApiError::internal());
    };
    ok(
        StatusCode::CREATED,
        &envelope(employee_json(&employee), None),
    )
}

/// First start on an empty data directory: the platform business (id 1) and its admin.
/// Returns the generated password when none was given, so `main` can print it once.
pub async fn bootstrap(
    engine: &engine::runtime::Engine,
    hasher: &crate::auth::password::Hasher,
    email: &str,
    password: Option<String>,
) -> Result<Option<String>, ApiError> {
    // Each step checks its own result, so a crash between them is finished on the next start.
    let has_platform = engine
        .read_directory(|d| d.business(PLATFORM_BUSINESS_ID).is_some())
        .await
        .map_err(engine_error)?;
    if !has_platform {
        engine
            .directory(DirectoryCommand::CreateBusiness {
                name: "Platform".into(),
                is_merchant: false,
            })
            .await
            .map_err(engine_error)?;
    }
    let login = email.to_owned();
    let has_admin = engine
        .read_directory(move |d| d.employee_by_login(PLATFORM_BUSINESS_ID, &login).is_some())
        .await
        .map_err(engine_error)?;
    if has_admin {
        return Ok(None);
    }
    let generated = password.is_none();
    let password = password.unwrap_or_else(random_password);
    let password_hash = hasher.hash(password.clone()).await?;
    engine
        .directory(DirectoryCommand::CreateEmployee {
            business_id: PLATFORM_BUSINESS_ID,
            branch_id: 0,
            name: "Platform admin".into(),
            email: Some(email.to_owned()),
            phone: None,
            roles: vec![Role::Admin],
            password_hash,
        })
        .await
        .map_err(engine_error)?;
    Ok(generated.then_some(password))
}

fn random_password() -> String {
    let mut bytes = [0u8; 18];
    let _ = getrandom::getrandom(&mut bytes);
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
