//! Bearer tokens: JWTs signed with HS256, and nothing else.
//!
//! The service both mints and verifies its tokens, so HS256 with a 32-byte random secret is the
//! right tool (notes/dependencies.md §4). Parsing, the algorithm pin and the signature check are
//! the `jsonwebtoken` crate's (issue 17: in place of a hand-written HS256). Per the notes'
//! leanest choice it is built with no crypto backend (`rust_crypto` would compile rsa, p256,
//! p384 and ed25519 for nothing): [`HS256_ONLY`] is a `CryptoProvider` on hmac + sha2 that
//! knows HS256 alone, so `alg: none`, `RS256` key confusion, HS512 and the like are refused
//! before any claim is read. The MAC is compared in constant time (`verify_slice`).
//!
//! Beyond the signature: issuer and audience are ours; `iat` is required and not in the future
//! beyond [`IAT_LEEWAY_SECS`]; `exp` is after now and at most [`LIFETIME_MAX_SECS`] after `iat`
//! (a token signed with `exp` in 2100 is refused even with a good signature). Expiry is checked
//! against the engine's clock, not the crate's. The wire format is unchanged: the header is
//! still exactly `{"alg":"HS256","typ":"JWT"}`, so tokens minted before verify the same.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{new_error, ErrorKind};
use jsonwebtoken::signature::{Error as SignatureError, Signer, Verifier};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// Issuer and audience written into and required of every token.
pub const ISSUER: &str = "walletd";
pub const AUDIENCE: &str = "walletd-api";
/// The lifetime of the tokens this service issues, and the longest it accepts (`exp - iat`).
pub const LIFETIME_MAX_SECS: i64 = 3600;
/// How far in the future an `iat` may be (clock skew between processes sharing a key).
pub const IAT_LEEWAY_SECS: i64 = 60;

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
    #[error("token was issued in the future or lives longer than tokens are issued for")]
    BadLifetime,
}

/// HMAC-SHA256 as jsonwebtoken's signer and verifier.
struct Hs256(Hmac<Sha256>);

impl Hs256 {
    fn new(key: &[u8]) -> jsonwebtoken::errors::Result<Self> {
        <Hmac<Sha256> as Mac>::new_from_slice(key)
            .map(Hs256)
            .map_err(|_| new_error(ErrorKind::InvalidKeyFormat))
    }
}

impl Signer<Vec<u8>> for Hs256 {
    fn try_sign(&self, message: &[u8]) -> Result<Vec<u8>, SignatureError> {
        let mut mac = self.0.clone();
        mac.update(message);
        Ok(mac.finalize().into_bytes().to_vec())
    }
}

impl Verifier<Vec<u8>> for Hs256 {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), SignatureError> {
        let mut mac = self.0.clone();
        mac.update(message);
        mac.verify_slice(signature)
            .map_err(SignatureError::from_source)
    }
}

impl JwtSigner for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

impl JwtVerifier for Hs256 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::HS256
    }
}

/// jsonwebtoken's crypto for this process: HS256 on hmac + sha2, every other algorithm refused.
pub static HS256_ONLY: CryptoProvider = CryptoProvider {
    signer_factory: |algorithm, key| match algorithm {
        Algorithm::HS256 => Ok(Box::new(Hs256::new(key.as_bytes())?)),
        _ => Err(new_error(ErrorKind::InvalidAlgorithm)),
    },
    verifier_factory: |algorithm, key| match algorithm {
        Algorithm::HS256 => Ok(Box::new(Hs256::new(key.try_get_as_bytes()?)?)),
        _ => Err(new_error(ErrorKind::InvalidAlgorithm)),
    },
    key_utils: KeyUtils::new_unimplemented(),
};

