//! The SCRAM-SHA-256 exchange of the Postgres door (RFC 5802 as Postgres speaks it in
//! `AuthenticationSASL` messages), checked against a token's stored verifier.
//!
//! Three messages: the client's first (its nonce), the server's first (the nonce
//! extended, the verifier's salt and iterations), the client's final (its proof); the
//! server's final carries its own signature, which proves to the client that the
//! server holds the verifier. No channel binding (`SCRAM-SHA-256-PLUS`) is offered.
//! What is checked, and against which token, lives in [`crate::scram`] and
//! [`crate::auth`]; this file parses and builds the messages.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use crate::auth::ScramLogin;
use crate::scram::{keys, proof_is_valid, sign};

/// The one mechanism the door offers.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// Longest SCRAM message the door reads, in bytes (a real one is under 200).
const MESSAGE_BYTES_MAX: usize = 1_024;

/// Random bytes the server adds to the client's nonce.
const SERVER_NONCE_BYTES: usize = 18;

/// Where a connection's exchange stands; kept in its session extensions.
pub enum Exchange {
    /// `AuthenticationSASL` sent; the client's first message is next.
    Offered(ScramLogin),
    /// The server's first message sent; the client's final message is next.
    Challenged(Challenge),
}

/// What the server remembers between its first message and the client's final one.
pub struct Challenge {
    /// The token being checked.
    pub login: ScramLogin,
    /// The GS2 header the client sent (`n,,` or `y,,`), echoed in its final message.
    gs2_header: String,
    /// `n=...,r=<client nonce>`: the first part of the signed `AuthMessage`.
    client_first_bare: String,
    /// The server's first message: the second part.
    server_first: String,
    /// Client nonce followed by server nonce.
    nonce: String,
}

/// Why an exchange failed. Every case ends the connection with `28P01`.
#[derive(Debug, thiserror::Error)]
pub enum ScramError {
    /// The client picked a mechanism the door did not offer.
    #[error("SASL mechanism {0:?} is not offered; use SCRAM-SHA-256")]
    Mechanism(String),
    /// A message that does not follow RFC 5802.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for channel binding, which the door does not offer.
    #[error("SCRAM channel binding is not offered")]
    ChannelBinding,
    /// The proof does not come from the token.
    #[error("the proof does not match the token")]
    WrongProof,
    /// The stored verifier does not decode.
    #[error(transparent)]
    Verifier(#[from] crate::scram::CorruptVerifier),
}

/// Reads the client's first message (after `mechanism`) and answers the server's.
pub fn client_first(
    login: ScramLogin,
    mechanism: &str,
    data: &[u8],
) -> Result<(String, Challenge), ScramError> {
    if mechanism != MECHANISM {
        return Err(ScramError::Mechanism(mechanism.to_string()));
    }
    let message = text(data)?;
    // gs2-header = gs2-cbind-flag "," [authzid] ","
    let mut parts = message.splitn(3, ',');
    let flag = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    let authzid = parts.next().ok_or(ScramError::Malformed("no GS2 header"))?;
    let bare = parts
        .next()
        .ok_or(ScramError::Malformed("no client-first-message-bare"))?;
    match flag {
        "n" | "y" => {}
        f if f.starts_with("p=") => return Err(ScramError::ChannelBinding),
        _ => return Err(ScramError::Malformed("unknown GS2 channel-binding flag")),
    }
    if !authzid.is_empty() {
        return Err(ScramError::Malformed(
            "an authorization identity is not supported",
        ));
    }
    // client-first-message-bare = username "," nonce ["," extensions]; Postgres
    // clients leave the user name empty (it came in the startup message).
    let mut attributes = bare.split(',');
    let user = attributes.next().unwrap_or_default();
    if !user.starts_with("n=") {
        return Err(ScramError::Malformed("no user name attribute"));
    }
    let client_nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| (0x21..=0x7e).contains(&b)))
        .ok_or(ScramError::Malformed("no valid client nonce"))?;
    let server_nonce: [u8; SERVER_NONCE_BYTES] = rand::random();
    let nonce = format!("{client_nonce}{}", STANDARD.encode(server_nonce));
    let server_first = format!(
        "r={nonce},s={},i={}",
        login.secret.salt, login.secret.iterations
    );
    let challenge = Challenge {
        login,
        gs2_header: format!("{flag},,"),
        client_first_bare: bare.to_string(),
        server_first: server_first.clone(),
        nonce,
    };
    Ok((server_first, challenge))
}

