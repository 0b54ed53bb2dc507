//! Request ids: one per request, in every error body and log line, and as a token's `jti`.

/// A random UUID v4 string (from the engine's per-thread generator: no syscall per request).
pub fn generate_request_id() -> String {
    let random = engine::runtime::clock::random_bytes();
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&random[..16]);
    engine::Uuid::from_random_bytes(bytes).to_string()
}
