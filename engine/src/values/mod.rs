//! Values: the vocabulary every other folder speaks, with no state of its own.
//!
//! Owns the ISO 4217 table ([`currency`]), amount rules and the exact `Decimal` serde adapter
//! ([`money`]), numeric ids with the shard formula and uuids ([`ids`]), uuids that open to their record
//! under a shard's key ([`sealed`]), fee rules and the exact fee
//! split ([`fee`]), EMVCo QR payloads and their CRC ([`emvco`]), and the stable rejection codes and
//! error types of the domain ([`error`]).
//!
//! May use: nothing else in this crate.

pub mod bytes;
pub mod currency;
pub mod emvco;
pub mod error;
pub mod fee;
pub mod ids;
pub mod money;
pub mod sealed;