/// Checks the client's final message; on success returns the server's final message.
pub fn client_final(challenge: &Challenge, data: &[u8]) -> Result<String, ScramError> {
    let message = text(data)?;
    // client-final-message = "c=" cbind "," "r=" nonce ["," extensions] "," "p=" proof
    let (without_proof, proof) = message
        .rsplit_once(",p=")
        .ok_or(ScramError::Malformed("no proof"))?;
    let mut attributes = without_proof.split(',');
    let binding = attributes
        .next()
        .and_then(|a| a.strip_prefix("c="))
        .ok_or(ScramError::Malformed("no channel-binding attribute"))?;
    if STANDARD.decode(binding).ok().as_deref() != Some(challenge.gs2_header.as_bytes()) {
        return Err(ScramError::Malformed(
            "the channel-binding attribute is not the GS2 header sent first",
        ));
    }
    let nonce = attributes
        .next()
        .and_then(|a| a.strip_prefix("r="))
        .ok_or(ScramError::Malformed("no nonce"))?;
    if nonce != challenge.nonce {
        return Err(ScramError::Malformed("the nonce is not the server's"));
    }
    let proof = STANDARD
        .decode(proof)
        .map_err(|_| ScramError::Malformed("the proof is not base64"))?;
    let auth_message = format!(
        "{},{},{without_proof}",
        challenge.client_first_bare, challenge.server_first
    );
    let keys = keys(&challenge.login.secret)?;
    if !proof_is_valid(&keys, auth_message.as_bytes(), &proof) {
        return Err(ScramError::WrongProof);
    }
    let signature = sign(&keys.server_key, auth_message.as_bytes());
    Ok(format!("v={}", STANDARD.encode(signature)))
}

fn text(data: &[u8]) -> Result<&str, ScramError> {
    if data.len() > MESSAGE_BYTES_MAX {
        return Err(ScramError::Malformed("message too long"));
    }
    std::str::from_utf8(data).map_err(|_| ScramError::Malformed("not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client's side of the exchange, as libpq computes it.
    fn client_proof(secret: &str, salt_b64: &str, iterations: u32, auth_message: &str) -> String {
        let salt = STANDARD.decode(salt_b64).unwrap();
        let salted =
            pgwire::api::auth::sasl::scram::gen_salted_password(secret, &salt, iterations as usize);
        let client_key = sign(&salted, b"Client Key");
        let stored_key = ring::digest::digest(&ring::digest::SHA256, &client_key);
        let signature = sign(stored_key.as_ref(), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(k, s)| k ^ s)
            .collect();
        STANDARD.encode(proof)
    }

    fn exchange(secret_used: &str) -> Result<String, ScramError> {
        let login = ScramLogin {
            secret: crate::scram::derive("the-token"),
            token_sha256: String::new(),
        };
        let (salt, iterations) = (login.secret.salt.clone(), login.secret.iterations);
        let (server_first, challenge) = client_first(login, MECHANISM, b"n,,n=,r=abc")?;
        let nonce = server_first
            .split(',')
            .next()
            .and_then(|r| r.strip_prefix("r="))
            .unwrap();
        assert!(nonce.starts_with("abc") && nonce.len() > 3);
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("n=,r=abc,{server_first},{without_proof}");
        let proof = client_proof(secret_used, &salt, iterations, &auth_message);
        client_final(&challenge, format!("{without_proof},p={proof}").as_bytes())
    }

    #[test]
    fn the_right_token_passes_and_a_wrong_one_does_not() {
        assert!(exchange("the-token").unwrap().starts_with("v="));
        assert!(matches!(
            exchange("another-token"),
            Err(ScramError::WrongProof)
        ));
    }

    #[test]
    fn channel_binding_and_other_mechanisms_are_refused() {
        let login = || ScramLogin {
            secret: crate::scram::derive("t"),
            token_sha256: String::new(),
        };
        assert!(matches!(
            client_first(
                login(),
                "SCRAM-SHA-256-PLUS",
                b"p=tls-server-end-point,,n=,r=a"
            ),
            Err(ScramError::Mechanism(_))
        ));
        assert!(matches!(
            client_first(login(), MECHANISM, b"p=tls-server-end-point,,n=,r=a"),
            Err(ScramError::ChannelBinding)
        ));
        assert!(matches!(
            client_first(login(), MECHANISM, b"n,,n=,"),
            Err(ScramError::Malformed(_))
        ));
    }
}
