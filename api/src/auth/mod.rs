//! Who is calling, and may they (decisions.md §2).
//!
//! A request's bearer token is verified ([`token`]) and turned into a typed [`Principal`] before
//! any handler runs. Handlers then ask [`Principal::require`] with the tier of their route and
//! the scope of the resource they touch: the business that owns it and, for wallets, the owner.
//!
//! Tiers: `public` anyone; `authenticated` any valid token; `customer_or_business` a customer on
//! their own wallets or an employee of the wallet's business; `business_operator` role operator;
//! `business_finance` role finance; `merchant` role merchant or merchant_finance of the merchant
//! business; `merchant_finance` role merchant_finance; each `restricted_*` its own role. `admin`
//! holds every tier inside its own business; a platform admin (admin of business 1) also manages
//! identities. A customer asking about a wallet that is not theirs gets 404, not 403: revealing
//! that the wallet exists would leak another owner's data.

pub mod lockout;
pub mod password;
pub mod token;
pub mod verified;

use engine::identity::directory::Role;
use engine::ledger::view::WalletView;
use engine::ledger::wallet::OwnerType;

use crate::error::ApiError;

/// The platform business: owns customer wallets; its admins manage identities.
pub const PLATFORM_BUSINESS_ID: u64 = 1;

/// Access tiers of the contract (part 5), plus the platform-admin tier of the admin routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tier {
    Public,
    Authenticated,
    CustomerOrBusiness,
    BusinessOperator,
    BusinessFinance,
    Merchant,
    MerchantFinance,
    RestrictedOperator,
    RestrictedApprover,
    RestrictedAuditor,
    RestrictedFinance,
    PlatformAdmin,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Public => "public",
            Tier::Authenticated => "authenticated",
            Tier::CustomerOrBusiness => "customer_or_business",
            Tier::BusinessOperator => "business_operator",
            Tier::BusinessFinance => "business_finance",
            Tier::Merchant => "merchant",
            Tier::MerchantFinance => "merchant_finance",
            Tier::RestrictedOperator => "restricted_operator",
            Tier::RestrictedApprover => "restricted_approver",
            Tier::RestrictedAuditor => "restricted_auditor",
            Tier::RestrictedFinance => "restricted_finance",
            Tier::PlatformAdmin => "platform_admin",
        }
    }

    /// The employee roles that grant this tier (admin grants every tier in its business).
    fn roles(self) -> &'static [Role] {
        match self {
            Tier::Public | Tier::Authenticated | Tier::CustomerOrBusiness => &[],
            Tier::BusinessOperator => &[Role::Operator],
            Tier::BusinessFinance => &[Role::Finance],
            Tier::Merchant => &[Role::Merchant, Role::MerchantFinance],
            Tier::MerchantFinance => &[Role::MerchantFinance],
            Tier::RestrictedOperator => &[Role::RestrictedOperator],
            Tier::RestrictedApprover => &[Role::RestrictedApprover],
            Tier::RestrictedAuditor => &[Role::RestrictedAuditor],
            Tier::RestrictedFinance => &[Role::RestrictedFinance],
            Tier::PlatformAdmin => &[],
        }
    }
}

/// The subject of a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject {
    Customer(u64),
    Employee(u64),
}

impl Subject {
    /// `customer:{id}` or `employee:{id}`: the token's `sub` and the idempotency/rate-limit caller.
    pub fn to_sub(self) -> String {
        match self {
            Subject::Customer(id) => format!("customer:{id}"),
            Subject::Employee(id) => format!("employee:{id}"),
        }
    }

    pub fn parse(sub: &str) -> Option<Subject> {
        let (kind, id) = sub.split_once(':')?;
        let id: u64 = id.parse().ok()?;
        match kind {
            "customer" => Some(Subject::Customer(id)),
            "employee" => Some(Subject::Employee(id)),
            _ => None,
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub subject: Subject,
    pub business_id: u64,
    pub roles: Vec<Role>,
}

/// What a resource belongs to, for scope checks.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub business_id: u64,
    /// For wallets: the owner, so a customer may act on their own wallet.
    pub customer_id: Option<u64>,
}

impl Scope {
    pub fn of_wallet(wallet: &WalletView) -> Self {
        Scope {
            business_id: wallet.business_id,
            customer_id: (wallet.owner_type == OwnerType::Customer).then_some(wallet.owner_id),
        }
    }

    /// The scope of a wallet from its never-changing facts (see `Engine::wallet_scope`).
    pub fn of_wallet_scope(wallet: &engine::runtime::WalletScope) -> Self {
        Scope {
            business_id: wallet.business_id,
            customer_id: (wallet.owner_type == OwnerType::Customer).then_some(wallet.owner_id),
        }
    }

    pub fn business(business_id: u64) -> Self {
        Scope {
            business_id,
            customer_id: None,
        }
    }
}

impl Principal {
    /// The caller's name for idempotency keys and rate limits.
    pub fn caller(&self) -> String {
        self.subject.to_sub()
    }

    pub fn customer_id(&self) -> Option<u64> {
        match self.subject {
            Subject::Customer(id) => Some(id),
            Subject::Employee(_) => None,
        }
    }

    pub fn has_role(&self, role: Role) -> bool {
        self.roles.contains(&role)
    }

    pub fn is_admin(&self) -> bool {
        self.has_role(Role::Admin)
    }

    pub fn is_platform_admin(&self) -> bool {
        self.is_admin()
            && self.business_id == PLATFORM_BUSINESS_ID
            && matches!(self.subject, Subject::Employee(_))
    }

