//! Identities: businesses, their employees with roles, and customers. Event-sourced like wallets.
//!
//! The directory is a small deterministic state machine hosted by shard 0's actor: its events go
//! into shard 0's journal entries and its state into shard 0's snapshot image. Passwords arrive
//! already hashed (Argon2id PHC strings, computed by the API off its async workers); the hash,
//! with its random salt, is in the event, so replay never rehashes.
//!
//! The platform bootstrap is an ordinary command: on an empty directory the API registers
//! business 1 (the platform) and its admin employee.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::values::error::{encode_versioned, DecodeError, EncodeError, Rejection};

/// Longest name, email or phone accepted, in bytes.
pub const IDENTITY_TEXT_MAX: usize = 256;

/// The roles an employee can hold (decisions.md §2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Admin,
    Operator,
    Finance,
    Merchant,
    MerchantFinance,
    RestrictedOperator,
    RestrictedApprover,
    RestrictedAuditor,
    RestrictedFinance,
}

impl Role {
    pub const ALL: [Role; 9] = [
        Role::Admin,
        Role::Operator,
        Role::Finance,
        Role::Merchant,
        Role::MerchantFinance,
        Role::RestrictedOperator,
        Role::RestrictedApprover,
        Role::RestrictedAuditor,
        Role::RestrictedFinance,
    ];

    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Finance => "finance",
            Role::Merchant => "merchant",
            Role::MerchantFinance => "merchant_finance",
            Role::RestrictedOperator => "restricted_operator",
            Role::RestrictedApprover => "restricted_approver",
            Role::RestrictedAuditor => "restricted_auditor",
            Role::RestrictedFinance => "restricted_finance",
        }
    }

    /// Parses a role name; `None` for anything else.
    #[must_use]
    pub fn parse(name: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|role| role.as_str() == name)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Business {
    pub id: u64,
    pub name: String,
    pub is_merchant: bool,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Employee {
    pub id: u64,
    pub business_id: u64,
    /// 0 = no branch.
    pub branch_id: u64,
    pub name: String,
    pub email: Option<String>,
    pub phone: Option<String>,
    pub roles: Vec<Role>,
    pub password_hash: String,
    pub created_at_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Customer {
    pub id: u64,
    pub name: String,
    pub phone: String,
    pub email: Option<String>,
    pub password_hash: String,
    pub created_at_ms: i64,
}

/// What can change the directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DirectoryEvent {
    BusinessCreated(Business),
    EmployeeCreated(Employee),
    CustomerRegistered(Customer),
}

/// Requests to the directory. Validation of formats (phone, password length) is the API's job;
/// the directory enforces uniqueness and references.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DirectoryCommand {
    CreateBusiness {
        name: String,
        is_merchant: bool,
    },
    CreateEmployee {
        business_id: u64,
        branch_id: u64,
        name: String,
        email: Option<String>,
        phone: Option<String>,
        roles: Vec<Role>,
        password_hash: String,
    },
    RegisterCustomer {
        name: String,
        phone: String,
        email: Option<String>,
        password_hash: String,
    },
}

/// The identities, with lookup indexes rebuilt on load.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Directory {
    businesses: BTreeMap<u64, Business>,
    employees: BTreeMap<u64, Employee>,
    customers: BTreeMap<u64, Customer>,
    #[serde(skip)]
    customer_by_phone: HashMap<String, u64>,
    #[serde(skip)]
    employee_by_login: HashMap<(u64, String), u64>,
}

fn text_ok(text: &str) -> bool {
    !text.trim().is_empty() && text.len() <= IDENTITY_TEXT_MAX
}

impl Directory {
    #[must_use]
    pub fn new() -> Self {
        Directory::default()
    }

    #[must_use]
    pub fn business(&self, id: u64) -> Option<&Business> {
        self.businesses.get(&id)
    }

    #[must_use]
    pub fn employee(&self, id: u64) -> Option<&Employee> {
        self.employees.get(&id)
    }

    #[must_use]
    pub fn customer(&self, id: u64) -> Option<&Customer> {
        self.customers.get(&id)
    }

    #[must_use]
    pub fn customer_by_phone(&self, phone: &str) -> Option<&Customer> {
        self.customer_by_phone
            .get(phone)
            .and_then(|id| self.customers.get(id))
    }

    /// An employee of `business_id` by email or phone.
    #[must_use]
    pub fn employee_by_login(&self, business_id: u64, login: &str) -> Option<&Employee> {
        self.employee_by_login
            .get(&(business_id, login.to_owned()))
            .and_then(|id| self.employees.get(id))
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.businesses.is_empty()
    }

