//! Bearer tokens: JWTs signed with HS256, and nothing else.
//!
//! The service both mints and verifies its tokens, so HS256 with a 32-byte random secret is the
//! right tool (notes/dependencies.md §4). The algorithm is pinned: the header must be exactly
//! `{"alg":"HS256","typ":"JWT"}` in meaning, so `alg: none`, `RS256` key confusion and the like
//! are refused before any claim is read. The MAC is compared in constant time (`verify_slice`).
//! Hand-written on hmac + sha2 instead of jsonwebtoken: ~80 lines, no crypto backend to build.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Issuer and audience written into and required of every token.
pub const ISSUER: &str = "walletd";
pub const AUDIENCE: &str = "walletd-api";

/// What a token says about its bearer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// `customer:{id}` or `employee:{id}`.
    pub sub: String,
    pub business_id: u64,
    pub roles: Vec<String>,
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub iss: String,
    pub aud: String,
}

/// Why a token was refused. All of them answer 401; the reason goes to the log only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("token is not three base64url parts")]
    Malformed,
    #[error("token header is not HS256 JWT")]
    WrongAlgorithm,
    #[error("token signature does not verify")]
    BadSignature,
    #[error("token claims are malformed")]
    BadClaims,
    #[error("token has expired")]
    Expired,
    #[error("token issuer or audience is wrong")]
    WrongAudience,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    typ: Option<String>,
}

/// Signs and verifies tokens with one HS256 key.
#[derive(Clone)]
pub struct TokenKey {
    key: Vec<u8>,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

const HEADER_B64: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"; // {"alg":"HS256","typ":"JWT"}

impl TokenKey {
    pub fn new(key: Vec<u8>) -> Self {
        TokenKey { key }
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length; this cannot fail.
        <Hmac<Sha256> as Mac>::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!())
    }

    /// Mints a token for `claims`.
    pub fn sign(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let mut token = format!("{HEADER_B64}.{}", URL_SAFE_NO_PAD.encode(payload));
        let mut mac = self.mac();
        mac.update(token.as_bytes());
        let signature = mac.finalize().into_bytes();
        token.push('.');
        token.push_str(&URL_SAFE_NO_PAD.encode(signature));
        token
    }

    /// Verifies the signature, algorithm, issuer, audience and expiry (`now` in unix seconds).
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let header_bytes = URL_SAFE_NO_PAD
            .decode(header)
            .map_err(|_| TokenError::Malformed)?;
        let parsed: Header =
            serde_json::from_slice(&header_bytes).map_err(|_| TokenError::Malformed)?;
        if parsed.alg != "HS256" || parsed.typ.as_deref().is_some_and(|t| t != "JWT") {
            return Err(TokenError::WrongAlgorithm);
        }
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| TokenError::Malformed)?;
        let mut mac = self.mac();
        mac.update(header.as_bytes());
        mac.update(b".");
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature)
            .map_err(|_| TokenError::BadSignature)?;
        let payload = URL_SAFE_NO_PAD
            .decode(payload)
            .map_err(|_| TokenError::Malformed)?;
        let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::BadClaims)?;
        if claims.iss != ISSUER || claims.aud != AUDIENCE {
            return Err(TokenError::WrongAudience);
        }
        if claims.exp <= now {
            return Err(TokenError::Expired);
        }
        Ok(claims)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn claims(exp: i64) -> Claims {
        Claims {
            sub: "customer:7".into(),
            business_id: 1,
            roles: vec![],
            iat: 0,
            exp,
            jti: "j".into(),
            iss: ISSUER.into(),
            aud: AUDIENCE.into(),
        }
    }

    #[test]
    fn signed_tokens_verify_and_tampering_does_not() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let token = key.sign(&claims(100));
        assert_eq!(key.verify(&token, 50).unwrap(), claims(100));
        assert_eq!(key.verify(&token, 100), Err(TokenError::Expired));
        let other = TokenKey::new(b"another key of thirty-two bytes!".to_vec());
        assert_eq!(other.verify(&token, 50), Err(TokenError::BadSignature));
        // A payload swapped in under the old signature.
        let forged_payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(10_000)).unwrap());
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], forged_payload, parts[2]);
        assert_eq!(key.verify(&forged, 50), Err(TokenError::BadSignature));
    }

    #[test]
    fn alg_none_and_other_algorithms_are_refused() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(100)).unwrap());
        for header in [
            r#"{"alg":"none","typ":"JWT"}"#,
            r#"{"alg":"RS256"}"#,
            r#"{"alg":"HS512"}"#,
        ] {
            let token = format!("{}.{}.", URL_SAFE_NO_PAD.encode(header), payload);
            assert_eq!(
                key.verify(&token, 50),
                Err(TokenError::WrongAlgorithm),
                "{header}"
            );
        }
        assert_eq!(key.verify("abc", 0), Err(TokenError::Malformed));
        assert_eq!(key.verify("a.b.c.d", 0), Err(TokenError::Malformed));
    }

    #[test]
    fn wrong_audience_is_refused() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let mut c = claims(100);
        c.aud = "elsewhere".into();
        assert_eq!(
            key.verify(&key.sign(&c), 50),
            Err(TokenError::WrongAudience)
        );
    }
}