    /// Whether the caller's roles grant `tier`, scope aside.
    pub fn grants(&self, tier: Tier) -> bool {
        match (self.subject, tier) {
            (_, Tier::Public | Tier::Authenticated) => true,
            (Subject::Customer(_), Tier::CustomerOrBusiness) => true,
            (Subject::Customer(_), _) => false,
            (Subject::Employee(_), Tier::PlatformAdmin) => self.is_platform_admin(),
            (Subject::Employee(_), Tier::CustomerOrBusiness) => true,
            (Subject::Employee(_), tier) => {
                self.is_admin() || tier.roles().iter().any(|r| self.has_role(*r))
            }
        }
    }

    /// Checks the tier and the scope of the resource. Customers get 404 for what is not theirs.
    pub fn require(&self, tier: Tier, scope: Scope) -> Result<(), ApiError> {
        match self.subject {
            Subject::Customer(id) => {
                if scope.customer_id != Some(id) {
                    return Err(ApiError::not_found("wallet"));
                }
                if !self.grants(tier) {
                    return Err(ApiError::forbidden(format!(
                        "this operation needs the {} tier",
                        tier.name()
                    )));
                }
                Ok(())
            }
            Subject::Employee(_) => {
                // Even a platform admin stays inside its business here (decisions.md §6: only
                // reports may cross businesses, and they check that themselves).
                if self.business_id != scope.business_id {
                    return Err(ApiError::forbidden(
                        "the resource belongs to another business",
                    ));
                }
                if !self.grants(tier) {
                    return Err(ApiError::forbidden(format!(
                        "this operation needs the {} tier",
                        tier.name()
                    )));
                }
                Ok(())
            }
        }
    }

    /// May the caller move money out of `wallet` on its owner's behalf (a transfer from it;
    /// initiating, confirming or cancelling a payment from it)? decisions.md §2: the customer
    /// who owns it, and among employees of the wallet's business only admin, operator and finance
    /// (and merchant_finance on its own merchant's wallets). Every other role only reads: 403.
    /// A customer asking about another's wallet gets 404, as everywhere.
    pub fn require_money_out(&self, wallet: &engine::runtime::WalletScope) -> Result<(), ApiError> {
        self.require(Tier::CustomerOrBusiness, Scope::of_wallet_scope(wallet))?;
        if let Subject::Customer(_) = self.subject {
            return Ok(());
        }
        let staff = [Role::Admin, Role::Operator, Role::Finance]
            .iter()
            .any(|role| self.has_role(*role));
        let merchant_finance =
            wallet.owner_type == OwnerType::Merchant && self.has_role(Role::MerchantFinance);
        if staff || merchant_finance {
            Ok(())
        } else {
            Err(ApiError::forbidden(
                "moving money out of a wallet needs the role admin, operator or finance (merchant_finance on its merchant's wallets)",
            ))
        }
    }

    /// Checks only the role part of a tier (for routes whose scope is checked later).
    pub fn require_tier(&self, tier: Tier) -> Result<(), ApiError> {
        if self.grants(tier) {
            Ok(())
        } else {
            Err(ApiError::forbidden(format!(
                "this operation needs the {} tier",
                tier.name()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn employee(business_id: u64, roles: &[Role]) -> Principal {
        Principal {
            subject: Subject::Employee(5),
            business_id,
            roles: roles.to_vec(),
        }
    }

    #[test]
    fn tiers_follow_roles_and_admin_holds_all_inside_its_business() {
        let operator = employee(2, &[Role::Operator]);
        assert!(operator
            .require(Tier::BusinessOperator, Scope::business(2))
            .is_ok());
        assert_eq!(
            operator
                .require(Tier::BusinessFinance, Scope::business(2))
                .unwrap_err()
                .status
                .as_u16(),
            403
        );
        assert_eq!(
            operator
                .require(Tier::BusinessOperator, Scope::business(3))
                .unwrap_err()
                .status
                .as_u16(),
            403
        );
        let admin = employee(2, &[Role::Admin]);
        assert!(admin
            .require(Tier::RestrictedAuditor, Scope::business(2))
            .is_ok());
        assert!(admin
            .require(Tier::RestrictedAuditor, Scope::business(3))
            .is_err());
        assert!(!admin.grants(Tier::PlatformAdmin));
        let platform = employee(1, &[Role::Admin]);
        assert!(platform.grants(Tier::PlatformAdmin));
        assert_eq!(
            platform
                .require(Tier::BusinessFinance, Scope::business(3))
                .unwrap_err()
                .status
                .as_u16(),
            403,
            "a platform admin does not act on another business's wallets"
        );
    }

    #[test]
    fn customers_reach_only_their_own_wallets() {
        let customer = Principal {
            subject: Subject::Customer(7),
            business_id: 1,
            roles: vec![],
        };
        let own = Scope {
            business_id: 1,
            customer_id: Some(7),
        };
        let other = Scope {
            business_id: 1,
            customer_id: Some(8),
        };
        assert!(customer.require(Tier::CustomerOrBusiness, own).is_ok());
        assert_eq!(
            customer
                .require(Tier::CustomerOrBusiness, other)
                .unwrap_err()
                .status
                .as_u16(),
            404
        );
        assert_eq!(
            customer
                .require(Tier::BusinessOperator, own)
                .unwrap_err()
                .status
                .as_u16(),
            403
        );
    }

    #[test]
    fn subjects_round_trip() {
        assert_eq!(Subject::parse("customer:12"), Some(Subject::Customer(12)));
        assert_eq!(
            Subject::parse(&Subject::Employee(3).to_sub()),
            Some(Subject::Employee(3))
        );
        assert_eq!(Subject::parse("robot:1"), None);
        assert_eq!(Subject::parse("customer:x"), None);
    }
}