    pub fn customers(&self) -> impl Iterator<Item = &Customer> {
        self.customers.values()
    }

    pub fn businesses(&self) -> impl Iterator<Item = &Business> {
        self.businesses.values()
    }

    fn next_id<T>(map: &BTreeMap<u64, T>) -> u64 {
        map.keys().next_back().map_or(1, |id| id + 1)
    }

    /// Decides the events of a command against the current state. Pure.
    pub fn decide(
        &self,
        command: &DirectoryCommand,
        now_ms: i64,
    ) -> Result<Vec<DirectoryEvent>, Rejection> {
        Ok(vec![match command {
            DirectoryCommand::CreateBusiness { name, is_merchant } => {
                if !text_ok(name) {
                    return Err(Rejection::InvalidRequest(
                        "business name must be 1 to 256 bytes",
                    ));
                }
                DirectoryEvent::BusinessCreated(Business {
                    id: Self::next_id(&self.businesses),
                    name: name.clone(),
                    is_merchant: *is_merchant,
                    created_at_ms: now_ms,
                })
            }
            DirectoryCommand::CreateEmployee {
                business_id,
                branch_id,
                name,
                email,
                phone,
                roles,
                password_hash,
            } => {
                if !text_ok(name)
                    || email.as_deref().is_some_and(|e| !text_ok(e))
                    || phone.as_deref().is_some_and(|p| !text_ok(p))
                {
                    return Err(Rejection::InvalidRequest(
                        "name, email and phone must be 1 to 256 bytes",
                    ));
                }
                if email.is_none() && phone.is_none() {
                    return Err(Rejection::InvalidRequest(
                        "an employee needs an email or a phone",
                    ));
                }
                if roles.is_empty() {
                    return Err(Rejection::InvalidRequest(
                        "an employee needs at least one role",
                    ));
                }
                if !self.businesses.contains_key(business_id) {
                    return Err(Rejection::NotFound("business"));
                }
                for login in email.iter().chain(phone.iter()) {
                    if self
                        .employee_by_login
                        .contains_key(&(*business_id, login.clone()))
                    {
                        return Err(Rejection::Duplicate("employee login"));
                    }
                }
                let mut roles = roles.clone();
                roles.sort();
                roles.dedup();
                DirectoryEvent::EmployeeCreated(Employee {
                    id: Self::next_id(&self.employees),
                    business_id: *business_id,
                    branch_id: *branch_id,
                    name: name.clone(),
                    email: email.clone(),
                    phone: phone.clone(),
                    roles,
                    password_hash: password_hash.clone(),
                    created_at_ms: now_ms,
                })
            }
            DirectoryCommand::RegisterCustomer {
                name,
                phone,
                email,
                password_hash,
            } => {
                if !text_ok(name)
                    || !text_ok(phone)
                    || email.as_deref().is_some_and(|e| !text_ok(e))
                {
                    return Err(Rejection::InvalidRequest(
                        "name, phone and email must be 1 to 256 bytes",
                    ));
                }
                if self.customer_by_phone.contains_key(phone) {
                    return Err(Rejection::Duplicate("customer phone"));
                }
                DirectoryEvent::CustomerRegistered(Customer {
                    id: Self::next_id(&self.customers),
                    name: name.clone(),
                    phone: phone.clone(),
                    email: email.clone(),
                    password_hash: password_hash.clone(),
                    created_at_ms: now_ms,
                })
            }
        }])
    }

    /// Applies one event. Deterministic; refuses an event that does not fit (corruption or bug).
    pub fn apply(
        &mut self,
        event: &DirectoryEvent,
    ) -> Result<(), crate::values::error::ApplyError> {
        use crate::values::error::ApplyError;
        match event {
            DirectoryEvent::BusinessCreated(business) => {
                if business.id != Self::next_id(&self.businesses) {
                    return Err(ApplyError::new("business id out of sequence", business.id));
                }
                self.businesses.insert(business.id, business.clone());
            }
            DirectoryEvent::EmployeeCreated(employee) => {
                if employee.id != Self::next_id(&self.employees)
                    || !self.businesses.contains_key(&employee.business_id)
                {
                    return Err(ApplyError::new(
                        "employee id out of sequence or unknown business",
                        employee.id,
                    ));
                }
                self.index_employee(employee);
                self.employees.insert(employee.id, employee.clone());
            }
            DirectoryEvent::CustomerRegistered(customer) => {
                if customer.id != Self::next_id(&self.customers)
                    || self.customer_by_phone.contains_key(&customer.phone)
                {
                    return Err(ApplyError::new(
                        "customer id out of sequence or phone taken",
                        customer.id,
                    ));
                }
                self.customer_by_phone
                    .insert(customer.phone.clone(), customer.id);
                self.customers.insert(customer.id, customer.clone());
            }
        }
        Ok(())
    }

