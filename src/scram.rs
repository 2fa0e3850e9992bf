//! SCRAM-SHA-256 verifiers for tokens (RFC 5802, RFC 7677), so the Postgres door can
//! check a token by SCRAM while Quiver keeps only hashes of it.
//!
//! A verifier is derived once, when the secret is known in clear (a token being
//! created, the bootstrap token given at start), and stored beside the token's
//! SHA-256. At login the door checks the client's proof against the stored key and
//! signs its answer with the server key; neither key lets anyone log in. The exchange
//! itself (messages, nonces, state) is the door's job (`pg::scram`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use quiver_storage::ScramSecret;
use ring::{digest, hmac};

/// PBKDF2 iterations of a new verifier: RFC 7677's minimum and Postgres's default
/// (`scram_iterations`). Tokens are 256 random bits, so more would only slow clients.
pub const SCRAM_ITERATIONS: u32 = 4096;

/// Salt length of a new verifier, in bytes (Postgres uses 16).
const SALT_BYTES: usize = 16;

/// A verifier that does not decode: the stored record is damaged.
#[derive(Debug, thiserror::Error)]
#[error("the stored SCRAM verifier is not valid base64: {0}")]
pub struct CorruptVerifier(#[from] base64::DecodeError);

/// The keys of a stored verifier, decoded.
pub struct Keys {
    /// `H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// Signs the server's final message.
    pub server_key: Vec<u8>,
}

/// A new verifier for `secret`, with a fresh random salt.
pub fn derive(secret: &str) -> ScramSecret {
    let salt: [u8; SALT_BYTES] = rand::random();
    derive_with_salt(secret, &salt, SCRAM_ITERATIONS)
}

/// The verifier for `secret` with this salt: what a client computes from the same
/// three inputs. The password is normalised with SASLprep, as libpq and pgjdbc do.
fn derive_with_salt(secret: &str, salt: &[u8], iterations: u32) -> ScramSecret {
    let salted =
        pgwire::api::auth::sasl::scram::gen_salted_password(secret, salt, iterations as usize);
    let client_key = sign(&salted, b"Client Key");
    let stored_key = digest::digest(&digest::SHA256, &client_key);
    let server_key = sign(&salted, b"Server Key");
    ScramSecret {
        salt: STANDARD.encode(salt),
        iterations,
        stored_key: STANDARD.encode(stored_key.as_ref()),
        server_key: STANDARD.encode(server_key),
    }
}

/// Decodes a stored verifier's keys.
pub fn keys(secret: &ScramSecret) -> Result<Keys, CorruptVerifier> {
    Ok(Keys {
        stored_key: STANDARD.decode(&secret.stored_key)?,
        server_key: STANDARD.decode(&secret.server_key)?,
    })
}

/// `HMAC-SHA-256(key, message)`.
pub fn sign(key: &[u8], message: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), message)
        .as_ref()
        .to_vec()
}

/// Whether `proof` (the client's, for `auth_message`) comes from someone who knows the
/// secret: `H(proof XOR HMAC(StoredKey, AuthMessage)) == StoredKey`, compared in
/// constant time.
pub fn proof_is_valid(keys: &Keys, auth_message: &[u8], proof: &[u8]) -> bool {
    let signature = sign(&keys.stored_key, auth_message);
    if proof.len() != signature.len() {
        return false;
    }
    let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
    let candidate = digest::digest(&digest::SHA256, &client_key);
    constant_time_eq(candidate.as_ref(), &keys.stored_key)
}

/// Byte equality whose time does not depend on where the inputs differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 7677's example: user "user", password "pencil", its salt and nonces.
    #[test]
    fn the_rfc_7677_exchange_verifies() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let secret = derive_with_salt("pencil", &salt, 4096);
        let keys = keys(&secret).unwrap();
        let auth_message = "n=user,r=rOprNGfwEbeRWgbNEkqO,\
            r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
            s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,\
            c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
        let proof = STANDARD
            .decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
            .unwrap();
        assert!(proof_is_valid(&keys, auth_message.as_bytes(), &proof));
        let server_signature = sign(&keys.server_key, auth_message.as_bytes());
        assert_eq!(
            STANDARD.encode(server_signature),
            "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        let mut wrong = proof.clone();
        wrong[0] ^= 1;
        assert!(!proof_is_valid(&keys, auth_message.as_bytes(), &wrong));
        assert!(!proof_is_valid(&keys, auth_message.as_bytes(), &proof[1..]));
    }

    #[test]
    fn each_verifier_gets_its_own_salt() {
        let a = derive("token");
        let b = derive("token");
        assert_ne!(a.salt, b.salt);
        assert_ne!(a.stored_key, b.stored_key);
        assert_eq!(a.iterations, SCRAM_ITERATIONS);
    }
}