/// Signs and verifies tokens with one HS256 key.
#[derive(Clone)]
pub struct TokenKey {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

const HEADER_B64: &str = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"; // {"alg":"HS256","typ":"JWT"}

impl TokenKey {
    pub fn new(key: Vec<u8>) -> Self {
        // Once per process; a second call finds it installed (the same provider).
        let _ = HS256_ONLY.install_default();
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&[ISSUER]);
        validation.set_audience(&[AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "iat", "iss", "aud", "sub"]);
        // Expiry is checked below against the engine's clock (tests run it simulated).
        validation.validate_exp = false;
        validation.leeway = 0;
        TokenKey {
            encoding: EncodingKey::from_secret(&key),
            decoding: DecodingKey::from_secret(&key),
            validation,
        }
    }

    /// Mints a token for `claims`, with the same header bytes as ever.
    pub fn sign(&self, claims: &Claims) -> String {
        let payload = serde_json::to_vec(claims).unwrap_or_default();
        let mut token = format!("{HEADER_B64}.{}", URL_SAFE_NO_PAD.encode(payload));
        // HS256 with an HMAC key cannot fail to sign.
        let signature =
            jsonwebtoken::crypto::sign(token.as_bytes(), &self.encoding, Algorithm::HS256)
                .unwrap_or_default();
        token.push('.');
        token.push_str(&signature);
        token
    }

    /// Verifies the signature, algorithm, issuer, audience, `iat` and expiry (`now` in unix
    /// seconds).
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, TokenError> {
        if token.split('.').count() != 3 {
            return Err(TokenError::Malformed);
        }
        let header = jsonwebtoken::decode_header(token).map_err(|error| match error.kind() {
            ErrorKind::Json(_) | ErrorKind::Base64(_) | ErrorKind::Utf8(_) => {
                // An algorithm jsonwebtoken does not know (`none`) fails to parse as a header.
                TokenError::WrongAlgorithm
            }
            _ => TokenError::Malformed,
        })?;
        if header.alg != Algorithm::HS256 || header.typ.as_deref().is_some_and(|t| t != "JWT") {
            return Err(TokenError::WrongAlgorithm);
        }
        let claims = jsonwebtoken::decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|error| match error.kind() {
                ErrorKind::InvalidSignature => TokenError::BadSignature,
                ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
                    TokenError::WrongAlgorithm
                }
                ErrorKind::InvalidIssuer | ErrorKind::InvalidAudience => TokenError::WrongAudience,
                ErrorKind::InvalidToken | ErrorKind::Base64(_) => TokenError::Malformed,
                _ => TokenError::BadClaims,
            })?
            .claims;
        if claims.iss != ISSUER || claims.aud != AUDIENCE {
            return Err(TokenError::WrongAudience);
        }
        if claims.iat > now + IAT_LEEWAY_SECS || claims.exp - claims.iat > LIFETIME_MAX_SECS {
            return Err(TokenError::BadLifetime);
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
    fn long_lived_and_future_tokens_are_refused() {
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        assert_eq!(
            key.verify(&key.sign(&claims(4_102_444_800)), 50),
            Err(TokenError::BadLifetime)
        );
        let mut future = claims(5_000);
        future.iat = 4_000;
        assert_eq!(
            key.verify(&key.sign(&future), 50),
            Err(TokenError::BadLifetime)
        );
        future.iat = 100;
        future.exp = 1_000;
        assert_eq!(
            key.verify(&key.sign(&future), 50),
            Ok(future.clone()),
            "within the iat leeway"
        );
    }

    #[test]
    fn the_wire_format_is_unchanged() {
        // A token minted by the hand-written HS256 before jsonwebtoken: header, payload and
        // signature bytes are the same, and it still verifies.
        let key = TokenKey::new(b"0123456789abcdef0123456789abcdef".to_vec());
        let token = key.sign(&claims(100));
        let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims(100)).unwrap());
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(b"0123456789abcdef0123456789abcdef").unwrap();
        mac.update(format!("{HEADER_B64}.{payload}").as_bytes());
        let expected = format!(
            "{HEADER_B64}.{payload}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        );
        assert_eq!(token, expected);
        assert_eq!(key.verify(&expected, 50).unwrap(), claims(100));
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