    fn index_employee(&mut self, employee: &Employee) {
        for login in employee.email.iter().chain(employee.phone.iter()) {
            self.employee_by_login
                .insert((employee.business_id, login.clone()), employee.id);
        }
    }

    /// Serialises the directory (indexes are rebuilt on load), or says why it could not (a bug).
    pub fn to_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        // No version byte of its own: the image that holds it carries one.
        encode_versioned(self, &[], "directory")
    }

    /// Loads a directory written by [`Directory::to_bytes`]. Never panics.
    pub fn from_bytes(bytes: &[u8]) -> Result<Directory, DecodeError> {
        let (mut directory, rest): (Directory, &[u8]) =
            postcard::take_from_bytes(bytes).map_err(|e| DecodeError::Malformed(e.to_string()))?;
        if !rest.is_empty() {
            return Err(DecodeError::TrailingBytes(rest.len()));
        }
        let employees: Vec<Employee> = directory.employees.values().cloned().collect();
        for employee in &employees {
            directory.index_employee(employee);
        }
        directory.customer_by_phone = directory
            .customers
            .values()
            .map(|c| (c.phone.clone(), c.id))
            .collect();
        Ok(directory)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash() -> String {
        "$argon2id$v=19$m=19456,t=2,p=1$c2FsdA$aGFzaA".into()
    }

    #[test]
    fn ids_are_sequential_and_logins_unique() {
        let mut dir = Directory::new();
        let create = DirectoryCommand::CreateBusiness {
            name: "Platform".into(),
            is_merchant: false,
        };
        for event in dir.decide(&create, 1).unwrap() {
            dir.apply(&event).unwrap();
        }
        let employee = DirectoryCommand::CreateEmployee {
            business_id: 1,
            branch_id: 0,
            name: "Ada".into(),
            email: Some("ada@example.com".into()),
            phone: None,
            roles: vec![Role::Admin, Role::Admin],
            password_hash: hash(),
        };
        let events = dir.decide(&employee, 2).unwrap();
        dir.apply(&events[0]).unwrap();
        assert_eq!(
            dir.employee_by_login(1, "ada@example.com").unwrap().roles,
            vec![Role::Admin]
        );
        assert_eq!(
            dir.decide(&employee, 3),
            Err(Rejection::Duplicate("employee login"))
        );
        let DirectoryCommand::CreateEmployee {
            branch_id,
            name,
            email,
            phone,
            roles,
            password_hash,
            ..
        } = employee.clone()
        else {
            unreachable!()
        };
        let unknown_business = DirectoryCommand::CreateEmployee {
            business_id: 9,
            branch_id,
            name,
            email,
            phone,
            roles,
            password_hash,
        };
        assert_eq!(
            dir.decide(&unknown_business, 3),
            Err(Rejection::NotFound("business"))
        );
    }

    #[test]
    fn customers_are_unique_by_phone_and_survive_a_round_trip() {
        let mut dir = Directory::new();
        let register = DirectoryCommand::RegisterCustomer {
            name: "Sam".into(),
            phone: "+967700000001".into(),
            email: None,
            password_hash: hash(),
        };
        let events = dir.decide(&register, 5).unwrap();
        dir.apply(&events[0]).unwrap();
        assert_eq!(
            dir.decide(&register, 6),
            Err(Rejection::Duplicate("customer phone"))
        );
        let copy = Directory::from_bytes(&dir.to_bytes().unwrap()).unwrap();
        assert_eq!(copy.customer_by_phone("+967700000001").unwrap().id, 1);
        assert_eq!(copy, dir);
        // Replaying an event twice is refused, not silently doubled.
        assert!(dir.apply(&events[0]).is_err());
    }

    #[test]
    fn decoding_garbage_never_panics() {
        for len in 0..64u8 {
            let bytes: Vec<u8> = (0..len)
                .map(|i| i.wrapping_mul(37).wrapping_add(len))
                .collect();
            let _ = Directory::from_bytes(&bytes);
        }
    }
}
